// contrib.cpp: reference kernels of ONNX Runtime's com.microsoft ops that its transformer
// optimizer and quantizer write: the attention fusions (Attention, QAttention,
// MultiHeadAttention), the LayerNormalization fusions (SkipLayerNormalization,
// SkipSimplifiedLayerNormalization, EmbedLayerNormalization, QEmbedLayerNormalization), the Gelu
// family, BiasAdd, FusedMatMul, the fused Conv/Gemm (delegating to the ai.onnx kernels), and the
// quantized ops (QLinearAdd/Mul/Sigmoid/LeakyRelu/GlobalAveragePool/Concat, QGemm,
// QLinearConv, QLinearAveragePool, DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulNBits,
// DynamicQuantizeLSTM, QuantizeLinear/DequantizeLinear) and RotaryEmbedding.
//
// The spec is ONNX Runtime's docs/ContribOperators.md; tests/py/test_contrib_ops.py compares every
// kernel with ONNX Runtime. Values are computed in double from the inputs' elements and rounded
// once to the output type; quantized results round half to even and saturate, in float like
// ONNX Runtime, so that a value on a rounding boundary lands where ONNX Runtime puts it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "exec/ref/float_formats.h"
#include "exec/ref/kernel_util.h"
#include "lib/ops/op_schema.h"

