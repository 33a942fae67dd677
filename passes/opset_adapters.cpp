// opset_adapters.cpp: the adapters of opset conversion (listed in passes/opset_adapters.def) and
// the step context they rewrite through. Each adapter checks its preconditions before touching
// the graph and returns the reason when the node cannot take the step.
#include "passes/opset_adapters.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lib/error.h"
#include "passes/pass_util.h"

namespace onnxtool {

// ---------------------------------------------------------------- AdaptStep

namespace {

Tensor scalarTensor(DType dtype, double x, bool rank1 = false) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dtype);
  if (rank1) t.dims = {1};
  std::string bytes;
  auto put = [&](const auto& v) { bytes.assign(reinterpret_cast<const char*>(&v), sizeof v); };
  switch (dtype) {
    case DType::Float: put(static_cast<float>(x)); break;
    case DType::Double: put(x); break;
    case DType::Float16: put(floatToHalf(static_cast<float>(x))); break;
    case DType::BFloat16: put(floatToBfloat16(static_cast<float>(x))); break;
    case DType::Int8: put(static_cast<int8_t>(x)); break;
    case DType::Int16: put(static_cast<int16_t>(x)); break;
    case DType::Int32: put(static_cast<int32_t>(x)); break;
    case DType::Int64: put(static_cast<int64_t>(x)); break;
    case DType::UInt8: put(static_cast<uint8_t>(x)); break;
    case DType::UInt16: put(static_cast<uint16_t>(x)); break;
    case DType::UInt32: put(static_cast<uint32_t>(x)); break;
    case DType::UInt64: put(static_cast<uint64_t>(x)); break;
    default: fail(ErrorKind::Internal, "scalarTensor: unsupported dtype {}", dtypeName(dtype));
  }
  t.setRaw(Buffer::copyOf(std::string_view(bytes)));
  return t;
}

bool scalarDTypeSupported(DType d) {
  switch (d) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16: case DType::Int8:
    case DType::Int16: case DType::Int32: case DType::Int64: case DType::UInt8: case DType::UInt16:
    case DType::UInt32: case DType::UInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

Value* AdaptStep::constant(Tensor t, const std::string& base) {
  std::string owner = !n->name.empty() ? n->name : n->output(0) ? n->output(0)->name() : n->opType;
  std::string name = g.uniqueName(owner + "_" + base);
  TypeInfo type = TypeInfo::tensor(t.dtype(), Shape::of(t.dims));
  if (!inFunction_) {
    t.name = name;
    Value* v = g.addInitializer(std::move(t));
    v->setType(std::move(type));
    return v;
  }
  Node* c = g.addNode("Constant", {}, {name}, "", n);
  c->name = name;
  t.name.clear();
  c->setAttr(Attribute::ofTensor("value", std::move(t)));
  c->output(0)->setType(std::move(type));
  created.push_back(c);
  return c->output(0);
}

Value* AdaptStep::constInts(const std::vector<int64_t>& v, const std::string& base, bool scalar) {
  return constant(Tensor::fromInt64s("", scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(v.size())}, v),
                  base);
}

Value* AdaptStep::constScalar(DType dtype, double x, const std::string& base) {
  return constant(scalarTensor(dtype, x), base);
}

Node* AdaptStep::add(const std::string& op, const std::vector<Value*>& inputs, int outputs) {
  std::string base = n->name.empty() ? (n->output(0) ? n->output(0)->name() : n->opType) : n->name;
  std::vector<std::string> names;
  for (int i = 0; i < outputs; ++i) names.push_back(g.uniqueName(base + "_" + op));
  Node* m = g.addNode(op, inputs, names, "", n);
  m->name = names[0];
  // Element type as the first input's (callers override for comparisons and shapes); the shape is
  // left to inference.
  if (!inputs.empty() && inputs[0] && inputs[0]->type().isTensor())
    for (Value* o : m->outputs()) o->setType(TypeInfo::tensor(inputs[0]->type().dtype(), Shape::unknownRank()));
  created.push_back(m);
  return m;
}

void AdaptStep::replaceWith(const std::vector<Value*>& outs) {
  for (size_t i = 0; i < n->outputs().size(); ++i) {
    Value* from = n->output(i);
    if (!from) continue;
    Value* to = i < outs.size() ? outs[i] : nullptr;
    if (!to) {
      if (from->hasUses() || from->isGraphOutput())
        fail(ErrorKind::Internal, "opset conversion of '{}': output {} has no replacement", n->displayName(), i);
      continue;
    }
    if (!from->type().isNone()) to->setType(from->type());
    std::string name = from->name();
    from->replaceAllUsesWith(to);
    for (ValueInfoEntry& e : g.valueInfos())
      if (e.value == from) e.value = to;
    g.renameValue(from, g.uniqueName(name + "__replaced"));
    g.renameValue(to, name);
  }
  g.removeNode(n);
  removed = true;
}

Node* AdaptStep::replaceWithOp(const std::string& op, const std::vector<Value*>& inputs,
                               const std::vector<std::string>& drop) {
  Node* m = add(op, inputs, static_cast<int>(n->outputs().size()));
  for (const Attribute& a : n->attributes)
    if (std::find(drop.begin(), drop.end(), a.name) == drop.end()) m->setAttr(a);
  std::string name = n->name;
  std::vector<Value*> outs(m->outputs().begin(), m->outputs().end());
  replaceWith(outs);
  m->name = name;
  return m;
}

// ---------------------------------------------------------------- helpers

