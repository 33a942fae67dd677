// reduce.cpp: reference kernels of ops that reduce along axes: the Reduce* family, Softmax,
// LogSoftmax, Hardmax, and the losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
// Registered from registerNnOps() (nn.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"
#include "exec/ref/numeric_util.h"

namespace onnxtool::ref {

void registerReduceOps();

namespace {

int64_t dimProduct(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= dims[i];
  return p;
}

// ---------------------------------------------------------------------------------------------
// Reduce*

enum class Red { L1, L2, LogSum, LogSumExp, Max, Min, Mean, Prod, Sum, SumSquare };

/// The Reduce* ops. AxesInput: axes come from input 1 (ReduceSum 13+, the others 18+) and
/// noop_with_empty_axes applies; otherwise from the `axes` attribute, empty meaning all.
/// Reducing over an empty set of axes (noop) still applies the element-wise parts (Square, Log,
/// Exp, Abs), as the spec says. Empty reductions give the identity of the combining operation.
template <Red K, bool AxesInput>
void reduce(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  size_t rank = x.dims.size();
  std::vector<int64_t> axes;
  bool noop = false;
  if constexpr (AxesInput) {
    if (ctx.hasInput(1)) axes = inputInts(ctx, 1);
    noop = ctx.attrInt("noop_with_empty_axes", 0) != 0;
  } else {
    axes = ctx.attrInts("axes", {});
  }
  bool keepDims = ctx.attrInt("keepdims", 1) != 0;
  std::vector<bool> reduced(rank, axes.empty() && !noop);
  for (int64_t a : axes) {
    int64_t ax = normalizeAxis(ctx, a, static_cast<int64_t>(rank));
    if (rank) reduced[static_cast<size_t>(ax)] = true;
  }
  std::vector<int64_t> keptDims = x.dims, outDims;
  for (size_t i = 0; i < rank; ++i) {
    if (reduced[i]) keptDims[i] = 1;
    if (!reduced[i] || keepDims) outDims.push_back(keptDims[i]);
  }
  Broadcaster toOut(x.dims, keptDims);
  auto nOut = static_cast<size_t>(numel(keptDims));
  int64_t n = numel(x);
  Tensor out = makeTensor(x.dtype(), outDims);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    std::vector<int64_t> count(nOut, 0);
    if constexpr (K == Red::Max || K == Red::Min) {
      if constexpr (std::is_same_v<T, bool>) {
        std::vector<uint8_t> acc(nOut, K == Red::Max ? 0 : 1);
        for (int64_t i = 0; i < n; ++i) {
          auto o = static_cast<size_t>(toOut.offset(i));
          acc[o] = K == Red::Max ? (acc[o] | px[i]) : (acc[o] & px[i]);
        }
        for (size_t o = 0; o < nOut; ++o) po[o] = acc[o] != 0;
      } else if constexpr (isFloatLike<T>) {
        std::vector<double> acc(nOut, K == Red::Max ? -kInf : kInf);
        for (int64_t i = 0; i < n; ++i) {
          auto o = static_cast<size_t>(toOut.offset(i));
          double v = static_cast<double>(px[i]);
          if (std::isnan(v) || std::isnan(acc[o])) acc[o] = kNaN;  // NaN propagates
          else acc[o] = K == Red::Max ? std::max(acc[o], v) : std::min(acc[o], v);
        }
        for (size_t o = 0; o < nOut; ++o) po[o] = castTo<T>(acc[o]);
      } else {
        std::vector<T> acc(nOut, K == Red::Max ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max());
        for (int64_t i = 0; i < n; ++i) {
          auto o = static_cast<size_t>(toOut.offset(i));
          acc[o] = K == Red::Max ? std::max(acc[o], px[i]) : std::min(acc[o], px[i]);
        }
        std::copy(acc.begin(), acc.end(), po);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("this reduction does not take bool");
    } else if constexpr (!isFloatLike<T> && (K == Red::L1 || K == Red::Prod || K == Red::Sum || K == Red::SumSquare || K == Red::Mean)) {
      // Exact integer arithmetic that wraps like the element type.
      std::vector<uint64_t> acc(nOut, K == Red::Prod ? 1 : 0);
      for (int64_t i = 0; i < n; ++i) {
        auto o = static_cast<size_t>(toOut.offset(i));
        auto v = static_cast<uint64_t>(static_cast<int64_t>(px[i]));
        if constexpr (K == Red::L1) v = px[i] < T(0) ? uint64_t{0} - v : v;
        if constexpr (K == Red::Prod) acc[o] *= v;
        else if constexpr (K == Red::SumSquare) acc[o] += v * v;
        else acc[o] += v;
        ++count[o];
      }
      for (size_t o = 0; o < nOut; ++o) {
        if constexpr (K == Red::Mean) {
          auto sum = static_cast<double>(static_cast<T>(acc[o]));
          po[o] = castTo<T>(std::trunc(sum / static_cast<double>(count[o])));
        } else {
          po[o] = static_cast<T>(acc[o]);
        }
      }
    } else {
      std::vector<double> shift(nOut, 0.0);
      if constexpr (K == Red::LogSumExp) {
        // Shift by the largest finite value so exp cannot overflow.
        std::vector<double> mx(nOut, -kInf);
        for (int64_t i = 0; i < n; ++i) {
          auto o = static_cast<size_t>(toOut.offset(i));
          double v = static_cast<double>(px[i]);
          if (std::isfinite(v)) mx[o] = std::max(mx[o], v);
        }
        for (size_t o = 0; o < nOut; ++o) shift[o] = std::isfinite(mx[o]) ? mx[o] : 0.0;
      }
      std::vector<double> acc(nOut, K == Red::Prod ? 1.0 : 0.0);
      for (int64_t i = 0; i < n; ++i) {
        auto o = static_cast<size_t>(toOut.offset(i));
        double v = static_cast<double>(px[i]);
        switch (K) {
          case Red::L1: acc[o] += std::fabs(v); break;
          case Red::L2: case Red::SumSquare: acc[o] += v * v; break;
          case Red::LogSumExp: acc[o] += std::exp(v - shift[o]); break;
          case Red::Prod: acc[o] *= v; break;
          default: acc[o] += v; break;
        }
        ++count[o];
      }
      for (size_t o = 0; o < nOut; ++o) {
        double r = acc[o];
        switch (K) {
          case Red::L2: r = std::sqrt(r); break;
          case Red::LogSum: r = std::log(r); break;
          case Red::LogSumExp: r = std::log(r) + shift[o]; break;
          case Red::Mean: r = r / static_cast<double>(count[o]); break;  // empty: NaN
          default: break;
        }
        po[o] = castTo<T>(r);
      }
    }
  });
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Softmax family

enum class Smx { Soft, Log, Hard };

/// Softmax, LogSoftmax, Hardmax. Coerce2D (versions 1 and 11): the input is viewed as a matrix
/// [prod(dims[:axis]), prod(dims[axis:])] and each row normalised; from 13 a single axis.
template <Smx K, bool Coerce2D>
void softmaxLike(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto rank = static_cast<int64_t>(x.dims.size());
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", Coerce2D ? 1 : -1), rank);
  auto ax = static_cast<size_t>(axis);
  int64_t outer = dimProduct(x.dims, 0, ax), len, inner;
  if (Coerce2D) {
    len = dimProduct(x.dims, ax, x.dims.size());
    inner = 1;
  } else {
    len = rank ? x.dims[ax] : 1;
    inner = dimProduct(x.dims, ax + 1, x.dims.size());
  }
  std::vector<double> v = toDoubles(ctx, x);
  switch (x.dtype()) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16: break;
    default: ctx.fail(fmt::format("unsupported element type {}, expected a float type", dtypeName(x.dtype())));
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t k) -> double& { return v[static_cast<size_t>((o * len + k) * inner + in)]; };
      if (len == 0) continue;
      double mx = at(0);
      int64_t arg = 0;
      for (int64_t k = 1; k < len && !std::isnan(mx); ++k)
        if (at(k) > mx || std::isnan(at(k))) {
          mx = at(k);
          arg = k;
        }
      if (K == Smx::Hard) {
        for (int64_t k = 0; k < len; ++k) at(k) = k == arg ? 1.0 : 0.0;
        continue;
      }
      if (K == Smx::Soft && (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16)) {
        // Round every step as numpy does in these types (float16 sums accumulate in float,
        // ml_dtypes' bfloat16 sums round after each addition), so that graphs built from
        // Softmax agree with ops specified through the same numpy steps (Attention).
        auto rt = [&](double d) { return roundTo(x.dtype(), d); };
        double sum = 0;
        for (int64_t k = 0; k < len; ++k) {
          at(k) = rt(std::exp(rt(at(k) - mx)));
          sum = x.dtype() == DType::BFloat16 ? rt(sum + at(k)) : sum + at(k);
        }
        sum = rt(sum);
        for (int64_t k = 0; k < len; ++k) at(k) = at(k) / sum;
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(at(k) - mx);
      for (int64_t k = 0; k < len; ++k) at(k) = K == Smx::Soft ? std::exp(at(k) - mx) / sum : at(k) - mx - std::log(sum);
    }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, v));
}

