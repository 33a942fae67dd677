// conv_rnn.cpp: reference kernels of convolution, pooling and recurrent ops: Conv, ConvInteger,
// QLinearConv, ConvTranspose, DeformConv, CausalConvWithState, Average/Max/LpPool and their
// Global forms, MaxUnpool, RNN, GRU, LSTM. The image ops (Resize, GridSample, RoiAlign, ...) live
// in image.cpp; registerConvRnnOps() registers both.
//
// Every float kernel computes in double and rounds once to the output type, so float16 and
// bfloat16 results do not depend on accumulation order. Windows (convolution taps, pooling
// windows) are described once by a Geometry and a tap table shared by all of these ops.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"
#include "exec/ref/numeric_util.h"

namespace onnxtool::ref {

void registerImageOps();  // image.cpp (kernel_util.h lists one function per family file)

namespace {

void requireFloat(const KernelContext& ctx, const TensorData& t, const char* what) {
  if (!isFloatType(t.dtype()))
    ctx.fail(fmt::format("{} must be a float tensor, got {}", what, dtypeName(t.dtype())));
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }

// ---------------------------------------------------------------------------------------------
// Window geometry shared by convolution and pooling

/// The spatial geometry of a sliding window: input extent, kernel, output extent and how the
/// output positions map to input positions (o * stride - padBegin + k * dilation).
struct Geometry {
  std::vector<int64_t> in, kernel, out, strides, dilations, padBegin, padEnd;
  size_t rank() const { return in.size(); }
  int64_t kernelSize() const { return numel(kernel); }
  int64_t inSize() const { return numel(in); }
  int64_t outSize() const { return numel(out); }
};

/// Reads `name` (ints) of length `rank`, or `def` repeated when absent.
std::vector<int64_t> spatialAttr(const KernelContext& ctx, std::string_view name, size_t rank, int64_t def) {
  std::vector<int64_t> v = ctx.attrInts(name, std::vector<int64_t>(rank, def));
  if (v.size() != rank) ctx.fail(fmt::format("attribute '{}' has {} values, expected {}", name, v.size(), rank));
  for (int64_t x : v)
    if (x < 1 && name != "pads") ctx.fail(fmt::format("attribute '{}' must be positive", name));
  return v;
}

/// The geometry of a convolution or pooling window from the node's auto_pad, pads, strides and
/// dilations attributes. `ceilMode` rounds the output extent up (pools), keeping the last
/// window's start inside the input or its leading padding.
Geometry windowGeometry(const KernelContext& ctx, std::vector<int64_t> in, std::vector<int64_t> kernel, bool ceilMode,
                        bool hasDilations = true) {
  Geometry g;
  size_t r = in.size();
  if (kernel.size() != r)
    ctx.fail(fmt::format("kernel has {} spatial dimensions, input has {}", kernel.size(), r));
  g.in = std::move(in);
  g.kernel = std::move(kernel);
  g.strides = spatialAttr(ctx, "strides", r, 1);
  g.dilations = hasDilations ? spatialAttr(ctx, "dilations", r, 1) : std::vector<int64_t>(r, 1);
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (pads.size() != 2 * r) ctx.fail(fmt::format("attribute 'pads' has {} values, expected {}", pads.size(), 2 * r));
  g.padBegin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(r));
  g.padEnd.assign(pads.begin() + static_cast<std::ptrdiff_t>(r), pads.end());
  g.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    if (g.kernel[i] < 1) ctx.fail("kernel dimensions must be positive");
    int64_t span = checkedAdd(ctx, checkedMul(ctx, g.kernel[i] - 1, g.dilations[i]), 1);
    int64_t s = g.strides[i];
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      g.out[i] = ceilDiv(g.in[i], s);
      int64_t total = std::max<int64_t>(0, checkedAdd(ctx, checkedMul(ctx, g.out[i] - 1, s), span - g.in[i]));
      int64_t small = total / 2;
      g.padBegin[i] = autoPad == "SAME_UPPER" ? small : total - small;
      g.padEnd[i] = total - g.padBegin[i];
    } else if (autoPad == "VALID") {
      g.padBegin[i] = g.padEnd[i] = 0;
      g.out[i] = floorDiv(g.in[i] - span, s) + 1;
    } else if (autoPad == "NOTSET" || autoPad.empty()) {
      int64_t extent = checkedAdd(ctx, checkedAdd(ctx, g.in[i], g.padBegin[i]), checkedAdd(ctx, g.padEnd[i], -span));
      if (ceilMode) {
        g.out[i] = ceilDiv(extent, s) + 1;
        // the last window must start inside the input or the leading padding
        if (checkedMul(ctx, g.out[i] - 1, s) >= g.in[i] + g.padBegin[i]) --g.out[i];
      } else {
        g.out[i] = floorDiv(extent, s) + 1;
      }
    } else {
      ctx.fail(fmt::format("unknown auto_pad '{}'", autoPad));
    }
    if (g.out[i] < 0) g.out[i] = 0;
  }
  return g;
}

/// For every kernel tap k and output position p, the flat offset (within one channel) of the
/// input element the tap reads, or -1 where it falls outside the input: table[k * P + p].
std::vector<int64_t> tapTable(const KernelContext& ctx, const Geometry& g) {
  int64_t K = checkedElements(ctx, g.kernel), P = checkedElements(ctx, g.out);
  checkedElements(ctx, g.in);
  size_t r = g.rank();
  int64_t n = checkedMul(ctx, K, P);
  if (static_cast<uint64_t>(n) > (uint64_t{1} << 40) / sizeof(int64_t))
    ctx.fail(fmt::format("a window table of {} entries is too large to allocate", n));
  std::vector<int64_t> table(static_cast<size_t>(n), -1);
  std::vector<int64_t> inStrides = stridesOf(g.in);
  std::vector<int64_t> kIdx, pIdx;
  for (int64_t k = 0; k < K; ++k) {
    unravel(k, g.kernel, kIdx);
    for (int64_t p = 0; p < P; ++p) {
      unravel(p, g.out, pIdx);
      int64_t off = 0;
      bool inside = true;
      for (size_t i = 0; i < r && inside; ++i) {
        int64_t c = pIdx[i] * g.strides[i] - g.padBegin[i] + kIdx[i] * g.dilations[i];
        inside = c >= 0 && c < g.in[i];
        off += c * inStrides[i];
      }
      if (inside) table[static_cast<size_t>(k * P + p)] = off;
    }
  }
  return table;
}