namespace {

std::optional<std::vector<int64_t>> intsOf(const Value* v) {
  const Tensor* t = constantOf(v);
  if (!t) return std::nullopt;
  try {
    return t->toInt64s();
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<int64_t> rankOf(const Value* v) {
  if (v && v->type().isTensor() && v->type().shape.hasRank) return static_cast<int64_t>(v->type().shape.rank());
  return std::nullopt;
}

std::optional<DType> dtypeOf(const Value* v) {
  if (v && v->type().isTensor() && v->type().elemType != 0) return v->type().dtype();
  return std::nullopt;
}

std::string notConstant(const Node* n, size_t i, std::string_view what) {
  return fmt::format("input {} ('{}') is not a constant, and the older form needs it as an attribute", what,
                     n->input(i) ? n->input(i)->name() : std::string());
}

bool isFloat(DType d) { return d == DType::Float || d == DType::Double || d == DType::Float16 || d == DType::BFloat16; }

// ---------------------------------------------------------------- attribute <-> input moves

std::string axesAttrToInput(AdaptStep& s) {
  const Attribute* a = s.n->attr("axes");
  if (!a) return "";
  Value* axes = s.constInts(a->ints, "axes");
  s.n->removeAttr("axes");
  s.n->truncateInputs(1);
  s.n->addInput(axes);
  return "";
}

std::string axesInputToAttr(AdaptStep& s) {
  if (!s.n->input(1)) return "";
  auto axes = intsOf(s.n->input(1));
  if (!axes) return notConstant(s.n, 1, "axes");
  s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofInts("axes", *axes));
  return "";
}

std::string reduceAxesUp(AdaptStep& s) {
  const Attribute* a = s.n->attr("axes");
  if (!a) return "";  // reduce over every axis: the new default with noop_with_empty_axes=0
  Value* axes = s.constInts(a->ints, "axes");
  s.n->removeAttr("axes");
  s.n->truncateInputs(1);
  s.n->addInput(axes);
  return "";
}

std::string reduceAxesDown(AdaptStep& s) {
  bool noop = s.n->attrInt("noop_with_empty_axes", 0) != 0;
  std::optional<std::vector<int64_t>> axes;
  if (s.n->input(1)) {
    axes = intsOf(s.n->input(1));
    if (!axes) return notConstant(s.n, 1, "axes");
  }
  if (noop && (!axes || axes->empty())) {
    // No axes with noop_with_empty_axes=1: the input unchanged.
    Node* id = s.add("Identity", {s.n->input(0)});
    s.replaceWith({id->output(0)});
    return "";
  }
  s.n->removeAttr("noop_with_empty_axes");
  s.n->truncateInputs(1);
  if (axes && !axes->empty()) s.n->setAttr(Attribute::ofInts("axes", *axes));
  return "";
}

std::string splitAttrToInput(AdaptStep& s) {
  const Attribute* a = s.n->attr("split");
  if (!a) return "";
  Value* split = s.constInts(a->ints, "split");
  s.n->removeAttr("split");
  s.n->truncateInputs(1);
  s.n->addInput(split);
  return "";
}

std::string splitInputToAttr(AdaptStep& s) {
  if (!s.n->input(1)) return "";
  auto split = intsOf(s.n->input(1));
  if (!split) return notConstant(s.n, 1, "split");
  s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofInts("split", *split));
  return "";
}

std::string splitNumOutputsUp(AdaptStep& s) {
  // Opset 13 splits equally into as many outputs when no split input is given; 18 needs
  // num_outputs for that (the sizes divide evenly in a valid opset-13 model, so both agree).
  if (s.n->input(1) || s.n->attr("num_outputs")) return "";
  s.n->setAttr(Attribute::ofInt("num_outputs", static_cast<int64_t>(s.n->outputs().size())));
  return "";
}

std::string splitNumOutputsDown(AdaptStep& s) {
  const Attribute* a = s.n->attr("num_outputs");
  if (!a) return "";
  if (s.n->input(1)) return "both a split input and num_outputs";
  int64_t parts = a->i;
  Value* x = s.n->input(0);
  auto r = rankOf(x);
  int64_t axis = s.n->attrInt("axis", 0);
  if (r && axis < 0) axis += *r;
  std::optional<int64_t> dim;
  if (r && axis >= 0 && axis < *r && x->type().shape.dims[axis].isValue()) dim = x->type().shape.dims[axis].value;
  if (dim && parts > 0 && *dim % parts == 0) {
    s.n->removeAttr("num_outputs");  // an equal split into as many outputs: the older default
    return "";
  }
  if (!dim || parts <= 0) return "num_outputs with a split dimension that is not static (the last chunk may be smaller)";
  int64_t chunk = (*dim + parts - 1) / parts;
  std::vector<int64_t> sizes(static_cast<size_t>(parts), chunk);
  sizes.back() = *dim - chunk * (parts - 1);
  s.n->removeAttr("num_outputs");
  s.n->addInput(s.constInts(sizes, "split"));
  return "";
}

std::string padAttrsToInputs(AdaptStep& s) {
  const Attribute* pads = s.n->attr("pads");
  if (!pads) return "no pads attribute";
  float value = s.n->attrFloat("value", 0.0f);
  Value* x = s.n->input(0);
  auto dt = dtypeOf(x);
  if (value != 0.0f && (!dt || !scalarDTypeSupported(*dt))) return "a non-zero pad value for an input whose type is not known";
  Value* p = s.constInts(pads->ints, "pads");
  Value* c = value != 0.0f ? s.constScalar(*dt, value, "value") : nullptr;
  s.n->removeAttr("pads");
  s.n->removeAttr("value");
  s.n->truncateInputs(1);
  s.n->addInput(p);
  if (c) s.n->addInput(c);
  return "";
}

std::string padInputsToAttrs(AdaptStep& s) {
  auto pads = intsOf(s.n->input(1));
  if (!pads) return notConstant(s.n, 1, "pads");
  std::optional<double> value;
  if (s.n->input(2)) {
    auto v = constantAsDoubles(s.n->input(2));
    if (!v || v->size() != 1) return notConstant(s.n, 2, "constant_value");
    value = (*v)[0];
  }
  s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofInts("pads", *pads));
  if (value && *value != 0) s.n->setAttr(Attribute::ofFloat("value", static_cast<float>(*value)));
  return "";
}

