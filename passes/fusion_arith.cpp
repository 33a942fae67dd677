// fusion_arith.cpp: weight arithmetic shared by the arithmetic fusions (see fusion_arith.h).
#include "passes/fusion_arith.h"

#include <cmath>
#include <cstring>

#include "passes/pass_util.h"

namespace onnxtool {

bool isFloatDType(DType d) {
  return d == DType::Float || d == DType::Double || d == DType::Float16 || d == DType::BFloat16;
}

std::optional<FloatConstant> floatConstantOf(const Value* v) {
  const Tensor* t = constantOf(v);
  if (!t || !isFloatDType(t->dtype())) return std::nullopt;
  DType d = t->dtype();
  if (d == DType::Float) {
    // The common case, read directly: weights run to millions of elements.
    auto n = t->numElements();
    if (!n || t->raw.size() != static_cast<size_t>(*n) * 4) return std::nullopt;
    std::vector<float> f(static_cast<size_t>(*n));
    std::memcpy(f.data(), t->raw.data(), f.size() * 4);
    return FloatConstant{d, t->dims, std::vector<double>(f.begin(), f.end())};
  }
  auto values = constantAsDoubles(v);
  if (!values) return std::nullopt;
  return FloatConstant{d, t->dims, std::move(*values)};
}

Tensor tensorFromDoubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dtype);
  t.dims = std::move(dims);
  size_t width = dtype == DType::Double ? 8 : dtype == DType::Float ? 4 : 2;
  Buffer b = Buffer::zeros(values.size() * width);
  uint8_t* p = b.mutableData();
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::Double) {
      std::memcpy(p + i * 8, &values[i], 8);
    } else if (dtype == DType::Float) {
      float f = static_cast<float>(values[i]);
      std::memcpy(p + i * 4, &f, 4);
    } else {
      float f = static_cast<float>(values[i]);
      uint16_t h = dtype == DType::Float16 ? floatToHalf(f) : floatToBfloat16(f);
      std::memcpy(p + i * 2, &h, 2);
    }
  }
  t.setRaw(std::move(b));
  return t;
}