namespace onnxtool::ref {
namespace {

constexpr std::string_view kMs = "com.microsoft";

[[noreturn]] void unsupported(const KernelContext& ctx, std::string_view what) {
  fail(ErrorKind::Unsupported, "node '{}' ({}): {}", ctx.node().displayName(), ctx.node().opType, what);
}

/// Every element of t as double.
std::vector<double> loadAll(const TensorData& t) {
  std::vector<double> v(static_cast<size_t>(numel(t)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = loadDouble(t, static_cast<int64_t>(i));
  return v;
}

/// A tensor of `dt` and `dims` holding `v` (rounded to dt).
Tensor storeAll(DType dt, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor t = makeTensor(dt, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) storeElement(t, static_cast<int64_t>(i), Scalar::ofFloat(v[i]));
  return t;
}

/// A float attribute, or its com.microsoft schema default (ONNX Runtime's, from lib/ops).
float attrFloatOrDefault(const KernelContext& ctx, std::string_view name, float fallback) {
  if (ctx.hasAttr(name)) return ctx.attrFloat(name, fallback);
  const OpSchema* s = findSchema(kMs, ctx.node().opType, 1);
  const AttrSchema* a = s ? s->findAttr(name) : nullptr;
  return a && a->defaultFloat() ? *a->defaultFloat() : fallback;
}

void requireFloatInput(const KernelContext& ctx, size_t i) {
  DType t = ctx.tensor(i).dtype();
  if (t != DType::Float && t != DType::Float16 && t != DType::Double && t != DType::BFloat16)
    unsupported(ctx, fmt::format("input {} has element type {}, expected a float type", i, dtypeName(t)));
}

// ------------------------------------------------------------------ matrix products

struct Mat {
  std::vector<int64_t> dims;
  std::vector<double> v;
};

/// numpy matmul of a and b (rank >= 1 each, batch dims broadcast).
Mat matmul(const KernelContext& ctx, const Mat& a, const Mat& b) {
  if (a.dims.empty() || b.dims.empty()) ctx.fail("matmul inputs must have rank >= 1");
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  if (bd[bd.size() - 2] != k) ctx.fail(fmt::format("inner dimensions differ, {} vs {}", k, bd[bd.size() - 2]));
  std::vector<int64_t> aBatch(ad.begin(), ad.end() - 2), bBatch(bd.begin(), bd.end() - 2);
  std::vector<int64_t> batch = broadcastShapes(ctx, {aBatch, bBatch});
  Broadcaster ab(batch, aBatch), bb(batch, bBatch);
  int64_t batches = numel(batch);
  Mat out;
  out.dims = batch;
  if (a.dims.size() > 1) out.dims.push_back(m);
  if (b.dims.size() > 1) out.dims.push_back(n);
  out.v.assign(static_cast<size_t>(checkedElements(ctx, batch) * m * n), 0.0);
  for (int64_t p = 0; p < batches; ++p) {
    const double* pa = a.v.data() + ab.offset(p) * m * k;
    const double* pb = b.v.data() + bb.offset(p) * k * n;
    double* po = out.v.data() + p * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += pa[i * k + l] * pb[l * n + j];
        po[i * n + j] = s;
      }
  }
  return out;
}

Mat matOf(const TensorData& t) { return {t.dims, loadAll(t)}; }

/// Swaps the last two axes of m (rank >= 2).
Mat transposeLast2(const Mat& m) {
  Mat out = m;
  size_t r = m.dims.size();
  int64_t rows = m.dims[r - 2], cols = m.dims[r - 1], batches = numel(m.dims) / std::max<int64_t>(rows * cols, 1);
  std::swap(out.dims[r - 2], out.dims[r - 1]);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out.v[static_cast<size_t>(b * rows * cols + j * rows + i)] = m.v[static_cast<size_t>(b * rows * cols + i * cols + j)];
  return out;
}

/// The per-tensor (scalar) or per-column (1-D of n) parameter p at column j.
double perColumn(const std::vector<double>& p, int64_t j) { return p.size() == 1 ? p[0] : p[static_cast<size_t>(j)]; }

/// (q - zero_point) * scale with a per-tensor or per-last-axis scale and zero point.
Mat dequantizeColumns(const KernelContext& ctx, const TensorData& q, const TensorData& scale, const TensorData* zeroPoint) {
  Mat m = matOf(q);
  std::vector<double> s = loadAll(scale), z = zeroPoint ? loadAll(*zeroPoint) : std::vector<double>{0.0};
  int64_t cols = q.dims.empty() ? 1 : q.dims.back();
  if ((s.size() != 1 && static_cast<int64_t>(s.size()) != cols) || (z.size() != 1 && static_cast<int64_t>(z.size()) != cols))
    ctx.fail(fmt::format("scale and zero point must be scalars or have {} elements (one per column)", cols));
  for (size_t i = 0; i < m.v.size(); ++i) {
    auto j = static_cast<int64_t>(i) % cols;
    m.v[i] = (m.v[i] - perColumn(z, j)) * static_cast<float>(perColumn(s, j));
  }
  return m;
}

/// The saturating range of a quantized integer type.
std::pair<float, float> quantRange(const KernelContext& ctx, DType t) {
  switch (t) {
    case DType::UInt8: return {0.0f, 255.0f};
    case DType::Int8: return {-128.0f, 127.0f};
    case DType::UInt16: return {0.0f, 65535.0f};
    case DType::Int16: return {-32768.0f, 32767.0f};
    default: unsupported(ctx, fmt::format("quantized type {} is not supported, expected int8/uint8/int16/uint16", dtypeName(t)));
  }
}

/// Quantizes v with scalar scale and zero point to the zero point's type.
Tensor quantizeAll(const KernelContext& ctx, std::vector<int64_t> dims, const std::vector<double>& v, float scale,
                   float zeroPoint, DType dt) {
  auto [lo, hi] = quantRange(ctx, dt);
  Tensor t = makeTensor(dt, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) {
    float q = std::nearbyint(static_cast<float>(v[i]) / scale) + zeroPoint;
    storeElement(t, static_cast<int64_t>(i), Scalar::ofFloat(std::isnan(q) ? 0.0f : std::clamp(q, lo, hi)));
  }
  return t;
}

/// ONNX Runtime's dynamic uint8 quantization of x (DynamicQuantizeLinear), dequantized back.
std::vector<double> dynamicQuantizeRoundTrip(const std::vector<double>& x) {
  float maxX = 0, minX = 0;
  for (double d : x) {
    maxX = std::max(maxX, static_cast<float>(d));
    minX = std::min(minX, static_cast<float>(d));
  }
  float scale = (maxX == minX ? 1.0f : maxX - minX) / 255.0f;
  float zp = std::nearbyint(std::clamp(0.0f - minX / scale, 0.0f, 255.0f));
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float q = std::clamp(std::nearbyint(static_cast<float>(x[i]) / scale) + zp, 0.0f, 255.0f);
    out[i] = static_cast<double>(q - zp) * scale;
  }
  return out;
}

void addBiasLastAxis(const KernelContext& ctx, Mat& m, const TensorData* bias) {
  if (!bias) return;
  std::vector<double> b = loadAll(*bias);
  int64_t cols = m.dims.empty() ? 1 : m.dims.back();
  if (static_cast<int64_t>(b.size()) != cols) ctx.fail(fmt::format("bias has {} elements, expected {}", b.size(), cols));
  for (size_t i = 0; i < m.v.size(); ++i) m.v[i] += b[i % b.size()];
}

// ------------------------------------------------------------------ activations

double geluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double geluTanh(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/// y = f(x + bias) over the last axis (bias optional, input `biasInput`).
template <double (*F)(double)>
void unaryWithBias(KernelContext& ctx, size_t biasInput) {
  const TensorData& x = ctx.tensor(0);
  requireFloatInput(ctx, 0);
  Mat m = matOf(x);
  addBiasLastAxis(ctx, m, ctx.hasInput(biasInput) ? &ctx.tensor(biasInput) : nullptr);
  for (double& d : m.v) d = F(d);
  ctx.setOutput(0, storeAll(x.dtype(), x.dims, m.v));
}
void gelu(KernelContext& ctx) { unaryWithBias<geluErf>(ctx, 99); }
void biasGelu(KernelContext& ctx) { unaryWithBias<geluErf>(ctx, 1); }
void fastGelu(KernelContext& ctx) { unaryWithBias<geluTanh>(ctx, 1); }

void quickGelu(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloatInput(ctx, 0);
  double alpha = attrFloatOrDefault(ctx, "alpha", 1.702f);
  std::vector<double> v = loadAll(x);
  for (double& d : v) d = d / (1.0 + std::exp(-alpha * d));
  ctx.setOutput(0, storeAll(x.dtype(), x.dims, v));
}

/// BiasAdd: X [N, S, C] + bias [C] + skip [N, S, C].
void biasAdd(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  Mat m = matOf(x);
  addBiasLastAxis(ctx, m, &ctx.tensor(1));
  std::vector<double> skip = loadAll(ctx.tensor(2));
  if (skip.size() != m.v.size()) ctx.fail("skip must have the input's shape");
  for (size_t i = 0; i < m.v.size(); ++i) m.v[i] += skip[i];
  ctx.setOutput(0, storeAll(x.dtype(), x.dims, m.v));
}

/// The activation of FusedConv/FusedGemm (`activation` with its parameters) applied to v.
void applyActivation(const KernelContext& ctx, std::vector<double>& v, const std::vector<float>& params) {
  std::string act = ctx.attrString("activation");
  auto param = [&](size_t i, float def) { return i < params.size() ? static_cast<double>(params[i]) : def; };
  for (double& d : v) {
    if (act.empty() || act == "Identity") continue;
    if (act == "Relu") d = std::max(d, 0.0);
    else if (act == "Tanh") d = std::tanh(d);
    else if (act == "Sigmoid") d = 1.0 / (1.0 + std::exp(-d));
    else if (act == "LeakyRelu") d = d >= 0 ? d : d * param(0, 0.01f);
    else if (act == "Clip") d = std::clamp(d, param(0, std::numeric_limits<float>::lowest()), param(1, std::numeric_limits<float>::max()));
    else if (act == "HardSigmoid") d = std::clamp(param(0, 0.2f) * d + param(1, 0.5f), 0.0, 1.0);
    else unsupported(ctx, fmt::format("activation '{}' is not supported, expected Relu, Tanh, Sigmoid, LeakyRelu, Clip or HardSigmoid", act));
  }
}

/// Runs the ref kernel of ai.onnx `opType` (at `version`) on `ins`, with this node's attributes;
/// returns its `nOutputs` outputs.
std::vector<RtValue> runOnnxKernelOn(KernelContext& ctx, std::string_view opType, int version,
                                     std::vector<const RtValue*> ins, size_t nOutputs) {
  const KernelDef* k = KernelRegistry::instance().find("ref", "", opType, version);
  if (!k) unsupported(ctx, fmt::format("no reference kernel for {} version {}", opType, version));
  KernelContext sub(ctx.node(), version, std::move(ins), nOutputs, nullptr, nullptr, ctx.model(), ctx.attrScope());
  k->fn(sub);
  return std::move(sub.outputs());
}

/// runOnnxKernelOn with the first `nInputs` inputs of this node; returns output 0.
Tensor runOnnxKernel(KernelContext& ctx, std::string_view opType, int version, size_t nInputs) {
  std::vector<const RtValue*> ins;
  for (size_t i = 0; i < std::min(nInputs, ctx.numInputs()); ++i) ins.push_back(ctx.input(i));
  std::vector<RtValue> outs = runOnnxKernelOn(ctx, opType, version, std::move(ins), 1);
  if (!outs.at(0).isTensor()) ctx.fail(fmt::format("the {} kernel gave no tensor", opType));
  return Tensor(*outs[0].tensor);
}

/// FusedConv: activation(Conv(X, W, B) + Z).
void fusedConv(KernelContext& ctx) {
  Tensor y = runOnnxKernel(ctx, "Conv", 11, 3);
  std::vector<double> v = loadAll(y);
  if (ctx.hasInput(3)) {
    std::vector<double> z = loadAll(ctx.tensor(3));
    if (z.size() != v.size()) ctx.fail("Z must have the output's shape");
    for (size_t i = 0; i < v.size(); ++i) v[i] += z[i];
  }
  applyActivation(ctx, v, ctx.attrFloats("activation_params"));
  ctx.setOutput(0, storeAll(y.dtype(), y.dims, v));
}

/// FusedGemm: activation(Gemm(A, B, C)).
void fusedGemm(KernelContext& ctx) {
  Tensor y = runOnnxKernel(ctx, "Gemm", 13, 3);
  std::vector<double> v = loadAll(y);
  std::vector<float> params;
  std::string act = ctx.attrString("activation");
  if (act == "LeakyRelu") params = {ctx.attrFloat("activation_alpha", 0.01f)};
  else if (act == "HardSigmoid") params = {ctx.attrFloat("activation_alpha", 0.2f), ctx.attrFloat("activation_beta", 0.5f)};
  else if (act == "Clip") params = {ctx.attrFloat("activation_alpha", std::numeric_limits<float>::lowest()), ctx.attrFloat("activation_beta", std::numeric_limits<float>::max())};
  applyActivation(ctx, v, params);
  ctx.setOutput(0, storeAll(y.dtype(), y.dims, v));
}

/// com.microsoft QLinearConv (NCHW): ai.onnx's QLinearConv.
void msQlinearConv(KernelContext& ctx) {
  if (ctx.attrInt("channels_last", 0)) unsupported(ctx, "channels_last is not supported");
  ctx.setOutput(0, runOnnxKernel(ctx, "QLinearConv", 10, 9));
}

void msQuantizeLinear(KernelContext& ctx) { ctx.setOutput(0, runOnnxKernel(ctx, "QuantizeLinear", 13, 3)); }
void msDequantizeLinear(KernelContext& ctx) { ctx.setOutput(0, runOnnxKernel(ctx, "DequantizeLinear", 13, 3)); }

/// FusedMatMul: alpha * op(A) @ op(B), op transposing the last two axes when transA/transB.
void fusedMatmul(KernelContext& ctx) {
  if (ctx.attrInt("transBatchA", 0) || ctx.attrInt("transBatchB", 0))
    unsupported(ctx, "transBatchA/transBatchB are not supported");
  requireFloatInput(ctx, 0);
  Mat a = matOf(ctx.tensor(0)), b = matOf(ctx.tensor(1));
  if (ctx.attrInt("transA", 0) && a.dims.size() >= 2) a = transposeLast2(a);
  if (ctx.attrInt("transB", 0) && b.dims.size() >= 2) b = transposeLast2(b);
  Mat y = matmul(ctx, a, b);
  double alpha = ctx.attrFloat("alpha", 1.0f);
  for (double& d : y.v) d *= alpha;
  ctx.setOutput(0, storeAll(ctx.tensor(0).dtype(), y.dims, y.v));
}

// ------------------------------------------------------------------ layer normalizations

/// Normalizes each row of `hidden` values of v in place: (x - mean) / sqrt(var + eps) * gamma +
/// beta, or x / sqrt(mean(x^2) + eps) * gamma when `simplified`. Returns per-row mean and
/// 1/std.
void normalizeRows(std::vector<double>& v, int64_t hidden, const std::vector<double>& gamma,
                   const std::vector<double>* beta, double eps, bool simplified, std::vector<double>* means,
                   std::vector<double>* invStds) {
  int64_t rows = hidden ? static_cast<int64_t>(v.size()) / hidden : 0;
  for (int64_t r = 0; r < rows; ++r) {
    double* x = v.data() + r * hidden;
    double mean = 0, sq = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      mean += x[h];
      sq += x[h] * x[h];
    }
    mean /= static_cast<double>(hidden);
    sq /= static_cast<double>(hidden);
    double var = simplified ? sq : sq - mean * mean;
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      auto hh = static_cast<size_t>(h);
      double centered = simplified ? x[h] : x[h] - mean;
      x[h] = centered * inv * gamma[hh] + (beta ? (*beta)[hh] : 0.0);
    }
    if (means) means->push_back(mean);
    if (invStds) invStds->push_back(inv);
  }
}

/// SkipLayerNormalization (inputs input, skip, gamma, beta, bias) and
/// SkipSimplifiedLayerNormalization (input, skip, gamma, bias).
template <bool Simplified>
void skipLayerNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloatInput(ctx, 0);
  if (x.dims.empty()) ctx.fail("input must have rank >= 1");
  int64_t hidden = x.dims.back();
  std::vector<double> v = loadAll(x), skip = loadAll(ctx.tensor(1)), gamma = loadAll(ctx.tensor(2));
  size_t biasInput = Simplified ? 3 : 4;
  std::optional<std::vector<double>> beta;
  if (!Simplified && ctx.hasInput(3)) beta = loadAll(ctx.tensor(3));
  std::vector<double> bias = ctx.hasInput(biasInput) ? loadAll(ctx.tensor(biasInput)) : std::vector<double>{};
  auto h = static_cast<size_t>(hidden);
  if (gamma.size() != h || (beta && beta->size() != h) || (!bias.empty() && bias.size() != h))
    ctx.fail(fmt::format("gamma, beta and bias must have {} elements (the hidden size)", hidden));
  if (skip.empty() || v.size() % skip.size() != 0 || skip.size() % h != 0)
    ctx.fail("skip must have the input's shape or broadcast to it over leading axes");
  for (size_t i = 0; i < v.size(); ++i) v[i] += skip[i % skip.size()] + (bias.empty() ? 0.0 : bias[i % h]);
  std::vector<double> sum = v, means, invStds;
  normalizeRows(v, hidden, gamma, beta ? &*beta : nullptr, attrFloatOrDefault(ctx, "epsilon", 1e-12f), Simplified, &means, &invStds);
  ctx.setOutput(0, storeAll(x.dtype(), x.dims, v));
  std::vector<int64_t> statDims = x.dims;
  statDims.back() = 1;
  if (ctx.wantsOutput(1)) ctx.setOutput(1, storeAll(DType::Float, statDims, means));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, storeAll(DType::Float, statDims, invStds));
  if (ctx.wantsOutput(3)) ctx.setOutput(3, storeAll(x.dtype(), x.dims, sum));
}