// ---------------------------------------------------------------------------------------------
// Losses

/// NegativeLogLikelihoodLoss on log-probabilities `logp` laid out like input 0 (N, C, d1..dk).
/// mean divides by the sum of the applied weights (ignored targets weigh 0).
Tensor nllLoss(const KernelContext& ctx, const std::vector<double>& logp, const std::vector<int64_t>& xDims, DType dt) {
  if (xDims.size() < 2) ctx.fail("input must have shape (N, C, d1, ..., dk)");
  const TensorData& target = ctx.tensor(1);
  int64_t nN = xDims[0], c = xDims[1], d = dimProduct(xDims, 2, xDims.size());
  std::vector<int64_t> tDims{nN};
  tDims.insert(tDims.end(), xDims.begin() + 2, xDims.end());
  if (target.dims != tDims) ctx.fail("target must have shape (N, d1, ..., dk)");
  std::vector<int64_t> t = target.toInt64s();
  std::vector<double> w;
  if (ctx.hasInput(2)) {
    w = toDoubles(ctx, ctx.tensor(2));
    if (static_cast<int64_t>(w.size()) != c) ctx.fail(fmt::format("weight must have {} elements", c));
  }
  bool hasIgnore = ctx.hasAttr("ignore_index");
  int64_t ignore = ctx.attrInt("ignore_index", 0);
  std::vector<double> loss(t.size());
  double lossSum = 0, weightSum = 0;
  for (int64_t n = 0; n < nN; ++n)
    for (int64_t k = 0; k < d; ++k) {
      auto i = static_cast<size_t>(n * d + k);
      int64_t cls = t[i];
      if (hasIgnore && cls == ignore) {
        loss[i] = 0;
        continue;
      }
      if (cls < 0 || cls >= c) ctx.fail(fmt::format("target value {} is out of range [0, {})", cls, c));
      double wi = w.empty() ? 1.0 : w[static_cast<size_t>(cls)];
      loss[i] = -logp[static_cast<size_t>((n * c + cls) * d + k)] * wi;
      lossSum += loss[i];
      weightSum += wi;
    }
  std::string reduction = ctx.attrString("reduction", "mean");
  if (reduction == "none") return fromDoubles(ctx, dt, tDims, loss);
  if (reduction == "sum") return fromDoubles(ctx, dt, {}, {lossSum});
  if (reduction == "mean") return fromDoubles(ctx, dt, {}, {lossSum / weightSum});
  ctx.fail(fmt::format("unknown reduction '{}', expected none, sum or mean", reduction));
}

