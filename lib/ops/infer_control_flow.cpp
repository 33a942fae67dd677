// infer_control_flow.cpp: shape inference for If, Loop and Scan (8 and 9+): their bodies are inferred with
// the outer scope visible, and the op's outputs merge what the bodies produce.
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

/// The most specific type both a and b satisfy: dims that differ get fresh names, a rank that
/// differs becomes an unknown rank. Fails when the element types differ.
TypeInfo joinTypes(InferContext& c, const TypeInfo& a, const TypeInfo& b, size_t index) {
  if (a.isNone()) return b;
  if (b.isNone()) return a;
  if (!a.isTensor() || !b.isTensor()) return a;
  if (a.elemType && b.elemType && a.elemType != b.elemType)
    c.fail(fmt::format("output {} has type {} in one branch and {} in the other", index, a.str(), b.str()));
  TypeInfo r = a;
  if (!r.elemType) r.elemType = b.elemType;
  if (!a.shape.hasRank || !b.shape.hasRank || a.shape.rank() != b.shape.rank()) {
    r.shape = Shape::unknownRank();
    return r;
  }
  for (size_t i = 0; i < a.shape.rank(); ++i)
    if (!(a.shape.dims[i] == b.shape.dims[i])) r.shape.dims[i] = c.toDim(c.freshDim());
  return r;
}

Graph* graphAttr(InferContext& c, std::string_view name) {
  const Attribute* a = c.attr(name);
  if (!a || !a->g) c.fail(fmt::format("attribute '{}' must be a graph", name));
  return a->g.get();
}

void ifOp(InferContext& c) {
  auto thenOut = c.inferSubgraph(*graphAttr(c, "then_branch"), {});
  auto elseOut = c.inferSubgraph(*graphAttr(c, "else_branch"), {});
  if (thenOut.size() != elseOut.size() || thenOut.size() != c.numOutputs())
    c.fail(fmt::format("branches have {} and {} outputs for {} node outputs", thenOut.size(), elseOut.size(),
                       c.numOutputs()));
  for (size_t i = 0; i < thenOut.size(); ++i) c.setOutputType(i, joinTypes(c, thenOut[i], elseOut[i], i));
}

/// Adds a leading (or, at `axis`, an inserted) dimension `len` to a tensor type.
TypeInfo withInsertedDim(InferContext& c, const TypeInfo& t, int64_t axis, const SymDim& len) {
  if (!t.isTensor() || !t.shape.hasRank) return t;
  TypeInfo r = t;
  int64_t k = c.normalizeAxis(axis, static_cast<int64_t>(t.shape.rank()) + 1, "scan output axis");
  r.shape.dims.insert(r.shape.dims.begin() + k, c.toDim(len ? len : SymDim(c.freshDim())));
  return r;
}

/// The type a loop-carried value (Loop) or state variable (Scan) has inside the body: the initial
/// value's. Where the body declares its input's shape, only the dims the declaration agrees with
/// are kept: the declaration says which ones later iterations may change, and it is a claim, so
/// a dim it contradicts or leaves open is unknown rather than taken from either side.
TypeInfo carriedType(const TypeInfo& init, const Graph& body, size_t index) {
  if (!init.isTensor() || !init.shape.hasRank || index >= body.inputs().size() || !body.inputs()[index].value)
    return init;
  const TypeInfo& declared = body.inputs()[index].type();
  if (!declared.isTensor() || !declared.shape.hasRank) return init;
  TypeInfo t = init;
  bool sameRank = declared.shape.rank() == init.shape.rank();
  for (size_t i = 0; i < t.shape.rank(); ++i)
    if (!sameRank || !(declared.shape.dims[i] == init.shape.dims[i]) || declared.shape.dims[i].isUnknown())
      t.shape.dims[i] = Dim{};
  return t;
}

void loop(InferContext& c) {
  Graph& body = *graphAttr(c, "body");
  size_t carried = c.numInputs() >= 2 ? c.numInputs() - 2 : 0;
  std::vector<TypeInfo> in{TypeInfo::tensor(DType::Int64, Shape::of({})), TypeInfo::tensor(DType::Bool, Shape::of({}))};
  for (size_t i = 0; i < carried; ++i) in.push_back(carriedType(c.inputType(i + 2), body, i + 2));
  auto out = c.inferSubgraph(body, in);
  if (out.size() < carried + 1) c.fail(fmt::format("body has {} outputs, expected at least {}", out.size(), carried + 1));
  for (size_t i = 0; i < carried; ++i) {
    const TypeInfo& init = c.inputType(i + 2);
    // An optional initial value with a plain body output (Loop 16: optional(seq) in, seq out)
    // gives the body's type, as onnx does.
    if (!init.isNone() && !out[i + 1].isNone() && init.kind != out[i + 1].kind) c.setOutputType(i, out[i + 1]);
    else c.setOutputType(i, joinTypes(c, init, out[i + 1], i));
  }
  SymDim trips;
  if (auto m = c.inputInts(0); m && m->size() == 1 && !c.hasInput(1)) trips = SymExpr((*m)[0]);
  for (size_t i = carried; i + 1 < out.size() && i < c.numOutputs(); ++i)
    c.setOutputType(i, withInsertedDim(c, out[i + 1], 0, trips));
}

