// tensor_ops.cpp: reference kernels that move data without arithmetic: Identity, Constant,
// shape ops (Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand), layout ops (Transpose,
// Concat, Split, Slice, Pad, CenterCropPad, Tile, DepthToSpace, SpaceToDepth), gathers (Gather,
// GatherElements, GatherND, Compress), and generators (ConstantOfShape, EyeLike, Range, Trilu,
// ReverseSequence). Ops that compare or reduce values live in tensor_ops2.cpp.
//
// Every kernel here is written against element positions, never element values, so one code
// path serves every element type: whole-byte types are copied as bytes, 2- and 4-bit types as
// packed bit fields, strings as strings.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "exec/ref/kernel_util.h"
#include "lib/limits.h"

namespace onnxtool::ref {

// ---- element movement shared with tensor_ops2.cpp (declared there; no header of its own) ----
namespace moves {

int movableBits(const KernelContext& ctx, DType t) {
  if (t == DType::String) return 0;
  int bits = dtypeBits(t);
  if (bits == 0 || (bits % 8 != 0 && bits != 4 && bits != 2))
    ctx.fail(fmt::format("cannot move elements of type {}, expected a type of 2, 4 or 8*n bits or string",
                         dtypeName(t)));
  return bits;
}

namespace {

uint8_t getPacked(const uint8_t* p, int64_t i, int bits) {
  int perByte = 8 / bits;
  int shift = static_cast<int>(i % perByte) * bits;
  return static_cast<uint8_t>((p[i / perByte] >> shift) & ((1 << bits) - 1));
}

void setPacked(uint8_t* p, int64_t i, int bits, uint8_t v) {
  int perByte = 8 / bits;
  int shift = static_cast<int>(i % perByte) * bits;
  uint8_t mask = static_cast<uint8_t>(((1 << bits) - 1) << shift);
  uint8_t& b = p[i / perByte];
  b = static_cast<uint8_t>((b & ~mask) | ((v << shift) & mask));
}

}  // namespace

void copyRun(const TensorData& src, int64_t si, Tensor& dst, int64_t di, int64_t n, int bits) {
  if (n <= 0) return;
  if (bits == 0) {
    std::copy_n(src.strings.begin() + si, n, dst.strings.begin() + di);
  } else if (bits % 8 == 0) {
    size_t k = static_cast<size_t>(bits / 8);
    std::memcpy(dst.raw.mutableData() + static_cast<size_t>(di) * k, src.raw.data() + static_cast<size_t>(si) * k,
                static_cast<size_t>(n) * k);
  } else {
    for (int64_t i = 0; i < n; ++i) setPacked(dst.raw.mutableData(), di + i, bits, getPacked(src.raw.data(), si + i, bits));
  }
}

Tensor takeFlat(const KernelContext& ctx, const TensorData& src, std::vector<int64_t> dims, const std::vector<int64_t>& map,
                const TensorData* fill) {
  int bits = movableBits(ctx, src.dtype());
  Tensor out = makeTensor(src.dtype(), std::move(dims));
  for (size_t i = 0; i < map.size(); ++i) {
    if (map[i] >= 0) copyRun(src, map[i], out, static_cast<int64_t>(i), 1, bits);
    else if (fill) copyRun(*fill, 0, out, static_cast<int64_t>(i), 1, bits);
  }
  return out;
}

Tensor cloneTensor(const TensorData& t) {
  Tensor out = makeTensor(t.dtype(), t.dims);
  if (t.dtype() == DType::String) out.strings = t.strings;
  else if (!t.raw.empty()) std::memcpy(out.raw.mutableData(), t.raw.data(), std::min(t.raw.size(), out.raw.size()));
  return out;
}

}  // namespace moves

namespace {

using moves::copyRun;
using moves::movableBits;
using moves::takeFlat;

/// Refuses an output axis longer than any tensor this executor could allocate, before the
/// per-axis index maps are built (pads and repeats come from data).
constexpr int64_t kMaxAxisLength = int64_t{1} << 32;
void checkAxisLength(const KernelContext& ctx, int64_t n) {
  if (n > kMaxAxisLength) ctx.fail(fmt::format("output axis of {} elements is too large", n));
}

/// Refuses output dims holding more elements than limits::kMaxTensorElements, or more than this
/// machine's memory could hold as the gather's index map (8 bytes per element), before anything is
/// allocated in proportion to them.
void checkOutputElements(const KernelContext& ctx, const std::vector<int64_t>& dims) {
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) ctx.fail(fmt::format("output dims [{}] include a negative dimension", fmt::join(dims, ", ")));
    if (d != 0 && n > limits::kMaxTensorElements / static_cast<uint64_t>(d))
      ctx.fail(fmt::format("output dims [{}] hold more than {} elements, too large to allocate",
                           fmt::join(dims, ", "), limits::kMaxTensorElements));
    n *= static_cast<uint64_t>(d);
  }
  checkFitsInMemory(ctx, n * sizeof(int64_t), fmt::format("output dims [{}]", fmt::join(dims, ", ")));
}

int64_t rankOf(const TensorData& t) { return static_cast<int64_t>(t.dims.size()); }

int64_t product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < dims.size(); ++i) p *= dims[i];
  return p;
}

