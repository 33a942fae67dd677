// static_qdq.cpp: calibration (min/max of activations on the reference executor) and QDQ
// insertion for int8 static quantization (see static_qdq.h).
#include "quant/static_qdq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "exec/executor.h"
#include "formats/model_inputs.h"
#include "formats/model_io.h"
#include "formats/tensor_files.h"
#include "lib/error.h"
#include "lib/tensor.h"
#include "quant/quant_scheme.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

namespace fs = std::filesystem;

bool isQuantizableOp(const Node& n) {
  return n.isDomain("") && (n.opType == "MatMul" || n.opType == "Gemm" || n.opType == "Conv");
}

/// The constant float weight of a quantizable node, with the axis of its output channels; null
/// when the node does not qualify.
const Tensor* weightOf(const Node& n, int64_t* channelAxis) {
  const Value* w = n.input(1);
  if (!n.input(0) || !w || w->isGraphInput() || !w->initializer()) return nullptr;
  const Tensor* t = w->initializer();
  if (t->dtype() != DType::Float || t->raw.size() != t->expectedBytes().value_or(UINT64_MAX)) return nullptr;
  if (n.opType == "Conv") {
    if (t->dims.size() < 3) return nullptr;
    *channelAxis = 0;
  } else {
    if (t->dims.size() != 2) return nullptr;
    if (n.opType == "Gemm" && (n.attrInt("transA", 0) != 0 || n.attrFloat("alpha", 1.0f) != 1.0f)) return nullptr;
    *channelAxis = n.opType == "Gemm" && n.attrInt("transB", 0) != 0 ? 0 : 1;
  }
  return t;
}

/// The bin count (threshold, in bins) whose clipped distribution loses least information when
/// quantized to 128 levels: KL(P || Q) over thresholds from 128 bins to all of them.
double entropyThreshold(const std::vector<double>& hist) {
  constexpr size_t kLevels = 128;
  size_t n = hist.size();
  if (n <= kLevels) return static_cast<double>(n);
  double bestKl = std::numeric_limits<double>::infinity();
  size_t best = n;
  for (size_t i = kLevels; i <= n; ++i) {
    std::vector<double> p(hist.begin(), hist.begin() + static_cast<std::ptrdiff_t>(i));
    for (size_t k = i; k < n; ++k) p[i - 1] += hist[k];  // outliers clip into the last bin
    double total = 0;
    for (double v : p) total += v;
    if (total <= 0) continue;
    // Q: the slice without the clipped outliers merged into kLevels levels, each level's mass
    // spread over its non-empty bins; P carries the outliers in its last bin, so clipping much
    // mass costs divergence (else a threshold of exactly kLevels bins would always be lossless).
    std::vector<double> q(i, 0.0);
    double per = static_cast<double>(i) / kLevels;
    for (size_t l = 0; l < kLevels; ++l) {
      size_t a = static_cast<size_t>(std::floor(l * per)), b = l + 1 == kLevels ? i : static_cast<size_t>(std::floor((l + 1) * per));
      double mass = 0;
      size_t nonzero = 0;
      for (size_t k = a; k < b; ++k) {
        mass += hist[k];
        nonzero += hist[k] > 0;
      }
      for (size_t k = a; k < b; ++k)
        if (hist[k] > 0) q[k] = mass / static_cast<double>(nonzero);
    }
    double qTotal = 0;
    for (double v : q) qTotal += v;
    if (qTotal <= 0) continue;
    double kl = 0;
    for (size_t k = 0; k < i; ++k) {
      if (p[k] <= 0) continue;
      double pk = p[k] / total, qk = q[k] / qTotal;
      kl += qk > 0 ? pk * std::log(pk / qk) : pk * 50.0;  // a level Q cannot represent: a large penalty
    }
    if (kl < bestKl) {
      bestKl = kl;
      best = i;
    }
  }
  return static_cast<double>(best) + 0.5;
}

/// Mean squared error (times the count) of quantizing the histogram `h` over [lo, lo + w*bins)
/// (values at bin centres) to uint8 over the range [a, b], as quantizeStaticQdq would.
double quantizationError(const std::vector<uint64_t>& h, double lo, double w, double a, double b) {
  double qlo = std::min(0.0, a), qhi = std::max(0.0, b);
  double scale = (qhi - qlo) / 255.0;
  if (!(scale > 0)) return std::numeric_limits<double>::infinity();
  double zp = std::clamp(std::nearbyint(-qlo / scale), 0.0, 255.0);
  double err = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    if (!h[i]) continue;
    double x = lo + w * (static_cast<double>(i) + 0.5);
    double q = std::clamp(std::nearbyint(x / scale) + zp, 0.0, 255.0);
    double d = (q - zp) * scale - x;
    err += static_cast<double>(h[i]) * d * d;
  }
  return err;
}

}  // namespace

const Tensor* staticQuantWeight(const Node& n, int64_t* channelAxis) { return isQuantizableOp(n) ? weightOf(n, channelAxis) : nullptr; }

std::vector<std::string> activationsToCalibrate(const Model& model) { return activationsToCalibrate(model, QuantScheme{}); }

std::vector<std::string> activationsToCalibrate(const Model& model, const QuantScheme& scheme) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  if (!model.graph) return out;
  for (const auto& n : model.graph->nodes()) {
    int64_t axis = 0;
    if (!isQuantizableOp(*n) || !weightOf(*n, &axis) || !exclusionReason(*n, scheme).empty()) continue;
    const std::string& x = n->input(0)->name();
    if (seen.insert(x).second) out.push_back(x);
  }
  return out;
}

