// optimize.cpp: `onnxtool optimize`: run a pass pipeline (a preset, --fuse, or --passes text) over
// a model and save it; print what changed; with --verify, prove the outputs are unchanged on the
// reference executor and name the first pass that changed them.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/common.h"
#include "exec/executor.h"
#include "exec/value_ops.h"
#include "formats/model_io.h"
#include "formats/onnx_text.h"
#include "lib/error.h"
#include "lib/input_shapes.h"
#include "passes/pass_manager.h"

namespace onnxtool::app {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct OptimizeOptions : InputOptions {
  std::string input;
  std::string output;
  int level = 2;
  bool fuse = false;
  std::string passes;
  bool printPipeline = false;
  bool listPasses = false;
  bool verify = false;
  bool verifyEach = false;
  bool stats = false;
  bool json = false;
  int64_t bisect = -1;
  std::vector<std::string> disabled;
  int maxIterations = 8;
  double rtol = 1e-4, atol = 1e-5;
  std::vector<std::string> fixShapes;  // --shape NAME=DIMS applied to the model
  std::string to;                      // --to onnx|text; "" infers from the output name
  std::vector<std::string> printAfter;  // --print-after NAME
  bool levelGiven = false;              // -O was on the command line
  bool keepFailed = false;              // --keep-failed
  bool allowNewerOpset = false;
  int64_t foldSizeLimit = -1;           // --fold-size-limit BYTES; <0: each pass's own option
  int64_t opset = 0;                    // --opset N: convert first
};

bool quiet() { return spdlog::get_level() >= spdlog::level::err; }

struct Summary {
  std::map<std::string, int64_t> ops;
  int64_t nodes = 0;
  uint64_t initializerBytes = 0;
  uint64_t fileSize = 0;
};

void countGraph(const Graph& g, Summary& s) {
  for (const auto& n : g.nodes()) {
    s.nodes++;
    s.ops[n->domain.empty() || n->domain == "ai.onnx" ? n->opType : n->domain + "." + n->opType]++;
    for (Graph* sub : n->subgraphs()) countGraph(*sub, s);
  }
  for (Value* v : g.initializers()) s.initializerBytes += v->initializer()->raw.size();
}

Summary summarize(const Model& m) {
  Summary s;
  countGraph(*m.graph, s);
  return s;
}

json summaryJson(const Summary& s) {
  json ops = json::object();
  for (const auto& [k, v] : s.ops) ops[k] = v;
  return {{"nodes", s.nodes}, {"initializer_bytes", s.initializerBytes}, {"file_size", s.fileSize}, {"ops", ops}};
}

void printTable(const Summary& a, const Summary& b) {
  std::map<std::string, std::pair<int64_t, int64_t>> rows;
  for (const auto& [k, v] : a.ops) rows[k].first = v;
  for (const auto& [k, v] : b.ops) rows[k].second = v;
  size_t w = 18;
  for (const auto& [k, v] : rows) w = std::max(w, k.size());
  std::string out = fmt::format("{:<{}} {:>12} {:>12}\n", "", w, "before", "after");
  for (const auto& [k, v] : rows)
    out += fmt::format("{:<{}} {:>12} {:>12}{}\n", k, w, v.first, v.second, v.first != v.second ? "  *" : "");
  out += fmt::format("{:<{}} {:>12} {:>12}\n", "nodes", w, a.nodes, b.nodes);
  out += fmt::format("{:<{}} {:>12} {:>12}\n", "initializer bytes", w, a.initializerBytes, b.initializerBytes);
  out += fmt::format("{:<{}} {:>12} {:>12}\n", "file size", w, a.fileSize, b.fileSize);
  std::fputs(out.c_str(), stderr);
}

/// One input set of --verify with the input model's outputs on it.
struct VerifySet {
  std::string what;  ///< "symbolic dims 3"
  std::map<std::string, RtValue> feeds;
  std::vector<RtValue> expected;
};

bool hasSymbolicInput(const Graph& g) {
  for (const ValueInfoEntry* e : feedableInputs(g))
    if (e->type().isTensor() && e->type().shape.hasRank)
      for (const Dim& d : e->type().shape.dims)
        if (!d.isValue()) return true;
  return false;
}

/// Runs the main graph on the reference executor.
std::vector<RtValue> runRef(const Model& m, const std::map<std::string, RtValue>& feeds) {
  auto exec = makeExecutor("ref");
  PrepareOptions po;
  po.seed = 0;
  return exec->prepare(m, po)->run(feeds);
}

/// Compares outputs; returns "" when equal within tolerance, else the first difference.
std::string differs(const Model& m, const std::vector<RtValue>& got, const std::vector<RtValue>& want, double rtol,
                    double atol, double* maxAbs) {
  if (got.size() != want.size()) return fmt::format("{} outputs instead of {}", got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CompareResult r = compareValues(got[i], want[i], rtol, atol);
    if (maxAbs) *maxAbs = std::max(*maxAbs, r.maxAbsError);
    if (!r.ok) {
      const Value* v = m.graph->outputs()[i].value;
      return fmt::format("output '{}': {}", v ? v->name() : std::to_string(i), r.message);
    }
  }
  return {};
}

int runOptimize(const OptimizeOptions& o) {
  if (o.listPasses) {
    size_t w = 0;
    for (const PassInfo& p : allPasses()) w = std::max(w, p.name.size());
    for (const PassInfo& p : allPasses()) {
      if (!findPass(p.name)) continue;  // test-only passes, hidden
      std::string opts = p.options.empty() ? "" : fmt::format(" {{{}}}", p.options);
      std::printf("%s\n", fmt::format("{:<{}}  {}{}", p.name, w, p.summary, opts).c_str());
    }
    return kOk;
  }
  if (!o.passes.empty() && o.levelGiven)
    fail(ErrorKind::InvalidInput, "--passes and -O{} exclude each other: --passes gives the whole pipeline", o.level);
  Pipeline pipeline = o.passes.empty() ? presetPipeline(o.level, o.fuse) : parsePipeline(o.passes);
  if (!o.passes.empty() && o.fuse) {
    Pipeline f = fusionPipeline();
    pipeline.passes.insert(pipeline.passes.end(), f.passes.begin(), f.passes.end());
  }
  if (o.foldSizeLimit >= 0) {
    // One knob for every fold-constants instance of the preset or --passes text: onnx-simplifier
    // and onnxslim materialise large constants (a ConstantOfShape weight becomes its bytes); we
    // refuse to grow the model past 1 MiB per folded value unless asked.
    for (PipelineEntry& e : pipeline.passes)
      if (e.name == "fold-constants") e.options["size-limit"] = std::to_string(o.foldSizeLimit);
  }
  if (o.printPipeline) {
    std::printf("%s\n", printPipeline(pipeline).c_str());
    // Without -o there is nothing to write: the pipeline was the answer (a MODEL given beside it
    // used to reach the writer with an empty output name).
    if (o.input.empty() || o.output.empty()) return kOk;
  }
  if (o.input.empty()) fail(ErrorKind::InvalidInput, "optimize: MODEL is required");
  if (o.output.empty() && !o.printPipeline) fail(ErrorKind::InvalidInput, "optimize: -o OUTPUT is required");

  auto specs = parseInputShapes(o.fixShapes);
  auto model = loadModel(o.input);
  if (!model->graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", o.input);
  requireKnownOpsets(*model, o.allowNewerOpset);
  applyInputShapes(*model, specs);
  const ModelValidity inputValidity = validityOf(*model);
  Summary before = summarize(*model);
  before.fileSize = model->fileSize;
  // The culprit search of a failed --verify starts again from the input: keep a copy of a model
  // that came from standard input (a file is loaded again).
  std::string stdinCopy;
  if (o.verify && o.input == "-") stdinCopy = serializeModel(*model);

  // --verify: reference outputs of the input model first (the passes rewrite it in place), on
  // two input sets: symbolic dims 1 (with the -i files), and symbolic dims 3, since a folding
  // that wrongly fixes a dim to 1 is invisible at 1.
  std::vector<VerifySet> sets;
  if (o.verify) {
    for (int64_t size : {int64_t{1}, int64_t{3}}) {
      ModelInputOptions in = modelInputOptions(o);
      in.random = true;
      in.symbolicDim = size;
      if (size != 1) {
        in.files.clear();
        in.testDataDir.clear();
        if (!hasSymbolicInput(*model->graph)) break;
        in.seed += 1;
      }
      VerifySet set;
      set.feeds = gatherModelInputs(*model->graph, in);
      try {
        set.expected = runRef(*model, set.feeds);
      } catch (const Error& e) {
        if (size == 1) throw;
        spdlog::info("--verify: the input model does not run with symbolic dims of {} ({}); checking size 1 only", size,
                     e.what());
        break;
      }
      set.what = size == 1 ? "symbolic dims 1" : fmt::format("symbolic dims {}", size);
      sets.push_back(std::move(set));
    }
  }

  if (!pipeline.passes.empty()) {
    if (size_t n = promoteIr3Initializers(*model))
      spdlog::info("IR version 3 model: raised to IR version 4; {} weights are no longer listed as inputs", n);
  }
  if (o.opset != 0) {
    // Convert first, so that fusions needing newer standard ops apply to older exports.
    if (int rc = convertModelOpset(*model, o.opset, {}, false); rc != kOk) return rc;
  }
  PassManagerOptions pm;
  pm.maxIterations = o.maxIterations;
  pm.verifyEach = o.verifyEach;
  pm.bisect = o.bisect;
  pm.disabled = o.disabled;
  for (const std::string& p : o.printAfter)
    if (p != "all" && !findPass(p)) fail(ErrorKind::InvalidInput, "--print-after {}: no such pass (see --list-passes)", p);
  if (!o.printAfter.empty()) {
    pm.afterPass = [&o](const std::string& pass, int iteration, Model& m) {
      bool wanted = false;
      for (const std::string& p : o.printAfter) wanted |= p == pass || p == "all";
      if (!wanted) return;
      TextPrintOptions tp;
      tp.elideTensorsOver = 16;
      std::string text = printGraphText(*m.graph, tp);
      fmt::print(stderr, "// ----- after {} (iteration {})\n{}\n", pass, iteration + 1, text);
    };
  }
  PassRunReport report = runPipeline(*model, pipeline, pm);
  for (const DeclarationConflict& d : report.declarationConflicts) spdlog::warn("{}", d.message());
  if (report.bisectStopped) {
    if (report.lastRewrite.empty())
      spdlog::warn("--bisect {}: stopped before the first rewrite", o.bisect);
    else
      spdlog::warn("--bisect {}: stopped after {} rewrites; the last: {} (pass {})", o.bisect, report.rewrites,
                   report.lastRewrite, report.lastRewritePass);
  }

  int rc = kOk;
  json verifyJson;
  bool verifyFailed = false;
  if (o.verify) {
    double maxAbs = 0;
    std::string diff;
    for (const VerifySet& set : sets) {
      std::vector<RtValue> got;
      try {
        got = runRef(*model, set.feeds);
      } catch (const Error& e) {
        diff = fmt::format("the optimized model fails to run with {}: {}", set.what, e.what());
        break;
      }
      diff = differs(*model, got, set.expected, o.rtol, o.atol, &maxAbs);
      if (!diff.empty()) {
        diff += fmt::format(" (with {})", set.what);
        break;
      }
    }
    json setsJson = json::array();
    for (const VerifySet& set : sets) setsJson.push_back(set.what);
    verifyJson = {{"ok", diff.empty()}, {"max_abs_error", maxAbs}, {"rtol", o.rtol}, {"atol", o.atol},
                  {"input_sets", setsJson}};
    if (diff.empty() && !quiet())
      fmt::print(stderr, "verify: outputs equal on {} input set{} ({}; max abs diff {:.2g})\n", sets.size(),
                 sets.size() == 1 ? "" : "s", fmt::join(setsJson, ", "), maxAbs);
    if (!diff.empty()) {
      // Re-run from the input, checking after every pass, to name the first one that changed outputs.
      auto fresh = stdinCopy.empty() ? loadModel(o.input) : loadModelFromBytes(stdinCopy, ".", "<stdin>");
      applyInputShapes(*fresh, specs);
      promoteIr3Initializers(*fresh);
      std::string culprit;
      PassManagerOptions again = pm;
      again.afterPass = [&](const std::string& pass, int iteration, Model& m) {
        if (!culprit.empty()) return;
        std::string d;
        for (const VerifySet& set : sets) {
          try {
            d = differs(m, runRef(m, set.feeds), set.expected, o.rtol, o.atol, nullptr);
          } catch (const Error& e) {
            d = e.what();
          }
          if (!d.empty()) break;
        }
        if (!d.empty()) {
          culprit = fmt::format("{} (iteration {})", pass, iteration + 1);
          throw Error(ErrorKind::Internal, "stop");
        }
      };
      try {
        runPipeline(*fresh, pipeline, again);
      } catch (const Error&) {
        if (culprit.empty()) throw;
      }
      verifyJson["first_differing_pass"] = culprit;
      fmt::print(stderr, "onnxtool: --verify: outputs differ after optimization: {}; first pass that changed them: {}{}\n",
                 diff, culprit.empty() ? "not found" : culprit,
                 o.keepFailed ? "" : "; nothing was written (--keep-failed writes it anyway)");
      rc = kFinding;
      verifyFailed = true;
    }
  }

  Summary after = summarize(*model);
  bool written = !verifyFailed || o.keepFailed;
  if (written) requireValidOutput(*model, inputValidity, "optimize");
  if (written && (o.to == "text" || (o.to.empty() && isTextModelPath(o.output)))) {
    after.fileSize = saveModelText(*model, o.output);
  } else if (written) {
    SaveOptions save;
    after.fileSize = saveModel(*model, o.output, save);
  }

  if (o.json) {
    json passes = json::array();
    for (const auto& [name, s] : report.stats) {
      json counters = json::object();
      for (const auto& [k, v] : s.counters) counters[k] = v;
      passes.push_back({{"name", name}, {"rewrites", s.rewrites}, {"seconds", s.seconds}, {"counters", counters}});
    }
    json doc{{"schema_version", 1},         {"model", o.input},
             {"output", written ? json(o.output) : json(nullptr)}, {"pipeline", printPipeline(pipeline)},
             {"iterations", report.iterations}, {"rewrites", report.rewrites},
             {"before", summaryJson(before)}, {"after", summaryJson(after)},
             {"passes", passes}};
    if (report.bisectStopped) doc["bisect"] = {{"limit", o.bisect}, {"last_rewrite", report.lastRewrite}, {"pass", report.lastRewritePass}};
    if (o.verify) doc["verify"] = verifyJson;
    // stdout carries the model when -o -; the JSON then goes to stderr.
    std::FILE* out = o.output == "-" ? stderr : stdout;
    std::fputs((doc.dump(2) + "\n").c_str(), out);
  } else if (!quiet()) {
    printTable(before, after);
  }
  if (o.stats && !quiet()) {
    std::string s = fmt::format("{:<34} {:>9} {:>10}  counters\n", "pass", "rewrites", "ms");
    for (const auto& [name, st] : report.stats) {
      std::string counters;
      for (const auto& [k, v] : st.counters) counters += fmt::format(" {}={}", k, v);
      s += fmt::format("{:<34} {:>9} {:>10.2f} {}\n", name, st.rewrites, st.seconds * 1e3, counters);
    }
    s += fmt::format("{} iteration(s), {} rewrites\n", report.iterations, report.rewrites);
    std::fputs(s.c_str(), stderr);
  }
  return rc;
}

}  // namespace

std::function<int()> addOptimize(CLI::App& app) {
  auto o = std::make_shared<OptimizeOptions>();
  CLI::App* sub = app.add_subcommand("optimize", "Simplify and fuse a model with a pipeline of graph passes");
  sub->add_option("MODEL", o->input, "Input model (.onnx, .onnxtxt for the textual syntax, - for stdin)");
  sub->add_option("-o,--output", o->output, "Output model (- for stdout)");
  sub->add_option("--to", o->to, "Output format: onnx or text (ONNX textual syntax); default: text when OUTPUT ends in .onnxtxt")
      ->check(CLI::IsMember({"onnx", "text"}));
  CLI::Option* levelOpt =
      sub->add_option("-O", o->level, "Preset: -O0 nothing, -O1 cleanup, -O2 cleanup + folding (default), -O3 adds fusions")
          ->check(CLI::Range(0, 3));
  sub->add_flag("--fuse", o->fuse, "Add the fusion passes (standard ONNX ops only) to the preset or --passes");
  sub->add_option("--passes", o->passes,
                  "Pipeline text instead of a preset (not with -O): 'fold-constants,fuse-conv-bn{key=value}'");
  sub->add_flag("--print-pipeline", o->printPipeline, "Print the expanded pipeline (valid --passes text) to stdout");
  sub->add_flag("--list-passes", o->listPasses, "List every pass with a one-line summary and its options");
  sub->add_option("--disable", o->disabled, "Skip pass NAME (repeatable)")->type_name("NAME")->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--max-iterations", o->maxIterations, "Repeat the pipeline until nothing changes, at most N times (default 8)")
      ->check(CLI::Range(1, 1000000));
  sub->add_flag("--verify-each", o->verifyEach, "Check the model structurally and infer shapes after every pass");
  sub->add_option("--print-after", o->printAfter,
                  "Print the graph as text to stderr after each run of pass NAME that changed it ('all': every pass; "
                  "tensors over 16 elements elided)")
      ->type_name("NAME")->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("--stats", o->stats, "Print rewrites, time and counters per pass to stderr");
  sub->add_option("--bisect", o->bisect, "Stop after N rewrites (find the rewrite that breaks a model; 0: before the first)")
      ->check(nonNegative());
  sub->add_flag("--verify", o->verify,
                "Run the input and output models on the reference executor (random or -i inputs, symbolic dims 1, "
                "then random inputs with symbolic dims 3); exit 1 if dtypes, shapes or values differ, naming the "
                "first pass that changed the outputs, and write nothing");
  sub->add_flag("--keep-failed", o->keepFailed, "With --verify: write the output even when verification fails");
  sub->add_option("-i,--input", o->inputs, "With --verify: input FILE or NAME=FILE (.npy, .pb, .npz, .json)")
      ->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--seed", o->seed, "With --verify: seed of the random inputs (default 0)")->check(nonNegative());
  sub->add_option("--rtol", o->rtol, "With --verify: relative tolerance (default 1e-4)")->check(nonNegative());
  sub->add_option("--atol", o->atol, "With --verify: absolute tolerance (default 1e-5)")->check(nonNegative());
  sub->add_option("--fold-size-limit", o->foldSizeLimit,
                  "Largest folded constant (bytes) that may grow the model, for every fold-constants in the "
                  "pipeline (default 1048576; 0: never grow it)")
      ->type_name("BYTES")->check(nonNegative());
  addShapeOption(sub, o->fixShapes);
  addAllowNewerOpsetOption(sub, o->allowNewerOpset);
  sub->add_option("--opset", o->opset,
                  "Convert the model to ai.onnx opset N first (as convert --opset), then run the pipeline; exit 1 "
                  "naming the nodes that cannot move")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  sub->add_flag("--json", o->json,
                "Print the before/after summary and per-pass statistics as JSON to stdout (to stderr when -o - puts "
                "the model on stdout)");
  sub->footer("Exit codes: 0 success, 1 --verify found different outputs or --opset cannot convert a node, 2 invalid input or usage error, 3 unsupported, 4 internal error (--verify-each).");
  return [o, levelOpt] {
    OptimizeOptions opts = *o;
    opts.levelGiven = levelOpt->count() > 0;
    return runOptimize(opts);
  };
}

}  // namespace onnxtool::app
