// kernels_attention.cpp: scaled dot-product attention on float32, softmax(Q K^T * scale + mask) V,
// without writing the [Sq, Skv] score matrix of a head to memory: each work item (a batch, a
// head and a block of query rows) computes its block of scores into a per-thread buffer sized
// to stay in L2 (our packed GEMM, gemm.h), adds the mask, takes the softmax of each row in place
// (vec.h) and multiplies by V into the output. A causal mask also skips the keys after the
// block's last query. Two users:
//   - the ONNX Attention op (opset 23+; what `-O3`'s fuse-attention writes at those opsets):
//     3-D or 4-D Q/K/V, grouped-query heads, boolean or additive masks (a shorter last dim padded
//     with "masked out"), is_causal, scale; a row with every key masked gives zeros. A KV cache
//     (past_key/past_value), nonpad_kv_seqlen, softcap, sliding windows and the extra outputs
//     are left to the reference kernel.
//   - the same pattern written with standard ops at any opset, MatMul(Softmax(MatMul(Q, K^T)
//     [* s | / s] [+ mask]), V), fused by the executor at prepare (findAttentionFusions): the
//     mask broadcasts as Add does, and a row of -inf logits gives NaN as Softmax does.
// Rows split over the plan's pool by work item; each thread has its own slice of the workspace.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "exec/cpu/gemm.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/kernels_attention.h"

namespace onnxtool::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t roundUp16(size_t n) { return (n + 15) / 16 * 16; }

/// Query rows per work item: a block of scores of at most 1 MiB (L2-resident with its GEMM
/// panels), a multiple of 8 rows, at most 128 and at most Sq.
int64_t attentionRows(int64_t sq, int64_t skv) {
  const int64_t r = std::min<int64_t>(128, 262144 / std::max<int64_t>(skv, 1)) / 8 * 8;
  return std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(r, 8), sq));
}

class AttentionKernel : public CpuKernel {
 public:
  AttentionKernel(const AttentionLayout& l, int threads) : l_(l), threads_(std::max(threads, 1)) {
    rows_ = attentionRows(l_.sq, l_.skv);
    cfg_ = gemmConfig(activeIsa(), rows_);
    GemmProblem s, o;
    s.m = rows_, s.n = l_.skv, s.k = l_.dh, s.lda = l_.qS, s.ldb = l_.kS, s.transB = !l_.kTransposed, s.ldc = l_.skv;
    o.m = rows_, o.n = l_.dv, o.k = l_.skv, o.lda = l_.skv, o.ldb = l_.vS, o.ldc = l_.yS;
    gemmFloats_ = roundUp16(std::max(gemmWorkspaceFloats(cfg_, s), gemmWorkspaceFloats(cfg_, o)));
    scoreFloats_ = roundUp16(static_cast<size_t>(rows_ * l_.skv));
  }

  size_t workspaceBytes() const override {
    return static_cast<size_t>(threads_) * (gemmFloats_ + scoreFloats_) * sizeof(float);
  }

  double flops() const override {
    double f = 2.0 * static_cast<double>(l_.batch * l_.hq * l_.sq) * static_cast<double>(l_.skv) * static_cast<double>(l_.dh + l_.dv);
    return l_.causal ? f / 2 : f;
  }

  std::string variant() const override { return l_.causal ? ".causal" : ""; }

