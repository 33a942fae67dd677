// kernels_broadcast.cpp: multidirectional broadcasting (BroadcastPlan, kernels.h), Where as a
// broadcast select, Expand as a broadcast copy (runs of copied or repeated elements),
// ConstantOfShape as a fill, and ScatterElements as a copy of the data then the updates written
// in index order (reduction none/add/mul/max/min). Detectors run them on shapes known only at
// run time (torchvision's multi-scale RoiAlign builds its result from a zero tensor, one
// ScatterElements per level, with an index tensor expanded to the pooled shape). Any element
// type for the copies (moved by size); the reductions on float.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "exec/cpu/kernels.h"
#include "lib/error.h"

namespace onnxtool::cpu {

BroadcastPlan::BroadcastPlan(const std::vector<std::vector<int64_t>>& inputs, const std::vector<int64_t>& out) {
  const size_t r = out.size(), k = inputs.size();
  std::vector<std::vector<int64_t>> st(k, std::vector<int64_t>(r, 0));
  for (size_t j = 0; j < k; ++j) {
    const std::vector<int64_t>& d = inputs[j];
    int64_t s = 1;
    for (size_t i = d.size(); i-- > 0;) {
      st[j][i + r - d.size()] = d[i] == 1 ? 0 : s;
      s *= d[i];
    }
  }
  strides.assign(k, {});
  total = 1;
  for (int64_t d : out) total *= d;
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;  // size-1 dims carry nothing
    if (!dims.empty()) {  // merge into the previous kept dim when every input steps alike
      const size_t last = dims.size() - 1;
      bool alike = true;
      for (size_t j = 0; j < k; ++j) alike &= strides[j][last] == st[j][i] * out[i];
      if (alike) {
        dims[last] *= out[i];
        for (size_t j = 0; j < k; ++j) strides[j][last] = st[j][i];
        continue;
      }
    }
    dims.push_back(out[i]);
    for (size_t j = 0; j < k; ++j) strides[j].push_back(st[j][i]);
  }
  if (dims.empty()) {
    dims = {1};
    for (auto& s : strides) s = {0};
  }
}

