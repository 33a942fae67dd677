// kernels.cu: the `cuda` executor's own device kernels (launch.h says what each computes).
// Simple grid-stride kernels with 64-bit indexing: every one of them is bound by memory, and the
// heavy ops (Conv, MatMul, Gemm) go to cuDNN and cuBLAS. Precise math functions (no fast-math):
// results match the reference kernels to float32 rounding.
#include "exec/cuda/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace onnxtool::cuda {

namespace {

constexpr int kBlock = 256;

int gridFor(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{1} << 20))); }

#define GRID_STRIDE(i, n) for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)
// The same with index type I: kernels whose every index fits 32 bits run with I = int32_t
// (64-bit integer division is emulated on the GPU, some tens of instructions per divide).
#define GRID_STRIDE_I(I, i, n) for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < static_cast<I>(n); i += static_cast<I>(gridDim.x * blockDim.x))

bool fits32(int64_t n) { return n <= (INT32_MAX >> 1); }  // (half: a grid stride past the end must not overflow)

__device__ __forceinline__ float toF(float x) { return x; }
__device__ __forceinline__ float toF(__half x) { return __half2float(x); }
__device__ __forceinline__ float toF(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T fromF(float x);
template <> __device__ __forceinline__ float fromF<float>(float x) { return x; }
template <> __device__ __forceinline__ __half fromF<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

#define DISPATCH_FLOAT(t, T, ...)            \
  switch (t) {                               \
    case kF32: {                             \
      using T = float;                       \
      __VA_ARGS__;                           \
    } break;                                 \
    case kF16: {                             \
      using T = __half;                      \
      __VA_ARGS__;                           \
    } break;                                 \
    case kBF16: {                            \
      using T = __nv_bfloat16;               \
      __VA_ARGS__;                           \
    } break;                                 \
    default:                                 \
      break;                                 \
  }

__device__ __forceinline__ float sigmoidF(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplusF(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float applyUnary(Unary op, float x, float a, float b) {
  switch (op) {
    case Unary::Identity: return x;
    case Unary::Relu: return x < 0.0f ? 0.0f : x;
    case Unary::LeakyRelu: return x < 0.0f ? a * x : x;
    case Unary::Sigmoid: return sigmoidF(x);
    case Unary::Tanh: return tanhf(x);
    case Unary::Erf: return erff(x);
    case Unary::Exp: return expf(x);
    case Unary::Log: return logf(x);
    case Unary::Sqrt: return sqrtf(x);
    case Unary::Reciprocal: return 1.0f / x;
    case Unary::Neg: return -x;
    case Unary::Abs: return fabsf(x);
    case Unary::Floor: return floorf(x);
    case Unary::Ceil: return ceilf(x);
    case Unary::Round: return rintf(x);
    case Unary::Sign: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);  // 0 and NaN stay
    case Unary::Clip: {  // min(max(x, lo), hi) as ONNX (hi wins when lo > hi); NaN stays
      float y = x < a ? a : x;
      return y > b ? b : y;
    }
    case Unary::HardSigmoid: return fminf(1.0f, fmaxf(0.0f, a * x + b));
    case Unary::HardSwish: return x * fminf(1.0f, fmaxf(0.0f, x / 6.0f + 0.5f));
    case Unary::GeluErf: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Unary::GeluTanh: return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case Unary::Softplus: return softplusF(x);
    case Unary::Softsign: return x / (1.0f + fabsf(x));
    case Unary::Elu: return x < 0.0f ? a * (expf(x) - 1.0f) : x;
    case Unary::Selu: return x > 0.0f ? b * x : b * (a * expf(x) - a);
    case Unary::Celu: return fmaxf(0.0f, x) + fminf(0.0f, a * (expf(x / a) - 1.0f));
    case Unary::ThresholdedRelu: return x > a ? x : 0.0f;
    case Unary::Sin: return sinf(x);
    case Unary::Cos: return cosf(x);
    case Unary::Tan: return tanf(x);
    case Unary::Asin: return asinf(x);
    case Unary::Acos: return acosf(x);
    case Unary::Atan: return atanf(x);
    case Unary::Sinh: return sinhf(x);
    case Unary::Cosh: return coshf(x);
    case Unary::Asinh: return asinhf(x);
    case Unary::Acosh: return acoshf(x);
    case Unary::Atanh: return atanhf(x);
    case Unary::Silu: return x * sigmoidF(x);
    case Unary::Mish: return x * tanhf(softplusF(x));
  }
  return x;
}

template <class T>
__global__ void unaryK(Unary op, const T* x, T* y, int64_t n, float a, float b) {
  GRID_STRIDE(i, n) y[i] = fromF<T>(applyUnary(op, toF(x[i]), a, b));
}

// ---- broadcasting ----

template <class I>
struct Offsets {
  I o0, o1, o2;
};

template <class I>
__device__ __forceinline__ Offsets<I> offsetsOf(I i, const Bcast& d, int operands) {
  Offsets<I> o{0, 0, 0};
  I r = i;
  for (int k = d.rank - 1; k >= 0; --k) {
    I dim = static_cast<I>(d.dims[k]);
    I q = r / dim, idx = r - q * dim;
    r = q;
    o.o0 += idx * static_cast<I>(d.s0[k]);
    o.o1 += idx * static_cast<I>(d.s1[k]);
    if (operands > 2) o.o2 += idx * static_cast<I>(d.s2[k]);
  }
  if (d.contiguous0) o.o0 = i;
  if (d.contiguous1) o.o1 = i;
  if (operands > 2 && d.contiguous2) o.o2 = i;
  return o;
}

template <class C>
__device__ __forceinline__ C arith(Binary op, C a, C b) {
  switch (op) {
    case Binary::Add: return a + b;
    case Binary::Sub: return a - b;
    case Binary::Mul: return a * b;
    case Binary::Div: return a / b;
    case Binary::Max: return (a != a) ? a : ((b != b) ? b : (a > b ? a : b));
    case Binary::Min: return (a != a) ? a : ((b != b) ? b : (a < b ? a : b));
    default: return a;
  }
}
__device__ __forceinline__ float arithF(Binary op, float a, float b) {
  if (op == Binary::Pow) return powf(a, b);
  if (op == Binary::PRelu) return a < 0.0f ? a * b : a;
  return arith<float>(op, a, b);
}
template <class C>
__device__ __forceinline__ bool compare(Binary op, C a, C b) {
  switch (op) {
    case Binary::Equal: return a == b;
    case Binary::Less: return a < b;
    case Binary::Greater: return a > b;
    case Binary::LessEq: return a <= b;
    case Binary::GreaterEq: return a >= b;
    default: return false;
  }
}

template <class T, class I>
__global__ void binaryFloatK(Binary op, const T* a, const T* b, T* y, Bcast d) {
  if (d.contiguous0 && d.contiguous1) {
    GRID_STRIDE(i, d.n) y[i] = fromF<T>(arithF(op, toF(a[i]), toF(b[i])));
  } else if (d.contiguous0 && d.scalar1) {
    float bv = toF(b[0]);
    GRID_STRIDE(i, d.n) y[i] = fromF<T>(arithF(op, toF(a[i]), bv));
  } else {
    GRID_STRIDE_I(I, i, d.n) {
      Offsets<I> o = offsetsOf<I>(i, d, 2);
      y[i] = fromF<T>(arithF(op, toF(a[o.o0]), toF(b[o.o1])));
    }
  }
}

template <class T, class I>
__global__ void binaryIntK(Binary op, const T* a, const T* b, T* y, Bcast d) {
  GRID_STRIDE_I(I, i, d.n) {
    Offsets<I> o = offsetsOf<I>(i, d, 2);
    y[i] = arith<T>(op, a[o.o0], b[o.o1]);
  }
}

template <class T, class I>
__global__ void compareFloatK(Binary op, const T* a, const T* b, uint8_t* y, Bcast d) {
  GRID_STRIDE_I(I, i, d.n) {
    Offsets<I> o = offsetsOf<I>(i, d, 2);
    y[i] = compare<float>(op, toF(a[o.o0]), toF(b[o.o1])) ? 1 : 0;
  }
}

template <class T, class I>
__global__ void compareIntK(Binary op, const T* a, const T* b, uint8_t* y, Bcast d) {
  GRID_STRIDE_I(I, i, d.n) {
    Offsets<I> o = offsetsOf<I>(i, d, 2);
    y[i] = compare<T>(op, a[o.o0], b[o.o1]) ? 1 : 0;
  }
}

template <class I>
__global__ void logicK(Binary op, const uint8_t* a, const uint8_t* b, uint8_t* y, Bcast d) {
  GRID_STRIDE_I(I, i, d.n) {
    Offsets<I> o = offsetsOf<I>(i, d, 2);
    bool x = a[o.o0] != 0, z = b[o.o1] != 0;
    bool r = op == Binary::And ? (x && z) : op == Binary::Or ? (x || z) : op == Binary::Xor ? (x != z) : (x == z);
    y[i] = r ? 1 : 0;
  }
}

template <class T, class I>
__global__ void whereK(const uint8_t* c, const T* x, const T* z, T* y, Bcast d) {
  GRID_STRIDE_I(I, i, d.n) {
    Offsets<I> o = offsetsOf<I>(i, d, 3);
    y[i] = c[o.o0] ? x[o.o1] : z[o.o2];
  }
}

// ---- block reductions ----

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return (a != a || a > b) ? a : b; }
};

