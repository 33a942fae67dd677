// test_cpu_gemm.cpp: our SGEMM (exec/cpu/gemm.h) against a naive double-accumulated product on
// odd shapes (around the register tiles MR/NR and the K block), transposed operands, alpha,
// C accumulated (Gemm's beta * C), every epilogue, a constant B packed once or B packed per call,
// batches with broadcast operands, on every ISA path this CPU has, inline and split over 2
// threads; guard values around C catch stores out of the tile.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "exec/cpu/gemm.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/thread_pool.h"
#include "exec/cpu/vec.h"

using namespace onnxtool::cpu;

// OpenBLAS's pthreads build (Debian's default) says here whether its worker threads run; weak:
// absent from its serial and OpenMP builds (resolved through libonnxtool's dependencies).
extern "C" int blas_server_avail __attribute__((weak));

namespace {

constexpr float kGuard = -12345.f;

std::vector<Isa> isasHere() {
  std::vector<Isa> v{Isa::Portable};
  if (detectedIsa() >= Isa::Avx2) v.push_back(Isa::Avx2);
  if (detectedIsa() >= Isa::Avx512) v.push_back(Isa::Avx512);
  return v;
}

/// A 64-byte aligned float buffer (what the executor's arena gives a kernel's workspace).
/// The floats past the requested size hold a sentinel: `intact()` says whether the kernel kept
/// to gemmWorkspaceFloats (sized to the product since a LeNet's GEMV took 0.9 MB).
struct Workspace {
  static constexpr float kSentinel = -1234.5f;
  std::vector<float> buf;
  size_t used = 0;
  float* get(size_t floats) {
    buf.assign(floats + 48, kSentinel);
    float* p = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
    used = static_cast<size_t>(p - buf.data()) + floats;
    return p;
  }
  bool intact() const {
    for (size_t i = used; i < buf.size(); ++i)
      if (buf[i] != kSentinel) return false;
    return true;
  }
};

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  float alpha = 1.f;
  bool accumulate = false;  ///< C holds beta * C0 on entry
  bool rowBias = false, colBias = false, residual = false, clamp = false;
  VecUnary act = VecUnary::Count;
  int64_t batches = 1;
  bool broadcastA = false;  ///< every batch reads the same A
};

double actRef(VecUnary act, double v) {
  switch (act) {
    case VecUnary::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case VecUnary::Tanh: return std::tanh(v);
    case VecUnary::GeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case VecUnary::Relu: return v < 0 ? 0.0 : v;
    default: return v;
  }
}

