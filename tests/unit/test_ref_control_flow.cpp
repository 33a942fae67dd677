// test_ref_control_flow.cpp: reference kernels of If, Loop, Scan, the sequence and optional
// ops, and the ref executor's subgraph and model-local function support, on corners the ONNX
// node tests miss: zero-trip loops, while-loops reading outer-scope values, Scan directions and
// axes, Scan-8 padding, sub-byte splits, branches yielding outer values, omitted function inputs.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "exec/executor.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "tests/unit/ref_test_util.h"

using namespace onnxtool;
using namespace onnxtool::testutil;

namespace {

Tensor boolScalar(bool b) {
  Tensor t;
  t.dataType = static_cast<int32_t>(DType::Bool);
  uint8_t byte = b ? 1 : 0;
  t.setRaw(Buffer::copyOf(std::span<const uint8_t>(&byte, 1)));
  return t;
}

std::vector<float> floatsOf(const RtValue& v) {
  REQUIRE(v.isTensor());
  std::vector<float> out;
  for (size_t i = 0; i < static_cast<size_t>(v.tensor->numElements().value_or(0)); ++i)
    out.push_back(static_cast<float>(v.tensor->elementAsDouble(i)));
  return out;
}

/// A model under construction: main graph `g`, opset `opset` of ai.onnx.
struct ModelBuilder {
  Model m;
  Graph* g;
  explicit ModelBuilder(int64_t opset) {
    m.irVersion = 8;
    m.opsetImports.push_back({"", opset, ""});
    m.graph = std::make_unique<Graph>();
    g = m.graph.get();
  }
  Value* input(const std::string& name) {
    Value* v = g->createValue(name);
    g->addInput(v);
    return v;
  }
  std::vector<RtValue> run(const std::map<std::string, RtValue>& inputs) {
    auto exec = makeExecutor("ref");
    PrepareOptions o;
    o.seed = 1;
    return exec->prepare(m, o)->run(inputs);
  }
};

/// A subgraph with formal inputs `ins`; returns it with those input values.
std::pair<std::shared_ptr<Graph>, std::vector<Value*>> subgraph(Graph* parent, const std::vector<std::string>& ins) {
  auto b = std::make_shared<Graph>(parent);
  std::vector<Value*> vals;
  for (const auto& n : ins) {
    vals.push_back(b->createValue(n));
    b->addInput(vals.back());
  }
  return {b, vals};
}

}  // namespace

TEST_CASE("Loop carries values, stacks scan outputs, and reads outer scope", "[ref]") {
  ModelBuilder mb(13);
  Value* m = mb.input("M");
  Value* x0 = mb.input("x0");
  Value* step = mb.input("step");  // read by the body from the outer scope
  auto [body, bin] = subgraph(mb.g, {"i", "c", "x"});
  Node* add = body->addNode("Add", {bin[2], step}, {"x_next"});
  Node* keep = body->addNode("Identity", {bin[1]}, {"c_out"});
  Node* scanOut = body->addNode("Identity", {bin[2]}, {"x_seen"});
  body->addOutput(keep->output(0));
  body->addOutput(add->output(0));
  body->addOutput(scanOut->output(0));
  Node* loop = mb.g->addNode("Loop", {m, nullptr, x0}, {"x_final", "xs"});
  loop->setAttr(graphAttr("body", body));
  mb.g->addOutput(loop->output(0));
  mb.g->addOutput(loop->output(1));

  auto outs = mb.run({{"M", T(i64({}, {3}))}, {"x0", T(f32({2}, {1, 2}))}, {"step", T(f32({2}, {10, 20}))}});
  CHECK(floatsOf(outs[0]) == std::vector<float>{31, 62});
  CHECK(outs[1].tensor->dims == std::vector<int64_t>{3, 2});
  CHECK(floatsOf(outs[1]) == std::vector<float>{1, 2, 11, 22, 21, 42});

  SECTION("zero iterations give the initial values and an empty scan output typed from the body") {
    scanOut->output(0)->setType(TypeInfo::tensor(DType::Float, Shape::of({2})));
    auto zero = mb.run({{"M", T(i64({}, {0}))}, {"x0", T(f32({2}, {1, 2}))}, {"step", T(f32({2}, {10, 20}))}});
    CHECK(floatsOf(zero[0]) == std::vector<float>{1, 2});
    CHECK(zero[1].tensor->dims == std::vector<int64_t>{0, 2});
    CHECK(zero[1].tensor->dtype() == DType::Float);
  }
}

