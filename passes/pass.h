// pass.h: what a graph pass is and what it sees. A pass is a name (passes/passes.def) and one
// `run(Graph&, PassContext&)` that reports whether it changed the graph. The pass manager
// (passes/pass_manager.h) runs passes on the main graph and every subgraph, so passes never
// recurse into If/Loop/Scan bodies themselves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ir.h"

namespace onnxtool {

/// Options of one pass instance (`fold-constants{size-limit=1024}`), with the defaults from
/// passes.def filled in. Values are strings; typed getters throw Error(InvalidInput) naming the
/// pass and key when a value does not parse.
class PassOptions {
 public:
  PassOptions() = default;
  PassOptions(std::string passName, std::map<std::string, std::string> values)
      : pass_(std::move(passName)), values_(std::move(values)) {}
  const std::map<std::string, std::string>& values() const { return values_; }
  std::string getString(const std::string& key) const;
  int64_t getInt(const std::string& key) const;
  double getDouble(const std::string& key) const;
  bool getBool(const std::string& key) const;

 private:
  std::string pass_;
  std::map<std::string, std::string> values_;
};

/// Per-pass statistics collected by the manager (`--stats`).
struct PassStats {
  int64_t runs = 0;       ///< graph visits
  int64_t rewrites = 0;   ///< rewrites performed (tryRewrite calls granted)
  double seconds = 0;
  std::map<std::string, int64_t> counters;  ///< pass-specific: "skipped-too-large", ...
};

/// What a pass sees besides the graph: the model (opsets), the rewrite budget (`--bisect`), and
/// counters for --stats. One context per pass invocation.
class PassContext {
 public:
  PassContext(Model& model, PassStats& stats, int64_t* rewriteBudget, std::string* lastRewrite)
      : model_(model), stats_(stats), budget_(rewriteBudget), lastRewrite_(lastRewrite) {}
  Model& model() { return model_; }
  /// The opset version of `domain` the model imports (0 when not imported).
  int64_t opset(std::string_view domain = "") const { return model_.opsetVersion(domain).value_or(0); }
  /// Every rewrite asks first. False when the --bisect budget is spent: the pass must then leave
  /// the graph as it is. `what` describes the rewrite ("fuse Conv 'c1' + BatchNormalization 'bn1'").
  bool tryRewrite(const std::string& what);
  /// Adds to a pass-specific counter shown by --stats.
  void count(const std::string& counter, int64_t n = 1) { stats_.counters[counter] += n; }
  /// A pass that ran shape inference over the whole model says so: if it then changed nothing,
  /// the types are fresh and the next pass that needs them does not infer again.
  void noteShapesInferred() { shapesInferred_ = true; }
  bool shapesInferred() const { return shapesInferred_; }

 private:
  bool shapesInferred_ = false;
  Model& model_;
  PassStats& stats_;
  int64_t* budget_;  ///< remaining rewrites, negative = unlimited
  std::string* lastRewrite_;
};

class Pass {
 public:
  virtual ~Pass() = default;
  /// Rewrites `g` (one graph; subgraphs are visited separately). Returns true when it changed
  /// anything. Must leave the model valid for its opset and never remove or rename a graph
  /// output or input.
  virtual bool run(Graph& g, PassContext& ctx) = 0;
  /// Passes that read value types (Value::type()) ask the manager to infer shapes first.
  virtual bool needsShapes() const { return false; }
};

/// One entry of passes/passes.def.
struct PassInfo {
  std::string_view name;     ///< kebab-case CLI name
  std::string_view summary;  ///< one line for --list-passes
  /// Options with defaults, "key=value;key=value" (empty: none).
  std::string_view options;
  std::unique_ptr<Pass> (*create)(const PassOptions&);
};

/// Every pass, in passes.def order.
const std::vector<PassInfo>& allPasses();
/// The pass called `name`, or nullptr.
const PassInfo* findPass(std::string_view name);

}  // namespace onnxtool
