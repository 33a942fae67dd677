// infer_contrib.cpp: shape inference for ONNX Runtime's com.microsoft ops that have no ai.onnx
// relative in another family file: the transformer fusions (Attention, QAttention,
// MultiHeadAttention, the LayerNormalization fusions, EmbedLayerNormalization and its quantized
// form, the Gelu family, BiasAdd, RotaryEmbedding, GroupQueryAttention), the element-wise
// QLinear* ops, QLinearConcat, DynamicQuantizeLSTM, and a few more with simple shape rules
// (QLinearSoftmax, QLinearWhere, MulInteger, BiasSoftmax, BiasDropout, GroupNorm, SkipGroupNorm,
// Inverse, MurmurHash3, ExpandDims). The quantized forms of MatMul/Gemm/Conv/pools are in infer_nn.cpp, the
// com.microsoft QuantizeLinear/DequantizeLinear in infer_quantize.cpp. The spec is ONNX Runtime's
// docs/ContribOperators.md; tests/py/test_contrib_ops.py compares with ONNX Runtime.
#include <algorithm>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

/// Output 0 has input 0's type and shape.
void sameAsInput0(InferContext& c) {
  if (auto x = c.inputShape(0)) c.setOutput(0, c.inputDType(0), *x);
  else c.setOutputDType(0, c.inputDType(0));
}

/// SkipLayerNormalization / SkipSimplifiedLayerNormalization: output and input_skip_bias_sum
/// (output 3) like the input; mean and inv_std_var (outputs 1, 2) float, the input's shape with a
/// last dim of 1.
void skipLayerNorm(InferContext& c) {
  auto x = c.inputShape(0);
  DType dt = c.inputDType(0);
  for (size_t i : {size_t{0}, size_t{3}}) {
    if (i >= c.numOutputs()) continue;
    if (x) c.setOutput(i, dt, *x);
    else c.setOutputDType(i, dt);
  }
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (i >= c.numOutputs()) continue;
    if (!x || x->empty()) {
      c.setOutputDType(i, DType::Float);
      continue;
    }
    SymShape stats = *x;
    stats.back() = SymExpr(1);
    c.setOutput(i, DType::Float, stats);
  }
}

/// input [B, S, ...] -> [B, S, hidden]
void batchSeqHidden(InferContext& c, size_t out, const std::optional<SymShape>& x, SymDim hidden, DType dt) {
  if (!x || x->size() < 2) return c.setOutputDType(out, dt);
  c.setOutput(out, dt, {(*x)[0], (*x)[1], hidden});
}

/// Attention (weights input 1) and QAttention: output [B, S, v_hidden] with v_hidden from
/// qkv_hidden_sizes or a third of the weights' columns; present [2, B, N, P + S, H].
void attentionOf(InferContext& c, DType dt, size_t pastInput) {
  auto x = c.inputShape(0), w = c.inputShape(1);
  SymDim vHidden;
  int64_t heads = c.attrInt("num_heads", 0);
  if (auto sizes = c.attrInts("qkv_hidden_sizes"); sizes && sizes->size() == 3) {
    vHidden = SymExpr((*sizes)[2]);
  } else if (w && w->size() == 2 && (*w)[1] && (*w)[1]->isConstant()) {
    int64_t cols = *(*w)[1]->asConstant();
    if (cols % 3 != 0) c.fail(fmt::format("weights have {} columns, expected a multiple of 3", cols));
    vHidden = SymExpr(cols / 3);
  }
  if (x && x->size() != 3) c.fail(fmt::format("input must have rank 3, got {}", x->size()));
  batchSeqHidden(c, 0, x, vHidden, dt);
  if (!c.hasOutput(1)) return;
  auto past = c.inputShape(pastInput);
  if (!x || !past || past->size() != 5 || !vHidden || !vHidden->isConstant() || heads <= 0)
    return c.setOutputDType(1, dt);
  SymDim total = (*past)[3] && (*x)[1] ? SymDim(*(*past)[3] + *(*x)[1]) : std::nullopt;
  c.setOutput(1, dt, {SymExpr(2), (*x)[0], SymExpr(heads), total, SymExpr(*vHidden->asConstant() / heads)});
}
void attention(InferContext& c) { attentionOf(c, c.inputDType(0), 4); }
void qattention(InferContext& c) { attentionOf(c, c.inputDType(2), 8); }

