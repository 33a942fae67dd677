// test_ref_nn.cpp: reference kernels of linear algebra, reductions, normalisation and attention
// on corners the ONNX node tests miss: old opset versions (coerced-2D Softmax, axes attributes,
// Gemm broadcast, Dropout before 12), empty reductions and noop axes, NaN propagation, integer
// wrap, per-row zero points, round-half-even in QLinearMatMul, Einsum traces and ellipses,
// double precision in MatMul, and fully masked attention rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "tests/unit/ref_test_util.h"

using namespace onnxtool;
using namespace onnxtool::testutil;

namespace {

std::vector<float> runF(const std::string& op, int64_t opset, std::vector<In> inputs,
                        std::vector<Attribute> attrs = {}) {
  return values<float>(runOp(op, opset, std::move(inputs), std::move(attrs)).at(0));
}

void requireNear(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i])) REQUIRE(std::isnan(got[i]));
    else if (std::isinf(want[i])) REQUIRE(got[i] == want[i]);
    else REQUIRE(std::fabs(got[i] - want[i]) <= tol + tol * std::fabs(want[i]));
  }
}

}  // namespace

TEST_CASE("MatMul keeps double precision and wraps integers", "[ref]") {
  std::vector<double> a{1.0 + 1e-12, 1.0}, b{1.0, 1.0};
  auto out = values<double>(runOp("MatMul", 13, {tensorOf(DType::Double, {1, 2}, a), tensorOf(DType::Double, {2, 1}, b)}).at(0));
  REQUIRE(out[0] == 2.0 + 1e-12);
  auto wrapped = values<int8_t>(runOp("MatMul", 13, {tensorOf<int8_t>(DType::Int8, {1, 2}, {100, 100}),
                                                    tensorOf<int8_t>(DType::Int8, {2}, {1, 1})}).at(0));
  REQUIRE(wrapped == std::vector<int8_t>{static_cast<int8_t>(200 - 256)});
  // Empty inner dimension gives zeros.
  auto z = runOp("MatMul", 13, {f32({2, 0}, {}), f32({0, 3}, {})}).at(0);
  REQUIRE(dimsOf(z) == std::vector<int64_t>{2, 3});
  REQUIRE(values<float>(z) == std::vector<float>(6, 0.0f));
}

TEST_CASE("MatMulInteger with per-row and per-column zero points", "[ref]") {
  auto a = tensorOf<uint8_t>(DType::UInt8, {2, 2}, {10, 20, 30, 40});
  auto b = tensorOf<int8_t>(DType::Int8, {2, 2}, {1, -1, 2, 3});
  auto azp = tensorOf<uint8_t>(DType::UInt8, {2}, {10, 30});
  auto bzp = tensorOf<int8_t>(DType::Int8, {2}, {1, -1});
  auto out = values<int32_t>(runOp("MatMulInteger", 10, {a, b, azp, bzp}).at(0));
  // A - azp = [[0,10],[0,10]], B - bzp = [[0,0],[1,4]]
  REQUIRE(out == std::vector<int32_t>{10, 40, 10, 40});
}