/// EmbedLayerNormalization and QEmbedLayerNormalization once their tables are float: word +
/// position + segment embeddings, layer-normalized; mask_index = count of ones in each mask row.
void embedLayerNormCore(KernelContext& ctx, DType outType, const Mat& word, const Mat& pos, const Mat* seg,
                        const std::vector<double>& gamma, const std::vector<double>& beta, size_t maskInput,
                        size_t positionIdsInput) {
  const TensorData& ids = ctx.tensor(0);
  if (ids.dims.size() != 2) ctx.fail("input_ids must have rank 2");
  int64_t batch = ids.dims[0], seq = ids.dims[1];
  if (word.dims.size() != 2 || pos.dims.size() != 2) ctx.fail("embedding tables must have rank 2");
  int64_t hidden = word.dims[1];
  std::vector<double> idv = loadAll(ids);
  std::vector<double> segIds = seg && ctx.hasInput(1) ? loadAll(ctx.tensor(1)) : std::vector<double>{};
  std::vector<double> posIds = positionIdsInput < ctx.numInputs() && ctx.hasInput(positionIdsInput)
                                   ? loadAll(ctx.tensor(positionIdsInput)) : std::vector<double>{};
  std::vector<double> v(static_cast<size_t>(batch * seq * hidden));
  auto row = [&](const Mat& table, double idx, const char* what) -> const double* {
    auto i = static_cast<int64_t>(idx);
    if (i < 0 || i >= table.dims[0] || table.dims[1] != hidden)
      ctx.fail(fmt::format("{} index {} is out of range [0, {})", what, i, table.dims[0]));
    return table.v.data() + i * hidden;
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      auto t = static_cast<size_t>(b * seq + s);
      double p = posIds.empty() ? static_cast<double>(s) : posIds[posIds.size() == static_cast<size_t>(seq) ? static_cast<size_t>(s) : t];
      const double* w = row(word, idv[t], "word");
      const double* pe = row(pos, p, "position");
      const double* se = segIds.empty() ? nullptr : row(*seg, segIds[t], "segment");
      for (int64_t h = 0; h < hidden; ++h) v[t * static_cast<size_t>(hidden) + static_cast<size_t>(h)] = w[h] + pe[h] + (se ? se[h] : 0.0);
    }
  std::vector<double> sum = v;
  if (gamma.size() != static_cast<size_t>(hidden) || beta.size() != static_cast<size_t>(hidden))
    ctx.fail(fmt::format("gamma and beta must have {} elements (the hidden size)", hidden));
  normalizeRows(v, hidden, gamma, &beta, attrFloatOrDefault(ctx, "epsilon", 1e-12f), false, nullptr, nullptr);
  ctx.setOutput(0, storeAll(outType, {batch, seq, hidden}, v));
  Tensor maskIndex = makeTensor(DType::Int32, {batch});
  if (ctx.hasInput(maskInput)) {
    std::vector<double> mask = loadAll(ctx.tensor(maskInput));
    if (mask.size() != static_cast<size_t>(batch * seq)) ctx.fail("mask must have input_ids' shape");
    for (int64_t b = 0; b < batch; ++b) {
      int32_t n = 0;
      for (int64_t s = 0; s < seq; ++s) n += mask[static_cast<size_t>(b * seq + s)] != 0 ? 1 : 0;
      mutableData<int32_t>(maskIndex)[b] = n;
    }
  }
  ctx.setOutput(1, std::move(maskIndex));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, storeAll(outType, {batch, seq, hidden}, sum));
}

void embedLayerNorm(KernelContext& ctx) {
  Mat word = matOf(ctx.tensor(2)), pos = matOf(ctx.tensor(3));
  std::optional<Mat> seg;
  if (ctx.hasInput(4)) seg = matOf(ctx.tensor(4));
  embedLayerNormCore(ctx, ctx.tensor(2).dtype(), word, pos, seg ? &*seg : nullptr, loadAll(ctx.tensor(5)),
                     loadAll(ctx.tensor(6)), 7, 8);
}

/// QEmbedLayerNormalization: quantized tables (inputs 2..6) with scales 8..12 and zero points
/// 13..17.
void qembedLayerNorm(KernelContext& ctx) {
  auto deq = [&](size_t i) {
    return dequantizeColumns(ctx, ctx.tensor(i), ctx.tensor(i + 6), ctx.hasInput(i + 11) ? &ctx.tensor(i + 11) : nullptr);
  };
  Mat word = deq(2), pos = deq(3);
  std::optional<Mat> seg;
  if (ctx.hasInput(4)) seg = deq(4);
  embedLayerNormCore(ctx, DType::Float, word, pos, seg ? &*seg : nullptr, deq(5).v, deq(6).v, 7, 99);
}

// ------------------------------------------------------------------ attention

/// What GroupQueryAttention adds to the softmax: a soft cap on the scaled scores (cap *
/// tanh(x / cap), before the bias), and an extra logit in the denominator only (smooth_softmax: 0;
/// head_sink: sink[n], which replaces smooth_softmax's 0).
struct SoftmaxExtras {
  double softcap = 0.0;
  bool extraLogit = false;
  const std::vector<double>* sink = nullptr;
};

/// Scaled dot-product attention of q [B, N, S, H] with k [B, N, T, H] and v [B, N, T, Hv];
/// `bias(b, n, s, t)` is added to the scores before the softmax. Returns [B, S, N * Hv].
template <typename Bias>
std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                           int64_t B, int64_t N, int64_t S, int64_t T, int64_t H, int64_t Hv, double scale, Bias bias,
                           const SoftmaxExtras& extras = {}) {
  std::vector<double> out(static_cast<size_t>(B * S * N * Hv)), scores(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double* qs = q.data() + ((b * N + n) * S + s) * H;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t t = 0; t < T; ++t) {
          const double* kt = k.data() + ((b * N + n) * T + t) * H;
          double d = 0;
          for (int64_t h = 0; h < H; ++h) d += qs[h] * kt[h];
          d *= scale;
          if (extras.softcap > 0) d = extras.softcap * std::tanh(d / extras.softcap);
          scores[static_cast<size_t>(t)] = d + bias(b, n, s, t);
          mx = std::max(mx, scores[static_cast<size_t>(t)]);
        }
        double extra = extras.sink ? (*extras.sink)[static_cast<size_t>(n)] : 0.0;
        if (extras.extraLogit) mx = std::max(mx, extra);
        double total = extras.extraLogit ? std::exp(extra - mx) : 0.0;
        for (double& x : scores) total += (x = std::exp(x - mx));
        double* o = out.data() + ((b * S + s) * N + n) * Hv;
        for (int64_t t = 0; t < T; ++t) {
          const double* vt = v.data() + ((b * N + n) * T + t) * Hv;
          double p = scores[static_cast<size_t>(t)] / total;
          for (int64_t h = 0; h < Hv; ++h) o[h] += p * vt[h];
        }
      }
  return out;
}

/// [B, L, N * H] (row-major, columns from `col0` of rows `width` wide) -> [B, N, L, H].
std::vector<double> splitHeads(const std::vector<double>& x, int64_t B, int64_t L, int64_t N, int64_t H, int64_t width,
                               int64_t col0) {
  std::vector<double> out(static_cast<size_t>(B * N * L * H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
          out[static_cast<size_t>(((b * N + n) * L + l) * H + h)] = x[static_cast<size_t>((b * L + l) * width + col0 + n * H + h)];
  return out;
}

/// past [B, N, P, H] followed by cur [B, N, L, H] along the sequence axis.
std::vector<double> concatSeq(const std::vector<double>& past, const std::vector<double>& cur, int64_t B, int64_t N,
                              int64_t P, int64_t L, int64_t H) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(B * N * (P + L) * H));
  for (int64_t bn = 0; bn < B * N; ++bn) {
    out.insert(out.end(), past.begin() + bn * P * H, past.begin() + (bn + 1) * P * H);
    out.insert(out.end(), cur.begin() + bn * L * H, cur.begin() + (bn + 1) * L * H);
  }
  return out;
}

/// The additive mask of Attention's mask_index (and MultiHeadAttention's key_padding_mask):
/// 1-D [B] (valid lengths) or [2B] (end, start), 2-D [B, T] or 3-D [B, S, T] raw 0/1 masks.
struct KeyMask {
  const std::vector<double>* m = nullptr;
  std::vector<int64_t> dims;
  double filter = -10000.0;
  int64_t B = 0, S = 0, T = 0, P = 0;
  bool causal = false;
  double operator()(int64_t b, int64_t, int64_t s, int64_t t) const {
    // Causal: query s sees the past and keys up to s. ONNX Runtime's CPU kernel masks every query
    // row but the last, which sees all keys: the same as the plain rule unless the key length
    // differs from the query's (causal cross attention), where we follow it.
    if (causal && s + 1 < S && t > P + s) return filter;
    if (!m) return 0.0;
    const std::vector<double>& v = *m;
    if (dims.size() == 1) {
      bool withStart = dims[0] == 2 * B;
      auto end = static_cast<int64_t>(v[static_cast<size_t>(b)]);
      auto start = withStart ? static_cast<int64_t>(v[static_cast<size_t>(B + b)]) : 0;
      return t >= end || t < start ? filter : 0.0;
    }
    double x = dims.size() == 2 ? v[static_cast<size_t>(b * T + t)] : v[static_cast<size_t>((b * S + s) * T + t)];
    return x > 0 ? 0.0 : filter;
  }
};

KeyMask keyMask(const KernelContext& ctx, const TensorData* mask, int64_t B, int64_t S, int64_t T, int64_t P,
                const std::vector<double>* values) {
  KeyMask km;
  km.m = mask ? values : nullptr;
  km.B = B, km.S = S, km.T = T, km.P = P;
  km.filter = attrFloatOrDefault(ctx, "mask_filter_value", -10000.0f);
  km.causal = ctx.attrInt("unidirectional", 0) != 0;
  if (!mask) return km;
  km.dims = mask->dims;
  bool ok = (km.dims.size() == 1 && (km.dims[0] == B || km.dims[0] == 2 * B)) ||
            (km.dims.size() == 2 && km.dims[0] == B && km.dims[1] == T) ||
            (km.dims.size() == 3 && km.dims[0] == B && km.dims[1] == S && km.dims[2] == T);
  if (!ok) unsupported(ctx, fmt::format("mask of shape [{}] is not supported, expected [{}], [{}], [{}, {}] or [{}, {}, {}]",
                                        fmt::join(km.dims, ", "), B, 2 * B, B, T, B, S, T));
  return km;
}

/// attention_bias [B or 1, N or 1, S, T] added to the scores.
struct WithAttentionBias {
  KeyMask mask;
  const std::vector<double>* bias = nullptr;
  std::vector<int64_t> dims;
  double operator()(int64_t b, int64_t n, int64_t s, int64_t t) const {
    double x = mask(b, n, s, t);
    if (!bias) return x;
    int64_t bb = dims[0] == 1 ? 0 : b, nn = dims[1] == 1 ? 0 : n;
    return x + (*bias)[static_cast<size_t>(((bb * dims[1] + nn) * dims[2] + s) * dims[3] + t)];
  }
};

