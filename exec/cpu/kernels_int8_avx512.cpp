// kernels_int8_avx512.cpp: the AVX-512 VNNI path of the int8 GEMM (qgemm.h) and the vectorised
// DynamicQuantizeLinear pieces. Compiled for the whole x86-64 build; every function carries its
// own target attribute and is only called when cpuid says the CPU has it (qgemm::pathFor).
// GCC 12 reports _mm512_undefined_ps() inside its own intrinsics as maybe-uninitialized (a false
// positive of the header's masked-conversion builtins).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "exec/cpu/qgemm.h"

#define ONNXTOOL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace onnxtool::cpu::qgemm {

namespace {

constexpr int kMr = 8;  // rows per tile: 8 x 2 accumulators of 16 int32 lanes

// acc += dpbusd(u8 a, s8 b) in place, on named accumulators: GCC 12 compiles the intrinsic on
// an array of accumulators (or through a reference) with a register copy per accumulator per
// step, as many moves as multiply-adds (or spills them to the stack).
#if defined(__GNUC__) && !defined(__clang__)
#define ONNXTOOL_DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#else
#define ONNXTOOL_DPBUSD(acc, a, b) (acc) = _mm512_dpbusd_epi32((acc), (a), (b))
#endif

/// The R x 2 accumulators of a tile, named, and one k group of 4 for row r: broadcast(r) gives
/// the row's 4 bytes as a register, the sums c<r>0 += dpbusd(X0, Y0), c<r>1 += dpbusd(X1, Y1)
/// with (X, Y) = (broadcast, B) (GEMM: A unsigned broadcast) or (col, broadcast) (direct conv).
#define ONNXTOOL_TILE_ACCS                                                                                      \
  const __m512i zero_ = _mm512_setzero_si512();                                                                \
  __m512i c00 = zero_, c01 = zero_, c10 = zero_, c11 = zero_, c20 = zero_, c21 = zero_, c30 = zero_, c31 = zero_, \
          c40 = zero_, c41 = zero_, c50 = zero_, c51 = zero_, c60 = zero_, c61 = zero_, c70 = zero_, c71 = zero_
#define ONNXTOOL_TILE_ARRAY                                                                                         \
  const __m512i acc[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}, {c60, c61}, \
                             {c70, c71}}

/// Tile of R rows x one 32-column panel: acc[r][h] += sum over k groups of 4 of A x B.
template <int R>
ONNXTOOL_AVX512 void tile(const uint8_t* a, int64_t lda, const int8_t* bp, int64_t groups, const PackedB& b, int64_t row0,
                          int64_t col0, const Epilogue& e, __m512i azcs0, __m512i azcs1) {
  ONNXTOOL_TILE_ACCS;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i b0 = _mm512_loadu_si512(bp + g * 128);
    __m512i b1 = _mm512_loadu_si512(bp + g * 128 + 64);
#define ONNXTOOL_ROW(r)                                  \
  if constexpr (R > r) {                                 \
    int32_t quad;                                        \
    __builtin_memcpy(&quad, a + r * lda + g * 4, 4);     \
    const __m512i av = _mm512_set1_epi32(quad);          \
    ONNXTOOL_DPBUSD(c##r##0, av, b0);                    \
    ONNXTOOL_DPBUSD(c##r##1, av, b1);                    \
  }
    ONNXTOOL_ROW(0) ONNXTOOL_ROW(1) ONNXTOOL_ROW(2) ONNXTOOL_ROW(3) ONNXTOOL_ROW(4) ONNXTOOL_ROW(5) ONNXTOOL_ROW(6) ONNXTOOL_ROW(7)
#undef ONNXTOOL_ROW
  }
  ONNXTOOL_TILE_ARRAY;
  const int64_t k = b.k;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    int64_t i = row0 + r;
    const int32_t aZero = e.aZeroRow ? e.aZeroRow[i] : e.aZero;
    for (int h = 0; h < 2; ++h) {
      int64_t j = col0 + h * 16;
      if (j >= b.n) break;
      int64_t cnt = std::min<int64_t>(16, b.n - j);
      __mmask16 mask = static_cast<__mmask16>(cnt == 16 ? 0xFFFF : (1u << cnt) - 1);
      __m512i azcs = h == 0 ? azcs0 : azcs1;
      if (e.aZeroRow) azcs = _mm512_mullo_epi32(_mm512_set1_epi32(aZero), _mm512_maskz_loadu_epi32(mask, b.colSum.data() + j));
      __m512i v = _mm512_sub_epi32(acc[r][h], azcs);
      if (e.bZero) {
        __m512i bz = _mm512_maskz_loadu_epi32(mask, e.bZero + j);
        __m512i t = _mm512_set1_epi32(static_cast<int32_t>(k) * aZero - e.rowSumA[i]);
        v = _mm512_add_epi32(v, _mm512_mullo_epi32(bz, t));
      }
      if (e.c32) {
        _mm512_mask_storeu_epi32(e.c32 + i * e.ldc + j, mask, v);
      } else {
        __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_maskz_loadu_ps(mask, e.colScale + j));
        if (e.rowScale) y = _mm512_mul_ps(y, _mm512_set1_ps(e.rowScale[i]));
        if (e.bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, e.bias + j));
        if (e.clamp) y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(e.lo)), _mm512_set1_ps(e.hi));
        _mm512_mask_storeu_ps(e.cf + i * e.ldc + j, mask, y);
      }
    }
  }
}

}  // namespace

