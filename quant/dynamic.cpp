// dynamic.cpp: int8 dynamic quantization of MatMul/Gemm/Conv weights and Gather tables (see dynamic.h).
#include "quant/dynamic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "lib/error.h"
#include "lib/tensor.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

const Tensor* constantWeight(const Value* v) {
  if (!v || v->isGraphInput()) return nullptr;  // an overridable initializer is not a constant
  const Tensor* t = v->initializer();
  if (!t || t->dtype() != DType::Float || t->dims.size() != 2) return nullptr;
  if (t->raw.size() != t->expectedBytes().value_or(UINT64_MAX)) return nullptr;
  return t;
}

std::vector<float> floatsOf(const TensorData& t) {
  std::vector<float> v(t.raw.size() / 4);
  std::memcpy(v.data(), t.raw.data(), t.raw.size());
  return v;
}

struct DynamicWeight {
  Value* q = nullptr;      ///< int8/uint8 [K, N]
  Value* scale = nullptr;  ///< float [N] (per tensor: scalar)
  Value* zero = nullptr;   ///< int8/uint8 [N] (per tensor: scalar)
  bool zeroIsZero = true;  ///< every zero point 0 (symmetric int8): MatMulInteger needs none
  std::vector<int32_t> colSum;  ///< sum over K of (q - zero) per column N
  Value* colSumValue = nullptr; ///< int32 [N], added on the first per-row use
};

/// The weight as a [K, N] matrix (transposed first when `transposed`: [N, K]), quantized per
/// column N (or per tensor) as the scheme says.
DynamicWeight quantizeMatrix(Graph& g, const TensorData& w, bool transposed, const std::string& base, const QuantScheme& scheme) {
  std::vector<float> f = floatsOf(w);
  int64_t rows = w.dims[0], cols = w.dims[1];
  int64_t K = transposed ? cols : rows, N = transposed ? rows : cols;
  std::vector<float> kn(f.size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      kn[static_cast<size_t>(k * N + n)] = transposed ? f[static_cast<size_t>(n * cols + k)] : f[static_cast<size_t>(k * cols + n)];
  QuantizedWeight qw = quantizeWeight(Tensor::fromFloats("", {K, N}, kn), 1, scheme, scheme.weightType);
  DynamicWeight r;
  // Column sums of (q - zero): the per-row zero point's correction, zero[m] * colSum[n].
  const auto* qd = reinterpret_cast<const uint8_t*>(qw.q.raw.data());
  const auto* zd = reinterpret_cast<const uint8_t*>(qw.zero.raw.data());
  const bool s8 = qw.q.dtype() == DType::Int8, perColumnZero = qw.zero.numElements().value_or(1) == N;
  auto as = [&](uint8_t b) { return s8 ? static_cast<int32_t>(static_cast<int8_t>(b)) : static_cast<int32_t>(b); };
  r.colSum.assign(static_cast<size_t>(N), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t z = as(zd[perColumnZero ? n : 0]);
    r.zeroIsZero = r.zeroIsZero && z == 0;
    for (int64_t k = 0; k < K; ++k) r.colSum[static_cast<size_t>(n)] += as(qd[k * N + n]) - z;
  }
  r.q = addInitializer(g, std::move(qw.q), base + "_quantized");
  r.scale = addInitializer(g, std::move(qw.scale), base + "_scale");
  r.zero = addInitializer(g, std::move(qw.zero), base + "_zero_point");
  return r;
}

/// The constants the per-row quantizers share, added once.
struct RowConstants {
  Value* zero = nullptr;    ///< float 0
  Value* levels = nullptr;  ///< float 255
  Value* tiny = nullptr;    ///< float FLT_MIN: the scale of an all-zero row (no 0 / 0)
  Value* axes = nullptr;    ///< int64 [1] {-1} (opset 18+: ReduceMax/ReduceMin take axes as an input)
  Value* u8zero = nullptr;  ///< uint8 0: MatMulInteger's a_zero_point when a b_zero_point follows
};

/// x quantized per row (the last axis): scale [..., 1], uint8 values, the zero point as int32 [..., 1].
struct RowQuantized {
  Value* q = nullptr;
  Value* scale = nullptr;
  Value* zero32 = nullptr;
};

Tensor int32Tensor(const std::vector<int64_t>& dims, const std::vector<int32_t>& v) {
  Tensor t;
  t.dataType = static_cast<int32_t>(DType::Int32);
  t.dims = dims;
  std::string raw(v.size() * sizeof(int32_t), '\0');
  if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());
  t.setRaw(Buffer::fromString(std::move(raw)));
  return t;
}

