// conv_microkernel_avx2.cpp: the AVX2+FMA SGEMM micro-kernel of the convolution kernels (see
// conv_microkernels.h): a 6 x 16 tile in 12 ymm accumulators; 5, 4, 3, 2 and 1 rows for skinny GEMMs and tails
// (the 1-row GEMV kernel sums k in four interleaved chains). Compiled for AVX2 through
// __attribute__((target)) only: called when activeIsa() is Avx2.
#include "exec/cpu/conv_microkernels.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>

#include <limits>
#endif

namespace onnxtool::cpu {

#if defined(__x86_64__)

namespace {

constexpr int kMr = 6, kNr = 16;

#define ONNXTOOL_AVX2 __attribute__((target("avx2,fma")))

/// q[0], q[2], ..., q[14] (reads q[0..15]): stride-2 columns.
ONNXTOOL_AVX2 inline __m256 even8(const float* q) {
  __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(q + 8), _MM_SHUFFLE(2, 0, 2, 0));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

/// Column `ox` of a stride-1 or stride-2 padded row.
ONNXTOOL_AVX2 inline __m256 columns8(const float* q, int64_t sw) { return sw == 1 ? _mm256_loadu_ps(q) : even8(q); }

/// The epilogue of rows [0, m) of a tile 16 columns wide, in vectors (storeTileScalar's
/// arithmetic: the same adds in the same order, Clip as max then min with NaN kept).
template <int kRows>
ONNXTOOL_AVX2 __attribute__((always_inline)) inline void storeRows16(const __m256 (&acc)[kRows][2], float* c, int64_t ldc, int m,
                                                                    const TileEpilogue& ep) {
  const __m256 lo = _mm256_set1_ps(ep.lo), hi = _mm256_set1_ps(ep.hi);
#pragma GCC unroll 6
  for (int i = 0; i < kRows; ++i) {
    if (i >= m) break;
    float* ci = c + i * ldc;
    __m256 v0 = acc[i][0], v1 = acc[i][1];
    if (ep.accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
    }
    if (ep.last) {
      if (ep.bias) {
        __m256 bv = _mm256_set1_ps(ep.bias[i]);
        v0 = _mm256_add_ps(v0, bv);
        v1 = _mm256_add_ps(v1, bv);
      }
      if (ep.colBias) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ep.colBias));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ep.colBias + 8));
      }
      if (ep.residual) {
        const float* r = ep.residual + i * ep.ldr;
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(r));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(r + 8));
      }
      if (ep.clamp) {  // max(lo, v) and min(hi, v) return v when v is NaN (the second operand)
        v0 = _mm256_min_ps(hi, _mm256_max_ps(lo, v0));
        v1 = _mm256_min_ps(hi, _mm256_max_ps(lo, v1));
      }
    }
    _mm256_storeu_ps(ci, v0);
    _mm256_storeu_ps(ci + 8, v1);
  }
}

