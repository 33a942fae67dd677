// kernels_rnn.cpp: LSTM and GRU on the packed GEMM (gemm.h). Per direction, the input projection
// of every time step is one GEMM (X [steps * batch, input] x W^T, the biases that add to it folded
// into its epilogue), then each step runs one small GEMM of the batch's hidden states with R^T
// (GRU without linear_before_reset: two, the second on r (.) h) and the gates as vector passes
// (vec.h sigmoid and tanh) over each batch row. sequence_lens is honoured as the reference kernel
// does: a row stops at its length (reverse rows start at their last valid step), Y is zero past
// it, Y_h/Y_c hold the last valid state (zero for an empty sequence). The default activations
// only (LSTM Sigmoid/Tanh/Tanh, GRU Sigmoid/Tanh); other activations and float types decline to
// the reference kernel.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/cpu/gemm.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/vec.h"
#include "lib/error.h"

namespace onnxtool::cpu {

namespace {

/// Copies a constant float tensor's values (any address), or an empty vector when absent.
std::vector<float> floatsOf(const TensorData* t, size_t n) {
  std::vector<float> v;
  if (!t || t->dtype() != DType::Float || t->raw.size() != n * sizeof(float)) return v;
  v.resize(n);
  if (n) std::memcpy(v.data(), t->raw.data(), n * sizeof(float));
  return v;
}

class RecurrentKernel : public CpuKernel {
 public:
  struct Shape {
    int64_t steps = 0, batch = 0, input = 0, hidden = 0, gates = 4, dirs = 1;
    bool layout1 = false, gru = false, reverseOnly = false, linearBeforeReset = false, inputForget = false;
    float clip = std::numeric_limits<float>::infinity();
  };

  RecurrentKernel(const Node& node, Shape s, const float* w, const float* r, const std::vector<float>& b, std::vector<float> peep,
                  int threads)
      : node_(node), s_(s), threads_(std::max(threads, 1)), cfgX_(gemmConfig(activeIsa(), s.steps * s.batch)),
        cfgStep_(gemmConfig(activeIsa(), s.batch)), peep_(std::move(peep)), vk_(vecKernels()) {
    const int64_t H = s.hidden, GH = s.gates * H, In = s.input;
    for (int64_t d = 0; d < s.dirs; ++d) {
      Dir dir;
      dir.w = std::make_unique<PackedB>(w + d * GH * In, In, true, In, GH, cfgX_.mk.nr, cfgX_.kcMax);
      const float* rd = r + d * GH * H;
      const float* wb = b.empty() ? nullptr : b.data() + d * 2 * GH;
      const float* rb = wb ? wb + GH : nullptr;
      dir.biasX.assign(static_cast<size_t>(GH), 0.f);
      if (s.gru && !s.linearBeforeReset) {
        // z and r: one GEMM of h; the candidate: a second of r (.) h. Every bias adds to the input side.
        dir.r = std::make_unique<PackedB>(rd, H, true, H, 2 * H, cfgStep_.mk.nr, cfgStep_.kcMax);
        dir.rh = std::make_unique<PackedB>(rd + 2 * H * H, H, true, H, H, cfgStep_.mk.nr, cfgStep_.kcMax);
        if (wb)
          for (int64_t j = 0; j < GH; ++j) dir.biasX[static_cast<size_t>(j)] = wb[j] + rb[j];
      } else {
        dir.r = std::make_unique<PackedB>(rd, H, true, H, GH, cfgStep_.mk.nr, cfgStep_.kcMax);
        if (wb) {
          for (int64_t j = 0; j < GH; ++j) dir.biasX[static_cast<size_t>(j)] = wb[j] + rb[j];
          if (s.gru) {  // linear_before_reset: the candidate's recurrent bias is scaled by r with R h
            dir.biasR.assign(static_cast<size_t>(GH), 0.f);
            for (int64_t j = 2 * H; j < GH; ++j) {
              dir.biasX[static_cast<size_t>(j)] = wb[j];
              dir.biasR[static_cast<size_t>(j)] = rb[j];
            }
          }
        }
      }
      dirs_.push_back(std::move(dir));
    }
  }

