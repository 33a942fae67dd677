// preview.cpp: reference kernels of the ai.onnx.preview and ai.onnx.preview.training domains
// (FlexAttention; Adagrad, Adam, Momentum).
//
// The optimizers take R (learning rate), T (update count) and then one variadic list holding
// the per-tensor state in groups: [X1..Xn, G1..Gn, H1..Hn] (Adagrad), [X.., G.., V..]
// (Momentum), [X.., G.., V.., H..] (Adam); outputs are the new states in the same grouped order
// without G. They compute in double and round once into each output's type.
//
// Gradient (ai.onnx.preview.training) has no kernel: it needs automatic differentiation of the
// enclosing graph, which the reference executor does not do.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {
namespace {

/// Every element of a float tensor (float, double, float16, bfloat16) as double.
std::vector<double> toDoubles(const KernelContext& ctx, const TensorData& t) {
  std::vector<double> out(static_cast<size_t>(numel(t)));
  dispatchFloat(ctx, t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data<T>(t);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(p[i]);
  });
  return out;
}

/// A tensor of float type `dt` holding `values` rounded to it.
Tensor fromDoubles(const KernelContext& ctx, DType dt, const std::vector<int64_t>& dims,
                   const std::vector<double>& values) {
  Tensor out = makeTensor(dt, dims);
  dispatchFloat(ctx, dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = mutableData<T>(out);
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, double>) p[i] = values[i];
      else p[i] = T(static_cast<float>(values[i]));
    }
  });
  return out;
}

/// Rounds every value in place to float type `dt` (what storing in a tensor of `dt` would do).
void roundAll(const KernelContext& ctx, DType dt, std::vector<double>& values) {
  dispatchFloat(ctx, dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>)
      for (double& v : values) v = static_cast<double>(static_cast<float>(T(static_cast<float>(v))));
  });
}

// ---------------------------------------------------------------------------------------------
// Training optimizers

/// R, T and the state groups of one optimizer node.
struct OptimizerInputs {
  double rate = 0;
  int64_t step = 0;
  size_t groups = 0;  ///< n: tensors optimized
};

/// Reads R and T and checks the variadic list splits into `perGroup` groups of n tensors, with
/// (perGroup - 1) * n outputs (the gradients have no new value).
OptimizerInputs readOptimizerInputs(const KernelContext& ctx, size_t perGroup, const char* layout) {
  size_t variadic = ctx.numInputs() >= 2 ? ctx.numInputs() - 2 : 0;
  if (variadic == 0 || variadic % perGroup != 0)
    ctx.fail(fmt::format("takes R, T and then {} groups of n tensors ({}), got {} tensors after R and T",
                         perGroup, layout, variadic));
  OptimizerInputs in;
  in.groups = variadic / perGroup;
  if (ctx.numOutputs() != (perGroup - 1) * in.groups)
    ctx.fail(fmt::format("has {} outputs, expected {} for {} optimized tensors", ctx.numOutputs(),
                         (perGroup - 1) * in.groups, in.groups));
  const TensorData& r = ctx.tensor(0);
  const TensorData& t = ctx.tensor(1);
  if (numel(r) != 1) ctx.fail("R must be a scalar");
  if (numel(t) != 1 || t.dtype() != DType::Int64) ctx.fail("T must be an int64 scalar");
  in.rate = toDoubles(ctx, r)[0];
  in.step = data<int64_t>(t)[0];
  return in;
}

/// One group's tensors read as double and broadcast (numpy-style) to their common shape.
struct StateGroup {
  std::vector<int64_t> dims;
  std::vector<std::vector<double>> values;  ///< in input order, each numel(dims) long
};

StateGroup readGroup(const KernelContext& ctx, const std::vector<size_t>& inputs) {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i : inputs) {
    const TensorData& t = ctx.tensor(i);
    if (t.dtype() != DType::Float && t.dtype() != DType::Double)
      ctx.fail(fmt::format("input {} has type {}, expected float or double", i, dtypeName(t.dtype())));
    shapes.push_back(t.dims);
  }
  StateGroup g;
  g.dims = broadcastShapes(ctx, shapes);
  int64_t n = numel(g.dims);
  for (size_t i : inputs) {
    const TensorData& t = ctx.tensor(i);
    std::vector<double> raw = toDoubles(ctx, t);
    Broadcaster b(g.dims, t.dims);
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] = raw[static_cast<size_t>(b.offset(j))];
    g.values.push_back(std::move(v));
  }
  return g;
}

