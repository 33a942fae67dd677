// eliminate_common_subexpressions.cpp: `eliminate-common-subexpressions`: a node with the same
// op, domain, attributes and inputs as an earlier node computes the same values (ONNX ops are
// pure), so its readers read the earlier node's outputs. Random ops and nodes holding subgraphs
// are left alone. Inside a subgraph (If branch, Loop body), the nodes of the enclosing graphs that
// come before the node holding it count as earlier nodes too: a branch recomputing what its parent
// already has reads the parent's value.
#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool sameTensor(const Tensor* a, const Tensor* b) {
  if (!a || !b) return a == b;
  return a->dataType == b->dataType && a->dims == b->dims && a->raw.view() == b->raw.view() && a->strings == b->strings;
}

bool sameAttr(const Attribute& a, const Attribute& b) {
  return a.name == b.name && a.type == b.type && a.refAttrName == b.refAttrName && a.i == b.i &&
         (a.f == b.f || (a.f != a.f && b.f != b.f)) && a.s == b.s && a.ints == b.ints && a.floats == b.floats &&
         a.strings == b.strings && sameTensor(a.t.get(), b.t.get()) && a.tensors.size() == b.tensors.size() &&
         !a.g && !b.g && a.graphs.empty() && b.graphs.empty() && !a.sparseTensor && !b.sparseTensor &&
         a.sparseTensors.empty() && b.sparseTensors.empty() && !a.tp && !b.tp && a.typeProtos.empty() &&
         b.typeProtos.empty() && [&] {
           for (size_t i = 0; i < a.tensors.size(); ++i)
             if (!sameTensor(a.tensors[i].get(), b.tensors[i].get())) return false;
           return true;
         }();
}

bool sameComputation(const Node& a, const Node& b) {
  if (a.opType != b.opType || canonicalDomain(a.domain) != canonicalDomain(b.domain) || a.overload != b.overload ||
      a.inputs() != b.inputs() || a.outputs().size() != b.outputs().size() || a.attributes.size() != b.attributes.size())
    return false;
  for (size_t i = 0; i < a.outputs().size(); ++i)
    if ((a.output(i) == nullptr) != (b.output(i) == nullptr)) return false;
  for (const Attribute& x : a.attributes) {
    const Attribute* y = b.attr(x.name);
    if (!y || !sameAttr(x, *y)) return false;
  }
  return true;
}

class EliminateCommonSubexpressionsPass : public Pass {
 public:
  /// Op and inputs, and a summary of the attributes (order-independent, as sameComputation
  /// matches them by name): without it every Constant lands in one bucket and each is compared
  /// with all before it (Paddle2ONNX exports hold hundreds, every weight one of them).
  static size_t hashOf(const Node& n) {
    size_t h = std::hash<std::string>()(n.opType);
    for (Value* v : n.inputs()) h = h * 1000003u ^ std::hash<const void*>()(v);
    size_t attrs = 0;
    for (const Attribute& a : n.attributes) {
      size_t x = std::hash<std::string>()(a.name) ^ (static_cast<size_t>(a.i) * 31u) ^ (a.ints.size() * 131u);
      if (a.t) x = x * 1000003u ^ tensorSummary(*a.t);
      attrs += x;
    }
    return h * 1000003u ^ attrs;
  }
  /// dtype, dims, byte count and up to 64 bytes at each end: what sameTensor compares, read in
  /// at most two places of a big tensor.
  static size_t tensorSummary(const Tensor& t) {
    size_t h = static_cast<size_t>(t.dataType) * 1000003u ^ t.raw.size() ^ (t.strings.size() << 20);
    for (int64_t d : t.dims) h = h * 31u + static_cast<size_t>(d);
    std::string_view b = t.raw.view();
    const size_t k = std::min<size_t>(64, b.size());
    return h * 1000003u ^ std::hash<std::string_view>()(b.substr(0, k)) ^ (std::hash<std::string_view>()(b.substr(b.size() - k)) << 1);
  }

  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    std::unordered_map<size_t, std::vector<Node*>> seen;
    // What the enclosing graphs computed before the node holding this one: visible here.
    for (const Graph* inner = &g; inner->parentNode() && inner->parent(); inner = inner->parent()) {
      const Node* holder = inner->parentNode();
      for (const auto& p : inner->parent()->nodes()) {
        if (p.get() == holder) break;
        if (!isNondeterministic(*p) && p->subgraphs().empty()) seen[hashOf(*p)].push_back(p.get());
      }
    }
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (isNondeterministic(*n) || !n->subgraphs().empty()) continue;
      size_t h = hashOf(*n);
      Node* keep = nullptr;
      for (Node* c : seen[h])
        if (sameComputation(*c, *n)) keep = c;
      if (!keep) {
        seen[h].push_back(n);
        continue;
      }
      // Every output of n must be replaceable; graph outputs need the kept value to take the name.
      bool possible = true;
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        Value* o = n->output(i);
        if (o && o->isGraphOutput() && (keep->output(i)->isGraphOutput() || keep->graph() != &g)) possible = false;
      }
      if (!possible || !ctx.tryRewrite("merge " + n->opType + " '" + n->displayName() + "' into '" + keep->displayName() + "'"))
        continue;
      for (size_t i = 0; i < n->outputs().size(); ++i)
        if (Value* o = n->output(i)) replaceValue(o, keep->output(i));
      g.removeNode(n);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateCommonSubexpressionsPass(const PassOptions&) {
  return std::make_unique<EliminateCommonSubexpressionsPass>();
}

}  // namespace onnxtool