/// MultiHeadAttention: output [B, S, v_hidden]: value [B, L, Dv] gives Dv, value [B, N, L, H]
/// gives N*H; packed query [B, S, N, 3, H] or packed key/value [B, L, N, 2, H] give N*H.
void multiHeadAttention(InferContext& c) {
  auto q = c.inputShape(0), k = c.inputShape(1), v = c.inputShape(2);
  DType dt = c.inputDType(0);
  int64_t heads = c.attrInt("num_heads", 0);
  SymDim hidden;
  auto product = [&](const SymDim& n, const SymDim& h) -> SymDim { return n && h ? SymDim(*n * *h) : std::nullopt; };
  if (q && q->size() == 5) hidden = product((*q)[2], (*q)[4]);
  else if (v && v->size() == 3) hidden = (*v)[2];
  else if (v && v->size() == 4) hidden = product((*v)[1], (*v)[3]);
  else if (!c.hasInput(2) && k && k->size() == 5) hidden = product((*k)[2], (*k)[4]);
  else if (!c.hasInput(2) && q && q->size() == 3) hidden = (*q)[2];
  batchSeqHidden(c, 0, q, hidden, dt);
  // present_key / present_value [B, N, P + L, H]
  for (size_t i : {size_t{1}, size_t{2}}) {
    auto past = c.inputShape(5 + i);  // past_key 6, past_value 7
    auto kv = i == 1 ? k : v;
    if (!c.hasOutput(i)) continue;
    if (!past || past->size() != 4 || !kv || kv->size() != 3 || heads <= 0) {
      c.setOutputDType(i, dt);
      continue;
    }
    SymDim total = (*past)[2] && (*kv)[1] ? SymDim(*(*past)[2] + *(*kv)[1]) : std::nullopt;
    c.setOutput(i, dt, {(*kv)[0], SymExpr(heads), total, (*past)[3]});
  }
}

/// GroupQueryAttention: output [B, S, num_heads * H], H from the query's hidden size (which packs
/// num_heads + 2 * kv_num_heads heads when key and value are absent); present_key/value
/// [B, kv_num_heads, max(P, total_sequence_length), H] (a fresh dim when that is data).
void groupQueryAttention(InferContext& c) {
  auto q = c.inputShape(0);
  DType dt = c.inputDType(0);
  int64_t heads = c.attrInt("num_heads", 0), kvHeads = c.attrInt("kv_num_heads", 0);
  SymDim hidden;
  if (q && q->size() == 3 && (*q)[2] && (*q)[2]->asConstant() && heads > 0) {
    int64_t d = *(*q)[2]->asConstant(), packed = c.hasInput(1) ? heads : heads + 2 * kvHeads;
    if (packed <= 0 || d % packed) c.fail(fmt::format("query hidden size {} is not a multiple of {} heads", d, packed));
    hidden = SymExpr(d / packed * heads);
  }
  batchSeqHidden(c, 0, q, hidden, dt);
  // present_key/value [B, kv_num_heads, max(past length, total_sequence_length), H]
  SymDim len;
  auto past = c.inputShape(3);
  auto total = c.inputInts(6);
  if (total && total->size() == 1 && (!c.hasInput(3) || (past && past->size() == 4 && (*past)[2] && (*past)[2]->asConstant())))
    len = SymExpr(std::max((*total)[0], c.hasInput(3) ? *(*past)[2]->asConstant() : 0));
  else
    len = c.freshDim();
  SymDim head = hidden && heads > 0 ? SymDim(SymExpr(*hidden->asConstant() / heads)) : std::nullopt;
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (i >= c.numOutputs()) continue;
    if (q && q->size() == 3 && kvHeads > 0) c.setOutput(i, dt, {(*q)[0], SymExpr(kvHeads), len, head});
    else c.setOutputDType(i, dt);
  }
}

