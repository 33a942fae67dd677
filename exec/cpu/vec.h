// vec.h: the vectorised float32 primitives of the cpu executor, one table per ISA path. The same
// source (vec_impl.inc, written with GCC vector extensions) is compiled three times with
// per-file target flags: vec_avx512.cpp (16 lanes, AVX-512F/BW/VL/DQ), vec_avx2.cpp (8 lanes,
// AVX2 + FMA), vec_portable.cpp (4 lanes, the build's baseline). vecKernels() picks the table of
// activeIsa() at run time (cpuid, capped by ONNXTOOL_ISA); nothing depends on the build
// machine's -march.
//
// Error bounds of the approximations (float32, against double-precision libm over the float
// range; tests/unit/test_cpu_vec.cpp asserts them on every path, measured values in brackets):
//   exp:     relative error <= 2e-7 [8.3e-8] where the result is a normal float; +inf above
//            ln(FLT_MAX), 0 or a denormal below -87.3 (within 4 denormal steps); NaN -> NaN.
//   erf:     absolute error <= 4e-7 [2.9e-7]; |x| < 0.5: odd Taylor polynomial to x^13,
//            relative error <= 2e-7; else Abramowitz-Stegun 7.1.26 with our exp; erf(+-inf) =
//            +-1; NaN -> NaN.
//   tanh:    absolute error <= 2e-7 [7.5e-8]; |x| < 0.4: odd Taylor polynomial to x^13,
//            relative error <= 2e-7; else 1 - 2 / (exp(2|x|) + 1); tanh(+-inf) = +-1.
//   sigmoid: 1 / (1 + exp(-x)): relative error <= 3e-7 [1.4e-7]; 0 at -inf, 1 at +inf.
//   SiLU:    x / (1 + exp(-x)) (one rounding less than x * sigmoid(x)): relative error
//            <= 3e-7 [1.7e-7]; +inf at +inf, NaN at -inf (-inf / inf, as Sigmoid then Mul's -inf * 0).
//   GELU:    0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
//            absolute error <= 1e-6 [4.3e-7] on [-10, 10]; the reference's NaN at -inf. The erf
//            form takes 1 + erf straight from Abramowitz-Stegun 7.1.26 (no small-argument
//            series): relative error <= 8e-7 [6.5e-7] on [-0.5, 0.5].
//   HardSwish: x * max(0, min(1, (x + 3) * (1/6))) in double, rounded to float: equal to the
//            reference's double x * max(0, min(1, x / 6 + 0.5)) but where the two doubles round
//            across a float boundary (<= 1 ulp); -0 at or below -3, NaN at -inf, as the reference.
//   HardSigmoid: max(0, min(1, alpha x + beta)) in double as the reference, rounded to float.
// Every function takes n >= 0 and handles any tail; y may equal x (in place).
#pragma once

#include <cstdint>

#include "exec/cpu/isa.h"

namespace onnxtool::cpu {

/// Unary float functions of the table (index into VecKernels::unary).
/// Silu: x * sigmoid(x) (the Sigmoid + Mul pair EfficientNet-style exports write), computed as
/// x / (1 + exp(-x)).
enum class VecUnary : uint8_t { Exp, Erf, Tanh, Sigmoid, GeluErf, GeluTanh, Relu, HardSwish, Silu, Count };
/// Binary float operations (index into VecKernels::binary*).
enum class VecBinary : uint8_t { Add, Sub, Mul, Div, Count };

struct VecKernels {
  const char* isa;
  /// y[i] = f(x[i]).
  void (*unary[static_cast<int>(VecUnary::Count)])(const float* x, float* y, int64_t n);
  /// y[i] = a[i] op b[i].
  void (*binary[static_cast<int>(VecBinary::Count)])(const float* a, const float* b, float* y, int64_t n);
  /// y[i] = a[i] op b (a scalar right operand).
  void (*binaryScalarB[static_cast<int>(VecBinary::Count)])(const float* a, float b, float* y, int64_t n);
  /// y[i] = a op b[i] (a scalar left operand).
  void (*binaryScalarA[static_cast<int>(VecBinary::Count)])(float a, const float* b, float* y, int64_t n);
  /// Softmax of one contiguous row of n elements (the max subtracted first); n >= 1.
  void (*softmaxRow)(const float* x, float* y, int64_t n);
  /// LayerNormalization of one row of n >= 1 elements: s = x (+ r when r is not null),
  /// y = (s - mean) / sqrt(var + eps) * gamma (+ beta when not null); variance from the mean
  /// (two passes). y may equal x or r.
  void (*layerNormRow)(const float* x, const float* r, const float* gamma, const float* beta, float eps, float* y,
                       int64_t n);
  /// The GEMM epilogue on one row: y[i] = act(y[i] + bias[i]) (bias may be null); act is one of
  /// VecUnary (Count: none).
  void (*biasAct)(float* y, const float* bias, int64_t n, VecUnary act);
  /// y[i] = max(0, min(1, alpha x[i] + beta)), std::min/std::max order as the reference (NaN gives 1).
  void (*hardSigmoid)(const float* x, float* y, int64_t n, float alpha, float beta);
  /// NonMaxSuppression's pass (kernels_nms.cpp): drop[j] |= 1 when box j (canonical corners x0,
  /// y0, x1, y1 and area, SoA) is suppressed by box b = {x0, y0, x1, y1, area} at IoU threshold
  /// `iou`; returns how many are (those marked before included). The reference kernel's test (exec/ref/image.cpp
  /// suppresses(candidate j, kept b)) with its operations in its order: the same decisions.
  int64_t (*nmsSuppress)(const float* x0, const float* y0, const float* x1, const float* y1, const float* area, int64_t n,
                         const float* b, float iou, uint8_t* drop);
  /// x[0] + ... + x[n - 1] (GlobalAveragePool): float partial sums of at most 32 elements per
  /// lane, added in double; error within 32 float roundings of sum |x[i]| (~2e-6 of it).
  double (*sum)(const float* x, int64_t n);
  /// y[i] = float(q[i]) * scale (int8 rows of an embedding table: kernels_int8_gather.cpp); exact
  /// conversion and one float multiply, bit-identical on every path.
  void (*dequantizeS8)(const int8_t* q, float scale, float* y, int64_t n);
  /// y[r] = x[0] w[r ldw] + ... + x[k - 1] w[r ldw + k - 1] for r < rows: a GEMV against a
  /// row-major [rows, k] matrix read in place (Gemm with transB and one row of A: a classifier
  /// reading its weights from the model's bytes, at any alignment; x float-aligned). Float
  /// partial sums in 2 W chains per row, in an order of its own (not the reference's).
  void (*dotRows)(const float* x, const float* w, int64_t ldw, int64_t k, int64_t rows, float* y);
};

/// The table of activeIsa().
const VecKernels& vecKernels();
/// The table of one ISA path (tests); a path this CPU lacks must not be called.
const VecKernels& vecKernelsFor(Isa isa);

}  // namespace onnxtool::cpu
