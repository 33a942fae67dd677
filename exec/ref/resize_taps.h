// resize_taps.h: the per-axis sampling taps of Resize (reference kernel: image.cpp), shared with
// the cpu executor's Resize kernel (exec/cpu/kernels_resize.cpp) so that both read the same
// source positions with the same weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace onnxtool::ref {

struct ResizeSpec {
  std::string mode = "nearest";  // nearest | linear | cubic
  std::string coord = "half_pixel";
  std::string nearestMode = "round_prefer_floor";  // or "simple": floor upsampling, ceil downsampling
  double cubicA = -0.75;
  bool excludeOutside = false;
  bool antialias = false;
  double extrapolation = 0;
  std::vector<double> scales;            // per axis of the input
  std::vector<int64_t> outDims;          // per axis
  std::vector<double> roiStart, roiEnd;  // per axis (tf_crop_and_resize)
  std::vector<int64_t> axes;             // resized axes, in processing order
};

/// The taps of one axis: output position o reads idx[o*n + j] with weight wgt[o*n + j], or
/// the extrapolation value when extrapolated[o].
struct AxisTaps {
  int64_t n = 0;
  std::vector<int64_t> idx;
  std::vector<double> wgt;
  std::vector<char> extrapolated;
};

/// The taps of `axis` for an input of length inLen resized as `s` says (s.scales and s.outDims
/// per axis of the input; s.roiStart/roiEnd only for tf_crop_and_resize): indices clamped into
/// [0, inLen), weights in double.
AxisTaps resizeAxisTaps(const ResizeSpec& s, size_t axis, int64_t inLen);

}  // namespace onnxtool::ref
