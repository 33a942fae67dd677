// attr_type.cpp: names of ONNX attribute kinds (AttributeProto.AttributeType).
#include "lib/attr_type.h"

namespace onnxtool {

std::string_view attrTypeName(AttrType t) {
  switch (t) {
    case AttrType::Undefined: return "UNDEFINED";
    case AttrType::Float: return "FLOAT";
    case AttrType::Int: return "INT";
    case AttrType::String: return "STRING";
    case AttrType::Tensor: return "TENSOR";
    case AttrType::Graph: return "GRAPH";
    case AttrType::Floats: return "FLOATS";
    case AttrType::Ints: return "INTS";
    case AttrType::Strings: return "STRINGS";
    case AttrType::Tensors: return "TENSORS";
    case AttrType::Graphs: return "GRAPHS";
    case AttrType::SparseTensor: return "SPARSE_TENSOR";
    case AttrType::SparseTensors: return "SPARSE_TENSORS";
    case AttrType::TypeProto: return "TYPE_PROTO";
    case AttrType::TypeProtos: return "TYPE_PROTOS";
  }
  return "UNDEFINED";
}

}  // namespace onnxtool
