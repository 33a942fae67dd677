// value_ops.cpp: comparison, random tensors and statistics of runtime values.
#include "exec/value_ops.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "lib/error.h"

namespace onnxtool {

const RtTensor& hostTensor(const RtTensor& t, std::string_view what) {
  if (!t.device.isCpu()) fail(ErrorKind::InvalidInput, "{} is on {}; only host tensors can be read here", what, t.device.str());
  return t;
}

Tensor toIrTensor(const RtTensor& t, std::string name) {
  Tensor ir(static_cast<const TensorData&>(hostTensor(t, name.empty() ? std::string("tensor") : "tensor '" + name + "'")));
  ir.name = std::move(name);
  return ir;
}

namespace {

bool isFloatType(DType t) { return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16; }

std::string dimsStr(const std::vector<int64_t>& d) {
  std::string s;
  for (int64_t v : d) s += (s.empty() ? "" : ",") + std::to_string(v);
  return "[" + s + "]";
}

double complexComponent(const TensorData& t, size_t i) {
  if (t.dtype() == DType::Complex128) {
    double v;
    std::memcpy(&v, t.raw.data() + 8 * i, 8);
    return v;
  }
  float v;
  std::memcpy(&v, t.raw.data() + 4 * i, 4);
  return v;
}

void compareTensors(const TensorData& got, const TensorData& want, double rtol, double atol, CompareResult& r) {
  auto mismatch = [&](std::string m) {
    if (r.ok) r.message = std::move(m);
    r.ok = false;
  };
  if (got.dataType != want.dataType)
    return mismatch(fmt::format("dtype {} vs expected {}", dtypeName(got.dtype()), dtypeName(want.dtype())));
  if (got.dims != want.dims) return mismatch(fmt::format("shape {} vs expected {}", dimsStr(got.dims), dimsStr(want.dims)));
  size_t n = static_cast<size_t>(want.numElements().value_or(0));
  if (want.dtype() == DType::String) {
    for (size_t i = 0; i < n; ++i)
      if (got.strings.at(i) != want.strings.at(i))
        return mismatch(fmt::format("element {} is '{}' vs expected '{}'", i, got.strings[i], want.strings[i]));
    return;
  }
  if (got.raw.size() != want.raw.size()) return mismatch(fmt::format("{} bytes vs expected {}", got.raw.size(), want.raw.size()));
  bool complex = want.dtype() == DType::Complex64 || want.dtype() == DType::Complex128;
  if (isFloatType(want.dtype()) || complex) {
    size_t count = complex ? 2 * n : n;
    for (size_t i = 0; i < count; ++i) {
      double a = complex ? complexComponent(got, i) : got.elementAsDouble(i);
      double b = complex ? complexComponent(want, i) : want.elementAsDouble(i);
      if (std::isnan(a) && std::isnan(b)) continue;
      if (std::isinf(a) || std::isinf(b)) {
        if (a != b) mismatch(fmt::format("element {} is {} vs expected {}", i, a, b));
        continue;
      }
      double err = std::fabs(a - b);
      r.maxAbsError = std::max(r.maxAbsError, err);
      if (b != 0) r.maxRelError = std::max(r.maxRelError, err / std::fabs(b));
      if (!(err <= atol + rtol * std::fabs(b)))
        mismatch(fmt::format("element {} is {} vs expected {} (abs error {:.3g})", i, a, b, err));
    }
    return;
  }
  if (want.raw.size() == 0 || std::memcmp(got.raw.data(), want.raw.data(), want.raw.size()) == 0) return;  // empty: no bytes (and null data)
  if (dtypeBits(want.dtype()) >= 8 && !dtypeIsFloat(want.dtype())) {
    for (size_t i = 0; i < n; ++i)
      if (got.elementAsDouble(i) != want.elementAsDouble(i))
        return mismatch(fmt::format("element {} is {} vs expected {}", i, got.elementAsDouble(i), want.elementAsDouble(i)));
  }
  mismatch("bytes differ");
}

void compareInto(const RtValue& got, const RtValue& want, double rtol, double atol, CompareResult& r) {
  if (got.kind != want.kind) {
    r.ok = false;
    r.message = "the kind of value differs (tensor, sequence, optional, map)";
    return;
  }
  switch (want.kind) {
    case RtValue::Kind::Tensor: compareTensors(*got.tensor, *want.tensor, rtol, atol, r); return;
    case RtValue::Kind::Map:
      compareTensors(*got.mapKeys, *want.mapKeys, rtol, atol, r);
      [[fallthrough]];
    case RtValue::Kind::Sequence:
    case RtValue::Kind::Optional:
      if (got.elements.size() != want.elements.size()) {
        r.ok = false;
        r.message = fmt::format("{} elements vs expected {}", got.elements.size(), want.elements.size());
        return;
      }
      for (size_t i = 0; i < want.elements.size(); ++i) {
        CompareResult sub;
        compareInto(got.elements[i], want.elements[i], rtol, atol, sub);
        r.maxAbsError = std::max(r.maxAbsError, sub.maxAbsError);
        r.maxRelError = std::max(r.maxRelError, sub.maxRelError);
        if (!sub.ok && r.ok) {
          r.ok = false;
          r.message = fmt::format("element {}: {}", i, sub.message);
        }
      }
      return;
    default: return;
  }
}

template <typename T>
void fill(Tensor& t, size_t n, std::mt19937_64& rng, T (*gen)(std::mt19937_64&)) {
  for (size_t i = 0; i < n; ++i) {
    T v = gen(rng);
    std::memcpy(t.raw.mutableData() + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

CompareResult compareValues(const RtValue& got, const RtValue& want, double rtol, double atol) {
  CompareResult r;
  compareInto(got, want, rtol, atol, r);
  return r;
}

Tensor randomTensor(DType dtype, const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dtype);
  t.dims = dims;
  auto bytes = t.expectedBytes();
  if (!bytes || *bytes > (uint64_t{1} << 34)) fail(ErrorKind::InvalidInput, "random input of shape {} is too large", dimsStr(dims));
  t.setRaw(Buffer::zeros(static_cast<size_t>(*bytes)));
  size_t n = static_cast<size_t>(*t.numElements());
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> ints(0, 9);
  for (size_t i = 0; i < n; ++i) {
    double f = u(rng);
    int k = ints(rng);
    uint8_t* p = t.raw.mutableData();
    switch (dtype) {
      case DType::Float: { float v = static_cast<float>(f); std::memcpy(p + 4 * i, &v, 4); break; }
      case DType::Double: std::memcpy(p + 8 * i, &f, 8); break;
      case DType::Float16: { uint16_t v = floatToHalf(static_cast<float>(f)); std::memcpy(p + 2 * i, &v, 2); break; }
      case DType::BFloat16: { uint16_t v = floatToBfloat16(static_cast<float>(f)); std::memcpy(p + 2 * i, &v, 2); break; }
      case DType::Int8: case DType::UInt8: p[i] = static_cast<uint8_t>(k); break;
      case DType::Bool: p[i] = static_cast<uint8_t>(k & 1); break;
      case DType::Int16: case DType::UInt16: { uint16_t v = static_cast<uint16_t>(k); std::memcpy(p + 2 * i, &v, 2); break; }
      case DType::Int32: case DType::UInt32: { uint32_t v = static_cast<uint32_t>(k); std::memcpy(p + 4 * i, &v, 4); break; }
      case DType::Int64: case DType::UInt64: { uint64_t v = static_cast<uint64_t>(k); std::memcpy(p + 8 * i, &v, 8); break; }
      default: fail(ErrorKind::Unsupported, "cannot make random {} data", dtypeName(dtype));
    }
  }
  return t;
}

TensorStats tensorStats(const TensorData& t, size_t firstN) {
  TensorStats s;
  size_t n = static_cast<size_t>(t.numElements().value_or(0));
  if (t.dtype() == DType::String) {
    for (size_t i = 0; i < n && i < firstN; ++i) s.first.push_back("\"" + t.strings[i] + "\"");
    return s;
  }
  bool numeric = dtypeBits(t.dtype()) >= 8 && t.dtype() != DType::Complex64 && t.dtype() != DType::Complex128 &&
                 !(dtypeIsFloat(t.dtype()) && dtypeBits(t.dtype()) == 8);
  if (!numeric || t.raw.size() < t.expectedBytes().value_or(UINT64_MAX)) return s;
  double sum = 0;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    double v = t.elementAsDouble(i);
    if (i < firstN) {
      s.first.push_back(fmt::format("{:.6g}", v));
      s.firstValues.push_back(v);
    }
    if (std::isnan(v)) { ++s.nanCount; continue; }
    if (std::isinf(v)) ++s.infCount;
    if (!any) { s.min = s.max = v; any = true; }
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    sum += v;
  }
  size_t finite = n - static_cast<size_t>(s.nanCount);
  s.mean = finite ? sum / static_cast<double>(finite) : 0;
  return s;
}

}  // namespace onnxtool
