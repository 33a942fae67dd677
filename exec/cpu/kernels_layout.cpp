// kernels_layout.cpp: Transpose as a strided copy (rows over the pool), Gather (embedding lookup) as row copies,
// and ReduceMean over trailing axes (the LayerNorm statistics of exported transformers).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "exec/cpu/kernels.h"
#include "lib/error.h"

namespace onnxtool::cpu {

namespace {

/// out[i0..ir] = in[...] with the input's strides permuted; the innermost output dim runs as a
/// loop with one fixed input stride. Any element type (copied by size).
class TransposeKernel : public CpuKernel {
 public:
  TransposeKernel(std::vector<int64_t> outDims, std::vector<int64_t> inStrides, size_t elem)
      : outDims_(std::move(outDims)), inStrides_(std::move(inStrides)), elem_(elem) {
    total_ = 1;
    for (int64_t d : outDims_) total_ *= d;
  }
  void compute(const CpuComputeArgs& args) const override {
    if (total_ == 0) return;
    switch (elem_) {
      case 4: run<uint32_t>(args); break;
      case 8: run<uint64_t>(args); break;
      case 2: run<uint16_t>(args); break;
      default: run<uint8_t>(args); break;
    }
  }

 private:
  template <typename E>
  void run(const CpuComputeArgs& args) const {
    const E* x = static_cast<const E*>(args.inputs[0]);
    E* y = static_cast<E*>(args.outputs[0]);
    size_t r = outDims_.size();
    if (r == 0) {
      y[0] = x[0];
      return;
    }
    int64_t inner = outDims_[r - 1], s = inStrides_[r - 1];
    if (r > 16) return runSerial<E>(x, y);
    // Output rows split over the pool; each chunk starts its odometer at its first row.
    parallelFor(args.pool, total_ / inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
      int64_t idx[16] = {}, rem = b, off = 0;
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rem % outDims_[d];
        rem /= outDims_[d];
        off += idx[d] * inStrides_[d];
      }
      for (int64_t o = b; o < e; ++o) {
        E* yo = y + o * inner;
        if (s == 1) std::memcpy(yo, x + off, static_cast<size_t>(inner) * sizeof(E));
        else
          for (int64_t i = 0; i < inner; ++i) yo[i] = x[off + i * s];
        for (size_t d = r - 1; d-- > 0;) {
          off += inStrides_[d];
          if (++idx[d] < outDims_[d]) break;
          off -= idx[d] * inStrides_[d];
          idx[d] = 0;
        }
      }
    });
  }
  template <typename E>
  void runSerial(const E* x, E* y) const {
    size_t r = outDims_.size();
    int64_t inner = outDims_[r - 1], s = inStrides_[r - 1];
    std::vector<int64_t> idx(r, 0);
    for (int64_t o = 0; o < total_ / inner; ++o) {
      int64_t off = 0;
      for (size_t d = 0; d + 1 < r; ++d) off += idx[d] * inStrides_[d];
      E* yo = y + o * inner;
      for (int64_t i = 0; i < inner; ++i) yo[i] = x[off + i * s];
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < outDims_[d]) break;
        idx[d] = 0;
      }
    }
  }
  std::vector<int64_t> outDims_, inStrides_;
  size_t elem_;
  int64_t total_ = 0;
};

class ReduceMeanKernel : public CpuKernel {
 public:
  ReduceMeanKernel(int64_t outer, int64_t n) : outer_(outer), n_(n) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t o = 0; o < outer_; ++o) {
      float acc = 0.f;
      const float* xr = x + o * n_;
      for (int64_t i = 0; i < n_; ++i) acc += xr[i];
      y[o] = acc / static_cast<float>(n_);
    }
  }

 private:
  int64_t outer_, n_;
};

