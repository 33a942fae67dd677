// shape_inference.cpp: the inference engine: graph walk, declared-type merge, type-constraint
// checks, data propagation store, subgraphs and model-local functions, and the registry.
#include "lib/shape_inference.h"
#include "lib/input_shapes.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "lib/error.h"

namespace onnxtool {

namespace {

/// Thrown by InferContext::fail; the engine turns it into a finding.
struct InferFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Integer tensors up to this many elements take part in data propagation.
constexpr int64_t kMaxPropagatedElements = 1024;

bool isFullyKnown(const TypeInfo& t) {
  if (!t.isTensor() || !t.shape.hasRank) return false;
  return std::none_of(t.shape.dims.begin(), t.shape.dims.end(), [](const Dim& d) { return d.isUnknown(); });
}

/// What a declaration says that inference cannot replace: the kind and element type, shapes
/// dropped (also inside sequences and optionals), so nothing specialises on a claimed shape.
TypeInfo withoutShapes(const TypeInfo& t) {
  TypeInfo r = t;
  r.shape = Shape::unknownRank();
  if (r.inner) r.inner = std::make_shared<TypeInfo>(withoutShapes(*r.inner));
  return r;
}

/// Whether two tensor shapes contradict: different ranks, or a static dim of another size.
bool shapesContradict(const Shape& declared, const Shape& inferred) {
  if (!declared.hasRank || !inferred.hasRank) return false;
  if (declared.rank() != inferred.rank()) return true;
  for (size_t i = 0; i < declared.rank(); ++i) {
    const Dim& d = declared.dims[i];
    const Dim& x = inferred.dims[i];
    if (d.isValue() && x.isValue() && d.value != x.value) return true;
  }
  return false;
}

/// A dim in terms of symbols inference invented ("unk__3", "unk__3+1"): it proves no size.
bool isFreshSymbol(const Dim& d) { return d.isParam() && d.param.find("unk__") != std::string::npos; }

/// The declaration to write for a value whose computed type is `inferred`: the declared type,
/// refined where it says nothing or names a dim inference proves static (as the merge of declared
/// and inferred types always did), with every dim inference contradicts replaced by the inferred
/// one (the whole shape when the rank differs). A static declared dim where inference proves an
/// expression of the input symbols is wrong for other inputs: replaced too. A declared symbol
/// naming a graph input's dim, where inference computes something else, claims an equality
/// inference does not support: replaced, quietly. Sets `conflict` when the declaration was
/// contradicted. Element type and kind conflicts are left to the findings.
TypeInfo reconcile(const TypeInfo& declared, const TypeInfo& inferred, const std::set<std::string>& inputSymbols,
                   bool& conflict) {
  conflict = false;
  if (!declared.isTensor() || !inferred.isTensor()) return declared;
  if (declared.elemType && inferred.elemType && declared.elemType != inferred.elemType) return declared;
  TypeInfo w = declared;
  if (!w.elemType) w.elemType = inferred.elemType;
  if (!inferred.shape.hasRank) return w;
  if (!declared.shape.hasRank || declared.shape.rank() != inferred.shape.rank()) {
    conflict = declared.shape.hasRank;
    w.shape = inferred.shape;
    return w;
  }
  for (size_t i = 0; i < w.shape.rank(); ++i) {
    Dim& d = w.shape.dims[i];
    const Dim& x = inferred.shape.dims[i];
    if (x.isUnknown()) continue;
    bool replace = d.isUnknown();
    if (d.isValue() && x.isValue() && d.value != x.value) replace = conflict = true;
    if (d.isValue() && x.isParam() && !isFreshSymbol(x)) replace = conflict = true;
    if (d.isParam() && x.isValue()) replace = true;  // a size inference proves refines a name
    if (d.isParam() && inputSymbols.count(d.param) && !(x.isParam() && x.param == d.param)) replace = true;
    if (replace) {
      std::string denotation = d.denotation;
      d = x;
      d.denotation = denotation;
    }
  }
  return w;
}

std::string declStr(const TypeInfo& t) {
  if (!t.isTensor()) return t.str();
  return fmt::format("{}{}", t.elemType ? std::string(dtypeName(t.dtype())) : std::string("tensor"), t.shape.str());
}

}  // namespace

std::string DeclarationConflict::message() const {
  return fmt::format("{} '{}'{} is declared {} but computes {}; the written model declares {}", role, name, where,
                     declStr(declared), declStr(inferred), declStr(written));
}

// ------------------------------------------------------------------------------ registry

InferRegistry& InferRegistry::instance() {
  static InferRegistry r;
  return r;
}

void InferRegistry::add(const InferFnDef& def) { defs_.push_back(def); }

const InferFnDef* InferRegistry::find(std::string_view domain, std::string_view opType, int schemaVersion) const {
  const InferFnDef* best = nullptr;
  for (const auto& d : defs_)
    if (d.domain == domain && d.opType == opType && d.sinceVersion <= schemaVersion &&
        (!best || d.sinceVersion > best->sinceVersion))
      best = &d;
  return best;
}

void registerShapeInference() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& r = InferRegistry::instance();
    registerInferElementwise(r);
    registerInferTensor(r);
    registerInferNn(r);
    registerInferControlFlow(r);
    registerInferQuantize(r);
    registerInferSequence(r);
    registerInferAttentionRnn(r);
    registerInferStringsRandomSignal(r);
    registerInferMl(r);
    registerInferContrib(r);
  });
}

