// fuse_conv_add.cpp: `fuse-conv-add`: Conv or ConvTranspose followed by Add of a constant that
// varies only along the output channels (shape [C,1,1], [1,C,1,1] or a scalar) becomes the Conv
// alone with the constant added to its bias (created when absent). The Conv keeps its name and
// takes over the Add's output.
#include "passes/fusion_arith.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class FuseConvAddPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    // Before opset 7 Add and Mul broadcast only with broadcast=1 and an axis: other semantics.
    if (ctx.opset("") < 7) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* add : order) {
      if (add->opType != "Add" || !add->isDomain("") || add->inputs().size() != 2) continue;
      for (int side = 0; side < 2; ++side) {
        // The constant first: it is small and most Adds after a Conv have none.
        const Tensor* ct = constantOf(add->input(static_cast<size_t>(1 - side)));
        if (!ct || !isFloatDType(ct->dtype())) continue;
        Node* conv = fusableConvProducer(g, add->input(static_cast<size_t>(side)));
        if (!conv || constantOf(conv->input(1))->dtype() != ct->dtype()) continue;
        const std::vector<int64_t>& wDims = constantOf(conv->input(1))->dims;
        int64_t channels = convOutChannels(*conv, wDims);
        auto a = floatConstantOf(add->input(static_cast<size_t>(1 - side)));
        if (!a || !allFinite(a->values)) continue;
        // The Conv output has the weights' rank, channels on axis 1.
        auto perOut = perChannel(a->dims, a->values, wDims.size(), 1, channels);
        if (!perOut) continue;
        if (!ctx.tryRewrite("fuse " + conv->opType + " '" + conv->displayName() + "' + Add '" + add->displayName() + "'"))
          return changed;
        std::vector<double> bias(static_cast<size_t>(channels), 0.0);
        if (auto b = floatConstantOf(conv->input(2))) bias = b->values;
        for (size_t c = 0; c < bias.size(); ++c) bias[c] += (*perOut)[c];
        setConvWeights(g, *conv, std::nullopt, ct->dtype(), &bias);
        Value* y = add->output(0);
        Value* x = conv->output(0);
        x->setType(y->type());
        bool ok = replaceValue(y, x);  // x has one use (the Add) and a producer: it can take y's name
        (void)ok;
        g.removeNode(add);
        changed = true;
        break;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseConvAddPass(const PassOptions&) { return std::make_unique<FuseConvAddPass>(); }

}  // namespace onnxtool
