// kernels_nchwc.cpp: the blocked-layout kernels (see kernels_nchwc.h): reorders, the pointwise
// and depthwise convolutions and GlobalAveragePool on [N][C/8][H][W][8], AVX2 + FMA through
// __attribute__((target)) (made only when activeIsa() is Avx2), and the adapter that gives a
// blocked kernel plain inputs or a plain output.
#include "exec/cpu/kernels_nchwc.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "exec/cpu/isa.h"
#include "exec/cpu/prefaulted.h"
#include "lib/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace onnxtool::cpu {

void PendingPlainConv::compute(const CpuComputeArgs&) const {
  throw Error(ErrorKind::Internal, "cpu executor: a convolution's plain kernel was never created (blocked layout pass)");
}

std::vector<size_t> NchwcKernel::blockedInputs() const {
  std::vector<size_t> r;
  if (!plainInput0) r.push_back(0);
  if (residual) r.push_back(3);
  return r;
}

#if defined(__x86_64__)

namespace {

/// dst[c * rows + r] = w[r * ld + c] for r < rows (a multiple of 4), c < cols: weight rows
/// (output channels) into columns, 4 x 4 at a time (a scalar gather, 16 streams wide, was a
/// quarter of EfficientNet-B0's plan build). Four columns of every row before the next four:
/// each destination line (the rows of one column) is written whole while in L1; row groups
/// outermost had swept the whole destination once per 4 rows (EfficientNet-B0's blocked
/// pointwise weights, AVX2 path on Sapphire Rapids: perf samples in the transpose 2940 -> 1750).
void transposeRows(const float* w, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  int64_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (int64_t r = 0; r < rows; r += 4) {
      const float* s = w + r * ld + c;
      __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + ld), r2 = _mm_loadu_ps(s + 2 * ld), r3 = _mm_loadu_ps(s + 3 * ld);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(dst + c * rows + r, r0);
      _mm_storeu_ps(dst + (c + 1) * rows + r, r1);
      _mm_storeu_ps(dst + (c + 2) * rows + r, r2);
      _mm_storeu_ps(dst + (c + 3) * rows + r, r3);
    }
  for (; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * rows + r] = w[r * ld + c];
}

}  // namespace

/// On the AVX2 path; on the AVX-512 path where 512-bit FMAs run at half rate (Zen 4), whose
/// plain 16-lane kernels gain nothing per FMA over the blocked 8-lane ones (Zen 4, 1 thread,
/// process CPU time over 300 runs, blocked against plain: MobileNetV3-Small 0.79-0.97,
/// MnasNet 0.88-1.03, EfficientNet-B0 0.93-0.95, MobileNetV2 0.93-1.03, ConvNeXt-T 0.94-0.97;
/// ResNet-50, DenseNet-121, GoogLeNet, RegNet, ShuffleNet, SqueezeNet within noise).
/// ONNXTOOL_NCHWC=0 turns it off, =1 on wherever AVX2 runs (tests, measurements).
bool nchwcEnabled() {
  const char* env = std::getenv("ONNXTOOL_NCHWC");  // read per plan (tests set it)
  const std::string mode = env ? env : "";
  const Isa isa = activeIsa();
  if (mode == "0") return false;
  if (mode == "1") return isa >= Isa::Avx2;
  return isa == Isa::Avx2 || (isa == Isa::Avx512 && avx512HalfRate());
}

namespace {

#define ONNXTOOL_AVX2 __attribute__((target("avx2,fma")))

/// Whether depthwise convolutions of small maps run from a zero-padded plane
/// (NchwcDepthwiseConv); ONNXTOOL_NCHWC_DWPAD=0 keeps them on the edge-checked rows (tests).
bool nchwcPaddedDepthwise() {
  const char* env = std::getenv("ONNXTOOL_NCHWC_DWPAD");
  return !(env && std::string(env) == "0");
}

constexpr int64_t B = kNchwcBlock;

/// r[0..7] (rows) transposed in place: r[j][i] <- r[i][j].
ONNXTOOL_AVX2 inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/// One block of 8 channel planes (x: plane i at x + i * hw) to y[hw][8].
ONNXTOOL_AVX2 void blockFromPlain(const float* x, float* y, int64_t hw) {
  int64_t p = 0;
  for (; p + 8 <= hw; p += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * hw + p);
    transpose8(r);
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(y + (p + j) * B, r[j]);
  }
  for (; p < hw; ++p)
    for (int i = 0; i < 8; ++i) y[p * B + i] = x[i * hw + p];
}

/// The inverse: y[hw][8] to 8 planes (plane i at x + i * hw).
ONNXTOOL_AVX2 void blockToPlain(const float* y, float* x, int64_t hw) {
  int64_t p = 0;
  for (; p + 8 <= hw; p += 8) {
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(y + (p + j) * B);
    transpose8(r);
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(x + i * hw + p, r[i]);
  }
  for (; p < hw; ++p)
    for (int i = 0; i < 8; ++i) x[i * hw + p] = y[p * B + i];
}

int reorderThreads(const NchwcPlane& p, int threads) { return p.floats() >= 65536 ? threads : 1; }

/// The epilogue of 8 outputs (one pixel's block): + bias, + residual, clamped.
struct Epi {
  bool clamp = false;
  float lo = 0, hi = 0;
};

ONNXTOOL_AVX2 inline __m256 finish(__m256 acc, const float* res, __m256 lo, __m256 hi, bool clamp) {
  if (res) acc = _mm256_add_ps(acc, _mm256_loadu_ps(res));
  if (clamp) acc = _mm256_min_ps(_mm256_max_ps(acc, lo), hi);
  return acc;
}

/// Pointwise tile: MR pixels x NB blocks of 8 output channels over `cblocks` blocks of input
/// channels. Input blocked (PLAIN false): pixel i, channel (cb, ci) at x + cb * 8 hw + i * 8 + ci;
/// plain: at x + (cb * 8 + ci) * hw + i. Weights w[c][NB * 8]; output block j of pixel i at
/// y + j * yStride + i * 8 (the residual likewise from res).
/// With `first` false the tile adds to what y holds (a later block of input channels); the
/// residual and clamp only with `last`.
template <int MR, int NB, bool PLAIN>
ONNXTOOL_AVX2 void pwTile(const float* x, int64_t hw, int64_t cblocks, const float* w, float* y, const float* res, int64_t yStride,
                          const float* bias, const Epi& e, bool first, bool last, const float* pf) {
  __m256 acc[MR][NB];
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) {
    const __m256 b = bias ? _mm256_loadu_ps(bias + j * 8) : _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][j] = first ? b : _mm256_loadu_ps(y + j * yStride + i * 8);
  }
  const int64_t cbStride = 8 * hw;
  for (int64_t cb = 0; cb < cblocks; ++cb, x += cbStride, w += 8 * NB * 8) {
    const float* xc = x;
#pragma GCC unroll 8
    for (int ci = 0; ci < 8; ++ci) {
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(pf + (cb * 8 + ci) * NB * 8), _MM_HINT_T0);
      __m256 wv[NB];
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) wv[j] = _mm256_loadu_ps(w + ci * NB * 8 + j * 8);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m256 a = _mm256_broadcast_ss(PLAIN ? xc + i : xc + i * 8 + ci);
#pragma GCC unroll 16
        for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(a, wv[j], acc[i][j]);
      }
      if (PLAIN) xc += hw;
    }
  }
  if (!last) {
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + j * yStride + i * 8, acc[i][j]);
    return;
  }
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
      _mm256_storeu_ps(y + j * yStride + i * 8, finish(acc[i][j], res ? res + j * yStride + i * 8 : nullptr, lo, hi, e.clamp));
}

