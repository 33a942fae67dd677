// eliminate_dead.cpp: `eliminate-dead`: remove nodes none of whose outputs is read or is a graph
// output. ONNX ops have no side effects, so an unread node can always go (random ops included).
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class EliminateDeadPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    bool changed = false;
    // Consumers before producers, so one sweep removes whole dead chains.
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      bool dead = true;
      for (Value* o : n->outputs()) dead &= !o || (!o->hasUses() && !o->isGraphOutput());
      if (!dead || !ctx.tryRewrite("remove unused " + n->opType + " '" + n->displayName() + "'")) continue;
      g.removeNode(n);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateDeadPass(const PassOptions&) { return std::make_unique<EliminateDeadPass>(); }

}  // namespace onnxtool
