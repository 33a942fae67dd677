// fuse_conv_mul.cpp: `fuse-conv-mul`: Conv or ConvTranspose followed by Mul with a constant that
// varies only along the output channels (shape [C,1,1], [1,C,1,1] or a scalar) becomes the Conv
// alone with weights and bias multiplied per output channel. The Conv keeps its name and takes
// over the Mul's output.
#include "passes/fusion_arith.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class FuseConvMulPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    // Before opset 7 Add and Mul broadcast only with broadcast=1 and an axis: other semantics.
    if (ctx.opset("") < 7) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* mul : order) {
      if (mul->opType != "Mul" || !mul->isDomain("") || mul->inputs().size() != 2) continue;
      for (int side = 0; side < 2; ++side) {
        // The constant first: it is small and most Muls after a Conv have none.
        const Tensor* ct = constantOf(mul->input(static_cast<size_t>(1 - side)));
        if (!ct || !isFloatDType(ct->dtype())) continue;
        Node* conv = fusableConvProducer(g, mul->input(static_cast<size_t>(side)));
        if (!conv || constantOf(conv->input(1))->dtype() != ct->dtype()) continue;
        const std::vector<int64_t>& wDims = constantOf(conv->input(1))->dims;
        int64_t channels = convOutChannels(*conv, wDims);
        auto m = floatConstantOf(mul->input(static_cast<size_t>(1 - side)));
        if (!m || !allFinite(m->values)) continue;
        // The Conv output has the weights' rank, channels on axis 1.
        auto perOut = perChannel(m->dims, m->values, wDims.size(), 1, channels);
        if (!perOut) continue;
        auto w = scaledConvWeights(*conv, *perOut);
        if (!w) continue;
        const DType wType = w->dtype();
        if (!ctx.tryRewrite("fuse " + conv->opType + " '" + conv->displayName() + "' + Mul '" + mul->displayName() + "'"))
          return changed;
        // Without a bias there is nothing to scale: 0 * m stays 0.
        auto bias = floatConstantOf(conv->input(2));
        if (bias)
          for (size_t c = 0; c < bias->values.size(); ++c) bias->values[c] *= (*perOut)[c];
        setConvWeights(g, *conv, std::move(w), wType, bias ? &bias->values : nullptr);
        Value* y = mul->output(0);
        Value* x = conv->output(0);
        x->setType(y->type());
        bool ok = replaceValue(y, x);  // x has one use (the Mul) and a producer: it can take y's name
        (void)ok;
        g.removeNode(mul);
        changed = true;
        break;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseConvMulPass(const PassOptions&) { return std::make_unique<FuseConvMulPass>(); }

}  // namespace onnxtool
