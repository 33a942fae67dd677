// elementwise.cpp: reference kernels of element-wise ops: arithmetic, comparison, logic and bit
// operations with numpy broadcasting (and opset < 7's `broadcast`/`axis`), math functions,
// activations, variadic Max/Min/Sum/Mean, Clip, Where, and the conversions Cast, CastLike, BitCast.
//
// Float math runs in double and rounds once to the element type; float16/bfloat16 arithmetic runs
// in float like numpy's, which the backend test data come from. Integer arithmetic wraps (two's
// complement) and integer division truncates toward zero.
#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "exec/ref/float_formats.h"
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

template <typename T>
constexpr bool isHalfLike = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

/// The type arithmetic on T runs in: float for float16/bfloat16, T otherwise.
template <typename T>
using CalcT = std::conditional_t<isHalfLike<T>, float, T>;

template <typename T>
CalcT<T> calc(T v) {
  return static_cast<CalcT<T>>(v);
}

// ---------------------------------------------------------------------------------------------
// Broadcasting

/// B's dims as numpy broadcasting should see them. Opset < 7 binary ops broadcast only with
/// attribute broadcast=1, aligning B's dims at `axis` of A (default: trailing dims, as numpy).
std::vector<int64_t> secondOperandDims(const KernelContext& ctx, const TensorData& a, const TensorData& b, bool legacy) {
  if (!legacy) return b.dims;
  if (ctx.attrInt("broadcast", 0) == 0) {
    if (a.dims != b.dims) ctx.fail("inputs must have the same shape when attribute broadcast is 0");
    return b.dims;
  }
  if (!ctx.hasAttr("axis")) return b.dims;
  auto rank = static_cast<int64_t>(a.dims.size());
  int64_t axis = ctx.attrInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis + static_cast<int64_t>(b.dims.size()) > rank)
    ctx.fail(fmt::format("axis {} does not fit a rank-{} B into a rank-{} A", ctx.attrInt("axis", 0), b.dims.size(), rank));
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  std::copy(b.dims.begin(), b.dims.end(), dims.begin() + axis);
  return dims;
}

/// out[i] = f(a[bcast(i)], b[bcast(i)]) with numpy broadcasting of a.dims and bDims; output type R.
template <typename T, typename R, typename U = T, typename F>
Tensor binaryMap(const KernelContext& ctx, const TensorData& a, const TensorData& b, const std::vector<int64_t>& bDims,
                 DType outType, F&& f) {
  std::vector<int64_t> dims = broadcastShapes(ctx, {a.dims, bDims});
  Tensor out = makeTensor(outType, dims);
  Broadcaster ba(dims, a.dims), bb(dims, bDims);
  const T* pa = data<T>(a);
  const U* pb = data<U>(b);
  R* po = mutableData<R>(out);
  for (int64_t i = 0, n = numel(dims); i < n; ++i) po[i] = f(pa[ba.offset(i)], pb[bb.offset(i)]);
  return out;
}

/// Like dispatchNumeric without bool (not even instantiated for it).
template <typename F>
void dispatchArith(const KernelContext& ctx, DType t, F&& f) {
  if (t == DType::Bool) ctx.fail("bool inputs are not supported");
  dispatchNumeric(ctx, t, [&](auto tag) {
    if constexpr (!std::is_same_v<decltype(tag), bool>) f(tag);
  });
}

/// Integer types only (int8..int64, uint8..uint64).
template <typename F>
void dispatchInteger(const KernelContext& ctx, DType t, F&& f) {
  if (!dtypeIsInteger(t) || dtypeBits(t) < 8) ctx.fail(fmt::format("unsupported element type {}, expected an integer type", dtypeName(t)));
  dispatchNumeric(ctx, t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) f(tag);
  });
}

/// Rounds a double to T once (float16/bfloat16 exactly, not via float).
template <typename T>
T fromDouble(double v) {
  if constexpr (std::is_same_v<T, Float16>) {
    Float16 h;
    h.bits = static_cast<uint16_t>(encodeNarrowFloat(DType::Float16, v, false));
    return h;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 h;
    h.bits = static_cast<uint16_t>(encodeNarrowFloat(DType::BFloat16, v, false));
    return h;
  } else {
    return static_cast<T>(v);
  }
}

/// Element-wise f(double) -> double over input 0 of a float type.
template <typename F>
void mapFloat(KernelContext& ctx, F&& f) {
  const TensorData& x = ctx.tensor(0);
  dispatchFloat(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) po[i] = fromDouble<T>(f(static_cast<double>(calc(px[i]))));
    ctx.setOutput(0, std::move(out));
  });
}

/// Element-wise over input 0 of any numeric type but bool: floats through fFloat(double),
/// integers through fInt(T).
template <typename FF, typename FI>
void mapNumeric(KernelContext& ctx, FF&& fFloat, FI&& fInt) {
  const TensorData& x = ctx.tensor(0);
  dispatchArith(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) {
      if constexpr (isFloatLike<T>) po[i] = fromDouble<T>(fFloat(static_cast<double>(calc(px[i]))));
      else po[i] = fInt(px[i]);
    }
    ctx.setOutput(0, std::move(out));
  });
}

// ---------------------------------------------------------------------------------------------
// Binary arithmetic

enum class Arith { Add, Sub, Mul, Div };