template <class Op>
__device__ float warpReduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Reduces v over the block (every thread gets the result). blockDim.x a multiple of 32.
template <class Op>
__device__ float blockReduce(float v, Op op, float init) {
  __shared__ float part[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpReduce(v, op);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int warps = static_cast<int>(blockDim.x >> 5);
  v = lane < warps ? part[lane] : init;
  v = warpReduce(v, op);
  __syncthreads();  // part[] is reused by the next call
  return v;
}

template <class T>
__global__ void softmaxRowsK(const T* x, T* y, int64_t len, bool log) {
  const T* xr = x + blockIdx.x * len;
  T* yr = y + blockIdx.x * len;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = MaxOp()(m, toF(xr[j]));
  m = blockReduce(m, MaxOp(), -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += expf(toF(xr[j]) - m);
  s = blockReduce(s, SumOp(), 0.0f);
  if (log) {
    float ls = logf(s);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yr[j] = fromF<T>(toF(xr[j]) - m - ls);
  } else {
    float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yr[j] = fromF<T>(expf(toF(xr[j]) - m) * inv);
  }
}

template <class T>
__global__ void softmaxColsK(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool log) {
  GRID_STRIDE(i, outer * inner) {
    int64_t o = i / inner, k = i - o * inner;
    const T* xs = x + o * len * inner + k;
    T* ys = y + o * len * inner + k;
    float m = -INFINITY;
    for (int64_t j = 0; j < len; ++j) m = MaxOp()(m, toF(xs[j * inner]));
    float s = 0.0f;
    for (int64_t j = 0; j < len; ++j) s += expf(toF(xs[j * inner]) - m);
    float ls = logf(s), inv = 1.0f / s;
    for (int64_t j = 0; j < len; ++j) {
      float v = toF(xs[j * inner]) - m;
      ys[j * inner] = fromF<T>(log ? v - ls : expf(v) * inv);
    }
  }
}

template <class T>
__global__ void layerNormK(const T* x, const T* scale, const T* bias, T* y, int64_t cols, float eps) {
  const T* xr = x + blockIdx.x * cols;
  T* yr = y + blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += toF(xr[j]);
  float mean = blockReduce(s, SumOp(), 0.0f) / static_cast<float>(cols);
  float q = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = toF(xr[j]) - mean;
    q += d * d;
  }
  float var = blockReduce(q, SumOp(), 0.0f) / static_cast<float>(cols);
  float inv = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = (toF(xr[j]) - mean) * inv * toF(scale[j]);
    if (bias) v += toF(bias[j]);
    yr[j] = fromF<T>(v);
  }
}