using PwTileFn = void (*)(const float*, int64_t, int64_t, const float*, float*, const float*, int64_t, const float*, const Epi&, bool,
                          bool, const float*);

constexpr int kPwMr2 = 6;   ///< pixels per tile with two output blocks (12 accumulators)
constexpr int kPwMr1 = 12;  ///< with one output block

template <int NB, bool PLAIN, int... I>
constexpr auto pwTable(std::integer_sequence<int, I...>) {
  return std::array<PwTileFn, sizeof...(I)>{&pwTile<I + 1, NB, PLAIN>...};
}
const auto kPwTiles2 = pwTable<2, false>(std::make_integer_sequence<int, kPwMr2>{});
const auto kPwTiles1 = pwTable<1, false>(std::make_integer_sequence<int, kPwMr1>{});
const auto kPwTiles2Plain = pwTable<2, true>(std::make_integer_sequence<int, kPwMr2>{});
const auto kPwTiles1Plain = pwTable<1, true>(std::make_integer_sequence<int, kPwMr1>{});

/// 8 output pixels of an undilated row of KW taps, stride S: each input vector loaded once and
/// multiplied into every output that reads it (7 S + KW loads for 8 KW products).
template <int KW, int S>
ONNXTOOL_AVX2 inline void dwRow8(const float* row, const float* wk, __m256 acc[8]) {
  __m256 w[KW];
#pragma GCC unroll 8
  for (int kj = 0; kj < KW; ++kj) w[kj] = _mm256_loadu_ps(wk + kj * B);
#pragma GCC unroll 32
  for (int t = 0; t < 7 * S + KW; ++t) {  // input column t feeds output o = (t - kj) / S
    const __m256 v = _mm256_loadu_ps(row + t * B);
#pragma GCC unroll 8
    for (int kj = 0; kj < KW; ++kj)
      if (t - kj >= 0 && (t - kj) % S == 0 && (t - kj) / S < 8) acc[(t - kj) / S] = _mm256_fmadd_ps(v, w[kj], acc[(t - kj) / S]);
  }
}

/// Pixels [ox, ox + 8 * n) of an undilated row of stride S (KW taps), 8 at a time; returns the
/// next ox.
template <int KW, int S>
ONNXTOOL_AVX2 int64_t dwInterior8(const float* x, int64_t w, int64_t rowLo, int64_t rowHi, int64_t iy0, int64_t ox, int64_t ox1,
                                  const ConvGeometry& g, const float* wt, __m256 b, const float* res, float* y, __m256 lo, __m256 hi,
                                  bool clamp) {
  for (; ox + 8 <= ox1; ox += 8) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = b;
    for (int64_t ki = rowLo; ki < rowHi; ++ki)
      dwRow8<KW, S>(x + ((iy0 + ki * g.dh) * w + ox * S - g.padL) * B, wt + ki * KW * B, acc);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(y + (ox + i) * B, finish(acc[i], res ? res + (ox + i) * B : nullptr, lo, hi, clamp));
  }
  return ox;
}

/// Output row oy of one depthwise block from a zero-padded copy of its input plane (pw columns,
/// readable for 8 whole pixels past the row's last group): 8 pixels at a time with loads shared
/// between taps, the last group stored in part.
template <int KW, int S>
ONNXTOOL_AVX2 void dwPaddedRow(const float* pp, int64_t pw, int64_t oy, const ConvGeometry& g, const float* wt, const float* bias,
                               const float* res, float* y, const Epi& e) {
  const __m256 b = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
  for (int64_t ox = 0; ox < g.ow; ox += 8) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = b;
    for (int64_t ki = 0; ki < g.kh; ++ki) dwRow8<KW, S>(pp + ((oy * g.sh + ki) * pw + ox * S) * B, wt + ki * KW * B, acc);
    const int n = static_cast<int>(std::min<int64_t>(8, g.ow - ox));
    for (int i = 0; i < n; ++i) _mm256_storeu_ps(y + (ox + i) * B, finish(acc[i], res ? res + (ox + i) * B : nullptr, lo, hi, e.clamp));
  }
}

using DwPaddedRowFn = void (*)(const float*, int64_t, int64_t, const ConvGeometry&, const float*, const float*, const float*, float*,
                               const Epi&);

