// qoperator.cpp: QDQ -> QLinearMatMul / QLinearConv (see qoperator.h).
#include "quant/qoperator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "lib/tensor.h"

namespace onnxtool {

namespace {

bool isQuantizable(const Node& n) {
  return n.isDomain("") && (n.opType == "MatMul" || n.opType == "Gemm" || n.opType == "Conv");
}

const Tensor* constant(const Value* v) { return v && !v->isGraphInput() ? v->initializer() : nullptr; }

Value* addInit(Graph& g, Tensor t, const std::string& name) {
  t.name = g.uniqueName(name);
  TypeInfo type = TypeInfo::tensor(t.dtype(), Shape::of(t.dims));
  Value* v = g.addInitializer(std::move(t));
  v->setType(std::move(type));
  return v;
}

Tensor bytesTensor(DType dt, std::vector<int64_t> dims, std::string raw) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dt);
  t.dims = std::move(dims);
  t.setRaw(Buffer::fromString(std::move(raw)));
  return t;
}

std::vector<float> floatsOf(const Tensor& t) {
  std::vector<float> v(t.raw.size() / 4);
  std::memcpy(v.data(), t.raw.data(), v.size() * 4);
  return v;
}

}  // namespace

std::vector<std::string> outputsToCalibrate(const Model& model) {
  std::vector<std::string> out;
  if (!model.graph) return out;
  for (const auto& n : model.graph->nodes()) {
    if (!isQuantizable(*n) || !n->output(0)) continue;
    const Tensor* w = constant(n->input(1));
    if (!w || w->dtype() != DType::Float) continue;
    out.push_back(n->output(0)->name());
  }
  return out;
}

