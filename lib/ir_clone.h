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

/// A model of its own whose main graph is a deep copy of `body`, a subgraph of `m` (an If branch,
/// a Loop or Scan body): its inputs are the body's formal inputs, then the values of enclosing
/// graphs the body reads (`outer`, at any depth of nesting, each once), which keep their names
/// and types; an outer value that is a constant initializer (not also a graph input) becomes an
/// initializer of the copy instead (its bytes shared). Opsets, functions and the rest of the
/// model header are `m`'s. For executors that
/// plan a body like a main graph.
std::unique_ptr<Model> cloneSubgraphAsModel(const Model& m, const Graph& body, const std::vector<const Value*>& outer);

}  // namespace onnxtool
