// test_ref_ml.cpp: reference kernels of the ai.onnx.ml domain and of the string, random and
// signal ops, on corners the ONNX node tests miss: maps in and out (ZipMap, DictVectorizer,
// CastMap), LabelEncoder NaN keys and repeated keys, TreeEnsemble aggregation, membership and
// missing values, classifier post transforms, string splitting and case folding, RE2 spellings,
// TF-IDF weights, distribution properties of the random ops, DFT round trips and windows.
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

const std::string kMl = "ai.onnx.ml";

}  // namespace

TEST_CASE("LabelEncoder-4 maps NaN keys, lets the last repeated key win, and uses typed defaults", "[ref]") {
  Tensor keys = f32({4}, {1.0f, NAN, 2.0f, 1.0f});
  Tensor vals = tensorOf<int16_t>(DType::Int16, {4}, {10, 20, 30, 40});
  auto out = runOp("LabelEncoder", kMl, {T(f32({5}, {1.0f, -NAN, 2.0f, 3.0f, NAN}))},
                   {Attribute::ofTensor("keys_tensor", keys), Attribute::ofTensor("values_tensor", vals)}, 1, 21, 4);
  CHECK(out[0].tensor->dtype() == DType::Int16);
  CHECK(valuesOf(out[0]) == std::vector<double>{40, 20, 30, -1, 20});
  // Version 2: int64 -> string with default_string.
  auto s = runOp("LabelEncoder", kMl, {T(i64({3}, {5, 6, 7}))},
                 {Attribute::ofInts("keys_int64s", {5, 7}), stringsAttr("values_strings", {"five", "seven"}),
                  Attribute::ofString("default_string", "?")}, 1, 17, 2);
  CHECK(s[0].tensor->strings == std::vector<std::string>{"five", "?", "seven"});
}

TEST_CASE("ZipMap outputs one map per row; DictVectorizer and CastMap read maps", "[ref]") {
  auto z = runOp("ZipMap", kMl, {T(f32({2, 2}, {0.25f, 0.75f, 1.0f, 0.0f}))}, {stringsAttr("classlabels_strings", {"a", "b"})});
  REQUIRE(z[0].kind == RtValue::Kind::Sequence);
  REQUIRE(z[0].elements.size() == 2);
  const RtValue& m1 = z[0].elements[1];
  REQUIRE(m1.kind == RtValue::Kind::Map);
  CHECK(m1.mapKeys->strings == std::vector<std::string>{"a", "b"});
  REQUIRE(m1.elements.size() == 2);
  CHECK(valuesOf(m1.elements[0]) == std::vector<double>{1.0});

  RtValue map;
  map.kind = RtValue::Kind::Map;
  map.mapKeys = std::make_shared<const RtTensor>(i64({3}, {7, 2, 4}));
  for (float f : {7.5f, 2.5f, 4.5f}) map.elements.push_back(T(f32({}, {f})));
  auto d = runOp("DictVectorizer", kMl, {map}, {Attribute::ofInts("int64_vocabulary", {4, 9, 7})});
  CHECK(d[0].tensor->dims == std::vector<int64_t>{1, 3});
  CHECK(valuesOf(d[0]) == std::vector<double>{4.5, 0, 7.5});

  auto dense = runOp("CastMap", kMl, {map}, {Attribute::ofString("cast_to", "TO_INT64")});
  CHECK(dense[0].tensor->dtype() == DType::Int64);
  CHECK(valuesOf(dense[0]) == std::vector<double>{2, 4, 7});
  auto sparse = runOp("CastMap", kMl, {map}, {Attribute::ofString("map_form", "SPARSE"), Attribute::ofInt("max_map", 8)});
  CHECK(valuesOf(sparse[0]) == std::vector<double>{0, 0, 2.5, 0, 4.5, 0, 0, 7.5});
  CHECK_THROWS(runOp("CastMap", kMl, {map}, {Attribute::ofString("map_form", "SPARSE"), Attribute::ofInt("max_map", 5)}));
}

