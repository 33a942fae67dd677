// infer_tensor.cpp: shape inference and data propagation for shape-manipulating ops: Shape,
// Size, Constant, ConstantOfShape, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat,
// Split, Slice, Gather, GatherElements, Scatter*, Expand, Tile, Range, Pad, NonZero, TopK, GatherND,
// OneHot, Compress, Unique, ReverseSequence, TensorScatter, EyeLike, DepthToSpace/SpaceToDepth,
// CenterCropPad, Det and Einsum.
#include <algorithm>
#include <climits>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

/// Product of dims, nullopt when one is unknown.
SymDim product(const SymShape& s, size_t from, size_t to) {
  SymExpr p(1);
  for (size_t i = from; i < to; ++i) {
    if (!s[i]) return std::nullopt;
    p = p * *s[i];
  }
  return p;
}

/// The dims of `s` when every one is a known constant and their product is `count` (the
/// element count of a value's propagated data), else nullopt.
std::optional<std::vector<int64_t>> constantDimsOf(const SymShape& s, size_t count) {
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (const SymDim& d : s) {
    if (!d || !d->asConstant() || *d->asConstant() < 0) return std::nullopt;
    dims.push_back(*d->asConstant());
    n *= dims.back();
  }
  if (n != static_cast<int64_t>(count)) return std::nullopt;
  return dims;
}

/// Row-major strides of `dims`.
std::vector<int64_t> stridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) st[k - 1] = st[k] * dims[k];
  return st;
}

/// Data gathered from `d` (of row-major shape `inDims`) into an output of shape `outDims`: output
/// index (o_0, ..., o_r-1) reads input index (idx[0][o_0], ..., idx[r-1][o_r-1]) (Slice with
/// per-axis index lists, Transpose with the input strides permuted).
std::vector<SymDim> gatherData(const std::vector<SymDim>& d, const std::vector<int64_t>& outDims,
                               const std::vector<std::vector<int64_t>>& offsets) {
  int64_t total = 1;
  for (int64_t x : outDims) total *= x;
  std::vector<SymDim> r;
  r.reserve(static_cast<size_t>(std::max<int64_t>(total, 0)));
  std::vector<int64_t> o(outDims.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t src = 0;
    for (size_t k = 0; k < o.size(); ++k) src += offsets[k][static_cast<size_t>(o[k])];
    r.push_back(d[static_cast<size_t>(src)]);
    for (size_t k = o.size(); k-- > 0;) {
      if (++o[k] < outDims[k]) break;
      o[k] = 0;
    }
  }
  return r;
}


/// Axes from input `inputIndex` (when the version has them as an input) or attribute `name`.
std::optional<std::vector<int64_t>> axesOf(InferContext& c, bool fromInput, size_t inputIndex,
                                           std::string_view name = "axes") {
  if (fromInput) return c.hasInput(inputIndex) ? c.inputInts(inputIndex) : std::nullopt;
  return c.attrInts(name);
}

void shapeOp(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) {
    c.setOutput(0, DType::Int64, {std::nullopt});
    return;
  }
  auto rank = static_cast<int64_t>(s->size());
  int64_t start = c.attrInt("start", 0), end = c.attrInt("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<SymDim> d(s->begin() + start, s->begin() + end);
  c.setOutput(0, DType::Int64, {SymExpr(end - start)});
  c.setOutputData(0, std::move(d));
}

void sizeOp(InferContext& c) {
  c.setOutput(0, DType::Int64, {});
  if (auto s = c.inputShape(0))
    if (auto p = product(*s, 0, s->size())) c.setOutputData(0, {*p});
}

void setFromTensor(InferContext& c, const Tensor& t) {
  SymShape s;
  for (int64_t d : t.dims) s.push_back(SymExpr(d));
  c.setOutput(0, t.dtype(), s);
  if (dtypeIsInteger(t.dtype()) && dtypeBits(t.dtype()) >= 8 && t.numElements() && *t.numElements() <= 1024 &&
      t.expectedBytes() && t.raw.size() == *t.expectedBytes()) {
    std::vector<SymDim> d;
    for (int64_t x : t.toInt64s()) d.push_back(SymExpr(x));
    c.setOutputData(0, std::move(d));
  }
}

void constantOp(InferContext& c) {
  if (const Attribute* a = c.attr("value"); a && a->t) return setFromTensor(c, *a->t);
  if (const Attribute* a = c.attr("sparse_value"); a && a->sparseTensor) {
    SymShape s;
    for (int64_t d : a->sparseTensor->dims) s.push_back(SymExpr(d));
    return c.setOutput(0, a->sparseTensor->values.dtype(), s);
  }
  if (const Attribute* a = c.attr("value_int")) {
    c.setOutput(0, DType::Int64, {});
    return c.setOutputData(0, {SymExpr(a->i)});
  }
  if (const Attribute* a = c.attr("value_ints")) {
    c.setOutput(0, DType::Int64, {SymExpr(static_cast<int64_t>(a->ints.size()))});
    std::vector<SymDim> d;
    for (int64_t x : a->ints) d.push_back(SymExpr(x));
    return c.setOutputData(0, std::move(d));
  }
  if (c.attr("value_float")) return c.setOutput(0, DType::Float, {});
  if (const Attribute* a = c.attr("value_floats"))
    return c.setOutput(0, DType::Float, {SymExpr(static_cast<int64_t>(a->floats.size()))});
  if (c.attr("value_string")) return c.setOutput(0, DType::String, {});
  if (const Attribute* a = c.attr("value_strings"))
    return c.setOutput(0, DType::String, {SymExpr(static_cast<int64_t>(a->strings.size()))});
  c.fail("no value attribute");
}

