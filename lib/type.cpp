// type.cpp: Dim, Shape and TypeInfo helpers.
#include "lib/type.h"

#include <fmt/format.h>

namespace onnxtool {

bool Dim::operator==(const Dim& o) const {
  if (kind != o.kind || denotation != o.denotation) return false;
  if (kind == Kind::Value) return value == o.value;
  if (kind == Kind::Param) return param == o.param;
  return true;
}

std::string Dim::str() const {
  if (kind == Kind::Value) return std::to_string(value);
  if (kind == Kind::Param) return param;
  return "?";
}

Shape Shape::of(std::vector<int64_t> values) {
  Shape s;
  s.hasRank = true;
  for (int64_t v : values) s.dims.push_back(Dim::ofValue(v));
  return s;
}

bool Shape::isStatic() const {
  if (!hasRank) return false;
  for (const Dim& d : dims)
    if (!d.isValue()) return false;
  return true;
}

std::optional<int64_t> Shape::numElements() const {
  if (!isStatic()) return std::nullopt;
  int64_t n = 1;
  for (const Dim& d : dims) {
    if (d.value < 0) return std::nullopt;
    if (d.value != 0 && n > INT64_MAX / d.value) return std::nullopt;
    n *= d.value;
  }
  return n;
}

bool Shape::operator==(const Shape& o) const { return hasRank == o.hasRank && dims == o.dims; }

std::string Shape::str() const {
  if (!hasRank) return "?";
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i].str();
  }
  return s + "]";
}

TypeInfo TypeInfo::tensor(DType t, Shape s) {
  TypeInfo ti;
  ti.kind = Kind::Tensor;
  ti.elemType = static_cast<int32_t>(t);
  ti.shape = std::move(s);
  return ti;
}

bool TypeInfo::operator==(const TypeInfo& o) const {
  if (kind != o.kind || elemType != o.elemType || denotation != o.denotation) return false;
  if ((kind == Kind::Tensor || kind == Kind::SparseTensor) && !(shape == o.shape)) return false;
  if (kind == Kind::Opaque && (opaqueDomain != o.opaqueDomain || opaqueName != o.opaqueName)) return false;
  if (static_cast<bool>(inner) != static_cast<bool>(o.inner)) return false;
  return !inner || *inner == *o.inner;
}

static std::string elemName(int32_t e) {
  if (!isValidDType(e)) return fmt::format("<invalid {}>", e);
  DType t = static_cast<DType>(e);
  if (t == DType::Float) return "float";
  if (t == DType::Double) return "double";
  return std::string(dtypeName(t));
}

std::string TypeInfo::constraintStr() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::Tensor: return fmt::format("tensor({})", elemName(elemType));
    case Kind::SparseTensor: return fmt::format("sparse_tensor({})", elemName(elemType));
    case Kind::Sequence: return fmt::format("seq({})", inner ? inner->constraintStr() : "?");
    case Kind::Optional: return fmt::format("optional({})", inner ? inner->constraintStr() : "?");
    case Kind::Map:
      return fmt::format("map({},{})", elemName(elemType), inner ? inner->constraintStr() : "?");
    case Kind::Opaque: return fmt::format("opaque({},{})", opaqueDomain, opaqueName);
  }
  return "?";
}

std::string TypeInfo::str() const {
  switch (kind) {
    case Kind::Tensor:
    case Kind::SparseTensor: return constraintStr() + shape.str();
    case Kind::Sequence: return fmt::format("seq({})", inner ? inner->str() : "?");
    case Kind::Optional: return fmt::format("optional({})", inner ? inner->str() : "?");
    case Kind::Map: return fmt::format("map({},{})", elemName(elemType), inner ? inner->str() : "?");
    default: return constraintStr();
  }
}

}  // namespace onnxtool
