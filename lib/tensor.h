// tensor.h: constant tensors of the IR (initializers, attribute values, Constant nodes).
// A Tensor's bytes live in a Buffer in raw_data layout (little-endian, sub-byte types packed),
// whether the model stored them inline as raw_data, in the typed repeated fields, or in an
// external file (then the Buffer borrows from the mmap'd file: no copy).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib/buffer.h"
#include "lib/dtype.h"

namespace onnxtool {

using StringPairs = std::vector<std::pair<std::string, std::string>>;

/// TensorProto.external_data, parsed; `entries` keeps every key/value in file order.
struct ExternalDataInfo {
  std::string location;
  int64_t offset = 0;
  std::optional<int64_t> length;
  std::string checksum;
  StringPairs entries;
};

/// The data of a tensor, without the IR's bookkeeping: element type, dims and the elements
/// (raw_data layout bytes, or strings). The IR's Tensor (below) and the executors' runtime
/// tensor (exec/value.h RtTensor) are both made of it, so that one converts to the other by
/// sharing the Buffer (no copy of the bytes), and code that only reads data takes either.
struct TensorData {
  int32_t dataType = 0;  ///< TensorProto.DataType value (kept raw so invalid values survive)
  std::vector<int64_t> dims;
  Buffer raw;                        ///< all non-string element data, raw_data layout
  std::vector<std::string> strings;  ///< STRING tensors

  DType dtype() const { return static_cast<DType>(dataType); }
  /// Product of dims; nullopt if a dim is negative or the product overflows.
  std::optional<int64_t> numElements() const;
  /// Bytes the data should have for dtype and dims in raw layout; nullopt for strings/overflow.
  std::optional<uint64_t> expectedBytes() const;
  /// Element i as double (for small integer/float tensors: shapes, axes, scalars). Supports
  /// float32/64, float16, bfloat16, every integer width >= 8 bits and bool. Precondition: i in
  /// range. Errors say "tensor '<name>'" (just "tensor" without a name).
  double elementAsDouble(size_t i, std::string_view name = {}) const;
  int64_t elementAsInt(size_t i, std::string_view name = {}) const;
  /// All elements as int64 (int32/int64/uint8...); throws Error(InvalidInput) otherwise.
  std::vector<int64_t> toInt64s(std::string_view name = {}) const;
};

class Tensor : public TensorData {
 public:
  /// Where the bytes were (or will be) stored when saved.
  enum class Storage : uint8_t {
    None,      ///< no data field set (invalid for initializers unless 0 elements)
    Raw,       ///< raw_data
    Typed,     ///< float_data/int32_data/... as loaded: saved back in the same fields while unmodified
    External,  ///< external file
  };

  Tensor() = default;
  /// An IR tensor holding `data` (its Buffer shared, not copied), unnamed, marked modified.
  explicit Tensor(TensorData data) : TensorData(std::move(data)) {
    storage = dtype() == DType::String ? Storage::Typed : Storage::Raw;
  }

  std::string name;
  std::string docString;
  StringPairs metadata;
  Storage storage = Storage::None;
  std::optional<ExternalDataInfo> external;  ///< set when loaded from or bound to external data
  std::string residual;  ///< serialized TensorProto fields not modelled here, and unknown fields

  /// Replaces the data with raw bytes (marks it modified: saved as raw_data or external data).
  void setRaw(Buffer bytes);
  /// TensorData's readers, naming this tensor in their errors.
  double elementAsDouble(size_t i) const { return TensorData::elementAsDouble(i, name); }
  int64_t elementAsInt(size_t i) const { return TensorData::elementAsInt(i, name); }
  std::vector<int64_t> toInt64s() const { return TensorData::toInt64s(name); }

  static Tensor fromFloats(std::string name, std::vector<int64_t> dims, const std::vector<float>& v);
  static Tensor fromInt64s(std::string name, std::vector<int64_t> dims, const std::vector<int64_t>& v);

};

/// SparseTensorProto: `values` holds the non-zero values (its name is the value's name),
/// `indices` their int64 coordinates, `dims` the dense shape.
struct SparseTensor {
  Tensor values;
  Tensor indices;
  std::vector<int64_t> dims;
  bool hasValues = true;
  bool hasIndices = true;
  std::string residual;
};

/// IEEE half and bfloat16 conversions (round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);

}  // namespace onnxtool
