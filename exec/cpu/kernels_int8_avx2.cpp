// kernels_int8_avx2.cpp: the AVX2 path of the int8 GEMM (qgemm.h) and the vectorised
// DynamicQuantizeLinear pieces. A is widened to int16 when it is packed (or quantized) and B is
// packed as int16, so vpmaddwd sums pairs of exact products into int32: no saturation (the
// u8 x s8 vpmaddubsw form saturates pair sums above 32767, e.g. 255*127 + 255*127).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "exec/cpu/qgemm.h"

#define ONNXTOOL_AVX2 __attribute__((target("avx2,fma")))

namespace onnxtool::cpu::qgemm {

namespace {

constexpr int kMr = 6;  // rows per tile: 6 x 2 accumulators of 8 int32 lanes

ONNXTOOL_AVX2 inline __m256i tailMask(int64_t cnt) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(cnt, 8))), idx);
}

template <int R>
ONNXTOOL_AVX2 void tile(const int16_t* a, int64_t lda, const int16_t* bp, int64_t pairs, const PackedB& b, int64_t row0,
                        int64_t col0, const Epilogue& e) {
  __m256i acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t p = 0; p < pairs; ++p) {
    __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + p * 32));
    __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + p * 32 + 16));
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      __builtin_memcpy(&pair, a + r * lda + p * 2, 4);
      __m256i av = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
    }
  }
  const int64_t k = b.k;
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    int64_t i = row0 + r;
    const int32_t aZero = e.aZeroRow ? e.aZeroRow[i] : e.aZero;
    const __m256i az = _mm256_set1_epi32(aZero);
    for (int h = 0; h < 2; ++h) {
      int64_t j = col0 + h * 8;
      if (j >= b.n) break;
      int64_t cnt = b.n - j;
      __m256i mask = tailMask(cnt);
      __m256i cs = _mm256_maskload_epi32(b.colSum.data() + j, mask);
      __m256i v = _mm256_sub_epi32(acc[r][h], _mm256_mullo_epi32(az, cs));
      if (e.bZero) {
        __m256i bz = _mm256_maskload_epi32(e.bZero + j, mask);
        __m256i t = _mm256_set1_epi32(static_cast<int32_t>(k) * aZero - e.rowSumA[i]);
        v = _mm256_add_epi32(v, _mm256_mullo_epi32(bz, t));
      }
      if (e.c32) {
        _mm256_maskstore_epi32(e.c32 + i * e.ldc + j, mask, v);
      } else {
        __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_maskload_ps(e.colScale + j, mask));
        if (e.rowScale) y = _mm256_mul_ps(y, _mm256_set1_ps(e.rowScale[i]));
        if (e.bias) y = _mm256_add_ps(y, _mm256_maskload_ps(e.bias + j, mask));
        if (e.clamp) y = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(e.lo)), _mm256_set1_ps(e.hi));
        _mm256_maskstore_ps(e.cf + i * e.ldc + j, mask, y);
      }
    }
  }
}

}  // namespace

ONNXTOOL_AVX2 void gemmAvx2(const PackedB& b, const void* aPacked, int64_t m, const Epilogue& e, int64_t p0, int64_t p1) {
  const int16_t* a = static_cast<const int16_t*>(aPacked);
  const int64_t pairs = b.kp / 2, lda = b.kp;
  for (int64_t pn = p0; pn < p1; ++pn) {
    const int16_t* bp = b.s16.data() + pn * b.kp * 16;
    int64_t col0 = pn * 16;
    int64_t i = 0;
    for (; i + kMr <= m; i += kMr) tile<kMr>(a + i * lda, lda, bp, pairs, b, i, col0, e);
    switch (m - i) {
      case 5: tile<5>(a + i * lda, lda, bp, pairs, b, i, col0, e); break;
      case 4: tile<4>(a + i * lda, lda, bp, pairs, b, i, col0, e); break;
      case 3: tile<3>(a + i * lda, lda, bp, pairs, b, i, col0, e); break;
      case 2: tile<2>(a + i * lda, lda, bp, pairs, b, i, col0, e); break;
      case 1: tile<1>(a + i * lda, lda, bp, pairs, b, i, col0, e); break;
      default: break;
    }
  }
}

ONNXTOOL_AVX2 bool minMaxAvx2(const float* x, int64_t n, float& mn, float& mx) {
  __m256 vmin = _mm256_setzero_ps(), vmax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmin = _mm256_min_ps(vmin, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  if (_mm256_movemask_ps(nan)) return false;
  alignas(32) float lo[8], hi[8];
  _mm256_store_ps(lo, vmin);
  _mm256_store_ps(hi, vmax);
  mn = 0, mx = 0;
  for (int q = 0; q < 8; ++q) mn = std::min(mn, lo[q]), mx = std::max(mx, hi[q]);
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return false;
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  return true;
}

ONNXTOOL_AVX2 void quantizeRowAvx2(const float* x, int64_t k, float scale, float zero, int16_t* dst, int32_t& rowSum,
                                   bool nanToZeroPoint) {
  const __m256 vs = _mm256_set1_ps(scale), vz = _mm256_set1_ps(zero);
  const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
  __m256i sum = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (nanToZeroPoint) q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));  // NaN -> 0
    // max(NaN, 0) is 0: a NaN left here quantizes to 0, as DynamicQuantizeLinear does
    q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, vz), lo), hi);
    __m256i qi = _mm256_cvttps_epi32(q);
    sum = _mm256_add_epi32(sum, qi);
    __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
  alignas(32) int32_t s[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s), sum);
  // Unsigned: a whole image may be one row (the sum is only used for GEMM rows, where it fits).
  uint32_t total = 0;
  for (int q = 0; q < 8; ++q) total += static_cast<uint32_t>(s[q]);
  for (; i < k; ++i) {
    float r = std::nearbyint(x[i] / scale);
    if (nanToZeroPoint && std::isnan(r)) r = 0;
    float q = r + zero;
    int16_t v = std::isnan(q) ? 0 : static_cast<int16_t>(std::clamp(q, 0.0f, 255.0f));
    dst[i] = v;
    total += static_cast<uint32_t>(v);
  }
  rowSum = static_cast<int32_t>(total);
}

ONNXTOOL_AVX2 void quantizeU8Avx2(const float* x, int64_t n, float scale, float zero, uint8_t* dst) {
  const __m256 vs = _mm256_set1_ps(scale), vz = _mm256_set1_ps(zero);
  const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {  // exactly the reference: nearbyint(x / scale) + zero, NaN -> 0 first
    __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));
    q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, vz), lo), hi);
    const __m256i qi = _mm256_cvttps_epi32(q);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi16(w, w));
  }
  for (; i < n; ++i) {
    float r = std::nearbyint(x[i] / scale);
    if (std::isnan(r)) r = 0;
    dst[i] = static_cast<uint8_t>(std::clamp(r + zero, 0.0f, 255.0f));
  }
}

}  // namespace onnxtool::cpu::qgemm
