// float16.cpp: float32 -> float16/bfloat16 conversion (see float16.h).
//
// How: every float32 output of a converted node becomes a narrow value, followed by a Cast back
// to float32 that keeps the original name (so graph outputs, subgraph bodies and kept nodes that
// read it by name still see float32); every converted reader takes the narrow twin of its input
// (the producer's narrow output, a converted initializer or Constant, or a new Cast). Casts that
// end up unread are removed and the narrow value takes back the original name.
#include "quant/float16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "lib/error.h"
#include "lib/ops/op_schema.h"
#include "lib/shape_inference.h"
#include "lib/tensor.h"

namespace onnxtool {

namespace {

DType dtypeOf(const Value* v) { return v && v->type().isTensor() ? v->type().dtype() : DType::Undefined; }

TypeInfo withDtype(const TypeInfo& t, DType d) {
  if (t.isTensor()) {
    TypeInfo r = t;
    r.elemType = static_cast<int32_t>(d);
    return r;
  }
  return TypeInfo::tensor(d, Shape{});
}

const FormalParam* formalFor(std::span<const FormalParam> ps, size_t i) {
  if (i < ps.size()) return &ps[i];
  if (!ps.empty() && ps.back().option == ParamOption::Variadic) return &ps.back();
  return nullptr;
}

/// A tensor of at most 64 elements by its inferred shape (a scalar, a scales vector).
bool isSmall(const Value* v) {
  const TypeInfo& t = v->type();
  if (!t.isTensor() || !t.shape.hasRank) return false;
  int64_t n = 1;
  for (const Dim& d : t.shape.dims) {
    if (!d.isValue() || d.value > 64) return false;
    n *= d.value;
  }
  return n <= 64;
}

bool isConstant(const Value* v) {
  if (!v) return true;
  if (v->initializer() && !v->isGraphInput()) return true;
  return v->producer() && v->producer()->opType == "Constant" && v->producer()->isDomain("");
}

/// Ops whose float output type comes from an attribute or that must compute in float32.
bool keptByOp(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "Cast", "ConstantOfShape", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
      "Multinomial", "Bernoulli", "Range", "Constant", "BitCast",
      // onnx's function body of MeanVarianceNormalization adds a float32 constant: invalid in float16
      "MeanVarianceNormalization"};
  return ops.count(n.opType) > 0;
}

/// The narrow encoding of one float, with the clamping counted.
struct Narrower {
  DType target;
  Float16Report& r;
  uint16_t operator()(float x) {
    if (target == DType::Float16) {
      constexpr float kMax = 65504.0f, kMinSub = 5.9604645e-08f;
      if (std::isfinite(x) && std::fabs(x) > kMax) {
        r.clamped++;
        r.largestClamped = std::max(r.largestClamped, std::fabs(x));
        x = std::copysign(kMax, x);
      } else if (x != 0 && std::fabs(x) < kMinSub / 2) {
        r.flushedToZero++;
      }
      return floatToHalf(x);
    }
    constexpr float kMax = 3.38953139e38f;  // the largest finite bfloat16
    if (std::isfinite(x) && std::fabs(x) > kMax) {
      r.clamped++;
      r.largestClamped = std::max(r.largestClamped, std::fabs(x));
      x = std::copysign(kMax, x);
    }
    return floatToBfloat16(x);
  }
};

Tensor narrowTensor(const TensorData& t, Narrower& narrow) {
  size_t n = t.raw.size() / 4;
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, t.raw.data() + 4 * i, 4);
    uint16_t h = narrow(f);
    out[2 * i] = static_cast<char>(h & 0xff);
    out[2 * i + 1] = static_cast<char>(h >> 8);
  }
  Tensor r;
  r.dataType = static_cast<int32_t>(narrow.target);
  r.dims = t.dims;
  r.setRaw(Buffer::fromString(std::move(out)));
  return r;
}

bool denseFloat(const Tensor* t) {
  // External data is bound at load: the bytes are there; the narrow copy is written anew.
  return t && t->dtype() == DType::Float && t->raw.size() == t->expectedBytes().value_or(UINT64_MAX);
}

