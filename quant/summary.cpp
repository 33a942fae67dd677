// summary.cpp: the quantization summary `inspect` prints (see summary.h).
#include "quant/summary.h"

#include <optional>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "lib/tensor.h"

namespace onnxtool {

namespace {

/// Where an op keeps its quantized weight and its scales.
struct QuantOpLayout {
  int weight = -1;           ///< input index of the quantized weight, -1: none
  std::vector<int> scales;   ///< input indices of scales
  bool blocked = false;      ///< scales are per block (MatMulNBits)
};

std::optional<QuantOpLayout> layoutOf(const Node& n) {
  std::string_view d = canonicalDomain(n.domain);
  const std::string& op = n.opType;
  if (d.empty()) {
    if (op == "QuantizeLinear") return QuantOpLayout{-1, {1}};
    if (op == "DequantizeLinear") return QuantOpLayout{0, {1}};
    if (op == "DynamicQuantizeLinear") return QuantOpLayout{};
    // Their scales are applied by a float Mul after; the weight zero point shows the granularity.
    if (op == "MatMulInteger" || op == "ConvInteger") return QuantOpLayout{1, {3}};
    if (op == "QLinearConv" || op == "QLinearMatMul") return QuantOpLayout{3, {1, 4, 6}};
    return std::nullopt;
  }
  if (d != "com.microsoft") return std::nullopt;
  if (op == "QuantizeLinear") return QuantOpLayout{-1, {1}};
  if (op == "DequantizeLinear") return QuantOpLayout{0, {1}};
  if (op == "MatMulNBits") return QuantOpLayout{1, {2}, true};
  if (op == "DynamicQuantizeMatMul") return QuantOpLayout{1, {2}};
  if (op == "MatMulIntegerToFloat") return QuantOpLayout{1, {2, 3}};
  if (op == "QGemm") return QuantOpLayout{3, {1, 4, 7}};
  if (op == "QAttention") return QuantOpLayout{1, {3, 4}};
  if (op == "QLinearAdd" || op == "QLinearMul") return QuantOpLayout{3, {1, 4, 6}};
  if (op.rfind("QLinear", 0) == 0 || op == "DynamicQuantizeLSTM" || op == "QOrderedMatMul" ||
      op == "QOrderedAttention" || op == "QEmbedLayerNormalization" || op == "GatherBlockQuantized")
    return QuantOpLayout{};
  return std::nullopt;
}

std::string opKey(const Node& n) {
  std::string_view d = canonicalDomain(n.domain);
  return d.empty() ? n.opType : fmt::format("{}::{}", d, n.opType);
}

/// The dims of a constant (initializer or Constant node output), or nullopt.
std::optional<std::vector<int64_t>> constantDims(const Value* v) {
  if (!v) return std::nullopt;
  if (const Tensor* t = v->initializer()) return t->dims;
  if (const Node* p = v->producer(); p && p->opType == "Constant" && p->attr("value") && p->attr("value")->t)
    return p->attr("value")->t->dims;
  return std::nullopt;
}

void addBytes(QuantizationSummary::Bytes& b, const TensorData& t) {
  b.tensors++;
  b.elements += static_cast<uint64_t>(t.numElements().value_or(0));
  b.bytes += t.expectedBytes().value_or(0);
}

/// A Gather of an int8/uint8 table read by a Cast to float (quantize --int8 --dynamic's embedding
/// form, Mul(Cast<float>(Gather(Tq, ids)), Gather(Ts, ids))): counted as a quantized "Gather",
/// its scales per channel (per row) or per tensor by the constant the Mul after the Cast gathers.
bool countInt8Gather(const Node& n, QuantizationSummary& s) {
  const Value* t = n.input(0);
  const Tensor* tt = t ? t->initializer() : nullptr;
  if (!tt || (tt->dtype() != DType::Int8 && tt->dtype() != DType::UInt8) || !n.output(0)) return false;
  const Node* cast = nullptr;
  for (const Use& u : n.output(0)->uses())
    if (u.node->opType == "Cast" && u.node->attrInt("to", 0) == static_cast<int64_t>(DType::Float)) cast = u.node;
  if (!cast || !cast->output(0)) return false;
  s.quantizationOps["Gather"]++;
  for (const Use& u : cast->output(0)->uses()) {
    const Node* mul = u.node;
    if (mul->opType != "Mul" || mul->inputs().size() != 2) continue;
    const Value* other = mul->input(0) == cast->output(0) ? mul->input(1) : mul->input(0);
    const Node* p = other ? other->producer() : nullptr;
    auto dims = constantDims(p && p->opType == "Gather" ? p->input(0) : other);
    if (!dims) continue;
    int64_t count = 1;
    for (int64_t d : *dims) count *= d;
    (count <= 1 ? s.perTensorScales : s.perChannelScales)++;
    break;
  }
  return true;
}

void visit(const Graph& g, QuantizationSummary& s, std::unordered_set<const Value*>& quantizedWeights) {
  std::unordered_set<const Value*> dequantized, rowQuantized;
  for (const auto& np : g.nodes())
    if (np->opType == "DequantizeLinear" && np->output(0)) dequantized.insert(np->output(0));
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    for (const Graph* sub : n.subgraphs()) visit(*sub, s, quantizedWeights);
    if (n.opType == "Gather" && n.isDomain("") && countInt8Gather(n, s)) {
      quantizedWeights.insert(n.input(0));
      continue;
    }
    auto layout = layoutOf(n);
    if (!layout) {
      for (const Value* v : n.inputs())
        if (v && dequantized.count(v)) {
          s.qdqOps[opKey(n)]++;
          break;
        }
      continue;
    }
    s.quantizationOps[opKey(n)]++;
    if (n.opType == "DynamicQuantizeLinear") s.runtimeScales++;
    if (n.opType == "MatMulInteger" && n.isDomain("")) {
      // The per-row form (quantize --int8 --dynamic): the activation comes from a quantizer in
      // plain ops (its scales computed at run time, counted once), the weight's scale is the
      // constant of the first Mul after MatMulInteger (-> Sub -> Cast ->) when it has no zero point.
      const Value* a = n.input(0);
      if (a && a->producer() && a->producer()->opType == "Cast" && rowQuantized.insert(a).second) s.runtimeScales++;
      if (!n.input(3)) {
        const Value* v = n.output(0);
        for (int hops = 0; v && hops < 3 && v->uses().size() == 1; ++hops) {
          const Node* r = v->uses()[0].node;
          if (r->opType == "Mul" && r->inputs().size() == 2) {
            auto dims = constantDims(r->input(0) == v ? r->input(1) : r->input(0));
            if (dims) {
              int64_t count = 1;
              for (int64_t d : *dims) count *= d;
              (count <= 1 ? s.perTensorScales : s.perChannelScales)++;
            }
            break;
          }
          v = r->output(0);
        }
      }
    }
    if (layout->weight >= 0) {
      const Value* w = n.input(static_cast<size_t>(layout->weight));
      if (w && w->initializer()) quantizedWeights.insert(w);
    }
    bool blocked = layout->blocked || n.attrInt("block_size", 0) > 0;
    for (int i : layout->scales) {
      const Value* sv = n.input(static_cast<size_t>(i));
      if (!sv) continue;
      auto dims = constantDims(sv);
      if (blocked) {
        s.blockedScales++;
      } else if (!dims) {
        s.runtimeScales++;
      } else {
        int64_t count = 1;
        for (int64_t d : *dims) count *= d;
        (count <= 1 ? s.perTensorScales : s.perChannelScales)++;
      }
    }
  }
}

void countInitializers(const Graph& g, QuantizationSummary& s, const std::unordered_set<const Value*>& quantizedWeights) {
  for (const Value* v : g.initializers()) {
    const TensorData& t = *v->initializer();
    std::string dt(dtypeName(t.dtype()));
    addBytes(s.weightsByDtype[dt], t);
    if (quantizedWeights.count(v)) addBytes(s.quantizedWeightsByDtype[dt], t);
  }
  for (const auto& np : g.nodes())
    for (const Graph* sub : np->subgraphs()) countInitializers(*sub, s, quantizedWeights);
}

}  // namespace

QuantizationSummary summarizeQuantization(const Model& model) {
  QuantizationSummary s;
  if (!model.graph) return s;
  std::unordered_set<const Value*> quantizedWeights;
  visit(*model.graph, s, quantizedWeights);
  countInitializers(*model.graph, s, quantizedWeights);
  return s;
}

}  // namespace onnxtool
