// launch.h: the device kernels of the `cuda` executor (kernels.cu), behind plain launch
// functions that host code (cuda_kernels.cpp) calls with device pointers and a stream. Element
// types are lib/dtype.h's DType numbers (passed as int: this header is shared with nvcc and stays
// free of the library's headers). Every launch is asynchronous on `stream`; a launch failure is
// reported by the next cudaGetLastError (the executor checks after each step).
//
// Floating element types F32, F16 and BF16 compute in float32 (loads widen, stores round to
// nearest even); integer kernels compute in their own type.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace onnxtool::cuda {

constexpr int kMaxRank = 8;

/// Element types the device kernels handle (lib/dtype.h numbering).
enum DevType : int { kF32 = 1, kU8 = 2, kI8 = 3, kU16 = 4, kI16 = 5, kI32 = 6, kI64 = 7, kBool = 9, kF16 = 10, kF64 = 11,
                     kU32 = 12, kU64 = 13, kBF16 = 16 };

/// Unary float functions, also the activations of fused epilogues. `a`, `b` are the op's
/// attributes (LeakyRelu alpha; Clip min, max; HardSigmoid alpha, beta; Elu/Celu alpha; Selu alpha, gamma).
enum class Unary : int {
  Identity, Relu, LeakyRelu, Sigmoid, Tanh, Erf, Exp, Log, Sqrt, Reciprocal, Neg, Abs, Floor, Ceil, Round, Sign, Clip,
  HardSigmoid, HardSwish, GeluErf, GeluTanh, Softplus, Softsign, Elu, Selu, Celu, ThresholdedRelu, Sin, Cos, Tan,
  Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Silu, Mish
};

/// y = f(x) for n elements of float type t (F32, F16, BF16). In place when x == y.
void unary(Unary op, int t, const void* x, void* y, int64_t n, float a, float b, cudaStream_t stream);

/// Element strides of up to three operands broadcast to `dims` (0 along broadcast axes).
struct Bcast {
  int rank = 0;
  int64_t n = 0;  ///< elements of the output
  int64_t dims[kMaxRank] = {};
  int64_t s0[kMaxRank] = {}, s1[kMaxRank] = {}, s2[kMaxRank] = {};
  bool contiguous0 = false, contiguous1 = false, contiguous2 = false;  ///< operand is the output's shape
  bool scalar0 = false, scalar1 = false, scalar2 = false;              ///< one element
};

enum class Binary : int { Add, Sub, Mul, Div, Pow, Max, Min, PRelu, Equal, Less, Greater, LessEq, GreaterEq, And, Or, Xor };

/// Whether `binary` handles op for operand type t (comparisons and And/Or/Xor write Bool).
bool binarySupported(Binary op, int t);
/// y = a op b with broadcasting (operands 0 and 1 of d). y may alias a or b when that operand
/// has the output's shape.
void binary(Binary op, int t, const void* a, const void* b, void* y, const Bcast& d, cudaStream_t stream);
/// y = cond ? x : z (operands 0, 1, 2 of d); cond Bool; elemBytes 1, 2, 4 or 8.
void where(int elemBytes, const void* cond, const void* x, const void* z, void* y, const Bcast& d, cudaStream_t stream);

/// Softmax (or LogSoftmax) over the middle axis of [outer, len, inner].
void softmax(int t, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool log, cudaStream_t stream);

/// LayerNormalization of rows of `cols` elements: (x - mean) / sqrt(var + eps) * scale + bias
/// (bias may be null); scale and bias of type t.
void layerNorm(int t, const void* x, const void* scale, const void* bias, void* y, int64_t rows, int64_t cols, float eps,
               cudaStream_t stream);

/// y = act(x * scale[c] + shift[c] (+ residual)) over [n, c, inner]; scale/shift float32 (either
/// may be null: 1 and 0), residual of type t (may be null). In place when x == y.
void channelAffine(int t, const void* x, const float* scale, const float* shift, const void* residual, void* y, int64_t n,
                   int64_t c, int64_t inner, Unary act, float a, float b, cudaStream_t stream);

/// y = act(x + bias[col] (+ residual)) over rows of `cols`; bias of type t (may be null),
/// residual of type t with y's shape (may be null). In place when x == y.
void rowBiasAct(int t, const void* x, const void* bias, const void* residual, void* y, int64_t rows, int64_t cols, Unary act,
                float a, float b, cudaStream_t stream);

struct Pool2d {
  int64_t nc = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int padT = 0, padL = 0, padB = 0, padR = 0;
  bool max = true;
  bool countIncludePad = false;
};
/// MaxPool / AveragePool over [nc, h, w] planes.
void pool2d(int t, const void* x, void* y, const Pool2d& p, cudaStream_t stream);

enum class Reduce : int { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSumExp };
/// Reduction of the middle axis of [outer, r, inner] (r may be 0: the op's identity).
void reduce(Reduce op, int t, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, cudaStream_t stream);

/// dst[dstOffset + sum(i_k * dstStride_k)] = src[srcOffset + sum(i_k * srcStride_k)] over `dims`
/// (strides in elements, may be 0 or negative); elemBytes 1, 2, 4 or 8.
struct StridedCopy {
  int rank = 0;
  int64_t n = 0;
  int64_t dims[kMaxRank] = {};
  int64_t src[kMaxRank] = {}, dst[kMaxRank] = {};
};
void stridedCopy(int elemBytes, const void* src, void* dst, const StridedCopy& c, cudaStream_t stream);

/// out[o, i, k] = data[o, idx[i] (negative: + len), k] over [outer, nIdx, inner]; an index out
/// of range gives zeros. idx int64 (idx64) or int32.
void gather(int elemBytes, const void* data, const void* idx, bool idx64, void* out, int64_t outer, int64_t len,
            int64_t inner, int64_t nIdx, cudaStream_t stream);

/// Whether `cast` converts between these types.
bool castSupported(int from, int to);
void cast(int from, int to, const void* x, void* y, int64_t n, cudaStream_t stream);

}  // namespace onnxtool::cuda
