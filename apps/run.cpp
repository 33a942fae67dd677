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
#include "formats/model_io.h"
#include "formats/tensor_files.h"
#include "formats/value_files.h"
#include "lib/error.h"

namespace onnxtool::app {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct RunOptions : InputOptions {
  std::string model;
  std::string outputDir;
  std::string outputFormat = "npy";
  std::string compareDir;
  double rtol = 1e-4, atol = 1e-5;
  std::string executor = "ref";
  bool json = false;
};

std::string fileSafe(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (s.empty() || s == "." || s == "..") s = "output";
  return s;
}

}  // namespace

static const ValueInfoEntry* findInput(const Graph& g, const std::string& name) {
  for (const auto& e : g.inputs())
    if (e.value->name() == name) return &e;
  return nullptr;
}

std::vector<const ValueInfoEntry*> feedable(const Graph& g) {
  std::vector<const ValueInfoEntry*> out;
  for (const auto& e : g.inputs())
    if (!e.value->initializer() && !e.value->sparseInitializer()) out.push_back(&e);
  return out;
}

static std::string inputNames(const Graph& g) {
  std::string s;
  for (const auto* e : feedable(g)) s += (s.empty() ? "" : ", ") + e->value->name();
  return s;
}

void gatherInputs(const Graph& g, const InputOptions& o, std::map<std::string, RtValue>& feeds) {
  auto nextUnfed = [&]() -> const ValueInfoEntry* {
    for (const auto* e : feedable(g))
      if (!feeds.count(e->value->name())) return e;
    return nullptr;
  };
  auto put = [&](const std::string& name, RtValue v, const std::string& from) {
    if (!findInput(g, name))
      fail(ErrorKind::InvalidInput, "{}: the model has no input '{}'; its inputs are: {}", from, name, inputNames(g));
    if (feeds.count(name)) fail(ErrorKind::InvalidInput, "{}: input '{}' is given twice", from, name);
    feeds[name] = std::move(v);
  };
  for (const std::string& spec : o.inputs) {
    std::string name, path = spec;
    auto eq = spec.find('=');
    if (eq != std::string::npos && !fs::exists(spec)) {
      name = spec.substr(0, eq);
      path = spec.substr(eq + 1);
    }
    std::string ext = fs::path(path).extension().string();
    if (ext == ".npz") {
      for (auto& [key, t] : readNpz(path)) put(name.empty() ? key : name + "." + key, RtValue::ofTensor(std::move(t)), path);
      continue;
    }
    const ValueInfoEntry* target = name.empty() ? nullptr : findInput(g, name);
    if (!name.empty() && !target)
      fail(ErrorKind::InvalidInput, "-i {}: the model has no input '{}'; its inputs are: {}", spec, name, inputNames(g));
    std::string stored;
    TypeInfo expect = target ? target->type() : (nextUnfed() ? nextUnfed()->type() : TypeInfo{});
    RtValue v = readValueFile(path, expect, &stored);
    if (name.empty()) {
      if (ext == ".npy") name = fs::path(path).stem().string();
      else if (!stored.empty() && findInput(g, stored)) name = stored;
      else if (const ValueInfoEntry* e = nextUnfed()) name = e->value->name();
      else fail(ErrorKind::InvalidInput, "-i {}: every input already has a value", spec);
    }
    put(name, std::move(v), path);
  }
  if (!o.inputsDir.empty()) {
    auto inputs = feedable(g);
    for (size_t i = 0;; ++i) {
      fs::path f = fs::path(o.inputsDir) / fmt::format("input_{}.pb", i);
      if (!fs::exists(f)) {
        if (i == 0) fail(ErrorKind::InvalidInput, "{}: no input_0.pb in this folder", o.inputsDir);
        break;
      }
      if (i >= inputs.size()) fail(ErrorKind::InvalidInput, "{}: more input files than the model's {} inputs", o.inputsDir, inputs.size());
      std::string stored;
      RtValue v = parseValueProto(readFile(f.string()), inputs[i]->type(), f.string(), &stored);
      put(inputs[i]->value->name(), std::move(v), f.string());
    }
  }
  std::map<std::string, ShapeSpec> shapes;
  for (const auto& s : o.shapes) {
    ShapeSpec sp = parseShapeSpec(s);
    if (!findInput(g, sp.name))
      fail(ErrorKind::InvalidInput, "--shape {}: the model has no input '{}'; its inputs are: {}", s, sp.name, inputNames(g));
    shapes[sp.name] = sp;
  }
  if (o.random) {
    std::mt19937_64 rng(o.seed.value_or(0));
    for (const auto* e : feedable(g)) {
      const std::string& name = e->value->name();
      if (feeds.count(name)) continue;
      const TypeInfo& t = e->type();
      if (t.kind != TypeInfo::Kind::Tensor || !isValidDType(t.elemType))
        fail(ErrorKind::Unsupported, "input '{}': --random can only make tensors, the input is {}", name, t.str());
      std::vector<int64_t> dims;
      auto it = shapes.find(name);
      if (it != shapes.end()) {
        for (const auto& d : it->second.dims) {
          if (d.find_first_not_of("0123456789") != std::string::npos)
            fail(ErrorKind::InvalidInput, "--shape {}: --random needs numbers, got '{}'", name, d);
          dims.push_back(std::stoll(d));
        }
      } else if (t.shape.hasRank) {
        for (const Dim& d : t.shape.dims) dims.push_back(d.isValue() ? d.value : 1);
      }
      feeds[name] = RtValue::ofTensor(randomTensor(t.dtype(), dims, rng));
    }
  }
}

