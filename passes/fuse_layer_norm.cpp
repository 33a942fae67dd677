// fuse_layer_norm.cpp: `fuse-layer-norm`: the layer normalisation PyTorch exports decomposed,
//   m = ReduceMean(x, last axes); d = Sub(x, m); v = ReduceMean(Pow(d, 2) | Mul(d, d), same axes)
//   y = Div(d, Sqrt(Add(v, eps))) [* gamma] [+ beta]
// becomes LayerNormalization(x, gamma, beta, axis=-n, epsilon) (opset >= 17). Without the Mul a
// Scale of ones is made (float32 only); without the Add B is left out. gamma and beta must have
// exactly the normalised trailing shape, so a Mul/Add that broadcasts differently (a residual
// Add, say) is never swallowed.
#include <set>

#include "passes/pass_util.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

/// Whether `p` (gamma or beta) has exactly the trailing `n` dims of `x`.
bool isNormalizedShape(const Value* p, const Value* x, int n) {
  if (!p || rankOf(p) != n || rankOf(x) < n) return false;
  const auto& pd = p->type().shape.dims;
  const auto& xd = x->type().shape.dims;
  for (int i = 0; i < n; ++i)
    if (!sameDim(pd[static_cast<size_t>(i)], xd[xd.size() - static_cast<size_t>(n) + static_cast<size_t>(i)]))
      return false;
  return p->type().elemType == x->type().elemType;
}

class FuseLayerNormPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    int64_t opset = ctx.opset("");
    if (opset < 17) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::set<Node*> gone;
    for (Node* mean : order) {
      if (gone.count(mean) || mean->opType != "ReduceMean" || !mean->isDomain("")) continue;
      std::vector<Node*> pattern;
      if (!match(*mean, opset, pattern) || !allInGraph(pattern, g) ||
          !keepsShapeOf(pattern.back()->output(0), mean->input(0)))
        continue;
      Value* x = mean->input(0);
      if (!ctx.tryRewrite("fuse LayerNormalization pattern from ReduceMean '" + mean->displayName() + "'")) break;
      Node* last = pattern.back();
      std::vector<Value*> inputs = {x, gamma_};
      if (!gamma_) {
        std::vector<int64_t> dims;
        for (size_t i = x->type().shape.rank() - static_cast<size_t>(axes_); i < x->type().shape.rank(); ++i)
          dims.push_back(x->type().shape.dims[i].value);
        int64_t count = 1;
        for (int64_t d : dims) count *= d;
        inputs[1] = addInitializer(g, Tensor::fromFloats("", dims, std::vector<float>(static_cast<size_t>(count), 1.f)),
                                   mean->name.empty() ? "ln_scale" : mean->name + "_scale");
      }
      if (beta_) inputs.push_back(beta_);
      Node* ln = replaceWithNode(g, *mean, *last, "LayerNormalization", inputs);
      if (!ln) continue;
      ln->setAttr(Attribute::ofInt("axis", -axes_));
      ln->setAttr(Attribute::ofFloat("epsilon", static_cast<float>(eps_)));
      for (Node* n : pattern) gone.insert(n);
      removeDeadPattern(pattern);
      changed = true;
    }
    return changed;
  }

 private:
  /// Matches forward from the first ReduceMean; fills `pattern` (last = the node to replace),
  /// gamma_, beta_, eps_ and axes_.
  bool match(Node& mean, int64_t opset, std::vector<Node*>& pattern) {
    gamma_ = beta_ = nullptr;
    Value* x = mean.input(0);
    if (!isFloatTensor(x)) return false;
    auto axes = reduceAxesKeepDims(mean, opset);
    if (!axes) return false;
    axes_ = trailingAxesCount(*axes, rankOf(x));
    if (axes_ == 0) return false;
    Node* sub = soleUser(mean.output(0));
    if (!sub || sub->opType != "Sub" || sub->input(0) != x || sub->input(1) != mean.output(0)) return false;
    Value* d = sub->output(0);
    if (d->isGraphOutput()) return false;
    // d feeds the square (once as Pow, twice as Mul) and the Div.
    Node* square = nullptr;
    Node* div = nullptr;
    for (const Use& u : d->uses()) {
      Node* n = u.node;
      if (n->opType == "Div" && u.index == 0 && !div)
        div = n;
      else if (n->opType == "Pow" && u.index == 0 && !square && isNearScalar(n->input(1), 2.0))
        square = n;
      else if (n->opType == "Mul" && n->input(0) == d && n->input(1) == d)
        square = n;
      else
        return false;
    }
    size_t expectedUses = square && square->opType == "Mul" ? 3 : 2;
    if (!square || !div || d->uses().size() != expectedUses) return false;
    Node* var = soleUser(square->output(0));
    if (!var || var->opType != "ReduceMean" || var->input(0) != square->output(0)) return false;
    auto varAxes = reduceAxesKeepDims(*var, opset);
    if (!varAxes || trailingAxesCount(*varAxes, rankOf(x)) != axes_) return false;
    Node* addEps = soleUser(var->output(0));
    if (!addEps || addEps->opType != "Add") return false;
    Value* epsV = otherOperand(addEps, var->output(0));
    auto eps = scalarOf(epsV);
    if (!eps || *eps < 0) return false;
    eps_ = *eps;
    Node* sqrt = soleUser(addEps->output(0));
    if (!sqrt || sqrt->opType != "Sqrt") return false;
    if (soleUser(sqrt->output(0)) != div || div->input(1) != sqrt->output(0)) return false;
    pattern = {&mean, sub, square, var, addEps, sqrt, div};
    for (Node* n : pattern)
      if (!n->isDomain("")) return false;
    // Optional affine part: * gamma, then + beta, with exactly the normalised shape.
    Value* y = div->output(0);
    if (Node* mul = soleUser(y); mul && mul->opType == "Mul" && mul->isDomain("")) {
      Value* g = otherOperand(mul, y);
      if (g != y && isNormalizedShape(g, x, axes_)) {
        gamma_ = g;
        pattern.push_back(mul);
        y = mul->output(0);
      }
    }
    if (Node* add = soleUser(y); add && add->opType == "Add" && add->isDomain("")) {
      Value* b = otherOperand(add, y);
      if (b != y && isNormalizedShape(b, x, axes_)) {
        beta_ = b;
        pattern.push_back(add);
      }
    }
    // A Scale of ones needs the static normalised shape, and float32 for Tensor::fromFloats.
    if (!gamma_) {
      if (x->type().dtype() != DType::Float) return false;
      const auto& xd = x->type().shape.dims;
      for (size_t i = xd.size() - static_cast<size_t>(axes_); i < xd.size(); ++i)
        if (!xd[i].isValue()) return false;
    }
    return true;
  }

  Value* gamma_ = nullptr;
  Value* beta_ = nullptr;
  double eps_ = 0;
  int axes_ = 0;
};

}  // namespace

std::unique_ptr<Pass> createFuseLayerNormPass(const PassOptions&) { return std::make_unique<FuseLayerNormPass>(); }

}  // namespace onnxtool
