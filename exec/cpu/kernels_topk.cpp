// kernels_topk.cpp: TopK on float32 (detection heads keep the best proposals, samplers the best
// logits): per row along the axis, the k best (value, index) pairs by a partial sort whose order
// is the reference kernel's stable sort: NaN above every number, ties in index order, for
// largest and smallest alike. Rows split over the pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

class TopKKernel : public CpuKernel {
 public:
  TopKKernel(int64_t outer, int64_t dim, int64_t inner, int64_t k, bool largest)
      : outer_(outer), dim_(dim), inner_(inner), k_(k), largest_(largest) {}

  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const float*>(args.inputs[0]);
    auto* values = static_cast<float*>(args.outputs[0]);
    auto* indices = args.outputs.size() > 1 ? static_cast<int64_t*>(args.outputs[1]) : nullptr;
    if (k_ == 0) return;
    const int64_t rows = outer_ * inner_;
    parallelFor(args.pool, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(dim_, 1)), [&](int64_t b, int64_t e) {
      std::vector<std::pair<float, int64_t>> row(static_cast<size_t>(dim_));
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / inner_, in = r % inner_;
        const float* xr = x + o * dim_ * inner_ + in;
        for (int64_t j = 0; j < dim_; ++j) row[static_cast<size_t>(j)] = {xr[j * inner_], j};
        // a before b in the output: a ranks higher (NaN highest), equal ranks by index
        auto before = [&](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& c) {
          const bool an = std::isnan(a.first), cn = std::isnan(c.first);
          bool higher, lower;
          if (an || cn) {
            higher = largest_ ? an && !cn : !an && cn;
            lower = largest_ ? cn && !an : !cn && an;
          } else {
            higher = largest_ ? a.first > c.first : a.first < c.first;
            lower = largest_ ? a.first < c.first : a.first > c.first;
          }
          return higher || (!lower && a.second < c.second);
        };
        if (k_ < dim_) {
          std::nth_element(row.begin(), row.begin() + k_ - 1, row.end(), before);
          std::sort(row.begin(), row.begin() + k_, before);
        } else {
          std::sort(row.begin(), row.end(), before);
        }
        for (int64_t j = 0; j < k_; ++j) {
          const int64_t dst = (o * k_ + j) * inner_ + in;
          values[dst] = row[static_cast<size_t>(j)].first;
          if (indices) indices[dst] = row[static_cast<size_t>(j)].second;
        }
      }
    });
  }

 private:
  int64_t outer_, dim_, inner_, k_;
  bool largest_;
};

}  // namespace

std::unique_ptr<CpuKernel> createTopK(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  int64_t k;
  if (info.sinceVersion < 10) {
    k = n.attrInt("k", -1);
  } else {
    const TensorData* kt = info.constants.size() > 1 ? info.constants[1] : nullptr;
    if (!kt) return nullptr;
    auto v = kt->toInt64s();
    if (v.size() != 1) return nullptr;
    k = v[0];
  }
  // sorted = 0 allows any order; ours is the sorted one, as the reference kernel's
  const auto& x = info.in(0).dims;
  const int64_t r = static_cast<int64_t>(x.size());
  int64_t axis = n.attrInt("axis", -1);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return nullptr;
  const int64_t dim = x[static_cast<size_t>(axis)];
  if (k < 0 || k > dim) return nullptr;  // the reference kernel says why
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x[static_cast<size_t>(i)];
  for (int64_t i = axis + 1; i < r; ++i) inner *= x[static_cast<size_t>(i)];
  std::vector<int64_t> want = x;
  want[static_cast<size_t>(axis)] = k;
  if (info.out(0).dims != want || (info.outputs.size() > 1 && info.outputs[1] && info.out(1).dtype != DType::Int64)) return nullptr;
  return std::make_unique<TopKKernel>(outer, dim, inner, k, n.attrInt("largest", 1) != 0);
}

}  // namespace onnxtool::cpu
