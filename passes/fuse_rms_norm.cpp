// fuse_rms_norm.cpp: `fuse-rms-norm`: root-mean-square normalisation as exported (LLaMA, T5):
//   r = Sqrt(Add(ReduceMean(Pow(x, 2) | Mul(x, x), last axes), eps))
//   y = Mul(x, Reciprocal(r)) | Mul(x, Div(1, r)) | Div(x, r)   [* gamma]
// becomes RMSNormalization(x, gamma, axis=-n, epsilon) (opset >= 23). Without gamma a Scale of
// ones is made (float32 with static normalised dims only). gamma must have exactly the
// normalised trailing shape.
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

bool isOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

bool isNormalizedShape(const Value* p, const Value* x, int n) {
  if (!p || rankOf(p) != n || rankOf(x) < n || p->type().elemType != x->type().elemType) return false;
  const auto& pd = p->type().shape.dims;
  const auto& xd = x->type().shape.dims;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    if (!sameDim(pd[i], xd[xd.size() - static_cast<size_t>(n) + i])) return false;
  return true;
}

class FuseRmsNormPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    int64_t opset = ctx.opset("");
    if (opset < 23) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* mean : order) {
      if (gone.count(mean) || !isOp(mean, "ReduceMean")) continue;
      std::vector<Node*> pattern;
      Value* x = match(*mean, opset, pattern);
      if (!x || !allInGraph(pattern, g) || !keepsShapeOf(pattern.back()->output(0), x)) continue;
      if (!ctx.tryRewrite("fuse RMSNormalization pattern around ReduceMean '" + mean->displayName() + "'")) break;
      Value* gamma = gamma_;
      if (!gamma) {
        std::vector<int64_t> dims;
        const auto& xd = x->type().shape.dims;
        for (size_t i = xd.size() - static_cast<size_t>(axes_); i < xd.size(); ++i) dims.push_back(xd[i].value);
        int64_t count = 1;
        for (int64_t d : dims) count *= d;
        gamma = addInitializer(g, Tensor::fromFloats("", dims, std::vector<float>(static_cast<size_t>(count), 1.f)),
                               mean->name.empty() ? "rms_scale" : mean->name + "_scale");
      }
      Node* rms = replaceWithNode(g, *pattern.front(), *pattern.back(), "RMSNormalization", {x, gamma});
      if (!rms) continue;
      rms->setAttr(Attribute::ofInt("axis", -axes_));
      rms->setAttr(Attribute::ofFloat("epsilon", static_cast<float>(eps_)));
      for (Node* p : pattern) gone.insert(p);
      removeDeadPattern(pattern);
      changed = true;
    }
    return changed;
  }

 private:
  /// Returns x and fills `pattern` (first: the square, last: the node replaced), gamma_, eps_, axes_.
  Value* match(Node& mean, int64_t opset, std::vector<Node*>& pattern) {
    gamma_ = nullptr;
    Value* sq = mean.input(0);
    Node* square = sq ? sq->producer() : nullptr;
    if (!hasSingleUse(sq) || !square) return nullptr;
    Value* x = nullptr;
    if (isOp(square, "Pow") && isNearScalar(square->input(1), 2.0))
      x = square->input(0);
    else if (isOp(square, "Mul") && square->input(0) == square->input(1))
      x = square->input(0);
    if (!x || !isFloatTensor(x)) return nullptr;
    auto axes = reduceAxesKeepDims(mean, opset);
    if (!axes) return nullptr;
    axes_ = trailingAxesCount(*axes, rankOf(x));
    if (axes_ == 0) return nullptr;
    Node* addEps = soleUser(mean.output(0));
    if (!isOp(addEps, "Add")) return nullptr;
    auto eps = scalarOf(otherOperand(addEps, mean.output(0)));
    if (!eps || *eps < 0) return nullptr;
    eps_ = *eps;
    Node* sqrt = soleUser(addEps->output(0));
    if (!isOp(sqrt, "Sqrt")) return nullptr;
    pattern = {square, &mean, addEps, sqrt};
    Value* s = sqrt->output(0);
    Node* user = soleUser(s);
    Node* last = nullptr;
    if (isOp(user, "Div") && user->input(0) == x && user->input(1) == s) {
      last = user;
      pattern.push_back(user);
    } else if ((isOp(user, "Reciprocal")) ||
               (isOp(user, "Div") && user->input(1) == s && isNearScalar(user->input(0), 1.0))) {
      Value* r = user->output(0);
      Node* mul = soleUser(r);
      if (!isOp(mul, "Mul") || otherOperand(mul, r) != x) return nullptr;
      last = mul;
      pattern.insert(pattern.end(), {user, mul});
    } else {
      return nullptr;
    }
    Value* y = last->output(0);
    if (Node* mul = soleUser(y); isOp(mul, "Mul")) {
      Value* g = otherOperand(mul, y);
      if (g != y && isNormalizedShape(g, x, axes_)) {
        gamma_ = g;
        pattern.push_back(mul);
      }
    }
    if (!gamma_) {
      if (x->type().dtype() != DType::Float) return nullptr;
      const auto& xd = x->type().shape.dims;
      for (size_t i = xd.size() - static_cast<size_t>(axes_); i < xd.size(); ++i)
        if (!xd[i].isValue()) return nullptr;
    }
    return x;
  }

  Value* gamma_ = nullptr;
  double eps_ = 0;
  int axes_ = 0;
};

}  // namespace

std::unique_ptr<Pass> createFuseRmsNormPass(const PassOptions&) { return std::make_unique<FuseRmsNormPass>(); }

}  // namespace onnxtool
