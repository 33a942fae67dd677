// fuse_hard_swish.cpp: `fuse-hard-swish`: x * hardsigmoid(x) becomes HardSwish (opset >= 14):
//   Mul(x, HardSigmoid<alpha=1/6, beta=0.5>(x))                        -> HardSwish(x)
//   x * Relu6(x + 3) / 6, i.e. Div(Mul(x, Clip(x + 3, 0, 6)), 6) or
//   Mul(x, Div(Clip(x + 3, 0, 6), 6)), with * 0.16666667 for / 6      -> HardSwish(x)
#include <cmath>
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

bool isOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

/// Whether `n` divides `v` by 6 (Div(v, 6) or Mul(v, 1/6)).
bool isDivBySix(const Node* n, const Value* v) {
  if (isOp(n, "Div")) return n->input(0) == v && isNearScalar(n->input(1), 6.0);
  return isOp(n, "Mul") && operandBesideScalar(n, 1.0 / 6.0) == v;
}

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
      Value* x = match(*n, opset, pattern);
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

 private:
  static Value* match(Node& n, int64_t opset, std::vector<Node*>& pattern) {
    if (isOp(&n, "HardSigmoid")) {
      if (std::fabs(n.attrFloat("alpha", 0.2f) - 1.0 / 6.0) > 1e-6 || std::fabs(n.attrFloat("beta", 0.5f) - 0.5) > 1e-6)
        return nullptr;
      Value* x = n.input(0);
      Node* mul = soleUser(n.output(0));
      if (!isOp(mul, "Mul") || otherOperand(mul, n.output(0)) != x) return nullptr;
      pattern = {&n, mul};
      return x;
    }
    Value* x = matchRelu6OfXPlus3(n, opset);
    if (!x) return nullptr;
    Value* r = n.output(0);
    Node* u = soleUser(r);
    if (!u) return nullptr;
    Node* add = n.input(0)->producer();
    if (isOp(u, "Mul") && otherOperand(u, r) == x) {  // (x * r) / 6
      Node* div = soleUser(u->output(0));
      if (!isDivBySix(div, u->output(0))) return nullptr;
      pattern = {add, &n, u, div};
      return x;
    }
    if (isDivBySix(u, r)) {  // x * (r / 6)
      Node* mul = soleUser(u->output(0));
      if (!isOp(mul, "Mul") || otherOperand(mul, u->output(0)) != x) return nullptr;
      pattern = {add, &n, u, mul};
      return x;
    }
    return nullptr;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseHardSwishPass(const PassOptions&) { return std::make_unique<FuseHardSwishPass>(); }

}  // namespace onnxtool
