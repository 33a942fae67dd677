// fold_constants.cpp: `fold-constants`: evaluate nodes whose inputs are all constant with the
// reference kernels (so folding and execution cannot disagree) and replace their outputs by
// initializers; Constant nodes become initializers the same way. A node is left alone when its
// results would inflate the model (outputs above `size-limit` bytes and larger than its inputs:
// ConstantOfShape, Tile, Expand of big shapes), when it is random, holds a subgraph, yields
// something other than tensors, or produces a graph output.
#include <random>

#include "exec/kernel.h"
#include "lib/error.h"
#include "lib/ops/op_schema.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

/// A constant as a kernel input: a view of its bytes, or an aligned copy of them.
RtTensor kernelInput(const Tensor& t) {
  RtTensor v = RtTensor::viewOf(t);
  if (!t.raw.empty() && !t.raw.isAligned(16)) v.setRaw(Buffer::copyOf(t.raw.bytes()));
  return v;
}

uint64_t tensorBytes(const TensorData& t) {
  uint64_t n = t.raw.size();
  for (const std::string& s : t.strings) n += s.size();
  return n;
}

class FoldConstantsPass : public Pass {
 public:
  explicit FoldConstantsPass(const PassOptions& o) : sizeLimit_(o.getInt("size-limit")) {}

  bool run(Graph& g, PassContext& ctx) override {
    registerRefKernels();
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) changed |= fold(*n, ctx);
    return changed;
  }

 private:
  /// Quantized weights stay quantized: DequantizeLinear of constant integer weights, and the
  /// Cast of small integer weights to a float type that starts a hand-written dequantization
  /// (Cast, Sub zero point, Mul scale), would turn an int8 model back into a float one, 4x larger,
  /// and lose the QDQ structure runtimes use to pick int8 kernels.
  static bool dequantizesWeights(const Node& n) {
    if (!n.isDomain("")) return false;
    if (n.opType == "DequantizeLinear") return true;
    if (n.opType != "Cast" || !n.input(0)) return false;
    const Tensor* t = n.input(0)->initializer();
    DType from = t ? t->dtype() : n.input(0)->type().isTensor() ? n.input(0)->type().dtype() : DType::Undefined;
    auto to = static_cast<DType>(n.attrInt("to", 0));
    bool smallInt = from == DType::Int8 || from == DType::UInt8 || from == DType::Int16 || from == DType::UInt16 ||
                    from == DType::Int4 || from == DType::UInt4;
    bool toFloat = to == DType::Float || to == DType::Float16 || to == DType::BFloat16 || to == DType::Double;
    return smallInt && toFloat && (!t || t->numElements().value_or(0) > 1);
  }

  bool fold(Node& n, PassContext& ctx) {
    if (isNondeterministic(n) || !n.subgraphs().empty() || n.outputs().empty()) return false;
    // A function body keeps its Constant nodes (FunctionProto holds no initializers).
    if (n.opType == "Constant" && isFunctionBody(*n.graph(), ctx.model())) return false;
    if (dequantizesWeights(n)) {
      ctx.count("kept-quantized");
      return false;
    }
    bool anyOutput = false;
    for (Value* o : n.outputs()) {
      if (!o) continue;
      if (o->isGraphOutput()) return false;
      anyOutput = true;
    }
    if (!anyOutput) return false;
    // Every input must be constant before any is read: an aligned copy of a big weight read
    // next to a computed value (Gather of an embedding table, MatMul(W, x)) is wasted work.
    for (Value* v : n.inputs()) {
      if (!v) continue;
      const Tensor* t = constantOf(v);
      if (!t) return false;
      if (t->expectedBytes() && t->raw.size() != *t->expectedBytes()) return false;  // check reports it
    }
    uint64_t inputBytes = 0;
    std::vector<RtValue> inputs;
    for (Value* v : n.inputs()) {
      if (!v) {
        inputs.emplace_back();
        continue;
      }
      const Tensor* t = constantOf(v);
      inputBytes += tensorBytes(*t);
      inputs.push_back(RtValue::ofTensor(kernelInput(*t)));
    }
    int64_t opset = ctx.model().opsetVersion(n.domain).value_or(0);
    const OpSchema* schema = findSchema(n.domain, n.opType, opset);
    if (!schema) return false;  // model-local function or unknown op
    const KernelDef* k = KernelRegistry::instance().find("ref", n.domain, n.opType, schema->sinceVersion);
    if (!k) return false;
    std::vector<const RtValue*> ptrs;
    for (const RtValue& r : inputs) ptrs.push_back(r.isEmpty() ? nullptr : &r);
    std::mt19937_64 rng(0);
    KernelContext kc(n, opset, std::move(ptrs), n.outputs().size(), nullptr, &rng, &ctx.model(), nullptr);
    try {
      k->fn(kc);
    } catch (const Error&) {
      ctx.count("failed-to-evaluate");  // an invalid node stays for `check` to report
      return false;
    }
    uint64_t outputBytes = 0;
    for (size_t i = 0; i < n.outputs().size(); ++i) {
      if (!n.output(i)) continue;
      const RtValue& r = kc.outputs()[i];
      if (!r.isTensor()) return false;
      outputBytes += tensorBytes(*r.tensor);
    }
    if (n.opType != "Constant" && outputBytes > inputBytes && outputBytes > static_cast<uint64_t>(sizeLimit_)) {
      ctx.count("skipped-too-large");
      return false;
    }
    if (!ctx.tryRewrite("fold " + n.opType + " '" + n.displayName() + "'")) return false;
    Graph& g = *n.graph();
    bool wasConstant = n.opType == "Constant";
    std::vector<std::pair<Value*, std::string>> renames;
    for (size_t i = 0; i < n.outputs().size(); ++i) {
      Value* out = n.output(i);
      if (!out) continue;
      // A Constant's tensor keeps what the IR holds beside the data (metadata, unknown fields).
      const Attribute* value = wasConstant ? n.attr("value") : nullptr;
      Tensor t = value && value->t ? *value->t : toIrTensor(*kc.outputs()[i].tensor);
      t.storage = Tensor::Storage::Raw;
      t.external.reset();
      t.docString.clear();
      Value* c = addInitializer(g, std::move(t), out->name());
      out->replaceAllUsesWith(c);
      renames.emplace_back(c, out->name());
    }
    g.removeNode(&n);
    // The initializers take the folded outputs' names, so later errors name what the user knows.
    for (auto& [c, name] : renames)
      if (!g.findLocal(name)) g.renameValue(c, name);
    ctx.count(wasConstant ? "constants-to-initializers" : "nodes-folded");
    return true;
  }

  int64_t sizeLimit_;
};

}  // namespace

std::unique_ptr<Pass> createFoldConstantsPass(const PassOptions& o) { return std::make_unique<FoldConstantsPass>(o); }

}  // namespace onnxtool