/// EmbedLayerNormalization: output and embedding_sum [B, S, hidden] of the word embedding's type
/// (hidden from it), mask_index [B] int32. QEmbedLayerNormalization: float output.
void embedLayerNormOf(InferContext& c, DType dt) {
  auto ids = c.inputShape(0), word = c.inputShape(2);
  SymDim hidden = word && word->size() == 2 ? (*word)[1] : std::nullopt;
  if (ids && ids->size() != 2) c.fail(fmt::format("input_ids must have rank 2, got {}", ids->size()));
  batchSeqHidden(c, 0, ids, hidden, dt);
  if (ids) c.setOutput(1, DType::Int32, {(*ids)[0]});
  else c.setOutputDType(1, DType::Int32);
  if (c.numOutputs() > 2) batchSeqHidden(c, 2, ids, hidden, dt);
}
void embedLayerNorm(InferContext& c) { embedLayerNormOf(c, c.inputDType(2)); }
void qembedLayerNorm(InferContext& c) { embedLayerNormOf(c, DType::Float); }

/// QLinearAdd / QLinearMul: A (input 0) and B (input 3) broadcast; A's type.
void qlinearBinary(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(3);
  if (!a || !b) return c.setOutputDType(0, c.inputDType(0));
  c.setOutput(0, c.inputDType(0), c.broadcast(*a, *b));
}

/// QLinearConcat: inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples.
void qlinearConcat(InferContext& c) {
  DType dt = c.inputDType(2);
  if (c.numInputs() < 5 || (c.numInputs() - 2) % 3 != 0)
    c.fail(fmt::format("has {} inputs, expected 2 + 3 per concatenated tensor", c.numInputs()));
  std::optional<SymShape> out;
  int64_t axis = c.attrInt("axis", 0);
  size_t a = 0;
  for (size_t i = 2; i < c.numInputs(); i += 3) {
    auto s = c.inputShape(i);
    if (!s) return c.setOutputDType(0, dt);
    if (!out) {
      out = *s;
      a = static_cast<size_t>(c.normalizeAxis(axis, static_cast<int64_t>(s->size())));
      continue;
    }
    if (s->size() != out->size()) c.fail("inputs must have the same rank");
    (*out)[a] = (*out)[a] && (*s)[a] ? SymDim(*(*out)[a] + *(*s)[a]) : std::nullopt;
  }
  c.setOutput(0, dt, *out);
}

/// Broadcast of the inputs listed, with type `dt`.
void broadcastOf(InferContext& c, std::initializer_list<size_t> inputs, DType dt) {
  std::optional<SymShape> out;
  for (size_t i : inputs) {
    auto s = c.inputShape(i);
    if (!s) return c.setOutputDType(0, dt);
    out = out ? c.broadcast(*out, *s) : *s;
  }
  c.setOutput(0, dt, *out);
}
void qlinearWhere(InferContext& c) { broadcastOf(c, {0, 1, 4}, c.inputDType(1)); }
void mulInteger(InferContext& c) { broadcastOf(c, {0, 2}, DType::Int32); }

/// BiasDropout: output like data, mask bool of its shape. SkipGroupNorm: Y and S like X.
void likeInput0(InferContext& c, size_t out, DType dt) {
  if (out >= c.numOutputs()) return;
  if (auto x = c.inputShape(0)) c.setOutput(out, dt, *x);
  else c.setOutputDType(out, dt);
}
void biasDropout(InferContext& c) {
  likeInput0(c, 0, c.inputDType(0));
  likeInput0(c, 1, DType::Bool);
}
void skipGroupNorm(InferContext& c) {
  likeInput0(c, 0, c.inputDType(0));
  likeInput0(c, 1, c.inputDType(0));
}