TEST_CASE("Loop as a while loop: the condition comes from an outer-scope sequence", "[ref]") {
  ModelBuilder mb(13);
  Value* c0 = mb.input("c0");
  Value* a = mb.input("a");
  Value* b = mb.input("b");
  Value* s = mb.input("s");
  Node* conds = mb.g->addNode("SequenceConstruct", {a, a, b}, {"conds"});  // true, true, false
  auto [body, bin] = subgraph(mb.g, {"i", "c", "acc"});
  Node* at = body->addNode("SequenceAt", {conds->output(0), bin[0]}, {"c_next"});
  Node* ins = body->addNode("SequenceInsert", {bin[2], s}, {"acc_next"});
  body->addOutput(at->output(0));
  body->addOutput(ins->output(0));
  Node* empty = mb.g->addNode("SequenceEmpty", {}, {"empty"});
  Node* loop = mb.g->addNode("Loop", {nullptr, c0, empty->output(0)}, {"acc"});
  loop->setAttr(graphAttr("body", body));
  Node* len = mb.g->addNode("SequenceLength", {loop->output(0)}, {"n"});
  mb.g->addOutput(len->output(0));
  mb.g->addOutput(loop->output(0));

  auto outs = mb.run({{"c0", T(boolScalar(true))}, {"a", T(boolScalar(true))}, {"b", T(boolScalar(false))},
                      {"s", T(f32({1}, {5}))}});
  CHECK(outs[0].tensor->elementAsInt(0) == 3);
  REQUIRE(outs[1].kind == RtValue::Kind::Sequence);
  CHECK(outs[1].elements.size() == 3);

  auto none = mb.run({{"c0", T(boolScalar(false))}, {"a", T(boolScalar(true))}, {"b", T(boolScalar(false))},
                      {"s", T(f32({1}, {5}))}});
  CHECK(none[0].tensor->elementAsInt(0) == 0);
}

TEST_CASE("Loop without trip count and condition is refused", "[ref]") {
  ModelBuilder mb(13);
  Value* x = mb.input("x");
  auto [body, bin] = subgraph(mb.g, {"i", "c", "x"});
  body->addOutput(bin[1]);
  body->addOutput(bin[2]);
  Node* loop = mb.g->addNode("Loop", {nullptr, nullptr, x}, {"y"});
  loop->setAttr(graphAttr("body", body));
  mb.g->addOutput(loop->output(0));
  CHECK_THROWS_AS(mb.run({{"x", T(f32({1}, {1}))}}), Error);
}

TEST_CASE("Scan-9 honours input/output axes and directions", "[ref]") {
  ModelBuilder mb(11);
  Value* init = mb.input("init");
  Value* x = mb.input("x");
  auto [body, bin] = subgraph(mb.g, {"sum", "xt"});
  Node* add = body->addNode("Add", {bin[0], bin[1]}, {"sum_next"});
  Node* out = body->addNode("Identity", {add->output(0)}, {"seen"});
  body->addOutput(add->output(0));
  body->addOutput(out->output(0));
  Node* scan = mb.g->addNode("Scan", {init, x}, {"final", "ys"});
  scan->setAttr(graphAttr("body", body));
  scan->setAttr(Attribute::ofInt("num_scan_inputs", 1));
  scan->setAttr(ints("scan_input_axes", {-1}));  // scan the columns of a [2,3] input
  scan->setAttr(ints("scan_input_directions", {1}));
  scan->setAttr(ints("scan_output_axes", {1}));
  scan->setAttr(ints("scan_output_directions", {1}));
  mb.g->addOutput(scan->output(0));
  mb.g->addOutput(scan->output(1));

  auto outs = mb.run({{"init", T(f32({2}, {0, 0}))}, {"x", T(f32({2, 3}, {1, 2, 3, 4, 5, 6}))}});
  // Columns visited 2, 1, 0: running sums [3,6], [5,11], [6,15]; prepended along axis 1.
  CHECK(floatsOf(outs[0]) == std::vector<float>{6, 15});
  CHECK(outs[1].tensor->dims == std::vector<int64_t>{2, 3});
  CHECK(floatsOf(outs[1]) == std::vector<float>{6, 5, 3, 15, 11, 6});
}