/// Sets output `out` to `values`, typed like input `like` (X_new like X, H_new like H, ...).
void setState(KernelContext& ctx, size_t out, size_t like, const StateGroup& g, const std::vector<double>& values) {
  if (ctx.wantsOutput(out)) ctx.setOutput(out, fromDoubles(ctx, ctx.tensor(like).dtype(), g.dims, values));
}

/// A FLOAT attribute the schema requires (Momentum's have no default).
double requiredFloat(const KernelContext& ctx, const char* name) {
  if (!ctx.hasAttr(name)) ctx.fail(fmt::format("the required attribute '{}' is missing", name));
  return ctx.attrFloat(name, 0);
}

/// Adagrad 1: r = R / (1 + T * decay_factor); G' = norm_coefficient * X + G; H_new = H + G'^2;
/// X_new = X - r * G' / (sqrt(H_new) + epsilon).
void adagrad(KernelContext& ctx) {
  OptimizerInputs in = readOptimizerInputs(ctx, 3, "X, G, H");
  double norm = ctx.attrFloat("norm_coefficient", 0.0f);
  double decay = ctx.attrFloat("decay_factor", 0.0f);
  double eps = ctx.attrFloat("epsilon", 1e-6f);
  double r = in.rate / (1 + static_cast<double>(in.step) * decay);
  size_t n = in.groups;
  for (size_t i = 0; i < n; ++i) {
    StateGroup g = readGroup(ctx, {2 + i, 2 + n + i, 2 + 2 * n + i});
    const auto &x = g.values[0], &grad = g.values[1], &h = g.values[2];
    std::vector<double> xNew(x.size()), hNew(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      double gr = norm * x[j] + grad[j];
      hNew[j] = h[j] + gr * gr;
      xNew[j] = x[j] - r * gr / (std::sqrt(hNew[j]) + eps);
    }
    setState(ctx, i, 2 + i, g, xNew);
    setState(ctx, n + i, 2 + 2 * n + i, g, hNew);
  }
}

/// Momentum 1: G' = norm_coefficient * X + G; V_new = alpha * V + (T > 0 ? beta : 1) * G';
/// X_new = X - R * V_new ("standard") or X - R * (G' + alpha * V_new) ("nesterov").
void momentum(KernelContext& ctx) {
  OptimizerInputs in = readOptimizerInputs(ctx, 3, "X, G, V");
  double norm = requiredFloat(ctx, "norm_coefficient");
  double alpha = requiredFloat(ctx, "alpha");
  double beta = requiredFloat(ctx, "beta");
  if (!ctx.hasAttr("mode")) ctx.fail("the required attribute 'mode' is missing");
  std::string mode = ctx.attrString("mode");
  if (mode != "standard" && mode != "nesterov")
    ctx.fail(fmt::format("mode is '{}', expected 'standard' or 'nesterov'", mode));
  bool nesterov = mode == "nesterov";
  // The first update (T == 0) takes the whole gradient.
  double betaAdjusted = in.step > 0 ? beta : 1.0;
  size_t n = in.groups;
  for (size_t i = 0; i < n; ++i) {
    StateGroup g = readGroup(ctx, {2 + i, 2 + n + i, 2 + 2 * n + i});
    const auto &x = g.values[0], &grad = g.values[1], &v = g.values[2];
    std::vector<double> xNew(x.size()), vNew(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      double gr = norm * x[j] + grad[j];
      vNew[j] = alpha * v[j] + betaAdjusted * gr;
      xNew[j] = x[j] - in.rate * (nesterov ? gr + alpha * vNew[j] : vNew[j]);
    }
    setState(ctx, i, 2 + i, g, xNew);
    setState(ctx, n + i, 2 + 2 * n + i, g, vNew);
  }
}

