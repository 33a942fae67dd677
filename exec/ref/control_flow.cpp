// control_flow.cpp: reference kernels of If, Loop and Scan (Scan-8 with its batch axis and
// sequence_lens, Scan-9+ with per-input/output axes and directions), and the axis-wise tensor
// copies they share with the sequence ops (exec/ref/sequence.cpp).
//
// Bodies run through ctx.runSubgraph, which binds the body's formal inputs by position and lets
// the body read outer-scope values. Loop-carried values and If results are passed through as
// RtValues, so sequences and optionals flow through unchanged.
#include <algorithm>
#include <optional>

#include <fmt/ranges.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

void registerSequenceOps();  // sequence.cpp

// Axis-wise tensor copies shared with sequence.cpp (which declares them again); their own
// namespace keeps them clear of helpers of the same name in other families.
namespace cf {

/// Copies `count` elements of src starting at element srcOff into dst at element dstOff. Works
/// for every element type: strings, byte-sized types, and packed sub-byte types (bit by bit).
/// Precondition: same dtype, ranges in bounds, dst freshly made (not shared).
void copyElements(const TensorData& src, int64_t srcOff, Tensor& dst, int64_t dstOff, int64_t count) {
  if (count <= 0) return;
  DType t = src.dtype();
  if (t == DType::String) {
    std::copy_n(src.strings.begin() + srcOff, count, dst.strings.begin() + dstOff);
    return;
  }
  int bits = dtypeBits(t);
  if (bits % 8 == 0) {
    size_t es = static_cast<size_t>(bits / 8);
    std::memcpy(dst.raw.mutableData() + static_cast<size_t>(dstOff) * es, src.raw.data() + static_cast<size_t>(srcOff) * es,
                static_cast<size_t>(count) * es);
    return;
  }
  // Sub-byte types are a little-endian bit stream (element 0 in the low bits of byte 0).
  const uint8_t* s = src.raw.data();
  uint8_t* d = dst.raw.mutableData();
  for (int64_t i = 0; i < count * bits; ++i) {
    uint64_t sb = static_cast<uint64_t>(srcOff * bits + i), db = static_cast<uint64_t>(dstOff * bits + i);
    uint8_t mask = static_cast<uint8_t>(1u << (db % 8));
    if ((s[sb / 8] >> (sb % 8)) & 1u) d[db / 8] |= mask;
    else d[db / 8] &= static_cast<uint8_t>(~mask);
  }
}

static int64_t prodDims(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

/// The sub-tensor of t with indices [start, start+len) along `axis` (the axis is kept).
/// Precondition: axis in [0, rank), 0 <= start, start + len <= dims[axis].
Tensor sliceAxis(const TensorData& t, int64_t axis, int64_t start, int64_t len) {
  std::vector<int64_t> dims = t.dims;
  size_t a = static_cast<size_t>(axis);
  int64_t outer = prodDims(t.dims, 0, a), inner = prodDims(t.dims, a + 1, t.dims.size()), axisLen = t.dims[a];
  dims[a] = len;
  int bits = dtypeBits(t.dtype());
  if (outer == 1 && t.dtype() != DType::String && bits % 8 == 0) {
    // One contiguous run: share the bytes instead of copying them.
    size_t es = static_cast<size_t>(bits / 8);
    Tensor out = reshaped(t, dims);
    out.raw = t.raw.slice(static_cast<size_t>(start * inner) * es, static_cast<size_t>(len * inner) * es);
    return out;
  }
  Tensor out = makeTensor(t.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) copyElements(t, (o * axisLen + start) * inner, out, o * len * inner, len * inner);
  return out;
}

/// Concatenation of `parts` along `axis` (numpy.concatenate). Fails naming the node when the
/// parts differ in element type, rank, or a dimension other than `axis`.
/// Precondition: parts non-empty, axis in [0, rank).
Tensor concatAxis(const KernelContext& ctx, const std::vector<const TensorData*>& parts, int64_t axis) {
  const TensorData& first = *parts.front();
  size_t a = static_cast<size_t>(axis);
  std::vector<int64_t> dims = first.dims;
  dims[a] = 0;
  for (const TensorData* p : parts) {
    if (p->dataType != first.dataType)
      ctx.fail(fmt::format("cannot concatenate {} with {}", dtypeName(first.dtype()), dtypeName(p->dtype())));
    bool same = p->dims.size() == first.dims.size();
    for (size_t i = 0; same && i < first.dims.size(); ++i) same = i == a || p->dims[i] == first.dims[i];
    if (!same)
      ctx.fail(fmt::format("cannot concatenate tensors of shapes [{}] and [{}] along axis {}", fmt::join(first.dims, ","),
                           fmt::join(p->dims, ","), axis));
    dims[a] += p->dims[a];
  }
  Tensor out = makeTensor(first.dtype(), dims);
  int64_t outer = prodDims(dims, 0, a), inner = prodDims(dims, a + 1, dims.size());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = o * dims[a] * inner;
    for (const TensorData* p : parts) {
      int64_t run = p->dims[a] * inner;
      copyElements(*p, o * run, out, at, run);
      at += run;
    }
  }
  return out;
}

/// t with a new axis of size 1 at `axis` (in [0, rank]); shares the bytes.
Tensor insertAxis(const TensorData& t, int64_t axis) {
  std::vector<int64_t> dims = t.dims;
  dims.insert(dims.begin() + axis, 1);
  return reshaped(t, std::move(dims));
}

/// t without `axis` (which must have size 1); shares the bytes.
Tensor removeAxis(const TensorData& t, int64_t axis) {
  std::vector<int64_t> dims = t.dims;
  dims.erase(dims.begin() + axis);
  return reshaped(t, std::move(dims));
}

}  // namespace cf

