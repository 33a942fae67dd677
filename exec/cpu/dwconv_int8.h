// dwconv_int8.h: the int8 depthwise convolution of the cpu executor (a static QDQ MobileNet's
// DequantizeLinear -> Conv(group = channels) [-> Relu/Clip] [-> QuantizeLinear]): one channel
// plane at a time, uint8 input, int8 weights. The products (x - x_zero) * w are integers and so
// are their sums while |sum| < 2^24 (255 * 128 * taps: up to 513 taps), so they are accumulated
// exactly in float lanes; then y = acc * scale + bias [clamped] as float, or requantised to
// uint8 as QuantizeLinear does: saturate(round_half_even(y / y_scale) + y_zero) (y times the
// reciprocal of y_scale: within one step of it, equal but at rounding ties).
//
// One path per ISA (dwconv_int8_{avx512,avx2,portable}.cpp, the same body dwconv_int8_impl.inc
// compiled with each path's target flags), chosen at run time from activeIsa().
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cpu/isa.h"

namespace onnxtool::cpu::dwint8 {

/// At most this many taps (kh * kw): the bound of exact float sums of 8-bit products.
constexpr int64_t kMaxTaps = 513;

struct Plane {
  int64_t h = 0, w = 0, oh = 0, ow = 0, kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1, padT = 0, padL = 0;
};

/// What every plane of one convolution shares, computed once (prepare): the padded input's
/// layout for the path's vector width and each tap's offset in it.
struct Prepared {
  Isa isa = Isa::Portable;
  int64_t ls = 0, rows = 0, sub = 0, wide = 0;
  int64_t scratchFloats = 0;  ///< scratch one plane needs (64-byte multiple)
  int64_t off[kMaxTaps] = {};
};
Prepared prepare(Isa isa, const Plane& p);

struct Channel {
  const uint8_t* x = nullptr;  ///< [h][w]
  float xZero = 0;
  const float* wt = nullptr;   ///< [kh][kw] integer weights as float
  float scale = 0, bias = 0;   ///< y = acc * scale + bias
  bool clamp = false;
  float lo = 0, hi = 0;
  float* y = nullptr;          ///< [oh][ow] float output, or
  uint8_t* y8 = nullptr;       ///< [oh][ow] uint8: QuantizeLinear(y, yScale, yZero)
  float yScale = 1, yZero = 0;
};

/// One channel plane; `scratch` holds pre.scratchFloats floats, 64-byte aligned.
void planeFor(const Prepared& pre, const Plane& p, const Channel& c, float* scratch);

void planePortable(const Prepared& pre, const Plane& p, const Channel& c, float* scratch);
void planeAvx2(const Prepared& pre, const Plane& p, const Channel& c, float* scratch);
void planeAvx512(const Prepared& pre, const Plane& p, const Channel& c, float* scratch);
void preparePortable(const Plane& p, Prepared& pre);
void prepareAvx2(const Plane& p, Prepared& pre);
void prepareAvx512(const Plane& p, Prepared& pre);

}  // namespace onnxtool::cpu::dwint8
