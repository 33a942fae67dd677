// test_ref_elementwise.cpp: element-wise reference kernels and the narrow-float conversions on
// corners the ONNX node tests miss: integer wrap, truncating division and modulo signs, NaN in
// Max/Min/Clip, empty and legacy broadcasting, Cast through strings and float8/float6/int4 with
// saturate, and per-axis/blocked quantization with ties.
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
#include "exec/ref/float_formats.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "tests/unit/ref_test_util.h"

using namespace onnxtool;
using namespace onnxtool::testutil;

namespace {

std::vector<uint8_t> bytes(const RtValue& v) { return values<uint8_t>(v); }

RtValue run1(const std::string& op, int64_t opset, std::vector<In> inputs,
             std::vector<Attribute> attrs = {}) {
  return runOp(op, opset, std::move(inputs), std::move(attrs))[0];
}

Attribute toType(DType t) { return Attribute::ofInt("to", static_cast<int64_t>(t)); }

}  // namespace

TEST_CASE("integer Div truncates, Mod follows the divisor or the dividend, and nothing traps", "[ref]") {
  auto a = tensorOf<int32_t>(DType::Int32, {6}, {7, -7, 7, -7, INT32_MIN, 5});
  auto b = tensorOf<int32_t>(DType::Int32, {6}, {2, 2, -2, -2, -1, 0});
  CHECK(values<int32_t>(run1("Div", 14, {a, b})) == std::vector<int32_t>{3, -3, -3, 3, INT32_MIN, 0});
  CHECK(values<int32_t>(run1("Mod", 13, {a, b})) == std::vector<int32_t>{1, 1, -1, -1, 0, 0});
  CHECK(values<int32_t>(run1("Mod", 13, {a, b}, {one("fmod", 1)})) == std::vector<int32_t>{1, -1, 1, -1, 0, 0});
  // Float fmod=0: sign of the divisor, zero takes the divisor's sign, inf divisor keeps x when signs agree.
  auto fa = f32({4}, {-4.5f, 4.5f, 0.0f, 3.0f});
  auto fb = f32({4}, {2.0f, -2.0f, -3.0f, -kInf});
  auto r = values<float>(run1("Mod", 13, {fa, fb}));
  CHECK(r[0] == 1.5f);
  CHECK(r[1] == -1.5f);
  CHECK((r[2] == 0.0f && std::signbit(r[2])));
  CHECK(r[3] == -kInf);
}

TEST_CASE("integer arithmetic wraps and uint8 does not promote", "[ref]") {
  auto a = tensorOf<int8_t>(DType::Int8, {3}, {127, -128, 100});
  auto b = tensorOf<int8_t>(DType::Int8, {3}, {1, -1, 3});
  CHECK(values<int8_t>(run1("Add", 14, {a, b})) == std::vector<int8_t>{-128, 127, 103});
  CHECK(values<int8_t>(run1("Mul", 14, {a, b})) == std::vector<int8_t>{127, -128, 44});
  CHECK(values<int8_t>(run1("Neg", 13, {a})) == std::vector<int8_t>{-127, -128, -100});
  CHECK(values<int8_t>(run1("Abs", 13, {a})) == std::vector<int8_t>{127, -128, 100});
  auto u = tensorOf<uint16_t>(DType::UInt16, {2}, {65535, 300});
  CHECK(values<uint16_t>(run1("Mul", 14, {u, u})) == std::vector<uint16_t>{1, 24464});
}

TEST_CASE("broadcasting: empty tensors, three-way Where, and opset 6's axis attribute", "[ref]") {
  auto e = run1("Add", 14, {f32({0, 3}, {}), f32({1, 3}, {1, 2, 3})});
  CHECK(e.tensor->dims == std::vector<int64_t>{0, 3});
  auto a = f32({2, 3, 2}, V(12, 1.0f));
  auto b = f32({3}, {10, 20, 30});
  auto r = values<float>(run1("Add", 6, {a, b}, {one("broadcast", 1), one("axis", 1)}));
  CHECK(r == V{11, 11, 21, 21, 31, 31, 11, 11, 21, 21, 31, 31});
  CHECK_THROWS_AS(run1("Add", 6, {a, b}), Error);  // broadcast=0 needs equal shapes
  auto cond = tensorOf<uint8_t>(DType::Bool, {2, 1}, {1, 0});
  auto w = run1("Where", 16, {cond, str({1, 2}, {"a", "b"}), str({}, {"z"})});
  CHECK(w.tensor->strings == std::vector<std::string>{"a", "b", "z", "z"});
}