template <class T, class I>
__global__ void channelAffineK(const T* x, const float* scale, const float* shift, const T* res, T* y, int64_t total,
                               int64_t c64, int64_t inner64, Unary act, float a, float b) {
  I c = static_cast<I>(c64), inner = static_cast<I>(inner64);
  GRID_STRIDE_I(I, i, total) {
    I ch = (i / inner) % c;
    float v = toF(x[i]);
    if (scale) v *= scale[ch];
    if (shift) v += shift[ch];
    if (res) v += toF(res[i]);
    y[i] = fromF<T>(applyUnary(act, v, a, b));
  }
}

template <class T, class I>
__global__ void rowBiasActK(const T* x, const T* bias, const T* res, T* y, int64_t total, int64_t cols64, Unary act, float a,
                            float b) {
  I cols = static_cast<I>(cols64);
  GRID_STRIDE_I(I, i, total) {
    float v = toF(x[i]);
    if (bias) v += toF(bias[i % cols]);
    if (res) v += toF(res[i]);
    y[i] = fromF<T>(applyUnary(act, v, a, b));
  }
}

template <class T>
__global__ void pool2dK(const T* x, T* y, Pool2d p) {
  GRID_STRIDE(i, p.nc * p.oh * p.ow) {
    int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, plane = i / (p.ow * p.oh);
    const T* xp = x + plane * p.h * p.w;
    int64_t y0 = oy * p.sh - p.padT, x0 = ox * p.sw - p.padL;
    float acc = p.max ? -INFINITY : 0.0f;
    int count = 0, padded = 0;
    for (int ky = 0; ky < p.kh; ++ky) {
      int64_t yy = y0 + static_cast<int64_t>(ky) * p.dh;
      bool inPadY = yy >= -p.padT && yy < p.h + p.padB;
      for (int kx = 0; kx < p.kw; ++kx) {
        int64_t xx = x0 + static_cast<int64_t>(kx) * p.dw;
        if (inPadY && xx >= -p.padL && xx < p.w + p.padR) ++padded;
        if (yy < 0 || yy >= p.h || xx < 0 || xx >= p.w) continue;
        float v = toF(xp[yy * p.w + xx]);
        if (p.max) acc = (v > acc || v != v) ? v : acc;
        else acc += v;
        ++count;
      }
    }
    if (!p.max) acc = acc / static_cast<float>(p.countIncludePad ? padded : count);
    y[i] = fromF<T>(acc);
  }
}

