// kernels_gemm.cpp: MatMul and Gemm on our packed SGEMM (gemm.h: constant B packed once here,
// epilogues in the micro-kernel's store), and Conv with weights computed at run time (im2col +
// GEMM; 1x1 stride-1 as plain GEMM) on OpenBLAS's sgemm, which measured faster than ours on those
// shapes (small N, a large A packed per call: scripts/gemm-bench's conv rows). Convolutions with
// constant weights run on kernels_conv.cpp.
#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "exec/cpu/gemm.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/vec.h"

// OpenBLAS (DYNAMIC_ARCH builds, as Debian's) picks its kernels once, when it is loaded, from the
// CPU model number; on a CPU it does not know (a VM reporting "Intel(R) Xeon(R) Processor") it
// falls back to Prescott (SSE3) kernels, 4.5x slower than its SkylakeX ones on the AVX-512 machine
// this was measured on. gotoblas_dynamic_quit() + gotoblas_dynamic_init() redo the choice, which
// honours OPENBLAS_CORETYPE (exported symbols of DYNAMIC_ARCH builds; done once, before any call).
extern "C" void gotoblas_dynamic_init(void);
extern "C" void gotoblas_dynamic_quit(void);
// The pthreads build of OpenBLAS (Debian's default) starts one worker per further core when it
// is loaded, and each worker spins in sched_yield for about 2^28 TSC ticks (~0.1 s) before it
// sleeps: every onnxtool process lost a core for its first ~0.1 s, which is where load, prepare
// and the first run happen (MobileNetV2 at 2 threads: first run 21 ms without the spinner, 21-49
// with it). We only ever call OpenBLAS single-threaded (our pool splits the work), so its workers
// are stopped as soon as this library is loaded. Weak: the serial and OpenMP builds lack it.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace {
struct StopBlasWorkers {
  StopBlasWorkers() {
    // This order: openblas_set_num_threads restarts stopped workers (its lazy re-init after fork).
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
  }
} stopBlasWorkers;
}  // namespace