void observeValues(const Model& model, const std::vector<std::string>& values,
                   const std::vector<std::map<std::string, RtValue>>& samples,
                   const std::function<void(const std::string&, const TensorData&)>& visit, bool exposedOnly) {
  // A copy with every value exposed as a graph output (the caller's model stays as it is).
  std::string bytes = serializeModel(model);
  auto copy = loadModelFromBytes(bytes, model.baseDir.empty() ? "." : model.baseDir, model.path + " (calibration copy)");
  Graph& g = *copy->graph;
  std::vector<std::string> exposed;
  for (const std::string& name : values) {
    Value* v = g.findLocal(name);
    if (!v) continue;
    if (!v->isGraphOutput()) g.addOutput(v);
    exposed.push_back(name);
  }
  if (exposedOnly)
    for (size_t i = g.outputs().size(); i-- > 0;)
      if (std::find(exposed.begin(), exposed.end(), g.outputs()[i].value->name()) == exposed.end()) g.removeOutput(i);
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < g.outputs().size(); ++i) index.emplace(g.outputs()[i].value->name(), i);
  // The fast cpu executor (reference kernels wherever it has none): calibration runs the float
  // model on every sample, the bulk of quantize's time.
  auto exec = makeExecutor("cpu");
  PrepareOptions po;
  po.seed = 0;
  auto plan = exec->prepare(*copy, po);
  for (const auto& feeds : samples) {
    std::vector<RtValue> outs = plan->run(feeds);
    for (const std::string& name : exposed) {
      const RtValue& v = outs[index.at(name)];
      if (v.isTensor()) visit(name, *v.tensor);
    }
  }
}

std::map<std::string, ValueRange> calibrateRanges(const Model& model, const std::vector<std::string>& activations,
                                                  const std::vector<std::map<std::string, RtValue>>& samples,
                                                  const CalibrationMethod& method) {
  // Visits every finite float element of every exposed activation over all samples: `visit`
  // gets each activation's name once per sample and returns the per-element function (the
  // name's state looked up once per tensor, not per element).
  using Each = std::function<void(float)>;
  auto sweep = [&](const std::function<Each(const std::string&)>& visit) {
    observeValues(model, activations, samples, [&](const std::string& name, const TensorData& t) {
      if (t.dtype() != DType::Float) return;
      size_t n = static_cast<size_t>(t.numElements().value_or(0));
      const float* p = reinterpret_cast<const float*>(t.raw.data());
      Each each = visit(name);
      if (!each) return;
      for (size_t i = 0; i < n; ++i)
        if (std::isfinite(p[i])) each(p[i]);
    });
  };
  std::map<std::string, ValueRange> ranges;
  {
    // Min/max: a vectorisable pass per tensor.
    std::map<std::string, bool> seen;
    observeValues(model, activations, samples, [&](const std::string& name, const TensorData& t) {
      if (t.dtype() != DType::Float) return;
      size_t n = static_cast<size_t>(t.numElements().value_or(0));
      const float* p = reinterpret_cast<const float*>(t.raw.data());
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      bool any = false;
      for (size_t i = 0; i < n; ++i) {
        const float x = p[i];
        const bool finite = std::isfinite(x);
        any |= finite;
        lo = finite && x < lo ? x : lo;
        hi = finite && x > hi ? x : hi;
      }
      if (!any) return;
      ValueRange& r = ranges[name];
      bool& s = seen[name];
      if (!s) r.min = lo, r.max = hi, s = true;
      r.min = std::min(r.min, lo);
      r.max = std::max(r.max, hi);
    });
  }
  if (method.kind == CalibrationMethod::Kind::MinMax) return ranges;
  static constexpr size_t kBins = 2048;
  if (method.kind == CalibrationMethod::Kind::Entropy) {
    std::map<std::string, std::vector<double>> absHist;
    for (const auto& [name, r] : ranges) absHist[name].assign(kBins, 0);
    sweep([&](const std::string& name) -> Each {
      auto rit = ranges.find(name);
      if (rit == ranges.end()) return {};
      const double top = std::max(std::fabs(rit->second.min), std::fabs(rit->second.max));
      std::vector<double>* h = &absHist[name];
      return [top, h](float x) {
        // Exact zeros (a ReLU's spike) are exact at any threshold: counted, their bin would rule
        // the divergence and pull the threshold down.
        if (x == 0.0f) return;
        size_t b = top > 0 ? std::min(kBins - 1, static_cast<size_t>(std::fabs(x) / top * kBins)) : 0;
        (*h)[b] += 1;
      };
    });
    for (auto& [name, r] : ranges) {
      double top = std::max(std::fabs(r.min), std::fabs(r.max));
      if (top <= 0) continue;
      double t = entropyThreshold(absHist[name]) * top / kBins;
      r = {std::max(r.min, static_cast<float>(-t)), std::min(r.max, static_cast<float>(t))};
    }
    return ranges;
  }
  std::map<std::string, std::vector<uint64_t>> hist;
  for (const auto& [name, r] : ranges) hist[name].assign(kBins, 0);
  sweep([&](const std::string& name) -> Each {
    auto rit = ranges.find(name);
    if (rit == ranges.end()) return {};
    const ValueRange r = rit->second;
    const double w = (static_cast<double>(r.max) - r.min) / kBins;
    std::vector<uint64_t>* h = &hist[name];
    return [r, w, h](float x) {
      size_t b = w > 0 ? std::min(kBins - 1, static_cast<size_t>((x - r.min) / w)) : 0;
      (*h)[b]++;
    };
  });
  if (method.kind == CalibrationMethod::Kind::Mse) {
    constexpr int kSteps = static_cast<int>(kBins);  // candidate ranges end on bin edges
    for (auto& [name, r] : ranges) {
      if (r.max <= r.min) continue;
      double w = (static_cast<double>(r.max) - r.min) / kBins;
      double best = std::numeric_limits<double>::infinity(), bestT = 1;
      for (int s = kSteps; s >= 1; --s) {
        double t = static_cast<double>(s) / kSteps;
        double e = quantizationError(hist[name], r.min, w, r.min * t, r.max * t);
        if (e < best) best = e, bestT = t;
      }
      r = {static_cast<float>(r.min * bestT), static_cast<float>(r.max * bestT)};
    }
    return ranges;
  }
  double tail = (100.0 - method.percentile) / 200.0;  // share cut off each end
  for (auto& [name, r] : ranges) {
    const std::vector<uint64_t>& h = hist[name];
    uint64_t total = 0;
    for (uint64_t c : h) total += c;
    if (total == 0 || r.max <= r.min) continue;
    double w = (static_cast<double>(r.max) - r.min) / kBins;
    auto cut = static_cast<uint64_t>(tail * static_cast<double>(total));
    size_t lo = 0, hi = kBins - 1;
    for (uint64_t acc = 0; lo < kBins && acc + h[lo] <= cut; ++lo) acc += h[lo];
    for (uint64_t acc = 0; hi > lo && acc + h[hi] <= cut; --hi) acc += h[hi];
    ValueRange clipped{static_cast<float>(r.min + w * static_cast<double>(lo)), static_cast<float>(r.min + w * static_cast<double>(hi + 1))};
    r = {std::max(r.min, clipped.min), std::min(r.max, clipped.max)};
  }
  return ranges;
}