ONNXTOOL_AVX2 void kernel6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                              const TileEpilogue& ep) {
  const int64_t ldb = ep.ldb ? ep.ldb : kNr;  // B's k rows: packed, or unpacked rows ldb apart
  // Twelve named accumulators (an array of them made GCC spill inside the loop: 16 ymm in all).
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00, c40 = c00,
         c41 = c00, c50 = c00, c51 = c00;
  const char* pf = reinterpret_cast<const char*>(ep.prefetch);
  const int64_t pfSteps = ep.prefetch ? std::min<int64_t>(kc, (ep.prefetchLines + 1) / 2) : 0;
#define ONNXTOOL_K_STEP(bp, ap)                                             \
  {                                                                         \
    const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps((bp) + 8); \
    __m256 av = _mm256_broadcast_ss((ap) + 0);                              \
    c00 = _mm256_fmadd_ps(av, b0, c00);                                     \
    c01 = _mm256_fmadd_ps(av, b1, c01);                                     \
    av = _mm256_broadcast_ss((ap) + 1);                                     \
    c10 = _mm256_fmadd_ps(av, b0, c10);                                     \
    c11 = _mm256_fmadd_ps(av, b1, c11);                                     \
    av = _mm256_broadcast_ss((ap) + 2);                                     \
    c20 = _mm256_fmadd_ps(av, b0, c20);                                     \
    c21 = _mm256_fmadd_ps(av, b1, c21);                                     \
    av = _mm256_broadcast_ss((ap) + 3);                                     \
    c30 = _mm256_fmadd_ps(av, b0, c30);                                     \
    c31 = _mm256_fmadd_ps(av, b1, c31);                                     \
    av = _mm256_broadcast_ss((ap) + 4);                                     \
    c40 = _mm256_fmadd_ps(av, b0, c40);                                     \
    c41 = _mm256_fmadd_ps(av, b1, c41);                                     \
    av = _mm256_broadcast_ss((ap) + 5);                                     \
    c50 = _mm256_fmadd_ps(av, b0, c50);                                     \
    c51 = _mm256_fmadd_ps(av, b1, c51);                                     \
  }
  // The steps that also fetch the next panel, then (packed B) two steps per iteration with
  // constant offsets: half the loop's branches and, with K = 64, its fixed costs per call
  // (the kernel alone on this Zen 2, L1-resident: kc 64 80-82 -> 87-88 GFLOP/s, kc 32 74 -> 78,
  // kc 256 unchanged at 96-98; BERT's Q*K^T x12 62-64 -> 72 GFLOP/s; MiniLM at batch 8, 1
  // thread, 404-425 -> 357-380 ms).
  const float* bk = b;
  const float* ak = a;
  int64_t k = 0;
  for (; k < pfSteps; ++k, bk += ldb, ak += kMr) {
    _mm_prefetch(pf + k * 128, _MM_HINT_T1);
    _mm_prefetch(pf + k * 128 + 64, _MM_HINT_T1);
    ONNXTOOL_K_STEP(bk, ak)
  }
  if (ldb == kNr)
    for (; k + 2 <= kc; k += 2, bk += 2 * kNr, ak += 2 * kMr) {
      ONNXTOOL_K_STEP(bk, ak)
      ONNXTOOL_K_STEP(bk + kNr, ak + kMr)
    }
  for (; k < kc; ++k, bk += ldb, ak += kMr) ONNXTOOL_K_STEP(bk, ak)
#undef ONNXTOOL_K_STEP
  const __m256 acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (n < kNr) {  // a partial tile: through memory and the scalar epilogue
    alignas(32) float tile[kMr * kNr];
    for (int i = 0; i < kMr; ++i) {
      _mm256_store_ps(tile + i * kNr, acc[i][0]);
      _mm256_store_ps(tile + i * kNr + 8, acc[i][1]);
    }
    storeTileScalar(tile, kNr, c, ldc, m, n, ep);
    return;
  }
  // Whole rows in vectors, also for fewer than 6 (a panel of M's last rows: with M = 8 or 16 a
  // third to a half of the tiles; scalar, their epilogue cost LeNet-sized convolutions as much
  // as their k loop).
  storeRows16<kMr>(acc, c, ldc, m, ep);
}

