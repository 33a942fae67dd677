// sink_reshapes.cpp: `sink-reshapes`: a Reshape whose result only feeds elementwise ops (unary
// ones, and binary ones whose other operand is in the same region or a one-element constant of
// rank 0) that end in Reshapes is moved out: the region computes on the Reshape's input instead,
// each ending Reshape reads the region's value in that shape, and an ending Reshape back to that
// very shape disappears. Elementwise ops compute each element from the same-position elements of
// their operands, so the order of elements, and the values, are unchanged. Typical case: the GELU
// between two linear layers that fuse-matmul-add turned into Gemm on [batch*seq, K] between
// Reshapes: Reshape to [batch, seq, N], GELU, Reshape to [batch*seq, N] becomes GELU on the Gemm's
// output. Static shapes only (every value of the region has known dims); not in Loop/Scan bodies.
#include <algorithm>
#include <unordered_set>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool isElementwiseUnary(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "Abs",  "Acos", "Acosh", "Asin",     "Asinh",    "Atan",   "Atanh",     "Ceil",  "Cos",      "Cosh",
      "Erf",  "Exp",  "Floor", "Gelu",     "HardSigmoid", "HardSwish", "IsNaN", "Log", "Mish", "Neg",
      "Not",  "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin",  "Sinh", "Softplus", "Softsign",
      "Sqrt", "Tan",  "Tanh",  "Elu",      "LeakyRelu", "Celu", "ThresholdedRelu", "Identity", "Cast"};
  return n.isDomain("") && ops.count(n.opType) && n.inputs().size() == 1 && n.outputs().size() == 1;
}

bool isElementwiseBinary(const Node& n) {
  static const std::unordered_set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min",
                                                       "Equal", "Less", "Greater", "And", "Or", "Xor", "PRelu"};
  return n.isDomain("") && ops.count(n.opType) && n.inputs().size() == 2 && n.outputs().size() == 1 &&
         n.opType != "PRelu";
}

/// A constant that broadcasts against any shape without changing it: one element, rank 0.
bool isShapeFreeConstant(const Value* v) {
  const Tensor* t = constantOf(v);
  return t && t->dims.empty();
}

class SinkReshapesPass : public Pass {
 public:
  bool needsShapes() const override { return true; }

  bool run(Graph& g, PassContext& ctx) override {
    if (ctx.opset("") < 5 || !shapesAreStable(g)) return false;
    std::unordered_set<const Value*> outputs;
    for (const auto& o : g.outputs()) outputs.insert(o.value);
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    std::unordered_set<const Node*> removed;
    for (Node* r : order) {
      if (removed.count(r) || r->opType != "Reshape" || !r->isDomain("") || r->inputs().size() != 2) continue;
      Value* u = r->input(0);
      Value* v = r->output(0);
      auto uShape = staticShape(u);
      auto vShape = staticShape(v);
      if (!u || !v || !uShape || !vShape || outputs.count(v)) continue;
      // grow the region from v
      std::vector<Node*> region;
      std::vector<Node*> exits;
      std::unordered_set<const Value*> inRegion{v};
      std::vector<Value*> work{v};
      bool ok = true;
      while (ok && !work.empty()) {
        Value* x = work.back();
        work.pop_back();
        for (const Use& use : x->uses()) {
          Node* n = use.node;
          if (n->graph() != &g) { ok = false; break; }  // read inside a subgraph
          if (n->opType == "Reshape" && n->isDomain("") && use.index == 0 && constantOf(n->input(1))) {
            if (std::find(exits.begin(), exits.end(), n) == exits.end()) exits.push_back(n);
            continue;
          }
          if (std::find(region.begin(), region.end(), n) != region.end()) continue;
          // a binary op's other operand may join the region later; checked once it is complete
          bool elementwise = isElementwiseUnary(*n) || isElementwiseBinary(*n);
          Value* y = elementwise ? n->output(0) : nullptr;
          // the op must not broadcast: its output has the region's shape
          if (!y || outputs.count(y) || staticShape(y) != vShape) { ok = false; break; }
          region.push_back(n);
          inRegion.insert(y);
          work.push_back(y);
        }
      }
      // every operand of a region node is in the region (then it changes shape with it) or a
      // shape-free constant; an operand computed outside would keep the old shape
      for (Node* n : region)
        for (Value* in : n->inputs())
          if (!inRegion.count(in) && !isShapeFreeConstant(in)) ok = false;
      if (!ok || region.empty() || exits.empty()) continue;
      if (!ctx.tryRewrite("sink Reshape '" + r->displayName() + "' past " + std::to_string(region.size()) +
                          " elementwise node(s) into " + std::to_string(exits.size()) + " Reshape(s)"))
        return changed;
      Shape uDims = Shape::of(*uShape);
      for (const Use& use : std::vector<Use>(v->uses())) use.node->setInput(static_cast<size_t>(use.index), u);
      for (Node* n : region) {
        TypeInfo t = n->output(0)->type();
        t.shape = uDims;
        n->output(0)->setType(t);
      }
      for (Node* e : exits) {
        if (staticShape(e->output(0)) == uShape && replaceValue(e->output(0), e->input(0))) {
          g.removeNode(e);
          removed.insert(e);
        }
      }
      g.removeNode(r);
      removed.insert(r);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createSinkReshapesPass(const PassOptions&) { return std::make_unique<SinkReshapesPass>(); }

}  // namespace onnxtool