TEST_CASE("QLinearMatMul rounds half to even and saturates", "[ref]") {
  auto a = tensorOf<uint8_t>(DType::UInt8, {1, 1}, {5});
  auto b = tensorOf<uint8_t>(DType::UInt8, {1, 3}, {1, 3, 255});
  auto one = f32({}, {1.0f});
  auto half = f32({}, {0.5f});
  auto zp = tensorOf<uint8_t>(DType::UInt8, {}, {0});
  // y = 5 * b * 0.5: 2.5 -> 2, 7.5 -> 8, 637.5 -> 255
  auto out = values<uint8_t>(runOp("QLinearMatMul", 10, {a, one, zp, b, half, zp, one, zp}).at(0));
  REQUIRE(out == std::vector<uint8_t>{2, 8, 255});
  auto zpI = tensorOf<int8_t>(DType::Int8, {}, {0});
  auto ai = tensorOf<int8_t>(DType::Int8, {1, 1}, {-5});
  auto bi = tensorOf<int8_t>(DType::Int8, {1, 2}, {1, 127});
  auto outI = values<int8_t>(runOp("QLinearMatMul", 21, {ai, one, zpI, bi, half, zpI, one, zpI}).at(0));
  REQUIRE(outI == std::vector<int8_t>{-2, -128});  // -2.5 -> -2, -317.5 saturates
  // float8e4m3fn (21): 1.0 = 0x38, 2.0 = 0x40, 448 = 0x7E (the largest finite value).
  auto f8 = [](std::vector<int64_t> dims, std::vector<uint8_t> v) { return tensorOf<uint8_t>(DType::Float8E4M3FN, std::move(dims), v); };
  auto out8 = values<uint8_t>(runOp("QLinearMatMul", 21, {f8({1, 1}, {0x40}), one, f8({}, {0}), f8({1, 2}, {0x38, 0x7E}), one,
                                                          f8({}, {0}), one, f8({}, {0})}).at(0));
  REQUIRE(out8 == std::vector<uint8_t>{0x40, 0x7E});  // 2 * 448 saturates
}

TEST_CASE("Gemm transposes, scales and broadcasts C in old and new versions", "[ref]") {
  auto a = f32({2, 1}, {1, 2});  // transA -> (1, 2)
  auto b = f32({2, 2}, {1, 2, 3, 4});
  auto c = f32({2}, {10, 20});
  std::vector<Attribute> attrs{Attribute::ofInt("transA", 1), Attribute::ofFloat("alpha", 2.0f), Attribute::ofFloat("beta", 0.5f)};
  for (int64_t opset : {6, 7, 13}) {
    std::vector<Attribute> at = attrs;
    if (opset == 6) at.push_back(Attribute::ofInt("broadcast", 1));
    requireNear(runF("Gemm", opset, {a, b, c}, at), {2 * 7 + 5, 2 * 10 + 10});
  }
  // C is optional from 11; int32 computes exactly.
  auto ai = tensorOf<int32_t>(DType::Int32, {1, 2}, {1 << 30, 1});
  auto bi = tensorOf<int32_t>(DType::Int32, {2, 1}, {2, 3});
  REQUIRE(values<int32_t>(runOp("Gemm", 13, {ai, bi, std::nullopt}).at(0)) == std::vector<int32_t>{static_cast<int32_t>(0x80000003u)});
}

TEST_CASE("Einsum traces, diagonals, ellipses and implicit output", "[ref]") {
  auto m = f32({2, 2}, {1, 2, 3, 4});
  auto eq = [](const char* e) { return std::vector<Attribute>{Attribute::ofString("equation", e)}; };
  requireNear(runF("Einsum", 12, {m}, eq("ii")), {5});
  requireNear(runF("Einsum", 12, {m}, eq("ii->i")), {1, 4});
  requireNear(runF("Einsum", 12, {m}, eq("ij")), {1, 2, 3, 4});
  requireNear(runF("Einsum", 12, {m}, eq("ji")), {1, 3, 2, 4});  // implicit output sorts: "ij"
  requireNear(runF("Einsum", 12, {m, m}, eq("ij,jk")), {7, 10, 15, 22});
  auto batch = f32({2, 1, 2}, {1, 1, 2, 2});
  auto r = runOp("Einsum", 12, {batch, m}, eq("...ij,jk->...ik")).at(0);
  REQUIRE(dimsOf(r) == std::vector<int64_t>{2, 1, 2});
  requireNear(values<float>(r), {4, 6, 8, 12});
  auto ints = tensorOf<int32_t>(DType::Int32, {3}, {1, 2, 3});
  REQUIRE(values<int32_t>(runOp("Einsum", 12, {ints, ints}, eq("i,i->")).at(0)) == std::vector<int32_t>{14});
}