/// Attention and QAttention once the input projection [B, S, Dq + Dk + Dv] is computed.
void attentionCore(KernelContext& ctx, const Mat& qkv, DType outType, size_t maskInput, size_t pastInput,
                   size_t attentionBiasInput) {
  int64_t N = ctx.attrInt("num_heads", 0);
  if (N <= 0) ctx.fail("num_heads must be positive");
  if (ctx.attrInt("do_rotary", 0)) unsupported(ctx, "do_rotary is not supported");
  int64_t B = qkv.dims[0], S = qkv.dims[1], width = qkv.dims[2];
  std::vector<int64_t> sizes = ctx.attrInts("qkv_hidden_sizes");
  if (sizes.empty()) sizes = {width / 3, width / 3, width / 3};
  if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != width || sizes[0] != sizes[1] || sizes[0] % N || sizes[2] % N)
    ctx.fail(fmt::format("qkv_hidden_sizes must split the {} projection columns into multiples of num_heads {}", width, N));
  int64_t H = sizes[0] / N, Hv = sizes[2] / N;
  std::vector<double> q = splitHeads(qkv.v, B, S, N, H, width, 0);
  std::vector<double> k = splitHeads(qkv.v, B, S, N, H, width, sizes[0]);
  std::vector<double> v = splitHeads(qkv.v, B, S, N, Hv, width, sizes[0] + sizes[1]);
  int64_t P = 0;
  if (pastInput < ctx.numInputs() && ctx.hasInput(pastInput)) {
    const TensorData& past = ctx.tensor(pastInput);
    if (past.dims.size() != 5 || past.dims[0] != 2 || past.dims[1] != B || past.dims[2] != N || past.dims[4] != H || H != Hv)
      ctx.fail(fmt::format("past must have shape [2, {}, {}, P, {}]", B, N, H));
    P = past.dims[3];
    std::vector<double> pv = loadAll(past);
    auto half = pv.begin() + static_cast<std::ptrdiff_t>(pv.size() / 2);
    k = concatSeq(std::vector<double>(pv.begin(), half), k, B, N, P, S, H);
    v = concatSeq(std::vector<double>(half, pv.end()), v, B, N, P, S, Hv);
  }
  int64_t T = P + S;
  const TensorData* mask = maskInput < ctx.numInputs() && ctx.hasInput(maskInput) ? &ctx.tensor(maskInput) : nullptr;
  std::vector<double> maskValues = mask ? loadAll(*mask) : std::vector<double>{};
  WithAttentionBias bias{keyMask(ctx, mask, B, S, T, P, &maskValues), nullptr, {}};
  std::vector<double> biasValues;
  if (attentionBiasInput < ctx.numInputs() && ctx.hasInput(attentionBiasInput)) {
    const TensorData& ab = ctx.tensor(attentionBiasInput);
    if (ab.dims.size() != 4 || (ab.dims[0] != 1 && ab.dims[0] != B) || (ab.dims[1] != 1 && ab.dims[1] != N) ||
        ab.dims[2] != S || ab.dims[3] != T)
      ctx.fail(fmt::format("attention_bias must have shape [{} or 1, {} or 1, {}, {}]", B, N, S, T));
    biasValues = loadAll(ab);
    bias.bias = &biasValues;
    bias.dims = ab.dims;
  }
  double scale = ctx.attrFloat("scale", 0.0f);
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(H));
  std::vector<double> out = attend(q, k, v, B, N, S, T, H, Hv, scale, bias);
  ctx.setOutput(0, storeAll(outType, {B, S, N * Hv}, out));
  if (ctx.wantsOutput(1)) {
    std::vector<double> present = k;
    present.insert(present.end(), v.begin(), v.end());
    ctx.setOutput(1, storeAll(outType, {2, B, N, T, H}, present));
  }
}

void attention(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() != 3) ctx.fail("input must have rank 3 [batch, sequence, hidden]");
  Mat qkv = matmul(ctx, matOf(x), matOf(ctx.tensor(1)));
  addBiasLastAxis(ctx, qkv, ctx.hasInput(2) ? &ctx.tensor(2) : nullptr);
  attentionCore(ctx, qkv, x.dtype(), 3, 4, 5);
}

/// QAttention: input (scale 3, zero point 6) and weight (scale 4, zero point 7; per tensor or per
/// column) dequantized, then Attention with mask 5 and past 8.
void qattention(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() != 3) ctx.fail("input must have rank 3 [batch, sequence, hidden]");
  Mat xf = dequantizeColumns(ctx, x, ctx.tensor(3), ctx.hasInput(6) ? &ctx.tensor(6) : nullptr);
  // The input's scale and zero point are per tensor.
  if (numel(ctx.tensor(3)) != 1) ctx.fail("input_scale must be a scalar");
  Mat w = dequantizeColumns(ctx, ctx.tensor(1), ctx.tensor(4), ctx.hasInput(7) ? &ctx.tensor(7) : nullptr);
  Mat qkv = matmul(ctx, xf, w);
  addBiasLastAxis(ctx, qkv, &ctx.tensor(2));
  attentionCore(ctx, qkv, ctx.tensor(2).dtype(), 5, 8, 99);
}

/// MultiHeadAttention with query [B, S, D], key/value [B, L, D] (bias [Dq + Dk + Dv] added) or
/// [B, N, L, H] (no bias), packed QKV [B, S, N, 3, H] or packed KV [B, L, N, 2, H] (no bias, no
/// past), key_padding_mask, attention_bias, past_key/past_value [B, N, P, H], causal or not.
void multiHeadAttention(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  int64_t N = ctx.attrInt("num_heads", 0);
  if (N <= 0) ctx.fail("num_heads must be positive");
  const TensorData& qt = ctx.tensor(0);
  bool packedQkv = qt.dims.size() == 5, packedKv = !packedQkv && ctx.hasInput(1) && ctx.tensor(1).dims.size() == 5;
  if (packedQkv || packedKv) {
    if (ctx.hasInput(3)) unsupported(ctx, "bias with packed QKV or KV is not supported");
    if (ctx.hasInput(6) || ctx.hasInput(7)) unsupported(ctx, "past_key/past_value with packed QKV or KV is not supported");
  }
  if ((packedQkv && (ctx.hasInput(1) || ctx.hasInput(2))) || (packedKv && ctx.hasInput(2)))
    ctx.fail("packed QKV [B, S, N, 3, H] takes no key or value input, packed KV [B, L, N, 2, H] no value input");
  if (!packedQkv && (qt.dims.size() != 3 || !ctx.hasInput(1) || (!packedKv && !ctx.hasInput(2))))
    ctx.fail("query must be [B, S, D] with key and value, or packed QKV [B, S, N, 3, H]");
  std::vector<double> qv, kv, vv;
  std::vector<int64_t> kDims, vDims;  // of the unpacked key and value
  int64_t B = qt.dims[0], S = qt.dims[1], D = 0;
  /// x [B, L, N, parts, H] -> part `p` as [B, L, N * H].
  auto unpack = [&](const TensorData& x, int64_t parts, int64_t p) {
    if (x.dims.size() != 5 || x.dims[2] != N || x.dims[3] != parts)
      ctx.fail(fmt::format("packed input must have shape [B, L, {}, {}, H]", N, parts));
    std::vector<double> all = loadAll(x), out;
    int64_t rows = x.dims[0] * x.dims[1] * x.dims[2], h = x.dims[4];
    out.reserve(static_cast<size_t>(rows * h));
    for (int64_t r = 0; r < rows; ++r) {
      auto from = all.begin() + static_cast<std::ptrdiff_t>((r * parts + p) * h);
      out.insert(out.end(), from, from + h);
    }
    return out;
  };
  if (packedQkv) {
    D = qt.dims[2] * qt.dims[4];
    qv = unpack(qt, 3, 0), kv = unpack(qt, 3, 1), vv = unpack(qt, 3, 2);
    kDims = vDims = {B, S, D};
  } else {
    D = qt.dims[2];
    qv = loadAll(qt);
    if (packedKv) {
      const TensorData& kvt = ctx.tensor(1);
      kv = unpack(kvt, 2, 0), vv = unpack(kvt, 2, 1);
      kDims = vDims = {kvt.dims[0], kvt.dims[1], kvt.dims[2] * kvt.dims[4]};
    } else {
      kv = loadAll(ctx.tensor(1)), vv = loadAll(ctx.tensor(2));
      kDims = ctx.tensor(1).dims, vDims = ctx.tensor(2).dims;
    }
  }
  if (D % N) ctx.fail(fmt::format("query hidden size {} is not a multiple of num_heads {}", D, N));
  int64_t H = D / N;
  bool bnsh = kDims.size() == 4;
  int64_t L = bnsh ? kDims[2] : kDims[1];
  int64_t Dv = bnsh ? vDims[1] * vDims[3] : vDims.back();
  if (Dv % N) ctx.fail("value hidden size is not a multiple of num_heads");
  int64_t Hv = Dv / N;
  if (ctx.hasInput(3)) {
    std::vector<double> bias = loadAll(ctx.tensor(3));
    if (static_cast<int64_t>(bias.size()) != 2 * D + Dv) ctx.fail(fmt::format("bias must have {} elements", 2 * D + Dv));
    for (size_t i = 0; i < qv.size(); ++i) qv[i] += bias[i % static_cast<size_t>(D)];
    if (!bnsh) {
      for (size_t i = 0; i < kv.size(); ++i) kv[i] += bias[static_cast<size_t>(D) + i % static_cast<size_t>(D)];
      for (size_t i = 0; i < vv.size(); ++i) vv[i] += bias[static_cast<size_t>(2 * D) + i % static_cast<size_t>(Dv)];
    }
  }
  std::vector<double> q = splitHeads(qv, B, S, N, H, D, 0);
  std::vector<double> k = bnsh ? kv : splitHeads(kv, B, L, N, H, D, 0);
  std::vector<double> v = bnsh ? vv : splitHeads(vv, B, L, N, Hv, Dv, 0);
  int64_t P = 0;
  if (ctx.hasInput(6) && ctx.hasInput(7)) {
    const TensorData &pk = ctx.tensor(6), &pv = ctx.tensor(7);
    if (pk.dims.size() != 4 || pk.dims[0] != B || pk.dims[1] != N || pk.dims[3] != H || pv.dims.size() != 4 || pv.dims[2] != pk.dims[2])
      ctx.fail(fmt::format("past_key and past_value must have shape [{}, {}, P, {}]", B, N, H));
    P = pk.dims[2];
    k = concatSeq(loadAll(pk), k, B, N, P, L, H);
    v = concatSeq(loadAll(pv), v, B, N, P, L, Hv);
  }
  int64_t T = P + L;
  const TensorData* mask = ctx.hasInput(4) ? &ctx.tensor(4) : nullptr;
  std::vector<double> maskValues = mask ? loadAll(*mask) : std::vector<double>{};
  WithAttentionBias bias{keyMask(ctx, mask, B, S, T, P, &maskValues), nullptr, {}};
  std::vector<double> biasValues;
  if (ctx.hasInput(5)) {
    const TensorData& ab = ctx.tensor(5);
    if (ab.dims.size() != 4 || (ab.dims[0] != 1 && ab.dims[0] != B) || (ab.dims[1] != 1 && ab.dims[1] != N) ||
        ab.dims[2] != S || ab.dims[3] != T)
      ctx.fail(fmt::format("attention_bias must have shape [{} or 1, {} or 1, {}, {}]", B, N, S, T));
    biasValues = loadAll(ab);
    bias.bias = &biasValues;
    bias.dims = ab.dims;
  }
  double scale = ctx.attrFloat("scale", 0.0f);
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(H));
  ctx.setOutput(0, storeAll(qt.dtype(), {B, S, N * Hv}, attend(q, k, v, B, N, S, T, H, Hv, scale, bias)));
  if (ctx.wantsOutput(1)) ctx.setOutput(1, storeAll(qt.dtype(), {B, N, T, H}, k));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, storeAll(qt.dtype(), {B, N, T, Hv}, v));
  if (ctx.wantsOutput(3)) unsupported(ctx, "the qk output is not supported");
}

