// image.cpp: reference kernels of image ops: Resize (and the older Upsample), GridSample,
// AffineGrid, Col2Im, RoiAlign, MaxRoiPool and NonMaxSuppression. Registered through
// registerConvRnnOps() (conv_rnn.cpp), the family these ops belong to.
//
// Interpolating kernels compute in double and round once to the element type. Resize is
// separable: it resamples one axis at a time, each output position reading a few weighted taps
// along that axis, which is exactly the per-element N-d interpolation the spec describes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"
#include "exec/ref/numeric_util.h"
#include "exec/ref/resize_taps.h"

namespace onnxtool::ref {

namespace {

/// Copies element `from` of `src` to element `to` of `dst` (same dtype, whole bytes or strings).
void copyElement(const TensorData& src, int64_t from, Tensor& dst, int64_t to, size_t esize) {
  if (src.dtype() == DType::String) {
    dst.strings[static_cast<size_t>(to)] = src.strings[static_cast<size_t>(from)];
    return;
  }
  std::memcpy(dst.raw.mutableData() + static_cast<size_t>(to) * esize,
              src.raw.data() + static_cast<size_t>(from) * esize, esize);
}

// ---------------------------------------------------------------------------------------------
// Resize

/// The input coordinate output position `y` maps to along an axis of `inLen` resized by `scale`.
double sourceCoordinate(const ResizeSpec& s, size_t axis, double y, int64_t inLen, int64_t outLen) {
  double scale = s.scales[axis];
  double outW = scale * static_cast<double>(inLen);
  double in = static_cast<double>(inLen);
  const std::string& m = s.coord;
  if (m == "half_pixel") return (y + 0.5) / scale - 0.5;
  if (m == "asymmetric") return y / scale;
  if (m == "align_corners") return outW == 1 ? 0.0 : y * (in - 1) / (outW - 1);
  if (m == "pytorch_half_pixel") return outW == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (m == "half_pixel_symmetric") {
    double adjustment = static_cast<double>(outLen) / outW;
    double offset = in / 2 * (1 - adjustment);
    return offset + (y + 0.5) / scale - 0.5;
  }
  // tf_crop_and_resize
  double a = s.roiStart[axis], b = s.roiEnd[axis];
  double x = outW == 1 ? (b - a) * (in - 1) / 2 : y * (b - a) * (in - 1) / (outW - 1);
  return x + a * (in - 1);
}

double cubicKernel(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

AxisTaps axisTaps(const ResizeSpec& s, size_t axis, int64_t inLen) {
  int64_t outLen = s.outDims[axis];
  double scale = s.scales[axis];
  AxisTaps t;
  double aaScale = std::min(scale, 1.0);
  int64_t start = 0;  // offset of tap 0 relative to the left neighbour xi
  if (s.mode == "nearest") {
    t.n = 1;
  } else if (s.mode == "linear") {
    start = s.antialias ? static_cast<int64_t>(std::floor(-1 / aaScale)) + 1 : 0;
    t.n = 2 - 2 * start;
  } else {
    start = s.antialias ? static_cast<int64_t>(std::floor(-2 / aaScale)) + 1 : -1;
    t.n = 2 - 2 * start;
  }
  t.idx.resize(static_cast<size_t>(outLen * t.n));
  t.wgt.resize(t.idx.size());
  t.extrapolated.assign(static_cast<size_t>(outLen), 0);
  for (int64_t o = 0; o < outLen; ++o) {
    double x = sourceCoordinate(s, axis, static_cast<double>(o), inLen, outLen);
    if (s.coord == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(inLen - 1)))
      t.extrapolated[static_cast<size_t>(o)] = 1;
    // left neighbour and ratio in (0, 1]: an integral x counts as ratio 1 from x - 1
    double fl = std::floor(x);
    int64_t xi = static_cast<int64_t>(fl);
    double ratio = x - fl;
    if (ratio == 0) {
      ratio = 1;
      --xi;
    }
    int64_t* idx = t.idx.data() + o * t.n;
    double* w = t.wgt.data() + o * t.n;
    if (s.mode == "nearest") {
      bool up;
      const std::string& nm = s.nearestMode;
      if (ratio == 1) up = true;
      else if (nm == "round_prefer_floor") up = ratio > 0.5;
      else if (nm == "round_prefer_ceil") up = ratio >= 0.5;
      else if (nm == "floor") up = false;
      else if (nm == "ceil") up = true;
      else up = scale < 1;  // "simple": Resize-10 and Upsample
      idx[0] = xi + (up ? 1 : 0);
      w[0] = 1;
    } else {
      double sum = 0;
      for (int64_t j = 0; j < t.n; ++j) {
        int64_t offs = start + j;  // tap position relative to xi
        idx[j] = xi + offs;
        double dist = static_cast<double>(offs) - ratio;  // tap minus x
        double v;
        if (s.mode == "linear") {
          v = s.antialias ? std::max(0.0, 1 - std::fabs(dist * aaScale)) : (j == 0 ? 1 - ratio : ratio);
        } else {
          v = cubicKernel(s.antialias ? dist * aaScale : dist, s.cubicA);
        }
        w[j] = v;
        sum += v;
      }
      if (s.antialias && sum != 0)
        for (int64_t j = 0; j < t.n; ++j) w[j] /= sum;
      if (s.excludeOutside) {
        double kept = 0;
        for (int64_t j = 0; j < t.n; ++j) {
          if (idx[j] < 0 || idx[j] >= inLen) w[j] = 0;
          kept += w[j];
        }
        if (kept != 0)
          for (int64_t j = 0; j < t.n; ++j) w[j] /= kept;
      }
    }
    for (int64_t j = 0; j < t.n; ++j) idx[j] = std::clamp<int64_t>(idx[j], 0, inLen - 1);
  }
  return t;
}

/// Whether resizing `axis` changes nothing (skipped, as an identity).
bool identityAxis(const ResizeSpec& s, size_t axis, int64_t inLen) {
  bool roiIdentity = s.roiStart.empty() || s.coord != "tf_crop_and_resize" ||
                     (std::fabs(s.roiStart[axis]) < 1e-9 && std::fabs(s.roiEnd[axis] - 1) < 1e-9);
  return std::fabs(s.scales[axis] - 1) < 1e-9 && s.outDims[axis] == inLen && roiIdentity;
}

Tensor resizeNearest(const KernelContext& ctx, const TensorData& x, const ResizeSpec& s) {
  size_t r = x.dims.size();
  if (x.dtype() != DType::String && (dtypeBits(x.dtype()) < 8 || dtypeBits(x.dtype()) % 8))
    ctx.fail(fmt::format("Resize does not take {}", dtypeName(x.dtype())));
  size_t esize = x.dtype() == DType::String ? 0 : static_cast<size_t>(dtypeBits(x.dtype()) / 8);
  // per axis: the source index of every output position, -1 when extrapolated
  std::vector<std::vector<int64_t>> maps(r);
  for (size_t a = 0; a < r; ++a) {
    int64_t inLen = x.dims[a];
    bool resized = std::find(s.axes.begin(), s.axes.end(), static_cast<int64_t>(a)) != s.axes.end();
    if (!resized || identityAxis(s, a, inLen) || inLen == 0) {
      maps[a].resize(static_cast<size_t>(s.outDims[a]));
      std::iota(maps[a].begin(), maps[a].end(), 0);
      continue;
    }
    AxisTaps t = axisTaps(s, a, inLen);
    for (int64_t o = 0; o < s.outDims[a]; ++o)
      maps[a].push_back(t.extrapolated[static_cast<size_t>(o)] ? -1 : t.idx[static_cast<size_t>(o)]);
  }
  Tensor out = makeTensor(x.dtype(), s.outDims);
  Tensor fill;
  if (x.dtype() != DType::String) fill = fromDoublesRounded(ctx, x.dtype(), {1}, {s.extrapolation});
  std::vector<int64_t> inStrides = stridesOf(x.dims), o;
  for (int64_t i = 0, n = numel(s.outDims); i < n; ++i) {
    unravel(i, s.outDims, o);
    int64_t off = 0;
    bool extrap = false;
    for (size_t a = 0; a < r; ++a) {
      int64_t src = maps[a][static_cast<size_t>(o[a])];
      if (src < 0) extrap = true;
      off += src * inStrides[a];
    }
    if (!extrap) copyElement(x, off, out, i, esize);
    else if (x.dtype() != DType::String) copyElement(fill, 0, out, i, esize);
  }
  return out;
}

Tensor resizeInterpolate(const KernelContext& ctx, const TensorData& x, const ResizeSpec& s) {
  std::vector<double> cur = toDoubles(ctx, x);
  std::vector<int64_t> dims = x.dims;
  for (int64_t axis : s.axes) {
    size_t a = static_cast<size_t>(axis);
    int64_t inLen = dims[a], outLen = s.outDims[a];
    if (identityAxis(s, a, inLen)) continue;
    std::vector<int64_t> nd = dims;
    nd[a] = outLen;
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < a; ++i) outer *= dims[i];
    for (size_t i = a + 1; i < dims.size(); ++i) inner *= dims[i];
    std::vector<double> next(static_cast<size_t>(numel(nd)), 0.0);
    if (inLen == 0) {
      if (!next.empty()) ctx.fail("cannot resize an empty axis to a non-empty one");
    } else {
      AxisTaps t = axisTaps(s, a, inLen);
      for (int64_t p = 0; p < outer; ++p)
        for (int64_t o = 0; o < outLen; ++o) {
          double* dst = next.data() + (p * outLen + o) * inner;
          if (t.extrapolated[static_cast<size_t>(o)]) {
            std::fill(dst, dst + inner, s.extrapolation);
            continue;
          }
          for (int64_t j = 0; j < t.n; ++j) {
            double w = t.wgt[static_cast<size_t>(o * t.n + j)];
            const double* src = cur.data() + (p * inLen + t.idx[static_cast<size_t>(o * t.n + j)]) * inner;
            for (int64_t q = 0; q < inner; ++q) dst[q] += w * src[q];
          }
        }
    }
    cur = std::move(next);
    dims = std::move(nd);
  }
  return fromDoublesRounded(ctx, x.dtype(), s.outDims, cur);
}

void runResize(KernelContext& ctx, const TensorData& x, ResizeSpec& s) {
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic") ctx.fail(fmt::format("unknown mode '{}'", s.mode));
  static const char* coords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                                 "half_pixel_symmetric", "tf_crop_and_resize"};
  if (std::find_if(std::begin(coords), std::end(coords), [&](const char* c) { return s.coord == c; }) == std::end(coords))
    ctx.fail(fmt::format("unknown coordinate_transformation_mode '{}'", s.coord));
  for (int64_t d : s.outDims)
    if (d < 0) ctx.fail("output dimensions must not be negative");
  // Per-axis source maps and tap tables are sized by the output extents, before makeTensor
  // would refuse the output: bound them here (2^40 bytes of doubles at most).
  constexpr int64_t kMaxElements = int64_t{1} << 37;
  for (size_t a = 0; a < s.outDims.size(); ++a) {
    if (s.outDims[a] > kMaxElements || checkedElements(ctx, s.outDims) > kMaxElements)
      ctx.fail(fmt::format("output dimensions [{}] are too large to allocate", fmt::join(s.outDims, ",")));
    // antialiased taps span about 2/scale inputs: a vanishing scale would need more than exist
    if (s.antialias && s.mode != "nearest" && s.outDims[a] > 0 && !(s.scales[a] * double(kMaxElements) >= 1))
      ctx.fail(fmt::format("scale {} of axis {} is too small to antialias", s.scales[a], a));
  }
  if (s.mode == "nearest") ctx.setOutput(0, resizeNearest(ctx, x, s));
  else ctx.setOutput(0, resizeInterpolate(ctx, x, s));
}