class Converter {
 public:
  /// Converts graph g of model m: the main graph, or (body) an If/Loop/Scan body, whose inputs
  /// and outputs stay float32 as its node's interface does (Casts inside at the borders; values
  /// of enclosing graphs it reads are cast inside it).
  Converter(Model& m, Graph& g, const Float16Options& o, Float16Report& r, bool body = false)
      : m_(m), g_(g), o_(o), r_(r), narrow_{o.target, r}, body_(body) {}

  void run() {
    std::vector<Node*> order;
    if (auto t = g_.topologicalOrder()) order = *t;
    else fail(ErrorKind::InvalidInput, "the graph has a cycle");
    markShapeComputation(order);
    const bool keepIo = o_.keepIoTypes || body_;
    if (!keepIo) narrowInputs(order.empty() ? nullptr : order.front());
    for (size_t k = 0; k < order.size(); ++k) {
      convertNode(order[k], k + 1 < order.size() ? order[k + 1] : nullptr);
      for (Graph* sg : order[k]->subgraphs())
        if (computes(*sg)) Converter(m_, *sg, o_, r_, true).run();
    }
    if (!keepIo) narrowOutputs();
    cleanup();
    g_.sortTopologically();
    // Declared types keep their shapes and take the new element types.
    for (auto* entries : {&g_.inputs(), &g_.outputs(), &g_.valueInfos()})
      for (auto& e : *entries)
        if (e.typeOverride && e.typeOverride->isTensor() && e.value && e.value->type().isTensor())
          e.typeOverride->elemType = e.value->type().elemType;
    for (Node* c : casts_)
      if (alive_.count(c)) r_.castsInserted++;
  }

 private:
  /// Whether body g computes on floats (beyond moving data, which Casts at its float32 borders
  /// would only add to), in itself or a nested body.
  static bool computes(const Graph& g) {
    static const std::unordered_set<std::string> moves = {
        "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Concat", "Split", "Slice", "Gather",
        "GatherElements", "GatherND", "Expand", "Tile", "Shape", "Size", "Constant", "Cast", "CastLike", "If", "Loop", "Scan"};
    for (const auto& n : g.nodes()) {
      if (!n->isDomain("") || !moves.count(n->opType)) return true;
      for (Graph* sg : n->subgraphs())
        if (computes(*sg)) return true;
    }
    return false;
  }

  const char* suffix() const { return o_.target == DType::Float16 ? "_fp16" : "_bf16"; }
  std::string_view narrowTypeStr() const { return o_.target == DType::Float16 ? "tensor(float16)" : "tensor(bfloat16)"; }

  /// Values computed from Shape/Size and constants only, and the float inputs of Range and of
  /// Resize/Upsample's scales/roi with everything computing them: the nodes producing them stay
  /// float32 (float16 holds integers exactly only up to 2048).
  void markShapeComputation(const std::vector<Node*>& order) {
    std::unordered_set<const Value*> shapeLike;
    for (Node* n : order) {
      if ((n->opType == "Shape" || n->opType == "Size") && n->isDomain("")) {
        for (Value* v : n->outputs()) shapeLike.insert(v);
        continue;
      }
      bool any = false, all = true;
      for (Value* v : n->inputs()) {
        if (!v) continue;
        if (shapeLike.count(v)) any = true;
        else if (!isConstant(v)) all = false;
      }
      if (any && all) {
        for (Value* v : n->outputs()) shapeLike.insert(v);
        keepWhy_.emplace(n, "computes shapes");
      }
    }
    std::vector<Value*> stack;
    for (Node* n : order) {
      if (!n->isDomain("")) continue;
      if (n->opType == "Range") stack.insert(stack.end(), n->inputs().begin(), n->inputs().end());
      if (n->opType == "Resize" || n->opType == "Upsample")
        for (size_t i = 1; i < n->inputs().size(); ++i) stack.push_back(n->input(i));
    }
    while (!stack.empty()) {
      Value* v = stack.back();
      stack.pop_back();
      // Only through small values (scalars, scale vectors): a limit taken from a large
      // activation (Range(0, ReduceMax(x), 1)) keeps its reduction float32, not the network.
      if (!v || dtypeOf(v) != DType::Float || !v->producer() || v->graph() != &g_ || !isSmall(v)) continue;
      Node* p = v->producer();
      if (keepWhy_.count(p) && keepWhy_[p] == "computes Range or Resize scales") continue;
      keepWhy_[p] = "computes Range or Resize scales";
      stack.insert(stack.end(), p->inputs().begin(), p->inputs().end());
    }
  }

