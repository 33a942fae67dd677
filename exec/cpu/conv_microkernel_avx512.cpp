// conv_microkernel_avx512.cpp: the AVX-512 SGEMM micro-kernel of the convolution kernels (see
// conv_microkernels.h): a 12 x 32 tile in 24 zmm accumulators (per k step two loads of B and
// twelve broadcasts of A), or 8 x 32 where it pads the rows less; every row count from 1 to 14
// (28 accumulators) for skinny GEMMs and the pixel-major convolution's panels and their tails
// (the 1-row GEMV kernel sums k in four interleaved chains). Compiled for AVX-512 through
// __attribute__((target)) only: called when activeIsa() is Avx512.
#include "exec/cpu/conv_microkernels.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12's _mm512_max_ps/_mm512_min_ps (and _mm512_unpack*_ps, _mm512_alignr_epi32) pass an
// undefined vector as the (unused) merge source, which -W(maybe-)uninitialized reports inside
// the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace onnxtool::cpu {

#if defined(__x86_64__)

namespace {

constexpr int kNr = 32;

#define ONNXTOOL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

/// Row i of a tile: the accumulators v0 (columns 0..15) and v1 (16..31) through the epilogue
/// into C (columns past n masked off by k0/k1).
ONNXTOOL_AVX512 inline void storeRow(float* ci, int i, __m512 v0, __m512 v1, __mmask16 k0, __mmask16 k1, const TileEpilogue& ep) {
  if (ep.accumulate) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, ci));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, ci + 16));
  }
  if (ep.last) {
    if (ep.bias) {
      __m512 bv = _mm512_set1_ps(ep.bias[i]);
      v0 = _mm512_add_ps(v0, bv);
      v1 = _mm512_add_ps(v1, bv);
    }
    if (ep.colBias) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, ep.colBias));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, ep.colBias + 16));
    }
    if (ep.residual) {
      const float* r = ep.residual + i * ep.ldr;
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, r));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, r + 16));
    }
    if (ep.clamp) {  // max(lo, v) and min(hi, v) return v when v is NaN (the second operand)
      const __m512 lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
      v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
      v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
    }
  }
  _mm512_mask_storeu_ps(ci, k0, v0);
  _mm512_mask_storeu_ps(ci + 16, k1, v1);
}

ONNXTOOL_AVX512 inline __mmask16 mask0(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }
ONNXTOOL_AVX512 inline __mmask16 mask1(int n) {
  return n >= 32 ? __mmask16(0xFFFF) : n <= 16 ? __mmask16(0) : __mmask16((1u << (n - 16)) - 1);
}