void scan(InferContext& c) {
  Graph& body = *graphAttr(c, "body");
  auto numScan = static_cast<size_t>(c.attrInt("num_scan_inputs", 0));
  if (numScan > c.numInputs()) c.fail("num_scan_inputs exceeds the number of inputs");
  size_t state = c.numInputs() - numScan;
  auto inAxes = c.attrInts("scan_input_axes").value_or(std::vector<int64_t>(numScan, 0));
  if (inAxes.size() != numScan) c.fail("scan_input_axes does not match num_scan_inputs");
  std::vector<TypeInfo> in;
  for (size_t i = 0; i < state; ++i) in.push_back(carriedType(c.inputType(i), body, i));
  SymDim seqLen;
  for (size_t j = 0; j < numScan; ++j) {
    TypeInfo t = c.inputType(state + j);
    if (t.isTensor() && t.shape.hasRank) {
      int64_t k = c.normalizeAxis(inAxes[j], static_cast<int64_t>(t.shape.rank()), "scan input axis");
      if (!seqLen) seqLen = c.fromDim(t.shape.dims[k]);
      t.shape.dims.erase(t.shape.dims.begin() + k);
    }
    in.push_back(t);
  }
  auto out = c.inferSubgraph(body, in);
  if (out.size() < state) c.fail("body has fewer outputs than state variables");
  size_t numScanOut = out.size() - state;
  auto outAxes = c.attrInts("scan_output_axes").value_or(std::vector<int64_t>(numScanOut, 0));
  if (outAxes.size() != numScanOut) c.fail("scan_output_axes does not match the scan outputs");
  for (size_t i = 0; i < state; ++i) c.setOutputType(i, joinTypes(c, c.inputType(i), out[i], i));
  for (size_t j = 0; j < numScanOut; ++j) c.setOutputType(state + j, withInsertedDim(c, out[state + j], outAxes[j], seqLen));
}


/// Scan 8: input 0 is the optional sequence_lens; every state and scan input carries a leading
/// batch dim, scan inputs then the sequence axis 1; outputs keep the batch dim.
void scan8(InferContext& c) {
  Graph& body = *graphAttr(c, "body");
  auto numScan = static_cast<size_t>(c.attrInt("num_scan_inputs", 0));
  if (numScan + 1 > c.numInputs()) c.fail("num_scan_inputs exceeds the number of inputs");
  size_t state = c.numInputs() - 1 - numScan;
  auto dropDims = [&](TypeInfo t, size_t count) {
    if (t.isTensor() && t.shape.hasRank) {
      if (t.shape.rank() < count)
        c.fail(fmt::format("a scan input has rank {}, expected at least {}", t.shape.rank(), count));
      t.shape.dims.erase(t.shape.dims.begin(), t.shape.dims.begin() + static_cast<int64_t>(count));
    }
    return t;
  };
  std::vector<TypeInfo> in;
  SymDim batch, seqLen;
  for (size_t i = 0; i < state + numScan; ++i) {
    const TypeInfo& t = c.inputType(1 + i);
    bool isScan = i >= state;
    if (t.isTensor() && t.shape.hasRank && !t.shape.dims.empty()) {
      if (!batch) batch = c.fromDim(t.shape.dims[0]);
      if (isScan && !seqLen && t.shape.rank() >= 2) seqLen = c.fromDim(t.shape.dims[1]);
    }
    in.push_back(isScan ? dropDims(t, 2) : carriedType(dropDims(t, 1), body, i));
  }
  auto out = c.inferSubgraph(body, in);
  if (out.size() < state) c.fail("body has fewer outputs than state variables");
  for (size_t i = 0; i < out.size() && i < c.numOutputs(); ++i) {
    TypeInfo t = i < state ? joinTypes(c, dropDims(c.inputType(1 + i), 1), out[i], i) : out[i];
    if (i >= state) t = withInsertedDim(c, t, 0, seqLen);
    c.setOutputType(i, withInsertedDim(c, t, 0, batch));
  }
}

}  // namespace

void registerInferControlFlow(InferRegistry& r) {
  r.add({"", "If", 1, ifOp});
  r.add({"", "Loop", 1, loop});
  r.add({"", "Scan", 8, scan8});
  r.add({"", "Scan", 9, scan});
}

}  // namespace onnxtool