namespace onnxtool::cpu {

void configureBlas(int threads) {
  static std::once_flag once;
  std::call_once(once, [] {
    // The core our ISA path maps to, unless the user chose one for OpenBLAS.
    if (std::getenv("OPENBLAS_CORETYPE")) return;
    Isa isa = activeIsa();
    const char* want = isa == Isa::Avx512 ? "SkylakeX" : isa == Isa::Avx2 ? "Haswell" : "Prescott";
    std::string have = openblas_get_corename();
    std::string lower = want;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (auto& c : have) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (have == lower) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    spdlog::debug("OpenBLAS kernels: {} -> {} (isa {})", have, openblas_get_corename(), isaName(isa));
  });
  // Our kernels split GEMMs over the plan's pool and call OpenBLAS single-threaded: two pools
  // spinning against each other on the same cores cost more than either saves. Set once, when
  // this library is loaded (stopBlasWorkers above): calling openblas_set_num_threads again here
  // would restart the workers stopped there.
  (void)threads;
}

namespace {

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // sgemm with k = 0 leaves C scaled by beta; make that explicit
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

/// The epilogue fused into a GEMM kernel at prepare (fuseBias, fuseActivation).
struct FusedGemmEpilogue {
  std::vector<float> bias;  ///< along N; empty: none
  VecUnary act = VecUnary::Count;  ///< Count: none
  /// Sets `ep`'s clamp (Relu) or post-store activation.
  void applyAct(GemmEpilogue& ep) const {
    if (act == VecUnary::Relu) {  // in the micro-kernel's store: max(0, v) keeps NaN and -0 as Relu does
      ep.clamp = true;
      ep.lo = 0.f;
      ep.hi = std::numeric_limits<float>::infinity();
    } else {
      ep.act = act;
    }
  }
};

/// A constant B packed for `cfg`'s panels: once per node and panel layout when the kernels of a
/// node made at run time share `packs` (their row counts, which choose the micro-kernel, differ).
std::shared_ptr<const PackedB> packB(PackCache* packs, const float* b, int64_t ldb, bool transB, int64_t k, int64_t n,
                                     const GemmConfig& cfg) {
  auto make = [&] { return std::make_shared<const PackedB>(b, ldb, transB, k, n, cfg.mk.nr, cfg.kcMax); };
  if (!packs) return make();
  return packs->get<PackedB>(fmt::format("gemm.b {} {} {} {} {} {}", ldb, transB, k, n, cfg.mk.nr, cfg.kcMax), make);
}

/// Floats of the GEMM's per-thread workspace for `threads` threads, rounded to 64 bytes.
size_t workspaceFor(const GemmConfig& cfg, const GemmProblem& p, int threads) {
  return static_cast<size_t>(std::max(threads, 1)) * gemmWorkspaceFloats(cfg, p);
}

/// MatMul of rank >= 2 operands with numpy batch broadcasting, on our packed GEMM (gemm.h). A
/// 2-D B folds the batch into M (one GEMM over all rows); a constant 2-D B is packed once here.
/// Batches of a broadcast MatMul (attention's Q*K^T and P*V) split over the pool.
class MatMulKernel : public CpuKernel {
 public:
  MatMulKernel(int64_t m, int64_t n, int64_t k, std::vector<int64_t> aOff, std::vector<int64_t> bOff, const float* constB,
               int threads, PackCache* packs = nullptr)
      : m_(m), n_(n), k_(k), aOff_(std::move(aOff)), bOff_(std::move(bOff)), cfg_(gemmConfig(activeIsa(), m)),
        threads_(std::max(threads, 1)) {
    if (constB) packed_ = packB(packs, constB, n, false, k, n, cfg_);
  }
  size_t workspaceBytes() const override { return workspaceFor(cfg_, problem(nullptr, nullptr, nullptr), threads_) * sizeof(float); }
  void compute(const CpuComputeArgs& args) const override {
    GemmProblem p = problem(static_cast<const float*>(args.inputs[0]), static_cast<const float*>(args.inputs[1]),
                            static_cast<float*>(args.outputs[0]));
    gemm(cfg_, p, args.pool, threads_, static_cast<float*>(args.workspace));
  }
  double flops() const override { return 2.0 * static_cast<double>(aOff_.size()) * m_ * n_ * k_; }
  bool readsInput(size_t i) const override {  // a constant B is packed (MatMulNBits: its scales and zero points too)
    return packed4_ ? i == 0 : i != 1 || !packed_;
  }
  std::string variant() const override { return packed4_ ? ".int4" : ""; }
  /// B as 4-bit codes in MatMulNBits' layout (PackedB4), kept packed.
  void usePackedB4(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t block) {
    packed_.reset();
    packed4_ = std::make_unique<PackedB4>(codes, scales, zeros, k_, n_, block, cfg_.mk.nr, cfg_.kcMax, cfg_.isa);
  }
  bool fuseBias(const float* bias, int64_t n) override {
    if (!fused_.bias.empty() || fused_.act != VecUnary::Count || n != n_) return false;
    fused_.bias.assign(bias, bias + n);
    return true;
  }
  bool fuseActivation(VecUnary act) override {
    if (fused_.act != VecUnary::Count) return false;
    fused_.act = act;
    return true;
  }

 private:
  GemmProblem problem(const float* a, const float* b, float* y) const {
    GemmProblem p;
    p.m = m_, p.n = n_, p.k = k_;
    p.a = a, p.lda = k_;
    p.b = b, p.ldb = n_;
    p.packedB = packed_.get();
    p.packedB4 = packed4_.get();
    p.c = y, p.ldc = n_;
    p.batches = static_cast<int64_t>(aOff_.size());
    p.aOffsets = aOff_.data();
    p.bOffsets = bOff_.data();
    p.cStride = m_ * n_;
    p.ep.colBias = fused_.bias.empty() ? nullptr : fused_.bias.data();
    fused_.applyAct(p.ep);
    return p;
  }

