// conv_common.h: what the float convolution kernels share (kernels_conv.cpp: packed GEMM and
// depthwise; kernels_winograd.cpp): the geometry of a 2-D NCHW convolution, the epilogue the
// executor fused into it, and the split of work into per-thread ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/cpu/thread_pool.h"
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

struct ConvGeometry {
  int64_t n, c, h, w, m, oh, ow, kh, kw, group, sh, sw, dh, dw, padT, padL;
};

/// The epilogue fused into a convolution (from CpuNodeInfo::fused), after the bias.
struct ConvEpilogue {
  bool residual = false;  ///< input 3 is added
  bool clamp = false;
  float lo = 0, hi = 0;
  /// Then a vec.h function (HardSwish) over the finished output; Count: none. The packed and
  /// depthwise kernels apply it (Winograd is not chosen with one).
  VecUnary act = VecUnary::Count;
  /// The input multiplied per (image, channel) by input 4 first (FusedEpilogue::inputScale):
  /// only the channel-major packed kernel of a pointwise convolution takes it (a convolution
  /// computed pixel-major declines it).
  bool inputScale = false;
  /// relu(x * inScale[c] + inShift[c]) in place of the input, per input channel (FusedEpilogue::
  /// inScale): pointwise, one group, applied by the packed kernel as it packs its input (never
  /// read in place then); empty: none.
  std::vector<float> inScale, inShift;
};

inline int64_t roundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/// Calls fn(begin, end, part) on up to `threads` disjoint ranges covering [0, n), each a
/// multiple of `grain` long (but the last), over the plan's pool (inline without one). `part`
/// (< threads) picks the caller's slice of a per-thread workspace.
template <class F>
void parallelRanges(ThreadPool* pool, int threads, int64_t n, int64_t grain, F&& fn) {
  const int64_t units = (n + grain - 1) / grain;
  const int parts = static_cast<int>(std::clamp<int64_t>(units, 1, std::max(threads, 1)));
  if (parts <= 1 || !pool) {
    fn(int64_t{0}, n, 0);
    return;
  }
  parallelFor(pool, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t part = pb; part < pe; ++part)
      fn(units * part / parts * grain, std::min(n, units * (part + 1) / parts * grain), static_cast<int>(part));
  });
}

class CpuKernel;

/// Whether the Winograd kernel takes a convolution of this geometry (3x3, stride 1, no
/// dilation, group 1, and where it measurably pays); ONNXTOOL_WINOGRAD=never declines every
/// one, =always takes every one it can run (tests).
bool winogradApplies(const ConvGeometry& g);
/// cpu.conv.f32.winograd (kernels_winograd.cpp) on weights [m][c][3][3] (transformed; a folded
/// BatchNormalization already applied), with `ownBias` (m floats) or else input 2 as the bias;
/// nullptr when a weight is NaN, infinite or too large for the transforms. Its direct fallback
/// (non-finite inputs) reads `rawWeights`, the weight initializer's bytes (held by the model,
/// which outlives the plan; maybe unaligned), times `scale` per output channel when not empty.
std::unique_ptr<CpuKernel> makeWinogradConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights,
                                            const uint8_t* rawWeights, const std::vector<float>& scale,
                                            const std::vector<float>& ownBias, const std::string& suffix, int threads);

}  // namespace onnxtool::cpu