/// The inference functions by "domain\nop", built once: the registry is complete after
/// registerShapeInference() (an engine per inference of one node, as executors run it, would
/// otherwise spend most of its time rebuilding this).
const std::unordered_map<std::string, std::vector<const InferFnDef*>>& inferFnIndex() {
  registerShapeInference();
  static const auto index = [] {
    std::unordered_map<std::string, std::vector<const InferFnDef*>> m;
    for (const auto& d : InferRegistry::instance().all()) m[std::string(d.domain) + "\n" + std::string(d.opType)].push_back(&d);
    return m;
  }();
  return index;
}

// ------------------------------------------------------------------------------ engine

class InferEngine {
 public:
  InferEngine(Model& model, const InferOptions& options) : model_(model), options_(options), fnIndex_(inferFnIndex()) {
    for (const auto& f : model.functions) functionsByKey_[f->domain + "\n" + f->name] = f.get();
  }

  void run();
  void inferGraph(Graph& g);
  InferReport& report() { return report_; }

  // --- shared with InferContext
  std::unordered_map<const Value*, std::vector<SymDim>> data;
  std::unordered_map<std::string, SymExpr> exprByName;
  int freshCounter = 0;
  std::vector<TypeInfo>* pending = nullptr;  ///< outputs of the node being inferred
  /// The type each node output and subgraph input had before this run (its declaration, or the
  /// previous run's result), checked against inference at the end.
  std::unordered_map<const Value*, TypeInfo> declared;

  const std::vector<SymDim>* dataOf(const Value* v);
  const Tensor* constantOf(const Value* v) const;
  void finding(std::string msg, const Node* node = nullptr, std::string what = {}, std::string code = "inference");

 private:
  void inferNode(Node& n);
  void inferFunctionCall(Node& n, const Function& f);
  void checkConstraints(const Node& n, const OpSchema& s);
  void mergeInto(Value* v, TypeInfo inferred, const Node& n);
  void reconcileDeclarations();
  void applyInputDims(Graph& g);
  const InferFnDef* findFn(std::string_view domain, std::string_view op, int version) const;

  Model& model_;
  const InferOptions& options_;
  InferReport report_;
  /// Why inference skipped a node (no schema, no function), reported only when one of its
  /// outputs is then left without a full type.
  std::unordered_map<const Node*, std::string> giveUpReasons_;
  std::unordered_map<std::string, const Function*> functionsByKey_;
  const std::unordered_map<std::string, std::vector<const InferFnDef*>>& fnIndex_;
  const std::vector<OpsetImport>* imports_ = nullptr;
  const std::vector<const Attribute*>* callerAttrs_ = nullptr;
  std::unordered_set<const Function*> activeFunctions_;
  std::vector<std::tuple<std::string_view, std::string, const Value*>> boundScratch_;  ///< checkConstraints'
};