__device__ __forceinline__ float reduceInit(Reduce op) {
  switch (op) {
    case Reduce::Max: return -INFINITY;
    case Reduce::Min: return INFINITY;
    case Reduce::Prod: return 1.0f;
    default: return 0.0f;
  }
}
__device__ __forceinline__ float reduceStep(Reduce op, float acc, float v) {
  switch (op) {
    case Reduce::Max: return (v > acc || v != v) ? v : acc;
    case Reduce::Min: return (v < acc || v != v) ? v : acc;
    case Reduce::Prod: return acc * v;
    case Reduce::SumSquare:
    case Reduce::L2: return acc + v * v;
    case Reduce::L1: return acc + fabsf(v);
    default: return acc + v;
  }
}
__device__ __forceinline__ float reduceFinish(Reduce op, float acc, int64_t r, float m) {
  switch (op) {
    case Reduce::Mean: return acc / static_cast<float>(r);
    case Reduce::L2: return sqrtf(acc);
    case Reduce::LogSumExp: return logf(acc) + m;
    default: return acc;
  }
}

template <class T>
__global__ void reduceColsK(Reduce op, const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  GRID_STRIDE(i, outer * inner) {
    int64_t o = i / inner, k = i - o * inner;
    const T* xs = x + o * r * inner + k;
    float m = 0.0f;
    if (op == Reduce::LogSumExp) {
      m = -INFINITY;
      for (int64_t j = 0; j < r; ++j) m = fmaxf(m, toF(xs[j * inner]));
      if (m == -INFINITY) m = 0.0f;
    }
    float acc = reduceInit(op);
    for (int64_t j = 0; j < r; ++j) {
      float v = toF(xs[j * inner]);
      acc = op == Reduce::LogSumExp ? acc + expf(v - m) : reduceStep(op, acc, v);
    }
    y[i] = fromF<T>(reduceFinish(op, acc, r, m));
  }
}

struct ReduceOpFn {
  Reduce op;
  __device__ float operator()(float a, float b) const {
    switch (op) {
      case Reduce::Max: return (a != a || a > b) ? a : b;
      case Reduce::Min: return (a != a || a < b) ? a : b;
      case Reduce::Prod: return a * b;
      default: return a + b;
    }
  }
};