TEST_CASE("Det of batches, singular and permuted matrices", "[ref]") {
  auto x = f32({3, 2, 2}, {1, 2, 3, 4, 2, 4, 1, 2, 0, 1, 1, 0});
  requireNear(runF("Det", 11, {x}), {-2, 0, -1});
  auto d = tensorOf<double>(DType::Double, {3, 3}, {2, 0, 0, 0, 3, 0, 0, 0, 4});
  REQUIRE(values<double>(runOp("Det", 22, {d}).at(0)) == std::vector<double>{24});
}

TEST_CASE("Softmax coerces to 2-D before opset 13 and uses one axis after", "[ref]") {
  auto x = f32({1, 2, 2}, {0, 0, 0, 0});
  requireNear(runF("Softmax", 11, {x}), {0.25f, 0.25f, 0.25f, 0.25f});  // axis 1 spans 4 elements
  requireNear(runF("Softmax", 13, {x}), {0.5f, 0.5f, 0.5f, 0.5f});
  requireNear(runF("Hardmax", 1, {f32({2, 2}, {1, 3, 5, 5})}), {0, 1, 1, 0});  // first maximum wins
  requireNear(runF("LogSoftmax", 13, {f32({2}, {1000, 1000})}), {-std::log(2.0f), -std::log(2.0f)});
  auto nan = runF("Softmax", 13, {f32({2}, {NAN, 1})});
  REQUIRE((std::isnan(nan[0]) && std::isnan(nan[1])));
  REQUIRE(dimsOf(runOp("Softmax", 13, {f32({0, 3}, {})}).at(0)) == std::vector<int64_t>{0, 3});
}

TEST_CASE("Reduce empty sets give the identity of each reduction", "[ref]") {
  auto empty = f32({2, 0}, {});
  std::vector<Attribute> axis1{Attribute::ofInts("axes", {1}), Attribute::ofInt("keepdims", 0)};
  requireNear(runF("ReduceSum", 11, {empty}, axis1), {0, 0});
  requireNear(runF("ReduceProd", 11, {empty}, axis1), {1, 1});
  requireNear(runF("ReduceMax", 11, {empty}, axis1), {-kInf, -kInf});
  requireNear(runF("ReduceMin", 11, {empty}, axis1), {kInf, kInf});
  requireNear(runF("ReduceLogSum", 11, {empty}, axis1), {-kInf, -kInf});
  requireNear(runF("ReduceLogSumExp", 11, {empty}, axis1), {-kInf, -kInf});
  requireNear(runF("ReduceL2", 11, {empty}, axis1), {0, 0});
  auto imin = values<int32_t>(runOp("ReduceMin", 13, {tensorOf<int32_t>(DType::Int32, {0}, {})}).at(0));
  REQUIRE(imin == std::vector<int32_t>{std::numeric_limits<int32_t>::max()});
  auto bmax = values<uint8_t>(runOp("ReduceMax", 20, {tensorOf<uint8_t>(DType::Bool, {0}, {})}).at(0));
  REQUIRE(bmax == std::vector<uint8_t>{0});
}

TEST_CASE("Reduce axes: attribute, input, noop and keepdims", "[ref]") {
  auto x = f32({2, 2}, {1, -2, 3, -4});
  auto all = runOp("ReduceSum", 1, {x}).at(0);
  REQUIRE(dimsOf(all) == std::vector<int64_t>{1, 1});
  requireNear(values<float>(all), {-2});
  requireNear(runF("ReduceSum", 13, {x, i64({1}, {-1})}, {Attribute::ofInt("keepdims", 0)}), {-1, -1});
  // noop with empty axes: identity, but the element-wise part still applies.
  std::vector<Attribute> noop{Attribute::ofInt("noop_with_empty_axes", 1)};
  requireNear(runF("ReduceSum", 13, {x, i64({0}, {})}, noop), {1, -2, 3, -4});
  requireNear(runF("ReduceSumSquare", 18, {x, std::nullopt}, noop), {1, 4, 9, 16});
  requireNear(runF("ReduceL1", 18, {x}, noop), {1, 2, 3, 4});
  requireNear(runF("ReduceMean", 18, {x, i64({1}, {0})}), {2, -3});
  auto scalar = runOp("ReduceMax", 18, {f32({}, {7})}).at(0);
  REQUIRE(dimsOf(scalar).empty());
  requireNear(values<float>(scalar), {7});
}

