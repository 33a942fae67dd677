// bench.cpp: `onnxtool bench`: load, prepare and time a model on one executor; latency
// statistics, throughput, peak RSS and (--profile) where the time goes, per op type and per node,
// with the kernel that ran (fast, or a reference fallback).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/common.h"
#include "exec/cpu/isa.h"
#include "exec/executor.h"
#include "formats/atomic_file.h"
#include "formats/model_io.h"
#include "lib/error.h"
#include "lib/input_shapes.h"
#include "lib/ir_clone.h"

namespace onnxtool::app {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string executor;  ///< as given (empty: cpu, or cuda with --device cuda)
  DeviceOptions device;
  std::string resolved;  ///< the executor that runs
  int threads = 0;
  int graphOpt = 3;
  int warmup = 3;
  std::optional<int64_t> iterations;
  std::optional<double> duration;
  std::vector<std::string> shapes;
  std::vector<std::string> inputs;
  bool json = false;
  bool profile = false;
  int top = 10;
  bool allowNewerOpset = false;
};

std::string cpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(" \t", p + 1));
    }
  return "unknown";
}

/// This process's peak resident memory. Linux: VmHWM of /proc/self/status, the high-water mark
/// of this program's own address space; getrusage's ru_maxrss also carries the peak of the
/// process that forked us (it survives exec), so a bench started from a large Python process
/// would report that process's memory. Elsewhere ru_maxrss.
double peakRssKiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr);  // "VmHWM:  1234 kB"
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss);
}

/// Nearest-rank percentile of sorted samples: the smallest sample with at least p% of the
/// samples at or below it.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

struct NodeAgg {
  std::string node, op, kernel;
  bool fallback = false;
  double seconds = 0, flops = 0;
  int64_t calls = 0;
};

/// The --shape specs of each row: an input named k times measures k shapes, the k-th in row k;
/// an input named fewer times than the longest keeps its last spec in the later rows.
std::vector<std::vector<std::string>> shapeRows(const std::vector<std::string>& specs) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> byName;
  for (const std::string& s : specs) {
    std::string name = s.substr(0, s.rfind('='));
    if (!byName.count(name)) order.push_back(name);
    byName[name].push_back(s);
  }
  size_t rows = 1;
  for (const auto& [n, v] : byName) rows = std::max(rows, v.size());
  std::vector<std::vector<std::string>> out(rows);
  for (size_t r = 0; r < rows; ++r)
    for (const std::string& n : order) {
      const auto& v = byName[n];
      out[r].push_back(v[std::min(r, v.size() - 1)]);
    }
  return out;
}

struct Row {
  json doc;
  std::string text;
};