/// MurmurHash3: X's shape; uint32 when `positive`, else int32.
void murmurHash3(InferContext& c) { likeInput0(c, 0, c.attrInt("positive", 1) ? DType::UInt32 : DType::Int32); }

/// ExpandDims: X with a 1 inserted at the (constant) axis input.
void expandDims(InferContext& c) {
  auto x = c.inputShape(0);
  auto axis = c.inputInts(1);
  if (!x || !axis || axis->size() != 1) return c.setOutputDType(0, c.inputDType(0));
  auto rank = static_cast<int64_t>(x->size());
  int64_t a = (*axis)[0] < 0 ? (*axis)[0] + rank + 1 : (*axis)[0];
  if (a < 0 || a > rank) c.fail(fmt::format("axis {} is out of range for rank {}", (*axis)[0], rank));
  SymShape out = *x;
  out.insert(out.begin() + a, SymExpr(1));
  c.setOutput(0, c.inputDType(0), out);
}

/// DynamicQuantizeLSTM: X [S, B, I], W [D, I, 4H]; Y [S, D, B, H], Y_h and Y_c [D, B, H], float.
void dynamicQuantizeLstm(InferContext& c) {
  auto x = c.inputShape(0), w = c.inputShape(1);
  int64_t hidden = c.attrInt("hidden_size", 0);
  SymDim h = hidden > 0 ? SymDim(SymExpr(hidden)) : std::nullopt;
  SymDim dirs = w && w->size() == 3 ? (*w)[0] : std::nullopt;
  if (!dirs) {
    std::string d = c.attrString("direction", "forward");
    dirs = SymExpr(d == "bidirectional" ? 2 : 1);
  }
  if (!x || x->size() != 3) {
    for (size_t i = 0; i < 3; ++i) c.setOutputDType(i, DType::Float);
    return;
  }
  c.setOutput(0, DType::Float, {(*x)[0], dirs, (*x)[1], h});
  c.setOutput(1, DType::Float, {dirs, (*x)[1], h});
  c.setOutput(2, DType::Float, {dirs, (*x)[1], h});
}

}  // namespace

void registerInferContrib(InferRegistry& r) {
  const std::string_view ms = "com.microsoft";
  for (std::string_view op : {"Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasAdd", "RotaryEmbedding",
                              "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "BiasSoftmax", "Inverse",
                              "GroupNorm"})
    r.add({ms, op, 1, sameAsInput0});
  r.add({ms, "QLinearWhere", 1, qlinearWhere});
  r.add({ms, "MulInteger", 1, mulInteger});
  r.add({ms, "BiasDropout", 1, biasDropout});
  r.add({ms, "SkipGroupNorm", 1, skipGroupNorm});
  r.add({ms, "MurmurHash3", 1, murmurHash3});
  r.add({ms, "ExpandDims", 1, expandDims});
  r.add({ms, "SkipLayerNormalization", 1, skipLayerNorm});
  r.add({ms, "SkipSimplifiedLayerNormalization", 1, skipLayerNorm});
  r.add({ms, "Attention", 1, attention});
  r.add({ms, "QAttention", 1, qattention});
  r.add({ms, "MultiHeadAttention", 1, multiHeadAttention});
  r.add({ms, "GroupQueryAttention", 1, groupQueryAttention});
  r.add({ms, "EmbedLayerNormalization", 1, embedLayerNorm});
  r.add({ms, "QEmbedLayerNormalization", 1, qembedLayerNorm});
  r.add({ms, "QLinearAdd", 1, qlinearBinary});
  r.add({ms, "QLinearMul", 1, qlinearBinary});
  r.add({ms, "QLinearConcat", 1, qlinearConcat});
  r.add({ms, "DynamicQuantizeLSTM", 1, dynamicQuantizeLstm});
}

}  // namespace onnxtool