void InferEngine::finding(std::string msg, const Node* node, std::string what, std::string code) {
  if (options_.strict) throw Error(ErrorKind::InvalidInput, msg);
  report_.findings.push_back({node, what.empty() ? msg : std::move(what), std::move(code)});
  report_.errors.push_back(std::move(msg));
}

const InferFnDef* InferEngine::findFn(std::string_view domain, std::string_view op, int version) const {
  auto it = fnIndex_.find(std::string(domain) + "\n" + std::string(op));
  if (it == fnIndex_.end()) return nullptr;
  const InferFnDef* best = nullptr;
  for (const InferFnDef* d : it->second)
    if (d->sinceVersion <= version && (!best || d->sinceVersion > best->sinceVersion)) best = d;
  return best;
}

const Tensor* InferEngine::constantOf(const Value* v) const {
  if (!v) return nullptr;
  // An initializer that is also a graph input can be overridden at run time: not a constant.
  if (v->initializer() && !v->isGraphInput()) return v->initializer();
  if (Node* p = v->producer(); p && p->opType == "Constant" && p->isDomain("")) {
    const Attribute* a = p->attr("value");
    if (a && a->t) return a->t.get();
  }
  return nullptr;
}

const std::vector<SymDim>* InferEngine::dataOf(const Value* v) {
  if (!v) return nullptr;
  if (auto it = data.find(v); it != data.end()) return &it->second;
  const Tensor* t = constantOf(v);
  if (!t || !dtypeIsInteger(t->dtype()) || !t->numElements() || *t->numElements() > kMaxPropagatedElements ||
      dtypeBits(t->dtype()) < 8 || t->storage == Tensor::Storage::External)
    return nullptr;
  if (t->expectedBytes() && t->raw.size() != *t->expectedBytes()) return nullptr;
  std::vector<SymDim> d;
  for (int64_t x : t->toInt64s()) d.push_back(SymExpr(x));
  return &(data[v] = std::move(d));
}

void InferEngine::applyInputDims(Graph& g) {
  // One applier for every --shape (lib/input_shapes.h): checks names and ranks, renames symbols.
  (void)g;
  std::vector<InputShapeSpec> specs;
  for (const auto& [name, dims] : options_.inputDims) {
    InputShapeSpec s;
    s.name = name;
    s.dims = dims;
    s.text = name + "=";
    for (size_t i = 0; i < dims.size(); ++i) s.text += (i ? "," : "") + dims[i];
    specs.push_back(std::move(s));
  }
  applyInputShapes(model_, specs);
}

void InferEngine::run() {
  if (!model_.graph) return;
  applyInputDims(*model_.graph);
  imports_ = &model_.opsetImports;
  inferGraph(*model_.graph);
  reconcileDeclarations();
  model_.graph->forEachGraph([&](Graph& g) {
    for (const auto& n : g.nodes())
      for (Value* v : n->outputs()) {
        if (!v) continue;
        ++report_.valuesTotal;
        if (isFullyKnown(v->type())) ++report_.valuesFullyKnown;
        else if (report_.firstGiveUp.empty() && giveUpReasons_.count(n.get()))
          report_.firstGiveUp = giveUpReasons_.at(n.get());  // "no schema for FusedGemm ..."
        else if (report_.firstGiveUp.empty())
          report_.firstGiveUp = fmt::format("value '{}' of node '{}' ({}) has type {}", v->name(), n->displayName(),
                                            n->opType, v->type().str());
      }
  });
}

void InferEngine::inferGraph(Graph& g) {
  // Initializers not listed as inputs carry no declared type: their tensor gives it.
  for (Value* v : g.initializers())
    if (v->type().isNone()) v->setType(TypeInfo::tensor(v->initializer()->dtype(), Shape::of(v->initializer()->dims)));
  for (Value* v : g.sparseInitializers())
    if (v->type().isNone()) {
      TypeInfo t = TypeInfo::tensor(v->sparseInitializer()->values.dtype(), Shape::of(v->sparseInitializer()->dims));
      t.kind = TypeInfo::Kind::SparseTensor;
      v->setType(std::move(t));
    }
  auto order = g.topologicalOrder();
  std::vector<Node*> nodes;
  if (order) {
    nodes = std::move(*order);
  } else {
    finding(fmt::format("graph '{}': the nodes form a cycle; inferring in file order", g.name));
    for (const auto& n : g.nodes()) nodes.push_back(n.get());
  }
  for (Node* n : nodes) inferNode(*n);
}

