// run.cpp: `onnxtool run`: run a model on given, test-layout or random inputs; print, save or
// compare the outputs.
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/common.h"
#include "exec/executor.h"
#include "exec/value_ops.h"
#include "formats/atomic_file.h"
#include "formats/model_io.h"
#include "formats/tensor_files.h"
#include "formats/value_files.h"
#include "lib/error.h"
#include "lib/input_shapes.h"

namespace onnxtool::app {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct RunOptions : InputOptions {
  std::string model;
  std::vector<std::string> shapes;  // --shape NAME=DIMS
  bool allowNewerOpset = false;
  std::string outputDir;
  std::string outputFormat = "npy";
  std::string compareDir;
  double rtol = 1e-4, atol = 1e-5;
  std::string executor;  ///< empty: cpu, or cuda with --device cuda
  DeviceOptions device;
  int graphOpt = 3;
  bool json = false;
};

std::string fileSafe(const std::string& name) {
  std::string s;
  // ':' kept: exporters name values "onnx::Shape_2464", and a file named so is what a caller
  // looks up by the output's name
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':') ? c : '_';
  if (s.empty() || s == "." || s == "..") s = "output";
  return s;
}

}  // namespace

namespace {

std::string shapeStr(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : ",") + std::to_string(d);
  return "[" + s + "]";
}

json summaryJson(const std::string& name, const RtValue& v) {
  json j{{"name", name}};
  if (v.isTensor()) {
    const RtTensor& t = *v.tensor;
    j["dtype"] = std::string(dtypeName(t.dtype()));
    j["shape"] = t.dims;
    TensorStats s = tensorStats(t);
    if (t.dtype() != DType::String) {
      j["min"] = s.min;
      j["max"] = s.max;
      j["mean"] = s.mean;
      j["nan_count"] = s.nanCount;
      j["inf_count"] = s.infCount;
    }
    json first = json::array();
    if (t.dtype() == DType::String) {
      for (size_t i = 0; i < s.first.size() && i < t.strings.size(); ++i) first.push_back(t.strings[i]);
    } else if (t.dtype() == DType::Bool) {
      for (double x : s.firstValues) first.push_back(x != 0);
    } else if (dtypeIsFloat(t.dtype())) {
      for (double x : s.firstValues) first.push_back(x);  // NaN and infinities print as null
    } else {
      for (double x : s.firstValues) first.push_back(static_cast<int64_t>(x));
    }
    j["first"] = first;
  } else {
    j["kind"] = v.kind == RtValue::Kind::Sequence ? "sequence" : v.kind == RtValue::Kind::Optional ? "optional" : "map";
    j["elements"] = v.elements.size();
  }
  return j;
}

std::string summaryLine(const std::string& name, const RtValue& v) {
  if (!v.isTensor())
    return fmt::format("{}: {} of {} elements", name, v.kind == RtValue::Kind::Sequence ? "sequence" : "optional", v.elements.size());
  const RtTensor& t = *v.tensor;
  TensorStats s = tensorStats(t);
  std::string first;
  for (const auto& f : s.first) first += (first.empty() ? "" : ", ") + f;
  if (t.dtype() == DType::String) return fmt::format("{}: string {} [{}]", name, shapeStr(t.dims), first);
  return fmt::format("{}: {} {} min {:.6g} max {:.6g} mean {:.6g}{} [{}{}]", name, dtypeName(t.dtype()), shapeStr(t.dims),
                     s.min, s.max, s.mean, s.nanCount ? fmt::format(" ({} NaN)", s.nanCount) : "", first,
                     t.numElements().value_or(0) > static_cast<int64_t>(s.first.size()) ? ", ..." : "");
}