  int64_t m_, n_, k_;
  std::vector<int64_t> aOff_, bOff_;  // element offsets of each batch's A and B
  GemmConfig cfg_;
  int threads_;
  std::shared_ptr<const PackedB> packed_;
  std::unique_ptr<PackedB4> packed4_;
  FusedGemmEpilogue fused_;
};

/// Copies a constant float tensor of `n` elements (its bytes may be unaligned).
std::vector<float> constantFloats(const TensorData* t, int64_t n) {
  if (!t || t->dtype() != DType::Float || t->raw.size() != static_cast<size_t>(n) * sizeof(float)) return {};
  std::vector<float> v(static_cast<size_t>(n));
  if (n) std::memcpy(v.data(), t->raw.data(), t->raw.size());
  return v;
}

/// The floats of a constant tensor of `n` elements for PackedB, in place at whatever address
/// they are (a model file's bytes may sit anywhere: PackedB reads them with memcpy, so MatMul
/// and Gemm take unalignedConstants); nullptr when `t` is not a float tensor of n elements or n
/// is 0.
const float* constantForPacking(const TensorData* t, int64_t n) {
  if (!t || n == 0 || t->dtype() != DType::Float || t->raw.size() != static_cast<size_t>(n) * sizeof(float)) return nullptr;
  return reinterpret_cast<const float*>(t->raw.data());
}

}  // namespace

std::unique_ptr<CpuKernel> createMatMul(const CpuNodeInfo& info) {
  const auto& a = info.in(0).dims;
  const auto& b = info.in(1).dims;
  const auto& y = info.out(0).dims;
  if (a.size() < 2 || b.size() < 2) return nullptr;  // 1-D operands: the reference kernel
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  if (b[b.size() - 2] != k) return nullptr;
  size_t batchRank = y.size() - 2;
  int64_t batches = 1;
  for (size_t i = 0; i < batchRank; ++i) batches *= y[i];
  if (b.size() == 2) {
    const float* constB = nullptr;
    if (info.constants.size() > 1 && info.constants[1]) {
      constB = constantForPacking(info.constants[1], k * n);
      if (!constB && k * n > 0) return nullptr;
    }
    return std::make_unique<MatMulKernel>(batches * m, n, k, std::vector<int64_t>{0}, std::vector<int64_t>{0}, constB, info.threads,
                                          info.packs);
  }
  // Broadcast batch offsets: walk the output batch index and map it into A's and B's.
  auto offsets = [&](const std::vector<int64_t>& d, int64_t matSize) {
    std::vector<int64_t> out(static_cast<size_t>(batches));
    size_t r = d.size() - 2;
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t rem = bi, off = 0, stride = matSize;
      for (size_t j = batchRank; j-- > 0;) {
        int64_t idx = rem % y[j];
        rem /= y[j];
        size_t dj = j + r - batchRank;  // matching dim of the operand (right-aligned)
        if (j + r >= batchRank) {
          if (d[dj] != 1) off += idx * stride;
          stride *= d[dj];
        }
      }
      out[static_cast<size_t>(bi)] = off;
    }
    return out;
  };
  return std::make_unique<MatMulKernel>(m, n, k, offsets(a, m * k), offsets(b, k * n), nullptr, info.threads);
}