namespace {

using cf::concatAxis;
using cf::copyElements;
using cf::insertAxis;
using cf::removeAxis;
using cf::sliceAxis;

const Graph& bodyGraph(const KernelContext& ctx, const char* name) {
  const Attribute* a = ctx.attr(name);
  if (!a || !a->g) ctx.fail(fmt::format("the graph attribute '{}' is missing", name));
  return *a->g;
}

bool scalarTrue(const KernelContext& ctx, const RtValue& v, const char* what) {
  if (!v.isTensor() || numel(*v.tensor) != 1) ctx.fail(fmt::format("{} must be a tensor of one element", what));
  return v.tensor->elementAsDouble(0) != 0;
}

/// Stacks per-iteration tensors along a new axis `axis` (scan outputs). With no iterations the
/// result is empty along the new axis, typed from the body output's declared type.
Tensor stackIterations(const KernelContext& ctx, const std::vector<std::shared_ptr<const RtTensor>>& items, int64_t axis,
                       const TypeInfo& declared, size_t index) {
  if (items.empty()) {
    if (!declared.isTensor() || declared.elemType == 0)
      ctx.fail(fmt::format("scan output {} ran no iteration and its body output has no declared element type", index));
    std::vector<int64_t> dims;
    if (declared.shape.hasRank)
      for (const auto& d : declared.shape.dims) dims.push_back(d.isValue() ? d.value : 0);
    dims.insert(dims.begin() + std::min<int64_t>(axis, static_cast<int64_t>(dims.size())), 0);
    return makeTensor(declared.dtype(), dims);
  }
  const TensorData& first = *items.front();
  std::vector<Tensor> expanded;
  std::vector<const TensorData*> parts;
  expanded.reserve(items.size());
  for (const auto& t : items) {
    if (t->dims != first.dims || t->dataType != first.dataType)
      ctx.fail(fmt::format("scan output {} changed type or shape between iterations ([{}] vs [{}])", index,
                           fmt::join(first.dims, ","), fmt::join(t->dims, ",")));
    expanded.push_back(insertAxis(*t, axis));
  }
  for (const TensorData& t : expanded) parts.push_back(&t);
  return concatAxis(ctx, parts, axis);
}

std::shared_ptr<const RtTensor> scanElement(const KernelContext& ctx, const RtValue& v, size_t index) {
  if (!v.isTensor()) ctx.fail(fmt::format("body scan output {} is not a tensor", index));
  return v.tensor;
}

Tensor scalarTensor(DType t, int64_t v) {
  Tensor out = makeTensor(t, {});
  if (t == DType::Bool) mutableData<bool>(out)[0] = v != 0;
  else mutableData<int64_t>(out)[0] = v;
  return out;
}

void ifOp(KernelContext& ctx) {
  bool c = scalarTrue(ctx, *ctx.input(0), "the If condition");
  const Graph& branch = bodyGraph(ctx, c ? "then_branch" : "else_branch");
  std::vector<RtValue> outs = ctx.runSubgraph(branch, {});
  if (outs.size() != ctx.numOutputs())
    ctx.fail(fmt::format("the branch produced {} outputs, the node has {}", outs.size(), ctx.numOutputs()));
  for (size_t i = 0; i < outs.size(); ++i) ctx.setOutput(i, std::move(outs[i]));
}

/// Loop (all versions): M and cond optional, N loop-carried values of any kind, K scan outputs
/// stacked along a new axis 0.
void loopOp(KernelContext& ctx) {
  const Graph& body = bodyGraph(ctx, "body");
  size_t n = ctx.numInputs() > 2 ? ctx.numInputs() - 2 : 0;
  if (body.inputs().size() != n + 2)
    ctx.fail(fmt::format("the body takes {} inputs, expected 2 + {} loop-carried values", body.inputs().size(), n));
  if (body.outputs().size() < n + 1)
    ctx.fail(fmt::format("the body yields {} outputs, expected at least 1 + {} loop-carried values", body.outputs().size(), n));
  size_t k = body.outputs().size() - 1 - n;
  if (ctx.numOutputs() > n + k)
    ctx.fail(fmt::format("the node has {} outputs, the body yields {} loop-carried and {} scan outputs", ctx.numOutputs(), n, k));

  std::optional<int64_t> tripCount;
  if (ctx.hasInput(0)) {
    const TensorData& m = ctx.tensor(0);
    if (numel(m) != 1) ctx.fail("the trip count M must have exactly one element");
    tripCount = m.elementAsInt(0);
  }
  bool cond = ctx.hasInput(1) ? scalarTrue(ctx, *ctx.input(1), "the loop condition") : true;
  if (!tripCount && !ctx.hasInput(1)) ctx.fail("neither a trip count nor a condition is given: the loop would never end");

  std::vector<RtValue> carried;
  for (size_t i = 0; i < n; ++i) carried.push_back(ctx.input(2 + i) ? *ctx.input(2 + i) : RtValue{});
  std::vector<std::vector<std::shared_ptr<const RtTensor>>> scans(k);
  for (int64_t it = 0; cond && (!tripCount || it < *tripCount); ++it) {
    std::vector<RtValue> in;
    in.reserve(n + 2);
    in.push_back(RtValue::ofTensor(scalarTensor(DType::Int64, it)));
    in.push_back(RtValue::ofTensor(scalarTensor(DType::Bool, cond)));
    for (RtValue& v : carried) in.push_back(std::move(v));
    std::vector<RtValue> outs = ctx.runSubgraph(body, in);
    cond = scalarTrue(ctx, outs.at(0), "the body's condition output");
    for (size_t i = 0; i < n; ++i) carried[i] = std::move(outs[1 + i]);
    for (size_t j = 0; j < k; ++j) scans[j].push_back(scanElement(ctx, outs[1 + n + j], j));
  }
  for (size_t i = 0; i < n && i < ctx.numOutputs(); ++i) ctx.setOutput(i, std::move(carried[i]));
  for (size_t j = 0; j < k && n + j < ctx.numOutputs(); ++j)
    if (ctx.wantsOutput(n + j)) ctx.setOutput(n + j, stackIterations(ctx, scans[j], 0, body.outputs()[1 + n + j].type(), j));
}

/// Scan-8: batch axis 0 on every input and output, scan axis 1 on scan inputs/outputs, optional
/// per-batch sequence_lens; scan outputs of shorter sequences are zero-padded.
void scan8(KernelContext& ctx) {
  const Graph& body = bodyGraph(ctx, "body");
  int64_t m = ctx.attrInt("num_scan_inputs", 0);
  if (m <= 0 || static_cast<size_t>(m) + 1 > ctx.numInputs()) ctx.fail("num_scan_inputs must be in [1, number of inputs - 1]");
  size_t nScan = static_cast<size_t>(m), n = ctx.numInputs() - 1 - nScan;
  if (body.inputs().size() != n + nScan)
    ctx.fail(fmt::format("the body takes {} inputs, expected {}", body.inputs().size(), n + nScan));
  if (body.outputs().size() < n) ctx.fail("the body yields fewer outputs than there are state variables");
  size_t k = body.outputs().size() - n;
  std::vector<int64_t> directions = ctx.attrInts("directions", std::vector<int64_t>(nScan, 0));
  if (directions.size() != nScan) ctx.fail("directions must have one entry per scan input");

  std::vector<const TensorData*> states, scanIns;
  for (size_t i = 0; i < n; ++i) states.push_back(&ctx.tensor(1 + i));
  for (size_t j = 0; j < nScan; ++j) scanIns.push_back(&ctx.tensor(1 + n + j));
  for (const TensorData* t : scanIns)
    if (t->dims.size() < 2) ctx.fail("scan inputs must have a batch and a sequence axis");
  int64_t batch = scanIns[0]->dims[0], maxLen = scanIns[0]->dims[1];
  for (const TensorData* t : scanIns)
    if (t->dims[0] != batch || t->dims[1] != maxLen) ctx.fail("scan inputs differ in batch size or sequence length");
  for (const TensorData* t : states)
    if (t->dims.empty() || t->dims[0] != batch) ctx.fail("state variables must have the batch size as dimension 0");
  std::vector<int64_t> lens(static_cast<size_t>(batch), maxLen);
  if (ctx.hasInput(0)) {
    lens = inputInts(ctx, 0);
    if (static_cast<int64_t>(lens.size()) != batch) ctx.fail("sequence_lens must have one entry per batch");
    for (int64_t l : lens)
      if (l < 0 || l > maxLen) ctx.fail(fmt::format("sequence length {} is outside [0, {}]", l, maxLen));
  }

  using Items = std::vector<std::shared_ptr<const RtTensor>>;
  std::vector<Items> finalStates(n);                         // [i][b]
  std::vector<std::vector<Items>> scanOuts(k, std::vector<Items>(static_cast<size_t>(batch)));  // [j][b][t]
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<RtValue> st;
    for (const TensorData* s : states) st.push_back(RtValue::ofTensor(removeAxis(sliceAxis(*s, 0, b, 1), 0)));
    std::vector<Tensor> seqs;  // this batch's slice of each scan input: [maxLen, ...]
    for (const TensorData* s : scanIns) seqs.push_back(removeAxis(sliceAxis(*s, 0, b, 1), 0));
    int64_t len = lens[static_cast<size_t>(b)];
    for (int64_t t = 0; t < len; ++t) {
      std::vector<RtValue> in = st;
      for (size_t j = 0; j < nScan; ++j) {
        int64_t idx = directions[j] ? len - 1 - t : t;
        in.push_back(RtValue::ofTensor(removeAxis(sliceAxis(seqs[j], 0, idx, 1), 0)));
      }
      std::vector<RtValue> outs = ctx.runSubgraph(body, in);
      for (size_t i = 0; i < n; ++i) st[i] = std::move(outs[i]);
      for (size_t j = 0; j < k; ++j) scanOuts[j][static_cast<size_t>(b)].push_back(scanElement(ctx, outs[n + j], j));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!st[i].isTensor()) ctx.fail(fmt::format("state variable {} is not a tensor", i));
      finalStates[i].push_back(st[i].tensor);
    }
  }
  for (size_t i = 0; i < n && i < ctx.numOutputs(); ++i)
    ctx.setOutput(i, batch == 0 ? *ctx.input(1 + i)
                                : RtValue::ofTensor(stackIterations(ctx, finalStates[i], 0, body.outputs()[i].type(), i)));
  for (size_t j = 0; j < k && n + j < ctx.numOutputs(); ++j) {
    // Element shape and type from any iteration that ran; padding stays zero.
    const TensorData* sample = nullptr;
    for (const auto& perBatch : scanOuts[j])
      if (!perBatch.empty()) sample = perBatch.front().get();
    if (!sample) {
      Tensor empty = stackIterations(ctx, {}, 0, body.outputs()[n + j].type(), j);
      std::vector<int64_t> dims = empty.dims;
      dims[0] = maxLen;
      dims.insert(dims.begin(), batch);
      ctx.setOutput(n + j, makeTensor(empty.dtype(), dims));
      continue;
    }
    std::vector<int64_t> dims = sample->dims;
    dims.insert(dims.begin(), {batch, maxLen});
    Tensor out = makeTensor(sample->dtype(), dims);
    int64_t elems = numel(sample->dims);
    for (int64_t b = 0; b < batch; ++b) {
      const auto& items = scanOuts[j][static_cast<size_t>(b)];
      for (size_t t = 0; t < items.size(); ++t) {
        if (items[t]->dims != sample->dims || items[t]->dataType != sample->dataType)
          ctx.fail(fmt::format("scan output {} changed type or shape between iterations", j));
        copyElements(*items[t], 0, out, (b * maxLen + static_cast<int64_t>(t)) * elems, elems);
      }
    }
    ctx.setOutput(n + j, std::move(out));
  }
}