namespace {

std::string shapeStr(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : ",") + std::to_string(d);
  return "[" + s + "]";
}

json summaryJson(const std::string& name, const RtValue& v) {
  json j{{"name", name}};
  if (v.isTensor()) {
    const Tensor& t = *v.tensor;
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
    j["first"] = s.first;
  } else {
    j["kind"] = v.kind == RtValue::Kind::Sequence ? "sequence" : v.kind == RtValue::Kind::Optional ? "optional" : "map";
    j["elements"] = v.elements.size();
  }
  return j;
}

std::string summaryLine(const std::string& name, const RtValue& v) {
  if (!v.isTensor())
    return fmt::format("{}: {} of {} elements", name, v.kind == RtValue::Kind::Sequence ? "sequence" : "optional", v.elements.size());
  const Tensor& t = *v.tensor;
  TensorStats s = tensorStats(t);
  std::string first;
  for (const auto& f : s.first) first += (first.empty() ? "" : ", ") + f;
  if (t.dtype() == DType::String) return fmt::format("{}: string {} [{}]", name, shapeStr(t.dims), first);
  return fmt::format("{}: {} {} min {:.6g} max {:.6g} mean {:.6g}{} [{}{}]", name, dtypeName(t.dtype()), shapeStr(t.dims),
                     s.min, s.max, s.mean, s.nanCount ? fmt::format(" ({} NaN)", s.nanCount) : "", first,
                     t.numElements().value_or(0) > static_cast<int64_t>(s.first.size()) ? ", ..." : "");
}

int runRun(const RunOptions& o) {
  auto model = loadModel(o.model);
  if (!model->graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", o.model);
  const Graph& g = *model->graph;
  auto exec = makeExecutor(o.executor);
  if (!exec) fail(ErrorKind::Unsupported, "--executor {}: no such executor in this build (available: ref)", o.executor);
  std::map<std::string, RtValue> feeds;
  gatherInputs(g, o, feeds);
  for (const auto* e : feedable(g))
    if (!feeds.count(e->value->name()))
      fail(ErrorKind::InvalidInput, "input '{}' ({}) has no value; give it with -i, --inputs-dir or --random", e->value->name(),
           e->type().str());
  PrepareOptions po;
  po.seed = o.seed;
  auto plan = exec->prepare(*model, po);
  std::vector<RtValue> outs = plan->run(feeds);

  json doc{{"schema_version", 1}, {"model", o.model}, {"executor", o.executor}};
  json outputsJson = json::array();
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string name = g.outputs()[i].value ? g.outputs()[i].value->name() : fmt::format("output_{}", i);
    outputsJson.push_back(summaryJson(name, outs[i]));
    if (!o.json && o.outputDir.empty() && o.compareDir.empty()) std::printf("%s\n", summaryLine(name, outs[i]).c_str());
  }
  if (!o.outputDir.empty()) {
    fs::create_directories(o.outputDir);
    TensorFileFormat fmtKind = o.outputFormat == "pb" ? TensorFileFormat::Pb : o.outputFormat == "json" ? TensorFileFormat::Json : TensorFileFormat::Npy;
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string name = g.outputs()[i].value ? g.outputs()[i].value->name() : fmt::format("output_{}", i);
      std::string path = (fs::path(o.outputDir) / (fileSafe(name) + tensorFileExtension(fmtKind))).string();
      std::string bytes;
      if (fmtKind == TensorFileFormat::Pb) bytes = toPb(outs[i], name);
      else if (fmtKind == TensorFileFormat::Json) bytes = toJson(outs[i], name);
      else {
        if (!outs[i].isTensor()) fail(ErrorKind::Unsupported, "output '{}' is not a tensor; use --output-format pb", name);
        bytes = toNpy(*outs[i].tensor);
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
  if (o.json) std::printf("%s\n", doc.dump(2).c_str());
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
  sub->add_flag("--random", o->random, "Fill inputs not given with random values (floats in [0,1), integers in [0,10))");
  sub->add_option("--seed", o->seed, "Seed for --random and for random ops without their own seed");
  sub->add_option("--shape", o->shapes, "NAME=DIMS: dims for --random inputs, e.g. input_ids=1x128 (symbolic dims default to 1)");
  sub->add_option("-O,--output-dir", o->outputDir, "Write each output to DIR/<output name>.<ext>");
  sub->add_option("--output-format", o->outputFormat, "Format of -O files: npy (default), pb or json")
      ->check(CLI::IsMember({"npy", "pb", "json"}));
  sub->add_option("--compare", o->compareDir,
                  "Compare outputs with DIR/output_<i>.pb or DIR/<name>.npy (numpy allclose); exit 1 on a mismatch");
  sub->add_option("--rtol", o->rtol, "Relative tolerance of --compare (default 1e-4)");
  sub->add_option("--atol", o->atol, "Absolute tolerance of --compare (default 1e-5)");
  sub->add_option("--executor", o->executor, "Executor: ref (default)");
  sub->add_flag("--json", o->json, "One JSON document with output summaries and comparison results");
  sub->footer("Exit codes: 0 success, 1 outputs differ (--compare), 2 invalid input or usage error, 3 unsupported op.");
  return [o] { return runRun(*o); };
}

}  // namespace onnxtool::app
