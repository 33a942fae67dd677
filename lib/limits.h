// limits.h: onnxtool's limits on what a model may declare, in one place. ONNX itself sets none
// beyond protobuf's 2 GiB message size; these keep a malicious or corrupt file from making the
// loader, checker or executors allocate in proportion to a number the file merely states. Each is
// far above what real models use; a model over one is refused with a one-line error naming the
// file, the field and the limit (exit 2). Documented in onnxtool-check(1), LIMITS.
#pragma once

#include <cstdint>

namespace onnxtool::limits {

/// Nodes of a model, counted over the main graph, every subgraph and every model-local function
/// (counted on the wire, before protobuf allocates them). Large unrolled LLM graphs hold ~1e5.
inline constexpr uint64_t kMaxNodes = 10'000'000;

/// Levels of subgraphs nested inside each other (a Loop body in an If branch is 2 levels).
/// Checked on the wire before parsing; below what protobuf's recursion limit could hold.
inline constexpr int kMaxSubgraphDepth = 64;

/// Elements one tensor may declare (initializer, Constant attribute, a tensor an executor
/// allocates), whatever its element type: 2^40.
inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 40;

/// Bytes one tensor may declare (1 TiB).
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;

/// Bytes of one name: of a value, node, graph, function, attribute, op type, domain or metadata
/// key (64 KiB).
inline constexpr uint64_t kMaxNameBytes = uint64_t{64} << 10;

/// Bytes of any other string: a string attribute, one string_data element, a doc_string or a
/// metadata value (64 MiB: tokenizer vocabularies held in attributes reach a few MiB).
inline constexpr uint64_t kMaxStringBytes = uint64_t{64} << 20;

/// Levels of nested graphs and types the text syntax parser accepts (it recurses per level).
inline constexpr int kMaxTextNestingDepth = 128;

}  // namespace onnxtool::limits
