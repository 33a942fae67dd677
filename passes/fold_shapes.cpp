// fold_shapes.cpp: `fold-shapes`: shape computations whose result shape inference knows exactly
// become constants: Shape/Size of static tensors, and also of tensors with symbolic dims when the
// part used is static (Gather(Shape(x), 2) of x[batch, seq, 768] is 768), through the Concat/
// Slice/Gather/arithmetic chains that exporters emit. fold-constants then finishes the rest.
#include <cstring>

#include "lib/shape_inference.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

/// Whether any graph of the model (subgraphs and functions included) has a Shape or Size node:
/// the only sources of values that shape inference knows and constant folding does not (constants
/// alone are fold-constants' work), so without one there is nothing to fold and the inference run
/// is skipped (most of -O3's fold-shapes time on CNNs: MobileNetV2 1.1 ms, DenseNet-121 2.7).
bool hasShapeSources(Model& m) {
  bool found = false;
  auto scan = [&](Graph& g) {
    for (const auto& n : g.nodes())
      if (n->isDomain("") && (n->opType == "Shape" || n->opType == "Size")) found = true;
  };
  m.graph->forEachGraph(scan);
  for (auto& f : m.functions)
    if (f->body) f->body->forEachGraph(scan);
  return found;
}

class FoldShapesPass : public Pass {
 public:
  bool run(Graph& g, PassContext& ctx) override {
    if (!shapesAreStable(g) || !hasShapeSources(ctx.model())) return false;
    // Inference runs over the whole model; results are per value, so visiting subgraphs later in
    // the same manager step reuses nothing stale: only the graph given is rewritten.
    std::unordered_map<const Value*, std::vector<std::optional<SymExpr>>> data;
    InferOptions opts;
    opts.valueData = &data;
    inferShapes(ctx.model(), opts);
    ctx.noteShapesInferred();
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (n->opType == "Constant" || !n->subgraphs().empty() || isNondeterministic(*n)) continue;
      std::vector<Tensor> results;
      bool ok = !n->outputs().empty();
      for (Value* o : n->outputs()) {
        if (!o || o->isGraphOutput()) {
          ok = false;
          break;
        }
        auto it = data.find(o);
        auto dims = staticShape(o);
        if (it == data.end() || !dims) {
          ok = false;
          break;
        }
        DType dt = o->type().dtype();
        if (dt != DType::Int64 && dt != DType::Int32) {
          ok = false;
          break;
        }
        std::vector<int64_t> ints;
        for (const auto& e : it->second) {
          if (!e || !e->asConstant()) break;
          ints.push_back(*e->asConstant());
        }
        int64_t numel = 1;
        for (int64_t d : *dims) numel *= d;
        if (static_cast<int64_t>(ints.size()) != numel || ints.size() != it->second.size()) {
          ok = false;
          break;
        }
        Tensor t = Tensor::fromInt64s(o->name(), *dims, ints);
        if (dt == DType::Int32) {
          std::string raw(ints.size() * 4, '\0');
          for (size_t i = 0; i < ints.size(); ++i) {
            int32_t x = static_cast<int32_t>(ints[i]);
            std::memcpy(raw.data() + 4 * i, &x, 4);
          }
          t.dataType = static_cast<int32_t>(DType::Int32);
          t.setRaw(Buffer::fromString(std::move(raw)));
        }
        results.push_back(std::move(t));
      }
      if (!ok || !ctx.tryRewrite("fold " + n->opType + " '" + n->displayName() + "' to its statically known value")) continue;
      std::vector<std::pair<Value*, std::string>> renames;
      size_t r = 0;
      for (Value* o : n->outputs()) {
        Value* c = addInitializer(g, std::move(results[r++]), o->name());
        o->replaceAllUsesWith(c);
        renames.emplace_back(c, o->name());
      }
      g.removeNode(n);
      for (auto& [c, name] : renames)
        if (!g.findLocal(name)) g.renameValue(c, name);
      ctx.count("shape-values-folded");
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldShapesPass(const PassOptions&) { return std::make_unique<FoldShapesPass>(); }

}  // namespace onnxtool
