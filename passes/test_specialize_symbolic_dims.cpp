// test_specialize_symbolic_dims.cpp: `test-specialize-symbolic-dims`, a deliberately WRONG pass
// for testing `optimize --verify`: it replaces Shape(x) by a constant computed with every
// symbolic dim of x taken as 1, the bug a shape folding that trusts the wrong facts would have.
// Outputs stay equal when the symbolic dims are 1 and differ otherwise, which is what --verify's
// second input set (symbolic dims 3) must catch. Only available when ONNXTOOL_TEST_PASSES=1.
#include "lib/shape_inference.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class TestSpecializeSymbolicDimsPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    inferShapes(ctx.model());
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (n->opType != "Shape" || !n->isDomain("") || n->attr("start") || n->attr("end")) continue;
      const TypeInfo& t = n->input(0) ? n->input(0)->type() : TypeInfo{};
      Value* out = n->output(0);
      if (!t.isTensor() || !t.shape.hasRank || !out || out->isGraphOutput()) continue;
      std::vector<int64_t> dims;
      for (const Dim& d : t.shape.dims) dims.push_back(d.isValue() ? d.value : 1);
      if (!ctx.tryRewrite("specialize Shape '" + n->displayName() + "' to symbolic dims of 1")) continue;
      std::string name = out->name();
      Value* c = addInitializer(g, Tensor::fromInt64s(name, {static_cast<int64_t>(dims.size())}, dims), name);
      out->replaceAllUsesWith(c);
      g.removeNode(n);
      if (!g.findLocal(name)) g.renameValue(c, name);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createTestSpecializeSymbolicDimsPass(const PassOptions&) {
  return std::make_unique<TestSpecializeSymbolicDimsPass>();
}

}  // namespace onnxtool