/// The inputs' symbolic dims fixed to the dims of the tensors every run will get, so that the
/// plan is built (specialised) in prepare, not in the first run: prepare time is then the whole
/// one-time cost, as ONNX Runtime's session creation is. Left as declared when the inputs
/// disagree with the declarations (the first run then reports it as any run would).
/// Returns the declared shape ("[batch,3,224,224]") of each input it fixed.
std::map<std::string, std::string> fixSymbolicDims(Model& model, const std::map<std::string, RtValue>& feeds) {
  std::map<std::string, std::string> declared;
  std::vector<InputShapeSpec> specs;
  for (const auto& e : model.graph->inputs()) {
    if (!e.value || e.value->initializer() || !e.type().isTensor() || e.type().shape.isStatic()) continue;
    auto f = feeds.find(e.value->name());
    if (f == feeds.end() || !f->second.tensor) continue;
    InputShapeSpec spec;
    spec.name = e.value->name();
    spec.text = spec.name;
    for (int64_t d : f->second.tensor->dims) spec.dims.push_back(std::to_string(d));
    declared[spec.name] = e.type().shape.str();
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return {};
  try {
    applyInputShapes(*cloneModel(model), specs);  // on a copy first: a spec that fails leaves the model as it was
  } catch (const Error&) {
    return {};
  }
  applyInputShapes(model, specs);
  return declared;
}

/// Times one row: `model` has the row's input shapes applied.
Row benchRow(const BenchOptions& o, Model& model, double loadSec);

int runBench(BenchOptions o) {
  o.resolved = resolveExecutor(o.executor, o.device);
  if (o.iterations && o.duration) fail(ErrorKind::InvalidInput, "--iterations and --duration exclude each other");
  auto rows = shapeRows(o.shapes);
  auto t0 = Clock::now();
  auto model = loadModel(o.model);
  double loadSec = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!model->graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", o.model);
  requireKnownOpsets(*model, o.allowNewerOpset);
  if (!makeExecutor(o.resolved)) fail(ErrorKind::InvalidInput, "--executor {}: no such executor in this build", o.resolved);

  // every row's shapes go on its own copy before anything is timed, so a bad row fails first
  std::vector<std::unique_ptr<Model>> shaped;
  for (size_t r = 0; r < rows.size(); ++r) {
    shaped.push_back(r + 1 == rows.size() ? std::move(model) : cloneModel(*model));
    applyInputShapes(*shaped.back(), rows[r]);
  }
  std::vector<Row> results;
  for (auto& m : shaped) results.push_back(benchRow(o, *m, loadSec));
  if (o.json) {
    // schema 2: the first row's fields at the top (as in schema 1), and every row in "rows"
    json doc = results.front().doc;
    doc["schema_version"] = 2;
    json all = json::array();
    for (const Row& r : results) all.push_back(r.doc);
    doc["rows"] = all;
    writeStdout(doc.dump(2) + "\n");
    return kOk;
  }
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    if (results.size() > 1) out += fmt::format("{}== row {} of {} ==\n", r ? "\n" : "", r + 1, results.size());
    out += results[r].text;
  }
  if (results.size() > 1) {
    out += "\nsummary (median latency per shape row):\n";
    for (const Row& r : results) {
      std::string in;
      for (const auto& j : r.doc["inputs"])
        in += fmt::format("{}{}[{}]", in.empty() ? "" : " ", j["name"].get<std::string>(),
                          j.contains("shape") ? fmt::format("{}", fmt::join(j["shape"].get<std::vector<int64_t>>(), ",")) : "");
      out += fmt::format("  {:>12.4f} ms  {:>10.1f}/s  {}\n", r.doc["latency_ms"]["median"].get<double>(),
                         r.doc["throughput_per_s"].get<double>(), in);
    }
  }
  writeStdout(out);
  return kOk;
}

