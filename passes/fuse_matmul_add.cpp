// fuse_matmul_add.cpp: `fuse-matmul-add`: MatMul of a rank-2 A (known from inferred shapes) by a
// rank-2 B, followed by Add of a bias that broadcasts to [M, N] without changing the output shape
// ([N], [1, N], [M, 1], [M, N] or a scalar), becomes one Gemm. Other ranks keep the MatMul: Gemm
// is 2-D only. The Gemm takes the MatMul's name and the Add's output.
#include <unordered_set>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class FuseMatmulAddPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    // Gemm-7 is the first with a broadcasting C; bfloat16 needs Gemm-13.
    int64_t opset = ctx.opset("");
    if (opset < 7 || !shapesAreStable(g)) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::unordered_set<const Node*> removed;
    for (Node* add : order) {
      if (removed.count(add)) continue;  // removed as an earlier node's partner (unsorted graph)
      if (add->opType != "Add" || !add->isDomain("") || add->inputs().size() != 2) continue;
      for (int side = 0; side < 2; ++side) {
        Value* mmOut = add->input(static_cast<size_t>(side));
        Value* bias = add->input(static_cast<size_t>(1 - side));
        Node* mm = producerOf(mmOut, "MatMul");
        if (!mm || mm->graph() != &g || !hasSingleUse(mmOut) || !bias) continue;
        const TypeInfo& ta = mm->input(0)->type();
        const TypeInfo& tb = mm->input(1)->type();
        const TypeInfo& tc = bias->type();
        if (!ta.isTensor() || !tb.isTensor() || !tc.isTensor() || !ta.shape.hasRank || !tb.shape.hasRank ||
            !tc.shape.hasRank || ta.shape.rank() != 2 || tb.shape.rank() != 2 || tc.shape.rank() > 2)
          continue;
        DType dt = ta.dtype();
        bool typeOk = dt == DType::Float || dt == DType::Double || dt == DType::Float16 ||
                      (dt == DType::BFloat16 && opset >= 13);
        if (!typeOk || tb.elemType != ta.elemType || tc.elemType != ta.elemType) continue;
        if (!biasFits(tc.shape, ta.shape.dims[0], tb.shape.dims[1])) continue;
        if (!ctx.tryRewrite("fuse MatMul '" + mm->displayName() + "' + Add '" + add->displayName() + "' into Gemm"))
          return changed;
        Value* y = add->output(0);
        Node* gemm = g.addNode("Gemm", {mm->input(0), mm->input(1), bias}, {g.uniqueName(y->name())}, "", add);
        gemm->name = mm->name;
        gemm->output(0)->setType(y->type());
        bool ok = replaceValue(y, gemm->output(0));  // a fresh node output can always take y's name
        (void)ok;
        g.removeNode(add);
        g.removeNode(mm);
        removed.insert(mm);
        changed = true;
        break;
      }
    }
    return changed;
  }

 private:
  /// Whether a bias of shape `c` broadcasts to [m, n] (Gemm's unidirectional broadcast) and Add's
  /// result had shape [m, n]: each dim is 1 or equal to its counterpart, which must then be known.
  static bool biasFits(const Shape& c, const Dim& m, const Dim& n) {
    auto fits = [](const Dim& d, const Dim& target) {
      if (d.isValue() && d.value == 1) return true;
      if (d.isValue() && target.isValue()) return d.value == target.value;
      return d.isParam() && target.isParam() && d.param == target.param;
    };
    if (c.rank() == 0) return true;
    if (c.rank() == 1) return fits(c.dims[0], n);
    return fits(c.dims[0], m) && fits(c.dims[1], n);
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseMatmulAddPass(const PassOptions&) { return std::make_unique<FuseMatmulAddPass>(); }

}  // namespace onnxtool
