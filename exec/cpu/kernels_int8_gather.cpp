// kernels_int8_gather.cpp: the fusion of an int8 embedding lookup (what `onnxtool quantize --int8
// --dynamic` writes for Gather, quant/dynamic.h):
//
//   y = Mul(Cast<float>(Gather(Tq const int8 [V, ...], ids)), Gather(Ts const float [V, 1, ...], ids))
//
// (either operand order of the Mul, both Gathers along axis 0) becomes one step reading ids:
// each gathered row dequantized straight into y, float(q) * Ts[id] (the graph's one rounding):
// only the rows looked up are read, the table stays int8 in memory. Fused only when every
// intermediate has the chain as its only reader and none is a graph output. Also the Cast int8 ->
// float kernel such a chain runs when it is not fused.
#include <algorithm>
#include <cstring>
#include <functional>

#include "exec/cpu/kernels.h"
#include "exec/cpu/kernels_int8.h"
#include "exec/cpu/vec.h"
#include "lib/error.h"

namespace onnxtool::cpu {

namespace {

const CpuKernelDef kGatherInt8Def{"", "Gather", 1, 1 << 20, DType::Int8, "cpu.gather.s8.dequantize.fused", OutputReuse::None, nullptr};


/// Gather rows of an int8 table [V, inner...] by ids (int32 or int64, negative ones counted from
/// the end), each dequantized with its row's scale. An index outside [-V, V) fails as the
/// reference Gather does, before anything is written.
class GatherDequantizeKernel : public CpuKernel {
 public:
  GatherDequantizeKernel(const Node& node, const int8_t* table, const float* scale, int64_t rows, int64_t inner, int64_t count,
                         bool idx64)
      : node_(node), table_(table), scale_(scale), rows_(rows), inner_(inner), count_(count), idx64_(idx64) {}
  void compute(const CpuComputeArgs& args) const override {
    auto* y = static_cast<float*>(args.outputs[0]);
    auto index = [&](int64_t j) -> int64_t {
      int64_t i = idx64_ ? static_cast<const int64_t*>(args.inputs[0])[j] : static_cast<const int32_t*>(args.inputs[0])[j];
      if (i < -rows_ || i >= rows_)
        fail(ErrorKind::InvalidInput, "node '{}' ({}): Gather index {} is out of range, expected [{}, {})", node_.displayName(),
             node_.opType, i, -rows_, rows_);
      return i < 0 ? i + rows_ : i;
    };
    for (int64_t j = 0; j < count_; ++j) index(j);  // validate first
    const auto dequantize = vecKernels().dequantizeS8;
    parallelFor(args.pool, count_, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner_, 1)), [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t r = index(j);
        dequantize(table_ + r * inner_, scale_[r], y + j * inner_, inner_);
      }
    });
  }

 private:
  const Node& node_;
  const int8_t* table_;
  const float* scale_;
  int64_t rows_, inner_, count_;
  bool idx64_;
};

/// Cast int8 -> float (exact): the int8 lookup's Cast when its chain is not fused.
class CastS8Kernel : public CpuKernel {
 public:
  explicit CastS8Kernel(int64_t n) : n_(n) {}
  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const int8_t*>(args.inputs[0]);
    auto* y = static_cast<float*>(args.outputs[0]);
    const auto convert = vecKernels().dequantizeS8;
    parallelFor(args.pool, n_, 32768, [&](int64_t s, int64_t e) { convert(x + s, 1.0f, y + s, e - s); });
  }

 private:
  int64_t n_;
};

/// Axis 0 of a Gather whose data has `rank` dims.
bool alongRows(const Node* gather, size_t rank) {
  const int64_t axis = gather->attrInt("axis", 0);
  return axis == 0 || axis == -static_cast<int64_t>(rank);
}

}  // namespace

std::unique_ptr<CpuKernel> createCastS8(const CpuNodeInfo& info) {
  if (info.in(0).dtype != DType::Int8 || info.out(0).dtype != DType::Float) return nullptr;
  return std::make_unique<CastS8Kernel>(info.in(0).numElements());
}