// ------------------------------------------------------------------ quantized ops

/// Dequantizes input i with the scalar scale (input i+1) and zero point (input i+2, optional).
std::vector<double> dequantizeScalar(const KernelContext& ctx, size_t i) {
  std::vector<double> x = loadAll(ctx.tensor(i));
  if (numel(ctx.tensor(i + 1)) != 1 || (ctx.hasInput(i + 2) && numel(ctx.tensor(i + 2)) != 1))
    unsupported(ctx, fmt::format("input {}: only per-tensor scales and zero points are supported", i));
  auto scale = static_cast<float>(loadDouble(ctx.tensor(i + 1), 0));
  double zp = ctx.hasInput(i + 2) ? loadDouble(ctx.tensor(i + 2), 0) : 0.0;
  for (double& d : x) d = static_cast<float>(static_cast<float>(d - zp) * scale);
  return x;
}

/// Quantizes v with the scalar scale (input i) and zero point (input i+1, optional: of `dt`).
Tensor requantize(const KernelContext& ctx, size_t i, std::vector<int64_t> dims, const std::vector<double>& v, DType dt) {
  if (numel(ctx.tensor(i)) != 1 || (ctx.hasInput(i + 1) && numel(ctx.tensor(i + 1)) != 1))
    unsupported(ctx, "only per-tensor output scales and zero points are supported");
  auto scale = static_cast<float>(loadDouble(ctx.tensor(i), 0));
  auto zp = ctx.hasInput(i + 1) ? static_cast<float>(loadDouble(ctx.tensor(i + 1), 0)) : 0.0f;
  return quantizeAll(ctx, std::move(dims), v, scale, zp, dt);
}

/// QLinearAdd / QLinearMul: A (0..2) op B (3..5) broadcast, requantized with C (6, 7).
template <bool Mul>
void qlinearBinary(KernelContext& ctx) {
  const TensorData &a = ctx.tensor(0), &b = ctx.tensor(3);
  std::vector<double> av = dequantizeScalar(ctx, 0), bv = dequantizeScalar(ctx, 3);
  std::vector<int64_t> dims = broadcastShapes(ctx, {a.dims, b.dims});
  Broadcaster ab(dims, a.dims), bb(dims, b.dims);
  std::vector<double> out(static_cast<size_t>(checkedElements(ctx, dims)));
  for (size_t i = 0; i < out.size(); ++i) {
    auto fa = static_cast<float>(av[static_cast<size_t>(ab.offset(static_cast<int64_t>(i)))]);
    auto fb = static_cast<float>(bv[static_cast<size_t>(bb.offset(static_cast<int64_t>(i)))]);
    out[i] = Mul ? fa * fb : fa + fb;
  }
  ctx.setOutput(0, requantize(ctx, 6, dims, out, a.dtype()));
}

/// QLinearSigmoid / QLinearLeakyRelu: X (0..2) through f, requantized with Y (3, 4).
template <bool Leaky>
void qlinearUnary(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<double> v = dequantizeScalar(ctx, 0);
  double alpha = attrFloatOrDefault(ctx, "alpha", 0.01f);
  for (double& d : v) d = Leaky ? (d >= 0 ? d : static_cast<float>(d * alpha)) : static_cast<float>(1.0 / (1.0 + std::exp(-d)));
  ctx.setOutput(0, requantize(ctx, 3, x.dims, v, x.dtype()));
}

/// QLinearGlobalAveragePool: mean over the spatial axes (NCHW, or NHWC with channels_last).
void qlinearGlobalAveragePool(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() < 3) ctx.fail("input must have rank >= 3");
  std::vector<double> v = dequantizeScalar(ctx, 0);
  bool last = ctx.attrInt("channels_last", 0) != 0;
  int64_t n = x.dims[0], c = last ? x.dims.back() : x.dims[1], spatial = numel(x) / std::max<int64_t>(n * c, 1);
  std::vector<double> out(static_cast<size_t>(n * c));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0;
      for (int64_t p = 0; p < spatial; ++p)
        s += v[static_cast<size_t>(last ? (b * spatial + p) * c + ch : (b * c + ch) * spatial + p)];
      out[static_cast<size_t>(b * c + ch)] = s / static_cast<double>(spatial);
    }
  std::vector<int64_t> dims(x.dims.size(), 1);
  dims[0] = n;
  dims[last ? dims.size() - 1 : 1] = c;
  ctx.setOutput(0, requantize(ctx, 3, dims, out, x.dtype()));
}

/// QLinearConcat: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples.
void qlinearConcat(KernelContext& ctx) {
  if (ctx.numInputs() < 5 || (ctx.numInputs() - 2) % 3 != 0) ctx.fail("expected 2 + 3 inputs per concatenated tensor");
  const TensorData& first = ctx.tensor(2);
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), static_cast<int64_t>(first.dims.size()));
  auto a = static_cast<size_t>(axis);
  std::vector<int64_t> dims = first.dims;
  dims[a] = 0;
  std::vector<std::vector<double>> parts;
  std::vector<const TensorData*> ts;
  for (size_t i = 2; i < ctx.numInputs(); i += 3) {
    const TensorData& t = ctx.tensor(i);
    if (t.dims.size() != dims.size()) ctx.fail("inputs must have the same rank");
    for (size_t d = 0; d < dims.size(); ++d)
      if (d != a && t.dims[d] != first.dims[d]) ctx.fail("inputs differ off the concatenation axis");
    dims[a] += t.dims[a];
    parts.push_back(dequantizeScalar(ctx, i));
    ts.push_back(&t);
  }
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < a; ++d) outer *= dims[d];
  for (size_t d = a + 1; d < dims.size(); ++d) inner *= dims[d];
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel(dims)));
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p) {
      int64_t chunk = ts[p]->dims[a] * inner;
      out.insert(out.end(), parts[p].begin() + o * chunk, parts[p].begin() + (o + 1) * chunk);
    }
  ctx.setOutput(0, requantize(ctx, 0, dims, out, first.dtype()));
}

/// QGemm: alpha * A' @ B' (+ C, int32 with scale alpha * a_scale * b_scale), quantized with
/// y_scale / y_zero_point when given, else float.
void qgemm(KernelContext& ctx) {
  Mat a = dequantizeColumns(ctx, ctx.tensor(0), ctx.tensor(1), ctx.hasInput(2) ? &ctx.tensor(2) : nullptr);
  if (numel(ctx.tensor(1)) != 1) ctx.fail("a_scale must be a scalar");
  if (a.dims.size() != 2 || ctx.tensor(3).dims.size() != 2) ctx.fail("A and B must have rank 2");
  bool tb = ctx.attrInt("transB", 0) != 0;
  // B's per-column parameters index its output columns: dequantize in the layout they follow.
  Mat b = matOf(ctx.tensor(3));
  if (tb) b = transposeLast2(b);
  Tensor bq = storeAll(ctx.tensor(3).dtype(), b.dims, b.v);
  b = dequantizeColumns(ctx, bq, ctx.tensor(4), ctx.hasInput(5) ? &ctx.tensor(5) : nullptr);
  if (ctx.attrInt("transA", 0)) a = transposeLast2(a);
  Mat y = matmul(ctx, a, b);
  double alpha = ctx.attrFloat("alpha", 1.0f);
  for (double& d : y.v) d *= alpha;
  if (ctx.hasInput(6)) {
    const TensorData& c = ctx.tensor(6);
    std::vector<double> cv = loadAll(c), bs = loadAll(ctx.tensor(4));
    double as = loadDouble(ctx.tensor(1), 0);
    Broadcaster cb(y.dims, c.dims);
    for (size_t i = 0; i < y.v.size(); ++i) {
      auto col = static_cast<int64_t>(i) % y.dims[1];
      y.v[i] += cv[static_cast<size_t>(cb.offset(static_cast<int64_t>(i)))] * alpha * as * perColumn(bs, col);
    }
  }
  if (!ctx.hasInput(7)) return ctx.setOutput(0, storeAll(DType::Float, y.dims, y.v));
  DType dt = ctx.hasInput(8) ? ctx.tensor(8).dtype() : ctx.tensor(0).dtype();
  ctx.setOutput(0, requantize(ctx, 7, y.dims, y.v, dt));
}