  void compute(const CpuComputeArgs& args) const override {
    const auto* q = static_cast<const float*>(args.inputs[0]);
    const auto* k = static_cast<const float*>(args.inputs[1]);
    const auto* v = static_cast<const float*>(args.inputs[2]);
    const void* mask = args.inputs.size() > 3 ? args.inputs[3] : nullptr;
    auto* y = static_cast<float*>(args.outputs[0]);
    const int64_t blocks = (l_.sq + rows_ - 1) / rows_;
    const int64_t items = l_.batch * l_.hq * blocks;
    if (items == 0) return;
    auto* ws = static_cast<float*>(args.workspace);
    const int64_t parts = std::min<int64_t>(threads_, items);
    parallelFor(args.pool, parts, 1, [&](int64_t p0, int64_t p1) {
      // masked keys: exp(x - max) and the products with it below FLT_MIN give 0 (no microcode
      // assist per denormal: a row of BERT's -3.4e38 padding was 4.6x slower)
      FlushDenormals ftz;
      for (int64_t p = p0; p < p1; ++p) {
        float* scores = ws + static_cast<size_t>(p) * (gemmFloats_ + scoreFloats_);
        float* gws = scores + scoreFloats_;
        for (int64_t it = items * p / parts, end = items * (p + 1) / parts; it < end; ++it) {
          const int64_t blk = it % blocks, bh = it / blocks;
          block(bh / l_.hq, bh % l_.hq, blk * rows_, std::min(l_.sq, (blk + 1) * rows_), q, k, v, mask, y, scores, gws);
        }
      }
    });
  }

 private:
  /// Query rows [i0, i1) of head h of batch b.
  void block(int64_t b, int64_t h, int64_t i0, int64_t i1, const float* q, const float* k, const float* v, const void* mask,
             float* y, float* scores, float* gws) const {
    const int64_t hk = h / (l_.hq / l_.hkv);
    const int64_t rows = i1 - i0;
    float* out = y + b * l_.yB + h * l_.yH + i0 * l_.yS;
    // Keys any row of this block may see: a causal block sees none after its last query.
    const int64_t n = l_.causal ? std::min(l_.skv, i1) : l_.skv;
    if (n == 0) {  // no key at all: zeros (Attention); Softmax of an empty row is empty too
      for (int64_t r = 0; r < rows; ++r) std::fill(out + r * l_.yS, out + r * l_.yS + l_.dv, 0.0f);
      return;
    }
    GemmProblem s;
    s.m = rows, s.n = n, s.k = l_.dh;
    s.a = q + b * l_.qB + h * l_.qH + i0 * l_.qS, s.lda = l_.qS;
    s.alpha = l_.scale;
    s.b = k + b * l_.kB + hk * l_.kH, s.ldb = l_.kS, s.transB = !l_.kTransposed;
    s.c = scores, s.ldc = n;
    gemm(cfg_, s, nullptr, 1, gws);
    const VecKernels& vk = vecKernels();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      float* row = scores + r * n;
      const int64_t limit = l_.causal ? std::min(n, i + 1) : n;  // keys [0, limit) not masked by causality
      bool open = limit > 0;
      if (l_.maskKind != AttentionLayout::Mask::None) {
        const int64_t valid = std::min(limit, l_.mLen);  // keys the mask covers (past it: masked out)
        const int64_t off = b * l_.mB + h * l_.mH + i * l_.mS;
        open = false;
        if (l_.maskKind == AttentionLayout::Mask::Float) {
          const float* m = static_cast<const float*>(mask) + off;
          if (l_.mLastStride == 0) {
            const float mv = m[0];
            vk.binaryScalarB[static_cast<int>(VecBinary::Add)](row, mv, row, valid);
            open = valid > 0 && mv != kNegInf;
          } else {
            vk.binary[static_cast<int>(VecBinary::Add)](row, m, row, valid);
            for (int64_t j = 0; j < valid && !open; ++j) open = m[j] != kNegInf;
          }
        } else {
          const auto* m = static_cast<const uint8_t*>(mask) + off;
          for (int64_t j = 0; j < valid; ++j) {
            const bool keep = (m[j * l_.mLastStride] != 0) != l_.trueMasks;
            open |= keep;
            if (!keep) row[j] = l_.fill;
          }
        }
        std::fill(row + valid, row + limit, kNegInf);
      }
      std::fill(row + limit, row + n, kNegInf);
      if (!open && l_.zeroMaskedRows) {
        std::fill(row, row + n, 0.0f);
        continue;
      }
      vk.softmaxRow(row, row, n);
    }
    GemmProblem o;
    o.m = rows, o.n = l_.dv, o.k = n;
    o.a = scores, o.lda = n;
    o.b = v + b * l_.vB + hk * l_.vH, o.ldb = l_.vS;
    o.c = out, o.ldc = l_.yS;
    gemm(cfg_, o, nullptr, 1, gws);
  }

  AttentionLayout l_;
  int threads_;
  int64_t rows_ = 1;
  GemmConfig cfg_;
  size_t gemmFloats_ = 0, scoreFloats_ = 0;
};

}  // namespace

