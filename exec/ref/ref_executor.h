// ref_executor.h: the reference executor, and the parts of its machinery other executors use
// for what they leave to it: control-flow bodies, model-local function calls, initializer
// values and input checks.
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "exec/executor.h"
#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

/// The reference executor (`ref`): the spec's semantics for every operator.
std::unique_ptr<Executor> makeRefExecutor();

/// Runs subgraphs (If/Loop/Scan bodies) and model-local function calls of one model on the
/// reference kernels, for an executor that falls back to them. Constructing it resolves a
/// kernel for every node of the model (subgraphs and function bodies included) and prepares
/// every initializer, so it throws Error(Unsupported)/Error(InvalidInput) exactly where the
/// reference executor's prepare does. After construction it is read-only: several threads may
/// use it at once, each with its own generator. The model must outlive it.
class RefNodeRunner {
 public:
  /// Values of the enclosing graph a body reads (outer scope), or nullptr when unknown.
  using OuterLookup = std::function<const RtValue*(const Value*)>;

  /// `mainGraphInitializers` false: the caller keeps the main graph's initializer values itself
  /// (`cpu`), so none are made here and initializer() knows only those of subgraphs.
  explicit RefNodeRunner(const Model& model, bool mainGraphInitializers = true);
  ~RefNodeRunner();
  RefNodeRunner(const RefNodeRunner&) = delete;
  RefNodeRunner& operator=(const RefNodeRunner&) = delete;

  /// Runs `body` (a subgraph of the model) with its formal inputs bound to `inputs`.
  std::vector<RtValue> runSubgraph(const Graph& body, const std::vector<RtValue>& inputs, const OuterLookup& outer,
                                   std::mt19937_64& rng) const;
  /// Runs the model-local function `call` calls (nullptr inputs are omitted ones).
  std::vector<RtValue> callFunction(const Node& call, const std::vector<const RtValue*>& inputs,
                                    std::mt19937_64& rng) const;
  /// The run-time value of initializer `v` of the model (aligned; sparse ones densified).
  const RtValue& initializer(const Value* v) const;

  class Impl;  ///< the reference executor's plan machinery (ref_executor.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

/// The run-time value of initializer `v` (dense or sparse): its tensor viewed in place when its
/// bytes are aligned for the kernels, else an aligned copy (the mapped file pages it replaces are
/// dropped); sparse initializers densified.
RtValue runtimeInitializer(const Value* v);

/// Bytes of initializers runtimeInitializer() has copied for alignment in this process (tests:
/// kernels that read the model's bytes at any address must not cost a copy).
uint64_t initializerCopyBytes();

/// Checks a run-time value given for graph input `e` (on the host, kind, element type, rank and
/// static dims, data size); throws Error(InvalidInput) naming the input.
void checkGraphInput(const ValueInfoEntry& e, const RtValue& v);

}  // namespace onnxtool
