// gemm_int4.cpp: PackedB4's dequantizing loops (gemm.h) for the AVX-512 (32-column panels) and
// AVX2 (16-column panels) paths: a row's nr / 2 bytes split into low and high nibbles (columns
// c and c + nr / 2), widened to int32, converted, then (code - zero) * scale: the same one
// rounding as the portable loop. Compiled through __attribute__((target)) only; called when
// activeIsa() is that path.
#include "exec/cpu/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12's AVX-512 conversion intrinsics pass an undefined vector as the (unused) merge source,
// which -W(maybe-)uninitialized reports inside the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace onnxtool::cpu {

#if defined(__x86_64__)

namespace {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void rowsAvx512(const uint8_t* codes, int64_t rows, int nr,
                                                                                const float* zero, const float* scale,
                                                                                float* dst) {
  const __m512 z0 = _mm512_loadu_ps(zero), z1 = _mm512_loadu_ps(zero + 16);
  const __m512 s0 = _mm512_loadu_ps(scale), s1 = _mm512_loadu_ps(scale + 16);
  const __m128i low = _mm_set1_epi8(15);
  for (int64_t r = 0; r < rows; ++r, codes += 16, dst += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), f1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_sub_ps(f0, z0), s0));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_sub_ps(f1, z1), s1));
  }
}

__attribute__((target("avx2,fma"))) void rowsAvx2(const uint8_t* codes, int64_t rows, int nr, const float* zero,
                                                  const float* scale, float* dst) {
  const __m256 z0 = _mm256_loadu_ps(zero), z1 = _mm256_loadu_ps(zero + 8);
  const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
  const __m128i low = _mm_set1_epi8(15);
  for (int64_t r = 0; r < rows; ++r, codes += 8, dst += 16) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
    const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_sub_ps(f0, z0), s0));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_sub_ps(f1, z1), s1));
  }
}

}  // namespace

PackedB4::RowsFn packedB4RowsAvx512(int nr) { return nr == 32 ? rowsAvx512 : nullptr; }
PackedB4::RowsFn packedB4RowsAvx2(int nr) { return nr == 16 ? rowsAvx2 : nullptr; }

#else

PackedB4::RowsFn packedB4RowsAvx512(int) { return nullptr; }
PackedB4::RowsFn packedB4RowsAvx2(int) { return nullptr; }

#endif

}  // namespace onnxtool::cpu
