// test_cpu_vec.cpp: the vectorised primitives of exec/cpu/vec.h, on every ISA path this CPU has
// (the table of each path is called directly, whatever ONNXTOOL_ISA says): the documented error
// bounds of exp/erf/tanh/sigmoid/GELU against double-precision libm over the float range, their
// special values (+-inf, NaN, denormals, overflow), and the row kernels against plain double
// loops on lengths around every vector width.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "exec/cpu/isa.h"
#include "exec/cpu/vec.h"

using namespace onnxtool::cpu;

namespace {

std::vector<Isa> pathsOfThisCpu() {
  std::vector<Isa> out{Isa::Portable};
  if (detectedIsa() >= Isa::Avx2) out.push_back(Isa::Avx2);
  if (detectedIsa() >= Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

/// Inputs: a dense sweep of [lo, hi] plus every 97th float bit pattern in that range (all
/// exponents), in one vector of odd length so that the tail path runs too.
std::vector<float> sweep(float lo, float hi) {
  std::vector<float> xs;
  for (int i = 0; i <= 200001; ++i) xs.push_back(lo + (hi - lo) * static_cast<float>(i) / 200001.f);
  for (uint32_t bits = 0; bits < 0x7f800000u; bits += 97 * 1024 + 1) {
    float f;
    std::memcpy(&f, &bits, 4);
    if (f <= hi) xs.push_back(f);
    if (-f >= lo) xs.push_back(-f);
  }
  return xs;
}

struct ErrorStats {
  double maxAbs = 0, maxRel = 0;
};

template <typename Ref>
ErrorStats measure(void (*f)(const float*, float*, int64_t), const std::vector<float>& xs, Ref ref, double relFloor) {
  std::vector<float> ys(xs.size());
  f(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  ErrorStats s;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = ref(static_cast<double>(xs[i]));
    double err = std::fabs(static_cast<double>(ys[i]) - want);
    s.maxAbs = std::max(s.maxAbs, err);
    if (std::fabs(want) >= relFloor) s.maxRel = std::max(s.maxRel, err / std::fabs(want));
  }
  return s;
}

float call(void (*f)(const float*, float*, int64_t), float x) {
  float y = 0;
  f(&x, &y, 1);
  return y;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

int idx(VecUnary u) { return static_cast<int>(u); }

}  // namespace

TEST_CASE("vec exp, erf, tanh, sigmoid and GELU keep their documented error bounds", "[cpu][vec]") {
  for (Isa isa : pathsOfThisCpu()) {
    const VecKernels& vk = vecKernelsFor(isa);
    INFO("isa " << isaName(isa));
    auto e = measure(vk.unary[idx(VecUnary::Exp)], sweep(-87.f, 88.7f), [](double x) { return std::exp(x); }, 0);
    CHECK(e.maxRel <= 2e-7);
    auto erf = measure(vk.unary[idx(VecUnary::Erf)], sweep(-10.f, 10.f), [](double x) { return std::erf(x); }, 0);
    CHECK(erf.maxAbs <= 4e-7);
    auto erfSmall = measure(vk.unary[idx(VecUnary::Erf)], sweep(-0.499f, 0.499f), [](double x) { return std::erf(x); }, 1e-30);
    CHECK(erfSmall.maxRel <= 2e-7);
    auto th = measure(vk.unary[idx(VecUnary::Tanh)], sweep(-20.f, 20.f), [](double x) { return std::tanh(x); }, 0);
    CHECK(th.maxAbs <= 2e-7);
    auto thSmall = measure(vk.unary[idx(VecUnary::Tanh)], sweep(-0.399f, 0.399f), [](double x) { return std::tanh(x); }, 1e-30);
    CHECK(thSmall.maxRel <= 2e-7);
    auto sg = measure(vk.unary[idx(VecUnary::Sigmoid)], sweep(-87.f, 87.f), [](double x) { return 1 / (1 + std::exp(-x)); }, 1e-37);
    CHECK(sg.maxRel <= 3e-7);
    auto si = measure(vk.unary[idx(VecUnary::Silu)], sweep(-87.f, 87.f), [](double x) { return x / (1 + std::exp(-x)); }, 1e-37);
    CHECK(si.maxRel <= 3e-7);
    // Past that range, where exp(-x) saturates (AVX2/portable: 2^128 = +inf from -x = 88.4 on):
    // within 1e-38 of the exact values, which are below FLT_MIN there, or equal to 1 and x.
    std::vector<float> low, high;
    for (int i = 0; i <= 20001; ++i) {
      low.push_back(-110.f + 23.f * static_cast<float>(i) / 20001.f);
      high.push_back(87.f + 23.f * static_cast<float>(i) / 20001.f);
    }
    auto sgLow = measure(vk.unary[idx(VecUnary::Sigmoid)], low, [](double x) { return 1 / (1 + std::exp(-x)); }, 1);
    CHECK(sgLow.maxAbs <= 1e-38);
    auto siLow = measure(vk.unary[idx(VecUnary::Silu)], low, [](double x) { return x / (1 + std::exp(-x)); }, 1);
    CHECK(siLow.maxAbs <= 1e-36);
    auto sgHigh = measure(vk.unary[idx(VecUnary::Sigmoid)], high, [](double x) { return 1 / (1 + std::exp(-x)); }, 0);
    CHECK(sgHigh.maxRel <= 1e-37);  // 1 in float
    auto siHigh = measure(vk.unary[idx(VecUnary::Silu)], high, [](double x) { return x / (1 + std::exp(-x)); }, 0);
    CHECK(siHigh.maxRel <= 6e-8);  // x in float
    UNSCOPED_INFO("silu rel " << si.maxRel);
    // GELU: |error| <= |x| times the erf/tanh bound (plus rounding of the product).
    auto ge = measure(vk.unary[idx(VecUnary::GeluErf)], sweep(-10.f, 10.f),
                      [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, 0);
    CHECK(ge.maxAbs <= 1e-6);
    // ... and relative near 0 (1 + erf close to 1 there: no cancellation).
    auto geSmall = measure(vk.unary[idx(VecUnary::GeluErf)], sweep(-0.5f, 0.5f),
                           [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, 1e-30);
    CHECK(geSmall.maxRel <= 8e-7);
    UNSCOPED_INFO("gelu rel near 0 " << geSmall.maxRel);
    auto gt = measure(vk.unary[idx(VecUnary::GeluTanh)], sweep(-10.f, 10.f), [](double x) {
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    }, 0);
    CHECK(gt.maxAbs <= 1e-6);
    UNSCOPED_INFO("exp rel " << e.maxRel << " erf abs " << erf.maxAbs << " tanh abs " << th.maxAbs << " sigmoid rel " << sg.maxRel
                             << " gelu abs " << ge.maxAbs << " / " << gt.maxAbs);
  }
}

TEST_CASE("vec transcendental special values: inf, NaN, overflow, denormals", "[cpu][vec]") {
  for (Isa isa : pathsOfThisCpu()) {
    const VecKernels& vk = vecKernelsFor(isa);
    INFO("isa " << isaName(isa));
    auto exp = vk.unary[idx(VecUnary::Exp)];
    CHECK(call(exp, kInf) == kInf);
    CHECK(call(exp, 89.f) == kInf);
    CHECK(call(exp, -kInf) == 0.f);
    CHECK(call(exp, -200.f) == 0.f);
    CHECK(std::isnan(call(exp, kNan)));
    CHECK(call(exp, 0.f) == 1.f);
    float den = call(exp, -95.f);  // a denormal result: close to libm's
    CHECK(den > 0.f);
    CHECK(std::fabs(den - std::exp(-95.f)) <= 2e-45f * 4);
    for (VecUnary u : {VecUnary::Erf, VecUnary::Tanh}) {
      auto f = vk.unary[idx(u)];
      CHECK(call(f, kInf) == 1.f);
      CHECK(call(f, -kInf) == -1.f);
      CHECK(std::isnan(call(f, kNan)));
      CHECK(call(f, 0.f) == 0.f);
      CHECK(call(f, 1e-30f) == Approx(u == VecUnary::Erf ? 1.1283791670955126e-30 : 1e-30).epsilon(1e-6));
    }
    auto sig = vk.unary[idx(VecUnary::Sigmoid)];
    CHECK(call(sig, kInf) == 1.f);
    CHECK(call(sig, -kInf) == 0.f);
    CHECK(std::isnan(call(sig, kNan)));
    auto silu = vk.unary[idx(VecUnary::Silu)];  // x * sigmoid(x): -inf * 0 is NaN, as the reference's Sigmoid then Mul
    CHECK(call(silu, kInf) == kInf);
    CHECK(std::isnan(call(silu, -kInf)));
    CHECK(std::isnan(call(silu, kNan)));
    CHECK(call(silu, 0.f) == 0.f);
    CHECK(call(silu, -200.f) == 0.f);
    auto relu = vk.unary[idx(VecUnary::Relu)];
    CHECK(std::isnan(call(relu, kNan)));
    CHECK(call(relu, -kInf) == 0.f);
    // GELU's formula gives what the reference's gives: x = -inf makes -inf * 0 = NaN.
    CHECK(std::isnan(call(vk.unary[idx(VecUnary::GeluErf)], -kInf)));
    CHECK(call(vk.unary[idx(VecUnary::GeluErf)], kInf) == kInf);
  }
}

TEST_CASE("vec HardSwish gives the same bits on every path (its double arithmetic, rounded once)", "[cpu][vec]") {
  std::vector<float> xs = sweep(-1e30f, 1e30f);
  for (float v : {0.f, -0.f, -3.f, 3.f, -2.9999998f, 2.9999998f, kInf, -kInf, kNan, 1e-40f, -1e-40f}) xs.push_back(v);
  std::vector<float> want(xs.size()), got(xs.size());
  vecKernelsFor(Isa::Portable).unary[idx(VecUnary::HardSwish)](xs.data(), want.data(), static_cast<int64_t>(xs.size()));
  for (Isa isa : pathsOfThisCpu()) {
    INFO("isa " << isaName(isa));
    vecKernelsFor(isa).unary[idx(VecUnary::HardSwish)](xs.data(), got.data(), static_cast<int64_t>(xs.size()));
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("vec row kernels match double loops on every tail length", "[cpu][vec]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (Isa isa : pathsOfThisCpu()) {
    const VecKernels& vk = vecKernelsFor(isa);
    for (int64_t n : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 768}) {
      INFO("isa " << isaName(isa) << " n " << n);
      std::vector<float> a(static_cast<size_t>(n)), b(a.size()), g(a.size()), be(a.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = nd(rng) * 3, b[i] = nd(rng), g[i] = nd(rng), be[i] = nd(rng);
      // Guard values after each output catch writes past the end.
      std::vector<float> y(a.size() + 1, 12345.f);
      vk.softmaxRow(a.data(), y.data(), n);
      double mx = -1e300, sum = 0;
      for (float v : a) mx = std::max(mx, static_cast<double>(v));
      for (float v : a) sum += std::exp(v - mx);
      for (size_t i = 0; i < a.size(); ++i) CHECK(y[i] == Approx(std::exp(a[i] - mx) / sum).epsilon(2e-6).margin(1e-12));
      CHECK(y.back() == 12345.f);
      for (bool residual : {false, true})
        for (bool bias : {false, true}) {
          std::fill(y.begin(), y.end(), 12345.f);
          vk.layerNormRow(a.data(), residual ? b.data() : nullptr, g.data(), bias ? be.data() : nullptr, 1e-5f, y.data(), n);
          double m = 0, v = 0;
          for (size_t i = 0; i < a.size(); ++i) m += a[i] + (residual ? b[i] : 0);
          m /= static_cast<double>(n);
          for (size_t i = 0; i < a.size(); ++i) v += std::pow(a[i] + (residual ? b[i] : 0) - m, 2);
          v /= static_cast<double>(n);
          for (size_t i = 0; i < a.size(); ++i) {
            double want = (a[i] + (residual ? b[i] : 0) - m) / std::sqrt(v + 1e-5) * g[i] + (bias ? be[i] : 0);
            CHECK(y[i] == Approx(want).epsilon(1e-4).margin(1e-5));
          }
          CHECK(y.back() == 12345.f);
        }
      // Epilogue: bias + GELU in place.
      std::vector<float> c(a.begin(), a.end());
      c.push_back(12345.f);
      vk.biasAct(c.data(), b.data(), n, VecUnary::GeluErf);
      for (size_t i = 0; i < a.size(); ++i) {
        double x = static_cast<double>(a[i]) + b[i];
        CHECK(c[i] == Approx(0.5 * x * (1 + std::erf(x / std::sqrt(2.0)))).epsilon(1e-5).margin(2e-6));
      }
      CHECK(c.back() == 12345.f);
      // Binary ops, the three operand forms.
      for (int op = 0; op < static_cast<int>(VecBinary::Count); ++op) {
        auto apply = [op](float p, float q) { return op == 0 ? p + q : op == 1 ? p - q : op == 2 ? p * q : p / q; };
        std::fill(y.begin(), y.end(), 12345.f);
        vk.binary[op](a.data(), b.data(), y.data(), n);
        for (size_t i = 0; i < a.size(); ++i) CHECK(y[i] == apply(a[i], b[i]));
        vk.binaryScalarB[op](a.data(), 1.5f, y.data(), n);
        for (size_t i = 0; i < a.size(); ++i) CHECK(y[i] == apply(a[i], 1.5f));
        vk.binaryScalarA[op](-2.5f, b.data(), y.data(), n);
        for (size_t i = 0; i < a.size(); ++i) CHECK(y[i] == apply(-2.5f, b[i]));
        CHECK(y.back() == 12345.f);
      }
      // The sum (GlobalAveragePool): a double loop's within 32 float roundings of sum |x|.
      double total = 0, magnitude = 0;
      for (float v : a) total += v, magnitude += std::fabs(v);
      CHECK(std::fabs(vk.sum(a.data(), n) - total) <= 32 * 6e-8 * magnitude);
    }
  }
}
