// test_quant_gptq.cpp: GPTQ weight rounding (quant/gptq). A hand-computed case (two perfectly
// correlated inputs: the rounding error of the first goes into the second), and convolutions
// of every geometry the patch extraction handles (pads, strides, dilations, groups, depthwise,
// 1-D) plus a MatMul, where each layer's output error on the calibration inputs, measured by the
// reference executor with the dequantized weights, must come out well below nearest rounding's.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "exec/executor.h"
#include "formats/model_io.h"
#include "formats/onnx_text.h"
#include "lib/ir.h"
#include "quant/gptq.h"
#include "quant/quant_scheme.h"
#include "quant/static_qdq.h"
#include "ref_test_util.h"

using namespace onnxtool;

namespace {

void addWeight(Model& m, const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
  Value* val = m.graph->addInitializer(Tensor::fromFloats(name, dims, v));
  val->setType(TypeInfo::tensor(DType::Float, Shape::of(dims)));
}

/// The float values a QuantizedWeight stands for: (q - zero[c]) * scale[c] along its axis.
std::vector<float> dequantize(const QuantizedWeight& qw, const std::vector<int64_t>& dims) {
  const auto* q = reinterpret_cast<const int8_t*>(qw.q.raw.data());
  const auto* z = reinterpret_cast<const int8_t*>(qw.zero.raw.data());
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(std::max<int64_t>(qw.axis, 0)) + 1; d < dims.size(); ++d) inner *= dims[d];
  std::vector<float> out(qw.q.raw.size());
  for (size_t i = 0; i < out.size(); ++i) {
    size_t c = qw.axis < 0 ? 0 : static_cast<size_t>(static_cast<int64_t>(i) / inner % dims[static_cast<size_t>(qw.axis)]);
    out[i] = static_cast<float>(q[i] - z[qw.axis < 0 ? 0 : c]) * qw.scales[c];
  }
  return out;
}

std::vector<std::vector<float>> runAll(const Model& m, const std::map<std::string, RtValue>& feeds) {
  auto exec = makeExecutor("ref");
  auto plan = exec->prepare(m, PrepareOptions{});
  std::vector<std::vector<float>> out;
  for (const RtValue& v : plan->run(feeds)) out.push_back(testutil::values<float>(v));
  return out;
}

}  // namespace

TEST_CASE("GPTQ spreads a rounding error over a correlated input (by hand)", "[quant][gptq]") {
  // y = x w with x = [a, a, 0] and w = [0.4, 0.4, 127]: scale 1 (max |w| / 127). Nearest rounding
  // gives [0, 0, 127] (y off by 0.8a); GPTQ rounds the first 0.4 down, moves its error into the
  // second (H = [[1, 1], [1, 1]] + damping: w1 += 0.4 / (1 + d)), which then rounds up:
  // [0, 1, 127] (y off by 0.2a). The third input is always 0: nearest rounding.
  auto m = parseModelText(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[4, 3] x) => (float[4, 1] y) {
  y = MatMul (x, w)
}
)",
                          "gptq_hand.onnxtxt");
  addWeight(*m, "w", {3, 1}, {0.4f, 0.4f, 127.0f});
  std::vector<std::map<std::string, RtValue>> cal(2);
  cal[0]["x"] = RtValue::ofTensor(testutil::f32({4, 3}, {1, 1, 0, -2, -2, 0, 0.5f, 0.5f, 0, 3, 3, 0}));
  cal[1]["x"] = RtValue::ofTensor(testutil::f32({4, 3}, {-1, -1, 0, 2, 2, 0, 1.5f, 1.5f, 0, -0.5f, -0.5f, 0}));
  PresetWeights preset;
  GptqReport r = roundWeightsGptq(*m, cal, QuantScheme{}, 1, preset);
  CHECK(r.layers == 1);
  CHECK(r.keptNearest == 0);
  CHECK(r.passes == 1);
  REQUIRE(preset.count("w") == 1);
  const QuantizedWeight& qw = preset.at("w");
  const auto* q = reinterpret_cast<const int8_t*>(qw.q.raw.data());
  CHECK(q[0] == 0);
  CHECK(q[1] == 1);
  CHECK(q[2] == 127);
  REQUIRE(qw.scales.size() == 1);
  CHECK(qw.scales[0] == Approx(1.0f));
  CHECK(r.meanErrorRatio == Approx(0.2 * 0.2 / (0.8 * 0.8)).epsilon(1e-3));  // (0.2a)^2 / (0.8a)^2
  // quantizeStaticQdq stores exactly these integers.
  std::map<std::string, ValueRange> ranges{{"x", {-2, 3}}};
  quantizeStaticQdq(*m, ranges, 1, QuantScheme{}, &preset);
  const Tensor* stored = m->graph->findLocal("w_quantized")->initializer();
  REQUIRE(stored);
  const auto* s = reinterpret_cast<const int8_t*>(stored->raw.data());
  CHECK(s[0] == 0);
  CHECK(s[1] == 1);
  CHECK(s[2] == 127);
}

