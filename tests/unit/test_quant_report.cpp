// test_quant_report.cpp: the error figures of quant/report (against values computed by hand) and
// the float16 conversion of quant/float16 on a small model whose result is known.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "formats/onnx_text.h"
#include "lib/ir.h"
#include "lib/tensor.h"
#include "quant/float16.h"
#include "quant/report.h"

using namespace onnxtool;

namespace {

Tensor floats(std::vector<float> v) { return Tensor::fromFloats("t", {static_cast<int64_t>(v.size())}, v); }

const Node* producerOf(const Graph& g, const std::string& name) {
  const Value* v = g.findLocal(name);
  return v ? v->producer() : nullptr;
}

}  // namespace

TEST_CASE("error stats: max/mean abs, cosine and SQNR of a known error", "[quant][report]") {
  ErrorStats s;
  REQUIRE(s.add(floats({1, 2, 3, -4}), floats({1.5f, 2, 2.5f, -4})));
  // errors -0.5, 0, 0.5, 0: sum ref^2 = 30, sum err^2 = 0.5, SQNR = 10 log10(60)
  CHECK(s.count == 4);
  CHECK(s.maxAbs == Approx(0.5));
  CHECK(s.meanAbs() == Approx(0.25));
  CHECK(s.sqnrDb() == Approx(10 * std::log10(60.0)));
  // dot = 1.5 + 4 + 7.5 + 16 = 29, |got|^2 = 2.25 + 4 + 6.25 + 16 = 28.5
  CHECK(s.cosine() == Approx(29 / std::sqrt(30 * 28.5)));
  // a second pair accumulates: ref [2], got [2] adds 4 to sum ref^2 only
  REQUIRE(s.add(floats({2}), floats({2})));
  CHECK(s.sqnrDb() == Approx(10 * std::log10(34 / 0.5)));
  CHECK_FALSE(s.add(floats({1, 2}), floats({1})));  // a count mismatch adds nothing
  CHECK(s.count == 5);
}

TEST_CASE("error stats: exact, zero and non-finite values", "[quant][report]") {
  ErrorStats exact;
  exact.add(floats({1, -2}), floats({1, -2}));
  CHECK(std::isinf(exact.sqnrDb()));
  CHECK(exact.sqnrDb() > 0);
  CHECK(exact.cosine() == 1.0);
  ErrorStats zeros;
  zeros.add(floats({0, 0}), floats({0, 0}));
  CHECK(zeros.cosine() == 1.0);
  ErrorStats oneZero;
  oneZero.add(floats({0, 0}), floats({1, 0}));
  CHECK(oneZero.cosine() == 0.0);
  CHECK(std::isinf(oneZero.sqnrDb()));
  CHECK(oneZero.sqnrDb() < 0);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  ErrorStats nf;
  nf.add(floats({nan, inf, 1, 2}), floats({nan, inf, inf, 2}));  // same NaN/inf: fine; 1 vs inf: a mismatch
  CHECK(nf.nonFinite == 1);
  CHECK(nf.count == 1);
  AccuracyReport r;
  r.outputs.push_back({"y", "y", "output", "", 0, nf});
  CHECK(r.minCosine() == 0.0);
}