/// Output extents for per-axis scales: floor(scale * in).
void sizesFromScales(const KernelContext& ctx, ResizeSpec& s, const std::vector<int64_t>& in) {
  s.outDims.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    double d = std::floor(s.scales[i] * static_cast<double>(in[i]));
    if (!(d < 0x1p62)) ctx.fail(fmt::format("scale {} makes axis {} of {} too large", s.scales[i], i, in[i]));
    s.outDims[i] = static_cast<int64_t>(d);
  }
}

void resize11(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  size_t r = x.dims.size();
  ResizeSpec s;
  s.mode = ctx.attrString("mode", "nearest");
  s.coord = ctx.attrString("coordinate_transformation_mode", "half_pixel");
  s.nearestMode = ctx.attrString("nearest_mode", "round_prefer_floor");
  s.cubicA = ctx.attrFloat("cubic_coeff_a", -0.75f);
  s.excludeOutside = ctx.attrInt("exclude_outside", 0) != 0;
  s.antialias = ctx.attrInt("antialias", 0) != 0;
  s.extrapolation = ctx.attrFloat("extrapolation_value", 0.0f);
  std::string policy = ctx.attrString("keep_aspect_ratio_policy", "stretch");
  std::vector<int64_t> axes = ctx.attrInts("axes", {});
  if (axes.empty()) {
    axes.resize(r);
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (int64_t& a : axes) a = normalizeAxis(ctx, a, static_cast<int64_t>(r));
  for (size_t i = 0; i < axes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (axes[i] == axes[j]) ctx.fail("attribute 'axes' repeats an axis");
  s.axes = axes;
  size_t na = axes.size();
  s.scales.assign(r, 1.0);
  s.roiStart.assign(r, 0.0);
  s.roiEnd.assign(r, 1.0);
  if (ctx.hasInput(1) && numel(ctx.tensor(1)) > 0 && s.coord == "tf_crop_and_resize") {
    std::vector<double> roi = toDoubles(ctx, ctx.tensor(1));
    if (roi.size() != 2 * na) ctx.fail(fmt::format("roi has {} values, expected {}", roi.size(), 2 * na));
    for (size_t i = 0; i < na; ++i) {
      s.roiStart[static_cast<size_t>(axes[i])] = roi[i];
      s.roiEnd[static_cast<size_t>(axes[i])] = roi[na + i];
    }
  }
  bool haveScales = ctx.hasInput(2) && numel(ctx.tensor(2)) > 0;
  bool haveSizes = ctx.hasInput(3) && numel(ctx.tensor(3)) > 0;
  if (haveScales == haveSizes) ctx.fail("exactly one of 'scales' and 'sizes' must be given");
  if (haveScales) {
    std::vector<double> sc = toDoubles(ctx, ctx.tensor(2));
    if (sc.size() != na) ctx.fail(fmt::format("scales has {} values, expected {}", sc.size(), na));
    for (size_t i = 0; i < na; ++i) {
      if (!(sc[i] > 0)) ctx.fail("scales must be positive");
      s.scales[static_cast<size_t>(axes[i])] = sc[i];
    }
    sizesFromScales(ctx, s, x.dims);
  } else {
    std::vector<int64_t> sz = inputInts(ctx, 3);
    if (sz.size() != na) ctx.fail(fmt::format("sizes has {} values, expected {}", sz.size(), na));
    s.outDims = x.dims;
    for (size_t i = 0; i < na; ++i) s.outDims[static_cast<size_t>(axes[i])] = sz[i];
    for (size_t i = 0; i < r; ++i)
      s.scales[i] = x.dims[i] ? static_cast<double>(s.outDims[i]) / static_cast<double>(x.dims[i]) : 1.0;
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller")
        ctx.fail(fmt::format("unknown keep_aspect_ratio_policy '{}'", policy));
      double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t a : axes)
        scale = policy == "not_larger" ? std::min(scale, s.scales[static_cast<size_t>(a)])
                                       : std::max(scale, s.scales[static_cast<size_t>(a)]);
      for (int64_t a : axes) {
        s.scales[static_cast<size_t>(a)] = scale;
        double d = scale * static_cast<double>(x.dims[static_cast<size_t>(a)]) + 0.5;
        if (!(d < 0x1p62)) ctx.fail(fmt::format("sizes make axis {} too large", a));
        s.outDims[static_cast<size_t>(a)] = static_cast<int64_t>(d);
      }
    }
  }
  runResize(ctx, x, s);
}