StaticQuantizeReport quantizeStaticQdq(Model& model, const std::map<std::string, ValueRange>& ranges, int64_t minElements) {
  return quantizeStaticQdq(model, ranges, minElements, QuantScheme{});
}

StaticQuantizeReport quantizeStaticQdq(Model& model, const std::map<std::string, ValueRange>& ranges, int64_t minElements,
                                       const QuantScheme& scheme, const PresetWeights* preset) {
  StaticQuantizeReport report;
  if (!model.graph) return report;
  int64_t opset = model.opsetVersion("").value_or(0);
  if (opset < 13)
    fail(ErrorKind::Unsupported,
         "int8 static quantization (QDQ with per-channel weights) needs opset 13 or newer; the model has {}", opset);
  const bool wide = scheme.activationType == DType::Int16 || scheme.activationType == DType::UInt16;
  if (wide && opset < 21)
    fail(ErrorKind::Unsupported, "16-bit activations need QuantizeLinear/DequantizeLinear of opset 21 or newer; the model has {}", opset);
  Graph& g = *model.graph;
  struct Activation {
    Value* dq = nullptr;
    float scale = 1;
  };
  struct Weight {
    Value* dq = nullptr;
    std::vector<float> scales;
  };
  std::unordered_map<Value*, Activation> dequantized;  // activation -> its DequantizeLinear output
  std::unordered_map<Value*, Weight> weights;          // float weight -> its DequantizeLinear output
  std::map<std::pair<Value*, Value*>, Value*> biases;  // (float bias, activation) -> int32 bias DQ output
  std::vector<Value*> replacedWeights;
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  for (Node* n : order) {
    if (!isQuantizableOp(*n)) continue;
    auto skip = [&](const std::string& why) {
      report.skipped.push_back(fmt::format("node '{}' ({}): {}", n->displayName(), n->opType, why));
    };
    if (std::string why = exclusionReason(*n, scheme); !why.empty()) {
      skip(why);
      continue;
    }
    int64_t axis = 0;
    const Tensor* w = weightOf(*n, &axis);
    if (!w) {
      skip("the weight is not a constant float tensor of the expected rank");
      continue;
    }
    if (w->numElements().value_or(0) < minElements) {
      skip(fmt::format("the weight has fewer than {} elements", minElements));
      continue;
    }
    Value* x = n->input(0);
    auto rit = ranges.find(x->name());
    if (rit == ranges.end()) {
      skip("calibration saw no float values for its input");
      continue;
    }
    // Activation: over a range that includes 0 (so 0 is exact, as padding needs).
    if (!dequantized.count(x)) {
      QuantParams p = activationParams(rit->second, scheme);
      Value* s = addInitializer(g, scalarTensor(DType::Float, p.scale), x->name() + "_scale");
      Value* z = addInitializer(g, scalarTensor(scheme.activationType, static_cast<double>(p.zeroPoint)), x->name() + "_zero_point");
      Node* q = g.addNode("QuantizeLinear", {x, s, z}, {g.uniqueName(x->name() + "_quantized")}, "", n);
      q->name = q->output(0)->name();
      Node* dq = g.addNode("DequantizeLinear", {q->output(0), s, z}, {g.uniqueName(x->name() + "_dequantized")}, "", n);
      dq->name = dq->output(0)->name();
      dq->output(0)->setType(x->type());
      dequantized[x] = {dq->output(0), p.scale};
    }
    // Weight: per output channel (or per tensor), behind a DequantizeLinear.
    Value* wv = n->input(1);
    if (!weights.count(wv)) {
      auto pit = preset ? preset->find(wv->name()) : PresetWeights::const_iterator{};
      QuantizedWeight qw = preset && pit != preset->end() ? pit->second : quantizeWeight(*w, axis, scheme, scheme.weightType);
      int64_t channels = static_cast<int64_t>(qw.scales.size());
      Value* vq = addInitializer(g, std::move(qw.q), wv->name() + "_quantized");
      Value* vs = addInitializer(g, std::move(qw.scale), wv->name() + "_scale");
      Value* vz = addInitializer(g, std::move(qw.zero), wv->name() + "_zero_point");
      Node* dq = g.addNode("DequantizeLinear", {vq, vs, vz}, {g.uniqueName(wv->name() + "_dequantized")}, "",
                           g.nodes().front().get());
      dq->name = dq->output(0)->name();
      if (qw.axis >= 0) dq->setAttr(Attribute::ofInt("axis", qw.axis));
      dq->output(0)->setType(wv->type());
      weights[wv] = {dq->output(0), std::move(qw.scales)};
      replacedWeights.push_back(wv);
      report.weightsQuantized++;
      report.floatWeightBytes += w->raw.size();
      report.int8WeightBytes += w->raw.size() / 4 + 5 * static_cast<uint64_t>(channels);
    }
    // Bias of Conv/Gemm: int32 with scale x scale * w scale, zero point 0 (runtimes add it to the
    // int32 accumulator as it is). A Gemm's bias only when it is one value per output column.
    Value* b = n->input(2);
    const Tensor* bt = b && !b->isGraphInput() ? b->initializer() : nullptr;
    bool gemmBiasOk = n->opType != "Gemm" || (n->attrFloat("beta", 1.0f) == 1.0f && bt && bt->dims.size() == 1);
    if (scheme.quantizeBias && bt && gemmBiasOk) {
      auto key = std::make_pair(b, x);
      if (!biases.count(key)) {
        QuantizedBias qb = quantizeBias(*bt, dequantized.at(x).scale, weights.at(wv).scales);
        Value* out = nullptr;
        if (!qb.q.raw.empty()) {
          Value* vq = addInitializer(g, std::move(qb.q), b->name() + "_quantized");
          Value* vs = addInitializer(g, std::move(qb.scale), b->name() + "_scale");
          Value* vz = addInitializer(g, std::move(qb.zero), b->name() + "_zero_point");
          Node* dq = g.addNode("DequantizeLinear", {vq, vs, vz}, {g.uniqueName(b->name() + "_dequantized")}, "", n);
          dq->name = dq->output(0)->name();
          if (qb.perChannel) dq->setAttr(Attribute::ofInt("axis", 0));
          dq->output(0)->setType(b->type());
          out = dq->output(0);
          report.biasesQuantized++;
        }
        biases[key] = out;
      }
      if (Value* qb = biases.at(key)) {
        n->setInput(2, qb);
        if (std::find(replacedWeights.begin(), replacedWeights.end(), b) == replacedWeights.end()) replacedWeights.push_back(b);
      }
    }
    n->setInput(0, dequantized.at(x).dq);
    n->setInput(1, weights.at(wv).dq);
    report.nodesQuantized++;
  }
  for (Value* v : replacedWeights)
    if (!v->hasUses() && !v->isGraphOutput() && !v->isGraphInput()) g.removeInitializer(v);
  return report;
}