/// Shape tensors longer than this (a rank, or a propagated shape's length) are not modelled:
/// the result is left unknown. Real ranks are below 10; a declared length of 2^40 (a fuzzer found
/// one) would otherwise allocate its rank.
constexpr int64_t kMaxShapeTensorLength = 1024;

/// The known length of 1-D input i (a shape tensor), within kMaxShapeTensorLength.
std::optional<size_t> shapeTensorLength(InferContext& c, size_t i) {
  auto s = c.inputShape(i);
  if (!s || s->size() != 1 || !(*s)[0] || !(*s)[0]->isConstant()) return std::nullopt;
  int64_t n = *(*s)[0]->asConstant();
  if (n < 0 || n > kMaxShapeTensorLength) return std::nullopt;
  return static_cast<size_t>(n);
}

/// The shape given by a 1-D shape tensor input: from its contents when known, else its length.
std::optional<SymShape> shapeFromInput(InferContext& c, size_t i) {
  if (const auto* d = c.inputData(i)) return SymShape(d->begin(), d->end());
  auto n = shapeTensorLength(c, i);
  if (!n) return std::nullopt;
  return SymShape(*n, std::nullopt);
}

void constantOfShape(InferContext& c) {
  DType dt = DType::Float;
  const Attribute* v = c.attr("value");
  if (v && v->t) dt = v->t->dtype();
  auto s = shapeFromInput(c, 0);
  if (!s) return c.setOutputDType(0, dt);
  c.setOutput(0, dt, *s);
  if (v && v->t && dtypeIsInteger(dt) && v->t->numElements() == 1) {
    if (auto n = product(*s, 0, s->size()); n && n->asConstant() && *n->asConstant() >= 0 && *n->asConstant() <= 1024)
      c.setOutputData(0, std::vector<SymDim>(static_cast<size_t>(*n->asConstant()), SymExpr(v->t->elementAsInt(0))));
  }
}

void reshape(InferContext& c) {
  std::optional<SymShape> target;
  if (c.sinceVersion() < 5) {
    if (auto a = c.attrInts("shape")) {
      target.emplace();
      for (int64_t x : *a) target->push_back(SymExpr(x));
    }
  } else {
    target = shapeFromInput(c, 1);
  }
  if (!target) return;
  bool allowZero = c.attrInt("allowzero", 0) != 0;
  auto in = c.inputShape(0);
  SymShape out = *target;
  int minusOne = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i] || !out[i]->isConstant()) continue;
    int64_t v = *out[i]->asConstant();
    if (v == 0 && !allowZero) {
      if (in && i >= in->size()) c.fail(fmt::format("shape entry {} is 0 but the input has rank {}", i, in->size()));
      out[i] = in ? (*in)[i] : std::nullopt;
    } else if (v == -1) {
      if (minusOne >= 0) c.fail("more than one -1 in the target shape");
      minusOne = static_cast<int>(i);
    } else if (v < 0) {
      c.fail(fmt::format("invalid target dimension {}", v));
    }
  }
  if (minusOne >= 0) {
    out[minusOne] = std::nullopt;
    SymDim total = in ? product(*in, 0, in->size()) : std::nullopt;
    SymExpr known(1);
    bool allKnown = true;
    for (size_t i = 0; i < out.size(); ++i)
      if (static_cast<int>(i) != minusOne) {
        if (out[i]) known = known * *out[i];
        else allKnown = false;
      }
    if (total && allKnown) {
      if (auto q = SymExpr::exactDiv(*total, known)) {
        out[minusOne] = q;
      } else if (total->isConstant() && known.isConstant()) {
        c.fail(fmt::format("cannot reshape {} elements into a shape with {} elements per -1", total->str(),
                           known.str()));
      }
    }
  } else if (in) {
    SymDim total = product(*in, 0, in->size());
    SymDim target2 = product(out, 0, out.size());
    if (total && target2 && total->isConstant() && target2->isConstant() && *total != *target2)
      c.fail(fmt::format("cannot reshape {} elements into {}", total->str(), target2->str()));
  }
  c.setOutput(0, c.inputDType(0), out);
  if (const auto* d = c.inputData(0)) c.setOutputData(0, *d);
}

void flatten(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  auto rank = static_cast<int64_t>(s->size());
  int64_t axis = c.attrInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) c.fail(fmt::format("axis {} is out of range for rank {}", c.attrInt("axis", 1), rank));
  c.setOutput(0, c.inputDType(0), {product(*s, 0, axis), product(*s, axis, rank)});
}