/// com.microsoft MatMulNBits with constant B, scales, zero points and g_idx: 4-bit codes with
/// uint8 (or no) zero points and no g_idx stay packed (PackedB4: dequantized one block at a time
/// while the GEMM runs, one rounding per value as the reference kernel); other forms are
/// dequantized once here and packed as floats. A constant bias (input 5) rides the epilogue.
std::unique_ptr<CpuKernel> createMatMulNBits(const CpuNodeInfo& info) {
  const Node& nd = *info.node;
  const int64_t K = nd.attrInt("K", 0), N = nd.attrInt("N", 0), bits = nd.attrInt("bits", 4), block = nd.attrInt("block_size", 0);
  if ((bits != 2 && bits != 4 && bits != 8) || K <= 0 || N <= 0 || block < 16 || (block & (block - 1))) return nullptr;
  if (nd.attrInt("accuracy_level", 0) == 4) return nullptr;
  const auto& a = info.in(0).dims;
  if (a.size() < 2 || a.back() != K) return nullptr;
  auto constant = [&](size_t i) { return i < info.constants.size() ? info.constants[i] : nullptr; };
  const TensorData *bq = constant(1), *sc = constant(2);
  const TensorData* zt = info.hasInput(3) ? constant(3) : nullptr;
  const TensorData* gi = info.hasInput(4) ? constant(4) : nullptr;
  const TensorData* bias = info.hasInput(5) ? constant(5) : nullptr;
  if (!bq || !sc || (info.hasInput(3) && !zt) || (info.hasInput(4) && !gi) || (info.hasInput(5) && !bias)) return nullptr;
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8, perByte = 8 / bits;
  if (bq->dtype() != DType::UInt8 || bq->raw.size() != static_cast<size_t>(N * blocks * blob)) return nullptr;
  std::vector<float> scales = constantFloats(sc, N * blocks);
  if (scales.empty()) return nullptr;
  const bool floatZp = zt && zt->dtype() != DType::UInt8;
  std::vector<float> zpf;
  const int64_t zpRow = (blocks + perByte - 1) / perByte;
  if (floatZp && (zpf = constantFloats(zt, N * blocks)).empty()) return nullptr;
  if (zt && !floatZp && zt->raw.size() != static_cast<size_t>(N * zpRow)) return nullptr;
  std::vector<int64_t> groups;
  if (gi) {
    if (zt && !floatZp) return nullptr;  // the reference kernel refuses this combination: say so there
    groups = gi->toInt64s();
    if (static_cast<int64_t>(groups.size()) != K) return nullptr;
    for (int64_t g : groups)
      if (g < 0 || g >= blocks) return nullptr;
  }
  std::vector<float> b2;
  if (bias && (b2 = constantFloats(bias, N)).empty()) return nullptr;
  auto code = [&](const uint8_t* bytes, int64_t i) { return (bytes[i / perByte] >> ((i % perByte) * bits)) & ((1 << bits) - 1); };
  const auto* pb = reinterpret_cast<const uint8_t*>(bq->raw.data());
  const auto* pz = zt && !floatZp ? reinterpret_cast<const uint8_t*>(zt->raw.data()) : nullptr;
  int64_t m = 1;
  for (size_t i = 0; i + 1 < a.size(); ++i) m *= a[i];
  if (bits == 4 && groups.empty() && !floatZp && std::getenv("ONNXTOOL_INT4") == nullptr) {
    // 4-bit codes stay packed (an eighth of the float weight), dequantized block by block as
    // the GEMM runs. ONNXTOOL_INT4=float (any value) dequantizes once here instead.
    auto kernel = std::make_unique<MatMulKernel>(m, N, K, std::vector<int64_t>{0}, std::vector<int64_t>{0}, nullptr, info.threads);
    kernel->usePackedB4(pb, scales.data(), pz, block);
    if (!b2.empty()) kernel->fuseBias(b2.data(), N);
    return kernel;
  }
  std::vector<float> w(static_cast<size_t>(K * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t blk = k / block, grp = groups.empty() ? blk : groups[static_cast<size_t>(k)];
      const double scale = scales[static_cast<size_t>(n * blocks + grp)];
      const double q = code(pb + (n * blocks + blk) * blob, k % block);
      double v;
      if (floatZp) {
        v = q * scale - static_cast<double>(zpf[static_cast<size_t>(n * blocks + grp)]) * scale;
      } else {
        const double zp = pz ? code(pz + n * zpRow, grp) : static_cast<double>(1 << (bits - 1));
        v = (q - zp) * scale;
      }
      w[static_cast<size_t>(k * N + n)] = static_cast<float>(v);
    }
  auto kernel = std::make_unique<MatMulKernel>(m, N, K, std::vector<int64_t>{0}, std::vector<int64_t>{0}, w.data(), info.threads);
  if (!b2.empty()) kernel->fuseBias(b2.data(), N);
  return kernel;
}

namespace {

/// Gemm: Y = alpha * op(A) * op(B) + beta * C on our packed GEMM. A constant B is packed once
/// (either transB layout). C rides the micro-kernel's epilogue: a vector along N (or a scalar)
/// as a per-column bias, [M, 1] as a per-row bias (both scaled by beta; at prepare when C is a
/// constant), a full [M, N] as a residual (beta folded in at prepare when constant, or 1), else
/// Y is first filled with beta * C and the GEMM accumulates onto it.
class GemmKernel : public CpuKernel {
 public:
  enum class CMode { None, Col, Row, Full };
  GemmKernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, bool hasC, float beta, std::vector<int64_t> cDims,
             const float* constB, const TensorData* constC, int threads, PackCache* packs = nullptr)
      : ta_(ta), tb_(tb), hasC_(hasC), m_(m), n_(n), k_(k), alpha_(alpha), beta_(beta), cDims_(std::move(cDims)),
        cfg_(gemmConfig(activeIsa(), m)), threads_(std::max(threads, 1)) {
    // One row of A against B^T (a classifier at batch 1): gemm() takes dot products with B's
    // rows where the model holds them (any alignment), as fast as a packed B (both stream B
    // once) without packing megabytes of weights at prepare (MobileNetV2's 5 MB: a quarter of
    // its prepare).
    gemvInPlace_ = constB && m == 1 && tb && !ta;
    if (constB && !gemvInPlace_) packed_ = packB(packs, constB, tb ? k : n, tb, k, n, cfg_);
    cr_ = cDims_.size() == 2 ? cDims_[0] : 1;
    cc_ = cDims_.empty() ? 1 : cDims_.back();
    if (!hasC_) mode_ = CMode::None;
    else if (cr_ == 1 && (cc_ == n_ || cc_ == 1)) mode_ = CMode::Col;
    else if (cc_ == 1) mode_ = CMode::Row;
    else mode_ = CMode::Full;
    if (hasC_ && constC) {
      std::vector<float> c = constantFloats(constC, cr_ * cc_);
      if (!c.empty() || cr_ * cc_ == 0) {
        constC_ = true;
        if (mode_ == CMode::Col) {
          ownCol_.resize(static_cast<size_t>(n_));
          for (int64_t j = 0; j < n_; ++j) ownCol_[static_cast<size_t>(j)] = beta_ * c[static_cast<size_t>(cc_ == 1 ? 0 : j)];
        } else if (mode_ == CMode::Row) {
          ownRow_.resize(static_cast<size_t>(m_));
          for (int64_t i = 0; i < m_; ++i) ownRow_[static_cast<size_t>(i)] = beta_ * c[static_cast<size_t>(i)];
        } else {
          for (float& v : c) v *= beta_;
          ownFull_ = std::move(c);
        }
      }
    }
  }
  size_t workspaceBytes() const override {
    return (workspaceFor(cfg_, problem(nullptr, nullptr, nullptr, nullptr), threads_) + static_cast<size_t>(m_ + n_)) * sizeof(float);
  }
  void compute(const CpuComputeArgs& args) const override {
    const float* a = static_cast<const float*>(args.inputs[0]);
    const float* b = static_cast<const float*>(args.inputs[1]);
    const float* c = args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    float* ws = static_cast<float*>(args.workspace);
    float* vec = ws + workspaceFor(cfg_, problem(nullptr, nullptr, nullptr, nullptr), threads_);  // m_ + n_ floats
    GemmProblem p = problem(a, b, y, vec);
    if (hasC_ && !constC_) {  // C computed at run time: its scaled copy per call
      if (mode_ == CMode::Col) {
        for (int64_t j = 0; j < n_; ++j) vec[j] = beta_ * c[cc_ == 1 ? 0 : j] + (fused_.bias.empty() ? 0.f : fused_.bias[static_cast<size_t>(j)]);
      } else if (mode_ == CMode::Row) {
        for (int64_t i = 0; i < m_; ++i) vec[n_ + i] = beta_ * c[i];
      } else if (beta_ == 1.f) {
        p.ep.residual = c;
        p.ep.ldr = n_;
      } else {
        for (int64_t i = 0; i < m_; ++i)
          for (int64_t j = 0; j < n_; ++j) y[i * n_ + j] = beta_ * c[i * n_ + j];
        p.ep.accumulateC = true;
      }
    }
    gemm(cfg_, p, args.pool, threads_, ws);
  }
  double flops() const override { return 2.0 * m_ * n_ * k_; }
  /// A constant B is packed, a constant C folded into the kernel's own vectors.
  bool readsInput(size_t i) const override { return (i != 1 || !packed_) && (i != 2 || !constC_); }
  bool readsInputUnaligned(size_t i) const override { return i == 1 && gemvInPlace_; }
  bool fuseBias(const float* bias, int64_t n) override {
    // Only where C is absent or a constant along N (the bias then adds to it).
    if (!fused_.bias.empty() || fused_.act != VecUnary::Count || n != n_) return false;
    if (mode_ == CMode::None) {
      ownCol_.assign(bias, bias + n);
    } else if (mode_ == CMode::Col && constC_) {
      for (int64_t j = 0; j < n; ++j) ownCol_[static_cast<size_t>(j)] += bias[j];
    } else {
      return false;
    }
    fused_.bias.assign(bias, bias + n);
    return true;
  }
  bool fuseActivation(VecUnary act) override {
    if (fused_.act != VecUnary::Count) return false;
    fused_.act = act;
    return true;
  }

 private:
  /// The problem without per-call C handling; `vec` is the per-call vector space (or null).
  GemmProblem problem(const float* a, const float* b, float* y, float* vec) const {
    GemmProblem p;
    p.m = m_, p.n = n_, p.k = k_;
    p.a = a, p.lda = ta_ ? m_ : k_, p.transA = ta_, p.alpha = alpha_;
    p.b = b, p.ldb = tb_ ? k_ : n_, p.transB = tb_;
    p.packedB = packed_.get();
    p.c = y, p.ldc = n_;
    if (!ownCol_.empty()) p.ep.colBias = ownCol_.data();
    if (!ownRow_.empty()) p.ep.rowBias = ownRow_.data();
    if (!ownFull_.empty()) {
      p.ep.residual = ownFull_.data();
      p.ep.ldr = n_;
    }
    if (hasC_ && !constC_ && vec) {
      if (mode_ == CMode::Col) p.ep.colBias = vec;
      if (mode_ == CMode::Row) p.ep.rowBias = vec + n_;
    }
    fused_.applyAct(p.ep);
    return p;
  }

 private:
  bool ta_, tb_, hasC_;
  int64_t m_, n_, k_;
  float alpha_, beta_;
  std::vector<int64_t> cDims_;
  GemmConfig cfg_;
  int threads_;
  std::shared_ptr<const PackedB> packed_;
  bool gemvInPlace_ = false;  ///< one row of A, B^T read in place (input 1) by gemm()'s dot products
  int64_t cr_ = 1, cc_ = 1;
  CMode mode_ = CMode::None;
  bool constC_ = false;
  std::vector<float> ownCol_, ownRow_, ownFull_;
  FusedGemmEpilogue fused_;
};

float attrF(const Node& n, const char* name, float def) { return n.attrFloat(name, def); }

}  // namespace

