// kernels_int8_rows.cpp: the fusion of MatMuls whose activation is quantized per row at run time
// (what `onnxtool quantize --int8 --dynamic` writes by default, quant/dynamic.h), in standard ops:
//
//   lo = Min(ReduceMin(x, -1), 0), hi = Max(ReduceMax(x, -1), 0)                 [..., 1]
//   scale = Max(Div(Sub(hi, lo), 255), floor), zero = Round(Clip(Div(Neg(lo), scale), 0, 255))
//   xq = Cast<uint8>(Clip(Add(Round(Div(x, scale)), zero), 0, 255)), zero32 = Cast<int32>(zero)
//   y = Mul(Mul(Cast<float>(Sub(MatMulInteger(xq, W const int8[, 0, wz]), Mul(zero32, colSum const))),
//           ws const), scale) [-> Add(., bias const)]
//
// becomes, per MatMul reading xq, one step: each row's min/max, scale and zero point in the
// graph's float operations, the row quantized into the packed A, the int8 GEMM, and an epilogue
// (float(acc - zero[m] * colSum[n]) * ws[n]) * scale[m] (+ bias[n]): the graph's values. Fused
// only when every reader of the quantizer's values belongs to such a chain, no intermediate is a
// graph output, and the colSum constant is W's column sums (minus its zero points).
// The small matching helpers are local: kernels_int8.cpp keeps its own in an anonymous namespace.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/kernels_int8.h"
#include "exec/cpu/qgemm.h"
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

namespace {

constexpr size_t kAlign = 64;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

const CpuKernelDef kRowDynamicDef{"", "MatMulInteger", 10, 1 << 20, DType::Float, "cpu.dynqmatmul.rows.u8s8.fused",
                                  OutputReuse::None, nullptr};

/// The quantized MatMul of one step (see the banner).
class RowQuantMatMulKernel : public CpuKernel {
 public:
  RowQuantMatMulKernel(qgemm::PackedB b, int64_t m, std::vector<int32_t> bZero, std::vector<float> wScale, std::vector<float> bias,
                       float floor)
      : b_(std::move(b)), m_(m), bZero_(std::move(bZero)), wScale_(std::move(wScale)), bias_(std::move(bias)), floor_(floor) {}
  size_t workspaceBytes() const override { return alignUp(qgemm::packedABytes(b_.path, m_, b_.k)) + 3 * alignUp(rowBytes()); }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    auto* ws = static_cast<uint8_t*>(args.workspace);
    const size_t aBytes = alignUp(qgemm::packedABytes(b_.path, m_, b_.k));
    auto* rowSum = reinterpret_cast<int32_t*>(ws + aBytes);
    auto* rowZero = reinterpret_cast<int32_t*>(ws + aBytes + alignUp(rowBytes()));
    auto* rowScale = reinterpret_cast<float*>(ws + aBytes + 2 * alignUp(rowBytes()));
    const int64_t k = b_.k;
    const size_t rowStride = qgemm::packedABytes(b_.path, 1, k);
    parallelFor(args.pool, m_, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        const float* row = x + i * k;
        float lo = 0, hi = 0, scale, zero = 0;
        if (qgemm::minMax(b_.path, row, k, lo, hi)) {  // lo = min(min x, 0), hi = max(max x, 0)
          scale = std::max((hi - lo) / 255.0f, floor_);
          zero = std::nearbyint(std::clamp(-lo / scale, 0.0f, 255.0f));
        } else {  // a NaN: the row's scale is NaN, so is every output of the row
          scale = std::numeric_limits<float>::quiet_NaN();
        }
        qgemm::quantizeA(b_.path, row, 1, k, scale, zero, ws + static_cast<size_t>(i) * rowStride, rowSum + i);
        rowZero[i] = static_cast<int32_t>(zero);
        rowScale[i] = scale;
      }
    });
    qgemm::Epilogue e;
    e.aZeroRow = rowZero;
    e.bZero = bZero_.empty() ? nullptr : bZero_.data();
    e.rowSumA = rowSum;
    e.cf = static_cast<float*>(args.outputs[0]);
    e.colScale = wScale_.data();
    e.rowScale = rowScale;
    e.bias = bias_.empty() ? nullptr : bias_.data();
    e.clamp = relu_;
    e.lo = 0, e.hi = std::numeric_limits<float>::infinity();
    e.ldc = b_.n;
    qgemm::gemm(b_, ws, m_, e, args.pool);
    if (act_ != VecUnary::Count) {  // a fused activation (BERT's GELU) over the float output
      float* y = static_cast<float*>(args.outputs[0]);
      auto f = vecKernels().unary[static_cast<int>(act_)];
      parallelFor(args.pool, m_ * b_.n, 4096, [&](int64_t s, int64_t t) { f(y + s, y + s, t - s); });
    }
  }
  double flops() const override { return 2.0 * static_cast<double>(m_) * b_.n * b_.k; }
  bool fuseActivation(VecUnary act) override {
    if (relu_ || act_ != VecUnary::Count) return false;
    if (act == VecUnary::Relu)
      relu_ = true;
    else
      act_ = act;
    return true;
  }

 private:
  size_t rowBytes() const { return static_cast<size_t>(m_) * sizeof(int32_t); }
  qgemm::PackedB b_;
  int64_t m_;
  std::vector<int32_t> bZero_;
  std::vector<float> wScale_, bias_;
  float floor_;
  bool relu_ = false;
  VecUnary act_ = VecUnary::Count;
};

