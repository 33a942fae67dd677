// fold_if.cpp: `fold-if`: an If whose condition is a constant (often after fold-shapes and
// fold-constants proved it from shapes: `if state.shape[0]` in a scripted export) is replaced by
// the nodes of the branch it takes, inlined before it; the other branch is dropped. Values keep
// their names (renamed only where the enclosing graph or one of its subgraphs already has one),
// the If's outputs become the branch's outputs, and a graph output keeps its name.
#include <functional>

#include <fmt/format.h>
#include <unordered_map>
#include <unordered_set>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

/// Every value name defined in `g` and in the subgraphs nested in it, except inside `skip`.
void collectNames(const Graph& g, const Node* skip, std::unordered_set<std::string>& names) {
  for (const auto& v : g.values()) names.insert(v->name());
  for (const auto& n : g.nodes()) {
    if (n.get() == skip) continue;
    for (Graph* sg : n->subgraphs()) collectNames(*sg, skip, names);
  }
}

class FoldIfPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (n->opType != "If" || !n->isDomain("")) continue;
      const Tensor* c = n->input(0) ? constantOf(n->input(0)) : nullptr;
      if (!c || c->dtype() != DType::Bool || c->numElements().value_or(0) != 1 || c->raw.size() != 1) continue;
      bool cond = c->raw.data()[0] != 0;
      const Attribute* a = n->attr(cond ? "then_branch" : "else_branch");
      if (!a || !a->g) continue;
      Graph& branch = *a->g;
      if (!branch.sparseInitializers().empty() || branch.outputs().size() != n->outputs().size()) continue;
      if (!ctx.tryRewrite(fmt::format("inline the {} branch of If '{}' (its condition is constant)",
                                      cond ? "then" : "else", n->displayName())))
        continue;
      inlineBranch(g, n, a->g);
      ctx.count("ifs-inlined");
      changed = true;
    }
    return changed;
  }

 private:
  static void inlineBranch(Graph& g, Node* ifNode, std::shared_ptr<Graph> branchPtr) {
    Graph& branch = *branchPtr;
    Graph* top = &g;
    while (top->parent()) top = top->parent();
    std::unordered_set<std::string> taken;
    collectNames(*top, ifNode, taken);
    auto freshName = [&](const std::string& base) {
      std::string name = base;
      for (size_t i = 1; taken.count(name); ++i) name = fmt::format("{}_{}", base, i);
      taken.insert(name);
      return name;
    };
    std::unordered_map<Value*, Value*> map;
    for (Value* v : branch.initializers()) {
      Tensor t = *v->initializer();
      t.name = freshName(v->name());
      TypeInfo type = v->type().isNone() ? TypeInfo::tensor(t.dtype(), Shape::of(t.dims)) : v->type();
      Value* nv = g.addInitializer(std::move(t));
      nv->setType(std::move(type));
      map[v] = nv;
    }
    for (const auto& up : branch.nodes()) {
      Node* n = up.get();
      std::vector<Value*> inputs;
      for (Value* v : n->inputs()) {
        auto it = v ? map.find(v) : map.end();
        inputs.push_back(it != map.end() ? it->second : v);
      }
      std::vector<std::string> outNames;
      for (Value* o : n->outputs()) outNames.push_back(o ? freshName(o->name()) : "");
      Node* nn = g.addNode(n->opType, inputs, outNames, n->domain, ifNode);
      nn->name = n->name;
      nn->overload = n->overload;
      nn->docString = n->docString;
      nn->metadata = n->metadata;
      nn->residual = n->residual;
      nn->attributes = std::move(n->attributes);  // nested bodies move along
      n->attributes.clear();
      for (Attribute& at : nn->attributes) {
        if (at.g) at.g->setParent(&g, nn);
        for (auto& sg : at.graphs)
          if (sg) sg->setParent(&g, nn);
      }
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        Value* o = n->output(i);
        if (!o) continue;
        nn->output(i)->setType(o->type());
        map[o] = nn->output(i);
      }
    }
    std::vector<Value*> results;
    for (const ValueInfoEntry& e : branch.outputs()) {
      auto it = map.find(e.value);
      results.push_back(it != map.end() ? it->second : e.value);
    }
    // Nested bodies that moved along still read the branch's values: point them at the new ones
    // (node inputs only: the branch's own output list dies with it).
    for (auto& [from, to] : map) {
      std::vector<Use> uses = from->uses();
      for (const Use& u : uses) u.node->setInput(static_cast<size_t>(u.index), to);
    }
    for (size_t i = 0; i < ifNode->outputs().size(); ++i) {
      Value* out = ifNode->output(i);
      if (!out) continue;
      Value* src = results[i];
      if (!replaceValue(out, src)) {
        // A graph output fed by an outer value or an input: an Identity keeps the output's name.
        Node* id = g.addNode("Identity", {src}, {g.uniqueName(out->name() + "_inlined")}, "", ifNode);
        id->output(0)->setType(src->type());
        replaceValue(out, id->output(0));
      }
    }
    branchPtr.reset();
    g.removeNode(ifNode);
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldIfPass(const PassOptions&) { return std::make_unique<FoldIfPass>(); }

}  // namespace onnxtool