void transpose(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  std::vector<int64_t> perm;
  if (auto p = c.attrInts("perm")) perm = *p;
  else
    for (size_t i = s->size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  if (perm.size() != s->size()) c.fail(fmt::format("perm has {} entries for rank {}", perm.size(), s->size()));
  SymShape out;
  std::vector<bool> seen(s->size());
  for (int64_t p : perm) {
    int64_t a = c.normalizeAxis(p, static_cast<int64_t>(s->size()), "perm entry");
    if (seen[a]) c.fail(fmt::format("perm repeats axis {}", a));
    seen[a] = true;
    out.push_back((*s)[a]);
  }
  c.setOutput(0, c.inputDType(0), out);
  // Data through the permutation (torch's F.pad exports its pads as a [-1, 2] Reshape, a
  // reversing Slice and a Transpose before the Pad): output axis k walks input axis perm[k].
  if (const auto* d = c.inputData(0))
    if (auto dims = constantDimsOf(*s, d->size())) {
      const auto st = stridesOf(*dims);
      std::vector<int64_t> outDims;
      std::vector<std::vector<int64_t>> offsets;
      for (int64_t p : perm) {
        const auto a = static_cast<size_t>(c.normalizeAxis(p, static_cast<int64_t>(s->size())));
        outDims.push_back((*dims)[a]);
        std::vector<int64_t> off;
        for (int64_t j = 0; j < (*dims)[a]; ++j) off.push_back(j * st[a]);
        offsets.push_back(std::move(off));
      }
      c.setOutputData(0, gatherData(*d, outDims, offsets));
    }
}

void squeeze(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  auto rank = static_cast<int64_t>(s->size());
  bool fromInput = c.sinceVersion() >= 13;
  auto axes = axesOf(c, fromInput, 1);
  if (fromInput && c.hasInput(1) && !axes) return;
  std::vector<bool> drop(s->size());
  if (axes) {
    for (int64_t a : *axes) {
      int64_t k = c.normalizeAxis(a, rank);
      if ((*s)[k] && (*s)[k]->isConstant() && *(*s)[k]->asConstant() != 1)
        c.fail(fmt::format("cannot squeeze axis {} of size {}", k, (*s)[k]->str()));
      drop[k] = true;
    }
  } else {
    for (size_t k = 0; k < s->size(); ++k) {
      if (!(*s)[k] || !(*s)[k]->isConstant()) return;  // whether it is 1 is unknown
      drop[k] = *(*s)[k]->asConstant() == 1;
    }
  }
  SymShape out;
  for (size_t k = 0; k < s->size(); ++k)
    if (!drop[k]) out.push_back((*s)[k]);
  c.setOutput(0, c.inputDType(0), out);
  if (const auto* d = c.inputData(0)) c.setOutputData(0, *d);
}

void unsqueeze(InferContext& c) {
  auto s = c.inputShape(0);
  auto axes = axesOf(c, c.sinceVersion() >= 13, 1);
  if (!s || !axes) return;
  auto outRank = static_cast<int64_t>(s->size() + axes->size());
  std::vector<bool> inserted(outRank);
  for (int64_t a : *axes) {
    int64_t k = c.normalizeAxis(a, outRank);
    if (inserted[k]) c.fail(fmt::format("axis {} is repeated", k));
    inserted[k] = true;
  }
  SymShape out;
  size_t j = 0;
  for (int64_t k = 0; k < outRank; ++k) out.push_back(inserted[k] ? SymDim(SymExpr(1)) : (*s)[j++]);
  c.setOutput(0, c.inputDType(0), out);
  if (const auto* d = c.inputData(0)) c.setOutputData(0, *d);
}

/// Merges two dims that must be equal; fails on different sizes.
SymDim mergeEqual(InferContext& c, const SymDim& a, const SymDim& b, const std::string& what) {
  if (!a) return b;
  if (!b) return a;
  if (a->isConstant() && b->isConstant() && *a != *b) c.fail(fmt::format("{}: {} vs {}", what, a->str(), b->str()));
  return a->isConstant() ? a : b->isConstant() ? b : a;
}

void concat(InferContext& c) {
  std::optional<SymShape> out;
  int64_t axis = c.attrInt("axis", 0);
  int64_t k = 0;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    auto s = c.inputShape(i);
    if (!s) return;
    if (!out) {
      out = *s;
      k = c.normalizeAxis(axis, static_cast<int64_t>(s->size()));
      continue;
    }
    if (s->size() != out->size())
      c.fail(fmt::format("input {} has rank {}, expected {} like input 0", i, s->size(), out->size()));
    for (size_t d = 0; d < s->size(); ++d) {
      if (static_cast<int64_t>(d) == k)
        (*out)[d] = (*out)[d] && (*s)[d] ? SymDim(*(*out)[d] + *(*s)[d]) : std::nullopt;
      else
        (*out)[d] = mergeEqual(c, (*out)[d], (*s)[d], fmt::format("dimension {} of input {} differs", d, i));
    }
  }
  if (!out) return;
  c.setOutput(0, c.inputDType(0), *out);
  if (out->size() != 1) return;
  // Pieces of unknown contents but known length keep the known entries of the others in place
  // (a shape assembled from a Shape slice and an unknown dim still fixes the rest).
  std::vector<SymDim> d;
  bool anyKnown = false;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    if (const auto* x = c.inputData(i)) {
      d.insert(d.end(), x->begin(), x->end());
      anyKnown = true;
      continue;
    }
    auto n = shapeTensorLength(c, i);
    if (!n || d.size() + *n > static_cast<size_t>(kMaxShapeTensorLength)) return;
    d.insert(d.end(), *n, std::nullopt);
  }
  if (anyKnown) c.setOutputData(0, std::move(d));
}

