// infer_sequence.cpp: type inference for sequence ops (SequenceEmpty/Construct/Insert/Erase/At/
// Length, SplitToSequence, ConcatFromSequence, SequenceMap) and optional ops (Optional,
// OptionalHasElement, OptionalGetElement). A sequence's element type is the join of its
// elements': dims that differ between elements are unknown.
#include <memory>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

TypeInfo wrap(TypeInfo::Kind kind, TypeInfo inner) {
  TypeInfo t;
  t.kind = kind;
  t.inner = std::make_shared<TypeInfo>(std::move(inner));
  return t;
}

/// The element type both a and b satisfy; differing dims become unknown (elements of one
/// sequence may differ, so no name is shared).
TypeInfo joinElems(InferContext& c, const TypeInfo& a, const TypeInfo& b) {
  if (a.isNone()) return b;
  if (b.isNone()) return a;
  if (a.kind != b.kind) c.fail(fmt::format("elements of types {} and {} cannot share a sequence", a.str(), b.str()));
  if (!a.isTensor()) return a;
  if (a.elemType && b.elemType && a.elemType != b.elemType)
    c.fail(fmt::format("elements of types {} and {} cannot share a sequence", a.str(), b.str()));
  TypeInfo r = a;
  if (!r.elemType) r.elemType = b.elemType;
  if (!a.shape.hasRank || !b.shape.hasRank || a.shape.rank() != b.shape.rank()) {
    r.shape = Shape::unknownRank();
    return r;
  }
  for (size_t i = 0; i < a.shape.rank(); ++i)
    if (!(a.shape.dims[i] == b.shape.dims[i])) r.shape.dims[i] = Dim{};
  return r;
}

/// The element type of sequence input i (None when unknown).
TypeInfo elemOf(InferContext& c, size_t i) {
  const TypeInfo& t = c.inputType(i);
  if (t.kind == TypeInfo::Kind::Sequence && t.inner) return *t.inner;
  return {};
}

void sequenceEmpty(InferContext& c) {
  auto dt = static_cast<DType>(c.attrInt("dtype", static_cast<int64_t>(DType::Float)));
  c.setOutputType(0, wrap(TypeInfo::Kind::Sequence, TypeInfo::tensor(dt, Shape::unknownRank())));
}

void sequenceConstruct(InferContext& c) {
  TypeInfo e;
  for (size_t i = 0; i < c.numInputs(); ++i) e = joinElems(c, e, c.inputType(i));
  if (!e.isNone()) c.setOutputType(0, wrap(TypeInfo::Kind::Sequence, e));
}

void sequenceInsert(InferContext& c) {
  TypeInfo e = joinElems(c, elemOf(c, 0), c.inputType(1));
  if (!e.isNone()) c.setOutputType(0, wrap(TypeInfo::Kind::Sequence, e));
}

void sequenceErase(InferContext& c) {
  if (const TypeInfo& t = c.inputType(0); t.kind == TypeInfo::Kind::Sequence) c.setOutputType(0, t);
}

void sequenceAt(InferContext& c) {
  if (TypeInfo e = elemOf(c, 0); !e.isNone()) c.setOutputType(0, e);
}

void sequenceLength(InferContext& c) { c.setOutput(0, DType::Int64, {}); }

