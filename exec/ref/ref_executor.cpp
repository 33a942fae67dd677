// ref_executor.cpp: the reference executor: runs nodes in order with the reference kernels,
// subgraphs with outer-scope lookup, model-local functions by running their bodies, and frees
// each intermediate value after its last consumer ran.
#include <atomic>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "exec/ref/ref_executor.h"

#include "exec/executor.h"
#include "exec/kernel.h"
#include "lib/tensor_check.h"
#include "lib/error.h"
#include "lib/ops/op_schema.h"

namespace onnxtool {

namespace {

/// Values of one graph activation, with the enclosing activation for outer-scope lookup.
struct Env {
  std::unordered_map<const Value*, RtValue> values;
  const Env* parent = nullptr;
  /// For the outermost activation of a body run for another executor: its values.
  const RefNodeRunner::OuterLookup* outer = nullptr;
  const RtValue* find(const Value* v) const {
    for (const Env* e = this; e; e = e->parent) {
      auto it = e->values.find(v);
      if (it != e->values.end()) return &it->second;
      if (e->outer) return (*e->outer)(v);
    }
    return nullptr;
  }
};

/// Per-graph preparation: for each node, which values die after it.
struct GraphSchedule {
  std::vector<const Node*> nodes;
  std::vector<std::vector<const Value*>> releaseAfter;
};

/// Values of enclosing graphs that subgraph `g` (or a subgraph nested in it) reads: as node
/// inputs, and as graph outputs (a branch may yield an outer value directly).
void collectReads(const Graph& g, std::vector<const Value*>& out) {
  for (const auto& n : g.nodes()) {
    for (Value* v : n->inputs())
      if (v && v->graph() != &g) out.push_back(v);
    for (Graph* sg : n->subgraphs()) collectReads(*sg, out);
  }
  for (const auto& e : g.outputs())
    if (e.value && e.value->graph() != &g) out.push_back(e.value);
}

GraphSchedule schedule(const Graph& g) {
  GraphSchedule s;
  std::unordered_map<const Value*, size_t> lastUse;
  size_t i = 0;
  for (const auto& n : g.nodes()) {
    s.nodes.push_back(n.get());
    for (Value* v : n->inputs())
      if (v) lastUse[v] = i;
    std::vector<const Value*> outer;
    for (Graph* sg : n->subgraphs()) collectReads(*sg, outer);
    for (const Value* v : outer) lastUse[v] = i;
    ++i;
  }
  s.releaseAfter.resize(s.nodes.size());
  for (const auto& [v, idx] : lastUse) {
    if (v->graph() != &g || v->isGraphOutput() || v->initializer() || v->isGraphInput()) continue;
    s.releaseAfter[idx].push_back(v);
  }
  return s;
}


/// Kernels read elements through typed pointers, so tensor bytes must be aligned; bytes borrowed
/// from a model file sit at whatever offset the writer chose.
constexpr size_t kKernelAlignment = 16;

std::atomic<uint64_t> alignedCopyBytes{0};

RtValue initializerValue(const Value* v) {
  if (v->initializer()) {
    const Tensor* t = v->initializer();
    if (t->raw.empty() || t->raw.isAligned(kKernelAlignment)) return RtValue::viewOf(*t);  // bytes shared
    alignedCopyBytes += t->raw.size();
    RtTensor copy = RtTensor::viewOf(*t);
    copy.setRaw(Buffer::copyOf(t->raw.bytes()));  // heap allocations are 16-byte aligned
    t->raw.dropMappedPages();                      // the copy replaces them for this run
    return RtValue::ofTensor(std::move(copy));
  }
  // Sparse initializers run as their dense equivalent.
  const SparseTensor& s = *v->sparseInitializer();
  Tensor dense;
  dense.name = s.values.name;
  dense.dataType = s.values.dataType;
  dense.dims = s.dims;
  auto n = dense.numElements();
  auto bytes = dense.expectedBytes();
  int bits = dtypeBits(dense.dtype());
  if (!n || !bytes || bits < 8) fail(ErrorKind::Unsupported, "sparse initializer '{}': unsupported layout", dense.name);
  Buffer out = Buffer::zeros(static_cast<size_t>(*bytes));
  size_t esize = static_cast<size_t>(bits / 8);
  std::vector<int64_t> idx = s.indices.toInt64s();
  int64_t nnz = s.values.numElements().value_or(0);
  bool coordinate = s.indices.dims.size() == 2;
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t flat = 0;
    if (coordinate) {
      for (size_t d = 0; d < dense.dims.size(); ++d) flat = flat * dense.dims[d] + idx[static_cast<size_t>(k) * dense.dims.size() + d];
    } else {
      flat = idx[static_cast<size_t>(k)];
    }
    if (flat < 0 || flat >= *n) fail(ErrorKind::InvalidInput, "sparse initializer '{}': index out of range", dense.name);
    std::memcpy(out.mutableData() + static_cast<size_t>(flat) * esize, s.values.raw.data() + static_cast<size_t>(k) * esize, esize);
  }
  dense.setRaw(std::move(out));
  return RtValue::ofTensor(std::move(dense));
}

std::string describe(const RtValue& v) {
  switch (v.kind) {
    case RtValue::Kind::Tensor: {
      std::string dims;
      for (int64_t d : v.tensor->dims) dims += (dims.empty() ? "" : ",") + std::to_string(d);
      return fmt::format("{}[{}]", dtypeName(v.tensor->dtype()), dims);
    }
    case RtValue::Kind::Sequence: return "a sequence";
    case RtValue::Kind::Map: return "a map";
    case RtValue::Kind::Optional: return "an optional";
    default: return "nothing";
  }
}

/// Refuses a tensor from the model whose bytes do not hold what its dims and type declare:
/// kernels index tensors by their dims, so a short one would be read past its end.
void checkModelTensor(const Tensor& t, const std::string& where) {
  auto problems = tensorDataProblems(t);
  if (!problems.empty()) fail(ErrorKind::InvalidInput, "{}: {}", where, problems.front());
}
void checkModelSparse(const SparseTensor& s, const std::string& where) {
  auto problems = sparseTensorDataProblems(s);
  if (!problems.empty()) fail(ErrorKind::InvalidInput, "{}: {}", where, problems.front());
}

/// The tensors held by attributes (Constant values, ConstantOfShape's value, ...), checked as above.
void checkAttributeTensors(const std::vector<Attribute>& attrs, const std::string& where) {
  for (const Attribute& a : attrs) {
    std::string at = fmt::format("{}: attribute '{}'", where, a.name);
    if (a.t) checkModelTensor(*a.t, at);
    for (const auto& t : a.tensors)
      if (t) checkModelTensor(*t, at);
    if (a.sparseTensor) checkModelSparse(*a.sparseTensor, at);
    for (const auto& s : a.sparseTensors)
      if (s) checkModelSparse(*s, at);
  }
}

}  // namespace

