// upcast_half.cpp: see upcast_half.h.
#include "passes/upcast_half.h"

#include <string>
#include <vector>

#include "lib/tensor.h"

namespace onnxtool {

namespace {

bool isHalf(const HalfTypes& h, int32_t t) {
  return (h.float16 && t == static_cast<int32_t>(DType::Float16)) || (h.bfloat16 && t == static_cast<int32_t>(DType::BFloat16));
}

/// The element types of a type (tensor, or a sequence/optional of them) made float32.
bool upcastType(const HalfTypes& h, TypeInfo& t) {
  bool changed = false;
  if ((t.kind == TypeInfo::Kind::Tensor || t.kind == TypeInfo::Kind::SparseTensor) && isHalf(h, t.elemType)) {
    t.elemType = static_cast<int32_t>(DType::Float);
    changed = true;
  }
  if (t.inner) {
    TypeInfo inner = *t.inner;
    if (upcastType(h, inner)) {
      t.inner = std::make_shared<TypeInfo>(std::move(inner));
      changed = true;
    }
  }
  return changed;
}

bool typeHasHalf(const HalfTypes& h, const TypeInfo& t) {
  TypeInfo copy = t;
  return upcastType(h, copy);
}

/// A float16/bfloat16 tensor's values as float32, in place (name and dims kept).
bool upcastTensor(const HalfTypes& h, Tensor& t) {
  if (!isHalf(h, t.dataType)) return false;
  const auto n = static_cast<size_t>(t.numElements().value_or(0));
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(t.elementAsDouble(i));
  Tensor f = Tensor::fromFloats(t.name, t.dims, v);
  f.docString = t.docString;
  t = std::move(f);
  return true;
}

/// Attributes naming an output element type: Cast's `to`, the Random* ops' and EyeLike's `dtype`.
bool isTypeAttribute(const Node& n, const Attribute& a) {
  if (!n.isDomain("")) return false;
  if (a.name == "to") return n.opType == "Cast";
  if (a.name == "dtype")
    return n.opType == "RandomNormal" || n.opType == "RandomUniform" || n.opType == "RandomNormalLike" ||
           n.opType == "RandomUniformLike" || n.opType == "EyeLike" || n.opType == "Bernoulli";
  return false;
}

void upcastGraph(const HalfTypes& h, Graph& g, UpcastHalfReport& r) {
  for (Value* v : g.initializers())
    if (v->initializer() && upcastTensor(h, *v->initializer())) r.initializers++;
  for (const auto& n : g.nodes())
    for (Attribute& a : n->attributes) {
      if (a.t && isHalf(h, a.t->dataType)) {
        Tensor t = *a.t;  // attribute tensors may be shared with the caller's model
        upcastTensor(h, t);
        a.t = std::make_shared<Tensor>(std::move(t));
        r.initializers++;
      }
      if (isTypeAttribute(*n, a) && a.ints.empty() && isHalf(h, static_cast<int32_t>(a.i))) {
        a.i = static_cast<int64_t>(DType::Float);
        r.attributes++;
      }
      if (a.g) upcastGraph(h, *a.g, r);
      for (auto& sg : a.graphs)
        if (sg) upcastGraph(h, *sg, r);
    }
  for (const auto& v : g.values()) {
    TypeInfo t = v->type();
    if (upcastType(h, t)) {
      v->setType(std::move(t));
      r.values++;
    }
  }
  for (auto* list : {&g.inputs(), &g.outputs(), &g.valueInfos()})
    for (ValueInfoEntry& e : *list)
      if (e.typeOverride) upcastType(h, *e.typeOverride);
}

}  // namespace

bool hasHalfPrecision(const Model& model, const HalfTypes& h) {
  bool found = false;
  if (!model.graph) return false;
  auto visit = [&](const Graph& g, auto&& self) -> void {
    for (const auto& v : g.values())
      if (typeHasHalf(h, v->type()) || (v->initializer() && isHalf(h, v->initializer()->dataType))) found = true;
    for (const auto& n : g.nodes())
      for (const Attribute& a : n->attributes) {
        if ((a.t && isHalf(h, a.t->dataType)) || (isTypeAttribute(*n, a) && isHalf(h, static_cast<int32_t>(a.i)))) found = true;
        if (a.g) self(*a.g, self);
        for (const auto& sg : a.graphs)
          if (sg) self(*sg, self);
      }
  };
  visit(*model.graph, visit);
  return found;
}

UpcastHalfReport upcastHalfToFloat(Model& model, const HalfTypes& h) {
  UpcastHalfReport r;
  if (!model.graph) return r;
  Graph& g = *model.graph;
  // The interface stays half precision: remember it before the types change.
  struct Io {
    Value* value;
    int32_t elemType;
  };
  std::vector<Io> ins, outs;
  for (const ValueInfoEntry& e : g.inputs())
    if (e.value && !e.value->initializer() && e.value->type().isTensor() && isHalf(h, e.value->type().elemType))
      ins.push_back({e.value, e.value->type().elemType});
  for (const ValueInfoEntry& e : g.outputs()) {
    if (!e.value) continue;
    if (e.value->type().isNone() || (e.value->type().isTensor() && e.value->type().elemType == 0)) {
      r.skipped = true;
      return r;
    }
    if (!e.value->isGraphInput() && e.value->type().isTensor() && isHalf(h, e.value->type().elemType))
      outs.push_back({e.value, e.value->type().elemType});
  }
  upcastGraph(h, g, r);
  Node* first = g.nodes().empty() ? nullptr : g.nodes().front().get();
  for (const Io& io : ins) {
    // x (half, the graph input) -> Cast -> x_float, which every reader now takes.
    Value* x = io.value;
    TypeInfo half = x->type();
    half.elemType = io.elemType;
    x->setType(half);
    Node* c = g.addNode("Cast", {x}, {g.uniqueName(x->name() + "_float32")}, "", first);
    c->name = c->output(0)->name();
    c->setAttr(Attribute::ofInt("to", static_cast<int64_t>(DType::Float)));
    TypeInfo ft = half;
    ft.elemType = static_cast<int32_t>(DType::Float);
    c->output(0)->setType(ft);
    std::vector<Use> uses = x->uses();
    for (const Use& u : uses)
      if (u.node != c) u.node->setInput(static_cast<size_t>(u.index), c->output(0));
    r.casts++;
  }
  for (const Io& io : outs) {
    // y's producer now writes y_float32; a Cast back makes the graph output y (half) again.
    Value* y = io.value;
    const std::string name = y->name();
    g.renameValue(y, g.uniqueName(name + "_float32"));
    Node* c = g.addNode("Cast", {y}, {name});
    c->name = g.uniqueName(name + "_cast");
    c->setAttr(Attribute::ofInt("to", static_cast<int64_t>(io.elemType)));
    TypeInfo ht = y->type();
    ht.elemType = io.elemType;
    c->output(0)->setType(ht);
    for (size_t i = 0; i < g.outputs().size(); ++i)
      if (g.outputs()[i].value == y) g.setOutput(i, c->output(0));
    r.casts++;
  }
  return r;
}

}  // namespace onnxtool