/// Runs one case on every ISA path, 1 and 2 threads, B packed once and per call; compares each
/// with the double-precision reference.
void checkCase(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  const int64_t aSize = c.m * c.k, bSize = c.k * c.n, ldc = c.n + 3, cSize = c.m * ldc;
  std::vector<float> a(static_cast<size_t>(aSize * (c.broadcastA ? 1 : c.batches))), b(static_cast<size_t>(bSize * c.batches));
  for (auto& v : a) v = dist(rng);
  for (auto& v : b) v = dist(rng);
  std::vector<float> c0(static_cast<size_t>(cSize * c.batches)), rowBias(static_cast<size_t>(c.m)), colBias(static_cast<size_t>(c.n)),
      res(static_cast<size_t>(c.m * (c.n + 1)));
  for (auto& v : c0) v = dist(rng);
  for (auto& v : rowBias) v = dist(rng);
  for (auto& v : colBias) v = dist(rng);
  for (auto& v : res) v = dist(rng);
  const float lo = -0.5f, hi = 0.7f;
  const int64_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
  std::vector<int64_t> aOff(static_cast<size_t>(c.batches)), bOff(static_cast<size_t>(c.batches));
  for (int64_t bi = 0; bi < c.batches; ++bi) {
    aOff[static_cast<size_t>(bi)] = c.broadcastA ? 0 : bi * aSize;
    bOff[static_cast<size_t>(bi)] = bi * bSize;
  }
  // The reference, and the error bound of each element: float accumulation over k.
  std::vector<double> want(static_cast<size_t>(c.batches * c.m * c.n)), bound(want.size());
  for (int64_t bi = 0; bi < c.batches; ++bi)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0, mag = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) {
          double av = a[static_cast<size_t>(aOff[static_cast<size_t>(bi)] + (c.ta ? kk * lda + i : i * lda + kk))];
          double bv = b[static_cast<size_t>(bOff[static_cast<size_t>(bi)] + (c.tb ? j * ldb + kk : kk * ldb + j))];
          s += c.alpha * av * bv;
          mag += std::fabs(c.alpha * av * bv);
        }
        if (c.accumulate) s += c0[static_cast<size_t>(bi * cSize + i * ldc + j)];
        if (c.rowBias) s += rowBias[static_cast<size_t>(i)];
        if (c.colBias) s += colBias[static_cast<size_t>(j)];
        if (c.residual) s += res[static_cast<size_t>(i * (c.n + 1) + j)];
        if (c.clamp) s = std::min<double>(hi, std::max<double>(lo, s));
        s = actRef(c.act, s);
        const size_t at = static_cast<size_t>((bi * c.m + i) * c.n + j);
        want[at] = s;
        bound[at] = 1e-5 * (mag + std::fabs(s)) + 2e-6;
      }
  Workspace ws;
  for (Isa isa : isasHere()) {
    GemmConfig cfg = gemmConfig(isa, c.m);
    cfg.minFlopsPerThread = 0;  // split even tiny products over the threads
    for (bool prepack : {false, true}) {
      if (prepack && c.batches > 1) continue;  // a packed B serves one matrix (MatMul folds batches into M)
      PackedB packed(b.data(), ldb, c.tb, c.k, c.n, cfg.mk.nr, cfg.kcMax);
      for (int threads : {1, 2}) {
        INFO("isa " << isaName(isa) << " MR " << cfg.mk.mr << " prepacked " << prepack << " threads " << threads << " | M " << c.m
                    << " N " << c.n << " K " << c.k << " transA " << c.ta << " transB " << c.tb << " alpha " << c.alpha
                    << " accumulate " << c.accumulate << " rowBias " << c.rowBias << " colBias " << c.colBias << " residual "
                    << c.residual << " clamp " << c.clamp << " act " << static_cast<int>(c.act) << " batches " << c.batches);
        std::vector<float> y(c0);
        if (!c.accumulate)
          for (auto& v : y) v = kGuard;
        for (int64_t bi = 0; bi < c.batches; ++bi)  // the padding columns are guards either way
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = c.n; j < ldc; ++j) y[static_cast<size_t>(bi * cSize + i * ldc + j)] = kGuard;
        GemmProblem p;
        p.m = c.m, p.n = c.n, p.k = c.k;
        p.a = a.data(), p.lda = lda, p.transA = c.ta, p.alpha = c.alpha;
        p.b = b.data(), p.ldb = ldb, p.transB = c.tb;
        p.packedB = prepack ? &packed : nullptr;
        p.c = y.data(), p.ldc = ldc;
        p.batches = c.batches, p.aOffsets = aOff.data(), p.bOffsets = prepack ? nullptr : bOff.data(), p.cStride = cSize;
        p.ep.accumulateC = c.accumulate;
        p.ep.rowBias = c.rowBias ? rowBias.data() : nullptr;
        p.ep.colBias = c.colBias ? colBias.data() : nullptr;
        p.ep.residual = c.residual ? res.data() : nullptr;
        p.ep.ldr = c.n + 1;
        p.ep.clamp = c.clamp, p.ep.lo = lo, p.ep.hi = hi;
        p.ep.act = c.act;
        ThreadPool pool(threads);
        float* w = ws.get(gemmWorkspaceFloats(cfg, p) * static_cast<size_t>(threads));
        gemm(cfg, p, &pool, threads, w);
        CHECK(ws.intact());
        int bad = 0;
        for (int64_t bi = 0; bi < c.batches; ++bi)
          for (int64_t i = 0; i < c.m; ++i) {
            for (int64_t j = 0; j < c.n; ++j) {
              const size_t at = static_cast<size_t>((bi * c.m + i) * c.n + j);
              const double got = y[static_cast<size_t>(bi * cSize + i * ldc + j)];
              if (!(std::fabs(got - want[at]) <= bound[at]) && bad++ < 3) {
                INFO("C[" << bi << "][" << i << "][" << j << "] = " << got << ", want " << want[at]);
                CHECK(false);
              }
            }
            for (int64_t j = c.n; j < ldc; ++j)
              if (y[static_cast<size_t>(bi * cSize + i * ldc + j)] != kGuard && bad++ < 3) {
                INFO("guard after row " << i << " of batch " << bi << " overwritten");
                CHECK(false);
              }
          }
        CHECK(bad == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm: odd shapes, transposes and alpha on every ISA path match a double-accumulated product", "[cpu][gemm]") {
  std::mt19937 rng(101);
  const int64_t dims[] = {1, 3, 17, 63, 65, 129};
  for (int64_t m : dims)
    for (int64_t n : dims)
      for (int64_t k : {int64_t{1}, int64_t{17}, int64_t{65}}) {
        Case c{m, n, k, ((m + n + k) & 1) != 0, ((m * 3 + n + k) & 2) != 0};
        c.alpha = (m + n) % 3 == 0 ? 0.5f : 1.f;
        checkCase(c, rng);
      }
  // Around the tiles (MR 1/2/4/6/8/12, NR 16/32) and the K block (256), each transpose.
  const int64_t shapes[][3] = {{8, 32, 3},  {12, 16, 5},  {13, 33, 7},  {6, 31, 9},  {24, 48, 255}, {25, 47, 256}, {11, 65, 257},
                               {2, 100, 520}, {4, 20, 129}, {129, 129, 129}, {200, 40, 600}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t) checkCase(Case{s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0}, rng);
  // A read in place (row-major, alpha 1: AVX-512's full panels) and a partial last panel on the
  // kernel of its own row count: 49 = 6 x 8 + 1 (GEMV tail), 61 = 5 x 12 + 1, 70 = 5 x 12 + 10,
  // 145 = one row past the 144-row block, K across blocks; B packed per call and prepacked.
  const int64_t tails[][3] = {{49, 96, 300}, {61, 40, 33}, {70, 33, 513}, {145, 64, 17}, {23, 130, 257}};
  for (const auto& s : tails)
    for (int t = 0; t < 2; ++t) checkCase(Case{s[0], s[1], s[2], false, t == 1}, rng);
  // Several row blocks over a prepacked B wider than an L2-sized column block (an eighth of L2
  // over kc rows where A is read in place: 96 to 224 columns here; all of L2 where it is packed:
  // 864 to 1744), a partial last block; at 2 threads the rows split (a row block each).
  for (int t = 0; t < 2; ++t) checkCase(Case{300, 700, 300, false, t == 1}, rng);
  checkCase(Case{300, 2100, 300, false, false}, rng);
}

TEST_CASE("gemm: epilogues (C accumulated, row and column bias, residual, clamp, activations) match", "[cpu][gemm]") {
  std::mt19937 rng(102);
  const int64_t shapes[][3] = {{1, 70, 33}, {5, 17, 9}, {17, 65, 63}, {63, 3, 300}, {33, 40, 0}};
  const VecUnary acts[] = {VecUnary::Count, VecUnary::Sigmoid, VecUnary::Tanh, VecUnary::GeluErf, VecUnary::Relu};
  int variant = 0;
  for (const auto& s : shapes)
    for (VecUnary act : acts) {
      Case c{s[0], s[1], s[2], variant % 2 == 1, variant % 3 == 1};
      c.accumulate = variant % 2 == 0;
      c.rowBias = variant % 3 == 0;
      c.colBias = variant % 4 != 3;
      c.residual = variant % 3 == 2;
      c.clamp = act == VecUnary::Count && variant % 2 == 0;
      c.act = act;
      c.alpha = variant % 4 == 1 ? -1.5f : 1.f;
      ++variant;
      checkCase(c, rng);
    }
}

TEST_CASE("gemm: batches, with a broadcast A, split over threads", "[cpu][gemm]") {
  std::mt19937 rng(103);
  // Attention's Q*K^T and P*V shapes, scaled down; a batch of GEMVs; a broadcast A.
  const Case cases[] = {
      {33, 33, 16, false, false, 1.f, false, false, false, false, false, VecUnary::Count, 6, false},
      {33, 16, 33, false, true, 0.125f, false, false, true, false, false, VecUnary::Count, 5, false},
      {1, 40, 70, false, false, 1.f, false, false, false, false, false, VecUnary::Count, 3, false},
      {7, 19, 23, true, false, 1.f, true, false, false, false, false, VecUnary::Count, 4, true},
      {13, 35, 20, false, true, 1.f, false, false, true, false, true, VecUnary::Count, 2, true},
      // One row against B^T unpacked (gemm()'s dot products: a classifier's weights in place):
      // past the 256-column chunk, K tails of the vector widths, epilogues, batches of B.
      {1, 300, 70, false, true, -0.5f, true, true, true, true, true, VecUnary::Count, 1, false},
      {1, 261, 37, false, true, 1.f, false, false, true, false, false, VecUnary::Sigmoid, 3, true},
      {1, 130, 5, false, true, 2.f, false, false, false, true, false, VecUnary::Relu, 2, false},
  };
  for (const Case& c : cases) checkCase(c, rng);
}

TEST_CASE("gemm: NaN and Inf propagate through the packed kernels", "[cpu][gemm]") {
  // One NaN in A poisons its row of C, an Inf in B its column (as a plain product would).
  const int64_t m = 13, n = 35, k = 20;
  std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f), y(static_cast<size_t>(m * n));
  a[static_cast<size_t>(4 * k + 7)] = std::nanf("");
  b[static_cast<size_t>(3 * n + 30)] = INFINITY;
  Workspace ws;
  for (Isa isa : isasHere()) {
    GemmConfig cfg = gemmConfig(isa, m);
    GemmProblem p;
    p.m = m, p.n = n, p.k = k, p.a = a.data(), p.lda = k, p.b = b.data(), p.ldb = n, p.c = y.data(), p.ldc = n;
    gemm(cfg, p, nullptr, 1, ws.get(gemmWorkspaceFloats(cfg, p)));
    INFO("isa " << isaName(isa));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float v = y[static_cast<size_t>(i * n + j)];
        if (i == 4) CHECK(std::isnan(v));
        else if (j == 30) CHECK(v == INFINITY);
        else CHECK(v == Approx(20 * 0.125f));
      }
  }
}

