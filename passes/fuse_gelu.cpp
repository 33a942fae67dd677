// fuse_gelu.cpp: `fuse-gelu`: the GELU forms PyTorch exports become Gelu (opset >= 20):
//   erf:  x * 0.5 * (1 + Erf(x / 1.4142135 | x * 0.70710678))           -> Gelu(x)
//   tanh: x * 0.5 * (1 + Tanh(0.7978846 * (x + 0.044715 * x^3)))        -> Gelu<approximate="tanh">(x)
// with x^3 as Pow(x, 3) or x * (x * x), and the 0.5 applied to x, to (1 + ...), or to the
// product, and 1 + t as Add or two-input Sum. Constants may be initializers or Constant nodes, on
// either side of Add/Mul.
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

bool isOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

/// Whether `v` is x^3 computed as Pow(x, 3), x * (x * x) or (x * x) * x; collects its nodes.
bool isCube(Value* v, Value* x, std::vector<Node*>& nodes) {
  Node* n = v->producer();
  if (isOp(n, "Pow") && n->input(0) == x && isNearScalar(n->input(1), 3.0)) {
    nodes.push_back(n);
    return true;
  }
  if (!isOp(n, "Mul")) return false;
  Value* sq = otherOperand(n, x);
  Node* s = sq ? sq->producer() : nullptr;
  if (!isOp(s, "Mul") || s->input(0) != x || s->input(1) != x || !hasSingleUse(sq)) return false;
  nodes.push_back(s);
  nodes.push_back(n);
  return true;
}

class FuseGeluPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    if (ctx.opset("") < 20) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* n : order) {
      if (gone.count(n) || !(isOp(n, "Erf") || isOp(n, "Tanh"))) continue;
      std::vector<Node*> pattern;
      Value* x = n->opType == "Erf" ? matchErf(*n, pattern) : matchTanh(*n, pattern);
      if (!x || !isFloatTensor(x) || !matchTail(n->output(0), x, pattern) || !allInGraph(pattern, g) ||
          !keepsShapeOf(pattern.back()->output(0), x))
        continue;
      bool tanh = n->opType == "Tanh";
      if (!ctx.tryRewrite(std::string("fuse Gelu (") + (tanh ? "tanh" : "erf") + ") around " + n->opType + " '" +
                          n->displayName() + "'"))
        break;
      Node* gelu = replaceWithNode(g, *pattern.front(), *pattern.back(), "Gelu", {x});
      if (!gelu) continue;
      if (tanh) gelu->setAttr(Attribute::ofString("approximate", "tanh"));
      for (Node* p : pattern) gone.insert(p);
      removeDeadPattern(pattern);
      changed = true;
    }
    return changed;
  }

 private:
  /// Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2))): returns x.
  static Value* matchErf(Node& erf, std::vector<Node*>& pattern) {
    Value* u = erf.input(0);
    Node* p = u ? u->producer() : nullptr;
    if (!hasSingleUse(u) || !p) return nullptr;
    Value* x = nullptr;
    if (isOp(p, "Div") && isNearScalar(p->input(1), 1.4142135623730951))
      x = p->input(0);
    else if (isOp(p, "Mul"))
      x = operandBesideScalar(p, 0.7071067811865476);
    if (!x) return nullptr;
    pattern = {p, &erf};
    return x;
  }

  /// Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)): returns x.
  static Value* matchTanh(Node& tanh, std::vector<Node*>& pattern) {
    Value* u = tanh.input(0);
    Node* scale = u ? u->producer() : nullptr;
    if (!hasSingleUse(u) || !isOp(scale, "Mul")) return nullptr;
    Value* inner = operandBesideScalar(scale, 0.7978845608028654);
    Node* add = inner ? inner->producer() : nullptr;
    if (!hasSingleUse(inner) || !isOp(add, "Add")) return nullptr;
    for (int i = 0; i < 2; ++i) {
      Value* x = add->input(static_cast<size_t>(i));
      Value* c = add->input(static_cast<size_t>(1 - i));
      Node* mulC = c ? c->producer() : nullptr;
      if (!x || !hasSingleUse(c) || !isOp(mulC, "Mul")) continue;
      Value* cube = operandBesideScalar(mulC, 0.044715);
      std::vector<Node*> nodes;
      if (!cube || !hasSingleUse(cube) || !isCube(cube, x, nodes)) continue;
      pattern = nodes;
      pattern.insert(pattern.end(), {mulC, add, scale, &tanh});
      return x;
    }
    return nullptr;
  }

  /// (1 + t) then the products with x and 0.5 in any of the exported orders; appends the nodes,
  /// the last being the one whose output the Gelu replaces.
  static bool matchTail(Value* t, Value* x, std::vector<Node*>& pattern) {
    Node* add = soleUser(t);
    // ONNX's own Gelu function body writes 1 + t as a two-input Sum.
  bool plus = isOp(add, "Add") || (isOp(add, "Sum") && add->inputs().size() == 2);
  if (!plus || operandBesideScalar(add, 1.0) != t) return false;
    Value* a = add->output(0);
    Node* m1 = soleUser(a);
    if (!isOp(m1, "Mul")) return false;
    Value* o = otherOperand(m1, a);
    if (!o || o == a) return false;
    std::vector<Node*> tail = {add};
    if (o == x) {  // (x * a) * 0.5
      Node* m2 = soleUser(m1->output(0));
      if (!isOp(m2, "Mul") || operandBesideScalar(m2, 0.5) != m1->output(0)) return false;
      tail.insert(tail.end(), {m1, m2});
    } else if (isNearScalar(o, 0.5)) {  // x * (a * 0.5)
      Node* m2 = soleUser(m1->output(0));
      if (!isOp(m2, "Mul") || otherOperand(m2, m1->output(0)) != x) return false;
      tail.insert(tail.end(), {m1, m2});
    } else {  // (x * 0.5) * a
      Node* h = o->producer();
      if (!isOp(h, "Mul") || !hasSingleUse(o) || operandBesideScalar(h, 0.5) != x) return false;
      tail.insert(tail.end(), {h, m1});
    }
    pattern.insert(pattern.end(), tail.begin(), tail.end());
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseGeluPass(const PassOptions&) { return std::make_unique<FuseGeluPass>(); }

}  // namespace onnxtool