void split(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  auto rank = static_cast<int64_t>(s->size());
  int64_t k = c.normalizeAxis(c.attrInt("axis", 0), rank);
  size_t n = c.numOutputs();
  if (n == 0) return;  // the checker reports a Split without outputs; nothing to split into
  std::optional<std::vector<int64_t>> sizes;
  if (c.sinceVersion() >= 13) {
    if (c.hasInput(1)) {
      sizes = c.inputInts(1);
      if (!sizes) {
        for (size_t i = 0; i < n; ++i) {
          SymShape o = *s;
          o[k] = std::nullopt;
          c.setOutput(i, c.inputDType(0), o);
        }
        return;
      }
    }
  } else {
    if (auto a = c.attrInts("split"); a && !a->empty()) sizes = a;
    else if (c.hasInput(1)) sizes = c.inputInts(1);
  }
  std::vector<SymDim> parts;
  if (sizes) {
    if (sizes->size() != n) c.fail(fmt::format("split has {} entries for {} outputs", sizes->size(), n));
    SymExpr sum(0);
    for (int64_t x : *sizes) {
      parts.push_back(SymExpr(x));
      sum = sum + SymExpr(x);
    }
    if ((*s)[k] && (*s)[k]->isConstant() && *(*s)[k] != sum)
      c.fail(fmt::format("split sizes sum to {} but axis {} has size {}", sum.str(), k, (*s)[k]->str()));
  } else if ((*s)[k]) {
    const SymExpr& d = *(*s)[k];
    auto count = static_cast<int64_t>(n);
    if (c.sinceVersion() >= 18) {
      SymExpr chunk = SymExpr::ceilDiv(d, count);
      for (size_t i = 0; i + 1 < n; ++i) parts.push_back(chunk);
      parts.push_back(d - chunk * SymExpr(count - 1));
    } else {
      if (d.isConstant() && *d.asConstant() % count != 0)
        c.fail(fmt::format("axis {} of size {} does not split evenly into {}", k, d.str(), count));
      parts.assign(n, SymExpr::floorDiv(d, count));
    }
  } else {
    parts.assign(n, std::nullopt);
  }
  for (size_t i = 0; i < n; ++i) {
    SymShape o = *s;
    o[k] = parts[i];
    c.setOutput(i, c.inputDType(0), o);
  }
}

/// A constant Slice bound at or beyond this magnitude means "to the end" (or "from the start")
/// of a symbolic dim: exporters write 1000000000 (tf2onnx), INT32_MAX or INT64_MAX for it, and no
/// dim is that large. Read as a literal, the bound would make a dim of a billion.
constexpr int64_t kSliceToEnd = 1000000000;

/// Length of a slice of a dimension of size `dim` (which may be symbolic, then assumed large
/// enough for non-negative constant bounds below kSliceToEnd).
SymDim sliceLength(const SymDim& dim, int64_t start, int64_t end, int64_t step) {
  if (!dim) return std::nullopt;
  if (auto d = dim->asConstant()) {
    int64_t n = *d;
    if (n == 0) return SymExpr(0);
    auto clampIdx = [&](int64_t x, bool isEnd) {
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, isEnd ? -1 : 0, n - 1);
    };
    int64_t s = clampIdx(start, false), e = clampIdx(end, true);
    // ceil(span / |step|) without overflow: a step near INT64_MAX (or INT64_MIN) takes one element.
    uint64_t mag = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    int64_t span = step > 0 ? e - s : s - e;
    return SymExpr(span > 0 ? static_cast<int64_t>(static_cast<uint64_t>(span - 1) / mag) + 1 : 0);
  }
  if (step <= 0) return std::nullopt;
  auto bound = [&](int64_t x) -> SymDim {
    if (x >= kSliceToEnd) return *dim;
    if (x < 0) return x <= -kSliceToEnd ? SymDim(SymExpr(0)) : SymDim(*dim + SymExpr(x));
    return SymExpr(x);
  };
  SymDim s = bound(start), e = bound(end);
  if (!s || !e) return std::nullopt;
  SymExpr len = SymExpr::ceilDiv(*e - *s, step);
  if (auto v = len.asConstant()) {
    // A constant length out of a symbolic dim (x[:2], x[-3:]) holds only when the dim is at least
    // that long, which nothing here proves: a data-dependent count (NonZero, NonMaxSuppression,
    // TopK on it) is often shorter, down to 0 (torchvision's detectors slice their detections to
    // [:100]). Unknown, as ONNX's own inference leaves it.
    if (*v <= 0) return SymExpr(0);
    return std::nullopt;
  }
  return len;
}

/// Length of a slice whose bounds are symbolic. Bounds that are provably non-negative
/// expressions are taken to lie within the dimension unless provably beyond it (then clamped to
/// it), the same trust sliceLength() gives constant bounds on a symbolic dim; the length is
/// end - start when provably non-negative, 0 when provably not positive, else unknown.
SymDim symbolicSliceLength(const SymDim& dim, const SymDim& start, const SymDim& end, int64_t step) {
  if (!dim || !start || !end || step <= 0) return std::nullopt;
  auto bound = [&](const SymExpr& x) -> SymDim {
    if (auto v = x.asConstant()) {
      if (*v >= kSliceToEnd) return *dim;
      if (*v < 0) return *v <= -kSliceToEnd ? SymDim(SymExpr(0)) : SymDim(*dim + x);
      if (dim->isConstant()) return SymExpr(std::min(*v, *dim->asConstant()));
      return x;
    }
    if (!x.provablyNonNegative()) return std::nullopt;  // a negative value would count from the end
    if ((x - *dim).provablyNonNegative()) return *dim;
    return x;
  };
  SymDim s = bound(*start), e = bound(*end);
  if (!s || !e) return std::nullopt;
  SymExpr len = *e - *s;
  if (len.provablyNonNegative()) return SymExpr::ceilDiv(len, step);
  if ((-len).provablyNonNegative()) return SymExpr(0);
  return std::nullopt;
}

