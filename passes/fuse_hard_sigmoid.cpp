// fuse_hard_sigmoid.cpp: `fuse-hard-sigmoid`: the decomposed hard sigmoid becomes HardSigmoid
// (opset >= 6, when Clip has its current form):
//   Clip(x * alpha + beta, 0, 1)   (x / d for x * alpha; no Mul for alpha = 1) -> HardSigmoid(x, alpha, beta)
//   Relu6(x + 3) / 6 = Div(Clip(x + 3, 0, 6), 6) or * 0.16666667  -> HardSigmoid(x, 1/6, 0.5)
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

bool isOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

class FuseHardSigmoidPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    int64_t opset = ctx.opset("");
    if (opset < 6) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* clip : order) {
      if (gone.count(clip) || !isOp(clip, "Clip")) continue;
      std::vector<Node*> pattern;
      double alpha = 1, beta = 0;
      Value* x = match(*clip, opset, pattern, alpha, beta);
      if (!x || !isFloatTensor(x) || (x->type().dtype() == DType::BFloat16 && opset < 22) || !allInGraph(pattern, g) ||
          !keepsShapeOf(pattern.back()->output(0), x))
        continue;
      if (!ctx.tryRewrite("fuse HardSigmoid ending in " + pattern.back()->opType + " '" +
                          pattern.back()->displayName() + "'"))
        break;
      Node* hs = replaceWithNode(g, *pattern.front(), *pattern.back(), "HardSigmoid", {x});
      if (!hs) continue;
      hs->setAttr(Attribute::ofFloat("alpha", static_cast<float>(alpha)));
      hs->setAttr(Attribute::ofFloat("beta", static_cast<float>(beta)));
      for (Node* p : pattern) gone.insert(p);
      removeDeadPattern(pattern);
      changed = true;
    }
    return changed;
  }

 private:
  static Value* match(Node& clip, int64_t opset, std::vector<Node*>& pattern, double& alpha, double& beta) {
    double lo, hi;
    if (!clipBounds(clip, opset, lo, hi)) return nullptr;
    if (Value* x = matchRelu6OfXPlus3(clip, opset)) {
      Value* r = clip.output(0);
      Node* div = soleUser(r);
      bool byDiv = isOp(div, "Div") && div->input(0) == r && isNearScalar(div->input(1), 6.0);
      bool byMul = isOp(div, "Mul") && operandBesideScalar(div, 1.0 / 6.0) == r;
      if (!byDiv && !byMul) return nullptr;
      pattern = {clip.input(0)->producer(), &clip, div};
      alpha = 1.0 / 6.0;
      beta = 0.5;
      return x;
    }
    if (lo != 0 || hi != 1) return nullptr;
    Value* y = clip.input(0);
    Node* add = y ? y->producer() : nullptr;
    if (!isOp(add, "Add") || !hasSingleUse(y)) return nullptr;
    Value* z = nullptr;
    for (size_t i = 0; i < 2 && !z; ++i)
      if (auto b = scalarOf(add->input(i))) {
        beta = *b;
        z = add->input(1 - i);
      }
    if (!z) return nullptr;
    pattern = {add, &clip};
    Node* mul = z->producer();
    if (hasSingleUse(z) && isOp(mul, "Mul")) {
      for (size_t i = 0; i < 2; ++i)
        if (auto a = scalarOf(mul->input(i))) {
          alpha = *a;
          pattern.insert(pattern.begin(), mul);
          return mul->input(1 - i);
        }
    }
    if (hasSingleUse(z) && isOp(mul, "Div")) {
      if (auto d = scalarOf(mul->input(1)); d && *d != 0) {
        alpha = 1.0 / *d;
        pattern.insert(pattern.begin(), mul);
        return mul->input(0);
      }
    }
    alpha = 1;
    return z;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseHardSigmoidPass(const PassOptions&) { return std::make_unique<FuseHardSigmoidPass>(); }

}  // namespace onnxtool
