// test_ref_conv_rnn.cpp: reference kernels of the convolution, pooling, image and recurrent
// family on corners the ONNX node tests miss: legacy versions (Resize-10, Upsample-1/7, LpPool-1,
// RoiAlign-10), ceil-mode overhang, column-major MaxPool indices, NaN, sequence_lens, clip and
// input_forget, exact nearest resizing of int64 and string elements, empty batches, and the
// state carried by CausalConvWithState across calls.
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

Attribute flt(const std::string& name, float v) { return Attribute::ofFloat(name, v); }
Attribute str(const std::string& name, std::string v) { return Attribute::ofString(name, std::move(v)); }

void checkClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("AveragePool: the ceil-mode overhang is never counted, explicit padding is with count_include_pad", "[ref]") {
  Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  // windows [0,1] [2,3] [4]: the last one overhangs the input and averages its one element
  auto y = runOp("AveragePool", 22, {T(x)}, {ints("kernel_shape", {2}), ints("strides", {2}), one("ceil_mode", 1),
                                             one("count_include_pad", 1)});
  CHECK(values<float>(y[0]) == V{1.5f, 3.5f, 5});
  // with a leading pad the padded cell counts as a zero
  y = runOp("AveragePool", 22, {T(x)}, {ints("kernel_shape", {2}), ints("strides", {2}), ints("pads", {1, 0}),
                                        one("ceil_mode", 1), one("count_include_pad", 1)});
  CHECK(values<float>(y[0]) == V{0.5f, 2.5f, 4.5f});
  y = runOp("AveragePool", 22, {T(x)}, {ints("kernel_shape", {2}), ints("strides", {2}), ints("pads", {1, 0})});
  CHECK(values<float>(y[0]) == V{1, 2.5f, 4.5f});
}