/// Calls f(index, flat) for every multi-index of `dims`, row-major.
template <typename F>
void forEachIndex(const std::vector<int64_t>& dims, F&& f) {
  int64_t n = numel(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    f(idx, flat);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

/// Output element (i0, i1, ...) takes input element (axisMaps[0][i0], axisMaps[1][i1], ...);
/// a -1 on any axis takes `fill` (or zero / "" when fill is null). Slice, Pad, Tile, Expand and
/// CenterCropPad are all this with different per-axis maps.
Tensor axisGather(const KernelContext& ctx, const TensorData& x, const std::vector<std::vector<int64_t>>& axisMaps,
                  const TensorData* fill = nullptr) {
  std::vector<int64_t> outDims;
  for (const auto& m : axisMaps) outDims.push_back(static_cast<int64_t>(m.size()));
  checkOutputElements(ctx, outDims);
  std::vector<int64_t> strides = stridesOf(x.dims);
  std::vector<int64_t> map(static_cast<size_t>(numel(outDims)));
  forEachIndex(outDims, [&](const std::vector<int64_t>& idx, int64_t flat) {
    int64_t off = 0;
    for (size_t a = 0; a < idx.size(); ++a) {
      int64_t s = axisMaps[a][static_cast<size_t>(idx[a])];
      if (s < 0) {
        off = -1;
        break;
      }
      off += s * strides[a];
    }
    map[static_cast<size_t>(flat)] = off;
  });
  return takeFlat(ctx, x, outDims, map, fill);
}

/// Identity maps of every axis of `dims`.
std::vector<std::vector<int64_t>> identityMaps(const std::vector<int64_t>& dims) {
  std::vector<std::vector<int64_t>> maps;
  for (int64_t d : dims) {
    std::vector<int64_t> m(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) m[static_cast<size_t>(i)] = i;
    maps.push_back(std::move(m));
  }
  return maps;
}

/// np.transpose(x.reshape(viewDims), perm) as a fresh tensor of the permuted view dims.
Tensor permuted(const KernelContext& ctx, const TensorData& x, const std::vector<int64_t>& viewDims,
                const std::vector<int64_t>& perm) {
  if (perm.size() != viewDims.size()) ctx.fail(fmt::format("perm has {} entries, expected {}", perm.size(), viewDims.size()));
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> outDims, inStrides = stridesOf(viewDims), strides;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)])
      ctx.fail("perm is not a permutation of the axes, expected each axis once");
    seen[static_cast<size_t>(p)] = true;
    outDims.push_back(viewDims[static_cast<size_t>(p)]);
    strides.push_back(inStrides[static_cast<size_t>(p)]);
  }
  std::vector<int64_t> map(static_cast<size_t>(numel(outDims)));
  forEachIndex(outDims, [&](const std::vector<int64_t>& idx, int64_t flat) {
    int64_t off = 0;
    for (size_t a = 0; a < idx.size(); ++a) off += idx[a] * strides[a];
    map[static_cast<size_t>(flat)] = off;
  });
  return takeFlat(ctx, x, outDims, map, nullptr);
}

/// Wraps a negative index and checks bounds; fails naming `what` otherwise.
int64_t wrapIndex(const KernelContext& ctx, int64_t i, int64_t dim, const char* what) {
  if (i < -dim || i >= dim) ctx.fail(fmt::format("{} index {} is out of range, expected [{}, {})", what, i, -dim, dim));
  return i < 0 ? i + dim : i;
}

/// Axes from an attribute or input, normalised to [0, rank), duplicates refused.
std::vector<int64_t> normalizeAxes(const KernelContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    int64_t n = axisIn(ctx, a, rank);
    if (std::find(out.begin(), out.end(), n) != out.end()) ctx.fail(fmt::format("axis {} repeats, expected distinct axes", a));
    out.push_back(n);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Identity, Constant, ConstantOfShape, Shape, Size

void identity(KernelContext& ctx) {
  const RtValue* v = ctx.input(0);
  if (!v) ctx.fail("input 0 is missing");
  ctx.setOutput(0, *v);
}

Tensor densify(const KernelContext& ctx, const SparseTensor& s) {
  Tensor dense = makeTensor(s.values.dtype(), s.dims);
  int bits = movableBits(ctx, dense.dtype());
  int64_t n = numel(dense);
  int64_t nnz = numel(s.values);
  std::vector<int64_t> idx = nnz ? s.indices.toInt64s() : std::vector<int64_t>{};
  bool coordinate = s.indices.dims.size() == 2;
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t flat = 0;
    if (coordinate) {
      for (size_t d = 0; d < s.dims.size(); ++d) flat = flat * s.dims[d] + idx[static_cast<size_t>(k) * s.dims.size() + d];
    } else {
      flat = idx.at(static_cast<size_t>(k));
    }
    if (flat < 0 || flat >= n) ctx.fail(fmt::format("sparse_value index {} is out of range for {} elements", flat, n));
    copyRun(s.values, k, dense, flat, 1, bits);
  }
  return dense;
}

void constant(KernelContext& ctx) {
  const Attribute* a = ctx.attr("value");
  if (a && a->t) {
    ctx.setOutput(0, RtValue::viewOf(*a->t));
    return;
  }
  if ((a = ctx.attr("sparse_value")) && a->sparseTensor) return ctx.setOutput(0, densify(ctx, *a->sparseTensor));
  if ((a = ctx.attr("value_float"))) return ctx.setOutput(0, Tensor::fromFloats("", {}, {a->f}));
  if ((a = ctx.attr("value_floats"))) return ctx.setOutput(0, Tensor::fromFloats("", {int64_t(a->floats.size())}, a->floats));
  if ((a = ctx.attr("value_int"))) return ctx.setOutput(0, Tensor::fromInt64s("", {}, {a->i}));
  if ((a = ctx.attr("value_ints"))) return ctx.setOutput(0, Tensor::fromInt64s("", {int64_t(a->ints.size())}, a->ints));
  if ((a = ctx.attr("value_string"))) {
    Tensor t = makeTensor(DType::String, {});
    t.strings[0] = a->s;
    return ctx.setOutput(0, std::move(t));
  }
  if ((a = ctx.attr("value_strings"))) {
    Tensor t = makeTensor(DType::String, {int64_t(a->strings.size())});
    t.strings = a->strings;
    return ctx.setOutput(0, std::move(t));
  }
  ctx.fail("no value attribute, expected one of value, sparse_value, value_float(s), value_int(s), value_string(s)");
}

void constantOfShape(KernelContext& ctx) {
  std::vector<int64_t> dims = inputInts(ctx, 0);
  Tensor zero = Tensor::fromFloats("", {1}, {0.0f});
  const TensorData* value = &zero;
  if (const Attribute* a = ctx.attr("value"); a && a->t) {
    value = a->t.get();
    if (numel(*value) != 1) ctx.fail(fmt::format("value has {} elements, expected 1", numel(*value)));
  }
  for (int64_t d : dims)
    if (d < 0) ctx.fail(fmt::format("shape has negative dimension {}, expected dimensions >= 0", d));
  Tensor out = makeTensor(value->dtype(), dims);
  int bits = movableBits(ctx, value->dtype());
  for (int64_t i = 0, n = numel(out); i < n; ++i) copyRun(*value, 0, out, i, 1, bits);
  ctx.setOutput(0, std::move(out));
}

void shape(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t r = rankOf(x);
  auto clampAxis = [r](int64_t a) { return std::clamp(a < 0 ? a + r : a, int64_t{0}, r); };
  int64_t start = clampAxis(ctx.attrInt("start", 0));
  int64_t end = ctx.hasAttr("end") ? clampAxis(ctx.attrInt("end", r)) : r;
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x.dims[static_cast<size_t>(i)]);
  ctx.setOutput(0, Tensor::fromInt64s("", {int64_t(dims.size())}, dims));
}