/// Resize-10 and Upsample: scales only, asymmetric coordinates, nearest rounds down when
/// upsampling and up when downsampling.
void resizeAsymmetric(KernelContext& ctx, const TensorData& x, std::vector<double> scales, std::string mode) {
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";
  if (scales.size() != x.dims.size())
    ctx.fail(fmt::format("scales has {} values, expected {}", scales.size(), x.dims.size()));
  for (double v : scales)
    if (!(v > 0)) ctx.fail("scales must be positive");
  ResizeSpec s;
  s.mode = mode;
  s.coord = "asymmetric";
  s.nearestMode = "simple";
  s.scales = std::move(scales);
  s.axes.resize(x.dims.size());
  std::iota(s.axes.begin(), s.axes.end(), 0);
  sizesFromScales(ctx, s, x.dims);
  runResize(ctx, x, s);
}

void resize10(KernelContext& ctx) {
  resizeAsymmetric(ctx, ctx.tensor(0), toDoubles(ctx, ctx.tensor(1)), ctx.attrString("mode", "nearest"));
}

void upsample1(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() != 4) ctx.fail("Upsample-1 takes a 4-D input");
  resizeAsymmetric(ctx, x, {1.0, 1.0, ctx.attrFloat("height_scale", 1.0f), ctx.attrFloat("width_scale", 1.0f)},
                   ctx.attrString("mode", "nearest"));
}