/// Kernel spatial shape: the kernel_shape attribute when present, else `fromWeights`.
std::vector<int64_t> kernelShape(const KernelContext& ctx, const std::vector<int64_t>& fromWeights) {
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape", fromWeights);
  if (!fromWeights.empty() && ks != fromWeights) ctx.fail("attribute 'kernel_shape' disagrees with the weight shape");
  return ks;
}

// ---------------------------------------------------------------------------------------------
// Convolution

/// Grouped N-d convolution on doubles: x [N, C, in...], w [M, C/group, k...] -> [N, M, out...].
std::vector<double> convolve(const KernelContext& ctx, const std::vector<double>& x, const std::vector<int64_t>& xDims,
                             const std::vector<double>& w, const std::vector<int64_t>& wDims, const double* bias,
                             int64_t group, const Geometry& g) {
  int64_t N = xDims[0], C = xDims[1], M = wDims[0];
  if (group < 1 || C % group != 0 || M % group != 0 || C / group != wDims[1])
    ctx.fail(fmt::format("group {} does not fit {} input channels and weights of {} channels", group, C, wDims[1]));
  int64_t Cg = C / group, Mg = M / group, K = g.kernelSize(), P = g.outSize(), I = g.inSize();
  std::vector<int64_t> table = tapTable(ctx, g);
  std::vector<double> y = zeroDoubles(ctx, checkedMul(ctx, checkedMul(ctx, N, M), P));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      double* yp = y.data() + (n * M + m) * P;
      if (bias) std::fill(yp, yp + P, bias[m]);
      int64_t grp = m / Mg;
      for (int64_t c = 0; c < Cg; ++c) {
        const double* xp = x.data() + (n * C + grp * Cg + c) * I;
        const double* wp = w.data() + (m * Cg + c) * K;
        for (int64_t k = 0; k < K; ++k) {
          double wv = wp[k];
          const int64_t* row = table.data() + k * P;
          for (int64_t p = 0; p < P; ++p)
            if (row[p] >= 0) yp[p] += wv * xp[row[p]];
        }
      }
    }
  return y;
}

std::vector<int64_t> spatialOf(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

std::vector<int64_t> outDims(int64_t n, int64_t c, const std::vector<int64_t>& spatial) {
  std::vector<int64_t> d{n, c};
  d.insert(d.end(), spatial.begin(), spatial.end());
  return d;
}

void checkConvInputs(const KernelContext& ctx, const TensorData& x, const TensorData& w) {
  if (x.dims.size() < 3) ctx.fail(fmt::format("input must have rank >= 3 (N, C, spatial...), got rank {}", x.dims.size()));
  if (w.dims.size() != x.dims.size())
    ctx.fail(fmt::format("weights have rank {}, input has rank {}", w.dims.size(), x.dims.size()));
}

void conv(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(1);
  requireFloat(ctx, x, "X");
  checkConvInputs(ctx, x, w);
  Geometry g = windowGeometry(ctx, spatialOf(x.dims), kernelShape(ctx, spatialOf(w.dims)), false);
  std::vector<double> bias;
  if (ctx.hasInput(2)) {
    bias = toDoubles(ctx, ctx.tensor(2));
    if (static_cast<int64_t>(bias.size()) != w.dims[0]) ctx.fail("bias length differs from the output channels");
  }
  std::vector<double> y = convolve(ctx, toDoubles(ctx, x), x.dims, toDoubles(ctx, w), w.dims,
                                   bias.empty() ? nullptr : bias.data(), ctx.attrInt("group", 1), g);
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), outDims(x.dims[0], w.dims[0], g.out), y));
}

/// Subtracts the zero point of input `zpInput` when present (scalar, or per channel along axis 0 of `dims` when `perChannel`).
void subtractZeroPoint(const KernelContext& ctx, std::vector<double>& v, const std::vector<int64_t>& dims,
                       size_t zpInput, bool perChannel) {
  if (!ctx.hasInput(zpInput)) return;
  std::vector<double> z = toDoubles(ctx, ctx.tensor(zpInput));
  if (z.size() == 1) {
    for (double& e : v) e -= z[0];
  } else if (perChannel && !dims.empty() && static_cast<int64_t>(z.size()) == dims[0]) {
    int64_t inner = dims[0] ? static_cast<int64_t>(v.size()) / dims[0] : 0;
    for (size_t i = 0; i < v.size(); ++i) v[i] -= z[static_cast<size_t>(static_cast<int64_t>(i) / inner)];
  } else {
    ctx.fail("zero point must be a scalar or have one value per output channel");
  }
}

void convInteger(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(1);
  checkConvInputs(ctx, x, w);
  std::vector<double> xv = toDoubles(ctx, x), wv = toDoubles(ctx, w);
  subtractZeroPoint(ctx, xv, x.dims, 2, false);
  subtractZeroPoint(ctx, wv, w.dims, 3, true);
  Geometry g = windowGeometry(ctx, spatialOf(x.dims), kernelShape(ctx, spatialOf(w.dims)), false);
  std::vector<double> y = convolve(ctx, xv, x.dims, wv, w.dims, nullptr, ctx.attrInt("group", 1), g);
  Tensor out = makeTensor(DType::Int32, outDims(x.dims[0], w.dims[0], g.out));
  int32_t* po = mutableData<int32_t>(out);
  for (size_t i = 0; i < y.size(); ++i) po[i] = static_cast<int32_t>(static_cast<int64_t>(y[i]));  // wraps
  ctx.setOutput(0, std::move(out));
}

