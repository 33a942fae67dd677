// wire_splice.h: zero-copy loading of inline weights. Before protobuf parses a model, the raw_data
// payloads of the main graph's initializers are cut out of the message (enclosing lengths are
// rewritten), so protobuf copies only the small remainder and the IR's tensors borrow their bytes
// straight from the mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onnxtool::wire {

struct Span {
  size_t offset;
  size_t length;
};

struct Spliced {
  std::string message;                   ///< the model without the cut payloads
  std::vector<std::optional<Span>> raw;  ///< per main-graph initializer, in order: its cut raw_data
};

/// Cuts raw_data payloads of at least `minBytes` out of main-graph initializers of the serialized
/// ModelProto [data, data+size). Returns nullopt when there is nothing to cut or the wire format is
/// anything but plain (malformed, groups, repeated graph fields, a tensor with two raw_data
/// fields): the caller then parses the original bytes, and protobuf reports what is wrong.
std::optional<Spliced> spliceInitializerData(const uint8_t* data, size_t size, size_t minBytes);

/// Counts the nodes of the serialized ModelProto [data, data+size) (main graph, subgraphs,
/// model-local functions) and the nesting depth of its subgraphs, on the wire, without parsing.
/// Returns a phrase saying which limit is exceeded ("model has more than N nodes ...", "node 'x' (Loop)
/// nests subgraphs N levels deep ..."), or nullopt when both are within limits or the bytes are
/// not plain wire format (protobuf then reports what is wrong).
std::optional<std::string> checkNodeLimits(const uint8_t* data, size_t size, uint64_t maxNodes, int maxDepth);

}  // namespace onnxtool::wire
