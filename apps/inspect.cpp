// inspect.cpp: `onnxtool inspect`: a summary of a model for people (default) or scripts (--json);
// with --shapes, the type and shape inference gives every value. Reads no weight bytes: external
// data is not even mapped.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/common.h"
#include "formats/model_io.h"
#include "lib/ir.h"
#include "lib/input_shapes.h"
#include "lib/shape_inference.h"
#include "quant/summary.h"

namespace onnxtool::app {

namespace {

using json = nlohmann::ordered_json;

constexpr int kInspectSchemaVersion = 1;

struct InspectOptions {
  std::string input;
  bool json = false;
  bool nodes = false;
  bool initializers = false;
  bool shapes = false;                   // --shapes
  std::vector<std::string> inputShapes;  // --shape NAME=DIMS, repeatable
};

/// A value listed by --shapes, with the path of the subgraph holding it ("" for the main graph,
/// "if1/then_branch" for a branch of node if1, nested paths joined by '/').
struct ListedValue {
  std::string graphPath;
  const Value* value;
};

/// What inference gave: its report and every value to list, in model order.
struct ShapesResult {
  InferReport report;
  std::vector<ListedValue> values;
  size_t fullyKnown = 0;
};

bool fullyKnown(const TypeInfo& t) {
  if ((t.kind != TypeInfo::Kind::Tensor && t.kind != TypeInfo::Kind::SparseTensor) || !t.shape.hasRank) return false;
  return std::none_of(t.shape.dims.begin(), t.shape.dims.end(), [](const Dim& d) { return d.isUnknown(); });
}

/// Graph inputs, then each node's outputs followed by the values of the subgraphs it holds.
/// Initializers are left out: their shape is their dims (--initializers lists them).
void collectValues(const Graph& g, const std::string& path, std::vector<ListedValue>& out) {
  for (const auto& e : g.inputs())
    if (e.value) out.push_back({path, e.value});
  for (const auto& n : g.nodes()) {
    for (Value* v : n->outputs())
      if (v) out.push_back({path, v});
    for (const Attribute& a : n->attributes) {
      std::string base = (path.empty() ? "" : path + "/") + n->displayName() + "/" + a.name;
      if (a.g) collectValues(*a.g, base, out);
      for (size_t i = 0; i < a.graphs.size(); ++i)
        if (a.graphs[i]) collectValues(*a.graphs[i], fmt::format("{}[{}]", base, i), out);
    }
  }
}

std::string opKey(const Node& n) {
  std::string_view d = canonicalDomain(n.domain);
  return d.empty() ? n.opType : fmt::format("{}::{}", d, n.opType);
}

json dimJson(const Dim& d) {
  if (d.isValue()) return d.value;
  if (d.isParam()) return d.param;
  return nullptr;
}

json shapeJson(const TypeInfo& t) {
  if ((t.kind != TypeInfo::Kind::Tensor && t.kind != TypeInfo::Kind::SparseTensor) || !t.shape.hasRank) return nullptr;
  json a = json::array();
  for (const Dim& d : t.shape.dims) a.push_back(dimJson(d));
  return a;
}

std::string dtypeJson(const TypeInfo& t) {
  if (t.kind == TypeInfo::Kind::Tensor) return std::string(dtypeName(t.dtype()));
  if (t.kind == TypeInfo::Kind::None) return "unknown";
  return t.constraintStr();
}

std::string humanShape(const TypeInfo& t) {
  if (t.kind == TypeInfo::Kind::None) return "?";
  std::string s = dtypeJson(t);
  if (t.kind == TypeInfo::Kind::Tensor || t.kind == TypeInfo::Kind::SparseTensor) {
    if (!t.shape.hasRank) return s + " (unknown rank)";
    s += " [";
    for (size_t i = 0; i < t.shape.dims.size(); ++i) s += (i ? ", " : "") + t.shape.dims[i].str();
    s += "]";
  }
  return s;
}

std::string humanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string humanCount(uint64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}G", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

struct ParamStats {
  uint64_t count = 0, bytes = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> byDtype;  // dtype -> (count, bytes)
  std::map<std::string, std::pair<uint64_t, uint64_t>> external;  // location -> (tensors, bytes)
  void add(const Tensor& t) {
    uint64_t n = static_cast<uint64_t>(t.numElements().value_or(0));
    uint64_t b = 0;
    if (t.dtype() == DType::String) {
      for (const auto& s : t.strings) b += s.size();
    } else {
      b = t.expectedBytes().value_or(0);
    }
    count += n;
    bytes += b;
    auto& e = byDtype[std::string(dtypeName(t.dtype()))];
    e.first += n;
    e.second += b;
    if (t.external) {
      auto& x = external[t.external->location];
      x.first += 1;
      x.second += b;
    }
  }
};

ParamStats paramStats(const Graph& g) {
  ParamStats s;
  for (Value* v : g.initializers()) s.add(*v->initializer());
  for (Value* v : g.sparseInitializers()) s.add(v->sparseInitializer()->values);
  return s;
}

json ioJson(const std::vector<ValueInfoEntry>& entries) {
  json a = json::array();
  for (const auto& e : entries) {
    const TypeInfo& t = e.type();
    a.push_back({{"name", e.value ? e.value->name() : ""}, {"dtype", dtypeJson(t)}, {"shape", shapeJson(t)}});
  }
  return a;
}

json shapesJson(const ShapesResult& r) {
  json values = json::array();
  for (const auto& [path, v] : r.values)
    values.push_back({{"name", v->name()}, {"dtype", dtypeJson(v->type())}, {"shape", shapeJson(v->type())}, {"graph", path}});
  json errors = json::array();
  for (const std::string& e : r.report.errors) errors.push_back(e);
  json missing = json::object();
  for (const auto& [op, n] : r.report.opsWithoutInference) missing[op] = n;
  return {{"values", values},
          {"shape_inference",
           {{"values_total", r.values.size()},
            {"values_fully_known", r.fullyKnown},
            {"first_give_up", r.report.firstGiveUp.empty() ? json(nullptr) : json(r.report.firstGiveUp)},
            {"ops_without_inference", missing},
            {"errors", errors}}}};
}

json quantizationJson(const QuantizationSummary& q) {
  auto counts = [](const std::map<std::string, int64_t>& m) {
    json j = json::object();
    for (const auto& [k, v] : m) j[k] = v;
    return j;
  };
  auto bytes = [](const std::map<std::string, QuantizationSummary::Bytes>& m) {
    json j = json::object();
    for (const auto& [k, v] : m) j[k] = {{"tensors", v.tensors}, {"count", v.elements}, {"bytes", v.bytes}};
    return j;
  };
  return {{"quantized", q.any()},
          {"quantization_ops", counts(q.quantizationOps)},
          {"qdq_ops", counts(q.qdqOps)},
          {"weights_by_dtype", bytes(q.weightsByDtype)},
          {"quantized_weights_by_dtype", bytes(q.quantizedWeightsByDtype)},
          {"scales",
           {{"per_tensor", q.perTensorScales}, {"per_channel", q.perChannelScales}, {"blocked", q.blockedScales},
            {"runtime", q.runtimeScales}}}};
}

/// The quantization block of the text summary (only for a model that has quantization ops).
void printQuantization(const QuantizationSummary& q, const std::function<void(const std::string&)>& line) {
  auto joined = [](const std::map<std::string, int64_t>& m) {
    std::string s;
    for (const auto& [k, v] : m) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", k, v);
    return s.empty() ? std::string("none") : s;
  };
  line("quantization:");
  line(fmt::format("  ops:               {}", joined(q.quantizationOps)));
  line(fmt::format("  on dequantized:    {}", joined(q.qdqOps)));
  std::string w;
  for (const auto& [k, v] : q.quantizedWeightsByDtype)
    w += fmt::format("{}{} {} ({} tensors)", w.empty() ? "" : ", ", k, humanBytes(v.bytes), v.tensors);
  line(fmt::format("  quantized weights: {}", w.empty() ? "none" : w));
  std::string a;
  for (const auto& [k, v] : q.weightsByDtype) a += fmt::format("{}{} {}", a.empty() ? "" : ", ", k, humanBytes(v.bytes));
  line(fmt::format("  all weights:       {}", a.empty() ? "none" : a));
  line(fmt::format("  scales:            {} per-tensor, {} per-channel, {} blocked, {} computed at run time", q.perTensorScales,
                   q.perChannelScales, q.blockedScales, q.runtimeScales));
}

json buildJson(const Model& m, const InspectOptions& o, const std::optional<ShapesResult>& shapes) {
  json j;
  j["schema_version"] = kInspectSchemaVersion;
  j["model"] = m.path;  // the key every subcommand uses
  j["file"] = m.path;   // schema 1's name, kept
  j["file_size"] = m.fileSize;
  j["ir_version"] = m.irVersion;
  json opsets = json::object();
  for (const auto& op : m.opsetImports) opsets[op.domain.empty() ? "ai.onnx" : op.domain] = op.version;
  j["opset_imports"] = opsets;
  j["producer"] = {{"name", m.producerName}, {"version", m.producerVersion}};
  j["domain"] = m.domain;
  j["model_version"] = m.modelVersion;
  json meta = json::object();
  for (const auto& [k, v] : m.metadata) meta[k] = v;
  j["metadata"] = meta;
  const Graph* g = m.graph.get();
  j["graph_name"] = g ? g->name : "";
  j["inputs"] = g ? ioJson(g->inputs()) : json::array();
  j["outputs"] = g ? ioJson(g->outputs()) : json::array();
  j["node_count"] = g ? g->numNodes() : 0;
  j["node_count_total"] = g ? g->totalNodeCount() : 0;
  std::map<std::string, int64_t> hist;
  if (g)
    for (const auto& n : g->nodes()) hist[opKey(*n)]++;
  json h = json::object();
  for (const auto& [k, v] : hist) h[k] = v;
  j["op_histogram"] = h;
  ParamStats ps = g ? paramStats(*g) : ParamStats{};
  j["initializer_count"] = g ? g->initializers().size() + g->sparseInitializers().size() : 0;
  j["parameter_count"] = ps.count;
  j["parameter_bytes"] = ps.bytes;
  json byDtype = json::object();
  for (const auto& [k, v] : ps.byDtype) byDtype[k] = {{"count", v.first}, {"bytes", v.second}};
  j["parameters_by_dtype"] = byDtype;
  json ext = json::array();
  for (const auto& [loc, v] : ps.external) ext.push_back({{"location", loc}, {"tensors", v.first}, {"bytes", v.second}});
  j["external_data"] = ext;
  json fns = json::array();
  for (const auto& f : m.functions)
    fns.push_back({{"domain", f->domain}, {"name", f->name}, {"node_count", f->body->numNodes()}});
  j["functions"] = fns;
  j["quantization"] = quantizationJson(summarizeQuantization(m));
  if (o.nodes && g) {
    json nodes = json::array();
    for (const auto& n : g->nodes()) {
      json ins = json::array(), outs = json::array();
      for (Value* v : n->inputs()) ins.push_back(v ? v->name() : "");
      for (Value* v : n->outputs()) outs.push_back(v ? v->name() : "");
      nodes.push_back({{"name", n->name}, {"op_type", n->opType}, {"domain", n->domain}, {"inputs", ins}, {"outputs", outs}});
    }
    j["nodes"] = nodes;
  }
  if (o.initializers && g) {
    json inits = json::array();
    for (Value* v : g->initializers()) {
      const Tensor& t = *v->initializer();
      json dims = json::array();
      for (int64_t d : t.dims) dims.push_back(d);
      inits.push_back({{"name", t.name}, {"dtype", std::string(dtypeName(t.dtype()))}, {"shape", dims}});
    }
    j["initializers"] = inits;
  }
  if (o.shapes && shapes) j.update(shapesJson(*shapes));
  return j;
}

void printShapes(const ShapesResult& r, const std::function<void(const std::string&)>& line) {
  line(fmt::format("values ({}, types from shape inference):", r.values.size()));
  size_t w = 0;
  for (const auto& lv : r.values) w = std::max(w, lv.value->name().size());
  w = std::min<size_t>(w, 48);
  std::string shown;  // subgraph path whose header was printed last
  for (const auto& [path, v] : r.values) {
    if (path != shown && !path.empty()) line(fmt::format("  in {}:", path));
    shown = path;
    line(fmt::format("{}  {:<{}}  {}", path.empty() ? "" : "  ", v->name(), w, humanShape(v->type())));
  }
  line(fmt::format("shape inference: {} of {} values fully known", r.fullyKnown, r.values.size()));
  line(fmt::format("first give-up: {}", r.report.firstGiveUp.empty() ? "none" : r.report.firstGiveUp));
  if (!r.report.opsWithoutInference.empty()) {
    std::string ops;
    for (const auto& [op, n] : r.report.opsWithoutInference) ops += fmt::format("{}{} ({})", ops.empty() ? "" : ", ", op, n);
    line(fmt::format("ops without inference: {}", ops));
  }
  if (!r.report.errors.empty()) {
    line(fmt::format("shape inference errors ({}):", r.report.errors.size()));
    for (const std::string& e : r.report.errors) line("  " + e);
  }
}

void printHuman(const Model& m, const InspectOptions& o, const std::optional<ShapesResult>& shapes) {
  const Graph* g = m.graph.get();
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(fmt::format("model:        {} ({})", m.path, humanBytes(m.fileSize)));
  line(fmt::format("ir_version:   {}", m.irVersion));
  line(fmt::format("producer:     {}{}", m.producerName.empty() ? "-" : m.producerName,
                   m.producerVersion.empty() ? "" : " " + m.producerVersion));
  if (!m.domain.empty() || m.modelVersion) line(fmt::format("domain:       {} (model_version {})", m.domain, m.modelVersion));
  std::string ops;
  for (const auto& op : m.opsetImports)
    ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", op.domain.empty() ? "ai.onnx" : op.domain, op.version);
  line(fmt::format("opsets:       {}", ops.empty() ? "-" : ops));
  if (!m.functions.empty()) {
    line(fmt::format("functions:    {}", m.functions.size()));
    for (const auto& f : m.functions) line(fmt::format("  {}::{} ({} nodes)", f->domain, f->name, f->body->numNodes()));
  }
  if (!g) {
    line("graph:        none");
    std::fputs(out.c_str(), stdout);
    return;
  }
  auto ioBlock = [&](const char* title, const std::vector<ValueInfoEntry>& es) {
    line(fmt::format("{} ({}):", title, es.size()));
    size_t w = 0;
    for (const auto& e : es) w = std::max(w, e.value ? e.value->name().size() : 0);
    for (const auto& e : es) line(fmt::format("  {:<{}}  {}", e.value ? e.value->name() : "", w, humanShape(e.type())));
  };
  ioBlock("inputs", g->inputs());
  ioBlock("outputs", g->outputs());
  size_t total = g->totalNodeCount();
  line(fmt::format("nodes:        {}{}", g->numNodes(), total != g->numNodes() ? fmt::format(" ({} incl. subgraphs)", total) : ""));
  std::map<std::string, int64_t> hist;
  for (const auto& n : g->nodes()) hist[opKey(*n)]++;
  std::vector<std::pair<std::string, int64_t>> sorted(hist.begin(), hist.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [k, v] : sorted) line(fmt::format("  {:<28} {}", k, v));
  ParamStats ps = paramStats(*g);
  line(fmt::format("initializers: {} ({} parameters, {})", g->initializers().size() + g->sparseInitializers().size(),
                   humanCount(ps.count), humanBytes(ps.bytes)));
  for (const auto& [k, v] : ps.byDtype) line(fmt::format("  {:<12} {:>10} parameters  {:>10}", k, humanCount(v.first), humanBytes(v.second)));
  if (!ps.external.empty()) {
    line("external data:");
    for (const auto& [loc, v] : ps.external) line(fmt::format("  {} ({} tensors, {})", loc, v.first, humanBytes(v.second)));
  }
  if (QuantizationSummary q = summarizeQuantization(m); q.any()) printQuantization(q, line);
  if (!m.metadata.empty()) {
    line("metadata:");
    for (const auto& [k, v] : m.metadata) line(fmt::format("  {} = {}", k, v));
  }
  if (o.nodes) {
    line("node list:");
    for (const auto& n : g->nodes()) {
      std::string ins, outs;
      for (Value* v : n->inputs()) ins += (ins.empty() ? "" : ", ") + (v ? v->name() : std::string());
      for (Value* v : n->outputs()) outs += (outs.empty() ? "" : ", ") + (v ? v->name() : std::string());
      line(fmt::format("  {} ({}): [{}] -> [{}]", n->name.empty() ? "-" : n->name, opKey(*n), ins, outs));
    }
  }
  if (o.initializers) {
    line("initializer list:");
    for (Value* v : g->initializers()) {
      const Tensor& t = *v->initializer();
      std::string dims;
      for (int64_t d : t.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      line(fmt::format("  {}  {} [{}]", t.name, dtypeName(t.dtype()), dims));
    }
  }
  if (o.shapes && shapes) printShapes(*shapes, line);
  std::fputs(out.c_str(), stdout);
}

/// Runs inference (with the --shape dims) over the model; afterwards inputs and outputs show the
/// types after inference, which are the declared ones or more specific.
ShapesResult inferForInspect(Model& m, const InspectOptions& o) {
  (void)o;
  ShapesResult r;
  r.report = inferShapes(m);
  if (m.graph) collectValues(*m.graph, "", r.values);
  for (const auto& lv : r.values) r.fullyKnown += fullyKnown(lv.value->type()) ? 1 : 0;
  return r;
}

int runInspect(const InspectOptions& o) {
  LoadOptions lo;
  lo.loadExternalData = false;
  auto specs = parseInputShapes(o.inputShapes);
  auto model = loadModel(o.input, lo);
  applyInputShapes(*model, specs);
  std::optional<ShapesResult> shapes;
  if (o.shapes || !o.inputShapes.empty()) shapes = inferForInspect(*model, o);
  if (o.json) {
    std::string s = buildJson(*model, o, shapes).dump(2);
    s += "\n";
    std::fputs(s.c_str(), stdout);
  } else {
    printHuman(*model, o, shapes);
  }
  return kOk;
}

}  // namespace

std::function<int()> addInspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "Summarise a model: I/O, op histogram, parameters, external data");
  sub->add_option("MODEL", o->input, "Model file (.onnx, - for stdin)")->required();
  sub->add_flag("--json", o->json, "One JSON document for scripts (schema in onnxtool-inspect(1))");
  sub->add_flag("--nodes", o->nodes, "List every node of the main graph");
  sub->add_flag("--initializers", o->initializers, "List every initializer with dtype and shape");
  sub->add_flag("--shapes", o->shapes,
                "Infer types and shapes: list every value (inputs, node outputs, subgraphs), the first "
                "value inference could not resolve and why, and its errors");
  addShapeOption(sub, o->inputShapes);
  sub->footer(
      "With --shape or --shapes, inputs and outputs show the types after inference.\n"
      "Exit codes: 0 success (also when inference finds errors: `check` judges), 2 unreadable or\n"
      "invalid input or usage error.");
  return [o] { return runInspect(*o); };
}

}  // namespace onnxtool::app