std::unique_ptr<CpuKernel> createGemm(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;  // attributes of a calling function: reference kernel
  const auto& a = info.in(0).dims;
  const auto& b = info.in(1).dims;
  if (a.size() != 2 || b.size() != 2) return nullptr;
  bool ta = n.attrInt("transA", 0) != 0, tb = n.attrInt("transB", 0) != 0;
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1], n2 = tb ? b[0] : b[1];
  if ((tb ? b[1] : b[0]) != k) return nullptr;
  std::vector<int64_t> cDims;
  float beta = attrF(n, "beta", 1.f);
  bool withC = info.hasInput(2) && beta != 0.f;  // beta 0: C is not read (as before)
  if (withC) {
    cDims = info.in(2).dims;
    if (cDims.size() > 2) return nullptr;
    if (cDims.size() == 2 && !((cDims[0] == 1 || cDims[0] == m) && (cDims[1] == 1 || cDims[1] == n2))) return nullptr;
    if (cDims.size() == 1 && !(cDims[0] == 1 || cDims[0] == n2)) return nullptr;
  }
  const float* constB = nullptr;
  if (info.constants.size() > 1 && info.constants[1]) {
    constB = constantForPacking(info.constants[1], k * n2);
    if (!constB && k * n2 > 0) return nullptr;
  }
  const TensorData* constC = withC && info.constants.size() > 2 ? info.constants[2] : nullptr;
  auto kernel = std::make_unique<GemmKernel>(ta, tb, m, n2, k, attrF(n, "alpha", 1.f), withC, beta, cDims,
                                             constB, constC, info.threads, info.packs);
  return kernel;
}

