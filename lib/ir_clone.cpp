// ir_clone.cpp: deep copies of the IR (see ir_clone.h). Mirrors the loader's order of
// definitions (initializers, inputs, nodes, outputs, value_info) so that invalid models
// (duplicate names, forward references) copy as faithfully as they load.
#include "lib/ir_clone.h"

#include <unordered_map>

namespace onnxtool {

namespace {

struct ValueMap {
  std::unordered_map<const Value*, Value*> map;
  const ValueMap* parent = nullptr;
  Value* find(const Value* v) const {
    for (const ValueMap* m = this; m; m = m->parent) {
      auto it = m->map.find(v);
      if (it != m->map.end()) return it->second;
    }
    return nullptr;
  }
};

void cloneGraph(const Graph& src, Graph& dst, ValueMap& vm);

Attribute cloneAttribute(const Attribute& a, Graph* owner, Node* node, ValueMap& vm) {
  Attribute c = a;  // scalars, lists, strings; pointers are replaced below
  if (a.t) c.t = std::make_shared<Tensor>(*a.t);
  if (a.sparseTensor) c.sparseTensor = std::make_shared<SparseTensor>(*a.sparseTensor);
  if (a.tp) c.tp = std::make_shared<TypeInfo>(*a.tp);
  for (auto& t : c.tensors)
    if (t) t = std::make_shared<Tensor>(*t);
  for (auto& s : c.sparseTensors)
    if (s) s = std::make_shared<SparseTensor>(*s);
  auto copyGraph = [&](const std::shared_ptr<Graph>& g) -> std::shared_ptr<Graph> {
    if (!g) return nullptr;
    auto ng = std::make_shared<Graph>(owner, node);
    ValueMap sub;
    sub.parent = &vm;
    cloneGraph(*g, *ng, sub);
    return ng;
  };
  c.g = copyGraph(a.g);
  for (auto& g : c.graphs) g = copyGraph(g);
  return c;
}

ValueInfoEntry cloneEntry(const ValueInfoEntry& e, Value* v) {
  ValueInfoEntry c = e;
  c.value = v;
  return c;
}

void cloneGraph(const Graph& src, Graph& dst, ValueMap& vm) {
  dst.name = src.name;
  dst.docString = src.docString;
  dst.metadata = src.metadata;
  dst.residual = src.residual;
  auto use = [&](const Value* v) -> Value* {
    if (!v) return nullptr;
    if (Value* n = vm.find(v)) return n;
    // Used before its definition (invalid order) or never defined: a placeholder of the same
    // name that a later definition adopts, as the loader makes.
    Value* n = dst.findLocal(v->name());
    if (!n || n->isDefined()) n = dst.createValue(v->name(), n != nullptr);
    n->setType(v->type());
    vm.map[v] = n;
    return n;
  };
  for (Value* v : src.initializers()) {
    Value* n = dst.addInitializer(*v->initializer(), true);
    n->setType(v->type());
    vm.map[v] = n;
  }
  for (Value* v : src.sparseInitializers()) {
    Value* n = dst.addSparseInitializer(*v->sparseInitializer(), true);
    n->setType(v->type());
    vm.map[v] = n;
  }
  for (const auto& e : src.inputs()) {
    Value* n = vm.find(e.value);
    if (!n || n->graph() != &dst) {
      n = dst.createValue(e.value->name(), dst.findLocal(e.value->name()) != nullptr);
      n->setType(e.value->type());
      vm.map[e.value] = n;
    }
    dst.addInput(n);
    dst.inputs().back() = cloneEntry(e, n);
  }
  for (const auto& np : src.nodes()) {
    std::vector<Value*> ins;
    ins.reserve(np->inputs().size());
    for (const Value* v : np->inputs()) ins.push_back(use(v));
    std::vector<std::string> outs;
    for (const Value* v : np->outputs()) outs.push_back(v ? v->name() : std::string());
    Node* n = dst.addNode(np->opType, ins, outs, np->domain);
    n->name = np->name;
    n->overload = np->overload;
    n->docString = np->docString;
    n->metadata = np->metadata;
    n->residual = np->residual;
    for (size_t i = 0; i < np->outputs().size(); ++i)
      if (const Value* o = np->outputs()[i]) {
        n->outputs()[i]->setType(o->type());
        vm.map[o] = n->outputs()[i];
      }
    for (const Attribute& a : np->attributes) n->attributes.push_back(cloneAttribute(a, &dst, n, vm));
  }
  for (const auto& e : src.outputs()) {
    Value* n = use(e.value);
    if (!n) n = dst.createValue("", true);
    dst.addOutput(n);
    dst.outputs().back() = cloneEntry(e, n);
  }
  for (const auto& e : src.valueInfos()) {
    Value* n = use(e.value);
    if (!n) n = dst.createValue("", true);
    dst.valueInfos().push_back(cloneEntry(e, n));
  }
}

/// A copy of m without its main graph.
std::unique_ptr<Model> cloneHeaderAndFunctions(const Model& m) {
  auto c = std::make_unique<Model>();
  c->irVersion = m.irVersion;
  c->opsetImports = m.opsetImports;
  c->producerName = m.producerName;
  c->producerVersion = m.producerVersion;
  c->domain = m.domain;
  c->docString = m.docString;
  c->modelVersion = m.modelVersion;
  c->metadata = m.metadata;
  c->residual = m.residual;
  c->loadIssues = m.loadIssues;
  c->path = m.path;
  c->baseDir = m.baseDir;
  c->fileSize = m.fileSize;
  for (const auto& f : m.functions) {
    auto nf = std::make_unique<Function>();
    nf->name = f->name;
    nf->domain = f->domain;
    nf->overload = f->overload;
    nf->docString = f->docString;
    nf->attributeNames = f->attributeNames;
    nf->opsetImports = f->opsetImports;
    nf->metadata = f->metadata;
    nf->residual = f->residual;
    nf->body = std::make_unique<Graph>();
    ValueMap vm;
    for (const Attribute& a : f->attributeDefaults)
      nf->attributeDefaults.push_back(cloneAttribute(a, nf->body.get(), nullptr, vm));
    cloneGraph(*f->body, *nf->body, vm);
    c->functions.push_back(std::move(nf));
  }
  return c;
}

}  // namespace

std::unique_ptr<Model> cloneModel(const Model& m) {
  auto c = cloneHeaderAndFunctions(m);
  if (m.graph) {
    c->graph = std::make_unique<Graph>();
    ValueMap vm;
    cloneGraph(*m.graph, *c->graph, vm);
  }
  return c;
}

std::unique_ptr<Model> cloneSubgraphAsModel(const Model& m, const Graph& body, const std::vector<const Value*>& outer) {
  auto c = cloneHeaderAndFunctions(m);
  c->graph = std::make_unique<Graph>();
  Graph& g = *c->graph;
  ValueMap vm;
  std::vector<Value*> extra;
  for (const Value* v : outer) {
    if (vm.find(v)) continue;
    if (v->initializer() && !v->isGraphInput()) {  // a constant stays one (shared bytes)
      Value* n = g.addInitializer(*v->initializer(), true);
      n->setType(v->type());
      vm.map[v] = n;
      continue;
    }
    Value* n = g.createValue(v->name(), g.findLocal(v->name()) != nullptr);
    n->setType(v->type());
    vm.map[v] = n;
    extra.push_back(n);
  }
  cloneGraph(body, g, vm);
  for (Value* n : extra) g.addInput(n);
  return c;
}

}  // namespace onnxtool