void qlinearConv(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(3);
  checkConvInputs(ctx, x, w);
  std::vector<double> xv = toDoubles(ctx, x), wv = toDoubles(ctx, w);
  subtractZeroPoint(ctx, xv, x.dims, 2, false);
  subtractZeroPoint(ctx, wv, w.dims, 5, true);
  Geometry g = windowGeometry(ctx, spatialOf(x.dims), kernelShape(ctx, spatialOf(w.dims)), false);
  std::vector<double> bias;
  if (ctx.hasInput(8)) bias = toDoubles(ctx, ctx.tensor(8));
  int64_t M = w.dims[0];
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != M) ctx.fail("bias length differs from the output channels");
  std::vector<double> y = convolve(ctx, xv, x.dims, wv, w.dims, bias.empty() ? nullptr : bias.data(),
                                   ctx.attrInt("group", 1), g);
  float xScale = static_cast<float>(inputScalar(ctx, 1));
  float yScale = static_cast<float>(inputScalar(ctx, 6));
  std::vector<double> wScale = toDoubles(ctx, ctx.tensor(4));
  if (wScale.size() != 1 && static_cast<int64_t>(wScale.size()) != M)
    ctx.fail("w_scale must be a scalar or have one value per output channel");
  double yZero = ctx.hasInput(7) ? inputScalar(ctx, 7) : 0.0;
  DType outType = ctx.hasInput(7) ? ctx.tensor(7).dtype() : x.dtype();
  int64_t P = g.outSize();
  for (size_t i = 0; i < y.size(); ++i) {
    int64_t m = (static_cast<int64_t>(i) / P) % M;
    // the multiplier in float, as the scales are float: x_scale * w_scale / y_scale
    float mult = xScale * static_cast<float>(wScale[wScale.size() == 1 ? 0 : static_cast<size_t>(m)]) / yScale;
    y[i] = static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(y[i]))) * mult + yZero;
  }
  ctx.setOutput(0, fromDoublesRounded(ctx, outType, outDims(x.dims[0], M, g.out), y));
}

/// Scatter-adds a transposed convolution: x [N, C, in...], w [C, M/group, k...] into
/// y [N, M, out...], where `g` maps y's spatial positions (as g.in) to x's (as g.out).
void convolveTransposed(const KernelContext& ctx, const std::vector<double>& x, const std::vector<int64_t>& xDims,
                        const std::vector<double>& w, const std::vector<int64_t>& wDims, int64_t group,
                        const Geometry& g, std::vector<double>& y) {
  int64_t N = xDims[0], C = xDims[1];
  if (group < 1 || C % group != 0 || wDims[0] != C)
    ctx.fail(fmt::format("group {} does not fit {} input channels and weights of shape [{}]", group, C,
                         fmt::join(wDims, ",")));
  int64_t Cg = C / group, Mg = wDims[1], M = Mg * group, K = g.kernelSize(), P = g.outSize(), O = g.inSize();
  std::vector<int64_t> table = tapTable(ctx, g);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      int64_t grp = c / Cg;
      const double* xp = x.data() + (n * C + c) * P;
      for (int64_t mg = 0; mg < Mg; ++mg) {
        double* yp = y.data() + (n * M + grp * Mg + mg) * O;
        const double* wp = w.data() + (c * Mg + mg) * K;
        for (int64_t k = 0; k < K; ++k) {
          double wv = wp[k];
          const int64_t* row = table.data() + k * P;
          for (int64_t p = 0; p < P; ++p)
            if (row[p] >= 0) yp[row[p]] += wv * xp[p];
        }
      }
    }
}

void convTranspose(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(1);
  requireFloat(ctx, x, "X");
  checkConvInputs(ctx, x, w);
  std::vector<int64_t> in = spatialOf(x.dims);
  std::vector<int64_t> kernel = kernelShape(ctx, spatialOf(w.dims));
  size_t r = in.size();
  int64_t group = ctx.attrInt("group", 1);
  std::vector<int64_t> strides = spatialAttr(ctx, "strides", r, 1);
  std::vector<int64_t> dilations = spatialAttr(ctx, "dilations", r, 1);
  std::vector<int64_t> outPad = ctx.attrInts("output_padding", std::vector<int64_t>(r, 0));
  if (outPad.size() == 2 * r) outPad.resize(r);  // some exporters write it begin/end style
  if (outPad.size() != r) ctx.fail("attribute 'output_padding' has the wrong length");
  std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (pads.size() != 2 * r) ctx.fail("attribute 'pads' has the wrong length");
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  std::vector<int64_t> outShape = ctx.attrInts("output_shape", {});
  if (outShape.size() == r + 2) outShape.erase(outShape.begin(), outShape.begin() + 2);
  if (!outShape.empty() && outShape.size() != r) ctx.fail("attribute 'output_shape' has the wrong length");
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (outShape.empty() && same)
    for (size_t i = 0; i < r; ++i) outShape.push_back(checkedMul(ctx, in[i], strides[i]));
  if (autoPad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  Geometry g;
  g.kernel = kernel;
  g.strides = strides;
  g.dilations = dilations;
  g.out = in;  // the transposed direction: x's positions are the "outputs" of the window map
  g.in.resize(r);
  g.padBegin.resize(r);
  g.padEnd.resize(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t full = checkedAdd(ctx, checkedAdd(ctx, checkedMul(ctx, strides[i], in[i] - 1), outPad[i]),
                              checkedAdd(ctx, checkedMul(ctx, kernel[i] - 1, dilations[i]), 1));
    if (!outShape.empty()) {
      // pads derived from the requested shape; floor division keeps a negative total at the end
      int64_t total = checkedAdd(ctx, full, -checkedAdd(ctx, outShape[i], 0));
      int64_t half = floorDiv(total, 2);
      g.padBegin[i] = autoPad == "SAME_UPPER" ? half : total - half;
      g.padEnd[i] = total - g.padBegin[i];
      g.in[i] = outShape[i];
    } else {
      g.padBegin[i] = pads[i];
      g.padEnd[i] = pads[i + r];
      g.in[i] = checkedAdd(ctx, full, -checkedAdd(ctx, pads[i], pads[i + r]));
    }
    if (g.in[i] < 0) ctx.fail("transposed convolution output would have a negative dimension");
  }
  if (group < 1) ctx.fail(fmt::format("group is {}, expected a positive value", group));
  int64_t M = checkedMul(ctx, w.dims[1], group);
  int64_t N = x.dims[0], O = checkedElements(ctx, g.in);
  std::vector<double> y = zeroDoubles(ctx, checkedMul(ctx, checkedMul(ctx, N, M), O));
  if (ctx.hasInput(2)) {
    std::vector<double> b = toDoubles(ctx, ctx.tensor(2));
    if (static_cast<int64_t>(b.size()) != M) ctx.fail("bias length differs from the output channels");
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) std::fill_n(y.begin() + (n * M + m) * O, O, b[static_cast<size_t>(m)]);
  }
  convolveTransposed(ctx, toDoubles(ctx, x), x.dims, toDoubles(ctx, w), w.dims, group, g, y);
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), outDims(N, M, g.in), y));
}