void negativeLogLikelihoodLoss(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  ctx.setOutput(0, nllLoss(ctx, toDoubles(ctx, x), x.dims, x.dtype()));
}

void softmaxCrossEntropyLoss(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() < 2) ctx.fail("scores must have shape (N, C, d1, ..., dk)");
  std::vector<double> v = toDoubles(ctx, x);
  int64_t nN = x.dims[0], c = x.dims[1], d = dimProduct(x.dims, 2, x.dims.size());
  for (int64_t n = 0; n < nN; ++n)
    for (int64_t k = 0; k < d; ++k) {
      auto at = [&](int64_t cls) -> double& { return v[static_cast<size_t>((n * c + cls) * d + k)]; };
      double mx = -kInf;
      for (int64_t cls = 0; cls < c; ++cls) mx = std::max(mx, at(cls));
      double sum = 0;
      for (int64_t cls = 0; cls < c; ++cls) sum += std::exp(at(cls) - mx);
      for (int64_t cls = 0; cls < c; ++cls) at(cls) = at(cls) - mx - std::log(sum);
    }
  ctx.setOutput(0, nllLoss(ctx, v, x.dims, x.dtype()));
  if (ctx.wantsOutput(1)) ctx.setOutput(1, fromDoubles(ctx, x.dtype(), x.dims, v));
}

}  // namespace