TEST_CASE("PackedFloats: fresh buffers are zero and 64-byte aligned, small or mapped, and keep what is written", "[cpu][gemm]") {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{16383}, size_t{16384}, size_t{20000}, size_t{300000}, size_t{700000}}) {  // below and above the 64 KiB mapping size
    INFO("n = " << n);
    for (int round = 0; round < 2; ++round) {  // the second gets memory the first gave back
      PackedFloats v;
      v.resize(n);
      CHECK(reinterpret_cast<uintptr_t>(v.data()) % 64 == 0);
      size_t nonzero = 0;
      for (float x : v) nonzero += x != 0.f;
      CHECK(nonzero == 0);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) + 1.f;
      PackedFloats moved = std::move(v);
      CHECK(moved[n - 1] == static_cast<float>((n - 1) % 7) + 1.f);
    }
  }
}

TEST_CASE("OpenBLAS's worker threads are stopped when the library is loaded (they spun a core for ~0.1 s)", "[cpu][gemm]") {
  // Our pool splits the work and calls OpenBLAS single-threaded; its workers, started when it was
  // loaded, spun in sched_yield through every process's load, prepare and first run.
  if (&blas_server_avail == nullptr) WARN("this OpenBLAS build has no worker threads: nothing to check");
  else CHECK(blas_server_avail == 0);
}