template <Arith op, typename T>
T arith(T x, T y) {
  if constexpr (isFloatLike<T>) {
    CalcT<T> a = calc(x), b = calc(y);
    if constexpr (op == Arith::Add) return T(a + b);
    if constexpr (op == Arith::Sub) return T(a - b);
    if constexpr (op == Arith::Mul) return T(a * b);
    if constexpr (op == Arith::Div) return T(a / b);
  } else {
    auto a = static_cast<uint64_t>(x), b = static_cast<uint64_t>(y);  // wraps like two's complement
    if constexpr (op == Arith::Add) return static_cast<T>(a + b);
    if constexpr (op == Arith::Sub) return static_cast<T>(a - b);
    if constexpr (op == Arith::Mul) return static_cast<T>(a * b);
    if constexpr (op == Arith::Div) {
      if (y == 0) return T(0);  // undefined in ONNX; numpy gives 0, and we must not trap
      if constexpr (std::is_signed_v<T>)
        if (x == std::numeric_limits<T>::min() && y == T(-1)) return x;  // wraps
      return static_cast<T>(x / y);  // truncates toward zero
    }
  }
}

template <Arith op, bool legacy>
void arithKernel(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != b.dtype()) ctx.fail("inputs must have the same element type");
  std::vector<int64_t> bDims = secondOperandDims(ctx, a, b, legacy);
  dispatchArith(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, bDims, a.dtype(), arith<op, T>));
  });
}

/// Mod: fmod=0 takes the sign of the divisor (numpy mod), fmod=1 the sign of the dividend (C fmod).
void mod(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  bool cStyle = ctx.attrInt("fmod", 0) != 0;
  dispatchArith(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (isFloatLike<T>) {
      ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, b.dims, a.dtype(), [&](T x, T y) {
        double p = calc(x), q = calc(y);
        double r = std::fmod(p, q);
        if (!cStyle) {
          if (r != 0 && (r < 0) != (q < 0)) r += q;
          else if (r == 0) r = std::copysign(0.0, q);
        }
        return fromDouble<T>(r);
      }));
    } else {
      ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, b.dims, a.dtype(), [&](T x, T y) {
        if (y == 0) return T(0);
        if constexpr (std::is_signed_v<T>)
          if (y == T(-1)) return T(0);  // also avoids INT_MIN % -1 trapping
        T r = static_cast<T>(x % y);
        if (!cStyle && r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
        return r;
      }));
    }
  });
}

/// T^n for integers by repeated squaring, wrapping; negative n truncates 1/x^|n| toward zero.
template <typename T>
T integerPow(T base, int64_t n) {
  if (n < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (n % 2 == 0) ? T(1) : T(-1);
    return T(0);
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (auto e = static_cast<uint64_t>(n); e; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

/// Pow: base and exponent may have different types; the result has the base's type.
template <bool legacy>
void pow(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  std::vector<int64_t> bDims = secondOperandDims(ctx, a, b, legacy);
  dispatchArith(ctx, a.dtype(), [&](auto baseTag) {
    using T = decltype(baseTag);
    dispatchArith(ctx, b.dtype(), [&](auto expTag) {
      using U = decltype(expTag);
      ctx.setOutput(0, binaryMap<T, T, U>(ctx, a, b, bDims, a.dtype(), [](T x, U y) {
        if constexpr (!isFloatLike<T> && !isFloatLike<U>) {
          return integerPow<T>(x, static_cast<int64_t>(y));
        } else if constexpr (isFloatLike<T>) {
          return fromDouble<T>(std::pow(static_cast<double>(calc(x)), static_cast<double>(calc(y))));
        } else {
          // integer base, float exponent: numpy computes in double and truncates back
          double r = std::trunc(std::pow(static_cast<double>(x), static_cast<double>(calc(y))));
          if (std::isnan(r)) return T(0);
          if (r >= 0) return static_cast<T>(r >= 18446744073709551616.0 ? UINT64_MAX : static_cast<uint64_t>(r));
          return static_cast<T>(r < -9223372036854775808.0 ? INT64_MIN : static_cast<int64_t>(r));
        }
      }));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Comparison, logic, bit operations

enum class Cmp { Equal, Greater, Less, GreaterOrEqual, LessOrEqual };

template <Cmp op, typename V>
bool compare(V a, V b) {
  if constexpr (op == Cmp::Equal) return a == b;
  if constexpr (op == Cmp::Greater) return a > b;
  if constexpr (op == Cmp::Less) return a < b;
  if constexpr (op == Cmp::GreaterOrEqual) return a >= b;
  if constexpr (op == Cmp::LessOrEqual) return a <= b;
}

template <Cmp op, bool legacy>
void compareKernel(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != b.dtype()) ctx.fail("inputs must have the same element type");
  std::vector<int64_t> bDims = secondOperandDims(ctx, a, b, legacy);
  if (a.dtype() == DType::String) {
    if constexpr (op != Cmp::Equal) ctx.fail("string inputs are only supported by Equal");
    std::vector<int64_t> dims = broadcastShapes(ctx, {a.dims, bDims});
    Tensor out = makeTensor(DType::Bool, dims);
    Broadcaster ba(dims, a.dims), bb(dims, bDims);
    bool* po = mutableData<bool>(out);
    for (int64_t i = 0, n = numel(dims); i < n; ++i)
      po[i] = a.strings[static_cast<size_t>(ba.offset(i))] == b.strings[static_cast<size_t>(bb.offset(i))];
    ctx.setOutput(0, std::move(out));
    return;
  }
  dispatchNumeric(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ctx.setOutput(0, binaryMap<T, bool>(ctx, a, b, bDims, DType::Bool, [](T x, T y) { return compare<op>(calc(x), calc(y)); }));
  });
}

enum class Logic { And, Or, Xor };

template <Logic op, bool legacy>
void logicKernel(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != DType::Bool || b.dtype() != DType::Bool) ctx.fail("inputs must be bool");
  std::vector<int64_t> bDims = secondOperandDims(ctx, a, b, legacy);
  ctx.setOutput(0, binaryMap<uint8_t, bool>(ctx, a, b, bDims, DType::Bool, [](uint8_t x, uint8_t y) {
    bool p = x != 0, q = y != 0;
    if constexpr (op == Logic::And) return p && q;
    if constexpr (op == Logic::Or) return p || q;
    if constexpr (op == Logic::Xor) return p != q;
  }));
}

void notKernel(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dtype() != DType::Bool) ctx.fail("input must be bool");
  Tensor out = makeTensor(DType::Bool, x.dims);
  const uint8_t* px = data<uint8_t>(x);
  bool* po = mutableData<bool>(out);
  for (int64_t i = 0, n = numel(x); i < n; ++i) po[i] = px[i] == 0;
  ctx.setOutput(0, std::move(out));
}

template <Logic op>
void bitwiseKernel(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != b.dtype()) ctx.fail("inputs must have the same element type");
  dispatchInteger(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, b.dims, a.dtype(), [](T x, T y) {
      if constexpr (op == Logic::And) return static_cast<T>(x & y);
      if constexpr (op == Logic::Or) return static_cast<T>(x | y);
      if constexpr (op == Logic::Xor) return static_cast<T>(x ^ y);
    }));
  });
}