/// Up to five rows (skinny GEMMs, tails): the tile through memory and the scalar epilogue.
template <int kRows>
ONNXTOOL_AVX2 void kernelMx16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                              const TileEpilogue& ep) {
  const int64_t ldb = ep.ldb ? ep.ldb : kNr;  // B's k rows: packed, or unpacked rows ldb apart
  __m256 acc[kRows][2];
  for (int i = 0; i < kRows; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(ep.prefetch);
  const int64_t pfSteps = ep.prefetch ? (ep.prefetchLines + 1) / 2 : 0;
  for (int64_t k = 0; k < kc; ++k) {
    if (k < pfSteps) {
      _mm_prefetch(pf + k * 128, _MM_HINT_T1);
      _mm_prefetch(pf + k * 128 + 64, _MM_HINT_T1);
    }
    const __m256 b0 = _mm256_loadu_ps(b + k * ldb), b1 = _mm256_loadu_ps(b + k * ldb + 8);
#pragma GCC unroll 5
    for (int i = 0; i < kRows; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + k * kRows + i);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  if (n == kNr) {
    storeRows16<kRows>(acc, c, ldc, m, ep);
    return;
  }
  alignas(32) float tile[kRows * kNr];
  for (int i = 0; i < kRows; ++i) {
    _mm256_store_ps(tile + i * kNr, acc[i][0]);
    _mm256_store_ps(tile + i * kNr + 8, acc[i][1]);
  }
  storeTileScalar(tile, kNr, c, ldc, m, n, ep);
}

/// One row (GEMV): four independent accumulator pairs over k (k mod 4), summed at the end, so
/// that the FMA latency does not bound a loop that streams B.
ONNXTOOL_AVX2 void kernel1x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                              const TileEpilogue& ep) {
  const int64_t ldb = ep.ldb ? ep.ldb : kNr;  // B's k rows: packed, or unpacked rows ldb apart
  __m256 s0[4], s1[4];
  for (int u = 0; u < 4; ++u) s0[u] = s1[u] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      // B streams from L3 or memory: fetch ~8 KiB ahead (no fault past its end).
      _mm_prefetch(reinterpret_cast<const char*>(b + (k + 128 + u) * ldb), _MM_HINT_T0);
      const __m256 av = _mm256_broadcast_ss(a + k + u);
      s0[u] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + (k + u) * ldb), s0[u]);
      s1[u] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + (k + u) * ldb + 8), s1[u]);
    }
  }
  for (; k < kc; ++k) {
    const __m256 av = _mm256_broadcast_ss(a + k);
    s0[0] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + k * ldb), s0[0]);
    s1[0] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + k * ldb + 8), s1[0]);
  }
  const __m256 acc[1][2] = {{_mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), _mm256_add_ps(s0[2], s0[3])),
                             _mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), _mm256_add_ps(s1[2], s1[3]))}};
  if (n == kNr) {
    storeRows16<1>(acc, c, ldc, m, ep);
    return;
  }
  alignas(32) float tile[kNr];
  _mm256_store_ps(tile, acc[0][0]);
  _mm256_store_ps(tile + 8, acc[0][1]);
  storeTileScalar(tile, kNr, c, ldc, m, n, ep);
}

ONNXTOOL_AVX2 void deinterleave2(const float* src, int64_t n, float* even, float* odd) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(even + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(odd + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  deinterleave2Scalar(src + i, n - i, even + i / 2, odd + i / 2);
}

ONNXTOOL_AVX2 void maxNan(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
    // a where b <= a or a is NaN, else b (greater, or NaN)
    const __m256 keepA = _mm256_or_ps(_mm256_cmp_ps(vb, va, _CMP_LE_OQ), _mm256_cmp_ps(va, va, _CMP_UNORD_Q));
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(vb, va, keepA));
  }
  maxNanScalar(a + i, b + i, y + i, n - i);
}

ONNXTOOL_AVX2 void lrnRow075(float* y, const float* x, const float* t, int64_t n, float bias, float scale) {
  const __m256 b = _mm256_set1_ps(bias), s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = _mm256_sqrt_ps(_mm256_fmadd_ps(s, _mm256_loadu_ps(t + i), b));
    _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(x + i), _mm256_mul_ps(r, _mm256_sqrt_ps(r))));
  }
  for (; i < n; ++i) {
    float r = std::sqrt(bias + scale * t[i]);
    y[i] = x[i] / (r * std::sqrt(r));
  }
}