/// kStridedA: A unpacked, element (i, k) at a[i * ep.lda + k] (TileEpilogue::lda); kB: B's k
/// rows packed (0), ep.ldb apart (1: TileEpilogue::ldb), at b + ep.bOff[k] (2: bOff) or that
/// split (3: bSkip). A and B packed: every stride a constant.
template <int kMr, bool kStridedA, int kB>
ONNXTOOL_AVX512 inline void kernelMx32Impl(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                                           const TileEpilogue& ep) {
  const int64_t ldb = kB == 1 ? ep.ldb : kNr;
  const int64_t* bOff = ep.bOff;
  const int64_t skip = ep.bSkip, half = ep.bHalf;
  const __mmask16 lo0 = mask0(ep.bSplit[0]), lo1 = mask0(ep.bSplit[1]);
  const int64_t lda = ep.lda;
  __m512 acc[kMr][2];
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(ep.prefetch);
  const int64_t pfSteps = ep.prefetch ? (ep.prefetchLines + 1) / 2 : 0;
  for (int64_t k = 0; k < kc; ++k) {
    if (k < pfSteps) {
      _mm_prefetch(pf + k * 128, _MM_HINT_T1);
      _mm_prefetch(pf + k * 128 + 64, _MM_HINT_T1);
    }
    const float* bk = kB >= 2 ? b + bOff[k] : b + k * ldb;
    __m512 b0, b1;
    if constexpr (kB == 3) {  // each half: the lanes before its split, then those from bSkip on
      b0 = _mm512_mask_blend_ps(lo0, _mm512_loadu_ps(bk + skip), _mm512_loadu_ps(bk));
      b1 = _mm512_mask_blend_ps(lo1, _mm512_loadu_ps(bk + half + skip), _mm512_loadu_ps(bk + half));
    } else {
      b0 = _mm512_loadu_ps(bk);
      b1 = _mm512_loadu_ps(bk + 16);
    }
    const float* ak = kStridedA ? a + k : a + k * kMr;
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      __m512 av = _mm512_set1_ps(kStridedA ? ak[i * lda] : ak[i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  // Columns n..31 are masked off; rows m..kMr-1 are not stored.
  const __mmask16 k0 = mask0(n), k1 = mask1(n);
  for (int i = 0; i < m && i < kMr; ++i) storeRow(c + i * ldc, i, acc[i][0], acc[i][1], k0, k1, ep);
}

template <int kMr>
ONNXTOOL_AVX512 void kernelMx32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                                const TileEpilogue& ep) {
  if (ep.bOff) {
    if (ep.bSkip) kernelMx32Impl<kMr, false, 3>(kc, a, b, c, ldc, m, n, ep);
    else kernelMx32Impl<kMr, false, 2>(kc, a, b, c, ldc, m, n, ep);
  } else if (ep.lda) {
    if (ep.ldb) kernelMx32Impl<kMr, true, 1>(kc, a, b, c, ldc, m, n, ep);
    else kernelMx32Impl<kMr, true, 0>(kc, a, b, c, ldc, m, n, ep);
  } else {
    if (ep.ldb) kernelMx32Impl<kMr, false, 1>(kc, a, b, c, ldc, m, n, ep);
    else kernelMx32Impl<kMr, false, 0>(kc, a, b, c, ldc, m, n, ep);
  }
}

/// r[j] lane i = r[i] lane j (16 x 16): pairs of rows interleaved, then 64-bit pairs (each
/// 128-bit lane then holds a column's 4 rows of a group of 4 rows), then 4 x 4 128-bit lanes.
ONNXTOOL_AVX512 __attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // u[g + c], lane L: column 4L + c of rows g .. g + 3
    u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c: lane G from u[4G + c] lane L
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44), v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

/// kernelMx32 storing the tile transposed (GemmMicroKernelInfo::transposed): each 16-column half
/// of the kMr x 32 accumulators transposed in registers, then column j's m rows stored (masked)
/// at c + j * ldc through the epilogue.
/// kIndirectA: A element (i, k) at a[ep.aOff[k] + i * ep.aStride] (TileEpilogue::aOff), rows
/// from kPair on ep.aDelta further (two output rows of kPair pixels; 0: one run).
template <int kMr, bool kIndirectA, int kPair = 0>
ONNXTOOL_AVX512 inline void kernelMx32TImpl(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                                            const TileEpilogue& ep) {
  const int64_t ldb = ep.ldb ? ep.ldb : kNr;  // B's k rows: packed, or unpacked rows ldb apart
  const int64_t* aOff = ep.aOff;
  const int64_t as = ep.aStride, delta = ep.aDelta;
  static_assert(kMr <= 16);
  __m512 acc[kMr][2];
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(ep.prefetch);
  const int64_t pfSteps = ep.prefetch ? (ep.prefetchLines + 1) / 2 : 0;
  for (int64_t k = 0; k < kc; ++k) {
    if (k < pfSteps) {
      _mm_prefetch(pf + k * 128, _MM_HINT_T1);
      _mm_prefetch(pf + k * 128 + 64, _MM_HINT_T1);
    }
    __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
    const float* ak = kIndirectA ? a + aOff[k] : a + k * kMr;
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      __m512 av = _mm512_set1_ps(kIndirectA ? ak[i * as + (kPair && i >= kPair ? delta : 0)] : ak[i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  const int rows = m < kMr ? m : kMr;
  const __mmask16 km = rows >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
  const __m512 lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  for (int h = 0; h < 2 && h * 16 < n; ++h) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = i < kMr ? acc[i][h] : _mm512_setzero_ps();
    transpose16(r);  // r[j]: column h * 16 + j, rows in lanes
    const int cols = n - h * 16 < 16 ? n - h * 16 : 16;
    for (int j = 0; j < cols; ++j) {
      const int col = h * 16 + j;
      float* cj = c + col * ldc;
      __m512 v = r[j];
      if (ep.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, cj));
      if (ep.last) {
        if (ep.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, ep.bias));
        if (ep.colBias) v = _mm512_add_ps(v, _mm512_set1_ps(ep.colBias[col]));
        if (ep.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, ep.residual + col * ep.ldr));
        if (ep.clamp) v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));  // NaN stays NaN (the second operand)
      }
      _mm512_mask_storeu_ps(cj, km, v);
    }
  }
}

template <int kMr>
ONNXTOOL_AVX512 void kernelMx32T(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                                 const TileEpilogue& ep) {
  if constexpr (kMr == 14) {
    if (ep.aOff && ep.aDelta) {
      kernelMx32TImpl<14, true, 7>(kc, a, b, c, ldc, m, n, ep);
      return;
    }
  }
  if (ep.aOff) kernelMx32TImpl<kMr, true>(kc, a, b, c, ldc, m, n, ep);
  else kernelMx32TImpl<kMr, false>(kc, a, b, c, ldc, m, n, ep);
}

/// One row (GEMV): four independent accumulator pairs over k (k mod 4), summed at the end, so
/// that the FMA latency does not bound a loop that streams B.
ONNXTOOL_AVX512 void kernel1x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                                const TileEpilogue& ep) {
  const int64_t ldb = ep.ldb ? ep.ldb : kNr;  // B's k rows: packed, or unpacked rows ldb apart
  __m512 s0[4], s1[4];
  for (int u = 0; u < 4; ++u) s0[u] = s1[u] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      // B streams from L3 or memory: fetch ~4 KiB ahead (no fault past its end).
      _mm_prefetch(reinterpret_cast<const char*>(b + (k + 32 + u) * ldb), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + (k + 32 + u) * ldb + 16), _MM_HINT_T0);
      const __m512 av = _mm512_set1_ps(a[k + u]);
      s0[u] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (k + u) * ldb), s0[u]);
      s1[u] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (k + u) * ldb + 16), s1[u]);
    }
  }
  for (; k < kc; ++k) {
    const __m512 av = _mm512_set1_ps(a[k]);
    s0[0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * ldb), s0[0]);
    s1[0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * ldb + 16), s1[0]);
  }
  const __m512 v0 = _mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), _mm512_add_ps(s0[2], s0[3]));
  const __m512 v1 = _mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), _mm512_add_ps(s1[2], s1[3]));
  if (m > 0) storeRow(c, 0, v0, v1, mask0(n), mask1(n), ep);
}

