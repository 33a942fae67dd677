// eliminate_dead.cpp: `eliminate-dead`: remove nodes none of whose outputs is read or is a graph
// output. ONNX ops have no side effects, so an unread node can always go (random ops included).
#include <fmt/format.h>

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
      if (!dead) {
        changed |= dropUnreadOutputs(g, n, ctx);
        continue;
      }
      if (!ctx.tryRewrite("remove unused " + n->opType + " '" + n->displayName() + "'")) continue;
      g.removeNode(n);
      changed = true;
    }
    return changed;
  }

 private:
  static bool unread(const Value* o) { return !o || (!o->hasUses() && !o->isGraphOutput()); }

  /// If outputs nothing reads, and Loop scan outputs nothing reads, go from the node and from its
  /// bodies' outputs; the nodes computing them then die inside the bodies. (A Loop's carried
  /// values feed the next iteration, so they stay.)
  static bool dropUnreadOutputs(Graph& g, Node* n, PassContext& ctx) {
    if (!n->isDomain("") || (n->opType != "If" && n->opType != "Loop")) return false;
    std::vector<Graph*> bodies = n->subgraphs();
    if (bodies.empty()) return false;
    size_t first = 0, bodyOffset = 0;
    if (n->opType == "Loop") {
      // body outputs: cond, N carried, K scan; node outputs: N carried, K scan
      size_t carried = n->inputs().size() >= 2 ? n->inputs().size() - 2 : 0;
      first = carried;
      bodyOffset = 1;
    }
    bool changed = false;
    for (size_t i = n->outputs().size(); i-- > first;) {
      if (!unread(n->output(i))) continue;
      bool fits = true;
      for (Graph* b : bodies) fits &= i + bodyOffset < b->outputs().size();
      if (!fits || n->outputs().size() == 1) break;
      if (!ctx.tryRewrite(fmt::format("drop output {} of {} '{}' (nothing reads it)", i, n->opType, n->displayName())))
        break;
      g.removeNodeOutput(n, i);
      for (Graph* b : bodies) b->removeOutput(i + bodyOffset);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateDeadPass(const PassOptions&) { return std::make_unique<EliminateDeadPass>(); }

}  // namespace onnxtool
