// infer_nn.cpp: shape inference for neural-network ops: MatMul, Gemm, Conv, ConvTranspose and
// their integer/quantized/deformable forms, MaxPool/AveragePool/LpPool, Global*Pool, MaxUnpool,
// RoI pooling, normalizations, Reduce* and ArgMax/ArgMin, losses, Resize/Upsample, GridSample,
// AffineGrid, Col2Im and NonMaxSuppression; and ONNX Runtime's com.microsoft forms of these
// (FusedConv, FusedGemm, FusedMatMul, QGemm, QLinearConv, DynamicQuantizeMatMul,
// MatMulIntegerToFloat, MatMulInteger16, MatMulNBits, GemmFastGelu, CDist, QLinearAveragePool,
// QLinearGlobalAveragePool).
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

/// Two dims that must agree: fails when both are different constants.
void requireEqual(InferContext& c, const SymDim& a, const SymDim& b, const char* what) {
  if (a && b && a->isConstant() && b->isConstant() && *a != *b)
    c.fail(fmt::format("{}, {} vs {}", what, a->str(), b->str()));
}

/// MatMul and its quantized forms: A is input `ia`, B input `ib`, the output has type `dt`.
void matmulOf(InferContext& c, size_t ia, size_t ib, DType dt) {
  auto a = c.inputShape(ia), b = c.inputShape(ib);
  if (!a || !b) return c.setOutputDType(0, dt);
  if (a->empty() || b->empty()) c.fail("inputs must have rank >= 1");
  SymShape x = *a, y = *b;
  bool vecA = x.size() == 1, vecB = y.size() == 1;
  if (vecA) x.insert(x.begin(), SymExpr(1));
  if (vecB) y.push_back(SymExpr(1));
  requireEqual(c, x.back(), y[y.size() - 2], "inner dimensions differ");
  SymShape batch = c.broadcast(SymShape(x.begin(), x.end() - 2), SymShape(y.begin(), y.end() - 2));
  if (!vecA) batch.push_back(x[x.size() - 2]);
  if (!vecB) batch.push_back(y.back());
  c.setOutput(0, dt, batch);
}

void matmul(InferContext& c) { matmulOf(c, 0, 1, c.inputDType(0)); }
void dynamicQuantizeMatmul(InferContext& c) { matmulOf(c, 0, 1, DType::Float); }
void gemmFastGelu(InferContext& c) { matmulOf(c, 0, 1, c.inputDType(0)); }
/// com.microsoft MatMulInteger16: int32 unless both inputs are uint16.
void matmulInteger16(InferContext& c) {
  matmulOf(c, 0, 1, c.inputDType(0) == DType::UInt16 && c.inputDType(1) == DType::UInt16 ? DType::UInt32 : DType::Int32);
}

/// com.microsoft CDist: A [M, K] and B [N, K] give [M, N].
void cdist(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(1);
  if (!a || !b) return c.setOutputDType(0, c.inputDType(0));
  if (a->size() != 2 || b->size() != 2) c.fail("A and B must have rank 2");
  requireEqual(c, (*a)[1], (*b)[1], "A and B have different column counts");
  c.setOutput(0, c.inputDType(0), {(*a)[0], (*b)[0]});
}
void matmulIntegerToFloat(InferContext& c) { matmulOf(c, 0, 1, c.inputDType(2)); }

/// com.microsoft FusedMatMul: MatMul of A and B with their last two axes swapped by transA/transB
/// (transBatchA/B, which move the batch axes, leave the shape unknown).
void fusedMatmul(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(1);
  DType dt = c.inputDType(0);
  if (!a || !b || c.attrInt("transBatchA", 0) || c.attrInt("transBatchB", 0)) return c.setOutputDType(0, dt);
  if (a->empty() || b->empty()) c.fail("inputs must have rank >= 1");
  SymShape x = *a, y = *b;
  if (x.size() == 1) x.insert(x.begin(), SymExpr(1));
  if (y.size() == 1) y.push_back(SymExpr(1));
  if (c.attrInt("transA", 0)) std::swap(x[x.size() - 1], x[x.size() - 2]);
  if (c.attrInt("transB", 0)) std::swap(y[y.size() - 1], y[y.size() - 2]);
  requireEqual(c, x.back(), y[y.size() - 2], "inner dimensions differ");
  SymShape out = c.broadcast(SymShape(x.begin(), x.end() - 2), SymShape(y.begin(), y.end() - 2));
  if (a->size() > 1) out.push_back(x[x.size() - 2]);
  if (b->size() > 1) out.push_back(y.back());
  c.setOutput(0, dt, out);
}