ONNXTOOL_AVX512 void gemmAvx512Vnni(const PackedB& b, const void* aPacked, int64_t m, const Epilogue& e, int64_t p0,
                                    int64_t p1) {
  const uint8_t* a = static_cast<const uint8_t*>(aPacked);
  const int64_t groups = b.kp / 4, lda = b.kp;
  const __m512i az = _mm512_set1_epi32(e.aZero);
  for (int64_t pn = p0; pn < p1; ++pn) {
    const int8_t* bp = b.s8.data() + pn * b.kp * 32;
    int64_t col0 = pn * 32;
    __mmask16 m0 = static_cast<__mmask16>(b.n - col0 >= 16 ? 0xFFFF : (1u << (b.n - col0)) - 1);
    __mmask16 m1 = static_cast<__mmask16>(b.n - col0 - 16 >= 16 ? 0xFFFF : b.n - col0 <= 16 ? 0 : (1u << (b.n - col0 - 16)) - 1);
    __m512i azcs0 = _mm512_mullo_epi32(az, _mm512_maskz_loadu_epi32(m0, b.colSum.data() + col0));
    __m512i azcs1 = _mm512_mullo_epi32(az, _mm512_maskz_loadu_epi32(m1, b.colSum.data() + col0 + 16));
    int64_t i = 0;
    for (; i + kMr <= m; i += kMr) tile<kMr>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1);
    switch (m - i) {
      case 7: tile<7>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      case 6: tile<6>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      case 5: tile<5>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      case 4: tile<4>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      case 3: tile<3>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      case 2: tile<2>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      case 1: tile<1>(a + i * lda, lda, bp, groups, b, i, col0, e, azcs0, azcs1); break;
      default: break;
    }
  }
}

ONNXTOOL_AVX512 bool minMaxAvx512(const float* x, int64_t n, float& mn, float& mx) {
  __m512 vmin = _mm512_setzero_ps(), vmax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    vmin = _mm512_min_ps(vmin, v);
    vmax = _mm512_max_ps(vmax, v);
  }
  if (i < n) {
    __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(k, x + i);  // masked-off lanes read 0, which min/max already hold
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    vmin = _mm512_min_ps(vmin, v);
    vmax = _mm512_max_ps(vmax, v);
  }
  if (nan) return false;
  mn = _mm512_reduce_min_ps(vmin);
  mx = _mm512_reduce_max_ps(vmax);
  return true;
}

