// fuse_slices.cpp: `fuse-slices`: Slices (opset >= 10, constant starts/ends/axes/steps) that can
// be decided without knowing the input's dims:
// - a Slice taking every element (start 0, end "to the end", step 1 on each axis it names) is
//   its input;
// - Slice(Slice(x)) is one Slice of x. On different axes the two lists join; on one axis, with
//   non-negative starts and ends and positive steps, x[s1:e1:t1][s2:e2:t2] is
//   x[s1+s2*t1 : min(e1, s1+e2*t1) : t1*t2] for every dim size (Slice's clamping included: an
//   index k of the inner result is s1+k*t1, and k < min(e2, len1) exactly when s1+k*t1 is below
//   both s1+e2*t1 and the inner end). The inner Slice stays for its other readers, if any.
// "To the end" is an end of at least 2^62 (exporters write INT64_MAX); negative axes need the
// input's rank, negative starts/ends/steps are left alone.
#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

constexpr int64_t kToEnd = int64_t{1} << 62;

struct AxisSlice {
  int64_t start = 0, end = std::numeric_limits<int64_t>::max(), step = 1;
};

/// axis -> (start, end, step) of a Slice with constant, non-negative parameters; nullopt otherwise.
std::optional<std::map<int64_t, AxisSlice>> readSlice(const Node& n) {
  if (n.opType != "Slice" || !n.isDomain("") || !n.input(0) || !n.input(1) || !n.input(2)) return std::nullopt;
  auto ints = [](const Value* v) -> std::optional<std::vector<int64_t>> {
    const Tensor* t = v ? constantOf(v) : nullptr;
    if (!t || (t->dtype() != DType::Int64 && t->dtype() != DType::Int32)) return std::nullopt;
    return t->toInt64s();
  };
  auto starts = ints(n.input(1)), ends = ints(n.input(2));
  if (!starts || !ends || starts->size() != ends->size()) return std::nullopt;
  std::vector<int64_t> axes, steps(starts->size(), 1);
  if (n.input(3)) {
    auto a = ints(n.input(3));
    if (!a || a->size() != starts->size()) return std::nullopt;
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (n.input(4)) {
    auto s = ints(n.input(4));
    if (!s || s->size() != starts->size()) return std::nullopt;
    steps = *s;
  }
  int64_t rank = -1;
  if (n.input(0)->type().isTensor() && n.input(0)->type().shape.hasRank)
    rank = static_cast<int64_t>(n.input(0)->type().shape.rank());
  std::map<int64_t, AxisSlice> out;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i];
    if (axis < 0) {
      if (rank < 0) return std::nullopt;
      axis += rank;
    }
    if (axis < 0 || (*starts)[i] < 0 || (*ends)[i] < 0 || steps[i] <= 0 || out.count(axis)) return std::nullopt;
    out[axis] = {(*starts)[i], (*ends)[i] >= kToEnd ? std::numeric_limits<int64_t>::max() : (*ends)[i], steps[i]};
  }
  return out;
}

bool takesAll(const std::map<int64_t, AxisSlice>& s) {
  return std::all_of(s.begin(), s.end(), [](const auto& kv) {
    return kv.second.start == 0 && kv.second.step == 1 && kv.second.end == std::numeric_limits<int64_t>::max();
  });
}

int64_t satMul(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return std::numeric_limits<int64_t>::max();
  return a * b;
}

int64_t satAdd(int64_t a, int64_t b) {
  return b > std::numeric_limits<int64_t>::max() - a ? std::numeric_limits<int64_t>::max() : a + b;
}

/// outer applied to the result of inner, as one slice of inner's input.
std::map<int64_t, AxisSlice> compose(const std::map<int64_t, AxisSlice>& inner, const std::map<int64_t, AxisSlice>& outer) {
  std::map<int64_t, AxisSlice> r = inner;
  for (const auto& [axis, o] : outer) {
    auto it = r.find(axis);
    if (it == r.end()) {
      r[axis] = o;
      continue;
    }
    const AxisSlice i = it->second;
    AxisSlice c;
    c.start = satAdd(i.start, satMul(o.start, i.step));
    c.end = o.end == std::numeric_limits<int64_t>::max() ? i.end : std::min(i.end, satAdd(i.start, satMul(o.end, i.step)));
    c.step = satMul(i.step, o.step);
    it->second = c;
  }
  return r;
}

class FuseSlicesPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    if (ctx.opset() < 10) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      auto outer = readSlice(*n);
      if (!outer) continue;
      if (takesAll(*outer)) {
        if (!ctx.tryRewrite(fmt::format("remove Slice '{}' (it takes every element)", n->displayName()))) continue;
        if (!replaceValue(n->output(0), n->input(0))) continue;
        removeIfDead(n);
        ctx.count("slices-removed");
        changed = true;
        continue;
      }
      Node* in = n->input(0)->producer();
      auto inner = in && in->graph() == &g ? readSlice(*in) : std::nullopt;
      if (!inner) continue;
      if (!ctx.tryRewrite(fmt::format("merge Slice '{}' into Slice '{}'", in->displayName(), n->displayName()))) continue;
      auto merged = compose(*inner, *outer);
      std::vector<int64_t> starts, ends, axes, steps;
      for (const auto& [axis, s] : merged) {
        axes.push_back(axis);
        starts.push_back(s.start);
        ends.push_back(s.end);
        steps.push_back(s.step);
      }
      auto vec = [&](const std::vector<int64_t>& v, const std::string& what) {
        return addInitializer(g, Tensor::fromInt64s(n->displayName() + "_" + what, {static_cast<int64_t>(v.size())}, v),
                              n->output(0)->name() + "_" + what);
      };
      n->setInput(0, in->input(0));
      n->setInput(1, vec(starts, "starts"));
      n->setInput(2, vec(ends, "ends"));
      n->setInput(3, vec(axes, "axes"));
      n->setInput(4, vec(steps, "steps"));
      removeIfDead(in);
      ctx.count("slices-merged");
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseSlicesPass(const PassOptions&) { return std::make_unique<FuseSlicesPass>(); }

}  // namespace onnxtool