void slice(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  auto rank = static_cast<int64_t>(s->size());
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (c.sinceVersion() < 10) {
    starts = c.attrInts("starts");
    ends = c.attrInts("ends");
    axes = c.attrInts("axes");
  } else {
    starts = c.inputInts(1);
    ends = c.inputInts(2);
    if (c.hasInput(3)) {
      axes = c.inputInts(3);
      if (!axes) {  // which axes change is unknown
        SymShape o(s->size());
        c.setOutput(0, c.inputDType(0), o);
        return;
      }
    }
    if (c.hasInput(4)) {
      steps = c.inputInts(4);
      if (!steps) steps = std::vector<int64_t>();
    }
  }
  SymShape out = *s;
  const auto* symStarts = c.sinceVersion() >= 10 ? c.inputData(1) : nullptr;
  const auto* symEnds = c.sinceVersion() >= 10 ? c.inputData(2) : nullptr;
  if ((!starts || !ends) && symStarts && symEnds && symStarts->size() == symEnds->size() &&
      (!axes || axes->size() == symStarts->size()) && (!steps || steps->size() == symStarts->size())) {
    // Bounds known as expressions of the input's dims (a mask sliced to [past, past+seq]).
    for (size_t i = 0; i < symStarts->size(); ++i) {
      int64_t k = c.normalizeAxis(axes ? (*axes)[i] : static_cast<int64_t>(i), rank);
      int64_t step = steps ? (*steps)[i] : 1;
      if (step == 0) c.fail("step is 0");
      const SymDim &st = (*symStarts)[i], &en = (*symEnds)[i];
      if (st && en && st->isConstant() && en->isConstant())
        out[k] = sliceLength((*s)[k], *st->asConstant(), *en->asConstant(), step);
      else
        out[k] = symbolicSliceLength((*s)[k], st, en, step);
    }
    c.setOutput(0, c.inputDType(0), out);
    return;
  }
  if (!starts || !ends) {
    size_t count = starts ? starts->size() : ends ? ends->size() : 0;
    if (!axes) {
      if (count == 0) {
        c.setOutput(0, c.inputDType(0), SymShape(s->size()));
        return;
      }
      axes.emplace();
      for (size_t i = 0; i < count; ++i) axes->push_back(static_cast<int64_t>(i));
    }
    for (int64_t a : *axes) out[c.normalizeAxis(a, rank)] = std::nullopt;
    c.setOutput(0, c.inputDType(0), out);
    return;
  }
  if (starts->size() != ends->size()) c.fail("starts and ends have different lengths");
  if (!axes) {
    axes.emplace();
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  }
  if (axes->size() != starts->size()) c.fail("axes and starts have different lengths");
  bool stepsKnown = !steps || steps->size() == starts->size();
  for (size_t i = 0; i < axes->size(); ++i) {
    int64_t k = c.normalizeAxis((*axes)[i], rank);
    int64_t step = steps && stepsKnown ? (*steps)[i] : 1;
    if (step == 0) c.fail("step is 0");
    out[k] = stepsKnown ? sliceLength((*s)[k], (*starts)[i], (*ends)[i], step) : std::nullopt;
  }
  c.setOutput(0, c.inputDType(0), out);
  // Data of any rank with static dims: each axis walks its own index list (start, clamped as
  // the output length above was, then step by step; untouched axes whole).
  const auto* d = c.inputData(0);
  if (!d || !stepsKnown) return;
  const auto inDims = constantDimsOf(*s, d->size());
  std::vector<int64_t> od;
  for (const SymDim& x : out) {
    if (!x || !x->asConstant()) return;
    od.push_back(*x->asConstant());
  }
  if (!inDims) return;
  const auto st = stridesOf(*inDims);
  std::vector<std::vector<int64_t>> offsets(static_cast<size_t>(rank));
  std::vector<bool> sliced(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes->size(); ++i) {
    const auto k = static_cast<size_t>(c.normalizeAxis((*axes)[i], rank));
    const int64_t n = (*inDims)[k], step = steps ? (*steps)[i] : 1;
    int64_t first = (*starts)[i] < 0 ? (*starts)[i] + n : (*starts)[i];
    first = step > 0 ? std::clamp<int64_t>(first, 0, n) : std::clamp<int64_t>(first, 0, std::max<int64_t>(n - 1, 0));
    offsets[k].clear();
    for (int64_t j = 0, idx = first; j < od[k]; ++j, idx += step) {
      if (idx < 0 || idx >= n) return;  // not where the length says: leave the data unknown
      offsets[k].push_back(idx * st[k]);
    }
    sliced[k] = true;
  }
  for (size_t k = 0; k < sliced.size(); ++k)
    if (!sliced[k]) {
      if (od[k] != (*inDims)[k]) return;
      for (int64_t j = 0; j < od[k]; ++j) offsets[k].push_back(j * st[k]);
    }
  c.setOutputData(0, gatherData(*d, od, offsets));
}

