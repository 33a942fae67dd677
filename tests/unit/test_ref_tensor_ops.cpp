// test_ref_tensor_ops.cpp: reference kernels of the data-movement family on corners the ONNX
// node tests miss: clamped and reversed slices, negative pads, legacy attribute versions, ties
// and NaN in TopK/ArgMax/Unique, integer wrap-around, sub-byte and string elements, empty tensors.
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

const int64_t kMax = std::numeric_limits<int64_t>::max();
const int64_t kMin = std::numeric_limits<int64_t>::min();

}  // namespace

TEST_CASE("Slice clamps starts and ends, and walks backwards with negative steps", "[ref]") {
  Tensor x = f32({5}, {0, 1, 2, 3, 4});
  // INT64_MAX/INT64_MIN as "to the end" in both directions.
  CHECK(values<float>(runOp("Slice", 13, {T(x), T(i64({1}, {1})), T(i64({1}, {kMax}))})[0]) == V{1, 2, 3, 4});
  CHECK(values<float>(runOp("Slice", 13, {T(x), T(i64({1}, {kMax})), T(i64({1}, {kMin})), std::nullopt,
                                          T(i64({1}, {-1}))})[0]) == V{4, 3, 2, 1, 0});
  CHECK(values<float>(runOp("Slice", 13, {T(x), T(i64({1}, {-2})), T(i64({1}, {-100})), T(i64({1}, {0})),
                                          T(i64({1}, {-2}))})[0]) == V{3, 1});
  // Start beyond the end and start after end: empty, not an error.
  CHECK(dimsOf(runOp("Slice", 13, {T(x), T(i64({1}, {7})), T(i64({1}, {9}))})[0]) == I{0});
  CHECK(dimsOf(runOp("Slice", 13, {T(x), T(i64({1}, {3})), T(i64({1}, {1}))})[0]) == I{0});
  // int32 starts/ends and a negative axis.
  Tensor m = f32({2, 3}, {0, 1, 2, 3, 4, 5});
  auto r = runOp("Slice", 13, {T(m), T(i32({1}, {1})), T(i32({1}, {3})), T(i32({1}, {-1}))});
  CHECK(dimsOf(r[0]) == I{2, 2});
  CHECK(values<float>(r[0]) == V{1, 2, 4, 5});
  // Slice-1 takes attributes.
  CHECK(values<float>(runOp("Slice", 1, {T(m)}, {ints("starts", {1}), ints("ends", {1000}), ints("axes", {0})})[0]) ==
        V{3, 4, 5});
  CHECK_THROWS_AS(runOp("Slice", 13, {T(x), T(i64({1}, {0})), T(i64({1}, {3})), std::nullopt, T(i64({1}, {0}))}), Error);
}

TEST_CASE("Pad modes with negative pads and axes", "[ref]") {
  Tensor x = f32({5}, {1, 2, 3, 4, 5});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return values<float>(runOp("Pad", 19, {T(x), T(i64({2}, pads))}, {Attribute::ofString("mode", mode)})[0]);
  };
  CHECK(pad("reflect", {2, 3}) == V{3, 2, 1, 2, 3, 4, 5, 4, 3, 2});
  CHECK(pad("edge", {2, 1}) == V{1, 1, 1, 2, 3, 4, 5, 5});
  CHECK(pad("wrap", {2, 1}) == V{4, 5, 1, 2, 3, 4, 5, 1});
  CHECK(pad("constant", {-1, 2}) == V{2, 3, 4, 5, 0, 0});
  // Negative on one side crops before the other side is padded from what is left.
  CHECK(pad("reflect", {-2, 2}) == V{3, 4, 5, 4, 3});
  CHECK(pad("edge", {1, -3}) == V{1, 1, 2});
  // Reflect beyond one period bounces back.
  CHECK(values<float>(runOp("Pad", 19, {T(f32({2}, {1, 2})), T(i64({2}, {3, 0}))},
                            {Attribute::ofString("mode", "reflect")})[0]) == V{2, 1, 2, 1, 2});
  // constant_value and a negative axis (opset 18).
  Tensor m = f32({2, 2}, {1, 2, 3, 4});
  auto r = runOp("Pad", 18, {T(m), T(i64({2}, {1, 0})), T(f32({}, {9})), T(i64({1}, {-1}))});
  CHECK(dimsOf(r[0]) == I{2, 3});
  CHECK(values<float>(r[0]) == V{9, 1, 2, 9, 3, 4});
  // Pad-2 attributes; Pad-11 on strings pads with the given string.
  CHECK(values<float>(runOp("Pad", 2, {T(x)}, {ints("pads", {1, 0}), Attribute::ofFloat("value", 7)})[0]) ==
        V{7, 1, 2, 3, 4, 5});
  auto s = runOp("Pad", 11, {T(str({1}, {"a"})), T(i64({2}, {1, 1})), T(str({}, {"-"}))});
  CHECK(s[0].tensor->strings == std::vector<std::string>{"-", "a", "-"});
}

