// smooth_quant.cpp: migrating activation outliers into the weights (see smooth_quant.h).
#include "quant/smooth_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "lib/error.h"
#include "lib/tensor.h"
#include "quant/static_qdq.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

const Tensor* constantFloat(const Value* v) {
  if (!v || v->isGraphInput() || !v->initializer()) return nullptr;
  const Tensor* t = v->initializer();
  if (t->dtype() != DType::Float || t->raw.size() != t->expectedBytes().value_or(UINT64_MAX)) return nullptr;
  return t;
}

std::vector<float> floatsOf(const TensorData& t) {
  std::vector<float> v(t.raw.size() / 4);
  std::memcpy(v.data(), t.raw.data(), v.size() * 4);
  return v;
}

/// One layer to smooth: its weight with K (the input channels) along rows, or along columns for
/// a Gemm with transB.
struct Layer {
  Node* node;
  const Tensor* weight;
  bool kAlongColumns;
  int64_t k;
};

/// max |W_j| over the input channels j of a layer's weight.
void weightRowMax(const Layer& l, std::vector<double>& out) {
  std::vector<float> f = floatsOf(*l.weight);
  int64_t cols = l.weight->dims[1];
  for (size_t i = 0; i < f.size(); ++i) {
    auto j = static_cast<size_t>(l.kAlongColumns ? static_cast<int64_t>(i) % cols : static_cast<int64_t>(i) / cols);
    if (std::isfinite(f[i])) out[j] = std::max(out[j], static_cast<double>(std::fabs(f[i])));
  }
}

}  // namespace

