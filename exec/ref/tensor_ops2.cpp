// tensor_ops2.cpp: reference kernels of the data-movement family that look at element values:
// ArgMax/ArgMin, TopK, Unique, NonZero, OneHot, CumSum/CumProd, and the scatters (Scatter,
// ScatterElements, ScatterND with their reductions, TensorScatter). Registered from
// registerTensorOps() in tensor_ops.cpp.
//
// Ordering follows numpy, which the ONNX reference implementation uses: NaN sorts above every
// number, ties keep the lower index first.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

// Element movement helpers defined in tensor_ops.cpp (the family owns no header).
namespace moves {
/// Bits per element (0 for strings); fails for types that cannot be moved element-wise.
int movableBits(const KernelContext& ctx, DType t);
/// Copies n consecutive elements src[si..] to dst[di..]; bits from movableBits.
void copyRun(const TensorData& src, int64_t si, Tensor& dst, int64_t di, int64_t n, int bits);
/// out[i] = src[map[i]], or fill[0] (zero when null) where map[i] < 0.
Tensor takeFlat(const KernelContext& ctx, const TensorData& src, std::vector<int64_t> dims, const std::vector<int64_t>& map,
                const TensorData* fill);
/// A fresh, writable copy of t.
Tensor cloneTensor(const TensorData& t);
}  // namespace moves

namespace {

using moves::cloneTensor;
using moves::copyRun;
using moves::movableBits;
using moves::takeFlat;

int64_t product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < dims.size(); ++i) p *= dims[i];
  return p;
}

template <typename T>
bool isNan(T v) {
  if constexpr (isFloatLike<T>) return std::isnan(static_cast<double>(v));
  else return false;
}

/// numpy's sort order: a < b with NaN above everything (NaNs equal to each other).
template <typename T>
bool lessNanLast(T a, T b) {
  if constexpr (isFloatLike<T>) {
    double x = static_cast<double>(a), y = static_cast<double>(b);
    if (std::isnan(x)) return false;
    if (std::isnan(y)) return true;
    return x < y;
  } else {
    return a < b;
  }
}

/// Calls f(T{}) for the types TopK/ArgMax/CumSum & co. compute on (numeric, no bool).
template <typename F>
void dispatchOrdered(const KernelContext& ctx, DType t, F&& f) {
  if (t == DType::Bool) ctx.fail("bool input is not supported, expected a numeric type");
  dispatchNumeric(ctx, t, f);
}

// ---------------------------------------------------------------------------------------------
// ArgMax, ArgMin

template <bool Max>
void argExtreme(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t r = static_cast<int64_t>(x.dims.size());
  size_t ax = static_cast<size_t>(axisIn(ctx, ctx.attrInt("axis", 0), r));
  bool keepDims = ctx.attrInt("keepdims", 1) != 0;
  bool last = ctx.attrInt("select_last_index", 0) != 0;
  int64_t dim = x.dims[ax];
  if (dim == 0) ctx.fail(fmt::format("axis {} has no elements, expected at least one", ax));
  std::vector<int64_t> dims = x.dims;
  if (keepDims) dims[ax] = 1;
  else dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(ax));
  Tensor out = makeTensor(DType::Int64, dims);
  int64_t* po = mutableData<int64_t>(out);
  int64_t outer = product(x.dims, 0, ax), inner = product(x.dims, ax + 1, x.dims.size());
  dispatchOrdered(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = data<T>(x);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        const T* row = px + o * dim * inner + in;
        int64_t best = 0;
        for (int64_t j = 1; j < dim; ++j) {
          T v = row[j * inner], b = row[best * inner];
          // NaN wins (numpy argmax/argmin both return the first NaN).
          bool better;
          if (isNan(b)) better = last && isNan(v);
          else if (isNan(v)) better = true;
          else if (Max) better = lessNanLast(b, v) || (last && !lessNanLast(v, b));
          else better = lessNanLast(v, b) || (last && !lessNanLast(b, v));
          if (better) best = j;
        }
        po[o * inner + in] = best;
      }
  });
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// TopK