/// DynamicQuantizeLinear's arithmetic per row of x, in standard ops (opset 11+):
///   lo = Min(ReduceMin(x), 0), hi = Max(ReduceMax(x), 0)        (over the last axis, kept)
///   scale = Max((hi - lo) / 255, FLT_MIN), zero = Round(Clip(-lo / scale, 0, 255))
///   q = Cast<uint8>(Clip(Round(x / scale) + zero, 0, 255)), zero32 = Cast<int32>(zero)
RowQuantized quantizeRows(Graph& g, Value* x, Node* before, RowConstants& c, int64_t opset) {
  if (!c.zero) {
    c.zero = addInitializer(g, scalarTensor(DType::Float, 0.0), "row_quant_zero");
    c.levels = addInitializer(g, scalarTensor(DType::Float, 255.0), "row_quant_levels");
    c.tiny = addInitializer(g, scalarTensor(DType::Float, static_cast<double>(std::numeric_limits<float>::min())),
                            "row_quant_min_scale");
    if (opset >= 18) c.axes = addInitializer(g, Tensor::fromInt64s("", {1}, {-1}), "row_quant_axes");
  }
  const std::string base = x->name();
  auto op = [&](const std::string& type, const std::vector<Value*>& in, const std::string& suffix,
                const std::vector<Attribute>& attrs = {}) {
    Node* n = g.addNode(type, in, {g.uniqueName(base + suffix)}, "", before);
    n->name = n->output(0)->name();
    for (const Attribute& a : attrs) n->setAttr(a);
    return n->output(0);
  };
  auto reduce = [&](const std::string& type, const std::string& suffix) {
    if (c.axes) return op(type, {x, c.axes}, suffix, {Attribute::ofInt("keepdims", 1)});
    return op(type, {x}, suffix, {Attribute::ofInts("axes", {-1}), Attribute::ofInt("keepdims", 1)});
  };
  Value* hi = op("Max", {reduce("ReduceMax", "_row_max"), c.zero}, "_row_hi");
  Value* lo = op("Min", {reduce("ReduceMin", "_row_min"), c.zero}, "_row_lo");
  Value* range = op("Sub", {hi, lo}, "_row_range");
  RowQuantized r;
  r.scale = op("Max", {op("Div", {range, c.levels}, "_row_step"), c.tiny}, "_row_scale");
  Value* zero = op("Round", {op("Clip", {op("Div", {op("Neg", {lo}, "_row_neg_lo"), r.scale}, "_row_zero_float"), c.zero, c.levels},
                                "_row_zero_clipped")},
                   "_row_zero_point");
  Value* q = op("Add", {op("Round", {op("Div", {x, r.scale}, "_row_scaled")}, "_row_rounded"), zero}, "_row_shifted");
  q = op("Clip", {q, c.zero, c.levels}, "_row_saturated");
  r.q = op("Cast", {q}, "_row_quantized", {Attribute::ofInt("to", static_cast<int64_t>(DType::UInt8))});
  r.zero32 = op("Cast", {zero}, "_row_zero_point_int32", {Attribute::ofInt("to", static_cast<int64_t>(DType::Int32))});
  return r;
}