template <class T>
__global__ void reduceRowsK(Reduce op, const T* x, T* y, int64_t r) {
  const T* xr = x + blockIdx.x * r;
  float m = 0.0f;
  if (op == Reduce::LogSumExp) {
    float mm = -INFINITY;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) mm = fmaxf(mm, toF(xr[j]));
    m = blockReduce(mm, MaxOp(), -INFINITY);
    if (m == -INFINITY) m = 0.0f;
  }
  float acc = reduceInit(op);
  for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
    float v = toF(xr[j]);
    acc = op == Reduce::LogSumExp ? acc + expf(v - m) : reduceStep(op, acc, v);
  }
  acc = blockReduce(acc, ReduceOpFn{op}, reduceInit(op));
  if (threadIdx.x == 0) y[blockIdx.x] = fromF<T>(reduceFinish(op, acc, r, m));
}

template <class E, class I>
__global__ void stridedCopyK(const E* src, E* dst, StridedCopy c) {
  GRID_STRIDE_I(I, i, c.n) {
    I r = i, os = 0, od = 0;
    for (int k = c.rank - 1; k >= 0; --k) {
      I dim = static_cast<I>(c.dims[k]);
      I q = r / dim, idx = r - q * dim;
      r = q;
      os += idx * static_cast<I>(c.src[k]);
      od += idx * static_cast<I>(c.dst[k]);
    }
    dst[od] = src[os];
  }
}

template <class E, class X, class I>
__global__ void gatherK(const E* data, const X* idx, E* out, int64_t len64, int64_t inner64, int64_t nIdx64, int64_t total) {
  I len = static_cast<I>(len64), inner = static_cast<I>(inner64), nIdx = static_cast<I>(nIdx64);
  GRID_STRIDE_I(I, i, total) {
    I k = i % inner, t = i / inner, j = t % nIdx, o = t / nIdx;
    int64_t ix = static_cast<int64_t>(idx[j]);
    if (ix < 0) ix += len;
    out[i] = (ix >= 0 && ix < len) ? data[(o * len + static_cast<I>(ix)) * inner + k] : E{};
  }
}

// ---- casts ----

template <class T> struct Ld {
  __device__ static double get(T v) { return static_cast<double>(v); }
};
template <> struct Ld<__half> {
  __device__ static double get(__half v) { return static_cast<double>(__half2float(v)); }
};
template <> struct Ld<__nv_bfloat16> {
  __device__ static double get(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }
};
struct BoolT {
  uint8_t v;
};

template <class From, class To>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, BoolT>) {
    if constexpr (std::is_same_v<From, BoolT>) return x;
    else return BoolT{static_cast<uint8_t>(Ld<From>::get(x) != 0.0 ? 1 : 0)};
  } else if constexpr (std::is_same_v<From, BoolT>) {
    if constexpr (std::is_same_v<To, __half>) return __float2half_rn(x.v ? 1.0f : 0.0f);
    else if constexpr (std::is_same_v<To, __nv_bfloat16>) return __float2bfloat16_rn(x.v ? 1.0f : 0.0f);
    else return static_cast<To>(x.v ? 1 : 0);
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (std::is_same_v<From, __nv_bfloat16>) return __float2half_rn(__bfloat162float(x));
    else if constexpr (std::is_same_v<From, __half>) return x;
    else return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    if constexpr (std::is_same_v<From, __half>) return __float2bfloat16_rn(__half2float(x));
    else if constexpr (std::is_same_v<From, __nv_bfloat16>) return x;
    else return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<From, __half>) {
    return static_cast<To>(__half2float(x));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return static_cast<To>(__bfloat162float(x));
  } else {
    return static_cast<To>(x);
  }
}

template <class From, class To>
__global__ void castK(const From* x, To* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = convert<From, To>(x[i]);
}

template <class From>
void castFrom(int to, const void* x, void* y, int64_t n, cudaStream_t s) {
  const From* xs = static_cast<const From*>(x);
  int g = gridFor(n);
#define CAST_TO(code, T) \
  case code: castK<From, T><<<g, kBlock, 0, s>>>(xs, static_cast<T*>(y), n); break;
  switch (to) {
    CAST_TO(kF32, float)
    CAST_TO(kF16, __half)
    CAST_TO(kBF16, __nv_bfloat16)
    CAST_TO(kF64, double)
    CAST_TO(kI64, int64_t)
    CAST_TO(kI32, int32_t)
    CAST_TO(kI16, int16_t)
    CAST_TO(kI8, int8_t)
    CAST_TO(kU8, uint8_t)
    CAST_TO(kU16, uint16_t)
    CAST_TO(kU32, uint32_t)
    CAST_TO(kU64, uint64_t)
    CAST_TO(kBool, BoolT)
    default: break;
  }
#undef CAST_TO
}