void InferEngine::reconcileDeclarations() {
  std::set<std::string> inputSymbols;
  for (const ValueInfoEntry& e : model_.graph->inputs())
    if (e.value && e.value->type().isTensor())
      for (const Dim& d : e.value->type().shape.dims)
        if (d.isParam()) inputSymbols.insert(d.param);
  model_.graph->forEachGraph([&](Graph& g) {
    std::string where;
    if (const Node* p = g.parentNode())
      where = fmt::format(" in subgraph '{}' of node '{}' ({})", g.name, p->displayName(), p->opType);
    auto visit = [&](std::vector<ValueInfoEntry>& entries, const char* role) {
      for (ValueInfoEntry& e : entries) {
        if (!e.value || !e.hasType) continue;
        auto it = declared.find(e.value);
        if (it == declared.end()) continue;  // not typed by this run: a graph input, an initializer
        const TypeInfo& claim = e.typeOverride ? *e.typeOverride : it->second;
        const TypeInfo& computed = e.value->type();
        if (claim.isNone()) continue;
        bool conflict = false;
        TypeInfo written = reconcile(claim, computed, inputSymbols, conflict);
        if (conflict) report_.declarationConflicts.push_back({role, e.value->name(), where, claim, computed, written});
        if (written == computed) e.typeOverride.reset();
        else e.typeOverride = std::move(written);
      }
    };
    if (g.parentNode()) visit(g.inputs(), "subgraph input");
    visit(g.outputs(), "output");
    visit(g.valueInfos(), "value_info");
  });
}

namespace {

/// "tensor(float)" and the like per element type (constraintStr of a tensor type), built once:
/// checking every input of every node formatted one each time.
const std::string& tensorConstraintName(int32_t elemType) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int32_t e = 0; e < 64; ++e) v.push_back(TypeInfo::tensor(static_cast<DType>(e), Shape::unknownRank()).constraintStr());
    return v;
  }();
  return names[static_cast<size_t>(elemType)];
}

}  // namespace

void InferEngine::checkConstraints(const Node& n, const OpSchema& s) {
  // The type parameters bound so far: (parameter, type, the input that bound it); a handful.
  std::vector<std::tuple<std::string_view, std::string, const Value*>>& bound = boundScratch_;
  bound.clear();
  auto find = [&](std::string_view param) {
    return std::find_if(bound.begin(), bound.end(), [&](const auto& b) { return std::get<0>(b) == param; });
  };
  std::string formatted;
  for (size_t i = 0; i < n.inputs().size(); ++i) {
    const Value* v = n.inputs()[i];
    if (!v || v->type().isNone() || s.inputs.empty()) continue;
    if (v->type().isTensor() && v->type().elemType == 0) continue;
    size_t f = std::min(i, s.inputs.size() - 1);
    if (i >= s.inputs.size() && s.inputs.back().option != ParamOption::Variadic) continue;
    const FormalParam& p = s.inputs[f];
    const TypeInfo& t = v->type();
    const bool table = t.isTensor() && t.elemType > 0 && t.elemType < 64;
    if (!table) formatted = t.constraintStr();
    const std::string& actual = table ? tensorConstraintName(t.elemType) : formatted;
    const TypeConstraint* c = s.findConstraint(p.typeStr);
    if (!c) {
      if (actual != p.typeStr)
        throw InferFailure(fmt::format("input '{}' has type {}, expected {}", v->name(), actual, p.typeStr));
      continue;
    }
    if (std::find(c->allowedTypes.begin(), c->allowedTypes.end(), actual) == c->allowedTypes.end())
      throw InferFailure(fmt::format("input '{}' has type {}, not allowed for {}", v->name(), actual, p.typeStr));
    if (p.option == ParamOption::Variadic && !p.isHomogeneous) continue;
    auto it = find(p.typeStr);
    if (it == bound.end()) bound.emplace_back(p.typeStr, actual, v);
    else if (std::get<1>(*it) != actual)
      throw InferFailure(fmt::format("input '{}' has type {} but input '{}' bound {} to {}", v->name(), actual,
                                     std::get<2>(*it)->name(), p.typeStr, std::get<1>(*it)));
  }
  // Outputs whose type is a constraint bound by an input, or a concrete type, get their dtype now;
  // the op's function refines them.
  for (size_t i = 0; i < n.outputs().size() && !s.outputs.empty(); ++i) {
    const FormalParam& p = s.outputs[std::min(i, s.outputs.size() - 1)];
    TypeInfo t;
    if (auto it = find(p.typeStr); it != bound.end()) {
      t = std::get<2>(*it)->type();
      if (t.isTensor()) t.shape = Shape::unknownRank();
    } else if (p.typeStr.starts_with("tensor(")) {
      if (auto dt = dtypeFromName(p.typeStr)) t = TypeInfo::tensor(*dt, Shape::unknownRank());
    }
    if (!t.isNone() && t.isTensor()) (*pending)[i] = std::move(t);
  }
}

