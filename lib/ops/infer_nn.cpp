// infer_nn.cpp: shape inference for neural-network ops: MatMul, Gemm, Conv, ConvTranspose,
// MaxPool/AveragePool/LpPool, Global*Pool, normalizations, Reduce* and ArgMax/ArgMin.
#include <algorithm>
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

void matmul(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(1);
  if (!a || !b) return;
  if (a->empty() || b->empty()) c.fail("inputs must have rank >= 1");
  SymShape x = *a, y = *b;
  bool vecA = x.size() == 1, vecB = y.size() == 1;
  if (vecA) x.insert(x.begin(), SymExpr(1));
  if (vecB) y.push_back(SymExpr(1));
  requireEqual(c, x.back(), y[y.size() - 2], "inner dimensions differ");
  SymShape batch = c.broadcast(SymShape(x.begin(), x.end() - 2), SymShape(y.begin(), y.end() - 2));
  if (!vecA) batch.push_back(x[x.size() - 2]);
  if (!vecB) batch.push_back(y.back());
  c.setOutput(0, c.inputDType(0), batch);
}

void gemm(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(1);
  if (!a || !b) return;
  if (a->size() != 2 || b->size() != 2) c.fail(fmt::format("A and B must have rank 2, got {} and {}", a->size(), b->size()));
  bool ta = c.attrInt("transA", 0) != 0, tb = c.attrInt("transB", 0) != 0;
  SymDim m = (*a)[ta ? 1 : 0], ka = (*a)[ta ? 0 : 1], kb = (*b)[tb ? 1 : 0], n = (*b)[tb ? 0 : 1];
  requireEqual(c, ka, kb, "inner dimensions differ");
  c.setOutput(0, c.inputDType(0), {m, n});
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

void conv(InferContext& c) {
  auto x = c.inputShape(0), wt = c.inputShape(1);
  if (!x) return;
  if (x->size() < 3) c.fail(fmt::format("input must have rank >= 3, got {}", x->size()));
  size_t spatial = x->size() - 2;
  std::vector<int64_t> kernel;
  if (auto k = c.attrInts("kernel_shape")) kernel = *k;
  else if (wt && wt->size() == x->size())
    for (size_t i = 2; i < wt->size(); ++i) {
      if (!(*wt)[i] || !(*wt)[i]->isConstant()) return c.setOutput(0, c.inputDType(0), SymShape(x->size()));
      kernel.push_back(*(*wt)[i]->asConstant());
    }
  else
    return;
  if (wt && wt->size() != x->size()) c.fail(fmt::format("weight has rank {}, expected {}", wt->size(), x->size()));
  int64_t group = c.attrInt("group", 1);
  if (wt && (*wt)[1] && (*x)[1]) requireEqual(c, *(*wt)[1] * SymExpr(group), (*x)[1], "input channels differ from weight channels times group");
  Window w = windowOf(c, spatial, kernel);
  SymShape out{(*x)[0], wt ? (*wt)[0] : std::nullopt};
  for (size_t i = 0; i < spatial; ++i) out.push_back(windowOut((*x)[i + 2], w, i, false));
  c.setOutput(0, c.inputDType(0), out);
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

void argReduce(InferContext& c) {
  reduceCommon(c, DType::Int64, std::vector<int64_t>{c.attrInt("axis", 0)}, false);
}

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
  for (std::string_view op : {"InstanceNormalization", "GroupNormalization", "LRN"}) r.add({"", op, 1, sameShape});
  r.add({"", "ReduceSum", 1, reduce<13>});
  for (std::string_view op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    r.add({"", op, 1, reduce<18>});
  for (std::string_view op : {"ArgMax", "ArgMin"}) r.add({"", op, 1, argReduce});
}

}  // namespace onnxtool
