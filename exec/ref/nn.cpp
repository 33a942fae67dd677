// nn.cpp: reference kernels of neural-network ops: the MatMul family (MatMul, MatMulInteger,
// QLinearMatMul, Gemm, Einsum, Det), normalisations (BatchNormalization, InstanceNormalization,
// LayerNormalization, GroupNormalization, RMSNormalization, LRN, LpNormalization,
// MeanVarianceNormalization), Dropout, and attention (Attention, RotaryEmbedding,
// LinearAttention). Reductions, Softmax and the losses live in reduce.cpp.
//
// Float kernels compute in double and round once into the output type; integer kernels compute
// in 64-bit and wrap into the output type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "exec/ref/float_formats.h"
#include "exec/ref/kernel_util.h"
#include "exec/ref/numeric_util.h"

namespace onnxtool::ref {

void registerReduceOps();  // reduce.cpp

namespace {

void requireFloat(const KernelContext& ctx, const TensorData& t) {
  switch (t.dtype()) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16: return;
    default: ctx.fail(fmt::format("unsupported element type {}, expected a float type", dtypeName(t.dtype())));
  }
}

// ---------------------------------------------------------------------------------------------
// MatMul family

/// numpy matmul shapes: 1-D operands are promoted (and the added axis dropped from the output),
/// batch dimensions broadcast.
struct MatMulShape {
  int64_t m = 0, k = 0, n = 0;
  std::vector<int64_t> batch, aBatch, bBatch, outDims;
};

MatMulShape matMulShape(const KernelContext& ctx, const std::vector<int64_t>& aDims, const std::vector<int64_t>& bDims) {
  if (aDims.empty() || bDims.empty()) ctx.fail("MatMul inputs must have rank >= 1");
  std::vector<int64_t> ad = aDims, bd = bDims;
  bool aVec = ad.size() == 1, bVec = bd.size() == 1;
  if (aVec) ad.insert(ad.begin(), 1);
  if (bVec) bd.push_back(1);
  MatMulShape s;
  s.m = ad[ad.size() - 2];
  s.k = ad.back();
  s.n = bd.back();
  if (s.k != bd[bd.size() - 2]) ctx.fail(fmt::format("inner dimensions differ, {} vs {}", s.k, bd[bd.size() - 2]));
  s.aBatch.assign(ad.begin(), ad.end() - 2);
  s.bBatch.assign(bd.begin(), bd.end() - 2);
  s.batch = broadcastShapes(ctx, {s.aBatch, s.bBatch});
  s.outDims = s.batch;
  if (!aVec) s.outDims.push_back(s.m);
  if (!bVec) s.outDims.push_back(s.n);
  return s;
}

void matMul(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != b.dtype()) ctx.fail("MatMul inputs must have the same element type");
  MatMulShape s = matMulShape(ctx, a.dims, b.dims);
  Tensor out = makeTensor(a.dtype(), s.outDims);
  Broadcaster ba(s.batch, s.aBatch), bb(s.batch, s.bBatch);
  int64_t nb = numel(s.batch), m = s.m, k = s.k, n = s.n;
  dispatchNumeric(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("MatMul does not take bool");
    } else {
      // Unsigned accumulation wraps like the output type does.
      using Acc = std::conditional_t<isFloatLike<T>, double, uint64_t>;
      const T* pa = data<T>(a);
      const T* pb = data<T>(b);
      T* po = mutableData<T>(out);
      for (int64_t bi = 0; bi < nb; ++bi) {
        const T* A = pa + ba.offset(bi) * m * k;
        const T* B = pb + bb.offset(bi) * k * n;
        T* C = po + bi * m * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            Acc acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              if constexpr (isFloatLike<T>) acc += static_cast<double>(A[i * k + p]) * static_cast<double>(B[p * n + j]);
              else acc += static_cast<Acc>(static_cast<int64_t>(A[i * k + p])) * static_cast<Acc>(static_cast<int64_t>(B[p * n + j]));
            }
            if constexpr (isFloatLike<T>) C[i * n + j] = castTo<T>(acc);
            else C[i * n + j] = static_cast<T>(acc);
          }
      }
    }
  });
  ctx.setOutput(0, std::move(out));
}

/// A quantisation parameter (zero point or scale) that is per tensor (one element), per row of A
/// / per column of B (1-D), or N-D with A's batch dims and [M, 1] (B: [1, N]).
struct QuantParam {
  std::vector<double> values;
  bool perTensor = true;
  bool nd = false;
  /// Value for batch offset `batchOff` (in the operand's own batch) and row/column `idx`.
  double at(int64_t batchOff, int64_t idx, int64_t len) const {
    if (values.empty()) return 0;
    if (perTensor) return values[0];
    if (nd) return values[static_cast<size_t>(batchOff * len + idx)];
    return values[static_cast<size_t>(idx)];
  }
};

QuantParam quantParam(const KernelContext& ctx, size_t input, int64_t len) {
  QuantParam q;
  if (!ctx.hasInput(input)) return q;
  const TensorData& t = ctx.tensor(input);
  q.values = toDoubles(ctx, t);
  q.perTensor = q.values.size() == 1;
  q.nd = !q.perTensor && t.dims.size() > 1;
  if (!q.perTensor && !q.nd && static_cast<int64_t>(q.values.size()) != len)
    ctx.fail(fmt::format("input {} has {} elements, expected 1 or {}", input, q.values.size(), len));
  return q;
}

/// sum_p (A - azp) * (B - bzp) for every output element, as int64; A and B are 8-bit integers.
template <typename F>
void integerMatMul(KernelContext& ctx, const TensorData& a, const TensorData& b, const QuantParam& azp, const QuantParam& bzp,
                   const MatMulShape& s, F&& emit) {
  std::vector<int64_t> av = toInts(ctx, a), bv = toInts(ctx, b);
  Broadcaster ba(s.batch, s.aBatch), bb(s.batch, s.bBatch);
  int64_t nb = numel(s.batch), m = s.m, k = s.k, n = s.n;
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t aOff = ba.offset(bi), bOff = bb.offset(bi);
    const int64_t* A = av.data() + aOff * m * k;
    const int64_t* B = bv.data() + bOff * k * n;
    for (int64_t i = 0; i < m; ++i) {
      int64_t za = static_cast<int64_t>(azp.at(aOff, i, m));
      for (int64_t j = 0; j < n; ++j) {
        int64_t zb = static_cast<int64_t>(bzp.at(bOff, j, n));
        int64_t acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += (A[i * k + p] - za) * (B[p * n + j] - zb);
        emit(bi * m * n + i * n + j, aOff, bOff, i, j, acc);
      }
    }
  }
}

void matMulInteger(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  MatMulShape s = matMulShape(ctx, a.dims, b.dims);
  QuantParam azp = quantParam(ctx, 2, s.m), bzp = quantParam(ctx, 3, s.n);
  Tensor out = makeTensor(DType::Int32, s.outDims);
  int32_t* po = mutableData<int32_t>(out);
  integerMatMul(ctx, a, b, azp, bzp, s, [&](int64_t o, int64_t, int64_t, int64_t, int64_t, int64_t acc) {
    po[o] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(acc)));
  });
  ctx.setOutput(0, std::move(out));
}

/// Values of a float8 tensor (one byte per element) as doubles.
std::vector<double> float8Values(const TensorData& t) {
  std::vector<double> v(static_cast<size_t>(numel(t)));
  const auto* p = data<uint8_t>(t);
  for (size_t i = 0; i < v.size(); ++i) v[i] = decodeNarrowFloat(t.dtype(), p[i]);
  return v;
}