TEST_CASE("Reshape resolves 0 and -1, and allowzero keeps zeros", "[ref]") {
  Tensor x = f32({2, 3, 4}, std::vector<float>(24, 1.0f));
  CHECK(dimsOf(runOp("Reshape", 13, {T(x), T(i64({3}, {0, -1, 2}))})[0]) == I{2, 6, 2});
  CHECK(dimsOf(runOp("Reshape", 1, {T(x)}, {ints("shape", {4, 0, -1})})[0]) == I{4, 3, 2});
  Tensor empty = f32({0, 3}, {});
  CHECK(dimsOf(runOp("Reshape", 14, {T(empty), T(i64({2}, {3, 0}))}, {one("allowzero", 1)})[0]) == I{3, 0});
  CHECK(dimsOf(runOp("Reshape", 14, {T(empty), T(i64({2}, {0, 3}))})[0]) == I{0, 3});
  CHECK_THROWS_AS(runOp("Reshape", 14, {T(x), T(i64({2}, {-1, -1}))}), Error);
  CHECK_THROWS_AS(runOp("Reshape", 14, {T(x), T(i64({2}, {5, -1}))}), Error);
}

TEST_CASE("Split by attribute, by input and by num_outputs", "[ref]") {
  Tensor x = f32({5}, {1, 2, 3, 4, 5});
  auto r = runOp("Split", 18, {T(x)}, {one("num_outputs", 3)}, 3);
  CHECK(values<float>(r[0]) == V{1, 2});
  CHECK(values<float>(r[1]) == V{3, 4});
  CHECK(values<float>(r[2]) == V{5});
  r = runOp("Split", 2, {T(x)}, {ints("split", {1, 4})}, 2);
  CHECK(values<float>(r[1]) == V{2, 3, 4, 5});
  r = runOp("Split", 13, {T(x), T(i64({3}, {0, 5, 0}))}, {}, 3);
  CHECK(dimsOf(r[0]) == I{0});
  CHECK(dimsOf(r[1]) == I{5});
  r = runOp("Split", 11, {T(f32({2, 2}, {1, 2, 3, 4}))}, {one("axis", -1)}, 2);
  CHECK(values<float>(r[1]) == V{2, 4});
  CHECK_THROWS_AS(runOp("Split", 13, {T(x), T(i64({2}, {1, 1}))}, {}, 2), Error);
}

TEST_CASE("Squeeze and Unsqueeze take axes as attribute before opset 13", "[ref]") {
  Tensor x = f32({1, 3, 1}, {1, 2, 3});
  CHECK(dimsOf(runOp("Squeeze", 11, {T(x)}, {ints("axes", {-1})})[0]) == I{1, 3});
  CHECK(dimsOf(runOp("Squeeze", 1, {T(x)})[0]) == I{3});
  CHECK(dimsOf(runOp("Squeeze", 13, {T(x), T(i64({1}, {0}))})[0]) == I{3, 1});
  CHECK(dimsOf(runOp("Squeeze", 13, {T(x)})[0]) == I{3});
  CHECK_THROWS_AS(runOp("Squeeze", 13, {T(x), T(i64({1}, {1}))}), Error);
  CHECK(dimsOf(runOp("Unsqueeze", 11, {T(x)}, {ints("axes", {0, -1})})[0]) == I{1, 1, 3, 1, 1});
  CHECK(dimsOf(runOp("Unsqueeze", 13, {T(f32({}, {5})), T(i64({2}, {1, 0}))})[0]) == I{1, 1});
  CHECK_THROWS_AS(runOp("Unsqueeze", 13, {T(x), T(i64({2}, {0, 0}))}), Error);
}