void registerReduceOps() {
  // The axes attribute became an input at 13 for ReduceSum and at 18 for the others.
  addRef("", "ReduceL1", 1, "ref.reduce_l1.attr", reduce<Red::L1, false>);
  addRef("", "ReduceL1", 18, "ref.reduce_l1", reduce<Red::L1, true>);
  addRef("", "ReduceL2", 1, "ref.reduce_l2.attr", reduce<Red::L2, false>);
  addRef("", "ReduceL2", 18, "ref.reduce_l2", reduce<Red::L2, true>);
  addRef("", "ReduceLogSum", 1, "ref.reduce_log_sum.attr", reduce<Red::LogSum, false>);
  addRef("", "ReduceLogSum", 18, "ref.reduce_log_sum", reduce<Red::LogSum, true>);
  addRef("", "ReduceLogSumExp", 1, "ref.reduce_log_sum_exp.attr", reduce<Red::LogSumExp, false>);
  addRef("", "ReduceLogSumExp", 18, "ref.reduce_log_sum_exp", reduce<Red::LogSumExp, true>);
  addRef("", "ReduceMax", 1, "ref.reduce_max.attr", reduce<Red::Max, false>);
  addRef("", "ReduceMax", 18, "ref.reduce_max", reduce<Red::Max, true>);
  addRef("", "ReduceMean", 1, "ref.reduce_mean.attr", reduce<Red::Mean, false>);
  addRef("", "ReduceMean", 18, "ref.reduce_mean", reduce<Red::Mean, true>);
  addRef("", "ReduceMin", 1, "ref.reduce_min.attr", reduce<Red::Min, false>);
  addRef("", "ReduceMin", 18, "ref.reduce_min", reduce<Red::Min, true>);
  addRef("", "ReduceProd", 1, "ref.reduce_prod.attr", reduce<Red::Prod, false>);
  addRef("", "ReduceProd", 18, "ref.reduce_prod", reduce<Red::Prod, true>);
  addRef("", "ReduceSum", 1, "ref.reduce_sum.attr", reduce<Red::Sum, false>);
  addRef("", "ReduceSum", 13, "ref.reduce_sum", reduce<Red::Sum, true>);
  addRef("", "ReduceSumSquare", 1, "ref.reduce_sum_square.attr", reduce<Red::SumSquare, false>);
  addRef("", "ReduceSumSquare", 18, "ref.reduce_sum_square", reduce<Red::SumSquare, true>);

  addRef("", "Softmax", 1, "ref.softmax.2d", softmaxLike<Smx::Soft, true>);
  addRef("", "Softmax", 13, "ref.softmax", softmaxLike<Smx::Soft, false>);
  addRef("", "LogSoftmax", 1, "ref.log_softmax.2d", softmaxLike<Smx::Log, true>);
  addRef("", "LogSoftmax", 13, "ref.log_softmax", softmaxLike<Smx::Log, false>);
  addRef("", "Hardmax", 1, "ref.hardmax.2d", softmaxLike<Smx::Hard, true>);
  addRef("", "Hardmax", 13, "ref.hardmax", softmaxLike<Smx::Hard, false>);

  addRef("", "NegativeLogLikelihoodLoss", 12, "ref.negative_log_likelihood_loss", negativeLogLikelihoodLoss);
  addRef("", "SoftmaxCrossEntropyLoss", 12, "ref.softmax_cross_entropy_loss", softmaxCrossEntropyLoss);
}

}  // namespace onnxtool::ref