/// Output pixels [ox0, ox1) of output row oy of one depthwise block, every tap inside the
/// input (the interior): 8 pixels at a time with loads shared between taps (stride 1 or 2, 3
/// or 5 taps a row, no dilation), else 4 at a time.
ONNXTOOL_AVX2 void dwInterior(const float* x, int64_t w, int64_t rowLo, int64_t rowHi, int64_t iy0, int64_t ox0, int64_t ox1,
                              const ConvGeometry& g, const float* wt, const float* bias, const float* res, float* y, const Epi& e) {
  const __m256 b = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
  const int64_t step = g.sw * B;
  int64_t ox = ox0;
  if (g.dw == 1 && g.kw == 3 && g.sw == 1) ox = dwInterior8<3, 1>(x, w, rowLo, rowHi, iy0, ox, ox1, g, wt, b, res, y, lo, hi, e.clamp);
  if (g.dw == 1 && g.kw == 5 && g.sw == 1) ox = dwInterior8<5, 1>(x, w, rowLo, rowHi, iy0, ox, ox1, g, wt, b, res, y, lo, hi, e.clamp);
  if (g.dw == 1 && g.kw == 3 && g.sw == 2) ox = dwInterior8<3, 2>(x, w, rowLo, rowHi, iy0, ox, ox1, g, wt, b, res, y, lo, hi, e.clamp);
  if (g.dw == 1 && g.kw == 5 && g.sw == 2) ox = dwInterior8<5, 2>(x, w, rowLo, rowHi, iy0, ox, ox1, g, wt, b, res, y, lo, hi, e.clamp);
  for (; ox + 4 <= ox1; ox += 4) {
    __m256 a0 = b, a1 = b, a2 = b, a3 = b;
    for (int64_t ki = rowLo; ki < rowHi; ++ki) {
      const float* row = x + ((iy0 + ki * g.dh) * w + ox * g.sw - g.padL) * B;
      const float* wk = wt + ki * g.kw * B;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const __m256 wv = _mm256_loadu_ps(wk + kj * B);
        const float* p = row + kj * g.dw * B;
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(p), wv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + step), wv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 2 * step), wv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 3 * step), wv, a3);
      }
    }
    float* yo = y + ox * B;
    const float* r = res ? res + ox * B : nullptr;
    _mm256_storeu_ps(yo, finish(a0, r, lo, hi, e.clamp));
    _mm256_storeu_ps(yo + 8, finish(a1, r ? r + 8 : nullptr, lo, hi, e.clamp));
    _mm256_storeu_ps(yo + 16, finish(a2, r ? r + 16 : nullptr, lo, hi, e.clamp));
    _mm256_storeu_ps(yo + 24, finish(a3, r ? r + 24 : nullptr, lo, hi, e.clamp));
  }
  for (; ox < ox1; ++ox) {
    __m256 a0 = b;
    for (int64_t ki = rowLo; ki < rowHi; ++ki) {
      const float* row = x + ((iy0 + ki * g.dh) * w + ox * g.sw - g.padL) * B;
      for (int64_t kj = 0; kj < g.kw; ++kj)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + kj * g.dw * B), _mm256_loadu_ps(wt + (ki * g.kw + kj) * B), a0);
    }
    _mm256_storeu_ps(y + ox * B, finish(a0, res ? res + ox * B : nullptr, lo, hi, e.clamp));
  }
}

/// One output pixel with its taps checked against the input's columns (the edges).
ONNXTOOL_AVX2 void dwEdge(const float* x, int64_t w, int64_t rowLo, int64_t rowHi, int64_t iy0, int64_t ox, const ConvGeometry& g,
                          const float* wt, const float* bias, const float* res, float* y, const Epi& e) {
  __m256 a0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  for (int64_t ki = rowLo; ki < rowHi; ++ki) {
    const float* row = x + (iy0 + ki * g.dh) * w * B;
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int64_t ix = ox * g.sw - g.padL + kj * g.dw;
      if (ix < 0 || ix >= w) continue;
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + ix * B), _mm256_loadu_ps(wt + (ki * g.kw + kj) * B), a0);
    }
  }
  _mm256_storeu_ps(y + ox * B, finish(a0, res ? res + ox * B : nullptr, _mm256_set1_ps(e.lo), _mm256_set1_ps(e.hi), e.clamp));
}

/// A direct convolution from a plain input (a stem: few input channels) to blocked outputs: MR
/// output pixels of one row x NB blocks, every tap inside the input (interior pixels), the rows
/// ki in [rowLo, rowHi). x: the image's planes [c][h][w]; w[c][kh][kw][NB * 8]; output block j of
/// pixel i at y + j * yStride + i * 8.
template <int MR, int NB>
ONNXTOOL_AVX2 void stemTile(const float* x, const ConvGeometry& g, int64_t rowLo, int64_t rowHi, int64_t iy0, int64_t ix0, const float* w,
                            float* y, int64_t yStride, const float* bias, const Epi& e) {
  __m256 acc[MR][NB];
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) {
    const __m256 b = bias ? _mm256_loadu_ps(bias + j * 8) : _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][j] = b;
  }
  const int64_t sw = g.sw;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t ki = rowLo; ki < rowHi; ++ki) {
      const float* row = x + (c * g.h + iy0 + ki * g.dh) * g.w + ix0;
      const float* wk = w + ((c * g.kh + ki) * g.kw) * NB * 8;
      for (int64_t kj = 0; kj < g.kw; ++kj, row += g.dw, wk += NB * 8) {
        __m256 wv[NB];
#pragma GCC unroll 16
        for (int j = 0; j < NB; ++j) wv[j] = _mm256_loadu_ps(wk + j * 8);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const __m256 a = _mm256_broadcast_ss(row + i * sw);
#pragma GCC unroll 16
          for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(a, wv[j], acc[i][j]);
        }
      }
    }
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + j * yStride + i * 8, finish(acc[i][j], nullptr, lo, hi, e.clamp));
}

/// One output pixel of the stem with its taps checked against the input's columns (edges).
ONNXTOOL_AVX2 void stemEdge(const float* x, const ConvGeometry& g, int nb, int64_t rowLo, int64_t rowHi, int64_t iy0, int64_t ox,
                            const float* w, float* y, int64_t yStride, const float* bias, const Epi& e) {
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
  for (int j = 0; j < nb; ++j) {
    __m256 acc = bias ? _mm256_loadu_ps(bias + j * 8) : _mm256_setzero_ps();
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ki = rowLo; ki < rowHi; ++ki) {
        const float* row = x + (c * g.h + iy0 + ki * g.dh) * g.w;
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const int64_t ix = ox * g.sw - g.padL + kj * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row + ix), _mm256_loadu_ps(w + ((c * g.kh + ki) * g.kw + kj) * nb * 8 + j * 8), acc);
        }
      }
    _mm256_storeu_ps(y + j * yStride + ox * 8, finish(acc, nullptr, lo, hi, e.clamp));
  }
}

constexpr int kStemMr = 6;

using StemTileFn = void (*)(const float*, const ConvGeometry&, int64_t, int64_t, int64_t, int64_t, const float*, float*, int64_t,
                            const float*, const Epi&);
template <int NB, int... I>
constexpr auto stemTable(std::integer_sequence<int, I...>) {
  return std::array<StemTileFn, sizeof...(I)>{&stemTile<I + 1, NB>...};
}
const auto kStemTail2 = stemTable<2>(std::make_integer_sequence<int, kStemMr - 1>{});
const auto kStemTail1 = stemTable<1>(std::make_integer_sequence<int, kStemMr - 1>{});

/// GlobalAveragePool of one block: y[i] = mean over p of x[p][i].
ONNXTOOL_AVX2 void gapBlock(const float* x, int64_t hw, float* y) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  for (int64_t p0 = 0; p0 < hw; p0 += 64) {  // float sums of 64 pixels, then added in double
    const int64_t p1 = std::min(hw, p0 + 64);
    __m256 f0 = _mm256_setzero_ps(), f1 = f0;
    int64_t p = p0;
    for (; p + 2 <= p1; p += 2) {
      f0 = _mm256_add_ps(f0, _mm256_loadu_ps(x + p * B));
      f1 = _mm256_add_ps(f1, _mm256_loadu_ps(x + (p + 1) * B));
    }
    if (p < p1) f0 = _mm256_add_ps(f0, _mm256_loadu_ps(x + p * B));
    f0 = _mm256_add_ps(f0, f1);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(f0)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1)));
  }
  const __m256d inv = _mm256_set1_pd(1.0 / static_cast<double>(hw));
  _mm256_storeu_ps(y, _mm256_set_m128(_mm256_cvtpd_ps(_mm256_mul_pd(s1, inv)), _mm256_cvtpd_ps(_mm256_mul_pd(s0, inv))));
}