TEST_CASE("TopK keeps ties in index order and ranks NaN highest", "[ref]") {
  Tensor x = f32({6}, {3, 1, kNan, 3, 1, 2});
  auto r = runOp("TopK", 11, {T(x), T(i64({1}, {4}))}, {}, 2);
  auto v = values<float>(r[0]);
  CHECK(std::isnan(v[0]));
  CHECK(V(v.begin() + 1, v.end()) == V{3, 3, 2});
  CHECK(values<int64_t>(r[1]) == I{2, 0, 3, 5});
  r = runOp("TopK", 11, {T(x), T(i64({1}, {3}))}, {one("largest", 0)}, 2);
  CHECK(values<float>(r[0]) == V{1, 1, 2});
  CHECK(values<int64_t>(r[1]) == I{1, 4, 5});
  // TopK-1 reads k from the attribute; k = 0 gives empty outputs.
  r = runOp("TopK", 1, {T(f32({2, 2}, {1, 2, 4, 3}))}, {one("k", 1), one("axis", 0)}, 2);
  CHECK(values<float>(r[0]) == V{4, 3});
  CHECK(dimsOf(runOp("TopK", 11, {T(x), T(i64({1}, {0}))}, {}, 2)[1]) == I{0});
  CHECK_THROWS_AS(runOp("TopK", 11, {T(x), T(i64({1}, {7}))}, {}, 2), Error);
}

TEST_CASE("ArgMax/ArgMin: select_last_index, keepdims, NaN", "[ref]") {
  Tensor x = f32({2, 3}, {1, 5, 5, 2, 2, 0});
  CHECK(values<int64_t>(runOp("ArgMax", 13, {T(x)}, {one("axis", 1)})[0]) == I{1, 0});
  CHECK(values<int64_t>(runOp("ArgMax", 13, {T(x)}, {one("axis", 1), one("select_last_index", 1)})[0]) == I{2, 1});
  CHECK(values<int64_t>(runOp("ArgMin", 13, {T(x)}, {one("axis", -1), one("select_last_index", 1)})[0]) == I{0, 2});
  CHECK(dimsOf(runOp("ArgMin", 1, {T(x)}, {one("keepdims", 0)})[0]) == I{3});
  CHECK(dimsOf(runOp("ArgMin", 1, {T(x)})[0]) == I{1, 3});
  Tensor n = f32({4}, {1, kNan, 7, kNan});
  CHECK(values<int64_t>(runOp("ArgMax", 13, {T(n)})[0]) == I{1});
  CHECK(values<int64_t>(runOp("ArgMin", 13, {T(n)})[0]) == I{1});
  CHECK(values<int64_t>(runOp("ArgMax", 13, {T(n)}, {one("select_last_index", 1)})[0]) == I{3});
}

TEST_CASE("Unique: unsorted order, all four outputs, strings and axis", "[ref]") {
  Tensor x = f32({6}, {2, 1, 1, 3, 4, 3});
  auto r = runOp("Unique", 11, {T(x)}, {one("sorted", 0)}, 4);
  CHECK(values<float>(r[0]) == V{2, 1, 3, 4});
  CHECK(values<int64_t>(r[1]) == I{0, 1, 3, 4});
  CHECK(values<int64_t>(r[2]) == I{0, 1, 1, 2, 3, 2});
  CHECK(values<int64_t>(r[3]) == I{1, 2, 2, 1});
  r = runOp("Unique", 11, {T(x)}, {}, 4);
  CHECK(values<float>(r[0]) == V{1, 2, 3, 4});
  CHECK(values<int64_t>(r[1]) == I{1, 0, 3, 4});
  CHECK(values<int64_t>(r[2]) == I{1, 0, 0, 2, 3, 2});
  auto s = runOp("Unique", 11, {T(str({4}, {"b", "a", "b", ""}))}, {}, 1);
  CHECK(s[0].tensor->strings == std::vector<std::string>{"", "a", "b"});
  // Unsorted unique rows along axis 1 (columns), not axis 0.
  r = runOp("Unique", 11, {T(f32({2, 3}, {1, 0, 1, 2, 3, 2}))}, {one("axis", 1), one("sorted", 0)}, 3);
  CHECK(dimsOf(r[0]) == I{2, 2});
  CHECK(values<float>(r[0]) == V{1, 0, 2, 3});
  CHECK(values<int64_t>(r[2]) == I{0, 1, 0});
  // NaNs collapse into one, sorted last.
  r = runOp("Unique", 11, {T(f32({3}, {kNan, 1, kNan}))}, {}, 4);
  CHECK(values<int64_t>(r[3]) == I{1, 2});
}