void size(KernelContext& ctx) { ctx.setOutput(0, Tensor::fromInt64s("", {}, {numel(ctx.tensor(0))})); }

// ---------------------------------------------------------------------------------------------
// Reshape, Flatten, Squeeze, Unsqueeze (outputs share the input's bytes)

Tensor reshapeTo(const KernelContext& ctx, const TensorData& x, const std::vector<int64_t>& spec, bool allowZero) {
  std::vector<int64_t> dims(spec.size());
  int inferAt = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      if (inferAt >= 0) ctx.fail("shape has more than one -1, expected at most one");
      inferAt = static_cast<int>(i);
      continue;
    }
    if (d == 0 && !allowZero) {
      if (i >= x.dims.size()) ctx.fail(fmt::format("shape copies dimension {} with 0, but the input has rank {}", i, x.dims.size()));
      d = x.dims[i];
    }
    if (d < 0) ctx.fail(fmt::format("shape has invalid dimension {}, expected >= -1", d));
    dims[i] = d;
    known = checkedMul(ctx, known, d);
  }
  int64_t n = numel(x);
  if (inferAt >= 0) {
    if (known == 0 || n % known != 0)
      ctx.fail(fmt::format("cannot infer the -1 dimension: {} elements do not divide into {}", n, known));
    dims[static_cast<size_t>(inferAt)] = n / known;
  } else if (known != n) {
    ctx.fail(fmt::format("shape holds {} elements, expected {} as the input", known, n));
  }
  return reshaped(x, dims);
}

void reshape1(KernelContext& ctx) { ctx.setOutput(0, reshapeTo(ctx, ctx.tensor(0), ctx.attrInts("shape"), false)); }

void reshape5(KernelContext& ctx) {
  bool allowZero = ctx.attrInt("allowzero", 0) != 0;
  ctx.setOutput(0, reshapeTo(ctx, ctx.tensor(0), inputInts(ctx, 1), allowZero));
}

void flatten(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t r = rankOf(x);
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < -r || axis > r) ctx.fail(fmt::format("axis {} is out of range, expected [{}, {}]", axis, -r, r));
  if (axis < 0) axis += r;
  size_t ax = static_cast<size_t>(axis);
  ctx.setOutput(0, reshaped(x, {product(x.dims, 0, ax), product(x.dims, ax, x.dims.size())}));
}

void squeezeWith(KernelContext& ctx, const std::vector<int64_t>* axesIn) {
  const TensorData& x = ctx.tensor(0);
  std::vector<bool> drop(x.dims.size(), false);
  if (axesIn) {
    for (int64_t a : normalizeAxes(ctx, *axesIn, rankOf(x))) {
      if (x.dims[static_cast<size_t>(a)] != 1)
        ctx.fail(fmt::format("cannot squeeze axis {} of size {}, expected size 1", a, x.dims[static_cast<size_t>(a)]));
      drop[static_cast<size_t>(a)] = true;
    }
  } else {
    for (size_t i = 0; i < x.dims.size(); ++i) drop[i] = x.dims[i] == 1;
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.dims.size(); ++i)
    if (!drop[i]) dims.push_back(x.dims[i]);
  ctx.setOutput(0, reshaped(x, dims));
}

void squeeze1(KernelContext& ctx) {
  std::vector<int64_t> axes = ctx.attrInts("axes");
  squeezeWith(ctx, axes.empty() ? nullptr : &axes);
}

void squeeze13(KernelContext& ctx) {
  std::vector<int64_t> axes;
  if (ctx.hasInput(1)) axes = inputInts(ctx, 1);
  // An empty axes list squeezes every size-1 axis, like an absent one (reference and ORT agree).
  squeezeWith(ctx, axes.empty() ? nullptr : &axes);
}

void unsqueezeWith(KernelContext& ctx, const std::vector<int64_t>& axes) {
  const TensorData& x = ctx.tensor(0);
  int64_t outRank = rankOf(x) + static_cast<int64_t>(axes.size());
  std::vector<int64_t> norm = normalizeAxes(ctx, axes, outRank);
  std::vector<int64_t> dims;
  size_t next = 0;
  for (int64_t i = 0; i < outRank; ++i) {
    if (std::find(norm.begin(), norm.end(), i) != norm.end()) dims.push_back(1);
    else dims.push_back(x.dims[next++]);
  }
  ctx.setOutput(0, reshaped(x, dims));
}

void unsqueeze1(KernelContext& ctx) { unsqueezeWith(ctx, ctx.attrInts("axes")); }
void unsqueeze13(KernelContext& ctx) { unsqueezeWith(ctx, inputInts(ctx, 1)); }

// ---------------------------------------------------------------------------------------------
// Expand, Tile, Transpose, DepthToSpace, SpaceToDepth

void expand(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> dims = broadcastShapes(ctx, {x.dims, inputInts(ctx, 1)});
  checkOutputElements(ctx, dims);
  std::vector<std::vector<int64_t>> maps(dims.size());
  size_t off = dims.size() - x.dims.size();
  for (size_t a = 0; a < dims.size(); ++a) {
    bool broadcast = a < off || x.dims[a - off] == 1;
    for (int64_t i = 0; i < dims[a]; ++i) maps[a].push_back(broadcast ? 0 : i);
  }
  // Leading broadcast axes do not exist in x: gather from a view with them as size-1 axes.
  std::vector<int64_t> viewDims(off, 1);
  viewDims.insert(viewDims.end(), x.dims.begin(), x.dims.end());
  ctx.setOutput(0, axisGather(ctx, reshaped(x, viewDims), maps));
}

Tensor tileBy(const KernelContext& ctx, const TensorData& x, const std::vector<int64_t>& repeats) {
  if (repeats.size() != x.dims.size())
    ctx.fail(fmt::format("repeats has {} entries, expected one per input axis ({})", repeats.size(), x.dims.size()));
  std::vector<int64_t> outDims(x.dims.size());
  for (size_t a = 0; a < x.dims.size(); ++a) {
    if (repeats[a] < 0) ctx.fail(fmt::format("repeats has negative entry {}, expected >= 0", repeats[a]));
    if (x.dims[a] > 0 && repeats[a] > kMaxAxisLength / x.dims[a])
      ctx.fail(fmt::format("repeats {} on axis {} make the output too large", repeats[a], a));
    outDims[a] = x.dims[a] * repeats[a];
  }
  checkOutputElements(ctx, outDims);
  std::vector<std::vector<int64_t>> maps(x.dims.size());
  for (size_t a = 0; a < x.dims.size(); ++a) {
    if (repeats[a] < 0) ctx.fail(fmt::format("repeats has negative entry {}, expected >= 0", repeats[a]));
    if (x.dims[a] > 0 && repeats[a] > kMaxAxisLength / x.dims[a])
      ctx.fail(fmt::format("repeats {} on axis {} make the output too large", repeats[a], a));
    for (int64_t r = 0; r < repeats[a]; ++r)
      for (int64_t i = 0; i < x.dims[a]; ++i) maps[a].push_back(i);
  }
  return axisGather(ctx, x, maps);
}