void InferEngine::mergeInto(Value* v, TypeInfo inferred, const Node& n) {
  // The value's type before this run is a claim (a declaration, or what an earlier run inferred):
  // kept aside for checking, never merged into what passes read. (`claim` is read only before
  // the value's type is set.)
  declared.try_emplace(v, v->type());
  const TypeInfo& claim = v->type();
  auto conflict = [&] {
    std::string what = fmt::format("output '{}' inferred as {} but declared as {}", v->name(), inferred.str(),
                                   claim.str());
    bool typeDiffers = claim.kind != inferred.kind ||
                       (claim.elemType && inferred.elemType && claim.elemType != inferred.elemType);
    finding(fmt::format("node '{}' ({}): {}", n.displayName(), n.opType, what), &n, what,
            typeDiffers ? "declared-type-mismatch" : "declared-shape-mismatch");
  };
  if (inferred.isNone()) {
    // Nothing inferred (no schema, no function): the declared kind and element type only.
    v->setType(withoutShapes(claim));
    return;
  }
  if (claim.isNone()) {
    v->setType(std::move(inferred));
    return;
  }
  if (claim.kind != inferred.kind) {
    conflict();
    v->setType(std::move(inferred));
    return;
  }
  if (!claim.isTensor()) return;  // sequences, optionals: no pass reads their shapes; keep the declaration
  if ((claim.elemType && inferred.elemType && claim.elemType != inferred.elemType) ||
      shapesContradict(claim.shape, inferred.shape))
    conflict();
  if (!inferred.elemType) inferred.elemType = claim.elemType;
  v->setType(std::move(inferred));
}

void InferEngine::inferNode(Node& n) {
  std::string domain(canonicalDomain(n.domain));
  std::vector<TypeInfo> outputs(n.outputs().size());
  pending = &outputs;
  int64_t opset = 0;
  for (const auto& imp : *imports_)
    if (canonicalDomain(imp.domain) == domain) opset = imp.version;
  const OpSchema* schema = opset ? findSchema(domain, n.opType, opset) : nullptr;
  auto giveUp = [&](std::string why) { giveUpReasons_.try_emplace(&n, std::move(why)); };
  if (!schema) {
    if (auto it = functionsByKey_.find(domain + "\n" + n.opType); it != functionsByKey_.end()) {
      inferFunctionCall(n, *it->second);
      return;
    }
    ++report_.opsWithoutInference[n.opType];
    giveUp(fmt::format("no schema for {} (domain '{}', opset {})", n.opType, domain, opset));
    pending = nullptr;
    for (Value* v : n.outputs())
      if (v) mergeInto(v, TypeInfo{}, n);
    return;
  }
  const InferFnDef* def = findFn(domain, n.opType, schema->sinceVersion);
  try {
    checkConstraints(n, *schema);
    if (def) {
      InferContext ctx(*this, n, schema, opset, callerAttrs_);
      def->fn(ctx);
    } else {
      ++report_.opsWithoutInference[n.opType];
      giveUp(fmt::format("no inference for {}", n.opType));
    }
  } catch (const InferFailure& e) {
    finding(fmt::format("node '{}' ({}): {}", n.displayName(), n.opType, e.what()), &n, e.what());
  }
  pending = nullptr;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (Value* v = n.outputs()[i]) mergeInto(v, std::move(outputs[i]), n);
}