TEST_CASE("Reduce NaN propagation and integer semantics", "[ref]") {
  requireNear(runF("ReduceMax", 18, {f32({3}, {1, NAN, 2})}), {NAN});
  requireNear(runF("ReduceMin", 18, {f32({3}, {NAN, 1, 2})}), {NAN});
  auto sum = values<int8_t>(runOp("ReduceSum", 13, {tensorOf<int8_t>(DType::Int8, {2}, {100, 100})}).at(0));
  REQUIRE(sum == std::vector<int8_t>{static_cast<int8_t>(-56)});
  auto mean = values<int32_t>(runOp("ReduceMean", 13, {tensorOf<int32_t>(DType::Int32, {2}, {-3, 0})}).at(0));
  REQUIRE(mean == std::vector<int32_t>{-1});  // -1.5 truncates toward zero
  auto big = values<int64_t>(runOp("ReduceMax", 18, {i64({2}, {(int64_t{1} << 62) + 1, 1 << 20})}).at(0));
  REQUIRE(big == std::vector<int64_t>{(int64_t{1} << 62) + 1});
  auto prod = values<uint8_t>(runOp("ReduceProd", 18, {tensorOf<uint8_t>(DType::UInt8, {2}, {16, 17})}).at(0));
  REQUIRE(prod == std::vector<uint8_t>{static_cast<uint8_t>(272 - 256)});
  requireNear(runF("ReduceLogSumExp", 18, {f32({2}, {1000, 1000})}), {1000 + std::log(2.0f)});
}

TEST_CASE("BatchNormalization inference and training outputs", "[ref]") {
  auto x = f32({2, 1, 2}, {1, 3, 5, 7});
  auto s = f32({1}, {2}), b = f32({1}, {1}), mean = f32({1}, {4}), var = f32({1}, {4});
  requireNear(runF("BatchNormalization", 9, {x, s, b, mean, var}, {Attribute::ofFloat("epsilon", 0)}), {-2, 0, 2, 4});
  auto outs = runOp("BatchNormalization", 15, {x, s, b, mean, var},
                    {Attribute::ofInt("training_mode", 1), Attribute::ofFloat("epsilon", 0), Attribute::ofFloat("momentum", 0.5f)}, 3);
  // batch mean 4, variance 5
  float inv = 1.0f / std::sqrt(5.0f);
  requireNear(values<float>(outs[0]), {1 - 6 * inv, 1 - 2 * inv, 1 + 2 * inv, 1 + 6 * inv});
  requireNear(values<float>(outs[1]), {4});
  requireNear(values<float>(outs[2]), {4.5f});
}

TEST_CASE("Normalisations: group (18 per group, 21 per channel), LpNorm of zero, MVN", "[ref]") {
  auto x = f32({1, 2, 2}, {0, 2, 0, 2});
  auto one2 = f32({2}, {1, 3});
  std::vector<Attribute> g1{Attribute::ofInt("num_groups", 1), Attribute::ofFloat("epsilon", 0)};
  requireNear(runF("GroupNormalization", 21, {x, one2, f32({2}, {0, 0})}, g1), {-1, 1, -3, 3});
  requireNear(runF("GroupNormalization", 18, {x, f32({1}, {2}), f32({1}, {1})}, g1), {-1, 3, -1, 3});
  requireNear(runF("LpNormalization", 1, {f32({2, 2}, {0, 0, 3, -4})}, {Attribute::ofInt("p", 1)}), {0, 0, 3.0f / 7, -4.0f / 7});
  auto mvn = runF("MeanVarianceNormalization", 13, {f32({2, 1, 1, 1}, {1, 3})});
  requireNear(mvn, {-1, 1}, 1e-6f);
  requireNear(runF("RMSNormalization", 23, {f32({2}, {3, 4}), f32({2}, {1, 2})}, {Attribute::ofFloat("epsilon", 0)}),
              {3 / std::sqrt(12.5f), 8 / std::sqrt(12.5f)});
}