namespace {

Tensor modes(std::vector<uint8_t> m) { return tensorOf<uint8_t>(DType::UInt8, {static_cast<int64_t>(m.size())}, m); }

/// A TreeEnsemble-5 node with two trees over 2 targets: tree 0 tests x0 <= 1 (NaN goes true),
/// tree 1 is a single leaf for target 0.
std::vector<Attribute> twoTrees(int64_t aggregate, uint8_t mode0 = 0) {
  return {Attribute::ofInts("nodes_featureids", {0, 0}),
          Attribute::ofTensor("nodes_modes", modes({mode0, 0})),
          Attribute::ofTensor("nodes_splits", f32({2}, {1.0f, 0.0f})),
          Attribute::ofInts("nodes_truenodeids", {0, 2}),
          Attribute::ofInts("nodes_trueleafs", {1, 1}),
          Attribute::ofInts("nodes_falsenodeids", {1, 2}),
          Attribute::ofInts("nodes_falseleafs", {1, 1}),
          Attribute::ofInts("nodes_missing_value_tracks_true", {1, 0}),
          Attribute::ofInts("leaf_targetids", {0, 0, 0}),
          Attribute::ofTensor("leaf_weights", f32({3}, {10.0f, 20.0f, 4.0f})),
          Attribute::ofInts("tree_roots", {0, 1}),
          Attribute::ofInt("n_targets", 2),
          Attribute::ofInt("aggregate_function", aggregate)};
}

}  // namespace

TEST_CASE("TreeEnsemble-5 aggregates, routes NaN, handles leaf roots and set membership", "[ref]") {
  Tensor x = f32({3, 1}, {0.5f, 3.0f, NAN});
  auto sum = runOp("TreeEnsemble", kMl, {T(x)}, twoTrees(1));
  CHECK(valuesOf(sum[0]) == std::vector<double>{14, 0, 24, 0, 14, 0});
  auto avg = runOp("TreeEnsemble", kMl, {T(x)}, twoTrees(0));
  CHECK(valuesOf(avg[0]) == std::vector<double>{7, 0, 12, 0, 7, 0});
  // MIN: target 1 is never reached and stays 0 rather than FLT_MAX.
  auto mn = runOp("TreeEnsemble", kMl, {T(x)}, twoTrees(2));
  CHECK(valuesOf(mn[0]) == std::vector<double>{4, 0, 4, 0, 4, 0});
  // BRANCH_MEMBER with the set {3, 5}.
  auto attrs = twoTrees(1, 6);
  attrs.push_back(Attribute::ofTensor("membership_values", f32({3}, {3.0f, 5.0f, NAN})));
  auto mem = runOp("TreeEnsemble", kMl, {T(x)}, attrs);
  CHECK(valuesOf(mem[0]) == std::vector<double>{24, 0, 14, 0, 14, 0});
  // Double input gives double output.
  auto dbl = runOp("TreeEnsemble", kMl, {T(tensorOf<double>(DType::Double, {1, 1}, {0.0}))}, twoTrees(1));
  CHECK(dbl[0].tensor->dtype() == DType::Double);
}

TEST_CASE("TreeEnsembleRegressor and Classifier (legacy encoding)", "[ref]") {
  std::vector<Attribute> nodes = {Attribute::ofInts("nodes_treeids", {0, 0, 0}), Attribute::ofInts("nodes_nodeids", {0, 1, 2}),
                                  Attribute::ofInts("nodes_featureids", {1, 0, 0}), Attribute::ofFloats("nodes_values", {0.5f, 0, 0}),
                                  stringsAttr("nodes_modes", {"BRANCH_LT", "LEAF", "LEAF"}),
                                  Attribute::ofInts("nodes_truenodeids", {1, 0, 0}), Attribute::ofInts("nodes_falsenodeids", {2, 0, 0})};
  auto reg = nodes;
  for (auto a : {Attribute::ofInts("target_treeids", {0, 0}), Attribute::ofInts("target_nodeids", {1, 2}),
                 Attribute::ofInts("target_ids", {0, 0}), Attribute::ofFloats("target_weights", {-1.0f, 2.0f}),
                 Attribute::ofFloats("base_values", {0.5f})})
    reg.push_back(a);
  auto r = runOp("TreeEnsembleRegressor", kMl, {T(f32({2, 2}, {0, 0, 0, 1}))}, reg, 1, 21, 3);
  CHECK(valuesOf(r[0]) == std::vector<double>{-0.5, 2.5});
  auto cls = nodes;
  for (auto a : {Attribute::ofInts("class_treeids", {0, 0}), Attribute::ofInts("class_nodeids", {1, 2}),
                 Attribute::ofInts("class_ids", {0, 1}), Attribute::ofFloats("class_weights", {1.0f, 1.0f}),
                 Attribute::ofInts("classlabels_int64s", {10, 20}), Attribute::ofString("post_transform", "SOFTMAX")})
    cls.push_back(a);
  auto c = runOp("TreeEnsembleClassifier", kMl, {T(f32({2, 2}, {0, 0, 0, 1}))}, cls, 2, 21, 1);
  CHECK(valuesOf(c[0]) == std::vector<double>{10, 20});
  auto z = valuesOf(c[1]);
  CHECK(z[0] == Approx(std::exp(1.0) / (std::exp(1.0) + 1.0)));
  CHECK(z[0] + z[1] == Approx(1.0));
}