/// Value of `img` (one channel, dims `dims`) at fractional `pos`, multilinear, zero outside.
double sampleLinearZeros(const double* img, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                         const std::vector<double>& pos) {
  size_t r = dims.size();
  double acc = 0;
  for (size_t corner = 0; corner < (size_t{1} << r); ++corner) {
    double wgt = 1;
    int64_t off = 0;
    bool inside = true;
    for (size_t i = 0; i < r && inside; ++i) {
      double lo = std::floor(pos[i]);
      double frac = pos[i] - lo;
      bool hi = (corner >> i) & 1;
      int64_t c = static_cast<int64_t>(lo) + (hi ? 1 : 0);
      wgt *= hi ? frac : 1 - frac;
      inside = c >= 0 && c < dims[i];
      off += c * strides[i];
    }
    if (inside && wgt != 0) acc += wgt * img[off];
  }
  return acc;
}

void deformConv(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(1);
  const TensorData& offset = ctx.tensor(2);
  requireFloat(ctx, x, "X");
  checkConvInputs(ctx, x, w);
  Geometry g = windowGeometry(ctx, spatialOf(x.dims), kernelShape(ctx, spatialOf(w.dims)), false);
  size_t r = g.rank();
  int64_t N = x.dims[0], C = x.dims[1], M = w.dims[0], group = ctx.attrInt("group", 1);
  int64_t offGroups = ctx.attrInt("offset_group", 1);
  int64_t K = g.kernelSize();
  if (offset.dims.size() != r + 2 || offset.dims[0] != N)
    ctx.fail("offset must have shape [N, offset_group * kernel_size * rank, out...]");
  std::vector<int64_t> offOut = spatialOf(offset.dims);
  g.out = offOut;  // the offsets fix the output extent
  if (group < 1 || offGroups < 1 || C % group || M % group || C % offGroups || C / group != w.dims[1])
    ctx.fail("group or offset_group does not divide the channels");
  if (offset.dims[1] != offGroups * K * static_cast<int64_t>(r))
    ctx.fail(fmt::format("offset has {} channels, expected {}", offset.dims[1], offGroups * K * static_cast<int64_t>(r)));
  int64_t P = g.outSize(), I = g.inSize(), Cg = C / group, Mg = M / group, Co = C / offGroups;
  std::vector<double> xv = toDoubles(ctx, x), wv = toDoubles(ctx, w), ov = toDoubles(ctx, offset);
  std::vector<double> mask, bias;
  if (ctx.hasInput(3)) bias = toDoubles(ctx, ctx.tensor(3));
  if (ctx.hasInput(4)) {
    mask = toDoubles(ctx, ctx.tensor(4));
    if (static_cast<int64_t>(mask.size()) != N * offGroups * K * P) ctx.fail("mask has the wrong size");
  }
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != M) ctx.fail("bias length differs from the output channels");
  std::vector<int64_t> inStrides = stridesOf(g.in);
  // sampled[n][c][k][p]: the deformed input value each tap reads (mask applied)
  std::vector<double> sampled(static_cast<size_t>(N * C * K * P));
  std::vector<int64_t> kIdx, pIdx;
  std::vector<double> pos(r);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      int64_t og = c / Co;
      const double* img = xv.data() + (n * C + c) * I;
      for (int64_t k = 0; k < K; ++k) {
        unravel(k, g.kernel, kIdx);
        for (int64_t p = 0; p < P; ++p) {
          unravel(p, g.out, pIdx);
          for (size_t i = 0; i < r; ++i) {
            int64_t ch = (og * K + k) * static_cast<int64_t>(r) + static_cast<int64_t>(i);
            pos[i] = static_cast<double>(pIdx[i] * g.strides[i] - g.padBegin[i] + kIdx[i] * g.dilations[i]) +
                     ov[static_cast<size_t>((n * offset.dims[1] + ch) * P + p)];
          }
          double v = sampleLinearZeros(img, g.in, inStrides, pos);
          if (!mask.empty()) v *= mask[static_cast<size_t>(((n * offGroups + og) * K + k) * P + p)];
          sampled[static_cast<size_t>(((n * C + c) * K + k) * P + p)] = v;
        }
      }
    }
  std::vector<double> y(static_cast<size_t>(N * M * P), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      double* yp = y.data() + (n * M + m) * P;
      if (!bias.empty()) std::fill(yp, yp + P, bias[static_cast<size_t>(m)]);
      int64_t grp = m / Mg;
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t k = 0; k < K; ++k) {
          double wgt = wv[static_cast<size_t>((m * Cg + c) * K + k)];
          const double* sp = sampled.data() + ((n * C + grp * Cg + c) * K + k) * P;
          for (int64_t p = 0; p < P; ++p) yp[p] += wgt * sp[p];
        }
    }
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), outDims(N, M, g.out), y));
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

void causalConvWithState(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(1);
  requireFloat(ctx, x, "input");
  if (x.dims.size() != 3 || w.dims.size() != 3 || w.dims[1] != 1 || w.dims[0] != x.dims[1])
    ctx.fail("input must be [batch, channels, length] and weight [channels, 1, k]");
  std::string act = ctx.attrString("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    ctx.fail(fmt::format("unknown activation '{}', expected 'none', 'silu' or 'swish'", act));
  int64_t B = x.dims[0], C = x.dims[1], L = x.dims[2], k = w.dims[2];
  if (k < 1) ctx.fail("kernel length must be positive");
  int64_t S = k - 1, padded = S + L;
  std::vector<double> xv = toDoubles(ctx, x), wv = toDoubles(ctx, w), bias, past;
  if (ctx.hasInput(2)) {
    bias = toDoubles(ctx, ctx.tensor(2));
    if (static_cast<int64_t>(bias.size()) != C) ctx.fail("bias length differs from the channels");
  }
  if (ctx.hasInput(3)) {
    const TensorData& ps = ctx.tensor(3);
    if (ps.dims != std::vector<int64_t>{B, C, S}) ctx.fail("past_state must be [batch, channels, k - 1]");
    past = toDoubles(ctx, ps);
  }
  std::vector<double> y(static_cast<size_t>(B * C * L)), state(static_cast<size_t>(B * C * S));
  std::vector<double> row(static_cast<size_t>(padded));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      int64_t bc = b * C + c;
      for (int64_t i = 0; i < S; ++i) row[static_cast<size_t>(i)] = past.empty() ? 0.0 : past[static_cast<size_t>(bc * S + i)];
      for (int64_t i = 0; i < L; ++i) row[static_cast<size_t>(S + i)] = xv[static_cast<size_t>(bc * L + i)];
      for (int64_t t = 0; t < L; ++t) {
        double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(c)];
        for (int64_t j = 0; j < k; ++j) acc += wv[static_cast<size_t>(c * k + j)] * row[static_cast<size_t>(t + j)];
        y[static_cast<size_t>(bc * L + t)] = acc;
      }
      for (int64_t i = 0; i < S; ++i) state[static_cast<size_t>(bc * S + i)] = row[static_cast<size_t>(padded - S + i)];
    }
  Tensor out = fromDoublesRounded(ctx, x.dtype(), x.dims, y);
  if (act != "none") {
    // the activation applies to the convolution already rounded to the element type
    std::vector<double> rounded = toDoubles(ctx, out);
    for (double& v : rounded) v = v * sigmoid(v);
    out = fromDoublesRounded(ctx, x.dtype(), x.dims, rounded);
  }
  ctx.setOutput(0, std::move(out));
  ctx.setOutput(1, fromDoublesRounded(ctx, x.dtype(), {B, C, S}, state));
}