void splitToSequence(InferContext& c) {
  auto s = c.inputShape(0);
  DType dt = c.inputDType(0);
  if (!s) {
    if (dt != DType::Undefined)
      c.setOutputType(0, wrap(TypeInfo::Kind::Sequence, TypeInfo::tensor(dt, Shape::unknownRank())));
    return;
  }
  auto rank = static_cast<int64_t>(s->size());
  int64_t k = c.normalizeAxis(c.attrInt("axis", 0), rank);
  SymShape e = *s;
  if (!c.hasInput(1)) {
    if (c.attrInt("keepdims", 1) != 0) e[k] = SymExpr(1);
    else e.erase(e.begin() + k);
  } else if (auto split = c.inputInts(1); split && c.inputRank(1) == 0 && (*s)[k] && (*s)[k]->isConstant() &&
                                          (*split)[0] > 0 && *(*s)[k]->asConstant() % (*split)[0] == 0) {
    e[k] = SymExpr((*split)[0]);  // equal chunks: every element has this length
  } else if (split && split->size() == 1 && c.inputRank(1) == 1) {
    e[k] = SymExpr((*split)[0]);
  } else {
    e[k] = std::nullopt;
  }
  Shape shape;
  shape.hasRank = true;
  for (const SymDim& d : e) shape.dims.push_back(c.toDim(d));
  c.setOutputType(0, wrap(TypeInfo::Kind::Sequence, TypeInfo::tensor(dt, std::move(shape))));
}

void concatFromSequence(InferContext& c) {
  TypeInfo e = elemOf(c, 0);
  if (!e.isTensor()) return;
  if (!e.shape.hasRank) return c.setOutputDType(0, e.dtype());
  bool newAxis = c.attrInt("new_axis", 0) != 0;
  auto rank = static_cast<int64_t>(e.shape.rank());
  int64_t k = c.normalizeAxis(c.attrInt("axis", 0), newAxis ? rank + 1 : rank);
  SymShape out;
  for (const Dim& d : e.shape.dims) out.push_back(c.fromDim(d));
  if (newAxis) out.insert(out.begin() + k, std::nullopt);
  else out[k] = std::nullopt;
  c.setOutput(0, e.dtype(), out);
}

void sequenceMap(InferContext& c) {
  const Attribute* a = c.attr("body");
  if (!a || !a->g) c.fail("attribute 'body' must be a graph");
  std::vector<TypeInfo> in;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    const TypeInfo& t = c.inputType(i);
    in.push_back(t.kind == TypeInfo::Kind::Sequence && t.inner ? *t.inner : t);
  }
  auto out = c.inferSubgraph(*a->g, in);
  for (size_t i = 0; i < out.size() && i < c.numOutputs(); ++i)
    if (!out[i].isNone()) c.setOutputType(i, wrap(TypeInfo::Kind::Sequence, out[i]));
}

void optionalOp(InferContext& c) {
  if (c.hasInput(0)) {
    if (const TypeInfo& t = c.inputType(0); !t.isNone()) c.setOutputType(0, wrap(TypeInfo::Kind::Optional, t));
    return;
  }
  const Attribute* a = c.attr("type");
  if (!a || !a->tp) c.fail("an Optional without input needs the 'type' attribute");
  c.setOutputType(0, wrap(TypeInfo::Kind::Optional, *a->tp));
}

void optionalHasElement(InferContext& c) { c.setOutput(0, DType::Bool, {}); }

void optionalGetElement(InferContext& c) {
  const TypeInfo& t = c.inputType(0);
  if (t.kind == TypeInfo::Kind::Optional) {
    if (t.inner) c.setOutputType(0, *t.inner);
  } else if (!t.isNone()) {
    c.setOutputType(0, t);  // 18+: a plain tensor or sequence passes through
  }
}

}  // namespace

void registerInferSequence(InferRegistry& r) {
  r.add({"", "SequenceEmpty", 1, sequenceEmpty});
  r.add({"", "SequenceConstruct", 1, sequenceConstruct});
  r.add({"", "SequenceInsert", 1, sequenceInsert});
  r.add({"", "SequenceErase", 1, sequenceErase});
  r.add({"", "SequenceAt", 1, sequenceAt});
  r.add({"", "SequenceLength", 1, sequenceLength});
  r.add({"", "SplitToSequence", 1, splitToSequence});
  r.add({"", "ConcatFromSequence", 1, concatFromSequence});
  r.add({"", "SequenceMap", 1, sequenceMap});
  r.add({"", "Optional", 1, optionalOp});
  r.add({"", "OptionalHasElement", 1, optionalHasElement});
  r.add({"", "OptionalGetElement", 1, optionalGetElement});
}

}  // namespace onnxtool
