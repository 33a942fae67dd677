// eliminate_identity.cpp: `eliminate-identity`: nodes whose output equals their first input:
// Identity, Dropout in inference mode or with ratio 0 (mask unused), Cast/CastLike to the input's own type, and
// Reshape/Expand/Flatten/Squeeze/Unsqueeze/Slice/Pad/Transpose/Tile/Concat/Split that change
// nothing, and arithmetic with a neutral constant that does not broadcast the other operand up:
// x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, x ^ 1 (x + 0 turns a -0.0 in x into +0.0, which
// compares equal; onnx-simplifier and onnxslim remove it too). Readers of the output then read
// the input that passes through. A graph output is never renamed away: when
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

/// Whether `v` is a constant whose every element is `x` (stops at the first that is not: the
/// constant may be a large weight).
bool constantAllEqual(const Value* v, double x) {
  const Tensor* t = constantOf(v);
  if (!t) return false;
  auto n = t->numElements();
  auto bytes = t->expectedBytes();
  if (!n || *n == 0 || !bytes || t->raw.size() != *bytes) return false;
  switch (t->dtype()) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16:
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64:
      break;
    default:
      return false;
  }
  for (int64_t i = 0; i < *n; ++i)
    if (t->elementAsDouble(static_cast<size_t>(i)) != x) return false;
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
      int through = passThroughInput(*n, ctx);
      if (through < 0) continue;
      // Extra outputs (Dropout's mask) must be unused.
      bool extraUsed = false;
      for (size_t i = 1; i < n->outputs().size(); ++i)
        if (Value* o = n->output(i)) extraUsed |= o->hasUses() || o->isGraphOutput();
      if (extraUsed) continue;
      Value* out = n->output(0);
      Value* in = n->input(static_cast<size_t>(through));
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
  /// The input whose value the node's output 0 equals, or -1.
  int passThroughInput(const Node& n, PassContext& ctx) const {
    if (isNoop(n, ctx)) return 0;
    const std::string& op = n.opType;
    if (n.inputs().size() != 2 || !n.input(1) || !stable_) return -1;
    auto neutral = [&](size_t constant, double value) {
      const Value* data = n.input(1 - constant);
      return !data->type().isNone() && sameKnownShape(data->type(), n.output(0)->type()) &&
             constantAllEqual(n.input(constant), value);
    };
    if (op == "Add") return neutral(1, 0) ? 0 : neutral(0, 0) ? 1 : -1;
    if (op == "Mul") return neutral(1, 1) ? 0 : neutral(0, 1) ? 1 : -1;
    if (op == "Sub") return neutral(1, 0) ? 0 : -1;
    if (op == "Div" || op == "Pow") return neutral(1, 1) ? 0 : -1;
    return -1;
  }

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
      if (!training || isConstantScalar(training, 0)) return true;
      // Training mode with ratio 0 keeps every element and scales by 1 / (1 - 0): the identity
      // (exporters write it for dropout(p=0.0, training=True)).
      return n.input(1) && isConstantScalar(n.input(1), 0);
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