bool castType(int t) {
  switch (t) {
    case kF32: case kF16: case kBF16: case kF64: case kI64: case kI32: case kI16: case kI8: case kU8: case kU16:
    case kU32: case kU64: case kBool: return true;
    default: return false;
  }
}

template <class I>
void binaryAs(Binary op, int t, bool cmp, const void* a, const void* b, void* y, const Bcast& d, int g, cudaStream_t s) {
  if (t == kBool) {
    logicK<I><<<g, kBlock, 0, s>>>(op, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), static_cast<uint8_t*>(y), d);
    return;
  }
  if (t == kI32 || t == kI64) {
    if (t == kI32) {
      if (cmp) compareIntK<int32_t, I><<<g, kBlock, 0, s>>>(op, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), static_cast<uint8_t*>(y), d);
      else binaryIntK<int32_t, I><<<g, kBlock, 0, s>>>(op, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), static_cast<int32_t*>(y), d);
    } else {
      if (cmp) compareIntK<int64_t, I><<<g, kBlock, 0, s>>>(op, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), static_cast<uint8_t*>(y), d);
      else binaryIntK<int64_t, I><<<g, kBlock, 0, s>>>(op, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), static_cast<int64_t*>(y), d);
    }
    return;
  }
  if (cmp) {
    DISPATCH_FLOAT(t, T, compareFloatK<T, I><<<g, kBlock, 0, s>>>(op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<uint8_t*>(y), d))
  } else {
    DISPATCH_FLOAT(t, T, binaryFloatK<T, I><<<g, kBlock, 0, s>>>(op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), d))
  }
}

template <class E, class I>
void whereAs(const void* c, const void* x, const void* z, void* y, const Bcast& d, int g, cudaStream_t s) {
  whereK<E, I><<<g, kBlock, 0, s>>>(static_cast<const uint8_t*>(c), static_cast<const E*>(x), static_cast<const E*>(z), static_cast<E*>(y), d);
}

template <class E>
void whereE(const void* c, const void* x, const void* z, void* y, const Bcast& d, int g, cudaStream_t s) {
  if (fits32(d.n)) whereAs<E, int32_t>(c, x, z, y, d, g, s);
  else whereAs<E, int64_t>(c, x, z, y, d, g, s);
}

template <class E>
void stridedCopyE(const void* src, void* dst, const StridedCopy& c, int g, cudaStream_t s) {
  int64_t reach = 0;  // the farthest element either side touches, from its start
  for (int k = 0; k < c.rank; ++k) {
    int64_t span = c.dims[k] - 1;
    reach = std::max(reach, std::max(std::abs(c.src[k]), std::abs(c.dst[k])) * span);
  }
  if (fits32(c.n) && fits32(reach * std::max(1, c.rank)))
    stridedCopyK<E, int32_t><<<g, kBlock, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst), c);
  else
    stridedCopyK<E, int64_t><<<g, kBlock, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst), c);
}

template <class E, class X>
void gatherE(const void* data, const void* idx, void* out, int64_t outer, int64_t len, int64_t inner, int64_t nIdx,
             int64_t total, int g, cudaStream_t s) {
  if (fits32(total) && fits32(outer * len * inner))
    gatherK<E, X, int32_t><<<g, kBlock, 0, s>>>(static_cast<const E*>(data), static_cast<const X*>(idx), static_cast<E*>(out), len, inner, nIdx, total);
  else
    gatherK<E, X, int64_t><<<g, kBlock, 0, s>>>(static_cast<const E*>(data), static_cast<const X*>(idx), static_cast<E*>(out), len, inner, nIdx, total);
}

}  // namespace

void unary(Unary op, int t, const void* x, void* y, int64_t n, float a, float b, cudaStream_t s) {
  if (n <= 0) return;
  DISPATCH_FLOAT(t, T, unaryK<T><<<gridFor(n), kBlock, 0, s>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, a, b))
}