// ---------------------------------------------------------------------------------------------
// Pooling

enum class PoolKind { Average, Max, Lp };

/// The p of LpPool: a float attribute in version 1, an int from version 2.
double lpNorm(const KernelContext& ctx) {
  const Attribute* a = ctx.attr("p");
  if (!a) return 2.0;
  if (a->type == AttrType::Float) return a->f;
  if (a->type == AttrType::Int) return static_cast<double>(a->i);
  ctx.fail("attribute 'p' must be a number");
}

double lpFinish(double sum, double p) { return std::pow(sum, 1.0 / p); }

void pool(KernelContext& ctx, PoolKind kind) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() < 3) ctx.fail(fmt::format("input must have rank >= 3 (N, C, spatial...), got rank {}", x.dims.size()));
  if (!ctx.hasAttr("kernel_shape")) ctx.fail("attribute 'kernel_shape' is required");
  std::vector<int64_t> kernel = ctx.attrInts("kernel_shape");
  bool ceilMode = ctx.attrInt("ceil_mode", 0) != 0;
  Geometry g = windowGeometry(ctx, spatialOf(x.dims), kernel, ceilMode);
  int64_t N = x.dims[0], C = x.dims[1], K = g.kernelSize(), P = g.outSize(), I = g.inSize();
  bool includePad = ctx.attrInt("count_include_pad", 0) != 0;
  double p = kind == PoolKind::Lp ? lpNorm(ctx) : 0;
  int64_t storageOrder = ctx.attrInt("storage_order", 0);
  std::vector<int64_t> table = tapTable(ctx, g);
  // taps inside input + explicit padding (count_include_pad counts those, not the ceil overhang)
  std::vector<int64_t> padCount(static_cast<size_t>(P), 1);
  if (kind == PoolKind::Average && includePad) {
    std::vector<int64_t> pIdx;
    for (int64_t q = 0; q < P; ++q) {
      unravel(q, g.out, pIdx);
      for (size_t i = 0; i < g.rank(); ++i) {
        int64_t cnt = 0;
        for (int64_t k = 0; k < g.kernel[i]; ++k)
          if (pIdx[i] * g.strides[i] - g.padBegin[i] + k * g.dilations[i] < g.in[i] + g.padEnd[i]) ++cnt;
        padCount[static_cast<size_t>(q)] *= cnt;
      }
    }
  }
  std::vector<double> xv = toDoubles(ctx, x);
  std::vector<double> y = zeroDoubles(ctx, checkedMul(ctx, checkedMul(ctx, N, C), P));
  std::vector<int64_t> ind(kind == PoolKind::Max ? y.size() : 0);
  std::vector<int64_t> inIdx;
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const double* xp = xv.data() + nc * I;
    for (int64_t q = 0; q < P; ++q) {
      double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t count = 0, best = -1;
      for (int64_t k = 0; k < K; ++k) {
        int64_t off = table[static_cast<size_t>(k * P + q)];
        if (off < 0) continue;
        double v = xp[off];
        ++count;
        if (kind == PoolKind::Max) {
          if (best < 0 || v > acc || (std::isnan(v) && !std::isnan(acc))) {
            acc = v;
            best = off;
          }
        } else if (kind == PoolKind::Average) {
          acc += v;
        } else {
          acc += std::pow(std::fabs(v), p);
        }
      }
      size_t o = static_cast<size_t>(nc * P + q);
      if (kind == PoolKind::Average) y[o] = acc / static_cast<double>(includePad ? padCount[static_cast<size_t>(q)] : count);
      else if (kind == PoolKind::Lp) y[o] = lpFinish(acc, p);
      else y[o] = acc;
      if (kind == PoolKind::Max) {
        if (best < 0) {
          ind[o] = -1;
        } else if (storageOrder == 0) {
          ind[o] = nc * I + best;
        } else {
          // column-major within the spatial block: the first spatial axis varies fastest
          unravel(best, g.in, inIdx);
          int64_t off = 0, mul = 1;
          for (size_t i = 0; i < g.rank(); ++i) {
            off += inIdx[i] * mul;
            mul *= g.in[i];
          }
          ind[o] = nc * I + off;
        }
      }
    }
  }
  std::vector<int64_t> yd = outDims(N, C, g.out);
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), yd, y));
  if (kind == PoolKind::Max && ctx.wantsOutput(1)) {
    Tensor it = makeTensor(DType::Int64, yd);
    std::copy(ind.begin(), ind.end(), mutableData<int64_t>(it));
    ctx.setOutput(1, std::move(it));
  }
}

void averagePool(KernelContext& ctx) { pool(ctx, PoolKind::Average); }
void maxPool(KernelContext& ctx) { pool(ctx, PoolKind::Max); }
void lpPool(KernelContext& ctx) { pool(ctx, PoolKind::Lp); }