void InferEngine::inferFunctionCall(Node& n, const Function& f) {
  if (!f.body || activeFunctions_.count(&f)) {
    ++report_.opsWithoutInference[n.opType];
    for (Value* v : n.outputs())
      if (v) mergeInto(v, TypeInfo{}, n);
    return;
  }
  Graph& body = *f.body;
  // The body is shared by every call: infer it for this call, read the outputs, then restore
  // the body's own types so that nothing call-specific is saved into the function.
  std::vector<std::pair<Value*, TypeInfo>> saved;
  for (const auto& v : body.values()) saved.emplace_back(v.get(), v->type());
  for (size_t i = 0; i < body.inputs().size(); ++i)
    if (Value* in = body.inputs()[i].value) {
      const Value* actual = n.input(i);
      in->setType(actual ? actual->type() : TypeInfo{});
      if (actual) {
        if (const auto* d = dataOf(actual)) data[in] = *d;
        else data.erase(in);
      }
    }
  std::vector<const Attribute*> attrs;
  for (const std::string& name : f.attributeNames) {
    const Attribute* a = n.attr(name);
    if (!a)
      for (const auto& d : f.attributeDefaults)
        if (d.name == name) a = &d;
    if (a) attrs.push_back(a);
  }
  for (const auto& d : f.attributeDefaults)
    if (!n.attr(d.name) && std::find(f.attributeNames.begin(), f.attributeNames.end(), d.name) == f.attributeNames.end())
      attrs.push_back(&d);
  auto* outerImports = imports_;
  auto* outerAttrs = callerAttrs_;
  imports_ = &f.opsetImports;
  callerAttrs_ = &attrs;
  activeFunctions_.insert(&f);
  inferGraph(body);
  activeFunctions_.erase(&f);
  imports_ = outerImports;
  callerAttrs_ = outerAttrs;
  std::vector<TypeInfo> outputs;
  for (size_t i = 0; i < body.outputs().size(); ++i) outputs.push_back(body.outputs()[i].value->type());
  std::vector<std::pair<Value*, std::vector<SymDim>>> outData;
  for (size_t i = 0; i < body.outputs().size() && i < n.outputs().size(); ++i)
    if (const auto* d = dataOf(body.outputs()[i].value)) outData.emplace_back(n.outputs()[i], *d);
  for (auto& [v, t] : saved) v->setType(std::move(t));
  for (auto& [v, d] : outData)
    if (v) data[v] = std::move(d);
  for (size_t i = 0; i < n.outputs().size() && i < outputs.size(); ++i)
    if (Value* v = n.outputs()[i]) mergeInto(v, std::move(outputs[i]), n);
}

// ------------------------------------------------------------------------------ context

InferContext::InferContext(InferEngine& engine, const Node& node, const OpSchema* schema, int64_t opset,
                           const std::vector<const Attribute*>* callerAttrs)
    : engine_(engine), node_(node), schema_(schema), opset_(opset), callerAttrs_(callerAttrs) {}

const TypeInfo& InferContext::inputType(size_t i) const {
  static const TypeInfo none;
  const Value* v = node_.input(i);
  return v ? v->type() : none;
}

DType InferContext::inputDType(size_t i) const {
  const TypeInfo& t = inputType(i);
  return t.isTensor() ? t.dtype() : DType::Undefined;
}

std::optional<SymShape> InferContext::inputShape(size_t i) const {
  const TypeInfo& t = inputType(i);
  if (!t.isTensor() || !t.shape.hasRank) return std::nullopt;
  SymShape s;
  for (const Dim& d : t.shape.dims) s.push_back(fromDim(d));
  return s;
}

std::optional<int64_t> InferContext::inputRank(size_t i) const {
  const TypeInfo& t = inputType(i);
  if (!t.isTensor() || !t.shape.hasRank) return std::nullopt;
  return static_cast<int64_t>(t.shape.rank());
}

const std::vector<SymDim>* InferContext::inputData(size_t i) const { return engine_.dataOf(node_.input(i)); }