TEST_CASE("Dropout is the identity in inference and reproducible with a seed", "[ref]") {
  auto x = f32({4}, {1, 2, 3, 4});
  auto old = runOp("Dropout", 7, {x}, {Attribute::ofFloat("ratio", 0.9f)}, 2);
  requireNear(values<float>(old[0]), {1, 2, 3, 4});
  requireNear(values<float>(old[1]), {1, 1, 1, 1});  // mask has the data type before 10
  auto inf = runOp("Dropout", 13, {x, f32({}, {0.5f})}, {}, 2);
  requireNear(values<float>(inf[0]), {1, 2, 3, 4});
  REQUIRE(values<uint8_t>(inf[1]) == std::vector<uint8_t>{1, 1, 1, 1});
  auto train = tensorOf<uint8_t>(DType::Bool, {}, {1});
  std::vector<Attribute> seed{Attribute::ofInt("seed", 0)};
  auto t1 = runOp("Dropout", 22, {x, f32({}, {0.5f}), train}, seed, 2);
  auto t2 = runOp("Dropout", 22, {x, f32({}, {0.5f}), train}, seed, 2);
  REQUIRE(values<float>(t1[0]) == values<float>(t2[0]));
  auto y = values<float>(t1[0]);
  auto mask = values<uint8_t>(t1[1]);
  // numpy: np.random.seed(0); np.random.uniform(size=4) = .549, .715, .603, .545: all kept
  REQUIRE(mask == std::vector<uint8_t>{1, 1, 1, 1});
  requireNear(y, {2, 4, 6, 8});
}

TEST_CASE("Attention zeroes fully masked rows and broadcasts GQA heads", "[ref]") {
  // B=1, Hq=2, Hkv=1, S=2, D=1 (4-D inputs).
  auto q = f32({1, 2, 2, 1}, {1, 1, 1, 1});
  auto k = f32({1, 1, 2, 1}, {1, 2});
  auto v = f32({1, 1, 2, 1}, {10, 20});
  auto mask = tensorOf<uint8_t>(DType::Bool, {2, 2}, {0, 0, 1, 1});  // query 0 sees nothing
  auto outs = runOp("Attention", 23, {q, k, v, mask}, {}, 4);
  auto y = values<float>(outs[0]);
  REQUIRE(dimsOf(outs[0]) == std::vector<int64_t>{1, 2, 2, 1});
  double p1 = 1 / (1 + std::exp(-1.0));  // softmax([1, 2])[1]
  requireNear(y, {0, static_cast<float>(10 + 10 * p1), 0, static_cast<float>(10 + 10 * p1)});
  // Causal with a float mask: masked positions stay -inf in mode 2.
  auto mode2 = runOp("Attention", 23, {q, k, v}, {Attribute::ofInt("is_causal", 1), Attribute::ofInt("qk_matmul_output_mode", 2)}, 4);
  auto qk = values<float>(mode2[3]);
  REQUIRE(qk[1] == -kInf);
  REQUIRE(qk[2] == 1.0f);
}