ONNXTOOL_AVX512 void quantizeRowAvx512(const float* x, int64_t k, float scale, float zero, uint8_t* dst, int32_t& rowSum,
                                       bool nanToZeroPoint) {
  const __m512 vs = _mm512_set1_ps(scale), vz = _mm512_set1_ps(zero);
  const __m512 lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(255.0f);
  __m512i sum = _mm512_setzero_si512();
  for (int64_t i = 0; i < k; i += 16) {
    __mmask16 mk = static_cast<__mmask16>(k - i >= 16 ? 0xFFFF : (1u << (k - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(mk, x + i);
    // Exactly the reference: nearbyint(x / scale) + zero, clamped to [0, 255].
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(v, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (nanToZeroPoint) q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);  // NaN -> 0
    // max(NaN, 0) is 0: a NaN left here quantizes to 0, as DynamicQuantizeLinear does
    q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, vz), lo), hi);
    __m512i qi = _mm512_maskz_cvttps_epi32(mk, q);
    sum = _mm512_add_epi32(sum, qi);
    _mm_mask_storeu_epi8(dst + i, mk, _mm512_cvtepi32_epi8(qi));
  }
  rowSum = _mm512_reduce_add_epi32(sum);
}

}  // namespace onnxtool::cpu::qgemm

// ---- direct NCHW int8 convolution: Y[M, pixels] = W[M, K] x col[K, pixels] ----
// The weights (int8) are broadcast four k at a time and the im2col columns (uint8) packed in
// panels of 32 pixels x 4 k, so the output rows are NCHW rows: no transposes.

namespace onnxtool::cpu::qgemm {

ONNXTOOL_AVX512 void packColPanelsAvx512(const uint8_t* col, int64_t ldcol, int64_t kp, int64_t panels, uint8_t* dst) {
  for (int64_t pn = 0; pn < panels; ++pn) {
    uint8_t* out = dst + pn * kp * 32;
    for (int64_t g = 0; g < kp / 4; ++g) {
      const uint8_t* r = col + g * 4 * ldcol + pn * 32;
      for (int h = 0; h < 2; ++h) {
        __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + h * 16));
        __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + ldcol + h * 16));
        __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * ldcol + h * 16));
        __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * ldcol + h * 16));
        __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
        __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
        uint8_t* o = out + g * 128 + h * 64;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi16(t0, t2));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16), _mm_unpackhi_epi16(t0, t2));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32), _mm_unpacklo_epi16(t1, t3));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 48), _mm_unpackhi_epi16(t1, t3));
      }
    }
  }
}

ONNXTOOL_AVX512 void packRowsAvx512(const uint8_t* rows, int64_t ld, int64_t k, int64_t cols, int64_t kp, int64_t panels,
                                    uint8_t* dst) {
  for (int64_t pn = 0; pn < panels; ++pn) {
    uint8_t* out = dst + pn * kp * 32;
    const int64_t c0 = pn * 32, cnt = cols - c0 >= 32 ? 32 : cols - c0;
    const auto m0 = static_cast<__mmask16>(cnt >= 16 ? 0xFFFF : (1u << cnt) - 1);
    const auto m1 = static_cast<__mmask16>(cnt >= 32 ? 0xFFFF : cnt <= 16 ? 0 : (1u << (cnt - 16)) - 1);
    for (int64_t g = 0; g < kp / 4; ++g) {
      __m128i r[4][2];
      for (int q = 0; q < 4; ++q) {
        const int64_t row = g * 4 + q;
        if (row >= k) {
          r[q][0] = r[q][1] = _mm_setzero_si128();
          continue;
        }
        const uint8_t* src = rows + row * ld + c0;
        r[q][0] = _mm_maskz_loadu_epi8(m0, src);
        r[q][1] = _mm_maskz_loadu_epi8(m1, src + 16);
      }
      for (int h = 0; h < 2; ++h) {
        __m128i t0 = _mm_unpacklo_epi8(r[0][h], r[1][h]), t1 = _mm_unpackhi_epi8(r[0][h], r[1][h]);
        __m128i t2 = _mm_unpacklo_epi8(r[2][h], r[3][h]), t3 = _mm_unpackhi_epi8(r[2][h], r[3][h]);
        uint8_t* o = out + g * 128 + h * 64;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi16(t0, t2));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16), _mm_unpackhi_epi16(t0, t2));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32), _mm_unpacklo_epi16(t1, t3));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 48), _mm_unpackhi_epi16(t1, t3));
      }
    }
  }
}