/// Scan-9 and later: no batch axis; scan_input_axes/directions and scan_output_axes/directions.
void scan9(KernelContext& ctx) {
  const Graph& body = bodyGraph(ctx, "body");
  int64_t m = ctx.attrInt("num_scan_inputs", 0);
  if (m <= 0 || static_cast<size_t>(m) > ctx.numInputs()) ctx.fail("num_scan_inputs must be in [1, number of inputs]");
  size_t nScan = static_cast<size_t>(m), n = ctx.numInputs() - nScan;
  if (body.inputs().size() != n + nScan)
    ctx.fail(fmt::format("the body takes {} inputs, expected {}", body.inputs().size(), n + nScan));
  if (body.outputs().size() < n) ctx.fail("the body yields fewer outputs than there are state variables");
  size_t k = body.outputs().size() - n;
  std::vector<int64_t> inAxes = ctx.attrInts("scan_input_axes", std::vector<int64_t>(nScan, 0));
  std::vector<int64_t> inDirs = ctx.attrInts("scan_input_directions", std::vector<int64_t>(nScan, 0));
  std::vector<int64_t> outAxes = ctx.attrInts("scan_output_axes", std::vector<int64_t>(k, 0));
  std::vector<int64_t> outDirs = ctx.attrInts("scan_output_directions", std::vector<int64_t>(k, 0));
  if (inAxes.size() != nScan || inDirs.size() != nScan) ctx.fail("scan_input_axes/directions need one entry per scan input");
  if (outAxes.size() != k || outDirs.size() != k) ctx.fail("scan_output_axes/directions need one entry per scan output");

  std::vector<const TensorData*> scanIns;
  int64_t seqLen = -1;
  for (size_t j = 0; j < nScan; ++j) {
    const TensorData& t = ctx.tensor(n + j);
    if (t.dims.empty()) ctx.fail(fmt::format("scan input {} is a scalar, it has no axis to scan", j));
    inAxes[j] = normalizeAxis(ctx, inAxes[j], static_cast<int64_t>(t.dims.size()));
    int64_t len = t.dims[static_cast<size_t>(inAxes[j])];
    if (seqLen >= 0 && len != seqLen) ctx.fail(fmt::format("scan inputs differ in sequence length ({} vs {})", seqLen, len));
    seqLen = len;
    scanIns.push_back(&t);
  }
  std::vector<RtValue> st;
  for (size_t i = 0; i < n; ++i) st.push_back(ctx.input(i) ? *ctx.input(i) : RtValue{});
  std::vector<std::vector<std::shared_ptr<const RtTensor>>> scanOuts(k);
  for (int64_t t = 0; t < seqLen; ++t) {
    std::vector<RtValue> in = st;
    for (size_t j = 0; j < nScan; ++j) {
      int64_t idx = inDirs[j] ? seqLen - 1 - t : t;
      in.push_back(RtValue::ofTensor(removeAxis(sliceAxis(*scanIns[j], inAxes[j], idx, 1), inAxes[j])));
    }
    std::vector<RtValue> outs = ctx.runSubgraph(body, in);
    for (size_t i = 0; i < n; ++i) st[i] = std::move(outs[i]);
    for (size_t j = 0; j < k; ++j) scanOuts[j].push_back(scanElement(ctx, outs[n + j], j));
  }
  for (size_t i = 0; i < n && i < ctx.numOutputs(); ++i) ctx.setOutput(i, std::move(st[i]));
  for (size_t j = 0; j < k && n + j < ctx.numOutputs(); ++j) {
    if (!ctx.wantsOutput(n + j)) continue;
    auto& items = scanOuts[j];
    if (outDirs[j]) std::reverse(items.begin(), items.end());
    const Shape& declared = body.outputs()[n + j].type().shape;
    int64_t elemRank = items.empty() ? (declared.hasRank ? static_cast<int64_t>(declared.rank()) : 0)
                                     : static_cast<int64_t>(items.front()->dims.size());
    int64_t axis = normalizeAxis(ctx, outAxes[j], elemRank + 1);
    ctx.setOutput(n + j, stackIterations(ctx, items, axis, body.outputs()[n + j].type(), j));
  }
}

}  // namespace

void registerControlFlowOps() {
  addRef("", "If", 1, "ref.if", ifOp);
  addRef("", "Loop", 1, "ref.loop", loopOp);
  addRef("", "Scan", 8, "ref.scan.batched", scan8);
  addRef("", "Scan", 9, "ref.scan", scan9);
  registerSequenceOps();
}

}  // namespace onnxtool::ref
