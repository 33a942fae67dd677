// sequence.cpp: reference kernels of the sequence ops (SequenceConstruct/Empty/At/Insert/Erase/
// Length, ConcatFromSequence, SplitToSequence, SequenceMap) and the optional ops (Optional,
// OptionalGetElement, OptionalHasElement).
//
// Sequences are RtValue::Kind::Sequence holding tensor RtValues; an empty sequence or a none
// optional keeps an elemTypeHint (SequenceProto/OptionalProto elem_type: 1 tensor, 3 sequence,
// 5 optional) so it can be written out with its kind. Element tensors are shared, never copied.
#include <fmt/ranges.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

void registerSequenceOps();

// Axis-wise tensor copies, defined (with their contracts) in control_flow.cpp.
namespace cf {
Tensor sliceAxis(const TensorData& t, int64_t axis, int64_t start, int64_t len);
Tensor concatAxis(const KernelContext& ctx, const std::vector<const TensorData*>& parts, int64_t axis);
Tensor insertAxis(const TensorData& t, int64_t axis);
Tensor removeAxis(const TensorData& t, int64_t axis);
}  // namespace cf

namespace {

using cf::concatAxis;
using cf::insertAxis;
using cf::removeAxis;
using cf::sliceAxis;

// SequenceProto/OptionalProto elem_type values.
constexpr int32_t kElemTensor = 1, kElemSequence = 3, kElemMap = 4, kElemOptional = 5;

const RtValue& sequenceInput(const KernelContext& ctx, size_t i) {
  const RtValue* v = ctx.input(i);
  if (!v || v->kind != RtValue::Kind::Sequence) ctx.fail(fmt::format("input {} must be a sequence", i));
  return *v;
}

RtValue tensorSequence(std::vector<RtValue> items) {
  RtValue v = RtValue::sequence(std::move(items));
  v.elemTypeHint = kElemTensor;
  return v;
}

/// A position input (int32/int64 scalar) normalised against [-n, hi] where hi is n - 1 for
/// existing elements (At, Erase) and n for insertion points (Insert).
int64_t positionInput(const KernelContext& ctx, size_t i, int64_t n, int64_t hi) {
  const TensorData& t = ctx.tensor(i);
  if (t.dtype() != DType::Int32 && t.dtype() != DType::Int64) ctx.fail("position must be int32 or int64");
  if (numel(t) != 1) ctx.fail("position must be a scalar");
  int64_t p = t.elementAsInt(0);
  if (p < -n || p > hi) ctx.fail(fmt::format("position {} is outside [{}, {}] for a sequence of {} tensors", p, -n, hi, n));
  return p < 0 ? p + n : p;
}

void sequenceConstruct(KernelContext& ctx) {
  std::vector<RtValue> items;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const TensorData& t = ctx.tensor(i);
    if (t.dataType != ctx.tensor(0).dataType)
      ctx.fail(fmt::format("input {} is {}, input 0 is {}: a sequence holds one element type", i, dtypeName(t.dtype()),
                           dtypeName(ctx.tensor(0).dtype())));
    items.push_back(*ctx.input(i));
  }
  ctx.setOutput(0, tensorSequence(std::move(items)));
}

void sequenceEmpty(KernelContext& ctx) { ctx.setOutput(0, tensorSequence({})); }

void sequenceAt(KernelContext& ctx) {
  const RtValue& seq = sequenceInput(ctx, 0);
  int64_t n = static_cast<int64_t>(seq.elements.size());
  ctx.setOutput(0, seq.elements[static_cast<size_t>(positionInput(ctx, 1, n, n - 1))]);
}

void sequenceErase(KernelContext& ctx) {
  const RtValue& seq = sequenceInput(ctx, 0);
  int64_t n = static_cast<int64_t>(seq.elements.size());
  if (n == 0) ctx.fail("cannot erase from an empty sequence");
  int64_t p = ctx.hasInput(1) ? positionInput(ctx, 1, n, n - 1) : n - 1;
  RtValue out = seq;
  out.elements.erase(out.elements.begin() + p);
  ctx.setOutput(0, std::move(out));
}