/// Adam 1: G' = norm_coefficient * X + G; V_new = alpha * V + (1 - alpha) * G';
/// H_new = beta * H + (1 - beta) * G'^2; R' = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
/// X_new = (1 - norm_coefficient_post) * (X - R' * V_new / (sqrt(H_new) + epsilon)).
void adam(KernelContext& ctx) {
  OptimizerInputs in = readOptimizerInputs(ctx, 4, "X, G, V, H");
  double norm = ctx.attrFloat("norm_coefficient", 0.0f);
  double normPost = ctx.attrFloat("norm_coefficient_post", 0.0f);
  double alpha = ctx.attrFloat("alpha", 0.9f);
  double beta = ctx.attrFloat("beta", 0.999f);
  double eps = ctx.attrFloat("epsilon", 1e-6f);
  double t = static_cast<double>(in.step);
  // Bias correction of both moving averages, folded into the rate.
  double r = in.step > 0 ? in.rate * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : in.rate;
  size_t n = in.groups;
  for (size_t i = 0; i < n; ++i) {
    StateGroup g = readGroup(ctx, {2 + i, 2 + n + i, 2 + 2 * n + i, 2 + 3 * n + i});
    const auto &x = g.values[0], &grad = g.values[1], &v = g.values[2], &h = g.values[3];
    std::vector<double> xNew(x.size()), vNew(x.size()), hNew(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      double gr = norm * x[j] + grad[j];
      vNew[j] = alpha * v[j] + (1 - alpha) * gr;
      hNew[j] = beta * h[j] + (1 - beta) * gr * gr;
      xNew[j] = (1 - normPost) * (x[j] - r * vNew[j] / (std::sqrt(hNew[j]) + eps));
    }
    setState(ctx, i, 2 + i, g, xNew);
    setState(ctx, n + i, 2 + 2 * n + i, g, vNew);
    setState(ctx, 2 * n + i, 2 + 3 * n + i, g, hNew);
  }
}

// ---------------------------------------------------------------------------------------------
// FlexAttention

/// The element type the softmax stage runs in: softmax_precision when given, else float for
/// float16/bfloat16 inputs and the input type otherwise.
DType softmaxType(const KernelContext& ctx, DType input) {
  if (ctx.hasAttr("softmax_precision")) {
    auto p = static_cast<DType>(ctx.attrInt("softmax_precision", 0));
    if (p != DType::Float && p != DType::Float16 && p != DType::BFloat16 && p != DType::Double)
      ctx.fail(fmt::format("softmax_precision is {}, expected 1 (float), 10 (float16), 16 (bfloat16) or 11 (double)",
                           static_cast<int>(p)));
    return p;
  }
  return input == DType::Double ? DType::Double : DType::Float;
}

/// Runs a score_mod/prob_mod subgraph on `values` (shape `dims`, element type `dt`) and returns
/// its single output, which must keep the shape, as double.
std::vector<double> runModifier(KernelContext& ctx, const char* name, DType dt, const std::vector<int64_t>& dims,
                                const std::vector<double>& values) {
  const Graph& g = *ctx.attr(name)->g;
  if (g.inputs().size() != 1)
    ctx.fail(fmt::format("the {} graph takes {} inputs, expected 1", name, g.inputs().size()));
  std::vector<RtValue> outs = ctx.runSubgraph(g, {RtValue::ofTensor(fromDoubles(ctx, dt, dims, values))});
  if (outs.size() != 1 || !outs[0].isTensor())
    ctx.fail(fmt::format("the {} graph must produce exactly one tensor", name));
  const TensorData& out = *outs[0].tensor;
  if (out.dims != dims)
    ctx.fail(fmt::format("the {} graph output has shape [{}], expected [{}]", name, fmt::join(out.dims, ","),
                         fmt::join(dims, ",")));
  std::vector<double> result = toDoubles(ctx, out);
  roundAll(ctx, dt, result);  // the reference casts the output to the softmax type
  return result;
}

