// pass_manager.h: pipelines of passes as text, presets, and the manager that runs them over the
// main graph and every subgraph to a fixpoint, with the instruments every pass gets: verify after
// each pass, statistics and timing, a bisect limit on rewrites, disabling passes by name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ir.h"
#include "lib/shape_inference.h"
#include "passes/pass.h"

namespace onnxtool {

struct PipelineEntry {
  std::string name;
  std::map<std::string, std::string> options;  ///< every option of the pass, defaults filled in
};

/// A sequence of passes. Printing gives text that parses back to the same pipeline.
struct Pipeline {
  std::vector<PipelineEntry> passes;
  bool operator==(const Pipeline& o) const;
};

/// Parses `name,name{key=value,key=value},...` (whitespace allowed between items). Throws
/// Error(InvalidInput) for an unknown pass or option, or malformed text, naming the position.
Pipeline parsePipeline(std::string_view text);
std::string printPipeline(const Pipeline& p);

/// The preset pipelines: 0 nothing, 1 cleanup, 2 cleanup + folding (the default), 3 = 2 + fusions.
/// `fuse` adds the fusions to levels 1 and 2.
Pipeline presetPipeline(int level, bool fuse);
/// The fusion passes, in the order presets run them.
Pipeline fusionPipeline();

struct PassManagerOptions {
  int maxIterations = 8;        ///< the pipeline repeats until nothing changes, at most this often
  bool verifyEach = false;      ///< structural check + shape inference after every pass
  int64_t bisect = -1;          ///< stop after this many rewrites (negative: no limit)
  std::vector<std::string> disabled;  ///< pass names to skip
  /// Called after each pass ran over the model (all graphs) and changed something.
  std::function<void(const std::string& pass, int iteration, Model& model)> afterPass;
};

struct PassRunReport {
  /// Statistics per pass name, in pipeline order (a pass listed twice is summed).
  std::vector<std::pair<std::string, PassStats>> stats;
  int iterations = 0;
  int64_t rewrites = 0;
  bool bisectStopped = false;  ///< the budget ran out
  std::string lastRewrite;     ///< description of the last rewrite performed
  std::string lastRewritePass;
  /// Declarations (graph outputs, value_info, subgraph inputs) the computation contradicts, found
  /// by the inference that opens every non-empty pipeline; the model now declares `written`.
  std::vector<DeclarationConflict> declarationConflicts;
  int inferRuns = 0;          ///< shape inference runs between passes (the opening one included)
  double inferSeconds = 0;    ///< their time (not in any pass's `seconds`)
  /// The model's types are those of a shape inference run on the model as it is at the end (no
  /// pass changed it since), as `inferShapes(model)` would give them again.
  bool shapesFresh = false;
};

/// IR version 3 requires every initializer to be listed as a graph input too, so there a weight in
/// the inputs is no overridable default and no interface. Raises such a model to IR version 4
/// (otherwise identical) and drops those input entries, making the weights constants for the
/// passes (as onnx-simplifier does). Returns how many inputs were dropped; no-op for IR >= 4.
size_t promoteIr3Initializers(Model& model);

/// Runs `pipeline` over the model. A non-empty pipeline starts with shape inference, so that
/// passes read inferred types only and contradicted declarations are corrected (reported in
/// `declarationConflicts`) even when no pass reads shapes. Throws Error(Internal) naming the pass when --verify-each
/// finds a broken model, and Error(InvalidInput) for bad pass options.
PassRunReport runPipeline(Model& model, const Pipeline& pipeline, const PassManagerOptions& options = {});

}  // namespace onnxtool
