// hoist_loop_constants.cpp: `hoist-loop-constants`: constants of Loop and Scan bodies (their
// initializers, and Constant nodes, which fold-constants makes initializers) move to the graph
// holding the loop, so a runtime materialises them once instead of per iteration. Only constants
// move: hoisting computations would run them even when the loop runs zero times.
#include <unordered_set>

#include <fmt/format.h>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

void collectNames(const Graph& g, std::unordered_set<std::string>& names) {
  for (const auto& v : g.values()) names.insert(v->name());
  for (const auto& n : g.nodes())
    for (Graph* sg : n->subgraphs()) collectNames(*sg, names);
}

class HoistLoopConstantsPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    if (isFunctionBody(g, ctx.model())) return false;  // a function holds no initializers
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (!n->isDomain("") || (n->opType != "Loop" && n->opType != "Scan")) continue;
      for (Graph* body : n->subgraphs()) changed |= hoist(g, *body, ctx);
    }
    return changed;
  }

 private:
  static bool hoist(Graph& g, Graph& body, PassContext& ctx) {
    std::vector<Value*> movable;
    for (Value* v : body.initializers())
      if (!v->isGraphOutput() && !v->isGraphInput() && v->hasUses()) movable.push_back(v);
    if (movable.empty()) return false;
    Graph* top = &g;
    while (top->parent()) top = top->parent();
    std::unordered_set<std::string> taken;
    collectNames(*top, taken);
    bool changed = false;
    for (Value* v : movable) {
      if (!ctx.tryRewrite(fmt::format("hoist constant '{}' out of the body of {}", v->name(),
                                      body.parentNode() ? body.parentNode()->displayName() : "a loop")))
        break;
      Tensor t = *v->initializer();
      std::string name = v->name();
      taken.erase(name);  // the body's own use of the name goes with it
      for (size_t i = 1; taken.count(name); ++i) name = fmt::format("{}_{}", v->name(), i);
      taken.insert(name);
      t.name = name;
      TypeInfo type = v->type().isNone() ? TypeInfo::tensor(t.dtype(), Shape::of(t.dims)) : v->type();
      Value* outer = g.addInitializer(std::move(t));
      outer->setType(std::move(type));
      std::vector<Use> uses = v->uses();
      for (const Use& u : uses) u.node->setInput(static_cast<size_t>(u.index), outer);
      body.removeInitializer(v);
      ctx.count("constants-hoisted");
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createHoistLoopConstantsPass(const PassOptions&) { return std::make_unique<HoistLoopConstantsPass>(); }

}  // namespace onnxtool
