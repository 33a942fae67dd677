// tensor_files.h: tensors and values as files: ONNX `.pb` (TensorProto and the test-data
// Sequence/Optional/Map messages), NumPy `.npy` and `.npz`, and JSON ({"dtype", "shape", "data"}
// with nested lists). The format is chosen by file extension.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "exec/value.h"
#include "lib/type.h"

namespace onnxtool {

enum class TensorFileFormat { Pb, Npy, Json };

/// The format for a path's extension (.pb, .npy, .json); throws Error(InvalidInput) otherwise.
TensorFileFormat tensorFileFormat(const std::string& path);
const char* tensorFileExtension(TensorFileFormat f);

/// Reads one value from a .pb, .npy or .json file. `expected` (may be None) guides .pb message
/// kinds and the dtype of untyped JSON lists. `name` receives the name stored in the file (.pb,
/// JSON "name"), else empty. Throws Error(InvalidInput) naming the file on malformed content.
RtValue readValueFile(const std::string& path, const TypeInfo& expected, std::string* name = nullptr);

/// Reads every array of a .npz archive (stored or deflated members) as (key, tensor).
std::vector<std::pair<std::string, Tensor>> readNpz(const std::string& path);

/// Serializations. Throws Error(Unsupported) for values the format cannot hold (e.g. a sequence
/// as .npy, bfloat16 as .npy).
std::string toNpy(const TensorData& t);
Tensor parseNpy(std::string_view bytes, const std::string& displayName);
/// The arrays of an .npz archive already in memory (stored or deflated members).
std::vector<std::pair<std::string, Tensor>> parseNpz(const std::string& bytes, const std::string& displayName);
std::string toJson(const RtValue& v, const std::string& name);
RtValue parseJson(std::string_view text, const TypeInfo& expected, const std::string& displayName, std::string* name);
std::string toPb(const RtValue& v, const std::string& name);

/// Writes bytes to a file atomically (temporary file + rename).
void writeFileAtomic(const std::string& path, std::string_view bytes);

}  // namespace onnxtool