int runRun(const RunOptions& o) {
  auto specs = parseInputShapes(o.shapes);
  auto model = loadModel(o.model);
  if (!model->graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", o.model);
  requireKnownOpsets(*model, o.allowNewerOpset);
  applyInputShapes(*model, specs);
  const Graph& g = *model->graph;
  const std::string executor = resolveExecutor(o.executor, o.device);
  auto exec = makeExecutor(executor);
  if (!exec) fail(ErrorKind::InvalidInput, "--executor {}: no such executor in this build", executor);
  // Two outputs written to one file (names that differ only in characters a file name cannot
  // hold) are refused before anything runs.
  TensorFileFormat fmtKind = o.outputFormat == "pb" ? TensorFileFormat::Pb : o.outputFormat == "json" ? TensorFileFormat::Json : TensorFileFormat::Npy;
  if (!o.outputDir.empty()) {
    std::error_code ec;
    if (fs::exists(o.outputDir, ec) && !fs::is_directory(o.outputDir, ec))
      fail(ErrorKind::InvalidInput, "-O {}: exists and is not a folder", o.outputDir);
    std::map<std::string, std::string> files;
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      std::string name = g.outputs()[i].value ? g.outputs()[i].value->name() : fmt::format("output_{}", i);
      std::string file = fileSafe(name) + tensorFileExtension(fmtKind);
      auto [it, fresh] = files.emplace(file, name);
      if (!fresh)
        fail(ErrorKind::InvalidInput, "-O {}: outputs '{}' and '{}' would both be written to {}; nothing was written",
             o.outputDir, it->second, name, file);
    }
  }
  std::map<std::string, RtValue> feeds = gatherModelInputs(g, modelInputOptions(o));
  for (const auto* e : feedableInputs(g))
    if (!feeds.count(e->value->name()))
      fail(ErrorKind::InvalidInput, "input '{}' ({}) has no value; give it with -i, --inputs-dir or --random", e->value->name(),
           e->type().str());
  PrepareOptions po;
  po.seed = o.seed;
  po.graphOptLevel = o.graphOpt;
  po.precision = o.device.precision;
  po.deviceGraph = !o.device.noCudaGraph;
  auto plan = exec->prepare(*model, po);
  std::vector<RtValue> outs;
  if (spdlog::should_log(spdlog::level::info)) {  // -v: say which nodes fell back to reference kernels
    RunProfile prof;
    outs = plan->runProfiled(feeds, prof);
    size_t fallbacks = 0, graphNodes = 0;
    for (const NodeRun& r : prof.nodes) graphNodes += static_cast<size_t>(r.graphNodes);
    for (const NodeRun& r : prof.nodes)
      if (r.fallback) {
        ++fallbacks;
        spdlog::info("node '{}' ({}): fallback to the reference kernel {}", r.node, r.opType, r.kernel);
      }
    if (!prof.nodes.empty()) spdlog::info("{} of {} nodes ran on reference kernels", fallbacks, graphNodes);
  } else {
    outs = plan->run(feeds);
  }

  json doc{{"schema_version", 2}, {"model", o.model}, {"executor", executor}};
  json outputsJson = json::array();
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string name = g.outputs()[i].value ? g.outputs()[i].value->name() : fmt::format("output_{}", i);
    outputsJson.push_back(summaryJson(name, outs[i]));
    if (!o.json && o.outputDir.empty() && o.compareDir.empty()) std::printf("%s\n", summaryLine(name, outs[i]).c_str());
  }
  if (!o.outputDir.empty()) {
    std::error_code ec;
    fs::create_directories(o.outputDir, ec);
    if (ec) fail(ErrorKind::Io, "-O {}: cannot create the folder: {}", o.outputDir, ec.message());
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string name = g.outputs()[i].value ? g.outputs()[i].value->name() : fmt::format("output_{}", i);
      std::string path = (fs::path(o.outputDir) / (fileSafe(name) + tensorFileExtension(fmtKind))).string();
      std::string bytes;
      if (fmtKind == TensorFileFormat::Pb) bytes = toPb(outs[i], name);
      else if (fmtKind == TensorFileFormat::Json) bytes = toJson(outs[i], name);
      else {
        if (!outs[i].isTensor()) fail(ErrorKind::Unsupported, "output '{}' is not a tensor; use --output-format pb", name);
        bytes = toNpy(hostTensor(*outs[i].tensor, "output '" + name + "'"));
      }
      writeFileAtomic(path, bytes);
      outputsJson[i]["file"] = path;
      if (!o.json) spdlog::info("wrote {}", path);
    }
  }
  int rc = kOk;
  if (!o.compareDir.empty()) {
    json cmp = json::array();
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string name = g.outputs()[i].value ? g.outputs()[i].value->name() : fmt::format("output_{}", i);
      fs::path pb = fs::path(o.compareDir) / fmt::format("output_{}.pb", i);
      fs::path npy = fs::path(o.compareDir) / (fileSafe(name) + ".npy");
      RtValue want;
      if (fs::exists(pb)) want = parseValueProto(readFile(pb.string()), g.outputs()[i].type(), pb.string());
      else if (fs::exists(npy)) want = RtValue::ofTensor(parseNpy(readFile(npy.string()), npy.string()));
      else fail(ErrorKind::InvalidInput, "--compare {}: no {} or {} for output '{}'", o.compareDir, pb.filename().string(),
                npy.filename().string(), name);
      CompareResult r = compareValues(outs[i], want, o.rtol, o.atol);
      if (!r.ok) rc = kFinding;
      cmp.push_back({{"name", name}, {"ok", r.ok}, {"max_abs_error", r.maxAbsError}, {"max_rel_error", r.maxRelError},
                     {"message", r.message}});
      if (!o.json)
        std::printf("%s: %s  max abs error %.3g  max rel error %.3g%s\n", name.c_str(), r.ok ? "match" : "MISMATCH", r.maxAbsError,
                    r.maxRelError, r.ok ? "" : ("  (" + r.message + ")").c_str());
    }
    doc["compare"] = {{"rtol", o.rtol}, {"atol", o.atol}, {"outputs", cmp}, {"ok", rc == kOk}};
  }
  doc["outputs"] = outputsJson;
  if (o.json) writeStdout(doc.dump(2) + "\n");
  return rc;
}

}  // namespace

