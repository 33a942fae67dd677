// fuse_pad_into_conv.cpp: `fuse-pad-into-conv`: a constant-mode Pad that pads only spatial axes,
// by non-negative amounts, feeding Conv, AveragePool or MaxPool becomes part of that node's own
// `pads`. Conv and AveragePool pad with 0, so the Pad's value must be 0; AveragePool qualifies
// only when it counts padding in its divisor (count_include_pad=1, or no pads of its own so the
// flag can be set) and ceil_mode=0, since the Pad's zeros were counted before. MaxPool ignores its
// padding, which equals padding with -inf only while every window still holds a real element:
// Pad value -inf, no dilation, ceil_mode=0, each total pad smaller than the kernel, and the
// Indices output unread (indices would count the padded positions).
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class FusePadIntoConvPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    int64_t opset = ctx.opset("");
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::unordered_set<const Node*> removed;
    for (Node* n : order) {
      if (removed.count(n)) continue;  // removed as an earlier node's partner (unsorted graph)
      if (!n->isDomain("") || (n->opType != "Conv" && n->opType != "AveragePool" && n->opType != "MaxPool")) continue;
      bool isMax = n->opType == "MaxPool";
      Node* pad = producerOf(n->input(0), "Pad");
      if (!pad || pad->graph() != &g || !hasSingleUse(n->input(0))) continue;
      if (n->attrString("auto_pad", "NOTSET") != "NOTSET") continue;
      if (n->opType == "AveragePool") {
        if (opset < 7 || n->attrInt("ceil_mode", 0) != 0) continue;
        if (n->attrInt("count_include_pad", 0) != 1 && !allZero(n->attrInts("pads"))) continue;
      }
      if (isMax) {
        if (n->attrInt("ceil_mode", 0) != 0) continue;
        if (Value* idx = n->output(1); idx && (idx->hasUses() || idx->isGraphOutput())) continue;
        std::vector<int64_t> dil = n->attrInts("dilations");
        if (std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; })) continue;
      }
      auto padPads = padAmounts(*pad, opset, isMax ? -INFINITY : 0.0);
      if (!padPads || padPads->size() < 6 || padPads->size() % 2) continue;
      size_t rank = padPads->size() / 2;
      size_t spatial = rank - 2;
      // Batch and channel axes must stay as they are; amounts must be non-negative.
      bool ok = true;
      for (size_t i = 0; i < rank; ++i) {
        int64_t b = (*padPads)[i], e = (*padPads)[rank + i];
        if (b < 0 || e < 0 || (i < 2 && (b || e))) ok = false;
      }
      if (!ok) continue;
      std::vector<int64_t> pads = n->attrInts("pads");
      if (pads.empty()) pads.assign(2 * spatial, 0);
      if (pads.size() != 2 * spatial) continue;
      std::vector<int64_t> kernel = n->attrInts("kernel_shape");
      if (n->opType != "Conv" && kernel.size() != spatial) continue;
      if (isMax) {
        for (size_t i = 0; i < spatial; ++i)
          if (pads[i] + (*padPads)[2 + i] >= kernel[i] || pads[spatial + i] + (*padPads)[rank + 2 + i] >= kernel[i])
            ok = false;
        if (!ok) continue;
      }
      if (!ctx.tryRewrite("fuse Pad '" + pad->displayName() + "' into " + n->opType + " '" + n->displayName() + "'"))
        break;
      for (size_t i = 0; i < spatial; ++i) {
        pads[i] += (*padPads)[2 + i];
        pads[spatial + i] += (*padPads)[rank + 2 + i];
      }
      n->setAttr(Attribute::ofInts("pads", pads));
      if (n->opType == "AveragePool") n->setAttr(Attribute::ofInt("count_include_pad", 1));
      n->setInput(0, pad->input(0));
      if (removeIfDead(pad)) removed.insert(pad);
      changed = true;
    }
    return changed;
  }

 private:
  static bool allZero(const std::vector<int64_t>& v) {
    for (int64_t x : v)
      if (x) return false;
    return true;
  }

  /// The pads of Pad node `pad`, [begin of every axis..., end of every axis...], when it is a
  /// constant-mode pad with value `value` and constant pads (and axes); nullopt otherwise.
  static std::optional<std::vector<int64_t>> padAmounts(const Node& pad, int64_t opset, double value) {
    if (pad.attrString("mode", "constant") != "constant") return std::nullopt;
    if (opset < 11) {
      if (static_cast<double>(pad.attrFloat("value", 0.f)) != value) return std::nullopt;
      std::vector<int64_t> p = pad.attrInts(opset < 2 ? "paddings" : "pads");
      if (p.empty()) return std::nullopt;
      return p;
    }
    const Value* v = pad.input(2);
    if (v ? !isConstantScalar(v, value) : value != 0) return std::nullopt;
    const Tensor* t = constantOf(pad.input(1));
    if (!t || (t->dtype() != DType::Int64) || !constantAsDoubles(pad.input(1))) return std::nullopt;
    std::vector<int64_t> p = t->toInt64s();
    const Value* axesValue = opset >= 18 ? pad.input(3) : nullptr;
    if (!axesValue) return p;
    // Pad-18 axes: pads name only those axes; the data's rank places them.
    const Tensor* at = constantOf(axesValue);
    const TypeInfo& dt = pad.input(0)->type();
    if (!at || !constantAsDoubles(axesValue) || !dt.isTensor() || !dt.shape.hasRank) return std::nullopt;
    std::vector<int64_t> axes = at->toInt64s();
    int64_t rank = static_cast<int64_t>(dt.shape.rank());
    if (p.size() != 2 * axes.size()) return std::nullopt;
    std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (a < 0 || a >= rank || seen[static_cast<size_t>(a)]) return std::nullopt;
      seen[static_cast<size_t>(a)] = true;
      full[static_cast<size_t>(a)] = p[i];
      full[static_cast<size_t>(a + rank)] = p[axes.size() + i];
    }
    return full;
  }
};

}  // namespace

std::unique_ptr<Pass> createFusePadIntoConvPass(const PassOptions&) { return std::make_unique<FusePadIntoConvPass>(); }

}  // namespace onnxtool