std::string clipAttrsToInputs(AdaptStep& s) {
  const Attribute* lo = s.n->attr("min");
  const Attribute* hi = s.n->attr("max");
  DType dt = dtypeOf(s.n->input(0)).value_or(DType::Float);
  if (!scalarDTypeSupported(dt)) return fmt::format("input type {}", dtypeName(dt));
  Value* vlo = lo ? s.constScalar(dt, lo->f, "min") : nullptr;
  Value* vhi = hi ? s.constScalar(dt, hi->f, "max") : nullptr;
  s.n->removeAttr("min");
  s.n->removeAttr("max");
  s.n->truncateInputs(1);
  if (vlo || vhi) s.n->addInput(vlo);
  if (vhi) s.n->addInput(vhi);
  return "";
}

std::string clipInputsToAttrs(AdaptStep& s) {
  std::optional<double> lo, hi;
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!s.n->input(i)) continue;
    auto v = constantAsDoubles(s.n->input(i));
    if (!v || v->size() != 1) return notConstant(s.n, i, i == 1 ? "min" : "max");
    (i == 1 ? lo : hi) = (*v)[0];
  }
  s.n->truncateInputs(1);
  if (lo) s.n->setAttr(Attribute::ofFloat("min", static_cast<float>(*lo)));
  if (hi) s.n->setAttr(Attribute::ofFloat("max", static_cast<float>(*hi)));
  return "";
}

std::string sliceAttrsToInputs(AdaptStep& s) {
  const Attribute* st = s.n->attr("starts");
  const Attribute* en = s.n->attr("ends");
  if (!st || !en) return "no starts/ends attributes";
  Value* vs = s.constInts(st->ints, "starts");
  Value* ve = s.constInts(en->ints, "ends");
  Value* va = s.n->attr("axes") ? s.constInts(s.n->attr("axes")->ints, "axes") : nullptr;
  s.n->removeAttr("starts");
  s.n->removeAttr("ends");
  s.n->removeAttr("axes");
  s.n->truncateInputs(1);
  s.n->addInput(vs);
  s.n->addInput(ve);
  if (va) s.n->addInput(va);
  return "";
}

std::string sliceInputsToAttrs(AdaptStep& s) {
  auto st = intsOf(s.n->input(1));
  if (!st) return notConstant(s.n, 1, "starts");
  auto en = intsOf(s.n->input(2));
  if (!en) return notConstant(s.n, 2, "ends");
  std::optional<std::vector<int64_t>> axes;
  if (s.n->input(3)) {
    axes = intsOf(s.n->input(3));
    if (!axes) return notConstant(s.n, 3, "axes");
  }
  if (s.n->input(4)) {
    auto steps = intsOf(s.n->input(4));
    if (!steps) return notConstant(s.n, 4, "steps");
    for (int64_t k : *steps)
      if (k != 1) return "steps other than 1 (opset 9 slices with step 1 only)";
  }
  s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofInts("starts", *st));
  s.n->setAttr(Attribute::ofInts("ends", *en));
  if (axes) s.n->setAttr(Attribute::ofInts("axes", *axes));
  return "";
}

std::string topkAttrToInput(AdaptStep& s) {
  const Attribute* k = s.n->attr("k");
  if (!k) return "no k attribute";
  Value* vk = s.constInts({k->i}, "k");
  s.n->removeAttr("k");
  s.n->truncateInputs(1);
  s.n->addInput(vk);
  return "";
}

std::string topkInputToAttr(AdaptStep& s) {
  auto k = intsOf(s.n->input(1));
  if (!k || k->size() != 1) return notConstant(s.n, 1, "K");
  s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofInt("k", (*k)[0]));
  return "";
}

std::string dropoutRatioToInput(AdaptStep& s) {
  const Attribute* r = s.n->attr("ratio");
  if (!r) return "";
  Value* v = s.constant(scalarTensor(DType::Float, r->f), "ratio");
  s.n->removeAttr("ratio");
  s.n->truncateInputs(1);
  s.n->addInput(v);
  return "";
}

std::string dropoutRatioToAttr(AdaptStep& s) {
  if (s.n->input(2)) {
    auto t = constantAsDoubles(s.n->input(2));
    if (!t || t->size() != 1) return notConstant(s.n, 2, "training_mode");
    if ((*t)[0] != 0) return "training_mode=true (opset 10 drops out only when training)";
  }
  s.n->removeAttr("seed");  // opset 10 has no seed; an inference Dropout draws nothing
  std::optional<double> ratio;
  if (s.n->input(1)) {
    auto v = constantAsDoubles(s.n->input(1));
    if (!v || v->size() != 1) return notConstant(s.n, 1, "ratio");
    ratio = (*v)[0];
  }
  s.n->truncateInputs(1);
  if (ratio) s.n->setAttr(Attribute::ofFloat("ratio", static_cast<float>(*ratio)));
  return "";
}

std::string dropoutMaskDown(AdaptStep& s) {
  if (s.n->outputs().size() > 1 && s.n->output(1)) return "the mask output (bool from opset 10, the data type before)";
  return "";
}

std::string upsampleScalesToInput(AdaptStep& s) {
  const Attribute* sc = s.n->attr("scales");
  if (!sc) return "no scales attribute";
  Value* v = s.constant(Tensor::fromFloats("", {static_cast<int64_t>(sc->floats.size())}, sc->floats), "scales");
  s.n->removeAttr("scales");
  s.n->addInput(v);
  return "";
}

std::optional<std::vector<float>> floatsOf(const Value* v) {
  auto d = constantAsDoubles(v);
  if (!d) return std::nullopt;
  return std::vector<float>(d->begin(), d->end());
}

std::string upsampleScalesToAttr(AdaptStep& s) {
  auto sc = floatsOf(s.n->input(1));
  if (!sc) return notConstant(s.n, 1, "scales");
  s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofFloats("scales", *sc));
  return "";
}

std::string dftAxisToInput(AdaptStep& s) {
  int64_t axis = s.n->attrInt("axis", 1);
  Value* v = s.constInts({axis}, "axis", true);
  s.n->removeAttr("axis");
  if (!s.n->input(1)) {
    s.n->truncateInputs(1);
    s.n->addInput(nullptr);
  }
  s.n->truncateInputs(2);
  s.n->addInput(v);
  return "";
}