void upsample7(KernelContext& ctx) {
  std::vector<float> sc = ctx.attrFloats("scales", {});
  resizeAsymmetric(ctx, ctx.tensor(0), std::vector<double>(sc.begin(), sc.end()), ctx.attrString("mode", "nearest"));
}

void upsample9(KernelContext& ctx) {
  resizeAsymmetric(ctx, ctx.tensor(0), toDoubles(ctx, ctx.tensor(1)), ctx.attrString("mode", "nearest"));
}

// ---------------------------------------------------------------------------------------------
// GridSample and AffineGrid

/// Reflects x into [lo, hi] by folding at the borders (repeatedly).
double reflectInto(double x, double lo, double hi) {
  double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    double dx = lo - x;
    double n = std::floor(dx / range);
    double rem = dx - n * range;
    return std::fmod(n, 2) == 0 ? lo + rem : hi - rem;
  }
  if (x > hi) {
    double dx = x - hi;
    double n = std::floor(dx / range);
    double rem = dx - n * range;
    return std::fmod(n, 2) == 0 ? hi - rem : lo + rem;
  }
  return x;
}

void gridSample(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& grid = ctx.tensor(1);
  size_t r = x.dims.size() < 2 ? 0 : x.dims.size() - 2;
  if (r < 1 || grid.dims.size() != r + 2 || grid.dims[0] != x.dims[0] || grid.dims.back() != static_cast<int64_t>(r))
    ctx.fail("grid must have shape [N, out..., rank] matching X [N, C, in...]");
  std::string mode = ctx.attrString("mode", "linear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "linear" && mode != "nearest" && mode != "cubic") ctx.fail(fmt::format("unknown mode '{}'", mode));
  std::string padding = ctx.attrString("padding_mode", "zeros");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    ctx.fail(fmt::format("unknown padding_mode '{}'", padding));
  bool align = ctx.attrInt("align_corners", 0) != 0;
  int64_t N = x.dims[0], C = x.dims[1];
  std::vector<int64_t> in(x.dims.begin() + 2, x.dims.end()), out(grid.dims.begin() + 1, grid.dims.end() - 1);
  int64_t I = numel(in), P = numel(out);
  std::vector<int64_t> inStrides = stridesOf(in);
  std::vector<double> xv = toDoubles(ctx, x), gv = toDoubles(ctx, grid);
  std::vector<double> y(static_cast<size_t>(N * C * P), 0.0);
  std::vector<double> lo(r), hi(r);
  for (size_t i = 0; i < r; ++i) {
    lo[i] = align ? 0.0 : -0.5;
    hi[i] = align ? static_cast<double>(in[i] - 1) : static_cast<double>(in[i]) - 0.5;
  }
  // the input index a tap at integer position c of axis i reads, or -1 (zero padding)
  auto tapIndex = [&](size_t i, int64_t c) -> int64_t {
    if (padding == "zeros") return c >= 0 && c < in[i] ? c : -1;
    if (padding == "border") return std::clamp<int64_t>(c, 0, in[i] - 1);
    return std::clamp<int64_t>(static_cast<int64_t>(reflectInto(static_cast<double>(c), lo[i], hi[i])), 0, in[i] - 1);
  };
  int64_t n1 = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  std::vector<std::vector<int64_t>> axisIdx(r, std::vector<int64_t>(static_cast<size_t>(n1)));
  std::vector<std::vector<double>> axisW(r, std::vector<double>(static_cast<size_t>(n1)));
  int64_t taps = 1;
  for (size_t i = 0; i < r; ++i) taps *= n1;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p) {
      const double* gp = gv.data() + (n * P + p) * static_cast<int64_t>(r);
      for (size_t i = 0; i < r; ++i) {
        // grid components run innermost axis first (x, y, z); coordinates are kept in float
        float v = static_cast<float>(gp[r - 1 - i]);
        float len = static_cast<float>(in[i]);
        float c = align ? (v + 1.0f) / 2.0f * (len - 1.0f) : ((v + 1.0f) * len - 1.0f) / 2.0f;
        if (mode == "nearest") c = std::nearbyint(c);
        // a hostile grid: NaN and infinities sample outside the input
        if (!std::isfinite(c)) c = c > 0 ? static_cast<float>(hi[i]) + 8.0f : static_cast<float>(lo[i]) - 8.0f;
        if (c < lo[i] || c > hi[i]) {
          if (padding == "border") c = std::clamp(c, 0.0f, len - 1.0f);
          else if (padding == "reflection") c = static_cast<float>(reflectInto(c, lo[i], hi[i]));
        }
        // far outside, every tap reads padding: pulling c nearer keeps the int64 conversions defined
        c = std::clamp(c, static_cast<float>(lo[i]) - 8.0f, static_cast<float>(hi[i]) + 8.0f);
        if (mode == "nearest") {
          axisIdx[i][0] = tapIndex(i, static_cast<int64_t>(c));
          axisW[i][0] = 1;
          continue;
        }
        float fl = std::floor(c);
        int64_t c0 = static_cast<int64_t>(fl);
        double t = static_cast<double>(c - fl);
        if (mode == "linear") {
          axisIdx[i] = {tapIndex(i, c0), tapIndex(i, c0 + 1)};
          axisW[i] = {1 - t, t};
        } else {
          const double A = -0.75;
          for (int64_t j = 0; j < 4; ++j) {
            axisIdx[i][static_cast<size_t>(j)] = tapIndex(i, c0 - 1 + j);
            axisW[i][static_cast<size_t>(j)] = cubicKernel(t - static_cast<double>(j - 1), A);
          }
        }
      }
      for (int64_t tap = 0; tap < taps; ++tap) {
        double w = 1;
        int64_t off = 0, rest = tap;
        bool inside = true;
        for (size_t i = r; i-- > 0;) {
          size_t j = static_cast<size_t>(rest % n1);
          rest /= n1;
          int64_t idx = axisIdx[i][j];
          if (idx < 0) inside = false;
          w *= axisW[i][j];
          off += idx * inStrides[i];
        }
        if (!inside || w == 0) continue;
        for (int64_t c = 0; c < C; ++c)
          y[static_cast<size_t>((n * C + c) * P + p)] += w * xv[static_cast<size_t>((n * C + c) * I + off)];
      }
    }
  std::vector<int64_t> yd{N, C};
  yd.insert(yd.end(), out.begin(), out.end());
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), yd, y));
}