std::vector<std::map<std::string, RtValue>> readCalibrationData(const Graph& g, const std::string& data,
                                                               size_t maxSamples) {
  std::vector<std::map<std::string, RtValue>> samples;
  auto full = [&] { return maxSamples && samples.size() >= maxSamples; };
  std::error_code ec;
  if (fs::is_directory(data, ec)) {
    std::vector<fs::path> sets, npzs;
    for (const auto& e : fs::directory_iterator(data)) {
      std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
      else if (e.is_regular_file() && e.path().extension() == ".npz") npzs.push_back(e.path());
    }
    std::sort(sets.begin(), sets.end());
    std::sort(npzs.begin(), npzs.end());
    for (const fs::path& s : sets) {
      if (full()) break;
      ModelInputOptions o;
      o.testDataDir = s.string();
      samples.push_back(gatherModelInputs(g, o));
    }
    for (const fs::path& f : npzs) {
      if (full()) break;
      ModelInputOptions o;
      o.files = {f.string()};
      samples.push_back(gatherModelInputs(g, o));
    }
    if (samples.empty())
      fail(ErrorKind::InvalidInput, "--calibration {}: no test_data_set_* folders or .npz files in this folder", data);
    return samples;
  }
  if (fs::path(data).extension() != ".npz")
    fail(ErrorKind::InvalidInput, "--calibration {}: expected a folder (test_data_set_*/ or *.npz) or an .npz file", data);
  // One .npz whose arrays have a leading sample axis.
  auto arrays = readNpz(data);
  if (arrays.empty()) fail(ErrorKind::InvalidInput, "--calibration {}: the archive holds no arrays", data);
  int64_t count = -1;
  for (const auto& [name, t] : arrays) {
    if (t.dims.empty() || t.dtype() == DType::String)
      fail(ErrorKind::InvalidInput, "--calibration {}: array '{}' has no leading sample axis", data, name);
    if (count >= 0 && t.dims[0] != count)
      fail(ErrorKind::InvalidInput, "--calibration {}: array '{}' has {} samples, the others {}", data, name, t.dims[0], count);
    count = t.dims[0];
    bool known = false;
    for (const ValueInfoEntry* e : feedableInputs(g)) known |= e->value->name() == name;
    if (!known) fail(ErrorKind::InvalidInput, "--calibration {}: the model has no input '{}'", data, name);
  }
  for (int64_t s = 0; s < count && !full(); ++s) {
    std::map<std::string, RtValue> feeds;
    for (const auto& [name, t] : arrays) {
      Tensor one;
      one.dataType = t.dataType;
      one.dims.assign(t.dims.begin() + 1, t.dims.end());
      size_t per = t.raw.size() / static_cast<size_t>(count);
      one.setRaw(Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(t.raw.data()) + per * static_cast<size_t>(s), per)));
      feeds[name] = RtValue::ofTensor(std::move(one));
    }
    samples.push_back(std::move(feeds));
  }
  return samples;
}