void globalPool(KernelContext& ctx, PoolKind kind) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() < 2) ctx.fail(fmt::format("input must have rank >= 2 (N, C, spatial...), got rank {}", x.dims.size()));
  int64_t NC = x.dims[0] * x.dims[1];
  int64_t I = numel(spatialOf(x.dims));
  double p = kind == PoolKind::Lp ? lpNorm(ctx) : 0;
  std::vector<double> xv = toDoubles(ctx, x), y(static_cast<size_t>(NC));
  for (int64_t nc = 0; nc < NC; ++nc) {
    const double* xp = xv.data() + nc * I;
    double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t i = 0; i < I; ++i) {
      if (kind == PoolKind::Max) acc = std::isnan(xp[i]) || xp[i] > acc ? xp[i] : acc;
      else if (kind == PoolKind::Average) acc += xp[i];
      else acc += std::pow(std::fabs(xp[i]), p);
      if (std::isnan(acc) && kind == PoolKind::Max) break;
    }
    if (kind == PoolKind::Average) acc /= static_cast<double>(I);
    if (kind == PoolKind::Lp) acc = lpFinish(acc, p);
    y[static_cast<size_t>(nc)] = acc;
  }
  std::vector<int64_t> yd = x.dims;
  for (size_t i = 2; i < yd.size(); ++i) yd[i] = 1;
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), yd, y));
}

void globalAveragePool(KernelContext& ctx) { globalPool(ctx, PoolKind::Average); }
void globalMaxPool(KernelContext& ctx) { globalPool(ctx, PoolKind::Max); }
void globalLpPool(KernelContext& ctx) { globalPool(ctx, PoolKind::Lp); }

void maxUnpool(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& idx = ctx.tensor(1);
  if (x.dims.size() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...)");
  if (idx.dims != x.dims) ctx.fail("indices must have the shape of X");
  if (!ctx.hasAttr("kernel_shape")) ctx.fail("attribute 'kernel_shape' is required");
  std::vector<int64_t> in = spatialOf(x.dims), kernel = ctx.attrInts("kernel_shape");
  size_t r = in.size();
  if (kernel.size() != r) ctx.fail("attribute 'kernel_shape' has the wrong length");
  std::vector<int64_t> strides = spatialAttr(ctx, "strides", r, 1);
  std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (pads.size() != 2 * r) ctx.fail("attribute 'pads' has the wrong length");
  std::vector<int64_t> inferred = outDims(x.dims[0], x.dims[1], {});
  for (size_t i = 0; i < r; ++i) inferred.push_back((in[i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + r]);
  int bits = dtypeBits(x.dtype());
  if (bits < 8 || bits % 8 != 0) ctx.fail(fmt::format("unsupported element type {}", dtypeName(x.dtype())));
  size_t esize = static_cast<size_t>(bits / 8);
  // indices address the inferred (unpadded) output; scatter there first
  Tensor full = makeTensor(x.dtype(), inferred);
  int64_t total = numel(inferred);
  std::vector<int64_t> iv = idx.toInt64s();
  for (size_t i = 0; i < iv.size(); ++i) {
    if (iv[i] < 0 || iv[i] >= total) ctx.fail(fmt::format("index {} is out of range for the output", iv[i]));
    std::memcpy(full.raw.mutableData() + static_cast<size_t>(iv[i]) * esize, x.raw.data() + i * esize, esize);
  }
  if (!ctx.hasInput(2)) {
    ctx.setOutput(0, std::move(full));
    return;
  }
  // an explicit output_shape places the inferred result at its origin (zeros elsewhere)
  std::vector<int64_t> yd = inputInts(ctx, 2);
  if (yd.size() != inferred.size()) ctx.fail("output_shape has the wrong rank");
  Tensor out = makeTensor(x.dtype(), yd);
  std::vector<int64_t> outStrides = stridesOf(yd), pos;
  for (int64_t i = 0; i < total; ++i) {
    unravel(i, inferred, pos);
    int64_t off = 0;
    bool inside = true;
    for (size_t a = 0; a < pos.size() && inside; ++a) {
      inside = pos[a] < yd[a];
      off += pos[a] * outStrides[a];
    }
    if (inside)
      std::memcpy(out.raw.mutableData() + static_cast<size_t>(off) * esize,
                  full.raw.data() + static_cast<size_t>(i) * esize, esize);
  }
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Recurrent layers

/// One activation function of a recurrent layer with its alpha/beta.
struct Activation {
  std::string name;  // lower case
  double alpha = 0, beta = 0;
  double operator()(double v) const {
    if (name == "sigmoid") return sigmoid(v);
    if (name == "tanh") return std::tanh(v);
    if (name == "relu") return std::max(v, 0.0);
    if (name == "affine") return alpha * v + beta;
    if (name == "leakyrelu") return v >= 0 ? v : alpha * v;
    if (name == "thresholdedrelu") return v > alpha ? v : 0.0;
    if (name == "scaledtanh") return alpha * std::tanh(beta * v);
    if (name == "hardsigmoid") return std::clamp(alpha * v + beta, 0.0, 1.0);
    if (name == "elu") return v >= 0 ? v : alpha * (std::exp(v) - 1);
    if (name == "softsign") return v / (1 + std::fabs(v));
    if (name == "softplus") return std::log1p(std::exp(v));
    return v;
  }
};

/// The activations of every direction: the attribute's list (one set per direction, in
/// direction order), alphas and betas consumed in order by the functions that take them.
std::vector<Activation> activations(const KernelContext& ctx, const std::vector<std::string>& defaults, int64_t dirs) {
  std::vector<std::string> names = ctx.attrStrings("activations", {});
  size_t per = defaults.size();
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == per && dirs == 2) {
    names.insert(names.end(), names.begin(), names.end());
  }
  if (names.size() != per * static_cast<size_t>(dirs))
    ctx.fail(fmt::format("attribute 'activations' has {} functions, expected {}", names.size(), per * dirs));
  std::vector<float> alphas = ctx.attrFloats("activation_alpha", {}), betas = ctx.attrFloats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const std::string& n : names) {
    Activation a;
    for (char ch : n) a.name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    static const char* known[] = {"sigmoid", "tanh", "relu", "affine", "leakyrelu", "thresholdedrelu",
                                  "scaledtanh", "hardsigmoid", "elu", "softsign", "softplus"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return a.name == k; }) == std::end(known))
      ctx.fail(fmt::format("unknown activation '{}'", n));
    bool usesAlpha = a.name == "affine" || a.name == "leakyrelu" || a.name == "thresholdedrelu" ||
                     a.name == "scaledtanh" || a.name == "hardsigmoid" || a.name == "elu";
    bool usesBeta = a.name == "affine" || a.name == "scaledtanh" || a.name == "hardsigmoid";
    a.alpha = a.name == "leakyrelu" ? 0.01 : a.name == "hardsigmoid" ? 0.2 : 1.0;
    a.beta = a.name == "hardsigmoid" ? 0.5 : a.name == "affine" ? 0.0 : 1.0;
    if (usesAlpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (usesBeta && bi < betas.size()) a.beta = betas[bi++];
    out.push_back(a);
  }
  return out;
}