ONNXTOOL_AVX512 void gatherStrided(float* dst, const float* src, int64_t n, int64_t sw) {
  int64_t i = 0;
  if (sw == 2) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (; i + 17 <= n; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(_mm512_loadu_ps(src + 2 * i), even, _mm512_loadu_ps(src + 2 * i + 16)));
    if (i < n) {  // the last 1 to 16: masked loads of src[2i .. 2(n-1)] only (masked-off lanes never fault)
      const int rest = static_cast<int>(n - i), count = 2 * rest - 1;
      const __mmask16 k0 = count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
      const __mmask16 k1 = count > 16 ? __mmask16((1u << (count - 16)) - 1) : __mmask16(0);
      const __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(k0, src + 2 * i), even, _mm512_maskz_loadu_ps(k1, src + 2 * i + 16));
      _mm512_mask_storeu_ps(dst + i, __mmask16((1u << rest) - 1), v);
      i = n;
    }
  }
  for (; i < n; ++i) dst[i] = src[i * sw];
}

ONNXTOOL_AVX512 void deinterleave2(const float* src, int64_t n, float* even, float* odd) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t left = n - i;
    const __m512 a = _mm512_maskz_loadu_ps(mask0(static_cast<int>(std::min<int64_t>(left, 16))), src + i);
    const __m512 b = _mm512_maskz_loadu_ps(mask0(static_cast<int>(std::clamp<int64_t>(left - 16, 0, 16))), src + i + 16);
    const int ne = static_cast<int>(std::min<int64_t>((left + 1) / 2, 16)), no = static_cast<int>(std::min<int64_t>(left / 2, 16));
    _mm512_mask_storeu_ps(even + i / 2, mask0(ne), _mm512_permutex2var_ps(a, ie, b));
    _mm512_mask_storeu_ps(odd + i / 2, mask0(no), _mm512_permutex2var_ps(a, io, b));
  }
}

ONNXTOOL_AVX512 void maxNan(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask0(static_cast<int>(std::min<int64_t>(n - i, 16)));
    const __m512 va = _mm512_maskz_loadu_ps(k, a + i), vb = _mm512_maskz_loadu_ps(k, b + i);
    // a where b <= a or a is NaN, else b (greater, or NaN)
    const __mmask16 keepA = _mm512_cmp_ps_mask(vb, va, _CMP_LE_OQ) | _mm512_cmp_ps_mask(va, va, _CMP_UNORD_Q);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mask_blend_ps(keepA, vb, va));
  }
}

ONNXTOOL_AVX512 void lrnRow075(float* y, const float* x, const float* t, int64_t n, float bias, float scale) {
  const __m512 b = _mm512_set1_ps(bias), s = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 v = _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(k, t + i), b);
    __m512 r = _mm512_sqrt_ps(v);
    _mm512_mask_storeu_ps(y + i, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_mul_ps(r, _mm512_sqrt_ps(r))));
  }
}

/// kDepthwiseRows output rows x V vectors of 16 columns from column ox (see DepthwiseRows),
/// lanes past ow masked off. KH > 0: a KH x KW filter at stride S both ways, no dilation, known
/// at compile time: each input vector is loaded once and feeds every output row it is a tap of.
/// KH = 0: any filter, stride and dilation, one load per tap and output row.
/// Lanes k..15 of `lo` then 0..k-1 of `hi` (valignd), for k in 1..15. valignd takes an immediate:
/// the switch folds away where k is a constant after unrolling (optimised builds), and keeps
/// unoptimised (ASan) builds compiling.
ONNXTOOL_AVX512 inline __m512 shiftIn(__m512 lo, __m512 hi, int k) {
  const __m512i l = _mm512_castps_si512(lo), h = _mm512_castps_si512(hi);
  switch (k) {
#define ONNXTOOL_ALIGNR_CASE(K) \
  case K: return _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, K));
    ONNXTOOL_ALIGNR_CASE(1) ONNXTOOL_ALIGNR_CASE(2) ONNXTOOL_ALIGNR_CASE(3) ONNXTOOL_ALIGNR_CASE(4) ONNXTOOL_ALIGNR_CASE(5)
    ONNXTOOL_ALIGNR_CASE(6) ONNXTOOL_ALIGNR_CASE(7) ONNXTOOL_ALIGNR_CASE(8) ONNXTOOL_ALIGNR_CASE(9) ONNXTOOL_ALIGNR_CASE(10)
    ONNXTOOL_ALIGNR_CASE(11) ONNXTOOL_ALIGNR_CASE(12) ONNXTOOL_ALIGNR_CASE(13) ONNXTOOL_ALIGNR_CASE(14)
    ONNXTOOL_ALIGNR_CASE(15)
#undef ONNXTOOL_ALIGNR_CASE
    default: return lo;
  }
}