void tile1(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t tiles = static_cast<int64_t>(inputScalar(ctx, 1));
  int64_t axis = axisIn(ctx, static_cast<int64_t>(inputScalar(ctx, 2)), rankOf(x));
  std::vector<int64_t> repeats(x.dims.size(), 1);
  repeats[static_cast<size_t>(axis)] = tiles;
  ctx.setOutput(0, tileBy(ctx, x, repeats));
}

void tile6(KernelContext& ctx) { ctx.setOutput(0, tileBy(ctx, ctx.tensor(0), inputInts(ctx, 1))); }

void transpose(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> perm = ctx.attrInts("perm");
  if (!ctx.hasAttr("perm"))
    for (int64_t i = rankOf(x); i-- > 0;) perm.push_back(i);
  ctx.setOutput(0, permuted(ctx, x, x.dims, perm));
}

/// Checks a 4-D input and a positive block size; returns {blocksize, mode is DCR}.
std::pair<int64_t, bool> blockParams(const KernelContext& ctx, const TensorData& x) {
  if (x.dims.size() != 4) ctx.fail(fmt::format("input has rank {}, expected 4 (N, C, H, W)", x.dims.size()));
  int64_t bs = ctx.attrInt("blocksize", 0);
  if (bs <= 0) ctx.fail(fmt::format("blocksize is {}, expected a positive value", bs));
  std::string mode = ctx.attrString("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") ctx.fail(fmt::format("mode is '{}', expected 'DCR' or 'CRD'", mode));
  return {bs, mode == "DCR"};
}

void depthToSpace(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [bs, dcr] = blockParams(ctx, x);
  int64_t b = x.dims[0], c = x.dims[1], h = x.dims[2], w = x.dims[3];
  int64_t bs2 = checkedMul(ctx, bs, bs);
  if (c % bs2 != 0) ctx.fail(fmt::format("channels {} are not divisible by blocksize^2 = {}", c, bs2));
  int64_t oc = c / bs2;
  checkedMul(ctx, h, bs);
  checkedMul(ctx, w, bs);
  Tensor t = dcr ? permuted(ctx, x, {b, bs, bs, oc, h, w}, {0, 3, 4, 1, 5, 2})
                 : permuted(ctx, x, {b, oc, bs, bs, h, w}, {0, 1, 4, 2, 5, 3});
  ctx.setOutput(0, reshaped(t, {b, oc, h * bs, w * bs}));
}

void spaceToDepth(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [bs, dcr] = blockParams(ctx, x);
  int64_t b = x.dims[0], c = x.dims[1], h = x.dims[2], w = x.dims[3];
  if (h % bs != 0 || w % bs != 0) ctx.fail(fmt::format("H {} and W {} must be divisible by blocksize {}", h, w, bs));
  checkedMul(ctx, c, checkedMul(ctx, bs, bs));
  std::vector<int64_t> view = {b, c, h / bs, bs, w / bs, bs};
  Tensor t = dcr ? permuted(ctx, x, view, {0, 3, 5, 1, 2, 4}) : permuted(ctx, x, view, {0, 1, 3, 5, 2, 4});
  ctx.setOutput(0, reshaped(t, {b, c * bs * bs, h / bs, w / bs}));
}

// ---------------------------------------------------------------------------------------------
// Concat, Split

void concat(KernelContext& ctx) {
  std::vector<const TensorData*> xs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) xs.push_back(&ctx.tensor(i));
  if (xs.empty()) ctx.fail("no inputs, expected at least one");
  const TensorData& first = *xs[0];
  int64_t r = rankOf(first);
  int64_t axis = axisIn(ctx, ctx.attrInt("axis", 1), r);  // Concat-1 defaulted to axis 1
  size_t ax = static_cast<size_t>(axis);
  std::vector<int64_t> dims = first.dims;
  dims[ax] = 0;
  for (const TensorData* t : xs) {
    if (t->dtype() != first.dtype()) ctx.fail("inputs differ in element type, expected one type");
    if (rankOf(*t) != r) ctx.fail(fmt::format("inputs have ranks {} and {}, expected equal ranks", r, rankOf(*t)));
    for (size_t d = 0; d < dims.size(); ++d)
      if (d != ax && t->dims[d] != first.dims[d])
        ctx.fail(fmt::format("inputs differ in dimension {} ({} vs {}), expected equal except on axis {}", d,
                             first.dims[d], t->dims[d], axis));
    dims[ax] += t->dims[ax];
  }
  int bits = movableBits(ctx, first.dtype());
  Tensor out = makeTensor(first.dtype(), dims);
  int64_t outer = product(dims, 0, ax), inner = product(dims, ax + 1, dims.size());
  int64_t outRow = dims[ax] * inner, pos = 0;
  for (const TensorData* t : xs) {
    int64_t row = t->dims[ax] * inner;
    for (int64_t o = 0; o < outer; ++o) copyRun(*t, o * row, out, o * outRow + pos, row, bits);
    pos += row;
  }
  ctx.setOutput(0, std::move(out));
}