std::unique_ptr<CpuKernel> makeAttentionKernel(const AttentionLayout& layout, int threads) {
  if (layout.batch < 0 || layout.hq <= 0 || layout.hkv <= 0 || layout.hq % layout.hkv != 0 || layout.dh <= 0 || layout.dv < 0)
    return nullptr;
  return std::make_unique<AttentionKernel>(layout, threads);
}

/// Fills the mask fields of `l` for a mask of `dims` broadcast right-aligned against
/// [B, Hq, Sq, Skv] (ONNX Attention: a last dim below Skv is padded with "masked out"; Add: a
/// last dim of 1 broadcasts). False when it does not broadcast so.
bool setAttentionMask(AttentionLayout& l, const std::vector<int64_t>& dims, bool boolean, bool padLast) {
  if (dims.empty() || dims.size() > 4) return false;
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  const int64_t full[4] = {l.batch, l.hq, l.sq, l.skv};
  int64_t st[4] = {0, 0, 0, 0};
  const size_t off = 4 - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i], want = full[off + i];
    const bool last = i + 1 == dims.size();
    if (last && padLast ? d > want : (d != 1 && d != want)) return false;
    if (d != 1) st[off + i] = strides[i];
  }
  l.maskKind = boolean ? AttentionLayout::Mask::Bool : AttentionLayout::Mask::Float;
  l.mB = st[0], l.mH = st[1], l.mS = st[2];
  const int64_t lastDim = dims.back();
  if (padLast) {
    l.mLen = lastDim;  // only the keys it covers; a dim of 1 covers key 0
    l.mLastStride = 1;
  } else {
    l.mLen = l.skv;
    l.mLastStride = lastDim == 1 ? 0 : 1;
  }
  return true;
}