/// The channel scale of input 4 applied to a blocked input: y[n][cb][p][i] = x[...] * s[n][cb * 8 + i].
ONNXTOOL_AVX2 void scaleBlock(const float* x, const float* s, float* y, int64_t hw) {
  const __m256 v = _mm256_loadu_ps(s);
  for (int64_t p = 0; p < hw; ++p) _mm256_storeu_ps(y + p * B, _mm256_mul_ps(_mm256_loadu_ps(x + p * B), v));
}

/// y[c][j] = w[c][j] * s[c] for c < rows, j < width (a multiple of 8).
ONNXTOOL_AVX2 void scaleRows(const float* w, const float* s, float* y, int64_t rows, int64_t width) {
  for (int64_t c = 0; c < rows; ++c) {
    const __m256 v = _mm256_broadcast_ss(s + c);
    for (int64_t j = 0; j < width; j += B) _mm256_storeu_ps(y + c * width + j, _mm256_mul_ps(_mm256_loadu_ps(w + c * width + j), v));
  }
}

void (*activation(VecUnary act))(const float*, float*, int64_t) {
  return act != VecUnary::Count ? vecKernels().unary[static_cast<int>(act)] : nullptr;
}

/// Pointwise convolution: output blocks in groups of two (NB = 2; one when m / 8 is odd, for the
/// last), pixels in tiles of 6 (12 with one block); weights packed per group [c][NB * 8].
/// Threads split the tiles (or the groups when there are few tiles); each goes through chunks of
/// groups whose weights stay in L2, every tile of its range for each chunk.
class NchwcPointwiseConv : public NchwcKernel {
 public:
  NchwcPointwiseConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights, const float* bias, std::string suffix,
                     int threads)
      : g_(g), act_(ep.act), scale_(ep.inputScale), threads_(std::max(threads, 1)), variant_(".nchwc8" + suffix) {
    e_.clamp = ep.clamp, e_.lo = ep.lo, e_.hi = ep.hi;
    residual = ep.residual;
    in0 = {g.n, g.c, g.h * g.w};
    in3 = out = {g.n, g.m, g.h * g.w};
    const int64_t mb = g.m / B;
    groups_ = (mb + 1) / 2;
    w_.resize(static_cast<size_t>(g.m * g.c));  // zeros
    for (int64_t gi = 0; gi < groups_; ++gi)  // [c][nb * 8]: the group's rows as columns
      transposeRows(weights + gi * 2 * B * g.c, g.c, nbOf(gi) * B, g.c, w_.data() + gi * 2 * B * g.c);
    if (bias) bias_.assign(bias, bias + g.m);
    // Input channels in blocks of at most 256 (a tile's input, 6 KiB, stays in L1 while the
    // weights go by), groups in chunks whose weights for such a block are ~128 KiB (in L2).
    kcBlocks_ = std::min<int64_t>(g.c / B, 32);
    chunk_ = std::max<int64_t>(1, 131072 / (2 * B * kcBlocks_ * B * 4));
    tileBlock_ = std::max<int64_t>(1, 98304 / (kcBlocks_ * B * kPwMr2 * 4));
  }
  bool gainsOnlyInChains() const override { return true; }
  bool readPlainInput0() override {
    if (scale_) return false;  // the scaled copy is blocked
    plainIn_ = true;
    return true;
  }
  /// The channel scale goes into a per-image copy of the weights where they are smaller than
  /// the input (m < h w: the large maps), else into a scaled copy of the input.
  bool scalesWeights() const { return scale_ && g_.m < g_.h * g_.w; }
  size_t workspaceBytes() const override {
    if (!scale_) return 0;
    return static_cast<size_t>(scalesWeights() ? g_.n * g_.m * g_.c : in0.floats()) * sizeof(float);
  }
  double flops() const override { return 2.0 * g_.n * g_.m * g_.c * g_.h * g_.w; }
  std::string variant() const override { return variant_ + (plainIn_ ? ".plainin" : ""); }
  bool readsInput(size_t i) const override { return i != 1 && i != 2; }

  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* res = residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t hw = g_.h * g_.w, cb = g_.c / B;
    const int threads = 2.0 * g_.n * g_.m * g_.c * hw < 4e5 ? 1 : threads_;
    const float* weights = w_.data();
    int64_t imageWeights = 0;  // floats between the images' weights (scaled per image)
    if (scalesWeights()) {
      // y = W (s . x) = (W diag s) x: each group's packed rows [c][nb * 8] times s[img][c]
      const float* s = static_cast<const float*>(args.inputs[4]);
      float* ws = static_cast<float*>(args.workspace);
      imageWeights = g_.m * g_.c;
      parallelRanges(args.pool, threads, g_.n * groups_, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t u = b; u < e; ++u) {
          const int64_t img = u / groups_, gi = u % groups_, width = nbOf(gi) * B;
          const float* src = w_.data() + gi * 2 * B * g_.c;
          float* dst = ws + img * imageWeights + gi * 2 * B * g_.c;
          scaleRows(src, s + img * g_.c, dst, g_.c, width);
        }
      });
      weights = ws;
    } else if (scale_) {
      const float* s = static_cast<const float*>(args.inputs[4]);
      float* xs = static_cast<float*>(args.workspace);
      parallelRanges(args.pool, threads, g_.n * cb, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t u = b; u < e; ++u) scaleBlock(x + u * hw * B, s + u * B, xs + u * hw * B, hw);
      });
      x = xs;
    }
    const int64_t tilesPerImage = (hw + kPwMr2 - 1) / kPwMr2, tiles = g_.n * tilesPerImage;
    // Threads split the tiles, or on small maps (few tiles, uneven shares) the groups: each then
    // streams only its own weights.
    const bool byTiles = threads == 1 || tiles >= 8 * threads || groups_ < 2 * threads;
    const int64_t units = byTiles ? tiles : groups_;
    parallelRanges(args.pool, threads, units, 1, [&](int64_t b, int64_t e, int) {
      const int64_t t0 = byTiles ? b : 0, t1 = byTiles ? e : tiles;
      const int64_t g0 = byTiles ? 0 : b, g1 = byTiles ? groups_ : e;
      // Goto-style: a block of tiles' input (~96 KiB) stays in L2 while each group's weights for
      // the channel block (<= 16 KiB) stay in L1 over the tiles of the block.
      for (int64_t gc = g0; gc < g1; gc += chunk_)
        for (int64_t kb = 0; kb < cb; kb += kcBlocks_)
          for (int64_t tb = t0; tb < t1; tb += tileBlock_)
            for (int64_t gi = gc; gi < std::min(g1, gc + chunk_); ++gi) {
              const int64_t te = std::min(t1, tb + tileBlock_);
              for (int64_t t = tb; t < te; ++t) {
                const int64_t img = t / tilesPerImage, p0 = tileStart(t % tilesPerImage, tilesPerImage);
                // the last tile fetches the next group's weights for this channel block
                const bool pf = t + 1 == te && gi + 1 < g1 && nbOf(gi + 1) == 2;
                run(x, weights + img * imageWeights, res, y, img, p0,
                    static_cast<int>(tileStart(t % tilesPerImage + 1, tilesPerImage) - p0), gi, kb, pf);
              }
            }
      if (act_ != VecUnary::Count) {  // over what this range wrote, each block's pixels contiguous
        auto f = activation(act_);
        for (int64_t gi = g0; gi < g1; ++gi)
          for (int j = 0; j < nbOf(gi); ++j) {
            const int64_t ob = gi * 2 + j;
            for (int64_t img = t0 / tilesPerImage; img <= (t1 - 1) / tilesPerImage && img < g_.n; ++img) {
              const int64_t pb = tileStart(std::clamp<int64_t>(t0 - img * tilesPerImage, 0, tilesPerImage), tilesPerImage);
              const int64_t pe = tileStart(std::clamp<int64_t>(t1 - img * tilesPerImage, 0, tilesPerImage), tilesPerImage);
              if (pb >= pe) continue;
              float* yb = y + ((img * (g_.m / B) + ob) * hw + pb) * B;
              f(yb, yb, (pe - pb) * B);
            }
          }
      }
    });
  }

 private:
  int nbOf(int64_t gi) const { return gi * 2 + 1 < g_.m / B ? 2 : 1; }
  /// The first pixel of tile t of an image's `tiles` (t <= tiles): the pixels spread evenly,
  /// 5 or 6 a tile rather than 6 and a remainder (7x7 maps: 4 tiles of 6 and 5 of 5, where 8 of
  /// 6 and one pixel left a tile of two accumulators bound by the FMA latency).
  int64_t tileStart(int64_t t, int64_t tiles) const {
    const int64_t hw = g_.h * g_.w, base = hw / tiles, extra = hw % tiles;
    return t * base + std::min(t, extra);
  }
  /// Tile (img, p0, mr pixels) of group gi over input blocks [kb, kb + kcBlocks_).
  /// `weights`: the packed weights (w_, or the image's scaled copy).
  void run(const float* x, const float* weights, const float* res, float* y, int64_t img, int64_t p0, int mr, int64_t gi, int64_t kb,
           bool prefetch) const {
    const int64_t hw = g_.h * g_.w, nb = nbOf(gi), cbs = g_.c / B, kc = std::min(kcBlocks_, cbs - kb);
    const bool first = kb == 0, last = kb + kc == cbs;
    const float* xi = x + img * g_.c * hw + kb * B * hw;
    const float* wg = weights + gi * 2 * B * g_.c + kb * B * nb * B;
    const float* pf = prefetch && nb == 2 ? wg + 2 * B * g_.c : nullptr;
    const int64_t yOff = (img * (g_.m / B) + gi * 2) * hw * B + p0 * B;
    const float* bias = bias_.empty() ? nullptr : bias_.data() + gi * 2 * B;
    const int64_t pStride = plainIn_ ? 1 : B;  // blocked: (cb, p, ci) at cb * 8 hw + p * 8 + ci; plain: (cb * 8 + ci) * hw + p
    if (nb == 2) {
      (plainIn_ ? kPwTiles2Plain : kPwTiles2)[static_cast<size_t>(mr - 1)](xi + p0 * pStride, hw, kc, wg, y + yOff,
                                                                           res ? res + yOff : nullptr, hw * B, bias, e_, first, last, pf);
      return;
    }
    for (int i0 = 0; i0 < mr; i0 += kPwMr1) {  // one block: tiles of up to 12 pixels
      const int m = std::min(kPwMr1, mr - i0);
      (plainIn_ ? kPwTiles1Plain : kPwTiles1)[static_cast<size_t>(m - 1)](xi + (p0 + i0) * pStride, hw, kc, wg, y + yOff + i0 * B,
                                                                          res ? res + yOff + i0 * B : nullptr, hw * B, bias, e_, first,
                                                                          last, nullptr);
    }
  }

  ConvGeometry g_;
  VecUnary act_;
  bool scale_, plainIn_ = false;
  int threads_;
  std::string variant_;
  Epi e_;
  int64_t groups_ = 0, chunk_ = 1, kcBlocks_ = 1, tileBlock_ = 1;
  PackedFloats w_;  ///< 64-byte aligned: vector loads never straddle two lines
  std::vector<float> bias_;
};