/// com.microsoft MatMulNBits: A [..., K] times the blockwise-quantized B (N columns, attribute N).
void matmulNBits(InferContext& c) {
  auto a = c.inputShape(0);
  if (!a || a->empty()) return c.setOutputDType(0, c.inputDType(0));
  SymShape out = *a;
  out.back() = SymExpr(c.attrInt("N", 0));
  c.setOutput(0, c.inputDType(0), out);
}
void matmulInteger(InferContext& c) { matmulOf(c, 0, 1, DType::Int32); }
void qlinearMatmul(InferContext& c) { matmulOf(c, 0, 3, c.inputDType(7)); }

void gemm(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(1);
  if (!a || !b) return;
  if (a->size() != 2 || b->size() != 2) c.fail(fmt::format("A and B must have rank 2, got {} and {}", a->size(), b->size()));
  bool ta = c.attrInt("transA", 0) != 0, tb = c.attrInt("transB", 0) != 0;
  SymDim m = (*a)[ta ? 1 : 0], ka = (*a)[ta ? 0 : 1], kb = (*b)[tb ? 1 : 0], n = (*b)[tb ? 0 : 1];
  requireEqual(c, ka, kb, "inner dimensions differ");
  c.setOutput(0, c.inputDType(0), {m, n});
}

/// com.microsoft QGemm: Gemm of A (input 0) and B (input 3); quantized output when y_scale
/// (input 7) is given (the type of y_zero_point, input 8, else A's), float otherwise.
void qgemm(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(3);
  DType dt = !c.hasInput(7) ? DType::Float : c.hasInput(8) ? c.inputDType(8) : c.inputDType(0);
  if (!a || !b) return c.setOutputDType(0, dt);
  if (a->size() != 2 || b->size() != 2) c.fail(fmt::format("A and B must have rank 2, got {} and {}", a->size(), b->size()));
  bool ta = c.attrInt("transA", 0) != 0, tb = c.attrInt("transB", 0) != 0;
  requireEqual(c, (*a)[ta ? 0 : 1], (*b)[tb ? 1 : 0], "inner dimensions differ");
  c.setOutput(0, dt, {(*a)[ta ? 1 : 0], (*b)[tb ? 0 : 1]});
}

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string autoPad;
};