BiasCorrectionReport correctBiases(Model& model, const std::vector<std::map<std::string, RtValue>>& samples,
                                   const QuantScheme& scheme, int64_t minElements, const PresetWeights* preset) {
  BiasCorrectionReport report;
  if (!model.graph) return report;
  Graph& g = *model.graph;
  struct Layer {
    Node* node;
    const Tensor* w;
    int64_t axis;  ///< the weight's output-channel axis
    Value* bias;   ///< float [out channels], read by this node only
    bool conv;
  };
  std::vector<Layer> layers;
  std::map<std::string, int> channelAxisOf;  // activation -> 1 (Conv input) or -1 (MatMul/Gemm input)
  std::set<std::string> mixed;
  for (const auto& nn : g.nodes()) {
    Node* n = nn.get();
    int64_t axis = 0;
    const Tensor* w = isQuantizableOp(*n) && exclusionReason(*n, scheme).empty() ? weightOf(*n, &axis) : nullptr;
    if (!w || w->numElements().value_or(0) < minElements) continue;
    const bool conv = n->opType == "Conv";
    const int64_t out = w->dims[static_cast<size_t>(axis)];
    Value* b = nullptr;
    if (n->opType == "MatMul") {  // MatMul -> Add(bias [N])
      Node* add = n->output(0) && hasSingleUse(n->output(0)) ? n->output(0)->uses()[0].node : nullptr;
      if (add && add->isDomain("") && add->opType == "Add" && add->inputs().size() == 2)
        b = add->input(0) == n->output(0) ? add->input(1) : add->input(0);
    } else if (n->opType == "Conv" || n->attrFloat("beta", 1.0f) == 1.0f) {
      b = n->input(2);
    }
    const Tensor* bt = b && !b->isGraphInput() ? b->initializer() : nullptr;
    if (!bt || bt->dtype() != DType::Float || bt->dims != std::vector<int64_t>{out} || bt->raw.size() != static_cast<size_t>(out) * 4 ||
        b->uses().size() != 1 || b->isGraphOutput())
      continue;
    const std::string& x = n->input(0)->name();
    const int want = conv ? 1 : -1;
    auto [it, fresh] = channelAxisOf.emplace(x, want);
    if (!fresh && it->second != want) mixed.insert(x);
    layers.push_back({n, w, axis, b, conv});
  }
  if (layers.empty()) return report;
  // Per input channel means of each activation over the calibration samples.
  std::vector<std::string> names;
  for (const auto& [x, a] : channelAxisOf)
    if (!mixed.count(x)) names.push_back(x);
  std::map<std::string, std::vector<double>> sums;
  std::map<std::string, double> counts;
  observeValues(model, names, samples, [&](const std::string& name, const TensorData& t) {
    if (t.dtype() != DType::Float || t.dims.size() < 2) return;
    const int a = channelAxisOf.at(name);
    const size_t axis = a < 0 ? t.dims.size() - 1 : 1;
    const int64_t c = t.dims[axis];
    int64_t inner = 1;
    for (size_t d = axis + 1; d < t.dims.size(); ++d) inner *= t.dims[d];
    const int64_t n = t.numElements().value_or(0);
    std::vector<double>& sum = sums[name];
    if (sum.empty()) sum.assign(static_cast<size_t>(c), 0.0);
    if (static_cast<int64_t>(sum.size()) != c || n == 0) return;
    const float* v = reinterpret_cast<const float*>(t.raw.data());
    for (int64_t o = 0; o < n / (c * inner); ++o)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* row = v + (o * c + ch) * inner;
        double acc = 0;
        for (int64_t i = 0; i < inner; ++i) acc += std::isfinite(row[i]) ? static_cast<double>(row[i]) : 0.0;
        sum[static_cast<size_t>(ch)] += acc;
      }
    counts[name] += static_cast<double>(n / c);
  });
  for (const Layer& l : layers) {
    const std::string& x = l.node->input(0)->name();
    auto sit = sums.find(x);
    if (sit == sums.end() || !(counts[x] > 0)) {
      report.skipped.push_back(fmt::format("node '{}' ({}): no per-channel mean of its input", l.node->displayName(), l.node->opType));
      continue;
    }
    std::vector<double> mean = sit->second;
    for (double& m : mean) m /= counts[x];
    // The weight as the quantized model will read it: float(q - zero) * scale.
    auto pit = preset ? preset->find(l.node->input(1)->name()) : PresetWeights::const_iterator{};
    QuantizedWeight qw = preset && pit != preset->end() ? pit->second : quantizeWeight(*l.w, l.axis, scheme, scheme.weightType);
    const int64_t count = l.w->numElements().value_or(0);
    std::vector<float> w(static_cast<size_t>(count));
    std::memcpy(w.data(), l.w->raw.data(), w.size() * 4);
    const auto* qd = reinterpret_cast<const uint8_t*>(qw.q.raw.data());
    const auto* zd = reinterpret_cast<const uint8_t*>(qw.zero.raw.data());
    const bool u8 = qw.q.dtype() == DType::UInt8;
    auto element = [&](const uint8_t* p, size_t i) { return u8 ? static_cast<float>(p[i]) : static_cast<float>(static_cast<int8_t>(p[i])); };
    const int64_t out = l.w->dims[static_cast<size_t>(l.axis)];
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(l.axis) + 1; d < l.w->dims.size(); ++d) inner *= l.w->dims[d];
    std::vector<double> corr(static_cast<size_t>(out), 0.0);
    const int64_t group = l.conv ? l.node->attrInt("group", 1) : 1;
    const int64_t cPerGroup = l.conv ? l.w->dims[1] : 0, mPerGroup = group > 0 ? out / group : out;
    int64_t spatial = 1;
    if (l.conv)
      for (size_t d = 2; d < l.w->dims.size(); ++d) spatial *= l.w->dims[d];
    bool fits = true;
    for (int64_t i = 0; i < count && fits; ++i) {
      const int64_t ch = i / inner % out;  // output channel of element i
      const size_t p = qw.axis >= 0 ? static_cast<size_t>(ch) : 0;
      const double d = static_cast<double>((element(qd, static_cast<size_t>(i)) - element(zd, p)) * qw.scales[p]) - w[static_cast<size_t>(i)];
      int64_t in;  // the input channel element i multiplies
      if (l.conv) in = (ch / mPerGroup) * cPerGroup + (i / spatial) % cPerGroup;
      else in = l.axis == 0 ? i % l.w->dims[1] : i / l.w->dims[1];  // W [N, K] (transB) or [K, N]
      if (in >= static_cast<int64_t>(mean.size())) fits = false;
      else corr[static_cast<size_t>(ch)] += d * mean[static_cast<size_t>(in)];
    }
    if (!fits) continue;
    Tensor* bt = l.bias->initializer();
    std::vector<float> b(static_cast<size_t>(out));
    std::memcpy(b.data(), bt->raw.data(), b.size() * 4);
    for (size_t c = 0; c < b.size(); ++c) b[c] = static_cast<float>(b[c] - corr[c]);
    std::string raw(b.size() * 4, '\0');
    std::memcpy(raw.data(), b.data(), raw.size());
    bt->setRaw(Buffer::fromString(std::move(raw)));
    report.corrected++;
  }
  return report;
}

}  // namespace onnxtool

