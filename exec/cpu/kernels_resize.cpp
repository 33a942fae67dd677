// kernels_resize.cpp: cpu.resize.f32, Resize (opset 11+) of a float NCHW tensor over its two
// spatial axes, modes nearest and linear (bilinear), every coordinate_transformation_mode but
// tf_crop_and_resize, every nearest_mode, scales or sizes given as constants (sizes with the
// "stretch" policy), no antialias or exclude_outside; other Resize nodes run the reference
// kernel. The source positions and weights are the reference kernel's own (ref::resizeAxisTaps,
// computed once at prepare), so both pick the same pixels; bilinear blends rows first, then
// columns, as the reference does (in float where it uses double).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "exec/cpu/conv_common.h"
#include "exec/cpu/kernels.h"
#include "exec/ref/resize_taps.h"

namespace onnxtool::cpu {

namespace {

/// The taps of one axis in the form the kernel reads: output o reads i0[o] (and, when not
/// `single`, i1[o]) with weights w0[o], w1[o].
struct Taps {
  bool single = true;  ///< one tap of weight 1 (nearest, or an axis left as it is)
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

class ResizeKernel : public CpuKernel {
 public:
  ResizeKernel(int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, Taps ty, Taps tx, std::string mode, int threads)
      : planes_(planes), h_(h), w_(w), oh_(oh), ow_(ow), ty_(std::move(ty)), tx_(std::move(tx)), mode_(std::move(mode)),
        threads_(std::max(threads, 1)) {}

  /// Per thread: one vertically blended input row.
  size_t workspaceBytes() const override { return static_cast<size_t>(threads_ * threadSliceFloats(w_)) * sizeof(float); }

  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    const int threads = planes_ * oh_ * ow_ < 65536 ? 1 : threads_;
    parallelRanges(args.pool, threads, planes_, 1, [&](int64_t b, int64_t e, int part) {
      float* row = static_cast<float*>(args.workspace) + part * threadSliceFloats(w_);
      for (int64_t p = b; p < e; ++p) plane(x + p * h_ * w_, y + p * oh_ * ow_, row);
    });
  }

  std::string variant() const override { return "." + mode_; }

 private:
  void plane(const float* x, float* y, float* row) const {
    for (int64_t oy = 0; oy < oh_; ++oy) {
      const size_t sy = static_cast<size_t>(oy);
      const float* src = x + ty_.i0[sy] * w_;
      if (!ty_.single) {  // the two input rows blended, over the whole row
        const float* r1 = x + ty_.i1[sy] * w_;
        const float a = ty_.w0[sy], b = ty_.w1[sy];
        for (int64_t i = 0; i < w_; ++i) row[i] = a * src[i] + b * r1[i];
        src = row;
      }
      float* out = y + oy * ow_;
      if (tx_.single) {
        for (int64_t ox = 0; ox < ow_; ++ox) out[ox] = src[tx_.i0[static_cast<size_t>(ox)]];
      } else {
        for (int64_t ox = 0; ox < ow_; ++ox) {
          const size_t o = static_cast<size_t>(ox);
          out[ox] = tx_.w0[o] * src[tx_.i0[o]] + tx_.w1[o] * src[tx_.i1[o]];
        }
      }
    }
  }

