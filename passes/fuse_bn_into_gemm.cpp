// fuse_bn_into_gemm.cpp: `fuse-bn-into-gemm`: Gemm with a constant B followed by an
// inference-mode BatchNormalization over its [M, N] output (channels = N) becomes the Gemm alone:
// column j of op(B) is scaled by s_j = scale_j/sqrt(var_j+eps) and the new C (beta = 1) is
// beta*C*s + (B_bn - mean*s). The Gemm keeps its name and takes over the BN's output.
#include "passes/fusion_arith.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class FuseBnIntoGemmPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    // Gemm before 7 broadcasts C only with broadcast=1; not worth the case.
    if (ctx.opset("") < 7) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* bn : order) {
      if (bn->opType != "BatchNormalization" || !bn->isDomain("")) continue;
      Node* gemm = producerOf(bn->input(0), "Gemm");
      if (!gemm || gemm->graph() != &g || !hasSingleUse(bn->input(0))) continue;
      auto b = floatConstantOf(gemm->input(1));
      if (!b || b->dims.size() != 2) continue;
      bool transB = gemm->attrInt("transB", 0) != 0;
      int64_t n = transB ? b->dims[0] : b->dims[1];
      int64_t k = transB ? b->dims[1] : b->dims[0];
      std::optional<FloatConstant> c;
      if (gemm->input(2)) {
        c = floatConstantOf(gemm->input(2));
        if (!c || c->dtype != b->dtype || !columnBroadcast(c->dims, n)) continue;
      }
      auto affine = bnAffine(*bn, ctx.opset(""), n);
      if (!affine) continue;
      if (!ctx.tryRewrite("fuse Gemm '" + gemm->displayName() + "' + BatchNormalization '" + bn->displayName() + "'"))
        break;
      // op(B)[kk, j] is B[kk, j], or B[j, kk] with transB.
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t j = 0; j < n; ++j)
          b->values[static_cast<size_t>(transB ? j * k + kk : kk * n + j)] *= affine->scale[static_cast<size_t>(j)];
      // New C: [rows, N], rows from C's first dim when it has one (it then equals M).
      int64_t rows = c && c->dims.size() == 2 ? c->dims[0] : 1;
      double beta = gemm->attrFloat("beta", 1.f);
      std::vector<double> newC(static_cast<size_t>(rows * n));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double cv = 0;
          if (c) cv = c->values[static_cast<size_t>(c->values.size() == 1 ? 0
                                                     : c->dims.back() == 1 ? r
                                                     : c->dims.size() == 2 ? r * n + j : j)];
          size_t js = static_cast<size_t>(j);
          newC[static_cast<size_t>(r * n + j)] = beta * cv * affine->scale[js] + affine->shift[js];
        }
      std::vector<int64_t> cDims = rows == 1 && (!c || c->dims.size() < 2) ? std::vector<int64_t>{n}
                                                                             : std::vector<int64_t>{rows, n};
      gemm->setInput(1, addInitializer(g, tensorFromDoubles(b->dtype, b->dims, b->values), gemm->input(1)->name()));
      std::string cName = gemm->input(2) ? gemm->input(2)->name() : gemm->input(1)->name() + "_bias";
      gemm->setInput(2, addInitializer(g, tensorFromDoubles(b->dtype, cDims, newC), cName));
      gemm->setAttr(Attribute::ofFloat("beta", 1.f));
      Value* y = bn->output(0);
      Value* x = gemm->output(0);
      x->setType(y->type());
      bool ok = replaceValue(y, x);  // x has one use (the BN) and a producer: it can take y's name
      (void)ok;
      g.removeNode(bn);
      changed = true;
    }
    return changed;
  }

 private:
  /// Whether constant C of dims `d` broadcasts to [M, n] (scalar, [n], [1|M, 1|n]).
  static bool columnBroadcast(const std::vector<int64_t>& d, int64_t n) {
    if (d.size() > 2) return false;
    if (d.empty()) return true;
    return d.back() == 1 || d.back() == n;
  }
};

}  // namespace

std::unique_ptr<Pass> createFuseBnIntoGemmPass(const PassOptions&) { return std::make_unique<FuseBnIntoGemmPass>(); }

}  // namespace onnxtool
