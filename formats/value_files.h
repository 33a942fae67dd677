// value_files.h: reading and writing runtime values as files: ONNX TensorProto/SequenceProto/
// OptionalProto/MapProto `.pb` files (the backend test-data layout).
#pragma once

#include <string>
#include <string_view>

#include "exec/value.h"
#include "lib/type.h"

namespace onnxtool {

/// Parses a `.pb` value whose message kind follows `expected` (tensor -> TensorProto, sequence ->
/// SequenceProto, optional -> OptionalProto, map -> MapProto; kind None -> TensorProto).
/// Throws Error(InvalidInput) naming `displayName` on malformed input. `name` receives the
/// message's name field.
RtValue parseValueProto(std::string_view bytes, const TypeInfo& expected, const std::string& displayName,
                        std::string* name = nullptr);

/// Reads a whole file (throws Error(Io) naming it).
std::string readFile(const std::string& path);

}  // namespace onnxtool