  int64_t planes_, h_, w_, oh_, ow_;
  Taps ty_, tx_;
  std::string mode_;
  int threads_;
};

/// Whether the reference kernel leaves this axis as it is (its identityAxis).
bool identityAxis(double scale, int64_t in, int64_t out) { return std::fabs(scale - 1) < 1e-9 && in == out; }

Taps tapsOf(const ref::ResizeSpec& s, size_t axis, int64_t in) {
  Taps t;
  const int64_t out = s.outDims[axis];
  if (identityAxis(s.scales[axis], in, out)) {
    for (int64_t o = 0; o < out; ++o) t.i0.push_back(o);
    return t;
  }
  ref::AxisTaps a = ref::resizeAxisTaps(s, axis, in);
  t.single = a.n == 1;
  for (int64_t o = 0; o < out; ++o) {
    const size_t k = static_cast<size_t>(o * a.n);
    t.i0.push_back(a.idx[k]);
    if (!t.single) {
      t.i1.push_back(a.idx[k + 1]);
      t.w0.push_back(static_cast<float>(a.wgt[k]));
      t.w1.push_back(static_cast<float>(a.wgt[k + 1]));
    }
  }
  return t;
}

}  // namespace

std::unique_ptr<CpuKernel> createResize(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  const auto& y = info.out(0).dims;
  if (x.size() != 4 || y.size() != 4 || y[0] != x[0] || y[1] != x[1]) return nullptr;
  for (int64_t d : x)
    if (d <= 0) return nullptr;  // empty tensors: the reference kernel
  ref::ResizeSpec s;
  s.mode = n.attrString("mode", "nearest");
  s.coord = n.attrString("coordinate_transformation_mode", "half_pixel");
  s.nearestMode = n.attrString("nearest_mode", "round_prefer_floor");
  if (s.mode != "nearest" && s.mode != "linear") return nullptr;
  static const char* coords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"};
  if (std::find(std::begin(coords), std::end(coords), s.coord) == std::end(coords)) return nullptr;
  static const char* nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (s.mode == "nearest" && std::find(std::begin(nearest), std::end(nearest), s.nearestMode) == std::end(nearest)) return nullptr;
  if (n.attrInt("antialias", 0) != 0 || n.attrInt("exclude_outside", 0) != 0) return nullptr;
  if (n.attr("axes")) return nullptr;
  // Scales (floats) or sizes (int64), whichever is a non-empty constant.
  const TensorData* scales = info.hasInput(2) && info.in(2).numElements() > 0 ? info.constants[2] : nullptr;
  const TensorData* sizes = info.hasInput(3) && info.in(3).numElements() > 0 ? info.constants[3] : nullptr;
  const bool haveScales = info.hasInput(2) && info.in(2).numElements() > 0, haveSizes = info.hasInput(3) && info.in(3).numElements() > 0;
  if (haveScales == haveSizes) return nullptr;
  s.scales.assign(4, 1.0);
  s.outDims = x;
  if (haveScales) {
    if (!scales || scales->dtype() != DType::Float || scales->raw.size() != 4 * sizeof(float)) return nullptr;
    float sc[4];
    std::memcpy(sc, scales->raw.data(), sizeof sc);
    for (size_t i = 0; i < 4; ++i) {
      if (!(sc[i] > 0)) return nullptr;
      s.scales[i] = sc[i];
      s.outDims[i] = static_cast<int64_t>(std::floor(s.scales[i] * static_cast<double>(x[i])));
    }
  } else {
    if (!sizes || sizes->dtype() != DType::Int64 || sizes->raw.size() != 4 * sizeof(int64_t)) return nullptr;
    if (n.attrString("keep_aspect_ratio_policy", "stretch") != "stretch") return nullptr;
    std::memcpy(s.outDims.data(), sizes->raw.data(), 4 * sizeof(int64_t));
    for (size_t i = 0; i < 4; ++i) s.scales[i] = static_cast<double>(s.outDims[i]) / static_cast<double>(x[i]);
  }
  if (s.outDims != y || !identityAxis(s.scales[0], x[0], y[0]) || !identityAxis(s.scales[1], x[1], y[1])) return nullptr;
  s.axes = {0, 1, 2, 3};
  s.roiStart.assign(4, 0.0);
  s.roiEnd.assign(4, 1.0);
  return std::make_unique<ResizeKernel>(x[0] * x[1], x[2], x[3], y[2], y[3], tapsOf(s, 2, x[2]), tapsOf(s, 3, x[3]), s.mode, info.threads);
}

}  // namespace onnxtool::cpu