/// QLinearMatMul 21 on float8 operands: the same formula in real arithmetic, the result
/// encoded with saturation (round to nearest even).
void qLinearMatMulFloat8(KernelContext& ctx, const MatMulShape& s, DType outType) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(3);
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}, size_t{5}, size_t{7}})
    if (ctx.hasInput(i) && !isSaturableFloat8(ctx.tensor(i).dtype()))
      ctx.fail("QLinearMatMul cannot mix float8 and integer operands");
  auto param = [&](size_t i, int64_t len) {
    QuantParam q;
    if (!ctx.hasInput(i)) return q;
    const TensorData& t = ctx.tensor(i);
    q.values = isSaturableFloat8(t.dtype()) ? float8Values(t) : toDoubles(ctx, t);
    q.perTensor = q.values.size() == 1;
    q.nd = !q.perTensor && t.dims.size() > 1;
    if (!q.perTensor && !q.nd && static_cast<int64_t>(q.values.size()) != len)
      ctx.fail(fmt::format("input {} has {} elements, expected 1 or {}", i, q.values.size(), len));
    return q;
  };
  QuantParam as = param(1, s.m), azp = param(2, s.m), bs = param(4, s.n), bzp = param(5, s.n);
  QuantParam ys = param(6, s.m), yzp = param(7, s.m);
  DType scaleType = ctx.tensor(1).dtype();
  std::vector<double> av = float8Values(a), bv = float8Values(b);
  Broadcaster ba(s.batch, s.aBatch), bb(s.batch, s.bBatch);
  Tensor out = makeTensor(outType, s.outDims);
  auto* po = mutableData<uint8_t>(out);
  int64_t nb = numel(s.batch), m = s.m, k = s.k, n = s.n;
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t aOff = ba.offset(bi), bOff = bb.offset(bi);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += (av[static_cast<size_t>((aOff * m + i) * k + p)] - azp.at(aOff, i, m)) *
                 (bv[static_cast<size_t>((bOff * k + p) * n + j)] - bzp.at(bOff, j, n));
        double mult = roundTo(scaleType, roundTo(scaleType, as.at(aOff, i, m) * bs.at(bOff, j, n)) / ys.at(aOff, i, m));
        double y = acc * mult + yzp.at(aOff, i, m);
        po[bi * m * n + i * n + j] = static_cast<uint8_t>(encodeNarrowFloat(outType, y, true));
      }
  }
  ctx.setOutput(0, std::move(out));
}

void qLinearMatMul(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(3);
  MatMulShape s = matMulShape(ctx, a.dims, b.dims);
  if (isSaturableFloat8(a.dtype()) || isSaturableFloat8(b.dtype()))
    return qLinearMatMulFloat8(ctx, s, ctx.hasInput(7) ? ctx.tensor(7).dtype() : a.dtype());
  QuantParam as = quantParam(ctx, 1, s.m), azp = quantParam(ctx, 2, s.m);
  QuantParam bs = quantParam(ctx, 4, s.n), bzp = quantParam(ctx, 5, s.n);
  QuantParam ys = quantParam(ctx, 6, s.m), yzp = quantParam(ctx, 7, s.m);
  DType scaleType = ctx.tensor(1).dtype();
  DType outType = ctx.hasInput(7) ? ctx.tensor(7).dtype() : a.dtype();
  Tensor out = makeTensor(outType, s.outDims);
  dispatchNumeric(ctx, outType, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (isFloatLike<T> || std::is_same_v<T, bool>) {
      ctx.fail("QLinearMatMul output must be an integer type");
    } else {
      T* po = mutableData<T>(out);
      integerMatMul(ctx, a, b, azp, bzp, s, [&](int64_t o, int64_t aOff, int64_t bOff, int64_t i, int64_t j, int64_t acc) {
        // The multiplier is computed in the scales' own type, as the spec's reference does.
        double mult = roundTo(scaleType, roundTo(scaleType, as.at(aOff, i, s.m) * bs.at(bOff, j, s.n)) / ys.at(aOff, i, s.m));
        double y = std::nearbyint(static_cast<double>(acc) * mult + yzp.at(aOff, i, s.m));  // half to even
        y = std::clamp(y, static_cast<double>(std::numeric_limits<T>::min()), static_cast<double>(std::numeric_limits<T>::max()));
        po[o] = static_cast<T>(y);
      });
    }
  });
  ctx.setOutput(0, std::move(out));
}

/// Gemm, every version: Y = alpha * A' * B' + beta * C, C broadcast to (M, N) and optional from 11.
void gemm(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dims.size() != 2 || b.dims.size() != 2) ctx.fail("Gemm inputs A and B must be 2-D");
  bool ta = ctx.attrInt("transA", 0) != 0, tb = ctx.attrInt("transB", 0) != 0;
  double alpha = ctx.attrFloat("alpha", 1.0f), beta = ctx.attrFloat("beta", 1.0f);
  int64_t m = ta ? a.dims[1] : a.dims[0], k = ta ? a.dims[0] : a.dims[1];
  int64_t kb = tb ? b.dims[1] : b.dims[0], n = tb ? b.dims[0] : b.dims[1];
  if (k != kb) ctx.fail(fmt::format("inner dimensions differ, {} vs {}", k, kb));
  const TensorData* c = ctx.hasInput(2) ? &ctx.tensor(2) : nullptr;
  std::vector<int64_t> outDims{m, n};
  if (c) {
    std::vector<int64_t> bd = broadcastShapes(ctx, {outDims, c->dims});
    if (bd != outDims) ctx.fail("Gemm input C cannot be broadcast to (M, N)");
  }
  Tensor out = makeTensor(a.dtype(), outDims);
  dispatchNumeric(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("Gemm does not take bool");
    } else {
      const T* pa = data<T>(a);
      const T* pb = data<T>(b);
      const T* pc = c ? data<T>(*c) : nullptr;
      Broadcaster bc(outDims, c ? c->dims : std::vector<int64_t>{});
      T* po = mutableData<T>(out);
      bool exactInt = !isFloatLike<T> && alpha == 1.0 && (beta == 1.0 || !c);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double accF = 0;
          uint64_t accI = 0;  // wraps like the integer output type
          for (int64_t p = 0; p < k; ++p) {
            T x = ta ? pa[p * m + i] : pa[i * k + p];
            T y = tb ? pb[j * k + p] : pb[p * n + j];
            if constexpr (isFloatLike<T>) accF += static_cast<double>(x) * static_cast<double>(y);
            else accI += static_cast<uint64_t>(static_cast<int64_t>(x)) * static_cast<uint64_t>(static_cast<int64_t>(y));
          }
          int64_t o = i * n + j;
          if (exactInt) {
            if (pc) accI += static_cast<uint64_t>(static_cast<int64_t>(pc[bc.offset(o)]));
            if constexpr (!isFloatLike<T>) po[o] = static_cast<T>(accI);
            continue;
          }
          double acc = isFloatLike<T> ? accF : static_cast<double>(static_cast<int64_t>(accI));
          double r = alpha * acc;
          // The product is rounded to T before C is added, as MatMul followed by Add computes it:
          // so fusing MatMul+Add into Gemm (fuse-matmul-add) changes no bit on this executor, and
          // `optimize --verify` compares like with like. Both roundings are within the spec.
          if (pc) r = static_cast<double>(castTo<T>(r)) + beta * static_cast<double>(pc[bc.offset(o)]);
          po[o] = castTo<T>(r);
        }
    }
  });
  ctx.setOutput(0, std::move(out));
}

