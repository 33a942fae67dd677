// gemm_bench.cpp: the SGEMM micro-benchmark behind scripts/gemm-bench (built as gemm_bench_avx512,
// _avx2 and _portable: the same program, with Eigen compiled for that path). Times our GEMM
// (gemm.h, on the ISA path activeIsa() picks: ONNXTOOL_ISA caps it), OpenBLAS's cblas_sgemm (its
// kernels for the same path, as the cpu executor configures it) and Eigen on the GEMM shapes of BERT-base at sequence 128, MobileNetV2 and
// ResNet-50, at the given thread counts, against the core's measured peak FLOP/s (a loop of
// independent FMA chains on registers). GFLOP/s = 2*M*N*K*batches / median time.
//
// "ours" is what the cpu executor runs: a constant B packed once beforehand (outside the
// timing), a B computed at run time packed per call; "ours+pack" packs a constant B inside the
// timing too (what a library without a prepacked-B API pays), for comparison.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "exec/cpu/gemm.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/thread_pool.h"

using namespace onnxtool::cpu;

/// Eigen's C = op(A) * op(B), row-major, compiled for the ISA path kEigenPath names
/// (gemm_bench_eigen_*.cpp: one per executable).
void eigenGemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c, int threads);
extern const char* const kEigenPath;

namespace {

struct Shape {
  const char* model;
  const char* what;
  int64_t batches, m, n, k;
  bool transB;
  bool constB;  ///< B is a weight (packed once by ours)
};

const Shape kShapes[] = {
    {"bert", "qkv/out proj", 1, 128, 768, 768, false, true},
    {"bert", "ffn up", 1, 128, 3072, 768, false, true},
    {"bert", "ffn down", 1, 128, 768, 3072, false, true},
    {"bert", "Q*K^T x12", 12, 128, 128, 64, false, false},
    {"bert", "P*V x12", 12, 128, 64, 128, false, false},
    {"bert-b8", "qkv/out proj", 1, 1024, 768, 768, false, true},
    {"bert-b8", "ffn up", 1, 1024, 3072, 768, false, true},
    {"bert-b8", "ffn down", 1, 1024, 768, 3072, false, true},
    {"mobilenetv2", "classifier", 1, 1, 1000, 1280, true, true},
    {"mobilenetv2", "1x1 conv 96<-16 112^2", 1, 96, 12544, 16, false, false},
    {"mobilenetv2", "1x1 conv 320<-960 7^2", 1, 320, 49, 960, false, false},
    {"resnet50", "fc", 1, 1, 1000, 2048, true, true},
    {"resnet50", "1x1 conv 256<-64 56^2", 1, 256, 3136, 64, false, false},
    {"resnet50", "1x1 conv 512<-1024 14^2", 1, 512, 196, 1024, false, false},
    {"resnet50", "3x3 conv im2col 512<-4608 7^2", 1, 512, 49, 4608, false, false},
};

/// Seconds of CPU time of this process: on a shared machine a single-threaded run then counts
/// only the time it ran (wall time is used for the multithreaded runs, see timeIt).
double cpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double wallNow() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
bool gUseCpuTime = true;
double now() { return gUseCpuTime ? cpuNow() : wallNow(); }

/// Median seconds of one call of fn: batches of calls lasting >= 20 ms each, 7 batches.
double timeIt(const std::function<void()>& fn) {
  fn();
  int reps = 1;
  for (;;) {
    double t0 = now();
    for (int r = 0; r < reps; ++r) fn();
    double dt = now() - t0;
    if (dt >= 0.02) break;
    reps *= 2;
  }
  std::vector<double> t;
  for (int trial = 0; trial < 7; ++trial) {
    double t0 = now();
    for (int r = 0; r < reps; ++r) fn();
    t.push_back((now() - t0) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fmaPeakAvx512(double seconds) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  int64_t iters = 0;
  double t0 = now(), dt = 0;
  while ((dt = now() - t0) < seconds) {
    for (int r = 0; r < 100000; ++r)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    iters += 100000;
  }
  alignas(64) float buf[16];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(buf, acc[i]);
    sink += buf[0];
  }
  if (sink == 12345.f) std::puts("");
  return static_cast<double>(iters) * 12 * 16 * 2 / dt;
}
__attribute__((target("avx2,fma"))) double fmaPeakAvx2(double seconds) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  int64_t iters = 0;
  double t0 = now(), dt = 0;
  while ((dt = now() - t0) < seconds) {
    for (int r = 0; r < 100000; ++r)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    iters += 100000;
  }
  alignas(32) float buf[8];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(buf, acc[i]);
    sink += buf[0];
  }
  if (sink == 12345.f) std::puts("");
  return static_cast<double>(iters) * 12 * 8 * 2 / dt;
}
/// The core clock from a chain of dependent integer multiplies (3 cycles each on the x86 cores
/// we know; dependent immediate adds can be folded at rename on recent Intel cores).
double clockHz(double seconds) {
  uint64_t v = 3;
  int64_t iters = 0;
  double t0 = now(), dt = 0;
  while ((dt = now() - t0) < seconds) {
    for (int r = 0; r < 1000000; ++r) asm volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(v));
    iters += 4000000;
  }
  return 3.0 * static_cast<double>(iters) / dt;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threadCounts = {1, 2};
  std::string only;
  int mrOverride = 0, kcOverride = 0, mcOverride = 0;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threadCounts.clear();
      std::string s = argv[++i];
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        threadCounts.push_back(std::atoi(s.substr(p, q - p).c_str()));
        p = q == std::string::npos ? s.size() : q + 1;
      }
    } else if (a == "--model" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--cold") {
      cold = true;
    } else if (a == "--mr" && i + 1 < argc) {  // tuning: the register tile's rows, KC and MC
      mrOverride = std::atoi(argv[++i]);
    } else if (a == "--kc" && i + 1 < argc) {
      kcOverride = std::atoi(argv[++i]);
    } else if (a == "--mc" && i + 1 < argc) {
      mcOverride = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: gemm_bench_ISA [--threads 1,2] [--model bert|bert-b8|mobilenetv2|resnet50] [--cold] [--mr N] [--kc N] [--mc N]\n");
      return 2;
    }
  }
  const Isa isa = activeIsa();
  configureBlas(1);
  double peak = 0, clock = 0;