RtValue runtimeInitializer(const Value* v) { return initializerValue(v); }

uint64_t initializerCopyBytes() { return alignedCopyBytes.load(); }

namespace {

/// The first tensor of `v` (itself, or inside a sequence, optional or map) that is not on the
/// host, or nullptr.
const RtTensor* offHostTensor(const RtValue& v) {
  for (const RtTensor* t : {v.tensor.get(), v.mapKeys.get(), v.mapValues.get()})
    if (t && !t->device.isCpu()) return t;
  for (const RtValue& e : v.elements)
    if (const RtTensor* t = offHostTensor(e)) return t;
  return nullptr;
}

}  // namespace

void checkGraphInput(const ValueInfoEntry& e, const RtValue& v) {
  const TypeInfo& t = e.type();
  const std::string& name = e.value->name();
  if (const RtTensor* off = offHostTensor(v))  // every executor of this build takes host inputs
    fail(ErrorKind::InvalidInput, "input '{}'{} is on {}; this executor takes host tensors", name,
         v.isTensor() ? "" : " holds a tensor that", off->device.str());
  if (v.isTensor()) {  // whatever the model declares, kernels index the data by its dims
    const TensorData& x = *v.tensor;
    auto n = x.numElements();
    auto bytes = x.expectedBytes();
    bool sized = x.dtype() == DType::String ? n && x.strings.size() == static_cast<uint64_t>(*n)
                                            : bytes && x.raw.size() == *bytes;
    if (!sized)
      fail(ErrorKind::InvalidInput, "input '{}': its data ({}) does not match its dims and type {}", name,
           x.dtype() == DType::String ? fmt::format("{} strings", x.strings.size()) : fmt::format("{} bytes", x.raw.size()),
           describe(v));
  }
  if (t.kind == TypeInfo::Kind::Tensor) {
    if (!v.isTensor()) fail(ErrorKind::InvalidInput, "input '{}': expected a tensor {}, got {}", name, t.str(), describe(v));
    if (v.tensor->dataType != t.elemType)
      fail(ErrorKind::InvalidInput, "input '{}': expected element type {}, got {}", name, dtypeName(t.dtype()),
           dtypeName(v.tensor->dtype()));
    if (t.shape.hasRank) {
      if (t.shape.rank() != v.tensor->dims.size())
        fail(ErrorKind::InvalidInput, "input '{}': expected shape {} (rank {}), got {}", name, t.shape.str(), t.shape.rank(),
             describe(v));
      for (size_t i = 0; i < t.shape.rank(); ++i)
        if (t.shape.dims[i].isValue() && t.shape.dims[i].value != v.tensor->dims[i])
          fail(ErrorKind::InvalidInput, "input '{}': expected shape {}, got {} (dimension {} differs)", name, t.shape.str(),
               describe(v), i);
    }
  } else if (t.kind == TypeInfo::Kind::Sequence && v.kind != RtValue::Kind::Sequence) {
    fail(ErrorKind::InvalidInput, "input '{}': expected {}, got {}", name, t.str(), describe(v));
  }
}