/// FlexAttention 1 (ai.onnx.preview): Y = prob_mod(softmax(score_mod((Q K^T) * scale))) V on
/// rank-4 inputs, with grouped-query K/V heads. Rounding follows the onnx reference: Q and K are
/// pre-multiplied by sqrt(scale) in the input type and Q K^T is rounded to it; the modifiers,
/// softmax and the product with V run in the softmax type; Y is rounded back to the input type.
void flexAttention(KernelContext& ctx) {
  const TensorData& q = ctx.tensor(0);
  const TensorData& k = ctx.tensor(1);
  const TensorData& v = ctx.tensor(2);
  if (q.dims.size() != 4 || k.dims.size() != 4 || v.dims.size() != 4)
    ctx.fail(fmt::format("Q, K and V must be rank 4, got [{}], [{}] and [{}]", fmt::join(q.dims, ","),
                         fmt::join(k.dims, ","), fmt::join(v.dims, ",")));
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) ctx.fail("Q, K and V must have the same element type");
  int64_t nb = q.dims[0], hq = q.dims[1], sq = q.dims[2], dh = q.dims[3];
  int64_t hkv = k.dims[1], skv = k.dims[2], dv = v.dims[3];
  if (k.dims[0] != nb || v.dims[0] != nb) ctx.fail("Q, K and V must have the same batch size");
  if (k.dims[3] != dh) ctx.fail(fmt::format("K head size {} differs from Q head size {}", k.dims[3], dh));
  if (v.dims[1] != hkv || v.dims[2] != skv)
    ctx.fail("K and V must have the same number of heads and sequence length");
  if (hkv == 0 ? hq != 0 : hq % hkv != 0)
    ctx.fail(fmt::format("q_num_heads {} must be a multiple of kv_num_heads {}", hq, hkv));
  int64_t group = hkv == 0 ? 1 : hq / hkv;

  DType dt = q.dtype();
  DType st = softmaxType(ctx, dt);
  double scale = ctx.hasAttr("scale") ? static_cast<double>(ctx.attrFloat("scale", 0))
                                      : static_cast<double>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh))));
  std::vector<double> qv = toDoubles(ctx, q), kv = toDoubles(ctx, k), vv = toDoubles(ctx, v);
  // Pre-scaling by sqrt(scale) needs scale >= 0; otherwise scale the product.
  bool preScale = scale >= 0;
  if (preScale) {
    std::vector<double> s{std::sqrt(static_cast<double>(static_cast<float>(scale)))};
    roundAll(ctx, dt, s);
    for (double& x : qv) x *= s[0];
    for (double& x : kv) x *= s[0];
    roundAll(ctx, dt, qv);
    roundAll(ctx, dt, kv);
  }

  std::vector<int64_t> scoreDims{nb, hq, sq, skv};
  std::vector<double> scores(static_cast<size_t>(numel(scoreDims)));
  auto kvHead = [&](int64_t b, int64_t h) { return b * hkv + h / group; };
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < skv; ++j) {
          const double* qr = qv.data() + ((b * hq + h) * sq + i) * dh;
          const double* kr = kv.data() + (kvHead(b, h) * skv + j) * dh;
          double acc = 0;
          for (int64_t d = 0; d < dh; ++d) acc += qr[d] * kr[d];
          scores[static_cast<size_t>(((b * hq + h) * sq + i) * skv + j)] = preScale ? acc : acc * scale;
        }
  roundAll(ctx, dt, scores);  // Q K^T is produced in the input type
  roundAll(ctx, st, scores);
  if (ctx.hasAttr("score_mod") && ctx.attr("score_mod")->g) scores = runModifier(ctx, "score_mod", st, scoreDims, scores);

  // Softmax over the kv axis. A fully masked row (all -inf) gives NaN, as max-subtraction does.
  std::vector<double>& probs = scores;
  for (int64_t row = 0; row < nb * hq * sq; ++row) {
    double* p = probs.data() + row * skv;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < skv; ++j) mx = std::isnan(p[j]) || p[j] > mx ? p[j] : mx;
    double sum = 0;
    for (int64_t j = 0; j < skv; ++j) {
      p[j] = std::exp(p[j] - mx);
      sum += p[j];
    }
    for (int64_t j = 0; j < skv; ++j) p[j] /= sum;
  }
  roundAll(ctx, st, probs);
  if (ctx.hasAttr("prob_mod") && ctx.attr("prob_mod")->g) probs = runModifier(ctx, "prob_mod", st, scoreDims, probs);

  roundAll(ctx, st, vv);
  std::vector<int64_t> yDims{nb, hq, sq, dv};
  std::vector<double> y(static_cast<size_t>(numel(yDims)));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        const double* p = probs.data() + ((b * hq + h) * sq + i) * skv;
        double* yr = y.data() + ((b * hq + h) * sq + i) * dv;
        for (int64_t j = 0; j < skv; ++j) {
          const double* vr = vv.data() + (kvHead(b, h) * skv + j) * dv;
          for (int64_t d = 0; d < dv; ++d) yr[d] += p[j] * vr[d];
        }
      }
  roundAll(ctx, st, y);
  ctx.setOutput(0, fromDoubles(ctx, dt, yDims, y));
}

}  // namespace

void registerPreviewOps() {
  addRef("ai.onnx.preview.training", "Adagrad", 1, "ref.adagrad", adagrad);
  addRef("ai.onnx.preview.training", "Momentum", 1, "ref.momentum", momentum);
  addRef("ai.onnx.preview.training", "Adam", 1, "ref.adam", adam);
  addRef("ai.onnx.preview", "FlexAttention", 1, "ref.flex_attention", flexAttention);
}

}  // namespace onnxtool::ref