bool foldConstantInt8Lookups(Graph& g) {
  auto constantOf = [](const Value* v) -> const TensorData* {
    const TensorData* t = v && !v->isGraphInput() ? v->initializer() : nullptr;
    return t && t->raw.size() == t->expectedBytes().value_or(UINT64_MAX) ? t : nullptr;
  };
  std::vector<Node*> casts;
  for (const auto& n : g.nodes())
    if (isOp(n.get(), "Cast") && n->attrInt("to", 0) == static_cast<int64_t>(DType::Float)) casts.push_back(n.get());
  bool any = false;
  for (Node* cast : casts) {
    const TensorData* c = constantOf(cast->input(0));
    const Node* mulc = singleReader(cast->output(0), g);
    if (!c || c->dtype() != DType::Int8 || !isOp(mulc, "Mul") || mulc->inputs().size() != 2 || !mulc->output(0) ||
        mulc->output(0)->isGraphOutput())
      continue;
    Node* mul = const_cast<Node*>(mulc);
    const Value* sv = mul->input(0) == cast->output(0) ? mul->input(1) : mul->input(0);
    const TensorData* st = sv != cast->output(0) ? constantOf(sv) : nullptr;
    if (!st || st->dtype() != DType::Float || st->dims.size() > c->dims.size()) continue;
    // S broadcasts into C's shape (right-aligned, each dim 1 or C's): y has C's shape.
    const size_t r = c->dims.size(), off = r - st->dims.size();
    std::vector<int64_t> sstride(r, 0);
    bool ok = true;
    for (int64_t k = static_cast<int64_t>(r) - 1, stride = 1; k >= static_cast<int64_t>(off); --k) {
      const int64_t d = st->dims[static_cast<size_t>(k) - off];
      if (d != 1 && d != c->dims[static_cast<size_t>(k)]) ok = false;
      sstride[static_cast<size_t>(k)] = d == 1 ? 0 : stride;
      stride *= d;
    }
    if (!ok) continue;
    const auto* cd = reinterpret_cast<const int8_t*>(c->raw.data());
    const auto* sd = reinterpret_cast<const float*>(st->raw.data());
    const int64_t n = c->numElements().value_or(0);
    std::vector<float> y(static_cast<size_t>(n));
    std::vector<int64_t> idx(r, 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t si = 0;
      for (size_t k = 0; k < r; ++k) si += idx[k] * sstride[k];
      float s;
      std::memcpy(&s, sd + si, 4);  // the model's bytes: any alignment
      y[static_cast<size_t>(i)] = static_cast<float>(cd[i]) * s;
      for (size_t k = r; k-- > 0;) {
        if (++idx[k] < c->dims[k]) break;
        idx[k] = 0;
      }
    }
    Value* folded = g.addInitializer(Tensor::fromFloats(g.uniqueName(mul->output(0)->name() + "_folded"), c->dims, y));
    folded->setType(mul->output(0)->type());
    mul->output(0)->replaceAllUsesWith(folded);
    g.removeNode(mul);
    g.removeNode(cast);
    any = true;
  }
  return any;
}

void findGatherDequantizeFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                 const std::function<const TensorData*(const Value*)>& constantOf, std::vector<FusedInt8Step>& out) {
  for (const auto& nn : g.nodes()) {
    const Node* gq = nn.get();
    if (!isOp(gq, "Gather") || gq->inputs().size() != 2 || !gq->output(0)) continue;
    for (const Attribute& a : gq->attributes)
      if (!a.refAttrName.empty()) gq = nullptr;
    if (!gq) continue;
    const Value* ids = gq->input(1);
    // The table's type first: constantOf may copy a misaligned initializer, and a float
    // embedding table (BERT's 94 MB) is not ours to copy.
    const Value* tv = gq->input(0);
    if (!tv || !tv->initializer() || tv->initializer()->dtype() != DType::Int8) continue;
    const TensorData* tq = constantOf(tv);
    const int8_t* table = constData<int8_t>(tq, DType::Int8);
    if (!table || !ids || tq->dims.size() < 2 || !alongRows(gq, tq->dims.size())) continue;
    const int64_t rows = tq->dims[0];
    const int64_t inner = rows == 0 ? 0 : tq->numElements().value_or(0) / rows;
    const Node* cast = singleReader(gq->output(0), g);
    if (!isOp(cast, "Cast") || cast->attrInt("to", 0) != static_cast<int64_t>(DType::Float) || cast->graph() != &g) continue;
    const Node* mul = singleReader(cast->output(0), g);
    if (!isOp(mul, "Mul") || mul->inputs().size() != 2 || mul->graph() != &g || !mul->output(0)) continue;
    const Value* other = mul->input(0) == cast->output(0) ? mul->input(1) : mul->input(0);
    if (other == cast->output(0)) continue;  // Mul(x, x)
    const Node* gs = other ? other->producer() : nullptr;
    if (!isOp(gs, "Gather") || gs->graph() != &g || gs->inputs().size() != 2 || gs->input(1) != ids || singleReader(other, g) != mul)
      continue;
    // The scales: float [V, 1, ...] (the table's rank), Gathered along axis 0 too.
    const TensorData* ts = constantOf(gs->input(0));
    const float* scale = constData<float>(ts, DType::Float);
    if (!scale || ts->dims.size() != tq->dims.size() || ts->dims[0] != rows || ts->numElements().value_or(-1) != rows ||
        !alongRows(gs, ts->dims.size()))
      continue;
    bool plainAttrs = true;
    for (const Attribute& a : gs->attributes) plainAttrs = plainAttrs && a.refAttrName.empty();
    const StaticTensorType* it = typeOf(ids);
    const StaticTensorType* yt = typeOf(mul->output(0));
    if (!plainAttrs || !it || !yt || (it->dtype != DType::Int64 && it->dtype != DType::Int32) || yt->dtype != DType::Float ||
        yt->numElements() != it->numElements() * inner)
      continue;
    FusedInt8Step st;
    st.last = mul;
    st.covered = {gq, cast, gs, mul};
    st.input = ids;
    st.output = mul->output(0);
    st.kernel = std::make_unique<GatherDequantizeKernel>(*gq, table, scale, rows, inner, it->numElements(), it->dtype == DType::Int64);
    st.def = &kGatherInt8Def;
    out.push_back(std::move(st));
  }
}

}  // namespace onnxtool::cpu
