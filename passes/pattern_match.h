// pattern_match.h: small matchers shared by the pattern fusions (fuse-layer-norm, fuse-gelu,
// fuse-rms-norm, fuse-attention, fuse-hard-sigmoid, fuse-hard-swish, fuse-softmax): commutative
// operands, scalar constants compared with a tolerance, reduction axes in either spelling, and
// the naming and replacement steps every such fusion ends with.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/ir.h"
#include "passes/pass.h"

namespace onnxtool {

/// Whether constant `v` (initializer or Constant node) has exactly one element close to `x`
/// (relative tolerance 1e-6, absolute 1e-12 near zero): exporters round constants like sqrt(2)
/// to float, so exact comparison would miss them.
bool isNearScalar(const Value* v, double x);
/// The single element of constant `v`, or nullopt when `v` is not a one-element numeric constant.
std::optional<double> scalarOf(const Value* v);

/// The only node reading `v`, or nullptr when `v` has no or several readers or is a graph output.
Node* soleUser(const Value* v);
/// For a binary node `n` (Add, Mul, ...) with `v` as one operand: the other operand, else nullptr.
/// With `v` as both operands returns `v`.
Value* otherOperand(const Node* n, const Value* v);
/// For a commutative binary node `n` with a one-element constant operand near `c`: the other operand.
Value* operandBesideScalar(const Node* n, double c);

/// The axes of a Reduce* node (attribute before opset 18, or 13 for ReduceSum; input after), or
/// nullopt when they are not known constants or keepdims is 0.
std::optional<std::vector<int64_t>> reduceAxesKeepDims(const Node& n, int64_t opset);
/// When `axes` are the last axes of a tensor of `rank` (-1 when unknown: then they must be
/// negative), the number of trailing axes they cover; else 0.
int trailingAxesCount(std::vector<int64_t> axes, int64_t rank);

/// The bounds of a Clip node (attributes before opset 11, constant inputs after; a missing bound
/// is -inf/+inf), or false when a bound is not a known scalar.
bool clipBounds(const Node& clip, int64_t opset, double& lo, double& hi);
/// Whether `n` is Clip(x + 3, 0, 6), PyTorch's Relu6(x + 3) of hardsigmoid/hardswish, with the Add
/// read only by the Clip; returns x, or nullptr.
Value* matchRelu6OfXPlus3(const Node& n, int64_t opset);
/// Whether `n` starts a decomposed HardSwish: `n` is HardSigmoid<alpha=1/6, beta=0.5>(x) read
/// only by Mul(x, it), or the Clip of Relu6(x + 3) (matchRelu6OfXPlus3) in Div(Mul(x, r), 6) or
/// Mul(x, Div(r, 6)) (* 1/6 for / 6), each intermediate read only by the next node. Returns x
/// and sets `pattern` to the nodes in order (the Add first, when there is one; the node whose
/// output is HardSwish(x) last), or nullptr.
Value* matchHardSwish(const Node& n, int64_t opset, std::vector<Node*>& pattern);

/// Whether two dims are known to be equal (the same value, or the same symbol not invented by
/// shape inference).
bool sameDim(const Dim& a, const Dim& b);
/// The rank of `v`'s inferred tensor type, or -1.
int64_t rankOf(const Value* v);
/// Whether `v`'s inferred element type is one of the IEEE float types (float16/32/64, bfloat16).
bool isFloatTensor(const Value* v);

/// Whether `out` (a pattern's result) has x's element type and rank and no static dim differing
/// from x's: an element-wise fusion's op returns x's shape, while a constant of higher rank
/// ([1, 1, 1] as "0.5") would have broadcast the pattern's result to more dims.
bool keepsShapeOf(const Value* out, const Value* x);

/// A node name for a fusion result traceable to the pattern's first node: its scope
/// ("/enc/ln/ReduceMean" -> "/enc/ln/LayerNormalization") or its name ("m0" -> "m0/LayerNormalization"),
/// made unique among the nodes of `g`.
std::string fusedNodeName(const Graph& g, const Node& first, const std::string& op);

/// Adds node `op` to `g` before `last` (the pattern's last node), named after `first`, whose one
/// output replaces `last`'s first output (keeping a graph output's name). Returns the new node,
/// or nullptr (graph unchanged) when the output cannot be replaced.
Node* replaceWithNode(Graph& g, Node& first, Node& last, const std::string& op, const std::vector<Value*>& inputs);

/// Whether every node of a matched pattern belongs to `g`: a pattern reaching into an enclosing
/// graph (a subgraph reading outer values) is left alone, since a pass rewrites one graph.
bool allInGraph(const std::vector<Node*>& nodes, const Graph& g);

/// Removes the nodes of a matched pattern that nothing reads any more, last first.
void removeDeadPattern(const std::vector<Node*>& nodes);

}  // namespace onnxtool
