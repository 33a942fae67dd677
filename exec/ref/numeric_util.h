// numeric_util.h: conversions between tensor elements and double that several reference kernel
// families share (nn.cpp, reduce.cpp, conv_rnn.cpp, image.cpp): float kernels compute in double
// and round once into the output type. Internal to exec/ref.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Converts a double into T: floats round to nearest, integers truncate (NaN -> 0, saturating
/// outside the range rather than invoking undefined behaviour), bool is "non-zero".
template <typename T>
T castTo(double d) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(d));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(d);
  } else if constexpr (std::is_same_v<T, bool>) {
    return d != 0;
  } else {
    if (std::isnan(d)) return T(0);
    if (d <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (d >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(d);
  }
}

/// Converts a double into T the way numpy's round-then-clip cast does: floats round to nearest,
/// integers round half to even and saturate (NaN -> 0), bool is "non-zero".
template <typename T>
T castRounded(double d) {
  if constexpr (std::is_same_v<T, bool>) {
    return d != 0;
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(d));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(d);
  } else {
    double r = std::nearbyint(d);
    if (std::isnan(r)) r = 0;
    // doubles just below 2^63/2^64 round up to them: saturate explicitly
    if (r >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (r <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    return static_cast<T>(r);
  }
}

/// All elements of a numeric tensor as doubles.
inline std::vector<double> toDoubles(const KernelContext& ctx, const TensorData& t) {
  std::vector<double> v(static_cast<size_t>(numel(t)));
  dispatchNumeric(ctx, t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data<T>(t);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
  });
  return v;
}

/// All elements of an integer tensor as int64 (exact, unlike toDoubles for big values).
inline std::vector<int64_t> toInts(const KernelContext& ctx, const TensorData& t) {
  std::vector<int64_t> v(static_cast<size_t>(numel(t)));
  dispatchNumeric(ctx, t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (isFloatLike<T>) {
      ctx.fail(fmt::format("expected an integer tensor, got {}", dtypeName(t.dtype())));
    } else {
      const T* p = data<T>(t);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(p[i]);
    }
  });
  return v;
}

/// A tensor of `dt` and `dims` holding `v` converted by castTo (integers truncate).
inline Tensor fromDoubles(const KernelContext& ctx, DType dt, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor out = makeTensor(dt, std::move(dims));
  dispatchNumeric(ctx, dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = mutableData<T>(out);
    for (size_t i = 0; i < v.size(); ++i) p[i] = castTo<T>(v[i]);
  });
  return out;
}

/// A tensor of `dt` and `dims` holding `v` converted by castRounded (integers round half to
/// even and saturate).
inline Tensor fromDoublesRounded(const KernelContext& ctx, DType dt, std::vector<int64_t> dims,
                                 const std::vector<double>& v) {
  Tensor out = makeTensor(dt, std::move(dims));
  dispatchNumeric(ctx, dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = mutableData<T>(out);
    for (size_t i = 0; i < v.size(); ++i) p[i] = castRounded<T>(v[i]);
  });
  return out;
}

/// `x` rounded to the precision of `dt` (used where the spec's computation happens in that type).
inline double roundTo(DType dt, double x) {
  switch (dt) {
    case DType::Float: return static_cast<float>(x);
    case DType::Float16: return static_cast<float>(Float16(static_cast<float>(x)));
    case DType::BFloat16: return static_cast<float>(BFloat16(static_cast<float>(x)));
    default: return x;
  }
}

/// Whether `t` is one of float, double, float16, bfloat16.
inline bool isFloatType(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16;
}

/// Row-major multi-index of `flat` in `dims` (zero dims give index 0).
inline void unravel(int64_t flat, const std::vector<int64_t>& dims, std::vector<int64_t>& idx) {
  idx.resize(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    idx[i] = dims[i] ? flat % dims[i] : 0;
    flat = dims[i] ? flat / dims[i] : 0;
  }
}

}  // namespace onnxtool::ref
