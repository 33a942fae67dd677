// eliminate_unused_initializers.cpp: `eliminate-unused-initializers`: drop initializers nothing
// reads. Initializers that are also graph inputs belong to the model's interface and stay.
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

class EliminateUnusedInitializersPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    std::vector<Value*> inits = g.initializers();
    inits.insert(inits.end(), g.sparseInitializers().begin(), g.sparseInitializers().end());
    for (Value* v : inits) {
      if (v->hasUses() || v->isGraphOutput() || v->isGraphInput()) continue;
      if (!ctx.tryRewrite("remove unused initializer '" + v->name() + "'")) break;
      g.removeInitializer(v);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createEliminateUnusedInitializersPass(const PassOptions&) {
  return std::make_unique<EliminateUnusedInitializersPass>();
}

}  // namespace onnxtool
