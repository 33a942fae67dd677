// pass_util.h: preconditions and rewrite steps shared by passes, so that each rule (never rewrite
// away a graph output, overridable initializers are not constants, ...) lives in one place.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/ir.h"
#include "passes/pass.h"

namespace onnxtool {

/// The constant data of `v`: an initializer that is not also a graph input (a graph input with an
/// initializer is a default the user may override), or the `value` tensor of a Constant node.
/// nullptr otherwise.
const Tensor* constantOf(const Value* v);
/// Constant `v` as doubles (numeric dtypes), or nullopt.
std::optional<std::vector<double>> constantAsDoubles(const Value* v);
/// Whether constant `v` is a scalar (or one element) equal to `x`.
bool isConstantScalar(const Value* v, double x);

/// Node `n` producing `v` when it has op `opType` (domain ai.onnx), else nullptr.
Node* producerOf(const Value* v, std::string_view opType);
/// `v` is read by exactly one node input and is not a graph output.
bool hasSingleUse(const Value* v);

/// Makes every reader of `from` read `to`. When `from` is a graph output its name must survive:
/// then `to` takes over the name (possible when a node of the same graph produces `to` and `to` is
/// not an input or output itself). Returns false, changing nothing, when that is impossible.
bool replaceValue(Value* from, Value* to);

/// Adds `t` as an initializer named uniquely after `baseName`; returns its value.
Value* addInitializer(Graph& g, Tensor t, const std::string& baseName);

/// Removes n when none of its outputs is read or is a graph output; returns whether it did.
bool removeIfDead(Node* n);

/// Static dims of `v`'s type, or nullopt when rank or any dim is unknown or symbolic.
std::optional<std::vector<int64_t>> staticShape(const Value* v);

/// Whether inferred shapes inside `g` hold on every execution: false inside Loop and Scan bodies,
/// whose loop-carried values may change shape from one iteration to the next.
bool shapesAreStable(const Graph& g);

/// Whether `g` is (or is nested in) the body of a model-local function rather than the main graph.
bool isFunctionBody(const Graph& g, const Model& model);

/// Random and other nondeterministic ops (never folded, merged or duplicated).
bool isNondeterministic(const Node& n);

}  // namespace onnxtool