void gather(InferContext& c) {
  auto s = c.inputShape(0);
  auto idx = c.inputShape(1);
  if (!s || !idx) return;
  auto rank = static_cast<int64_t>(s->size());
  if (rank == 0) c.fail("data must have rank >= 1");
  int64_t k = c.normalizeAxis(c.attrInt("axis", 0), rank);
  SymShape out(s->begin(), s->begin() + k);
  out.insert(out.end(), idx->begin(), idx->end());
  out.insert(out.end(), s->begin() + k + 1, s->end());
  c.setOutput(0, c.inputDType(0), out);
  const auto* d = c.inputData(0);
  auto ids = c.inputInts(1);
  if (d && rank == 1 && ids) {
    auto n = static_cast<int64_t>(d->size());
    std::vector<SymDim> r;
    for (int64_t i : *ids) {
      if (i < -n || i >= n) c.fail(fmt::format("index {} is out of range for {} elements", i, n));
      r.push_back((*d)[i < 0 ? i + n : i]);
    }
    c.setOutputData(0, std::move(r));
  }
}

void gatherElements(InferContext& c) {
  if (auto s = c.inputShape(1)) c.setOutput(0, c.inputDType(0), *s);
}

void sameAsData(InferContext& c) {
  if (auto s = c.inputShape(0)) c.setOutput(0, c.inputDType(0), *s);
}

void expand(InferContext& c) {
  auto s = c.inputShape(0);
  auto target = shapeFromInput(c, 1);
  if (!s || !target) return;
  // A target dim of unknown value may be 1 (keeping the input's) or the size: known only when
  // the input's dim is 1.
  // An unknown target dim must be 1 or equal to the input's: a known input size other than 1
  // decides it, which is what broadcast() gives.
  SymShape out = c.broadcast(*s, *target);
  c.setOutput(0, c.inputDType(0), out);
}

void tile(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  const auto* reps = c.inputData(1);
  SymShape out(s->size());
  if (reps) {
    if (reps->size() != s->size()) c.fail(fmt::format("repeats has {} entries for rank {}", reps->size(), s->size()));
    for (size_t k = 0; k < s->size(); ++k)
      out[k] = (*s)[k] && (*reps)[k] ? SymDim(*(*s)[k] * *(*reps)[k]) : std::nullopt;
  }
  c.setOutput(0, c.inputDType(0), out);
}

void range(InferContext& c) {
  DType dt = c.inputDType(0);
  const auto* st = c.inputData(0);
  const auto* li = c.inputData(1);
  const auto* de = c.inputData(2);
  SymDim n;
  if (st && li && de && st->size() == 1 && li->size() == 1 && de->size() == 1 && (*st)[0] && (*li)[0] && (*de)[0]) {
    const SymExpr &a = *(*st)[0], &b = *(*li)[0], &d = *(*de)[0];
    if (auto step = d.asConstant()) {
      if (*step == 0) c.fail("delta is 0");
      SymExpr diff = b - a;
      if (auto cd = diff.asConstant()) {
        int64_t q = *step > 0 ? (*cd + *step - 1) / *step : (-*cd + -*step - 1) / -*step;
        if ((*step > 0 && *cd <= 0) || (*step < 0 && *cd >= 0)) q = 0;
        n = SymExpr(std::max<int64_t>(q, 0));
        if (auto a0 = a.asConstant(); a0 && q <= 1024) {
          std::vector<SymDim> v;
          for (int64_t i = 0; i < q; ++i) v.push_back(SymExpr(*a0 + i * *step));
          c.setOutput(0, dt, {n});
          c.setOutputData(0, std::move(v));
          return;
        }
      } else if (*step > 0) {
        n = SymExpr::ceilDiv(diff, *step);
      }
    }
  }
  c.setOutput(0, dt, {n});
}