std::string dftAxisToAttr(AdaptStep& s) {
  int64_t axis = -2;
  if (s.n->input(2)) {
    auto a = intsOf(s.n->input(2));
    if (!a || a->size() != 1) return notConstant(s.n, 2, "axis");
    axis = (*a)[0];
  }
  if (axis < 0) {
    auto r = rankOf(s.n->input(0));
    if (!r) return "a negative axis on an input of unknown rank";
    axis += *r;
  }
  s.n->truncateInputs(2);
  if (s.n->inputs().size() == 2 && !s.n->input(1)) s.n->truncateInputs(1);
  s.n->setAttr(Attribute::ofInt("axis", axis));
  return "";
}

std::string constantValueToTensor(AdaptStep& s) {
  for (const char* k : {"value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings"}) {
    const Attribute* a = s.n->attr(k);
    if (!a) continue;
    Tensor t;
    std::string key = k;
    if (key == "value_float") t = Tensor::fromFloats("", {}, {a->f});
    else if (key == "value_floats") t = Tensor::fromFloats("", {static_cast<int64_t>(a->floats.size())}, a->floats);
    else if (key == "value_int") t = Tensor::fromInt64s("", {}, {a->i});
    else if (key == "value_ints") t = Tensor::fromInt64s("", {static_cast<int64_t>(a->ints.size())}, a->ints);
    else {
      t.dataType = static_cast<int32_t>(DType::String);
      if (key == "value_string") t.strings = {a->s};
      else {
        t.strings = a->strings;
        t.dims = {static_cast<int64_t>(a->strings.size())};
      }
      t.storage = Tensor::Storage::Typed;
    }
    if (a->refAttrName.size()) return "the value comes from a function attribute";
    s.n->removeAttr(k);
    s.n->setAttr(Attribute::ofTensor("value", std::move(t)));
    return "";
  }
  return "";
}

std::string negativeAxesDown(AdaptStep& s) {
  Node* n = s.n;
  if (n->opType == "Slice") {
    if (!n->input(3)) return "";
    auto axes = intsOf(n->input(3));
    if (!axes) return notConstant(n, 3, "axes");
    bool neg = false;
    for (int64_t a : *axes) neg |= a < 0;
    if (!neg) return "";
    auto r = rankOf(n->input(0));
    if (!r) return "negative axes on an input of unknown rank (opset 10 takes non-negative axes)";
    for (int64_t& a : *axes)
      if (a < 0) a += *r;
    n->setInput(3, s.constInts(*axes, "axes"));
    return "";
  }
  for (const char* key : {"axis", "axes"}) {
    Attribute* a = n->attr(key);
    if (!a || !a->refAttrName.empty()) continue;
    bool neg = a->type == AttrType::Int ? a->i < 0 : std::any_of(a->ints.begin(), a->ints.end(), [](int64_t v) { return v < 0; });
    if (!neg) continue;
    std::optional<int64_t> r = rankOf(n->input(0));
    if (r && n->opType == "Unsqueeze") *r += static_cast<int64_t>(a->ints.size());
    if (r && n->opType == "OneHot") *r += 1;
    if (!r) return fmt::format("a negative {} on an input of unknown rank (opset 10 takes non-negative ones)", key);
    if (a->type == AttrType::Int) a->i += *r;
    for (int64_t& v : a->ints)
      if (v < 0) v += *r;
  }
  return "";
}

// ---------------------------------------------------------------- semantic changes

