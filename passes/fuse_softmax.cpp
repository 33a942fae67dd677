// fuse_softmax.cpp: `fuse-softmax`: softmax written out,
//   e = Exp(x | Sub(x, ReduceMax(x, axis))); Div(e, ReduceSum(e, axis))
// becomes Softmax(x, axis). Opset 13 and later take any single axis; before 13 Softmax flattens
// to 2-D, which equals the written-out form only for the last axis, so only that is fused.
// Softmax subtracts the maximum itself, so the stabilised and the plain forms both map to it.
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

bool isOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

class FuseSoftmaxPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    int64_t opset = ctx.opset("");
    if (opset < 1) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* exp : order) {
      if (gone.count(exp) || !isOp(exp, "Exp")) continue;
      std::vector<Node*> pattern;
      int64_t axis = 0;
      Value* x = match(*exp, opset, pattern, axis);
      if (!x || !isFloatTensor(x) || !allInGraph(pattern, g) || !keepsShapeOf(pattern.back()->output(0), x)) continue;
      if (!ctx.tryRewrite("fuse Softmax around Exp '" + exp->displayName() + "'")) break;
      Node* sm = replaceWithNode(g, *pattern.front(), *pattern.back(), "Softmax", {x});
      if (!sm) continue;
      sm->setAttr(Attribute::ofInt("axis", axis));
      for (Node* p : pattern) gone.insert(p);
      removeDeadPattern(pattern);
      changed = true;
    }
    return changed;
  }

 private:
  /// The single reduced axis of `n` as a negative index, or 0 when not usable.
  static int64_t singleAxis(const Node& n, int64_t opset, int64_t rank) {
    auto axes = reduceAxesKeepDims(n, opset);
    if (!axes || axes->size() != 1) return 0;
    int64_t a = axes->front();
    if (a >= 0) {
      if (rank < 0 || a >= rank) return 0;
      a -= rank;
    }
    if (a >= 0 || (rank >= 0 && a < -rank)) return 0;
    if (opset < 13 && a != -1) return 0;
    return a;
  }

  static Value* match(Node& exp, int64_t opset, std::vector<Node*>& pattern, int64_t& axis) {
    Value* e = exp.output(0);
    if (!e || e->isGraphOutput() || e->uses().size() != 2) return nullptr;
    Node* sum = nullptr;
    Node* div = nullptr;
    for (const Use& u : e->uses()) {
      if (isOp(u.node, "ReduceSum") && u.index == 0)
        sum = u.node;
      else if (isOp(u.node, "Div") && u.index == 0)
        div = u.node;
    }
    if (!sum || !div || soleUser(sum->output(0)) != div || div->input(1) != sum->output(0)) return nullptr;
    Value* x = exp.input(0);
    axis = singleAxis(*sum, opset, rankOf(x));
    if (axis == 0) return nullptr;
    pattern = {&exp, sum, div};
    // The stabilised form: Exp(x - ReduceMax(x, same axis)).
    Node* sub = x->producer();
    if (isOp(sub, "Sub") && hasSingleUse(x)) {
      Node* max = sub->input(1) ? sub->input(1)->producer() : nullptr;
      if (isOp(max, "ReduceMax") && max->input(0) == sub->input(0) && hasSingleUse(sub->input(1)) &&
          singleAxis(*max, opset, rankOf(sub->input(0))) == axis) {
        pattern.insert(pattern.begin(), {max, sub});
        x = sub->input(0);
      }
    }
    return x;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseSoftmaxPass(const PassOptions&) { return std::make_unique<FuseSoftmaxPass>(); }

}  // namespace onnxtool
