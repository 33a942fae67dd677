// qgemm.h: the int8 GEMM of the cpu executor: C[M,N] = (A - a0)[M,K] x (B - b0[n])[K,N] with A
// uint8 (activations) and B int8 (weights, packed once at prepare), int32 accumulation, and an
// epilogue that stores either int32 (MatMulInteger) or float y = float(acc) * colScale[n] (+ bias[n])
// (the Cast -> Mul -> Add tail of a dynamically quantized MatMul), in the same float operations
// as the unfused graph.
//
// One path per ISA, each in its own file compiled with __attribute__((target)) and chosen at run
// time: AVX-512 VNNI (vpdpbusd: u8 x s8 groups of 4 into int32, exact), AVX2 (A widened to int16
// and B stored as int16, vpmaddwd: exact; vpmaddubsw's int16 saturation of u8 x s8 pair sums
// would corrupt results for |B| > 64 without the reduced-range weights other runtimes force),
// and portable C++. The zero points are applied in the epilogue: acc - a0*colSum(B)[n]
// - b0[n]*rowSum(A)[m] + K*a0*b0[n].
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "exec/cpu/isa.h"
#include "exec/cpu/thread_pool.h"

namespace onnxtool::cpu::qgemm {

/// The int8 path: the best of `isa` and what the CPU has (VNNI needs avx512vnni on top of Avx512).
enum class Path { Portable, Avx2, Avx512Vnni };
Path pathFor(Isa isa);
const char* pathName(Path p);

/// B packed for one path. Columns in panels of `panelWidth` (zero-padded), K padded to the
/// path's group (4 for VNNI, 2 for AVX2).
struct PackedB {
  Path path = Path::Portable;
  int64_t k = 0, n = 0, kp = 0, panelWidth = 32, panels = 0;
  std::vector<int8_t> s8;    ///< VNNI: panel, k group of 4, column, 4 bytes
  std::vector<int16_t> s16;  ///< AVX2: panel, k pair, column, 2 values
  std::vector<int8_t> t8;    ///< portable: [N][K] (transposed)
  std::vector<int32_t> colSum;
};

/// Packs row-major B [K, N] (int8).
PackedB packB(Path path, const int8_t* b, int64_t k, int64_t n);

/// Bytes of the packed A of m rows (aligned use: 64-byte aligned base).
size_t packedABytes(Path path, int64_t m, int64_t k);

/// Copies uint8 A [m, k] (row stride lda) into the packed layout at `dst`, and its row sums.
void packA(Path path, const uint8_t* a, int64_t m, int64_t k, int64_t lda, void* dst, int32_t* rowSum);

/// DynamicQuantizeLinear of x [n]: min(0, min x), max(0, max x). Returns false when x holds a NaN.
bool minMax(Path path, const float* x, int64_t n, float& mn, float& mx);
/// q = saturate(nearbyint(x / scale) + zero) into the packed layout of A [m, k], with row sums.
/// A NaN quotient gives 0 (DynamicQuantizeLinear) or, with `nanToZeroPoint`, the zero point
/// (QuantizeLinear rounds NaN to 0 before adding it).
void quantizeA(Path path, const float* x, int64_t m, int64_t k, float scale, float zero, void* dst, int32_t* rowSum,
               bool nanToZeroPoint = false);

struct Epilogue {
  int32_t aZero = 0;
  const int32_t* aZeroRow = nullptr; ///< [M]: one zero point per row of A, instead of aZero
  const int32_t* bZero = nullptr;   ///< [N], nullptr when all zero
  const int32_t* rowSumA = nullptr;  ///< [M], needed when bZero
  int32_t* c32 = nullptr;            ///< int32 output, or
  float* cf = nullptr;               ///< float output: float(acc) * colScale[n] (+ bias[n])
  const float* colScale = nullptr;
  const float* rowScale = nullptr;   ///< [M] or nullptr: (float(acc) * colScale[n]) * rowScale[m] (+ bias[n])
  const float* bias = nullptr;
  bool clamp = false;                ///< float output: min(max(y, lo), hi) last (a fused Relu or Clip)
  float lo = 0, hi = 0;
  int64_t ldc = 0;
};

/// C for m rows of packed A, on the plan's pool (panels of columns split between its threads;
/// inline when pool is null).
void gemm(const PackedB& b, const void* a, int64_t m, const Epilogue& e, ThreadPool* pool);

// Per-path kernels over a range of column panels (kernels_int8_*.cpp).
void gemmPortable(const PackedB& b, const void* a, int64_t m, const Epilogue& e, int64_t p0, int64_t p1);
void gemmAvx2(const PackedB& b, const void* a, int64_t m, const Epilogue& e, int64_t p0, int64_t p1);
void gemmAvx512Vnni(const PackedB& b, const void* a, int64_t m, const Epilogue& e, int64_t p0, int64_t p1);
bool minMaxAvx2(const float* x, int64_t n, float& mn, float& mx);
bool minMaxAvx512(const float* x, int64_t n, float& mn, float& mx);
void quantizeRowAvx2(const float* x, int64_t k, float scale, float zero, int16_t* dst, int32_t& rowSum, bool nanToZeroPoint);
void quantizeRowAvx512(const float* x, int64_t k, float scale, float zero, uint8_t* dst, int32_t& rowSum, bool nanToZeroPoint);
/// QuantizeLinear to uint8 (per tensor), exactly as the reference computes it.
void quantizeU8Avx2(const float* x, int64_t n, float scale, float zero, uint8_t* dst);

/// Runs fn(p0, p1) over [0, panels) split between the pool's threads, in chunks of at least
/// ~64K multiply-adds (`work` is the whole product's); inline when the pool is null or busy.
void parallelPanels(int64_t panels, int64_t work, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn);

/// The direct NCHW convolution of the VNNI path: Y[M, pix] = W[M, kp] x col, col packed in panels
/// of 32 pixels x 4 k (packColPanelsAvx512 from im2col rows [kp][ldcol], ldcol = panels * 32),
/// y = float(acc - aZero * wRowSum[m]) * rowScale[m] (+ bias[m]). Symmetric weights only.
struct DirectConvArgs {
  const int8_t* w = nullptr;  ///< [M][kp], k past K zero
  const int32_t* wRowSum = nullptr;
  int64_t m = 0, kp = 0, pix = 0;
  const uint8_t* colPanels = nullptr;
  int32_t aZero = 0;
  const float* rowScale = nullptr;
  const float* bias = nullptr;
  bool clamp = false;  ///< min(max(y, lo), hi) last (a fused Relu or Clip)
  float lo = 0, hi = 0;
  float* y = nullptr;
  int32_t* c32 = nullptr;  ///< instead of y: acc - aZero * wRowSum[m] as int32 (QLinearConv requantizes it)
  /// [M][pix] float added to y before the clamp (a fused residual Add); with y8, added as
  /// residual * qInv (1 / yScale) to the scaled sum.
  const float* residual = nullptr;
  float qInv = 1;
  /// Besides y, its QuantizeLinear: round_half_even(clamp(y * sideInv, sideLo, sideHi)) + sideZero
  /// (sideLo, sideHi: the saturation less the zero point).
  uint8_t* side8 = nullptr;
  float sideInv = 1, sideLo = 0, sideHi = 255;
  int32_t sideZero = 0;
  /// Instead of y: a fused QuantizeLinear(y, yScale, yZero) [after the clamp], as
  /// round_half_even(float(acc - aZero * wRowSum[m]) * qScale[m] + qBias[m]) clamped to [qLo, qHi],
  /// + yZero; qScale = rowScale / yScale, qBias = bias / yScale, [qLo, qHi] the clamp's bounds
  /// quantized and the saturation, less yZero (Clip and QuantizeLinear are monotonic). The products
  /// with 1 / yScale can differ from the division in the last ulp: one step, at rounding ties only.
  uint8_t* y8 = nullptr;
  const float* qScale = nullptr;
  const float* qBias = nullptr;
  float qLo = 0, qHi = 0;
  int32_t yZero = 0;
};
/// im2col rows [C*KH*KW][ld] of a convolution's uint8 input [C][h][w] with column stride 1 or 2
/// (out-of-image taps hold `pad`, the zero point; columns past oh*ow hold 0), channels [c0, c1).
struct Im2colArgs {
  const uint8_t* x = nullptr;
  int64_t h = 0, w = 0, kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1, padT = 0, padL = 0, oh = 0, ow = 0;
  uint8_t pad = 0;
  uint8_t* col = nullptr;
  int64_t ld = 0;
};
void im2colAvx512(const Im2colArgs& a, int64_t c0, int64_t c1);
void packColPanelsAvx512(const uint8_t* col, int64_t ldcol, int64_t kp, int64_t panels, uint8_t* dst);
/// The same packing straight from k rows of `cols` bytes (row stride ld): rows past k and columns
/// past `cols` read as 0 (a 1x1 convolution's input planes are its im2col rows).
void packRowsAvx512(const uint8_t* rows, int64_t ld, int64_t k, int64_t cols, int64_t kp, int64_t panels, uint8_t* dst);
void convGemmAvx512Vnni(const DirectConvArgs& c, int64_t p0, int64_t p1);

}  // namespace onnxtool::cpu::qgemm