std::string poolCeilModeSame(AdaptStep& s) {
  if (s.n->attrInt("ceil_mode", 0) == 0) return "";
  std::string autoPad = s.n->attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID") return "";
  Value* x = s.n->input(0);
  auto shape = staticShape(x);
  std::vector<int64_t> k = s.n->attrInts("kernel_shape");
  if (!shape || shape->size() != k.size() + 2)
    return "ceil_mode=1 with input dims that are not static (opset 22 drops a last window starting in the padding)";
  size_t sp = k.size();
  std::vector<int64_t> strides = s.n->attrInts("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = s.n->attrInts("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = s.n->attrInts("pads", std::vector<int64_t>(2 * sp, 0));
  if (autoPad == "VALID") pads.assign(2 * sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) return "malformed pooling attributes";
  for (size_t i = 0; i < sp; ++i) {
    int64_t in = (*shape)[i + 2];
    int64_t span = in + pads[i] + pads[i + sp] - dil[i] * (k[i] - 1) - 1;
    if (span < 0 || strides[i] <= 0) continue;
    int64_t out = (span + strides[i] - 1) / strides[i] + 1;
    if ((out - 1) * strides[i] >= in + pads[i])
      return fmt::format("ceil_mode=1 where the last window of spatial axis {} starts in the padding (opset 22 drops it, "
                         "older opsets keep it)", i);
  }
  return "";
}


bool isSoftmaxFamily(const Node* n) { return n->opType == "Softmax" || n->opType == "LogSoftmax" || n->opType == "Hardmax"; }

std::string softmaxAxisUp(AdaptStep& s) {
  int64_t axis = s.n->attrInt("axis", 1);
  Value* x = s.n->input(0);
  auto r = rankOf(x);
  int64_t a = r && axis < 0 ? axis + *r : axis;
  if (r && a == *r - 1) {  // the last axis: both semantics agree
    s.n->setAttr(Attribute::ofInt("axis", -1));
    return "";
  }
  if (r && a == 0 && *r == 1) {
    s.n->setAttr(Attribute::ofInt("axis", -1));
    return "";
  }
  // Opset 11 flattens to 2-D at `axis` and normalises over the second dimension.
  Node* flat = s.add("Flatten", {x});
  flat->setAttr(Attribute::ofInt("axis", axis));
  Node* sm = s.add(s.n->opType, {flat->output(0)});
  sm->setAttr(Attribute::ofInt("axis", -1));
  Node* shape = s.add("Shape", {x});
  shape->output(0)->setType(TypeInfo::tensor(DType::Int64, Shape::of({r ? *r : -1})));
  if (!r) shape->output(0)->setType(TypeInfo::tensor(DType::Int64, Shape::unknownRank()));
  Node* back = s.add("Reshape", {sm->output(0), shape->output(0)});
  std::string name = s.n->name;
  s.replaceWith({back->output(0)});
  sm->name = name;
  (void)isSoftmaxFamily;
  return "";
}

std::string softmaxAxisDown(AdaptStep& s) {
  int64_t axis = s.n->attrInt("axis", -1);
  Value* x = s.n->input(0);
  auto r = rankOf(x);
  if (!r) return "the rank of the input is not known (the older axis semantics flatten the trailing dimensions)";
  int64_t a = axis < 0 ? axis + *r : axis;
  if (a == *r - 1) {
    s.n->setAttr(Attribute::ofInt("axis", *r - 1));
    return "";
  }
  std::vector<int64_t> perm(static_cast<size_t>(*r));
  for (int64_t i = 0; i < *r; ++i) perm[i] = i;
  std::swap(perm[a], perm[*r - 1]);
  Node* t1 = s.add("Transpose", {x});
  t1->setAttr(Attribute::ofInts("perm", perm));
  Node* sm = s.add(s.n->opType, {t1->output(0)});
  sm->setAttr(Attribute::ofInt("axis", *r - 1));
  Node* t2 = s.add("Transpose", {sm->output(0)});
  t2->setAttr(Attribute::ofInts("perm", perm));
  std::string name = s.n->name;
  s.replaceWith({t2->output(0)});
  sm->name = name;
  return "";
}

std::string batchNormSpatialUp(AdaptStep& s) {
  if (s.n->attrInt("spatial", 1) != 1) return "spatial=0 (per-element statistics) has no form from opset 9 on";
  s.n->removeAttr("spatial");
  return "";
}

std::string batchNormSpatialDown(AdaptStep&) { return ""; }

size_t presentOutputs(const Node* n) {
  size_t k = 0;
  for (Value* o : n->outputs())
    if (o) ++k;
  return k;
}

std::string batchNormTrainingUp(AdaptStep& s) {
  if (presentOutputs(s.n) > 1) return "training outputs (mean, var, saved_mean, saved_var changed meaning at opset 14)";
  return "";
}

std::string batchNormTrainingDown(AdaptStep& s) {
  if (s.n->attrInt("training_mode", 0) != 0) return "training_mode=1 (opset 9 has no training form with these outputs)";
  if (presentOutputs(s.n) > 1) return "running_mean/running_var outputs";
  s.n->removeAttr("training_mode");
  return "";
}

std::string gemmOptionalCDown(AdaptStep& s) {
  if (s.n->input(2)) return "";
  auto dt = dtypeOf(s.n->input(0));
  if (!dt || !scalarDTypeSupported(*dt)) return "C is absent and the type of A is not known";
  Value* c = s.constScalar(*dt, 0.0, "C");
  s.n->truncateInputs(2);
  s.n->addInput(c);
  return "";
}

std::string castLikeDown(AdaptStep& s) {
  auto dt = dtypeOf(s.n->input(1));
  if (!dt) return "the type of target_type is not known";
  Node* c = s.replaceWithOp("Cast", {s.n->input(0)}, {"saturate", "round_mode"});
  c->setAttr(Attribute::ofInt("to", static_cast<int64_t>(*dt)));
  return "";
}

std::string upsampleToResize(AdaptStep& s) {
  std::string mode = s.n->attrString("mode", "nearest");
  s.replaceWithOp("Resize", {s.n->input(0), s.n->input(1)});
  (void)mode;
  return "";
}

std::string resizeToUpsample(AdaptStep& s) {
  s.replaceWithOp("Upsample", {s.n->input(0), s.n->input(1)});
  return "";
}

std::string resize11Up(AdaptStep& s) {
  std::string mode = s.n->attrString("mode", "nearest");
  Value* roi = s.constant(Tensor::fromFloats("", {0}, {}), "roi");
  Value* x = s.n->input(0);
  Value* scales = s.n->input(1);
  s.n->truncateInputs(0);
  s.n->addInput(x);
  s.n->addInput(roi);
  s.n->addInput(scales);
  s.n->setAttr(Attribute::ofString("coordinate_transformation_mode", "asymmetric"));
  if (mode == "nearest") s.n->setAttr(Attribute::ofString("nearest_mode", "floor"));
  return "";
}

std::string resize11Down(AdaptStep& s) {
  std::string mode = s.n->attrString("mode", "nearest");
  if (mode != "nearest" && mode != "linear") return fmt::format("mode '{}' (opset 10 has nearest and linear)", mode);
  std::string ctm = s.n->attrString("coordinate_transformation_mode", "half_pixel");
  if (ctm != "asymmetric") return fmt::format("coordinate_transformation_mode '{}' (opset 10 computes asymmetric)", ctm);
  if (mode == "nearest" && s.n->attrString("nearest_mode", "round_prefer_floor") != "floor")
    return "nearest_mode other than floor (opset 10 rounds down)";
  if (s.n->attrInt("exclude_outside", 0) != 0) return "exclude_outside=1";
  if (s.n->input(3)) return "the sizes input (opset 10 takes scales only)";
  Value* scales = s.n->input(2);
  if (!scales) return "no scales";
  Value* x = s.n->input(0);
  s.n->truncateInputs(0);
  s.n->addInput(x);
  s.n->addInput(scales);
  for (const char* a : {"coordinate_transformation_mode", "nearest_mode", "exclude_outside", "extrapolation_value", "cubic_coeff_a"})
    s.n->removeAttr(a);
  return "";
}

std::string resize13Down(AdaptStep& s) {
  if (!s.n->input(1)) {
    Value* roi = s.constant(Tensor::fromFloats("", {0}, {}), "roi");
    s.n->setInput(1, roi);
  }
  if (!s.n->input(2)) {
    Value* scales = s.constant(Tensor::fromFloats("", {0}, {}), "scales");
    s.n->setInput(2, scales);
  }
  return "";
}

std::string scatterToScatterElements(AdaptStep& s) {
  s.replaceWithOp("ScatterElements", {s.n->input(0), s.n->input(1), s.n->input(2)});
  return "";
}

std::string scatterElementsToScatter(AdaptStep& s) {
  if (auto r = negativeAxesDown(s); !r.empty()) return r;
  s.replaceWithOp("Scatter", {s.n->input(0), s.n->input(1), s.n->input(2)});
  return "";
}

std::string roiAlignModeUp(AdaptStep& s) {
  s.n->setAttr(Attribute::ofString("coordinate_transformation_mode", "output_half_pixel"));
  return "";
}

std::string roiAlignModeDown(AdaptStep& s) {
  std::string m = s.n->attrString("coordinate_transformation_mode", "half_pixel");
  if (m != "output_half_pixel") return fmt::format("coordinate_transformation_mode '{}' (opset 10 computes output_half_pixel)", m);
  s.n->removeAttr("coordinate_transformation_mode");
  return "";
}

std::string gridSampleModeUp(AdaptStep& s) {
  std::string m = s.n->attrString("mode", "bilinear");
  s.n->setAttr(Attribute::ofString("mode", m == "bilinear" ? "linear" : m == "bicubic" ? "cubic" : m));
  return "";
}

std::string gridSampleModeDown(AdaptStep& s) {
  auto r = rankOf(s.n->input(0));
  if (!r || *r != 4) return "an input that is not known to be 4-D (opset 16 samples 4-D inputs only)";
  std::string m = s.n->attrString("mode", "linear");
  s.n->setAttr(Attribute::ofString("mode", m == "linear" ? "bilinear" : m == "cubic" ? "bicubic" : m));
  return "";
}

std::string groupNormScaleUp(AdaptStep& s) {
  int64_t groups = s.n->attrInt("num_groups", 0);
  auto sc = constantAsDoubles(s.n->input(1));
  auto b = constantAsDoubles(s.n->input(2));
  Value* x = s.n->input(0);
  auto r = rankOf(x);
  if (!sc || !b) return "scale and bias are not constants (opset 21 takes them per channel, 18 per group)";
  if (!r || *r < 2 || !x->type().shape.dims[1].isValue()) return "the channel count is not static";
  int64_t c = x->type().shape.dims[1].value;
  if (groups <= 0 || c % groups != 0 || static_cast<int64_t>(sc->size()) != groups) return "scale/bias shape does not match num_groups";
  auto dt = dtypeOf(s.n->input(1));
  if (!dt || *dt != DType::Float) return "scale/bias not float32";
  std::vector<float> s2, b2;
  for (int64_t i = 0; i < c; ++i) {
    s2.push_back(static_cast<float>((*sc)[i / (c / groups)]));
    b2.push_back(static_cast<float>((*b)[i / (c / groups)]));
  }
  s.n->setInput(1, s.constant(Tensor::fromFloats("", {c}, s2), "scale"));
  s.n->setInput(2, s.constant(Tensor::fromFloats("", {c}, b2), "bias"));
  return "";
}

std::string groupNormScaleDown(AdaptStep& s) {
  int64_t groups = s.n->attrInt("num_groups", 0);
  auto sc = constantAsDoubles(s.n->input(1));
  auto b = constantAsDoubles(s.n->input(2));
  if (!sc || !b) return "scale and bias are not constants (opset 21 takes them per channel, 18 per group)";
  int64_t c = static_cast<int64_t>(sc->size());
  if (groups <= 0 || c % groups != 0 || b->size() != sc->size()) return "scale/bias shape does not match num_groups";
  auto dt = dtypeOf(s.n->input(1));
  if (!dt || *dt != DType::Float) return "scale/bias not float32";
  if (s.n->attrInt("stash_type", 1) != 1) return "stash_type other than float32";
  std::vector<float> s2, b2;
  int64_t per = c / groups;
  for (int64_t gi = 0; gi < groups; ++gi) {
    for (int64_t k = 1; k < per; ++k)
      if ((*sc)[gi * per + k] != (*sc)[gi * per] || (*b)[gi * per + k] != (*b)[gi * per])
        return "scale or bias differs within a group (opset 18 takes one value per group)";
    s2.push_back(static_cast<float>((*sc)[gi * per]));
    b2.push_back(static_cast<float>((*b)[gi * per]));
  }
  s.n->setInput(1, s.constant(Tensor::fromFloats("", {groups}, s2), "scale"));
  s.n->setInput(2, s.constant(Tensor::fromFloats("", {groups}, b2), "bias"));
  s.n->removeAttr("stash_type");
  return "";
}

/// OneHot's indices with negative entries replaced: by indices + depth (down) or depth (up).
std::string oneHotNegative(AdaptStep& s, bool down) {
  Value* idx = s.n->input(0);
  auto dt = dtypeOf(idx);
  if (!dt) return "the type of the indices is not known (negative indices changed meaning at opset 11)";
  if (*dt == DType::UInt8 || *dt == DType::UInt16 || *dt == DType::UInt32 || *dt == DType::UInt64) return "";
  if (auto c = constantAsDoubles(idx)) {
    if (std::all_of(c->begin(), c->end(), [](double v) { return v >= 0; })) return "";
  }
  if (!scalarDTypeSupported(*dt)) return fmt::format("indices of type {}", dtypeName(*dt));
  Node* depth = s.add("Cast", {s.n->input(1)});
  depth->setAttr(Attribute::ofInt("to", static_cast<int64_t>(*dt)));
  depth->output(0)->setType(TypeInfo::tensor(*dt, Shape::unknownRank()));
  Node* neg = s.add("Less", {idx, s.constScalar(*dt, 0.0, "zero")});
  neg->output(0)->setType(TypeInfo::tensor(DType::Bool, Shape::unknownRank()));
  Value* repl = down ? s.add("Add", {idx, depth->output(0)})->output(0) : depth->output(0);
  Node* w = s.add("Where", {neg->output(0), repl, idx});
  w->output(0)->setType(idx->type());
  s.n->setInput(0, w->output(0));
  return "";
}
std::string oneHotNegativeDown(AdaptStep& s) {
  if (auto r = negativeAxesDown(s); !r.empty()) return r;
  return oneHotNegative(s, true);
}
std::string oneHotNegativeUp(AdaptStep& s) { return oneHotNegative(s, false); }

std::string castFnuzInfSame(AdaptStep& s) {
  std::optional<DType> to;
  if (s.n->opType == "Cast") to = static_cast<DType>(s.n->attrInt("to", 0));
  else to = dtypeOf(s.n->input(1));
  if (!to) return "the target type is not known (casts to float8 FNUZ changed at opset 24)";
  if (*to != DType::Float8E4M3FNUZ && *to != DType::Float8E5M2FNUZ) return "";
  if (s.n->attrInt("saturate", 1) == 0) return "";
  auto from = dtypeOf(s.n->input(0));
  if (from && !isFloat(*from)) return "";
  if (auto c = constantAsDoubles(s.n->input(0)))
    if (std::none_of(c->begin(), c->end(), [](double v) { return std::isinf(v); })) return "";
  return fmt::format("a saturating cast to {} of an input that may hold +-inf (NaN before opset 24, the largest value from 24 on)",
                     dtypeName(*to));
}

std::string reshapeAllowZeroDown(AdaptStep& s) {
  if (s.n->attrInt("allowzero", 0) == 0) {
    s.n->removeAttr("allowzero");
    return "";
  }
  auto shape = intsOf(s.n->input(1));
  if (!shape) return "allowzero=1 with a shape that is not constant";
  for (int64_t d : *shape)
    if (d == 0) return "allowzero=1 with a 0 in the shape (opset 13 copies the input dim)";
  s.n->removeAttr("allowzero");
  return "";
}

std::string quantizePerTensorDown(AdaptStep& s) {
  Value* scale = s.n->input(1);
  bool scalar = false;
  if (const Tensor* t = constantOf(scale)) scalar = t->numElements() == std::optional<int64_t>(1) && t->dims.size() <= 1;
  else if (scale && scale->type().isTensor() && scale->type().shape.hasRank && scale->type().shape.rank() == 0) scalar = true;
  if (!scalar) return "a per-axis scale (opset 10 quantizes per tensor)";
  s.n->removeAttr("axis");
  return "";
}

// ---------------------------------------------------------------- lowerings

std::string needFloat(const Value* x, DType* dt) {
  auto d = dtypeOf(x);
  if (!d) return "the input type is not known";
  if (!isFloat(*d)) return fmt::format("input type {}", dtypeName(*d));
  *dt = *d;
  return "";
}

std::string lowerGelu(AdaptStep& s) {
  Value* x = s.n->input(0);
  DType dt;
  if (auto r = needFloat(x, &dt); !r.empty()) return r;
  std::string approx = s.n->attrString("approximate", "none");
  Value* out;
  if (approx == "tanh") {
    // 0.5*x*(1+Tanh(sqrt(2/pi)*(x+0.044715*x^3)))
    Node* x2 = s.add("Mul", {x, x});
    Node* x3 = s.add("Mul", {x2->output(0), x});
    Node* k = s.add("Mul", {x3->output(0), s.constScalar(dt, 0.044715, "c")});
    Node* inner = s.add("Add", {x, k->output(0)});
    Node* sc = s.add("Mul", {inner->output(0), s.constScalar(dt, std::sqrt(2.0 / std::numbers::pi), "sqrt_2_pi")});
    Node* th = s.add("Tanh", {sc->output(0)});
    Node* one = s.add("Add", {th->output(0), s.constScalar(dt, 1.0, "one")});
    Node* hx = s.add("Mul", {x, s.constScalar(dt, 0.5, "half")});
    out = s.add("Mul", {hx->output(0), one->output(0)})->output(0);
  } else if (approx == "none") {
    Node* d = s.add("Div", {x, s.constScalar(dt, std::numbers::sqrt2, "sqrt2")});
    Node* e = s.add("Erf", {d->output(0)});
    Node* one = s.add("Add", {e->output(0), s.constScalar(dt, 1.0, "one")});
    Node* hx = s.add("Mul", {x, s.constScalar(dt, 0.5, "half")});
    out = s.add("Mul", {hx->output(0), one->output(0)})->output(0);
  } else {
    return fmt::format("approximate '{}'", approx);
  }
  s.replaceWith({out});
  return "";
}

std::string lowerHardSwish(AdaptStep& s) {
  Value* x = s.n->input(0);
  Node* hs = s.add("HardSigmoid", {x});
  hs->setAttr(Attribute::ofFloat("alpha", 1.0f / 6.0f));
  hs->setAttr(Attribute::ofFloat("beta", 0.5f));
  Node* m = s.add("Mul", {x, hs->output(0)});
  s.replaceWith({m->output(0)});
  return "";
}

std::string lowerMish(AdaptStep& s) {
  Value* x = s.n->input(0);
  Node* sp = s.add("Softplus", {x});
  Node* t = s.add("Tanh", {sp->output(0)});
  Node* m = s.add("Mul", {x, t->output(0)});
  s.replaceWith({m->output(0)});
  return "";
}

std::string lowerCelu(AdaptStep& s) {
  Value* x = s.n->input(0);
  DType dt;
  if (auto r = needFloat(x, &dt); !r.empty()) return r;
  double alpha = s.n->attrFloat("alpha", 1.0f);
  // max(0,x) + min(0, alpha*(exp(x/alpha)-1))
  Value* zero = s.constScalar(dt, 0.0, "zero");
  Node* pos = s.add("Max", {x, zero});
  Node* d = s.add("Div", {x, s.constScalar(dt, alpha, "alpha")});
  Node* e = s.add("Exp", {d->output(0)});
  Node* em1 = s.add("Sub", {e->output(0), s.constScalar(dt, 1.0, "one")});
  Node* sc = s.add("Mul", {em1->output(0), s.constScalar(dt, alpha, "alpha")});
  Node* neg = s.add("Min", {sc->output(0), zero});
  Node* sum = s.add("Add", {pos->output(0), neg->output(0)});
  s.replaceWith({sum->output(0)});
  return "";
}

std::string lowerSwish(AdaptStep& s) {
  Value* x = s.n->input(0);
  double alpha = s.n->attrFloat("alpha", 1.0f);
  Value* ax = x;
  if (alpha != 1.0) {
    DType dt;
    if (auto r = needFloat(x, &dt); !r.empty()) return r;
    ax = s.add("Mul", {x, s.constScalar(dt, alpha, "alpha")})->output(0);
  }
  Node* sg = s.add("Sigmoid", {ax});
  Node* m = s.add("Mul", {x, sg->output(0)});
  s.replaceWith({m->output(0)});
  return "";
}

std::string lowerCompareOrEqual(AdaptStep& s, const char* strict) {
  Value* a = s.n->input(0);
  Value* b = s.n->input(1);
  Node* c = s.add(strict, {a, b});
  Node* e = s.add("Equal", {a, b});
  for (Node* m : {c, e}) m->output(0)->setType(TypeInfo::tensor(DType::Bool, Shape::unknownRank()));
  Node* o = s.add("Or", {c->output(0), e->output(0)});
  s.replaceWith({o->output(0)});
  return "";
}
std::string lowerGreaterOrEqual(AdaptStep& s) { return lowerCompareOrEqual(s, "Greater"); }
std::string lowerLessOrEqual(AdaptStep& s) { return lowerCompareOrEqual(s, "Less"); }

/// ReduceMean over `axes` with keepdims=1, in the form of opset `s.to`.
Value* reduceMean(AdaptStep& s, Value* x, const std::vector<int64_t>& axes) {
  Node* r;
  if (s.to >= 18) {
    r = s.add("ReduceMean", {x, s.constInts(axes, "axes")});
  } else {
    r = s.add("ReduceMean", {x});
    r->setAttr(Attribute::ofInts("axes", axes));
  }
  r->setAttr(Attribute::ofInt("keepdims", 1));
  return r->output(0);
}

/// The axes from `axis` to the last, negative when rank is unknown and axis < 0.
std::optional<std::vector<int64_t>> trailingAxes(const Value* x, int64_t axis) {
  std::vector<int64_t> axes;
  auto r = rankOf(x);
  if (axis < 0 && r) axis += *r;
  if (axis < 0) {
    for (int64_t a = axis; a < 0; ++a) axes.push_back(a);
    return axes;
  }
  if (!r) return std::nullopt;
  for (int64_t a = axis; a < *r; ++a) axes.push_back(a);
  return axes;
}

std::string lowerNorm(AdaptStep& s, bool layer) {
  Value* x = s.n->input(0);
  DType dt;
  if (auto r = needFloat(x, &dt); !r.empty()) return r;
  bool extra = false;
  for (size_t i = 1; i < s.n->outputs().size(); ++i) extra |= s.n->output(i) != nullptr;
  auto axes = trailingAxes(x, s.n->attrInt("axis", -1));
  if (!axes) return "a non-negative axis on an input of unknown rank";
  double eps = s.n->attrFloat("epsilon", layer ? 1e-5f : 1e-5f);
  bool stash = s.n->attrInt("stash_type", 1) == 1 && dt != DType::Float && dt != DType::Double;
  DType ct = stash ? DType::Float : dt;
  Value* xc = x;
  if (stash) {
    Node* c = s.add("Cast", {x});
    c->setAttr(Attribute::ofInt("to", static_cast<int64_t>(DType::Float)));
    c->output(0)->setType(TypeInfo::tensor(DType::Float, Shape::unknownRank()));
    xc = c->output(0);
  }
  if (extra) {
    // Mean and InvStdDev are computed in the stash type.
    for (size_t i = 1; i < s.n->outputs().size(); ++i)
      if (s.n->output(i) && dtypeOf(s.n->output(i)) != ct)
        return "Mean/InvStdDev outputs of a type other than the computation's";
  }
  Value* centered = xc;
  Value* mean = nullptr;
  if (layer) {
    mean = reduceMean(s, xc, *axes);
    centered = s.add("Sub", {xc, mean})->output(0);
  }
  Node* sq = s.add("Mul", {centered, centered});
  Value* var = reduceMean(s, sq->output(0), *axes);
  Node* ve = s.add("Add", {var, s.constScalar(ct, eps, "epsilon")});
  Node* sd = s.add("Sqrt", {ve->output(0)});
  Value* y = s.add("Div", {centered, sd->output(0)})->output(0);
  Value* invStd = extra ? s.add("Reciprocal", {sd->output(0)})->output(0) : nullptr;
  if (stash) {
    Node* c = s.add("Cast", {y});
    c->setAttr(Attribute::ofInt("to", static_cast<int64_t>(dt)));
    c->output(0)->setType(TypeInfo::tensor(dt, Shape::unknownRank()));
    y = c->output(0);
  }
  y = s.add("Mul", {y, s.n->input(1)})->output(0);
  if (layer && s.n->input(2)) y = s.add("Add", {y, s.n->input(2)})->output(0);
  s.replaceWith({y, mean, invStd});
  return "";
}

std::string lowerLayerNorm(AdaptStep& s) { return lowerNorm(s, true); }
std::string lowerRmsNorm(AdaptStep& s) { return lowerNorm(s, false); }

constexpr AdapterInfo kAdapters[] = {
#define ONNXTOOL_ADAPTER(op, version, direction, fn, summary) {op, version, AdaptDirection::direction, &fn, summary},
#include "passes/opset_adapters.def"
#undef ONNXTOOL_ADAPTER
};

}  // namespace

std::span<const AdapterInfo> allAdapters() { return kAdapters; }

bool runsGenericAfter(const AdapterInfo& a) { return a.fn == &negativeAxesDown || a.fn == &oneHotNegativeDown; }

const AdapterInfo* findAdapter(std::string_view op, int version, AdaptDirection direction) {
  for (const AdapterInfo& a : kAdapters)
    if (a.op == op && a.version == version && a.direction == direction) return &a;
  return nullptr;
}

}  // namespace onnxtool