TEST_CASE("Scan-8 scans per batch, honours sequence_lens and reverse, zero-pads outputs", "[ref]") {
  ModelBuilder mb(8);
  Value* lens = mb.input("lens");
  Value* init = mb.input("init");
  Value* x = mb.input("x");
  auto [body, bin] = subgraph(mb.g, {"sum", "xt"});
  Node* add = body->addNode("Add", {bin[0], bin[1]}, {"sum_next"});
  Node* out = body->addNode("Identity", {add->output(0)}, {"seen"});
  body->addOutput(add->output(0));
  body->addOutput(out->output(0));
  Node* scan = mb.g->addNode("Scan", {lens, init, x}, {"final", "ys"});
  scan->setAttr(graphAttr("body", body));
  scan->setAttr(Attribute::ofInt("num_scan_inputs", 1));
  scan->setAttr(ints("directions", {1}));
  mb.g->addOutput(scan->output(0));
  mb.g->addOutput(scan->output(1));

  // batch 2, max length 3, element shape [1]; batch 1 has length 2.
  auto outs = mb.run({{"lens", T(i64({2}, {3, 2}))},
                      {"init", T(f32({2, 1}, {0, 100}))},
                      {"x", T(f32({2, 3, 1}, {1, 2, 3, 4, 5, 6}))}});
  CHECK(floatsOf(outs[0]) == std::vector<float>{6, 109});
  CHECK(outs[1].tensor->dims == std::vector<int64_t>{2, 3, 1});
  CHECK(floatsOf(outs[1]) == std::vector<float>{3, 5, 6, 105, 109, 0});
}

TEST_CASE("If yields sequences, optionals, and outer values released early elsewhere", "[ref]") {
  ModelBuilder mb(16);
  Value* c = mb.input("c");
  Value* x = mb.input("x");
  Node* a = mb.g->addNode("Add", {x, x}, {"a"});
  Node* b = mb.g->addNode("Identity", {a->output(0)}, {"b"});  // a's last use as a node input
  auto [thenG, tin] = subgraph(mb.g, {});
  thenG->addOutput(a->output(0));  // the branch yields the outer value itself
  auto [elseG, ein] = subgraph(mb.g, {});
  elseG->addOutput(b->output(0));
  Node* iff = mb.g->addNode("If", {c}, {"y"});
  iff->setAttr(graphAttr("then_branch", thenG));
  iff->setAttr(graphAttr("else_branch", elseG));
  // A second If: an optional of a sequence, or a none optional.
  auto [then2, t2] = subgraph(mb.g, {});
  Node* seq = then2->addNode("SequenceConstruct", {x, x}, {"s"});
  Node* opt = then2->addNode("Optional", {seq->output(0)}, {"o"});
  then2->addOutput(opt->output(0));
  auto [else2, e2] = subgraph(mb.g, {});
  Node* noneOpt = else2->addNode("Optional", {}, {"none"});
  Attribute type;
  type.name = "type";
  type.type = AttrType::TypeProto;
  type.tp = std::make_shared<TypeInfo>(TypeInfo::tensor(DType::Float, Shape::unknownRank()));
  noneOpt->setAttr(type);
  else2->addOutput(noneOpt->output(0));
  Node* if2 = mb.g->addNode("If", {c}, {"z"});
  if2->setAttr(graphAttr("then_branch", then2));
  if2->setAttr(graphAttr("else_branch", else2));
  Node* has = mb.g->addNode("OptionalHasElement", {if2->output(0)}, {"has"});
  mb.g->addOutput(iff->output(0));
  mb.g->addOutput(if2->output(0));
  mb.g->addOutput(has->output(0));

  auto yes = mb.run({{"c", T(boolScalar(true))}, {"x", T(f32({1}, {2}))}});
  CHECK(floatsOf(yes[0]) == std::vector<float>{4});
  REQUIRE(yes[1].kind == RtValue::Kind::Optional);
  REQUIRE(yes[1].elements.size() == 1);
  CHECK(yes[1].elements[0].elements.size() == 2);
  CHECK(yes[2].tensor->elementAsInt(0) == 1);
  auto no = mb.run({{"c", T(boolScalar(false))}, {"x", T(f32({1}, {2}))}});
  CHECK(floatsOf(no[0]) == std::vector<float>{4});
  CHECK(no[1].kind == RtValue::Kind::Optional);
  CHECK(no[1].elements.empty());
  CHECK(no[2].tensor->elementAsInt(0) == 0);
}