void pad(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  auto rank = static_cast<int64_t>(s->size());
  std::optional<std::vector<int64_t>> pads =
      c.sinceVersion() < 11 ? c.attrInts(c.sinceVersion() < 2 ? "paddings" : "pads") : c.inputInts(1);
  std::vector<int64_t> axes;
  if (c.sinceVersion() >= 18 && c.hasInput(3)) {
    auto a = c.inputInts(3);
    if (!a) return c.setOutput(0, c.inputDType(0), SymShape(s->size()));
    for (int64_t x : *a) axes.push_back(c.normalizeAxis(x, rank));
  } else {
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  SymShape out = *s;
  if (!pads) {
    for (int64_t k : axes) out[k] = std::nullopt;
  } else {
    if (pads->size() != 2 * axes.size())
      c.fail(fmt::format("pads has {} entries, expected {}", pads->size(), 2 * axes.size()));
    for (size_t i = 0; i < axes.size(); ++i) {
      auto k = axes[i];
      if (out[k]) out[k] = *out[k] + SymExpr((*pads)[i] + (*pads)[i + axes.size()]);
    }
  }
  c.setOutput(0, c.inputDType(0), out);
}

void nonZero(InferContext& c) {
  auto r = c.inputRank(0);
  c.setOutput(0, DType::Int64, {r ? SymDim(SymExpr(*r)) : std::nullopt, std::nullopt});
}

void topK(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  int64_t k = c.normalizeAxis(c.attrInt("axis", -1), static_cast<int64_t>(s->size()));
  SymShape out = *s;
  if (c.sinceVersion() < 10) {
    out[k] = SymExpr(c.attrInt("k", 0));
  } else if (const auto* d = c.inputData(1); d && d->size() == 1) {
    out[k] = (*d)[0];
  } else {
    out[k] = std::nullopt;
  }
  c.setOutput(0, c.inputDType(0), out);
  c.setOutput(1, DType::Int64, out);
}


void gatherND(InferContext& c) {
  auto data = c.inputShape(0), idx = c.inputShape(1);
  if (!data || !idx) return;
  if (idx->empty()) c.fail("indices must have rank >= 1");
  int64_t batch = c.sinceVersion() >= 12 ? c.attrInt("batch_dims", 0) : 0;
  const SymDim& last = idx->back();
  if (!last || !last->isConstant()) return;  // the output rank depends on the unknown last dim
  int64_t k = *last->asConstant();
  auto rank = static_cast<int64_t>(data->size());
  if (batch < 0 || batch + k > rank)
    c.fail(fmt::format("indices address {} dimensions after {} batch dimensions of a rank-{} input", k, batch, rank));
  SymShape out(idx->begin(), idx->end() - 1);
  out.insert(out.end(), data->begin() + batch + k, data->end());
  c.setOutput(0, c.inputDType(0), out);
}

void oneHot(InferContext& c) {
  auto idx = c.inputShape(0);
  DType dt = c.inputDType(2);
  if (!idx) return c.setOutputDType(0, dt);
  auto rank = static_cast<int64_t>(idx->size()) + 1;
  int64_t axis = c.normalizeAxis(c.attrInt("axis", -1), rank);
  SymDim depth;
  if (const auto* d = c.inputData(1); d && d->size() == 1) depth = (*d)[0];
  if (const Tensor* t = c.inputConstant(1); !depth && t && t->numElements() == 1)
    depth = SymExpr(static_cast<int64_t>(t->elementAsDouble(0)));
  SymShape out = *idx;
  out.insert(out.begin() + axis, depth);
  c.setOutput(0, dt, out);
}

void compress(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  const Attribute* a = c.attr("axis");
  SymDim kept = c.freshDim();
  if (auto cond = c.inputInts(1))
    kept = SymExpr(static_cast<int64_t>(std::count_if(cond->begin(), cond->end(), [](int64_t x) { return x != 0; })));
  if (!a) return c.setOutput(0, c.inputDType(0), {kept});
  SymShape out = *s;
  out[c.normalizeAxis(a->i, static_cast<int64_t>(s->size()))] = kept;
  c.setOutput(0, c.inputDType(0), out);
}

void unique(InferContext& c) {
  auto s = c.inputShape(0);
  SymDim count = c.freshDim();  // how many unique values: Y, indices and counts share it
  const Attribute* a = c.attr("axis");
  if (!a) {
    c.setOutput(0, c.inputDType(0), {count});
    c.setOutput(2, DType::Int64, {s ? product(*s, 0, s->size()) : std::nullopt});
  } else if (s) {
    int64_t k = c.normalizeAxis(a->i, static_cast<int64_t>(s->size()));
    SymShape out = *s;
    out[k] = count;
    c.setOutput(0, c.inputDType(0), out);
    c.setOutput(2, DType::Int64, {(*s)[k]});
  } else {
    c.setOutputDType(0, c.inputDType(0));
    c.setOutput(2, DType::Int64, {std::nullopt});
  }
  c.setOutput(1, DType::Int64, {count});
  c.setOutput(3, DType::Int64, {count});
}

void eyeLike(InferContext& c) {
  DType dt = static_cast<DType>(c.attrInt("dtype", static_cast<int64_t>(c.inputDType(0))));
  auto s = c.inputShape(0);
  if (!s) return c.setOutputDType(0, dt);
  if (s->size() != 2) c.fail(fmt::format("input must have rank 2, got {}", s->size()));
  c.setOutput(0, dt, *s);
}

/// DepthToSpace and SpaceToDepth: the channels trade places with a blocksize x blocksize tile.
template <bool ToSpace>
void depthSpace(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  if (s->size() != 4) c.fail(fmt::format("input must have rank 4, got {}", s->size()));
  int64_t b = c.attrInt("blocksize", 0);
  if (b <= 0) c.fail("blocksize must be positive");
  auto div = [&](const SymDim& d, int64_t by) -> SymDim {
    if (!d) return std::nullopt;
    if (auto v = d->asConstant(); v && *v % by != 0)
      c.fail(fmt::format("dimension {} is not divisible by {}", *v, by));
    if (auto q = SymExpr::exactDiv(*d, SymExpr(by))) return q;
    return SymExpr::floorDiv(*d, by);
  };
  auto mul = [](const SymDim& d, int64_t by) -> SymDim { return d ? SymDim(*d * SymExpr(by)) : std::nullopt; };
  const SymShape& x = *s;
  if (ToSpace) c.setOutput(0, c.inputDType(0), {x[0], div(x[1], b * b), mul(x[2], b), mul(x[3], b)});
  else c.setOutput(0, c.inputDType(0), {x[0], mul(x[1], b * b), div(x[2], b), div(x[3], b)});
}

void centerCropPad(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  auto rank = static_cast<int64_t>(s->size());
  std::vector<int64_t> axes;
  if (auto a = c.attrInts("axes")) {
    for (int64_t x : *a) axes.push_back(c.normalizeAxis(x, rank));
  } else {
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  SymShape out = *s;
  const auto* d = c.inputData(1);
  if (d && d->size() != axes.size())
    c.fail(fmt::format("shape has {} entries for {} axes", d->size(), axes.size()));
  for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = d ? (*d)[i] : std::nullopt;
  c.setOutput(0, c.inputDType(0), out);
}

void det(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  if (s->size() < 2) c.fail(fmt::format("input must have rank >= 2, got {}", s->size()));
  c.setOutput(0, c.inputDType(0), SymShape(s->begin(), s->end() - 2));
}

/// Einsum: the equation's letters name dimensions; "..." stands for broadcast leading dims.
void einsum(InferContext& c) {
  std::string eq;
  for (char ch : c.attrString("equation")) if (ch != ' ') eq += ch;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.numInputs())
    c.fail(fmt::format("equation has {} operands for {} inputs", terms.size(), c.numInputs()));
  std::map<char, SymDim> letters;
  std::map<char, int> counts;
  std::optional<SymShape> ellipsis;
  bool shapesKnown = true;
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string& t = terms[i];
    size_t dots = t.find("...");
    std::string named = dots == std::string::npos ? t : t.substr(0, dots) + t.substr(dots + 3);
    for (char ch : named) ++counts[ch];
    auto s = c.inputShape(i);
    if (!s) { shapesKnown = false; continue; }
    if (dots == std::string::npos ? s->size() != named.size() : s->size() < named.size())
      c.fail(fmt::format("operand {} has rank {}, the equation term '{}' does not fit", i, s->size(), t));
    size_t ell = s->size() - named.size();
    size_t before = dots == std::string::npos ? named.size() : dots;
    for (size_t j = 0; j < named.size(); ++j) {
      const SymDim& d = (*s)[j < before ? j : j + ell];
      auto [it, fresh] = letters.try_emplace(named[j], d);
      if (!fresh) {
        if (!it->second) it->second = d;
        else if (d && d->asConstant() != 1 && it->second->asConstant() == 1) it->second = d;
      }
    }
    if (dots != std::string::npos) {
      SymShape e(s->begin() + static_cast<int64_t>(before), s->begin() + static_cast<int64_t>(before + ell));
      ellipsis = ellipsis ? c.broadcast(*ellipsis, e) : e;
    }
  }
  std::string out;
  bool hasEllipsisOut = false;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (size_t dots = out.find("..."); dots != std::string::npos) {
      hasEllipsisOut = true;
      out = out.substr(0, dots) + "." + out.substr(dots + 3);
    }
  } else {
    hasEllipsisOut = lhs.find("...") != std::string::npos;
    if (hasEllipsisOut) out = ".";
    for (const auto& [ch, n] : counts)
      if (n == 1) out += ch;
  }
  if (!shapesKnown) {
    if (!hasEllipsisOut) c.setOutput(0, c.inputDType(0), SymShape(out.size(), std::nullopt));
    return;
  }
  SymShape shape;
  for (char ch : out) {
    if (ch == '.') {
      if (ellipsis) shape.insert(shape.end(), ellipsis->begin(), ellipsis->end());
      continue;
    }
    auto it = letters.find(ch);
    if (it == letters.end()) c.fail(fmt::format("output letter '{}' appears in no input", ch));
    shape.push_back(it->second);
  }
  c.setOutput(0, c.inputDType(0), shape);
}

}  // namespace

