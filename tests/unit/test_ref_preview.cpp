// test_ref_preview.cpp: reference kernels of the preview domains. One optimizer step of Adagrad,
// Momentum (standard and Nesterov) and Adam computed by hand, with the learning-rate schedules
// (T = 0 vs T > 0), both regularization coefficients, several optimized tensors at once, double
// state and broadcast state; FlexAttention on values whose softmax is exact, with GQA, score_mod
// reading an outer-scope value, prob_mod, float16, and malformed nodes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "exec/executor.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "tests/unit/ref_test_util.h"

using namespace onnxtool;
using namespace onnxtool::testutil;

namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";
constexpr const char* kPreview = "ai.onnx.preview";

Tensor int64Scalar(int64_t v) { return Tensor::fromInt64s("", {}, {v}); }
Tensor doubles(std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor t;
  t.dataType = static_cast<int32_t>(DType::Double);
  t.dims = std::move(dims);
  t.setRaw(Buffer::copyOf(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 8)));
  return t;
}
Tensor halves(std::vector<int64_t> dims, const std::vector<float>& v) {
  Tensor t;
  t.dataType = static_cast<int32_t>(DType::Float16);
  t.dims = std::move(dims);
  std::vector<uint16_t> bits;
  for (float f : v) bits.push_back(floatToHalf(f));
  t.setRaw(Buffer::copyOf(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bits.data()), bits.size() * 2)));
  return t;
}

/// Checks `got` against `want` element by element, to 1e-5 relative (float32 rounding).
void checkClose(const RtValue& got, const std::vector<double>& want) {
  std::vector<double> g = valuesOf(got);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(want[i]).epsilon(1e-5));
  }
}

/// A one-node model: node `op` of `domain` reading graph inputs `ins` (in order) and writing
/// graph outputs `outs`. Holds the node so attributes can be set before run().
struct OneNode {
  Model m;
  Node* node;
  std::vector<std::string> ins;
  OneNode(const std::string& domain, const std::string& op, std::vector<std::string> inputs,
          const std::vector<std::string>& outs)
      : ins(std::move(inputs)) {
    m.irVersion = 8;
    m.opsetImports.push_back({"", 26, ""});
    m.opsetImports.push_back({domain, 1, ""});
    m.graph = std::make_unique<Graph>();
    std::vector<Value*> vals;
    for (const auto& n : ins) {
      vals.push_back(m.graph->createValue(n));
      m.graph->addInput(vals.back());
    }
    node = m.graph->addNode(op, vals, outs, domain);
    for (size_t i = 0; i < outs.size(); ++i) m.graph->addOutput(node->output(i));
  }
  std::vector<RtValue> run(std::vector<Tensor> values) {
    REQUIRE(values.size() == ins.size());
    std::map<std::string, RtValue> feeds;
    for (size_t i = 0; i < ins.size(); ++i) feeds.emplace(ins[i], T(std::move(values[i])));
    return makeExecutor("ref")->prepare(m, {})->run(feeds);
  }
};

}  // namespace

TEST_CASE("Adagrad: one step with decay, L2 term and epsilon", "[ref]") {
  OneNode n(kTraining, "Adagrad", {"R", "T", "X", "G", "H"}, {"X_new", "H_new"});
  n.node->setAttr(Attribute::ofFloat("decay_factor", 0.25f));
  n.node->setAttr(Attribute::ofFloat("norm_coefficient", 0.5f));
  n.node->setAttr(Attribute::ofFloat("epsilon", 0.0f));
  // r = 0.5 / (1 + 2 * 0.25) = 1/3; G' = 0.5 X + G = [3, -4]; H_new = H + G'^2 = [9, 25];
  // X_new = X - r G' / sqrt(H_new) = [1 - 1/3, 2 + 4/15].
  auto outs = n.run({f32({}, {0.5f}), int64Scalar(2), f32({2}, {1, 2}), f32({2}, {2.5f, -5}),
                     f32({2}, {0, 9})});
  checkClose(outs[0], {2.0 / 3, 2 + 4.0 / 15});
  checkClose(outs[1], {9, 25});

  SECTION("the default epsilon (1e-6) is added to sqrt(H_new)") {
    n.node->removeAttr("epsilon");
    auto d = n.run({f32({}, {0.5f}), int64Scalar(2), f32({2}, {1, 2}), f32({2}, {2.5f, -5}),
                    f32({2}, {0, 9})});
    checkClose(d[0], {1 - (1.0 / 3) * 3 / (3 + 1e-6), 2 + (1.0 / 3) * 4 / (5 + 1e-6)});
  }
}