void splitInto(KernelContext& ctx, int64_t axisAttr, std::vector<int64_t> sizes, int64_t numOutputs) {
  const TensorData& x = ctx.tensor(0);
  size_t ax = static_cast<size_t>(axisIn(ctx, axisAttr, rankOf(x)));
  int64_t dim = x.dims[ax];
  if (sizes.empty()) {
    int64_t n = numOutputs;
    if (n <= 0) ctx.fail(fmt::format("cannot split into {} outputs", n));
    if (n != static_cast<int64_t>(ctx.numOutputs()))
      ctx.fail(fmt::format("num_outputs is {} for {} outputs, expected one part per output", n, ctx.numOutputs()));
    // Equal parts; when uneven (num_outputs of opset 18) every part but the last has ceil(dim/n).
    int64_t part = (dim + n - 1) / n;
    int64_t left = dim;
    for (int64_t i = 0; i < n; ++i) {
      int64_t s = std::min(part, left);
      sizes.push_back(s);
      left -= s;
    }
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) ctx.fail(fmt::format("split has negative size {}", s));
    total = checkedAdd(ctx, total, s);
  }
  if (total != dim) ctx.fail(fmt::format("split sizes sum to {}, expected the axis size {}", total, dim));
  if (sizes.size() != ctx.numOutputs())
    ctx.fail(fmt::format("split gives {} parts for {} outputs, expected one part per output", sizes.size(), ctx.numOutputs()));
  int bits = movableBits(ctx, x.dtype());
  int64_t outer = product(x.dims, 0, ax), inner = product(x.dims, ax + 1, x.dims.size());
  int64_t pos = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int64_t> dims = x.dims;
    dims[ax] = sizes[i];
    Tensor out = makeTensor(x.dtype(), dims);
    int64_t row = sizes[i] * inner;
    for (int64_t o = 0; o < outer; ++o) copyRun(x, o * dim * inner + pos * inner, out, o * row, row, bits);
    pos += sizes[i];
    ctx.setOutput(i, std::move(out));
  }
}

void split1(KernelContext& ctx) {
  std::vector<int64_t> sizes = ctx.attrInts("split");
  if (sizes.empty() && ctx.hasInput(1)) {
    const TensorData& s = ctx.tensor(1);
    for (int64_t i = 0, n = numel(s); i < n; ++i) sizes.push_back(static_cast<int64_t>(s.elementAsDouble(static_cast<size_t>(i))));
  }
  splitInto(ctx, ctx.attrInt("axis", 0), sizes, static_cast<int64_t>(ctx.numOutputs()));
}

void split2(KernelContext& ctx) {
  splitInto(ctx, ctx.attrInt("axis", 0), ctx.attrInts("split"), static_cast<int64_t>(ctx.numOutputs()));
}

void split13(KernelContext& ctx) {
  std::vector<int64_t> sizes;
  if (ctx.hasInput(1)) sizes = inputInts(ctx, 1);
  int64_t n = ctx.attrInt("num_outputs", static_cast<int64_t>(ctx.numOutputs()));
  if (ctx.hasInput(1) && ctx.hasAttr("num_outputs")) ctx.fail("both split and num_outputs are given, expected one");
  splitInto(ctx, ctx.attrInt("axis", 0), sizes, n);
}

// ---------------------------------------------------------------------------------------------
// Slice, Pad, CenterCropPad

Tensor sliceBy(const KernelContext& ctx, const TensorData& x, const std::vector<int64_t>& starts,
               const std::vector<int64_t>& ends, std::vector<int64_t> axes, std::vector<int64_t> steps) {
  int64_t r = rankOf(x);
  if (ends.size() != starts.size()) ctx.fail("starts and ends differ in length, expected equal lengths");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail("axes and steps must have as many entries as starts");
  axes = normalizeAxes(ctx, axes, r);
  std::vector<std::vector<int64_t>> maps = identityMaps(x.dims);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t dim = x.dims[static_cast<size_t>(axes[i])];
    int64_t step = steps[i];
    if (step == 0) ctx.fail("slice step is 0, expected a non-zero step");
    // Clamp in 128-bit-safe order: a negative value counts from the end, then clamp to the range
    // reachable with this step direction (INT64_MAX/INT64_MIN ends mean "to the end").
    auto adjust = [dim](int64_t v) { return v < 0 ? (v < -dim ? -dim - 1 : v) + dim : v; };
    int64_t s = adjust(starts[i]), e = adjust(ends[i]);
    std::vector<int64_t>& m = maps[static_cast<size_t>(axes[i])];
    m.clear();
    if (dim == 0) continue;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    // Advance only while the next position stays before the end: huge steps must not overflow.
    if (step > 0)
      for (int64_t j = s; j < e; j = (e - j) - step > 0 ? j + step : e) m.push_back(j);
    else
      for (int64_t j = s; j > e; j = (j - e) + step > 0 ? j + step : e) m.push_back(j);
  }
  return axisGather(ctx, x, maps);
}

void slice1(KernelContext& ctx) {
  ctx.setOutput(0, sliceBy(ctx, ctx.tensor(0), ctx.attrInts("starts"), ctx.attrInts("ends"), ctx.attrInts("axes"), {}));
}

void slice10(KernelContext& ctx) {
  std::vector<int64_t> axes, steps;
  if (ctx.hasInput(3)) axes = inputInts(ctx, 3);
  if (ctx.hasInput(4)) steps = inputInts(ctx, 4);
  ctx.setOutput(0, sliceBy(ctx, ctx.tensor(0), inputInts(ctx, 1), inputInts(ctx, 2), axes, steps));
}

/// Source coordinate for padded coordinate j on an axis of `n` kept elements, or -1 for the
/// constant fill.
int64_t padSource(int64_t j, int64_t n, const std::string& mode) {
  if (j >= 0 && j < n) return j;
  if (mode == "constant") return -1;
  if (mode == "edge") return j < 0 ? 0 : n - 1;
  if (mode == "wrap") return ((j % n) + n) % n;
  // reflect (without repeating the edge), periodic with period 2(n-1)
  if (n == 1) return 0;
  int64_t period = 2 * (n - 1);
  int64_t k = ((j % period) + period) % period;
  return k < n ? k : period - k;
}