TEST_CASE("CumSum/CumProd wrap integers and honour exclusive/reverse", "[ref]") {
  Tensor x = i32({3}, {std::numeric_limits<int32_t>::max(), 1, 2});
  auto v = values<int32_t>(runOp("CumSum", 14, {T(x), T(i32({}, {0}))})[0]);
  CHECK(v == std::vector<int32_t>{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int32_t>::min() + 2});
  Tensor f = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(values<float>(runOp("CumSum", 11, {T(f), T(i64({}, {-1}))}, {one("exclusive", 1), one("reverse", 1)})[0]) ==
        V{5, 3, 0, 11, 6, 0});
  CHECK(values<float>(runOp("CumProd", 26, {T(f), T(i64({1}, {0}))}, {one("exclusive", 1)})[0]) == V{1, 1, 1, 1, 2, 3});
  CHECK(dimsOf(runOp("CumSum", 14, {T(f32({0, 2}, {})), T(i64({}, {0}))})[0]) == I{0, 2});
}

TEST_CASE("ScatterElements/ScatterND reductions with duplicate and negative indices", "[ref]") {
  Tensor data = f32({1, 4}, {1, 2, 3, 4});
  Tensor idx = i64({1, 3}, {1, -3, 3});
  Tensor upd = f32({1, 3}, {10, 20, 0.5f});
  auto scatter = [&](const std::string& red) {
    return values<float>(runOp("ScatterElements", 18, {T(data), T(idx), T(upd)},
                               {one("axis", 1), Attribute::ofString("reduction", red)})[0]);
  };
  CHECK(scatter("none") == V{1, 20, 3, 0.5f});
  CHECK(scatter("add") == V{1, 32, 3, 4.5f});
  CHECK(scatter("mul") == V{1, 400, 3, 2});
  CHECK(scatter("max") == V{1, 20, 3, 4});
  CHECK(scatter("min") == V{1, 2, 3, 0.5f});
  CHECK_THROWS_AS(runOp("ScatterElements", 13, {T(data), T(i64({1, 1}, {4})), T(f32({1, 1}, {0}))}, {one("axis", 1)}),
                  Error);
  // ScatterND with int8 wrap-around on add, slices of rank 1.
  Tensor d8 = tensorOf<int8_t>(DType::Int8, {2, 2}, {100, 1, 2, 3});
  Tensor u8 = tensorOf<int8_t>(DType::Int8, {2, 2}, {100, 0, 1, 1});
  auto r = runOp("ScatterND", 16, {T(d8), T(i64({2, 1}, {0, -1})), T(u8)}, {Attribute::ofString("reduction", "add")});
  CHECK(values<int8_t>(r[0]) == std::vector<int8_t>{-56, 1, 3, 4});
  // Strings scatter without reduction (Scatter-9 is ScatterElements without reduction).
  auto s = runOp("Scatter", 9, {T(str({3}, {"a", "b", "c"})), T(i64({1}, {2})), T(str({1}, {"z"}))});
  CHECK(s[0].tensor->strings == std::vector<std::string>{"a", "b", "z"});
}