template <int V, int KH, int KW, int S>
ONNXTOOL_AVX512 inline void depthwiseBlock(const DepthwiseRows& a, int64_t ox) {
  constexpr int R = kDepthwiseRows;
  __m512 acc[R][V];
  const __m512 vb = _mm512_set1_ps(a.bias);
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < V; ++u) acc[r][u] = vb;
  if constexpr (KH > 0) {
#pragma GCC unroll 32
    for (int j = 0; j < (R - 1) * S + KH; ++j) {
      const float* row = a.rows[j] + ox;
      __m512 al[V + 1];  // stride 1: the aligned vectors of the row, the taps shifted out of them
      if constexpr (S == 1)
        for (int u = 0; u <= V; ++u) {
          al[u] = _mm512_loadu_ps(row + 16 * u);
          __asm__("" : "+v"(al[u]));
        }
#pragma GCC unroll 8
      for (int kj = 0; kj < KW; ++kj) {
        const float* q = row + (kj % S) * a.phaseLen + kj / S;
        __m512 v[V];
        for (int u = 0; u < V; ++u) {
          if constexpr (S == 1) {
            v[u] = kj == 0 ? al[u] : shiftIn(al[u], al[u + 1], kj);
          } else {
            v[u] = _mm512_loadu_ps(q + 16 * u);
            __asm__("" : "+v"(v[u]));  // one load in a register for every row it feeds (GCC would reload per FMA)
          }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int ki = j - r * S;
          if (ki < 0 || ki >= KH) continue;
          const __m512 wv = _mm512_set1_ps(a.w[ki * KW + kj]);
          for (int u = 0; u < V; ++u) acc[r][u] = _mm512_fmadd_ps(wv, v[u], acc[r][u]);
        }
      }
    }
  } else {
    for (int64_t ki = 0; ki < a.kh; ++ki)
      for (int64_t kj = 0; kj < a.kw; ++kj) {
        const int64_t t = kj * a.dw, off = (t % a.sw) * a.phaseLen + t / a.sw + ox;
        const __m512 wv = _mm512_set1_ps(a.w[ki * a.kw + kj]);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float* q = a.rows[r * a.sh + ki * a.dh] + off;
          for (int u = 0; u < V; ++u) acc[r][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(q + 16 * u), acc[r][u]);
        }
      }
  }
  __mmask16 k[V];
  for (int u = 0; u < V; ++u) k[u] = mask0(static_cast<int>(std::min<int64_t>(16, std::max<int64_t>(0, a.ow - ox - 16 * u))));
  const __m512 vlo = _mm512_set1_ps(a.lo), vhi = _mm512_set1_ps(a.hi);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= a.nrows) continue;  // (not break: a fully unrolled loop keeps acc in registers)
    for (int u = 0; u < V; ++u) {
      __m512 v = acc[r][u];
      if (a.res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k[u], a.res + r * a.ow + ox + 16 * u));
      if (a.clamp) v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));  // NaN stays (the second operand)
      _mm512_mask_storeu_ps(a.y + r * a.ow + ox + 16 * u, k[u], v);
    }
  }
}

template <int KH, int KW, int S>
ONNXTOOL_AVX512 void depthwiseRowsT(const DepthwiseRows& a) {
  int64_t ox = 0;
  for (; ox + 16 < a.ow; ox += 32) depthwiseBlock<2, KH, KW, S>(a, ox);
  if (ox < a.ow) depthwiseBlock<1, KH, KW, S>(a, ox);
}

ONNXTOOL_AVX512 void depthwiseChannels(const DepthwiseChannels& a) {
  // Pixels in, channels across the lanes: 16 consecutive pixels of each of the 16 planes, one
  // 16 x 16 transpose in registers (a gather per pixel costs several times more on Zen 4), each
  // pixel's vector to its place in the padded image. Lanes past nch stay zero.
  const int64_t plane = a.h * a.w;
  int64_t iy = 0, ix = 0;
  for (int64_t p0 = 0; p0 < plane; p0 += 16) {
    const int cnt = static_cast<int>(std::min<int64_t>(16, plane - p0));
    const __mmask16 kp = mask0(cnt);
    __m512 r[16];
    for (int c = 0; c < 16; ++c) r[c] = c < a.nch ? _mm512_maskz_loadu_ps(kp, a.x + c * plane + p0) : _mm512_setzero_ps();
    transpose16(r);
    for (int j = 0; j < cnt; ++j) {
      _mm512_store_ps(a.t + ((iy + a.padT) * a.pw + a.padL + ix) * 16, r[j]);
      if (++ix == a.w) ix = 0, ++iy;
    }
  }
  const __m512 vb = a.bias ? _mm512_maskz_loadu_ps(mask0(a.nch), a.bias) : _mm512_setzero_ps();
  // Eight output pixels at a time: eight independent chains over the taps.
  for (int64_t o = 0; o < a.pix; o += 8) {
    __m512 acc[8];
    const float* base[8];
    for (int p = 0; p < 8; ++p) acc[p] = vb, base[p] = a.t + a.pixOff[o + p];
    for (int64_t k = 0; k < a.ntaps; ++k) {
      const __m512 wv = _mm512_loadu_ps(a.wl + k * 16);
      const int64_t off = a.tapOff[k];
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) acc[p] = _mm512_fmadd_ps(wv, _mm512_load_ps(base[p] + off), acc[p]);
    }
    for (int p = 0; p < 8; ++p) _mm512_store_ps(a.out + (o + p) * 16, acc[p]);
  }
  // Channels back into planes (16 pixels transposed at a time), with the epilogue.
  const __m512 vlo = _mm512_set1_ps(a.lo), vhi = _mm512_set1_ps(a.hi);
  for (int64_t o = 0; o < a.pix; o += 16) {
    const int cnt = static_cast<int>(std::min<int64_t>(16, a.pix - o));
    const __mmask16 k = mask0(cnt);
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < cnt ? _mm512_load_ps(a.out + (o + j) * 16) : _mm512_setzero_ps();
    transpose16(r);
    for (int c = 0; c < a.nch; ++c) {
      __m512 v = r[c];
      if (a.res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, a.res + c * a.pix + o));
      if (a.clamp) v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));
      _mm512_mask_storeu_ps(a.y + c * a.pix + o, k, v);
    }
  }
}