Tensor padBy(const KernelContext& ctx, const TensorData& x, const std::vector<int64_t>& pads, std::vector<int64_t> axes,
             const std::string& mode, const TensorData* fill) {
  int64_t r = rankOf(x);
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail(fmt::format("mode is '{}', expected constant, reflect, edge or wrap", mode));
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  axes = normalizeAxes(ctx, axes, r);
  if (pads.size() != 2 * axes.size())
    ctx.fail(fmt::format("pads has {} entries, expected 2 * {} (begins then ends)", pads.size(), axes.size()));
  size_t na = axes.size();
  // The output dims first: refused when too large, before any map is built.
  std::vector<int64_t> outDims = x.dims;
  for (size_t i = 0; i < na; ++i) {
    size_t a = static_cast<size_t>(axes[i]);
    int64_t dim = x.dims[a], begin = pads[i], end = pads[na + i];
    int64_t n = dim - std::max<int64_t>(0, -begin) - std::max<int64_t>(0, -end);
    int64_t pb = std::max<int64_t>(0, begin), pe = std::max<int64_t>(0, end);
    if (n < 0) ctx.fail(fmt::format("pads crop more than the {} elements of axis {}", dim, a));
    checkAxisLength(ctx, pb);
    checkAxisLength(ctx, pe);
    checkAxisLength(ctx, n + pb + pe);
    outDims[a] = n + pb + pe;
  }
  checkOutputElements(ctx, outDims);
  std::vector<std::vector<int64_t>> maps = identityMaps(x.dims);
  for (size_t i = 0; i < na; ++i) {
    size_t a = static_cast<size_t>(axes[i]);
    int64_t dim = x.dims[a], begin = pads[i], end = pads[na + i];
    // Negative pads crop first; the remaining [lo, hi) is what the modes pad from.
    int64_t lo = std::max<int64_t>(0, -begin), hi = dim - std::max<int64_t>(0, -end);
    int64_t n = hi - lo, pb = std::max<int64_t>(0, begin), pe = std::max<int64_t>(0, end);
    if (n == 0 && mode != "constant" && pb + pe > 0)
      ctx.fail(fmt::format("cannot {}-pad axis {} of no elements", mode, a));
    std::vector<int64_t>& m = maps[a];
    m.clear();
    for (int64_t j = -pb; j < n + pe; ++j) {
      int64_t s = padSource(j, n, mode);
      m.push_back(s < 0 ? -1 : s + lo);
    }
  }
  return axisGather(ctx, x, maps, fill);
}

/// A one-element tensor of x's float type holding `v` (Pad-1/2's float `value` attribute).
Tensor floatFill(const KernelContext& ctx, DType t, float v) {
  Tensor f = makeTensor(t, {});
  dispatchNumeric(ctx, t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (isFloatLike<T>) mutableData<T>(f)[0] = T(v);
    else mutableData<T>(f)[0] = static_cast<T>(v);
  });
  return f;
}

void pad1(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  Tensor fill = floatFill(ctx, x.dtype(), ctx.attrFloat("value", 0.0f));
  ctx.setOutput(0, padBy(ctx, x, ctx.attrInts("paddings"), {}, ctx.attrString("mode", "constant"), &fill));
}

void pad2(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  Tensor fill = floatFill(ctx, x.dtype(), ctx.attrFloat("value", 0.0f));
  ctx.setOutput(0, padBy(ctx, x, ctx.attrInts("pads"), {}, ctx.attrString("mode", "constant"), &fill));
}

void pad11(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData* fill = nullptr;
  if (ctx.hasInput(2)) {
    fill = &ctx.tensor(2);
    if (fill->dtype() != x.dtype()) ctx.fail("constant_value differs in type from data, expected the same type");
    if (numel(*fill) < 1) fill = nullptr;  // an empty constant_value means the default, 0
  }
  std::vector<int64_t> axes;
  if (ctx.hasInput(3)) axes = inputInts(ctx, 3);
  ctx.setOutput(0, padBy(ctx, x, inputInts(ctx, 1), axes, ctx.attrString("mode", "constant"), fill));
}

void centerCropPad(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> target = inputInts(ctx, 1);
  std::vector<int64_t> axes = ctx.attrInts("axes");
  if (!ctx.hasAttr("axes"))
    for (int64_t i = 0; i < rankOf(x); ++i) axes.push_back(i);
  axes = normalizeAxes(ctx, axes, rankOf(x));
  if (target.size() != axes.size())
    ctx.fail(fmt::format("shape has {} entries, expected one per axis ({})", target.size(), axes.size()));
  std::vector<int64_t> outDims = x.dims;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (target[i] < 0) ctx.fail(fmt::format("shape has negative entry {}", target[i]));
    outDims[static_cast<size_t>(axes[i])] = target[i];
  }
  checkOutputElements(ctx, outDims);
  std::vector<std::vector<int64_t>> maps = identityMaps(x.dims);
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t a = static_cast<size_t>(axes[i]);
    int64_t dim = x.dims[a], want = target[i];
    if (want < 0) ctx.fail(fmt::format("shape has negative entry {}", want));
    std::vector<int64_t>& m = maps[a];
    m.clear();
    // Crop: the window starts at floor((dim-want)/2). Pad: floor((want-dim)/2) before, the rest after.
    int64_t offset = want <= dim ? (dim - want) / 2 : -((want - dim) / 2);
    for (int64_t j = 0; j < want; ++j) {
      int64_t s = j + offset;
      m.push_back(s >= 0 && s < dim ? s : -1);
    }
  }
  ctx.setOutput(0, axisGather(ctx, x, maps));
}

// ---------------------------------------------------------------------------------------------
// Gather, GatherElements, GatherND, Compress

void gather(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& indT = ctx.tensor(1);
  std::vector<int64_t> ind = inputInts(ctx, 1);
  size_t ax = static_cast<size_t>(axisIn(ctx, ctx.attrInt("axis", 0), rankOf(x)));
  int64_t dim = x.dims[ax];
  std::vector<int64_t> dims(x.dims.begin(), x.dims.begin() + static_cast<std::ptrdiff_t>(ax));
  dims.insert(dims.end(), indT.dims.begin(), indT.dims.end());
  dims.insert(dims.end(), x.dims.begin() + static_cast<std::ptrdiff_t>(ax) + 1, x.dims.end());
  int bits = movableBits(ctx, x.dtype());
  Tensor out = makeTensor(x.dtype(), dims);
  int64_t outer = product(x.dims, 0, ax), inner = product(x.dims, ax + 1, x.dims.size());
  int64_t k = static_cast<int64_t>(ind.size());
  for (size_t j = 0; j < ind.size(); ++j) ind[j] = wrapIndex(ctx, ind[j], dim, "Gather");
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      copyRun(x, (o * dim + ind[static_cast<size_t>(j)]) * inner, out, (o * k + j) * inner, inner, bits);
  ctx.setOutput(0, std::move(out));
}

void gatherElements(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& indT = ctx.tensor(1);
  std::vector<int64_t> ind = inputInts(ctx, 1);
  size_t ax = static_cast<size_t>(axisIn(ctx, ctx.attrInt("axis", 0), rankOf(x)));
  if (indT.dims.size() != x.dims.size())
    ctx.fail(fmt::format("indices have rank {}, expected the data rank {}", indT.dims.size(), x.dims.size()));
  for (size_t d = 0; d < x.dims.size(); ++d)
    if (d != ax && indT.dims[d] > x.dims[d])
      ctx.fail(fmt::format("indices dimension {} is {}, expected at most the data's {}", d, indT.dims[d], x.dims[d]));
  std::vector<int64_t> strides = stridesOf(x.dims);
  std::vector<int64_t> map(ind.size());
  forEachIndex(indT.dims, [&](const std::vector<int64_t>& idx, int64_t flat) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      int64_t c = d == ax ? wrapIndex(ctx, ind[static_cast<size_t>(flat)], x.dims[d], "GatherElements") : idx[d];
      off += c * strides[d];
    }
    map[static_cast<size_t>(flat)] = off;
  });
  ctx.setOutput(0, takeFlat(ctx, x, indT.dims, map, nullptr));
}

