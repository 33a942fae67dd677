// inline_functions.cpp: `inline-functions`: a call of a model-local function becomes the nodes of
// its body, with the caller's inputs, the caller's attributes in place of attribute references
// (the function's defaults where the caller gives none), and value names prefixed by the call so
// they stay unique and traceable. Functions nothing calls any more are dropped.
//
// By default only functions of domains no runtime implements natively are inlined (an exporter's
// module functions, `pkg.torch...`); a function in ai.onnx, ai.onnx.ml or com.microsoft may be a
// runtime's kernel, so it stays a call unless `all=true`. Bodies holding subgraphs (If/Loop/Scan)
// and functions whose opset imports disagree with the model's are left as calls.
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "lib/ops/op_schema.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

bool nativeDomain(std::string_view d) {
  return d.empty() || d == "ai.onnx" || d == "ai.onnx.ml" || d == "com.microsoft" || d == "ai.onnx.preview.training";
}

/// Every output of the body is a formal input or a node's output (checked before rewriting).
bool outputsComputed(const Graph& body) {
  for (const ValueInfoEntry& e : body.outputs())
    if (!e.value || (!e.value->producer() && !e.value->isGraphInput())) return false;
  return true;
}

bool hasSubgraphs(const Graph& g) {
  for (const auto& n : g.nodes())
    if (!n->subgraphs().empty()) return true;
  return false;
}

class InlineFunctionsPass : public Pass {
 public:
  explicit InlineFunctionsPass(const PassOptions& o) : all_(o.getBool("all")) {}

  bool run(Graph& g, PassContext& ctx) override {
    Model& m = ctx.model();
    if (m.functions.empty() || isFunctionBody(g, m)) return false;
    bool changed = false;
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      const Function* f = m.findFunction(n->domain, n->opType, n->overload);
      if (!f || !f->body || (!all_ && nativeDomain(f->domain)) || hasSubgraphs(*f->body)) continue;
      if (!importsAgree(*f, m) || !outputsComputed(*f->body) || f->body->outputs().size() < n->outputs().size()) continue;
      if (!ctx.tryRewrite(fmt::format("inline function '{}' called by '{}'", f->name, n->displayName()))) continue;
      addImports(*f, m);
      inlineCall(g, n, *f);
      ctx.count("calls-inlined");
      changed = true;
    }
    if (changed) dropUncalled(m);
    return changed;
  }

 private:
  static bool importsAgree(const Function& f, const Model& m) {
    for (const OpsetImport& o : f.opsetImports) {
      auto v = m.opsetVersion(o.domain);
      if (v && *v != o.version) return false;
    }
    return true;
  }

  static void addImports(const Function& f, Model& m) {
    for (const OpsetImport& o : f.opsetImports)
      if (!m.opsetVersion(o.domain)) m.opsetImports.push_back({o.domain, o.version, {}});
  }

  static const Attribute* resolve(const Attribute& a, const Node& call, const Function& f) {
    if (const Attribute* given = call.attr(a.refAttrName)) return given;
    for (const Attribute& d : f.attributeDefaults)
      if (d.name == a.refAttrName) return &d;
    return nullptr;
  }

  static void inlineCall(Graph& g, Node* call, const Function& f) {
    const Graph& body = *f.body;
    std::string prefix = call->name.empty() ? (call->output(0) ? call->output(0)->name() : f.name) : call->name;
    std::unordered_map<const Value*, Value*> map;
    for (size_t i = 0; i < body.inputs().size(); ++i)
      map[body.inputs()[i].value] = call->input(i);  // an omitted input stays omitted
    for (const auto& up : body.nodes()) {
      const Node& bn = *up;
      std::vector<Value*> inputs;
      for (Value* v : bn.inputs()) {
        auto it = v ? map.find(v) : map.end();
        inputs.push_back(it != map.end() ? it->second : v);
      }
      std::vector<std::string> outs;
      for (Value* o : bn.outputs()) outs.push_back(o ? g.uniqueName(prefix + "/" + o->name()) : "");
      Node* nn = g.addNode(bn.opType, inputs, outs, bn.domain, call);
      nn->name = bn.name.empty() ? "" : prefix + "/" + bn.name;
      nn->overload = bn.overload;
      nn->docString = bn.docString;
      nn->metadata = bn.metadata;
      for (const Attribute& a : bn.attributes) {
        if (a.refAttrName.empty()) {
          nn->attributes.push_back(a);
          continue;
        }
        if (const Attribute* r = resolve(a, *call, f)) {
          Attribute copy = *r;
          copy.name = a.name;
          copy.refAttrName.clear();
          nn->attributes.push_back(std::move(copy));
        }
      }
      for (size_t i = 0; i < bn.outputs().size(); ++i)
        if (bn.output(i)) map[bn.output(i)] = nn->output(i);
    }
    for (size_t i = 0; i < call->outputs().size() && i < body.outputs().size(); ++i) {
      Value* out = call->output(i);
      if (!out) continue;
      auto it = map.find(body.outputs()[i].value);
      Value* src = it != map.end() ? it->second : nullptr;
      if (!replaceValue(out, src)) {
        Node* id = g.addNode("Identity", {src}, {g.uniqueName(out->name() + "__inlined")}, "", call);
        id->output(0)->setType(out->type());
        replaceValue(out, id->output(0));
      }
    }
    g.removeNode(call);
  }

  static void calledIn(const Graph& g, std::unordered_set<const Function*>& called, const Model& m) {
    for (const auto& n : g.nodes()) {
      if (const Function* f = m.findFunction(n->domain, n->opType, n->overload)) called.insert(f);
      for (Graph* sg : n->subgraphs()) calledIn(*sg, called, m);
    }
  }

  static void dropUncalled(Model& m) {
    // A function stays while the main graph or a function still kept calls it.
    std::unordered_set<const Function*> called;
    calledIn(*m.graph, called, m);
    for (bool grew = true; grew;) {
      size_t before = called.size();
      for (const auto& f : m.functions)
        if (called.count(f.get()) && f->body) calledIn(*f->body, called, m);
      grew = called.size() != before;
    }
    std::erase_if(m.functions, [&](const std::unique_ptr<Function>& f) { return !called.count(f.get()); });
  }

  bool all_;
};

}  // namespace

std::unique_ptr<Pass> createInlineFunctionsPass(const PassOptions& o) { return std::make_unique<InlineFunctionsPass>(o); }

}  // namespace onnxtool
