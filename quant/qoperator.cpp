// qoperator.cpp: QDQ -> QLinearMatMul / QLinearConv (see qoperator.h).
#include "quant/qoperator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "lib/tensor.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool isQuantizable(const Node& n) {
  return n.isDomain("") && (n.opType == "MatMul" || n.opType == "Gemm" || n.opType == "Conv");
}

const Tensor* constant(const Value* v) { return v && !v->isGraphInput() ? v->initializer() : nullptr; }

Tensor bytesTensor(DType dt, std::vector<int64_t> dims, std::string raw) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dt);
  t.dims = std::move(dims);
  t.setRaw(Buffer::fromString(std::move(raw)));
  return t;
}

std::vector<float> floatsOf(const TensorData& t) {
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
  return convertQdqToQOperator(model, ranges, QuantScheme{});
}

QOperatorReport convertQdqToQOperator(Model& model, const std::map<std::string, ValueRange>& ranges,
                                      const QuantScheme& scheme) {
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
    if (!wq || (wq->dtype() != DType::Int8 && wq->dtype() != DType::UInt8) || !dw->input(2)) continue;
    bool gemm = n->opType == "Gemm", conv = n->opType == "Conv";
    if (gemm && n->input(2)) {
      keep("a Gemm bias (QLinearMatMul has none; the QDQ form keeps it exact)");
      continue;
    }
    // The Conv bias as int32 (scale x scale * w scale): the one the QDQ form already wrote behind
    // a DequantizeLinear, or the float constant quantized here.
    Node* db = conv && n->input(2) ? n->input(2)->producer() : nullptr;
    Value* biasQ = nullptr;
    std::optional<Tensor> newBias;
    if (db && db->opType == "DequantizeLinear" && constant(db->input(0)) && constant(db->input(0))->dtype() == DType::Int32) {
      biasQ = db->input(0);
    } else if (conv && n->input(2)) {
      const Tensor* b = constant(n->input(2));
      const Tensor* xsT = constant(dx->input(1));
      const Tensor* wsT = constant(dw->input(1));
      if (!b || !xsT || !wsT || b->dtype() != DType::Float || xsT->dtype() != DType::Float || wsT->dtype() != DType::Float) {
        keep("a Conv bias that is not a constant float");
        continue;
      }
      QuantizedBias qb = quantizeBias(*b, floatsOf(*xsT).at(0), floatsOf(*wsT));
      if (qb.q.raw.empty()) {
        keep("the bias does not fit int32 at scale x scale * w scale");
        continue;
      }
      newBias = std::move(qb.q);
    }
    Value* y = n->output(0);
    auto rit = ranges.find(y->name());
    if (rit == ranges.end()) {
      keep("calibration saw no values for its output");
      continue;
    }
    QuantParams yp = activationParams(rit->second, scheme);
    Value* vys = addInitializer(g, scalarTensor(DType::Float, yp.scale), y->name() + "_scale");
    Value* vyz = addInitializer(g, scalarTensor(scheme.activationType, static_cast<double>(yp.zeroPoint)), y->name() + "_zero_point");
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
      if (newBias) biasQ = addInitializer(g, std::move(*newBias), n->input(2)->name() + "_quantized");
      if (biasQ) ins.push_back(biasQ);
      qop = g.addNode("QLinearConv", ins, {g.uniqueName(y->name() + "_quantized")}, "", n);
      for (const Attribute& a : n->attributes) qop->setAttr(a);
    } else {
      if (gemm && n->attrInt("transB", 0) != 0) {  // QLinearMatMul reads B as [K, N]
        int64_t rows = wq->dims.at(0), cols = wq->dims.at(1);
        std::string t(static_cast<size_t>(rows * cols), '\0');
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = static_cast<char>(wq->raw.data()[r * cols + c]);
        w = addInitializer(g, bytesTensor(wq->dtype(), {cols, rows}, std::move(t)), w->name() + "_t");
      }
      qop = g.addNode("QLinearMatMul", {xq, xs, xz, w, ws, wz, vys, vyz}, {g.uniqueName(y->name() + "_quantized")}, "", n);
    }
    qop->name = g.uniqueName(base + "_quant");
    Node* dq = g.addNode("DequantizeLinear", {qop->output(0), vys, vyz}, {g.uniqueName(y->name() + "_dequantized")}, "", n);
    dq->name = dq->output(0)->name();
    if (conv && n->input(2)) {
      if (db && db->opType == "DequantizeLinear") maybeDead.insert(db);
      else inits.insert(n->input(2));  // the float bias, now int32
    }
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