TEST_CASE("Gather family: negative indices, empty indices, batch_dims, bounds", "[ref]") {
  Tensor x = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  CHECK(values<float>(runOp("Gather", 13, {T(x), T(i64({2}, {-1, 0}))})[0]) == V{5, 6, 1, 2});
  CHECK(dimsOf(runOp("Gather", 13, {T(x), T(i64({0}, {}))}, {one("axis", 1)})[0]) == I{3, 0});
  CHECK(dimsOf(runOp("Gather", 13, {T(x), T(i32({}, {1}))})[0]) == I{2});
  CHECK_THROWS_AS(runOp("Gather", 13, {T(x), T(i64({1}, {3}))}), Error);
  CHECK(values<float>(runOp("GatherElements", 13, {T(x), T(i64({1, 2}, {-1, 1}))}, {one("axis", 0)})[0]) == V{5, 4});
  auto r = runOp("GatherND", 13, {T(x), T(i64({3, 1}, {1, 0, 1}))}, {one("batch_dims", 1)});
  CHECK(values<float>(r[0]) == V{2, 3, 6});
}

TEST_CASE("Data movement of strings, bool and packed 4-bit elements", "[ref]") {
  Tensor s = str({2, 2}, {"a", "b", "c", "d"});
  CHECK(runOp("Transpose", 13, {T(s)})[0].tensor->strings == std::vector<std::string>{"a", "c", "b", "d"});
  CHECK(runOp("Tile", 13, {T(str({2}, {"x", "y"})), T(i64({1}, {2}))})[0].tensor->strings ==
        std::vector<std::string>{"x", "y", "x", "y"});
  // int4 [2,2] = {1,2,3,4} packed low nibble first: bytes 0x21 0x43; transposed {1,3,2,4}.
  Tensor q = tensorOf<uint8_t>(DType::Int4, {2, 2}, {0x21, 0x43});
  CHECK(values<uint8_t>(runOp("Transpose", 21, {T(q)})[0]) == std::vector<uint8_t>{0x31, 0x42});
  Tensor b = tensorOf<uint8_t>(DType::Bool, {3}, {1, 0, 1});
  auto c = runOp("Concat", 13, {T(b), T(tensorOf<uint8_t>(DType::Bool, {0}, {})), T(b)}, {one("axis", 0)});
  CHECK(values<uint8_t>(c[0]) == std::vector<uint8_t>{1, 0, 1, 1, 0, 1});
  CHECK(values<int64_t>(runOp("NonZero", 13, {T(s)})[0]) == I{0, 0, 1, 1, 0, 1, 0, 1});
}

TEST_CASE("Shape slicing, Size, Expand, Tile with zero repeats, empty Concat", "[ref]") {
  Tensor x = f32({2, 3, 4}, std::vector<float>(24, 0));
  CHECK(values<int64_t>(runOp("Shape", 15, {T(x)}, {one("start", -2)})[0]) == I{3, 4});
  CHECK(dimsOf(runOp("Shape", 15, {T(x)}, {one("start", 2), one("end", 1)})[0]) == I{0});
  CHECK(values<int64_t>(runOp("Shape", 15, {T(x)}, {one("start", -10), one("end", 10)})[0]) == I{2, 3, 4});
  CHECK(values<int64_t>(runOp("Size", 13, {T(x)})[0]) == I{24});
  // Expand broadcasts both ways: [3,1] with [2,1,4] -> [2,3,4].
  auto e = runOp("Expand", 13, {T(f32({3, 1}, {1, 2, 3})), T(i64({3}, {2, 1, 4}))});
  CHECK(dimsOf(e[0]) == I{2, 3, 4});
  CHECK(values<float>(e[0])[4] == 2.0f);
  CHECK(dimsOf(runOp("Tile", 13, {T(f32({2}, {1, 2})), T(i64({1}, {0}))})[0]) == I{0});
  CHECK(values<float>(runOp("Tile", 1, {T(f32({1, 2}, {1, 2})), T(i64({}, {2})), T(i64({}, {0}))})[0]) == V{1, 2, 1, 2});
  CHECK(dimsOf(runOp("Concat", 13, {T(f32({0, 2}, {})), T(f32({0, 2}, {}))}, {one("axis", 0)})[0]) == I{0, 2});
  CHECK(dimsOf(runOp("Flatten", 13, {T(x)}, {one("axis", 3)})[0]) == I{24, 1});
  CHECK(dimsOf(runOp("Flatten", 13, {T(x)}, {one("axis", 0)})[0]) == I{1, 24});
}