namespace {

/// Elements per task of the pool (a copy of 64 KiB is a few microseconds).
constexpr int64_t kGrain = 16384;

/// Copies `n` elements of `elem` bytes each.
inline void fillRun(uint8_t* y, const uint8_t* v, int64_t n, size_t elem) {
  switch (elem) {
    case 4: {
      uint32_t x;
      std::memcpy(&x, v, 4);
      std::fill(reinterpret_cast<uint32_t*>(y), reinterpret_cast<uint32_t*>(y) + n, x);
      return;
    }
    case 8: {
      uint64_t x;
      std::memcpy(&x, v, 8);
      std::fill(reinterpret_cast<uint64_t*>(y), reinterpret_cast<uint64_t*>(y) + n, x);
      return;
    }
    case 1: std::memset(y, *v, static_cast<size_t>(n)); return;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(y + static_cast<size_t>(i) * elem, v, elem);
  }
}

/// y = x broadcast to y's dims. Dims of size 1 in y are dropped and adjacent dims merged where x
/// steps through them alike (all copied, or all repeated), so that the innermost run is a memcpy
/// or a fill as long as it can be ([n,1,1,1] -> [n,256,7,7] is n fills of 12544).
/// Where(cond, x, y): out[i] = cond[i] ? x[i] : y[i], all three broadcast to out's shape, for any
/// element type of 1, 2, 4 or 8 bytes (selected as unsigned integers of that size: bit-exact, NaN
/// payloads included). Rows of the broadcast plan split over the pool.
template <typename T>
class WhereKernel : public CpuKernel {
 public:
  WhereKernel(const std::vector<int64_t>& c, const std::vector<int64_t>& x, const std::vector<int64_t>& y,
              const std::vector<int64_t>& out)
      : plan_({c, x, y}, out) {}
  void compute(const CpuComputeArgs& args) const override {
    const auto* c = static_cast<const uint8_t*>(args.inputs[0]);
    const T* x = static_cast<const T*>(args.inputs[1]);
    const T* y = static_cast<const T*>(args.inputs[2]);
    T* o = static_cast<T*>(args.outputs[0]);
    if (plan_.total == 0) return;
    const size_t r = plan_.dims.size();
    const int64_t inner = plan_.dims[r - 1];
    const int64_t sc = plan_.strides[0][r - 1], sx = plan_.strides[1][r - 1], sy = plan_.strides[2][r - 1];
    const int64_t rows = plan_.total / inner;
    parallelFor(args.pool, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t s, int64_t e) {
      int64_t idx[16] = {}, rem = s, off[3] = {0, 0, 0};
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rem % plan_.dims[d];
        rem /= plan_.dims[d];
        for (size_t k = 0; k < 3; ++k) off[k] += idx[d] * plan_.strides[k][d];
      }
      for (int64_t row = s; row < e; ++row) {
        const uint8_t* cr = c + off[0];
        const T* xr = x + off[1];
        const T* yr = y + off[2];
        T* orow = o + row * inner;
        if (sc == 1 && sx == 1 && sy == 1) {
          for (int64_t i = 0; i < inner; ++i) orow[i] = cr[i] ? xr[i] : yr[i];
        } else {
          for (int64_t i = 0; i < inner; ++i) orow[i] = cr[i * sc] ? xr[i * sx] : yr[i * sy];
        }
        for (size_t d = r - 1; d-- > 0;) {
          for (size_t k = 0; k < 3; ++k) off[k] += plan_.strides[k][d];
          if (++idx[d] < plan_.dims[d]) break;
          for (size_t k = 0; k < 3; ++k) off[k] -= idx[d] * plan_.strides[k][d];
          idx[d] = 0;
        }
      }
    });
  }

 private:
  BroadcastPlan plan_;
};

class ExpandKernel : public CpuKernel {
 public:
  ExpandKernel(const std::vector<int64_t>& in, const std::vector<int64_t>& out, size_t elem) : elem_(elem) {
    const size_t r = out.size();
    std::vector<int64_t> st(r, 0);
    int64_t s = 1;
    for (size_t i = in.size(); i-- > 0;) {
      st[i + r - in.size()] = in[i] == 1 ? 0 : s;
      s *= in[i];
    }
    total_ = 1;
    for (int64_t d : out) total_ *= d;
    for (size_t i = 0; i < r; ++i) {
      if (out[i] == 1) continue;
      if (!dims_.empty() && strides_.back() == st[i] * out[i]) {  // steps alike: merge
        dims_.back() *= out[i];
        strides_.back() = st[i];
        continue;
      }
      dims_.push_back(out[i]);
      strides_.push_back(st[i]);
    }
    if (dims_.empty()) dims_ = {1}, strides_ = {0};
  }
  void compute(const CpuComputeArgs& args) const override {
    if (total_ == 0) return;
    const auto* x = static_cast<const uint8_t*>(args.inputs[0]);
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    const size_t r = dims_.size();
    const int64_t inner = dims_[r - 1], sInner = strides_[r - 1], rows = total_ / inner;
    parallelFor(args.pool, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t s, int64_t e) {
      int64_t idx[kMaxRank] = {}, rem = s, xo = 0;
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rem % dims_[d];
        rem /= dims_[d];
        xo += idx[d] * strides_[d];
      }
      for (int64_t row = s; row < e; ++row) {
        uint8_t* out = y + static_cast<size_t>(row * inner) * elem_;
        const uint8_t* src = x + static_cast<size_t>(xo) * elem_;
        if (sInner == 0) fillRun(out, src, inner, elem_);
        else std::memcpy(out, src, static_cast<size_t>(inner) * elem_);
        for (size_t d = r - 1; d-- > 0;) {
          xo += strides_[d];
          if (++idx[d] < dims_[d]) break;
          xo -= idx[d] * strides_[d];
          idx[d] = 0;
        }
      }
    });
  }
  static constexpr size_t kMaxRank = 16;

 private:
  std::vector<int64_t> dims_, strides_;
  int64_t total_ = 0;
  size_t elem_;
};