/// A Conv weight [M, C, k...] for ConvInteger: symmetric per output channel (or per tensor) with one
/// zero point for the tensor (ONNX Runtime's ConvInteger takes no per-channel zero points): int8
/// with zero point 0, or uint8 with zero point 128 (its kernel is uint8 x uint8 only). The scale
/// is laid out [M, 1, ...] to broadcast over the output [N, M, ...].
DynamicWeight quantizeConvWeight(Graph& g, const TensorData& w, bool asUInt8, const std::string& base, const QuantScheme& scheme) {
  QuantizedWeight qw = quantizeWeight(w, 0, scheme, DType::Int8);
  if (asUInt8) {
    std::string raw(qw.q.raw.size(), '\0');
    for (size_t i = 0; i < raw.size(); ++i)
      raw[i] = static_cast<char>(static_cast<uint8_t>(static_cast<int>(static_cast<int8_t>(qw.q.raw.data()[i])) + 128));
    qw.q.dataType = static_cast<int32_t>(DType::UInt8);
    qw.q.setRaw(Buffer::fromString(std::move(raw)));
  }
  std::vector<int64_t> scaleDims;
  if (scheme.perChannel) {
    scaleDims.assign(w.dims.size() - 1, 1);
    scaleDims[0] = w.dims[0];
  }
  DynamicWeight r;
  r.q = addInitializer(g, std::move(qw.q), base + "_quantized");
  r.scale = addInitializer(g, Tensor::fromFloats("", scaleDims, qw.scales), base + "_scale");
  r.zero = addInitializer(g, scalarTensor(asUInt8 ? DType::UInt8 : DType::Int8, asUInt8 ? 128 : 0), base + "_zero_point");
  return r;
}

Value* nodeOutput(Graph& g, Node* before, const std::string& op, const std::vector<Value*>& in, const std::string& name,
                   const std::vector<Attribute>& attrs = {}) {
  Node* n = g.addNode(op, in, {g.uniqueName(name)}, "", before);
  n->name = n->output(0)->name();
  for (const Attribute& a : attrs) n->setAttr(a);
  return n->output(0);
}

/// An embedding table quantized per row for Gather (see dynamic.h).
struct GatherTable {
  Value* q = nullptr;      ///< int8, the table's dims
  Value* scale = nullptr;  ///< float [V, 1, ...]
};

/// Why Gather node `n` keeps its table float ("" when it can take an int8 one): the table is a
/// constant float tensor of rank 2 or more read along axis 0.
std::string gatherTableProblem(const Node& n, int64_t minElements) {
  const Value* tv = n.input(0);
  const Tensor* t = tv && !tv->isGraphInput() ? tv->initializer() : nullptr;
  if (!t || t->dtype() != DType::Float || t->dims.size() < 2 || t->raw.size() != t->expectedBytes().value_or(UINT64_MAX))
    return "the table is not a constant float tensor of rank 2 or more";
  const auto rank = static_cast<int64_t>(t->dims.size());
  if (int64_t axis = n.attrInt("axis", 0); axis != 0 && axis != -rank) return "Gather along an axis other than 0";
  if (t->numElements().value_or(0) < minElements) return fmt::format("the table has fewer than {} elements", minElements);
  if (!n.input(1) || !n.output(0)) return "no indices";
  return {};
}

/// The table int8 symmetric per row (axis 0): quant_scheme's weight arithmetic, zero point 0.
GatherTable quantizeGatherTable(Graph& g, const TensorData& t, const std::string& base, const QuantScheme& scheme) {
  QuantScheme rows = scheme;
  rows.perChannel = true;
  rows.reduceRange = false;  // no integer GEMM reads it: all 8 bits
  QuantizedWeight qw = quantizeWeight(t, 0, rows, DType::Int8);
  std::vector<int64_t> scaleDims(t.dims.size(), 1);
  scaleDims[0] = t.dims[0];
  GatherTable r;
  r.q = addInitializer(g, std::move(qw.q), base + "_quantized");
  r.scale = addInitializer(g, Tensor::fromFloats("", scaleDims, qw.scales), base + "_scale");
  return r;
}

}  // namespace