namespace onnxtool {

namespace {

/// A quantized layer whose bias empirical correction adjusts.
struct BiasedLayer {
  std::string output;  ///< the value whose per-channel mean is matched
  bool channelsFirst;  ///< Conv: axis 1; Gemm/MatMul: the last axis
  Tensor* bias;        ///< float [C], or int32 [C] / [] behind a DequantizeLinear
  const Tensor* scale = nullptr;  ///< int32 bias: its scale (scalar or [C])
  std::set<const Node*> nodes;    ///< the layer's nodes (a MatMul and its Add)
};

/// Per-channel means of a float tensor (axis 1 or the last), finite values only; empty when the
/// tensor is not float or has no such axis.
std::vector<double> channelMeans(const TensorData& t, bool channelsFirst) {
  if (t.dtype() != DType::Float || t.dims.size() < 2) return {};
  const size_t axis = channelsFirst ? 1 : t.dims.size() - 1;
  const int64_t c = t.dims[axis];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < t.dims.size(); ++d) inner *= t.dims[d];
  const int64_t n = t.numElements().value_or(0);
  if (c <= 0 || n == 0) return {};
  std::vector<double> sum(static_cast<size_t>(c), 0.0), count(static_cast<size_t>(c), 0.0);
  const float* v = reinterpret_cast<const float*>(t.raw.data());
  for (int64_t o = 0; o < n / (c * inner); ++o)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* row = v + (o * c + ch) * inner;
      double acc = 0, k = 0;
      for (int64_t i = 0; i < inner; ++i)
        if (std::isfinite(row[i])) acc += row[i], k += 1;
      sum[static_cast<size_t>(ch)] += acc;
      count[static_cast<size_t>(ch)] += k;
    }
  for (size_t ch = 0; ch < sum.size(); ++ch) sum[ch] = count[ch] > 0 ? sum[ch] / count[ch] : 0.0;
  return sum;
}

}  // namespace