TEST_CASE("Max and Min propagate NaN; Sum and Mean fold variadic broadcast inputs", "[ref]") {
  auto a = f32({3}, {1, kNan, 3});
  auto b = f32({1}, {2});
  auto mx = values<float>(run1("Max", 13, {a, b}));
  CHECK(mx[0] == 2);
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 3);
  auto c = f32({2, 1}, {10, 20});
  auto s = run1("Sum", 13, {f32({3}, {1, 2, 3}), b, c});
  CHECK(s.tensor->dims == std::vector<int64_t>{2, 3});
  CHECK(values<float>(s) == V{13, 14, 15, 23, 24, 25});
  CHECK(values<float>(run1("Mean", 13, {f32({2}, {1, 2}), f32({2}, {2, 4})})) == V{1.5f, 3});
  auto i = tensorOf<int64_t>(DType::Int64, {2}, {INT64_MAX, -5});
  CHECK(values<int64_t>(run1("Min", 13, {i, tensorOf<int64_t>(DType::Int64, {1}, {0})})) == std::vector<int64_t>{0, -5});
}

TEST_CASE("Clip: attributes before opset 11, optional inputs after; NaN stays and min > max gives max", "[ref]") {
  auto x = f32({4}, {-5, 0.5f, kNan, 9});
  auto r = values<float>(run1("Clip", 6, {x}, {Attribute::ofFloat("min", 0), Attribute::ofFloat("max", 1)}));
  CHECK(r[0] == 0);
  CHECK(r[1] == 0.5f);
  CHECK(std::isnan(r[2]));
  CHECK(r[3] == 1);
  CHECK(values<float>(run1("Clip", 13, {f32({2}, {-1, 4}), f32({}, {3}), f32({}, {2})})) == V{2, 2});
  auto i8 = tensorOf<int8_t>(DType::Int8, {3}, {-128, 0, 127});
  CHECK(values<int8_t>(run1("Clip", 13, {i8, std::nullopt, tensorOf<int8_t>(DType::Int8, {}, {5})})) ==
        std::vector<int8_t>{-128, 0, 5});
}

TEST_CASE("Pow mixes base and exponent types; BitShift of signed types; Round halves to even", "[ref]") {
  auto base = tensorOf<int32_t>(DType::Int32, {3}, {2, 3, -2});
  CHECK(values<int32_t>(run1("Pow", 15, {base, f32({3}, {0.5f, 2, 3})})) == std::vector<int32_t>{1, 9, -8});
  CHECK(values<int32_t>(run1("Pow", 15, {base, tensorOf<int64_t>(DType::Int64, {3}, {31, -1, 0})})) ==
        std::vector<int32_t>{INT32_MIN, 0, 1});
  auto s = tensorOf<int8_t>(DType::Int8, {4}, {-16, -16, 64, 1});
  auto by = tensorOf<int8_t>(DType::Int8, {4}, {2, 8, 1, -1});
  CHECK(values<int8_t>(run1("BitShift", 28, {s, by}, {Attribute::ofString("direction", "RIGHT")})) ==
        std::vector<int8_t>{-4, -1, 32, 0});
  CHECK(values<int8_t>(run1("BitShift", 28, {s, by}, {Attribute::ofString("direction", "LEFT")})) ==
        std::vector<int8_t>{-64, 0, -128, 0});
  CHECK(values<float>(run1("Round", 22, {f32({5}, {0.5f, 1.5f, 2.5f, -2.5f, -0.6f})})) == V{0, 2, 2, -2, -1});
}

TEST_CASE("IsInf honours detect flags and reads float8; Equal compares strings", "[ref]") {
  auto x = f32({3}, {kInf, -kInf, kNan});
  CHECK(values<uint8_t>(run1("IsInf", 20, {x}, {one("detect_positive", 0)})) == std::vector<uint8_t>{0, 1, 0});
  auto e5 = tensorOf<uint8_t>(DType::Float8E5M2, {3}, {0x7c, 0xfc, 0x7e});
  CHECK(values<uint8_t>(run1("IsInf", 20, {e5})) == std::vector<uint8_t>{1, 1, 0});
  CHECK(values<uint8_t>(run1("IsNaN", 20, {e5})) == std::vector<uint8_t>{0, 0, 1});
  CHECK(values<uint8_t>(run1("Equal", 19, {str({2}, {"a", "b"}), str({}, {"b"})})) == std::vector<uint8_t>{0, 1});
}