TEST_CASE("Adagrad: two tensors, and an H that broadcasts to X", "[ref]") {
  OneNode n(kTraining, "Adagrad", {"R", "T", "X1", "X2", "G1", "G2", "H1", "H2"},
            {"X1_new", "X2_new", "H1_new", "H2_new"});
  n.node->setAttr(Attribute::ofFloat("epsilon", 0.0f));
  // r = 1; group 1: G' = 3, H_new = 16 + 9 = 25, X_new = 1 - 3/5. Group 2: H = [0] broadcasts.
  auto outs = n.run({f32({}, {1}), int64Scalar(0), f32({}, {1}), f32({2}, {4, 4}), f32({}, {3}),
                     f32({2}, {1, -2}), f32({}, {16}), f32({1}, {0})});
  checkClose(outs[0], {1 - 3.0 / 5});
  checkClose(outs[1], {4 - 1.0, 4 + 1.0});
  checkClose(outs[2], {25});
  checkClose(outs[3], {1, 4});
  CHECK(outs[3].tensor->dims == std::vector<int64_t>{2});
}

TEST_CASE("Momentum: standard and Nesterov, first step vs later steps", "[ref]") {
  OneNode n(kTraining, "Momentum", {"R", "T", "X", "G", "V"}, {"X_new", "V_new"});
  n.node->setAttr(Attribute::ofFloat("alpha", 0.9f));
  n.node->setAttr(Attribute::ofFloat("beta", 0.5f));
  n.node->setAttr(Attribute::ofFloat("norm_coefficient", 0.0f));
  n.node->setAttr(Attribute::ofString("mode", "standard"));
  auto feeds = [](int64_t t) {
    return std::vector<Tensor>{f32({}, {0.1f}), int64Scalar(t), f32({1}, {1}), f32({1}, {2}),
                               f32({1}, {1})};
  };
  double alpha = 0.9f, beta = 0.5f, r = 0.1f;  // attributes and R are float32

  SECTION("T = 0 takes the whole gradient: V_new = 0.9 + 2, X_new = 1 - 0.1 V_new") {
    auto outs = n.run(feeds(0));
    checkClose(outs[1], {alpha + 2});
    checkClose(outs[0], {1 - r * (alpha + 2)});
  }
  SECTION("T > 0 scales it by beta: V_new = 0.9 + 0.5 * 2") {
    auto outs = n.run(feeds(3));
    checkClose(outs[1], {alpha + beta * 2});
    checkClose(outs[0], {1 - r * (alpha + beta * 2)});
  }
  SECTION("Nesterov: X_new = X - R (G' + alpha V_new)") {
    n.node->setAttr(Attribute::ofString("mode", "nesterov"));
    auto outs = n.run(feeds(1));
    double vNew = alpha + beta * 2;
    checkClose(outs[1], {vNew});
    checkClose(outs[0], {1 - r * (2 + alpha * vNew)});
  }
  SECTION("the L2 term joins the gradient") {
    n.node->setAttr(Attribute::ofFloat("norm_coefficient", 0.5f));
    auto outs = n.run(feeds(0));
    checkClose(outs[1], {alpha + 2.5});
  }
  SECTION("an unknown mode is refused") {
    n.node->setAttr(Attribute::ofString("mode", "heavy-ball"));
    CHECK_THROWS_AS(n.run(feeds(0)), Error);
  }
}

