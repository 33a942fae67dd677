// tensor.cpp: Tensor helpers and half-precision conversions.
#include "lib/tensor.h"

#include <cmath>
#include <cstring>

#include "lib/error.h"

namespace onnxtool {

std::optional<int64_t> TensorData::numElements() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > INT64_MAX / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::optional<uint64_t> TensorData::expectedBytes() const {
  auto n = numElements();
  if (!n) return std::nullopt;
  return dtypeStorageBytes(dtype(), static_cast<uint64_t>(*n));
}

void Tensor::setRaw(Buffer bytes) {
  raw = std::move(bytes);
  strings.clear();
  storage = external ? Storage::External : Storage::Raw;
}

/// " 'name'" for messages (nothing without a name); built only when one is thrown.
static std::string quoted(std::string_view name) { return name.empty() ? std::string() : " '" + std::string(name) + "'"; }

template <typename T>
static T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double TensorData::elementAsDouble(size_t i, std::string_view name) const {
  const uint8_t* p = raw.data();
  switch (dtype()) {
    case DType::Float: return load<float>(p + 4 * i);
    case DType::Double: return load<double>(p + 8 * i);
    case DType::Float16: return halfToFloat(load<uint16_t>(p + 2 * i));
    case DType::BFloat16: return bfloat16ToFloat(load<uint16_t>(p + 2 * i));
    case DType::Int8: return load<int8_t>(p + i);
    case DType::UInt8:
    case DType::Bool: return load<uint8_t>(p + i);
    case DType::Int16: return load<int16_t>(p + 2 * i);
    case DType::UInt16: return load<uint16_t>(p + 2 * i);
    case DType::Int32: return load<int32_t>(p + 4 * i);
    case DType::UInt32: return load<uint32_t>(p + 4 * i);
    case DType::Int64: return static_cast<double>(load<int64_t>(p + 8 * i));
    case DType::UInt64: return static_cast<double>(load<uint64_t>(p + 8 * i));
    default: fail(ErrorKind::Unsupported, "tensor{}: cannot read {} elements as numbers", quoted(name), dtypeName(dtype()));
  }
}

int64_t TensorData::elementAsInt(size_t i, std::string_view name) const {
  const uint8_t* p = raw.data();
  switch (dtype()) {
    case DType::Int64: return load<int64_t>(p + 8 * i);
    case DType::UInt64: return static_cast<int64_t>(load<uint64_t>(p + 8 * i));
    case DType::Int32: return load<int32_t>(p + 4 * i);
    case DType::UInt32: return load<uint32_t>(p + 4 * i);
    default: return static_cast<int64_t>(elementAsDouble(i, name));
  }
}

std::vector<int64_t> TensorData::toInt64s(std::string_view name) const {
  if (!dtypeIsInteger(dtype()) || dtypeBits(dtype()) < 8)
    fail(ErrorKind::InvalidInput, "tensor{}: expected integer data, got {}", quoted(name), dtypeName(dtype()));
  auto n = numElements();
  auto bytes = expectedBytes();
  if (!n || !bytes || raw.size() != *bytes)
    fail(ErrorKind::InvalidInput, "tensor{}: data size does not match its dims", quoted(name));
  std::vector<int64_t> out(static_cast<size_t>(*n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = elementAsInt(i, name);
  return out;
}

Tensor Tensor::fromFloats(std::string name, std::vector<int64_t> dims, const std::vector<float>& v) {
  Tensor t;
  t.name = std::move(name);
  t.dataType = static_cast<int32_t>(DType::Float);
  t.dims = std::move(dims);
  t.setRaw(Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * 4)));
  return t;
}

Tensor Tensor::fromInt64s(std::string name, std::vector<int64_t> dims, const std::vector<int64_t>& v) {
  Tensor t;
  t.name = std::move(name);
  t.dataType = static_cast<int32_t>(DType::Int64);
  t.dims = std::move(dims);
  t.setRaw(Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * 8)));
  return t;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                                // subnormal or zero
    float a;
    std::memcpy(&a, &absx, 4);
    // scale so the subnormal unit is 1, then round to nearest even via the FPU
    float scaled = a * 16777216.0f;  // 2^24
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((absx >> 23) - 127 + 15);
  uint32_t man = absx & 0x7fffffu;
  uint32_t h = exp << 10 | man >> 13;
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bfloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace onnxtool