TEST_CASE("Identity passes sequences and optionals; Constant densifies sparse_value", "[ref]") {
  RtValue seq = RtValue::sequence({T(f32({1}, {1})), T(f32({2}, {2, 3}))});
  auto r = runOp("Identity", 16, {seq});
  REQUIRE(r[0].kind == RtValue::Kind::Sequence);
  CHECK(r[0].elements.size() == 2);
  r = runOp("Identity", 16, {RtValue::optionalNone()});
  CHECK(r[0].kind == RtValue::Kind::Optional);
  CHECK(r[0].elements.empty());
  Attribute a;
  a.name = "sparse_value";
  a.type = AttrType::SparseTensor;
  a.sparseTensor = std::make_shared<SparseTensor>();
  a.sparseTensor->values = f32({2}, {5, 7});
  a.sparseTensor->indices = i64({2}, {1, 4});
  a.sparseTensor->dims = {2, 3};
  r = runOp("Constant", 13, {}, {a});
  CHECK(dimsOf(r[0]) == I{2, 3});
  CHECK(values<float>(r[0]) == V{0, 5, 0, 0, 7, 0});
}

TEST_CASE("OneHot: negative indices wrap from opset 11 only", "[ref]") {
  Tensor ind = i64({3}, {-1, 0, 5});
  Tensor vals = f32({2}, {0, 1});
  CHECK(values<float>(runOp("OneHot", 11, {T(ind), T(f32({}, {3})), T(vals)})[0]) == V{0, 0, 1, 1, 0, 0, 0, 0, 0});
  CHECK(values<float>(runOp("OneHot", 9, {T(ind), T(f32({}, {3})), T(vals)})[0]) == V{0, 0, 0, 1, 0, 0, 0, 0, 0});
  auto r = runOp("OneHot", 11, {T(i64({2}, {1, 0})), T(i64({1}, {2})), T(str({2}, {"off", "on"}))}, {one("axis", 0)});
  CHECK(r[0].tensor->strings == std::vector<std::string>{"off", "on", "on", "off"});
}

TEST_CASE("Range, EyeLike, Trilu, ReverseSequence, TensorScatter, CenterCropPad", "[ref]") {
  CHECK(values<int32_t>(runOp("Range", 11, {T(i32({}, {10})), T(i32({}, {4})), T(i32({}, {-3}))})[0]) ==
        std::vector<int32_t>{10, 7});
  CHECK(dimsOf(runOp("Range", 11, {T(f32({}, {1})), T(f32({}, {1})), T(f32({}, {1}))})[0]) == I{0});
  auto e = runOp("EyeLike", 22, {T(f32({2, 3}, V(6, 0)))}, {one("k", 1), one("dtype", 7)});
  CHECK(values<int64_t>(e[0]) == I{0, 1, 0, 0, 0, 1});
  Tensor m = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(values<float>(runOp("Trilu", 14, {T(m), T(i64({}, {-1}))}, {one("upper", 0)})[0]) == V{0, 0, 0, 4, 0, 0, 7, 8, 0});
  CHECK(values<float>(runOp("ReverseSequence", 10, {T(m), T(i64({3}, {3, 1, 0}))},
                            {one("batch_axis", 0), one("time_axis", 1)})[0]) == V{3, 2, 1, 4, 5, 6, 7, 8, 9});
  // Circular write wraps around the sequence axis per batch.
  Tensor cache = f32({2, 3, 1}, {0, 0, 0, 0, 0, 0});
  Tensor upd = f32({2, 2, 1}, {1, 2, 3, 4});
  auto t = runOp("TensorScatter", 24, {T(cache), T(upd), T(i64({2}, {2, 0}))}, {Attribute::ofString("mode", "circular")});
  CHECK(values<float>(t[0]) == V{2, 0, 1, 3, 4, 0});
  CHECK_THROWS_AS(runOp("TensorScatter", 24, {T(cache), T(upd), T(i64({2}, {2, 0}))}), Error);
  // Crop 5 -> 2 starts at 1; pad 1 -> 4 puts 1 before and 2 after.
  auto c = runOp("CenterCropPad", 18, {T(f32({5, 1}, {1, 2, 3, 4, 5})), T(i64({2}, {2, 4}))});
  CHECK(dimsOf(c[0]) == I{2, 4});
  CHECK(values<float>(c[0]) == V{0, 2, 0, 0, 0, 3, 0, 0});
}