class RefNodeRunner::Impl {
 public:
  Impl(const Model& m, bool mainGraphInitializers) : model_(m), mainGraphInitializers_(mainGraphInitializers) {
    if (!m.graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", m.path);
    // Resolve every kernel now so that an unsupported op fails before running.
    resolveGraph(*m.graph, nullptr);
  }

  std::vector<RtValue> run(const std::map<std::string, RtValue>& inputs, std::mt19937_64& rng) const {
    const Graph& g = *model_.graph;
    Env env;
    for (Value* v : g.initializers()) env.values[v] = cachedInitializer(v);
    for (Value* v : g.sparseInitializers()) env.values[v] = cachedInitializer(v);
    for (const auto& [name, value] : inputs) {
      const ValueInfoEntry* entry = nullptr;
      for (const auto& e : g.inputs())
        if (e.value->name() == name) entry = &e;
      if (!entry) {
        std::string names;
        for (const auto& e : g.inputs())
          if (!e.value->initializer()) names += (names.empty() ? "" : ", ") + e.value->name();
        fail(ErrorKind::InvalidInput, "unknown input '{}', the model's inputs are: {}", name, names);
      }
      checkGraphInput(*entry, value);
      env.values[entry->value] = value;
    }
    for (const auto& e : g.inputs())
      if (!env.values.count(e.value))
        fail(ErrorKind::InvalidInput, "input '{}' is missing, expected {}", e.value->name(), e.type().str());
    return runGraph(g, env, nullptr, nullptr, rng);
  }

  std::vector<RtValue> runBody(const Graph& body, const std::vector<RtValue>& inputs, const OuterLookup& outer,
                               std::mt19937_64& rng) const {
    Env sub;
    sub.outer = &outer;
    bindBody(sub, body, inputs);
    return runGraph(body, sub, nullptr, nullptr, rng);
  }

  std::vector<RtValue> callNode(const Node& call, const std::vector<const RtValue*>& ins, std::mt19937_64& rng) const {
    const Function* fn = model_.findFunction(call.domain, call.opType, call.overload);
    if (!fn) fail(ErrorKind::Internal, "node '{}' ({}): not a function call", call.displayName(), call.opType);
    return callFunction(call, *fn, ins, nullptr, rng);
  }

  const RtValue& initializer(const Value* v) const { return cachedInitializer(v); }

 private:
  struct Prepared {
    GraphSchedule sched;
    std::vector<const KernelDef*> kernels;   // nullptr for function calls
    std::vector<const Function*> functions;  // the model-local function a node calls
    std::vector<int64_t> opsets;
  };

  int64_t opsetFor(const Node& n, const Function* within) const {
    std::string_view d = canonicalDomain(n.domain);
    if (within)
      for (const auto& o : within->opsetImports)
        if (canonicalDomain(o.domain) == d) return o.version;
    if (auto v = model_.opsetVersion(d)) return *v;
    if (d.empty()) return maxKnownOpset("");
    return 1;
  }

  void resolveGraph(const Graph& g, const Function* within) {
    if (prepared_.count(&g)) return;
    Prepared p;
    p.sched = schedule(g);
    for (Value* v : g.initializers()) checkModelTensor(*v->initializer(), fmt::format("initializer '{}'", v->name()));
    for (Value* v : g.sparseInitializers())
      checkModelSparse(*v->sparseInitializer(), fmt::format("sparse initializer '{}'", v->name()));
    // Made once here (aligned copies, densified sparse tensors), so runs only read them and
    // several threads may run at once.
    if (mainGraphInitializers_ || &g != model_.graph.get()) {
      for (Value* v : g.initializers()) initCache_.emplace(v, initializerValue(v));
      for (Value* v : g.sparseInitializers()) initCache_.emplace(v, initializerValue(v));
    }
    for (const Node* n : p.sched.nodes) {
      int64_t opset = opsetFor(*n, within);
      p.opsets.push_back(opset);
      checkAttributeTensors(n->attributes, fmt::format("node '{}' ({})", n->displayName(), n->opType));
      const Function* fn = model_.findFunction(n->domain, n->opType, n->overload);
      p.functions.push_back(fn);
      if (fn) {
        p.kernels.push_back(nullptr);
        checkAttributeTensors(fn->attributeDefaults, fmt::format("function '{}'", fn->name));
        resolveGraph(*fn->body, fn);
        continue;
      }
      const OpSchema* schema = findSchema(n->domain, n->opType, opset);
      if (!schema)
        fail(ErrorKind::Unsupported, "node '{}' ({}): op '{}' is not defined in opset {} of domain '{}'", n->displayName(),
             n->opType, n->opType, opset, n->domain.empty() ? "ai.onnx" : n->domain);
      const KernelDef* k = KernelRegistry::instance().find("ref", n->domain, n->opType, schema->sinceVersion);
      if (!k)
        fail(ErrorKind::Unsupported, "node '{}' ({}): the ref executor has no kernel for {} version {}", n->displayName(),
             n->opType, n->opType, schema->sinceVersion);
      p.kernels.push_back(k);
      for (Graph* sg : n->subgraphs()) resolveGraph(*sg, within);
    }
    prepared_.emplace(&g, std::move(p));
  }

  void bindBody(Env& sub, const Graph& body, const std::vector<RtValue>& inputs) const {
    const auto& formal = body.inputs();
    // Initializers first so that a formal input of the same name (IR < 4 style) overrides.
    for (Value* v : body.initializers()) sub.values[v] = cachedInitializer(v);
    for (Value* v : body.sparseInitializers()) sub.values[v] = cachedInitializer(v);
    for (size_t k = 0; k < formal.size() && k < inputs.size(); ++k) sub.values[formal[k].value] = inputs[k];
  }

  std::vector<RtValue> runGraph(const Graph& g, Env& env, const Function* within, const AttrScope* scope,
                                std::mt19937_64& rng) const {
    const Prepared& p = prepared_.at(&g);
    for (size_t i = 0; i < p.sched.nodes.size(); ++i) {
      const Node& n = *p.sched.nodes[i];
      std::vector<const RtValue*> ins;
      ins.reserve(n.inputs().size());
      for (Value* v : n.inputs()) {
        if (!v) {
          ins.push_back(nullptr);
          continue;
        }
        const RtValue* rv = env.find(v);
        if (!rv)
          fail(ErrorKind::InvalidInput, "node '{}' ({}): input '{}' has no value (undefined or not computed)", n.displayName(),
               n.opType, v->name());
        ins.push_back(rv);
      }
      std::vector<RtValue> outs;
      if (const Function* fn = p.functions[i]) {
        outs = callFunction(n, *fn, ins, scope, rng);
      } else {
        const Function* fnCtx = within;
        SubgraphRunner runner = [this, &env, fnCtx, scope, &rng](const Graph& body, const std::vector<RtValue>& inputs) {
          Env sub;
          sub.parent = &env;
          bindBody(sub, body, inputs);
          return runGraph(body, sub, fnCtx, scope, rng);
        };
        KernelContext ctx(n, p.opsets[i], std::move(ins), n.outputs().size(), runner, &rng, &model_, scope);
        p.kernels[i]->fn(ctx);
        outs = std::move(ctx.outputs());
      }
      for (size_t k = 0; k < n.outputs().size() && k < outs.size(); ++k)
        if (n.outputs()[k]) env.values[n.outputs()[k]] = std::move(outs[k]);
      for (const Value* v : p.sched.releaseAfter[i]) env.values.erase(v);
    }
    std::vector<RtValue> results;
    for (const auto& e : g.outputs()) {
      const RtValue* v = e.value ? env.find(e.value) : nullptr;
      if (!v) fail(ErrorKind::InvalidInput, "graph '{}': output '{}' was not computed", g.name, e.value ? e.value->name() : "");
      results.push_back(*v);
    }
    return results;
  }

  std::vector<RtValue> callFunction(const Node& call, const Function& fn, const std::vector<const RtValue*>& ins,
                                    const AttrScope* scope, std::mt19937_64& rng) const {
    Env env;  // function bodies see only their inputs
    const auto& formal = fn.body->inputs();
    // An omitted optional input binds as an empty value, so body nodes see it as absent
    // (KernelContext::hasInput) instead of failing to find it.
    for (size_t k = 0; k < formal.size(); ++k) env.values[formal[k].value] = k < ins.size() && ins[k] ? *ins[k] : RtValue{};
    AttrScope inner;
    inner.callerAttrs = &call.attributes;
    inner.defaults = &fn.attributeDefaults;
    inner.parent = scope;
    return runGraph(*fn.body, env, &fn, &inner, rng);
  }

  /// Initializer values, made once per plan at resolveGraph (aligned copies and densified
  /// sparse tensors are not redone on every run or loop iteration).
  const RtValue& cachedInitializer(const Value* v) const { return initCache_.at(v); }

  const Model& model_;
  bool mainGraphInitializers_;
  std::unordered_map<const Value*, RtValue> initCache_;
  std::unordered_map<const Graph*, Prepared> prepared_;
};

RefNodeRunner::RefNodeRunner(const Model& model, bool mainGraphInitializers) {
  registerRefKernels();
  impl_ = std::make_unique<Impl>(model, mainGraphInitializers);
}
RefNodeRunner::~RefNodeRunner() = default;

std::vector<RtValue> RefNodeRunner::runSubgraph(const Graph& body, const std::vector<RtValue>& inputs,
                                                const OuterLookup& outer, std::mt19937_64& rng) const {
  return impl_->runBody(body, inputs, outer, rng);
}

std::vector<RtValue> RefNodeRunner::callFunction(const Node& call, const std::vector<const RtValue*>& inputs,
                                                 std::mt19937_64& rng) const {
  return impl_->callNode(call, inputs, rng);
}

const RtValue& RefNodeRunner::initializer(const Value* v) const { return impl_->initializer(v); }

namespace {

class RefPlan : public Plan {
 public:
  RefPlan(const Model& m, const PrepareOptions& o) : impl_(m, true) {
    if (o.seed) rng_.seed(*o.seed);
    else rng_.seed(std::random_device{}());
  }
  std::vector<RtValue> run(const std::map<std::string, RtValue>& inputs) override {
    std::lock_guard lock(mutex_);  // one generator: runs of one ref plan take turns
    return impl_.run(inputs, rng_);
  }

 private:
  RefNodeRunner::Impl impl_;
  std::mt19937_64 rng_;
  std::mutex mutex_;
};

class RefExecutor : public Executor {
 public:
  std::string name() const override { return "ref"; }
  std::unique_ptr<Plan> prepare(const Model& model, const PrepareOptions& options) override {
    registerRefKernels();
    return std::make_unique<RefPlan>(model, options);
  }
};

}  // namespace

std::unique_ptr<Executor> makeRefExecutor() { return std::make_unique<RefExecutor>(); }

}  // namespace onnxtool
