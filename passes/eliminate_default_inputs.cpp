// eliminate_default_inputs.cpp: `eliminate-default-inputs`: optional inputs that hold exactly the
// value the op assumes when they are omitted are omitted: RNN/GRU/LSTM initial states of zeros
// (exporters build them with Shape/Gather/Concat/ConstantOfShape chains, which then die), and
// Pad's constant_value of 0. The computation that produced them is left to eliminate-dead.
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

/// True when v is all zeros: a constant, or ConstantOfShape whose value is 0 (or absent).
bool isZeros(const Value* v) {
  if (!v) return false;
  if (auto d = constantAsDoubles(v)) {
    for (double x : *d)
      if (x != 0.0) return false;
    return true;
  }
  Node* p = producerOf(v, "ConstantOfShape");
  if (!p) return false;
  const Attribute* a = p->attr("value");
  if (!a) return true;  // the default value is a float 0
  if (a->type != AttrType::Tensor || !a->t || a->t->numElements() != 1) return false;
  const Tensor& t = *a->t;
  auto bytes = t.expectedBytes();
  if (!bytes || t.raw.size() != *bytes) return false;
  return t.elementAsDouble(0) == 0.0;
}

class EliminateDefaultInputsPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    for (const auto& np : g.nodes()) {
      Node* n = np.get();
      if (!n->isDomain("")) continue;
      std::vector<size_t> defaults;
      if (n->opType == "LSTM") defaults = {5, 6};
      else if (n->opType == "GRU" || n->opType == "RNN") defaults = {5};
      else if (n->opType == "Pad" && ctx.opset("") >= 11 && n->attrString("mode", "constant") == "constant") defaults = {2};
      for (size_t i : defaults) {
        if (!isZeros(n->input(i))) continue;
        if (!ctx.tryRewrite("omit the all-zero input " + std::to_string(i) + " of " + n->opType + " '" + n->displayName() + "'"))
          return changed;
        n->setInput(i, nullptr);
        changed = true;
      }
      // Trailing omitted inputs are dropped, as exporters write them.
      size_t end = n->inputs().size();
      while (end > 0 && !n->input(end - 1)) --end;
      if (end < n->inputs().size()) n->truncateInputs(end);
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateDefaultInputsPass(const PassOptions&) {
  return std::make_unique<EliminateDefaultInputsPass>();
}

}  // namespace onnxtool