/// Einsum: parses the equation into label ids (letters keep their ASCII code, ellipsis dims get
/// ids 0..E-1, right-aligned like numpy broadcasting), then sums the operand product over every
/// label not in the output. A label repeated within one operand walks its diagonal.
void einsum(KernelContext& ctx) {
  std::string eq;
  for (char ch : ctx.attrString("equation")) if (ch != ' ') eq += ch;
  std::string lhs = eq, rhs;
  bool explicitOut = false;
  if (auto arrow = eq.find("->"); arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
    explicitOut = true;
  }
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  size_t nIn = ctx.numInputs();
  if (terms.size() != nIn) ctx.fail(fmt::format("equation has {} terms but the node has {} inputs", terms.size(), nIn));
  DType dt = ctx.tensor(0).dtype();
  for (size_t i = 0; i < nIn; ++i)
    if (ctx.tensor(i).dtype() != dt) ctx.fail("Einsum inputs must have the same element type");

  // Count letters per term to know how many dims each ellipsis stands for.
  auto isLetter = [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); };
  std::vector<int64_t> ellRank(nIn, 0);
  int64_t maxEll = 0;
  for (size_t i = 0; i < nIn; ++i) {
    const std::string& t = terms[i];
    int64_t letters = 0;
    bool ell = false;
    for (size_t p = 0; p < t.size(); ++p) {
      if (isLetter(t[p])) ++letters;
      else if (t.compare(p, 3, "...") == 0 && !ell) { ell = true; p += 2; }
      else ctx.fail(fmt::format("invalid Einsum term '{}'", t));
    }
    int64_t rank = static_cast<int64_t>(ctx.tensor(i).dims.size());
    if (ell) ellRank[i] = rank - letters;
    if (ellRank[i] < 0 || (!ell && letters != rank))
      ctx.fail(fmt::format("Einsum term '{}' does not match input {} of rank {}", t, i, rank));
    maxEll = std::max(maxEll, ellRank[i]);
  }
  // labels[i][axis] = label id of input i's axis.
  std::vector<std::vector<int>> labels(nIn);
  std::map<int, int64_t> sizes;
  std::map<int, int> counts;
  bool anyEll = false;
  for (size_t i = 0; i < nIn; ++i) {
    const std::string& t = terms[i];
    for (size_t p = 0; p < t.size(); ++p) {
      if (isLetter(t[p])) {
        labels[i].push_back(t[p]);
      } else {
        anyEll = true;
        for (int64_t e = 0; e < ellRank[i]; ++e) labels[i].push_back(static_cast<int>(maxEll - ellRank[i] + e));
        p += 2;
      }
    }
    const auto& dims = ctx.tensor(i).dims;
    for (size_t ax = 0; ax < dims.size(); ++ax) {
      int l = labels[i][ax];
      if (l >= 'A') ++counts[l];  // every occurrence counts: implicit "ii" is a trace
      auto [it, inserted] = sizes.emplace(l, dims[ax]);
      if (!inserted && it->second != dims[ax]) {
        if (it->second == 1) it->second = dims[ax];
        else if (dims[ax] != 1)
          ctx.fail(fmt::format("Einsum dimension mismatch for label '{}': {} vs {}", l >= 'A' ? std::string(1, static_cast<char>(l)) : std::string("..."), it->second, dims[ax]));
      }
    }
  }
  std::vector<int> outLabels;
  if (explicitOut) {
    bool ell = false;
    for (size_t p = 0; p < rhs.size(); ++p) {
      if (isLetter(rhs[p])) {
        if (!sizes.count(rhs[p])) ctx.fail(fmt::format("output label '{}' does not occur in the inputs", rhs[p]));
        outLabels.push_back(rhs[p]);
      } else if (rhs.compare(p, 3, "...") == 0 && !ell) {
        ell = true;
        for (int64_t e = 0; e < maxEll; ++e) outLabels.push_back(static_cast<int>(e));
        p += 2;
      } else {
        ctx.fail(fmt::format("invalid Einsum output term '{}'", rhs));
      }
    }
  } else {
    if (anyEll)
      for (int64_t e = 0; e < maxEll; ++e) outLabels.push_back(static_cast<int>(e));
    for (auto [l, c] : counts)
      if (c == 1) outLabels.push_back(l);  // std::map iterates in ASCII order
  }
  // Every label gets a slot: output labels first, then summed ones.
  std::vector<int> all = outLabels;
  for (auto [l, sz] : sizes)
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  size_t nOut = outLabels.size(), nAll = all.size();
  std::vector<int64_t> extent(nAll);
  for (size_t s = 0; s < nAll; ++s) extent[s] = sizes[all[s]];
  // strides[i][s]: step in input i when label slot s advances (0 where broadcast).
  std::vector<std::vector<int64_t>> strides(nIn, std::vector<int64_t>(nAll, 0));
  for (size_t i = 0; i < nIn; ++i) {
    const auto& dims = ctx.tensor(i).dims;
    std::vector<int64_t> st = stridesOf(dims);
    for (size_t ax = 0; ax < dims.size(); ++ax) {
      size_t s = static_cast<size_t>(std::find(all.begin(), all.end(), labels[i][ax]) - all.begin());
      if (dims[ax] != 1) strides[i][s] += st[ax];
    }
  }
  std::vector<int64_t> outDims(extent.begin(), extent.begin() + static_cast<std::ptrdiff_t>(nOut));
  Tensor out = makeTensor(dt, outDims);
  int64_t outCount = numel(outDims);
  int64_t sumCount = 1;
  for (size_t s = nOut; s < nAll; ++s) sumCount *= extent[s];
  dispatchNumeric(ctx, dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("Einsum does not take bool");
    } else {
      using Acc = std::conditional_t<isFloatLike<T>, double, uint64_t>;
      std::vector<const T*> in(nIn);
      for (size_t i = 0; i < nIn; ++i) in[i] = data<T>(ctx.tensor(i));
      T* po = mutableData<T>(out);
      std::vector<int64_t> idx(nAll, 0);
      for (int64_t o = 0; o < outCount; ++o) {
        int64_t rem = o;
        for (size_t s = nOut; s-- > 0;) {
          idx[s] = rem % extent[s];
          rem /= extent[s];
        }
        Acc acc = 0;
        for (int64_t q = 0; q < sumCount; ++q) {
          int64_t r = q;
          for (size_t s = nAll; s-- > nOut;) {
            idx[s] = r % extent[s];
            r /= extent[s];
          }
          Acc prod = 1;
          for (size_t i = 0; i < nIn; ++i) {
            int64_t off = 0;
            for (size_t s = 0; s < nAll; ++s) off += idx[s] * strides[i][s];
            if constexpr (isFloatLike<T>) prod *= static_cast<double>(in[i][off]);
            else prod *= static_cast<uint64_t>(static_cast<int64_t>(in[i][off]));
          }
          acc += prod;
        }
        if constexpr (isFloatLike<T>) po[o] = castTo<T>(acc);
        else po[o] = static_cast<T>(acc);
      }
    }
  });
  ctx.setOutput(0, std::move(out));
}

/// Det: LU decomposition with partial pivoting per trailing [M, M] matrix.
void det(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  size_t r = x.dims.size();
  if (r < 2 || x.dims[r - 1] != x.dims[r - 2]) ctx.fail("Det input must have shape [*, M, M]");
  int64_t n = x.dims[r - 1];
  std::vector<int64_t> outDims(x.dims.begin(), x.dims.end() - 2);
  std::vector<double> v = toDoubles(ctx, x), res(static_cast<size_t>(numel(outDims)));
  for (size_t bi = 0; bi < res.size(); ++bi) {
    std::vector<double> a(v.begin() + static_cast<std::ptrdiff_t>(bi * n * n), v.begin() + static_cast<std::ptrdiff_t>((bi + 1) * n * n));
    double d = 1;
    for (int64_t c = 0; c < n; ++c) {
      int64_t piv = c;
      for (int64_t i = c + 1; i < n; ++i)
        if (std::fabs(a[i * n + c]) > std::fabs(a[piv * n + c])) piv = i;
      if (a[piv * n + c] == 0) { d = 0; break; }
      if (piv != c) {
        for (int64_t j = 0; j < n; ++j) std::swap(a[c * n + j], a[piv * n + j]);
        d = -d;
      }
      d *= a[c * n + c];
      for (int64_t i = c + 1; i < n; ++i) {
        double f = a[i * n + c] / a[c * n + c];
        for (int64_t j = c; j < n; ++j) a[i * n + j] -= f * a[c * n + j];
      }
    }
    res[bi] = d;
  }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), outDims, res));
}

// ---------------------------------------------------------------------------------------------
// Normalisation

/// Product of dims[from, to).
int64_t dimProduct(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= dims[i];
  return p;
}