void sequenceInsert(KernelContext& ctx) {
  const RtValue& seq = sequenceInput(ctx, 0);
  const TensorData& t = ctx.tensor(1);
  int64_t n = static_cast<int64_t>(seq.elements.size());
  if (n > 0 && seq.elements[0].isTensor() && seq.elements[0].tensor->dataType != t.dataType)
    ctx.fail(fmt::format("cannot insert a {} tensor into a sequence of {}", dtypeName(t.dtype()),
                         dtypeName(seq.elements[0].tensor->dtype())));
  int64_t p = ctx.hasInput(2) ? positionInput(ctx, 2, n, n) : n;
  RtValue out = seq;
  out.elements.insert(out.elements.begin() + p, *ctx.input(1));
  out.elemTypeHint = kElemTensor;
  ctx.setOutput(0, std::move(out));
}

void sequenceLength(KernelContext& ctx) {
  ctx.setOutput(0, Tensor::fromInt64s("", {}, {static_cast<int64_t>(sequenceInput(ctx, 0).elements.size())}));
}

void concatFromSequence(KernelContext& ctx) {
  const RtValue& seq = sequenceInput(ctx, 0);
  if (seq.elements.empty()) ctx.fail("cannot concatenate an empty sequence (its shape is unknown)");
  if (!ctx.hasAttr("axis")) ctx.fail("the attribute 'axis' is required");
  bool newAxis = ctx.attrInt("new_axis", 0) != 0;
  std::vector<Tensor> expanded;
  std::vector<const TensorData*> parts;
  for (const RtValue& e : seq.elements) {
    if (!e.isTensor()) ctx.fail("the sequence holds a non-tensor element");
    parts.push_back(e.tensor.get());
  }
  int64_t rank = static_cast<int64_t>(parts.front()->dims.size());
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), newAxis ? rank + 1 : rank);
  if (newAxis) {
    expanded.reserve(parts.size());
    for (const TensorData* p : parts) {
      if (p->dims != parts.front()->dims)
        ctx.fail(fmt::format("cannot stack tensors of shapes [{}] and [{}]", fmt::join(parts.front()->dims, ","),
                             fmt::join(p->dims, ",")));
      expanded.push_back(insertAxis(*p, axis));
    }
    for (size_t i = 0; i < parts.size(); ++i) parts[i] = &expanded[i];
  }
  ctx.setOutput(0, concatAxis(ctx, parts, axis));
}

void splitToSequence(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  int64_t rank = static_cast<int64_t>(x.dims.size());
  if (rank == 0) ctx.fail("cannot split a scalar");
  int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), rank);
  int64_t dim = x.dims[static_cast<size_t>(axis)];
  std::vector<int64_t> lengths;
  bool squeeze = false;
  if (!ctx.hasInput(1)) {
    lengths.assign(static_cast<size_t>(dim), 1);
    squeeze = ctx.attrInt("keepdims", 1) == 0;
  } else {
    const TensorData& s = ctx.tensor(1);
    std::vector<int64_t> split = inputInts(ctx, 1);
    if (s.dims.empty()) {
      int64_t len = split.at(0);
      if (len <= 0) ctx.fail(fmt::format("split must be positive, got {}", len));
      for (int64_t at = 0; at < dim; at += len) lengths.push_back(std::min(len, dim - at));
    } else if (s.dims.size() == 1) {
      int64_t sum = 0;
      for (int64_t l : split) {
        if (l < 0) ctx.fail(fmt::format("split lengths must not be negative, got {}", l));
        sum += l;
      }
      if (sum != dim) ctx.fail(fmt::format("split lengths sum to {}, the dimension {} of the input is {}", sum, axis, dim));
      lengths = split;
    } else {
      ctx.fail("split must be a scalar or a 1-D tensor");
    }
  }
  std::vector<RtValue> items;
  int64_t at = 0;
  for (int64_t len : lengths) {
    Tensor part = sliceAxis(x, axis, at, len);
    at += len;
    items.push_back(RtValue::ofTensor(squeeze ? removeAxis(part, axis) : std::move(part)));
  }
  ctx.setOutput(0, tensorSequence(std::move(items)));
}