TEST_CASE("OptionalGetElement of a none optional fails; of a tensor passes it through", "[ref]") {
  ModelBuilder mb(18);
  Value* x = mb.input("x");
  Node* get = mb.g->addNode("OptionalGetElement", {x}, {"y"});
  Node* has = mb.g->addNode("OptionalHasElement", {x}, {"h"});
  mb.g->addOutput(get->output(0));
  mb.g->addOutput(has->output(0));
  auto outs = mb.run({{"x", T(f32({1}, {7}))}});
  CHECK(floatsOf(outs[0]) == std::vector<float>{7});
  CHECK(outs[1].tensor->elementAsInt(0) == 1);
  CHECK_THROWS_AS(mb.run({{"x", RtValue::optionalNone()}}), Error);
}

TEST_CASE("SplitToSequence and ConcatFromSequence", "[ref]") {
  ModelBuilder mb(24);
  Value* x = mb.input("x");
  Value* split = mb.input("split");
  Node* parts = mb.g->addNode("SplitToSequence", {x, split}, {"parts"});
  parts->setAttr(Attribute::ofInt("axis", -1));
  Node* ones = mb.g->addNode("SplitToSequence", {x}, {"ones"});
  ones->setAttr(Attribute::ofInt("axis", 1));
  ones->setAttr(Attribute::ofInt("keepdims", 0));
  Node* stacked = mb.g->addNode("ConcatFromSequence", {ones->output(0)}, {"stacked"});
  stacked->setAttr(Attribute::ofInt("axis", -1));
  stacked->setAttr(Attribute::ofInt("new_axis", 1));
  Node* joined = mb.g->addNode("ConcatFromSequence", {parts->output(0)}, {"joined"});
  joined->setAttr(Attribute::ofInt("axis", 1));
  mb.g->addOutput(parts->output(0));
  mb.g->addOutput(ones->output(0));
  mb.g->addOutput(stacked->output(0));
  mb.g->addOutput(joined->output(0));

  std::vector<float> xs{0, 1, 2, 3, 4, 10, 11, 12, 13, 14};
  auto outs = mb.run({{"x", T(f32({2, 5}, xs))}, {"split", T(i64({}, {2}))}});
  REQUIRE(outs[0].elements.size() == 3);  // 2, 2, and the remainder 1
  CHECK(outs[0].elements[2].tensor->dims == std::vector<int64_t>{2, 1});
  CHECK(floatsOf(outs[0].elements[1]) == std::vector<float>{2, 3, 12, 13});
  REQUIRE(outs[1].elements.size() == 5);
  CHECK(outs[1].elements[4].tensor->dims == std::vector<int64_t>{2});
  CHECK(outs[2].tensor->dims == std::vector<int64_t>{2, 5});  // stacking columns rebuilds x
  CHECK(floatsOf(outs[2]) == xs);
  CHECK(floatsOf(outs[3]) == xs);

  SECTION("1-D split lengths must cover the axis") {
    CHECK_THROWS_AS(mb.run({{"x", T(f32({2, 5}, xs))}, {"split", T(i64({2}, {2, 2}))}}), Error);
    auto zeroLen = mb.run({{"x", T(f32({2, 5}, xs))}, {"split", T(i64({3}, {0, 5, 0}))}});
    CHECK(zeroLen[0].elements.size() == 3);
    CHECK(zeroLen[0].elements[0].tensor->dims == std::vector<int64_t>{2, 0});
  }
}