/// Depthwise convolution: blocks of 8 channels, each output row's interior 4 pixels at a time
/// (every tap a whole vector), the edge pixels with their taps checked. Threads split the rows.
class NchwcDepthwiseConv : public NchwcKernel {
 public:
  NchwcDepthwiseConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights, const float* bias, std::string suffix,
                     int threads)
      : g_(g), act_(ep.act), threads_(std::max(threads, 1)), variant_(".nchwc8.depthwise" + suffix) {
    e_.clamp = ep.clamp, e_.lo = ep.lo, e_.hi = ep.hi;
    residual = ep.residual;
    in0 = {g.n, g.c, g.h * g.w};
    in3 = out = {g.n, g.m, g.oh * g.ow};
    const int64_t taps = g.kh * g.kw;
    w_.resize(static_cast<size_t>(g.c * taps));
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t k = 0; k < taps; ++k) w_[static_cast<size_t>((c / B * taps + k) * B + c % B)] = weights[c * taps + k];
    if (bias) bias_.assign(bias, bias + g.m);
    // The interior columns: every tap inside the row.
    oxLo_ = std::min(g.ow, std::max<int64_t>(0, (g.padL + g.sw - 1) / g.sw));
    const int64_t lastIx = g.w - 1 - (g.kw - 1) * g.dw + g.padL;  // ox * sw <= lastIx
    oxHi_ = lastIx < 0 ? oxLo_ : std::max(oxLo_, std::min(g.ow, lastIx / g.sw + 1));
    // Small maps (rows of up to 16 outputs: MobileNetV3's and EfficientNet's 7x7 and 14x14
    // stages) from a zero-padded copy of each plane: there the edge pixels, tap by tap with
    // bounds checks, were most of the row (7 wide with 5x5 taps: 4 of 7). Zen 2, 1 thread, in
    // MobileNetV3-L: 960 channels 5x5 at 7x7 + HardSwish 211 -> 75 us (ORT 139), 672 channels
    // 5x5/2 to 7x7 149 -> 129, 672 3x3 at 14x14 103 -> 69; the model 9.5 -> 9.2 ms.
    if (g.dw == 1 && g.dh == 1 && (g.kw == 3 || g.kw == 5) && (g.sw == 1 || g.sw == 2) && g.ow <= 16 && nchwcPaddedDepthwise()) {
      static const DwPaddedRowFn rows[2][2] = {{dwPaddedRow<3, 1>, dwPaddedRow<3, 2>}, {dwPaddedRow<5, 1>, dwPaddedRow<5, 2>}};
      paddedRow_ = rows[g.kw == 5][g.sw == 2];
      padRows_ = (g.oh - 1) * g.sh + g.kh;
      padCols_ = ((g.ow + 7) / 8 * 8 - 1) * g.sw + g.kw;
    }
  }
  double flops() const override { return 2.0 * g_.n * g_.c * g_.kh * g_.kw * g_.oh * g_.ow; }
  std::string variant() const override { return variant_; }
  bool readsInput(size_t i) const override { return i != 1 && i != 2; }
  size_t workspaceBytes() const override { return paddedRow_ ? static_cast<size_t>(threads_ * paddedFloats()) * sizeof(float) : 0; }

  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* res = residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t cb = g_.c / B, blocks = g_.n * cb;
    const int threads = blocks * g_.oh * g_.ow * g_.kh * g_.kw * B < 65536 ? 1 : threads_;
    if (paddedRow_) {
      parallelRanges(args.pool, threads, g_.n * g_.oh, 1, [&](int64_t b, int64_t e, int part) {
        float* pp = static_cast<float*>(args.workspace) + part * paddedFloats();
        for (int64_t img = b / g_.oh; img * g_.oh < e; ++img) {
          const int64_t r0 = std::max(b, img * g_.oh) - img * g_.oh, r1 = std::min(e, (img + 1) * g_.oh) - img * g_.oh;
          for (int64_t c = 0; c < cb; ++c) {
            const int64_t blk = img * cb + c;
            paddedPlane(x + blk * g_.h * g_.w * B, res ? res + blk * g_.oh * g_.ow * B : nullptr, y + blk * g_.oh * g_.ow * B, c, r0,
                        r1, pp);
          }
        }
      });
      return;
    }
    // Threads split the output rows (every channel block of a band of rows), as the pointwise
    // convolutions around split the pixels: a thread then reads maps its own core wrote (by
    // channel blocks, half of every input came from the other core's L2: no gain from 2 threads).
    parallelRanges(args.pool, threads, g_.n * g_.oh, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t img = b / g_.oh; img * g_.oh < e; ++img) {
        const int64_t r0 = std::max(b, img * g_.oh) - img * g_.oh, r1 = std::min(e, (img + 1) * g_.oh) - img * g_.oh;
        for (int64_t c = 0; c < cb; ++c) {
          const int64_t blk = img * cb + c;
          plane(x + blk * g_.h * g_.w * B, res ? res + blk * g_.oh * g_.ow * B : nullptr, y + blk * g_.oh * g_.ow * B, c, r0, r1);
        }
      }
    });
  }

 private:
  void plane(const float* x, const float* res, float* y, int64_t cb, int64_t r0, int64_t r1) const {
    const float* wt = w_.data() + cb * g_.kh * g_.kw * B;
    const float* bias = bias_.empty() ? nullptr : bias_.data() + cb * B;
    auto f = activation(act_);
    for (int64_t oy = r0; oy < r1; ++oy) {
      const int64_t iy0 = oy * g_.sh - g_.padT;
      // taps ki with 0 <= iy0 + ki dh < h
      int64_t rowLo = 0, rowHi = g_.kh;
      while (rowLo < g_.kh && iy0 + rowLo * g_.dh < 0) ++rowLo;
      while (rowHi > rowLo && iy0 + (rowHi - 1) * g_.dh >= g_.h) --rowHi;
      float* yr = y + oy * g_.ow * B;
      const float* rr = res ? res + oy * g_.ow * B : nullptr;
      for (int64_t ox = 0; ox < oxLo_; ++ox) dwEdge(x, g_.w, rowLo, rowHi, iy0, ox, g_, wt, bias, rr, yr, e_);
      dwInterior(x, g_.w, rowLo, rowHi, iy0, oxLo_, oxHi_, g_, wt, bias, rr, yr, e_);
      for (int64_t ox = oxHi_; ox < g_.ow; ++ox) dwEdge(x, g_.w, rowLo, rowHi, iy0, ox, g_, wt, bias, rr, yr, e_);
      if (f) f(yr, yr, g_.ow * B);
    }
  }

  int64_t paddedFloats() const { return (padRows_ * padCols_ * B + 15) / 16 * 16; }

  /// Output rows [r0, r1) of one block from the padded copy of the input rows they read.
  void paddedPlane(const float* x, const float* res, float* y, int64_t cb, int64_t r0, int64_t r1, float* pp) const {
    const float* wt = w_.data() + cb * g_.kh * g_.kw * B;
    const float* bias = bias_.empty() ? nullptr : bias_.data() + cb * B;
    const int64_t pr0 = r0 * g_.sh, pr1 = (r1 - 1) * g_.sh + g_.kh;  // padded rows read
    const int64_t left = std::min(g_.padL, padCols_), width = std::max<int64_t>(0, std::min(g_.w, padCols_ - left));
    for (int64_t r = pr0; r < pr1; ++r) {
      float* dst = pp + r * padCols_ * B;
      const int64_t iy = r - g_.padT;
      if (iy < 0 || iy >= g_.h) {
        std::memset(dst, 0, sizeof(float) * static_cast<size_t>(padCols_ * B));
        continue;
      }
      std::memset(dst, 0, sizeof(float) * static_cast<size_t>(left * B));
      std::memcpy(dst + left * B, x + iy * g_.w * B, sizeof(float) * static_cast<size_t>(width * B));
      std::memset(dst + (left + width) * B, 0, sizeof(float) * static_cast<size_t>((padCols_ - left - width) * B));
    }
    auto f = activation(act_);
    for (int64_t oy = r0; oy < r1; ++oy) {
      float* yr = y + oy * g_.ow * B;
      paddedRow_(pp, padCols_, oy, g_, wt, bias, res ? res + oy * g_.ow * B : nullptr, yr, e_);
      if (f) f(yr, yr, g_.ow * B);
    }
  }

  ConvGeometry g_;
  VecUnary act_;
  int threads_;
  std::string variant_;
  Epi e_;
  int64_t oxLo_ = 0, oxHi_ = 0;
  DwPaddedRowFn paddedRow_ = nullptr;  ///< small maps: rows from a zero-padded plane
  int64_t padRows_ = 0, padCols_ = 0;
  PackedFloats w_;  ///< 64-byte aligned: vector loads never straddle two lines
  std::vector<float> bias_;
};

