// eliminate_identity.cpp: `eliminate-identity`: nodes whose output equals their first input:
// Identity, Dropout in inference mode (mask unused), Cast/CastLike to the input's own type, and
// Reshape/Expand/Flatten/Squeeze/Unsqueeze/Slice/Pad/Transpose/Tile/Concat/Split that change
// nothing. Readers of the output then read the input. A graph output is never renamed away: when
// the output is one, the input takes its name if it can, else the node stays.
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool sameKnownShape(const TypeInfo& a, const TypeInfo& b) {
  if (!a.isTensor() || !b.isTensor() || !a.shape.hasRank || !b.shape.hasRank) return false;
  if (a.elemType != b.elemType || a.shape.rank() != b.shape.rank()) return false;
  for (size_t i = 0; i < a.shape.rank(); ++i) {
    const Dim& x = a.shape.dims[i];
    const Dim& y = b.shape.dims[i];
    if (x.isValue() && y.isValue() && x.value == y.value) continue;
    // Names shape inference invented (unk__N) are not proof of equality: a saved model's
    // value_info may reuse one for another dim.
    if (x.isParam() && y.isParam() && x.param == y.param && x.param.rfind("unk__", 0) != 0) continue;
    return false;
  }
  return true;
}

bool allEqual(const std::optional<std::vector<double>>& v, double x) {
  if (!v) return false;
  for (double d : *v)
    if (d != x) return false;
  return true;
}

class EliminateIdentityPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    stable_ = shapesAreStable(g);
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (!n->isDomain("") || n->inputs().empty() || !n->input(0) || n->outputs().empty() || !n->output(0)) continue;
      if (!isNoop(*n, ctx)) continue;
      // Extra outputs (Dropout's mask) must be unused.
      bool extraUsed = false;
      for (size_t i = 1; i < n->outputs().size(); ++i)
        if (Value* o = n->output(i)) extraUsed |= o->hasUses() || o->isGraphOutput();
      if (extraUsed) continue;
      Value* out = n->output(0);
      Value* in = n->input(0);
      if (out->isGraphOutput() && (!in->producer() || in->graph() != &g || in->isGraphOutput() || in->isGraphInput()))
        continue;  // the output's name must survive and the input cannot take it
      if (!ctx.tryRewrite("remove no-op " + n->opType + " '" + n->displayName() + "'")) break;
      bool ok = replaceValue(out, in);
      (void)ok;  // guaranteed by the check above
      g.removeNode(n);
      changed = true;
    }
    return changed;
  }

 private:
  bool isNoop(const Node& n, PassContext& ctx) const {
    const std::string& op = n.opType;
    const Value* in = n.input(0);
    const Value* out = n.output(0);
    int64_t opset = ctx.opset("");
    if (op == "Identity") return true;
    if (op == "Dropout") {
      if (opset < 7) return n.attrInt("is_test", 0) != 0;
      if (opset < 12) return true;
      const Value* training = n.input(2);
      return !training || isConstantScalar(training, 0);
    }
    // The rest must keep dtype and shape; Cast also needs the dtype known.
    if (!stable_ || in->type().isNone() || out->type().isNone()) return false;
    if (op == "Cast")
      return in->type().isTensor() && in->type().elemType == n.attrInt("to", -1) && in->type().elemType != 0;
    if (op == "CastLike") return n.input(1) && in->type().isTensor() && n.input(1)->type().isTensor() &&
                                 in->type().elemType == n.input(1)->type().elemType && in->type().elemType != 0;
    if (!sameKnownShape(in->type(), out->type())) return false;
    if (op == "Reshape" || op == "Expand" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") return true;
    if (op == "Tile") return allEqual(constantAsDoubles(n.input(1)), 1);
    if (op == "Transpose") {
      if (!n.attr("perm")) return in->type().shape.rank() <= 1;  // no perm reverses the axes
      auto perm = n.attrInts("perm");
      for (size_t i = 0; i < perm.size(); ++i)
        if (perm[i] != static_cast<int64_t>(i)) return false;
      return true;
    }
    if (op == "Slice") {
      // Equal shapes with unit steps can only mean the whole range.
      if (opset < 10) return true;
      return !n.input(4) || allEqual(constantAsDoubles(n.input(4)), 1);
    }
    if (op == "Pad") {
      if (opset < 11) {
        std::vector<int64_t> pads = n.attrInts("pads");
        return allEqual(std::vector<double>(pads.begin(), pads.end()), 0);
      }
      return allEqual(constantAsDoubles(n.input(1)), 0);
    }
    if (op == "Concat") return n.inputs().size() == 1;
    if (op == "Split") return n.outputs().size() == 1;
    return false;
  }

  bool stable_ = true;
};

}  // namespace

std::unique_ptr<Pass> createEliminateIdentityPass(const PassOptions&) { return std::make_unique<EliminateIdentityPass>(); }

}  // namespace onnxtool