void bitwiseNot(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  dispatchInteger(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) po[i] = static_cast<T>(~px[i]);
    ctx.setOutput(0, std::move(out));
  });
}

/// BitShift: right shifts of signed types are arithmetic; shifts by a negative amount or by the
/// width or more give what sign extension alone gives (-1 or 0).
void bitShift(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  std::string direction = ctx.attrString("direction", "");
  if (direction != "LEFT" && direction != "RIGHT") ctx.fail(fmt::format("direction must be LEFT or RIGHT, got '{}'", direction));
  bool left = direction == "LEFT";
  dispatchInteger(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int width = 8 * sizeof(T);
    ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, b.dims, a.dtype(), [&](T x, T y) {
      bool outOfRange = false;
      if constexpr (std::is_signed_v<T>) outOfRange = y < 0;
      if (outOfRange || static_cast<uint64_t>(y) >= width) return (!left && x < T(0)) ? T(-1) : T(0);
      using U = std::make_unsigned_t<T>;
      if (left) return static_cast<T>(static_cast<U>(static_cast<U>(x) << y));
      return static_cast<T>(x >> y);  // arithmetic for signed T (C++20)
    }));
  });
}

// ---------------------------------------------------------------------------------------------
// Unary math and activations

double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

template <double (*F)(double)>
void floatKernel(KernelContext& ctx) {
  mapFloat(ctx, F);
}

double fAcos(double x) { return std::acos(x); }
double fAcosh(double x) { return std::acosh(x); }
double fAsin(double x) { return std::asin(x); }
double fAsinh(double x) { return std::asinh(x); }
double fAtan(double x) { return std::atan(x); }
double fAtanh(double x) { return std::atanh(x); }
double fCos(double x) { return std::cos(x); }
double fCosh(double x) { return std::cosh(x); }
double fSin(double x) { return std::sin(x); }
double fSinh(double x) { return std::sinh(x); }
double fTan(double x) { return std::tan(x); }
double fTanh(double x) { return std::tanh(x); }
double fExp(double x) { return std::exp(x); }
double fLog(double x) { return std::log(x); }
double fSqrt(double x) { return std::sqrt(x); }
double fErf(double x) { return std::erf(x); }
double fCeil(double x) { return std::ceil(x); }
double fFloor(double x) { return std::floor(x); }
double fRound(double x) { return std::nearbyint(x); }  // half to even in the default rounding mode
double fReciprocal(double x) { return 1 / x; }
double fSigmoid(double x) { return sigmoid(x); }
double fSoftplus(double x) { return softplus(x); }
double fSoftsign(double x) { return x / (1 + std::fabs(x)); }
double fMish(double x) { return x * std::tanh(softplus(x)); }
double fHardSwish(double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }

void absKernel(KernelContext& ctx) {
  mapNumeric(ctx, [](double x) { return std::fabs(x); }, [](auto x) {
    using T = decltype(x);
    if constexpr (std::is_signed_v<T>) return x < 0 ? static_cast<T>(0 - static_cast<uint64_t>(x)) : x;
    else return x;
  });
}

void negKernel(KernelContext& ctx) {
  mapNumeric(ctx, [](double x) { return -x; }, [](auto x) {
    using T = decltype(x);
    return static_cast<T>(0 - static_cast<uint64_t>(x));
  });
}

void signKernel(KernelContext& ctx) {
  mapNumeric(ctx, [](double x) { return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }, [](auto x) {
    using T = decltype(x);
    return static_cast<T>(x > T(0) ? 1 : x < T(0) ? -1 : 0);
  });
}

void relu(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) {
      if constexpr (isFloatLike<T>) {
        float v = float(px[i]);
        po[i] = T(v > 0 || std::isnan(v) ? v : 0.0f);
      } else {
        po[i] = px[i] > T(0) ? px[i] : T(0);
      }
    }
    ctx.setOutput(0, std::move(out));
  });
}