  bool readsInput(size_t i) const override { return i != 1 && i != 2 && i != 3 && i != 7; }  // W, R, B, P packed or copied

  size_t workspaceBytes() const override {
    const int64_t H = s_.hidden, GH = s_.gates * H, rows = s_.steps * s_.batch;
    GemmProblem px = problemX(nullptr, nullptr, 0), pr = problemStep(nullptr, nullptr, nullptr, 0);
    const size_t gemmFloats = static_cast<size_t>(threads_) * std::max(gemmWorkspaceFloats(cfgX_, px), gemmWorkspaceFloats(cfgStep_, pr));
    const size_t floats = static_cast<size_t>(rows * GH + s_.batch * GH + 3 * s_.batch * H + GH + std::max(GH, s_.batch * H)) +
                          gemmFloats + 64;
    return floats * sizeof(float);
  }

  double flops() const override {
    const double H = static_cast<double>(s_.hidden), GH = static_cast<double>(s_.gates) * H;
    return 2.0 * static_cast<double>(s_.dirs * s_.steps * s_.batch) * GH * static_cast<double>(s_.input + s_.hidden);
  }

  void compute(const CpuComputeArgs& args) const override {
    const int64_t S = s_.steps, B = s_.batch, H = s_.hidden, GH = s_.gates * H, D = s_.dirs;
    const auto* x = static_cast<const float*>(args.inputs[0]);
    const auto* lensIn = args.inputs.size() > 4 ? static_cast<const int32_t*>(args.inputs[4]) : nullptr;
    const auto* h0 = args.inputs.size() > 5 ? static_cast<const float*>(args.inputs[5]) : nullptr;
    const auto* c0 = !s_.gru && args.inputs.size() > 6 ? static_cast<const float*>(args.inputs[6]) : nullptr;
    auto* y = static_cast<float*>(args.outputs[0]);
    auto* yh = args.outputs.size() > 1 ? static_cast<float*>(args.outputs[1]) : nullptr;
    auto* yc = !s_.gru && args.outputs.size() > 2 ? static_cast<float*>(args.outputs[2]) : nullptr;
    std::vector<int64_t> lens(static_cast<size_t>(B), S);
    int64_t maxLen = lensIn ? 0 : S;
    for (int64_t b = 0; lensIn && b < B; ++b) {
      const int64_t l = lensIn[b];
      if (l < 0 || l > S)
        fail(ErrorKind::InvalidInput, "node '{}' ({}): sequence length {} is out of range [0, {}]", node_.displayName(),
             node_.opType, l, S);
      lens[static_cast<size_t>(b)] = l;
      maxLen = std::max(maxLen, l);
    }
    float* ws = static_cast<float*>(args.workspace);
    float* gx = ws;
    float* gh = gx + S * B * GH;
    float* h = gh + B * GH;
    float* c = h + B * H;
    float* rh = c + B * H;
    float* pre = rh + B * H;  // one row's gates
    float* tmp = pre + GH;     // a row's tanh(c) (LSTM), or R_h (r (.) h) of every row (GRU)
    float* gemmWs = ws + ((S * B * GH + B * GH + 3 * B * H + GH + std::max(GH, B * H) + 15) / 16) * 16;
    if (y) std::fill(y, y + S * D * B * H, 0.f);
    const auto sigmoid = vk_.unary[static_cast<int>(VecUnary::Sigmoid)];
    const auto tanhf = vk_.unary[static_cast<int>(VecUnary::Tanh)];
    const bool clip = s_.clip != std::numeric_limits<float>::infinity();
    auto clamp = [&](float* v, int64_t n) {
      if (clip)
        for (int64_t i = 0; i < n; ++i) v[i] = std::min(std::max(v[i], -s_.clip), s_.clip);
    };
    for (int64_t d = 0; d < D; ++d) {
      const Dir& dir = dirs_[static_cast<size_t>(d)];
      const bool reverse = s_.reverseOnly || d == 1;
      gemm(cfgX_, problemX(x, gx, d), args.pool, threads_, gemmWs);
      for (int64_t b = 0; b < B; ++b) {  // initial states: [dirs, batch, H] (layout 1: [batch, dirs, H])
        const int64_t at = s_.layout1 ? (b * D + d) * H : (d * B + b) * H;
        if (h0) std::memcpy(h + b * H, h0 + at, static_cast<size_t>(H) * sizeof(float));
        else std::fill(h + b * H, h + (b + 1) * H, 0.f);
        if (!s_.gru) {
          if (c0) std::memcpy(c + b * H, c0 + at, static_cast<size_t>(H) * sizeof(float));
          else std::fill(c + b * H, c + (b + 1) * H, 0.f);
        }
      }
      const float* pd = peep_.empty() ? nullptr : peep_.data() + d * 3 * H;
      for (int64_t step = 0; step < maxLen; ++step) {
        gemm(cfgStep_, problemStep(h, gh, dir.r.get(), d), args.pool, threads_, gemmWs);
        if (s_.gru && !s_.linearBeforeReset) {
          // r = sigmoid(.) of every row first, then R_h (r (.) h) for all rows in one GEMM
          for (int64_t b = 0; b < B; ++b) {
            if (step >= lens[static_cast<size_t>(b)]) continue;
            const int64_t t = reverse ? lens[static_cast<size_t>(b)] - 1 - step : step;
            const float* gxr = gx + rowOf(t, b) * GH;
            float* ghr = gh + b * 2 * H;
            vk_.binary[kAdd](gxr, ghr, ghr, 2 * H);  // z, r pre-activations, in place
            clamp(ghr, 2 * H);
            sigmoid(ghr, ghr, 2 * H);
            for (int64_t i = 0; i < H; ++i) rh[b * H + i] = ghr[H + i] * h[b * H + i];
          }
          GemmProblem p = problemStep(rh, tmp, dir.rh.get(), d);
          p.n = H;
          p.ldc = H;
          gemm(cfgStep_, p, args.pool, threads_, gemmWs);  // tmp [batch, H]: R_h (r (.) h)
        }
        for (int64_t b = 0; b < B; ++b) {
          const int64_t len = lens[static_cast<size_t>(b)];
          if (step >= len) continue;
          const int64_t t = reverse ? len - 1 - step : step;
          const float* gxr = gx + rowOf(t, b) * GH;
          float* hb = h + b * H;
          if (!s_.gru) {
            float* cb = c + b * H;
            vk_.binary[kAdd](gxr, gh + b * GH, pre, GH);  // gates i, o, f, c
            float *ig = pre, *og = pre + H, *fg = pre + 2 * H, *cg = pre + 3 * H;
            if (pd)
              for (int64_t i = 0; i < H; ++i) ig[i] += pd[i] * cb[i], fg[i] += pd[2 * H + i] * cb[i];
            clamp(ig, H);
            sigmoid(ig, ig, H);
            if (s_.inputForget) {
              for (int64_t i = 0; i < H; ++i) fg[i] = 1.f - ig[i];
            } else {
              clamp(fg, H);
              sigmoid(fg, fg, H);
            }
            clamp(cg, H);
            tanhf(cg, cg, H);
            for (int64_t i = 0; i < H; ++i) cb[i] = fg[i] * cb[i] + ig[i] * cg[i];
            if (pd)
              for (int64_t i = 0; i < H; ++i) og[i] += pd[H + i] * cb[i];
            clamp(og, H);
            sigmoid(og, og, H);
            tanhf(cb, tmp, H);
            for (int64_t i = 0; i < H; ++i) hb[i] = og[i] * tmp[i];
          } else if (s_.linearBeforeReset) {
            const float* ghr = gh + b * GH;
            vk_.binary[kAdd](gxr, ghr, pre, 2 * H);  // z, r
            clamp(pre, 2 * H);
            sigmoid(pre, pre, 2 * H);
            float* cand = pre + 2 * H;
            for (int64_t i = 0; i < H; ++i) cand[i] = gxr[2 * H + i] + pre[H + i] * ghr[2 * H + i];
            clamp(cand, H);
            tanhf(cand, cand, H);
            for (int64_t i = 0; i < H; ++i) hb[i] = (1.f - pre[i]) * cand[i] + pre[i] * hb[i];
          } else {
            const float* z = gh + b * 2 * H;  // already through the sigmoid above
            float* cand = pre;
            vk_.binary[kAdd](gxr + 2 * H, tmp + b * H, cand, H);
            clamp(cand, H);
            tanhf(cand, cand, H);
            for (int64_t i = 0; i < H; ++i) hb[i] = (1.f - z[i]) * cand[i] + z[i] * hb[i];
          }
          if (y) std::memcpy(y + (s_.layout1 ? (b * S + t) * D + d : (t * D + d) * B + b) * H, hb, static_cast<size_t>(H) * sizeof(float));
        }
      }
      for (int64_t b = 0; b < B; ++b) {  // the last valid state; zero for an empty sequence
        const int64_t at = s_.layout1 ? (b * D + d) * H : (d * B + b) * H;
        const bool empty = lens[static_cast<size_t>(b)] == 0;
        if (yh) {
          if (empty) std::fill(yh + at, yh + at + H, 0.f);
          else std::memcpy(yh + at, h + b * H, static_cast<size_t>(H) * sizeof(float));
        }
        if (yc) {
          if (empty) std::fill(yc + at, yc + at + H, 0.f);
          else std::memcpy(yc + at, c + b * H, static_cast<size_t>(H) * sizeof(float));
        }
      }
    }
  }