TEST_CASE("SplitToSequence copies packed 4-bit elements", "[ref]") {
  ModelBuilder mb(24);
  Value* x = mb.input("x");
  Value* split = mb.input("split");
  Node* parts = mb.g->addNode("SplitToSequence", {x, split}, {"parts"});
  parts->setAttr(Attribute::ofInt("axis", 1));
  mb.g->addOutput(parts->output(0));
  Tensor u4;  // [2,3] uint4: 1 2 3 / 4 5 6
  u4.dataType = static_cast<int32_t>(DType::UInt4);
  u4.dims = {2, 3};
  const uint8_t bytes[] = {0x21, 0x43, 0x65};
  u4.setRaw(Buffer::copyOf(std::span<const uint8_t>(bytes, 3)));
  auto outs = mb.run({{"x", T(u4)}, {"split", T(i64({2}, {1, 2}))}});
  REQUIRE(outs[0].elements.size() == 2);
  const RtTensor& right = *outs[0].elements[1].tensor;
  CHECK(right.dims == std::vector<int64_t>{2, 2});
  REQUIRE(right.raw.size() == 2);
  CHECK(right.raw.data()[0] == 0x32);  // 2, 3
  CHECK(right.raw.data()[1] == 0x65);  // 5, 6
  CHECK(outs[0].elements[0].tensor->raw.data()[0] == 0x41);  // 1, 4
}

TEST_CASE("SequenceInsert, SequenceErase and SequenceAt positions", "[ref]") {
  ModelBuilder mb(11);
  Value* a = mb.input("a");
  Value* b = mb.input("b");
  Value* p = mb.input("p");
  Node* seq = mb.g->addNode("SequenceConstruct", {a, a}, {"s"});
  Node* ins = mb.g->addNode("SequenceInsert", {seq->output(0), b, p}, {"s2"});
  Node* er = mb.g->addNode("SequenceErase", {ins->output(0)}, {"s3"});  // drops the last
  Node* at = mb.g->addNode("SequenceAt", {er->output(0), p}, {"e"});
  mb.g->addOutput(er->output(0));
  mb.g->addOutput(at->output(0));
  auto outs = mb.run({{"a", T(f32({1}, {1}))}, {"b", T(f32({1}, {2}))}, {"p", T(i64({}, {-1}))}});
  // insert at -1: [a, b, a]; erase last: [a, b]; at -1: b.
  CHECK(outs[0].elements.size() == 2);
  CHECK(floatsOf(outs[1]) == std::vector<float>{2});
  CHECK_THROWS_AS(mb.run({{"a", T(f32({1}, {1}))}, {"b", T(f32({1}, {2}))}, {"p", T(i64({}, {4}))}}), Error);
  CHECK_THROWS_AS(mb.run({{"a", T(f32({1}, {1}))}, {"b", T(i64({1}, {2}))}, {"p", T(i64({}, {0}))}}), Error);
}