/// The filter shapes of MobileNet/EfficientNet/ConvNeXt-style models unrolled, the rest general.
ONNXTOOL_AVX512 void depthwiseRows(const DepthwiseRows& a) {
  if (a.dh == 1 && a.dw == 1 && a.sh == a.sw) {
    if (a.kh == 3 && a.kw == 3 && a.sh == 1) return depthwiseRowsT<3, 3, 1>(a);
    if (a.kh == 3 && a.kw == 3 && a.sh == 2) return depthwiseRowsT<3, 3, 2>(a);
    if (a.kh == 5 && a.kw == 5 && a.sh == 1) return depthwiseRowsT<5, 5, 1>(a);
    if (a.kh == 5 && a.kw == 5 && a.sh == 2) return depthwiseRowsT<5, 5, 2>(a);
    if (a.kh == 7 && a.kw == 7 && a.sh == 1) return depthwiseRowsT<7, 7, 1>(a);  // ConvNeXt
  }
  depthwiseRowsT<0, 0, 1>(a);
}

/// Lanes [lo, hi) of 16 set (none when hi <= lo).
ONNXTOOL_AVX512 inline __mmask16 laneRange(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 16);
  return hi <= lo ? __mmask16(0) : __mmask16(mask0(static_cast<int>(hi)) & ~mask0(static_cast<int>(lo)));
}

/// 16 floats from row[off..off + 16), the lanes outside `k` zero and not read (masked loads do
/// not fault there): off may lie before the row or past its end. The address is formed as an
/// integer, never as a pointer outside the row.
ONNXTOOL_AVX512 inline __m512 loadMasked(const float* row, int64_t off, __mmask16 k) {
  return _mm512_maskz_loadu_ps(k, reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(off * 4)));
}

/// depthwiseBlock from the unpadded rows in place (RowOps::depthwiseRowsDirect). Stride 1: tap
/// kj of output column o reads input column o + kj - padL: V + 1 masked loads a row, the taps
/// shifted out of them (valignd). Stride 2: it reads 2 o + kj - padL: 2 V + 1 masked loads a
/// row, their even and odd lanes gathered (vpermt2ps), tap kj the (kj / 2)-shifted even or odd
/// vector.
/// Full: every load of the block lies inside the rows (plain loads: a masked load costs Intel
/// an extra uop on the FMA ports).
template <int V, int KH, int KW, int S, bool Full>
ONNXTOOL_AVX512 inline void depthwiseDirectBlock(const DepthwiseRows& a, int64_t ox, int64_t base, const __mmask16* lm) {
  constexpr int R = kDepthwiseRows;
  constexpr int L = S == 1 ? V + 1 : 2 * V + 1;  // loads a row
  __m512 acc[R][V];
  const __m512 vb = _mm512_set1_ps(a.bias);
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < V; ++u) acc[r][u] = vb;
  const __m512i evenIdx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i oddIdx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#pragma GCC unroll 32
  for (int j = 0; j < (R - 1) * S + KH; ++j) {
    const float* row = a.rows[j];
    __m512 ld[L];
#pragma GCC unroll 8
    for (int t = 0; t < L; ++t) {
      ld[t] = Full ? _mm512_loadu_ps(row + base + 16 * t) : loadMasked(row, base + 16 * t, lm[t]);
      __asm__("" : "+v"(ld[t]));
    }
    // Stride 2: ev[u] / od[u] hold input columns base + 32 u + 2 l (+ 1), u <= V (the last from
    // one load: its lanes past 8 are never shifted in).
    __m512 ev[S == 2 ? V + 1 : 1], od[S == 2 ? V + 1 : 1];
    if constexpr (S == 2) {
#pragma GCC unroll 4
      for (int u = 0; u <= V; ++u) {
        const __m512 hi = u < V ? ld[2 * u + 1] : _mm512_setzero_ps();
        ev[u] = _mm512_permutex2var_ps(ld[2 * u], evenIdx, hi);
        if (KW > 1) od[u] = _mm512_permutex2var_ps(ld[2 * u], oddIdx, hi);
      }
    }
#pragma GCC unroll 8
    for (int kj = 0; kj < KW; ++kj) {
      __m512 v[V];
      for (int u = 0; u < V; ++u) {
        if constexpr (S == 1) {
          v[u] = kj == 0 ? ld[u] : shiftIn(ld[u], ld[u + 1], kj);
        } else {
          const __m512* src = kj % 2 == 0 ? ev : od;
          v[u] = kj / 2 == 0 ? src[u] : shiftIn(src[u], src[u + 1], kj / 2);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int ki = j - r * S;
        if (ki < 0 || ki >= KH) continue;
        const __m512 wv = _mm512_set1_ps(a.w[ki * KW + kj]);
        for (int u = 0; u < V; ++u) acc[r][u] = _mm512_fmadd_ps(wv, v[u], acc[r][u]);
      }
    }
  }
  __mmask16 k[V];
  for (int u = 0; u < V; ++u) k[u] = mask0(static_cast<int>(std::min<int64_t>(16, std::max<int64_t>(0, a.ow - ox - 16 * u))));
  const __m512 vlo = _mm512_set1_ps(a.lo), vhi = _mm512_set1_ps(a.hi);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= a.nrows) continue;
    for (int u = 0; u < V; ++u) {
      __m512 v = acc[r][u];
      if (a.res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k[u], a.res + r * a.ow + ox + 16 * u));
      if (a.clamp) v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));  // NaN stays (the second operand)
      _mm512_mask_storeu_ps(a.y + r * a.ow + ox + 16 * u, k[u], v);
    }
  }
}