TEST_CASE("Cast between numbers wraps integers, truncates floats, and formats and parses strings", "[ref]") {
  auto i16 = tensorOf<int16_t>(DType::Int16, {2}, {200, -129});
  CHECK(values<int8_t>(run1("Cast", 21, {i16}, {toType(DType::Int8)})) == std::vector<int8_t>{-56, 127});
  CHECK(values<int32_t>(run1("Cast", 21, {f32({3}, {-2.9f, 2.9f, kNan})}, {toType(DType::Int32)})) ==
        std::vector<int32_t>{-2, 2, 0});
  CHECK(values<uint8_t>(run1("Cast", 21, {f32({3}, {0.0f, -0.0f, kNan})}, {toType(DType::Bool)})) ==
        std::vector<uint8_t>{0, 0, 1});
  auto s = run1("Cast", 21, {f32({7}, {0.47892547f, 1e6f, 123456, 1e-5f, -0.0f, kNan, -kInf})}, {toType(DType::String)});
  CHECK(s.tensor->strings == std::vector<std::string>{"0.47892547", "1e+06", "123456.0", "1e-05", "-0.0", "nan", "-inf"});
  auto d = run1("Cast", 21, {tensorOf<double>(DType::Double, {2}, {1e15, 0.1})}, {toType(DType::String)});
  CHECK(d.tensor->strings == std::vector<std::string>{"1000000000000000.0", "0.1"});
  auto b = run1("Cast", 21, {tensorOf<uint8_t>(DType::Bool, {2}, {1, 0})}, {toType(DType::String)});
  CHECK(b.tensor->strings == std::vector<std::string>{"True", "False"});
  auto parsed = values<float>(run1("Cast", 21, {str({5}, {"3.5", "1E8", "-INF", "+inf", " 7 "})}, {toType(DType::Float)}));
  CHECK(parsed == V{3.5f, 1e8f, -kInf, kInf, 7});
  CHECK(values<int64_t>(run1("Cast", 21, {str({2}, {"-9223372036854775808", "100.5"})}, {toType(DType::Int64)})) ==
        std::vector<int64_t>{INT64_MIN, 100});
  // Cast-1 names the target type with a string.
  CHECK(values<double>(run1("Cast", 1, {f32({1}, {1.5f})}, {Attribute::ofString("to", "DOUBLE")})) ==
        std::vector<double>{1.5});
}

TEST_CASE("Cast to float8 saturates by default, and opset 19 sends inf to NaN for FNUZ types", "[ref]") {
  auto x = f32({4}, {1000, -kInf, 0.3f, -1e-9f});
  CHECK(bytes(run1("Cast", 21, {x}, {toType(DType::Float8E4M3FN)})) == std::vector<uint8_t>{0x7e, 0xfe, 0x2a, 0x80});
  CHECK(bytes(run1("Cast", 21, {x}, {toType(DType::Float8E4M3FN), one("saturate", 0)})) ==
        std::vector<uint8_t>{0x7f, 0xff, 0x2a, 0x80});
  CHECK(bytes(run1("Cast", 19, {x}, {toType(DType::Float8E4M3FNUZ)})) == std::vector<uint8_t>{0x7f, 0x80, 0x32, 0x00});
  CHECK(bytes(run1("Cast", 24, {x}, {toType(DType::Float8E4M3FNUZ)})) == std::vector<uint8_t>{0x7f, 0xff, 0x32, 0x00});
  CHECK(bytes(run1("Cast", 21, {x}, {toType(DType::Float8E5M2), one("saturate", 0)})) ==
        std::vector<uint8_t>{0x64, 0xfc, 0x35, 0x80});
  // E8M0 rounding modes: 3.0 is between 2 and 4.
  auto three = f32({1}, {3.0f});
  auto e8 = [&](const char* mode) {
    return bytes(run1("Cast", 24, {three}, {toType(DType::Float8E8M0), Attribute::ofString("round_mode", mode)}))[0];
  };
  CHECK(e8("up") == 129);
  CHECK(e8("down") == 128);
  CHECK(e8("nearest") == 129);
}