void topKWith(KernelContext& ctx, int64_t k) {
  const TensorData& x = ctx.tensor(0);
  int64_t r = static_cast<int64_t>(x.dims.size());
  size_t ax = static_cast<size_t>(axisIn(ctx, ctx.attrInt("axis", -1), r));
  bool largest = ctx.attrInt("largest", 1) != 0;
  int64_t dim = x.dims[ax];
  if (k < 0 || k > dim) ctx.fail(fmt::format("k is {}, expected 0 <= k <= {} (the axis size)", k, dim));
  std::vector<int64_t> dims = x.dims;
  dims[ax] = k;
  Tensor values = makeTensor(x.dtype(), dims), indices = makeTensor(DType::Int64, dims);
  int64_t* pi = mutableData<int64_t>(indices);
  int64_t outer = product(x.dims, 0, ax), inner = product(x.dims, ax + 1, x.dims.size());
  dispatchOrdered(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = data<T>(x);
    T* pv = mutableData<T>(values);
    std::vector<int64_t> order(static_cast<size_t>(dim));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        const T* row = px + o * dim * inner + in;
        std::iota(order.begin(), order.end(), 0);
        // Stable sort keeps ties in index order for both directions (the reference's lexsort).
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? lessNanLast(row[b * inner], row[a * inner]) : lessNanLast(row[a * inner], row[b * inner]);
        });
        for (int64_t j = 0; j < k; ++j) {
          int64_t dst = (o * k + j) * inner + in;
          pv[dst] = row[order[static_cast<size_t>(j)] * inner];
          pi[dst] = order[static_cast<size_t>(j)];
        }
      }
  });
  ctx.setOutput(0, std::move(values));
  ctx.setOutput(1, std::move(indices));
}

void topK1(KernelContext& ctx) { topKWith(ctx, ctx.attrInt("k", -1)); }

void topK10(KernelContext& ctx) {
  std::vector<int64_t> k = inputInts(ctx, 1);
  if (k.size() != 1) ctx.fail(fmt::format("K has {} elements, expected 1", k.size()));
  topKWith(ctx, k[0]);
}

// ---------------------------------------------------------------------------------------------
// Unique

/// Three-way comparison of elements i and j of t (numpy order; NaNs equal, above numbers).
int compareElems(const KernelContext& ctx, const TensorData& t, int64_t i, int64_t j) {
  if (t.dtype() == DType::String) {
    int c = t.strings[static_cast<size_t>(i)].compare(t.strings[static_cast<size_t>(j)]);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  int result = 0;
  dispatchNumeric(ctx, t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data<T>(t);
    result = lessNanLast(p[i], p[j]) ? -1 : lessNanLast(p[j], p[i]) ? 1 : 0;
  });
  return result;
}

void unique(KernelContext& ctx) {
  const TensorData& x0 = ctx.tensor(0);
  bool hasAxis = ctx.hasAttr("axis");
  Tensor x = reshaped(x0, hasAxis ? x0.dims : std::vector<int64_t>{numel(x0)});
  size_t ax = static_cast<size_t>(hasAxis ? axisIn(ctx, ctx.attrInt("axis", 0), int64_t(x.dims.size())) : 0);
  bool sorted = ctx.attrInt("sorted", 1) != 0;
  int64_t outer = product(x.dims, 0, ax), dim = x.dims[ax], inner = product(x.dims, ax + 1, x.dims.size());
  // Slice s along the axis, compared lexicographically in row-major order of its elements.
  auto compareSlices = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        int c = compareElems(ctx, x, (o * dim + a) * inner + in, (o * dim + b) * inner + in);
        if (c) return c;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(dim));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return compareSlices(a, b) < 0; });
  // Groups of equal slices in sorted order; the first of each group is its first occurrence.
  std::vector<int64_t> firstIdx, counts, groupOf(static_cast<size_t>(dim));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || compareSlices(order[i - 1], order[i]) != 0) {
      firstIdx.push_back(order[i]);
      counts.push_back(0);
    }
    ++counts.back();
    groupOf[static_cast<size_t>(order[i])] = static_cast<int64_t>(firstIdx.size()) - 1;
  }
  size_t nu = firstIdx.size();
  std::vector<int64_t> rank(nu);  // output position of each group
  std::vector<int64_t> groups(nu);
  std::iota(groups.begin(), groups.end(), 0);
  if (!sorted)
    std::sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) {
      return firstIdx[static_cast<size_t>(a)] < firstIdx[static_cast<size_t>(b)];
    });
  for (size_t p = 0; p < nu; ++p) rank[static_cast<size_t>(groups[p])] = static_cast<int64_t>(p);
  std::vector<int64_t> indices(nu), countsOut(nu), inverse(static_cast<size_t>(dim));
  for (size_t g = 0; g < nu; ++g) {
    indices[static_cast<size_t>(rank[g])] = firstIdx[g];
    countsOut[static_cast<size_t>(rank[g])] = counts[g];
  }
  for (int64_t s = 0; s < dim; ++s) inverse[static_cast<size_t>(s)] = rank[static_cast<size_t>(groupOf[static_cast<size_t>(s)])];
  std::vector<int64_t> dims = x.dims;
  dims[ax] = static_cast<int64_t>(nu);
  std::vector<int64_t> map;
  map.reserve(static_cast<size_t>(numel(dims)));
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < nu; ++p)
      for (int64_t in = 0; in < inner; ++in) map.push_back((o * dim + indices[p]) * inner + in);
  ctx.setOutput(0, takeFlat(ctx, x, dims, map, nullptr));
  int64_t n = static_cast<int64_t>(nu);
  if (ctx.wantsOutput(1)) ctx.setOutput(1, Tensor::fromInt64s("", {n}, indices));
  if (ctx.wantsOutput(2)) ctx.setOutput(2, Tensor::fromInt64s("", {dim}, inverse));
  if (ctx.wantsOutput(3)) ctx.setOutput(3, Tensor::fromInt64s("", {n}, countsOut));
}