bool binarySupported(Binary op, int t) {
  bool cmp = op == Binary::Equal || op == Binary::Less || op == Binary::Greater || op == Binary::LessEq ||
             op == Binary::GreaterEq;
  bool logic = op == Binary::And || op == Binary::Or || op == Binary::Xor;
  switch (t) {
    case kF32: case kF16: case kBF16: return !logic;
    case kI32: case kI64:
      return cmp || op == Binary::Add || op == Binary::Sub || op == Binary::Mul || op == Binary::Max || op == Binary::Min;
    case kBool: return logic || op == Binary::Equal;
    default: return false;
  }
}

void binary(Binary op, int t, const void* a, const void* b, void* y, const Bcast& d, cudaStream_t s) {
  if (d.n <= 0) return;
  int g = gridFor(d.n);
  bool cmp = op == Binary::Equal || op == Binary::Less || op == Binary::Greater || op == Binary::LessEq ||
             op == Binary::GreaterEq;
  if (fits32(d.n)) binaryAs<int32_t>(op, t, cmp, a, b, y, d, g, s);
  else binaryAs<int64_t>(op, t, cmp, a, b, y, d, g, s);
}

void where(int elemBytes, const void* c, const void* x, const void* z, void* y, const Bcast& d, cudaStream_t s) {
  if (d.n <= 0) return;
  int g = gridFor(d.n);
  switch (elemBytes) {
    case 1: whereE<uint8_t>(c, x, z, y, d, g, s); break;
    case 2: whereE<uint16_t>(c, x, z, y, d, g, s); break;
    case 4: whereE<uint32_t>(c, x, z, y, d, g, s); break;
    case 8: whereE<uint64_t>(c, x, z, y, d, g, s); break;
    default: break;
  }
}

void softmax(int t, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool log, cudaStream_t s) {
  if (outer * len * inner <= 0) return;
  if (inner == 1) {
    int threads = len <= 64 ? 32 : len <= 256 ? 64 : len <= 1024 ? 128 : 256;
    DISPATCH_FLOAT(t, T, softmaxRowsK<T><<<static_cast<unsigned>(outer), threads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), len, log))
  } else {
    DISPATCH_FLOAT(t, T, softmaxColsK<T><<<gridFor(outer * inner), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner, log))
  }
}

void layerNorm(int t, const void* x, const void* scale, const void* bias, void* y, int64_t rows, int64_t cols, float eps,
               cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  int threads = cols <= 256 ? 64 : cols <= 1024 ? 128 : 256;
  DISPATCH_FLOAT(t, T, layerNormK<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias), static_cast<T*>(y), cols, eps))
}

void channelAffine(int t, const void* x, const float* scale, const float* shift, const void* residual, void* y, int64_t n,
                   int64_t c, int64_t inner, Unary act, float a, float b, cudaStream_t s) {
  int64_t total = n * c * inner;
  if (total <= 0) return;
  if (fits32(total)) {
    DISPATCH_FLOAT(t, T, channelAffineK<T, int32_t><<<gridFor(total), kBlock, 0, s>>>(static_cast<const T*>(x), scale, shift, static_cast<const T*>(residual), static_cast<T*>(y), total, c, inner, act, a, b))
  } else {
    DISPATCH_FLOAT(t, T, channelAffineK<T, int64_t><<<gridFor(total), kBlock, 0, s>>>(static_cast<const T*>(x), scale, shift, static_cast<const T*>(residual), static_cast<T*>(y), total, c, inner, act, a, b))
  }
}

void rowBiasAct(int t, const void* x, const void* bias, const void* residual, void* y, int64_t rows, int64_t cols, Unary act,
                float a, float b, cudaStream_t s) {
  int64_t total = rows * cols;
  if (total <= 0) return;
  if (fits32(total)) {
    DISPATCH_FLOAT(t, T, rowBiasActK<T, int32_t><<<gridFor(total), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<const T*>(residual), static_cast<T*>(y), total, cols, act, a, b))
  } else {
    DISPATCH_FLOAT(t, T, rowBiasActK<T, int64_t><<<gridFor(total), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<const T*>(residual), static_cast<T*>(y), total, cols, act, a, b))
  }
}

void pool2d(int t, const void* x, void* y, const Pool2d& p, cudaStream_t s) {
  int64_t total = p.nc * p.oh * p.ow;
  if (total <= 0) return;
  DISPATCH_FLOAT(t, T, pool2dK<T><<<gridFor(total), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), p))
}

