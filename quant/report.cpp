// report.cpp: accuracy of a quantized or float16 model against its float reference (see report.h).
#include "quant/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "exec/executor.h"
#include "passes/upcast_half.h"
#include "formats/model_inputs.h"
#include "lib/error.h"
#include "lib/ir_clone.h"
#include "lib/shape_inference.h"
#include "lib/tensor.h"

namespace onnxtool {

namespace {

bool isFloatType(DType d) { return d == DType::Float || d == DType::Float16 || d == DType::BFloat16 || d == DType::Double; }

DType dtypeOf(const Value* v) { return v && v->type().isTensor() ? v->type().dtype() : DType::Undefined; }

/// `t` converted between the float types (float32 <-> float16/bfloat16/double).
Tensor convertFloat(const TensorData& t, DType to) {
  size_t n = static_cast<size_t>(t.numElements().value_or(0));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(t.elementAsDouble(i));
  Tensor r;
  r.dims = t.dims;
  r.dataType = static_cast<int32_t>(to);
  std::string bytes;
  if (to == DType::Float16 || to == DType::BFloat16) {
    bytes.resize(2 * n);
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = to == DType::Float16 ? floatToHalf(f[i]) : floatToBfloat16(f[i]);
      bytes[2 * i] = static_cast<char>(h & 0xff);
      bytes[2 * i + 1] = static_cast<char>(h >> 8);
    }
  } else if (to == DType::Double) {
    bytes.resize(8 * n);
    for (size_t i = 0; i < n; ++i) {
      double d = f[i];
      std::memcpy(bytes.data() + 8 * i, &d, 8);
    }
  } else {
    bytes.resize(4 * n);
    std::memcpy(bytes.data(), f.data(), 4 * n);
  }
  r.setRaw(Buffer::fromString(std::move(bytes)));
  return r;
}

std::map<std::string, RtValue> adaptFeeds(const Graph& g, const std::map<std::string, RtValue>& feeds) {
  std::map<std::string, RtValue> out = feeds;
  for (const ValueInfoEntry* e : feedableInputs(g)) {
    auto it = out.find(e->value->name());
    if (it == out.end() || !it->second.isTensor()) continue;
    DType want = e->type().isTensor() ? e->type().dtype() : DType::Undefined;
    DType have = it->second.tensor->dtype();
    if (want != have && isFloatType(want) && isFloatType(have))
      it->second = RtValue::ofTensor(convertFloat(*it->second.tensor, want));
  }
  return out;
}

/// Drops one trailing quantizer suffix (and a uniqueName counter before it).
std::vector<std::string> baseNames(const std::string& name) {
  static const char* suffixes[] = {"_dequantized", "_quantized", "_DequantizeLinear_Output", "_QuantizeLinear_Output",
                                   "_DequantizeLinear", "_QuantizeLinear", "_dequant", "_quant"};
  std::vector<std::string> out;
  for (const char* s : suffixes) {
    std::string_view sv(s);
    std::string n = name;
    // "x_dequantized_1": a second QDQ pair on the same name
    size_t us = n.rfind('_');
    if (us != std::string::npos && us + 1 < n.size() &&
        std::all_of(n.begin() + static_cast<std::ptrdiff_t>(us) + 1, n.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        std::string_view(n).substr(0, us).ends_with(sv))
      n.resize(us);
    if (n.size() > sv.size() && std::string_view(n).ends_with(sv)) out.push_back(n.substr(0, n.size() - sv.size()));
  }
  return out;
}

bool floatValueOf(const Graph& g, const std::string& name) {
  const Value* v = g.findLocal(name);
  return v && v->isDefined() && isFloatType(dtypeOf(v));
}

}  // namespace

bool ErrorStats::add(const TensorData& ref, const TensorData& got) {
  if (ref.dtype() == DType::String || got.dtype() == DType::String) return false;
  auto n = ref.numElements(), m = got.numElements();
  if (!n || !m || *n != *m) return false;
  for (size_t i = 0; i < static_cast<size_t>(*n); ++i) {
    double x = ref.elementAsDouble(i), y = got.elementAsDouble(i);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (!(x == y) && !(std::isnan(x) && std::isnan(y))) nonFinite++;
      continue;
    }
    double d = x - y;
    count++;
    sumAbs += std::fabs(d);
    maxAbs = std::max(maxAbs, std::fabs(d));
    maxRef = std::max(maxRef, std::fabs(x));
    dot += x * y, refSq += x * x, gotSq += y * y, errSq += d * d;
  }
  return true;
}

double ErrorStats::cosine() const {
  if (refSq > 0 && gotSq > 0) return std::clamp(dot / std::sqrt(refSq * gotSq), -1.0, 1.0);
  return refSq == gotSq ? 1.0 : 0.0;
}