  /// The type parameters of n to narrow (empty: n stays float32), or the reason it stays.
  std::unordered_set<std::string_view> paramsToNarrow(Node* n, std::string& why) {
    std::unordered_set<std::string_view> out;
    if (std::find(o_.opBlockList.begin(), o_.opBlockList.end(), n->opType) != o_.opBlockList.end()) {
      why = "in --op-block-list";
      return out;
    }
    if (!n->subgraphs().empty()) {
      why = "holds subgraphs: its interface stays float32 (its bodies are converted inside)";
      return out;
    }
    if (auto it = keepWhy_.find(n); it != keepWhy_.end()) {
      why = it->second;
      return out;
    }
    if (keptByOp(*n)) {
      why = n->opType == "Range" ? "Range stays float32" : "its output type comes from an attribute";
      return out;
    }
    if ((n->opType == "ScatterElements" || n->opType == "ScatterND") && n->attrString("reduction", "none") != "none") {
      why = "a scatter reduction (accumulating in float16 loses precision; ONNX Runtime's CPU provider refuses it)";
      return out;
    }
    for (const auto* vs : {&n->inputs(), &n->outputs()})
      for (const Value* v : *vs)
        if (v && !v->type().isNone() && !v->type().isTensor()) {
          why = "reads or writes a sequence, map or optional";
          return out;
        }
    int64_t opset = m_.opsetVersion(n->domain).value_or(0);
    const OpSchema* s = findSchema(n->domain, n->opType, opset);
    if (!s) {
      why = "no schema (a function or an unknown op)";
      return out;
    }
    // ONNX Runtime expands an op it has no kernel for into the schema's function body, whose ops
    // may lack bfloat16 at the model's opset (Clip's Where before 16, SoftmaxCrossEntropyLoss's
    // NegativeLogLikelihoodLoss): it then rejects the model as invalid. Such ops stay float32.
    if (o_.target == DType::BFloat16 && (s->hasFunction || s->hasContextDependentFunction)) {
      why = "an op defined by a function body, which may not take bfloat16";
      return out;
    }
    // The dtype each type parameter is bound to, from the known types of the arguments.
    std::unordered_map<std::string_view, DType> bound;
    std::unordered_set<std::string_view> unsure;
    auto bind = [&](std::span<const FormalParam> ps, const std::vector<Value*>& vs) {
      for (size_t i = 0; i < vs.size(); ++i) {
        const FormalParam* f = formalFor(ps, i);
        if (!f || !vs[i] || !s->findConstraint(f->typeStr)) continue;
        if (f->option == ParamOption::Variadic && !f->isHomogeneous) unsure.insert(f->typeStr);
        if (!vs[i]->type().isTensor()) {
          if (!vs[i]->type().isNone()) unsure.insert(f->typeStr);
          continue;
        }
        auto [it, fresh] = bound.emplace(f->typeStr, dtypeOf(vs[i]));
        if (!fresh && it->second != dtypeOf(vs[i])) unsure.insert(f->typeStr);
      }
    };
    bind(s->inputs, n->inputs());
    bind(s->outputs, n->outputs());
    // A parameter no input carries (Cast's T2, BitCast's, the window functions' output type,
    // OptionalGetElement's V) is set by an attribute or another parameter: it stays.
    std::unordered_set<std::string_view> inInputs;
    for (size_t i = 0; i < n->inputs().size(); ++i)
      if (const FormalParam* f = formalFor(s->inputs, i); f && n->input(i)) inInputs.insert(f->typeStr);
    // Every float parameter narrows, or none does (parameters may be tied through the op's
    // semantics: OptionalGetElement's output has its input's element type); Resize/Upsample's
    // roi and scales alone stay float32 beside narrow data.
    bool anyFloat = false, allNarrow = true;
    for (const auto& [param, dt] : bound) {
      if (dt != DType::Float || unsure.count(param)) continue;
      anyFloat = true;
      if ((n->opType == "Resize" || n->opType == "Upsample") && n->isDomain("") && param != s->inputs[0].typeStr) continue;
      const TypeConstraint* c = s->findConstraint(param);
      if (inInputs.count(param) &&
          std::find(c->allowedTypes.begin(), c->allowedTypes.end(), narrowTypeStr()) != c->allowedTypes.end())
        out.insert(param);
      else
        allNarrow = false;
    }
    if (!allNarrow) out.clear();
    if (out.empty())
      why = anyFloat ? fmt::format("the schema ({} {}) has no {} for its float inputs", n->opType, s->sinceVersion,
                                   narrowTypeStr())
                     : "";
    return out;
  }