TEST_CASE("LinearClassifier binary model scores [-s, s]; SVMs", "[ref]") {
  auto out = runOp("LinearClassifier", kMl, {T(f32({2, 2}, {1, 1, -1, -2}))},
                   {Attribute::ofFloats("coefficients", {1.0f, 2.0f}), Attribute::ofFloats("intercepts", {0.5f}),
                    Attribute::ofInts("classlabels_ints", {3, 4}), Attribute::ofString("post_transform", "LOGISTIC")},
                   2);
  CHECK(valuesOf(out[0]) == std::vector<double>{4, 3});
  auto z = valuesOf(out[1]);
  REQUIRE(z.size() == 4);
  CHECK(z[1] == Approx(1 / (1 + std::exp(-3.5))));
  CHECK(z[0] + z[1] == Approx(1.0));
  CHECK(z[3] == Approx(1 / (1 + std::exp(4.5))));

  auto svr = runOp("SVMRegressor", kMl, {T(f32({2, 2}, {1, 2, 0, 0}))},
                   {Attribute::ofFloats("coefficients", {2.0f}), Attribute::ofFloats("support_vectors", {1.0f, 1.0f}),
                    Attribute::ofInt("n_supports", 1), Attribute::ofFloats("rho", {-1.0f}), Attribute::ofString("kernel_type", "RBF"),
                    Attribute::ofFloats("kernel_params", {0.5f, 0, 0})});
  auto y = valuesOf(svr[0]);
  CHECK(y[0] == Approx(2 * std::exp(-0.5) - 1));
  CHECK(y[1] == Approx(2 * std::exp(-1.0) - 1));

  // Three classes, one support vector each: one-vs-one votes.
  auto svc = runOp("SVMClassifier", kMl, {T(f32({1, 1}, {2.0f}))},
                   {Attribute::ofInts("classlabels_ints", {0, 1, 2}), Attribute::ofInts("vectors_per_class", {1, 1, 1}),
                    Attribute::ofFloats("support_vectors", {0.0f, 1.0f, 2.0f}),
                    Attribute::ofFloats("coefficients", {1, -1, 0, 1, 0, -1}), Attribute::ofFloats("rho", {0, 0, 0}),
                    Attribute::ofString("kernel_type", "LINEAR")},
                   2);
  CHECK(valuesOf(svc[0]).size() == 1);
  CHECK(svc[1].tensor->dims == std::vector<int64_t>{1, 3});
}

