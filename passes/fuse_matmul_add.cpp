// fuse_matmul_add.cpp: `fuse-matmul-add`: MatMul of a rank-2 A (known from inferred shapes) by a
// rank-2 B, followed by Add of a bias that broadcasts to [M, N] without changing the output shape
// ([N], [1, N], [M, 1], [M, N] or a scalar), becomes one Gemm. The Gemm takes the MatMul's name
// and the Add's output.
// A linear layer on a 3-D (or higher) activation whose dims are all known ([batch, seq, K] by
// [K, N] plus a [N] or scalar bias, as static-shape transformer exports write it) becomes
// Reshape to [batch*seq, K], Gemm, Reshape back: the Reshapes cost nothing at run time, the
// layers reading one activation (Q, K and V) share one Reshape after CSE, and fuse-reshapes
// merges the one back with the Reshape to heads that usually follows. Symbolic leading dims keep
// the MatMul (the shape back would need Shape/Slice/Concat nodes), and so does an A made by
// DequantizeLinear (the Reshape would hide a QDQ island from integer MatMul fusions).
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
            !tc.shape.hasRank || ta.shape.rank() < 2 || tb.shape.rank() != 2 || tc.shape.rank() > 2)
          continue;
        if (ta.shape.rank() > 2) {
          // A QDQ island (DequantizeLinear -> MatMul) stays whole: integer MatMul fusions of
          // runtimes (ours included) match the DequantizeLinear feeding the MatMul directly.
          if (opset < 5 || producerOf(mm->input(0), "DequantizeLinear")) continue;
          Outcome r = fuseLinear3d(g, ctx, mm, add, bias);
          if (r == Outcome::Stopped) return changed;
          if (r == Outcome::NotApplicable) continue;
          changed = true;
          removed.insert(mm);
          break;
        }
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
  enum class Outcome { NotApplicable, Rewritten, Stopped };

  /// The rank > 2 case (see the file comment); Stopped when the rewrite budget (--bisect) ran out.
  static Outcome fuseLinear3d(Graph& g, PassContext& ctx, Node* mm, Node* add, Value* bias) {
    const TypeInfo& ta = mm->input(0)->type();
    const TypeInfo& tb = mm->input(1)->type();
    const TypeInfo& tc = bias->type();
    auto a = staticShape(mm->input(0));
    auto b = staticShape(mm->input(1));
    if (!a || !b || a->size() < 3 || b->size() != 2) return Outcome::NotApplicable;
    DType dt = ta.dtype();
    if ((dt != DType::Float && dt != DType::Double && dt != DType::Float16) || tb.elemType != ta.elemType ||
        tc.elemType != ta.elemType)
      return Outcome::NotApplicable;
    int64_t k = a->back(), n = (*b)[1];
    if ((*b)[0] != k) return Outcome::NotApplicable;
    // the bias may only broadcast along the last axis: [N], [1], or a scalar
    if (tc.shape.rank() == 2 || (tc.shape.rank() == 1 && !(tc.shape.dims[0].isValue() &&
                                                           (tc.shape.dims[0].value == n || tc.shape.dims[0].value == 1))))
      return Outcome::NotApplicable;
    int64_t m = 1;
    for (size_t i = 0; i + 1 < a->size(); ++i) m *= (*a)[i];
    if (m == 0 || n == 0 || k == 0) return Outcome::NotApplicable;
    if (!ctx.tryRewrite("fuse MatMul '" + mm->displayName() + "' + Add '" + add->displayName() +
                        "' on a " + std::to_string(a->size()) + "-D input into Reshape + Gemm + Reshape"))
      return Outcome::Stopped;
    auto shapeConst = [&](std::vector<int64_t> dims, const std::string& base) {
      Tensor t;
      t.dataType = static_cast<int32_t>(DType::Int64);
      t.dims = {static_cast<int64_t>(dims.size())};
      t.storage = Tensor::Storage::Raw;
      t.raw = Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(dims.data()), dims.size() * sizeof(int64_t)));
      return addInitializer(g, std::move(t), base);
    };
    Value* y = add->output(0);
    std::vector<int64_t> outDims(a->begin(), a->end() - 1);
    outDims.push_back(n);
    Node* flat = g.addNode("Reshape", {mm->input(0), shapeConst({m, k}, mm->name + "_2d_shape")},
                           {g.uniqueName(mm->input(0)->name() + "_2d")}, "", mm);
    flat->output(0)->setType(TypeInfo::tensor(dt, Shape::of({m, k})));
    Node* gemm = g.addNode("Gemm", {flat->output(0), mm->input(1), bias}, {g.uniqueName(y->name() + "_2d")}, "", add);
    gemm->name = mm->name;
    gemm->output(0)->setType(TypeInfo::tensor(dt, Shape::of({m, n})));
    Node* back = g.addNode("Reshape", {gemm->output(0), shapeConst(outDims, add->name + "_nd_shape")},
                           {g.uniqueName(y->name())}, "", add);
    back->output(0)->setType(y->type());
    bool ok = replaceValue(y, back->output(0));
    (void)ok;
    g.removeNode(add);
    g.removeNode(mm);
    return Outcome::Rewritten;
  }

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