/// A convolution of a plain input with few channels (a network's stem: 3 channels) writing
/// blocked outputs: direct, 6 pixels of a row x 16 output channels per tile, input values
/// broadcast from the image's rows; weights packed per pair of output blocks [c][kh][kw][16].
/// Threads split the output rows.
class NchwcStemConv : public NchwcKernel {
 public:
  NchwcStemConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights, const float* bias, std::string suffix, int threads)
      : g_(g), act_(ep.act), threads_(std::max(threads, 1)), variant_(".nchwc8.stem" + suffix) {
    e_.clamp = ep.clamp, e_.lo = ep.lo, e_.hi = ep.hi;
    plainInput0 = true;
    in0 = {g.n, g.c, g.h * g.w};
    out = {g.n, g.m, g.oh * g.ow};
    const int64_t mb = g.m / B, taps = g.c * g.kh * g.kw;
    groups_ = (mb + 1) / 2;
    w_.resize(static_cast<size_t>(g.m * taps));
    for (int64_t gi = 0; gi < groups_; ++gi)  // [tap][nb * 8]
      transposeRows(weights + gi * 2 * B * taps, taps, nbOf(gi) * B, taps, w_.data() + gi * 2 * B * taps);
    if (bias) bias_.assign(bias, bias + g.m);
    oxLo_ = std::min(g.ow, std::max<int64_t>(0, (g.padL + g.sw - 1) / g.sw));
    const int64_t lastIx = g.w - 1 - (g.kw - 1) * g.dw + g.padL;
    oxHi_ = lastIx < 0 ? oxLo_ : std::max(oxLo_, std::min(g.ow, lastIx / g.sw + 1));
  }
  double flops() const override { return 2.0 * g_.n * g_.m * g_.c * g_.kh * g_.kw * g_.oh * g_.ow; }
  std::string variant() const override { return variant_; }
  bool readsInput(size_t i) const override { return i != 1 && i != 2; }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    const int threads = flops() < 4e5 ? 1 : threads_;
    parallelRanges(args.pool, threads, g_.n * g_.oh, 1, [&](int64_t b, int64_t e, int) {
      auto f = activation(act_);
      for (int64_t u = b; u < e; ++u) {
        const int64_t img = u / g_.oh, oy = u % g_.oh;
        row(x + img * g_.c * g_.h * g_.w, y + img * g_.m * g_.oh * g_.ow, oy);
        if (f)
          for (int64_t ob = 0; ob < g_.m / B; ++ob) {
            float* yr = y + ((img * (g_.m / B) + ob) * g_.oh + oy) * g_.ow * B;
            f(yr, yr, g_.ow * B);
          }
      }
    });
  }

 private:
  int nbOf(int64_t gi) const { return gi * 2 + 1 < g_.m / B ? 2 : 1; }
  void row(const float* x, float* y, int64_t oy) const {
    const int64_t iy0 = oy * g_.sh - g_.padT, hw = g_.oh * g_.ow, taps = g_.c * g_.kh * g_.kw;
    int64_t rowLo = 0, rowHi = g_.kh;
    while (rowLo < g_.kh && iy0 + rowLo * g_.dh < 0) ++rowLo;
    while (rowHi > rowLo && iy0 + (rowHi - 1) * g_.dh >= g_.h) --rowHi;
    for (int64_t gi = 0; gi < groups_; ++gi) {
      const int nb = nbOf(gi);
      const float* wg = w_.data() + gi * 2 * B * taps;
      const float* bias = bias_.empty() ? nullptr : bias_.data() + gi * 2 * B;
      float* yr = y + (gi * 2 * hw + oy * g_.ow) * B;
      for (int64_t ox = 0; ox < oxLo_; ++ox) stemEdge(x, g_, nb, rowLo, rowHi, iy0, ox, wg, yr, hw * B, bias, e_);
      int64_t ox = oxLo_;
      for (; ox + kStemMr <= oxHi_; ox += kStemMr) {
        const int64_t ix0 = ox * g_.sw - g_.padL;
        if (nb == 2) stemTile<kStemMr, 2>(x, g_, rowLo, rowHi, iy0, ix0, wg, yr + ox * B, hw * B, bias, e_);
        else stemTile<kStemMr, 1>(x, g_, rowLo, rowHi, iy0, ix0, wg, yr + ox * B, hw * B, bias, e_);
      }
      if (ox < oxHi_) {  // the interior's last 1-5 pixels: one narrower tile (12 accumulator chains' worth of ILP, not 1)
        const int64_t ix0 = ox * g_.sw - g_.padL;
        (nb == 2 ? kStemTail2 : kStemTail1)[static_cast<size_t>(oxHi_ - ox - 1)](x, g_, rowLo, rowHi, iy0, ix0, wg, yr + ox * B, hw * B,
                                                                                 bias, e_);
        ox = oxHi_;
      }
      for (; ox < g_.ow; ++ox) stemEdge(x, g_, nb, rowLo, rowHi, iy0, ox, wg, yr, hw * B, bias, e_);
    }
  }

  ConvGeometry g_;
  VecUnary act_;
  int threads_;
  std::string variant_;
  Epi e_;
  int64_t groups_ = 0, oxLo_ = 0, oxHi_ = 0;
  PackedFloats w_;
  std::vector<float> bias_;
};