// ---- hostile models (found by tests/fuzz/fuzz_models.py) ----

TEST_CASE("Tensors whose data is shorter than their dims are refused, not read past their end", "[ref][fuzz]") {
  // A Constant value declaring 4 floats but holding 2: consumers index it by its dims.
  Tensor shortValue = f32({4}, {1, 2});
  CHECK_THROWS_AS(runOp("Constant", 13, {}, {Attribute::ofTensor("value", shortValue)}), Error);
  // ConstantOfShape's value attribute with no data at all.
  Tensor empty;
  empty.dataType = static_cast<int32_t>(DType::Float);
  empty.dims = {1};
  CHECK_THROWS_AS(runOp("ConstantOfShape", 13, {T(i64({1}, {3}))}, {Attribute::ofTensor("value", empty)}), Error);
  // A fed input whose bytes do not match its dims.
  CHECK_THROWS_AS(runOp("Abs", 13, {T(f32({4}, {1, 2}))}), Error);
  // An initializer with truncated data.
  Model m;
  m.irVersion = 8;
  m.opsetImports = {{"", 13, {}}};
  m.graph = std::make_unique<Graph>();
  Graph* g = m.graph.get();
  g->name = "g";
  Value* x = g->createValue("x");
  g->addInput(x);
  Value* w = g->addInitializer(f32({4}, {1, 2, 3}));
  Node* n = g->addNode("Add", {x, w}, {"y"}, "");
  g->addOutput(n->output(0));
  auto run = [&] { return makeExecutor("ref")->prepare(m, {})->run({{"x", T(f32({4}, {1, 1, 1, 1}))}}); };
  CHECK_THROWS_AS(run(), Error);
}

TEST_CASE("DepthToSpace, SpaceToDepth and Split refuse sizes that overflow", "[ref][fuzz]") {
  Tensor x = f32({1, 4, 1, 1}, {1, 2, 3, 4});
  // blocksize^2 wrapped to 0 and divided by it (SIGFPE).
  CHECK_THROWS_AS(runOp("DepthToSpace", 13, {T(x)}, {one("blocksize", int64_t{1} << 62)}), Error);
  CHECK_THROWS_AS(runOp("SpaceToDepth", 13, {T(x)}, {one("blocksize", int64_t{1} << 62)}), Error);
  CHECK(dimsOf(runOp("DepthToSpace", 13, {T(x)}, {one("blocksize", 2)})[0]) == I{1, 1, 2, 2});
  // num_outputs far beyond the node's outputs: refused before making that many parts.
  Tensor m = f32({2, 2}, {1, 2, 3, 4});
  CHECK_THROWS_AS(runOp("Split", 18, {T(m)}, {one("num_outputs", int64_t{1} << 40)}, 2), Error);
  CHECK_THROWS_AS(runOp("Split", 18, {T(m)}, {one("num_outputs", 3)}, 2), Error);
  // split sizes whose sum overflows.
  CHECK_THROWS_AS(runOp("Split", 13, {T(m), T(i64({2}, {kMax, 2}))}, {one("axis", 1)}, 2), Error);
  CHECK(dimsOf(runOp("Split", 18, {T(m)}, {one("num_outputs", 2)}, 2)[1]) == I{1, 2});
}

TEST_CASE("Reshape refuses a shape whose product overflows", "[ref][fuzz]") {
  Tensor x = f32({4}, {1, 2, 3, 4});
  CHECK_THROWS_AS(runOp("Reshape", 14, {T(x), T(i64({3}, {kMax, int64_t{2147483647}, -1}))}), Error);
  CHECK_THROWS_AS(runOp("Reshape", 14, {T(x), T(i64({2}, {kMax, 4}))}, {one("allowzero", 1)}), Error);
}