void gatherND(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& indT = ctx.tensor(1);
  std::vector<int64_t> ind = inputInts(ctx, 1);
  int64_t b = ctx.attrInt("batch_dims", 0);
  int64_t r = rankOf(x), q = rankOf(indT);
  if (q < 1) ctx.fail("indices is a scalar, expected rank >= 1");
  int64_t m = indT.dims.back();
  if (b < 0 || b >= std::min(r, q)) ctx.fail(fmt::format("batch_dims {} is out of range for ranks {} and {}", b, r, q));
  if (m < 1 || m > r - b) ctx.fail(fmt::format("indices' last dimension {} is out of range, expected 1..{}", m, r - b));
  for (int64_t i = 0; i < b; ++i)
    if (x.dims[static_cast<size_t>(i)] != indT.dims[static_cast<size_t>(i)])
      ctx.fail(fmt::format("batch dimension {} differs: data {} vs indices {}", i, x.dims[static_cast<size_t>(i)],
                           indT.dims[static_cast<size_t>(i)]));
  std::vector<int64_t> dims(indT.dims.begin(), indT.dims.end() - 1);
  dims.insert(dims.end(), x.dims.begin() + b + m, x.dims.end());
  int bits = movableBits(ctx, x.dtype());
  Tensor out = makeTensor(x.dtype(), dims);
  std::vector<int64_t> strides = stridesOf(x.dims);
  int64_t batches = product(indT.dims, 0, static_cast<size_t>(b));
  int64_t perBatch = product(indT.dims, static_cast<size_t>(b), static_cast<size_t>(q - 1));
  int64_t inner = product(x.dims, static_cast<size_t>(b + m), x.dims.size());
  int64_t batchStride = b > 0 ? strides[static_cast<size_t>(b - 1)] : 0;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t j = 0; j < perBatch; ++j) {
      int64_t tuple = (bi * perBatch + j) * m, off = bi * batchStride;
      for (int64_t d = 0; d < m; ++d) {
        size_t axis = static_cast<size_t>(b + d);
        off += wrapIndex(ctx, ind[static_cast<size_t>(tuple + d)], x.dims[axis], "GatherND") * strides[axis];
      }
      copyRun(x, off, out, (bi * perBatch + j) * inner, inner, bits);
    }
  ctx.setOutput(0, std::move(out));
}

void compress(KernelContext& ctx) {
  const TensorData& x0 = ctx.tensor(0);
  const TensorData& cond = ctx.tensor(1);
  if (cond.dims.size() != 1) ctx.fail(fmt::format("condition has rank {}, expected 1", cond.dims.size()));
  bool hasAxis = ctx.hasAttr("axis");
  Tensor x = hasAxis ? reshaped(x0, x0.dims) : reshaped(x0, {numel(x0)});
  size_t ax = static_cast<size_t>(hasAxis ? axisIn(ctx, ctx.attrInt("axis", 0), rankOf(x)) : 0);
  std::vector<std::vector<int64_t>> maps = identityMaps(x.dims);
  maps[ax].clear();
  // A shorter condition selects nothing past its end; entries past the axis are ignored (as ORT).
  for (int64_t i = 0, n = std::min(numel(cond), x.dims[ax]); i < n; ++i)
    if (cond.elementAsDouble(static_cast<size_t>(i)) != 0) maps[ax].push_back(i);
  ctx.setOutput(0, axisGather(ctx, x, maps));
}

// ---------------------------------------------------------------------------------------------
// EyeLike, Trilu, ReverseSequence, Range

void eyeLike(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() != 2) ctx.fail(fmt::format("input has rank {}, expected 2", x.dims.size()));
  DType t = ctx.hasAttr("dtype") ? static_cast<DType>(ctx.attrInt("dtype", 1)) : x.dtype();
  int64_t k = ctx.attrInt("k", 0);
  Tensor out = makeTensor(t, x.dims);
  dispatchNumeric(ctx, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = mutableData<T>(out);
    for (int64_t i = 0; i < x.dims[0]; ++i) {
      int64_t j = i + k;
      if (j >= 0 && j < x.dims[1]) p[i * x.dims[1] + j] = static_cast<T>(1.0f);
    }
  });
  ctx.setOutput(0, std::move(out));
}

void trilu(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() < 2) ctx.fail(fmt::format("input has rank {}, expected >= 2", x.dims.size()));
  int64_t k = ctx.hasInput(1) ? static_cast<int64_t>(inputScalar(ctx, 1)) : 0;
  bool upper = ctx.attrInt("upper", 1) != 0;
  size_t r = x.dims.size();
  std::vector<int64_t> map(static_cast<size_t>(numel(x)));
  forEachIndex(x.dims, [&](const std::vector<int64_t>& idx, int64_t flat) {
    int64_t diag = idx[r - 1] - idx[r - 2];
    bool keep = upper ? diag >= k : diag <= k;
    map[static_cast<size_t>(flat)] = keep ? flat : -1;
  });
  ctx.setOutput(0, takeFlat(ctx, x, x.dims, map, nullptr));
}

void reverseSequence(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> lens = inputInts(ctx, 1);
  int64_t r = rankOf(x);
  if (r < 2) ctx.fail(fmt::format("input has rank {}, expected >= 2", r));
  size_t batchAx = static_cast<size_t>(axisIn(ctx, ctx.attrInt("batch_axis", 1), r));
  size_t timeAx = static_cast<size_t>(axisIn(ctx, ctx.attrInt("time_axis", 0), r));
  if (batchAx == timeAx) ctx.fail("batch_axis equals time_axis, expected different axes");
  if (static_cast<int64_t>(lens.size()) != x.dims[batchAx])
    ctx.fail(fmt::format("sequence_lens has {} entries, expected the batch size {}", lens.size(), x.dims[batchAx]));
  for (int64_t l : lens)
    if (l < 0 || l > x.dims[timeAx]) ctx.fail(fmt::format("sequence length {} is out of range [0, {}]", l, x.dims[timeAx]));
  std::vector<int64_t> strides = stridesOf(x.dims);
  std::vector<int64_t> map(static_cast<size_t>(numel(x)));
  forEachIndex(x.dims, [&](const std::vector<int64_t>& idx, int64_t flat) {
    int64_t len = lens[static_cast<size_t>(idx[batchAx])], t = idx[timeAx];
    map[static_cast<size_t>(flat)] = t < len ? flat + (len - 1 - 2 * t) * strides[timeAx] : flat;
  });
  ctx.setOutput(0, takeFlat(ctx, x, x.dims, map, nullptr));
}