void elu(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 1.0f);
  mapFloat(ctx, [&](double x) { return x < 0 ? alpha * std::expm1(x) : x; });
}

void celu(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 1.0f);
  mapFloat(ctx, [&](double x) { return std::max(0.0, x) + std::min(0.0, alpha * std::expm1(x / alpha)); });
}

void selu(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 1.67326319217681884765625f);
  double gamma = ctx.attrFloat("gamma", 1.05070102214813232421875f);
  mapFloat(ctx, [&](double x) { return gamma * (x > 0 ? x : alpha * std::exp(x) - alpha); });
}

void leakyRelu(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 0.01f);
  mapFloat(ctx, [&](double x) { return x < 0 ? alpha * x : x; });
}

void thresholdedRelu(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 1.0f);
  mapFloat(ctx, [&](double x) { return x > alpha ? x : 0.0; });
}

void hardSigmoid(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 0.2f);
  double beta = ctx.attrFloat("beta", 0.5f);
  mapFloat(ctx, [&](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); });
}

void swish(KernelContext& ctx) {
  double alpha = ctx.attrFloat("alpha", 1.0f);
  mapFloat(ctx, [&](double x) { return x * sigmoid(alpha * x); });
}

void gelu(KernelContext& ctx) {
  std::string approximate = ctx.attrString("approximate", "none");
  if (approximate == "tanh") {
    const double k = std::sqrt(2 / M_PI);
    mapFloat(ctx, [&](double x) { return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))); });
  } else if (approximate == "none") {
    mapFloat(ctx, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  } else {
    ctx.fail(fmt::format("approximate must be 'none' or 'tanh', got '{}'", approximate));
  }
}

/// Shrink accepts every numeric type; the result is computed in double and converted back.
void shrink(KernelContext& ctx) {
  double lambd = ctx.attrFloat("lambd", 0.5f);
  double bias = ctx.attrFloat("bias", 0.0f);
  const TensorData& x = ctx.tensor(0);
  if (x.dtype() == DType::Bool || !(dtypeIsFloat(x.dtype()) || dtypeIsInteger(x.dtype())))
    ctx.fail(fmt::format("unsupported element type {}", dtypeName(x.dtype())));
  Tensor out = makeTensor(x.dtype(), x.dims);
  for (int64_t i = 0, n = numel(x); i < n; ++i) {
    double v = loadDouble(x, i);
    double r = v < -lambd ? v + bias : v > lambd ? v - bias : 0.0;
    storeElement(out, i, Scalar::ofFloat(r));
  }
  ctx.setOutput(0, std::move(out));
}

/// PRelu: slope broadcasts to X (unidirectionally from opset 7; same shape or one element before).
void prelu(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& slope = ctx.tensor(1);
  if (x.dtype() != slope.dtype()) ctx.fail("X and slope must have the same element type");
  std::vector<int64_t> slopeDims = slope.dims;
  // Opset 1..6 allowed a 1-D slope of X's channel count for (N, C, ...) inputs.
  if (ctx.opsetVersion() < 7 && slope.dims.size() == 1 && x.dims.size() > 2 && slope.dims[0] == x.dims[1] &&
      slope.dims[0] != x.dims.back()) {
    slopeDims.assign(x.dims.size() - 1, 1);
    slopeDims[0] = slope.dims[0];
  }
  dispatchArith(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = binaryMap<T, T>(ctx, x, slope, slopeDims, x.dtype(), [](T v, T s) {
      if constexpr (isFloatLike<T>) return calc(v) < 0 ? T(calc(s) * calc(v)) : v;
      else return v < T(0) ? arith<Arith::Mul, T>(s, v) : v;
    });
    if (out.dims != x.dims) ctx.fail("slope must broadcast to the shape of X");
    ctx.setOutput(0, std::move(out));
  });
}

void isNan(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (!dtypeIsFloat(x.dtype())) ctx.fail(fmt::format("unsupported element type {}", dtypeName(x.dtype())));
  Tensor out = makeTensor(DType::Bool, x.dims);
  bool* po = mutableData<bool>(out);
  for (int64_t i = 0, n = numel(x); i < n; ++i) po[i] = std::isnan(loadDouble(x, i));
  ctx.setOutput(0, std::move(out));
}

void isInf(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (!dtypeIsFloat(x.dtype())) ctx.fail(fmt::format("unsupported element type {}", dtypeName(x.dtype())));
  bool negative = ctx.attrInt("detect_negative", 1) != 0;
  bool positive = ctx.attrInt("detect_positive", 1) != 0;
  Tensor out = makeTensor(DType::Bool, x.dims);
  bool* po = mutableData<bool>(out);
  for (int64_t i = 0, n = numel(x); i < n; ++i) {
    double v = loadDouble(x, i);
    po[i] = std::isinf(v) && (v > 0 ? positive : negative);
  }
  ctx.setOutput(0, std::move(out));
}

/// SwiGLU: Swish_alpha(A) * B.
void swiglu(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != b.dtype()) ctx.fail("A and B must have the same element type");
  if (a.dims != b.dims) ctx.fail("A and B must have the same shape");
  double alpha = ctx.attrFloat("alpha", 1.0f);
  dispatchFloat(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, b.dims, a.dtype(), [&](T x, T y) {
      double g = calc(x);
      return fromDouble<T>(g * sigmoid(alpha * g) * static_cast<double>(calc(y)));
    }));
  });
}

// ---------------------------------------------------------------------------------------------
// Variadic ops, Clip, Where

