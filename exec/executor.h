// executor.h: executors run models. `Executor::prepare(model) -> Plan`, `Plan::run(inputs)`.
// Executors are looked up by name in the table of exec/executor.cpp ("ref", "cpu"; "cuda" to come).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

struct PrepareOptions {
  /// Seed for random ops without their own seed attribute; unset means nondeterministic.
  std::optional<uint64_t> seed;
  /// Intra-op threads for executors that use them (`cpu`); 0 means the number of cores.
  int threads = 0;
  /// `cpu`: the optimizer preset (passes/pass_manager.h presetPipeline: 0 none, 1 cleanup,
  /// 2 + folding, 3 + fusions) each plan specialisation runs on its own clone of the model, with
  /// the concrete input shapes fixed, before choosing kernels (as ONNX Runtime optimises at
  /// session creation); the caller's model is never touched. `ref` runs the graph as written.
  int graphOptLevel = 3;
  /// `cuda`: how float32 values are stored and multiplied: "fp32", "tf32" (float32 storage,
  /// TF32 tensor cores for MatMul/Gemm/Conv), "fp16" or "bf16" (half-precision storage and
  /// inputs of the matrix units, float32 accumulation, Softmax/LayerNorm/reductions in float32).
  /// The other executors compute float32 and accept "fp32" only.
  std::string precision = "fp32";
  /// `cuda`: capture a run's kernels into a CUDA graph once and replay it (fewer launches);
  /// false launches every kernel every run.
  bool deviceGraph = true;
};

/// What ran for one node of the main graph in one run, for `bench --profile` and `run -v`.
struct NodeRun {
  std::string node;    ///< display name
  std::string opType;
  std::string kernel;  ///< "cpu.conv.f32.im2col", "ref.add", "ref.loop (subgraphs on ref)"
  bool fallback = false;  ///< ran on the reference kernel for want of a fast one
  double seconds = 0;
  double flops = 0;       ///< 0 when not counted
  int graphNodes = 1;     ///< nodes of the graph this entry ran (> 1: the executor fused them)
};

struct RunProfile {
  std::vector<NodeRun> nodes;  ///< in execution order
  /// Executors on a device (`cuda`): seconds of copying the inputs to it and the outputs back
  /// (also counted in the run's time, in no node's); 0 elsewhere.
  double copyInSeconds = 0, copyOutSeconds = 0;
};

/// A prepared model. The Model must outlive the Plan (initializers are used in place).
class Plan {
 public:
  virtual ~Plan() = default;
  /// Runs the main graph. `inputs` maps graph input names to values; every graph input that is
  /// not also an initializer must be given. Checks that given tensors are on the host
  /// (RtTensor::device), and their dtype and rank/static dims against the declared types, and
  /// throws Error(InvalidInput) naming the input otherwise. Returns the graph outputs in order,
  /// as host tensors.
  virtual std::vector<RtValue> run(const std::map<std::string, RtValue>& inputs) = 0;
  /// run() that also records, per node, the kernel that ran and its time. Executors without
  /// per-node profiling leave `profile` empty.
  virtual std::vector<RtValue> runProfiled(const std::map<std::string, RtValue>& inputs, RunProfile& profile) {
    profile.nodes.clear();
    return run(inputs);
  }
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

/// The device an executor runs on, as key/value pairs for `bench` ("name", "driver", ...; an
/// "error" entry alone when it has none usable); empty for executors on this CPU.
std::vector<std::pair<std::string, std::string>> executorDevice(const std::string& executor);

}  // namespace onnxtool
