// dtype.h: ONNX element types (TensorProto.DataType) and what the toolchain needs to know of each.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace onnxtool {

/// ONNX element type; the numeric values are TensorProto.DataType's.
enum class DType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  UInt2 = 25,
  Int2 = 26,
  Float6E2M3 = 27,
  Float6E3M2 = 28,
};

/// Largest DType value this build knows.
inline constexpr int32_t kMaxDType = 28;

/// True for values 1..kMaxDType (Undefined and unknown enum values are not valid element types).
bool isValidDType(int32_t v);

/// numpy-style name ("float32", "int64", "bfloat16", "float8e4m3fn", "int4", "string", "bool").
/// Undefined and unknown values give "undefined".
std::string_view dtypeName(DType t);

/// The TensorProto.DataType enum name ("FLOAT", "INT64", ...), "UNDEFINED" for unknown values.
std::string_view dtypeOnnxName(DType t);

/// Parses a numpy-style or ONNX enum name (case-insensitive; also "tensor(float)").
std::optional<DType> dtypeFromName(std::string_view name);

/// Bits per element: 2, 4, 6, 8, 16, 32, 64 or 128; 0 for String and Undefined.
int dtypeBits(DType t);

/// Bytes needed to store n elements in raw_data layout (sub-byte types packed, rounded up).
/// Returns nullopt on overflow or for String/Undefined.
std::optional<uint64_t> dtypeStorageBytes(DType t, uint64_t n);

bool dtypeIsFloat(DType t);    ///< any floating type incl. float8/float4/float6, not complex
bool dtypeIsInteger(DType t);  ///< signed or unsigned integer types incl. int2/int4
bool dtypeIsSigned(DType t);   ///< signed integers and floats

}  // namespace onnxtool