Window windowOf(InferContext& c, size_t spatial, const std::vector<int64_t>& kernel) {
  Window w;
  w.kernel = kernel;
  w.strides = c.attrInts("strides").value_or(std::vector<int64_t>(spatial, 1));
  w.dilations = c.attrInts("dilations").value_or(std::vector<int64_t>(spatial, 1));
  w.pads = c.attrInts("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  w.autoPad = c.attrString("auto_pad", "NOTSET");
  if (w.kernel.size() != spatial || w.strides.size() != spatial || w.dilations.size() != spatial ||
      w.pads.size() != 2 * spatial)
    c.fail(fmt::format("kernel_shape, strides, dilations or pads do not match {} spatial dimensions", spatial));
  for (size_t i = 0; i < spatial; ++i)
    if (w.strides[i] <= 0 || w.dilations[i] <= 0) c.fail("strides and dilations must be positive");
  return w;
}

/// Output size of a sliding window over `d` (floor, or ceil with ceilMode).
SymDim windowOut(const SymDim& d, const Window& w, size_t i, bool ceilMode) {
  if (!d) return std::nullopt;
  int64_t s = w.strides[i], extent = w.dilations[i] * (w.kernel[i] - 1) + 1;
  if (w.autoPad == "SAME_UPPER" || w.autoPad == "SAME_LOWER") return SymExpr::ceilDiv(*d, s);
  SymExpr span = *d - SymExpr(extent);
  if (w.autoPad != "VALID") span = span + SymExpr(w.pads[i] + w.pads[i + w.kernel.size()]);
  SymExpr out = (ceilMode ? SymExpr::ceilDiv(span, s) : SymExpr::floorDiv(span, s)) + SymExpr(1);
  // With ceil_mode, a last window that would start inside the end padding is dropped.
  if (auto o = out.asConstant(); ceilMode && o && d->isConstant() && w.autoPad != "VALID" &&
                                 (*o - 1) * s >= *d->asConstant() + w.pads[i])
    return SymExpr(*o - 1);
  return out;
}

/// Conv and its variants: X is input `ix`, W input `iw`, the output has type `dt`.
void convOf(InferContext& c, size_t ix, size_t iw, DType dt) {
  auto x = c.inputShape(ix), wt = c.inputShape(iw);
  if (!x) return c.setOutputDType(0, dt);
  if (x->size() < 3) c.fail(fmt::format("input must have rank >= 3, got {}", x->size()));
  size_t spatial = x->size() - 2;
  std::vector<int64_t> kernel;
  if (auto k = c.attrInts("kernel_shape")) kernel = *k;
  else if (wt && wt->size() == x->size())
    for (size_t i = 2; i < wt->size(); ++i) {
      if (!(*wt)[i] || !(*wt)[i]->isConstant()) return c.setOutput(0, dt, SymShape(x->size()));
      kernel.push_back(*(*wt)[i]->asConstant());
    }
  else
    return c.setOutputDType(0, dt);
  if (wt && wt->size() != x->size()) c.fail(fmt::format("weight has rank {}, expected {}", wt->size(), x->size()));
  int64_t group = c.attrInt("group", 1);
  if (wt && (*wt)[1] && (*x)[1]) requireEqual(c, *(*wt)[1] * SymExpr(group), (*x)[1], "input channels differ from weight channels times group");
  Window w = windowOf(c, spatial, kernel);
  SymShape out{(*x)[0], wt ? (*wt)[0] : std::nullopt};
  for (size_t i = 0; i < spatial; ++i) out.push_back(windowOut((*x)[i + 2], w, i, false));
  c.setOutput(0, dt, out);
}

void conv(InferContext& c) { convOf(c, 0, 1, c.inputDType(0)); }
void convInteger(InferContext& c) { convOf(c, 0, 1, DType::Int32); }
void qlinearConv(InferContext& c) { convOf(c, 0, 3, c.hasInput(7) ? c.inputDType(7) : c.inputDType(0)); }

/// com.microsoft QLinearConv: ai.onnx's, or NHWC (type only) with channels_last.
void msQlinearConv(InferContext& c) {
  if (!c.attrInt("channels_last", 0)) return qlinearConv(c);
  c.setOutputDType(0, c.hasInput(7) ? c.inputDType(7) : c.inputDType(0));
}

void convTranspose(InferContext& c) {
  auto x = c.inputShape(0), wt = c.inputShape(1);
  if (!x || !wt) return;
  if (x->size() < 3 || wt->size() != x->size()) c.fail("input and weight must have the same rank >= 3");
  size_t spatial = x->size() - 2;
  std::vector<int64_t> kernel;
  if (auto k = c.attrInts("kernel_shape")) kernel = *k;
  else
    for (size_t i = 2; i < wt->size(); ++i) {
      if (!(*wt)[i] || !(*wt)[i]->isConstant()) return;
      kernel.push_back(*(*wt)[i]->asConstant());
    }
  Window w = windowOf(c, spatial, kernel);
  int64_t group = c.attrInt("group", 1);
  SymShape out{(*x)[0], (*wt)[1] ? SymDim(*(*wt)[1] * SymExpr(group)) : std::nullopt};
  auto outPad = c.attrInts("output_padding").value_or(std::vector<int64_t>(spatial, 0));
  if (auto os = c.attrInts("output_shape")) {
    if (os->size() != spatial) c.fail("output_shape does not match the spatial rank");
    for (int64_t d : *os) out.push_back(SymExpr(d));
  } else {
    if (outPad.size() != spatial) c.fail("output_padding does not match the spatial rank");
    for (size_t i = 0; i < spatial; ++i) {
      const SymDim& d = (*x)[i + 2];
      if (!d) { out.push_back(std::nullopt); continue; }
      SymExpr full = SymExpr(w.strides[i]) * (*d - SymExpr(1)) + SymExpr(outPad[i] + (kernel[i] - 1) * w.dilations[i] + 1);
      if (w.autoPad == "SAME_UPPER" || w.autoPad == "SAME_LOWER") out.push_back(*d * SymExpr(w.strides[i]));
      else if (w.autoPad == "VALID") out.push_back(full);
      else out.push_back(full - SymExpr(w.pads[i] + w.pads[i + spatial]));
    }
  }
  c.setOutput(0, c.inputDType(0), out);
}

void pool(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  if (x->size() < 3) c.fail(fmt::format("input must have rank >= 3, got {}", x->size()));
  auto kernel = c.attrInts("kernel_shape");
  if (!kernel) c.fail("kernel_shape is required");
  Window w = windowOf(c, x->size() - 2, *kernel);
  bool ceilMode = c.attrInt("ceil_mode", 0) != 0;
  SymShape out{(*x)[0], (*x)[1]};
  for (size_t i = 0; i + 2 < x->size(); ++i) out.push_back(windowOut((*x)[i + 2], w, i, ceilMode));
  c.setOutput(0, c.inputDType(0), out);
  if (c.hasOutput(1)) c.setOutput(1, DType::Int64, out);
}

void globalPool(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  if (x->size() < 2) c.fail(fmt::format("input must have rank >= 2, got {}", x->size()));
  SymShape out{(*x)[0], (*x)[1]};
  out.resize(x->size(), SymExpr(1));
  c.setOutput(0, c.inputDType(0), out);
}

/// com.microsoft QLinearAveragePool / QLinearGlobalAveragePool: the float pool's shape, over
/// NHWC when channels_last is set.
void qlinearPoolOf(InferContext& c, void (*floatPool)(InferContext&)) {
  if (!c.attrInt("channels_last", 0)) return floatPool(c);
  auto x = c.inputShape(0);
  if (!x) return c.setOutputDType(0, c.inputDType(0));
  if (x->size() < 3) c.fail(fmt::format("input must have rank >= 3, got {}", x->size()));
  SymShape out{(*x)[0]};
  if (floatPool == globalPool) {
    out.resize(x->size() - 1, SymExpr(1));
  } else {
    auto kernel = c.attrInts("kernel_shape");
    if (!kernel) c.fail("kernel_shape is required");
    Window w = windowOf(c, x->size() - 2, *kernel);
    for (size_t i = 0; i + 2 < x->size(); ++i) out.push_back(windowOut((*x)[i + 1], w, i, c.attrInt("ceil_mode", 0) != 0));
  }
  out.push_back(x->back());
  c.setOutput(0, c.inputDType(0), out);
}
void qlinearAveragePool(InferContext& c) { qlinearPoolOf(c, pool); }
void qlinearGlobalAveragePool(InferContext& c) { qlinearPoolOf(c, globalPool); }

void batchNorm(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  c.setOutput(0, c.inputDType(0), *x);
  SymDim channels = x->size() >= 2 ? (*x)[1] : SymDim(SymExpr(1));
  for (size_t i = 1; i < c.numOutputs(); ++i) {
    DType dt = c.hasInput(3) && c.inputDType(3) != DType::Undefined ? c.inputDType(3) : c.inputDType(0);
    c.setOutput(i, dt, {channels});
  }
}

void layerNorm(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  c.setOutput(0, c.inputDType(0), *x);
  auto rank = static_cast<int64_t>(x->size());
  int64_t axis = c.normalizeAxis(c.attrInt("axis", -1), rank);
  SymShape stats(x->begin(), x->begin() + axis);
  stats.resize(x->size(), SymExpr(1));
  auto stash = static_cast<DType>(c.attrInt("stash_type", 1));
  for (size_t i = 1; i < c.numOutputs(); ++i) c.setOutput(i, stash, stats);
}

void sameShape(InferContext& c) {
  if (auto x = c.inputShape(0)) c.setOutput(0, c.inputDType(0), *x);
}

/// Reduce* and ArgMax/ArgMin: `axesFromInputSince` is the first version taking axes as input 1.
void reduceCommon(InferContext& c, DType dtype, std::optional<std::vector<int64_t>> axes, bool axesUnknown) {
  auto x = c.inputShape(0);
  bool keep = c.attrInt("keepdims", 1) != 0;
  if (!x) return;
  auto rank = static_cast<int64_t>(x->size());
  if (axesUnknown) {
    if (keep) c.setOutput(0, dtype, SymShape(x->size()));
    else c.setOutputDType(0, dtype);
    return;
  }
  std::vector<bool> reduced(x->size(), false);
  if (!axes || axes->empty()) {
    if (c.attrInt("noop_with_empty_axes", 0) != 0) return c.setOutput(0, dtype, *x);
    reduced.assign(x->size(), true);
  } else {
    for (int64_t a : *axes) reduced[c.normalizeAxis(a, rank)] = true;
  }
  SymShape out;
  for (size_t k = 0; k < x->size(); ++k) {
    if (!reduced[k]) out.push_back((*x)[k]);
    else if (keep) out.push_back(SymExpr(1));
  }
  c.setOutput(0, dtype, out);
}

template <int AxesInputSince>
void reduce(InferContext& c) {
  if (c.sinceVersion() >= AxesInputSince && c.hasInput(1)) {
    auto axes = c.inputInts(1);
    return reduceCommon(c, c.inputDType(0), axes, !axes.has_value());
  }
  reduceCommon(c, c.inputDType(0), c.sinceVersion() >= AxesInputSince ? std::nullopt : c.attrInts("axes"), false);
}

/// ReduceProd/ReduceSum of a 1-D shape vector (the element count of a Flatten-like reshape):
/// the product or sum of its entries. Other cases are shapes only.
template <int AxesInputSince, bool Prod>
void reduceShapeData(InferContext& c) {
  reduce<AxesInputSince>(c);
  const auto* d = c.inputData(0);
  if (!d || c.inputRank(0) != 1 || !dtypeIsInteger(c.inputDType(0))) return;
  bool all = c.sinceVersion() >= AxesInputSince ? !c.hasInput(1) || c.inputInts(1) == std::vector<int64_t>{0} ||
                                                        c.inputInts(1) == std::vector<int64_t>{-1}
                                                  : !c.attrInts("axes") || c.attrInts("axes")->size() == 1;
  if (!all || (c.sinceVersion() >= AxesInputSince && !c.hasInput(1) && c.attrInt("noop_with_empty_axes", 0) != 0))
    return;
  SymExpr acc(Prod ? 1 : 0);
  for (const SymDim& x : *d) {
    if (!x) return;
    acc = Prod ? acc * *x : acc + *x;
  }
  c.setOutputData(0, {acc});
}

void argReduce(InferContext& c) {
  reduceCommon(c, DType::Int64, std::vector<int64_t>{c.attrInt("axis", 0)}, false);
}


/// NegativeLogLikelihoodLoss (input 0 [N, C, d...]) and SoftmaxCrossEntropyLoss (the same, plus
/// log_prob shaped like the scores): a scalar unless reduction is "none", then target's shape.
void loss(InferContext& c) {
  auto x = c.inputShape(0);
  DType dt = c.inputDType(0);
  if (c.attrString("reduction", "mean") != "none") {
    c.setOutput(0, dt, {});
  } else if (x) {
    if (x->size() < 2) c.fail(fmt::format("input must have rank >= 2, got {}", x->size()));
    SymShape out{(*x)[0]};
    out.insert(out.end(), x->begin() + 2, x->end());
    c.setOutput(0, dt, out);
  } else if (auto t = c.inputShape(1)) {
    c.setOutput(0, dt, *t);
  }
  if (c.hasOutput(1) && x) c.setOutput(1, dt, *x);
}

void rmsNorm(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  c.normalizeAxis(c.attrInt("axis", -1), static_cast<int64_t>(x->size()));
  c.setOutput(0, c.inputDType(0), *x);
}

void maxUnpool(InferContext& c) {
  auto x = c.inputShape(0);
  if (c.hasInput(2)) {
    if (const auto* d = c.inputData(2)) return c.setOutput(0, c.inputDType(0), SymShape(d->begin(), d->end()));
    if (x) return c.setOutput(0, c.inputDType(0), SymShape(x->size()));
    return;
  }
  if (!x) return;
  if (x->size() < 3) c.fail(fmt::format("input must have rank >= 3, got {}", x->size()));
  size_t spatial = x->size() - 2;
  auto kernel = c.attrInts("kernel_shape");
  if (!kernel) c.fail("kernel_shape is required");
  Window w = windowOf(c, spatial, *kernel);
  SymShape out{(*x)[0], (*x)[1]};
  for (size_t i = 0; i < spatial; ++i) {
    const SymDim& d = (*x)[i + 2];
    SymExpr extra(w.kernel[i] - w.pads[i] - w.pads[i + spatial]);
    out.push_back(d ? SymDim((*d - SymExpr(1)) * SymExpr(w.strides[i]) + extra) : std::nullopt);
  }
  c.setOutput(0, c.inputDType(0), out);
}

void maxRoiPool(InferContext& c) {
  auto x = c.inputShape(0), rois = c.inputShape(1);
  auto pooled = c.attrInts("pooled_shape");
  if (!pooled || pooled->size() != 2) c.fail("pooled_shape must have 2 entries");
  c.setOutput(0, c.inputDType(0), {rois && !rois->empty() ? (*rois)[0] : std::nullopt,
                                   x && x->size() >= 2 ? (*x)[1] : std::nullopt, SymExpr((*pooled)[0]),
                                   SymExpr((*pooled)[1])});
}

void roiAlign(InferContext& c) {
  auto x = c.inputShape(0), rois = c.inputShape(1), idx = c.inputShape(2);
  SymDim n = rois && !rois->empty() ? (*rois)[0] : std::nullopt;
  if (!n && idx && !idx->empty()) n = (*idx)[0];
  c.setOutput(0, c.inputDType(0), {n, x && x->size() >= 2 ? (*x)[1] : std::nullopt,
                                   SymExpr(c.attrInt("output_height", 1)), SymExpr(c.attrInt("output_width", 1))});
}

void col2Im(InferContext& c) {
  auto x = c.inputShape(0);
  const auto* image = c.inputData(1);
  auto block = c.inputInts(2);
  std::optional<int64_t> spatial;
  if (image) spatial = static_cast<int64_t>(image->size());
  else if (block) spatial = static_cast<int64_t>(block->size());
  else if (auto s = c.inputShape(1); s && s->size() == 1 && (*s)[0] && (*s)[0]->isConstant())
    spatial = (*s)[0]->asConstant();
  if (!spatial) return;
  SymShape out{x && !x->empty() ? (*x)[0] : std::nullopt, std::nullopt};
  if (x && x->size() == 3 && (*x)[1] && block) {
    int64_t prod = 1;
    for (int64_t b : *block) prod *= b;
    if (prod > 0) {
      if (auto q = SymExpr::exactDiv(*(*x)[1], SymExpr(prod))) out[1] = q;
      else if ((*x)[1]->isConstant())
        c.fail(fmt::format("input dimension 1 ({}) is not divisible by the block size {}", (*x)[1]->str(), prod));
    }
  }
  for (int64_t i = 0; i < *spatial; ++i) out.push_back(image ? (*image)[i] : std::nullopt);
  c.setOutput(0, c.inputDType(0), out);
}

void gridSample(InferContext& c) {
  auto x = c.inputShape(0), grid = c.inputShape(1);
  if (!x && !grid) return;
  size_t rank = x ? x->size() : grid->size();
  if (rank < 3) c.fail(fmt::format("input and grid must have rank >= 3, got {}", rank));
  SymShape out(rank);
  if (x) out[1] = (*x)[1];
  out[0] = x ? (*x)[0] : (*grid)[0];
  if (grid) {
    if (grid->size() != rank) c.fail(fmt::format("grid has rank {}, expected {}", grid->size(), rank));
    for (size_t i = 2; i < rank; ++i) out[i] = (*grid)[i - 1];
    if (!out[0]) out[0] = (*grid)[0];
  }
  c.setOutput(0, c.inputDType(0), out);
}

void affineGrid(InferContext& c) {
  const auto* size = c.inputData(1);
  std::optional<int64_t> n;
  if (size) n = static_cast<int64_t>(size->size());
  else if (auto s = c.inputShape(1); s && s->size() == 1 && (*s)[0] && (*s)[0]->isConstant()) n = (*s)[0]->asConstant();
  if (!n) return;
  if (*n != 4 && *n != 5) c.fail(fmt::format("size has {} entries, expected 4 or 5", *n));
  auto theta = c.inputShape(0);
  SymShape out{size ? (*size)[0] : theta && !theta->empty() ? (*theta)[0] : std::nullopt};
  for (int64_t i = 2; i < *n; ++i) out.push_back(size ? (*size)[i] : std::nullopt);
  out.push_back(SymExpr(*n - 2));
  c.setOutput(0, c.inputDType(0), out);
}

/// Floats of a constant input (scales), or nullopt.
std::optional<std::vector<double>> constFloats(InferContext& c, size_t i) {
  const Tensor* t = c.inputConstant(i);
  if (!t || !t->numElements() || (t->expectedBytes() && t->raw.size() != *t->expectedBytes())) return std::nullopt;
  std::vector<double> r;
  for (size_t k = 0; k < static_cast<size_t>(*t->numElements()); ++k) r.push_back(t->elementAsDouble(k));
  return r;
}

/// Output dims of a resize by `scales` (floor(d * s)) over the axes in order.
SymShape scaled(const SymShape& x, const std::vector<int64_t>& axes, const std::vector<double>& scales) {
  SymShape out = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    const SymDim& d = x[axes[i]];
    double s = scales[i];
    if (s == 1.0) continue;
    if (d && d->isConstant()) {
      out[axes[i]] = SymExpr(static_cast<int64_t>(std::floor(static_cast<double>(*d->asConstant()) * s)));
      continue;
    }
    out[axes[i]] = std::nullopt;
    // A symbolic dim: exact when the scale is p / 2^k (2, 0.5, 1.5, 0.25, ...): floor(d * p / 2^k).
    for (int64_t den = 1; d && s > 0 && den <= 256; den *= 2)
      if (double p = s * static_cast<double>(den); p == std::floor(p) && p < 1e9) {
        out[axes[i]] = SymExpr::floorDiv(*d * SymExpr(static_cast<int64_t>(p)), den);
        break;
      }
  }
  return out;
}