/// MatMulIntegerToFloat: (A - a_zp) * a_scale @ (B - b_zp) * b_scale + bias.
void matmulIntegerToFloat(KernelContext& ctx) {
  Mat a = dequantizeColumns(ctx, ctx.tensor(0), ctx.tensor(2), ctx.hasInput(4) ? &ctx.tensor(4) : nullptr);
  if (numel(ctx.tensor(2)) != 1) unsupported(ctx, "a_scale must be a scalar");
  Mat b = dequantizeColumns(ctx, ctx.tensor(1), ctx.tensor(3), ctx.hasInput(5) ? &ctx.tensor(5) : nullptr);
  Mat y = matmul(ctx, a, b);
  addBiasLastAxis(ctx, y, ctx.hasInput(6) ? &ctx.tensor(6) : nullptr);
  ctx.setOutput(0, storeAll(ctx.tensor(2).dtype(), y.dims, y.v));
}

/// DynamicQuantizeMatMul: A quantized to uint8 as DynamicQuantizeLinear does, times the
/// dequantized B (b_scale, b_zero_point per tensor or per column), plus bias.
void dynamicQuantizeMatmul(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  Mat a = matOf(ctx.tensor(0));
  a.v = dynamicQuantizeRoundTrip(a.v);
  Mat b = dequantizeColumns(ctx, ctx.tensor(1), ctx.tensor(2), ctx.hasInput(3) ? &ctx.tensor(3) : nullptr);
  Mat y = matmul(ctx, a, b);
  addBiasLastAxis(ctx, y, ctx.hasInput(4) ? &ctx.tensor(4) : nullptr);
  ctx.setOutput(0, storeAll(DType::Float, y.dims, y.v));
}

/// MatMulNBits: A [..., K] @ B^T, B [N, K] stored as blocks of `block_size` values of `bits`
/// bits (low bits first) with a scale per (column, block) and a zero point per (column, block)
/// (packed like B, or of the scales' type; default 2^(bits-1)); g_idx reassigns rows to groups.
void matmulNBits(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  int64_t K = ctx.attrInt("K", 0), N = ctx.attrInt("N", 0), bits = ctx.attrInt("bits", 4), block = ctx.attrInt("block_size", 0);
  if (bits != 4 && bits != 8 && bits != 2) unsupported(ctx, fmt::format("bits {} is not supported, expected 2, 4 or 8", bits));
  if (K <= 0 || N <= 0 || block < 16 || (block & (block - 1))) ctx.fail("K, N must be positive and block_size a power of 2 >= 16");
  if (ctx.attrInt("accuracy_level", 0) == 4) unsupported(ctx, "accuracy_level 4 (int8 activations) is not supported");
  int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  const TensorData& bq = ctx.tensor(1);
  if (bq.dtype() != DType::UInt8 || numel(bq) != N * blocks * blob)
    ctx.fail(fmt::format("B must be uint8 [{}, {}, {}]", N, blocks, blob));
  std::vector<double> scales = loadAll(ctx.tensor(2));
  if (static_cast<int64_t>(scales.size()) != N * blocks) ctx.fail(fmt::format("scales must have {} elements", N * blocks));
  const uint8_t* pb = data<uint8_t>(bq);
  const TensorData* zt = ctx.hasInput(3) ? &ctx.tensor(3) : nullptr;
  int64_t perByte = 8 / bits, zpRow = (blocks + perByte - 1) / perByte;
  auto code = [&](const uint8_t* bytes, int64_t i) { return (bytes[i / perByte] >> ((i % perByte) * bits)) & ((1 << bits) - 1); };
  // g_idx [K] (GPTQ act-order): the group, so the scale and zero point, of each row k; the
  // codes stay in B's block order. Without it row k is of group k / block_size.
  std::vector<double> gidx = ctx.hasInput(4) ? loadAll(ctx.tensor(4)) : std::vector<double>{};
  if (!gidx.empty() && zt && zt->dtype() == DType::UInt8)
    unsupported(ctx, "g_idx with packed uint8 zero points is not supported (ONNX Runtime's CPU kernel ignores those "
                     "zero points, the spec applies them)");
  if (!gidx.empty() && static_cast<int64_t>(gidx.size()) != K) ctx.fail(fmt::format("g_idx must have K = {} elements", K));
  for (double g : gidx)
    if (g < 0 || g >= static_cast<double>(blocks)) ctx.fail(fmt::format("g_idx holds group {}, expected 0 to {}", g, blocks - 1));
  Mat w{{K, N}, std::vector<double>(static_cast<size_t>(K * N))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      int64_t blk = k / block, grp = gidx.empty() ? blk : static_cast<int64_t>(gidx[static_cast<size_t>(k)]);
      double zp = static_cast<double>(1 << (bits - 1));
      if (zt && zt->dtype() == DType::UInt8) zp = code(data<uint8_t>(*zt) + n * zpRow, grp);
      else if (zt) zp = loadDouble(*zt, n * blocks + grp);
      auto scale = static_cast<float>(scales[static_cast<size_t>(n * blocks + grp)]);
      double q = code(pb + (n * blocks + blk) * blob, k % block);
      // A float zero point is applied in the dequantized domain.
      double value = zt && zt->dtype() != DType::UInt8 ? q * scale - zp * scale : (q - zp) * scale;
      w.v[static_cast<size_t>(k * N + n)] = static_cast<float>(value);
    }
  Mat y = matmul(ctx, matOf(ctx.tensor(0)), w);
  addBiasLastAxis(ctx, y, ctx.hasInput(5) ? &ctx.tensor(5) : nullptr);
  ctx.setOutput(0, storeAll(ctx.tensor(0).dtype(), y.dims, y.v));
}

/// Rotates the pairs (i, i + half) of h, or (2i, 2i + 1) when interleaved, by the angles whose
/// cosines and sines are cs[i], sn[i].
void rotate(double* h, int64_t half, const double* cs, const double* sn, bool interleaved) {
  for (int64_t i = 0; i < half; ++i) {
    int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    double x0 = h[i0], x1 = h[i1];
    h[i0] = x0 * cs[i] - x1 * sn[i];
    h[i1] = x1 * cs[i] + x0 * sn[i];
  }
}

/// RotaryEmbedding: rotates pairs of each head's first rotary_embedding_dim values by the angle
/// of the token's position (cos_cache/sin_cache rows); pairs are (i, i + d/2), or (2i, 2i + 1)
/// when interleaved. input [B, S, N*H] or [B, N, S, H]; position_ids [B, S] or [1] (an offset).
void rotaryEmbedding(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  if (ctx.attrInt("is_packed_batching", 0)) unsupported(ctx, "is_packed_batching is not supported");
  const TensorData& x = ctx.tensor(0);
  const TensorData &cosT = ctx.tensor(2), &sinT = ctx.tensor(3);
  if (cosT.dims.size() != 2 || sinT.dims != cosT.dims) ctx.fail("cos_cache and sin_cache must be 2-D of one shape");
  int64_t half = cosT.dims[1], maxPos = cosT.dims[0];
  bool bnsh = x.dims.size() == 4;
  if (x.dims.size() != 3 && !bnsh) ctx.fail("input must have rank 3 or 4");
  int64_t B = x.dims[0], S = bnsh ? x.dims[2] : x.dims[1];
  int64_t rot = ctx.attrInt("rotary_embedding_dim", 0);
  int64_t N = ctx.attrInt("num_heads", 0);
  int64_t H = bnsh ? x.dims[3] : 0;
  if (!bnsh) {
    int64_t hidden = x.dims[2];
    if (N <= 0) N = hidden / (rot > 0 ? rot : 2 * half);
    if (N <= 0 || hidden % N) ctx.fail("num_heads does not divide the hidden size");
    H = hidden / N;
  } else {
    N = x.dims[1];
  }
  if (rot <= 0) rot = H;
  if (rot > H || rot != 2 * half) ctx.fail(fmt::format("rotary_embedding_dim {} must be twice the caches' width {} and at most the head size {}", rot, half, H));
  std::vector<double> v = loadAll(x), cs = loadAll(cosT), sn = loadAll(sinT), pos = loadAll(ctx.tensor(1));
  bool interleaved = ctx.attrInt("interleaved", 0) != 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      auto p = static_cast<int64_t>(pos.size() == 1 ? pos[0] + static_cast<double>(s) : pos[static_cast<size_t>(b * S + s)]);
      if (p < 0 || p >= maxPos) ctx.fail(fmt::format("position {} is outside the caches' {} rows", p, maxPos));
      for (int64_t n = 0; n < N; ++n) {
        double* h = v.data() + (bnsh ? ((b * N + n) * S + s) * H : (b * S + s) * N * H + n * H);
        rotate(h, half, cs.data() + p * half, sn.data() + p * half, interleaved);
      }
    }
  ctx.setOutput(0, storeAll(x.dtype(), x.dims, v));
}