/// y filled with one value (ConstantOfShape's `value`, 0.0f when absent).
class FillKernel : public CpuKernel {
 public:
  FillKernel(std::vector<uint8_t> value, int64_t n) : value_(std::move(value)), n_(n) {}
  void compute(const CpuComputeArgs& args) const override {
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    const size_t elem = value_.size();
    parallelFor(args.pool, n_, kGrain, [&](int64_t s, int64_t e) { fillRun(y + static_cast<size_t>(s) * elem, value_.data(), e - s, elem); });
  }

 private:
  std::vector<uint8_t> value_;
  int64_t n_;
};

enum class Reduction { None, Add, Mul, Max, Min };

/// y = data, then y[i with i[axis] = indices[i]] (reduce)= updates[i] for every i of the indices'
/// shape, in row-major order (duplicate indices: the last write wins, as in the reference).
/// Indices are checked first (in [-d, d), negative ones counting from the end): an out of range
/// one fails the node before anything is written.
template <typename Index>
class ScatterElementsKernel : public CpuKernel {
 public:
  ScatterElementsKernel(const Node& node, const std::vector<int64_t>& data, const std::vector<int64_t>& idx, int64_t axis,
                        Reduction red, size_t elem)
      : node_(node), dims_(idx), axis_(static_cast<size_t>(axis)), axisDim_(data[static_cast<size_t>(axis)]), red_(red), elem_(elem) {
    total_ = 1;
    for (int64_t d : data) total_ *= d;
    count_ = 1;
    for (int64_t d : idx) count_ *= d;
    outStrides_.assign(data.size(), 1);
    for (size_t i = data.size(); i-- > 1;) outStrides_[i - 1] = outStrides_[i] * data[i];
    if (axis == 0 && std::equal(idx.begin() + 1, idx.end(), data.begin() + 1)) slab_ = outStrides_[0];
  }
  void compute(const CpuComputeArgs& args) const override {
    const auto* data = static_cast<const uint8_t*>(args.inputs[0]);
    const Index* ind = static_cast<const Index*>(args.inputs[1]);
    const auto* upd = static_cast<const uint8_t*>(args.inputs[2]);
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    for (int64_t i = 0; i < count_; ++i) {
      const int64_t v = static_cast<int64_t>(ind[i]);
      if (v < -axisDim_ || v >= axisDim_)
        fail(ErrorKind::InvalidInput, "node '{}' (ScatterElements): index {} is out of range for axis {} of size {}", node_.displayName(), v,
             axis_, axisDim_);
    }
    if (y != data && total_)
      parallelFor(args.pool, total_ * static_cast<int64_t>(elem_), kGrain * 4, [&](int64_t s, int64_t e) {
        std::memcpy(y + s, data + s, static_cast<size_t>(e - s));
      });
    if (count_ == 0) return;
    if (slab_ > 0 && red_ == Reduction::None && scatterSlabs(ind, upd, y)) return;
    switch (red_) {
      case Reduction::None:
        if (elem_ == 4) return scatter<uint32_t>(ind, upd, y, [](uint32_t& a, uint32_t b) { a = b; });
        if (elem_ == 8) return scatter<uint64_t>(ind, upd, y, [](uint64_t& a, uint64_t b) { a = b; });
        if (elem_ == 2) return scatter<uint16_t>(ind, upd, y, [](uint16_t& a, uint16_t b) { a = b; });
        return scatter<uint8_t>(ind, upd, y, [](uint8_t& a, uint8_t b) { a = b; });
      case Reduction::Add: return scatter<float>(ind, upd, y, [](float& a, float b) { a += b; });
      case Reduction::Mul: return scatter<float>(ind, upd, y, [](float& a, float b) { a *= b; });
      case Reduction::Max:  // NaN propagates, as in the reference
        return scatter<float>(ind, upd, y, [](float& a, float b) { a = a != a || b != b ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b); });
      case Reduction::Min:
        return scatter<float>(ind, upd, y, [](float& a, float b) { a = a != a || b != b ? std::numeric_limits<float>::quiet_NaN() : std::min(a, b); });
    }
  }

 private:
  /// Axis 0 with indices of data's shape past it (torchvision's merge: an index per row,
  /// expanded over the row): when every index of each row is the same, the rows are copied
  /// whole, in order. False (nothing written) when some row's indices differ.
  bool scatterSlabs(const Index* ind, const uint8_t* upd, uint8_t* y) const {
    const int64_t rows = count_ / slab_;
    for (int64_t r = 0; r < rows; ++r) {
      const Index* ir = ind + r * slab_;
      const Index v = ir[0];
      bool same = true;
      for (int64_t j = 1; j < slab_; ++j) same &= ir[j] == v;
      if (!same) return false;
    }
    const size_t bytes = static_cast<size_t>(slab_) * elem_;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t v = static_cast<int64_t>(ind[r * slab_]);
      if (v < 0) v += axisDim_;
      std::memcpy(y + static_cast<size_t>(v) * bytes, upd + static_cast<size_t>(r) * bytes, bytes);
    }
    return true;
  }

  /// Elements of type E (bytes of elem_); `apply(y, u)` stores one update.
  template <typename E, typename F>
  void scatter(const Index* ind, const uint8_t* updBytes, uint8_t* yBytes, F apply) const {
    const E* upd = reinterpret_cast<const E*>(updBytes);
    E* y = reinterpret_cast<E*>(yBytes);
    const size_t r = dims_.size();
    int64_t idx[16] = {};
    int64_t base = 0;  // output offset of idx without the axis term
    const int64_t inner = dims_[r - 1], axisStride = outStrides_[axis_];
    const bool innerIsAxis = axis_ == r - 1;
    for (int64_t row = 0; row < count_ / inner; ++row) {
      const Index* ir = ind + row * inner;
      const E* ur = upd + row * inner;
      if (innerIsAxis) {
        for (int64_t j = 0; j < inner; ++j) {
          int64_t v = static_cast<int64_t>(ir[j]);
          apply(y[base + (v < 0 ? v + axisDim_ : v) * axisStride], ur[j]);
        }
      } else {
        for (int64_t j = 0; j < inner; ++j) {
          int64_t v = static_cast<int64_t>(ir[j]);
          apply(y[base + (v < 0 ? v + axisDim_ : v) * axisStride + j], ur[j]);
        }
      }
      for (size_t d = r - 1; d-- > 0;) {  // odometer over the rows
        if (d != axis_) base += outStrides_[d];
        if (++idx[d] < dims_[d]) break;
        if (d != axis_) base -= idx[d] * outStrides_[d];
        idx[d] = 0;
      }
    }
  }

  const Node& node_;
  std::vector<int64_t> dims_, outStrides_;
  size_t axis_;
  int64_t axisDim_, total_ = 0, count_ = 0;
  int64_t slab_ = 0;  ///< elements of one row along axis 0 when the indices' rows are data's (else 0)
  Reduction red_;
  size_t elem_;
};

