// opset_adapters.h: the adapters of opset conversion, one per (op, version step, direction),
// listed in passes/opset_adapters.def, and the step context they rewrite a node through.
// An adapter checks every precondition before it changes anything: it either rewrites and
// returns "", or returns the reason the node cannot take this step and leaves the graph as it was.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ir.h"

namespace onnxtool {

/// One version step of one node: from opset `from` to `to` (adjacent schema versions).
class AdaptStep {
 public:
  AdaptStep(Graph& g, Node* n, int64_t from, int64_t to, bool inFunction)
      : g(g), n(n), from(from), to(to), inFunction_(inFunction) {}
  Graph& g;
  Node* n;
  int64_t from, to;
  /// Nodes the adapter created (besides n), expressed at opset `to`; the driver converts them on.
  std::vector<Node*> created;
  bool removed = false;  ///< n was replaced and removed

  /// A constant input: an initializer, or a Constant node before n inside function bodies
  /// (functions hold no initializers).
  Value* constant(Tensor t, const std::string& base);
  Value* constInts(const std::vector<int64_t>& v, const std::string& base, bool scalar = false);
  /// A scalar (rank 0) of `dtype` holding `x` (float types and int32/int64/int8/uint8).
  Value* constScalar(DType dtype, double x, const std::string& base);
  /// Adds a node before n (recorded in `created`), outputs named uniquely after n's name.
  Node* add(const std::string& op, const std::vector<Value*>& inputs, int outputs = 1);
  /// Replaces n: every reader of n's output i reads outs[i] instead, which takes over its name
  /// (graph outputs, value_info and subgraph reads included); n is removed.
  void replaceWith(const std::vector<Value*>& outs);
  /// Replaces n by one node of `op` with the same name, inputs `inputs` and n's attributes
  /// except those in `drop`; returns it.
  Node* replaceWithOp(const std::string& op, const std::vector<Value*>& inputs,
                      const std::vector<std::string>& drop = {});

 private:
  bool inFunction_;
};

/// "" when fine, else why the node cannot take the step.
using AdapterFn = std::string (*)(AdaptStep&);

enum class AdaptDirection { Up, Down };

struct AdapterInfo {
  std::string_view op;         ///< ai.onnx op type
  int version;                 ///< the newer side of the step (the since_version of its schema)
  AdaptDirection direction;    ///< Up: version-1 side -> version; Down: version -> version-1 side
  AdapterFn fn;
  std::string_view summary;
};

/// Whether the step also needs the generic check after the adapter: adapters that only normalise
/// part of a node (negative axes below 11) leave the rest of the step (new attributes such as
/// TopK's largest) to it.
bool runsGenericAfter(const AdapterInfo& a);

/// Every adapter, in opset_adapters.def order.
std::span<const AdapterInfo> allAdapters();
/// The adapter of op's step at `version` in `direction`, or nullptr.
const AdapterInfo* findAdapter(std::string_view op, int version, AdaptDirection direction);

}  // namespace onnxtool
