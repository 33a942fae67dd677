// fuse_hard_swish.cpp: `fuse-hard-swish`: x * hardsigmoid(x) becomes HardSwish (opset >= 14):
//   Mul(x, HardSigmoid<alpha=1/6, beta=0.5>(x))                        -> HardSwish(x)
//   x * Relu6(x + 3) / 6, i.e. Div(Mul(x, Clip(x + 3, 0, 6)), 6) or
//   Mul(x, Div(Clip(x + 3, 0, 6), 6)), with * 0.16666667 for / 6      -> HardSwish(x)
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

class FuseHardSwishPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    int64_t opset = ctx.opset("");
    if (opset < 14) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* n : order) {
      if (gone.count(n)) continue;
      std::vector<Node*> pattern;
      Value* x = matchHardSwish(*n, opset, pattern);
      if (!x || !isFloatTensor(x) || (x->type().dtype() == DType::BFloat16 && opset < 22) || !allInGraph(pattern, g) ||
          !keepsShapeOf(pattern.back()->output(0), x))
        continue;
      if (!ctx.tryRewrite("fuse HardSwish ending in " + pattern.back()->opType + " '" + pattern.back()->displayName() +
                          "'"))
        break;
      if (!replaceWithNode(g, *pattern.front(), *pattern.back(), "HardSwish", {x})) continue;
      for (Node* p : pattern) gone.insert(p);
      removeDeadPattern(pattern);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseHardSwishPass(const PassOptions&) { return std::make_unique<FuseHardSwishPass>(); }

}  // namespace onnxtool