TEST_CASE("float16: Constant clamped, schema-less float16 op kept with Casts, outputs float16", "[quant][float16]") {
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y, float[2] z) {
  c = Constant <value = float[2] {100000.0, 0.5}> ()
  y = Add (x, c)
  z = Celu (y)
})",
                          "t.onnxtxt");
  Float16Report r = convertToFloat16(*m);
  const Graph& g = *m->graph;
  CHECK(r.nodesConverted == 1);  // Add; Celu has no float16 at opset 17
  CHECK(r.clamped == 1);
  CHECK(r.largestClamped == 100000.0f);
  CHECK(g.inputs()[0].type().dtype() == DType::Float16);
  CHECK(g.outputs()[0].type().dtype() == DType::Float16);
  CHECK(g.outputs()[1].type().dtype() == DType::Float16);
  CHECK(g.outputs()[0].value->name() == "y");
  CHECK(g.outputs()[1].value->name() == "z");
  const Node* add = producerOf(g, "y");
  REQUIRE(add);
  CHECK(add->opType == "Add");
  const Node* c = add->input(1)->producer();
  REQUIRE((c && c->opType == "Constant"));
  const Tensor& ct = *c->attr("value")->t;
  CHECK(ct.dtype() == DType::Float16);
  CHECK(ct.elementAsDouble(0) == 65504.0);
  CHECK(ct.elementAsDouble(1) == 0.5);
  // Celu reads y through a Cast to float32 and its float32 output is cast to float16 as z
  const Node* z = producerOf(g, "z");
  REQUIRE(z);
  CHECK(z->opType == "Cast");
  const Node* celu = z->input(0)->producer();
  REQUIRE(celu);
  CHECK(celu->opType == "Celu");
  CHECK(celu->input(0)->producer()->opType == "Cast");
  CHECK(celu->input(0)->producer()->input(0) == add->output(0));
  CHECK(r.castsInserted == 2);
  CHECK(g.numNodes() == 5);  // Constant, Add, Cast, Celu, Cast: the float32 Constant went
  CHECK(g.verifyLinks().empty());
}

TEST_CASE("float16: --keep-io-types keeps float32 at the borders; bfloat16 needs opset 13", "[quant][float16]") {
  const char* text = R"(<ir_version: 8, opset_import: ["" : 12]>
g (float[2] x) => (float[2] y) {
  y = Relu (x)
})";
  auto m = parseModelText(text, "t.onnxtxt");
  Float16Options o;
  o.keepIoTypes = true;
  Float16Report r = convertToFloat16(*m, o);
  const Graph& g = *m->graph;
  CHECK(r.nodesConverted == 1);
  CHECK(r.castsInserted == 2);
  CHECK(g.inputs()[0].type().dtype() == DType::Float);
  CHECK(g.outputs()[0].type().dtype() == DType::Float);
  CHECK(producerOf(g, "y")->opType == "Cast");
  auto m2 = parseModelText(text, "t.onnxtxt");
  Float16Options b;
  b.target = DType::BFloat16;
  CHECK_THROWS(convertToFloat16(*m2, b));
}

TEST_CASE("float16: a graph output that is an initializer keeps its name", "[quant][float16]") {
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y, float[2] w) <float[2] w = {1.0, 2.0}> {
  y = Add (x, w)
})",
                          "t.onnxtxt");
  convertToFloat16(*m);
  const Graph& g = *m->graph;
  REQUIRE(g.outputs().size() == 2);
  CHECK(g.outputs()[1].value->name() == "w");
  CHECK(g.outputs()[1].type().dtype() == DType::Float16);
  CHECK(g.outputs()[1].value->initializer() != nullptr);
  CHECK(g.initializers().size() == 1);
  CHECK(g.outputs()[0].value->name() == "y");
  CHECK(g.verifyLinks().empty());
}

TEST_CASE("float16: Range's limit from a large activation keeps only the scalar chain float32", "[quant][float16]") {
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[100] x) => (float[100] y, float[?] r) <float zero = {0.0}, float one = {1.0}> {
  y = Relu (x)
  m = ReduceMax <keepdims: int = 0> (y)
  r = Range (zero, m, one)
})",
                          "t.onnxtxt");
  convertToFloat16(*m);
  const Graph& g = *m->graph;
  // Relu computes in float16 (its output y is a float16 graph output); ReduceMax (feeding Range's
  // limit) and Range stay float32
  const Node* relu = nullptr;
  const Node* rmax = nullptr;
  for (const auto& n : g.nodes()) {
    if (n->opType == "Relu") relu = n.get();
    if (n->opType == "ReduceMax") rmax = n.get();
  }
  REQUIRE((relu && rmax));
  CHECK(relu->output(0)->type().dtype() == DType::Float16);
  CHECK(rmax->output(0)->type().dtype() == DType::Float);
  CHECK(rmax->input(0)->producer()->opType == "Cast");
}