TEST_CASE("Normalizer, Scaler, Imputer, OneHotEncoder, Binarizer, ArrayFeatureExtractor", "[ref]") {
  auto l2 = runOp("Normalizer", kMl, {T(f32({2, 2}, {3, -4, 0, 0}))}, {Attribute::ofString("norm", "L2")});
  CHECK(valuesOf(l2[0]) == std::vector<double>{0.6f, -0.8f, 0, 0});
  auto l1 = runOp("Normalizer", kMl, {T(i64({1, 2}, {1, -3}))}, {Attribute::ofString("norm", "L1")});
  CHECK(valuesOf(l1[0]) == std::vector<double>{0.25, -0.75});
  auto sc = runOp("Scaler", kMl, {T(i64({2, 2}, {1, 2, 3, 4}))},
                  {Attribute::ofFloats("offset", {1.0f}), Attribute::ofFloats("scale", {2.0f, 0.5f})});
  CHECK(valuesOf(sc[0]) == std::vector<double>{0, 0.5, 4, 1.5});
  auto im = runOp("Imputer", kMl, {T(f32({2, 2}, {NAN, 1, 2, NAN}))},
                  {Attribute::ofFloats("imputed_value_floats", {7, 8}), Attribute::ofFloat("replaced_value_float", NAN)});
  CHECK(valuesOf(im[0]) == std::vector<double>{7, 1, 2, 8});
  auto oh = runOp("OneHotEncoder", kMl, {T(f32({2}, {2.7f, 9.0f}))}, {Attribute::ofInts("cats_int64s", {1, 2})});
  CHECK(oh[0].tensor->dims == std::vector<int64_t>{2, 2});
  CHECK(valuesOf(oh[0]) == std::vector<double>{0, 1, 0, 0});
  CHECK_THROWS_AS(runOp("OneHotEncoder", kMl, {T(f32({1}, {9.0f}))}, {Attribute::ofInts("cats_int64s", {1}), Attribute::ofInt("zeros", 0)}), Error);
  auto bz = runOp("Binarizer", kMl, {T(i64({3}, {-1, 5, 6}))}, {Attribute::ofFloat("threshold", 5.0f)});
  CHECK(valuesOf(bz[0]) == std::vector<double>{0, 0, 1});
  auto bn = runOp("Binarizer", kMl, {T(f32({2}, {NAN, 0.5f}))}, {});
  CHECK(valuesOf(bn[0]) == std::vector<double>{0, 1});
  auto af = runOp("ArrayFeatureExtractor", kMl, {T(str({2, 3}, {"a", "b", "c", "d", "e", "f"})), T(i64({2}, {2, 0}))}, {});
  CHECK(af[0].tensor->strings == std::vector<std::string>{"c", "a", "f", "d"});
  CHECK_THROWS(runOp("ArrayFeatureExtractor", kMl, {T(f32({3}, {1, 2, 3})), T(i64({1}, {3}))}, {}));
}

TEST_CASE("StringSplit follows Python's str.split; StringNormalizer folds case and drops stop words", "[ref]") {
  auto ws = runOp("StringSplit", "", {T(str({3}, {"  a  b c ", "", "x"}))}, {Attribute::ofInt("maxsplit", 1)}, 2);
  CHECK(ws[0].tensor->dims == std::vector<int64_t>{3, 2});
  CHECK(ws[0].tensor->strings == std::vector<std::string>{"a", "b c ", "", "", "x", ""});
  CHECK(valuesOf(ws[1]) == std::vector<double>{2, 0, 1});
  auto d = runOp("StringSplit", "", {T(str({1}, {""}))}, {Attribute::ofString("delimiter", "::")}, 2);
  CHECK(valuesOf(d[1]) == std::vector<double>{1});

  auto n = runOp("StringNormalizer", "", {T(str({1, 3}, {"Straße", "über", "ÉTÉ"}))},
                 {Attribute::ofString("case_change_action", "UPPER"), stringsAttr("stopwords", {"ÜBER"})});
  CHECK(n[0].tensor->dims == std::vector<int64_t>{1, 2});
  CHECK(n[0].tensor->strings == std::vector<std::string>{"STRAßE", "ÉTÉ"});
  auto none = runOp("StringNormalizer", "", {T(str({1, 1}, {"a"}))}, {stringsAttr("stopwords", {"A"})});
  CHECK(none[0].tensor->dims == std::vector<int64_t>{1, 1});
  CHECK(none[0].tensor->strings == std::vector<std::string>{""});

  auto c = runOp("StringConcat", "", {T(str({2, 1}, {"a", "b"})), T(str({3}, {"1", "2", ""}))}, {});
  CHECK(c[0].tensor->strings == std::vector<std::string>{"a1", "a2", "a", "b1", "b2", "b"});
}

TEST_CASE("RegexFullMatch takes RE2 spellings: (?i), named groups, \\A and \\z", "[ref]") {
  auto r = runOp("RegexFullMatch", "", {T(str({3}, {"Hello-42", "hello-x", "HELLO-7"}))},
                 {Attribute::ofString("pattern", R"((?i)\Ahello-(?P<num>\d+)\z)")});
  CHECK(valuesOf(r[0]) == std::vector<double>{1, 0, 1});
  // Full match, not search.
  auto f = runOp("RegexFullMatch", "", {T(str({1}, {"xab"}))}, {Attribute::ofString("pattern", "ab")});
  CHECK(valuesOf(f[0]) == std::vector<double>{0});
  CHECK_THROWS(runOp("RegexFullMatch", "", {T(str({1}, {"a"}))}, {Attribute::ofString("pattern", "(")}));
}

