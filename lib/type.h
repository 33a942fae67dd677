// type.h: value types of the IR: dimensions (static, symbolic, unknown), shapes (possibly of
// unknown rank) and TypeInfo, the IR form of TypeProto (tensor, sparse tensor, sequence, map,
// optional, opaque).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/dtype.h"

namespace onnxtool {

/// One dimension: a static value, a symbolic name, or unknown.
struct Dim {
  enum class Kind : uint8_t { Unknown, Value, Param };
  Kind kind = Kind::Unknown;
  int64_t value = 0;        ///< valid when kind == Value
  std::string param;        ///< valid when kind == Param
  std::string denotation;   ///< TensorShapeProto.Dimension.denotation, usually empty
  std::string residual;     ///< serialized fields/unknown fields kept for lossless saving

  static Dim ofValue(int64_t v) { Dim d; d.kind = Kind::Value; d.value = v; return d; }
  static Dim ofParam(std::string p) { Dim d; d.kind = Kind::Param; d.param = std::move(p); return d; }
  bool isValue() const { return kind == Kind::Value; }
  bool isParam() const { return kind == Kind::Param; }
  bool isUnknown() const { return kind == Kind::Unknown; }
  bool operator==(const Dim& o) const;
  std::string str() const;  ///< "3", "batch" or "?"
};

/// A shape; `hasRank == false` means the rank itself is unknown.
struct Shape {
  bool hasRank = false;
  std::vector<Dim> dims;
  std::string residual;  ///< TensorShapeProto unknown fields

  static Shape unknownRank() { return {}; }
  static Shape of(std::vector<int64_t> values);
  size_t rank() const { return dims.size(); }
  bool isStatic() const;  ///< rank known and every dim a value
  /// Product of dims when static and it fits in int64; nullopt otherwise.
  std::optional<int64_t> numElements() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  ///< "[1,3,batch,?]" or "?" for unknown rank
};

/// The IR form of TypeProto. kind None means "no type given".
struct TypeInfo {
  enum class Kind : uint8_t { None, Tensor, SparseTensor, Sequence, Map, Optional, Opaque };
  Kind kind = Kind::None;
  int32_t elemType = 0;   ///< Tensor/SparseTensor element type; Map key type (raw enum value)
  Shape shape;            ///< Tensor/SparseTensor
  std::shared_ptr<TypeInfo> inner;  ///< Sequence/Optional element type, Map value type
  std::string opaqueDomain, opaqueName;
  std::string denotation;
  std::string residual;      ///< TypeProto fields not modelled here, and unknown fields
  std::string kindResidual;  ///< the same for the kind message (TypeProto.Tensor, .Sequence, ...)

  static TypeInfo tensor(DType t, Shape s);
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isNone() const { return kind == Kind::None; }
  DType dtype() const { return static_cast<DType>(elemType); }
  bool operator==(const TypeInfo& o) const;
  /// "tensor(float)[1,3,224,224]", "seq(tensor(int64))", "map(string,tensor(float))", ...
  std::string str() const;
  /// The type constraint spelling of this type without shape: "tensor(float)", "seq(tensor(int64))".
  std::string constraintStr() const;
};

}  // namespace onnxtool