void resize(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  auto rank = static_cast<int64_t>(x->size());
  std::vector<int64_t> axes;
  if (auto a = c.sinceVersion() >= 18 ? c.attrInts("axes") : std::nullopt) {
    for (int64_t v : *a) axes.push_back(c.normalizeAxis(v, rank));
  } else {
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  size_t scalesIn = c.sinceVersion() >= 11 ? 2 : 1, sizesIn = 3;
  SymShape unknownAxes = *x;
  for (int64_t k : axes) unknownAxes[k] = std::nullopt;
  if (c.sinceVersion() >= 11 && c.hasInput(sizesIn)) {
    const auto* sizes = c.inputData(sizesIn);
    if (!sizes) return c.setOutput(0, c.inputDType(0), unknownAxes);
    if (sizes->size() != axes.size())
      c.fail(fmt::format("sizes has {} entries for {} axes", sizes->size(), axes.size()));
    std::string policy = c.attrString("keep_aspect_ratio_policy", "stretch");
    SymShape out = *x;
    if (policy == "stretch" || c.sinceVersion() < 18) {
      for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = (*sizes)[i];
      return c.setOutput(0, c.inputDType(0), out);
    }
    // not_larger / not_smaller: one scale for all axes, the min or max of sizes / input.
    std::optional<double> scale;
    for (size_t i = 0; i < axes.size(); ++i) {
      const SymDim& d = (*x)[axes[i]];
      if (!d || !d->isConstant() || !(*sizes)[i] || !(*sizes)[i]->isConstant() || *d->asConstant() == 0)
        return c.setOutput(0, c.inputDType(0), unknownAxes);
      double r = static_cast<double>(*(*sizes)[i]->asConstant()) / static_cast<double>(*d->asConstant());
      scale = !scale ? r : policy == "not_larger" ? std::min(*scale, r) : std::max(*scale, r);
    }
    for (int64_t k : axes)
      out[k] = SymExpr(static_cast<int64_t>(std::floor(*scale * static_cast<double>(*(*x)[k]->asConstant()) + 0.5)));
    return c.setOutput(0, c.inputDType(0), out);
  }
  if (!c.hasInput(scalesIn)) return c.setOutput(0, c.inputDType(0), unknownAxes);
  auto scales = constFloats(c, scalesIn);
  if (!scales) return c.setOutput(0, c.inputDType(0), unknownAxes);
  if (scales->empty() && c.sinceVersion() >= 11) return c.setOutput(0, c.inputDType(0), unknownAxes);
  if (scales->size() != axes.size())
    c.fail(fmt::format("scales has {} entries for {} axes", scales->size(), axes.size()));
  c.setOutput(0, c.inputDType(0), scaled(*x, axes, *scales));
}

void upsample(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  std::vector<int64_t> axes;
  for (size_t k = 0; k < x->size(); ++k) axes.push_back(static_cast<int64_t>(k));
  std::optional<std::vector<double>> scales;
  if (c.sinceVersion() >= 9) {
    scales = constFloats(c, 1);
  } else if (const Attribute* a = c.attr("scales")) {
    scales = std::vector<double>(a->floats.begin(), a->floats.end());
  } else if (c.sinceVersion() < 7) {  // Upsample-1: height_scale and width_scale on NCHW
    scales = std::vector<double>{1.0, 1.0, c.attrFloat("height_scale", 1.0f), c.attrFloat("width_scale", 1.0f)};
  }
  if (!scales) return c.setOutput(0, c.inputDType(0), SymShape(x->size()));
  if (scales->size() != x->size()) c.fail(fmt::format("scales has {} entries for rank {}", scales->size(), x->size()));
  c.setOutput(0, c.inputDType(0), scaled(*x, axes, *scales));
}

void nonMaxSuppression(InferContext& c) { c.setOutput(0, DType::Int64, {std::nullopt, SymExpr(3)}); }

}  // namespace