/// The lanes of 8 columns from ox that lie before ow, as a maskload/maskstore mask.
ONNXTOOL_AVX2 inline __m256i laneMask(int64_t left) {
  const int n = static_cast<int>(std::clamp<int64_t>(left, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// kDepthwiseRows output rows x V vectors of 8 columns from column ox (see DepthwiseRows), as
/// the AVX-512 path (conv_microkernel_avx512.cpp): KH > 0 a KH x KW filter at stride S, no
/// dilation, each input vector loaded once for every output row it feeds; KH = 0 any filter.
template <int V, int KH, int KW, int S>
ONNXTOOL_AVX2 inline void depthwiseBlock(const DepthwiseRows& a, int64_t ox) {
  constexpr int R = kDepthwiseRows;
  __m256 acc[R][V];
  const __m256 vb = _mm256_set1_ps(a.bias);
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < V; ++u) acc[r][u] = vb;
  if constexpr (KH > 0) {
#pragma GCC unroll 32
    for (int j = 0; j < (R - 1) * S + KH; ++j) {
      const float* row = a.rows[j] + ox;
#pragma GCC unroll 8
      for (int kj = 0; kj < KW; ++kj) {
        const float* q = row + (kj % S) * a.phaseLen + kj / S;
        __m256 v[V];
        for (int u = 0; u < V; ++u) {
          v[u] = _mm256_loadu_ps(q + 8 * u);
          __asm__("" : "+x"(v[u]));  // one load in a register for every row it feeds (GCC would reload per FMA)
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int ki = j - r * S;
          if (ki < 0 || ki >= KH) continue;
          const __m256 wv = _mm256_broadcast_ss(a.w + ki * KW + kj);
          for (int u = 0; u < V; ++u) acc[r][u] = _mm256_fmadd_ps(wv, v[u], acc[r][u]);
        }
      }
    }
  } else {
    for (int64_t ki = 0; ki < a.kh; ++ki)
      for (int64_t kj = 0; kj < a.kw; ++kj) {
        const int64_t t = kj * a.dw, off = (t % a.sw) * a.phaseLen + t / a.sw + ox;
        const __m256 wv = _mm256_broadcast_ss(a.w + ki * a.kw + kj);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float* q = a.rows[r * a.sh + ki * a.dh] + off;
          for (int u = 0; u < V; ++u) acc[r][u] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(q + 8 * u), acc[r][u]);
        }
      }
  }
  const __m256 vlo = _mm256_set1_ps(a.lo), vhi = _mm256_set1_ps(a.hi);
  const bool full = ox + 8 * V <= a.ow;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= a.nrows) continue;  // (not break: a fully unrolled loop keeps acc in registers)
    for (int u = 0; u < V; ++u) {
      __m256 v = acc[r][u];
      float* out = a.y + r * a.ow + ox + 8 * u;
      const float* res = a.res ? a.res + r * a.ow + ox + 8 * u : nullptr;
      if (full) {
        if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res));
        if (a.clamp) v = _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));  // NaN stays (the second operand)
        _mm256_storeu_ps(out, v);
      } else {
        const __m256i m = laneMask(a.ow - ox - 8 * u);
        if (res) v = _mm256_add_ps(v, _mm256_maskload_ps(res, m));
        if (a.clamp) v = _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
        _mm256_maskstore_ps(out, m, v);
      }
    }
  }
}

template <int KH, int KW, int S>
ONNXTOOL_AVX2 void depthwiseRowsT(const DepthwiseRows& a) {
  int64_t ox = 0;
  for (; ox + 8 < a.ow; ox += 16) depthwiseBlock<2, KH, KW, S>(a, ox);
  if (ox < a.ow) depthwiseBlock<1, KH, KW, S>(a, ox);
}