// ---------------------------------------------------------------------------------------------
// NonZero, OneHot

void nonZero(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t n = numel(x);
  std::vector<bool> nz(static_cast<size_t>(n));
  if (x.dtype() == DType::String) {
    for (int64_t i = 0; i < n; ++i) nz[static_cast<size_t>(i)] = !x.strings[static_cast<size_t>(i)].empty();
  } else if (x.dtype() == DType::Complex64 || x.dtype() == DType::Complex128) {
    bool c64 = x.dtype() == DType::Complex64;
    for (int64_t i = 0; i < n; ++i) {
      bool any = false;
      for (int part = 0; part < 2; ++part)
        any |= c64 ? data<float>(x)[2 * i + part] != 0.0f : data<double>(x)[2 * i + part] != 0.0;
      nz[static_cast<size_t>(i)] = any;
    }
  } else {
    dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* p = data<T>(x);
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (isFloatLike<T>) nz[static_cast<size_t>(i)] = static_cast<float>(p[i]) != 0.0f;
        else nz[static_cast<size_t>(i)] = p[i] != T(0);
      }
    });
  }
  int64_t count = std::count(nz.begin(), nz.end(), true);
  // A scalar has no coordinates: the result has shape [0, count] (the reference's choice).
  int64_t r = static_cast<int64_t>(x.dims.size());
  Tensor out = makeTensor(DType::Int64, {r, count});
  int64_t* po = mutableData<int64_t>(out);
  std::vector<int64_t> strides = stridesOf(x.dims);
  int64_t col = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!nz[static_cast<size_t>(i)]) continue;
    int64_t rest = i;
    for (int64_t d = 0; d < r; ++d) {
      po[d * count + col] = rest / strides[static_cast<size_t>(d)];
      rest %= strides[static_cast<size_t>(d)];
    }
    ++col;
  }
  ctx.setOutput(0, std::move(out));
}

void oneHot(KernelContext& ctx) {
  const TensorData& ind = ctx.tensor(0);
  const TensorData& values = ctx.tensor(2);
  if (numel(ctx.tensor(1)) != 1) ctx.fail("depth has several elements, expected a scalar");
  if (numel(values) != 2) ctx.fail(fmt::format("values has {} elements, expected 2 (off, on)", numel(values)));
  double depthD = ctx.tensor(1).elementAsDouble(0);
  if (!(depthD >= 1)) ctx.fail(fmt::format("depth is {}, expected a positive value", depthD));
  int64_t depth = static_cast<int64_t>(depthD);
  int64_t r = static_cast<int64_t>(ind.dims.size());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < -(r + 1) || axis > r) ctx.fail(fmt::format("axis {} is out of range for output rank {}", axis, r + 1));
  if (axis < 0) axis += r + 1;
  size_t ax = static_cast<size_t>(axis);
  bool wrapNegative = ctx.opsetVersion() >= 11;  // OneHot-9 leaves negative indices all off
  std::vector<int64_t> dims = ind.dims;
  dims.insert(dims.begin() + axis, depth);
  int64_t outer = product(ind.dims, 0, ax), inner = product(ind.dims, ax, ind.dims.size());
  std::vector<int64_t> map(static_cast<size_t>(numel(dims)), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double v = ind.elementAsDouble(static_cast<size_t>(o * inner + in));
      int64_t k = static_cast<int64_t>(v);  // float indices truncate toward zero
      if (k < 0 && wrapNegative) k += depth;
      if (k >= 0 && k < depth) map[static_cast<size_t>((o * depth + k) * inner + in)] = 1;
    }
  ctx.setOutput(0, takeFlat(ctx, values, dims, map, nullptr));
}