  Value* addCast(Value* in, DType to, const std::string& name, Node* before) {
    Node* c = g_.addNode("Cast", {in}, {g_.uniqueName(name)}, "", before);
    c->name = c->output(0)->name();
    c->setAttr(Attribute::ofInt("to", static_cast<int64_t>(to)));
    casts_.push_back(c);
    alive_.insert(c);
    return c->output(0);
  }

  /// The narrow twin of float32 value v, made on first request (before `before`).
  Value* narrowOf(Value* v, Node* before) {
    if (auto it = half_.find(v); it != half_.end()) return it->second;
    Value* h = nullptr;
    if (v->initializer() && !v->isGraphInput() && v->graph() == &g_ && denseFloat(v->initializer())) {
      Tensor t = narrowTensor(*v->initializer(), narrow_);
      t.name = g_.uniqueName(v->name() + suffix());
      r_.initializersConverted++;
      r_.floatWeightBytes += v->initializer()->raw.size();
      r_.halfWeightBytes += t.raw.size();
      h = g_.addInitializer(std::move(t));
      h->setType(withDtype(v->type(), o_.target));
      renamedInits_.emplace_back(v, h);
    } else if (Node* p = v->producer(); p && v->graph() == &g_ && p->opType == "Constant" && p->isDomain("") && p->attr("value") &&
                                           p->attr("value")->t && denseFloat(p->attr("value")->t.get())) {
      Tensor t = narrowTensor(*p->attr("value")->t, narrow_);
      Node* c = g_.addNode("Constant", {}, {g_.uniqueName(v->name() + suffix())}, "", p);
      c->name = c->output(0)->name();
      c->setAttr(Attribute::ofTensor("value", std::move(t)));
      h = c->output(0);
      h->setType(withDtype(v->type(), o_.target));
      constants_.push_back(p);
    } else {
      h = addCast(v, o_.target, v->name() + suffix(), before);
      h->setType(withDtype(v->type(), o_.target));
    }
    half_.emplace(v, h);
    return h;
  }

  /// Graph inputs become narrow; a Cast gives the float32 value to the graph's readers.
  void narrowInputs(Node* front) {
    for (auto& e : g_.inputs()) {
      Value* x = e.value;
      if (!x || dtypeOf(x) != DType::Float || x->initializer() || x->isGraphOutput()) continue;
      TypeInfo t32 = x->type();
      Value* w = addCast(x, DType::Float, x->name() + "_fp32", front);
      x->replaceAllUsesWith(w);
      w->producer()->setInput(0, x);
      w->setType(t32);
      x->setType(withDtype(t32, o_.target));
      half_.emplace(w, x);
    }
  }