std::optional<std::vector<int64_t>> InferContext::inputInts(size_t i) const {
  const auto* d = inputData(i);
  if (!d) return std::nullopt;
  std::vector<int64_t> r;
  for (const SymDim& x : *d) {
    if (!x || !x->isConstant()) return std::nullopt;
    r.push_back(*x->asConstant());
  }
  return r;
}

const Tensor* InferContext::inputConstant(size_t i) const { return engine_.constantOf(node_.input(i)); }

const Attribute* InferContext::attr(std::string_view name) const {
  const Attribute* a = node_.attr(name);
  if (!a || a->refAttrName.empty()) return a;
  if (!callerAttrs_) return nullptr;
  for (const Attribute* c : *callerAttrs_)
    if (c->name == a->refAttrName) return c;
  return nullptr;
}

int64_t InferContext::attrInt(std::string_view name, int64_t def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Int ? a->i : def;
}

float InferContext::attrFloat(std::string_view name, float def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Float ? a->f : def;
}

std::string InferContext::attrString(std::string_view name, const std::string& def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::String ? a->s : def;
}

std::optional<std::vector<int64_t>> InferContext::attrInts(std::string_view name) const {
  const Attribute* a = attr(name);
  if (!a || a->type != AttrType::Ints) return std::nullopt;
  return a->ints;
}

void InferContext::setOutput(size_t i, DType dtype, const SymShape& shape) {
  if (i >= numOutputs()) fail(fmt::format("output {} does not exist", i));
  Shape s;
  s.hasRank = true;
  for (const SymDim& d : shape) s.dims.push_back(toDim(d ? d : SymDim(freshDim())));
  setOutputType(i, TypeInfo::tensor(dtype, std::move(s)));
}

void InferContext::setOutputDType(size_t i, DType dtype) {
  if (dtype == DType::Undefined) return;  // nothing to say; keep what the constraints gave
  setOutputType(i, TypeInfo::tensor(dtype, Shape::unknownRank()));
}

void InferContext::setOutputType(size_t i, TypeInfo type) {
  if (i < engine_.pending->size()) (*engine_.pending)[i] = std::move(type);
}

void InferContext::setOutputData(size_t i, std::vector<SymDim> data) {
  if (const Value* v = node_.output(i); v && static_cast<int64_t>(data.size()) <= kMaxPropagatedElements)
    engine_.data[v] = std::move(data);
}

SymExpr InferContext::freshDim() { return SymExpr::symbol(fmt::format("unk__{}", engine_.freshCounter++)); }

Dim InferContext::toDim(const SymDim& d) const {
  if (!d) return Dim{};
  if (auto c = d->asConstant()) return Dim::ofValue(*c);
  std::string name = d->str();
  engine_.exprByName.try_emplace(name, *d);
  return Dim::ofParam(std::move(name));
}

SymDim InferContext::fromDim(const Dim& d) const {
  if (d.isValue()) return SymExpr(d.value);
  if (!d.isParam()) return std::nullopt;
  if (auto it = engine_.exprByName.find(d.param); it != engine_.exprByName.end()) return it->second;
  return SymExpr::symbol(d.param);
}

SymShape InferContext::broadcast(const SymShape& a, const SymShape& b) {
  size_t rank = std::max(a.size(), b.size());
  SymShape r(rank);
  for (size_t k = 0; k < rank; ++k) {
    const SymDim* x = k < rank - a.size() ? nullptr : &a[k - (rank - a.size())];
    const SymDim* y = k < rank - b.size() ? nullptr : &b[k - (rank - b.size())];
    if (!x) { r[k] = *y; continue; }
    if (!y) { r[k] = *x; continue; }
    auto one = [](const SymDim* d) { return *d && (*d)->asConstant() == 1; };
    if (one(x)) r[k] = *y;
    else if (one(y)) r[k] = *x;
    else if (*x && *y && **x == **y) r[k] = *x;
    else if (*x && *y && (*x)->isConstant() && (*y)->isConstant())
      fail(fmt::format("cannot broadcast dimension {} of {} against {}", k, (*x)->str(), (*y)->str()));
    else if (*x && (*x)->isConstant()) r[k] = *x;  // the other is symbolic: it must equal this size
    else if (*y && (*y)->isConstant()) r[k] = *y;
    else r[k] = std::nullopt;
  }
  return r;
}