TEST_CASE("GPTQ lowers each layer's output error for every conv geometry (reference executor)", "[quant][gptq]") {
  // Pads (asymmetric), strides, dilation, groups, depthwise, a 1-D conv and a MatMul over the
  // last axis; smooth inputs (neighbouring pixels correlate, as in images).
  auto m = parseModelText(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 6, 12, 12] x) => (float[1, 6, 12, 5] y, float[1, 6, 12, 6] a, float[1, 4, 12, 6] b, float[1, 4, 6, 3] c, float[1, 3, 72] d) {
  a = Conv <pads = [1, 0, 1, 2], strides = [1, 2]> (x, w1)
  b = Conv <group = 2, dilations = [2, 2], pads = [2, 2, 2, 2]> (a, w2)
  c = Conv <group = 4, strides = [2, 2], pads = [1, 1, 1, 1]> (b, w3, b3)
  y = MatMul (x, w4)
  xr = Reshape (x, shape)
  d = Conv <pads = [2, 1], auto_pad = "NOTSET"> (xr, w5)
}
)",
                          "gptq_conv.onnxtxt");
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  auto rand = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = nd(rng) * 0.3f;
    return v;
  };
  addWeight(*m, "w1", {6, 6, 3, 3}, rand(6 * 6 * 9));
  addWeight(*m, "w2", {4, 3, 3, 3}, rand(4 * 3 * 9));
  addWeight(*m, "w3", {4, 1, 3, 3}, rand(4 * 9));
  addWeight(*m, "b3", {4}, rand(4));
  addWeight(*m, "w4", {12, 5}, rand(60));
  addWeight(*m, "w5", {3, 12, 4}, rand(3 * 12 * 4));
  {
    Value* v = m->graph->addInitializer(Tensor::fromInt64s("shape", {3}, {1, 12, 72}));
    v->setType(TypeInfo::tensor(DType::Int64, Shape::of({3})));
  }
  // Smooth fields: a few random plane waves per channel plus a little noise.
  std::uniform_real_distribution<float> ud(0, 6.2831853f);
  auto sample = [&] {
    std::vector<float> v(6 * 12 * 12);
    for (int c = 0; c < 6; ++c) {
      float f1 = ud(rng) / 6, f2 = ud(rng) / 6, p1 = ud(rng), p2 = ud(rng);
      for (int y = 0; y < 12; ++y)
        for (int x = 0; x < 12; ++x)
          v[static_cast<size_t>((c * 12 + y) * 12 + x)] = std::sin(f1 * y + p1) + std::cos(f2 * x + p2) + 0.05f * nd(rng);
    }
    return v;
  };
  std::vector<std::map<std::string, RtValue>> cal(8);
  for (auto& s : cal) s["x"] = RtValue::ofTensor(testutil::f32({1, 6, 12, 12}, sample()));
  PresetWeights preset;
  QuantScheme scheme;
  GptqReport r = roundWeightsGptq(*m, cal, scheme, 1, preset);
  CHECK(r.layers == 5);
  CHECK(r.skipped.empty());
  // Each layer alone with its weight dequantized (the rest float), against the float model, on
  // the calibration inputs: summed squared error of the layer's output.
  struct L {
    std::string w, out;
    int64_t axis;
  };
  const std::vector<L> layers{{"w1", "a", 0}, {"w2", "b", 0}, {"w3", "c", 0}, {"w4", "y", 1}, {"w5", "d", 0}};
  const std::vector<std::string> outs{"y", "a", "b", "c", "d"};
  std::vector<std::vector<std::vector<float>>> ref;
  for (const auto& s : cal) ref.push_back(runAll(*m, s));
  for (const L& l : layers) {
    INFO("layer " << l.w);
    const Tensor* wt = m->graph->findLocal(l.w)->initializer();
    REQUIRE(preset.count(l.w) == 1);
    const QuantizedWeight& g = preset.at(l.w);
    QuantizedWeight nearest = quantizeWeight(*wt, l.axis, scheme, DType::Int8);
    REQUIRE(g.scales == nearest.scales);  // same scales: only the integers differ
    const auto* gq = reinterpret_cast<const int8_t*>(g.q.raw.data());
    const auto* nq = reinterpret_cast<const int8_t*>(nearest.q.raw.data());
    int moved = 0;
    for (size_t i = 0; i < g.q.raw.size(); ++i) {
      CHECK(std::abs(gq[i]) <= 127);
      moved += gq[i] != nq[i];
    }
    CHECK(moved > 0);
    auto error = [&](const std::vector<float>& w) {
      auto copy = loadModelFromBytes(serializeModel(*m), ".", "copy");
      copy->graph->findLocal(l.w)->initializer()->setRaw(Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(w.data()), w.size() * 4)));
      const size_t o = static_cast<size_t>(std::find(outs.begin(), outs.end(), l.out) - outs.begin());
      double e = 0;
      for (size_t s = 0; s < cal.size(); ++s) {
        auto got = runAll(*copy, cal[s]);
        for (size_t i = 0; i < got[o].size(); ++i) e += std::pow(static_cast<double>(got[o][i]) - ref[s][o][i], 2);
      }
      return e;
    };
    const double eg = error(dequantize(g, wt->dims)), en = error(dequantize(nearest, wt->dims));
    INFO("gptq " << eg << " nearest " << en);
    CHECK(eg < 0.8 * en);
  }
}