// ---------------------------------------------------------------------------------------------
// CumSum, CumProd

template <bool Product>
void cumulative(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& axisT = ctx.tensor(1);
  if (numel(axisT) != 1) ctx.fail("axis has several elements, expected a scalar");
  int64_t r = static_cast<int64_t>(x.dims.size());
  size_t ax = static_cast<size_t>(normalizeAxis(ctx, inputInts(ctx, 1)[0], r));
  bool exclusive = ctx.attrInt("exclusive", 0) != 0, reverse = ctx.attrInt("reverse", 0) != 0;
  Tensor out = makeTensor(x.dtype(), x.dims);
  int64_t dim = r ? x.dims[ax] : 1;
  int64_t outer = product(x.dims, 0, ax), inner = r ? product(x.dims, ax + 1, x.dims.size()) : 1;
  dispatchOrdered(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    // Integers wrap (unsigned arithmetic); float16/bfloat16 round after every step, as numpy does.
    auto step = [](T acc, T v) -> T {
      if constexpr (std::is_same_v<T, bool>) {
        return Product ? (acc && v) : (acc || v);  // unreachable: dispatchOrdered refuses bool
      } else if constexpr (isFloatLike<T>) {
        if constexpr (std::is_same_v<T, double>) return Product ? acc * v : acc + v;
        else return T(Product ? static_cast<float>(acc) * static_cast<float>(v) : static_cast<float>(acc) + static_cast<float>(v));
      } else {
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(Product ? static_cast<U>(static_cast<U>(acc) * static_cast<U>(v))
                                      : static_cast<U>(static_cast<U>(acc) + static_cast<U>(v)));
      }
    };
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        T acc = static_cast<T>(Product ? 1.0f : 0.0f);
        for (int64_t j = 0; j < dim; ++j) {
          int64_t pos = reverse ? dim - 1 - j : j;
          int64_t off = (o * dim + pos) * inner + in;
          if (exclusive) {
            po[off] = acc;
            acc = step(acc, px[off]);
          } else {
            acc = step(acc, px[off]);
            po[off] = acc;
          }
        }
      }
  });
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Scatter, ScatterElements, ScatterND, TensorScatter

enum class Reduction { None, Add, Mul, Max, Min };

Reduction reductionOf(const KernelContext& ctx) {
  std::string r = ctx.attrString("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  ctx.fail(fmt::format("reduction is '{}', expected none, add, mul, max or min", r));
}

template <typename T>
T reduce(Reduction red, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    // numpy on bool: add is or, multiply is and; max/min likewise.
    return (red == Reduction::Add || red == Reduction::Max) ? (a || b) : (a && b);
  } else if constexpr (isFloatLike<T>) {
    double x = static_cast<double>(a), y = static_cast<double>(b), r = y;
    switch (red) {
      case Reduction::Add: r = x + y; break;
      case Reduction::Mul: r = x * y; break;
      case Reduction::Max: r = (std::isnan(x) || std::isnan(y)) ? std::nan("") : std::max(x, y); break;
      case Reduction::Min: r = (std::isnan(x) || std::isnan(y)) ? std::nan("") : std::min(x, y); break;
      case Reduction::None: break;
    }
    // Computed in double and rounded once: exact for float32 add/mul of float32 operands.
    if constexpr (std::is_same_v<T, double>) return r;
    else return T(static_cast<float>(r));
  } else {
    using U = std::make_unsigned_t<T>;
    switch (red) {
      case Reduction::Add: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case Reduction::Mul: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case Reduction::Max: return std::max(a, b);
      case Reduction::Min: return std::min(a, b);
      case Reduction::None: break;
    }
    return b;
  }
}