/// BatchNormalization, every version. Training statistics are computed when training_mode is set
/// (14+) or, before 14, when the node asks for the running statistics outputs; `spatial=0`
/// (before 9) takes per-activation parameters of shape (C, D1, ..., Dn).
void batchNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  int64_t v = ctx.opsetVersion();
  std::vector<int64_t> xd = x.dims;
  if (xd.empty()) ctx.fail("BatchNormalization input must have rank >= 1");
  if (xd.size() == 1) xd.push_back(1);  // (N): one channel
  int64_t c = xd[1], sp = dimProduct(xd, 2, xd.size());
  std::vector<double> xv = toDoubles(ctx, x), scale = toDoubles(ctx, ctx.tensor(1)), bias = toDoubles(ctx, ctx.tensor(2));
  std::vector<double> mean = toDoubles(ctx, ctx.tensor(3)), var = toDoubles(ctx, ctx.tensor(4));
  double eps = ctx.attrFloat("epsilon", 1e-5f), momentum = ctx.attrFloat("momentum", 0.9f);
  bool perActivation = static_cast<int64_t>(scale.size()) == c * sp && sp != 1 && ctx.attrInt("spatial", 1) == 0;
  int64_t keys = perActivation ? c * sp : c;
  for (const auto* p : {&scale, &bias, &mean, &var})
    if (static_cast<int64_t>(p->size()) != keys) ctx.fail(fmt::format("BatchNormalization parameters must have {} elements", keys));
  bool training = v >= 14 ? ctx.attrInt("training_mode", 0) != 0 : ctx.wantsOutput(1);
  auto keyOf = [&](int64_t flat) { return perActivation ? flat % (c * sp) : (flat / sp) % c; };
  std::vector<double> useMean = mean, useVar = var, runMean = mean, runVar = var;
  if (training) {
    std::vector<double> sum(static_cast<size_t>(keys), 0), sq(static_cast<size_t>(keys), 0);
    std::vector<int64_t> cnt(static_cast<size_t>(keys), 0);
    for (size_t i = 0; i < xv.size(); ++i) {
      auto kk = static_cast<size_t>(keyOf(static_cast<int64_t>(i)));
      sum[kk] += xv[i];
      ++cnt[kk];
    }
    for (size_t kk = 0; kk < sum.size(); ++kk) useMean[kk] = sum[kk] / static_cast<double>(cnt[kk]);
    for (size_t i = 0; i < xv.size(); ++i) {
      auto kk = static_cast<size_t>(keyOf(static_cast<int64_t>(i)));
      double d = xv[i] - useMean[kk];
      sq[kk] += d * d;
    }
    for (size_t kk = 0; kk < sq.size(); ++kk) {
      useVar[kk] = sq[kk] / static_cast<double>(cnt[kk]);
      runMean[kk] = mean[kk] * momentum + useMean[kk] * (1 - momentum);
      runVar[kk] = var[kk] * momentum + useVar[kk] * (1 - momentum);
    }
  }
  std::vector<double> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    auto kk = static_cast<size_t>(keyOf(static_cast<int64_t>(i)));
    y[i] = scale[kk] * (xv[i] - useMean[kk]) / std::sqrt(useVar[kk] + eps) + bias[kk];
  }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, y));
  if (!training) return;
  DType statType = ctx.tensor(3).dtype();
  const auto& statDims = ctx.tensor(3).dims;
  if (ctx.wantsOutput(1)) ctx.setOutput(1, fromDoubles(ctx, statType, statDims, runMean));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, fromDoubles(ctx, statType, statDims, runVar));
  if (v < 14) {
    if (ctx.wantsOutput(3)) ctx.setOutput(3, fromDoubles(ctx, statType, statDims, useMean));
    if (ctx.wantsOutput(4)) ctx.setOutput(4, fromDoubles(ctx, statType, statDims, useVar));
  }
}

/// Normalises each of `groups` consecutive blocks of `blockLen` elements of `xv` to zero mean
/// and unit variance: (x - mean) / sqrt(var + eps). Returns per-block mean and 1/sqrt(var+eps).
void normalizeBlocks(std::vector<double>& xv, int64_t groups, int64_t blockLen, double eps,
                     std::vector<double>* means = nullptr, std::vector<double>* invStd = nullptr) {
  for (int64_t g = 0; g < groups; ++g) {
    double* p = xv.data() + g * blockLen;
    double s = 0;
    for (int64_t i = 0; i < blockLen; ++i) s += p[i];
    double mean = s / static_cast<double>(blockLen);
    double sq = 0;
    for (int64_t i = 0; i < blockLen; ++i) sq += (p[i] - mean) * (p[i] - mean);
    double inv = 1.0 / std::sqrt(sq / static_cast<double>(blockLen) + eps);
    for (int64_t i = 0; i < blockLen; ++i) p[i] = (p[i] - mean) * inv;
    if (means) means->push_back(mean);
    if (invStd) invStd->push_back(inv);
  }
}

void instanceNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  if (x.dims.size() < 2) ctx.fail("InstanceNormalization input must have rank >= 2");
  int64_t n = x.dims[0], c = x.dims[1], sp = dimProduct(x.dims, 2, x.dims.size());
  std::vector<double> xv = toDoubles(ctx, x), scale = toDoubles(ctx, ctx.tensor(1)), bias = toDoubles(ctx, ctx.tensor(2));
  if (static_cast<int64_t>(scale.size()) != c || static_cast<int64_t>(bias.size()) != c)
    ctx.fail(fmt::format("scale and B must have {} elements", c));
  normalizeBlocks(xv, n * c, sp, ctx.attrFloat("epsilon", 1e-5f));
  for (size_t i = 0; i < xv.size(); ++i) {
    auto ch = static_cast<size_t>((static_cast<int64_t>(i) / sp) % c);
    xv[i] = xv[i] * scale[ch] + bias[ch];
  }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
}

/// Applies `scale` (and `bias` when given) broadcast unidirectionally to x's shape.
void scaleShift(const KernelContext& ctx, std::vector<double>& xv, const std::vector<int64_t>& dims, size_t scaleIn, int biasIn) {
  const TensorData& s = ctx.tensor(scaleIn);
  std::vector<double> sv = toDoubles(ctx, s);
  if (broadcastShapes(ctx, {dims, s.dims}) != dims) ctx.fail("Scale cannot be broadcast to the input shape");
  Broadcaster bs(dims, s.dims);
  std::vector<double> bv;
  std::vector<int64_t> bDims;
  bool hasBias = biasIn >= 0 && ctx.hasInput(static_cast<size_t>(biasIn));
  if (hasBias) {
    const TensorData& b = ctx.tensor(static_cast<size_t>(biasIn));
    bv = toDoubles(ctx, b);
    bDims = b.dims;
    if (broadcastShapes(ctx, {dims, b.dims}) != dims) ctx.fail("B cannot be broadcast to the input shape");
  }
  Broadcaster bb(dims, bDims);
  for (size_t i = 0; i < xv.size(); ++i) {
    auto f = static_cast<int64_t>(i);
    xv[i] *= sv[static_cast<size_t>(bs.offset(f))];
    if (hasBias) xv[i] += bv[static_cast<size_t>(bb.offset(f))];
  }
}

void layerNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  auto rank = static_cast<int64_t>(x.dims.size());
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", -1), rank);
  int64_t rows = dimProduct(x.dims, 0, static_cast<size_t>(axis)), cols = dimProduct(x.dims, static_cast<size_t>(axis), x.dims.size());
  std::vector<double> xv = toDoubles(ctx, x), means, invStd;
  normalizeBlocks(xv, rows, cols, ctx.attrFloat("epsilon", 1e-5f), &means, &invStd);
  scaleShift(ctx, xv, x.dims, 1, 2);
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
  std::vector<int64_t> statDims(x.dims.begin(), x.dims.begin() + axis);
  statDims.resize(x.dims.size(), 1);
  // Mean and InvStdDev have the stash type (float for the default stash_type 1), as in the op's
  // function body.
  DType statType = ctx.attrInt("stash_type", 1) == 1 ? DType::Float : x.dtype();
  if (ctx.wantsOutput(1)) ctx.setOutput(1, fromDoubles(ctx, statType, statDims, means));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, fromDoubles(ctx, statType, statDims, invStd));
}