/// SequenceMap: runs the body once per element of the first input; further sequence inputs are
/// indexed alongside, tensor inputs are passed whole. Each body output becomes a sequence.
void sequenceMap(KernelContext& ctx) {
  const Attribute* a = ctx.attr("body");
  if (!a || !a->g) ctx.fail("the graph attribute 'body' is missing");
  const Graph& body = *a->g;
  const RtValue& first = sequenceInput(ctx, 0);
  size_t n = first.elements.size();
  if (body.inputs().size() != ctx.numInputs())
    ctx.fail(fmt::format("the body takes {} inputs, the node has {}", body.inputs().size(), ctx.numInputs()));
  if (body.outputs().size() != ctx.numOutputs())
    ctx.fail(fmt::format("the body yields {} outputs, the node has {}", body.outputs().size(), ctx.numOutputs()));
  for (size_t i = 1; i < ctx.numInputs(); ++i) {
    const RtValue* v = ctx.input(i);
    if (!v || v->isEmpty()) ctx.fail(fmt::format("input {} is missing", i));
    if (v->kind == RtValue::Kind::Sequence && v->elements.size() != n)
      ctx.fail(fmt::format("input {} has {} elements, the first sequence has {}", i, v->elements.size(), n));
  }
  std::vector<std::vector<RtValue>> results(ctx.numOutputs());
  for (size_t e = 0; e < n; ++e) {
    std::vector<RtValue> in;
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      const RtValue& v = *ctx.input(i);
      in.push_back(v.kind == RtValue::Kind::Sequence ? v.elements[e] : v);
    }
    std::vector<RtValue> outs = ctx.runSubgraph(body, in);
    for (size_t k = 0; k < results.size(); ++k) results[k].push_back(std::move(outs[k]));
  }
  for (size_t k = 0; k < results.size(); ++k) ctx.setOutput(k, tensorSequence(std::move(results[k])));
}

int32_t elemKindOf(const TypeInfo& t) {
  switch (t.kind) {
    case TypeInfo::Kind::Tensor: return kElemTensor;
    case TypeInfo::Kind::Sequence: return kElemSequence;
    case TypeInfo::Kind::Map: return kElemMap;
    case TypeInfo::Kind::Optional: return kElemOptional;
    default: return 0;
  }
}

void optionalOp(KernelContext& ctx) {
  if (ctx.hasInput(0)) return ctx.setOutput(0, RtValue::optionalOf(*ctx.input(0)));
  const Attribute* type = ctx.attr("type");
  if (!type || !type->tp) ctx.fail("an optional without an input needs the 'type' attribute");
  RtValue none = RtValue::optionalNone();
  none.elemTypeHint = elemKindOf(*type->tp);
  ctx.setOutput(0, std::move(none));
}

/// Lenient in every version: a tensor or sequence (allowed from version 18) passes through.
void optionalGetElement(KernelContext& ctx) {
  const RtValue* v = ctx.input(0);
  if (!v || v->isEmpty()) ctx.fail("the input is missing");
  if (v->kind != RtValue::Kind::Optional) return ctx.setOutput(0, *v);
  if (v->elements.empty()) ctx.fail("the optional input holds no element");
  ctx.setOutput(0, v->elements[0]);
}

void optionalHasElement(KernelContext& ctx) {
  const RtValue* v = ctx.input(0);
  bool has = v && !v->isEmpty() && (v->kind != RtValue::Kind::Optional || !v->elements.empty());
  Tensor out = makeTensor(DType::Bool, {});
  mutableData<bool>(out)[0] = has;
  ctx.setOutput(0, std::move(out));
}

}  // namespace

void registerSequenceOps() {
  addRef("", "SequenceConstruct", 11, "ref.sequence_construct", sequenceConstruct);
  addRef("", "SequenceEmpty", 11, "ref.sequence_empty", sequenceEmpty);
  addRef("", "SequenceAt", 11, "ref.sequence_at", sequenceAt);
  addRef("", "SequenceErase", 11, "ref.sequence_erase", sequenceErase);
  addRef("", "SequenceInsert", 11, "ref.sequence_insert", sequenceInsert);
  addRef("", "SequenceLength", 11, "ref.sequence_length", sequenceLength);
  addRef("", "ConcatFromSequence", 11, "ref.concat_from_sequence", concatFromSequence);
  addRef("", "SplitToSequence", 11, "ref.split_to_sequence", splitToSequence);
  addRef("", "SequenceMap", 17, "ref.sequence_map", sequenceMap);
  addRef("", "Optional", 15, "ref.optional", optionalOp);
  addRef("", "OptionalGetElement", 15, "ref.optional_get_element", optionalGetElement);
  addRef("", "OptionalHasElement", 15, "ref.optional_has_element", optionalHasElement);
}

}  // namespace onnxtool::ref