bool hasRefAttributes(const Node& n) {
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return true;
  return false;
}

size_t elemSize(DType t) { return static_cast<size_t>(dtypeBits(t) / 8); }

}  // namespace

std::unique_ptr<CpuKernel> createWhere(const CpuNodeInfo& info) {
  if (info.inputs.size() != 3 || !info.hasInput(0) || !info.hasInput(1) || !info.hasInput(2)) return nullptr;
  const StaticTensorType &c = info.in(0), &x = info.in(1), &y = info.in(2), &o = info.out(0);
  if (c.dtype != DType::Bool || x.dtype != y.dtype || o.dtype != x.dtype || o.dims.size() > 16) return nullptr;
  switch (elemSize(x.dtype)) {
    case 1: return std::make_unique<WhereKernel<uint8_t>>(c.dims, x.dims, y.dims, o.dims);
    case 2: return std::make_unique<WhereKernel<uint16_t>>(c.dims, x.dims, y.dims, o.dims);
    case 4: return std::make_unique<WhereKernel<uint32_t>>(c.dims, x.dims, y.dims, o.dims);
    case 8: return std::make_unique<WhereKernel<uint64_t>>(c.dims, x.dims, y.dims, o.dims);
    default: return nullptr;
  }
}

std::unique_ptr<CpuKernel> createExpand(const CpuNodeInfo& info) {
  const auto& in = info.in(0).dims;
  const auto& out = info.out(0).dims;
  if (out.size() < in.size() || out.size() > ExpandKernel::kMaxRank || info.out(0).dtype != info.in(0).dtype) return nullptr;
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t o = out[i + out.size() - in.size()];
    if (in[i] != o && in[i] != 1) return nullptr;
  }
  return std::make_unique<ExpandKernel>(in, out, elemSize(info.in(0).dtype));
}