void registerInferTensor(InferRegistry& r) {
  r.add({"", "Shape", 1, shapeOp});
  r.add({"", "Size", 1, sizeOp});
  r.add({"", "Constant", 1, constantOp});
  r.add({"", "ConstantOfShape", 1, constantOfShape});
  r.add({"", "Reshape", 1, reshape});
  r.add({"", "Flatten", 1, flatten});
  r.add({"", "Transpose", 1, transpose});
  r.add({"", "Squeeze", 1, squeeze});
  r.add({"", "Unsqueeze", 1, unsqueeze});
  r.add({"", "Concat", 1, concat});
  r.add({"", "Split", 1, split});
  r.add({"", "Slice", 1, slice});
  r.add({"", "Gather", 1, gather});
  r.add({"", "GatherElements", 1, gatherElements});
  for (std::string_view op : {"Scatter", "ScatterElements", "ScatterND"}) r.add({"", op, 1, sameAsData});
  r.add({"", "Expand", 1, expand});
  r.add({"", "Tile", 1, tile});
  r.add({"", "Range", 1, range});
  r.add({"", "Pad", 1, pad});
  r.add({"", "NonZero", 1, nonZero});
  r.add({"", "TopK", 1, topK});
  r.add({"", "GatherND", 1, gatherND});
  r.add({"", "OneHot", 1, oneHot});
  r.add({"", "Compress", 1, compress});
  r.add({"", "Unique", 1, unique});
  for (std::string_view op : {"ReverseSequence", "TensorScatter"}) r.add({"", op, 1, sameAsData});
  r.add({"", "EyeLike", 1, eyeLike});
  r.add({"", "DepthToSpace", 1, depthSpace<true>});
  r.add({"", "SpaceToDepth", 1, depthSpace<false>});
  r.add({"", "CenterCropPad", 1, centerCropPad});
  r.add({"", "Det", 1, det});
  r.add({"", "Einsum", 1, einsum});
}

}  // namespace onnxtool