DynamicQuantizeReport quantizeDynamic(Model& model, const DynamicQuantizeOptions& o) {
  DynamicQuantizeReport report;
  if (!model.graph) return report;
  int64_t opset = model.opsetVersion("").value_or(0);
  if (opset < 11)
    fail(ErrorKind::Unsupported,
         "int8 dynamic quantization needs opset 11 or newer (DynamicQuantizeLinear, MatMulInteger); the model has {} "
         "(onnxtool convert --opset 13 moves it)",
         opset);
  Graph& g = *model.graph;
  std::unordered_map<Value*, std::array<Value*, 3>> quantizedInputs;  // x -> (xq, xs, xz)
  std::unordered_map<std::string, DynamicWeight> weights;            // weight name + layout -> int8
  std::unordered_map<Value*, RowQuantized> rowQuantized;             // x -> its per-row quantizer
  RowConstants rowConsts;
  std::set<Value*> convBiases;  // float Conv biases replaced by their [M, 1, ...] layout
  std::unordered_map<Value*, GatherTable> tables;  // float embedding table -> int8 per row
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  for (Node* n : order) {
    const std::vector<std::string>& ops = o.scheme.opTypes.empty() ? o.ops : o.scheme.opTypes;
    if (!n->isDomain("") || std::find(ops.begin(), ops.end(), n->opType) == ops.end()) continue;
    bool gemm = n->opType == "Gemm";
    Value* x = n->input(0);
    const Tensor* w = constantWeight(n->input(1));
    auto skip = [&](const std::string& why) {
      report.skipped.push_back(fmt::format("node '{}' ({}): {}", n->displayName(), n->opType, why));
    };
    if (!x || !n->output(0)) continue;
    if (std::string why = exclusionReason(*n, o.scheme); !why.empty()) {
      skip(why);
      continue;
    }
    if (n->opType == "Gather") {
      if (std::string why = gatherTableProblem(*n, o.minElements); !why.empty()) {
        skip(why);
        continue;
      }
      Value* tv = n->input(0);
      auto tit = tables.find(tv);
      if (tit == tables.end()) {
        const TensorData& t = *tv->initializer();
        tit = tables.emplace(tv, quantizeGatherTable(g, t, tv->name(), o.scheme)).first;
        report.weightsQuantized++;
        report.floatWeightBytes += t.raw.size();
        report.int8WeightBytes += static_cast<uint64_t>(t.numElements().value_or(0)) + 4 * static_cast<uint64_t>(t.dims[0]);
      }
      // y = Mul(Cast<float>(Gather(Tq, ids)), Gather(Ts, ids)): only the gathered rows are read.
      std::string base = n->output(0)->name();
      Value* ids = n->input(1);
      const std::vector<Attribute> axis(n->attributes.begin(), n->attributes.end());
      Value* rows = nodeOutput(g, n, "Gather", {tit->second.q, ids}, base + "_int8", axis);
      Value* asFloat = nodeOutput(g, n, "Cast", {rows}, base + "_float", {Attribute::ofInt("to", static_cast<int64_t>(DType::Float))});
      Value* scales = nodeOutput(g, n, "Gather", {tit->second.scale, ids}, base + "_row_scale", axis);
      Value* y = nodeOutput(g, n, "Mul", {asFloat, scales}, base + "_dequantized");
      Value* out = n->output(0);
      std::string name = out->name();
      TypeInfo type = out->type();
      out->replaceAllUsesWith(y);
      g.removeNode(n);
      g.renameValue(y, name);
      y->setType(type);
      report.nodesQuantized++;
      continue;
    }
    const Tensor* cw = nullptr;  // a Conv's weight [M, C, k...]
    if (n->opType == "Conv") {
      const Value* wv = n->input(1);
      cw = wv && !wv->isGraphInput() ? wv->initializer() : nullptr;
      if (!cw || cw->dtype() != DType::Float || cw->dims.size() < 3 || cw->raw.size() != cw->expectedBytes().value_or(UINT64_MAX)) {
        skip("the weight is not a constant float tensor of rank 3 or more");
        continue;
      }
      const Value* b = n->input(2);
      const Tensor* bt = b && !b->isGraphInput() ? b->initializer() : nullptr;
      if (b && (!bt || bt->dtype() != DType::Float || bt->dims != std::vector<int64_t>{cw->dims[0]})) {
        skip("the bias is not a constant float vector");
        continue;
      }
      w = cw;
    }
    if (!w) {
      skip("the weight is not a constant 2-D float matrix");
      continue;
    }
    if (w->numElements().value_or(0) < o.minElements) {
      skip(fmt::format("the weight has fewer than {} elements", o.minElements));
      continue;
    }
    bool transB = false;
    Value* bias = nullptr;
    if (gemm) {
      if (n->attrInt("transA", 0) != 0 || n->attrFloat("alpha", 1.0f) != 1.0f) {
        skip("transA or alpha other than the defaults");
        continue;
      }
      transB = n->attrInt("transB", 0) != 0;
      bias = n->input(2);
      if (bias && n->attrFloat("beta", 1.0f) != 1.0f) {
        skip("beta other than 1");
        continue;
      }
    }
    if (x->type().isTensor() && x->type().elemType != 0 && x->type().dtype() != DType::Float) {
      skip("the activation is not float32");
      continue;
    }
    std::string key = n->input(1)->name() + (transB ? "^T" : cw ? "^C" : "");
    auto wit = weights.find(key);
    if (wit == weights.end()) {
      bool convU8 = o.scheme.convWeightsUInt8 || o.scheme.weightType == DType::UInt8;
      wit = weights.emplace(key, cw ? quantizeConvWeight(g, *w, convU8, n->input(1)->name(), o.scheme)
                                    : quantizeMatrix(g, *w, transB, n->input(1)->name(), o.scheme)).first;
      report.weightsQuantized++;
      report.floatWeightBytes += w->raw.size();
      int64_t channels = cw ? w->dims[0] : transB ? w->dims[0] : w->dims[1];
      report.int8WeightBytes += static_cast<uint64_t>(w->numElements().value_or(0)) +
                                5 * static_cast<uint64_t>(o.scheme.perChannel ? channels : 1);
    }
    DynamicWeight& qw = wit->second;
    Node* first = n;
    // Right after x's producer (or at the graph's start), so that every reader can share x's quantizer.
    auto afterProducer = [&]() -> Node* {
      if (!x->producer()) return g.nodes().front().get();
      auto it = std::find_if(g.nodes().begin(), g.nodes().end(), [&](const auto& p) { return p.get() == x->producer(); });
      ++it;
      return it == g.nodes().end() ? nullptr : it->get();
    };
    if (o.rowScales && !cw) {
      auto rit = rowQuantized.find(x);
      if (rit == rowQuantized.end()) rit = rowQuantized.emplace(x, quantizeRows(g, x, afterProducer(), rowConsts, opset)).first;
      const RowQuantized& rq = rit->second;
      if (!qw.colSumValue) {
        qw.colSumValue = addInitializer(g, int32Tensor({static_cast<int64_t>(qw.colSum.size())}, qw.colSum),
                                        n->input(1)->name() + "_column_sum");
        report.int8WeightBytes += 4 * qw.colSum.size();
      }
      std::string base = n->output(0)->name();
      std::vector<Value*> mmIn{rq.q, qw.q};
      if (!qw.zeroIsZero) {
        if (!rowConsts.u8zero) rowConsts.u8zero = addInitializer(g, scalarTensor(DType::UInt8, 0), "row_quant_no_zero_point");
        mmIn.push_back(rowConsts.u8zero);
        mmIn.push_back(qw.zero);
      }
      Node* mm = g.addNode("MatMulInteger", mmIn, {g.uniqueName(base + "_int32")}, "", first);
      mm->name = mm->output(0)->name();
      // Each row's zero point comes off in int32, exactly: acc - zero[m] * colSum[n].
      Value* corr = nodeOutput(g, first, "Mul", {rq.zero32, qw.colSumValue}, base + "_zero_correction");
      Value* acc = nodeOutput(g, first, "Sub", {mm->output(0), corr}, base + "_int32_centered");
      Value* y = nodeOutput(g, first, "Cast", {acc}, base + "_float", {Attribute::ofInt("to", static_cast<int64_t>(DType::Float))});
      y = nodeOutput(g, first, "Mul", {y, qw.scale}, base + "_weight_scaled");
      y = nodeOutput(g, first, "Mul", {y, rq.scale}, base + "_dequantized");
      if (bias) y = nodeOutput(g, first, "Add", {y, bias}, base + "_biased");
      Value* out = n->output(0);
      std::string name = out->name();
      TypeInfo type = out->type();
      out->replaceAllUsesWith(y);
      g.removeNode(n);
      g.renameValue(y, name);
      y->setType(type);
      report.nodesQuantized++;
      continue;
    }
    auto qit = quantizedInputs.find(x);
    if (qit == quantizedInputs.end()) {
      Node* before = afterProducer();
      std::string base = x->name();
      Node* d = g.addNode("DynamicQuantizeLinear", {x},
                          {g.uniqueName(base + "_quantized"), g.uniqueName(base + "_scale"), g.uniqueName(base + "_zero_point")},
                          "", before);
      d->name = d->output(0)->name();
      qit = quantizedInputs.emplace(x, std::array<Value*, 3>{d->output(0), d->output(1), d->output(2)}).first;
    }
    auto [xq, xs, xz] = qit->second;
    std::string base = n->output(0)->name();
    Node* mm = g.addNode(cw ? "ConvInteger" : "MatMulInteger", {xq, qw.q, xz, qw.zero}, {g.uniqueName(base + "_int32")}, "", first);
    mm->name = mm->output(0)->name();
    if (cw) {
      for (const Attribute& a : n->attributes) mm->setAttr(a);  // ConvInteger has Conv's attributes
      if (const Value* b = n->input(2)) {  // the bias [M] as [M, 1, ...] for the float output
        const Tensor* bt = b->initializer();
        std::vector<float> bf(bt->raw.size() / 4);
        std::memcpy(bf.data(), bt->raw.data(), bf.size() * 4);
        std::vector<int64_t> dims(cw->dims.size() - 1, 1);
        dims[0] = cw->dims[0];
        Tensor t = Tensor::fromFloats("", dims, bf);
        t.name = g.uniqueName(b->name() + "_broadcast");
        TypeInfo type = TypeInfo::tensor(DType::Float, Shape::of(dims));
        bias = g.addInitializer(std::move(t));
        bias->setType(std::move(type));
        convBiases.insert(n->input(2));
      }
    }
    Value* asFloat = nodeOutput(g, first, "Cast", {mm->output(0)}, base + "_float",
                                 {Attribute::ofInt("to", static_cast<int64_t>(DType::Float))});
    Value* scale = nodeOutput(g, first, "Mul", {xs, qw.scale}, base + "_scale");
    Value* y = nodeOutput(g, first, "Mul", {asFloat, scale}, base + "_dequantized");
    if (bias) y = nodeOutput(g, first, "Add", {y, bias}, base + "_biased");
    // y takes over the output's name and readers; the original node goes.
    Value* out = n->output(0);
    std::string name = out->name();
    TypeInfo type = out->type();
    out->replaceAllUsesWith(y);
    g.removeNode(n);
    g.renameValue(y, name);
    y->setType(type);
    report.nodesQuantized++;
  }
  for (Value* b : convBiases)
    if (!b->hasUses() && !b->isGraphOutput() && !b->isGraphInput()) g.removeInitializer(b);
  for (const auto& [v, t] : tables)
    if (!v->hasUses() && !v->isGraphOutput() && !v->isGraphInput()) g.removeInitializer(v);
  // The float weights that nothing reads any more (and zero points per-row MatMuls did not need).
  for (const auto& [key, qw] : weights) {
    if (!qw.zero->hasUses()) g.removeInitializer(qw.zero);
    std::string name = key.ends_with("^T") || key.ends_with("^C") ? key.substr(0, key.size() - 2) : key;
    Value* v = g.findLocal(name);
    if (v && v->initializer() && !v->hasUses() && !v->isGraphOutput() && !v->isGraphInput()) g.removeInitializer(v);
  }
  return report;
}

}  // namespace onnxtool