template <bool PerChannel>
void groupNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  if (x.dims.size() < 2) ctx.fail("GroupNormalization input must have rank >= 2");
  int64_t groups = ctx.attrInt("num_groups", 0);
  int64_t n = x.dims[0], c = x.dims[1], sp = dimProduct(x.dims, 2, x.dims.size());
  if (groups <= 0 || c % groups != 0) ctx.fail(fmt::format("num_groups {} must divide the {} channels", groups, c));
  std::vector<double> xv = toDoubles(ctx, x), scale = toDoubles(ctx, ctx.tensor(1)), bias = toDoubles(ctx, ctx.tensor(2));
  int64_t want = PerChannel ? c : groups;
  if (static_cast<int64_t>(scale.size()) != want || static_cast<int64_t>(bias.size()) != want)
    ctx.fail(fmt::format("scale and bias must have {} elements", want));
  normalizeBlocks(xv, n * groups, (c / groups) * sp, ctx.attrFloat("epsilon", 1e-5f));
  for (size_t i = 0; i < xv.size(); ++i) {
    int64_t ch = (static_cast<int64_t>(i) / sp) % c;
    auto p = static_cast<size_t>(PerChannel ? ch : ch / (c / groups));
    xv[i] = xv[i] * scale[p] + bias[p];
  }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
}

void rmsNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  auto rank = static_cast<int64_t>(x.dims.size());
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", -1), rank);
  int64_t rows = dimProduct(x.dims, 0, static_cast<size_t>(axis)), cols = dimProduct(x.dims, static_cast<size_t>(axis), x.dims.size());
  double eps = ctx.attrFloat("epsilon", 1e-5f);
  std::vector<double> xv = toDoubles(ctx, x);
  for (int64_t r = 0; r < rows; ++r) {
    double* p = xv.data() + r * cols;
    double sq = 0;
    for (int64_t i = 0; i < cols; ++i) sq += p[i] * p[i];
    double inv = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t i = 0; i < cols; ++i) p[i] *= inv;
  }
  scaleShift(ctx, xv, x.dims, 1, -1);
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
}

/// SimplifiedLayerNormalization (ONNX Runtime's ai.onnx extension): RMSNormalization over the
/// axes from `axis` on, with the per-row 1/rms as the optional output 1 (of the stash type).
void simplifiedLayerNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  auto rank = static_cast<int64_t>(x.dims.size());
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", -1), rank);
  int64_t rows = dimProduct(x.dims, 0, static_cast<size_t>(axis)), cols = dimProduct(x.dims, static_cast<size_t>(axis), x.dims.size());
  double eps = ctx.attrFloat("epsilon", 1e-5f);
  std::vector<double> xv = toDoubles(ctx, x), invs;
  for (int64_t r = 0; r < rows; ++r) {
    double* p = xv.data() + r * cols;
    double sq = 0;
    for (int64_t i = 0; i < cols; ++i) sq += p[i] * p[i];
    double inv = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t i = 0; i < cols; ++i) p[i] *= inv;
    invs.push_back(inv);
  }
  scaleShift(ctx, xv, x.dims, 1, -1);
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
  std::vector<int64_t> statDims(x.dims.begin(), x.dims.begin() + axis);
  statDims.resize(x.dims.size(), 1);
  if (ctx.wantsOutput(1))
    ctx.setOutput(1, fromDoubles(ctx, ctx.attrInt("stash_type", 1) == 1 ? DType::Float : x.dtype(), statDims, invs));
}

void lrn(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  if (x.dims.size() < 2) ctx.fail("LRN input must have rank >= 2");
  int64_t size = ctx.attrInt("size", 0);
  if (size <= 0) ctx.fail("LRN size must be positive");
  double alpha = ctx.attrFloat("alpha", 1e-4f), beta = ctx.attrFloat("beta", 0.75f), bias = ctx.attrFloat("bias", 1.0f);
  int64_t n = x.dims[0], c = x.dims[1], sp = dimProduct(x.dims, 2, x.dims.size());
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo;  // floor and ceil of (size-1)/2
  std::vector<double> xv = toDoubles(ctx, x), y(xv.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < sp; ++s) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(c - 1, ch + hi); ++k) {
          double v = xv[static_cast<size_t>((b * c + k) * sp + s)];
          sq += v * v;
        }
        auto i = static_cast<size_t>((b * c + ch) * sp + s);
        y[i] = xv[i] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, y));
}

void lpNorm(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  auto rank = static_cast<int64_t>(x.dims.size());
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", -1), rank);
  int64_t p = ctx.attrInt("p", 2);
  if (p != 1 && p != 2) ctx.fail(fmt::format("LpNormalization p must be 1 or 2, got {}", p));
  int64_t outer = dimProduct(x.dims, 0, static_cast<size_t>(axis)), len = x.dims[static_cast<size_t>(axis)];
  int64_t inner = dimProduct(x.dims, static_cast<size_t>(axis) + 1, x.dims.size());
  std::vector<double> xv = toDoubles(ctx, x);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double norm = 0;
      for (int64_t k = 0; k < len; ++k) {
        double v = xv[static_cast<size_t>((o * len + k) * inner + in)];
        norm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2) norm = std::sqrt(norm);
      for (int64_t k = 0; k < len; ++k) {
        double& v = xv[static_cast<size_t>((o * len + k) * inner + in)];
        v = norm == 0 ? 0 : v / norm;  // a zero vector stays zero
      }
    }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
}

/// MeanVarianceNormalization: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over `axes`, as the
/// op's function body computes it.
void mvn(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  auto rank = static_cast<int64_t>(x.dims.size());
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : ctx.attrInts("axes", {0, 2, 3})) reduced[static_cast<size_t>(normalizeAxis(ctx, a, rank))] = true;
  std::vector<int64_t> keptDims = x.dims;
  for (size_t i = 0; i < keptDims.size(); ++i)
    if (reduced[i]) keptDims[i] = 1;
  Broadcaster bk(x.dims, keptDims);
  size_t groups = static_cast<size_t>(numel(keptDims));
  std::vector<double> xv = toDoubles(ctx, x), sum(groups, 0), sq(groups, 0), cnt(groups, 0);
  for (size_t i = 0; i < xv.size(); ++i) {
    auto g = static_cast<size_t>(bk.offset(static_cast<int64_t>(i)));
    sum[g] += xv[i];
    sq[g] += xv[i] * xv[i];
    cnt[g] += 1;
  }
  for (size_t i = 0; i < xv.size(); ++i) {
    auto g = static_cast<size_t>(bk.offset(static_cast<int64_t>(i)));
    double mean = sum[g] / cnt[g];
    double variance = sq[g] / cnt[g] - mean * mean;
    xv[i] = (xv[i] - mean) / (std::sqrt(std::max(variance, 0.0)) + 1e-9);
  }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
}

