// dtype.cpp: the element-type table.
#include "lib/dtype.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace onnxtool {
namespace {

struct DTypeRow {
  std::string_view numpy;
  std::string_view onnx;
  int bits;
  bool isFloat;
  bool isInt;
  bool isSigned;
};

// Indexed by the enum value.
constexpr DTypeRow kRows[] = {
    {"undefined", "UNDEFINED", 0, false, false, false},
    {"float32", "FLOAT", 32, true, false, true},
    {"uint8", "UINT8", 8, false, true, false},
    {"int8", "INT8", 8, false, true, true},
    {"uint16", "UINT16", 16, false, true, false},
    {"int16", "INT16", 16, false, true, true},
    {"int32", "INT32", 32, false, true, true},
    {"int64", "INT64", 64, false, true, true},
    {"string", "STRING", 0, false, false, false},
    {"bool", "BOOL", 8, false, false, false},
    {"float16", "FLOAT16", 16, true, false, true},
    {"float64", "DOUBLE", 64, true, false, true},
    {"uint32", "UINT32", 32, false, true, false},
    {"uint64", "UINT64", 64, false, true, false},
    {"complex64", "COMPLEX64", 64, false, false, true},
    {"complex128", "COMPLEX128", 128, false, false, true},
    {"bfloat16", "BFLOAT16", 16, true, false, true},
    {"float8e4m3fn", "FLOAT8E4M3FN", 8, true, false, true},
    {"float8e4m3fnuz", "FLOAT8E4M3FNUZ", 8, true, false, true},
    {"float8e5m2", "FLOAT8E5M2", 8, true, false, true},
    {"float8e5m2fnuz", "FLOAT8E5M2FNUZ", 8, true, false, true},
    {"uint4", "UINT4", 4, false, true, false},
    {"int4", "INT4", 4, false, true, true},
    {"float4e2m1", "FLOAT4E2M1", 4, true, false, true},
    {"float8e8m0", "FLOAT8E8M0", 8, true, false, false},
    {"uint2", "UINT2", 2, false, true, false},
    {"int2", "INT2", 2, false, true, true},
    {"float6e2m3", "FLOAT6E2M3", 6, true, false, true},
    {"float6e3m2", "FLOAT6E3M2", 6, true, false, true},
};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == kMaxDType + 1, "one row per DType");

const DTypeRow& row(DType t) {
  auto v = static_cast<int32_t>(t);
  return (v >= 0 && v <= kMaxDType) ? kRows[v] : kRows[0];
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

bool isValidDType(int32_t v) { return v >= 1 && v <= kMaxDType; }
std::string_view dtypeName(DType t) { return row(t).numpy; }
std::string_view dtypeOnnxName(DType t) { return row(t).onnx; }
int dtypeBits(DType t) { return row(t).bits; }
bool dtypeIsFloat(DType t) { return row(t).isFloat; }
bool dtypeIsInteger(DType t) { return row(t).isInt; }
bool dtypeIsSigned(DType t) { return row(t).isSigned; }

std::optional<uint64_t> dtypeStorageBytes(DType t, uint64_t n) {
  int bits = dtypeBits(t);
  if (bits == 0) return std::nullopt;
  if (n > UINT64_MAX / static_cast<uint64_t>(bits)) return std::nullopt;
  return (n * static_cast<uint64_t>(bits) + 7) / 8;
}

std::optional<DType> dtypeFromName(std::string_view name) {
  std::string n = lower(name);
  if (n.rfind("tensor(", 0) == 0 && n.size() > 8 && n.back() == ')') n = n.substr(7, n.size() - 8);
  if (n == "float") return DType::Float;
  if (n == "double") return DType::Double;
  for (int32_t v = 1; v <= kMaxDType; ++v) {
    if (n == kRows[v].numpy || n == lower(kRows[v].onnx)) return static_cast<DType>(v);
  }
  return std::nullopt;
}

}  // namespace onnxtool
