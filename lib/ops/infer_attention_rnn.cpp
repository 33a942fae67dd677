// infer_attention_rnn.cpp: shape inference for recurrent and attention ops: RNN, GRU, LSTM,
// Attention, RotaryEmbedding, LinearAttention, CausalConvWithState, and the ai.onnx.preview ops
// FlexAttention and (ai.onnx.preview.training) Adagrad, Momentum, Adam, Gradient.
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

SymDim dimAt(const std::optional<SymShape>& s, size_t i) { return s && i < s->size() ? (*s)[i] : std::nullopt; }

/// d / n when n > 0 and the division is exact symbolically (or d is a multiple of n).
SymDim divide(InferContext& c, const SymDim& d, int64_t n, const char* what) {
  if (!d || n <= 0) return std::nullopt;
  if (auto v = d->asConstant(); v && *v % n != 0) c.fail(fmt::format("{} ({}) is not divisible by {}", what, *v, n));
  return SymExpr::exactDiv(*d, SymExpr(n));
}

/// RNN, GRU and LSTM at every version: Y, Y_h (and LSTM's Y_c) from X's layout and hidden_size.
template <int Gates>
void recurrent(InferContext& c) {
  auto x = c.inputShape(0), w = c.inputShape(1), r = c.inputShape(2);
  bool batchFirst = c.sinceVersion() >= 14 && c.attrInt("layout", 0) != 0;
  if (x && x->size() != 3) c.fail(fmt::format("X must have rank 3, got {}", x->size()));
  SymDim seq = dimAt(x, batchFirst ? 1 : 0), batch = dimAt(x, batchFirst ? 0 : 1);
  SymDim dirs = c.attrString("direction", "forward") == "bidirectional" ? SymDim(SymExpr(2)) : SymDim(SymExpr(1));
  SymDim hidden;
  if (const Attribute* h = c.attr("hidden_size")) hidden = SymExpr(h->i);
  else if (SymDim rd = dimAt(r, 2)) hidden = rd;
  else hidden = divide(c, dimAt(w, 1), Gates, "W's dimension 1");
  DType dt = c.inputDType(0);
  if (batchFirst) {
    c.setOutput(0, dt, {batch, seq, dirs, hidden});
    for (size_t i = 1; i < c.numOutputs(); ++i) c.setOutput(i, dt, {batch, dirs, hidden});
  } else {
    c.setOutput(0, dt, {seq, dirs, batch, hidden});
    for (size_t i = 1; i < c.numOutputs(); ++i) c.setOutput(i, dt, {dirs, batch, hidden});
  }
}

/// Attention 23+: Q, K, V are 4-D (B, heads, S, head_size) or 3-D (B, S, heads * head_size).
void attention(InferContext& c) {
  auto q = c.inputShape(0), k = c.inputShape(1), v = c.inputShape(2);
  auto pastK = c.hasInput(4) ? c.inputShape(4) : std::nullopt;
  auto pastV = c.hasInput(5) ? c.inputShape(5) : std::nullopt;
  DType dt = c.inputDType(0);
  int64_t qHeads = c.attrInt("q_num_heads", 0), kvHeads = c.attrInt("kv_num_heads", 0);
  for (const auto* s : {&q, &k, &v})
    if (*s && (*s)->size() != 3 && (*s)->size() != 4)
      c.fail(fmt::format("Q, K and V must have rank 3 or 4, got {}", (*s)->size()));
  SymDim batch = dimAt(q, 0), qSeq, qHeadsDim = qHeads ? SymDim(SymExpr(qHeads)) : std::nullopt;
  if (q && q->size() == 4) {
    qHeadsDim = (*q)[1];
    qSeq = (*q)[2];
  } else if (q) {
    qSeq = (*q)[1];
  }
  // K/V: heads, sequence length and head sizes.
  auto split = [&](const std::optional<SymShape>& s, SymDim& seq, SymDim& head) {
    if (!s) return;
    if (s->size() == 4) {
      seq = (*s)[2];
      head = (*s)[3];
    } else {
      seq = (*s)[1];
      head = divide(c, (*s)[2], kvHeads, "the K/V hidden size");
    }
  };
  SymDim kSeq, kHead, vSeq, vHead;
  split(k, kSeq, kHead);
  split(v, vSeq, vHead);
  SymDim kvHeadsDim = kvHeads ? SymDim(SymExpr(kvHeads)) : std::nullopt;
  if (k && k->size() == 4) kvHeadsDim = (*k)[1];
  if (!kHead && q && q->size() == 4) kHead = (*q)[3];
  if (!kHead && q && q->size() == 3) kHead = divide(c, (*q)[2], qHeads, "the Q hidden size");
  SymDim past = pastK ? dimAt(pastK, 2) : SymDim(SymExpr(0));
  SymDim total = past && kSeq ? SymDim(*past + *kSeq) : std::nullopt;
  if (q && q->size() == 4) {
    c.setOutput(0, dt, {batch, qHeadsDim, qSeq, vHead});
  } else if (q) {
    c.setOutput(0, dt, {batch, qSeq, qHeadsDim && vHead ? SymDim(*qHeadsDim * *vHead) : std::nullopt});
  }
  if (c.hasOutput(1)) c.setOutput(1, c.inputDType(1), {batch, kvHeadsDim, total, kHead});
  SymDim pastVLen = pastV ? dimAt(pastV, 2) : SymDim(SymExpr(0));
  SymDim totalV = pastVLen && vSeq ? SymDim(*pastVLen + *vSeq) : std::nullopt;
  if (c.hasOutput(2)) c.setOutput(2, c.inputDType(2), {batch, kvHeadsDim, totalV, vHead});
  if (c.hasOutput(3)) c.setOutput(3, dt, {batch, qHeadsDim, qSeq, total});
}

