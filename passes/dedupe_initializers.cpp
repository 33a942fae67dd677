// dedupe_initializers.cpp: `dedupe-initializers`: initializers with the same dtype, dims and bytes
// (exported models often repeat scalars and shape constants, and tied weights) become one.
#include <unordered_map>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool sameData(const Tensor& a, const Tensor& b) {
  return a.dataType == b.dataType && a.dims == b.dims && a.raw.view() == b.raw.view() && a.strings == b.strings;
}

class DedupeInitializersPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    bool changed = false;
    std::unordered_map<size_t, std::vector<Value*>> byHash;
    std::vector<Value*> inits = g.initializers();
    for (Value* v : inits) {
      const Tensor* t = constantOf(v);
      if (!t || !v->hasUses()) continue;
      size_t h = std::hash<std::string_view>()(t->raw.view()) ^ (static_cast<size_t>(t->dataType) << 1) ^
                 (t->dims.size() << 7);
      for (const std::string& s : t->strings) h = h * 31 + std::hash<std::string>()(s);
      Value* keep = nullptr;
      for (Value* c : byHash[h])
        if (sameData(*c->initializer(), *t)) keep = c;
      if (!keep) {
        byHash[h].push_back(v);
        continue;
      }
      if (v->isGraphOutput()) continue;  // its name is part of the interface
      if (!ctx.tryRewrite("dedupe initializer '" + v->name() + "' into '" + keep->name() + "'")) break;
      v->replaceAllUsesWith(keep);
      g.removeInitializer(v);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createDedupeInitializersPass(const PassOptions&) { return std::make_unique<DedupeInitializersPass>(); }

}  // namespace onnxtool