 private:
  struct Dir {
    std::unique_ptr<PackedB> w, r, rh;
    std::vector<float> biasX, biasR;
  };
  static constexpr int kAdd = static_cast<int>(VecBinary::Add);

  /// Row of X (and of the input projection) for step t of batch entry b.
  int64_t rowOf(int64_t t, int64_t b) const { return s_.layout1 ? b * s_.steps + t : t * s_.batch + b; }

  GemmProblem problemX(const float* x, float* gx, int64_t d) const {
    GemmProblem p;
    p.m = s_.steps * s_.batch, p.n = s_.gates * s_.hidden, p.k = s_.input;
    p.a = x, p.lda = s_.input;
    p.packedB = dirs_.empty() ? nullptr : dirs_[static_cast<size_t>(d)].w.get();
    p.c = gx, p.ldc = p.n;
    p.ep.colBias = dirs_.empty() ? nullptr : dirs_[static_cast<size_t>(d)].biasX.data();
    return p;
  }
  GemmProblem problemStep(const float* h, float* gh, const PackedB* r, int64_t d) const {
    GemmProblem p;
    p.m = s_.batch, p.k = s_.hidden;
    p.n = s_.gru && !s_.linearBeforeReset ? 2 * s_.hidden : s_.gates * s_.hidden;
    p.a = h, p.lda = s_.hidden;
    p.packedB = r;
    p.c = gh, p.ldc = p.n;
    if (!dirs_.empty() && !dirs_[static_cast<size_t>(d)].biasR.empty()) p.ep.colBias = dirs_[static_cast<size_t>(d)].biasR.data();
    return p;
  }