TEST_CASE("MaxPool: NaN wins, indices follow storage_order, int8 is exact", "[ref]") {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = f32({1, 1, 2, 3}, {1, 2, nan, 4, 5, 6});
  auto y = runOp("MaxPool", 12, {T(x)}, {ints("kernel_shape", {2, 2})}, 2);
  auto v = values<float>(y[0]);
  REQUIRE(v.size() == 2);
  CHECK(v[0] == 5);
  CHECK(std::isnan(v[1]));
  // maxima at (1,1) and (1,2): row-major h*W + w, column-major (storage_order 1) h + w*H
  Tensor z = f32({1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  y = runOp("MaxPool", 12, {T(z)}, {ints("kernel_shape", {2, 2})}, 2);
  CHECK(values<int64_t>(y[1]) == I{4, 5});
  y = runOp("MaxPool", 12, {T(z)}, {ints("kernel_shape", {2, 2}), one("storage_order", 1)}, 2);
  CHECK(values<int64_t>(y[1]) == I{3, 5});
  Tensor q = tensorOf<int8_t>(DType::Int8, {1, 1, 3}, {-128, 127, -5});
  y = runOp("MaxPool", 12, {T(q)}, {ints("kernel_shape", {2})});
  CHECK(values<int8_t>(y[0]) == std::vector<int8_t>{127, 127});
}

TEST_CASE("LpPool-1 takes p as a float, GlobalLpPool reduces every spatial axis", "[ref]") {
  Tensor x = f32({1, 1, 4}, {3, -4, 0, 1});
  Attribute p = flt("p", 2.0f);
  auto y = runOp("LpPool", 1, {T(x)}, {ints("kernel_shape", {2}), ints("strides", {2}), p});
  checkClose(values<float>(y[0]), {5, 1});
  y = runOp("GlobalLpPool", 2, {T(f32({1, 1, 2, 2}, {1, 2, 2, 4}))}, {one("p", 1)});
  CHECK(dimsOf(y[0]) == I{1, 1, 1, 1});
  CHECK(values<float>(y[0]) == V{9});
}

TEST_CASE("Conv and ConvTranspose: empty batch, 1-D stride scatter, output_shape trimming", "[ref]") {
  auto y = runOp("Conv", 11, {T(f32({0, 2, 4}, {})), T(f32({3, 2, 2}, V(12, 1)))}, {});
  CHECK(dimsOf(y[0]) == I{0, 3, 3});
  // each input element stamps the kernel at stride 2
  y = runOp("ConvTranspose", 11, {T(f32({1, 1, 2}, {1, 2})), T(f32({1, 1, 2}, {1, 10}))}, {ints("strides", {2})});
  CHECK(values<float>(y[0]) == V{1, 10, 2, 20});
  // a requested shape one larger than the natural one adds a zero at the end
  y = runOp("ConvTranspose", 11, {T(f32({1, 1, 2}, {1, 2})), T(f32({1, 1, 2}, {1, 10}))},
            {ints("strides", {2}), ints("output_shape", {5})});
  CHECK(values<float>(y[0]) == V{1, 10, 2, 20, 0});
  // depthwise: each channel convolved with its own kernel
  y = runOp("Conv", 22, {T(f32({1, 2, 3}, {1, 2, 3, 4, 5, 6})), T(f32({2, 1, 1}, {2, -1}))}, {one("group", 2)});
  CHECK(values<float>(y[0]) == V{2, 4, 6, -4, -5, -6});
}

TEST_CASE("ConvInteger subtracts per-channel weight zero points", "[ref]") {
  Tensor x = tensorOf<uint8_t>(DType::UInt8, {1, 1, 3}, {10, 20, 30});
  Tensor w = tensorOf<int8_t>(DType::Int8, {2, 1, 1}, {1, 3});
  Tensor xz = tensorOf<uint8_t>(DType::UInt8, {}, {10});
  Tensor wz = tensorOf<int8_t>(DType::Int8, {2}, {0, 1});
  auto y = runOp("ConvInteger", 10, {T(x), T(w), T(xz), T(wz)});
  CHECK(values<int32_t>(y[0]) == std::vector<int32_t>{0, 10, 20, 0, 20, 40});
}

TEST_CASE("Resize-10 and Upsample use asymmetric coordinates; nearest rounds down up-scaling, up down-scaling",
          "[ref]") {
  Tensor x = f32({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto y = runOp("Resize", 10, {T(x), T(f32({4}, {1, 1, 0.6f, 0.6f}))});
  CHECK(dimsOf(y[0]) == I{1, 1, 1, 2});
  CHECK(values<float>(y[0]) == V{1, 3});
  Tensor s = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  y = runOp("Upsample", 7, {T(s)}, {Attribute::ofFloats("scales", {1, 1, 2, 2})});
  CHECK(values<float>(y[0]) == V{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  y = runOp("Upsample", 1, {T(s)}, {flt("height_scale", 2), flt("width_scale", 2), str("mode", "bilinear")});
  checkClose(values<float>(y[0]), {1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4});
  y = runOp("Upsample", 9, {T(s), T(f32({4}, {1, 1, 1, 3}))});
  CHECK(values<float>(y[0]) == V{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4});
}

TEST_CASE("Resize nearest copies int64 and string elements exactly", "[ref]") {
  int64_t big = (int64_t{1} << 60) + 1;
  auto y = runOp("Resize", 19, {T(i64({2}, {big, -big})), std::nullopt, T(f32({1}, {2}))},
                 {str("mode", "nearest"), str("coordinate_transformation_mode", "asymmetric")});
  CHECK(values<int64_t>(y[0]) == I{big, big, -big, -big});
  Tensor s;
  s.dataType = static_cast<int32_t>(DType::String);
  s.dims = {3};
  s.strings = {"a", "b", "c"};
  s.storage = Tensor::Storage::Raw;
  y = runOp("Resize", 19, {T(s), std::nullopt, std::nullopt, T(i64({1}, {2}))}, {str("mode", "nearest")});
  REQUIRE(y[0].isTensor());
  CHECK(y[0].tensor->strings == std::vector<std::string>{"a", "c"});
}

TEST_CASE("Resize tf_crop_and_resize fills with the extrapolation value, saturated to the type", "[ref]") {
  Tensor x = tensorOf<uint8_t>(DType::UInt8, {1, 4}, {10, 20, 30, 40});
  // roi along the last axis [0.5, 1.5]: positions 1.5, 3, 4.5 -> the last leaves the input
  auto y = runOp("Resize", 19, {T(x), T(f32({4}, {0, 0.5f, 1, 1.5f})), std::nullopt, T(i64({2}, {1, 3}))},
                 {str("mode", "linear"), str("coordinate_transformation_mode", "tf_crop_and_resize"),
                  flt("extrapolation_value", 300)});
  CHECK(values<uint8_t>(y[0]) == std::vector<uint8_t>{25, 40, 255});
}

TEST_CASE("Resize rejects both or neither of scales and sizes", "[ref]") {
  Tensor x = f32({1, 2}, {1, 2});
  CHECK_THROWS_AS(runOp("Resize", 13, {T(x)}), Error);
  CHECK_THROWS_AS(runOp("Resize", 13, {T(x), std::nullopt, T(f32({2}, {1, 2})), T(i64({2}, {1, 4}))}), Error);
}

TEST_CASE("RNN honours sequence_lens in both directions", "[ref]") {
  // h_t = x_t + h_{t-1} (identity activation): Y is a running sum, zero past each sequence's end
  Tensor x = f32({3, 2, 1}, {1, 1, 2, 2, 3, 3});
  Tensor w = f32({1, 1, 1}, {1}), r = f32({1, 1, 1}, {1});
  std::vector<Attribute> attrs = {one("hidden_size", 1), stringsAttr("activations", {"Affine"}),
                                  Attribute::ofFloats("activation_alpha", {1}),
                                  Attribute::ofFloats("activation_beta", {0})};
  auto y = runOp("RNN", 14, {T(x), T(w), T(r), std::nullopt, T(i32({2}, {3, 2}))}, attrs, 2);
  CHECK(values<float>(y[0]) == V{1, 1, 3, 3, 6, 0});
  CHECK(values<float>(y[1]) == V{6, 3});
  attrs.push_back(str("direction", "reverse"));
  y = runOp("RNN", 14, {T(x), T(w), T(r), std::nullopt, T(i32({2}, {3, 2}))}, attrs, 2);
  CHECK(values<float>(y[0]) == V{6, 3, 5, 2, 3, 0});
  CHECK(values<float>(y[1]) == V{6, 3});
}

TEST_CASE("LSTM clips gate inputs and couples the forget gate with input_forget", "[ref]") {
  // all weights zero: the gates see only their biases (order i, o, f, c)
  Tensor x = f32({1, 1, 1}, {0});
  Tensor w = f32({1, 4, 1}, {0, 0, 0, 0}), r = f32({1, 4, 1}, {0, 0, 0, 0});
  Tensor b = f32({1, 8}, {0, 0, 5, 10, 0, 0, 0, 0});
  Tensor h0 = f32({1, 1, 1}, {0}), c0 = f32({1, 1, 1}, {2});
  auto y = runOp("LSTM", 14, {T(x), T(w), T(r), T(b), std::nullopt, T(h0), T(c0)},
                 {one("hidden_size", 1), flt("clip", 1), one("input_forget", 1)}, 3);
  double c = 0.5 * 2 + 0.5 * std::tanh(1.0);  // f = 1 - i = 0.5; the cell input 10 clips to 1
  checkClose(values<float>(y[2]), {static_cast<float>(c)});
  checkClose(values<float>(y[1]), {static_cast<float>(0.5 * std::tanh(c))});
}

TEST_CASE("CausalConvWithState: two calls chained through the state equal one call", "[ref]") {
  Tensor w = f32({1, 1, 3}, {1, 2, 3});
  auto whole = runOp("CausalConvWithState", 27, {T(f32({1, 1, 4}, {1, 2, 3, 4})), T(w)}, {}, 2);
  CHECK(values<float>(whole[0]) == V{3, 8, 14, 20});
  CHECK(values<float>(whole[1]) == V{3, 4});
  auto first = runOp("CausalConvWithState", 27, {T(f32({1, 1, 2}, {1, 2})), T(w)}, {}, 2);
  auto second = runOp("CausalConvWithState", 27, {T(f32({1, 1, 2}, {3, 4})), T(w), std::nullopt, first[1]}, {}, 2);
  CHECK(values<float>(first[0]) == V{3, 8});
  CHECK(values<float>(second[0]) == V{14, 20});
}

TEST_CASE("MaxUnpool places values at their indices; output_shape pads at the end", "[ref]") {
  Tensor x = f32({1, 1, 2}, {7, 9});
  Tensor idx = i64({1, 1, 2}, {1, 2});
  auto y = runOp("MaxUnpool", 11, {T(x), T(idx)}, {ints("kernel_shape", {2}), ints("strides", {2})});
  CHECK(values<float>(y[0]) == V{0, 7, 9, 0});
  y = runOp("MaxUnpool", 11, {T(x), T(idx), T(i64({3}, {1, 1, 6}))}, {ints("kernel_shape", {2}), ints("strides", {2})});
  CHECK(values<float>(y[0]) == V{0, 7, 9, 0, 0, 0});
  CHECK_THROWS_AS(runOp("MaxUnpool", 11, {T(x), T(i64({1, 1, 2}, {1, 4}))}, {ints("kernel_shape", {2}), ints("strides", {2})}),
                  Error);
}

TEST_CASE("NonMaxSuppression: zero boxes per class selects nothing; ties keep the lower index", "[ref]") {
  Tensor boxes = f32({1, 3, 4}, {0, 0, 1, 1, 0, 0, 1, 1, 5, 5, 6, 6});
  Tensor scores = f32({1, 1, 3}, {0.5f, 0.5f, 0.4f});
  auto y = runOp("NonMaxSuppression", 11, {T(boxes), T(scores)});
  CHECK(dimsOf(y[0]) == I{0, 3});
  y = runOp("NonMaxSuppression", 11, {T(boxes), T(scores), T(i64({1}, {3})), T(f32({1}, {0.5f}))});
  CHECK(values<int64_t>(y[0]) == I{0, 0, 0, 0, 0, 2});
}

TEST_CASE("RoiAlign-10 does not shift by half a pixel; 16 does by default", "[ref]") {
  // a horizontal ramp: sampling at x gives x (inside the map)
  Tensor x = f32({1, 1, 1, 4}, {0, 1, 2, 3});
  Tensor rois = f32({1, 4}, {1, 0, 3, 1});
  Tensor bi = i64({1}, {0});
  std::vector<Attribute> attrs = {one("output_height", 1), one("output_width", 1), one("sampling_ratio", 1)};
  checkClose(values<float>(runOp("RoiAlign", 10, {T(x), T(rois), T(bi)}, attrs)[0]), {2});
  checkClose(values<float>(runOp("RoiAlign", 16, {T(x), T(rois), T(bi)}, attrs)[0]), {1.5f});
}

TEST_CASE("GridSample: nearest rounds half to even; border padding clamps", "[ref]") {
  Tensor x = f32({1, 1, 1, 4}, {10, 20, 30, 40});
  // align_corners 1: grid -1/3 maps to 1.0, 0 maps to 1.5 (rounds to 2), 2 is outside
  Tensor grid = f32({1, 1, 3, 2}, {-1.0f / 3, 0, 0, 0, 2, 0});
  auto y = runOp("GridSample", 20, {T(x), T(grid)},
                 {str("mode", "nearest"), str("padding_mode", "border"), one("align_corners", 1)});
  CHECK(values<float>(y[0]) == V{20, 30, 40});
}

TEST_CASE("Col2Im sums overlapping blocks", "[ref]") {
  // 1-D image of 3 from blocks of 2 at stride 1: the middle pixel receives two contributions
  Tensor cols = f32({1, 2, 2}, {1, 2, 10, 20});
  auto y = runOp("Col2Im", 18, {T(cols), T(i64({1}, {3})), T(i64({1}, {2}))});
  CHECK(dimsOf(y[0]) == I{1, 1, 3});
  CHECK(values<float>(y[0]) == V{1, 12, 20});
}

TEST_CASE("Conv, ConvTranspose and pools refuse attributes whose geometry overflows", "[ref][fuzz]") {
  Tensor x = f32({1, 1, 3}, {1, 2, 3});
  Tensor w = f32({1, 1, 3}, {1, 10, 100});
  const int64_t big = int64_t{1} << 62;
  // group so large that the output channels sized a std::vector past max_size().
  CHECK_THROWS_AS(runOp("ConvTranspose", 11, {T(x), T(w)}, {one("group", std::numeric_limits<int64_t>::max())}), Error);
  // strides, dilations and pads whose products and sums overflow int64.
  CHECK_THROWS_AS(runOp("ConvTranspose", 11, {T(x), T(w)}, {ints("strides", {big})}), Error);
  CHECK_THROWS_AS(runOp("Conv", 11, {T(x), T(w)}, {ints("dilations", {big})}), Error);
  CHECK_THROWS_AS(runOp("MaxPool", 12, {T(x)}, {ints("kernel_shape", {3}), ints("dilations", {big})}), Error);
  CHECK_THROWS_AS(runOp("AveragePool", 11, {T(x)}, {ints("kernel_shape", {1}), ints("pads", {big, big})}), Error);
  CHECK(dimsOf(runOp("ConvTranspose", 11, {T(x), T(w)}, {ints("strides", {2})})[0]) == I{1, 1, 7});
}

TEST_CASE("Resize refuses output extents too large to allocate or to represent", "[ref][fuzz]") {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  // sizes sized per-axis source maps before the output was ever refused (std::bad_alloc).
  CHECK_THROWS_AS(runOp("Resize", 13, {T(x), std::nullopt, std::nullopt, T(i64({4}, {1, 1, int64_t{1} << 50, 1}))}),
                  Error);
  CHECK_THROWS_AS(runOp("Resize", 13, {T(x), std::nullopt, std::nullopt, T(i64({4}, {1, 1, 0, int64_t{1} << 50}))}),
                  Error);
  // a scale whose product does not fit int64 (undefined conversion from double).
  CHECK_THROWS_AS(runOp("Resize", 13, {T(x), std::nullopt, T(f32({4}, {1, 1, 1e30f, 1}))}), Error);
  CHECK(dimsOf(runOp("Resize", 13, {T(x), std::nullopt, T(f32({4}, {1, 1, 2, 2}))})[0]) == I{1, 1, 4, 4});
}

TEST_CASE("GridSample samples NaN, infinite and far-away grid positions as outside", "[ref][fuzz]") {
  Tensor x = f32({1, 1, 1, 4}, {10, 20, 30, 40});
  // x components: NaN, +inf, -inf, 1e30 (int64 conversions of these were undefined); y = 0
  Tensor grid = f32({1, 1, 4, 2}, {kNan, 0, kInf, 0, -kInf, 0, 1e30f, 0});
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    auto y = runOp("GridSample", 20, {T(x), T(grid)}, {str("mode", mode), str("padding_mode", "zeros")});
    CHECK(values<float>(y[0]) == V{0, 0, 0, 0});
  }
  // border padding clamps far positions to the edge; reflection stays finite and in range
  auto b = runOp("GridSample", 20, {T(x), T(f32({1, 1, 2, 2}, {1e30f, 0, -1e30f, 0}))},
                 {str("mode", "linear"), str("padding_mode", "border"), one("align_corners", 1)});
  CHECK(values<float>(b[0]) == V{40, 10});
  auto r = runOp("GridSample", 20, {T(x), T(grid)}, {str("mode", "cubic"), str("padding_mode", "reflection")});
  for (float v : values<float>(r[0])) CHECK(std::isfinite(v));
}