void range(KernelContext& ctx) {
  const TensorData& st = ctx.tensor(0);
  DType t = st.dtype();
  for (size_t i = 0; i < 3; ++i) {
    if (ctx.tensor(i).dtype() != t) ctx.fail("start, limit and delta differ in type, expected one type");
    if (numel(ctx.tensor(i)) != 1) ctx.fail(fmt::format("input {} has {} elements, expected a scalar", i, numel(ctx.tensor(i))));
  }
  if (t == DType::Int16 || t == DType::Int32 || t == DType::Int64) {
    int64_t start = st.elementAsInt(0), limit = ctx.tensor(1).elementAsInt(0), delta = ctx.tensor(2).elementAsInt(0);
    if (delta == 0) ctx.fail("delta is 0, expected a non-zero step");
    // ceil((limit - start) / delta) in integers, computed in 128 bits so extreme bounds cannot overflow
    __int128 span = static_cast<__int128>(limit) - start;
    __int128 n = span / delta + ((span % delta != 0) && ((span > 0) == (delta > 0)) ? 1 : 0);
    if (n < 0) n = 0;
    Tensor out = makeTensor(t, {static_cast<int64_t>(n)});
    dispatchNumeric(ctx, t, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        T* p = mutableData<T>(out);
        for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) p[i] = static_cast<T>(static_cast<uint64_t>(start) + static_cast<uint64_t>(i) * static_cast<uint64_t>(delta));
      }
    });
    return ctx.setOutput(0, std::move(out));
  }
  dispatchFloat(ctx, t, [&](auto tag) {
    using T = decltype(tag);
    double start = st.elementAsDouble(0), limit = ctx.tensor(1).elementAsDouble(0), delta = ctx.tensor(2).elementAsDouble(0);
    bool low = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
    // Range-27 stash_type: float16/bfloat16 ranges run in float (1) or double (11), then round.
    int64_t stash = ctx.attrInt("stash_type", 1);
    if (low && stash != 1 && stash != 11) ctx.fail(fmt::format("stash_type is {}, expected 1 (float) or 11 (double)", stash));
    if (delta == 0 || std::isnan(delta)) ctx.fail("delta is 0 or NaN, expected a non-zero step");
    double count = std::ceil((limit - start) / delta);
    if (!(count > 0)) count = 0;
    if (count > 1e12) ctx.fail(fmt::format("range of {} elements is too large", count));
    Tensor out = makeTensor(t, {static_cast<int64_t>(count)});
    T* p = mutableData<T>(out);
    // numpy.arange semantics: float and double ranges are computed in double then rounded;
    // float16/bfloat16 in the stash type.
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      if (low && stash == 1) {
        p[i] = T(static_cast<float>(start) + static_cast<float>(i) * static_cast<float>(delta));
      } else {
        double v = start + static_cast<double>(i) * delta;
        if constexpr (std::is_same_v<T, double>) p[i] = v;
        else p[i] = T(static_cast<float>(v));
      }
    }
    ctx.setOutput(0, std::move(out));
  });
}

}  // namespace

void registerTensorOps2();

void registerTensorOps() {
  addRef("", "Identity", 1, "ref.identity", identity);
  addRef("", "Constant", 1, "ref.constant", constant);
  addRef("", "ConstantOfShape", 9, "ref.constant_of_shape", constantOfShape);
  addRef("", "Shape", 1, "ref.shape", shape);  // start/end (opset 15) default to the whole shape
  addRef("", "Size", 1, "ref.size", size);
  addRef("", "Reshape", 1, "ref.reshape.attr", reshape1);
  addRef("", "Reshape", 5, "ref.reshape", reshape5);
  addRef("", "Flatten", 1, "ref.flatten", flatten);
  addRef("", "Squeeze", 1, "ref.squeeze.attr", squeeze1);
  addRef("", "Squeeze", 13, "ref.squeeze", squeeze13);
  addRef("", "Unsqueeze", 1, "ref.unsqueeze.attr", unsqueeze1);
  addRef("", "Unsqueeze", 13, "ref.unsqueeze", unsqueeze13);
  addRef("", "Expand", 8, "ref.expand", expand);
  addRef("", "Tile", 1, "ref.tile.axis", tile1);
  addRef("", "Tile", 6, "ref.tile", tile6);
  addRef("", "Transpose", 1, "ref.transpose", transpose);
  addRef("", "DepthToSpace", 1, "ref.depth_to_space", depthToSpace);
  addRef("", "SpaceToDepth", 1, "ref.space_to_depth", spaceToDepth);
  addRef("", "Concat", 1, "ref.concat", concat);
  addRef("", "Split", 1, "ref.split.v1", split1);
  addRef("", "Split", 2, "ref.split.attr", split2);
  addRef("", "Split", 13, "ref.split", split13);
  addRef("", "Slice", 1, "ref.slice.attr", slice1);
  addRef("", "Slice", 10, "ref.slice", slice10);
  addRef("", "Pad", 1, "ref.pad.v1", pad1);
  addRef("", "Pad", 2, "ref.pad.attr", pad2);
  addRef("", "Pad", 11, "ref.pad", pad11);
  addRef("", "CenterCropPad", 18, "ref.center_crop_pad", centerCropPad);
  addRef("", "Gather", 1, "ref.gather", gather);
  addRef("", "GatherElements", 11, "ref.gather_elements", gatherElements);
  addRef("", "GatherND", 11, "ref.gather_nd", gatherND);  // batch_dims (opset 12) defaults to 0
  addRef("", "Compress", 9, "ref.compress", compress);
  addRef("", "EyeLike", 9, "ref.eye_like", eyeLike);
  addRef("", "Trilu", 14, "ref.trilu", trilu);
  addRef("", "ReverseSequence", 10, "ref.reverse_sequence", reverseSequence);
  addRef("", "Range", 11, "ref.range", range);
  registerTensorOps2();
}

}  // namespace onnxtool::ref