/// GroupQueryAttention (causal, no KV quantization; softcap, smooth_softmax, attention_bias and
/// head_sink as ONNX Runtime's CPU kernel applies them): query [B, S, N*H] (or packed with key and
/// value: [B, S, (N + 2*kvN)*H]), key/value [B, S, kvN*H], past_key/past_value [B, kvN, P, H]
/// holding seqlens_k[b] + 1 - S valid positions (0 for a prompt), query head n reading kv head
/// n / (N / kvN). With do_rotary, q and k are rotated at their positions first. present_key/value
/// [B, kvN, max(P, total_sequence_length), H]: the past, then the new keys/values.
void groupQueryAttention(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  for (size_t i : {size_t{12}, size_t{13}, size_t{14}, size_t{15}, size_t{16}})
    if (ctx.hasInput(i)) unsupported(ctx, fmt::format("input {} ('{}') is not supported", i,
                                                      findSchema(kMs, "GroupQueryAttention", 1)->inputs[i].name));
  if (!ctx.attrInt("causal", 1) || ctx.attrInt("qk_output", 0) || ctx.attrString("k_quant_type", "NONE") != "NONE" ||
      ctx.attrString("v_quant_type", "NONE") != "NONE" || ctx.wantsOutput(3))
    unsupported(ctx, "causal=0, qk output and quantized KV caches are not supported");
  int64_t N = ctx.attrInt("num_heads", 0), kvN = ctx.attrInt("kv_num_heads", 0);
  if (N <= 0 || kvN <= 0 || N % kvN) ctx.fail("num_heads must be a positive multiple of kv_num_heads");
  const TensorData& qt = ctx.tensor(0);
  if (qt.dims.size() != 3) unsupported(ctx, "query must have rank 3");
  int64_t B = qt.dims[0], S = qt.dims[1];
  bool packed = !ctx.hasInput(1);
  int64_t H = qt.dims[2] / (packed ? N + 2 * kvN : N);
  if (H <= 0 || qt.dims[2] != H * (packed ? N + 2 * kvN : N)) ctx.fail("query hidden size does not split into heads");
  std::vector<double> qv = loadAll(qt), q, k, v;
  if (packed) {
    int64_t w = (N + 2 * kvN) * H;
    q = splitHeads(qv, B, S, N, H, w, 0);
    k = splitHeads(qv, B, S, kvN, H, w, N * H);
    v = splitHeads(qv, B, S, kvN, H, w, (N + kvN) * H);
  } else {
    if (ctx.tensor(1).dims != std::vector<int64_t>{B, S, kvN * H} || ctx.tensor(2).dims != ctx.tensor(1).dims)
      ctx.fail(fmt::format("key and value must have shape [{}, {}, {}]", B, S, kvN * H));
    q = splitHeads(qv, B, S, N, H, N * H, 0);
    k = splitHeads(loadAll(ctx.tensor(1)), B, S, kvN, H, kvN * H, 0);
    v = splitHeads(loadAll(ctx.tensor(2)), B, S, kvN, H, kvN * H, 0);
  }
  std::vector<double> seqlens = loadAll(ctx.tensor(5));
  auto total = static_cast<int64_t>(inputScalar(ctx, 6));
  if (static_cast<int64_t>(seqlens.size()) != B) ctx.fail(fmt::format("seqlens_k must have {} elements", B));
  int64_t P = ctx.hasInput(3) ? ctx.tensor(3).dims.at(2) : 0;
  std::vector<double> pastK = ctx.hasInput(3) ? loadAll(ctx.tensor(3)) : std::vector<double>{};
  std::vector<double> pastV = ctx.hasInput(4) ? loadAll(ctx.tensor(4)) : std::vector<double>{};
  if (P && (ctx.tensor(3).dims != std::vector<int64_t>{B, kvN, P, H} || !ctx.hasInput(4) || ctx.tensor(4).dims != ctx.tensor(3).dims))
    ctx.fail(fmt::format("past_key and past_value must have shape [{}, {}, P, {}]", B, kvN, H));
  bool prompt = P == 0 || S == total;
  std::vector<int64_t> pastLen(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    int64_t valid = static_cast<int64_t>(seqlens[static_cast<size_t>(b)]) + 1;
    pastLen[static_cast<size_t>(b)] = prompt ? 0 : valid - S;
    if (valid > std::max(P, total) || pastLen[static_cast<size_t>(b)] < 0 || pastLen[static_cast<size_t>(b)] > P)
      ctx.fail(fmt::format("seqlens_k[{}] = {} does not fit the past ({}) and the {} new positions", b, valid - 1, P, S));
  }
  if (ctx.attrInt("do_rotary", 0)) {
    const TensorData &cosT = ctx.tensor(7), &sinT = ctx.tensor(8);
    int64_t half = cosT.dims.at(1);
    if (2 * half > H || sinT.dims != cosT.dims) ctx.fail("cos_cache and sin_cache must be [max positions, <= head size / 2]");
    std::vector<double> cs = loadAll(cosT), sn = loadAll(sinT);
    bool inter = ctx.attrInt("rotary_interleaved", 0) != 0;
    std::vector<double> posIds = ctx.hasInput(9) ? loadAll(ctx.tensor(9)) : std::vector<double>{};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        int64_t p = posIds.empty() ? pastLen[static_cast<size_t>(b)] + s : static_cast<int64_t>(posIds[static_cast<size_t>(b * S + s)]);
        if (p < 0 || p >= cosT.dims[0]) ctx.fail(fmt::format("position {} is outside the caches' {} rows", p, cosT.dims[0]));
        for (int64_t n = 0; n < N; ++n) rotate(q.data() + ((b * N + n) * S + s) * H, half, cs.data() + p * half, sn.data() + p * half, inter);
        for (int64_t n = 0; n < kvN; ++n) rotate(k.data() + ((b * kvN + n) * S + s) * H, half, cs.data() + p * half, sn.data() + p * half, inter);
      }
  }
  int64_t L = std::max(P, total);
  std::vector<double> presK(static_cast<size_t>(B * kvN * L * H)), presV(presK.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < kvN; ++n) {
      int64_t pl = pastLen[static_cast<size_t>(b)];
      size_t dst = static_cast<size_t>((b * kvN + n) * L * H), src = static_cast<size_t>((b * kvN + n) * P * H);
      for (int64_t i = 0; i < pl * H; ++i) {
        presK[dst + static_cast<size_t>(i)] = pastK[src + static_cast<size_t>(i)];
        presV[dst + static_cast<size_t>(i)] = pastV[src + static_cast<size_t>(i)];
      }
      for (int64_t i = 0; i < S * H; ++i) {
        size_t from = static_cast<size_t>((b * kvN + n) * S * H + i);
        presK[dst + static_cast<size_t>(pl * H + i)] = k[from];
        presV[dst + static_cast<size_t>(pl * H + i)] = v[from];
      }
    }
  // Scores of query head n against kv head n / (N / kvN): expand the kv heads.
  int64_t group = N / kvN;
  std::vector<double> ek(static_cast<size_t>(B * N * L * H)), ev(ek.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < L * H; ++i) {
        ek[static_cast<size_t>((b * N + n) * L * H + i)] = presK[static_cast<size_t>((b * kvN + n / group) * L * H + i)];
        ev[static_cast<size_t>((b * N + n) * L * H + i)] = presV[static_cast<size_t>((b * kvN + n / group) * L * H + i)];
      }
  int64_t window = ctx.attrInt("local_window_size", -1);
  // attention_bias [B or 1, N or 1, S, total_sequence_length], added after the soft cap
  std::vector<double> ab;
  std::vector<int64_t> abDims;
  if (ctx.hasInput(10)) {
    abDims = ctx.tensor(10).dims;
    if (abDims.size() != 4 || (abDims[0] != 1 && abDims[0] != B) || (abDims[1] != 1 && abDims[1] != N) || abDims[2] != S ||
        abDims[3] < total)
      ctx.fail(fmt::format("attention_bias must have shape [{} or 1, {} or 1, {}, {}]", B, N, S, total));
    ab = loadAll(ctx.tensor(10));
  }
  auto mask = [&](int64_t b, int64_t n, int64_t s, int64_t t) {
    int64_t at = pastLen[static_cast<size_t>(b)] + s;
    bool visible = t <= at && t <= static_cast<int64_t>(seqlens[static_cast<size_t>(b)]) && (window < 0 || t > at - window);
    if (!visible) return -std::numeric_limits<double>::infinity();
    if (abDims.empty()) return 0.0;
    int64_t bb = abDims[0] == 1 ? 0 : b, nn = abDims[1] == 1 ? 0 : n;
    return ab[static_cast<size_t>(((bb * abDims[1] + nn) * S + s) * abDims[3] + t)];
  };
  SoftmaxExtras extras;
  extras.softcap = ctx.attrFloat("softcap", 0.0f);
  std::vector<double> sink;
  if (ctx.hasInput(11)) {
    sink = loadAll(ctx.tensor(11));
    if (static_cast<int64_t>(sink.size()) != N) ctx.fail(fmt::format("head_sink must have {} elements (num_heads)", N));
    extras.sink = &sink;
  }
  extras.extraLogit = extras.sink || ctx.attrInt("smooth_softmax", 0) == 1;
  double scale = ctx.attrFloat("scale", 0.0f);
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(H));
  ctx.setOutput(0, storeAll(qt.dtype(), {B, S, N * H}, attend(q, ek, ev, B, N, S, L, H, H, scale, mask, extras)));
  if (ctx.wantsOutput(1)) ctx.setOutput(1, storeAll(qt.dtype(), {B, kvN, L, H}, presK));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, storeAll(qt.dtype(), {B, kvN, L, H}, presV));
}

/// GemmFastGelu: FastGelu(X @ W + bias).
void gemmFastGelu(KernelContext& ctx) {
  requireFloatInput(ctx, 0);
  Mat y = matmul(ctx, matOf(ctx.tensor(0)), matOf(ctx.tensor(1)));
  addBiasLastAxis(ctx, y, ctx.hasInput(2) ? &ctx.tensor(2) : nullptr);
  for (double& d : y.v) d = geluTanh(d);
  ctx.setOutput(0, storeAll(ctx.tensor(0).dtype(), y.dims, y.v));
}

/// MatMulInteger16: exact int16/uint16 products summed in int64, stored as int32 (uint32 when
/// both inputs are uint16).
void matmulInteger16(KernelContext& ctx) {
  const TensorData &a = ctx.tensor(0), &b = ctx.tensor(1);
  Mat y = matmul(ctx, matOf(a), matOf(b));
  DType dt = a.dtype() == DType::UInt16 && b.dtype() == DType::UInt16 ? DType::UInt32 : DType::Int32;
  Tensor out = makeTensor(dt, y.dims);
  for (size_t i = 0; i < y.v.size(); ++i) storeElement(out, static_cast<int64_t>(i), Scalar::ofInt(static_cast<int64_t>(y.v[i])));
  ctx.setOutput(0, std::move(out));
}

/// MulInteger: (A - A_zero_point) * (B - B_zero_point), broadcast, int32.
void mulInteger(KernelContext& ctx) {
  const TensorData &a = ctx.tensor(0), &b = ctx.tensor(2);
  double za = ctx.hasInput(1) ? loadDouble(ctx.tensor(1), 0) : 0.0, zb = ctx.hasInput(3) ? loadDouble(ctx.tensor(3), 0) : 0.0;
  std::vector<int64_t> dims = broadcastShapes(ctx, {a.dims, b.dims});
  Broadcaster ab(dims, a.dims), bb(dims, b.dims);
  Tensor out = makeTensor(DType::Int32, dims);
  for (int64_t i = 0, n = numel(dims); i < n; ++i)
    mutableData<int32_t>(out)[i] = static_cast<int32_t>((loadDouble(a, ab.offset(i)) - za) * (loadDouble(b, bb.offset(i)) - zb));
  ctx.setOutput(0, std::move(out));
}