ONNXTOOL_AVX512 void im2colAvx512(const Im2colArgs& a, int64_t c0, int64_t c1) {
  const __m512i padv = _mm512_set1_epi8(static_cast<char>(a.pad));
  for (int64_t ch = c0; ch < c1; ++ch)
    for (int64_t ki = 0; ki < a.kh; ++ki)
      for (int64_t kj = 0; kj < a.kw; ++kj) {
        uint8_t* row = a.col + ((ch * a.kh + ki) * a.kw + kj) * a.ld;
        const int64_t off = kj * a.dw - a.padL;
        for (int64_t oy = 0; oy < a.oh; ++oy) {
          uint8_t* dst = row + oy * a.ow;
          const int64_t iy = oy * a.sh - a.padT + ki * a.dh;
          const bool in = iy >= 0 && iy < a.h;
          const uint8_t* src = a.x + (ch * a.h + (in ? iy : 0)) * a.w + off;
          if (a.sw == 2) {  // 64 input bytes per 32 outputs: the even bytes (vpmovwb of the 16-bit pairs)
            for (int64_t x0 = 0; x0 < a.ow; x0 += 32) {
              const int64_t n = a.ow - x0 < 32 ? a.ow - x0 : 32;
              const auto store = static_cast<__mmask32>(n == 32 ? 0xFFFFFFFFu : (1u << n) - 1);
              const int64_t base = 2 * x0 + off;
              const int64_t lo = -base > 0 ? -base : 0, hi = a.w - base;
              __mmask64 valid = 0;
              if (in && hi > lo && lo < 64) {
                valid = hi >= 64 ? ~__mmask64{0} : (__mmask64{1} << hi) - 1;
                valid &= ~((__mmask64{1} << lo) - 1);
              }
              const __m512i v = _mm512_mask_loadu_epi8(padv, valid, src + 2 * x0);
              _mm256_mask_storeu_epi8(dst + x0, store, _mm512_cvtepi16_epi8(v));
            }
            continue;
          }
          for (int64_t x0 = 0; x0 < a.ow; x0 += 64) {
            const int64_t n = a.ow - x0 < 64 ? a.ow - x0 : 64;
            const __mmask64 store = n == 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
            // lanes whose input column x0 + l + off is in [0, w); the others hold the pad (zero point)
            const int64_t lo = -(x0 + off) > 0 ? -(x0 + off) : 0, hi = a.w - (x0 + off);
            __mmask64 valid = 0;
            if (in && hi > lo && lo < 64) {
              valid = hi >= 64 ? ~__mmask64{0} : (__mmask64{1} << hi) - 1;
              valid &= ~((__mmask64{1} << lo) - 1);
            }
            const __m512i v = _mm512_mask_loadu_epi8(padv, valid & store, src + x0);
            _mm512_mask_storeu_epi8(dst + x0, store, v);
          }
        }
        for (int64_t i = a.oh * a.ow; i < a.ld; ++i) row[i] = 0;
      }
}

