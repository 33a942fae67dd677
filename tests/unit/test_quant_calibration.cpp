// test_quant_calibration.cpp: calibration methods of quant/static_qdq against ranges computed by
// hand for constructed data.
#include <catch2/catch.hpp>

#include <random>

#include "lib/ir.h"
#include "quant/static_qdq.h"
#include "ref_test_util.h"

using namespace onnxtool;

namespace {

/// x -> Identity -> y, x float [n].
std::unique_ptr<Model> identityModel(int64_t n) {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports = {{"", 13, {}}};
  m->graph = std::make_unique<Graph>();
  Graph& g = *m->graph;
  Value* x = g.createValue("x");
  TypeInfo ti;
  ti.kind = TypeInfo::Kind::Tensor;
  ti.elemType = static_cast<int32_t>(DType::Float);
  ti.shape.hasRank = true;
  ti.shape.dims.push_back(Dim::ofValue(n));
  x->setType(ti);
  g.addInput(x);
  Node* id = g.addNode("Identity", {x}, {"y"});
  id->name = "id";
  g.addOutput(id->output(0));
  return m;
}

}  // namespace

TEST_CASE("mse calibration trades clipping error against rounding error", "[quant][calibration]") {
  // 999999 values uniform in [0, 1) and one at 100. With the range [0, m] the rounding error is
  // about N (m/255)^2 / 12 = 1.28 m^2 and clipping the outlier costs (100 - m)^2: least at
  // m = 200 / 4.56 = 43.9. minmax keeps 100, percentile:99.9 cuts to ~1.
  const int64_t n = 1000000;
  auto m = identityModel(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  v[12345] = 100.0f;
  std::vector<std::map<std::string, RtValue>> samples(1);
  samples[0]["x"] = RtValue::ofTensor(testutil::f32({n}, v));
  CalibrationMethod mse;
  mse.kind = CalibrationMethod::Kind::Mse;
  auto r = calibrateRanges(*m, {"x"}, samples, mse);
  REQUIRE(r.count("x"));
  INFO("mse range [" << r["x"].min << ", " << r["x"].max << "]");
  CHECK(r["x"].min >= 0.0f);
  CHECK(r["x"].min < 1e-5f);
  CHECK(r["x"].max > 35.0f);
  CHECK(r["x"].max < 53.0f);
  // Without the outlier nothing is worth clipping: the whole range stays.
  v[12345] = 0.5f;
  samples[0]["x"] = RtValue::ofTensor(testutil::f32({n}, v));
  auto full = calibrateRanges(*m, {"x"}, samples, mse);
  auto mm = calibrateRanges(*m, {"x"}, samples, CalibrationMethod{});
  INFO("mse range without the outlier [" << full["x"].min << ", " << full["x"].max << "], minmax max " << mm["x"].max);
  CHECK(full["x"].max >= 0.99f * mm["x"].max);
}

TEST_CASE("entropy calibration ignores exact zeros (a ReLU's spike, exact at any threshold)", "[quant][calibration]") {
  // ReLU6 of N(0, 1.5): half exact zeros, the rest a half-normal tail up to 6. Counted in the |x|
  // histogram, the zeros' bin dominated the divergence (its 128-level merge spreads the spike over
  // the neighbouring bins, less so the narrower the range) and the threshold fell to ~3, clipping
  // 2% of the activations (EfficientNet-Lite0's ReLU6 outputs: 0% top-1 agreement with
  // --method entropy). Without them (0 is exact at any threshold) the tail is kept (numpy: 6.0).
  const int64_t n = 200000;
  auto m = identityModel(n);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::min(std::max(nd(rng), 0.0f), 6.0f);
  std::vector<std::map<std::string, RtValue>> samples(1);
  samples[0]["x"] = RtValue::ofTensor(testutil::f32({n}, v));
  CalibrationMethod entropy;
  entropy.kind = CalibrationMethod::Kind::Entropy;
  auto r = calibrateRanges(*m, {"x"}, samples, entropy);
  REQUIRE(r.count("x"));
  INFO("entropy range [" << r["x"].min << ", " << r["x"].max << "]");
  CHECK(r["x"].min == 0.0f);
  CHECK(r["x"].max > 4.5f);
}