/// Dropout, every version. Before 12 it is the identity (inference); from 12 it drops elements
/// when training_mode is true. With a `seed`, the mask reproduces numpy's RandomState(seed).uniform
/// (MT19937 with 53-bit doubles), the generator the spec's reference and tests use.
void dropout(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t v = ctx.opsetVersion();
  double ratio = v >= 12 ? (ctx.hasInput(1) ? inputScalar(ctx, 1) : 0.5) : ctx.attrFloat("ratio", 0.5f);
  bool training = v >= 12 && ctx.hasInput(2) && inputScalar(ctx, 2) != 0;
  // Mask type: the data type before opset 10, bool after.
  DType maskType = v >= 10 ? DType::Bool : x.dtype();
  if (!training || ratio == 0) {
    ctx.setOutput(0, x);
    if (ctx.wantsOutput(1)) {
      std::vector<double> ones(static_cast<size_t>(numel(x)), 1.0);
      ctx.setOutput(1, fromDoubles(ctx, maskType, x.dims, ones));
    }
    return;
  }
  requireFloat(ctx, x);
  if (ratio < 0 || ratio >= 1) ctx.fail(fmt::format("Dropout ratio must be in [0, 1), got {}", ratio));
  std::mt19937 seeded(static_cast<uint32_t>(ctx.attrInt("seed", 0)));
  bool hasSeed = ctx.hasAttr("seed");
  auto uniform = [&]() {
    if (hasSeed) {
      uint32_t a = seeded() >> 5, b = seeded() >> 6;
      return (a * 67108864.0 + b) / 9007199254740992.0;
    }
    return std::uniform_real_distribution<double>(0.0, 1.0)(ctx.rng());
  };
  std::vector<double> xv = toDoubles(ctx, x), mask(xv.size());
  double scale = roundTo(x.dtype(), 1.0 / (1.0 - ratio));
  for (size_t i = 0; i < xv.size(); ++i) {
    mask[i] = uniform() >= ratio ? 1.0 : 0.0;
    xv[i] = roundTo(x.dtype(), mask[i] * xv[i]) * scale;
  }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, xv));
  if (ctx.wantsOutput(1)) ctx.setOutput(1, fromDoubles(ctx, DType::Bool, x.dims, mask));
}

// ---------------------------------------------------------------------------------------------
// Attention

/// Reorders a 3-D (B, S, H*D) tensor into 4-D (B, H, S, D) layout; 4-D input is returned as is.
std::vector<double> toHeadMajor(const std::vector<double>& v, bool is3d, int64_t b, int64_t h, int64_t s, int64_t d) {
  if (!is3d) return v;
  std::vector<double> out(v.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t di = 0; di < d; ++di)
          out[static_cast<size_t>(((bi * h + hi) * s + si) * d + di)] = v[static_cast<size_t>(((bi * s + si) * h + hi) * d + di)];
  return out;
}

/// Attention 23/24/25: scaled dot-product attention with GQA, KV cache, boolean or additive
/// masks, offset-aware causal masking, sliding windows (25), softcap and the qk debug output.
/// Intermediates are rounded to the input type where the spec's reference computes in it.
void attention(KernelContext& ctx) {
  const TensorData& q = ctx.tensor(0);
  const TensorData& k = ctx.tensor(1);
  const TensorData& v = ctx.tensor(2);
  requireFloat(ctx, q);
  size_t rank = q.dims.size();
  if ((rank != 3 && rank != 4) || k.dims.size() != rank || v.dims.size() != rank)
    ctx.fail("Attention Q, K and V must all be 3-D or all be 4-D");
  bool is3d = rank == 3;
  int64_t nb = q.dims[0], hq, hkv, sq, skv, dh, dv;
  if (is3d) {
    hq = ctx.attrInt("q_num_heads", 0);
    hkv = ctx.attrInt("kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0) ctx.fail("q_num_heads and kv_num_heads are required for 3-D inputs");
    if (q.dims[2] % hq || k.dims[2] % hkv || v.dims[2] % hkv) ctx.fail("hidden sizes must be divisible by the head counts");
    sq = q.dims[1];
    skv = k.dims[1];
    dh = q.dims[2] / hq;
    dv = v.dims[2] / hkv;
    if (k.dims[2] / hkv != dh) ctx.fail("Q and K head sizes differ");
  } else {
    hq = q.dims[1];
    hkv = k.dims[1];
    sq = q.dims[2];
    skv = k.dims[2];
    dh = q.dims[3];
    dv = v.dims[3];
    if (k.dims[3] != dh) ctx.fail("Q and K head sizes differ");
  }
  if (hkv <= 0 || hq % hkv != 0) ctx.fail(fmt::format("q heads {} must be a multiple of kv heads {}", hq, hkv));
  // K and V are indexed with Q's batch and K's heads and sequence length
  if (k.dims[0] != nb || v.dims[0] != nb)
    ctx.fail(fmt::format("Q, K and V have batch sizes {}, {} and {}, expected equal", nb, k.dims[0], v.dims[0]));
  if (v.dims[is3d ? 1 : 2] != skv || (!is3d && v.dims[1] != hkv))
    ctx.fail(fmt::format("V has dims [{}], expected the heads and sequence length of K [{}]", fmt::join(v.dims, ","),
                         fmt::join(k.dims, ",")));
  int64_t reps = hq / hkv;
  DType dt = q.dtype();
  auto rt = [&](double x) { return roundTo(dt, x); };

  std::vector<double> qv = toHeadMajor(toDoubles(ctx, q), is3d, nb, hq, sq, dh);
  std::vector<double> kv = toHeadMajor(toDoubles(ctx, k), is3d, nb, hkv, skv, dh);
  std::vector<double> vv = toHeadMajor(toDoubles(ctx, v), is3d, nb, hkv, skv, dv);

  // KV cache: present = concat(past, new) along the sequence axis.
  bool hasPast = ctx.hasInput(4);
  if (hasPast != ctx.hasInput(5)) ctx.fail("past_key and past_value must be given together");
  int64_t past = 0;
  if (hasPast) {
    const TensorData& pk = ctx.tensor(4);
    const TensorData& pv = ctx.tensor(5);
    if (pk.dims.size() != 4 || pk.dims[0] != nb || pk.dims[1] != hkv || pk.dims[3] != dh || pv.dims.size() != 4 ||
        pv.dims[2] != pk.dims[2] || pv.dims[3] != dv)
      ctx.fail("past_key/past_value must have shape (B, kv_num_heads, P, head_size)");
    past = pk.dims[2];
    std::vector<double> pkv = toDoubles(ctx, pk), pvv = toDoubles(ctx, pv);
    auto concat = [&](const std::vector<double>& pastV, const std::vector<double>& newV, int64_t d) {
      std::vector<double> out;
      out.reserve(pastV.size() + newV.size());
      for (int64_t bh = 0; bh < nb * hkv; ++bh) {
        out.insert(out.end(), pastV.begin() + bh * past * d, pastV.begin() + (bh + 1) * past * d);
        out.insert(out.end(), newV.begin() + bh * skv * d, newV.begin() + (bh + 1) * skv * d);
      }
      return out;
    };
    kv = concat(pkv, kv, dh);
    vv = concat(pvv, vv, dv);
  }
  int64_t len = past + skv;
  if (ctx.wantsOutput(1)) ctx.setOutput(1, fromDoubles(ctx, k.dtype(), {nb, hkv, len, dh}, kv));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, fromDoubles(ctx, v.dtype(), {nb, hkv, len, dv}, vv));

  std::vector<int64_t> nonpad;
  if (ctx.hasInput(6)) {
    if (hasPast) ctx.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
    nonpad = toInts(ctx, ctx.tensor(6));
    if (static_cast<int64_t>(nonpad.size()) != nb) ctx.fail("nonpad_kv_seqlen must have shape (batch_size)");
  }
  auto offsetOf = [&](int64_t b) { return !nonpad.empty() ? nonpad[static_cast<size_t>(b)] - sq : past; };

  // The mask broadcasts right-aligned against (B, Hq, Sq, len); a shorter last dim is padded
  // with "masked out".
  bool hasMask = ctx.hasInput(3);
  std::vector<double> maskV;
  bool boolMask = false;
  int64_t maskLen = 0;
  std::vector<int64_t> maskStride(4, 0);
  if (hasMask) {
    const TensorData& m = ctx.tensor(3);
    if (m.dims.empty() || m.dims.size() > 4) ctx.fail("attn_mask must have rank 1 to 4");
    boolMask = m.dtype() == DType::Bool;
    maskV = toDoubles(ctx, m);
    maskLen = m.dims.back();
    std::vector<int64_t> st = stridesOf(m.dims);
    int64_t full[4] = {nb, hq, sq, len};
    size_t off = 4 - m.dims.size();
    for (size_t i = 0; i < m.dims.size(); ++i) {
      if (m.dims[i] != 1 && (i + 1 < m.dims.size() ? m.dims[i] != full[off + i] : m.dims[i] > len))
        ctx.fail("attn_mask cannot be broadcast to (batch, heads, q_sequence_length, total_sequence_length)");
      if (m.dims[i] != 1) maskStride[off + i] = st[i];
    }
  }
  bool causal = ctx.attrInt("is_causal", 0) != 0;
  int64_t leftWin = ctx.attrInt("left_window_size", -1), rightWin = ctx.attrInt("right_window_size", -1);
  double softcap = ctx.attrFloat("softcap", 0.0f);
  int64_t mode = ctx.attrInt("qk_matmul_output_mode", 0);
  double scale = ctx.hasAttr("scale") ? ctx.attrFloat("scale", 1.0f) : 1.0 / std::sqrt(static_cast<double>(dh));
  double sqrtScale = rt(std::sqrt(scale));
  DType softmaxType = ctx.hasAttr("softmax_precision") ? static_cast<DType>(ctx.attrInt("softmax_precision", 1)) : dt;

  auto bias = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    double m = 0;
    if (hasMask) {
      if (j >= maskLen) {
        m = -kInf;
      } else {
        double raw = maskV[static_cast<size_t>(b * maskStride[0] + h * maskStride[1] + i * maskStride[2] + j * maskStride[3])];
        m = boolMask ? (raw != 0 ? 0.0 : -kInf) : raw;
      }
    }
    int64_t pos = i + offsetOf(b);
    if (causal && j > pos) m += -kInf;
    if (leftWin >= 0 && pos - j > leftWin) m += -kInf;
    if (rightWin >= 0 && j - pos > rightWin) m += -kInf;
    if (!nonpad.empty() && j >= nonpad[static_cast<size_t>(b)]) m += -kInf;
    return rt(m);
  };

  std::vector<double> y(static_cast<size_t>(nb * hq * sq * dv), 0.0), qkOut(static_cast<size_t>(nb * hq * sq * len));
  std::vector<double> logits(static_cast<size_t>(len)), biasRow(static_cast<size_t>(len)), p(static_cast<size_t>(len));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      int64_t hk = h / reps;
      const double* kb = kv.data() + (b * hkv + hk) * len * dh;
      const double* vb = vv.data() + (b * hkv + hk) * len * dv;
      for (int64_t i = 0; i < sq; ++i) {
        const double* qr = qv.data() + ((b * hq + h) * sq + i) * dh;
        double* qo = qkOut.data() + ((b * hq + h) * sq + i) * len;
        double maxBias = -kInf;
        for (int64_t j = 0; j < len; ++j) {
          double s = 0;
          for (int64_t d = 0; d < dh; ++d) s += rt(qr[d] * sqrtScale) * rt(kb[j * dh + d] * sqrtScale);
          s = rt(s);
          if (softcap > 0) s = rt(softcap * std::tanh(s / softcap));
          // Modes 0 and 1 both expose the logits after softcap, as the reference does.
          qo[j] = s;
          biasRow[static_cast<size_t>(j)] = bias(b, h, i, j);
          maxBias = std::max(maxBias, biasRow[static_cast<size_t>(j)]);
          logits[static_cast<size_t>(j)] = rt(s + biasRow[static_cast<size_t>(j)]);
          if (mode == 2) qo[j] = logits[static_cast<size_t>(j)];
        }
        // Softmax; a row of all -inf gives zeros rather than NaN.
        double mx = -kInf;
        bool nan = false;
        for (double l : logits) {
          if (std::isnan(l)) nan = true;
          mx = std::max(mx, l);
        }
        if (nan) mx = kNaN;
        // Rounded like numpy computes in the softmax type: float16 sums accumulate in float,
        // bfloat16 (ml_dtypes) sums round after every addition.
        auto rs = [&](double x) { return roundTo(softmaxType, x); };
        double safe = mx == -kInf ? 0.0 : mx, sum = 0;
        for (size_t j = 0; j < p.size(); ++j) {
          p[j] = rs(std::exp(rs(rs(logits[j]) - safe)));
          sum = softmaxType == DType::BFloat16 ? rs(sum + p[j]) : sum + p[j];
        }
        sum = rs(sum);
        if (sum == 0) sum = 1;
        bool fullyMasked = len == 0 || maxBias == -kInf;
        for (size_t j = 0; j < p.size(); ++j) p[j] = fullyMasked ? 0.0 : rt(rs(p[j] / sum));
        if (mode == 3)
          for (int64_t j = 0; j < len; ++j) qo[j] = p[static_cast<size_t>(j)];
        double* yr = y.data() + ((b * hq + h) * sq + i) * dv;
        for (int64_t j = 0; j < len; ++j)
          for (int64_t d = 0; d < dv; ++d) yr[d] += p[static_cast<size_t>(j)] * vb[j * dv + d];
      }
    }
  if (is3d) {
    // (B, Hq, Sq, Dv) -> (B, Sq, Hq*Dv)
    std::vector<double> y3(y.size());
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t d = 0; d < dv; ++d)
            y3[static_cast<size_t>(((b * sq + i) * hq + h) * dv + d)] = y[static_cast<size_t>(((b * hq + h) * sq + i) * dv + d)];
    ctx.setOutput(0, fromDoubles(ctx, dt, {nb, sq, hq * dv}, y3));
  } else {
    ctx.setOutput(0, fromDoubles(ctx, dt, {nb, hq, sq, dv}, y));
  }
  if (ctx.wantsOutput(3)) ctx.setOutput(3, fromDoubles(ctx, dt, {nb, hq, sq, len}, qkOut));
}