#if defined(__x86_64__)
  clock = clockHz(0.3);
  if (isa == Isa::Avx512) peak = fmaPeakAvx512(0.5);
  else if (isa == Isa::Avx2) peak = fmaPeakAvx2(0.5);
#endif
  const int lanes = isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 4;
  if (std::string(isaName(isa)) != kEigenPath)
    std::fprintf(stderr, "gemm_bench: this executable's Eigen is compiled for %s, the ISA path is %s (use gemm_bench_%s)\n",
                 kEigenPath, std::string(isaName(isa)).c_str(), std::string(isaName(isa)).c_str());
  std::printf("isa path %s; OpenBLAS core %s; clock ~%.2f GHz (dependent imul chain, 3 cycles each)\n", std::string(isaName(isa)).c_str(),
              openblas_get_corename(), clock / 1e9);
  if (peak > 0)
    std::printf("core peak: measured %.1f GFLOP/s (12 FMA chains); theory 2 FMA ports x %d lanes x 2 x clock = %.1f GFLOP/s\n",
                peak / 1e9, lanes, 2.0 * lanes * 2 * clock / 1e9);
  std::printf("%-12s %-30s %4s %6s %6s %6s %3s | %9s %9s %9s %9s | %6s\n", "model", "gemm", "bat", "M", "N", "K", "thr", "ours",
              "ours+pack", "openblas", "eigen", "%peak");
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (const Shape& s : kShapes) {
    if (!only.empty() && only != s.model) continue;
    const int64_t aSize = s.m * s.k, bSize = s.k * s.n, cSize = s.m * s.n;
    std::vector<float> a(static_cast<size_t>(aSize * s.batches)), b(static_cast<size_t>(bSize * s.batches)),
        c(static_cast<size_t>(cSize * s.batches));
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    std::vector<int64_t> aOff(static_cast<size_t>(s.batches)), bOff(static_cast<size_t>(s.batches));
    for (int64_t i = 0; i < s.batches; ++i) aOff[static_cast<size_t>(i)] = i * aSize, bOff[static_cast<size_t>(i)] = i * bSize;
    const int64_t ldb = s.transB ? s.k : s.n;
    const double flops = 2.0 * s.batches * s.m * s.n * s.k;
    for (int t : threadCounts) {
      gUseCpuTime = t == 1;
      ThreadPool pool(t);
      GemmConfig cfg = gemmConfig(isa, s.m);
      if (mrOverride)
        cfg.mk = isa == Isa::Avx512 ? gemmMicroKernelRowsAvx512(mrOverride)
                 : isa == Isa::Avx2 ? gemmMicroKernelRowsAvx2(mrOverride)
                                    : gemmMicroKernelRowsPortable(mrOverride);
      if (kcOverride) cfg.kcMax = kcOverride;
      if (mcOverride) cfg.mc = std::max<int64_t>(cfg.mk.mr, mcOverride / cfg.mk.mr * cfg.mk.mr);
      GemmProblem p;
      p.m = s.m, p.n = s.n, p.k = s.k, p.a = a.data(), p.lda = s.k, p.b = b.data(), p.ldb = ldb, p.transB = s.transB;
      p.c = c.data(), p.ldc = s.n, p.batches = s.batches, p.aOffsets = aOff.data(), p.bOffsets = bOff.data(), p.cStride = cSize;
      // --cold: calls rotate over copies of B filling ~64 MiB, so that B comes from L3 or memory
      // (as a weight read once per inference does), not from L2.
      const size_t copies = cold ? std::max<size_t>(1, (64u << 20) / (b.size() * sizeof(float))) : 1;
      std::vector<std::vector<float>> bs(copies, b);
      std::vector<std::unique_ptr<PackedB>> packed(copies);
      if (s.constB)
        for (size_t i = 0; i < copies; ++i)
          packed[i] = std::make_unique<PackedB>(bs[i].data(), ldb, s.transB, s.k, s.n, cfg.mk.nr, cfg.kcMax);
      size_t rot = 0;
      std::vector<float> ws(gemmWorkspaceFloats(cfg, p) * static_cast<size_t>(t) + 16);
      float* w = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t{63});
      const double tOurs = timeIt([&] {
        GemmProblem q = p;
        q.b = bs[rot % copies].data();
        q.packedB = packed[rot++ % copies].get();
        gemm(cfg, q, &pool, t, w);
      });
      double tPack = tOurs;
      if (s.constB)
        tPack = timeIt([&] {
          PackedB pk(bs[rot++ % copies].data(), ldb, s.transB, s.k, s.n, cfg.mk.nr, cfg.kcMax);
          GemmProblem q = p;
          q.packedB = &pk;
          gemm(cfg, q, &pool, t, w);
        });
      openblas_set_num_threads(t);
      const double tBlas = timeIt([&] {
        const float* bb = bs[rot++ % copies].data();
        for (int64_t i = 0; i < s.batches; ++i)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, s.transB ? CblasTrans : CblasNoTrans, static_cast<blasint>(s.m),
                      static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.f, a.data() + i * aSize, static_cast<blasint>(s.k),
                      bb + i * bSize, static_cast<blasint>(ldb), 0.f, c.data() + i * cSize, static_cast<blasint>(s.n));
      });
      openblas_set_num_threads(1);
      const double tEigen = timeIt([&] {
        const float* bb = bs[rot++ % copies].data();
        for (int64_t i = 0; i < s.batches; ++i)
          eigenGemm(false, s.transB, static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), a.data() + i * aSize,
                bb + i * bSize, c.data() + i * cSize, t);
      });
      auto gf = [&](double sec) { return flops / sec / 1e9; };
      std::printf("%-12s %-30s %4lld %6lld %6lld %6lld %3d | %9.1f %9.1f %9.1f %9.1f | %5.0f%%\n", s.model, s.what,
                  static_cast<long long>(s.batches), static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), t, gf(tOurs), gf(tPack), gf(tBlas), gf(tEigen),
                  peak > 0 ? 100.0 * gf(tOurs) * 1e9 / (peak * t) : 0.0);
      std::fflush(stdout);
    }
  }
  std::printf("GFLOP/s, median of 7 timed batches (1 thread: process CPU time, so that a shared machine's other\n"
              "work does not count; more threads: wall time); %%peak: ours / (measured core peak x threads)\n");
  return 0;
}
