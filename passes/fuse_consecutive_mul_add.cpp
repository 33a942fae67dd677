// fuse_consecutive_mul_add.cpp: `fuse-consecutive-mul-add`: (x * a) * b becomes x * (a*b) and
// (x + a) + b becomes x + (a+b) when a and b are floating constants. The combined constant is
// computed in double and rounded once. Broadcasting is associative, so the output shape stays;
// the fusion is skipped when the combined constant would be larger than both (e.g. [n,1] with
// [1,n]). The second node keeps its name and output; the first goes.
#include <algorithm>
#include <unordered_set>

#include "passes/fusion_arith.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

/// Numpy broadcast of two static shapes, or nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcastDims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

/// Index into `dims` (right-aligned in `out`) of flat output index `flat`.
size_t sourceIndex(size_t flat, const std::vector<int64_t>& out, const std::vector<int64_t>& dims) {
  size_t idx = 0, stride = 1;
  for (size_t i = out.size(); i-- > 0;) {
    size_t coord = flat % static_cast<size_t>(out[i]);
    flat /= static_cast<size_t>(out[i]);
    size_t k = i + dims.size();
    if (k < out.size()) continue;  // axis absent from dims
    size_t d = static_cast<size_t>(dims[k - out.size()]);
    idx += (d == 1 ? 0 : coord) * stride;
    stride *= d;
  }
  return idx;
}

class FuseConsecutiveMulAddPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    // Before opset 7 Add and Mul broadcast only with broadcast=1 and an axis: other semantics.
    if (ctx.opset("") < 7) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::unordered_set<const Node*> removed;
    for (Node* second : order) {
      if (removed.count(second)) continue;  // removed as an earlier node's partner (unsorted graph)
      if ((second->opType != "Mul" && second->opType != "Add") || !second->isDomain("") || second->inputs().size() != 2)
        continue;
      for (int side = 0; side < 2; ++side) {
        Value* mid = second->input(static_cast<size_t>(side));
        Node* first = producerOf(mid, second->opType);
        if (!first || first->graph() != &g || !hasSingleUse(mid) || first->inputs().size() != 2) continue;
        auto b = floatConstantOf(second->input(static_cast<size_t>(1 - side)));
        if (!b) continue;
        int firstConst = floatConstantOf(first->input(1)) ? 1 : floatConstantOf(first->input(0)) ? 0 : -1;
        if (firstConst < 0) continue;
        Value* x = first->input(static_cast<size_t>(1 - firstConst));
        auto a = floatConstantOf(first->input(static_cast<size_t>(firstConst)));
        if (a->dtype != b->dtype) continue;
        auto dims = broadcastDims(a->dims, b->dims);
        if (!dims) continue;
        size_t count = 1;
        for (int64_t d : *dims) count *= static_cast<size_t>(d);
        if (count > std::max(a->values.size(), b->values.size())) continue;
        if (!ctx.tryRewrite("fuse " + first->opType + " '" + first->displayName() + "' + " + second->opType + " '" +
                            second->displayName() + "'"))
          return changed;
        bool mul = second->opType == "Mul";
        std::vector<double> c(count);
        for (size_t i = 0; i < count; ++i) {
          double av = a->values[sourceIndex(i, *dims, a->dims)], bv = b->values[sourceIndex(i, *dims, b->dims)];
          c[i] = mul ? av * bv : av + bv;
        }
        Value* cv = addInitializer(g, tensorFromDoubles(b->dtype, *dims, c),
                                   second->input(static_cast<size_t>(1 - side))->name());
        second->setInput(static_cast<size_t>(side), x);
        second->setInput(static_cast<size_t>(1 - side), cv);
        g.removeNode(first);
        removed.insert(first);
        changed = true;
        break;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseConsecutiveMulAddPass(const PassOptions&) {
  return std::make_unique<FuseConsecutiveMulAddPass>();
}

}  // namespace onnxtool
