// executor.h: executors run models. `Executor::prepare(model) -> Plan`, `Plan::run(inputs)`.
// Executors are looked up by name ("ref"; "cpu" and "cuda" to come).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

struct PrepareOptions {
  /// Seed for random ops without their own seed attribute; unset means nondeterministic.
  std::optional<uint64_t> seed;
};

/// A prepared model. The Model must outlive the Plan (initializers are used in place).
class Plan {
 public:
  virtual ~Plan() = default;
  /// Runs the main graph. `inputs` maps graph input names to values; every graph input that is
  /// not also an initializer must be given. Checks dtype and rank/static dims of given inputs
  /// against the declared types and throws Error(InvalidInput) naming the input otherwise.
  /// Returns the graph outputs in order.
  virtual std::vector<RtValue> run(const std::map<std::string, RtValue>& inputs) = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  /// Resolves a kernel for every node; throws Error(Unsupported) naming the first node without one.
  virtual std::unique_ptr<Plan> prepare(const Model& model, const PrepareOptions& options) = 0;
};

/// The executor called `name`, or nullptr if this build has none by that name.
std::unique_ptr<Executor> makeExecutor(const std::string& name);

/// The names makeExecutor() knows in this build, for --help and usage errors.
std::vector<std::string> executorNames();

}  // namespace onnxtool
