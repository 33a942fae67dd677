// pass_util.cpp: shared preconditions and rewrite steps of passes.
#include "passes/pass_util.h"

#include <algorithm>

#include "lib/error.h"

namespace onnxtool {

const Tensor* constantOf(const Value* v) {
  if (!v) return nullptr;
  if (Tensor* t = v->initializer()) return v->isGraphInput() ? nullptr : t;
  Node* p = v->producer();
  if (p && p->opType == "Constant" && p->isDomain("") && p->outputs().size() == 1) {
    const Attribute* a = p->attr("value");
    if (a && a->type == AttrType::Tensor && a->t) return a->t.get();
  }
  return nullptr;
}

std::optional<std::vector<double>> constantAsDoubles(const Value* v) {
  const Tensor* t = constantOf(v);
  if (!t) return std::nullopt;
  switch (t->dtype()) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16:
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64: case DType::Bool:
      break;
    default:
      return std::nullopt;
  }
  auto n = t->numElements();
  auto bytes = t->expectedBytes();
  if (!n || !bytes || t->raw.size() != *bytes) return std::nullopt;
  std::vector<double> out(static_cast<size_t>(*n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = t->elementAsDouble(i);
  return out;
}

bool isConstantScalar(const Value* v, double x) {
  auto d = constantAsDoubles(v);
  return d && d->size() == 1 && (*d)[0] == x;
}

Node* producerOf(const Value* v, std::string_view opType) {
  if (!v || !v->producer()) return nullptr;
  Node* p = v->producer();
  return p->opType == opType && p->isDomain("") ? p : nullptr;
}

bool hasSingleUse(const Value* v) { return v && v->uses().size() == 1 && !v->isGraphOutput(); }

bool replaceValue(Value* from, Value* to) {
  if (from == to) return true;
  if (!from->isGraphOutput()) {
    from->replaceAllUsesWith(to);
    return true;
  }
  Graph* g = from->graph();
  if (!to->producer() || to->graph() != g || to->isGraphOutput() || to->isGraphInput()) return false;
  // The output keeps its declared type and name; `to` takes both over.
  for (ValueInfoEntry& e : g->outputs())
    if (e.value == from && !e.typeOverride && !from->type().isNone()) e.typeOverride = from->type();
  std::string name = from->name();
  from->replaceAllUsesWith(to);
  g->renameValue(from, g->uniqueName(name + "__replaced"));
  g->renameValue(to, name);
  return true;
}

Value* addInitializer(Graph& g, Tensor t, const std::string& baseName) {
  t.name = g.uniqueName(baseName);
  TypeInfo type = TypeInfo::tensor(t.dtype(), Shape::of(t.dims));
  Value* v = g.addInitializer(std::move(t));
  v->setType(std::move(type));
  return v;
}

bool isFunctionBody(const Graph& g, const Model& model) {
  const Graph* top = &g;
  while (top->parent()) top = top->parent();
  return top != model.graph.get();
}

bool removeIfDead(Node* n) {
  for (Value* o : n->outputs())
    if (o && (o->hasUses() || o->isGraphOutput())) return false;
  n->graph()->removeNode(n);
  return true;
}

std::optional<std::vector<int64_t>> staticShape(const Value* v) {
  if (!v || !v->type().isTensor() || !v->type().shape.isStatic()) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : v->type().shape.dims) dims.push_back(d.value);
  return dims;
}

bool shapesAreStable(const Graph& g) {
  for (const Graph* s = &g; s; s = s->parent()) {
    const Node* n = s->parentNode();
    if (n && (n->opType == "Loop" || n->opType == "Scan")) return false;
  }
  return true;
}

bool isNondeterministic(const Node& n) {
  static const char* const kRandom[] = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                                        "Bernoulli", "Multinomial", "Dropout"};
  if (!n.isDomain("")) return false;
  for (const char* r : kRandom)
    if (n.opType == r) return n.opType != "Dropout" || n.inputs().size() > 2;  // Dropout only when training_mode is given
  return false;
}

}  // namespace onnxtool
