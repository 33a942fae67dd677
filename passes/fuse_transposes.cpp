// fuse_transposes.cpp: `fuse-transposes`: Transpose(Transpose(x, p1), p2) becomes one Transpose
// with the composed permutation (none at all when that is the identity); a 2-D Transpose feeding
// Gemm is absorbed into transA/transB; MatMul of 2-D operands with a transposed operand becomes
// Gemm with transA/transB (except a MatMul read only by an Add: fuse-matmul-add makes that a Gemm
// with the bias, which then absorbs the Transpose here). Transposes of constants are left to
// fold-constants, which folds them into the data.
#include <numeric>
#include <unordered_set>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

/// Rank of `v` when inferred shapes know it and may be trusted, else -1.
int64_t knownRank(const Value* v, bool stable) {
  if (!stable || !v || !v->type().isTensor() || !v->type().shape.hasRank) return -1;
  return static_cast<int64_t>(v->type().shape.rank());
}

bool isPermutation(const std::vector<int64_t>& p) {
  std::vector<bool> seen(p.size(), false);
  for (int64_t i : p) {
    if (i < 0 || i >= static_cast<int64_t>(p.size()) || seen[static_cast<size_t>(i)]) return false;
    seen[static_cast<size_t>(i)] = true;
  }
  return true;
}

bool isIdentity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

/// The permutation of Transpose `t`: its perm, or the reversal (the default) of rank `rank`.
/// nullopt when absent and the rank is unknown (rank < 0), or when perm is not a permutation.
std::optional<std::vector<int64_t>> permOf(const Node& t, int64_t rank) {
  if (t.attr("perm")) {
    std::vector<int64_t> p = t.attrInts("perm");
    if (!isPermutation(p) || (rank >= 0 && static_cast<int64_t>(p.size()) != rank)) return std::nullopt;
    return p;
  }
  if (rank < 0) return std::nullopt;
  std::vector<int64_t> p(static_cast<size_t>(rank));
  std::iota(p.rbegin(), p.rend(), 0);
  return p;
}

/// The Transpose producing `v` when it swaps the two axes of a 2-D non-constant tensor and `v`
/// has no other reader; else nullptr.
Node* singleUse2dTranspose(const Value* v, bool stable) {
  Node* t = producerOf(v, "Transpose");
  if (!t || !hasSingleUse(v) || !t->input(0) || constantOf(t->input(0))) return nullptr;
  int64_t rank = knownRank(t->input(0), stable);
  auto p = permOf(*t, t->attr("perm") ? 2 : rank);
  return p && *p == std::vector<int64_t>{1, 0} ? t : nullptr;
}

class FuseTransposesPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    stable_ = shapesAreStable(g);
    changedBeforeStop_ = false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::unordered_set<Node*> removed;
    for (Node* n : order) {
      if (removed.count(n) || !n->isDomain("")) continue;
      int r = 0;
      if (n->opType == "Transpose") r = fuseTransposePair(g, *n, ctx, removed);
      else if (n->opType == "Gemm") r = absorbIntoGemm(g, *n, ctx, removed);
      else if (n->opType == "MatMul") r = matMulToGemm(g, *n, ctx, removed);
      if (r < 0) {  // --bisect budget spent
        changed |= changedBeforeStop_;
        break;
      }
      changed |= r > 0;
    }
    return changed;
  }

 private:
  // Each rule returns 1 when it rewrote, 0 when it did not apply, -1 when tryRewrite refused.

  int fuseTransposePair(Graph& g, Node& t2, PassContext& ctx, std::unordered_set<Node*>& removed) {
    Value* mid = t2.input(0);
    Node* t1 = producerOf(mid, "Transpose");
    if (!t1 || !t1->input(0) || !t2.output(0) || constantOf(t1->input(0))) return 0;
    Value* x = t1->input(0);
    Value* y = t2.output(0);
    std::vector<int64_t> q;
    if (!t1->attr("perm") && !t2.attr("perm")) {
      // Reversing twice is the identity whatever the rank; q stays empty.
    } else {
      int64_t rank = t1->attr("perm") ? static_cast<int64_t>(t1->attrInts("perm").size())
                                      : static_cast<int64_t>(t2.attrInts("perm").size());
      auto p1 = permOf(*t1, rank);
      auto p2 = permOf(t2, rank);
      if (!p1 || !p2) return 0;
      // y[i] = mid[p2[i]] = x[p1[p2[i]]]
      for (int64_t i : *p2) q.push_back((*p1)[static_cast<size_t>(i)]);
    }
    bool singleUse = hasSingleUse(mid);
    if (isIdentity(q)) {
      bool canRename = !y->isGraphOutput() || (x->producer() && x->graph() == &g && !x->isGraphOutput() && !x->isGraphInput());
      if (canRename) {
        if (!ctx.tryRewrite("remove Transpose '" + t1->displayName() + "' + Transpose '" + t2.displayName() + "' (identity)"))
          return -1;
        replaceValue(y, x);
        g.removeNode(&t2);
        removed.insert(&t2);
        if (removeIfDead(t1)) removed.insert(t1);
        return 1;
      }
      if (!singleUse) return 0;
      // y's name cannot move to x: keep one Transpose with the identity permutation.
      for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int64_t>(i);
      if (q.empty()) return 0;  // rank unknown: no perm to write
    } else if (!singleUse) {
      return 0;  // t1 stays for its other readers: merging would not remove a node
    }
    if (!ctx.tryRewrite("fuse Transpose '" + t1->displayName() + "' + Transpose '" + t2.displayName() + "'")) return -1;
    t2.setInput(0, x);
    t2.setAttr(Attribute::ofInts("perm", q));
    if (removeIfDead(t1)) removed.insert(t1);
    return 1;
  }

  int absorbIntoGemm(Graph&, Node& gemm, PassContext& ctx, std::unordered_set<Node*>& removed) {
    int done = 0;
    for (int idx = 0; idx < 2; ++idx) {
      Node* t = singleUse2dTranspose(gemm.input(static_cast<size_t>(idx)), stable_);
      if (!t) continue;
      const char* attrName = idx == 0 ? "transA" : "transB";
      if (!ctx.tryRewrite("fuse Transpose '" + t->displayName() + "' into Gemm '" + gemm.displayName() + "' " + attrName)) {
        changedBeforeStop_ |= done > 0;
        return -1;
      }
      int64_t trans = gemm.attrInt(attrName, 0) != 0 ? 1 : 0;
      gemm.setInput(static_cast<size_t>(idx), t->input(0));
      gemm.setAttr(Attribute::ofInt(attrName, 1 - trans));
      if (removeIfDead(t)) removed.insert(t);
      done = 1;
    }
    return done;
  }

  int matMulToGemm(Graph&, Node& mm, PassContext& ctx, std::unordered_set<Node*>& removed) {
    // Gemm without C needs opset 11; MatMul broadcasts batch dims, Gemm has none: both operands
    // must be known 2-D. Only float/double, which every runtime implements for Gemm.
    if (ctx.opset("") < 11 || !stable_ || mm.inputs().size() != 2 || !mm.output(0)) return 0;
    // A MatMul read only by an Add is left to fuse-matmul-add, which takes the bias as C too; the
    // Transpose is absorbed into that Gemm on the next round.
    const Value* out = mm.output(0);
    if (hasSingleUse(out) && out->uses()[0].node->opType == "Add" && out->uses()[0].node->isDomain("")) return 0;
    Value* a = mm.input(0);
    Value* b = mm.input(1);
    if (knownRank(a, stable_) != 2 || knownRank(b, stable_) != 2) return 0;
    DType dt = a->type().dtype();
    if (dt != DType::Float && dt != DType::Double) return 0;
    Node* ta = singleUse2dTranspose(a, stable_);
    Node* tb = a == b ? nullptr : singleUse2dTranspose(b, stable_);
    if (!ta && !tb) return 0;
    std::string what = "fuse";
    if (ta) what += " Transpose '" + ta->displayName() + "' +";
    if (tb) what += " Transpose '" + tb->displayName() + "' +";
    if (!ctx.tryRewrite(what + " MatMul '" + mm.displayName() + "' into Gemm")) return -1;
    mm.opType = "Gemm";
    if (ta) {
      mm.setInput(0, ta->input(0));
      mm.setAttr(Attribute::ofInt("transA", 1));
      if (removeIfDead(ta)) removed.insert(ta);
    }
    if (tb) {
      mm.setInput(1, tb->input(0));
      mm.setAttr(Attribute::ofInt("transB", 1));
      if (removeIfDead(tb)) removed.insert(tb);
    }
    return 1;
  }

  bool stable_ = true;
  bool changedBeforeStop_ = false;  ///< a rule rewrote something before the budget ran out
};

}  // namespace

std::unique_ptr<Pass> createFuseTransposesPass(const PassOptions&) { return std::make_unique<FuseTransposesPass>(); }

}  // namespace onnxtool