enum class Cell { Rnn, Gru, Lstm };

/// Runs RNN, GRU or LSTM. Shapes (layout 0): X [seq, batch, input], W [dirs, G*H, input],
/// R [dirs, G*H, H], B [dirs, 2*G*H], initial_h/c [dirs, batch, H], P [dirs, 3H];
/// Y [seq, dirs, batch, H], Y_h/Y_c [dirs, batch, H]. Layout 1 swaps seq/dirs and batch.
void recurrent(KernelContext& ctx, Cell cell) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& w = ctx.tensor(1);
  const TensorData& rt = ctx.tensor(2);
  requireFloat(ctx, x, "X");
  int64_t G = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  std::string direction = ctx.attrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    ctx.fail(fmt::format("unknown direction '{}'", direction));
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  int64_t layout = ctx.attrInt("layout", 0);
  if (x.dims.size() != 3 || w.dims.size() != 3 || rt.dims.size() != 3) ctx.fail("X, W and R must have rank 3");
  int64_t S = layout ? x.dims[1] : x.dims[0], Bt = layout ? x.dims[0] : x.dims[1], In = x.dims[2];
  int64_t H = ctx.attrInt("hidden_size", rt.dims[2]);
  if (w.dims != std::vector<int64_t>{dirs, G * H, In}) ctx.fail("W has the wrong shape");
  if (rt.dims != std::vector<int64_t>{dirs, G * H, H}) ctx.fail("R has the wrong shape");
  std::vector<double> xv = toDoubles(ctx, x), wv = toDoubles(ctx, w), rv = toDoubles(ctx, rt);
  std::vector<double> bv(static_cast<size_t>(dirs * 2 * G * H), 0.0);
  if (ctx.hasInput(3)) {
    bv = toDoubles(ctx, ctx.tensor(3));
    if (static_cast<int64_t>(bv.size()) != dirs * 2 * G * H) ctx.fail("B has the wrong shape");
  }
  std::vector<int64_t> lens(static_cast<size_t>(Bt), S);
  if (ctx.hasInput(4)) {
    lens = inputInts(ctx, 4);
    if (static_cast<int64_t>(lens.size()) != Bt) ctx.fail("sequence_lens must have one value per batch entry");
    for (int64_t l : lens)
      if (l < 0 || l > S) ctx.fail(fmt::format("sequence length {} is out of range [0, {}]", l, S));
  }
  // initial states as [dirs][batch][H]
  auto loadState = [&](size_t i) {
    std::vector<double> s(static_cast<size_t>(dirs * Bt * H), 0.0);
    if (!ctx.hasInput(i)) return s;
    std::vector<double> v = toDoubles(ctx, ctx.tensor(i));
    if (static_cast<int64_t>(v.size()) != dirs * Bt * H) ctx.fail(fmt::format("input {} has the wrong shape", i));
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t b = 0; b < Bt; ++b)
        for (int64_t h = 0; h < H; ++h)
          s[static_cast<size_t>((d * Bt + b) * H + h)] =
              v[static_cast<size_t>(layout ? (b * dirs + d) * H + h : (d * Bt + b) * H + h)];
    return s;
  };
  std::vector<double> h0 = loadState(5);
  std::vector<double> c0 = cell == Cell::Lstm ? loadState(6) : std::vector<double>{};
  std::vector<double> peep(static_cast<size_t>(dirs * 3 * H), 0.0);
  if (cell == Cell::Lstm && ctx.hasInput(7)) {
    peep = toDoubles(ctx, ctx.tensor(7));
    if (static_cast<int64_t>(peep.size()) != dirs * 3 * H) ctx.fail("P has the wrong shape");
  }
  std::vector<std::string> defaults = cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                      : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  std::vector<Activation> acts = activations(ctx, defaults, dirs);
  size_t per = defaults.size();
  double clip = ctx.hasAttr("clip") ? ctx.attrFloat("clip", 0) : std::numeric_limits<double>::infinity();
  bool linearBeforeReset = ctx.attrInt("linear_before_reset", 0) != 0;
  bool inputForget = ctx.attrInt("input_forget", 0) != 0;

  // results in layout 0
  std::vector<double> y(static_cast<size_t>(S * dirs * Bt * H), 0.0);
  std::vector<double> yh(static_cast<size_t>(dirs * Bt * H), 0.0), yc(yh.size(), 0.0);
  std::vector<double> gx(static_cast<size_t>(G * H)), gh(static_cast<size_t>(G * H));
  for (int64_t d = 0; d < dirs; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    const double* W = wv.data() + d * G * H * In;
    const double* R = rv.data() + d * G * H * H;
    const double* Wb = bv.data() + d * 2 * G * H;
    const double* Rb = Wb + G * H;
    const double* Pd = peep.data() + d * 3 * H;
    const Activation& f = acts[static_cast<size_t>(d) * per];
    const Activation& g = per > 1 ? acts[static_cast<size_t>(d) * per + 1] : f;
    const Activation& hAct = per > 2 ? acts[static_cast<size_t>(d) * per + 2] : g;
    auto clipped = [&](double v) { return std::clamp(v, -clip, clip); };
    for (int64_t b = 0; b < Bt; ++b) {
      std::vector<double> h(h0.begin() + (d * Bt + b) * H, h0.begin() + (d * Bt + b + 1) * H);
      std::vector<double> c = cell == Cell::Lstm
                                  ? std::vector<double>(c0.begin() + (d * Bt + b) * H, c0.begin() + (d * Bt + b + 1) * H)
                                  : std::vector<double>{};
      int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t step = 0; step < len; ++step) {
        int64_t t = reverse ? len - 1 - step : step;
        const double* xt = xv.data() + (layout ? (b * S + t) : (t * Bt + b)) * In;
        for (int64_t j = 0; j < G * H; ++j) {
          double sx = Wb[j], sh = Rb[j];
          for (int64_t i = 0; i < In; ++i) sx += W[j * In + i] * xt[i];
          for (int64_t i = 0; i < H; ++i) sh += R[j * H + i] * h[static_cast<size_t>(i)];
          gx[static_cast<size_t>(j)] = sx;
          gh[static_cast<size_t>(j)] = sh;
        }
        std::vector<double> hn(static_cast<size_t>(H));
        if (cell == Cell::Rnn) {
          for (int64_t i = 0; i < H; ++i) hn[static_cast<size_t>(i)] = f(clipped(gx[static_cast<size_t>(i)] + gh[static_cast<size_t>(i)]));
        } else if (cell == Cell::Gru) {
          // gates in W/R/B order z, r, h
          std::vector<double> z(static_cast<size_t>(H)), r(static_cast<size_t>(H));
          for (int64_t i = 0; i < H; ++i) {
            z[static_cast<size_t>(i)] = f(clipped(gx[static_cast<size_t>(i)] + gh[static_cast<size_t>(i)]));
            r[static_cast<size_t>(i)] = f(clipped(gx[static_cast<size_t>(H + i)] + gh[static_cast<size_t>(H + i)]));
          }
          for (int64_t i = 0; i < H; ++i) {
            size_t hi = static_cast<size_t>(2 * H + i);
            double pre;
            if (linearBeforeReset) {
              pre = gx[hi] + r[static_cast<size_t>(i)] * gh[hi];
            } else {
              // the reset gate scales the previous state before the recurrence weights apply
              pre = gx[hi] + Rb[2 * H + i];
              for (int64_t k = 0; k < H; ++k)
                pre += R[(2 * H + i) * H + k] * r[static_cast<size_t>(k)] * h[static_cast<size_t>(k)];
            }
            double cand = g(clipped(pre));
            double zi = z[static_cast<size_t>(i)];
            hn[static_cast<size_t>(i)] = (1 - zi) * cand + zi * h[static_cast<size_t>(i)];
          }
        } else {
          // gates in W/R/B order i, o, f, c; peepholes i, o, f
          for (int64_t i = 0; i < H; ++i) {
            auto pre = [&](int64_t gate) { return gx[static_cast<size_t>(gate * H + i)] + gh[static_cast<size_t>(gate * H + i)]; };
            double cPrev = c[static_cast<size_t>(i)];
            double ig = f(clipped(pre(0) + Pd[i] * cPrev));
            double fg = inputForget ? 1 - ig : f(clipped(pre(2) + Pd[2 * H + i] * cPrev));
            double cand = g(clipped(pre(3)));
            double cNew = fg * cPrev + ig * cand;
            double og = f(clipped(pre(1) + Pd[H + i] * cNew));
            c[static_cast<size_t>(i)] = cNew;
            hn[static_cast<size_t>(i)] = og * hAct(cNew);
          }
        }
        h = hn;
        std::copy(h.begin(), h.end(), y.begin() + ((t * dirs + d) * Bt + b) * H);
      }
      // an empty sequence has no last state: Y_h/Y_c stay zero (as ONNX Runtime does)
      if (len == 0) continue;
      std::copy(h.begin(), h.end(), yh.begin() + (d * Bt + b) * H);
      if (cell == Cell::Lstm) std::copy(c.begin(), c.end(), yc.begin() + (d * Bt + b) * H);
    }
  }
  auto emitState = [&](size_t out, const std::vector<double>& s) {
    if (!layout) {
      ctx.setOutput(out, fromDoublesRounded(ctx, x.dtype(), {dirs, Bt, H}, s));
      return;
    }
    std::vector<double> v(s.size());
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t b = 0; b < Bt; ++b)
        std::copy_n(s.begin() + (d * Bt + b) * H, H, v.begin() + (b * dirs + d) * H);
    ctx.setOutput(out, fromDoublesRounded(ctx, x.dtype(), {Bt, dirs, H}, v));
  };
  if (ctx.wantsOutput(0)) {
    if (!layout) {
      ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), {S, dirs, Bt, H}, y));
    } else {
      std::vector<double> v(y.size());
      for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < dirs; ++d)
          for (int64_t b = 0; b < Bt; ++b)
            std::copy_n(y.begin() + ((t * dirs + d) * Bt + b) * H, H, v.begin() + ((b * S + t) * dirs + d) * H);
      ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), {Bt, S, dirs, H}, v));
    }
  }
  if (ctx.wantsOutput(1)) emitState(1, yh);
  if (cell == Cell::Lstm && ctx.wantsOutput(2)) emitState(2, yc);
}