TEST_CASE("SequenceMap maps sequences element-wise and passes tensors whole", "[ref]") {
  ModelBuilder mb(17);
  Value* s = mb.input("s");
  Value* t = mb.input("t");
  auto [body, bin] = subgraph(mb.g, {"e", "k"});
  Node* add = body->addNode("Add", {bin[0], bin[1]}, {"r"});
  body->addOutput(add->output(0));
  Node* map = mb.g->addNode("SequenceMap", {s, t}, {"out"});
  map->setAttr(graphAttr("body", body));
  mb.g->addOutput(map->output(0));
  auto outs = mb.run({{"s", RtValue::sequence({T(f32({1}, {1})), T(f32({2}, {2, 3}))})}, {"t", T(f32({1}, {10}))}});
  REQUIRE(outs[0].elements.size() == 2);
  CHECK(floatsOf(outs[0].elements[1]) == std::vector<float>{12, 13});
  auto empty = mb.run({{"s", RtValue::sequence({})}, {"t", T(f32({1}, {10}))}});
  CHECK(empty[0].kind == RtValue::Kind::Sequence);
  CHECK(empty[0].elements.empty());
}

TEST_CASE("Model-local functions: attribute references, omitted inputs, nested calls", "[ref]") {
  ModelBuilder mb(18);
  mb.m.opsetImports.push_back({"local", 1, ""});
  // local.AddConst(x, opt) = Add(x, Constant(value_float = @alpha)), and whether opt was given.
  auto fn = std::make_unique<Function>();
  fn->name = "AddConst";
  fn->domain = "local";
  fn->attributeNames = {"alpha"};
  fn->opsetImports.push_back({"", 18, ""});
  fn->body = std::make_unique<Graph>();
  Graph* fb = fn->body.get();
  Value* fx = fb->createValue("x");
  fb->addInput(fx);
  Value* fopt = fb->createValue("opt");
  fb->addInput(fopt);
  Node* k = fb->addNode("Constant", {}, {"k"});
  Attribute ref;
  ref.name = "value_float";
  ref.type = AttrType::Float;
  ref.refAttrName = "alpha";
  k->setAttr(ref);
  Node* add = fb->addNode("Add", {fx, k->output(0)}, {"y"});
  Node* has = fb->addNode("OptionalHasElement", {fopt}, {"has"});
  fb->addOutput(add->output(0));
  fb->addOutput(has->output(0));
  // local.Twice(x) calls AddConst twice, forwarding its own attribute.
  auto twice = std::make_unique<Function>();
  twice->name = "Twice";
  twice->domain = "local";
  twice->attributeNames = {"beta"};
  twice->opsetImports = {{"", 18, ""}, {"local", 1, ""}};
  twice->body = std::make_unique<Graph>();
  Graph* tb = twice->body.get();
  Value* tx = tb->createValue("x");
  tb->addInput(tx);
  Node* c1 = tb->addNode("AddConst", {tx, nullptr}, {"y1", ""}, "local");
  Node* c2 = tb->addNode("AddConst", {c1->output(0), tx}, {"y2", "h2"}, "local");
  for (Node* c : {c1, c2}) {
    Attribute fwd;
    fwd.name = "alpha";
    fwd.type = AttrType::Float;
    fwd.refAttrName = "beta";
    c->setAttr(fwd);
  }
  tb->addOutput(c2->output(0));
  tb->addOutput(c2->output(1));
  mb.m.functions.push_back(std::move(fn));
  mb.m.functions.push_back(std::move(twice));

  Value* x = mb.input("x");
  Node* call = mb.g->addNode("AddConst", {x, nullptr}, {"y", "h"}, "local");
  call->setAttr(Attribute::ofFloat("alpha", 0.5f));
  Node* call2 = mb.g->addNode("Twice", {x}, {"z", "h2"}, "local");
  call2->setAttr(Attribute::ofFloat("beta", 3.0f));
  mb.g->addOutput(call->output(0));
  mb.g->addOutput(call->output(1));
  mb.g->addOutput(call2->output(0));
  mb.g->addOutput(call2->output(1));

  auto outs = mb.run({{"x", T(f32({2}, {1, 2}))}});
  CHECK(floatsOf(outs[0]) == std::vector<float>{1.5f, 2.5f});
  CHECK(outs[1].tensor->elementAsInt(0) == 0);  // opt omitted by the caller
  CHECK(floatsOf(outs[2]) == std::vector<float>{7, 8});
  CHECK(outs[3].tensor->elementAsInt(0) == 1);
}