template <int V, int KH, int S>
ONNXTOOL_AVX512 inline void depthwiseDirectAt(const DepthwiseRows& a, int64_t ox) {
  constexpr int L = S == 1 ? V + 1 : 2 * V + 1;
  const int64_t base = ox * S - a.padL;
  __mmask16 lm[L];
  bool full = true;
  for (int t = 0; t < L; ++t) {
    lm[t] = laneRange(-(base + 16 * t), a.inW - (base + 16 * t));
    full &= lm[t] == 0xFFFF;
  }
  if (full)
    depthwiseDirectBlock<V, KH, KH, S, true>(a, ox, base, lm);
  else
    depthwiseDirectBlock<V, KH, KH, S, false>(a, ox, base, lm);
}

template <int KH, int S>
ONNXTOOL_AVX512 void depthwiseDirectT(const DepthwiseRows& a) {
  int64_t ox = 0;
  for (; ox + 16 < a.ow; ox += 32) depthwiseDirectAt<2, KH, S>(a, ox);
  if (ox < a.ow) depthwiseDirectAt<1, KH, S>(a, ox);
}

ONNXTOOL_AVX512 void depthwiseRowsDirect(const DepthwiseRows& a) {
  if (a.sh == 1) {
    if (a.kh == 3) return depthwiseDirectT<3, 1>(a);
    if (a.kh == 5) return depthwiseDirectT<5, 1>(a);
    return depthwiseDirectT<7, 1>(a);
  }
  if (a.kh == 3) return depthwiseDirectT<3, 2>(a);
  depthwiseDirectT<5, 2>(a);
}

ONNXTOOL_AVX512 void maxPoolPlane(const float* p, int64_t pw, const DepthwiseShape& s, float* y) {
  if (s.sw > 2) return maxPoolPlaneScalar(p, pw, s, y);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t oy = 0; oy < s.oh; ++oy) {
    const float* rows = p + oy * s.sh * pw;
    for (int64_t ox = 0; ox < s.ow; ox += 16) {
      const __mmask16 k = s.ow - ox >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (s.ow - ox)) - 1);
      __m512 acc = _mm512_set1_ps(-__builtin_inff());
      for (int64_t ki = 0; ki < s.kh; ++ki) {
        const float* r = rows + ki * s.dh * pw + ox * s.sw;
        for (int64_t kj = 0; kj < s.kw; ++kj) {
          const float* q = r + kj * s.dw;
          acc = _mm512_max_ps(acc, s.sw == 1 ? _mm512_loadu_ps(q) : _mm512_permutex2var_ps(_mm512_loadu_ps(q), even, _mm512_loadu_ps(q + 16)));
        }
      }
      _mm512_mask_storeu_ps(y + oy * s.ow + ox, k, acc);
    }
  }
}