void registerInferNn(InferRegistry& r) {
  r.add({"", "MatMul", 1, matmul});
  r.add({"", "Gemm", 1, gemm});
  r.add({"", "Conv", 1, conv});
  r.add({"", "ConvTranspose", 1, convTranspose});
  for (std::string_view op : {"MaxPool", "AveragePool", "LpPool"}) r.add({"", op, 1, pool});
  for (std::string_view op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) r.add({"", op, 1, globalPool});
  r.add({"", "BatchNormalization", 1, batchNorm});
  r.add({"", "LayerNormalization", 1, layerNorm});
  r.add({"", "SimplifiedLayerNormalization", 1, layerNorm});  // ONNX Runtime's: Y, inv_std_var
  for (std::string_view op : {"InstanceNormalization", "GroupNormalization", "LRN"}) r.add({"", op, 1, sameShape});
  r.add({"", "ReduceSum", 1, reduceShapeData<13, false>});
  r.add({"", "ReduceProd", 1, reduceShapeData<18, true>});
  for (std::string_view op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
                              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    r.add({"", op, 1, reduce<18>});
  for (std::string_view op : {"ArgMax", "ArgMin"}) r.add({"", op, 1, argReduce});
  r.add({"", "MatMulInteger", 1, matmulInteger});
  r.add({"", "QLinearMatMul", 1, qlinearMatmul});
  r.add({"", "ConvInteger", 1, convInteger});
  r.add({"", "QLinearConv", 1, qlinearConv});
  r.add({"", "DeformConv", 1, conv});
  for (std::string_view op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}) r.add({"", op, 1, loss});
  r.add({"", "RMSNormalization", 1, rmsNorm});
  r.add({"", "MaxUnpool", 1, maxUnpool});
  r.add({"", "MaxRoiPool", 1, maxRoiPool});
  r.add({"", "RoiAlign", 1, roiAlign});
  r.add({"", "Col2Im", 1, col2Im});
  r.add({"", "GridSample", 1, gridSample});
  r.add({"", "AffineGrid", 1, affineGrid});
  r.add({"", "Resize", 1, resize});
  r.add({"", "Upsample", 1, upsample});
  r.add({"", "NonMaxSuppression", 1, nonMaxSuppression});

  const std::string_view ms = "com.microsoft";
  r.add({ms, "FusedConv", 1, conv});
  r.add({ms, "QLinearConv", 1, msQlinearConv});
  r.add({ms, "FusedGemm", 1, gemm});
  r.add({ms, "FusedMatMul", 1, fusedMatmul});
  r.add({ms, "QGemm", 1, qgemm});
  r.add({ms, "DynamicQuantizeMatMul", 1, dynamicQuantizeMatmul});
  r.add({ms, "MatMulIntegerToFloat", 1, matmulIntegerToFloat});
  r.add({ms, "MatMulInteger16", 1, matmulInteger16});
  r.add({ms, "GemmFastGelu", 1, gemmFastGelu});
  r.add({ms, "CDist", 1, cdist});
  r.add({ms, "MatMulNBits", 1, matmulNBits});
  r.add({ms, "QLinearAveragePool", 1, qlinearAveragePool});
  r.add({ms, "QLinearGlobalAveragePool", 1, qlinearGlobalAveragePool});
}

}  // namespace onnxtool