bool allFinite(const std::vector<double>& values) {
  for (double v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

std::optional<std::vector<double>> perChannel(const std::vector<int64_t>& cDims, const std::vector<double>& c,
                                              size_t outRank, size_t axis, int64_t channels) {
  if (cDims.size() > outRank || c.empty()) return std::nullopt;
  bool varies = false;
  for (size_t i = 0; i < cDims.size(); ++i) {
    size_t outAxis = outRank - cDims.size() + i;
    if (cDims[i] == 1) continue;
    if (outAxis != axis || cDims[i] != channels) return std::nullopt;
    varies = true;
  }
  if (!varies) {
    if (c.size() != 1) return std::nullopt;
    return std::vector<double>(static_cast<size_t>(channels), c[0]);
  }
  if (c.size() != static_cast<size_t>(channels)) return std::nullopt;
  return c;
}

std::optional<BnAffine> bnAffine(const Node& bn, int64_t opset, int64_t channels) {
  if (bn.inputs().size() != 5 || !bn.output(0)) return std::nullopt;
  for (size_t i = 1; i < bn.outputs().size(); ++i)
    if (const Value* o = bn.output(i); o && (o->hasUses() || o->isGraphOutput())) return std::nullopt;
  // BN-1 and BN-6 compute batch statistics unless is_test=1; from 14 training_mode=1 does.
  if (opset < 7 && bn.attrInt("is_test", 0) != 1) return std::nullopt;
  if (opset < 9 && bn.attrInt("spatial", 1) != 1) return std::nullopt;
  if (opset >= 14 && bn.attrInt("training_mode", 0) != 0) return std::nullopt;
  double eps = bn.attrFloat("epsilon", 1e-5f);
  std::optional<FloatConstant> p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = floatConstantOf(bn.input(static_cast<size_t>(i) + 1));
    if (!p[i] || p[i]->values.size() != static_cast<size_t>(channels) || p[i]->dims.size() != 1) return std::nullopt;
  }
  BnAffine a;
  for (size_t c = 0; c < static_cast<size_t>(channels); ++c) {
    double s = p[0]->values[c] / std::sqrt(p[3]->values[c] + eps);
    a.scale.push_back(s);
    a.shift.push_back(p[1]->values[c] - p[2]->values[c] * s);
  }
  if (!allFinite(a.scale) || !allFinite(a.shift)) return std::nullopt;
  return a;
}

int64_t convOutChannels(const Node& conv, const std::vector<int64_t>& wDims) {
  if (wDims.size() < 3) return 0;
  for (int64_t d : wDims)
    if (d < 1) return 0;
  int64_t group = conv.attrInt("group", 1);
  if (group < 1 || wDims[0] % group) return 0;
  return conv.opType == "Conv" ? wDims[0] : wDims[1] * group;  // ConvTranspose: [Cin, Cout/group, k...]
}

std::optional<Tensor> scaledConvWeights(const Node& conv, const std::vector<double>& perOut) {
  const Tensor* t = constantOf(conv.input(1));
  if (!t || t->dims.size() < 2) return std::nullopt;
  size_t inner = 1;
  for (size_t i = 2; i < t->dims.size(); ++i) inner *= static_cast<size_t>(t->dims[i]);
  size_t d0 = static_cast<size_t>(t->dims[0]), d1 = static_cast<size_t>(t->dims[1]);
  size_t group = static_cast<size_t>(conv.attrInt("group", 1));
  // Conv: [Cout, Cin/group, k...]; ConvTranspose: input channel a of group a/(Cin/group).
  auto factor = [&](size_t a, size_t b) { return perOut[conv.opType == "Conv" ? a : (a / (d0 / group)) * d1 + b]; };
  if (t->dtype() == DType::Float) {
    auto n = t->numElements();
    if (!n || t->raw.size() != static_cast<size_t>(*n) * 4) return std::nullopt;
    Buffer out = Buffer::zeros(t->raw.size());
    const uint8_t* src = t->raw.data();
    uint8_t* dst = out.mutableData();
    // Conv: one factor per output channel, a run of d1 * inner weights; ConvTranspose: per
    // (input channel, output channel in group), a run of inner.
    const bool isConv = conv.opType == "Conv";
    const size_t run = isConv ? d1 * inner : inner;
    std::vector<float> row(run);
    for (size_t a = 0; a < d0; ++a)
      for (size_t b = 0; b < (isConv ? 1 : d1); ++b) {
        const double s = factor(a, b);
        const size_t at = (a * d1 + b) * inner * 4;
        std::memcpy(row.data(), src + at, run * 4);  // the model's bytes may sit at any offset
        for (float& v : row) v = static_cast<float>(static_cast<double>(v) * s);
        std::memcpy(dst + at, row.data(), run * 4);
      }
    Tensor r;
    r.dataType = t->dataType;
    r.dims = t->dims;
    r.setRaw(std::move(out));
    return r;
  }
  auto w = floatConstantOf(conv.input(1));
  if (!w) return std::nullopt;
  for (size_t a = 0; a < d0; ++a)
    for (size_t b = 0; b < d1; ++b) {
      const double s = factor(a, b);
      double* p = w->values.data() + (a * d1 + b) * inner;
      for (size_t k = 0; k < inner; ++k) p[k] *= s;
    }
  return tensorFromDoubles(w->dtype, w->dims, w->values);
}

void setConvWeights(Graph& g, Node& conv, std::optional<Tensor> w, DType dtype, const std::vector<double>* bias) {
  const Value* oldW = conv.input(1);
  if (w) conv.setInput(1, addInitializer(g, std::move(*w), oldW->name()));
  if (!bias) return;
  const Value* oldB = conv.input(2);
  std::string biasName = oldB ? oldB->name() : (conv.name.empty() ? oldW->name() : conv.name) + "_bias";
  conv.setInput(2, addInitializer(g, tensorFromDoubles(dtype, {static_cast<int64_t>(bias->size())}, *bias), biasName));
}

Node* fusableConvProducer(const Graph& g, const Value* v) {
  Node* conv = producerOf(v, "Conv");
  if (!conv) conv = producerOf(v, "ConvTranspose");
  if (!conv || conv->graph() != &g || !hasSingleUse(v) || conv->outputs().size() != 1) return nullptr;
  const Tensor* w = constantOf(conv->input(1));
  if (!w || !isFloatDType(w->dtype())) return nullptr;
  int64_t channels = convOutChannels(*conv, w->dims);
  if (!channels) return nullptr;
  if (const Value* b = conv->input(2)) {
    const Tensor* bias = constantOf(b);
    if (!bias || bias->dtype() != w->dtype() || bias->dims != std::vector<int64_t>{channels}) return nullptr;
  }
  return conv;
}

}  // namespace onnxtool
