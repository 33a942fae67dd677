// test_quant_smooth.cpp: SmoothQuant (quant/smooth_quant) leaves the float model's outputs as they
// were, folds 1/s into a LayerNormalization read only by the smoothed layers, and puts an explicit
// Mul before the others; the factors are max|X_j|^alpha / max|W_j|^(1-alpha), checked by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "exec/executor.h"
#include "formats/model_io.h"
#include "formats/onnx_text.h"
#include "lib/ir.h"
#include "quant/smooth_quant.h"
#include "ref_test_util.h"

using namespace onnxtool;

namespace {

constexpr int64_t kT = 6, kK = 8, kN = 4;

/// x [T, K] -> LayerNormalization(g, b) -> MatMul(w1) -> Relu -> Gemm(w2, transB) -> y, with a
/// second reader of the LayerNorm (q = MatMul(ln, w3)); large gammas on channels 1 and 5 make
/// the outliers SmoothQuant moves into the weights.
std::unique_ptr<Model> model(bool lnSharedWithAdd) {
  std::string text = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[6, 8] x) => (float[6, 4] y, float[6, 4] q) {
  ln = LayerNormalization <axis = -1> (x, gamma, beta)
  h = MatMul (ln, w1)
  r = Relu (h)
  y = Gemm <transB = 1> (r, w2)
  q = MatMul (ln, w3)
)";
  if (lnSharedWithAdd) text += "  z = Add (ln, x)\n";
  text += "}\n";
  auto m = parseModelText(text, "smooth.onnxtxt");
  if (lnSharedWithAdd) m->graph->addOutput(m->graph->findLocal("z"));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  auto rand = [&](std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = nd(rng);
    return v;
  };
  auto add = [&](const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    Tensor t = Tensor::fromFloats(name, dims, v);
    Value* val = m->graph->addInitializer(std::move(t));
    val->setType(TypeInfo::tensor(DType::Float, Shape::of(dims)));
  };
  std::vector<float> gamma(kK, 1.0f), beta = rand({kK});
  gamma[1] = 40.0f;
  gamma[5] = -25.0f;
  add("gamma", {kK}, gamma);
  add("beta", {kK}, beta);
  add("w1", {kK, kN}, rand({kK, kN}));
  add("w2", {kN, kN}, rand({kN, kN}));
  add("w3", {kK, kN}, rand({kK, kN}));
  return m;
}

std::vector<std::map<std::string, RtValue>> samples(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::map<std::string, RtValue>> out(static_cast<size_t>(count));
  for (auto& s : out) {
    std::vector<float> v(kT * kK);
    for (float& f : v) f = nd(rng);
    s["x"] = RtValue::ofTensor(testutil::f32({kT, kK}, v));
  }
  return out;
}

std::vector<std::vector<float>> runAll(const Model& m, const std::map<std::string, RtValue>& feeds) {
  auto exec = makeExecutor("ref");
  PrepareOptions po;
  auto plan = exec->prepare(m, po);
  std::vector<std::vector<float>> out;
  for (const RtValue& v : plan->run(feeds)) out.push_back(testutil::values<float>(v));
  return out;
}

int count(const Model& m, const std::string& op) {
  int c = 0;
  for (const auto& n : m.graph->nodes()) c += n->opType == op;
  return c;
}

}  // namespace

TEST_CASE("smooth-quant keeps the float outputs and folds into LayerNormalization", "[quant][smooth]") {
  for (bool shared : {false, true}) {
    INFO("LayerNorm output also read by an Add: " << shared);
    auto m = model(shared);
    auto before = serializeModel(*m);
    auto original = loadModelFromBytes(before, ".", "original");
    auto cal = samples(3, 1);
    SmoothQuantReport r = smoothQuant(*m, cal, 0.5, QuantScheme{});
    CHECK(r.layers == 3);  // w1 and w3 share ln's factors, w2 reads Relu
    CHECK(r.folded == (shared ? 0 : 1));
    CHECK(r.muls == (shared ? 2 : 1));
    CHECK(count(*m, "Mul") == r.muls);
    for (const auto& feeds : samples(2, 99)) {
      auto a = runAll(*original, feeds), b = runAll(*m, feeds);
      REQUIRE(a.size() == b.size());
      for (size_t o = 0; o < a.size(); ++o)
        for (size_t i = 0; i < a[o].size(); ++i) CHECK(b[o][i] == Approx(a[o][i]).margin(1e-4).epsilon(1e-4));
    }
  }
}

TEST_CASE("smooth-quant factors are max|X_j|^alpha / max|W_j|^(1-alpha)", "[quant][smooth]") {
  auto m = model(false);
  auto cal = samples(3, 1);
  // max |ln_j| over the samples, by hand on the reference executor
  auto probe = loadModelFromBytes(serializeModel(*m), ".", "probe");
  probe->graph->addOutput(probe->graph->findLocal("ln"));
  std::vector<double> xmax(kK, 0.0);
  for (const auto& s : cal) {
    auto outs = runAll(*probe, s);
    const auto& ln = outs.back();
    for (size_t i = 0; i < ln.size(); ++i) xmax[i % kK] = std::max(xmax[i % kK], std::fabs(static_cast<double>(ln[i])));
  }
  auto floats = [&](const Model& mm, const std::string& name) {
    const Tensor* t = mm.graph->findLocal(name)->initializer();
    std::vector<float> v(t->raw.size() / 4);
    std::memcpy(v.data(), t->raw.data(), t->raw.size());
    return v;
  };
  std::vector<float> w1 = floats(*m, "w1"), w3 = floats(*m, "w3"), gamma = floats(*m, "gamma");
  const double alpha = 0.75;
  std::vector<double> s(kK);
  for (int64_t j = 0; j < kK; ++j) {
    double wmax = 0;
    for (int64_t n = 0; n < kN; ++n)
      wmax = std::max({wmax, std::fabs(static_cast<double>(w1[j * kN + n])), std::fabs(static_cast<double>(w3[j * kN + n]))});
    s[j] = std::pow(xmax[j], alpha) / std::pow(wmax, 1 - alpha);
  }
  smoothQuant(*m, cal, alpha, QuantScheme{});
  const Node* ln = m->graph->findLocal("ln")->producer();
  const Node* h = m->graph->findLocal("h")->producer();
  std::vector<float> g2 = floats(*m, ln->input(1)->name()), w1s = floats(*m, h->input(1)->name());
  for (int64_t j = 0; j < kK; ++j) {
    CHECK(g2[j] == Approx(gamma[j] / s[j]).epsilon(1e-5));
    for (int64_t n = 0; n < kN; ++n) CHECK(w1s[j * kN + n] == Approx(w1[j * kN + n] * s[j]).epsilon(1e-5));
  }
  // the outlier channels got the largest factors
  CHECK(s[1] > 3 * s[0]);
  CHECK(s[5] > 3 * s[0]);
}