enum class Fold { Max, Min, Sum, Mean };

template <Fold op, typename T>
T foldStep(T acc, T v) {
  if constexpr (isFloatLike<T>) {
    CalcT<T> a = calc(acc), b = calc(v);
    if constexpr (op == Fold::Sum || op == Fold::Mean) return T(a + b);
    if (std::isnan(a) || std::isnan(b)) return T(std::numeric_limits<CalcT<T>>::quiet_NaN());  // NaN propagates
    if constexpr (op == Fold::Max) return T(std::max(a, b));
    if constexpr (op == Fold::Min) return T(std::min(a, b));
  } else {
    if constexpr (op == Fold::Sum || op == Fold::Mean) return arith<Arith::Add, T>(acc, v);
    if constexpr (op == Fold::Max) return std::max(acc, v);
    if constexpr (op == Fold::Min) return std::min(acc, v);
  }
}

/// Max/Min/Sum/Mean over all inputs with numpy broadcasting, folded left to right in T.
template <Fold op>
void foldKernel(KernelContext& ctx) {
  size_t n = ctx.numInputs();
  if (n == 0) ctx.fail("expects at least one input");
  std::vector<std::vector<int64_t>> shapes;
  for (size_t k = 0; k < n; ++k) {
    shapes.push_back(ctx.tensor(k).dims);
    if (ctx.tensor(k).dtype() != ctx.tensor(0).dtype()) ctx.fail("inputs must have the same element type");
  }
  std::vector<int64_t> dims = broadcastShapes(ctx, shapes);
  DType dtype = ctx.tensor(0).dtype();
  dispatchArith(ctx, dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (op == Fold::Mean && !isFloatLike<T>) {
      ctx.fail("Mean takes float inputs");
    } else {
      Tensor out = makeTensor(dtype, dims);
      T* po = mutableData<T>(out);
      int64_t count = numel(dims);
      for (size_t k = 0; k < n; ++k) {
        const TensorData& in = ctx.tensor(k);
        Broadcaster bc(dims, in.dims);
        const T* pi = data<T>(in);
        for (int64_t i = 0; i < count; ++i) po[i] = k == 0 ? pi[bc.offset(i)] : foldStep<op, T>(po[i], pi[bc.offset(i)]);
      }
      if constexpr (op == Fold::Mean)
        for (int64_t i = 0; i < count; ++i) po[i] = T(calc(po[i]) / static_cast<CalcT<T>>(n));
      ctx.setOutput(0, std::move(out));
    }
  });
}

/// Clip: bounds from attributes min/max (opset < 11) or optional scalar inputs 1 and 2. Like
/// numpy's clip, NaN stays NaN and min > max gives max everywhere.
template <bool boundsAsAttributes>
void clip(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  dispatchArith(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = CalcT<T>;
    C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if constexpr (boundsAsAttributes) {
      lo = static_cast<C>(ctx.attrFloat("min", std::numeric_limits<float>::lowest()));
      hi = static_cast<C>(ctx.attrFloat("max", std::numeric_limits<float>::max()));
      if constexpr (isFloatLike<T>) {  // the defaults are +-FLT_MAX: no bound at all for doubles
        if (!ctx.hasAttr("min")) lo = -std::numeric_limits<C>::infinity();
        if (!ctx.hasAttr("max")) hi = std::numeric_limits<C>::infinity();
      }
    } else {
      auto bound = [&](size_t i, C& b) {
        if (!ctx.hasInput(i)) return;
        const TensorData& t = ctx.tensor(i);
        if (t.dtype() != x.dtype()) ctx.fail(fmt::format("input {} must have the element type of the input", i));
        if (numel(t) != 1) ctx.fail(fmt::format("input {} must be a scalar", i));
        b = calc(data<T>(t)[0]);
      };
      bound(1, lo);
      bound(2, hi);
    }
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) {
      C v = calc(px[i]);
      if (v < lo) v = lo;
      if (v > hi) v = hi;
      po[i] = T(v);
    }
    ctx.setOutput(0, std::move(out));
  });
}

/// Where: any element type (strings and sub-byte types too), three-way broadcasting.
void where(KernelContext& ctx) {
  const TensorData& cond = ctx.tensor(0);
  const TensorData& x = ctx.tensor(1);
  const TensorData& y = ctx.tensor(2);
  if (cond.dtype() != DType::Bool) ctx.fail("condition must be bool");
  if (x.dtype() != y.dtype()) ctx.fail("X and Y must have the same element type");
  std::vector<int64_t> dims = broadcastShapes(ctx, {cond.dims, x.dims, y.dims});
  Tensor out = makeTensor(x.dtype(), dims);
  Broadcaster bc(dims, cond.dims), bx(dims, x.dims), by(dims, y.dims);
  const uint8_t* pc = data<uint8_t>(cond);
  int bits = dtypeBits(x.dtype());
  for (int64_t i = 0, n = numel(dims); i < n; ++i) {
    bool pick = pc[bc.offset(i)] != 0;
    const TensorData& src = pick ? x : y;
    int64_t j = pick ? bx.offset(i) : by.offset(i);
    if (x.dtype() == DType::String) {
      out.strings[static_cast<size_t>(i)] = src.strings[static_cast<size_t>(j)];
    } else if (bits < 8) {
      storePacked(out.raw.mutableData(), i, bits, loadPacked(src.raw.data(), j, bits));
    } else {
      size_t w = static_cast<size_t>(bits / 8);
      std::memcpy(out.raw.mutableData() + static_cast<size_t>(i) * w, src.raw.data() + static_cast<size_t>(j) * w, w);
    }
  }
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Cast, CastLike, BitCast

/// Shortest decimal digits (no dot, no trailing zeros) and decimal exponent of the first digit
/// that read back to the same value of type t. Precondition: v finite and nonzero.
void shortestDigits(double v, DType t, std::string& digits, int& exponent) {
  char buf[64];
  auto split = [&](std::string_view s) {
    size_t e = s.find('e');
    digits.clear();
    for (char c : s.substr(0, e))
      if (c != '.' && c != '-') digits += c;
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    exponent = std::atoi(std::string(s.substr(e + 1)).c_str());
  };
  if (t == DType::Double || t == DType::Float) {
    auto r = t == DType::Double ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific)
                                : std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), std::chars_format::scientific);
    split(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
    return;
  }
  for (int precision = 0; precision < 17; ++precision) {
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, precision);
    std::string s(buf, static_cast<size_t>(r.ptr - buf));
    double back = std::strtod(s.c_str(), nullptr);
    bool same = t == DType::Float8E8M0 ? back == v : encodeNarrowFloat(t, back, true) == encodeNarrowFloat(t, v, true);
    if (same) {
      split(s);
      return;
    }
  }
  split(fmt::format("{:.16e}", v));
}