/// The ONNX Attention op (23+), float32, without a KV cache, nonpad_kv_seqlen, softcap or
/// sliding windows (those, and the extra outputs, run on the reference kernel).
std::unique_ptr<CpuKernel> createAttention(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (size_t i = 4; i < info.inputs.size(); ++i)
    if (info.hasInput(i)) return nullptr;  // past_key / past_value / nonpad_kv_seqlen
  if (n.attrFloat("softcap", 0.0f) != 0.0f || n.attrInt("left_window_size", -1) >= 0 || n.attrInt("right_window_size", -1) >= 0)
    return nullptr;
  const auto& qd = info.in(0).dims;
  const auto& kd = info.in(1).dims;
  const auto& vd = info.in(2).dims;
  if (info.in(1).dtype != DType::Float || info.in(2).dtype != DType::Float || info.out(0).dtype != DType::Float) return nullptr;
  const size_t rank = qd.size();
  if ((rank != 3 && rank != 4) || kd.size() != rank || vd.size() != rank) return nullptr;
  AttentionLayout l;
  l.batch = qd[0];
  if (kd[0] != l.batch || vd[0] != l.batch) return nullptr;
  if (rank == 3) {
    l.hq = n.attrInt("q_num_heads", 0);
    l.hkv = n.attrInt("kv_num_heads", 0);
    if (l.hq <= 0 || l.hkv <= 0 || qd[2] % l.hq || kd[2] % l.hkv || vd[2] % l.hkv) return nullptr;
    l.sq = qd[1], l.skv = kd[1], l.dh = qd[2] / l.hq, l.dv = vd[2] / l.hkv;
    if (kd[2] / l.hkv != l.dh || vd[1] != l.skv) return nullptr;
    l.qS = qd[2], l.qH = l.dh, l.qB = l.sq * qd[2];
    l.kS = kd[2], l.kH = l.dh, l.kB = l.skv * kd[2];
    l.vS = vd[2], l.vH = l.dv, l.vB = l.skv * vd[2];
    l.yS = l.hq * l.dv, l.yH = l.dv, l.yB = l.sq * l.hq * l.dv;
  } else {
    l.hq = qd[1], l.hkv = kd[1], l.sq = qd[2], l.skv = kd[2], l.dh = qd[3], l.dv = vd[3];
    if (kd[3] != l.dh || vd[1] != l.hkv || vd[2] != l.skv) return nullptr;
    l.qS = l.dh, l.qH = l.sq * l.dh, l.qB = l.hq * l.qH;
    l.kS = l.dh, l.kH = l.skv * l.dh, l.kB = l.hkv * l.kH;
    l.vS = l.dv, l.vH = l.skv * l.dv, l.vB = l.hkv * l.vH;
    l.yS = l.dv, l.yH = l.sq * l.dv, l.yB = l.hq * l.yH;
  }
  if (l.hkv <= 0 || l.hq % l.hkv != 0 || l.dh <= 0) return nullptr;
  const std::vector<int64_t> want = rank == 3 ? std::vector<int64_t>{l.batch, l.sq, l.hq * l.dv}
                                              : std::vector<int64_t>{l.batch, l.hq, l.sq, l.dv};
  if (info.out(0).dims != want) return nullptr;
  const Attribute* sa = n.attr("scale");
  l.scale = sa ? n.attrFloat("scale", 1.0f) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(l.dh)));
  l.causal = n.attrInt("is_causal", 0) != 0;
  l.zeroMaskedRows = true;
  if (info.hasInput(3)) {
    const StaticTensorType& m = info.in(3);
    if (m.dtype != DType::Float && m.dtype != DType::Bool) return nullptr;
    if (!setAttentionMask(l, m.dims, m.dtype == DType::Bool, true)) return nullptr;
  }
  return makeAttentionKernel(l, info.threads);
}

namespace {

const CpuKernelDef kFusedAttentionDef{"", "MatMul", 1, 1 << 20, DType::Float, "cpu.attention.f32.fused", OutputReuse::None, nullptr};

/// A constant float scalar (a tensor of one element).
bool constantScalar(const TensorData* t, float& v) {
  if (!t || t->dtype() != DType::Float || t->numElements().value_or(0) != 1 || t->raw.size() != sizeof(float)) return false;
  std::memcpy(&v, t->raw.data(), sizeof v);
  return true;
}

}  // namespace

void findAttentionFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                          const std::function<const TensorData*(const Value*)>& constantOf, int opset, int threads,
                          std::vector<FusedInt8Step>& out) {
  std::set<const Node*> taken;  // nodes of other fused steps
  for (const FusedInt8Step& f : out) {
    taken.insert(f.last);
    taken.insert(f.covered.begin(), f.covered.end());
  }
  for (const auto& nn : g.nodes()) {
    const Node* sm = nn.get();
    if (!isOp(sm, "Softmax") || !sm->input(0) || !sm->output(0) || singleReader(sm->input(0), g) != sm) continue;
    const StaticTensorType* lt = typeOf(sm->input(0));
    if (!lt || lt->dtype != DType::Float || lt->dims.size() < 2 || lt->dims.size() > 4) continue;
    const int64_t rank = static_cast<int64_t>(lt->dims.size());
    // Softmax over the last axis: opset 13+ by default; before, axis (default 1) flattens to 2-D,
    // which is the last-axis softmax only when axis is the last one.
    int64_t axis = sm->attrInt("axis", opset >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    if (axis != rank - 1) continue;
    const Node* pv = singleReader(sm->output(0), g);
    if (!isOp(pv, "MatMul") || pv->input(0) != sm->output(0) || pv->input(0) == pv->input(1)) continue;
    std::vector<const Node*> covered = {sm};
    const Value* x = sm->input(0);
    const Node* p = x->producer();
    const Value* mask = nullptr;
    if (isOp(p, "Add") && p->graph() == &g && singleReader(x, g) == sm && p->inputs().size() == 2) {
      for (size_t i = 0; i < 2 && !mask; ++i) {
        const Node* q = p->input(i) ? p->input(i)->producer() : nullptr;
        const bool scores = isOp(q, "MatMul") || isOp(q, "Mul") || isOp(q, "Div");
        if (scores && p->input(1 - i) && p->input(0) != p->input(1) && singleReader(p->input(i), g) == p) {
          mask = p->input(1 - i);
          x = p->input(i);
        }
      }
      if (!mask) continue;
      covered.push_back(p);
      p = x->producer();
    }
    float fill = kNegInf;
    bool trueMasks = false;
    if (!mask && isOp(p, "Where") && p->graph() == &g && p->inputs().size() == 3 && p->input(0)) {
      // Where(keep, scores, fill) or Where(masked, fill, scores), fill a constant scalar
      for (size_t i = 1; i < 3 && !mask; ++i) {
        const Value* sv = p->input(i);
        const Node* q = sv ? sv->producer() : nullptr;
        const bool scores = isOp(q, "MatMul") || isOp(q, "Mul") || isOp(q, "Div");
        if (scores && singleReader(sv, g) == p && p->input(0) != sv && constantScalar(constantOf(p->input(3 - i)), fill)) {
          mask = p->input(0);
          trueMasks = i == 2;
          x = sv;
        }
      }
      if (!mask) continue;
      covered.push_back(p);
      p = x->producer();
    }
    float scale = 1;
    if ((isOp(p, "Mul") || isOp(p, "Div")) && p->graph() == &g && singleReader(x, g) && p->inputs().size() == 2) {
      float c = 0;
      const Value* s = nullptr;
      if (p->opType == "Div") {
        if (constantScalar(constantOf(p->input(1)), c) && c != 0) s = p->input(0), scale = 1 / c;
      } else {
        for (size_t i = 0; i < 2 && !s; ++i)
          if (constantScalar(constantOf(p->input(i)), c)) s = p->input(1 - i), scale = c;
      }
      if (!s || singleReader(s, g) != p) continue;
      covered.push_back(p);
      x = s;
      p = x->producer();
    }
    if (!isOp(p, "MatMul") || p->graph() != &g || singleReader(x, g) == nullptr) continue;
    covered.push_back(p);
    covered.push_back(pv);
    if (std::any_of(covered.begin(), covered.end(), [&](const Node* n) { return taken.count(n) > 0; })) continue;
    const StaticTensorType *qt = typeOf(p->input(0)), *kt = typeOf(p->input(1)), *vt = typeOf(pv->input(1)),
                           *yt = typeOf(pv->output(0)), *st = typeOf(x);
    if (!qt || !kt || !vt || !yt || !st) continue;
    if (qt->dtype != DType::Float || kt->dtype != DType::Float || vt->dtype != DType::Float || yt->dtype != DType::Float) continue;
    // Same rank and batch dims everywhere (no broadcasting between Q, K^T and V).
    if (qt->dims.size() != static_cast<size_t>(rank) || kt->dims.size() != qt->dims.size() || vt->dims.size() != qt->dims.size() ||
        yt->dims.size() != qt->dims.size() || st->dims != lt->dims)
      continue;
    bool same = true;
    for (int64_t i = 0; i + 2 < rank; ++i) {
      const size_t u = static_cast<size_t>(i);
      same &= kt->dims[u] == qt->dims[u] && vt->dims[u] == qt->dims[u] && yt->dims[u] == qt->dims[u];
    }
    const int64_t sq = qt->dims[static_cast<size_t>(rank - 2)], dh = qt->dims[static_cast<size_t>(rank - 1)];
    const int64_t skv = kt->dims[static_cast<size_t>(rank - 1)], dv = vt->dims[static_cast<size_t>(rank - 1)];
    if (!same || kt->dims[static_cast<size_t>(rank - 2)] != dh || vt->dims[static_cast<size_t>(rank - 2)] != skv ||
        yt->dims[static_cast<size_t>(rank - 2)] != sq || yt->dims[static_cast<size_t>(rank - 1)] != dv || dh <= 0)
      continue;
    AttentionLayout l;
    l.batch = rank >= 3 ? qt->dims[0] : 1;
    l.hq = l.hkv = rank == 4 ? qt->dims[1] : 1;
    l.sq = sq, l.skv = skv, l.dh = dh, l.dv = dv;
    l.qS = dh, l.qH = sq * dh, l.qB = l.hq * l.qH;
    l.kTransposed = true;
    l.kS = skv, l.kH = dh * skv, l.kB = l.hq * l.kH;
    l.vS = dv, l.vH = skv * dv, l.vB = l.hq * l.vH;
    l.yS = dv, l.yH = sq * dv, l.yB = l.hq * l.yH;
    l.scale = scale;
    // Q, K^T and V read where their producers' producers put them: a Transpose (and for Q and
    // K^T a scalar Mul, folded into the scale) read only here is computed by the strides instead
    // (BERT's and Whisper's head split, Whisper's K^T and its q/k scaling), when the head axis
    // stays contiguous in the buffer read.
    const Value *qIn = p->input(0), *kIn = p->input(1), *vIn = pv->input(1);
    std::vector<const Node*> seen;
    {
      struct View {
        const Value* base;
        std::vector<int64_t> perm;  // operand axis i is base axis perm[i]
        std::vector<const Node*> nodes;
        float scale = 1;
      };
      auto through = [&](const Value* v, const Node* reader, bool scaled) {
        View w{v, {}, {}, 1};
        for (int64_t i = 0; i < rank; ++i) w.perm.push_back(i);
        for (;;) {
          const Node* n = w.base->producer();
          if (!n || n->graph() != &g || singleReader(w.base, g) != reader || taken.count(n)) break;
          float c = 0;
          if (isOp(n, "Transpose") && n->input(0)) {
            std::vector<int64_t> p1 = n->attrInts("perm", {});
            if (p1.empty())
              for (int64_t i = rank - 1; i >= 0; --i) p1.push_back(i);
            if (static_cast<int64_t>(p1.size()) != rank) break;
            for (int64_t& a : w.perm) a = p1[static_cast<size_t>(a)];
            w.base = n->input(0);
          } else if (scaled && isOp(n, "Mul") && n->inputs().size() == 2 && n->input(0) && n->input(1) &&
                     (constantScalar(constantOf(n->input(1)), c) || constantScalar(constantOf(n->input(0)), c))) {
            w.scale *= c;
            w.base = constantScalar(constantOf(n->input(1)), c) ? n->input(0) : n->input(1);
          } else {
            break;
          }
          w.nodes.push_back(n);
          reader = n;
        }
        return w;
      };
      // Element strides of the operand's axes in its base buffer (contiguous), or empty.
      auto strides = [&](const View& w) -> std::vector<int64_t> {
        const StaticTensorType* bt = typeOf(w.base);
        if (!bt || bt->dtype != DType::Float || static_cast<int64_t>(bt->dims.size()) != rank) return {};
        std::vector<int64_t> bs(static_cast<size_t>(rank), 1), out;
        for (int64_t a = rank - 1; a > 0; --a) bs[static_cast<size_t>(a - 1)] = bs[static_cast<size_t>(a)] * bt->dims[static_cast<size_t>(a)];
        for (int64_t a : w.perm) out.push_back(bs[static_cast<size_t>(a)]);
        return out;
      };
      const size_t r1 = static_cast<size_t>(rank - 1), r2 = static_cast<size_t>(rank - 2);
      const size_t hAxis = rank == 4 ? 1 : 0;
      View qv = through(qIn, p, true), kv = through(kIn, p, true), vv = through(vIn, pv, false);
      if (!qv.nodes.empty()) {
        auto st = strides(qv);
        if (!st.empty() && st[r1] == 1) {
          qIn = qv.base, l.qS = st[r2], l.qB = rank >= 3 ? st[0] : 0, l.qH = rank == 4 ? st[hAxis] : 0;
          l.scale *= qv.scale;
          seen.insert(seen.end(), qv.nodes.begin(), qv.nodes.end());
        }
      }
      if (!kv.nodes.empty()) {  // K^T [.., Dh, Skv]: rows of K^T (Skv contiguous) or of K (Dh contiguous)
        auto st = strides(kv);
        // K rows (Dh contiguous) are transposed into the GEMM's panels again for every block of
        // query rows: worth it only when a head is one block (a materialised K^T is packed by
        // plain copies); Whisper's encoder, 12 blocks a head, was 15% slower reading K.
        const bool oneBlock = attentionRows(sq, skv) >= sq;
        if (!st.empty() && (st[r1] == 1 || (st[r2] == 1 && oneBlock))) {
          kIn = kv.base;
          l.kTransposed = st[r1] == 1;
          l.kS = l.kTransposed ? st[r2] : st[r1];
          l.kB = rank >= 3 ? st[0] : 0, l.kH = rank == 4 ? st[hAxis] : 0;
          l.scale *= kv.scale;
          seen.insert(seen.end(), kv.nodes.begin(), kv.nodes.end());
        }
      }
      if (!vv.nodes.empty()) {
        auto st = strides(vv);
        if (!st.empty() && st[r1] == 1) {
          vIn = vv.base, l.vS = st[r2], l.vB = rank >= 3 ? st[0] : 0, l.vH = rank == 4 ? st[hAxis] : 0;
          seen.insert(seen.end(), vv.nodes.begin(), vv.nodes.end());
        }
      }
    }
    if (mask) {
      const StaticTensorType* mt = typeOf(mask);
      const bool boolean = covered[1]->opType == "Where";  // {Softmax, the Add or Where, ...}
      if (!mt || mt->dtype != (boolean ? DType::Bool : DType::Float) || mt->dims.size() > static_cast<size_t>(rank)) continue;
      // right-aligned against the scores' [.., Sq, Skv]; as 4-D [B, H, Sq, Skv]
      std::vector<int64_t> md(static_cast<size_t>(rank) - mt->dims.size(), 1);
      md.insert(md.end(), mt->dims.begin(), mt->dims.end());
      if (rank == 3) md.insert(md.begin() + 1, 1);
      if (rank == 2) md.insert(md.begin(), {1, 1});
      if (!setAttentionMask(l, md, boolean, false)) continue;
      l.fill = fill;
      l.trueMasks = trueMasks;
    }
    auto kernel = makeAttentionKernel(l, threads);
    if (!kernel) continue;
    FusedInt8Step f;
    f.last = pv;
    f.covered = covered;
    f.covered.insert(f.covered.end(), seen.begin(), seen.end());
    taken.insert(f.covered.begin(), f.covered.end());
    f.input = qIn;
    f.input2 = kIn;
    f.moreInputs = {vIn};
    if (mask) f.moreInputs.push_back(mask);
    f.output = pv->output(0);
    f.kernel = std::move(kernel);
    f.def = &kFusedAttentionDef;
    f.fusedOp = "Attention";
    out.push_back(std::move(f));
  }
}

}  // namespace onnxtool::cpu