TEST_CASE("Momentum: double state keeps its type, groups keep their order", "[ref]") {
  OneNode n(kTraining, "Momentum", {"R", "T", "X1", "X2", "G1", "G2", "V1", "V2"},
            {"X1_new", "X2_new", "V1_new", "V2_new"});
  n.node->setAttr(Attribute::ofFloat("alpha", 0.5f));
  n.node->setAttr(Attribute::ofFloat("beta", 1.0f));
  n.node->setAttr(Attribute::ofFloat("norm_coefficient", 0.0f));
  n.node->setAttr(Attribute::ofString("mode", "standard"));
  auto outs = n.run({doubles({}, {0.25}), int64Scalar(1), doubles({1}, {1}), f32({1}, {2}), doubles({1}, {4}),
                     f32({1}, {8}), doubles({1}, {2}), f32({1}, {4})});
  // V1_new = 0.5 * 2 + 4 = 5, X1_new = 1 - 0.25 * 5; V2_new = 0.5 * 4 + 8 = 10, X2_new = 2 - 0.25 * 10.
  CHECK(outs[0].tensor->dtype() == DType::Double);
  CHECK(outs[1].tensor->dtype() == DType::Float);
  CHECK(outs[2].tensor->dtype() == DType::Double);
  checkClose(outs[0], {-0.25});
  checkClose(outs[1], {-0.5});
  checkClose(outs[2], {5});
  checkClose(outs[3], {10});
}

TEST_CASE("Adam: one step with and without bias correction", "[ref]") {
  OneNode n(kTraining, "Adam", {"R", "T", "X", "G", "V", "H"}, {"X_new", "V_new", "H_new"});
  n.node->setAttr(Attribute::ofFloat("alpha", 0.5f));
  n.node->setAttr(Attribute::ofFloat("beta", 0.75f));
  n.node->setAttr(Attribute::ofFloat("epsilon", 0.0f));
  auto feeds = [](int64_t t) {
    return std::vector<Tensor>{f32({}, {0.1f}), int64Scalar(t), f32({2}, {1, -1}), f32({2}, {2, -2}),
                               f32({2}, {0, 0}), f32({2}, {0, 0})};
  };
  double r = 0.1f;
  // V_new = 0.5 G, H_new = 0.25 G^2, so V_new / sqrt(H_new) = sign(G).
  SECTION("T = 0: the rate is R") {
    auto outs = n.run(feeds(0));
    checkClose(outs[1], {1, -1});
    checkClose(outs[2], {1, 1});
    checkClose(outs[0], {1 - r, -1 + r});
  }
  SECTION("T = 2: the rate is R sqrt(1 - beta^2) / (1 - alpha^2)") {
    auto outs = n.run(feeds(2));
    double rAdj = r * std::sqrt(1 - 0.75 * 0.75) / (1 - 0.25);
    checkClose(outs[0], {1 - rAdj, -1 + rAdj});
  }
  SECTION("norm_coefficient_post shrinks the result, norm_coefficient joins the gradient") {
    n.node->setAttr(Attribute::ofFloat("norm_coefficient_post", 0.5f));
    n.node->setAttr(Attribute::ofFloat("norm_coefficient", 2.0f));
    auto outs = n.run(feeds(0));
    // G' = 2 X + G = [4, -4]: V_new = [2, -2], H_new = [4, 4]; X_new = 0.5 (X - 0.1 sign).
    checkClose(outs[1], {2, -2});
    checkClose(outs[2], {4, 4});
    checkClose(outs[0], {0.5 * (1 - r), 0.5 * (-1 + r)});
  }
}

TEST_CASE("Adam: two tensors, defaults, and a miscounted input list", "[ref]") {
  OneNode n(kTraining, "Adam", {"R", "T", "X1", "X2", "G1", "G2", "V1", "V2", "H1", "H2"},
            {"X1_new", "X2_new", "V1_new", "V2_new", "H1_new", "H2_new"});
  auto outs = n.run({f32({}, {0.1f}), int64Scalar(0), f32({1}, {1}), f32({1}, {5}), f32({1}, {1}),
                     f32({1}, {0}), f32({1}, {0}), f32({1}, {3}), f32({1}, {0}), f32({1}, {1})});
  double alpha = 0.9f, beta = 0.999f, eps = 1e-6f;
  double v1 = (1 - alpha) * 1, h1 = (1 - beta) * 1;
  checkClose(outs[2], {v1});
  checkClose(outs[4], {h1});
  checkClose(outs[0], {1 - 0.1f * v1 / (std::sqrt(h1) + eps)});
  // Group 2 has a zero gradient: both averages decay and X follows the old momentum.
  checkClose(outs[3], {alpha * 3});
  checkClose(outs[5], {beta});
  checkClose(outs[1], {5 - 0.1f * alpha * 3 / (std::sqrt(beta) + eps)});

  OneNode bad(kTraining, "Adam", {"R", "T", "X", "G", "V"}, {"X_new", "V_new"});
  CHECK_THROWS_AS(bad.run({f32({}, {0.1f}), int64Scalar(0), f32({1}, {1}), f32({1}, {1}), f32({1}, {1})}),
                  Error);
}