/// RotaryEmbedding 23: X is (B, H, S, D) or (B, S, H*D) with num_heads; caches are indexed by
/// position_ids (B, S) when given, else are (B, S, rotary_dim/2).
void rotaryEmbedding(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  requireFloat(ctx, x);
  bool is3d = x.dims.size() == 3;
  if (!is3d && x.dims.size() != 4) ctx.fail("RotaryEmbedding input must be 3-D or 4-D");
  int64_t nb = x.dims[0], heads, seq, dh;
  if (is3d) {
    heads = ctx.attrInt("num_heads", 0);
    if (heads <= 0 || x.dims[2] % heads) ctx.fail("num_heads is required for 3-D input and must divide the hidden size");
    seq = x.dims[1];
    dh = x.dims[2] / heads;
  } else {
    heads = x.dims[1];
    seq = x.dims[2];
    dh = x.dims[3];
  }
  int64_t rd = ctx.attrInt("rotary_embedding_dim", 0);
  if (rd == 0) rd = dh;
  if (rd > dh || rd % 2) ctx.fail(fmt::format("rotary_embedding_dim {} must be even and at most the head size {}", rd, dh));
  int64_t half = rd / 2;
  bool interleaved = ctx.attrInt("interleaved", 0) != 0;
  const TensorData& cosT = ctx.tensor(1);
  const TensorData& sinT = ctx.tensor(2);
  if (cosT.dims.empty() || cosT.dims.back() != half || sinT.dims != cosT.dims)
    ctx.fail(fmt::format("cos_cache and sin_cache must have last dimension rotary_embedding_dim/2 = {}", half));
  std::vector<double> cosV = toDoubles(ctx, cosT), sinV = toDoubles(ctx, sinT), xv = toDoubles(ctx, x), y = xv;
  std::vector<int64_t> pos;
  if (ctx.hasInput(3)) {
    pos = toInts(ctx, ctx.tensor(3));
    if (static_cast<int64_t>(pos.size()) != nb * seq) ctx.fail("position_ids must have shape (batch_size, sequence_length)");
  } else if (numel(cosT) != nb * seq * half) {
    ctx.fail("without position_ids the caches must have shape (batch_size, sequence_length, rotary_embedding_dim/2)");
  }
  int64_t cacheRows = numel(cosT) / half;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      int64_t row = pos.empty() ? b * seq + s : pos[static_cast<size_t>(b * seq + s)];
      if (row < 0 || row >= cacheRows) ctx.fail(fmt::format("position id {} is out of range of the caches", row));
      const double* c = cosV.data() + row * half;
      const double* sn = sinV.data() + row * half;
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = is3d ? (b * seq + s) * heads * dh + h * dh : ((b * heads + h) * seq + s) * dh;
        for (int64_t i = 0; i < half; ++i) {
          int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          double x1 = xv[static_cast<size_t>(base + i1)], x2 = xv[static_cast<size_t>(base + i2)];
          y[static_cast<size_t>(base + i1)] = c[i] * x1 - sn[i] * x2;
          y[static_cast<size_t>(base + i2)] = sn[i] * x1 + c[i] * x2;
        }
      }
    }
  ctx.setOutput(0, fromDoubles(ctx, x.dtype(), x.dims, y));
}

