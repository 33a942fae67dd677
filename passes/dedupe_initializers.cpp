// dedupe_initializers.cpp: `dedupe-initializers`: initializers with the same dtype, dims and bytes
// (exported models often repeat scalars and shape constants, and tied weights) become one.
#include <map>
#include <tuple>
#include <unordered_map>

#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool sameData(const Tensor& a, const Tensor& b) {
  return a.dataType == b.dataType && a.dims == b.dims && a.raw.view() == b.raw.view() && a.strings == b.strings;
}

/// A hash of at most 3 x 128 contiguous bytes (the start, the middle and the end): cheap on big
/// weights, which it reads in at most a few pages (bytes spread over the whole tensor would page
/// in all of a mapped model file); equal fingerprints are then compared in full.
size_t fingerprint(std::string_view bytes) {
  constexpr size_t kWindow = 128;
  if (bytes.size() <= 3 * kWindow) return std::hash<std::string_view>()(bytes);
  size_t h = std::hash<std::string_view>()(bytes.substr(0, kWindow));
  h = h * 31 + std::hash<std::string_view>()(bytes.substr(bytes.size() / 2 - kWindow / 2, kWindow));
  return h * 31 + std::hash<std::string_view>()(bytes.substr(bytes.size() - kWindow));
}

class DedupeInitializersPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    // Group by dtype, dims and byte size first: only tensors that share those are compared, so
    // big weights are almost never hashed.
    std::map<std::tuple<int32_t, std::vector<int64_t>, size_t, size_t>, std::vector<Value*>> groups;
    for (Value* v : g.initializers()) {
      const Tensor* t = constantOf(v);
      if (!t || !v->hasUses()) continue;
      groups[{t->dataType, t->dims, t->raw.size(), t->strings.size()}].push_back(v);
    }
    bool changed = false;
    for (auto& [key, members] : groups) {
      if (members.size() < 2) continue;
      std::unordered_map<size_t, std::vector<Value*>> byHash;
      for (Value* v : members) {
        const Tensor* t = v->initializer();
        size_t h = fingerprint(t->raw.view());
        for (const std::string& s : t->strings) h = h * 31 + std::hash<std::string>()(s);
        Value* keep = nullptr;
        for (Value* c : byHash[h])
          if (sameData(*c->initializer(), *t)) keep = c;
        if (!keep) {
          byHash[h].push_back(v);
          continue;
        }
        if (v->isGraphOutput()) continue;  // its name is part of the interface
        if (!ctx.tryRewrite("dedupe initializer '" + v->name() + "' into '" + keep->name() + "'")) return changed;
        v->replaceAllUsesWith(keep);
        g.removeInitializer(v);
        changed = true;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createDedupeInitializersPass(const PassOptions&) { return std::make_unique<DedupeInitializersPass>(); }

}  // namespace onnxtool