TEST_CASE("RotaryEmbedding rotates halves or interleaved pairs", "[ref]") {
  // 4-D input (B=1, H=1, S=1, D=4), position 0 with cos 0 and sin 1: a quarter turn.
  auto x = f32({1, 1, 1, 4}, {1, 2, 3, 4});
  auto cosC = f32({1, 2}, {0, 0}), sinC = f32({1, 2}, {1, 1});
  auto pos = i64({1, 1}, {0});
  requireNear(runF("RotaryEmbedding", 23, {x, cosC, sinC, pos}), {-3, -4, 1, 2});
  requireNear(runF("RotaryEmbedding", 23, {x, cosC, sinC, pos}, {Attribute::ofInt("interleaved", 1)}), {-2, 1, -4, 3});
  auto partial = f32({1, 1}, {0}), partialS = f32({1, 1}, {1});
  requireNear(runF("RotaryEmbedding", 23, {x, partial, partialS, pos}, {Attribute::ofInt("rotary_embedding_dim", 2)}), {-2, 1, 3, 4});
}

TEST_CASE("Losses: ignored targets weigh nothing in the mean", "[ref]") {
  auto logp = f32({2, 2}, {-1, -2, -3, -4});
  auto target = i64({2}, {1, 0});
  requireNear(runF("NegativeLogLikelihoodLoss", 13, {logp, target}), {2.5f});
  requireNear(runF("NegativeLogLikelihoodLoss", 13, {logp, target}, {Attribute::ofInt("ignore_index", 0)}), {2});
  requireNear(runF("NegativeLogLikelihoodLoss", 22, {logp, target, f32({2}, {1, 3})}, {Attribute::ofString("reduction", "sum")}), {9});
  auto sce = runOp("SoftmaxCrossEntropyLoss", 13, {f32({1, 2}, {0, 0}), i64({1}, {1})}, {Attribute::ofString("reduction", "none")}, 2);
  requireNear(values<float>(sce[0]), {std::log(2.0f)});
  requireNear(values<float>(sce[1]), {-std::log(2.0f), -std::log(2.0f)});
  REQUIRE_THROWS(runOp("NegativeLogLikelihoodLoss", 13, {logp, i64({2}, {2, 0})}));
}

TEST_CASE("Attention refuses V (or K) whose batch, heads or sequence differ from Q and K", "[ref][fuzz]") {
  // 3-D, one head each: Q [1, 2, 4], K [1, 3, 4]; V of sequence 6 was read with K's length 3 and
  // V of sequence 1 past its end.
  Tensor q = f32({1, 2, 4}, std::vector<float>(8, 0.5f));
  Tensor k = f32({1, 3, 4}, std::vector<float>(12, 0.25f));
  std::vector<Attribute> heads = {Attribute::ofInt("q_num_heads", 1), Attribute::ofInt("kv_num_heads", 1)};
  CHECK_THROWS_AS(runOp("Attention", 23, {q, k, f32({1, 1, 4}, std::vector<float>(4, 1))}, heads), Error);
  CHECK_THROWS_AS(runOp("Attention", 23, {q, k, f32({1, 6, 4}, std::vector<float>(24, 1))}, heads), Error);
  CHECK_THROWS_AS(runOp("Attention", 23, {q, k, f32({2, 3, 4}, std::vector<float>(24, 1))}, heads), Error);
  CHECK_THROWS_AS(runOp("Attention", 23, {q, f32({2, 3, 4}, std::vector<float>(24, 1)), f32({1, 3, 4}, std::vector<float>(12, 1))}, heads), Error);
  // 4-D with V of other heads than K.
  Tensor q4 = f32({1, 2, 1, 2}, {1, 2, 3, 4});
  Tensor k4 = f32({1, 1, 1, 2}, {1, 1});
  CHECK_THROWS_AS(runOp("Attention", 23, {q4, k4, f32({1, 2, 1, 2}, {1, 2, 3, 4})}), Error);
  CHECK(dimsOf(runOp("Attention", 23, {q, k, f32({1, 3, 4}, std::vector<float>(12, 1))}, heads)[0]) == I{1, 2, 4});
}