std::function<int()> addRun(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run a model on given, test-layout or random inputs");
  sub->add_option("MODEL", o->model, "Model file (.onnx, - for stdin)")->required();
  sub->add_option("-i,--input", o->inputs,
                  "Input file, repeatable: FILE or NAME=FILE (.pb, .npy, .npz, .json). A .pb takes its stored name, else "
                  "the next input; a .npy its file stem; a .npz its keys");
  sub->add_option("--inputs-dir", o->inputsDir, "Read DIR/input_0.pb, input_1.pb, ... in graph input order (ONNX test layout)");
  sub->add_flag("--random", o->random,
                "Fill inputs not given with random values: floats from a standard normal distribution, integers in "
                "[0,10) or below the size of the table an index input reads (Gather), bools either; symbolic dims 1");
  sub->add_option("--seed", o->seed, "Seed for --random and for random ops without their own seed (default 0)")
      ->check(nonNegative());
  addShapeOption(sub, o->shapes);
  sub->add_option("-O,--output-dir", o->outputDir, "Write each output to DIR/<output name>.<ext> (characters other than letters, digits, -_.: become _)");
  sub->add_option("--output-format", o->outputFormat, "Format of -O files: npy (default), pb or json")
      ->check(CLI::IsMember({"npy", "pb", "json"}));
  sub->add_option("--compare", o->compareDir,
                  "Compare outputs with DIR/output_<i>.pb or DIR/<name>.npy (numpy allclose); exit 1 on a mismatch");
  sub->add_option("--rtol", o->rtol, "Relative tolerance of --compare (default 1e-4)")->check(nonNegative());
  sub->add_option("--atol", o->atol, "Absolute tolerance of --compare (default 1e-5)")->check(nonNegative());
  std::string names;
  for (const std::string& n : executorNames()) names += (names.empty() ? "" : ", ") + n;
  sub->add_option("--executor", o->executor, "Executor (this build: " + names + "; default cpu: fast kernels, reference kernels for the rest; ref: the reference kernels only)")
      ->check(CLI::IsMember(executorNames()));
  addDeviceOptions(sub, o->device);
  sub->add_option("--graph-opt", o->graphOpt,
                  "cpu executor: optimizer preset its plan runs on a copy of the model, with the input shapes fixed "
                  "(0 none, 1 cleanup, 2 + folding, 3 + fusions; default 3, as onnxtool optimize -O3); the model file is not touched")
      ->check(CLI::Range(0, 3));
  addAllowNewerOpsetOption(sub, o->allowNewerOpset);
  sub->add_flag("--json", o->json, "One JSON document with output summaries and comparison results");
  sub->footer("Exit codes: 0 success, 1 outputs differ (--compare), 2 invalid input or usage error, 3 unsupported op or device (--device cuda).");
  return [o] { return runRun(*o); };
}

}  // namespace onnxtool::app