/// A float as numpy's astype(str) writes it: shortest round-trip digits, positional notation
/// for magnitudes in [1e-4, 10^P) (P = 16 for double, 3 for float16, 6 otherwise) with ".0" for
/// integral values, scientific ("1.5e-07") outside; "nan", "inf", "-inf".
std::string formatFloat(double v, DType t) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string sign = std::signbit(v) ? "-" : "";
  if (v == 0) return sign + "0.0";
  std::string d;
  int x = 0;
  shortestDigits(std::fabs(v), t, d, x);
  // numpy decides on the value, not its digits: float32(1e-4) is below 1e-4 and prints "1e-04"
  int cutoff = t == DType::Double ? 16 : t == DType::Float16 ? 3 : 6;
  if (std::fabs(v) < 1e-4 || std::fabs(v) >= std::pow(10.0, cutoff)) {
    std::string m = d.substr(0, 1) + (d.size() > 1 ? "." + d.substr(1) : "");
    return sign + m + fmt::format("e{}{:02d}", x < 0 ? '-' : '+', std::abs(x));
  }
  if (x < 0) return sign + "0." + std::string(static_cast<size_t>(-x - 1), '0') + d;
  auto intDigits = static_cast<size_t>(x + 1);
  if (d.size() <= intDigits) return sign + d + std::string(intDigits - d.size(), '0') + ".0";
  return sign + d.substr(0, intDigits) + "." + d.substr(intDigits);
}

std::string formatElement(const TensorData& t, int64_t i) {
  if (t.dtype() == DType::Bool) return data<uint8_t>(t)[i] ? "True" : "False";
  Scalar s = loadElement(t, i);
  switch (s.kind) {
    case Scalar::Kind::Int: return std::to_string(s.i);
    case Scalar::Kind::UInt: return std::to_string(s.u);
    case Scalar::Kind::Float: return formatFloat(s.f, t.dtype());
  }
  return {};
}

std::string lowerAscii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// A string's number: integers exactly when the whole string is one and the target is an
/// integer type, otherwise strtod's reading ("1e-5", "INF", "-inf", "NaN" in any case). Bool
/// targets also accept "true"/"false". Unparsable text gives 0 (the spec leaves it undefined).
Scalar parseElement(const std::string& s, DType to) {
  std::string trimmed = s;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
  size_t start = 0;
  while (start < trimmed.size() && std::isspace(static_cast<unsigned char>(trimmed[start]))) ++start;
  trimmed = trimmed.substr(start);
  if (to == DType::Bool) {
    std::string l = lowerAscii(trimmed);
    if (l == "true") return Scalar::ofInt(1);
    if (l == "false") return Scalar::ofInt(0);
  }
  if (dtypeIsInteger(to) || to == DType::Bool) {
    const char* b = trimmed.data();
    const char* e = b + trimmed.size();
    if (!trimmed.empty() && *b == '+') ++b;
    int64_t iv;
    auto r = std::from_chars(b, e, iv);
    if (r.ec == std::errc() && r.ptr == e) return Scalar::ofInt(iv);
    uint64_t uv;
    r = std::from_chars(b, e, uv);
    if (r.ec == std::errc() && r.ptr == e) return Scalar::ofUInt(uv);
  }
  return Scalar::ofFloat(std::strtod(trimmed.c_str(), nullptr));
}

/// Cast x to `to` with Cast's rules (see float_formats.h).
Tensor castTensor(const KernelContext& ctx, const TensorData& x, DType to, const ConvertOptions& o) {
  if (!isValidDType(static_cast<int32_t>(to)) || to == DType::Complex64 || to == DType::Complex128)
    ctx.fail(fmt::format("cannot cast to {}", dtypeName(to)));
  if (x.dtype() == to) return reshaped(x, x.dims);
  Tensor out = makeTensor(to, x.dims);
  int64_t n = numel(x);
  if (x.dtype() == DType::String) {
    for (int64_t i = 0; i < n; ++i) {
      const std::string& s = x.strings[static_cast<size_t>(i)];
      storeElement(out, i, parseElement(s, to), o);
    }
  } else if (to == DType::String) {
    for (int64_t i = 0; i < n; ++i) out.strings[static_cast<size_t>(i)] = formatElement(x, i);
  } else {
    for (int64_t i = 0; i < n; ++i) storeElement(out, i, loadElement(x, i), o);
  }
  return out;
}