std::unique_ptr<CpuKernel> createConstantOfShape(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  if (hasRefAttributes(n)) return nullptr;
  const StaticTensorType& out = info.out(0);
  const size_t elem = elemSize(out.dtype);
  if (elem == 0) return nullptr;
  std::vector<uint8_t> value(elem, 0);  // float 0 when there is no value
  if (const Attribute* a = n.attr("value")) {
    if (!a->t || a->t->dtype() != out.dtype || a->t->raw.size() != elem) return nullptr;
    std::memcpy(value.data(), a->t->raw.data(), elem);
  } else if (out.dtype != DType::Float) {
    return nullptr;
  }
  return std::make_unique<FillKernel>(std::move(value), out.numElements());
}

std::unique_ptr<CpuKernel> createScatterElements(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  if (hasRefAttributes(n) || !info.hasInput(1) || !info.hasInput(2)) return nullptr;
  const auto& data = info.in(0).dims;
  const auto& idx = info.in(1);
  const auto& upd = info.in(2);
  const size_t r = data.size();
  if (r == 0 || r > 16 || idx.dims.size() != r || upd.dims != idx.dims || upd.dtype != info.in(0).dtype) return nullptr;
  if (info.out(0).dims != data) return nullptr;
  int64_t axis = n.attrInt("axis", 0);
  if (axis < -static_cast<int64_t>(r) || axis >= static_cast<int64_t>(r)) return nullptr;
  if (axis < 0) axis += static_cast<int64_t>(r);
  for (size_t i = 0; i < r; ++i)  // the indices' dims fit in data's (the reference kernel says what is wrong)
    if (idx.dims[i] > data[i] && static_cast<int64_t>(i) != axis) return nullptr;
  const std::string reduction = n.attrString("reduction", "none");
  Reduction red = Reduction::None;
  if (reduction == "add") red = Reduction::Add;
  else if (reduction == "mul") red = Reduction::Mul;
  else if (reduction == "max") red = Reduction::Max;
  else if (reduction == "min") red = Reduction::Min;
  else if (reduction != "none") return nullptr;
  if (red != Reduction::None && info.in(0).dtype != DType::Float) return nullptr;
  const size_t elem = elemSize(info.in(0).dtype);
  if (idx.dtype == DType::Int64) return std::make_unique<ScatterElementsKernel<int64_t>>(n, data, idx.dims, axis, red, elem);
  if (idx.dtype == DType::Int32) return std::make_unique<ScatterElementsKernel<int32_t>>(n, data, idx.dims, axis, red, elem);
  return nullptr;
}

}  // namespace onnxtool::cpu
