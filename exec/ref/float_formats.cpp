// float_formats.cpp: narrow float encodings described by one table of (exponent bits, mantissa
// bits, bias, how specials are encoded), sub-byte packing, and element access by dtype.
#include "exec/ref/float_formats.h"

#include <cmath>
#include <cstring>

#include "lib/error.h"

namespace onnxtool::ref {

namespace {

/// How a format spends its top codes.
enum class Specials : uint8_t {
  Ieee,  ///< all-ones exponent: inf (mantissa 0) and NaN (float16, bfloat16, e5m2)
  Fn,    ///< no inf; only S.1111.111 is NaN (e4m3fn)
  Fnuz,  ///< no inf, no -0; 0x80 is the only NaN (e4m3fnuz, e5m2fnuz)
  None,  ///< every code is a finite number (float4, float6)
};

struct Format {
  int expBits;
  int manBits;
  int bias;
  Specials specials;
};

std::optional<Format> formatOf(DType t) {
  switch (t) {
    case DType::Float16: return Format{5, 10, 15, Specials::Ieee};
    case DType::BFloat16: return Format{8, 7, 127, Specials::Ieee};
    case DType::Float8E4M3FN: return Format{4, 3, 7, Specials::Fn};
    case DType::Float8E4M3FNUZ: return Format{4, 3, 8, Specials::Fnuz};
    case DType::Float8E5M2: return Format{5, 2, 15, Specials::Ieee};
    case DType::Float8E5M2FNUZ: return Format{5, 2, 16, Specials::Fnuz};
    case DType::Float4E2M1: return Format{2, 1, 1, Specials::None};
    case DType::Float6E2M3: return Format{2, 3, 1, Specials::None};
    case DType::Float6E3M2: return Format{3, 2, 3, Specials::None};
    default: return std::nullopt;
  }
}

Format requireFormat(DType t) {
  auto f = formatOf(t);
  if (!f) fail(ErrorKind::Internal, "{} is not a narrow float type", dtypeName(t));
  return *f;
}

uint32_t signBitOf(const Format& f) { return 1u << (f.expBits + f.manBits); }

/// Magnitude bits of the largest finite value.
uint32_t maxFiniteBits(const Format& f) {
  uint32_t expOnes = (1u << f.expBits) - 1, manOnes = (1u << f.manBits) - 1;
  switch (f.specials) {
    case Specials::Ieee: return (expOnes - 1) << f.manBits | manOnes;
    case Specials::Fn: return expOnes << f.manBits | (manOnes - 1);
    default: return signBitOf(f) - 1;
  }
}

double decodeWith(const Format& f, uint32_t bits) {
  uint32_t sign = bits & signBitOf(f);
  uint32_t mag = bits & (signBitOf(f) - 1);
  uint32_t expField = mag >> f.manBits;
  uint32_t man = mag & ((1u << f.manBits) - 1);
  uint32_t expOnes = (1u << f.expBits) - 1;
  switch (f.specials) {
    case Specials::Ieee:
      if (expField == expOnes) {
        if (man != 0) return std::nan("");
        return sign ? -INFINITY : INFINITY;
      }
      break;
    case Specials::Fn:
      if (mag == (signBitOf(f) - 1)) return std::nan("");
      break;
    case Specials::Fnuz:
      if (bits == signBitOf(f)) return std::nan("");
      break;
    case Specials::None: break;
  }
  int emin = 1 - f.bias;
  double v = expField == 0 ? std::ldexp(static_cast<double>(man), emin - f.manBits)
                           : std::ldexp(static_cast<double>(man | (1u << f.manBits)),
                                        static_cast<int>(expField) - f.bias - f.manBits);
  return sign ? -v : v;
}

uint32_t nanBits(const Format& f, bool negative) {
  uint32_t sign = negative ? signBitOf(f) : 0;
  switch (f.specials) {
    case Specials::Ieee: return sign | ((1u << f.expBits) - 1) << f.manBits | 1u << (f.manBits - 1);
    case Specials::Fn: return sign | (signBitOf(f) - 1);
    case Specials::Fnuz: return signBitOf(f);
    case Specials::None:
      // No NaN code: ml_dtypes (which the onnx reference and test data use) gives a zero whose sign
      // is the opposite of the NaN's sign bit; we match it so the data agree bit for bit.
      return negative ? 0 : signBitOf(f);
  }
  return 0;
}

/// The code for a magnitude past the largest finite value (or infinite).
uint32_t overflowBits(const Format& f, bool negative, bool saturate, bool isInf, bool fnuzInfIsNan) {
  uint32_t sign = negative ? signBitOf(f) : 0;
  switch (f.specials) {
    case Specials::Ieee:
      return saturate ? sign | maxFiniteBits(f) : sign | ((1u << f.expBits) - 1) << f.manBits;
    case Specials::Fn: return saturate ? sign | maxFiniteBits(f) : nanBits(f, negative);
    case Specials::Fnuz:
      if (!saturate || (isInf && fnuzInfIsNan)) return signBitOf(f);
      return sign | maxFiniteBits(f);
    case Specials::None: return sign | maxFiniteBits(f);
  }
  return 0;
}

uint32_t encodeWith(const Format& f, double x, bool saturate, bool fnuzInfIsNan) {
  bool negative = std::signbit(x);
  if (std::isnan(x)) return nanBits(f, negative);
  if (std::isinf(x)) return overflowBits(f, negative, saturate, true, fnuzInfIsNan);
  uint32_t sign = negative ? signBitOf(f) : 0;
  uint32_t zero = f.specials == Specials::Fnuz ? 0 : sign;
  double a = std::fabs(x);
  if (a == 0) return zero;
  int emin = 1 - f.bias;
  // Round to an integer multiple of the spacing of a's binade (subnormal spacing below emin);
  // scaling by a power of two is exact, and nearbyint rounds half to even.
  int quantumExp = std::max(std::ilogb(a), emin) - f.manBits;
  double n = std::nearbyint(std::ldexp(a, -quantumExp));
  if (n == 0) return zero;
  double rounded = std::ldexp(n, quantumExp);
  if (rounded > decodeWith(f, maxFiniteBits(f))) return overflowBits(f, negative, saturate, false, fnuzInfIsNan);
  int e = std::ilogb(rounded);
  if (e < emin) return sign | static_cast<uint32_t>(std::ldexp(rounded, f.manBits - emin));
  auto man = static_cast<uint32_t>(std::ldexp(rounded, f.manBits - e)) - (1u << f.manBits);
  return sign | static_cast<uint32_t>(e + f.bias) << f.manBits | man;
}

template <typename T>
T loadLE(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void storeLE(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

/// v's two's complement bits (floats truncated toward zero first; NaN gives 0).
uint64_t integerBits(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::Int: return static_cast<uint64_t>(v.i);
    case Scalar::Kind::UInt: return v.u;
    case Scalar::Kind::Float: {
      double t = std::trunc(v.f);
      if (std::isnan(t)) return 0;
      if (t >= 0) return t >= 18446744073709551616.0 ? UINT64_MAX : static_cast<uint64_t>(t);
      return t < -9223372036854775808.0 ? static_cast<uint64_t>(INT64_MIN) : static_cast<uint64_t>(static_cast<int64_t>(t));
    }
  }
  return 0;
}

bool isNonZero(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::Int: return v.i != 0;
    case Scalar::Kind::UInt: return v.u != 0;
    case Scalar::Kind::Float: return v.f != 0;  // NaN is nonzero
  }
  return false;
}

float toFloat(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::Int: return static_cast<float>(v.i);  // one rounding, not via double
    case Scalar::Kind::UInt: return static_cast<float>(v.u);
    case Scalar::Kind::Float: return static_cast<float>(v.f);
  }
  return 0;
}

int64_t signExtend(uint32_t v, int bits) {
  uint32_t sign = 1u << (bits - 1);
  return static_cast<int64_t>(v & (sign - 1)) - static_cast<int64_t>(v & sign);
}

}  // namespace