void affineGrid(KernelContext& ctx) {
  const TensorData& theta = ctx.tensor(0);
  std::vector<int64_t> size = inputInts(ctx, 1);
  bool align = ctx.attrInt("align_corners", 0) != 0;
  if (size.size() != 4 && size.size() != 5) ctx.fail("size must be [N, C, H, W] or [N, C, D, H, W]");
  size_t r = size.size() - 2;
  int64_t N = size[0];
  if (theta.dims != std::vector<int64_t>{N, static_cast<int64_t>(r), static_cast<int64_t>(r + 1)})
    ctx.fail(fmt::format("theta must have shape [{}, {}, {}]", N, r, r + 1));
  std::vector<int64_t> sp(size.begin() + 2, size.end());
  int64_t P = numel(sp);
  auto base = [&](int64_t i, int64_t len) {
    if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len);
  };
  std::vector<double> th = toDoubles(ctx, theta), out(static_cast<size_t>(N * P * static_cast<int64_t>(r)));
  std::vector<int64_t> idx;
  std::vector<double> hom(r + 1);
  for (int64_t p = 0; p < P; ++p) {
    unravel(p, sp, idx);
    // homogeneous point (x, y[, z], 1): x runs along the innermost axis
    for (size_t i = 0; i < r; ++i) hom[i] = base(idx[r - 1 - i], sp[r - 1 - i]);
    hom[r] = 1;
    for (int64_t n = 0; n < N; ++n)
      for (size_t row = 0; row < r; ++row) {
        double acc = 0;
        for (size_t k = 0; k <= r; ++k) acc += th[static_cast<size_t>(n) * r * (r + 1) + row * (r + 1) + k] * hom[k];
        out[static_cast<size_t>((n * P + p) * static_cast<int64_t>(r)) + row] = acc;
      }
  }
  std::vector<int64_t> od{N};
  od.insert(od.end(), sp.begin(), sp.end());
  od.push_back(static_cast<int64_t>(r));
  ctx.setOutput(0, fromDoublesRounded(ctx, theta.dtype(), od, out));
}

// ---------------------------------------------------------------------------------------------
// Col2Im