namespace {

/// 2-D convolution, NCHW, groups: per image and group, im2col into the workspace (skipped for
/// 1x1 stride-1 unpadded kernels, whose input already is the column matrix), then one sgemm
/// W_g[M/g, C/g*kh*kw] x col[C/g*kh*kw, OH*OW], then the bias.
class ConvKernel : public CpuKernel {
 public:
  struct Geometry {
    int64_t n, c, h, w, m, oh, ow, kh, kw, group, sh, sw, dh, dw, padT, padL;
  };
  explicit ConvKernel(Geometry g) : g_(g) {
    direct_ = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.padT == 0 && g.padL == 0 && g.oh == g.h && g.ow == g.w;
  }
  size_t workspaceBytes() const override {
    if (direct_) return 0;
    return static_cast<size_t>(g_.c / g_.group * g_.kh * g_.kw * g_.oh * g_.ow) * sizeof(float);
  }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* w = static_cast<const float*>(args.inputs[1]);
    const float* bias = args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    float* col = static_cast<float*>(args.workspace);
    const int64_t cg = g_.c / g_.group, mg = g_.m / g_.group, kdim = cg * g_.kh * g_.kw, pix = g_.oh * g_.ow;
    for (int64_t img = 0; img < g_.n; ++img) {
      for (int64_t grp = 0; grp < g_.group; ++grp) {
        const float* xg = x + (img * g_.c + grp * cg) * g_.h * g_.w;
        float* yg = y + (img * g_.m + grp * mg) * pix;
        const float* colp = xg;
        if (!direct_) {
          im2col(xg, cg, col);
          colp = col;
        }
        // Output channels split over the pool (OpenBLAS runs single-threaded).
        double work = 2.0 * static_cast<double>(mg) * pix * kdim;
        int64_t rowGrain = work < 2e5 ? mg : std::max<int64_t>(1, mg / 8);
        parallelFor(args.pool, mg, rowGrain, [&](int64_t r0, int64_t r1) {
          sgemm(false, false, r1 - r0, pix, kdim, 1.f, w + (grp * mg + r0) * kdim, kdim, colp, pix, 0.f, yg + r0 * pix, pix);
          if (bias)
            for (int64_t oc = r0; oc < r1; ++oc) {
              float bv = bias[grp * mg + oc];
              float* row = yg + oc * pix;
              for (int64_t p = 0; p < pix; ++p) row[p] += bv;
            }
        });
      }
    }
  }
  double flops() const override {
    return 2.0 * g_.n * g_.m * (g_.c / g_.group) * g_.kh * g_.kw * g_.oh * g_.ow;
  }
  std::string variant() const override { return ".im2col.blas"; }