/// QLinearWhere: condition ? X : Y, each dequantized, requantized with Z's scale and zero point.
void qlinearWhere(KernelContext& ctx) {
  const TensorData &cond = ctx.tensor(0), &x = ctx.tensor(1), &y = ctx.tensor(4);
  std::vector<double> xv = dequantizeScalar(ctx, 1), yv = dequantizeScalar(ctx, 4);
  std::vector<int64_t> dims = broadcastShapes(ctx, {cond.dims, x.dims, y.dims});
  Broadcaster cb(dims, cond.dims), xb(dims, x.dims), yb(dims, y.dims);
  std::vector<double> out(static_cast<size_t>(numel(dims)));
  for (size_t i = 0; i < out.size(); ++i) {
    auto f = static_cast<int64_t>(i);
    out[i] = loadDouble(cond, cb.offset(f)) != 0 ? xv[static_cast<size_t>(xb.offset(f))] : yv[static_cast<size_t>(yb.offset(f))];
  }
  ctx.setOutput(0, requantize(ctx, 7, dims, out, x.dtype()));
}

/// CDist: pairwise distances of A's rows [M, K] and B's rows [N, K], squared ("sqeuclidean",
/// the default) or not ("euclidean").
void cdist(KernelContext& ctx) {
  const TensorData &a = ctx.tensor(0), &b = ctx.tensor(1);
  if (a.dims.size() != 2 || b.dims.size() != 2 || a.dims[1] != b.dims[1]) ctx.fail("A and B must be [M, K] and [N, K]");
  std::string metric = ctx.attrString("metric", "sqeuclidean");
  if (metric != "sqeuclidean" && metric != "euclidean") unsupported(ctx, fmt::format("metric '{}' is not supported", metric));
  std::vector<double> av = loadAll(a), bv = loadAll(b), out(static_cast<size_t>(a.dims[0] * b.dims[0]));
  int64_t K = a.dims[1];
  for (int64_t i = 0; i < a.dims[0]; ++i)
    for (int64_t j = 0; j < b.dims[0]; ++j) {
      double d = 0;
      for (int64_t k = 0; k < K; ++k) {
        double t = av[static_cast<size_t>(i * K + k)] - bv[static_cast<size_t>(j * K + k)];
        d += t * t;
      }
      out[static_cast<size_t>(i * b.dims[0] + j)] = metric == "euclidean" ? std::sqrt(d) : d;
    }
  ctx.setOutput(0, storeAll(a.dtype(), {a.dims[0], b.dims[0]}, out));
}

/// ExpandDims: X with a 1 inserted at `axis` (an int32 scalar input).
void expandDims(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto rank = static_cast<int64_t>(x.dims.size());
  auto axis = static_cast<int64_t>(inputScalar(ctx, 1));
  int64_t a = axis < 0 ? axis + rank + 1 : axis;
  if (a < 0 || a > rank) ctx.fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  std::vector<int64_t> dims = x.dims;
  dims.insert(dims.begin() + a, 1);
  ctx.setOutput(0, reshaped(x, std::move(dims)));
}

/// QLinearAveragePool (NCHW): AveragePool of the dequantized input, requantized.
void qlinearAveragePool(KernelContext& ctx) {
  if (ctx.attrInt("channels_last", 0)) unsupported(ctx, "channels_last is not supported");
  const TensorData& x = ctx.tensor(0);
  RtValue xf = RtValue::ofTensor(storeAll(DType::Float, x.dims, dequantizeScalar(ctx, 0)));
  std::vector<RtValue> outs = runOnnxKernelOn(ctx, "AveragePool", 19, {&xf}, 1);
  const TensorData& y = *outs.at(0).tensor;
  ctx.setOutput(0, requantize(ctx, 3, y.dims, loadAll(y), x.dtype()));
}

/// DynamicQuantizeLSTM: the LSTM of the dequantized weights. W [D, I, 4H] and R [D, H, 4H] with
/// scales and zero points per direction ([D]) or per column ([D, 4H]) become LSTM's [D, 4H, I]
/// and [D, 4H, H]. ONNX Runtime also quantizes the activations on the fly, so its outputs differ
/// by about one quantization step of them.
void dynamicQuantizeLstm(KernelContext& ctx) {
  auto dequantizeT = [&](size_t wi, size_t si, size_t zi) {
    const TensorData& w = ctx.tensor(wi);
    if (w.dims.size() != 3) ctx.fail(fmt::format("input {} must have rank 3", wi));
    int64_t D = w.dims[0], rows = w.dims[1], cols = w.dims[2];
    std::vector<double> q = loadAll(w), sc = loadAll(ctx.tensor(si)), zp = loadAll(ctx.tensor(zi));
    auto param = [&](const std::vector<double>& p, int64_t d, int64_t j) {
      if (static_cast<int64_t>(p.size()) == D) return p[static_cast<size_t>(d)];
      if (static_cast<int64_t>(p.size()) == D * cols) return p[static_cast<size_t>(d * cols + j)];
      ctx.fail(fmt::format("scales and zero points must have {} or {} elements", D, D * cols));
    };
    std::vector<double> out(q.size());
    for (int64_t d = 0; d < D; ++d)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j)
          out[static_cast<size_t>((d * cols + j) * rows + r)] =
              static_cast<float>((q[static_cast<size_t>((d * rows + r) * cols + j)] - param(zp, d, j)) * static_cast<float>(param(sc, d, j)));
    return RtValue::ofTensor(storeAll(DType::Float, {D, cols, rows}, out));
  };
  RtValue w = dequantizeT(1, 8, 9), r = dequantizeT(2, 10, 11);
  std::vector<const RtValue*> ins{ctx.input(0), &w, &r};
  for (size_t i = 3; i < 8; ++i) ins.push_back(ctx.input(i));
  std::vector<RtValue> outs = runOnnxKernelOn(ctx, "LSTM", 14, std::move(ins), ctx.numOutputs());
  for (size_t i = 0; i < outs.size(); ++i)
    if (ctx.wantsOutput(i)) ctx.setOutput(i, std::move(outs[i]));
}

}  // namespace

void registerContribOps() {
  addRef(kMs, "GemmFastGelu", 1, "ref.ms.gemm_fast_gelu", gemmFastGelu);
  addRef(kMs, "MatMulInteger16", 1, "ref.ms.matmul_integer16", matmulInteger16);
  addRef(kMs, "MulInteger", 1, "ref.ms.mul_integer", mulInteger);
  addRef(kMs, "QLinearWhere", 1, "ref.ms.qlinear_where", qlinearWhere);
  addRef(kMs, "CDist", 1, "ref.ms.cdist", cdist);
  addRef(kMs, "ExpandDims", 1, "ref.ms.expand_dims", expandDims);
  addRef(kMs, "GroupQueryAttention", 1, "ref.ms.group_query_attention", groupQueryAttention);
  addRef(kMs, "RotaryEmbedding", 1, "ref.ms.rotary_embedding", rotaryEmbedding);
  addRef(kMs, "QLinearAveragePool", 1, "ref.ms.qlinear_average_pool", qlinearAveragePool);
  addRef(kMs, "DynamicQuantizeLSTM", 1, "ref.ms.dynamic_quantize_lstm", dynamicQuantizeLstm);
  addRef(kMs, "Gelu", 1, "ref.ms.gelu", gelu);
  addRef(kMs, "BiasGelu", 1, "ref.ms.bias_gelu", biasGelu);
  addRef(kMs, "FastGelu", 1, "ref.ms.fast_gelu", fastGelu);
  addRef(kMs, "QuickGelu", 1, "ref.ms.quick_gelu", quickGelu);
  addRef(kMs, "BiasAdd", 1, "ref.ms.bias_add", biasAdd);
  addRef(kMs, "FusedConv", 1, "ref.ms.fused_conv", fusedConv);
  addRef(kMs, "FusedGemm", 1, "ref.ms.fused_gemm", fusedGemm);
  addRef(kMs, "FusedMatMul", 1, "ref.ms.fused_matmul", fusedMatmul);
  addRef(kMs, "QLinearConv", 1, "ref.ms.qlinear_conv", msQlinearConv);
  addRef(kMs, "QuantizeLinear", 1, "ref.ms.quantize_linear", msQuantizeLinear);
  addRef(kMs, "DequantizeLinear", 1, "ref.ms.dequantize_linear", msDequantizeLinear);
  addRef(kMs, "SkipLayerNormalization", 1, "ref.ms.skip_layer_norm", skipLayerNorm<false>);
  addRef(kMs, "SkipSimplifiedLayerNormalization", 1, "ref.ms.skip_simplified_layer_norm", skipLayerNorm<true>);
  addRef(kMs, "EmbedLayerNormalization", 1, "ref.ms.embed_layer_norm", embedLayerNorm);
  addRef(kMs, "QEmbedLayerNormalization", 1, "ref.ms.qembed_layer_norm", qembedLayerNorm);
  addRef(kMs, "Attention", 1, "ref.ms.attention", attention);
  addRef(kMs, "QAttention", 1, "ref.ms.qattention", qattention);
  addRef(kMs, "MultiHeadAttention", 1, "ref.ms.multi_head_attention", multiHeadAttention);
  addRef(kMs, "QLinearAdd", 1, "ref.ms.qlinear_add", qlinearBinary<false>);
  addRef(kMs, "QLinearMul", 1, "ref.ms.qlinear_mul", qlinearBinary<true>);
  addRef(kMs, "QLinearSigmoid", 1, "ref.ms.qlinear_sigmoid", qlinearUnary<false>);
  addRef(kMs, "QLinearLeakyRelu", 1, "ref.ms.qlinear_leaky_relu", qlinearUnary<true>);
  addRef(kMs, "QLinearGlobalAveragePool", 1, "ref.ms.qlinear_global_average_pool", qlinearGlobalAveragePool);
  addRef(kMs, "QLinearConcat", 1, "ref.ms.qlinear_concat", qlinearConcat);
  addRef(kMs, "QGemm", 1, "ref.ms.qgemm", qgemm);
  addRef(kMs, "MatMulIntegerToFloat", 1, "ref.ms.matmul_integer_to_float", matmulIntegerToFloat);
  addRef(kMs, "DynamicQuantizeMatMul", 1, "ref.ms.dynamic_quantize_matmul", dynamicQuantizeMatmul);
  addRef(kMs, "MatMulNBits", 1, "ref.ms.matmul_nbits", matmulNBits);
}

}  // namespace onnxtool::ref