TEST_CASE("FlexAttention: exact softmax, GQA, score_mod and prob_mod", "[ref]") {
  // One query against two keys with scale 1: scores [0, ln 3], softmax [1/4, 3/4], so
  // Y = V0 / 4 + 3 V1 / 4. Two query heads share the single K/V head.
  float ln3 = std::log(3.0f);
  OneNode n(kPreview, "FlexAttention", {"Q", "K", "V"}, {"Y"});
  n.node->setAttr(Attribute::ofFloat("scale", 1.0f));
  auto feeds = [&] {
    return std::vector<Tensor>{f32({1, 2, 1, 1}, {1, 2}), f32({1, 1, 2, 1}, {0, ln3}),
                               f32({1, 1, 2, 2}, {4, 0, 8, 4})};
  };
  auto outs = n.run(feeds());
  REQUIRE(outs[0].tensor->dims == std::vector<int64_t>{1, 2, 1, 2});
  // Head 1 has Q = 2: scores [0, 2 ln 3], softmax [1/10, 9/10].
  checkClose(outs[0], {7, 3, 0.4 + 7.2, 3.6});

  SECTION("the default scale is 1/sqrt(head_size)") {
    OneNode wide(kPreview, "FlexAttention", {"Q", "K", "V"}, {"Y"});
    // head_size 4: Q.K1 = 2 ln 3, scaled by 1/2 gives ln 3 again: Y = 10 / 4.
    auto w = wide.run({f32({1, 1, 1, 4}, {1, 1, 1, 1}), f32({1, 1, 2, 4}, {0, 0, 0, 0, ln3 / 2, ln3 / 2, ln3 / 2, ln3 / 2}),
                       f32({1, 1, 2, 1}, {10, 0})});
    checkClose(w[0], {2.5});
  }
  SECTION("score_mod reads an outer-scope value; a -inf masks a key out") {
    Value* bias = n.m.graph->createValue("bias");
    n.m.graph->addInput(bias);
    n.ins.push_back("bias");
    auto body = std::make_shared<Graph>(n.m.graph.get());
    Value* s = body->createValue("s");
    body->addInput(s);
    Node* add = body->addNode("Add", {s, bias}, {"s_out"});
    body->addOutput(add->output(0));
    n.node->setAttr(graphAttr("score_mod", body));
    auto f = feeds();
    f.push_back(f32({2}, {0, -INFINITY}));
    auto m = n.run(std::move(f));
    checkClose(m[0], {4, 0, 4, 0});
  }
  SECTION("prob_mod scales the probabilities") {
    auto body = std::make_shared<Graph>(n.m.graph.get());
    Value* p = body->createValue("p");
    body->addInput(p);
    Node* add = body->addNode("Add", {p, p}, {"p_out"});
    body->addOutput(add->output(0));
    n.node->setAttr(graphAttr("prob_mod", body));
    auto m = n.run(feeds());
    checkClose(m[0], {14, 6, 2 * 7.6, 7.2});
  }
}

TEST_CASE("FlexAttention: float16 in and out, malformed shapes refused", "[ref]") {
  OneNode n(kPreview, "FlexAttention", {"Q", "K", "V"}, {"Y"});
  n.node->setAttr(Attribute::ofFloat("scale", 1.0f));
  auto outs = n.run({halves({1, 1, 1, 1}, {1}), halves({1, 1, 2, 1}, {0, 0}), halves({1, 1, 2, 1}, {1, 3})});
  CHECK(outs[0].tensor->dtype() == DType::Float16);
  checkClose(outs[0], {2});

  // Three query heads cannot share two K/V heads.
  CHECK_THROWS_AS(n.run({f32({1, 3, 1, 1}, {1, 1, 1}), f32({1, 2, 1, 1}, {1, 1}), f32({1, 2, 1, 1}, {1, 1})}),
                  Error);
  // Rank 3 is not accepted.
  CHECK_THROWS_AS(n.run({f32({1, 1, 1}, {1}), f32({1, 1, 1}, {1}), f32({1, 1, 1}, {1})}), Error);
}