int64_t giveOwnBiases(Model& model, const QuantScheme& scheme, int64_t minElements) {
  if (!model.graph) return 0;
  Graph& g = *model.graph;
  int64_t given = 0;
  std::vector<Node*> order;
  for (const auto& nn : g.nodes()) order.push_back(nn.get());
  for (Node* n : order) {
    int64_t axis = 0;
    const Tensor* wt = isQuantizableOp(*n) && exclusionReason(*n, scheme).empty() ? weightOf(*n, &axis) : nullptr;
    if (!wt || wt->numElements().value_or(0) < minElements || n->opType == "MatMul") continue;
    if (n->opType == "Gemm" && n->attrFloat("beta", 1.0f) != 1.0f) continue;
    const int64_t m = wt->dims[static_cast<size_t>(axis)];
    Value* b = n->inputs().size() > 2 ? n->input(2) : nullptr;
    const Tensor* src = nullptr;
    auto onlyUse = [&](const Value* v) {
      return !v->isGraphOutput() && std::all_of(v->uses().begin(), v->uses().end(), [&](const Use& u) { return u.node == n; });
    };
    if (b && !b->isGraphInput() && b->initializer() && !onlyUse(b)) src = b->initializer();
    else if (b && b->producer() && b->producer()->opType == "Identity" && b->producer()->inputs().size() == 1 &&
             b->producer()->input(0) && !b->producer()->input(0)->isGraphInput())
      src = b->producer()->input(0)->initializer();
    const bool missing = !b && m > 0 && n->inputs().size() == 2;
    if (!((src && src->dtype() == DType::Float && src->dims == std::vector<int64_t>{m} &&
           src->raw.size() == static_cast<size_t>(m) * 4 && m > 0) || missing))
      continue;
    std::vector<float> v(static_cast<size_t>(m), 0.0f);
    if (src) std::memcpy(v.data(), src->raw.data(), v.size() * 4);
    Value* own = g.addInitializer(Tensor::fromFloats(g.uniqueName(n->output(0)->name() + "_bias"), {m}, v));
    own->setType(TypeInfo::tensor(DType::Float, Shape::of({m})));
    given++;
    if (missing) {
      n->addInput(own);
      continue;
    }
    n->setInput(2, own);
    // What the bias came through, when nothing else reads it now.
    if (Node* id = b->producer(); id && !b->hasUses() && !b->isGraphOutput()) {
      Value* in = id->input(0);
      g.removeNode(id);
      if (in && !in->hasUses() && !in->isGraphOutput() && !in->isGraphInput() && in->initializer()) g.removeInitializer(in);
    } else if (!b->producer() && !b->hasUses() && !b->isGraphOutput() && !b->isGraphInput() && b->initializer()) {
      g.removeInitializer(b);
    }
  }
  return given;
}