/// r[j] lane i = r[i] lane j (8 x 8): pairs of rows interleaved, then 64-bit pairs, then the
/// 128-bit halves.
ONNXTOOL_AVX2 __attribute__((always_inline)) inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {  // u[g + c], half H: column 4H + c of rows g .. g + 3
    u[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

/// 8 channels at a time, as the AVX-512 path's 16 (conv_microkernel_avx512.cpp), the planes in
/// and out through 8 x 8 transposes.
ONNXTOOL_AVX2 void depthwiseChannels(const DepthwiseChannels& a) {
  const int64_t plane = a.h * a.w;
  int64_t iy = 0, ix = 0;
  for (int64_t p0 = 0; p0 < plane; p0 += 8) {
    const int cnt = static_cast<int>(std::min<int64_t>(8, plane - p0));
    const __m256i kp = laneMask(cnt);
    __m256 r[8];
    for (int c = 0; c < 8; ++c) r[c] = c < a.nch ? _mm256_maskload_ps(a.x + c * plane + p0, kp) : _mm256_setzero_ps();
    transpose8(r);
    for (int j = 0; j < cnt; ++j) {
      _mm256_store_ps(a.t + ((iy + a.padT) * a.pw + a.padL + ix) * 8, r[j]);
      if (++ix == a.w) ix = 0, ++iy;
    }
  }
  const __m256 vb = a.bias ? _mm256_maskload_ps(a.bias, laneMask(a.nch)) : _mm256_setzero_ps();
  for (int64_t o = 0; o < a.pix; o += 8) {
    __m256 acc[8];
    const float* base[8];
    for (int p = 0; p < 8; ++p) acc[p] = vb, base[p] = a.t + a.pixOff[o + p];
    for (int64_t k = 0; k < a.ntaps; ++k) {
      const __m256 wv = _mm256_loadu_ps(a.wl + k * 8);
      const int64_t off = a.tapOff[k];
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) acc[p] = _mm256_fmadd_ps(wv, _mm256_load_ps(base[p] + off), acc[p]);
    }
    for (int p = 0; p < 8; ++p) _mm256_store_ps(a.out + (o + p) * 8, acc[p]);
  }
  const __m256 vlo = _mm256_set1_ps(a.lo), vhi = _mm256_set1_ps(a.hi);
  for (int64_t o = 0; o < a.pix; o += 8) {
    const int cnt = static_cast<int>(std::min<int64_t>(8, a.pix - o));
    const __m256i k = laneMask(cnt);
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = j < cnt ? _mm256_load_ps(a.out + (o + j) * 8) : _mm256_setzero_ps();
    transpose8(r);
    for (int c = 0; c < a.nch; ++c) {
      __m256 v = r[c];
      if (a.res) v = _mm256_add_ps(v, _mm256_maskload_ps(a.res + c * a.pix + o, k));
      if (a.clamp) v = _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
      if (cnt == 8) _mm256_storeu_ps(a.y + c * a.pix + o, v);
      else _mm256_maskstore_ps(a.y + c * a.pix + o, k, v);
    }
  }
}

ONNXTOOL_AVX2 void depthwiseRows(const DepthwiseRows& a) {
  if (a.dh == 1 && a.dw == 1 && a.sh == a.sw) {
    if (a.kh == 3 && a.kw == 3 && a.sh == 1) return depthwiseRowsT<3, 3, 1>(a);
    if (a.kh == 3 && a.kw == 3 && a.sh == 2) return depthwiseRowsT<3, 3, 2>(a);
    if (a.kh == 5 && a.kw == 5 && a.sh == 1) return depthwiseRowsT<5, 5, 1>(a);
    if (a.kh == 5 && a.kw == 5 && a.sh == 2) return depthwiseRowsT<5, 5, 2>(a);
    if (a.kh == 7 && a.kw == 7 && a.sh == 1) return depthwiseRowsT<7, 7, 1>(a);  // ConvNeXt
  }
  depthwiseRowsT<0, 0, 1>(a);
}

ONNXTOOL_AVX2 void maxPoolPlane(const float* p, int64_t pw, const DepthwiseShape& s, float* y) {
  if (s.sw > 2) return maxPoolPlaneScalar(p, pw, s, y);
  for (int64_t oy = 0; oy < s.oh; ++oy) {
    const float* rows = p + oy * s.sh * pw;
    int64_t ox = 0;
    for (; ox + 8 <= s.ow; ox += 8) {
      __m256 acc = _mm256_set1_ps(-__builtin_inff());
      for (int64_t ki = 0; ki < s.kh; ++ki)
        for (int64_t kj = 0; kj < s.kw; ++kj) acc = _mm256_max_ps(acc, columns8(rows + ki * s.dh * pw + ox * s.sw + kj * s.dw, s.sw));
      _mm256_storeu_ps(y + oy * s.ow + ox, acc);
    }
    for (; ox < s.ow; ++ox) {
      float acc = -__builtin_inff();
      for (int64_t ki = 0; ki < s.kh; ++ki)
        for (int64_t kj = 0; kj < s.kw; ++kj) {
          float v = rows[ki * s.dh * pw + ox * s.sw + kj * s.dw];
          acc = acc < v ? v : acc;
        }
      y[oy * s.ow + ox] = acc;
    }
  }
}

/// Lanes of an 8-bit mask as a vector mask.
ONNXTOOL_AVX2 inline __m256i bits8(unsigned m) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(m)), sel), sel);
}