void rnn(KernelContext& ctx) { recurrent(ctx, Cell::Rnn); }
void gru(KernelContext& ctx) { recurrent(ctx, Cell::Gru); }
void lstm(KernelContext& ctx) { recurrent(ctx, Cell::Lstm); }

}  // namespace

void registerConvRnnOps() {
  // Later versions widened the types (bfloat16 at 22) or added attributes and outputs whose
  // defaults reproduce the older behaviour (MaxPool-8 Indices, AveragePool-7 count_include_pad,
  // -10 ceil_mode, -19 dilations, GRU-3 linear_before_reset, RNN-14 layout); LpPool-1's float p
  // and LpPool-2's int p are both read. So one kernel per op serves every version.
  addRef("", "Conv", 1, "ref.conv", conv);
  addRef("", "ConvInteger", 10, "ref.conv_integer", convInteger);
  addRef("", "QLinearConv", 10, "ref.qlinear_conv", qlinearConv);
  addRef("", "ConvTranspose", 1, "ref.conv_transpose", convTranspose);
  addRef("", "DeformConv", 19, "ref.deform_conv", deformConv);
  addRef("", "CausalConvWithState", 27, "ref.causal_conv_with_state", causalConvWithState);
  addRef("", "AveragePool", 1, "ref.average_pool", averagePool);
  addRef("", "MaxPool", 1, "ref.max_pool", maxPool);
  addRef("", "LpPool", 1, "ref.lp_pool", lpPool);
  addRef("", "GlobalAveragePool", 1, "ref.global_average_pool", globalAveragePool);
  addRef("", "GlobalMaxPool", 1, "ref.global_max_pool", globalMaxPool);
  addRef("", "GlobalLpPool", 1, "ref.global_lp_pool", globalLpPool);
  addRef("", "MaxUnpool", 9, "ref.max_unpool", maxUnpool);
  addRef("", "RNN", 1, "ref.rnn", rnn);
  addRef("", "GRU", 1, "ref.gru", gru);
  addRef("", "LSTM", 1, "ref.lstm", lstm);
  registerImageOps();
}

}  // namespace onnxtool::ref