class NchwcGlobalAveragePool : public NchwcKernel {
 public:
  NchwcGlobalAveragePool(int64_t n, int64_t c, int64_t hw, int threads) : threads_(std::max(threads, 1)) {
    in0 = {n, c, hw};
    out = {n, c, 1};
  }
  bool outputBlocked() const override { return false; }
  std::string variant() const override { return ".nchwc8"; }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t blocks = in0.n * in0.c / B;
    const int threads = in0.floats() >= 2 * 65536 ? threads_ : 1;
    parallelRanges(args.pool, threads, blocks, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t u = b; u < e; ++u) gapBlock(x + u * in0.hw * B, in0.hw, y + u * B);
    });
  }

 private:
  int threads_;
};

/// A blocked kernel given plain inputs (reordered into the workspace first) and/or writing a
/// plain output (through the workspace).
class NchwcAdapter : public CpuKernel {
 public:
  NchwcAdapter(std::unique_ptr<NchwcKernel> k, std::vector<size_t> plainInputs, bool plainOutput)
      : k_(std::move(k)), plainIn_(std::move(plainInputs)), plainOut_(plainOutput && k_->outputBlocked() && k_->out.hw > 1) {
    // a map of one pixel is the same bytes in either layout
    plainIn_.erase(std::remove_if(plainIn_.begin(), plainIn_.end(), [&](size_t i) { return plane(i).hw == 1; }), plainIn_.end());
    size_t off = alignUp(k_->workspaceBytes());
    for (size_t i : plainIn_) {
      inOff_.push_back(off);
      off += alignUp(static_cast<size_t>(plane(i).floats()) * sizeof(float));
    }
    outOff_ = off;
    if (plainOut_) off += alignUp(static_cast<size_t>(k_->out.floats()) * sizeof(float));
    bytes_ = off;
    threads_ = 1;
  }
  void setThreads(int t) { threads_ = std::max(t, 1); }
  size_t workspaceBytes() const override { return bytes_; }
  double flops() const override { return k_->flops(); }
  std::string variant() const override {
    std::string v = k_->variant();
    if (!plainIn_.empty()) v += ".reorder-in";
    if (plainOut_) v += ".reorder-out";
    return v;
  }
  bool readsInput(size_t i) const override { return k_->readsInput(i); }
  void compute(const CpuComputeArgs& args) const override {
    char* ws = static_cast<char*>(args.workspace);
    // No allocation on the compute path: a convolution step has at most 5 inputs, 1 output.
    std::array<const void*, kMaxInputs> ins{};
    const size_t nIn = std::min(args.inputs.size(), kMaxInputs);
    std::copy_n(args.inputs.begin(), nIn, ins.begin());
    for (size_t j = 0; j < plainIn_.size(); ++j) {
      float* dst = reinterpret_cast<float*>(ws + inOff_[j]);
      nchwcFromPlain(static_cast<const float*>(ins[plainIn_[j]]), dst, plane(plainIn_[j]), args.pool, threads_);
      ins[plainIn_[j]] = dst;
    }
    std::array<void*, 1> outs{args.outputs[0]};
    if (plainOut_) outs[0] = ws + outOff_;
    CpuComputeArgs a = args;
    a.inputs = std::span<const void* const>(ins.data(), nIn);
    a.outputs = outs;
    a.workspace = k_->workspaceBytes() ? ws : nullptr;
    k_->compute(a);
    if (plainOut_) nchwcToPlain(static_cast<const float*>(outs[0]), static_cast<float*>(args.outputs[0]), k_->out, args.pool, threads_);
  }