  const Node& node_;
  Shape s_;
  int threads_;
  GemmConfig cfgX_, cfgStep_;
  std::vector<Dir> dirs_;
  std::vector<float> peep_;
  const VecKernels& vk_;
};

std::unique_ptr<CpuKernel> createRecurrent(const CpuNodeInfo& info, bool gru) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (n.attr("activation_alpha") || n.attr("activation_beta")) return nullptr;
  if (const Attribute* acts = n.attr("activations")) {
    std::vector<std::string> want = gru ? std::vector<std::string>{"Sigmoid", "Tanh"} : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    if (acts->strings.empty() || acts->strings.size() % want.size()) return nullptr;
    for (size_t i = 0; i < acts->strings.size(); ++i)
      if (acts->strings[i] != want[i % want.size()]) return nullptr;
  }
  RecurrentKernel::Shape s;
  s.gru = gru;
  s.gates = gru ? 3 : 4;
  const std::string direction = n.attrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") return nullptr;
  s.dirs = direction == "bidirectional" ? 2 : 1;
  s.reverseOnly = direction == "reverse";
  s.layout1 = n.attrInt("layout", 0) != 0;
  s.linearBeforeReset = gru && n.attrInt("linear_before_reset", 0) != 0;
  s.inputForget = !gru && n.attrInt("input_forget", 0) != 0;
  if (n.attr("clip")) s.clip = n.attrFloat("clip", 0.f);
  if (!(s.clip >= 0)) return nullptr;
  if (!info.hasInput(1) || !info.hasInput(2)) return nullptr;
  const auto& xd = info.in(0).dims;
  if (xd.size() != 3) return nullptr;
  s.steps = s.layout1 ? xd[1] : xd[0];
  s.batch = s.layout1 ? xd[0] : xd[1];
  s.input = xd[2];
  const auto& wd = info.in(1).dims;
  const auto& rd = info.in(2).dims;
  if (wd.size() != 3 || rd.size() != 3) return nullptr;
  s.hidden = n.attrInt("hidden_size", rd[2]);
  const int64_t GH = s.gates * s.hidden;
  if (s.hidden <= 0 || wd != std::vector<int64_t>{s.dirs, GH, s.input} || rd != std::vector<int64_t>{s.dirs, GH, s.hidden}) return nullptr;
  auto constant = [&](size_t i) { return i < info.constants.size() ? info.constants[i] : nullptr; };
  const TensorData *w = constant(1), *r = constant(2);
  if (!w || !r || w->dtype() != DType::Float || r->dtype() != DType::Float) return nullptr;
  std::vector<float> b;
  if (info.hasInput(3)) {
    b = floatsOf(constant(3), static_cast<size_t>(s.dirs * 2 * GH));
    if (b.empty()) return nullptr;  // a bias computed at run time, or of the wrong size: the reference kernel says so
  }
  if (info.hasInput(4) && info.in(4).dtype != DType::Int32) return nullptr;
  if (info.hasInput(4) && info.in(4).numElements() != s.batch) return nullptr;
  const std::vector<int64_t> state = s.layout1 ? std::vector<int64_t>{s.batch, s.dirs, s.hidden} : std::vector<int64_t>{s.dirs, s.batch, s.hidden};
  for (size_t i : {size_t{5}, size_t{6}})
    if (info.hasInput(i) && (i == 5 || !gru) && (info.in(i).dtype != DType::Float || info.in(i).dims != state)) return nullptr;
  std::vector<float> peep;
  if (!gru && info.hasInput(7)) {
    peep = floatsOf(constant(7), static_cast<size_t>(s.dirs * 3 * s.hidden));
    if (peep.empty()) return nullptr;
  }
  const float* wp = reinterpret_cast<const float*>(w->raw.data());  // PackedB reads with memcpy: any address
  const float* rp = reinterpret_cast<const float*>(r->raw.data());
  if (w->raw.size() != static_cast<size_t>(s.dirs * GH * s.input) * 4 || r->raw.size() != static_cast<size_t>(s.dirs * GH * s.hidden) * 4)
    return nullptr;
  return std::make_unique<RecurrentKernel>(n, s, wp, rp, b, std::move(peep), info.threads);
}

}  // namespace

std::unique_ptr<CpuKernel> createLstm(const CpuNodeInfo& info) { return createRecurrent(info, false); }
std::unique_ptr<CpuKernel> createGru(const CpuNodeInfo& info) { return createRecurrent(info, true); }

}  // namespace onnxtool::cpu