 private:
  void im2col(const float* x, int64_t channels, float* col) const {
    for (int64_t ch = 0; ch < channels; ++ch)
      for (int64_t ki = 0; ki < g_.kh; ++ki)
        for (int64_t kj = 0; kj < g_.kw; ++kj) {
          float* row = col + ((ch * g_.kh + ki) * g_.kw + kj) * g_.oh * g_.ow;
          const float* xc = x + ch * g_.h * g_.w;
          for (int64_t oy = 0; oy < g_.oh; ++oy) {
            int64_t iy = oy * g_.sh - g_.padT + ki * g_.dh;
            float* out = row + oy * g_.ow;
            if (iy < 0 || iy >= g_.h) {
              std::fill(out, out + g_.ow, 0.f);
              continue;
            }
            const float* xr = xc + iy * g_.w;
            for (int64_t ox = 0; ox < g_.ow; ++ox) {
              int64_t ix = ox * g_.sw - g_.padL + kj * g_.dw;
              out[ox] = ix >= 0 && ix < g_.w ? xr[ix] : 0.f;
            }
          }
        }
  }

  Geometry g_;
  bool direct_;
};

/// The padding at the start of one spatial axis for auto_pad SAME_UPPER/SAME_LOWER.
int64_t samePadBegin(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, bool upper) {
  int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
  return upper ? total / 2 : total - total / 2;
}

}  // namespace

std::unique_ptr<CpuKernel> createConv(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  const auto& w = info.in(1).dims;
  const auto& y = info.out(0).dims;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return nullptr;  // 2-D convolutions only for now
  ConvKernel::Geometry g{};
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.m = w[0], g.kh = w[2], g.kw = w[3];
  g.oh = y[2], g.ow = y[3];
  g.group = n.attrInt("group", 1);
  if (g.group <= 0 || g.c % g.group || g.m % g.group || w[1] != g.c / g.group || y[1] != g.m) return nullptr;
  auto strides = n.attrInts("strides", {1, 1}), dil = n.attrInts("dilations", {1, 1});
  auto pads = n.attrInts("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) return nullptr;
  g.sh = strides[0], g.sw = strides[1], g.dh = dil[0], g.dw = dil[1];
  std::string autoPad = n.attrString("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    g.padT = pads[0], g.padL = pads[1];
  } else if (autoPad == "VALID") {
    g.padT = g.padL = 0;
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    bool upper = autoPad == "SAME_UPPER";
    g.padT = samePadBegin(g.h, g.oh, g.kh, g.sh, g.dh, upper);
    g.padL = samePadBegin(g.w, g.ow, g.kw, g.sw, g.dw, upper);
  } else {
    return nullptr;
  }
  if (info.hasInput(2) && info.in(2).numElements() != g.m) return nullptr;
  return std::make_unique<ConvKernel>(g);
}

}  // namespace onnxtool::cpu