/// max(acc, the lanes of p that mask m selects; -inf for the others), 8 lanes.
ONNXTOOL_AVX2 inline __m256 maxMasked(__m256 acc, const float* p, unsigned m, __m256 ninf) {
  if (m == 0) return acc;
  if (m == 0xFF) return _mm256_max_ps(acc, _mm256_loadu_ps(p));
  const __m256i k = bits8(m);
  return _mm256_max_ps(acc, _mm256_blendv_ps(ninf, _mm256_maskload_ps(p, k), _mm256_castsi256_ps(k)));
}

/// RowOps::maxPoolFlat, each 16-position block as two halves of 8.
ONNXTOOL_AVX2 bool maxPoolFlat(const float* x, int64_t hw, int64_t w, int64_t kh, int64_t kw, int64_t padT, int64_t padL,
                               const uint16_t* hmask, const uint16_t* vmask, float* y, float* hbuf) {
  const int64_t nb = (hw + 15) / 16;
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 nan = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t o = b * 16 + half * 8;
      if (o >= hw) {
        _mm256_storeu_ps(hbuf + o, ninf);
        continue;
      }
      const unsigned in = hw - o >= 8 ? 0xFFu : (1u << (hw - o)) - 1;
      const __m256 c = in == 0xFF ? _mm256_loadu_ps(x + o) : _mm256_maskload_ps(x + o, bits8(in));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
      __m256 acc = ninf;
      for (int64_t j = 0; j < kw; ++j) acc = maxMasked(acc, x + o - padL + j, (hmask[j * nb + b] >> (8 * half)) & 0xFFu, ninf);
      _mm256_storeu_ps(hbuf + o, acc);
    }
  if (_mm256_movemask_ps(nan)) return false;
  for (int64_t b = 0; b < nb; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t o = b * 16 + half * 8;
      if (o >= hw) break;
      __m256 acc = ninf;
      for (int64_t i = 0; i < kh; ++i) acc = maxMasked(acc, hbuf + o + (i - padT) * w, (vmask[i * nb + b] >> (8 * half)) & 0xFFu, ninf);
      if (hw - o >= 8) _mm256_storeu_ps(y + o, acc);
      else _mm256_maskstore_ps(y + o, bits8((1u << (hw - o)) - 1), acc);
    }
  return true;
}

/// sum + (the lanes of p that mask m selects; 0 for the others), 8 lanes.
ONNXTOOL_AVX2 inline __m256 addMasked(__m256 acc, const float* p, unsigned m) {
  if (m == 0) return acc;
  if (m == 0xFF) return _mm256_add_ps(acc, _mm256_loadu_ps(p));
  return _mm256_add_ps(acc, _mm256_maskload_ps(p, bits8(m)));
}