bool isNarrowFloat(DType t) { return formatOf(t).has_value(); }

bool isSaturableFloat8(DType t) {
  return t == DType::Float8E4M3FN || t == DType::Float8E4M3FNUZ || t == DType::Float8E5M2 || t == DType::Float8E5M2FNUZ;
}

double decodeNarrowFloat(DType t, uint32_t bits) {
  if (t == DType::Float8E8M0) return (bits & 0xff) == 0xff ? std::nan("") : std::ldexp(1.0, static_cast<int>(bits & 0xff) - 127);
  return decodeWith(requireFormat(t), bits);
}

uint32_t encodeNarrowFloat(DType t, double x, bool saturate, bool fnuzInfIsNan) {
  return encodeWith(requireFormat(t), x, saturate, fnuzInfIsNan);
}

std::optional<E8M0Rounding> parseE8M0Rounding(std::string_view s) {
  if (s == "up") return E8M0Rounding::Up;
  if (s == "down") return E8M0Rounding::Down;
  if (s == "nearest") return E8M0Rounding::Nearest;
  return std::nullopt;
}

uint8_t encodeE8M0(float x, bool saturate, E8M0Rounding mode) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  uint32_t exponent = (bits >> 23) & 0xff;
  if (exponent == 0xff) return 0xff;
  uint32_t fraction = bits & 0x7fffff;
  bool roundUp = false;
  switch (mode) {
    case E8M0Rounding::Up: roundUp = fraction != 0; break;
    case E8M0Rounding::Down: break;
    case E8M0Rounding::Nearest: {
      // The reference's rule: the guard bit and any lower bit, or a nonzero exponent as the "odd"
      // bit (a power of two's exponent field has no mantissa LSB of its own).
      bool guard = (bits & 0x400000) != 0;
      bool round = (bits & 0x200000) != 0;
      bool sticky = (bits & 0x1fffff) != 0;
      roundUp = guard && (round || sticky || exponent > 0);
      break;
    }
  }
  if (roundUp && saturate && exponent == 0xfe) roundUp = false;
  return static_cast<uint8_t>(exponent + (roundUp ? 1 : 0));  // 0xfe + 1 carries into NaN
}