/// LinearAttention 27: the recurrent form, token by token, of the linear / gated / delta /
/// gated_delta update rules; state (B, H_kv, d_k, d_v) shared by q_num_heads/kv_num_heads heads.
void linearAttention(KernelContext& ctx) {
  const TensorData& q = ctx.tensor(0);
  const TensorData& k = ctx.tensor(1);
  const TensorData& v = ctx.tensor(2);
  requireFloat(ctx, q);
  if (q.dims.size() != 3 || k.dims.size() != 3 || v.dims.size() != 3) ctx.fail("query, key and value must be 3-D (B, T, H*D)");
  std::string rule = ctx.attrString("update_rule", "gated_delta");
  bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (!gated && !delta && rule != "linear") ctx.fail(fmt::format("unknown update_rule '{}'", rule));
  int64_t hq = ctx.attrInt("q_num_heads", 0), hkv = ctx.attrInt("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv) ctx.fail("q_num_heads must be a positive multiple of kv_num_heads");
  if (gated != ctx.hasInput(4)) ctx.fail(fmt::format("update_rule '{}' {} the decay input", rule, gated ? "requires" : "forbids"));
  if (delta != ctx.hasInput(5)) ctx.fail(fmt::format("update_rule '{}' {} the beta input", rule, delta ? "requires" : "forbids"));
  int64_t nb = q.dims[0], nt = q.dims[1];
  if (q.dims[2] % hq || k.dims[2] % hkv || v.dims[2] % hkv) ctx.fail("hidden sizes must be divisible by the head counts");
  int64_t dk = q.dims[2] / hq, dv = v.dims[2] / hkv, group = hq / hkv;
  if (k.dims[2] / hkv != dk) ctx.fail("query and key head sizes differ");
  std::vector<double> qv = toHeadMajor(toDoubles(ctx, q), true, nb, hq, nt, dk);
  std::vector<double> kv = toHeadMajor(toDoubles(ctx, k), true, nb, hkv, nt, dk);
  std::vector<double> vv = toHeadMajor(toDoubles(ctx, v), true, nb, hkv, nt, dv);
  std::vector<double> decay, beta;
  int64_t decayLast = 0, betaLast = 0;
  if (gated) {
    const TensorData& g = ctx.tensor(4);
    decayLast = g.dims.size() == 3 ? g.dims[2] : -1;
    if (decayLast != hkv && decayLast != hkv * dk) ctx.fail("decay must have shape (B, T, kv_num_heads) or (B, T, kv_num_heads*d_k)");
    decay = toDoubles(ctx, g);
  }
  if (delta) {
    const TensorData& bt = ctx.tensor(5);
    betaLast = bt.dims.size() == 3 ? bt.dims[2] : -1;
    if (betaLast != hkv && betaLast != 1) ctx.fail("beta must have shape (B, T, kv_num_heads) or (B, T, 1)");
    beta = toDoubles(ctx, bt);
  }
  std::vector<int64_t> stateDims{nb, hkv, dk, dv};
  std::vector<double> state(static_cast<size_t>(numel(stateDims)), 0.0);
  DType stateType = q.dtype();
  if (ctx.hasInput(3)) {
    const TensorData& ps = ctx.tensor(3);
    if (ps.dims != stateDims) ctx.fail("past_state must have shape (B, kv_num_heads, d_k, d_v)");
    state = toDoubles(ctx, ps);
    stateType = ps.dtype();
  }
  double scale = ctx.attrFloat("scale", 0.0f);
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> out(static_cast<size_t>(nb * nt * hq * dv), 0.0), retrieved(static_cast<size_t>(dv)), vt(static_cast<size_t>(dv));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < nt; ++t) {
      for (int64_t h = 0; h < hkv; ++h) {
        double* S = state.data() + (b * hkv + h) * dk * dv;
        const double* kt = kv.data() + ((b * hkv + h) * nt + t) * dk;
        const double* vin = vv.data() + ((b * hkv + h) * nt + t) * dv;
        if (gated)
          for (int64_t i = 0; i < dk; ++i) {
            double g = decayLast == hkv ? decay[static_cast<size_t>((b * nt + t) * hkv + h)]
                                        : decay[static_cast<size_t>((b * nt + t) * hkv * dk + h * dk + i)];
            for (int64_t j = 0; j < dv; ++j) S[i * dv + j] *= std::exp(g);
          }
        for (int64_t j = 0; j < dv; ++j) vt[static_cast<size_t>(j)] = vin[j];
        if (delta) {
          double bt = beta[static_cast<size_t>((b * nt + t) * betaLast + (betaLast == 1 ? 0 : h))];
          for (int64_t j = 0; j < dv; ++j) {
            double r = 0;
            for (int64_t i = 0; i < dk; ++i) r += S[i * dv + j] * kt[i];
            vt[static_cast<size_t>(j)] = bt * (vin[j] - r);
          }
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += kt[i] * vt[static_cast<size_t>(j)];
      }
      for (int64_t h = 0; h < hq; ++h) {
        const double* S = state.data() + (b * hkv + h / group) * dk * dv;
        const double* qt = qv.data() + ((b * hq + h) * nt + t) * dk;
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += qt[i] * S[i * dv + j];
          out[static_cast<size_t>(((b * nt + t) * hq + h) * dv + j)] = scale * o;
        }
      }
    }
  ctx.setOutput(0, fromDoubles(ctx, q.dtype(), {nb, nt, hq * dv}, out));
  if (ctx.wantsOutput(1)) ctx.setOutput(1, fromDoubles(ctx, stateType, stateDims, state));
}

}  // namespace

void registerNnOps() {
  addRef("", "MatMul", 1, "ref.matmul", matMul);
  addRef("", "MatMulInteger", 10, "ref.matmul_integer", matMulInteger);
  addRef("", "QLinearMatMul", 10, "ref.qlinear_matmul", qLinearMatMul);
  addRef("", "Gemm", 1, "ref.gemm", gemm);
  addRef("", "Einsum", 12, "ref.einsum", einsum);
  addRef("", "Det", 11, "ref.det", det);
  addRef("", "BatchNormalization", 1, "ref.batch_normalization", batchNorm);
  addRef("", "InstanceNormalization", 1, "ref.instance_normalization", instanceNorm);
  addRef("", "LayerNormalization", 1, "ref.layer_normalization", layerNorm);  // 1: ONNX Runtime's extension
  addRef("", "SimplifiedLayerNormalization", 1, "ref.simplified_layer_normalization", simplifiedLayerNorm);
  addRef("", "GroupNormalization", 18, "ref.group_normalization.per_group", groupNorm<false>);
  addRef("", "GroupNormalization", 21, "ref.group_normalization", groupNorm<true>);
  addRef("", "RMSNormalization", 23, "ref.rms_normalization", rmsNorm);
  addRef("", "LRN", 1, "ref.lrn", lrn);
  addRef("", "LpNormalization", 1, "ref.lp_normalization", lpNorm);
  addRef("", "MeanVarianceNormalization", 9, "ref.mean_variance_normalization", mvn);
  addRef("", "Dropout", 1, "ref.dropout", dropout);
  addRef("", "Attention", 23, "ref.attention", attention);
  addRef("", "RotaryEmbedding", 23, "ref.rotary_embedding", rotaryEmbedding);
  addRef("", "LinearAttention", 27, "ref.linear_attention", linearAttention);
  registerReduceOps();
}

}  // namespace onnxtool::ref