void reduce(Reduce op, int t, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, cudaStream_t s) {
  if (outer * inner <= 0) return;
  if (inner == 1 && r >= 64) {
    int threads = r <= 1024 ? 128 : 256;
    DISPATCH_FLOAT(t, T, reduceRowsK<T><<<static_cast<unsigned>(outer), threads, 0, s>>>(op, static_cast<const T*>(x), static_cast<T*>(y), r))
  } else {
    DISPATCH_FLOAT(t, T, reduceColsK<T><<<gridFor(outer * inner), kBlock, 0, s>>>(op, static_cast<const T*>(x), static_cast<T*>(y), outer, r, inner))
  }
}

void stridedCopy(int elemBytes, const void* src, void* dst, const StridedCopy& c0, cudaStream_t s) {
  if (c0.n <= 0) return;
  // Contiguous innermost runs move as wider elements (up to 16 bytes a thread): a transpose of
  // [B, S, H, D] to [B, H, S, D] copies D-long rows.
  StridedCopy c = c0;
  auto aligned = [](const void* p, int b) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(b) == 0; };
  while (elemBytes < 16 && c.rank >= 1 && c.src[c.rank - 1] == 1 && c.dst[c.rank - 1] == 1 && c.dims[c.rank - 1] % 2 == 0 &&
         aligned(src, 2 * elemBytes) && aligned(dst, 2 * elemBytes)) {
    bool even = true;
    for (int k = 0; k + 1 < c.rank; ++k) even = even && c.src[k] % 2 == 0 && c.dst[k] % 2 == 0;
    if (!even) break;
    for (int k = 0; k + 1 < c.rank; ++k) c.src[k] /= 2, c.dst[k] /= 2;
    c.dims[c.rank - 1] /= 2;
    c.n /= 2;
    elemBytes *= 2;
  }
  int g = gridFor(c.n);
  switch (elemBytes) {
    case 1: stridedCopyE<uint8_t>(src, dst, c, g, s); break;
    case 2: stridedCopyE<uint16_t>(src, dst, c, g, s); break;
    case 4: stridedCopyE<uint32_t>(src, dst, c, g, s); break;
    case 8: stridedCopyE<uint64_t>(src, dst, c, g, s); break;
    case 16: stridedCopyE<uint4>(src, dst, c, g, s); break;
    default: break;
  }
}

void gather(int elemBytes, const void* data, const void* idx, bool idx64, void* out, int64_t outer, int64_t len,
            int64_t inner, int64_t nIdx, cudaStream_t s) {
  int64_t total = outer * nIdx * inner;
  if (total <= 0) return;
  int g = gridFor(total);
#define GATHER(E) \
  if (idx64) gatherE<E, int64_t>(data, idx, out, outer, len, inner, nIdx, total, g, s); \
  else gatherE<E, int32_t>(data, idx, out, outer, len, inner, nIdx, total, g, s);
  switch (elemBytes) {
    case 1: GATHER(uint8_t) break;
    case 2: GATHER(uint16_t) break;
    case 4: GATHER(uint32_t) break;
    case 8: GATHER(uint64_t) break;
    default: break;
  }
#undef GATHER
}

bool castSupported(int from, int to) { return castType(from) && castType(to); }

void cast(int from, int to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  switch (from) {
    case kF32: castFrom<float>(to, x, y, n, s); break;
    case kF16: castFrom<__half>(to, x, y, n, s); break;
    case kBF16: castFrom<__nv_bfloat16>(to, x, y, n, s); break;
    case kF64: castFrom<double>(to, x, y, n, s); break;
    case kI64: castFrom<int64_t>(to, x, y, n, s); break;
    case kI32: castFrom<int32_t>(to, x, y, n, s); break;
    case kI16: castFrom<int16_t>(to, x, y, n, s); break;
    case kI8: castFrom<int8_t>(to, x, y, n, s); break;
    case kU8: castFrom<uint8_t>(to, x, y, n, s); break;
    case kU16: castFrom<uint16_t>(to, x, y, n, s); break;
    case kU32: castFrom<uint32_t>(to, x, y, n, s); break;
    case kU64: castFrom<uint64_t>(to, x, y, n, s); break;
    case kBool: castFrom<BoolT>(to, x, y, n, s); break;
    default: break;
  }
}

}  // namespace onnxtool::cuda