uint32_t loadPacked(const uint8_t* bytes, int64_t i, int bits) {
  uint64_t pos = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  uint32_t v = 0;
  for (int b = 0; b < bits; ++b, ++pos) v |= ((bytes[pos / 8] >> (pos % 8)) & 1u) << b;
  return v;
}

void storePacked(uint8_t* bytes, int64_t i, int bits, uint32_t v) {
  uint64_t pos = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  for (int b = 0; b < bits; ++b, ++pos) {
    auto mask = static_cast<uint8_t>(1u << (pos % 8));
    if ((v >> b) & 1u) bytes[pos / 8] |= mask;
    else bytes[pos / 8] &= static_cast<uint8_t>(~mask);
  }
}

double Scalar::toDouble() const {
  switch (kind) {
    case Kind::Int: return static_cast<double>(i);
    case Kind::UInt: return static_cast<double>(u);
    case Kind::Float: return f;
  }
  return 0;
}

Scalar loadElement(const TensorData& t, int64_t i) {
  const uint8_t* p = t.raw.data();
  auto k = static_cast<size_t>(i);
  switch (t.dtype()) {
    case DType::Float: return Scalar::ofFloat(loadLE<float>(p + 4 * k));
    case DType::Double: return Scalar::ofFloat(loadLE<double>(p + 8 * k));
    case DType::Float16:
    case DType::BFloat16: return Scalar::ofFloat(decodeNarrowFloat(t.dtype(), loadLE<uint16_t>(p + 2 * k)));
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0: return Scalar::ofFloat(decodeNarrowFloat(t.dtype(), p[k]));
    case DType::Float4E2M1: return Scalar::ofFloat(decodeNarrowFloat(t.dtype(), loadPacked(p, i, 4)));
    case DType::Float6E2M3:
    case DType::Float6E3M2: return Scalar::ofFloat(decodeNarrowFloat(t.dtype(), loadPacked(p, i, 6)));
    case DType::Bool:
    case DType::UInt8: return Scalar::ofUInt(p[k]);
    case DType::Int8: return Scalar::ofInt(static_cast<int8_t>(p[k]));
    case DType::UInt16: return Scalar::ofUInt(loadLE<uint16_t>(p + 2 * k));
    case DType::Int16: return Scalar::ofInt(loadLE<int16_t>(p + 2 * k));
    case DType::UInt32: return Scalar::ofUInt(loadLE<uint32_t>(p + 4 * k));
    case DType::Int32: return Scalar::ofInt(loadLE<int32_t>(p + 4 * k));
    case DType::UInt64: return Scalar::ofUInt(loadLE<uint64_t>(p + 8 * k));
    case DType::Int64: return Scalar::ofInt(loadLE<int64_t>(p + 8 * k));
    case DType::UInt4: return Scalar::ofUInt(loadPacked(p, i, 4));
    case DType::Int4: return Scalar::ofInt(signExtend(loadPacked(p, i, 4), 4));
    case DType::UInt2: return Scalar::ofUInt(loadPacked(p, i, 2));
    case DType::Int2: return Scalar::ofInt(signExtend(loadPacked(p, i, 2), 2));
    default: fail(ErrorKind::Unsupported, "cannot read {} elements as numbers", dtypeName(t.dtype()));
  }
}