/// Cast's conversion options at schema version `since`: saturate from 19, round_mode from 24,
/// and before 24 a saturating cast of +-inf to a FNUZ type gives NaN.
ConvertOptions castOptions(const KernelContext& ctx, int since) {
  ConvertOptions o;
  if (since >= 19) o.saturate = ctx.attrInt("saturate", 1) != 0;
  o.fnuzInfIsNan = since < 24;
  if (since >= 24) {
    std::string mode = ctx.attrString("round_mode", "up");
    auto r = parseE8M0Rounding(mode);
    if (!r) ctx.fail(fmt::format("round_mode must be 'up', 'down' or 'nearest', got '{}'", mode));
    o.e8m0Rounding = *r;
  }
  return o;
}

/// The `to` attribute: an int (TensorProto.DataType), or in Cast-1 a type name string.
DType castTarget(const KernelContext& ctx) {
  const Attribute* a = ctx.attr("to");
  if (!a) ctx.fail("attribute 'to' is required");
  if (a->type == AttrType::String) {
    auto t = dtypeFromName(a->s);
    if (!t) ctx.fail(fmt::format("attribute 'to' names no known type: '{}'", a->s));
    return *t;
  }
  return static_cast<DType>(ctx.attrInt("to", 0));
}

template <int since>
void cast(KernelContext& ctx) {
  ctx.setOutput(0, castTensor(ctx, ctx.tensor(0), castTarget(ctx), castOptions(ctx, since)));
}

template <int since>
void castLike(KernelContext& ctx) {
  ctx.setOutput(0, castTensor(ctx, ctx.tensor(0), ctx.tensor(1).dtype(), castOptions(ctx, since)));
}

/// BitCast: the same bytes read as another type of the same width.
void bitCast(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto to = static_cast<DType>(ctx.attrInt("to", 0));
  if (!isValidDType(static_cast<int32_t>(to)) || to == DType::String || x.dtype() == DType::String)
    ctx.fail(fmt::format("cannot bitcast {} to {}", dtypeName(x.dtype()), dtypeName(to)));
  if (dtypeBits(to) != dtypeBits(x.dtype()))
    ctx.fail(fmt::format("cannot bitcast {} to {}: the widths differ ({} vs {} bits)", dtypeName(x.dtype()),
                         dtypeName(to), dtypeBits(x.dtype()), dtypeBits(to)));
  Tensor out = reshaped(x, x.dims);
  out.dataType = static_cast<int32_t>(to);
  if (to == DType::Bool) {  // our bool elements are 0/1 bytes (C++ bool): normalise rather than carry 2..255
    Tensor fixed = makeTensor(DType::Bool, x.dims);
    for (int64_t i = 0, n = numel(x); i < n; ++i) mutableData<uint8_t>(fixed)[i] = data<uint8_t>(x)[i] != 0;
    out = std::move(fixed);
  }
  ctx.setOutput(0, std::move(out));
}

}  // namespace

// quantize.cpp's family; registered from here because kernel_util.cpp's list of families is
// shared code this family does not own.
void registerQuantizeOps();