  void convertNode(Node* n, Node* next) {
    std::string why;
    auto params = paramsToNarrow(n, why);
    if (params.empty()) {
      bool anyFloat = false;
      for (Value* v : n->inputs()) anyFloat |= dtypeOf(v) == DType::Float;
      for (Value* v : n->outputs()) anyFloat |= dtypeOf(v) == DType::Float;
      if (!why.empty() && anyFloat) {
        r_.nodesKeptFloat++;
        r_.kept.push_back(fmt::format("node '{}' ({}): {}", n->displayName(), n->opType, why));
      }
      return;
    }
    int64_t opset = m_.opsetVersion(n->domain).value_or(0);
    const OpSchema* s = findSchema(n->domain, n->opType, opset);
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      const FormalParam* f = formalFor(s->inputs, i);
      Value* v = n->input(i);
      if (!f || !v || !params.count(f->typeStr) || dtypeOf(v) == o_.target) continue;
      n->setInput(i, narrowOf(v, n));
    }
    for (size_t j = 0; j < n->outputs().size(); ++j) {
      const FormalParam* f = formalFor(s->outputs, j);
      Value* v = n->output(j);
      if (!f || !v || !params.count(f->typeStr)) continue;
      std::string name = v->name();
      TypeInfo t32 = withDtype(v->type(), DType::Float);
      Value* w = addCast(v, DType::Float, name + "_fp32", next);
      v->replaceAllUsesWith(w);
      w->producer()->setInput(0, v);
      g_.renameValue(v, g_.uniqueName(name + suffix()));
      g_.renameValue(w, name);
      w->producer()->name = name + "_to_fp32";
      backCasts_.insert(w->producer());
      w->setType(t32);
      v->setType(withDtype(t32, o_.target));
      half_.emplace(w, v);
    }
    r_.nodesConverted++;
  }

  /// Graph outputs become narrow, under their names.
  void narrowOutputs() {
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      Value* y = g_.outputs()[i].value;
      if (!y || dtypeOf(y) != DType::Float || y->isGraphInput() || y->graph() != &g_) continue;
      Value* s = narrowOf(y, nullptr);
      if (s->isGraphInput()) continue;
      std::string name = y->name();
      for (size_t k = 0; k < g_.outputs().size(); ++k)
        if (g_.outputs()[k].value == y) g_.setOutput(k, s);
      g_.renameValue(y, g_.uniqueName(name + "_fp32"));
      g_.renameValue(s, name);
    }
  }

  void cleanup() {
    // Unread Casts go (latest first: a Cast may feed another); a narrow value whose float32 Cast
    // went takes back the original name.
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = casts_.rbegin(); it != casts_.rend(); ++it) {
        Node* c = *it;
        if (!alive_.count(c)) continue;
        Value* out = c->output(0);
        if (out->hasUses() || out->isGraphOutput()) continue;
        Value* in = c->input(0);
        std::string name = out->name();
        bool restore = backCasts_.count(c) > 0;
        g_.removeNode(c);
        alive_.erase(c);
        changed = true;
        if (restore && in->name().ends_with(suffix()) && !g_.findLocal(name)) g_.renameValue(in, name);
      }
    }
    for (Node* p : constants_)
      if (!p->output(0)->hasUses() && !p->output(0)->isGraphOutput()) g_.removeNode(p);
    for (auto& [v, h] : renamedInits_) {
      if (v->hasUses() || v->isGraphOutput() || v->isGraphInput()) continue;
      std::string name = v->name();
      g_.removeInitializer(v);
      if (h->name().ends_with(suffix())) g_.renameValue(h, name);  // not when it became a graph output
    }
  }

  Model& m_;
  Graph& g_;
  const Float16Options& o_;
  Float16Report& r_;
  Narrower narrow_;
  std::unordered_map<const Node*, std::string> keepWhy_;
  std::unordered_map<Value*, Value*> half_;  // float32 value -> narrow twin
  std::vector<Node*> casts_;
  std::unordered_set<Node*> alive_;
  std::unordered_set<Node*> backCasts_;  // the Casts after converted nodes' outputs
  std::vector<Node*> constants_;
  std::vector<std::pair<Value*, Value*>> renamedInits_;
  bool body_ = false;
};

}  // namespace

Float16Report convertToFloat16(Model& model, const Float16Options& options) {
  Float16Report report;
  if (!model.graph) return report;
  if (options.target != DType::Float16 && options.target != DType::BFloat16)
    fail(ErrorKind::InvalidInput, "float16 conversion: the target must be float16 or bfloat16");
  if (!model.opsetVersion("")) return report;  // no ai.onnx: no Cast to write, and no op that takes float16
  int64_t opset = *model.opsetVersion("");
  if (opset < 6) fail(ErrorKind::Unsupported, "float16 conversion needs opset 6 or newer; the model has {} (onnxtool convert --opset 13 moves it)", opset);
  if (options.target == DType::BFloat16 && opset < 13)
    fail(ErrorKind::Unsupported, "bfloat16 needs opset 13 or newer; the model has {} (onnxtool convert --opset 13 moves it)", opset);
  inferShapes(model);
  Converter(model, *model.graph, options, report).run();
  return report;
}

}  // namespace onnxtool
