// fuse_attention.cpp: `fuse-attention`: scaled dot-product attention on 4-D [B, heads, S, D]
// tensors,
//   MatMul(Softmax(MatMul(Q, K^T) (* s | / s)? (+ mask)?, axis=-1), V)
// becomes Attention(Q, K, V, mask) with `scale` = s (1/s for Div, 1 without) (opset >= 23). Q and
// K^T may each be scaled by a scalar Mul first (torch's scaled_dot_product_attention export).
// K^T is usually a Transpose of the projected keys: when only the pattern reads it, its perm is
// composed with the swap of the last two axes; otherwise a Transpose(perm=[0,1,3,2]) is added.
// Shapes must show Q, K, V share batch and heads and that an additive mask's last dim is the
// key length (Attention pads a shorter mask with "masked out", where Add would broadcast). After a
// Reshape to a computed shape inference often knows only fresh symbols, so dims it cannot relate
// are taken as equal unless static values differ or a static 1 shows broadcasting: a mismatch at
// run time then makes Attention fail instead of computing something else. The mask's last dim
// must be the key length or a symbol (the model's "seq" or one inference made), never unknown or 1.
// A mask broadcast along the query axis ([B, 1, 1, S], BERT's padding mask) is expanded to Q's
// length first (Shape, Concat, Expand), since ONNX Runtime accepts no broadcasting there.
// A boolean mask applied with Where(keep, scores, fill) or Where(masked, fill, scores), fill <= -1e4,
// becomes Attention's boolean mask. One difference remains by design: a row masked entirely gives
// NaN (-inf) or the mean of V (finite fill) from Softmax, and zeros from Attention.
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

bool isOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

/// Whether dims a and b may be equal at run time and cannot be a broadcast of one to the other.
bool mayBeEqual(const Dim& a, const Dim& b) {
  if (a.isValue() && b.isValue()) return a.value == b.value;
  return !(a.isValue() && a.value == 1) && !(b.isValue() && b.value == 1);
}

/// A Where fill at or below this masks a logit out as surely as -inf: exp(-1e4) is 0 in float.
constexpr double kMaskFill = -1e4;

const std::vector<Dim>* dims4(const Value* v) {
  if (rankOf(v) != 4 || !isFloatTensor(v)) return nullptr;
  return &v->type().shape.dims;
}

class FuseAttentionPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    if (ctx.opset("") < 23) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* sm : order) {
      if (gone.count(sm) || !isOp(sm, "Softmax")) continue;
      Match m;
      if (!match(*sm, m) || !allInGraph(m.pattern, g)) continue;
      if (!ctx.tryRewrite("fuse Attention around Softmax '" + sm->displayName() + "'")) break;
      // K from K^T: compose with the Transpose producing K^T when nothing else reads it.
      Value* kt = m.kt;
      Node* tr = kt->producer();
      std::vector<int64_t> perm = {0, 1, 3, 2};
      Value* kIn = kt;
      if (isOp(tr, "Transpose") && hasSingleUse(kt) && tr->graph() == &g) {
        std::vector<int64_t> p1 = tr->attrInts("perm", {3, 2, 1, 0});
        if (p1.size() == 4) {
          std::vector<int64_t> c(4);
          for (size_t i = 0; i < 4; ++i) c[i] = p1[static_cast<size_t>(perm[i])];
          perm = c;
          kIn = tr->input(0);
          m.pattern.push_back(tr);
        }
      }
      Value* k = kIn;
      if (perm != std::vector<int64_t>{0, 1, 2, 3}) {
        Node* t = g.addNode("Transpose", {kIn}, {g.uniqueName(kt->name() + "_untransposed")}, "", m.out);
        t->name = fusedNodeName(g, *m.scores, "Transpose");
        t->setAttr(Attribute::ofInts("perm", perm));
        k = t->output(0);
      }
      std::vector<Value*> inputs = {m.q, k, m.out->input(1)};
      if (m.mask) {
        Value* mask = m.mask;
        if (m.negateMask) {
          Node* no = g.addNode("Not", {mask}, {g.uniqueName(mask->name() + "_attend")}, "", m.out);
          no->name = fusedNodeName(g, *m.scores, "Not");
          no->output(0)->setType(mask->type());
          mask = no->output(0);
        }
        inputs.push_back(expandedMask(g, m, mask));
      }
      Node* att = replaceWithNode(g, *m.scores, *m.out, "Attention", inputs);
      if (!att) continue;  // cannot happen: the fused node is never a graph input or output
      att->setAttr(Attribute::ofFloat("scale", static_cast<float>(m.scale)));
      for (Node* p : m.pattern) gone.insert(p);
      removeDeadPattern(m.pattern);
      changed = true;
    }
    return changed;
  }

 private:
  struct Match {
    Node* scores = nullptr;  ///< MatMul(Q, K^T)
    Value* q = nullptr;      ///< Q and K^T: the MatMul's operands, or what a scalar Mul on them scales
    Value* kt = nullptr;
    Node* out = nullptr;  ///< MatMul(probs, V)
    Value* mask = nullptr;    ///< additive (float) or boolean (true = attend)
    bool negateMask = false;  ///< a boolean mask that says where not to attend
    double scale = 1;
    std::vector<Node*> pattern;
  };

  /// The mask, expanded along the query axis when shapes do not show it has q_sequence_length
  /// there: the spec lets it broadcast, but ONNX Runtime requires dim -2 to equal Q's. Expand to
  /// [Sq, 1] (Sq read from Q at run time) broadcasts only that axis.
  static Value* expandedMask(Graph& g, const Match& m, Value* mask) {
    Value* q = m.q;
    const auto& md = m.mask->type().shape.dims;
    if (md.size() >= 2 && sameDim(md[md.size() - 2], q->type().shape.dims[2])) return mask;
    Node* shape = g.addNode("Shape", {q}, {g.uniqueName(m.mask->name() + "_q_len")}, "", m.out);
    shape->name = fusedNodeName(g, *m.scores, "Shape");
    shape->setAttr(Attribute::ofInt("start", 2));
    shape->setAttr(Attribute::ofInt("end", 3));
    Value* one = addInitializer(g, Tensor::fromInt64s("", {1}, {1}), m.mask->name() + "_one");
    Node* target = g.addNode("Concat", {shape->output(0), one}, {g.uniqueName(m.mask->name() + "_q_shape")}, "", m.out);
    target->name = fusedNodeName(g, *m.scores, "Concat");
    target->setAttr(Attribute::ofInt("axis", 0));
    Node* expand =
        g.addNode("Expand", {mask, target->output(0)}, {g.uniqueName(m.mask->name() + "_expanded")}, "", m.out);
    expand->name = fusedNodeName(g, *m.scores, "Expand");
    return expand->output(0);
  }

  /// Scores (MatMul output), optionally scaled by a scalar Mul/Div: fills scores, scale, pattern.
  static bool matchScaled(Value* v, Match& m) {
    Node* p = v->producer();
    if (isOp(p, "Mul") || isOp(p, "Div")) {
      Value* s = p->opType == "Div" ? p->input(0) : nullptr;
      std::optional<double> c;
      if (p->opType == "Div") {
        c = scalarOf(p->input(1));
        if (c && *c != 0) c = 1.0 / *c;
      } else {
        for (size_t i = 0; i < 2 && !s; ++i)
          if ((c = scalarOf(p->input(i)))) s = p->input(1 - i);
      }
      if (!s || !c || *c == 0 || !hasSingleUse(s)) return false;
      m.scale = *c;
      m.pattern.push_back(p);
      p = s->producer();
    }
    if (!isOp(p, "MatMul")) return false;
    m.scores = p;
    m.pattern.push_back(p);
    m.q = unscaled(p->input(0), m);
    m.kt = unscaled(p->input(1), m);
    return m.q && m.kt;
  }

  /// torch's scaled_dot_product_attention export scales Q and K^T by sqrt(scale) each before the
  /// MatMul: a scalar Mul read only by the MatMul is folded into the scale.
  static Value* unscaled(Value* v, Match& m) {
    Node* p = v ? v->producer() : nullptr;
    if (!isOp(p, "Mul") || !hasSingleUse(v)) return v;
    for (size_t i = 0; i < 2; ++i)
      if (auto c = scalarOf(p->input(i)); c && *c != 0 && p->input(1 - i)) {
        m.scale *= *c;
        m.pattern.push_back(p);
        return p->input(1 - i);
      }
    return v;
  }

  static bool match(Node& sm, Match& m) {
    int64_t axis = sm.attrInt("axis", -1);
    Value* logits = sm.input(0);
    if ((axis != -1 && axis != 3) || !hasSingleUse(logits)) return false;
    m.pattern = {&sm};
    Node* add = logits->producer();
    bool scaled = false;
    if (isOp(add, "Add")) {
      for (size_t i = 0; i < 2 && !scaled; ++i) {
        Match t = m;
        Value* s = add->input(i);
        if (s && s != add->input(1 - i) && hasSingleUse(s) && matchScaled(s, t)) {
          t.mask = add->input(1 - i);
          t.pattern.push_back(add);
          m = t;
          scaled = true;
        }
      }
    }
    if (isOp(add, "Where") && add->input(0) && add->input(0)->type().dtype() == DType::Bool) {
      // Where(keep, scores, fill) or Where(masked, fill, scores) with a fill that no logit can
      // compete with: a boolean mask (Not(masked) when the scores come second).
      for (size_t i = 1; i < 3 && !scaled; ++i) {
        Match t = m;
        Value* s = add->input(i);
        auto fill = scalarOf(add->input(3 - i));
        if (s && fill && *fill <= kMaskFill && hasSingleUse(s) && matchScaled(s, t)) {
          t.mask = add->input(0);
          t.negateMask = i == 2;
          t.pattern.push_back(add);
          Node* no = t.mask->producer();
          if (t.negateMask && isOp(no, "Not")) {  // read Not's input; the Not stays if others read it
            t.mask = no->input(0);
            t.negateMask = false;
            t.pattern.push_back(no);
          }
          m = t;
          scaled = true;
        }
      }
    }
    if (!scaled && !matchScaled(logits, m)) return false;
    Node* out = soleUser(sm.output(0));
    if (!isOp(out, "MatMul") || out->input(0) != sm.output(0)) return false;
    m.out = out;
    m.pattern.push_back(out);
    // Shapes: Q [B,H,Sq,D], K^T [B,H,D,Skv], V [B,H,Skv,Dv], all of one float type.
    Value* q = m.q;
    Value* kt = m.kt;
    Value* v = out->input(1);
    const auto* qd = dims4(q);
    const auto* kd = dims4(kt);
    const auto* vd = dims4(v);
    if (!qd || !kd || !vd) return false;
    if (q->type().elemType != kt->type().elemType || q->type().elemType != v->type().elemType) return false;
    for (size_t i = 0; i < 2; ++i)
      if (!mayBeEqual((*qd)[i], (*kd)[i]) || !mayBeEqual((*qd)[i], (*vd)[i])) return false;
    if (!mayBeEqual((*qd)[3], (*kd)[2]) || !mayBeEqual((*kd)[3], (*vd)[2])) return false;
    if (m.mask) {
      bool boolMask = m.mask->type().dtype() == DType::Bool;
      if (!boolMask && (!isFloatTensor(m.mask) || m.mask->type().elemType != q->type().elemType)) return false;
      int64_t r = rankOf(m.mask);
      if (r < 1 || r > 4) return false;
      const auto& md = m.mask->type().shape.dims;
      const Dim* full[4] = {&(*qd)[0], &(*qd)[1], &(*qd)[2], &(*kd)[3]};
      for (size_t i = 0; i < md.size(); ++i) {
        const Dim& want = *full[4 - md.size() + i];
        if (sameDim(md[i], want)) continue;
        if (i + 1 == md.size()) {
          if (!md[i].isParam() || !mayBeEqual(md[i], want)) return false;
        } else if (!(md[i].isValue() && md[i].value == 1) && !mayBeEqual(md[i], want)) {
          return false;
        }
      }
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseAttentionPass(const PassOptions&) { return std::make_unique<FuseAttentionPass>(); }

}  // namespace onnxtool
