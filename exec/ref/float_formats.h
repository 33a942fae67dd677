// float_formats.h: exact conversions between double and the element types narrower than float
// (float16, bfloat16, float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz/e8m0, float4e2m1, float6e2m3/e3m2),
// sub-byte packing (int4/uint4/int2/uint2/float4/float6), and element access by dtype, which is
// what Cast, CastLike, QuantizeLinear and DequantizeLinear are built on.
//
// Rounding is to nearest even everywhere except E8M0, whose round_mode is explicit. Behaviour out
// of range follows ONNX Cast's tables, and where the spec leaves a choice, the onnx reference (which
// delegates to ml_dtypes) so that the backend test data match bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "lib/tensor.h"

namespace onnxtool::ref {

/// True for the float types encodeNarrowFloat handles: Float16, BFloat16, the four float8 types
/// with a mantissa, Float4E2M1, Float6E2M3 and Float6E3M2 (not E8M0, which has its own rules).
bool isNarrowFloat(DType t);

/// True for Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ: the types Cast's `saturate`
/// attribute applies to.
bool isSaturableFloat8(DType t);

/// The exact value of the encoding `bits` of a narrow float type or Float8E8M0 (NaN for NaN codes).
/// Precondition: isNarrowFloat(t) or t == Float8E8M0.
double decodeNarrowFloat(DType t, uint32_t bits);

/// Encodes x in narrow float type t, rounding to nearest even. When the rounded magnitude exceeds
/// the largest finite value (or x is infinite): with `saturate` the result is +-max, without it
/// +-inf where t has infinities and NaN where it has not. Float16 and BFloat16 callers pass
/// saturate=false (IEEE behaviour); float4/float6 have neither inf nor NaN and always saturate.
/// `fnuzInfIsNan` gives Cast 19..23's rule that a saturating cast of +-inf to a FNUZ type is NaN.
/// FNUZ types have no negative zero: -0 and negative values that round to zero encode as +0.
/// Precondition: isNarrowFloat(t).
uint32_t encodeNarrowFloat(DType t, double x, bool saturate, bool fnuzInfIsNan = false);

/// How Cast rounds to Float8E8M0 (attribute round_mode: "up", "down", "nearest").
enum class E8M0Rounding { Up, Down, Nearest };
std::optional<E8M0Rounding> parseE8M0Rounding(std::string_view s);

/// Encodes x (a float32 value; its sign is ignored) as Float8E8M0, a power of two 2^(e-127): the
/// exponent of x rounded by `mode`; NaN and inf give 0xFF; with `saturate`, rounding never goes past
/// 2^127 (0xFE), without it the exponent may carry into the NaN code 0xFF.
uint8_t encodeE8M0(float x, bool saturate, E8M0Rounding mode);

/// Element i of a packed array of `bits`-wide elements (2, 4 or 6), stored little-endian with the
/// first element in the lowest bits.
uint32_t loadPacked(const uint8_t* bytes, int64_t i, int bits);
/// Stores the low `bits` of v as element i of a packed array (other elements untouched).
void storePacked(uint8_t* bytes, int64_t i, int bits, uint32_t v);

/// One element of any non-string type, kept exactly: integers and bool as int64 or uint64,
/// floats as double (every supported float value is a double).
struct Scalar {
  enum class Kind : uint8_t { Int, UInt, Float } kind = Kind::Int;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;

  static Scalar ofInt(int64_t v) { return {Kind::Int, v, 0, 0}; }
  static Scalar ofUInt(uint64_t v) { return {Kind::UInt, 0, v, 0}; }
  static Scalar ofFloat(double v) { return {Kind::Float, 0, 0, v}; }
  /// The value as a double (large 64-bit integers round to nearest).
  double toDouble() const;
};

/// How storeElement converts a value to the destination type: Cast's `saturate` (float8 types)
/// and `round_mode` (E8M0), and whether +-inf saturates to NaN for FNUZ types (Cast 19..23).
struct ConvertOptions {
  bool saturate = true;
  E8M0Rounding e8m0Rounding = E8M0Rounding::Up;
  bool fnuzInfIsNan = false;
};

/// Element i of t as a Scalar. Precondition: t is not a string tensor and i is in range.
Scalar loadElement(const TensorData& t, int64_t i);
/// Element i of t as a double.
inline double loadDouble(const TensorData& t, int64_t i) { return loadElement(t, i).toDouble(); }

/// Converts v to t's dtype and stores it as element i, with Cast's rules: float -> integer
/// truncates toward zero and then wraps like integer -> integer (two's complement, low bits kept);
/// NaN -> integer gives 0; anything -> bool is "nonzero"; float -> float rounds to nearest even.
/// Precondition: t is not a string tensor and was made by makeTensor (not yet shared).
void storeElement(Tensor& t, int64_t i, const Scalar& v, const ConvertOptions& o = {});

}  // namespace onnxtool::ref