void storeElement(Tensor& t, int64_t i, const Scalar& v, const ConvertOptions& o) {
  uint8_t* p = t.raw.mutableData();
  auto k = static_cast<size_t>(i);
  DType d = t.dtype();
  switch (d) {
    case DType::Float: storeLE<float>(p + 4 * k, toFloat(v)); return;
    case DType::Double: storeLE<double>(p + 8 * k, v.toDouble()); return;
    case DType::Float16:
    case DType::BFloat16:
      storeLE<uint16_t>(p + 2 * k, static_cast<uint16_t>(encodeNarrowFloat(d, v.toDouble(), false)));
      return;
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
      p[k] = static_cast<uint8_t>(encodeNarrowFloat(d, v.toDouble(), o.saturate, o.fnuzInfIsNan));
      return;
    case DType::Float8E8M0: p[k] = encodeE8M0(toFloat(v), o.saturate, o.e8m0Rounding); return;
    case DType::Float4E2M1: storePacked(p, i, 4, encodeNarrowFloat(d, v.toDouble(), true)); return;
    case DType::Float6E2M3:
    case DType::Float6E3M2: storePacked(p, i, 6, encodeNarrowFloat(d, v.toDouble(), true)); return;
    case DType::Bool: p[k] = isNonZero(v) ? 1 : 0; return;
    case DType::UInt8:
    case DType::Int8: p[k] = static_cast<uint8_t>(integerBits(v)); return;
    case DType::UInt16:
    case DType::Int16: storeLE<uint16_t>(p + 2 * k, static_cast<uint16_t>(integerBits(v))); return;
    case DType::UInt32:
    case DType::Int32: storeLE<uint32_t>(p + 4 * k, static_cast<uint32_t>(integerBits(v))); return;
    case DType::UInt64:
    case DType::Int64: storeLE<uint64_t>(p + 8 * k, integerBits(v)); return;
    case DType::UInt4:
    case DType::Int4: storePacked(p, i, 4, static_cast<uint32_t>(integerBits(v))); return;
    case DType::UInt2:
    case DType::Int2: storePacked(p, i, 2, static_cast<uint32_t>(integerBits(v))); return;
    default: fail(ErrorKind::Unsupported, "cannot store numbers as {} elements", dtypeName(d));
  }
}

}  // namespace onnxtool::ref