int64_t InferContext::normalizeAxis(int64_t axis, int64_t rank, std::string_view what) {
  if (axis < -rank || axis >= rank) fail(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<TypeInfo> InferContext::inferSubgraph(Graph& body, const std::vector<TypeInfo>& inputTypes) {
  // A formal input's declared type is a claim: the type the node passes in is used (the declared
  // element type where it says none), the declaration kept aside for checking.
  for (size_t i = 0; i < body.inputs().size() && i < inputTypes.size(); ++i) {
    Value* in = body.inputs()[i].value;
    if (!in) continue;
    const TypeInfo& given = inputTypes[i];
    TypeInfo claim = engine_.declared.try_emplace(in, in->type()).first->second;
    if (given.isNone()) {
      in->setType(withoutShapes(claim));
    } else if (claim.isTensor() && given.isTensor()) {
      TypeInfo t = given;
      if (!t.elemType) t.elemType = claim.elemType;
      in->setType(std::move(t));
    } else if (claim.isNone() || claim.kind != given.kind) {
      in->setType(given);
    }  // sequences, optionals: keep the declaration
  }
  std::vector<TypeInfo>* outer = engine_.pending;
  engine_.inferGraph(body);
  engine_.pending = outer;
  std::vector<TypeInfo> out;
  for (const auto& e : body.outputs()) out.push_back(e.value ? e.value->type() : TypeInfo{});
  return out;
}

void InferContext::fail(const std::string& what) const { throw InferFailure(what); }

// ------------------------------------------------------------------------------ entry points

InferReport inferShapes(Model& model, const InferOptions& options) {
  registerShapeInference();
  InferEngine engine(model, options);
  engine.run();
  if (options.valueData) *options.valueData = std::move(engine.data);
  return std::move(engine.report());
}

std::vector<TypeInfo> inferNodeOutputTypes(const Model& model, const Node& n, std::span<const TypeInfo> inputTypes,
                                           std::span<const TensorData* const> inputValues) {
  Model m;
  m.irVersion = model.irVersion;
  m.opsetImports = model.opsetImports;
  m.graph = std::make_unique<Graph>();
  Graph& g = *m.graph;
  std::vector<Value*> ins;
  for (size_t i = 0; i < n.inputs().size(); ++i) {
    if (!n.input(i)) {
      ins.push_back(nullptr);
      continue;
    }
    std::string name = "in" + std::to_string(i);
    const TensorData* t = i < inputValues.size() ? inputValues[i] : nullptr;
    Value* v = nullptr;
    if (t) {
      Tensor c(*t);  // its bytes shared
      c.name = name;
      v = g.addInitializer(std::move(c));
    } else {
      v = g.createValue(name);
      if (i < inputTypes.size()) v->setType(inputTypes[i]);
      g.addInput(v);
    }
    ins.push_back(v);
  }
  std::vector<std::string> outs;
  for (size_t k = 0; k < n.outputs().size(); ++k) outs.push_back(n.output(k) ? "out" + std::to_string(k) : std::string());
  Node* c = g.addNode(n.opType, ins, outs, n.domain);
  c->name = n.name;
  c->overload = n.overload;
  c->attributes = n.attributes;
  inferShapes(m);
  std::vector<TypeInfo> r;
  for (Value* v : c->outputs()) r.push_back(v ? v->type() : TypeInfo{});
  return r;
}

size_t writeInferredValueInfos(Model& model) {
  if (!model.graph) return 0;
  size_t added = 0;
  model.graph->forEachGraph([&](Graph& g) {
    std::unordered_set<const Value*> listed;
    for (auto* list : {&g.inputs(), &g.outputs(), &g.valueInfos()})
      for (auto& e : *list) {
        listed.insert(e.value);
        if (!e.hasType && e.value && !e.value->type().isNone()) e.hasType = true;
      }
    for (const auto& n : g.nodes())
      for (Value* v : n->outputs())
        if (v && !v->type().isNone() && listed.insert(v).second) {
          ValueInfoEntry e;
          e.value = v;
          g.valueInfos().push_back(std::move(e));
          ++added;
        }
  });
  return added;
}

}  // namespace onnxtool