/// Writes updates[ui..ui+n) into out[oi..oi+n), combining with `red`.
void scatterRun(const KernelContext& ctx, Reduction red, const TensorData& updates, int64_t ui, Tensor& out, int64_t oi,
                int64_t n, int bits) {
  if (red == Reduction::None) return copyRun(updates, ui, out, oi, n, bits);
  dispatchNumeric(ctx, out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pu = data<T>(updates);
    T* po = mutableData<T>(out);
    for (int64_t i = 0; i < n; ++i) po[oi + i] = reduce<T>(red, po[oi + i], pu[ui + i]);
  });
}

void scatterElementsWith(KernelContext& ctx, Reduction red) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& indT = ctx.tensor(1);
  const TensorData& upd = ctx.tensor(2);
  std::vector<int64_t> ind = inputInts(ctx, 1);
  size_t r = x.dims.size();
  size_t ax = static_cast<size_t>(axisIn(ctx, ctx.attrInt("axis", 0), static_cast<int64_t>(r)));
  if (upd.dtype() != x.dtype()) ctx.fail("updates differ in type from data, expected the same type");
  if (indT.dims != upd.dims) ctx.fail("indices and updates differ in shape, expected the same shape");
  if (indT.dims.size() != r) ctx.fail(fmt::format("indices have rank {}, expected the data rank {}", indT.dims.size(), r));
  for (size_t d = 0; d < r; ++d)
    if (d != ax && indT.dims[d] > x.dims[d])
      ctx.fail(fmt::format("indices dimension {} is {}, expected at most the data's {}", d, indT.dims[d], x.dims[d]));
  int bits = movableBits(ctx, x.dtype());
  if (red != Reduction::None && (bits == 0 || x.dtype() == DType::Complex64 || x.dtype() == DType::Complex128))
    ctx.fail(fmt::format("reduction on {} is not supported, expected a numeric type", dtypeName(x.dtype())));
  Tensor out = cloneTensor(x);
  std::vector<int64_t> strides = stridesOf(x.dims), idx(r, 0);
  int64_t n = numel(indT);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) {
      int64_t c = idx[d];
      if (d == ax) {
        c = ind[static_cast<size_t>(flat)];
        if (c < -x.dims[d] || c >= x.dims[d])
          ctx.fail(fmt::format("index {} is out of range, expected [{}, {})", c, -x.dims[d], x.dims[d]));
        if (c < 0) c += x.dims[d];
      }
      off += c * strides[d];
    }
    scatterRun(ctx, red, upd, flat, out, off, 1, bits);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < indT.dims[d]) break;
      idx[d] = 0;
    }
  }
  ctx.setOutput(0, std::move(out));
}

void scatterElements(KernelContext& ctx) { scatterElementsWith(ctx, reductionOf(ctx)); }
void scatterElementsNoReduction(KernelContext& ctx) { scatterElementsWith(ctx, Reduction::None); }

void scatterND(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& indT = ctx.tensor(1);
  const TensorData& upd = ctx.tensor(2);
  Reduction red = reductionOf(ctx);  // absent before opset 16: "none"
  std::vector<int64_t> ind = inputInts(ctx, 1);
  if (upd.dtype() != x.dtype()) ctx.fail("updates differ in type from data, expected the same type");
  if (indT.dims.empty()) ctx.fail("indices is a scalar, expected rank >= 1");
  int64_t k = indT.dims.back();
  int64_t r = static_cast<int64_t>(x.dims.size());
  if (k < 1 || k > r) ctx.fail(fmt::format("indices' last dimension {} is out of range, expected 1..{}", k, r));
  std::vector<int64_t> expectDims(indT.dims.begin(), indT.dims.end() - 1);
  expectDims.insert(expectDims.end(), x.dims.begin() + k, x.dims.end());
  if (upd.dims != expectDims) ctx.fail("updates have the wrong shape, expected indices.shape[:-1] + data.shape[k:]");
  int bits = movableBits(ctx, x.dtype());
  if (red != Reduction::None && (bits == 0 || x.dtype() == DType::Complex64 || x.dtype() == DType::Complex128))
    ctx.fail(fmt::format("reduction on {} is not supported, expected a numeric type", dtypeName(x.dtype())));
  Tensor out = cloneTensor(x);
  std::vector<int64_t> strides = stridesOf(x.dims);
  int64_t tuples = product(indT.dims, 0, indT.dims.size() - 1);
  int64_t inner = product(x.dims, static_cast<size_t>(k), x.dims.size());
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t c = ind[static_cast<size_t>(t * k + d)], dim = x.dims[static_cast<size_t>(d)];
      if (c < -dim || c >= dim) ctx.fail(fmt::format("index {} is out of range, expected [{}, {})", c, -dim, dim));
      off += (c < 0 ? c + dim : c) * strides[static_cast<size_t>(d)];
    }
    scatterRun(ctx, red, upd, t * inner, out, off, inner, bits);
  }
  ctx.setOutput(0, std::move(out));
}