/// RowOps::maxPool3x3, stride S. Each input row's 3-column maxima once into one of three row
/// buffers (rotated), each output row the maximum of three of them. Stride 2, per 16
/// outputs: the 32 columns from 2 ox0 - padL (masked loads: -inf outside the plane), their even
/// and odd lanes (taps 0 and 1), the even lanes moved down one with the next column (tap 2);
/// stride 1: three loads one column apart. One unordered compare of two loads that together
/// cover every column read finds a NaN.
template <int S>
ONNXTOOL_AVX512 bool maxPool3x3T(const float* x, int64_t h, int64_t w, int64_t padT, int64_t padL, int64_t oh, int64_t ow,
                                 float* y, float* hbuf) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  const int64_t len = (ow + 15) / 16 * 16;
  __mmask16 nan = 0;
  bool nanTail = false;
  // Lanes of a 16-float load at column c that lie inside the row (the others are not read:
  // no fault before the row or past the plane).
  auto inRow = [&](int64_t c) __attribute__((always_inline)) {
    const int64_t lo = std::max<int64_t>(0, -c), hi = std::clamp<int64_t>(w - c, 0, 16);
    return lo >= hi ? __mmask16(0) : static_cast<__mmask16>(((hi >= 16 ? 0xFFFFu : (1u << hi) - 1) >> lo) << lo);
  };
  // The 3-column maxima of input row iy into dst; false when iy is outside the plane.
  auto rowMax = [&](int64_t iy, float* dst) __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) {
    if (iy < 0 || iy >= h) return false;
    const float* r = x + iy * w;
    for (int64_t ox = 0; ox < ow; ox += 16) {
      const int64_t c0 = S * ox - padL;  // column of lane 0, tap 0
      if constexpr (S == 2) {
        const __m512 q0 = _mm512_mask_loadu_ps(ninf, inRow(c0), r + c0), q1 = _mm512_mask_loadu_ps(ninf, inRow(c0 + 16), r + c0 + 16);
        nan |= _mm512_cmp_ps_mask(q0, q1, _CMP_UNORD_Q);
        const __m512 e = _mm512_permutex2var_ps(q0, even, q1), o = _mm512_permutex2var_ps(q0, odd, q1);
        const int64_t cn = c0 + 32;  // tap 2 of lane 15
        float next = -__builtin_inff();
        if (cn >= 0 && cn < w) {
          next = r[cn];
          nanTail |= next != next;
        }
        const __m512 e1 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(next)), _mm512_castps_si512(e), 1));
        _mm512_store_ps(dst + ox, _mm512_max_ps(_mm512_max_ps(e, o), e1));
      } else {
        const __m512 q0 = _mm512_mask_loadu_ps(ninf, inRow(c0), r + c0), q1 = _mm512_mask_loadu_ps(ninf, inRow(c0 + 1), r + c0 + 1),
                     q2 = _mm512_mask_loadu_ps(ninf, inRow(c0 + 2), r + c0 + 2);
        nan |= _mm512_cmp_ps_mask(q0, q2, _CMP_UNORD_Q);  // columns c0 .. c0 + 17
        _mm512_store_ps(dst + ox, _mm512_max_ps(_mm512_max_ps(q0, q1), q2));
      }
    }
    return true;
  };
  // Rows r0, r0 + 1, r0 + 2 of output row oy (r0 = S oy - padT) in h0, h1, h2: stride 2
  // computes two new rows per output row (r0 + 2 becomes the next r0), stride 1 one.
  float* h0 = hbuf;
  float* h1 = hbuf + len;
  float* h2 = hbuf + 2 * len;
  bool v0 = rowMax(-padT, h0), v1 = S == 1 ? rowMax(1 - padT, h1) : false, v2 = false;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const int64_t r0 = S * oy - padT;
    if constexpr (S == 2) v1 = rowMax(r0 + 1, h1);
    v2 = rowMax(r0 + 2, h2);
    float* yr = y + oy * ow;
    for (int64_t ox = 0; ox < ow; ox += 16) {
      __m512 acc = ninf;
      if (v0) acc = _mm512_load_ps(h0 + ox);
      if (v1) acc = _mm512_max_ps(acc, _mm512_load_ps(h1 + ox));
      if (v2) acc = _mm512_max_ps(acc, _mm512_load_ps(h2 + ox));
      _mm512_mask_storeu_ps(yr + ox, ow - ox >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ow - ox)) - 1), acc);
    }
    if constexpr (S == 2) {  // r0 + 2 is the next r0
      std::swap(h0, h2);
      v0 = v2;
    } else {  // r0 + 1, r0 + 2 are the next r0, r0 + 1
      float* t = h0;
      h0 = h1, h1 = h2, h2 = t;
      v0 = v1, v1 = v2;
    }
  }
  return nan == 0 && !nanTail;
}

ONNXTOOL_AVX512 bool maxPool3x3(const float* x, int64_t h, int64_t w, int64_t stride, int64_t padT, int64_t padL, int64_t oh,
                                int64_t ow, float* y, float* hbuf) {
  return stride == 1 ? maxPool3x3T<1>(x, h, w, padT, padL, oh, ow, y, hbuf) : maxPool3x3T<2>(x, h, w, padT, padL, oh, ow, y, hbuf);
}

/// RowOps::maxPoolFlat.
ONNXTOOL_AVX512 bool maxPoolFlat(const float* x, int64_t hw, int64_t w, int64_t kh, int64_t kw, int64_t padT, int64_t padL,
                                 const uint16_t* hmask, const uint16_t* vmask, float* y, float* hbuf) {
  const int64_t nb = (hw + 15) / 16;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __mmask16 tail = static_cast<__mmask16>(hw % 16 ? (1u << (hw % 16)) - 1 : 0xFFFFu);
  __mmask16 nan = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const float* p = x + b * 16 - padL;
    const __mmask16 in = b + 1 == nb ? tail : 0xFFFF;
    const __m512 c = _mm512_maskz_loadu_ps(in, x + b * 16);
    nan |= _mm512_mask_cmp_ps_mask(in, c, c, _CMP_UNORD_Q);
    __m512 acc = ninf;
    for (int64_t j = 0; j < kw; ++j) acc = _mm512_max_ps(acc, _mm512_mask_loadu_ps(ninf, hmask[j * nb + b], p + j));
    _mm512_storeu_ps(hbuf + b * 16, acc);
  }
  if (nan) return false;
  for (int64_t b = 0; b < nb; ++b) {
    const float* p = hbuf + b * 16 - padT * w;
    __m512 acc = ninf;
    for (int64_t i = 0; i < kh; ++i) acc = _mm512_max_ps(acc, _mm512_mask_loadu_ps(ninf, vmask[i * nb + b], p + i * w));
    _mm512_mask_storeu_ps(y + b * 16, b + 1 == nb ? tail : 0xFFFF, acc);
  }
  return true;
}