Row benchRow(const BenchOptions& o, Model& model, double loadSec) {
  const Graph& g = *model.graph;
  auto exec = makeExecutor(o.resolved);

  ModelInputOptions mio;
  mio.files = o.inputs;
  mio.random = true;
  mio.seed = 0;
  std::map<std::string, RtValue> feeds = gatherModelInputs(g, mio);

  const auto declared = fixSymbolicDims(model, feeds);

  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  PrepareOptions po;
  po.seed = 0;
  po.threads = threads;
  po.graphOptLevel = o.graphOpt;
  po.precision = o.device.precision;
  po.deviceGraph = !o.device.noCudaGraph;
  auto t0 = Clock::now();
  auto plan = exec->prepare(model, po);
  double prepareSec = std::chrono::duration<double>(Clock::now() - t0).count();

  // The first run is not timed with the others (caches, lazily made kernels of subgraphs).
  t0 = Clock::now();
  plan->run(feeds);
  double firstRunSec = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 1; i < o.warmup; ++i) plan->run(feeds);

  std::vector<double> samples;
  std::vector<NodeAgg> nodes;
  size_t graphNodeCount = 0;
  RunProfile prof;
  double budget = o.duration.value_or(o.iterations ? 0.0 : 3.0);
  auto start = Clock::now();
  for (int64_t i = 0;; ++i) {
    if (o.iterations ? i >= *o.iterations
                     : (i > 0 && std::chrono::duration<double>(Clock::now() - start).count() >= budget))
      break;
    auto a = Clock::now();
    if (o.profile) plan->runProfiled(feeds, prof);
    else plan->run(feeds);
    samples.push_back(std::chrono::duration<double>(Clock::now() - a).count() * 1e3);
    if (o.profile) {
      if (nodes.size() != prof.nodes.size()) {
        nodes.clear();
        graphNodeCount = 0;
        for (const NodeRun& r : prof.nodes) {
          nodes.push_back({r.node, r.opType, r.kernel, r.fallback, 0, r.flops, 0});
          graphNodeCount += static_cast<size_t>(r.graphNodes);  // fused steps count every node they ran
        }
      }
      for (size_t k = 0; k < prof.nodes.size(); ++k) {
        nodes[k].seconds += prof.nodes[k].seconds;
        nodes[k].calls += 1;
      }
    }
  }
  double wall = std::chrono::duration<double>(Clock::now() - start).count();
  // A device executor: the copies of one run (inputs in, outputs out), median of a few runs
  // timed apart from the others (a profiled run synchronises after every node).
  auto device = executorDevice(o.resolved);
  double copyIn = 0, copyOut = 0;
  if (!device.empty()) {
    std::vector<double> in, out;
    RunProfile cp;
    for (int i = 0; i < 5; ++i) {
      plan->runProfiled(feeds, cp);
      in.push_back(cp.copyInSeconds * 1e3);
      out.push_back(cp.copyOutSeconds * 1e3);
    }
    std::sort(in.begin(), in.end());
    std::sort(out.begin(), out.end());
    copyIn = in[2], copyOut = out[2];
  }
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double s : samples) mean += s;
  mean /= std::max<size_t>(1, samples.size());
  double var = 0;
  for (double s : samples) var += (s - mean) * (s - mean);
  double stddev = samples.size() > 1 ? std::sqrt(var / static_cast<double>(samples.size() - 1)) : 0;
  double throughput = wall > 0 ? static_cast<double>(samples.size()) / wall : 0;
  std::string isa(cpu::isaName(cpu::activeIsa()));

  json inputsJson = json::array();
  for (const auto* e : feedableInputs(g)) {
    const RtValue& v = feeds.at(e->value->name());
    json j{{"name", e->value->name()}};
    if (v.isTensor()) {
      j["dtype"] = std::string(dtypeName(v.tensor->dtype()));
      j["shape"] = v.tensor->dims;
    }
    if (auto d = declared.find(e->value->name()); d != declared.end()) j["declared_shape"] = d->second;
    inputsJson.push_back(j);
  }
  json latency{{"min", sorted.front()},          {"median", percentile(sorted, 50)}, {"mean", mean},
               {"p90", percentile(sorted, 90)},  {"p95", percentile(sorted, 95)},    {"p99", percentile(sorted, 99)},
               {"p999", percentile(sorted, 99.9)}, {"max", sorted.back()},           {"stddev", stddev}};
  json doc{{"schema_version", 2},
           {"model", o.model},
           {"executor", o.resolved},
           {"device", o.resolved == "cuda" ? "cuda" : "cpu"},
           {"cpu", {{"model", cpuModel()}, {"isa", isa}}},
           {"threads", threads},
           {"graph_opt", o.graphOpt},
           {"inputs", inputsJson},
           {"load_ms", loadSec * 1e3},
           {"prepare_ms", prepareSec * 1e3},
           {"first_run_ms", firstRunSec * 1e3},
           {"warmup", o.warmup},
           {"iterations", samples.size()},
           {"latency_ms", latency},
           {"throughput_per_s", throughput},
           {"peak_rss_kib", peakRssKiB()}};
  if (!device.empty()) {
    json dj = json::object();
    for (const auto& [k, v] : device) dj[k] = v;
    doc["gpu"] = dj;
    doc["precision"] = o.device.precision;
    doc["cuda_graph"] = !o.device.noCudaGraph;
    doc["copy_ms"] = {{"inputs_to_device", copyIn}, {"outputs_to_host", copyOut}};
  }

  // Profile: share of the summed node time, by op type and by node.
  json profJson;
  double total = 0;
  for (const auto& n : nodes) total += n.seconds;
  std::map<std::string, NodeAgg> byOp;
  for (const auto& n : nodes) {
    NodeAgg& a = byOp[n.op];
    a.op = n.op;
    a.seconds += n.seconds;
    a.flops += n.flops * static_cast<double>(n.calls);
    a.calls += n.calls;
  }
  std::vector<NodeAgg> ops;
  for (auto& [k, v] : byOp) ops.push_back(v);
  std::sort(ops.begin(), ops.end(), [](const NodeAgg& a, const NodeAgg& b) { return a.seconds > b.seconds; });
  std::vector<const NodeAgg*> top;
  for (const auto& n : nodes) top.push_back(&n);
  std::stable_sort(top.begin(), top.end(), [](const NodeAgg* a, const NodeAgg* b) { return a->seconds > b->seconds; });
  if (top.size() > static_cast<size_t>(o.top)) top.resize(static_cast<size_t>(o.top));
  auto gflops = [](double flops, double sec) { return sec > 0 ? flops / sec / 1e9 : 0.0; };
  if (o.profile) {
    json opsJson = json::array(), nodesJson = json::array(), fallbacks = json::array();
    for (const auto& a : ops)
      opsJson.push_back({{"op", a.op},
                         {"share", total > 0 ? a.seconds / total : 0},
                         {"calls", a.calls},
                         {"mean_us", a.calls ? a.seconds / static_cast<double>(a.calls) * 1e6 : 0},
                         {"flops", a.calls ? a.flops / static_cast<double>(a.calls) : 0},
                         {"gflops_per_s", gflops(a.flops, a.seconds)}});
    for (const NodeAgg* n : top)
      nodesJson.push_back({{"node", n->node},
                           {"op", n->op},
                           {"kernel", n->kernel},
                           {"fallback", n->fallback},
                           {"share", total > 0 ? n->seconds / total : 0},
                           {"calls", n->calls},
                           {"mean_us", n->calls ? n->seconds / static_cast<double>(n->calls) * 1e6 : 0},
                           {"flops", n->flops},
                           {"gflops_per_s", gflops(n->flops * static_cast<double>(n->calls), n->seconds)}});
    for (const auto& n : nodes)
      if (n.fallback) fallbacks.push_back({{"node", n.node}, {"op", n.op}, {"kernel", n.kernel}});
    profJson = {{"node_count", graphNodeCount}, {"ops", opsJson}, {"top_nodes", nodesJson}, {"fallback_nodes", fallbacks}};
    doc["profile"] = profJson;
  }

  std::string out;
  out += fmt::format("model:       {}\n", o.model);
  out += fmt::format("executor:    {} (device {}{})\n", o.resolved, o.resolved == "cuda" ? "cuda" : "cpu",
                     o.resolved != "ref" ? fmt::format(", graph optimization -O{}", o.graphOpt) : "");
  if (!device.empty()) {
    std::map<std::string, std::string> d(device.begin(), device.end());
    if (d.count("error")) out += fmt::format("gpu:         {}\n", d["error"]);
    else
      out += fmt::format("gpu:         {} (compute {}, {} SMs, {} MiB), driver {}, runtime {}, cuDNN {}, cuBLAS {}\n", d["name"],
                         d["compute_capability"], d["multiprocessors"], d["memory_mib"], d["driver"], d["runtime"], d["cudnn"],
                         d["cublas"]);
    out += fmt::format("precision:   {}{}\n", o.device.precision, o.device.noCudaGraph ? " (no CUDA graph)" : ", CUDA graph replay");
  }
  out += fmt::format("cpu:         {} (isa {})\n", cpuModel(), isa);
  out += fmt::format("threads:     {}\n", threads);
  for (const auto& j : inputsJson)
    out += fmt::format("input:       {} {} [{}]{}\n", j["name"].get<std::string>(), j.value("dtype", std::string("?")),
                       j.contains("shape") ? fmt::format("{}", fmt::join(j["shape"].get<std::vector<int64_t>>(), ",")) : "",
                       j.contains("declared_shape") ? fmt::format(" (declared {})", j["declared_shape"].get<std::string>()) : "");
  out += fmt::format("load:        {:.2f} ms\n", loadSec * 1e3);
  out += fmt::format("prepare:     {:.2f} ms (first run {:.2f} ms)\n", prepareSec * 1e3, firstRunSec * 1e3);
  out += fmt::format("iterations:  {} (warmup {})\n", samples.size(), o.warmup);
  out += fmt::format("latency ms:  min {:.4f}  median {:.4f}  mean {:.4f}  p90 {:.4f}  p95 {:.4f}  p99 {:.4f}  p99.9 {:.4f}  max {:.4f}  stddev {:.4f}\n",
                     sorted.front(), percentile(sorted, 50), mean, percentile(sorted, 90), percentile(sorted, 95),
                     percentile(sorted, 99), percentile(sorted, 99.9), sorted.back(), stddev);
  out += fmt::format("throughput:  {:.1f} inferences/s\n", throughput);
  if (!device.empty()) out += fmt::format("copies:      inputs to the device {:.4f} ms, outputs to the host {:.4f} ms (in each run's latency)\n", copyIn, copyOut);
  out += fmt::format("peak rss:    {:.1f} MiB\n", peakRssKiB() / 1024.0);
  if (o.profile) {
    out += "profile by op type (share of node time):\n";
    for (const auto& a : ops)
      out += fmt::format("  {:<24} {:6.1f}%  calls {:<6} mean {:10.2f} us{}\n", a.op, total > 0 ? 100 * a.seconds / total : 0,
                         a.calls / std::max<int64_t>(1, static_cast<int64_t>(samples.size())),
                         a.calls ? a.seconds / static_cast<double>(a.calls) * 1e6 : 0,
                         a.flops > 0 ? fmt::format("  {:.2f} GFLOP/s", gflops(a.flops, a.seconds)) : "");
    out += fmt::format("top {} nodes:\n", top.size());
    for (const NodeAgg* n : top)
      out += fmt::format("  {:<28} {:<18} {:<28} {:6.1f}%  mean {:10.2f} us{}{}\n", n->node, n->op, n->kernel,
                         total > 0 ? 100 * n->seconds / total : 0, n->calls ? n->seconds / static_cast<double>(n->calls) * 1e6 : 0,
                         n->flops > 0 ? fmt::format("  {:.2f} GFLOP/s", gflops(n->flops * static_cast<double>(n->calls), n->seconds)) : "",
                         n->fallback ? "  (fallback)" : "");
    size_t nf = 0;
    for (const auto& n : nodes) nf += n.fallback;
    out += fmt::format("fallback nodes (reference kernels): {} of {}\n", nf, graphNodeCount);
    for (const auto& n : nodes)
      if (n.fallback) out += fmt::format("  {} ({}): {}\n", n.node, n.op, n.kernel);
  }
  return {doc, out};
}

}  // namespace