void registerElementwise() {
  registerQuantizeOps();
  // Binary arithmetic: opset 1 and 6 broadcast only through attributes broadcast/axis.
  addRef("", "Add", 1, "ref.add", arithKernel<Arith::Add, true>);
  addRef("", "Add", 7, "ref.add", arithKernel<Arith::Add, false>);
  addRef("", "Sub", 1, "ref.sub", arithKernel<Arith::Sub, true>);
  addRef("", "Sub", 7, "ref.sub", arithKernel<Arith::Sub, false>);
  addRef("", "Mul", 1, "ref.mul", arithKernel<Arith::Mul, true>);
  addRef("", "Mul", 7, "ref.mul", arithKernel<Arith::Mul, false>);
  addRef("", "Div", 1, "ref.div", arithKernel<Arith::Div, true>);
  addRef("", "Div", 7, "ref.div", arithKernel<Arith::Div, false>);
  addRef("", "Pow", 1, "ref.pow", pow<true>);
  addRef("", "Pow", 7, "ref.pow", pow<false>);
  addRef("", "Mod", 10, "ref.mod", mod);

  addRef("", "Equal", 1, "ref.equal", compareKernel<Cmp::Equal, true>);
  addRef("", "Equal", 7, "ref.equal", compareKernel<Cmp::Equal, false>);
  addRef("", "Greater", 1, "ref.greater", compareKernel<Cmp::Greater, true>);
  addRef("", "Greater", 7, "ref.greater", compareKernel<Cmp::Greater, false>);
  addRef("", "Less", 1, "ref.less", compareKernel<Cmp::Less, true>);
  addRef("", "Less", 7, "ref.less", compareKernel<Cmp::Less, false>);
  addRef("", "GreaterOrEqual", 12, "ref.greater_or_equal", compareKernel<Cmp::GreaterOrEqual, false>);
  addRef("", "LessOrEqual", 12, "ref.less_or_equal", compareKernel<Cmp::LessOrEqual, false>);

  addRef("", "And", 1, "ref.and", logicKernel<Logic::And, true>);
  addRef("", "And", 7, "ref.and", logicKernel<Logic::And, false>);
  addRef("", "Or", 1, "ref.or", logicKernel<Logic::Or, true>);
  addRef("", "Or", 7, "ref.or", logicKernel<Logic::Or, false>);
  addRef("", "Xor", 1, "ref.xor", logicKernel<Logic::Xor, true>);
  addRef("", "Xor", 7, "ref.xor", logicKernel<Logic::Xor, false>);
  addRef("", "Not", 1, "ref.not", notKernel);
  addRef("", "BitwiseAnd", 18, "ref.bitwise_and", bitwiseKernel<Logic::And>);
  addRef("", "BitwiseOr", 18, "ref.bitwise_or", bitwiseKernel<Logic::Or>);
  addRef("", "BitwiseXor", 18, "ref.bitwise_xor", bitwiseKernel<Logic::Xor>);
  addRef("", "BitwiseNot", 18, "ref.bitwise_not", bitwiseNot);
  addRef("", "BitShift", 11, "ref.bit_shift", bitShift);

  addRef("", "Abs", 1, "ref.abs", absKernel);
  addRef("", "Neg", 1, "ref.neg", negKernel);
  addRef("", "Sign", 9, "ref.sign", signKernel);
  addRef("", "Acos", 7, "ref.acos", floatKernel<fAcos>);
  addRef("", "Acosh", 9, "ref.acosh", floatKernel<fAcosh>);
  addRef("", "Asin", 7, "ref.asin", floatKernel<fAsin>);
  addRef("", "Asinh", 9, "ref.asinh", floatKernel<fAsinh>);
  addRef("", "Atan", 7, "ref.atan", floatKernel<fAtan>);
  addRef("", "Atanh", 9, "ref.atanh", floatKernel<fAtanh>);
  addRef("", "Cos", 7, "ref.cos", floatKernel<fCos>);
  addRef("", "Cosh", 9, "ref.cosh", floatKernel<fCosh>);
  addRef("", "Sin", 7, "ref.sin", floatKernel<fSin>);
  addRef("", "Sinh", 9, "ref.sinh", floatKernel<fSinh>);
  addRef("", "Tan", 7, "ref.tan", floatKernel<fTan>);
  addRef("", "Tanh", 1, "ref.tanh", floatKernel<fTanh>);
  addRef("", "Exp", 1, "ref.exp", floatKernel<fExp>);
  addRef("", "Log", 1, "ref.log", floatKernel<fLog>);
  addRef("", "Sqrt", 1, "ref.sqrt", floatKernel<fSqrt>);
  addRef("", "Erf", 9, "ref.erf", floatKernel<fErf>);
  addRef("", "Ceil", 1, "ref.ceil", floatKernel<fCeil>);
  addRef("", "Floor", 1, "ref.floor", floatKernel<fFloor>);
  addRef("", "Round", 11, "ref.round", floatKernel<fRound>);
  addRef("", "Reciprocal", 1, "ref.reciprocal", floatKernel<fReciprocal>);
  addRef("", "Sigmoid", 1, "ref.sigmoid", floatKernel<fSigmoid>);
  addRef("", "Softplus", 1, "ref.softplus", floatKernel<fSoftplus>);
  addRef("", "Softsign", 1, "ref.softsign", floatKernel<fSoftsign>);
  addRef("", "Mish", 18, "ref.mish", floatKernel<fMish>);
  addRef("", "HardSwish", 14, "ref.hard_swish", floatKernel<fHardSwish>);
  addRef("", "IsNaN", 9, "ref.is_nan", isNan);
  addRef("", "IsInf", 10, "ref.is_inf", isInf);

  addRef("", "Relu", 1, "ref.relu", relu);
  addRef("", "Elu", 1, "ref.elu", elu);
  addRef("", "Celu", 12, "ref.celu", celu);
  addRef("", "Selu", 1, "ref.selu", selu);
  addRef("", "LeakyRelu", 1, "ref.leaky_relu", leakyRelu);
  addRef("", "ThresholdedRelu", 10, "ref.thresholded_relu", thresholdedRelu);
  addRef("", "HardSigmoid", 1, "ref.hard_sigmoid", hardSigmoid);
  addRef("", "PRelu", 1, "ref.prelu", prelu);
  addRef("", "Shrink", 9, "ref.shrink", shrink);
  addRef("", "Gelu", 20, "ref.gelu", gelu);
  addRef("", "Swish", 24, "ref.swish", swish);
  addRef("", "SwiGLU", 28, "ref.swiglu", swiglu);

  addRef("", "Max", 1, "ref.max", foldKernel<Fold::Max>);
  addRef("", "Min", 1, "ref.min", foldKernel<Fold::Min>);
  addRef("", "Sum", 1, "ref.sum", foldKernel<Fold::Sum>);
  addRef("", "Mean", 1, "ref.mean", foldKernel<Fold::Mean>);
  addRef("", "Clip", 1, "ref.clip", clip<true>);
  addRef("", "Clip", 11, "ref.clip", clip<false>);
  addRef("", "Where", 9, "ref.where", where);

  addRef("", "Cast", 1, "ref.cast", cast<1>);
  addRef("", "Cast", 19, "ref.cast", cast<19>);
  addRef("", "Cast", 24, "ref.cast", cast<24>);
  addRef("", "CastLike", 15, "ref.cast_like", castLike<15>);
  addRef("", "CastLike", 19, "ref.cast_like", castLike<19>);
  addRef("", "CastLike", 24, "ref.cast_like", castLike<24>);
  addRef("", "BitCast", 26, "ref.bit_cast", bitCast);
}

}  // namespace onnxtool::ref