double ErrorStats::sqnrDb() const {
  if (errSq == 0) return std::numeric_limits<double>::infinity();
  if (refSq == 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(refSq / errSq);
}

double AccuracyReport::minCosine() const {
  double m = 1;
  for (const TensorError& e : outputs)
    if (e.stats.count > 0 || e.stats.nonFinite > 0) m = std::min(m, e.stats.nonFinite ? 0.0 : e.stats.cosine());
  return m;
}

std::string dequantizedSource(const Node& dq, const Graph& reference) {
  const Value* in = dq.input(0);
  if (in && in->producer() && in->producer()->opType == "QuantizeLinear" && in->producer()->input(0)) {
    const std::string& x = in->producer()->input(0)->name();
    if (floatValueOf(reference, x)) return x;
  }
  std::vector<std::string> names;
  if (dq.output(0)) names.push_back(dq.output(0)->name());
  if (in) names.push_back(in->name());
  for (const std::string& n : names) {
    for (const std::string& b : baseNames(n))
      if (floatValueOf(reference, b)) return b;
  }
  return {};
}

AccuracyReport compareModels(const Model& reference, const Model& candidate,
                             const std::vector<std::map<std::string, RtValue>>& samples, bool layers,
                             const std::string& executor) {
  AccuracyReport report;
  report.samples = samples.size();
  const Graph& rg = *reference.graph;
  const Graph& cg = *candidate.graph;
  if (rg.outputs().size() != cg.outputs().size())
    fail(ErrorKind::InvalidInput, "the reference model has {} outputs and the compared model {}: not the same model",
         rg.outputs().size(), cg.outputs().size());
  for (size_t i = 0; i < rg.outputs().size(); ++i) {
    TensorError e;
    e.name = rg.outputs()[i].value->name();
    e.candidate = cg.outputs()[i].value->name();
    e.kind = "output";
    e.op = cg.outputs()[i].value->producer() ? cg.outputs()[i].value->producer()->opType : "";
    report.outputs.push_back(std::move(e));
  }
  std::unique_ptr<Model> rcopy, ccopy;
  const Model* rm = &reference;
  const Model* cm = &candidate;
  if (layers) {
    // Copies, typed by inference (a saved model may carry no value_info), in which every
    // compared tensor becomes a graph output after the real outputs.
    rcopy = cloneModel(reference);
    ccopy = cloneModel(candidate);
    inferShapes(*rcopy);
    inferShapes(*ccopy);
    const Graph& rg = *rcopy->graph;
    const Graph& cg = *ccopy->graph;
    std::vector<Node*> order;
    if (auto t = cg.topologicalOrder()) order = *t;
    std::unordered_set<std::string> seen;
    auto addLayer = [&](const std::string& refName, const Value* y, const std::string& kind, int64_t pos) {
      if (!seen.insert(y->name()).second) return;
      TensorError e;
      e.name = refName;
      e.candidate = y->name();
      e.kind = kind;
      e.op = y->producer() ? y->producer()->opType : "";
      e.order = pos;
      report.layers.push_back(std::move(e));
    };
    std::unordered_set<const Value*> dequantized;
    for (size_t k = 0; k < order.size(); ++k) {
      const Node* n = order[k];
      if (n->opType == "DequantizeLinear" && n->output(0)) {
        dequantized.insert(n->output(0));
        std::string src = dequantizedSource(*n, rg);
        bool weight = n->input(0) && n->input(0)->initializer();
        if (!src.empty()) addLayer(src, n->output(0), weight ? "weight" : "activation", static_cast<int64_t>(k));
        continue;
      }
      bool readsDq = std::any_of(n->inputs().begin(), n->inputs().end(), [&](const Value* v) { return dequantized.count(v); });
      for (const Value* y : n->outputs()) {
        if (!y || !isFloatType(dtypeOf(y))) continue;
        const Value* r = rg.findLocal(y->name());
        if (!r || !r->producer() || !isFloatType(dtypeOf(r))) continue;
        if (readsDq || r->producer()->opType != n->opType || dtypeOf(r) != dtypeOf(y))
          addLayer(y->name(), y, "op-output", static_cast<int64_t>(k));
      }
    }
    for (const TensorError& e : report.layers) {
      rcopy->graph->addOutput(rcopy->graph->findLocal(e.name));
      ccopy->graph->addOutput(ccopy->graph->findLocal(e.candidate));
    }
    rm = rcopy.get();
    cm = ccopy.get();
  }
  auto exec = makeExecutor(executor);
  PrepareOptions po;
  po.seed = 0;
  auto pr = exec->prepare(*rm, po);
  auto pc = exec->prepare(*cm, po);
  size_t nOut = report.outputs.size();
  for (const auto& feeds : samples) {
    std::vector<RtValue> yr = pr->run(feeds);
    std::vector<RtValue> yc = pc->run(adaptFeeds(*cm->graph, feeds));
    for (size_t i = 0; i < yr.size() && i < yc.size(); ++i) {
      if (!yr[i].isTensor() || !yc[i].isTensor()) continue;
      TensorError& e = i < nOut ? report.outputs[i] : report.layers[i - nOut];
      e.stats.add(*yr[i].tensor, *yc[i].tensor);
    }
  }
  return report;
}

std::string reportExecutor(const std::string& choice, const Model& candidate) {
  if (choice != "auto") return choice;
  return hasHalfPrecision(candidate) ? "ref" : "cpu";
}

}  // namespace onnxtool