std::function<int()> addBench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand("bench", "Time a model on an executor: latency statistics, throughput, per-node profile");
  sub->add_option("MODEL", o->model, "Model file (.onnx, - for stdin)")->required();
  std::string names;
  for (const std::string& n : executorNames()) names += (names.empty() ? "" : ", ") + n;
  sub->add_option("--executor", o->executor, "Executor (this build: " + names + "; default cpu, cuda with --device cuda)")
      ->check(CLI::IsMember(executorNames()));
  addDeviceOptions(sub, o->device);
  sub->add_option("--threads", o->threads, "Intra-op threads (default: the number of cores)")->check(CLI::Range(1, 1024));
  sub->add_option("--graph-opt", o->graphOpt,
                  "cpu executor: optimizer preset its plan runs on a copy of the model, with the input shapes fixed "
                  "(0 none, 1 cleanup, 2 + folding, 3 + fusions; default 3, as onnxtool optimize -O3)")
      ->check(CLI::Range(0, 3));
  sub->add_option("--warmup", o->warmup, "Untimed runs first (default 3)")
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--iterations", o->iterations, "Timed runs (default: as many as --duration allows)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_option("--duration", o->duration, "Seconds of timed runs (default 3)")->check(CLI::PositiveNumber);
  addShapeOption(sub, o->shapes);
  sub->add_option("-i,--input", o->inputs,
                  "Input file, repeatable: FILE or NAME=FILE (.pb, .npy, .npz, .json); inputs not given are random "
                  "(run --random's values, seed 0)");
  sub->add_flag("--json", o->json, "One JSON document (schema_version 1, see man onnxtool-bench)");
  sub->add_flag("--profile", o->profile, "Time every node: share per op type and the top nodes, kernels, fallbacks");
  sub->add_option("--top", o->top, "Nodes listed by --profile (default 10)")->check(CLI::Range(1, 1000000));
  addAllowNewerOpsetOption(sub, o->allowNewerOpset);
  sub->footer("Exit codes: 0 success, 2 invalid input or usage error, 3 unsupported op or device (--device cuda).");
  return [o] { return runBench(*o); };
}

}  // namespace onnxtool::app
