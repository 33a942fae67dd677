// ir_clone.h: deep copies of the IR. Tensor bytes are shared (Buffers are reference counted and
// immutable), everything else is copied, so the copy can be rewritten or shape-inferred without
// touching the original.
#pragma once

#include <memory>

#include "lib/ir.h"

namespace onnxtool {

/// A deep copy of `m`: graphs, subgraphs, functions, values with their types, value_info entries
/// and attributes. Initializer and attribute tensors are new Tensor objects whose Buffers share
/// the original bytes (no weight is copied). The copy's path and loadIssues are the original's.
std::unique_ptr<Model> cloneModel(const Model& m);

}  // namespace onnxtool