/// Gather: for each outer index and each index, one memcpy of `inner` elements of any size.
/// An index out of [-dim, dim) fails like the reference kernel (before anything is written).
class GatherKernel : public CpuKernel {
 public:
  GatherKernel(const Node& node, int64_t outer, int64_t dim, int64_t inner, int64_t count, size_t elem, bool idx64)
      : node_(node), outer_(outer), dim_(dim), rowBytes_(static_cast<size_t>(inner) * elem), count_(count), idx64_(idx64) {}
  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const uint8_t*>(args.inputs[0]);
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    auto index = [&](int64_t j) -> int64_t {
      int64_t i = idx64_ ? static_cast<const int64_t*>(args.inputs[1])[j] : static_cast<const int32_t*>(args.inputs[1])[j];
      if (i < -dim_ || i >= dim_)
        fail(ErrorKind::InvalidInput, "node '{}' ({}): Gather index {} is out of range, expected [{}, {})", node_.displayName(),
             node_.opType, i, -dim_, dim_);
      return i < 0 ? i + dim_ : i;
    };
    for (int64_t j = 0; j < count_; ++j) index(j);  // validate first
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t j = 0; j < count_; ++j)
        std::memcpy(y + static_cast<size_t>(o * count_ + j) * rowBytes_,
                    x + static_cast<size_t>(o * dim_ + index(j)) * rowBytes_, rowBytes_);
  }

 private:
  const Node& node_;
  int64_t outer_, dim_;
  size_t rowBytes_;
  int64_t count_;
  bool idx64_;
};

}  // namespace

std::unique_ptr<CpuKernel> createGather(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (!info.hasInput(1)) return nullptr;
  DType it = info.in(1).dtype;
  if (it != DType::Int64 && it != DType::Int32) return nullptr;
  const auto& x = info.in(0).dims;
  int64_t r = static_cast<int64_t>(x.size()), axis = n.attrInt("axis", 0);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return nullptr;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) {
    if (i < axis) outer *= x[static_cast<size_t>(i)];
    if (i > axis) inner *= x[static_cast<size_t>(i)];
  }
  size_t elem = static_cast<size_t>(dtypeBits(info.in(0).dtype) / 8);
  return std::make_unique<GatherKernel>(n, outer, x[static_cast<size_t>(axis)], inner, info.in(1).numElements(), elem,
                                        it == DType::Int64);
}

std::unique_ptr<CpuKernel> createTranspose(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  size_t r = x.size();
  std::vector<int64_t> perm = n.attrInts("perm");
  if (perm.empty()) {
    perm.resize(r);
    for (size_t i = 0; i < r; ++i) perm[i] = static_cast<int64_t>(r - 1 - i);
  }
  if (perm.size() != r) return nullptr;
  std::vector<int64_t> strides(r, 1);
  for (size_t i = r; i-- > 1;) strides[i - 1] = strides[i] * x[i];
  std::vector<int64_t> outDims(r), inStrides(r);
  for (size_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(r)) return nullptr;
    outDims[i] = x[static_cast<size_t>(perm[i])];
    inStrides[i] = strides[static_cast<size_t>(perm[i])];
  }
  if (outDims != info.out(0).dims) return nullptr;
  return std::make_unique<TransposeKernel>(outDims, inStrides, static_cast<size_t>(dtypeBits(info.in(0).dtype) / 8));
}

std::unique_ptr<CpuKernel> createReduceMean(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes;
  if (info.sinceVersion >= 18) {
    if (!info.hasInput(1)) return nullptr;  // no axes: all or none (noop_with_empty_axes): reference
    if (!info.constants.at(1)) return nullptr;
    axes = info.constants[1]->toInt64s();
  } else {
    axes = n.attrInts("axes");
  }
  if (axes.empty()) return nullptr;
  for (auto& a : axes) {
    if (a < 0) a += r;
    if (a < 0 || a >= r) return nullptr;
  }
  std::sort(axes.begin(), axes.end());
  // Only trailing axes (a contiguous block at the end): outer rows of n contiguous elements.
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != r - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return nullptr;
  int64_t outer = 1, cnt = 1;
  for (int64_t i = 0; i < r; ++i) (i < axes.front() ? outer : cnt) *= x[static_cast<size_t>(i)];
  if (cnt == 0) return nullptr;  // mean of nothing: the reference kernel's NaN
  return std::make_unique<ReduceMeanKernel>(outer, cnt);
}

}  // namespace onnxtool::cpu