void col2Im(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> image = inputInts(ctx, 1), block = inputInts(ctx, 2);
  size_t r = image.size();
  if (block.size() != r) ctx.fail("image_shape and block_shape differ in length");
  if (x.dims.size() != 3) ctx.fail("input must have shape [N, C * prod(block_shape), L]");
  std::vector<int64_t> dil = ctx.attrInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> strides = ctx.attrInts("strides", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (dil.size() != r || strides.size() != r || pads.size() != 2 * r) ctx.fail("dilations, strides or pads has the wrong length");
  int64_t K = numel(block);
  if (K <= 0 || x.dims[1] % K != 0) ctx.fail("input channels are not a multiple of prod(block_shape)");
  std::vector<int64_t> blocks(r);
  for (size_t i = 0; i < r; ++i) {
    if (strides[i] < 1 || dil[i] < 1) ctx.fail("strides and dilations must be positive");
    int64_t extent = image[i] + pads[i] + pads[i + r] - (dil[i] * (block[i] - 1) + 1);
    blocks[i] = extent < 0 ? 0 : extent / strides[i] + 1;
  }
  int64_t L = numel(blocks);
  if (x.dims[2] != L) ctx.fail(fmt::format("input has {} blocks, the geometry gives {}", x.dims[2], L));
  int64_t N = x.dims[0], C = x.dims[1] / K, I = numel(image);
  std::vector<double> xv = toDoubles(ctx, x), y(static_cast<size_t>(N * C * I), 0.0);
  std::vector<int64_t> imStrides = stridesOf(image), kIdx, lIdx;
  for (int64_t k = 0; k < K; ++k) {
    unravel(k, block, kIdx);
    for (int64_t l = 0; l < L; ++l) {
      unravel(l, blocks, lIdx);
      int64_t off = 0;
      bool inside = true;
      for (size_t i = 0; i < r && inside; ++i) {
        int64_t c = lIdx[i] * strides[i] - pads[i] + kIdx[i] * dil[i];
        inside = c >= 0 && c < image[i];
        off += c * imStrides[i];
      }
      if (!inside) continue;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          y[static_cast<size_t>((n * C + c) * I + off)] += xv[static_cast<size_t>(((n * C + c) * K + k) * L + l)];
    }
  }
  std::vector<int64_t> yd{N, C};
  yd.insert(yd.end(), image.begin(), image.end());
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), yd, y));
}

// ---------------------------------------------------------------------------------------------
// RoiAlign, MaxRoiPool

/// One bilinear sample of a feature map: four positions and weights (all zero when outside).
struct BilinearSample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

BilinearSample bilinearSample(double y, double x, int64_t H, int64_t W) {
  BilinearSample s;
  if (y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W)) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= H - 1) {
    y0 = y1 = H - 1;
    y = static_cast<double>(y0);
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= W - 1) {
    x0 = x1 = W - 1;
    x = static_cast<double>(x0);
  } else {
    x1 = x0 + 1;
  }
  double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y0 * W + x0;
  s.pos[1] = y0 * W + x1;
  s.pos[2] = y1 * W + x0;
  s.pos[3] = y1 * W + x1;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

void roiAlign(KernelContext& ctx, bool halfPixelDefault) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& rois = ctx.tensor(1);
  std::vector<int64_t> batch = inputInts(ctx, 2);
  if (x.dims.size() != 4) ctx.fail("X must have shape [N, C, H, W]");
  int64_t R = static_cast<int64_t>(batch.size());
  if (rois.dims != std::vector<int64_t>{R, 4}) ctx.fail("rois must have shape [num_rois, 4]");
  std::string mode = ctx.attrString("mode", "avg");
  if (mode != "avg" && mode != "max") ctx.fail(fmt::format("unknown mode '{}'", mode));
  std::string coord = ctx.attrString("coordinate_transformation_mode", halfPixelDefault ? "half_pixel" : "output_half_pixel");
  if (coord != "half_pixel" && coord != "output_half_pixel")
    ctx.fail(fmt::format("unknown coordinate_transformation_mode '{}'", coord));
  bool halfPixel = coord == "half_pixel";
  int64_t oh = ctx.attrInt("output_height", 1), ow = ctx.attrInt("output_width", 1);
  int64_t ratio = ctx.attrInt("sampling_ratio", 0);
  double scale = ctx.attrFloat("spatial_scale", 1.0f);
  int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  std::vector<double> xv = toDoubles(ctx, x), rv = toDoubles(ctx, rois);
  std::vector<double> y(static_cast<size_t>(R * C * oh * ow), 0.0);
  for (int64_t n = 0; n < R; ++n) {
    int64_t b = batch[static_cast<size_t>(n)];
    if (b < 0 || b >= N) ctx.fail(fmt::format("batch index {} is out of range", b));
    double off = halfPixel ? 0.5 : 0.0;
    const double* roi = rv.data() + n * 4;
    double sw = roi[0] * scale - off, sh = roi[1] * scale - off;
    double roiW = roi[2] * scale - off - sw, roiH = roi[3] * scale - off - sh;
    if (!halfPixel) {
      // malformed ROIs are forced to 1x1
      roiW = std::max(roiW, 1.0);
      roiH = std::max(roiH, 1.0);
    }
    double binH = roiH / static_cast<double>(oh), binW = roiW / static_cast<double>(ow);
    int64_t gridH = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(roiH / static_cast<double>(oh)));
    int64_t gridW = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(roiW / static_cast<double>(ow)));
    double count = static_cast<double>(std::max<int64_t>(gridH * gridW, 1));
    std::vector<BilinearSample> samples;
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw)
        for (int64_t iy = 0; iy < gridH; ++iy) {
          double yy = sh + static_cast<double>(ph) * binH + (static_cast<double>(iy) + 0.5) * binH / static_cast<double>(gridH);
          for (int64_t ix = 0; ix < gridW; ++ix) {
            double xx = sw + static_cast<double>(pw) * binW + (static_cast<double>(ix) + 0.5) * binW / static_cast<double>(gridW);
            samples.push_back(bilinearSample(yy, xx, H, W));
          }
        }
    for (int64_t c = 0; c < C; ++c) {
      const double* img = xv.data() + (b * C + c) * H * W;
      size_t si = 0;
      for (int64_t q = 0; q < oh * ow; ++q) {
        double acc = 0;
        bool first = true;
        for (int64_t k = 0; k < gridH * gridW; ++k, ++si) {
          const BilinearSample& s = samples[si];
          if (mode == "avg") {
            for (int j = 0; j < 4; ++j) acc += s.w[j] * img[s.pos[j]];
          } else {
            // the max of the weighted corner values, as the ONNX reference and ONNX Runtime do
            double v = s.w[0] * img[s.pos[0]];
            for (int j = 1; j < 4; ++j) v = std::max(v, s.w[j] * img[s.pos[j]]);
            acc = first ? v : std::max(acc, v);
            first = false;
          }
        }
        y[static_cast<size_t>((n * C + c) * oh * ow + q)] = mode == "avg" ? acc / count : acc;
      }
    }
  }
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), {R, C, oh, ow}, y));
}