TEST_CASE("TfIdfVectorizer counts skip-grams once per skip and weights by pool n-gram", "[ref]") {
  // Pool: 1-grams {1, 2}, 2-gram {1, 2}; output coordinates permuted.
  std::vector<Attribute> a = {Attribute::ofString("mode", "TFIDF"), Attribute::ofInt("min_gram_length", 1),
                              Attribute::ofInt("max_gram_length", 2), Attribute::ofInt("max_skip_count", 1),
                              Attribute::ofInts("ngram_counts", {0, 2}), Attribute::ofInts("ngram_indexes", {2, 0, 1}),
                              Attribute::ofInts("pool_int64s", {1, 2, 1, 2}), Attribute::ofFloats("weights", {10, 100, 1000})};
  auto out = runOp("TfIdfVectorizer", "", {T(tensorOf<int32_t>(DType::Int32, {5}, {1, 2, 2, 1, 3}))}, a);
  // 1 twice, 2 twice; bigram (1,2) at skip 0 once and (1,_,2) at skip 1 once.
  CHECK(valuesOf(out[0]) == std::vector<double>{200, 2000, 20});
}

TEST_CASE("Random ops: seeded runs repeat, distributions have the right moments", "[ref]") {
  auto seeded = [](uint64_t execSeed) {
    return valuesOf(runOp("RandomNormal", "", {}, {Attribute::ofInts("shape", {4}), Attribute::ofFloat("seed", 3.0f)}, 1, 21, 5, execSeed)[0]);
  };
  CHECK(seeded(1) == seeded(2));
  auto n = valuesOf(runOp("RandomNormal", "", {},
                          {Attribute::ofInts("shape", {200, 100}), Attribute::ofFloat("mean", 2.0f), Attribute::ofFloat("scale", 3.0f),
                           Attribute::ofInt("dtype", static_cast<int64_t>(DType::Double))})[0]);
  double mean = 0, var = 0;
  for (double v : n) mean += v;
  mean /= static_cast<double>(n.size());
  for (double v : n) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n.size());
  CHECK(mean == Approx(2.0).margin(0.1));
  CHECK(var == Approx(9.0).epsilon(0.05));

  auto u = runOp("RandomUniformLike", "", {T(tensorOf<uint16_t>(DType::Float16, {100, 100}, std::vector<uint16_t>(10000, 0)))},
                 {Attribute::ofFloat("low", -1.0f), Attribute::ofFloat("high", 3.0f)});
  CHECK(u[0].tensor->dtype() == DType::Float16);
  auto uv = valuesOf(u[0]);
  double um = 0;
  for (double v : uv) {
    CHECK((v >= -1.0 && v <= 3.0));
    um += v;
  }
  CHECK(um / 10000 == Approx(1.0).margin(0.05));

  auto b = valuesOf(runOp("Bernoulli", "", {T(f32({10000}, std::vector<float>(10000, 0.3f)))},
                          {Attribute::ofInt("dtype", static_cast<int64_t>(DType::Int32))})[0]);
  double bm = 0;
  for (double v : b) {
    CHECK((v == 0 || v == 1));
    bm += v;
  }
  CHECK(bm / 10000 == Approx(0.3).margin(0.02));

  // log-probabilities of 1:3, class 2 impossible.
  auto m = runOp("Multinomial", "", {T(f32({1, 3}, {0.0f, std::log(3.0f), -INFINITY}))},
                 {Attribute::ofInt("sample_size", 8000), Attribute::ofInt("dtype", static_cast<int64_t>(DType::Int64))});
  CHECK(m[0].tensor->dims == std::vector<int64_t>{1, 8000});
  double ones = 0;
  for (double v : valuesOf(m[0])) {
    CHECK(v != 2);
    ones += v;
  }
  CHECK(ones / 8000 == Approx(0.75).margin(0.02));
}