SmoothQuantReport smoothQuant(Model& model, const std::vector<std::map<std::string, RtValue>>& samples, double alpha,
                              const QuantScheme& scheme, int64_t minElements, bool normOutputsOnly) {
  SmoothQuantReport report;
  if (!(alpha >= 0 && alpha <= 1)) fail(ErrorKind::InvalidInput, "--alpha {}: expected a value in [0, 1]", alpha);
  if (!model.graph) return report;
  Graph& g = *model.graph;
  // The layers, grouped by the activation they read (in graph order).
  std::vector<Value*> order;
  std::unordered_map<Value*, std::vector<Layer>> groups;
  for (const auto& np : g.nodes()) {
    Node* n = np.get();
    if (!n->isDomain("") || (n->opType != "MatMul" && n->opType != "Gemm") || !n->input(0)) continue;
    if (!exclusionReason(*n, scheme).empty()) continue;
    const Tensor* w = constantFloat(n->input(1));
    if (!w || w->dims.size() != 2 || w->numElements().value_or(0) < minElements) continue;
    bool gemm = n->opType == "Gemm";
    if (gemm && n->attrInt("transA", 0) != 0) continue;
    bool cols = gemm && n->attrInt("transB", 0) != 0;
    Value* x = n->input(0);
    if (x->type().isTensor() && x->type().elemType != 0 && x->type().dtype() != DType::Float) continue;
    if (normOutputsOnly) {
      const Node* p = x->producer();
      if (!p || !p->isDomain("") || (p->opType != "LayerNormalization" && p->opType != "RMSNormalization") ||
          p->output(0) != x)
        continue;
    }
    auto& layers = groups[x];
    if (layers.empty()) order.push_back(x);
    layers.push_back({n, w, cols, cols ? w->dims[1] : w->dims[0]});
  }
  if (order.empty()) return report;
  // Per-channel max |X_j| over the last axis, on the calibration samples.
  std::vector<std::string> names;
  for (Value* x : order) names.push_back(x->name());
  std::unordered_map<std::string, std::vector<double>> actMax;
  std::unordered_map<std::string, bool> mismatch;
  observeValues(model, names, samples, [&](const std::string& name, const TensorData& t) {
    if (t.dtype() != DType::Float || t.dims.empty() || t.dims.back() <= 0) return;
    auto k = static_cast<size_t>(t.dims.back());
    auto& m = actMax[name];
    if (m.empty()) m.assign(k, 0.0);
    if (m.size() != k) {
      mismatch[name] = true;
      return;
    }
    size_t n = static_cast<size_t>(t.numElements().value_or(0));
    const float* p = reinterpret_cast<const float*>(t.raw.data());
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(p[i])) m[i % k] = std::max(m[i % k], static_cast<double>(std::fabs(p[i])));
  });
  std::set<Value*> oldWeights;
  for (Value* x : order) {
    std::vector<Layer>& layers = groups[x];
    auto skip = [&](const std::string& why) {
      for (const Layer& l : layers)
        report.skipped.push_back(fmt::format("node '{}' ({}): {}", l.node->displayName(), l.node->opType, why));
    };
    auto ait = actMax.find(x->name());
    if (ait == actMax.end() || mismatch[x->name()]) {
      skip("calibration saw no float activation of a fixed channel count");
      continue;
    }
    const std::vector<double>& am = ait->second;
    int64_t k = static_cast<int64_t>(am.size());
    if (std::any_of(layers.begin(), layers.end(), [&](const Layer& l) { return l.k != k; })) {
      skip(fmt::format("the activation's last axis ({}) is not the weight's input channels", k));
      continue;
    }
    std::vector<double> wm(static_cast<size_t>(k), 0.0);
    for (const Layer& l : layers) weightRowMax(l, wm);
    std::vector<float> s(static_cast<size_t>(k), 1.0f), inv(static_cast<size_t>(k), 1.0f);
    for (size_t j = 0; j < s.size(); ++j) {
      if (!(am[j] > 0) || !(wm[j] > 0)) continue;  // a dead channel: nothing to migrate
      double v = std::pow(am[j], alpha) / std::pow(wm[j], 1.0 - alpha);
      if (!std::isfinite(v) || !(v > 0)) continue;
      s[j] = static_cast<float>(v);
      inv[j] = 1.0f / s[j];
    }
    // Weights: row (or column) j times s_j.
    std::map<std::pair<Value*, bool>, Value*> scaledWeights;  // (weight, K along columns): shared by layers
    for (const Layer& l : layers) {
      Value* wv = l.node->input(1);
      auto key = std::make_pair(wv, l.kAlongColumns);
      auto it = scaledWeights.find(key);
      if (it == scaledWeights.end()) {
        std::vector<float> f = floatsOf(*l.weight);
        int64_t cols = l.weight->dims[1];
        for (size_t i = 0; i < f.size(); ++i)
          f[i] *= s[static_cast<size_t>(l.kAlongColumns ? static_cast<int64_t>(i) % cols : static_cast<int64_t>(i) / cols)];
        Value* nv = addInitializer(g, Tensor::fromFloats("", l.weight->dims, f), wv->name() + "_smoothed");
        it = scaledWeights.emplace(key, nv).first;
        oldWeights.insert(wv);
      }
      l.node->setInput(1, it->second);
      report.layers++;
    }
    // Activation: fold 1/s into a LayerNormalization read only by these layers, else a Mul.
    Node* p = x->producer();
    bool onlyLayers = !x->isGraphOutput() && std::all_of(x->uses().begin(), x->uses().end(), [&](const Use& u) {
      return u.index == 0 && std::any_of(layers.begin(), layers.end(), [&](const Layer& l) { return l.node == u.node; });
    });
    const Tensor* gamma = p && p->opType == "LayerNormalization" && p->isDomain("") ? constantFloat(p->input(1)) : nullptr;
    const Tensor* beta = gamma && p->input(2) ? constantFloat(p->input(2)) : nullptr;
    bool foldable = gamma && onlyLayers && p->output(0) == x && p->attrInt("axis", -1) == -1 && gamma->dims.size() == 1 &&
                    gamma->dims[0] == k && (!p->input(2) || (beta && beta->dims.size() == 1 && beta->dims[0] == k));
    if (foldable) {
      for (int i : {1, 2}) {
        Value* v = p->input(static_cast<size_t>(i));
        if (!v) continue;
        std::vector<float> f = floatsOf(*v->initializer());
        for (size_t j = 0; j < f.size(); ++j) f[j] /= s[j];
        p->setInput(static_cast<size_t>(i), addInitializer(g, Tensor::fromFloats("", {k}, f), v->name() + "_smoothed"));
        oldWeights.insert(v);
      }
      report.folded++;
    } else {
      Value* vinv = addInitializer(g, Tensor::fromFloats("", {k}, inv), x->name() + "_smooth_scale");
      Node* mul = g.addNode("Mul", {x, vinv}, {g.uniqueName(x->name() + "_smoothed")}, "", layers.front().node);
      mul->name = mul->output(0)->name();
      mul->output(0)->setType(x->type());
      for (const Layer& l : layers) l.node->setInput(0, mul->output(0));
      report.muls++;
    }
  }
  for (Value* v : oldWeights)
    if (!v->hasUses() && !v->isGraphOutput() && !v->isGraphInput()) g.removeInitializer(v);
  return report;
}

}  // namespace onnxtool