/// The node producing `v` when it is `op` of graph g, else nullptr.
const Node* producer(const Value* v, const char* op, const Graph& g) {
  const Node* n = v ? v->producer() : nullptr;
  return isOp(n, op) && n->graph() == &g ? n : nullptr;
}

/// Of a two-input node one of whose inputs is `v`: the other one (nullptr when neither is `v`).
const Value* otherInput(const Node* n, const Value* v) {
  if (!n || n->inputs().size() != 2) return nullptr;
  return n->input(0) == v ? n->input(1) : n->input(1) == v ? n->input(0) : nullptr;
}

/// A constant float scalar equal to `want` (any value when want is NaN: returned in `got`).
bool floatScalar(const TensorData* t, float want, float* got = nullptr) {
  const float* d = constData<float>(t, DType::Float);
  if (!d || t->numElements().value_or(0) != 1 || t->dims.size() > 1) return false;
  if (got) *got = *d;
  return std::isnan(want) || *d == want;
}

using ConstantOf = std::function<const TensorData*(const Value*)>;

/// Op(a, c) or Op(c, a) with c a constant float scalar equal to `want`; returns a, else nullptr.
const Value* withScalar(const Node* n, float want, const ConstantOf& constantOf, float* got = nullptr) {
  if (!n || n->inputs().size() != 2) return nullptr;
  for (int side : {1, 0})
    if (floatScalar(constantOf(n->input(static_cast<size_t>(side))), want, got)) return n->input(static_cast<size_t>(1 - side));
  return nullptr;
}

/// Clip(a, 0, 255) with constant bounds: a, else nullptr.
const Value* clipped(const Node* n, const ConstantOf& constantOf) {
  if (!n || n->inputs().size() != 3 || !floatScalar(constantOf(n->input(1)), 0.0f) || !floatScalar(constantOf(n->input(2)), 255.0f))
    return nullptr;
  return n->input(0);
}

