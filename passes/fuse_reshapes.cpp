// fuse_reshapes.cpp: `fuse-reshapes`: a chain of Reshape/Squeeze/Unsqueeze/Flatten (each
// intermediate read only by the next) keeps the row-major order of the elements, so its result is
// fixed by its output shape alone. The chain becomes one node when that shape can be produced from
// the chain's input for every input size: nothing (same shape), one Squeeze or Unsqueeze (only
// unit dims removed or added), or one Reshape with a constant shape whose entries are static
// dims, 0 (copy the input's dim at the same position: the same symbolic dim) and at most one -1.
// A Reshape computing its shape at run time (Concat of Shape pieces) alone is a chain too: it gets
// a constant shape when one describes its output.
//
// Shapes come from inference. Two rules keep the result exact for every input size: a 0 entry is
// written only for a dim the inferred shapes prove equal to the input's dim at that position
// (allowzero is never set on the new node, so 0 means copy), and -1 only when every other entry is
// a static positive dim (with a copied dim that is 0 at run time, -1 would be ambiguous).
// The shape-free rule needs no inference (so it also holds in Loop/Scan bodies, whose shapes may
// change between iterations): Reshape(chain(x), s) with a constant s free of -1 and of copying 0s
// is Reshape(x, s), at the end of a chain or, failing all else, inside it.
#include <algorithm>
#include <unordered_set>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool isReshapeLike(const Node* n) {
  if (!n || !n->isDomain("") || !n->input(0) || !n->output(0)) return false;
  const std::string& op = n->opType;
  return op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten";
}

/// Dims provably equal for every input: the same static value or the same symbol. Inference's
/// fresh "unk__N" symbols are not trusted: a model saved with inferred value_info may already use
/// a name that a later inference run hands out again for another value.
bool sameDim(const Dim& a, const Dim& b) {
  if (a.isValue() && b.isValue()) return a.value == b.value;
  if (a.isParam() && b.isParam()) return a.param == b.param && a.param.find("unk__") == std::string::npos;
  return false;
}

bool isStaticOne(const Dim& d) { return d.isValue() && d.value == 1; }

/// Positions of `longer` that are static 1s such that removing them leaves `shorter` (dim by dim
/// provably equal), or nullopt. Greedy matching is enough: the removed dims are all 1s, and which
/// of several equal 1s is removed does not change the result.
std::optional<std::vector<int64_t>> unitDimsBetween(const std::vector<Dim>& longer, const std::vector<Dim>& shorter) {
  std::vector<int64_t> axes;
  size_t j = 0;
  for (size_t i = 0; i < longer.size(); ++i) {
    if (j < shorter.size() && sameDim(longer[i], shorter[j])) ++j;
    else if (isStaticOne(longer[i])) axes.push_back(static_cast<int64_t>(i));
    else return std::nullopt;
  }
  if (j != shorter.size()) return std::nullopt;
  return axes;
}

/// A constant Reshape shape producing `y` from `x` for every input size (see the banner), or nullopt.
std::optional<std::vector<int64_t>> constantShapeFor(const std::vector<Dim>& x, const std::vector<Dim>& y) {
  std::vector<int64_t> shape;
  int inferred = 0;
  bool anyZero = false;
  for (size_t i = 0; i < y.size(); ++i) {
    const Dim& d = y[i];
    if (d.isValue() && d.value > 0) {
      shape.push_back(d.value);
    } else if (i < x.size() && sameDim(x[i], d)) {
      shape.push_back(0);  // copy: a symbolic dim in place, or a static 0 (which a literal 0 cannot say)
      anyZero = true;
    } else if (d.isValue()) {
      return std::nullopt;  // a static 0 not in place
    } else {
      shape.push_back(-1);
      ++inferred;
    }
  }
  if (inferred > 1 || (inferred == 1 && anyZero)) return std::nullopt;
  return shape;
}

class FuseReshapesPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    stable_ = shapesAreStable(g);
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::unordered_set<Node*> removed;
    for (Node* n : order) {
      if (removed.count(n) || !isReshapeLike(n)) continue;
      // Handle each chain once, from its last node.
      Value* y = n->output(0);
      if (hasSingleUse(y) && y->uses()[0].index == 0 && isReshapeLike(y->uses()[0].node)) continue;
      std::vector<Node*> chain{n};  // last node first
      for (;;) {
        Value* in = chain.back()->input(0);
        Node* p = in->producer();
        if (!isReshapeLike(p) || p->graph() != &g || !hasSingleUse(in)) break;
        chain.push_back(p);
      }
      int r = rewriteChain(g, chain, ctx, removed);
      if (r < 0) break;
      changed |= r > 0;
    }
    return changed;
  }

 private:
  /// 1 rewritten, 0 left, -1 when tryRewrite refused.
  int rewriteChain(Graph& g, const std::vector<Node*>& chain, PassContext& ctx, std::unordered_set<Node*>& removed) {
    Node* last = chain.front();
    // A lone node is already one node; only a lone Reshape with a run-time shape can improve.
    if (chain.size() == 1 && (last->opType != "Reshape" || !last->input(1) || constantOf(last->input(1)))) return 0;
    if (ctx.opset("") < 5) return 0;  // Reshape took its shape as an attribute before opset 5
    if (chain.size() > 1 && isLiteralReshape(*last)) return shortcut(chain, 0, ctx, removed);
    int r = rewriteFromShapes(g, chain, ctx, removed);
    if (r != 0) return r;
    // Without usable shapes the nearest literal Reshape inside the chain can still read x.
    for (size_t k = 1; k + 1 < chain.size(); ++k)
      if (isLiteralReshape(*chain[k])) return shortcut(chain, k, ctx, removed);
    return 0;
  }

  /// A Reshape whose constant target has no -1 and no copying 0: its result ignores its input's shape.
  static bool isLiteralReshape(const Node& n) {
    if (n.opType != "Reshape" || !constantOf(n.input(1))) return false;
    auto s = constantAsDoubles(n.input(1));
    bool allowZero = n.attrInt("allowzero", 0) != 0;
    return s && std::all_of(s->begin(), s->end(), [&](double v) { return v > 0 || (v == 0 && allowZero); });
  }

  /// chain[k] (a literal Reshape) reads the chain's input; the nodes before it go.
  int shortcut(const std::vector<Node*>& chain, size_t k, PassContext& ctx, std::unordered_set<Node*>& removed) {
    std::vector<Node*> part(chain.begin() + static_cast<std::ptrdiff_t>(k), chain.end());
    if (!ctx.tryRewrite("fuse " + describe(part) + " into Reshape '" + chain[k]->displayName() + "'")) return -1;
    chain[k]->setInput(0, chain.back()->input(0));
    removeChain(part, removed);
    return 1;
  }

  /// The chain as one node (or none) from the inferred shapes of its input and output.
  int rewriteFromShapes(Graph& g, const std::vector<Node*>& chain, PassContext& ctx, std::unordered_set<Node*>& removed) {
    Node* last = chain.front();
    Value* x = chain.back()->input(0);
    Value* y = last->output(0);
    std::string what = describe(chain);
    if (!stable_ || !x->type().isTensor() || !y->type().isTensor() || !x->type().shape.hasRank ||
        !y->type().shape.hasRank)
      return 0;
    const std::vector<Dim>& xd = x->type().shape.dims;
    const std::vector<Dim>& yd = y->type().shape.dims;

    // Same shape: the chain does nothing.
    if (xd.size() == yd.size() && std::equal(xd.begin(), xd.end(), yd.begin(), sameDim)) {
      bool canRename = !y->isGraphOutput() || (x->producer() && x->graph() == &g && !x->isGraphOutput() && !x->isGraphInput());
      if (canRename) {
        if (!ctx.tryRewrite("remove " + what + " (shape unchanged)")) return -1;
        replaceValue(y, x);
        g.removeNode(last);
        removed.insert(last);
        removeChain(chain, removed);
        return 1;
      }
    }

    std::optional<std::vector<int64_t>> axes;
    std::string op;
    if (yd.size() < xd.size() && (axes = unitDimsBetween(xd, yd))) op = "Squeeze";
    else if (yd.size() > xd.size() && (axes = unitDimsBetween(yd, xd))) op = "Unsqueeze";
    std::optional<std::vector<int64_t>> shape;
    if (op.empty()) {
      shape = constantShapeFor(xd, yd);
      if (!shape) {
        ctx.count("skipped-inexpressible-shape");
        return 0;
      }
      op = "Reshape";
    }
    if (chain.size() == 1 && op == "Reshape") {
      if (!ctx.tryRewrite("constant shape for Reshape '" + last->displayName() + "'")) return -1;
    } else if (!ctx.tryRewrite("fuse " + what + " into " + op + " '" + last->displayName() + "'")) {
      return -1;
    }
    // The last node becomes the one node: it keeps its name and output.
    const std::string base = last->name.empty() ? y->name() : last->name;
    last->opType = op;
    last->attributes.clear();
    last->truncateInputs(0);
    last->addInput(x);
    if (op == "Reshape") {
      last->addInput(addInitializer(g, Tensor::fromInt64s("", {static_cast<int64_t>(shape->size())}, *shape),
                                    base + "/shape"));
    } else if (ctx.opset("") >= 13) {
      last->addInput(addInitializer(g, Tensor::fromInt64s("", {static_cast<int64_t>(axes->size())}, *axes),
                                    base + "/axes"));
    } else {
      last->setAttr(Attribute::ofInts("axes", *axes));
    }
    removeChain(chain, removed);
    return 1;
  }

  /// Removes chain[1..] (now unread), nearest the last node first.
  static void removeChain(const std::vector<Node*>& chain, std::unordered_set<Node*>& removed) {
    for (size_t i = 1; i < chain.size(); ++i)
      if (removeIfDead(chain[i])) removed.insert(chain[i]);
  }

  static std::string describe(const std::vector<Node*>& chain) {
    std::string s;
    for (size_t i = chain.size(); i-- > 0;) {
      if (!s.empty()) s += " + ";
      s += chain[i]->opType + " '" + chain[i]->displayName() + "'";
    }
    return s;
  }

  bool stable_ = true;
};

}  // namespace

std::unique_ptr<Pass> createFuseReshapesPass(const PassOptions&) { return std::make_unique<FuseReshapesPass>(); }

}  // namespace onnxtool
