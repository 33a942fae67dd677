// attr_type.h: ONNX attribute kinds (AttributeProto.AttributeType); numeric values are the spec's.
#pragma once

#include <cstdint>
#include <string_view>

namespace onnxtool {

enum class AttrType : int32_t {
  Undefined = 0,
  Float = 1,
  Int = 2,
  String = 3,
  Tensor = 4,
  Graph = 5,
  Floats = 6,
  Ints = 7,
  Strings = 8,
  Tensors = 9,
  Graphs = 10,
  SparseTensor = 11,
  SparseTensors = 12,
  TypeProto = 13,
  TypeProtos = 14,
};

/// Spec enum name: "FLOAT", "INTS", "SPARSE_TENSOR", ...; "UNDEFINED" for unknown values.
std::string_view attrTypeName(AttrType t);

}  // namespace onnxtool
