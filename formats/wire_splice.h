// wire_splice.h: zero-copy loading of inline weights. Before protobuf parses a model, the raw_data
// payloads of the main graph's initializers, and of the tensor attributes of its nodes (weights
// held by Constant nodes, as Paddle2ONNX writes every weight), are cut out of the message
// (enclosing lengths are rewritten), so protobuf copies only the small remainder and the IR's
// tensors borrow their bytes straight from the mapped file.
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

/// A raw_data payload cut from the tensor attribute (AttributeProto.t) of a main-graph node.
struct NodeSpan {
  size_t node;       ///< index of the node in the main graph
  size_t attribute;  ///< index of the attribute in the node
  Span raw;
};

struct Spliced {
  std::string message;                   ///< the model without the cut payloads
  std::vector<std::optional<Span>> raw;  ///< per main-graph initializer, in order: its cut raw_data
  std::vector<NodeSpan> nodeRaw;         ///< cut from nodes' tensor attributes, in node order
};

/// Cuts raw_data payloads of at least `minBytes` out of main-graph initializers and main-graph
/// nodes' tensor attributes of the serialized ModelProto [data, data+size). Returns nullopt when
/// there is nothing to cut or the wire format is anything but plain (malformed, groups, repeated
/// graph fields): the caller then parses the original bytes, and protobuf reports what is wrong.
/// A tensor with two raw_data fields, or an attribute with two tensors, keeps its bytes (protobuf
/// resolves those).
std::optional<Spliced> spliceInitializerData(const uint8_t* data, size_t size, size_t minBytes);

/// Counts the nodes of the serialized ModelProto [data, data+size) (main graph, subgraphs,
/// model-local functions) and the nesting depth of its subgraphs, on the wire, without parsing.
/// Returns a phrase saying which limit is exceeded ("model has more than N nodes ...", "node 'x' (Loop)
/// nests subgraphs N levels deep ..."), or nullopt when both are within limits or the bytes are
/// not plain wire format (protobuf then reports what is wrong).
std::optional<std::string> checkNodeLimits(const uint8_t* data, size_t size, uint64_t maxNodes, int maxDepth);

/// False when every length-delimited field of the serialized ModelProto [data, data+size) longer
/// than `limit` bytes is, on the wire, a submessage that itself holds no such field, or a
/// tensor's raw_data or packed numbers: then no string field can be longer than `limit`, and the
/// per-field check of the parsed message (through protobuf's reflection, whose descriptors cost
/// ~0.6 ms to build on first use) has nothing to find. True otherwise, also for bytes that are
/// not plain wire format.
bool mayHoldLongStrings(const uint8_t* data, size_t size, size_t limit);

}  // namespace onnxtool::wire