/// RowOps::avgPoolFlat.
ONNXTOOL_AVX512 void avgPoolFlat(const float* x, int64_t hw, int64_t w, int64_t kh, int64_t kw, int64_t padT, int64_t padL,
                                 const uint16_t* hmask, const uint16_t* vmask, const float* inv, float* y, float* hbuf) {
  const int64_t nb = (hw + 15) / 16;
  const __mmask16 tail = static_cast<__mmask16>(hw % 16 ? (1u << (hw % 16)) - 1 : 0xFFFFu);
  for (int64_t b = 0; b < nb; ++b) {
    const float* p = x + b * 16 - padL;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < kw; ++j) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(hmask[j * nb + b], p + j));
    _mm512_storeu_ps(hbuf + b * 16, acc);
  }
  for (int64_t b = 0; b < nb; ++b) {
    const float* p = hbuf + b * 16 - padT * w;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < kh; ++i) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(vmask[i * nb + b], p + i * w));
    _mm512_mask_storeu_ps(y + b * 16, b + 1 == nb ? tail : 0xFFFF, _mm512_mul_ps(acc, _mm512_loadu_ps(inv + b * 16)));
  }
}

/// RowOps::deinterleave3: 16 pixels (48 floats, three vectors) a step; channel k's lanes from
/// the first two vectors by one two-source permute, the rest from the third by another.
ONNXTOOL_AVX512 void deinterleave3(const float* src, int64_t n, float* c0, float* c1, float* c2) {
  alignas(64) int32_t i1[3][16], i2[3][16];
  for (int k = 0; k < 3; ++k)
    for (int p = 0; p < 16; ++p) {
      const int at = 3 * p + k;
      i1[k][p] = at < 32 ? at : 0;
      i2[k][p] = at < 32 ? p : 16 + at - 32;
    }
  __m512i a1[3], a2[3];
  for (int k = 0; k < 3; ++k) a1[k] = _mm512_load_si512(i1[k]), a2[k] = _mm512_load_si512(i2[k]);
  float* out[3] = {c0, c1, c2};
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t floats = 3 * std::min<int64_t>(n - i, 16);
    const float* q = src + 3 * i;
    const __m512 a = _mm512_maskz_loadu_ps(mask0(static_cast<int>(std::min<int64_t>(floats, 16))), q);
    const __m512 b = _mm512_maskz_loadu_ps(mask0(static_cast<int>(std::clamp<int64_t>(floats - 16, 0, 16))), q + 16);
    const __m512 c = _mm512_maskz_loadu_ps(mask0(static_cast<int>(std::clamp<int64_t>(floats - 32, 0, 16))), q + 32);
    const __mmask16 st = mask0(static_cast<int>(std::min<int64_t>(n - i, 16)));
    for (int k = 0; k < 3; ++k)
      _mm512_mask_storeu_ps(out[k] + i, st, _mm512_permutex2var_ps(_mm512_permutex2var_ps(a, a1[k], b), a2[k], c));
  }
}

}  // namespace

GemmMicroKernelInfo gemmMicroKernelAvx512(int64_t m) {
  // 12 rows (24 accumulators) unless 8 pads m to fewer rows (m = 16, 32, 64, 160, ...).
  const int64_t pad12 = (m + 11) / 12 * 12, pad8 = (m + 7) / 8 * 8;
  if (pad8 < pad12) return {8, kNr, kernelMx32<8>, Isa::Avx512, nullptr, true, true};
  return {12, kNr, kernelMx32<12>, Isa::Avx512, nullptr, true, true};
}
RowOps rowOpsAvx512() {
  return {gatherStrided, deinterleave2, lrnRow075, depthwiseRows, depthwiseRowsDirect, depthwiseChannels, 16, maxPoolPlane, maxPool3x3, maxPoolFlat, avgPoolFlat, deinterleave3,
          maxNan};
}

GemmMicroKernelInfo gemmMicroKernelRowsAvx512(int mr) {
  static constexpr GemmMicroKernel kByRows[] = {kernel1x32,      kernelMx32<2>,  kernelMx32<3>,  kernelMx32<4>,  kernelMx32<5>,
                                                kernelMx32<6>,   kernelMx32<7>,  kernelMx32<8>,  kernelMx32<9>,  kernelMx32<10>,
                                                kernelMx32<11>,  kernelMx32<12>, kernelMx32<13>, kernelMx32<14>};
  static constexpr GemmMicroKernel kByRowsT[] = {kernelMx32T<1>,  kernelMx32T<2>,  kernelMx32T<3>,  kernelMx32T<4>,  kernelMx32T<5>,
                                                 kernelMx32T<6>,  kernelMx32T<7>,  kernelMx32T<8>,  kernelMx32T<9>,  kernelMx32T<10>,
                                                 kernelMx32T<11>, kernelMx32T<12>, kernelMx32T<13>, kernelMx32T<14>};
  const int rows = mr < 1 ? 1 : mr > 14 ? 14 : mr;
  return {rows, kNr, kByRows[rows - 1], Isa::Avx512, kByRowsT[rows - 1], rows > 1, rows > 1};
}

#else

GemmMicroKernelInfo gemmMicroKernelAvx512(int64_t) { return gemmMicroKernelPortable(); }
RowOps rowOpsAvx512() { return rowOpsPortable(); }
GemmMicroKernelInfo gemmMicroKernelRowsAvx512(int mr) { return gemmMicroKernelRowsPortable(mr); }

#endif

}  // namespace onnxtool::cpu