QOperatorReport convertQdqToQOperator(Model& model, const std::map<std::string, ValueRange>& ranges) {
  QOperatorReport report;
  if (!model.graph) return report;
  Graph& g = *model.graph;
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  std::set<Node*> maybeDead;
  std::set<Value*> inits;  // initializers that may have lost their last reader
  for (Node* n : order) {
    if (!isQuantizable(*n) || !n->output(0)) continue;
    auto keep = [&](const std::string& why) {
      report.kept.push_back(fmt::format("node '{}' ({}): {}", n->displayName(), n->opType, why));
    };
    Node* dx = n->input(0) ? n->input(0)->producer() : nullptr;
    Node* dw = n->input(1) ? n->input(1)->producer() : nullptr;
    if (!dx || dx->opType != "DequantizeLinear" || !dw || dw->opType != "DequantizeLinear") continue;  // not quantized
    Node* qx = dx->input(0) ? dx->input(0)->producer() : nullptr;
    if (!qx || qx->opType != "QuantizeLinear") continue;
    const Tensor* wq = constant(dw->input(0));
    if (!wq || wq->dtype() != DType::Int8 || !dw->input(2)) continue;
    bool gemm = n->opType == "Gemm", conv = n->opType == "Conv";
    if (gemm && n->input(2)) {
      keep("a Gemm bias (QLinearMatMul has none; the QDQ form keeps it exact)");
      continue;
    }
    if (conv && (!constant(n->input(2)) && n->input(2))) {
      keep("a Conv bias that is not a constant");
      continue;
    }
    Value* y = n->output(0);
    auto rit = ranges.find(y->name());
    if (rit == ranges.end()) {
      keep("calibration saw no values for its output");
      continue;
    }
    double lo = std::min(0.0f, rit->second.min), hi = std::max(0.0f, rit->second.max);
    double ys = hi > lo ? (hi - lo) / 255.0 : 1.0;
    double yz = std::clamp(std::nearbyint(-lo / ys), 0.0, 255.0);
    float ysf = static_cast<float>(ys);
    Value* vys = addInit(g, Tensor::fromFloats("", {}, {ysf}), y->name() + "_scale");
    Value* vyz = addInit(g, bytesTensor(DType::UInt8, {}, std::string(1, static_cast<char>(static_cast<uint8_t>(yz)))),
                         y->name() + "_zero_point");
    Value* xq = dx->input(0);
    Value* xs = dx->input(1);
    Value* xz = dx->input(2);
    Value* w = dw->input(0);
    Value* ws = dw->input(1);
    Value* wz = dw->input(2);
    Node* qop;
    std::string base = n->name.empty() ? y->name() : n->name;
    if (conv) {
      std::vector<Value*> ins = {xq, xs, xz, w, ws, wz, vys, vyz};
      if (const Tensor* b = constant(n->input(2))) {
        // int32 bias, scale x_scale * w_scale[m], zero point 0
        const Tensor* xsT = constant(xs);
        const Tensor* wsT = constant(ws);
        if (!xsT || !wsT || b->dtype() != DType::Float) {
          keep("scales or bias not constant float");
          continue;
        }
        std::vector<float> bf = floatsOf(*b), wsf = floatsOf(*wsT);
        float sx = floatsOf(*xsT).at(0);
        std::string raw(bf.size() * 4, '\0');
        for (size_t i = 0; i < bf.size(); ++i) {
          double s = static_cast<double>(sx) * (wsf.size() == 1 ? wsf[0] : wsf.at(i));
          double q = s > 0 ? std::nearbyint(bf[i] / s) : 0.0;
          auto v = static_cast<int32_t>(std::clamp(q, -2147483648.0, 2147483647.0));
          std::memcpy(raw.data() + i * 4, &v, 4);
        }
        ins.push_back(addInit(g, bytesTensor(DType::Int32, {static_cast<int64_t>(bf.size())}, std::move(raw)),
                              n->input(2)->name() + "_quantized"));
      }
      qop = g.addNode("QLinearConv", ins, {g.uniqueName(y->name() + "_quantized")}, "", n);
      for (const Attribute& a : n->attributes) qop->setAttr(a);
    } else {
      if (gemm && n->attrInt("transB", 0) != 0) {  // QLinearMatMul reads B as [K, N]
        int64_t rows = wq->dims.at(0), cols = wq->dims.at(1);
        std::string t(static_cast<size_t>(rows * cols), '\0');
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = static_cast<char>(wq->raw.data()[r * cols + c]);
        w = addInit(g, bytesTensor(DType::Int8, {cols, rows}, std::move(t)), w->name() + "_t");
      }
      qop = g.addNode("QLinearMatMul", {xq, xs, xz, w, ws, wz, vys, vyz}, {g.uniqueName(y->name() + "_quantized")}, "", n);
    }
    qop->name = g.uniqueName(base + "_quant");
    Node* dq = g.addNode("DequantizeLinear", {qop->output(0), vys, vyz}, {g.uniqueName(y->name() + "_dequantized")}, "", n);
    dq->name = dq->output(0)->name();
    if (conv && n->input(2)) inits.insert(n->input(2));  // the float bias, now int32
    if (w != dw->input(0)) inits.insert(dw->input(0));  // the untransposed weight
    std::string name = y->name();
    TypeInfo type = y->type();
    y->replaceAllUsesWith(dq->output(0));
    g.removeNode(n);
    g.renameValue(dq->output(0), name);
    dq->output(0)->setType(type);
    maybeDead.insert(dx);
    maybeDead.insert(dw);
    report.nodesConverted++;
  }
  // DequantizeLinear nodes nothing reads any more, then the initializers only they read.
  for (Node* d : maybeDead) {
    if (d->output(0)->hasUses() || d->output(0)->isGraphOutput()) continue;
    for (Value* v : d->inputs())
      if (v && v->initializer()) inits.insert(v);
    g.removeNode(d);
  }
  for (Value* v : inits)
    if (!v->hasUses() && !v->isGraphOutput() && !v->isGraphInput()) g.removeInitializer(v);
  return report;
}

}  // namespace onnxtool