void rotaryEmbedding(InferContext& c) {
  if (auto x = c.inputShape(0)) c.setOutput(0, c.inputDType(0), *x);
}

/// LinearAttention 27: query/key/value (B, T, H*D); output (B, T, Hq*Dv), state (B, Hkv, Dk, Dv).
void linearAttention(InferContext& c) {
  auto q = c.inputShape(0), v = c.inputShape(2);
  int64_t hq = c.attrInt("q_num_heads", 0), hkv = c.attrInt("kv_num_heads", 0);
  SymDim dk = divide(c, dimAt(q, 2), hq, "the query hidden size");
  SymDim dv = divide(c, dimAt(v, 2), hkv, "the value hidden size");
  DType dt = c.inputDType(0);
  c.setOutput(0, dt, {dimAt(q, 0), dimAt(q, 1), dv && hq ? SymDim(*dv * SymExpr(hq)) : std::nullopt});
  if (c.hasOutput(1)) c.setOutput(1, dt, {dimAt(q, 0), hkv ? SymDim(SymExpr(hkv)) : std::nullopt, dk, dv});
}

/// CausalConvWithState 27: input (B, C, L), weight (C, 1, k); state (B, C, k - 1).
void causalConvWithState(InferContext& c) {
  auto x = c.inputShape(0), w = c.inputShape(1);
  DType dt = c.inputDType(0);
  if (x) c.setOutput(0, dt, *x);
  SymDim k = dimAt(w, 2);
  if (c.hasOutput(1)) c.setOutput(1, dt, {dimAt(x, 0), dimAt(x, 1), k ? SymDim(*k - SymExpr(1)) : std::nullopt});
}

/// FlexAttention (preview): Q (B, Hq, L, E), V (B, Hkv, S, Ev) give Y (B, Hq, L, Ev).
void flexAttention(InferContext& c) {
  auto q = c.inputShape(0), v = c.inputShape(2);
  if (!q) return;
  c.setOutput(0, c.inputDType(0), {dimAt(q, 0), dimAt(q, 1), dimAt(q, 2), dimAt(v, 3)});
}

/// Adagrad/Momentum/Adam: inputs R, T, then blocks of n tensors (X, G, and one or two state
/// blocks); output block 0 is like X, the later ones like the state blocks (input block k+1).
void optimizer(InferContext& c) {
  size_t blocks = c.node().opType == "Adam" ? 4 : 3;
  if (c.numInputs() <= 2 || (c.numInputs() - 2) % blocks) c.fail("inputs do not form X, G and state blocks");
  size_t n = (c.numInputs() - 2) / blocks;
  for (size_t o = 0; o < c.numOutputs(); ++o) {
    size_t block = o / n, j = o % n;
    size_t in = 2 + (block == 0 ? 0 : block + 1) * n + j;
    if (auto s = c.inputShape(in)) c.setOutput(o, c.inputDType(in), *s);
  }
}

/// Gradient (preview.training): output i is d y / d xs[i], shaped like the value named xs[i].
void gradient(InferContext& c) {
  auto xs = c.attr("xs");
  if (!xs || xs->type != AttrType::Strings) c.fail("attribute 'xs' must list the differentiated values");
  for (size_t i = 0; i < xs->strings.size() && i < c.numOutputs(); ++i) {
    const Value* x = c.node().graph() ? c.node().graph()->find(xs->strings[i]) : nullptr;
    if (x && x->type().isTensor()) c.setOutputType(i, x->type());
  }
}

}  // namespace

void registerInferAttentionRnn(InferRegistry& r) {
  r.add({"", "RNN", 1, recurrent<1>});
  r.add({"", "GRU", 1, recurrent<3>});
  r.add({"", "LSTM", 1, recurrent<4>});
  r.add({"", "Attention", 1, attention});
  r.add({"", "RotaryEmbedding", 1, rotaryEmbedding});
  r.add({"", "LinearAttention", 1, linearAttention});
  r.add({"", "CausalConvWithState", 1, causalConvWithState});
  r.add({"ai.onnx.preview", "FlexAttention", 1, flexAttention});
  for (std::string_view op : {"Adagrad", "Momentum", "Adam"}) r.add({"ai.onnx.preview.training", op, 1, optimizer});
  r.add({"ai.onnx.preview.training", "Gradient", 1, gradient});
}

}  // namespace onnxtool
