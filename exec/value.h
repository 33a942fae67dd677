// value.h: runtime values flowing between kernels and through Plan::run: tensors, sequences,
// maps and optionals (the ONNX value kinds). Tensors are RtTensors (not the IR's Tensor, which
// mirrors TensorProto with a name, doc string and storage), held by shared_ptr so that outputs
// can alias inputs (Identity, Reshape) and initializers are viewed, never copied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lib/tensor.h"

namespace onnxtool {

/// Where a runtime tensor's bytes live.
struct Device {
  enum class Kind : uint8_t { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int index = 0;  ///< which device of its kind (Cpu: always 0)

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {Kind::Cuda, index}; }
  bool isCpu() const { return kind == Kind::Cpu; }
  bool operator==(const Device&) const = default;
  /// "cpu", "cuda:0".
  std::string str() const { return kind == Kind::Cpu ? "cpu" : "cuda:" + std::to_string(index); }
};

/// A tensor at run time: element type, dims, contiguous elements in `raw` (row-major, raw_data
/// layout; strings in `strings`) and the device they are on. On the cpu the Buffer's bytes are
/// host memory (owned, borrowed from a run's arena, or from the model's initializer: a view);
/// on a device (`device` not cpu) raw.data() is a device address, which the host must not read,
/// and the Buffer's owner frees it.
struct RtTensor : TensorData {
  Device device;

  RtTensor() = default;
  /// A host tensor holding `data` (its Buffer shared: no copy of the bytes).
  explicit RtTensor(TensorData data, Device on = Device::cpu()) : TensorData(std::move(data)), device(on) {}
  /// A host view of an IR tensor's data (an initializer): dims copied, bytes shared.
  static RtTensor viewOf(const Tensor& t) { return RtTensor(static_cast<const TensorData&>(t)); }
  /// Replaces the data with raw bytes.
  void setRaw(Buffer bytes) {
    raw = std::move(bytes);
    strings.clear();
  }
};

/// `t` when its bytes are on the host; otherwise throws Error(InvalidInput) naming `what` and
/// the device (for code that reads elements: writers, host kernels).
const RtTensor& hostTensor(const RtTensor& t, std::string_view what);

/// The IR tensor called `name` holding a host runtime tensor's data (bytes shared). Throws
/// Error(InvalidInput) for a tensor on a device.
Tensor toIrTensor(const RtTensor& t, std::string name = {});

struct RtValue {
  enum class Kind : uint8_t { Empty, Tensor, Sequence, Map, Optional };
  Kind kind = Kind::Empty;
  std::shared_ptr<const RtTensor> tensor;  ///< Kind::Tensor
  std::vector<RtValue> elements;         ///< Sequence elements; Optional: 0 (none) or 1 element
  /// Map: keys (an int64 or string tensor) and values (a tensor), index-aligned.
  std::shared_ptr<const RtTensor> mapKeys, mapValues;
  /// Element type of an empty sequence / none optional, for typing outputs (TypeProto-like).
  int32_t elemTypeHint = 0;

  static RtValue ofTensor(std::shared_ptr<const RtTensor> t) {
    RtValue v;
    v.kind = Kind::Tensor;
    v.tensor = std::move(t);
    return v;
  }
  static RtValue ofTensor(RtTensor t) { return ofTensor(std::make_shared<const RtTensor>(std::move(t))); }
  /// An IR tensor's data as a host runtime tensor (moved: no copy of the bytes).
  static RtValue ofTensor(Tensor t) { return ofTensor(RtTensor(static_cast<TensorData&&>(std::move(t)))); }
  /// A view of an IR tensor (an initializer): bytes shared, not copied.
  static RtValue viewOf(const Tensor& t) { return ofTensor(RtTensor::viewOf(t)); }
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