EmpiricalBiasReport correctBiasesEmpirically(Model& quantized, const Model& reference,
                                             const std::vector<std::map<std::string, RtValue>>& samples, size_t maxSamples) {
  EmpiricalBiasReport report;
  if (!quantized.graph || !reference.graph || samples.empty()) return report;
  Graph& g = *quantized.graph;
  auto constTensor = [](Value* v) -> Tensor* { return v && !v->isGraphInput() ? v->initializer() : nullptr; };
  auto onlyUse = [](const Value* v, const Node* n) {
    return !v->isGraphOutput() && std::all_of(v->uses().begin(), v->uses().end(), [&](const Use& u) { return u.node == n; });
  };
  std::vector<BiasedLayer> layers;
  for (const auto& nn : g.nodes()) {
    Node* n = nn.get();
    if (!n->isDomain("") || (n->opType != "Conv" && n->opType != "Gemm" && n->opType != "MatMul")) continue;
    Value* w = n->input(1);
    if (!w || !w->producer() || w->producer()->opType != "DequantizeLinear") continue;  // not quantized
    BiasedLayer l;
    l.channelsFirst = n->opType == "Conv";
    l.nodes.insert(n);
    Value* b = nullptr;
    Node* owner = n;  // the node reading the bias
    if (n->opType == "MatMul") {
      Node* add = n->output(0) && hasSingleUse(n->output(0)) ? n->output(0)->uses()[0].node : nullptr;
      if (!add || !add->isDomain("") || add->opType != "Add" || add->inputs().size() != 2) continue;
      b = add->input(0) == n->output(0) ? add->input(1) : add->input(0);
      owner = add;
      l.nodes.insert(add);
    } else {
      if (n->opType == "Gemm" && (n->attrFloat("beta", 1.0f) != 1.0f || n->attrInt("transA", 0) != 0)) continue;
      b = n->input(2);
    }
    if (!b || !owner->output(0)) continue;
    l.output = owner->output(0)->name();
    if (!reference.graph->findLocal(l.output)) {
      report.skipped.push_back(fmt::format("'{}': the float model has no value of that name", l.output));
      continue;
    }
    if (Tensor* t = constTensor(b); t && onlyUse(b, owner)) {
      if (t->dtype() != DType::Float || t->dims.size() != 1 || t->raw.size() != static_cast<size_t>(t->dims[0]) * 4) continue;
      l.bias = t;
    } else if (Node* dq = b->producer(); dq && dq->opType == "DequantizeLinear" && onlyUse(b, owner) && dq->inputs().size() >= 2) {
      Tensor* q = constTensor(dq->input(0));
      const Tensor* s = constTensor(dq->input(1));
      if (!q || !s || q->dtype() != DType::Int32 || s->dtype() != DType::Float || q->dims.size() != 1 ||
          q->raw.size() != static_cast<size_t>(q->dims[0]) * 4 || !onlyUse(dq->input(0), dq))
        continue;
      if (dq->inputs().size() > 2 && dq->input(2)) {  // a zero point: only all zeros
        const Tensor* z = constTensor(dq->input(2));
        if (!z || std::any_of(z->raw.data(), z->raw.data() + z->raw.size(), [](uint8_t c) { return c != 0; })) continue;
      }
      if (s->raw.size() != 4 && s->raw.size() != q->raw.size()) continue;
      l.bias = q;
      l.scale = s;
    } else {
      continue;
    }
    layers.push_back(std::move(l));
  }
  if (layers.empty()) return report;
  // At most maxSamples of the samples, evenly spaced (photos come as runs of views of one photo).
  std::vector<std::map<std::string, RtValue>> passSamples;
  const size_t use = maxSamples ? std::min(maxSamples, samples.size()) : samples.size();
  for (size_t i = 0; i < use; ++i) passSamples.push_back(samples[i * samples.size() / use]);
  // The float model's means, one pass.
  std::map<std::string, std::vector<double>> want;
  std::map<std::string, double> seen;
  {
    std::vector<std::string> names;
    std::map<std::string, bool> first;
    for (const BiasedLayer& l : layers) names.push_back(l.output), first[l.output] = l.channelsFirst;
    observeValues(reference, names, passSamples, [&](const std::string& name, const TensorData& t) {
      std::vector<double> m = channelMeans(t, first.at(name));
      std::vector<double>& acc = want[name];
      if (acc.empty()) acc.assign(m.size(), 0.0);
      if (m.empty() || m.size() != acc.size()) return;
      for (size_t c = 0; c < m.size(); ++c) acc[c] += m[c];
      seen[name] += 1;
    });
  }
  // Whether value `v` depends on any node in `nodes` (walking producers back to the inputs).
  auto dependsOn = [](const Value* v, const std::set<const Node*>& nodes) {
    std::vector<const Value*> stack{v};
    std::set<const Value*> visited;
    while (!stack.empty()) {
      const Value* x = stack.back();
      stack.pop_back();
      if (!x || !visited.insert(x).second) continue;
      const Node* p = x->producer();
      if (!p) continue;
      if (nodes.count(p)) return true;
      for (const Value* in : p->inputs()) stack.push_back(in);
    }
    return false;
  };
  double shiftSum = 0, shiftCount = 0;
  for (size_t b = 0; b < layers.size();) {
    std::set<const Node*> inPass;
    size_t e = b;
    while (e < layers.size()) {
      const BiasedLayer& l = layers[e];
      bool depends = false;
      for (const Node* n : l.nodes)
        for (const Value* in : n->inputs()) depends = depends || (in && dependsOn(in, inPass));
      if (e > b && depends) break;
      inPass.insert(l.nodes.begin(), l.nodes.end());
      ++e;
    }
    std::map<std::string, std::vector<double>> got;
    std::map<std::string, double> gotCount;
    std::map<std::string, bool> first;
    std::vector<std::string> names;
    for (size_t i = b; i < e; ++i) names.push_back(layers[i].output), first[layers[i].output] = layers[i].channelsFirst;
    observeValues(quantized, names, passSamples, [&](const std::string& name, const TensorData& t) {
      std::vector<double> m = channelMeans(t, first.at(name));
      std::vector<double>& acc = got[name];
      if (acc.empty()) acc.assign(m.size(), 0.0);
      if (m.empty() || m.size() != acc.size()) return;
      for (size_t c = 0; c < m.size(); ++c) acc[c] += m[c];
      gotCount[name] += 1;
    }, /*exposedOnly=*/true);
    report.passes++;
    for (size_t i = b; i < e; ++i) {
      BiasedLayer& l = layers[i];
      const std::vector<double>& f = want[l.output];
      const std::vector<double>& q = got[l.output];
      const int64_t channels = l.bias->dims[0];
      if (!(seen[l.output] > 0) || !(gotCount[l.output] > 0) || f.size() != q.size() || static_cast<int64_t>(f.size()) != channels) {
        report.skipped.push_back(fmt::format("'{}': no per-channel means of {} values", l.output, channels));
        continue;
      }
      // A copy (the bias bytes may be a view of the model file or shared with another model).
      std::string raw(reinterpret_cast<const char*>(l.bias->raw.data()), l.bias->raw.size());
      for (int64_t c = 0; c < channels; ++c) {
        const double d = q[static_cast<size_t>(c)] / gotCount[l.output] - f[static_cast<size_t>(c)] / seen[l.output];
        if (!std::isfinite(d)) continue;
        shiftSum += std::fabs(d);
        shiftCount += 1;
        if (l.scale) {
          const float* s = reinterpret_cast<const float*>(l.scale->raw.data());
          const float sc = s[l.scale->raw.size() == 4 ? 0 : c];
          if (!(sc > 0)) continue;
          int32_t v;
          std::memcpy(&v, raw.data() + c * 4, 4);
          const double nv = std::clamp(static_cast<double>(v) - std::nearbyint(d / sc), -2147483647.0, 2147483647.0);
          v = static_cast<int32_t>(nv);
          std::memcpy(raw.data() + c * 4, &v, 4);
        } else {
          float v;
          std::memcpy(&v, raw.data() + c * 4, 4);
          v = static_cast<float>(v - d);
          std::memcpy(raw.data() + c * 4, &v, 4);
        }
      }
      l.bias->setRaw(Buffer::fromString(std::move(raw)));
      report.corrected++;
    }
    b = e;
  }
  if (shiftCount > 0) report.meanShift = shiftSum / shiftCount;
  return report;
}

}  // namespace onnxtool
