// fuse_conv_bn.cpp: `fuse-conv-bn`: Conv or ConvTranspose (optional bias) followed by an
// inference-mode BatchNormalization becomes the Conv alone, with weights scaled by
// scale/sqrt(var+eps) per output channel and bias (b-mean)*s + B. The Conv keeps its name and
// takes over the BatchNormalization's output.
#include "passes/fusion_arith.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class FuseConvBnPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* bn : order) {
      if (bn->opType != "BatchNormalization" || !bn->isDomain("")) continue;
      Node* conv = fusableConvProducer(g, bn->input(0));
      if (!conv) continue;
      int64_t channels = convOutChannels(*conv, constantOf(conv->input(1))->dims);
      auto affine = bnAffine(*bn, ctx.opset(""), channels);
      if (!affine) continue;
      auto w = scaledConvWeights(*conv, affine->scale);
      if (!w) continue;
      const DType wType = w->dtype();
      if (!ctx.tryRewrite("fuse " + conv->opType + " '" + conv->displayName() + "' + BatchNormalization '" +
                          bn->displayName() + "'"))
        break;
      std::vector<double> bias(static_cast<size_t>(channels), 0.0);
      if (auto b = floatConstantOf(conv->input(2))) bias = b->values;
      for (size_t c = 0; c < bias.size(); ++c) bias[c] = bias[c] * affine->scale[c] + affine->shift[c];
      setConvWeights(g, *conv, std::move(w), wType, &bias);
      Value* y = bn->output(0);
      Value* x = conv->output(0);
      x->setType(y->type());
      bool ok = replaceValue(y, x);  // x has one use (the BN) and a producer: it can take y's name
      (void)ok;
      g.removeNode(bn);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseConvBnPass(const PassOptions&) { return std::make_unique<FuseConvBnPass>(); }

}  // namespace onnxtool
