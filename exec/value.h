// value.h: runtime values flowing between kernels: tensors, sequences, maps and optionals
// (the ONNX value kinds), with tensors held by shared_ptr so that outputs can alias inputs
// (Identity, Reshape) and initializers are never copied.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace onnxtool {

struct RtValue {
  enum class Kind : uint8_t { Empty, Tensor, Sequence, Map, Optional };
  Kind kind = Kind::Empty;
  std::shared_ptr<const Tensor> tensor;  ///< Kind::Tensor
  std::vector<RtValue> elements;         ///< Sequence elements; Optional: 0 (none) or 1 element
  /// Map: keys (an int64 or string tensor) and values (a tensor), index-aligned.
  std::shared_ptr<const Tensor> mapKeys, mapValues;
  /// Element type of an empty sequence / none optional, for typing outputs (TypeProto-like).
  int32_t elemTypeHint = 0;

  static RtValue ofTensor(std::shared_ptr<const Tensor> t) {
    RtValue v;
    v.kind = Kind::Tensor;
    v.tensor = std::move(t);
    return v;
  }
  static RtValue ofTensor(Tensor t) { return ofTensor(std::make_shared<const Tensor>(std::move(t))); }
  static RtValue sequence(std::vector<RtValue> items) {
    RtValue v;
    v.kind = Kind::Sequence;
    v.elements = std::move(items);
    return v;
  }
  static RtValue optionalNone() {
    RtValue v;
    v.kind = Kind::Optional;
    return v;
  }
  static RtValue optionalOf(RtValue inner) {
    RtValue v;
    v.kind = Kind::Optional;
    v.elements.push_back(std::move(inner));
    return v;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isEmpty() const { return kind == Kind::Empty; }
};

}  // namespace onnxtool