/// RowOps::avgPoolFlat, each 16-position block as two halves of 8.
ONNXTOOL_AVX2 void avgPoolFlat(const float* x, int64_t hw, int64_t w, int64_t kh, int64_t kw, int64_t padT, int64_t padL,
                               const uint16_t* hmask, const uint16_t* vmask, const float* inv, float* y, float* hbuf) {
  const int64_t nb = (hw + 15) / 16;
  for (int64_t b = 0; b < nb; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t o = b * 16 + half * 8;
      __m256 acc = _mm256_setzero_ps();
      if (o < hw)
        for (int64_t j = 0; j < kw; ++j) acc = addMasked(acc, x + o - padL + j, (hmask[j * nb + b] >> (8 * half)) & 0xFFu);
      _mm256_storeu_ps(hbuf + o, acc);
    }
  for (int64_t b = 0; b < nb; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t o = b * 16 + half * 8;
      if (o >= hw) break;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t i = 0; i < kh; ++i) acc = addMasked(acc, hbuf + o + (i - padT) * w, (vmask[i * nb + b] >> (8 * half)) & 0xFFu);
      acc = _mm256_mul_ps(acc, _mm256_loadu_ps(inv + o));
      if (hw - o >= 8) _mm256_storeu_ps(y + o, acc);
      else _mm256_maskstore_ps(y + o, bits8((1u << (hw - o)) - 1), acc);
    }
}

}  // namespace