void roiAlign10(KernelContext& ctx) { roiAlign(ctx, false); }
void roiAlign16(KernelContext& ctx) { roiAlign(ctx, true); }

void maxRoiPool(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& rois = ctx.tensor(1);
  if (x.dims.size() != 4) ctx.fail("X must have shape [N, C, H, W]");
  if (rois.dims.size() != 2 || rois.dims[1] != 5) ctx.fail("rois must have shape [num_rois, 5]");
  std::vector<int64_t> pooled = ctx.attrInts("pooled_shape", {});
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1) ctx.fail("attribute 'pooled_shape' must be two positive values");
  double scale = ctx.attrFloat("spatial_scale", 1.0f);
  int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3], R = rois.dims[0];
  int64_t PH = pooled[0], PW = pooled[1];
  std::vector<double> xv = toDoubles(ctx, x), rv = toDoubles(ctx, rois);
  std::vector<double> y(static_cast<size_t>(R * C * PH * PW), 0.0);
  for (int64_t n = 0; n < R; ++n) {
    const double* roi = rv.data() + n * 5;
    int64_t b = static_cast<int64_t>(roi[0]);
    if (b < 0 || b >= N) ctx.fail(fmt::format("batch index {} is out of range", b));
    // corners round half away from zero (Caffe's ROI pooling)
    int64_t x1 = static_cast<int64_t>(std::round(roi[1] * scale)), y1 = static_cast<int64_t>(std::round(roi[2] * scale));
    int64_t x2 = static_cast<int64_t>(std::round(roi[3] * scale)), y2 = static_cast<int64_t>(std::round(roi[4] * scale));
    double binH = static_cast<double>(std::max<int64_t>(y2 - y1 + 1, 1)) / static_cast<double>(PH);
    double binW = static_cast<double>(std::max<int64_t>(x2 - x1 + 1, 1)) / static_cast<double>(PW);
    for (int64_t c = 0; c < C; ++c) {
      const double* img = xv.data() + (b * C + c) * H * W;
      for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw) {
          int64_t hs = std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(ph) * binH)) + y1, 0, H);
          int64_t he = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(static_cast<double>(ph + 1) * binH)) + y1, 0, H);
          int64_t ws = std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(pw) * binW)) + x1, 0, W);
          int64_t we = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(static_cast<double>(pw + 1) * binW)) + x1, 0, W);
          double best = 0;
          bool any = false;
          for (int64_t h = hs; h < he; ++h)
            for (int64_t w = ws; w < we; ++w) {
              double v = img[h * W + w];
              if (!any || v > best) best = v;
              any = true;
            }
          y[static_cast<size_t>(((n * C + c) * PH + ph) * PW + pw)] = any ? best : 0.0;
        }
    }
  }
  ctx.setOutput(0, fromDoublesRounded(ctx, x.dtype(), {R, C, PH, PW}, y));
}

// ---------------------------------------------------------------------------------------------
// NonMaxSuppression