TEST_CASE("Cast packs int4, uint2 and float6 elements low bits first", "[ref]") {
  auto x = f32({5}, {-9, 7.9f, 8, -1, 3});
  CHECK(bytes(run1("Cast", 25, {x}, {toType(DType::Int4)})) == std::vector<uint8_t>{0x77, 0xf8, 0x03});
  CHECK(bytes(run1("Cast", 25, {x}, {toType(DType::UInt2)})) == std::vector<uint8_t>{0xcf, 0x03});
  auto back = values<int8_t>(run1("Cast", 25, {tensorOf<uint8_t>(DType::Int4, {3}, {0x8f, 0x01})}, {toType(DType::Int8)}));
  CHECK(back == std::vector<int8_t>{-1, -8, 1});
  // float6e2m3: 1.0 = 0b001000, -7.5 = 0b111111; four elements take three bytes.
  auto f6 = bytes(run1("Cast", 28, {f32({4}, {1, -7.5f, 100, 0})}, {toType(DType::Float6E2M3)}));
  CHECK(f6 == std::vector<uint8_t>{0xc8, 0xff, 0x01});
}

TEST_CASE("narrow float encoders round to nearest even at the edges of the range", "[ref]") {
  using ref::decodeNarrowFloat;
  using ref::encodeNarrowFloat;
  CHECK(encodeNarrowFloat(DType::Float8E4M3FN, 464, false) == 0x7e);  // tie with 480: even 448
  CHECK(encodeNarrowFloat(DType::Float8E4M3FN, 464.5, false) == 0x7f);
  CHECK(encodeNarrowFloat(DType::Float8E5M2, 61440, false) == 0x7c);  // rounds up to inf
  CHECK(encodeNarrowFloat(DType::Float8E5M2, 61440, true) == 0x7b);
  CHECK(encodeNarrowFloat(DType::Float16, 65520, false) == 0x7c00);
  CHECK(encodeNarrowFloat(DType::Float16, std::ldexp(1.0, -25), false) == 0);  // tie to even zero
  CHECK(encodeNarrowFloat(DType::Float16, std::ldexp(1.5, -25), false) == 1);
  CHECK(encodeNarrowFloat(DType::Float4E2M1, 5.0, true) == 0x6);  // tie between 4 (0x6) and 6 (0x7): even
  CHECK(decodeNarrowFloat(DType::Float4E2M1, 0x6) == 4.0);
  CHECK(decodeNarrowFloat(DType::Float8E4M3FNUZ, 0x01) == std::ldexp(1.0, -10));
  CHECK(std::isnan(decodeNarrowFloat(DType::Float8E8M0, 0xff)));
  CHECK(decodeNarrowFloat(DType::Float8E8M0, 0) == std::ldexp(1.0, -127));
}

TEST_CASE("QuantizeLinear: per-axis and blocked scales, ties to even, saturation, int4 output", "[ref]") {
  auto x = f32({2, 3}, {2.5f, 3.5f, -300, 1, 2, 3});
  auto scale = f32({2}, {1, 0.5f});
  auto zp = tensorOf<int8_t>(DType::Int8, {2}, {0, -1});
  CHECK(values<int8_t>(run1("QuantizeLinear", 13, {x, scale, zp}, {one("axis", 0)})) ==
        std::vector<int8_t>{2, 4, -128, 1, 3, 5});
  // Blocks of 2 along axis 1 with a ragged last block; int4 saturates to [-8, 7].
  auto bscale = f32({2, 2}, {1, 10, 0.5f, 2});
  auto bzp = tensorOf<uint8_t>(DType::Int4, {2, 2}, {0x00, 0x00});
  auto q = bytes(run1("QuantizeLinear", 21, {x, bscale, bzp}, {one("axis", 1), one("block_size", 2)}));
  // {2, 4, -30 -> -8} and {2, 4, 1.5 -> 2}
  CHECK(q == std::vector<uint8_t>{0x42, 0x28, 0x24});
  auto dq = values<float>(run1("DequantizeLinear", 21, {tensorOf<uint8_t>(DType::Int4, {2, 3}, {0x42, 0x28, 0x24}),
                                                          bscale, bzp},
                               {one("axis", 1), one("block_size", 2)}));
  CHECK(dq == V{2, 4, -80, 1, 2, 4});
}

TEST_CASE("DynamicQuantizeLinear always includes zero in the range", "[ref]") {
  auto r = runOp("DynamicQuantizeLinear", 11, {f32({3}, {1, 2, 4})}, {}, 3);
  float scale = values<float>(r[1])[0];
  CHECK(scale == Approx(4.0f / 255));
  CHECK(values<uint8_t>(r[2]) == std::vector<uint8_t>{0});
  CHECK(values<uint8_t>(r[0]) == std::vector<uint8_t>{64, 127, 255});  // 2 / (4/255) is 127.49999 in float
}