GemmMicroKernelInfo gemmMicroKernelAvx2() { return {kMr, kNr, kernel6x16, Isa::Avx2}; }
/// Even and odd lanes of 16 consecutive floats (lo, hi): [lo0 lo2 lo4 lo6 hi0 hi2 hi4 hi6] and
/// the odd ones.
ONNXTOOL_AVX2 inline __m256 evenOf(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
ONNXTOOL_AVX2 inline __m256 oddOf(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

/// Columns [c, c + 8) of row r (w wide), -inf outside it (nothing outside it read).
ONNXTOOL_AVX2 inline __m256 rowLoad8(const float* r, int64_t c, int64_t w) {
  if (c >= 0 && c + 8 <= w) return _mm256_loadu_ps(r + c);
  alignas(32) float t[8];
  for (int i = 0; i < 8; ++i) t[i] = c + i >= 0 && c + i < w ? r[c + i] : -__builtin_inff();
  return _mm256_load_ps(t);
}

/// RowOps::maxPool3x3 (conv_microkernels.h), stride S, as the AVX-512 path does it with 8 lanes:
/// each input row's 3-column maxima once into one of three rotated row buffers, each output
/// row the maximum of three of them. Stride 2, per 8 outputs: columns c0 .. c0 + 15 (taps 0 and
/// 1: their even and odd lanes) and c0 + 2 .. c0 + 17 (tap 2: the even lanes); stride 1: three
/// loads a column apart. Unordered compares of loads covering every column read find a NaN.
template <int S>
ONNXTOOL_AVX2 bool maxPool3x3T(const float* x, int64_t h, int64_t w, int64_t padT, int64_t padL, int64_t oh, int64_t ow, float* y,
                               float* hbuf) {
  const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
  const int64_t len = (ow + 15) / 16 * 16;
  int nan = 0;
  auto rowMax = [&](int64_t iy, float* dst) __attribute__((always_inline, target("avx2,fma"))) {
    if (iy < 0 || iy >= h) return false;
    const float* r = x + iy * w;
    for (int64_t ox = 0; ox < ow; ox += 8) {
      const int64_t c0 = S * ox - padL;  // column of lane 0, tap 0
      if constexpr (S == 2) {
        const __m256 a0 = rowLoad8(r, c0, w), a1 = rowLoad8(r, c0 + 8, w), b0 = rowLoad8(r, c0 + 2, w), b1 = rowLoad8(r, c0 + 10, w);
        nan |= _mm256_movemask_ps(_mm256_cmp_ps(a0, a1, _CMP_UNORD_Q)) | _mm256_movemask_ps(_mm256_cmp_ps(b0, b1, _CMP_UNORD_Q));
        _mm256_storeu_ps(dst + ox, _mm256_max_ps(_mm256_max_ps(evenOf(a0, a1), oddOf(a0, a1)), evenOf(b0, b1)));
      } else {
        const __m256 q0 = rowLoad8(r, c0, w), q1 = rowLoad8(r, c0 + 1, w), q2 = rowLoad8(r, c0 + 2, w);
        nan |= _mm256_movemask_ps(_mm256_cmp_ps(q0, q2, _CMP_UNORD_Q));  // columns c0 .. c0 + 9
        _mm256_storeu_ps(dst + ox, _mm256_max_ps(_mm256_max_ps(q0, q1), q2));
      }
    }
    return true;
  };
  float* h0 = hbuf;
  float* h1 = hbuf + len;
  float* h2 = hbuf + 2 * len;
  bool v0 = rowMax(-padT, h0), v1 = S == 1 ? rowMax(1 - padT, h1) : false, v2 = false;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const int64_t r0 = S * oy - padT;
    if constexpr (S == 2) v1 = rowMax(r0 + 1, h1);
    v2 = rowMax(r0 + 2, h2);
    float* yr = y + oy * ow;
    int64_t ox = 0;
    for (; ox < ow; ox += 8) {
      __m256 acc = ninf;
      if (v0) acc = _mm256_loadu_ps(h0 + ox);
      if (v1) acc = _mm256_max_ps(acc, _mm256_loadu_ps(h1 + ox));
      if (v2) acc = _mm256_max_ps(acc, _mm256_loadu_ps(h2 + ox));
      if (ow - ox >= 8) {
        _mm256_storeu_ps(yr + ox, acc);
      } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, acc);
        for (int64_t i = 0; i < ow - ox; ++i) yr[ox + i] = t[i];
      }
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
  return nan == 0;
}

ONNXTOOL_AVX2 bool maxPool3x3(const float* x, int64_t h, int64_t w, int64_t stride, int64_t padT, int64_t padL, int64_t oh, int64_t ow,
                              float* y, float* hbuf) {
  return stride == 1 ? maxPool3x3T<1>(x, h, w, padT, padL, oh, ow, y, hbuf) : maxPool3x3T<2>(x, h, w, padT, padL, oh, ow, y, hbuf);
}

RowOps rowOpsAvx2() {
  return {gatherStridedScalar, deinterleave2, lrnRow075, depthwiseRows, nullptr, depthwiseChannels, 8, maxPoolPlane, maxPool3x3, maxPoolFlat, avgPoolFlat, nullptr,
          maxNan};
}

GemmMicroKernelInfo gemmMicroKernelRowsAvx2(int mr) {
  if (mr <= 1) return {1, kNr, kernel1x16, Isa::Avx2};
  if (mr <= 2) return {2, kNr, kernelMx16<2>, Isa::Avx2};
  if (mr <= 3) return {3, kNr, kernelMx16<3>, Isa::Avx2};
  if (mr <= 4) return {4, kNr, kernelMx16<4>, Isa::Avx2};
  if (mr <= 5) return {5, kNr, kernelMx16<5>, Isa::Avx2};
  return {kMr, kNr, kernel6x16, Isa::Avx2};
}

#else

GemmMicroKernelInfo gemmMicroKernelAvx2() { return gemmMicroKernelPortable(); }
RowOps rowOpsAvx2() { return rowOpsPortable(); }
GemmMicroKernelInfo gemmMicroKernelRowsAvx2(int mr) { return gemmMicroKernelRowsPortable(mr); }

#endif

}  // namespace onnxtool::cpu