/// ReduceMax/ReduceMin of x over the last axis only, dims kept.
bool reducesLastAxis(const Node* n, int64_t rank, const ConstantOf& constantOf) {
  if (n->attrInt("keepdims", 1) != 1 || n->attrInt("noop_with_empty_axes", 0) != 0) return false;
  std::vector<int64_t> axes;
  if (n->inputs().size() > 1 && n->input(1)) {
    const TensorData* t = constantOf(n->input(1));
    if (!t || t->dtype() != DType::Int64 || t->numElements().value_or(0) != 1) return false;
    axes = t->toInt64s();
  } else {
    axes = n->attrInts("axes", {});
  }
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

/// The quantizer of one activation: its nodes and the values the MatMul chains read.
struct RowQuantizer {
  const Value* x = nullptr;
  const Value* q = nullptr;       ///< uint8 [..., K]
  const Value* scale = nullptr;   ///< float [..., 1]
  const Value* zero32 = nullptr;  ///< int32 [..., 1]
  float floor = 0;
  std::vector<const Node*> nodes;
};

/// The quantizer that writes `q` (a Cast to uint8), or nullopt.
std::optional<RowQuantizer> rowQuantizerOf(const Graph& g, const Value* q, const ConstantOf& constantOf,
                                           const std::function<const StaticTensorType*(const Value*)>& typeOf) {
  RowQuantizer r;
  r.q = q;
  const Node* castQ = producer(q, "Cast", g);
  if (!castQ || castQ->attrInt("to", 0) != static_cast<int64_t>(DType::UInt8)) return std::nullopt;
  const Node* clipQ = producer(castQ->input(0), "Clip", g);
  const Value* shifted = clipped(clipQ, constantOf);
  const Node* add = producer(shifted, "Add", g);
  if (!add || add->inputs().size() != 2) return std::nullopt;
  // Add(Round(Div(x, scale)), zero): the zero point is the Round of a Clip, the other side not.
  const Node* round = nullptr;
  const Node* zeroRound = nullptr;
  for (int side : {0, 1}) {
    const Node* a = producer(add->input(static_cast<size_t>(side)), "Round", g);
    const Node* b = producer(add->input(static_cast<size_t>(1 - side)), "Round", g);
    if (a && b && producer(a->input(0), "Div", g) && producer(b->input(0), "Clip", g)) {
      round = a, zeroRound = b;
      break;
    }
  }
  if (!round) return std::nullopt;
  const Node* divX = producer(round->input(0), "Div", g);
  r.x = divX->input(0);
  r.scale = divX->input(1);
  // zero = Round(Clip(Div(Neg(lo), scale), 0, 255))
  const Node* clipZ = producer(zeroRound->input(0), "Clip", g);
  const Node* divZ = producer(clipped(clipZ, constantOf), "Div", g);
  if (!divZ || divZ->input(1) != r.scale) return std::nullopt;
  const Node* neg = producer(divZ->input(0), "Neg", g);
  if (!neg) return std::nullopt;
  const Value* lo = neg->input(0);
  // scale = Max(Div(Sub(hi, lo), 255), floor)
  const Node* maxS = producer(r.scale, "Max", g);
  if (!maxS || maxS->inputs().size() != 2) return std::nullopt;
  const Node* step = nullptr;
  for (int side : {0, 1})
    if (floatScalar(constantOf(maxS->input(static_cast<size_t>(1 - side))), std::numeric_limits<float>::quiet_NaN(), &r.floor)) step = producer(maxS->input(static_cast<size_t>(side)), "Div", g);
  if (!step || !(r.floor > 0) || !std::isfinite(r.floor) || step->input(0) == nullptr ||
      !floatScalar(constantOf(step->input(1)), 255.0f))
    return std::nullopt;
  const Node* sub = producer(step->input(0), "Sub", g);
  if (!sub || sub->inputs().size() != 2 || sub->input(1) != lo) return std::nullopt;
  const Node* hiMax = producer(sub->input(0), "Max", g);
  const Node* loMin = producer(lo, "Min", g);
  if (!hiMax || !loMin) return std::nullopt;
  const Node* rmax = producer(withScalar(hiMax, 0.0f, constantOf), "ReduceMax", g);
  const Node* rmin = producer(withScalar(loMin, 0.0f, constantOf), "ReduceMin", g);
  const StaticTensorType* xt = typeOf(r.x);
  if (!rmax || !rmin || !xt || xt->dtype != DType::Float || xt->dims.empty() || rmax->input(0) != r.x || rmin->input(0) != r.x)
    return std::nullopt;
  const auto rank = static_cast<int64_t>(xt->dims.size());
  if (!reducesLastAxis(rmax, rank, constantOf) || !reducesLastAxis(rmin, rank, constantOf)) return std::nullopt;
  // zero32 = Cast<int32>(zero): the one reader of the zero point besides the Add.
  const Value* zero = zeroRound->output(0);
  for (const Use& u : zero->uses())
    if (isOp(u.node, "Cast") && u.node->attrInt("to", 0) == static_cast<int64_t>(DType::Int32) && u.node->graph() == &g)
      r.zero32 = u.node->output(0), r.nodes.push_back(u.node);
  if (!r.zero32) return std::nullopt;
  for (const Node* n : {rmax, rmin, hiMax, loMin, sub, step, maxS, neg, divZ, clipZ, zeroRound, divX, round, add, clipQ, castQ})
    r.nodes.push_back(n);
  return r;
}

/// One MatMul chain reading the quantizer's q at `mmi`, as a step (nullopt: not the pattern).
std::optional<FusedInt8Step> rowChain(const Graph& g, const RowQuantizer& rq, const Node* mmi, int64_t m, int64_t k,
                                      const ConstantOf& constantOf, const std::function<const StaticTensorType*(const Value*)>& typeOf) {
  if (!isOp(mmi, "MatMulInteger") || mmi->graph() != &g || mmi->input(0) != rq.q || mmi->input(1) == rq.q) return std::nullopt;
  if (mmi->inputs().size() > 2 && mmi->input(2)) {  // an a_zero_point, if any, is a constant 0
    const TensorData* az = constantOf(mmi->input(2));
    const uint8_t* d = constData<uint8_t>(az, DType::UInt8);
    if (!d || az->numElements().value_or(0) != 1 || *d != 0) return std::nullopt;
  }
  const TensorData* wt = constantOf(mmi->input(1));
  const int8_t* wd = constData<int8_t>(wt, DType::Int8);
  if (!wd || wt->dims.size() != 2 || wt->dims[0] != k) return std::nullopt;
  const int64_t n = wt->dims[1];
  std::vector<int32_t> bZero;
  if (mmi->inputs().size() > 3 && mmi->input(3)) {
    if (!perColumn<int8_t>(constantOf(mmi->input(3)), DType::Int8, n, bZero)) return std::nullopt;
    if (std::all_of(bZero.begin(), bZero.end(), [](int32_t z) { return z == 0; })) bZero.clear();
  }
  // Sub(acc, Mul(zero32, colSum)) with colSum = sum over K of (W - wz).
  const Node* sub = singleReader(mmi->output(0), g);
  if (!isOp(sub, "Sub") || sub->input(0) != mmi->output(0)) return std::nullopt;
  const Node* corr = producer(sub->input(1), "Mul", g);
  if (!corr || singleReader(corr->output(0), g) != sub) return std::nullopt;
  std::vector<int32_t> colSum;
  if (!perColumn<int32_t>(constantOf(otherInput(corr, rq.zero32)), DType::Int32, n, colSum)) return std::nullopt;
  for (int64_t j = 0; j < n; ++j) {
    int64_t s = 0;
    for (int64_t q = 0; q < k; ++q) s += wd[q * n + j] - (bZero.empty() ? 0 : bZero[static_cast<size_t>(j)]);
    if (s != colSum[static_cast<size_t>(j)]) return std::nullopt;
  }
  const Node* cast = singleReader(sub->output(0), g);
  if (!isOp(cast, "Cast") || cast->attrInt("to", 0) != static_cast<int64_t>(DType::Float)) return std::nullopt;
  const Node* mulW = singleReader(cast->output(0), g);
  std::vector<float> wScale;
  if (!isOp(mulW, "Mul") || !perColumn<float>(constantOf(otherInput(mulW, cast->output(0))), DType::Float, n, wScale))
    return std::nullopt;
  const Node* mulS = singleReader(mulW->output(0), g);
  if (!isOp(mulS, "Mul") || otherInput(mulS, mulW->output(0)) != rq.scale) return std::nullopt;
  const StaticTensorType* yt = typeOf(mulS->output(0));
  if (!yt || yt->dtype != DType::Float || yt->dims.empty() || yt->numElements() != m * n || yt->dims.back() != n) return std::nullopt;
  FusedInt8Step st;
  st.covered = rq.nodes;
  for (const Node* c : {mmi, corr, sub, cast, mulW, mulS}) st.covered.push_back(c);
  st.last = mulS;
  st.input = rq.x;
  st.output = mulS->output(0);
  std::vector<float> bias;
  const Node* add = singleReader(mulS->output(0), g);
  if (isOp(add, "Add") && add->inputs().size() == 2) {
    const Value* bv = otherInput(add, mulS->output(0));
    const TensorData* bt = bv ? constantOf(bv) : nullptr;
    const StaticTensorType* at = typeOf(add->output(0));
    if (bt && bt->dims.size() == 1 && perColumn<float>(bt, DType::Float, n, bias) && at && at->dims == yt->dims) {
      st.covered.push_back(add);
      st.last = add;
      st.output = add->output(0);
    } else {
      bias.clear();
    }
  }
  st.kernel = std::make_unique<RowQuantMatMulKernel>(qgemm::packB(qgemm::pathFor(activeIsa()), wd, k, n), m, std::move(bZero),
                                                     std::move(wScale), std::move(bias), rq.floor);
  st.def = &kRowDynamicDef;
  return st;
}

}  // namespace

void findRowDynamicFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                           const std::function<const TensorData*(const Value*)>& constantOf, std::vector<FusedInt8Step>& out) {
  for (const auto& nn : g.nodes()) {
    const Node* castQ = nn.get();
    if (!isOp(castQ, "Cast") || castQ->attrInt("to", 0) != static_cast<int64_t>(DType::UInt8) || !castQ->output(0)) continue;
    auto rq = rowQuantizerOf(g, castQ->output(0), constantOf, typeOf);
    if (!rq) continue;
    const StaticTensorType* xt = typeOf(rq->x);
    const int64_t k = xt->dims.back();
    const int64_t m = k == 0 ? 0 : xt->numElements() / k;
    std::vector<FusedInt8Step> chains;
    bool ok = !rq->q->uses().empty();
    for (const Use& u : rq->q->uses()) {
      auto st = u.index == 0 ? rowChain(g, *rq, u.node, m, k, constantOf, typeOf) : std::nullopt;
      if (!st) {
        ok = false;
        break;
      }
      chains.push_back(std::move(*st));
    }
    if (!ok) continue;
    // Every reader of every value the quantizer writes is the quantizer's or a chain's.
    std::set<const Node*> inside(rq->nodes.begin(), rq->nodes.end());
    for (const FusedInt8Step& c : chains) inside.insert(c.covered.begin(), c.covered.end());
    for (const Node* n : rq->nodes)
      for (const Value* v : n->outputs())
        if (v && (v->isGraphOutput() || std::any_of(v->uses().begin(), v->uses().end(), [&](const Use& u) { return !inside.count(u.node); })))
          ok = false;
    if (!ok) continue;
    for (auto& c : chains) out.push_back(std::move(c));
  }
}

}  // namespace onnxtool::cpu