void tensorScatter(KernelContext& ctx) {
  const TensorData& cache = ctx.tensor(0);
  const TensorData& upd = ctx.tensor(1);
  int64_t r = static_cast<int64_t>(cache.dims.size());
  if (r < 2) ctx.fail(fmt::format("past_cache has rank {}, expected >= 2", r));
  size_t ax = static_cast<size_t>(axisIn(ctx, ctx.attrInt("axis", -2), r));
  if (ax == 0) ctx.fail("axis is the batch axis, expected a later axis");
  std::string mode = ctx.attrString("mode", "linear");
  if (mode != "linear" && mode != "circular") ctx.fail(fmt::format("mode is '{}', expected linear or circular", mode));
  if (upd.dtype() != cache.dtype()) ctx.fail("update differs in type from past_cache, expected the same type");
  if (upd.dims.size() != cache.dims.size()) ctx.fail("update differs in rank from past_cache");
  for (size_t d = 0; d < cache.dims.size(); ++d)
    if (d == ax ? upd.dims[d] > cache.dims[d] : upd.dims[d] != cache.dims[d])
      ctx.fail(fmt::format("update dimension {} is {}, does not fit past_cache's {}", d, upd.dims[d], cache.dims[d]));
  int64_t batch = cache.dims[0];
  std::vector<int64_t> writeAt(static_cast<size_t>(batch), 0);
  if (ctx.hasInput(2)) {
    writeAt = inputInts(ctx, 2);
    if (static_cast<int64_t>(writeAt.size()) != batch)
      ctx.fail(fmt::format("write_indices has {} entries, expected the batch size {}", writeAt.size(), batch));
  }
  int bits = movableBits(ctx, cache.dtype());
  Tensor out = cloneTensor(cache);
  int64_t maxSeq = cache.dims[ax], seq = upd.dims[ax];
  int64_t prefix = product(cache.dims, 0, ax), perBatch = product(cache.dims, 1, ax);
  int64_t inner = product(cache.dims, ax + 1, cache.dims.size());
  for (int64_t p = 0; p < prefix; ++p) {
    int64_t w = writeAt[static_cast<size_t>(p / std::max<int64_t>(perBatch, 1))];
    for (int64_t s = 0; s < seq; ++s) {
      int64_t dst = w + s;
      if (mode == "circular") dst = ((dst % maxSeq) + maxSeq) % maxSeq;
      else if (dst < 0 || dst >= maxSeq)
        ctx.fail(fmt::format("write position {} is outside the cache of length {}", dst, maxSeq));
      copyRun(upd, (p * seq + s) * inner, out, (p * maxSeq + dst) * inner, inner, bits);
    }
  }
  ctx.setOutput(0, std::move(out));
}

}  // namespace

void registerTensorOps2() {
  addRef("", "ArgMax", 1, "ref.argmax", argExtreme<true>);  // select_last_index (12) defaults to 0
  addRef("", "ArgMin", 1, "ref.argmin", argExtreme<false>);
  addRef("", "TopK", 1, "ref.topk.attr", topK1);
  addRef("", "TopK", 10, "ref.topk", topK10);
  addRef("", "Unique", 11, "ref.unique", unique);
  addRef("", "NonZero", 9, "ref.nonzero", nonZero);
  addRef("", "OneHot", 9, "ref.onehot", oneHot);
  addRef("", "CumSum", 11, "ref.cumsum", cumulative<false>);
  addRef("", "CumProd", 26, "ref.cumprod", cumulative<true>);
  addRef("", "Scatter", 9, "ref.scatter", scatterElementsNoReduction);
  addRef("", "ScatterElements", 11, "ref.scatter_elements", scatterElements);
  addRef("", "ScatterND", 11, "ref.scatter_nd", scatterND);
  addRef("", "TensorScatter", 24, "ref.tensor_scatter", tensorScatter);
}

}  // namespace onnxtool::ref