 private:
  static constexpr size_t kMaxInputs = 8;
  static size_t alignUp(size_t n) { return (n + 63) / 64 * 64; }
  const NchwcPlane& plane(size_t input) const { return input == 3 ? k_->in3 : k_->in0; }
  std::unique_ptr<NchwcKernel> k_;
  std::vector<size_t> plainIn_;
  std::vector<size_t> inOff_;
  bool plainOut_;
  size_t outOff_ = 0, bytes_ = 0;
  int threads_;
};

}  // namespace

void nchwcFromPlain(const float* x, float* y, const NchwcPlane& p, ThreadPool* pool, int threads) {
  parallelRanges(pool, reorderThreads(p, threads), p.n * p.c / B, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t u = b; u < e; ++u) blockFromPlain(x + u * B * p.hw, y + u * B * p.hw, p.hw);
  });
}

void nchwcToPlain(const float* x, float* y, const NchwcPlane& p, ThreadPool* pool, int threads) {
  parallelRanges(pool, reorderThreads(p, threads), p.n * p.c / B, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t u = b; u < e; ++u) blockToPlain(x + u * B * p.hw, y + u * B * p.hw, p.hw);
  });
}

std::unique_ptr<NchwcKernel> makeNchwcConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights, const float* bias,
                                           const std::string& suffix, int threads) {
  if (!nchwcEnabled() || g.m % B || g.c == 0 || !ep.inScale.empty()) return nullptr;
  if (g.c % B && g.c >= B) return nullptr;  // only a stem reads fewer than 8 channels
  const bool pointwise = g.c % B == 0 && g.group == 1 && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.padT == 0 && g.padL == 0 &&
                         g.oh == g.h && g.ow == g.w;
  if (pointwise) return std::make_unique<NchwcPointwiseConv>(g, ep, weights, bias, suffix, threads);
  const bool depthwise = g.group == g.c && g.m == g.c && g.padT >= 0 && g.padL >= 0 && !ep.inputScale && g.oh > 0 && g.ow > 0;
  if (depthwise) return std::make_unique<NchwcDepthwiseConv>(g, ep, weights, bias, suffix, threads);
  // A stem: a plain input of fewer than 8 channels (never blocked) into a blocked output.
  const bool stem = g.group == 1 && g.c < B && g.padT >= 0 && g.padL >= 0 && !ep.residual && !ep.inputScale && g.oh > 0 && g.ow > 0;
  if (stem) return std::make_unique<NchwcStemConv>(g, ep, weights, bias, suffix, threads);
  return nullptr;
}

std::unique_ptr<NchwcKernel> makeNchwcGlobalAveragePool(int64_t n, int64_t c, int64_t hw, int threads) {
  if (!nchwcEnabled() || c % B || hw <= 0) return nullptr;
  return std::make_unique<NchwcGlobalAveragePool>(n, c, hw, threads);
}

std::unique_ptr<CpuKernel> adaptNchwc(std::unique_ptr<NchwcKernel> k, std::vector<size_t> plainInputs, bool plainOutput, int threads) {
  auto a = std::make_unique<NchwcAdapter>(std::move(k), std::move(plainInputs), plainOutput);
  a->setThreads(threads);
  return a;
}

#else  // not x86-64: no blocked layout

bool nchwcEnabled() { return false; }
std::unique_ptr<NchwcKernel> makeNchwcConv(const ConvGeometry&, const ConvEpilogue&, const float*, const float*, const std::string&, int) {
  return nullptr;
}
std::unique_ptr<NchwcKernel> makeNchwcGlobalAveragePool(int64_t, int64_t, int64_t, int) { return nullptr; }
std::unique_ptr<CpuKernel> adaptNchwc(std::unique_ptr<NchwcKernel> k, std::vector<size_t>, bool, int) { return k; }
void nchwcFromPlain(const float*, float*, const NchwcPlane&, ThreadPool*, int) {}
void nchwcToPlain(const float*, float*, const NchwcPlane&, ThreadPool*, int) {}

#endif

}  // namespace onnxtool::cpu