/// Whether two boxes overlap by more than `threshold` (intersection over union). Boxes are
/// [y1, x1, y2, x2] with corners in any order, or [xc, yc, w, h] when `centerPoint`.
bool suppresses(const float* a, const float* b, bool centerPoint, float threshold) {
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (!centerPoint) {
    ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]), ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]);
    by0 = std::min(b[0], b[2]), by1 = std::max(b[0], b[2]), bx0 = std::min(b[1], b[3]), bx1 = std::max(b[1], b[3]);
  } else {
    ax0 = a[0] - a[2] / 2, ax1 = a[0] + a[2] / 2, ay0 = a[1] - a[3] / 2, ay1 = a[1] + a[3] / 2;
    bx0 = b[0] - b[2] / 2, bx1 = b[0] + b[2] / 2, by0 = b[1] - b[3] / 2, by1 = b[1] + b[3] / 2;
  }
  float ix0 = std::max(ax0, bx0), ix1 = std::min(ax1, bx1), iy0 = std::max(ay0, by0), iy1 = std::min(ay1, by1);
  if (ix1 <= ix0 || iy1 <= iy0) return false;
  float inter = (ix1 - ix0) * (iy1 - iy0);
  float areaA = (ax1 - ax0) * (ay1 - ay0), areaB = (bx1 - bx0) * (by1 - by0);
  float uni = areaA + areaB - inter;
  if (inter <= 0 || areaA <= 0 || areaB <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

void nonMaxSuppression(KernelContext& ctx) {
  const TensorData& boxes = ctx.tensor(0);
  const TensorData& scores = ctx.tensor(1);
  if (boxes.dims.size() != 3 || boxes.dims[2] != 4) ctx.fail("boxes must have shape [batches, boxes, 4]");
  if (scores.dims.size() != 3 || scores.dims[0] != boxes.dims[0] || scores.dims[2] != boxes.dims[1])
    ctx.fail("scores must have shape [batches, classes, boxes]");
  int64_t maxOut = 0;
  if (ctx.hasInput(2) && numel(ctx.tensor(2)) > 0) maxOut = std::max<int64_t>(0, ctx.tensor(2).elementAsInt(0));
  float iou = ctx.hasInput(3) && numel(ctx.tensor(3)) > 0 ? static_cast<float>(ctx.tensor(3).elementAsDouble(0)) : 0.0f;
  bool haveScoreThreshold = ctx.hasInput(4) && numel(ctx.tensor(4)) > 0;
  float scoreThreshold = haveScoreThreshold ? static_cast<float>(ctx.tensor(4).elementAsDouble(0)) : 0.0f;
  bool centerPoint = ctx.attrInt("center_point_box", 0) != 0;
  int64_t B = boxes.dims[0], K = scores.dims[1], NB = boxes.dims[1];
  std::vector<double> bd = toDoubles(ctx, boxes), sd = toDoubles(ctx, scores);
  std::vector<float> bv(bd.begin(), bd.end()), sv(sd.begin(), sd.end());
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < K; ++k) {
      const float* sc = sv.data() + (b * K + k) * NB;
      std::vector<int64_t> cand;
      for (int64_t i = 0; i < NB; ++i)
        if (!haveScoreThreshold || sc[i] > scoreThreshold) cand.push_back(i);
      // highest score first; equal scores keep the lower box index first; NaN scores after every
      // number (a bare `>` is no strict weak order once NaN is in: the order would be arbitrary)
      std::stable_sort(cand.begin(), cand.end(), [&](int64_t l, int64_t r) {
        bool nl = std::isnan(sc[l]), nr = std::isnan(sc[r]);
        return nl || nr ? !nl && nr : sc[l] > sc[r];
      });
      std::vector<int64_t> kept;
      for (int64_t i : cand) {
        if (static_cast<int64_t>(kept.size()) >= maxOut) break;
        const float* bi = bv.data() + (b * NB + i) * 4;
        bool keep = std::none_of(kept.begin(), kept.end(), [&](int64_t j) {
          return suppresses(bi, bv.data() + (b * NB + j) * 4, centerPoint, iou);
        });
        if (!keep) continue;
        kept.push_back(i);
        selected.insert(selected.end(), {b, k, i});
      }
    }
  Tensor out = makeTensor(DType::Int64, {static_cast<int64_t>(selected.size() / 3), 3});
  std::copy(selected.begin(), selected.end(), mutableData<int64_t>(out));
  ctx.setOutput(0, std::move(out));
}

}  // namespace

AxisTaps resizeAxisTaps(const ResizeSpec& s, size_t axis, int64_t inLen) { return axisTaps(s, axis, inLen); }

/// Registers the image ops; called from registerConvRnnOps().
void registerImageOps() {
  addRef("", "Resize", 10, "ref.resize10", resize10);
  addRef("", "Resize", 11, "ref.resize", resize11);
  addRef("", "Upsample", 1, "ref.upsample1", upsample1);
  addRef("", "Upsample", 7, "ref.upsample7", upsample7);
  addRef("", "Upsample", 9, "ref.upsample", upsample9);
  addRef("", "GridSample", 16, "ref.grid_sample", gridSample);
  addRef("", "AffineGrid", 20, "ref.affine_grid", affineGrid);
  addRef("", "Col2Im", 18, "ref.col2im", col2Im);
  addRef("", "RoiAlign", 10, "ref.roi_align10", roiAlign10);
  addRef("", "RoiAlign", 16, "ref.roi_align", roiAlign16);
  addRef("", "MaxRoiPool", 1, "ref.max_roi_pool", maxRoiPool);
  addRef("", "NonMaxSuppression", 10, "ref.non_max_suppression", nonMaxSuppression);
}

}  // namespace onnxtool::ref