namespace {

template <int R>
ONNXTOOL_AVX512 void convTile(const int8_t* w, int64_t kp, const uint8_t* cp, const DirectConvArgs& c, int64_t row0,
                              int64_t pix0) {
  ONNXTOOL_TILE_ACCS;
  const int64_t groups = kp / 4;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i col0 = _mm512_loadu_si512(cp + g * 128);
    __m512i col1 = _mm512_loadu_si512(cp + g * 128 + 64);
#define ONNXTOOL_ROW(r)                                  \
  if constexpr (R > r) {                                 \
    int32_t quad;                                        \
    __builtin_memcpy(&quad, w + r * kp + g * 4, 4);      \
    const __m512i wv = _mm512_set1_epi32(quad);          \
    ONNXTOOL_DPBUSD(c##r##0, col0, wv);                  \
    ONNXTOOL_DPBUSD(c##r##1, col1, wv);                  \
  }
    ONNXTOOL_ROW(0) ONNXTOOL_ROW(1) ONNXTOOL_ROW(2) ONNXTOOL_ROW(3) ONNXTOOL_ROW(4) ONNXTOOL_ROW(5) ONNXTOOL_ROW(6) ONNXTOOL_ROW(7)
#undef ONNXTOOL_ROW
  }
  ONNXTOOL_TILE_ARRAY;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    int64_t i = row0 + r;
    __m512i corr = _mm512_set1_epi32(c.aZero * c.wRowSum[i]);
    __m512 sc = _mm512_set1_ps(c.rowScale ? c.rowScale[i] : 0.0f);
    __m512 bs = _mm512_set1_ps(c.bias ? c.bias[i] : 0.0f);
    for (int h = 0; h < 2; ++h) {
      int64_t p = pix0 + h * 16;
      if (p >= c.pix) break;
      int64_t cnt = std::min<int64_t>(16, c.pix - p);
      __mmask16 mask = static_cast<__mmask16>(cnt == 16 ? 0xFFFF : (1u << cnt) - 1);
      if (c.c32) {
        _mm512_mask_storeu_epi32(c.c32 + i * c.pix + p, mask, _mm512_sub_epi32(acc[r][h], corr));
        continue;
      }
      const __m512 a = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][h], corr));
      if (c.y8) {  // the fused QuantizeLinear (qgemm.h DirectConvArgs::y8); cvtps2dq rounds half to even
        __m512 t = _mm512_fmadd_ps(a, _mm512_set1_ps(c.qScale[i]), _mm512_set1_ps(c.qBias[i]));
        if (c.residual)
          t = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, c.residual + i * c.pix + p), _mm512_set1_ps(c.qInv), t);
        t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(c.qLo)), _mm512_set1_ps(c.qHi));
        const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(t), _mm512_set1_epi32(c.yZero));
        _mm_mask_storeu_epi8(c.y8 + i * c.pix + p, mask, _mm512_cvtepi32_epi8(q));
        continue;
      }
      __m512 y = _mm512_mul_ps(a, sc);
      if (c.bias) y = _mm512_add_ps(y, bs);
      if (c.residual) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, c.residual + i * c.pix + p));
      if (c.clamp) y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(c.lo)), _mm512_set1_ps(c.hi));
      _mm512_mask_storeu_ps(c.y + i * c.pix + p, mask, y);
      if (c.side8) {
        const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(y, _mm512_set1_ps(c.sideInv)), _mm512_set1_ps(c.sideLo)),
                                       _mm512_set1_ps(c.sideHi));
        const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(t), _mm512_set1_epi32(c.sideZero));
        _mm_mask_storeu_epi8(c.side8 + i * c.pix + p, mask, _mm512_cvtepi32_epi8(q));
      }
    }
  }
}

}  // namespace

ONNXTOOL_AVX512 void convGemmAvx512Vnni(const DirectConvArgs& c, int64_t p0, int64_t p1) {
  for (int64_t pn = p0; pn < p1; ++pn) {
    const uint8_t* cp = c.colPanels + pn * c.kp * 32;
    int64_t i = 0;
    for (; i + kMr <= c.m; i += kMr) convTile<kMr>(c.w + i * c.kp, c.kp, cp, c, i, pn * 32);
    const int8_t* w = c.w + i * c.kp;
    switch (c.m - i) {
      case 7: convTile<7>(w, c.kp, cp, c, i, pn * 32); break;
      case 6: convTile<6>(w, c.kp, cp, c, i, pn * 32); break;
      case 5: convTile<5>(w, c.kp, cp, c, i, pn * 32); break;
      case 4: convTile<4>(w, c.kp, cp, c, i, pn * 32); break;
      case 3: convTile<3>(w, c.kp, cp, c, i, pn * 32); break;
      case 2: convTile<2>(w, c.kp, cp, c, i, pn * 32); break;
      case 1: convTile<1>(w, c.kp, cp, c, i, pn * 32); break;
      default: break;
    }
  }
}

}  // namespace onnxtool::cpu::qgemm