TEST_CASE("DFT: rfft then irfft round trips odd lengths; dft_length pads; axis input; float16", "[ref]") {
  std::vector<float> sig = {1, -2, 3, 0.5f, 4};
  auto fwd = runOp("DFT", "", {T(f32({1, 5, 1}, sig)), RtValue(), T(i64({}, {1}))}, {Attribute::ofInt("onesided", 1)}, 1, 20);
  CHECK(fwd[0].tensor->dims == std::vector<int64_t>{1, 3, 2});
  CHECK(valuesOf(fwd[0])[0] == Approx(6.5));
  auto inv = runOp("DFT", "", {fwd[0], T(i64({}, {5})), T(i64({}, {-2}))},
                   {Attribute::ofInt("onesided", 1), Attribute::ofInt("inverse", 1)}, 1, 20);
  CHECK(inv[0].tensor->dims == std::vector<int64_t>{1, 5, 1});
  auto back = valuesOf(inv[0]);
  for (size_t i = 0; i < sig.size(); ++i) CHECK(back[i] == Approx(sig[i]).margin(1e-5));
  // Complex in, full inverse, DFT-17 axis attribute on a [2, N, 2] tensor with padding to 4.
  auto c = runOp("DFT", "", {T(f32({2, 2, 2}, {1, 0, 0, 1, 2, 0, 0, 0})), T(i64({}, {4}))},
                 {Attribute::ofInt("axis", 1), Attribute::ofInt("inverse", 1)}, 1, 17);
  CHECK(c[0].tensor->dims == std::vector<int64_t>{2, 4, 2});
  auto cv = valuesOf(c[0]);
  // x = [1, i] -> ifft_4 = (1/4) [1 + i, 1 + i*i ... ]: element 1 = (1 + i * e^{i pi/2}) / 4 = 0.
  CHECK(cv[0] == Approx(0.25));
  CHECK(cv[1] == Approx(0.25));
  CHECK(cv[2] == Approx(0.0).margin(1e-7));
  CHECK(cv[8] == Approx(0.5));
  auto h = runOp("DFT", "", {T(tensorOf<uint16_t>(DType::Float16, {1, 2, 1}, {0x3c00, 0x3c00}))}, {}, 1, 20);
  CHECK(h[0].tensor->dtype() == DType::Float16);
  CHECK(valuesOf(h[0]) == std::vector<double>{2, 0, 0, 0});
}

TEST_CASE("STFT frames complex signals; windows and MelWeightMatrix", "[ref]") {
  auto s = runOp("STFT", "", {T(f32({1, 4, 2}, {1, 0, 0, 1, 1, 0, 0, 1})), T(i64({}, {2})), RtValue(), T(i64({}, {2}))},
                 {Attribute::ofInt("onesided", 0)});
  CHECK(s[0].tensor->dims == std::vector<int64_t>{1, 2, 2, 2});
  CHECK(valuesOf(s[0]) == std::vector<double>{1, 1, 1, -1, 1, 1, 1, -1});

  auto hann = valuesOf(runOp("HannWindow", "", {T(i64({}, {4}))}, {})[0]);
  CHECK(hann[0] == Approx(0.0).margin(1e-7));
  CHECK(hann[2] == Approx(1.0));
  auto one = valuesOf(runOp("HammingWindow", "", {T(i64({}, {1}))}, {Attribute::ofInt("periodic", 0)})[0]);
  CHECK(one == std::vector<double>{1.0});
  auto black = valuesOf(runOp("BlackmanWindow", "", {T(i64({}, {3}))}, {Attribute::ofInt("periodic", 0)})[0]);
  CHECK(black[0] == Approx(0.0).margin(1e-6));
  CHECK(black[1] == Approx(1.0));
  auto ints = runOp("HannWindow", "", {T(i64({}, {3}))},
                    {Attribute::ofInt("periodic", 0), Attribute::ofInt("output_datatype", static_cast<int64_t>(DType::Int8))});
  CHECK(ints[0].tensor->dtype() == DType::Int8);
  CHECK(valuesOf(ints[0]) == std::vector<double>{0, 1, 0});

  auto mel = runOp("MelWeightMatrix", "",
                   {T(i64({}, {4})), T(i64({}, {32})), T(i64({}, {16000})), T(f32({}, {0})), T(f32({}, {8000}))}, {});
  CHECK(mel[0].tensor->dims == std::vector<int64_t>{17, 4});
  auto mv = valuesOf(mel[0]);
  for (int64_t j = 0; j < 4; ++j) {
    double peak = 0;
    for (int64_t i = 0; i < 17; ++i) peak = std::max(peak, mv[i * 4 + j]);
    CHECK(peak == Approx(1.0));
  }
}
