// test_shape_inference.cpp: symbolic expressions and hand-checked shape inference cases.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>

#include "lib/error.h"
#include "lib/ir.h"
#include "lib/shape_inference.h"
#include "lib/symbolic.h"

using namespace onnxtool;

namespace {

SymExpr sym(const char* n) { return SymExpr::symbol(n); }

Shape shapeOf(std::initializer_list<const char*> dims) {
  Shape s;
  s.hasRank = true;
  for (const char* d : dims) {
    char* end = nullptr;
    long long v = std::strtoll(d, &end, 10);
    s.dims.push_back(*end == '\0' ? Dim::ofValue(v) : Dim::ofParam(d));
  }
  return s;
}

std::unique_ptr<Model> newModel(int64_t opset = 17) {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports.push_back({"", opset, ""});
  m->graph = std::make_unique<Graph>();
  return m;
}

Value* input(Model& m, const char* name, DType t, Shape s) {
  Value* v = m.graph->createValue(name);
  v->setType(TypeInfo::tensor(t, std::move(s)));
  m.graph->addInput(v);
  return v;
}

Value* ints(Model& m, const char* name, std::vector<int64_t> v) {
  return m.graph->addInitializer(Tensor::fromInt64s(name, {static_cast<int64_t>(v.size())}, v));
}

}  // namespace

TEST_CASE("symbolic expressions are canonical", "[symbolic]") {
  CHECK((sym("seq") + sym("past")).str() == "past+seq");
  CHECK((sym("seq") + sym("past")) == (sym("past") + sym("seq")));
  CHECK((SymExpr(2) * sym("batch")).str() == "2*batch");
  CHECK((sym("h") - SymExpr(1)).str() == "h-1");
  CHECK((sym("a") - sym("a")).isConstant());
  CHECK((sym("a") * sym("b") + SymExpr(3)).str() == "a*b+3");
  CHECK(SymExpr::floorDiv(sym("h") - SymExpr(1), 2).str() == "floor((h+1)/2)-1");
  CHECK(SymExpr::floorDiv(SymExpr(4) * sym("n") + SymExpr(2), 2).str() == "2*n+1");
  CHECK(SymExpr::floorDiv(SymExpr(-7), 2).asConstant() == -4);
  CHECK(SymExpr::ceilDiv(sym("h"), 2) == SymExpr::floorDiv(sym("h") + SymExpr(1), 2));
  CHECK(SymExpr::exactDiv(SymExpr(768) * sym("b") * sym("s"), SymExpr(12) * sym("b") * sym("s"))->asConstant() == 64);
  CHECK_FALSE(SymExpr::exactDiv(sym("b") * SymExpr(3), SymExpr(2)).has_value());
  CHECK_FALSE(SymExpr::exactDiv(sym("b"), sym("s")).has_value());
}

TEST_CASE("broadcast of symbolic dims", "[shape_inference]") {
  auto m = newModel();
  Value* a = input(*m, "a", DType::Float, shapeOf({"batch", "1", "64"}));
  Value* b = input(*m, "b", DType::Float, shapeOf({"seq", "1"}));
  Node* n = m->graph->addNode("Add", {a, b}, {"y"});
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  CHECK(n->output(0)->type().str() == "tensor(float)[batch,seq,64]");
}

TEST_CASE("Concat of seq and past gives past+seq; Reshape -1 divides symbolically", "[shape_inference]") {
  auto m = newModel();
  Value* past = input(*m, "past", DType::Float, shapeOf({"batch", "12", "past", "64"}));
  Value* cur = input(*m, "cur", DType::Float, shapeOf({"batch", "12", "seq", "64"}));
  Node* cat = m->graph->addNode("Concat", {past, cur}, {"kv"});
  cat->setAttr(Attribute::ofInt("axis", -2));
  Node* reshape = m->graph->addNode("Reshape", {cat->output(0), ints(*m, "shape", {0, -1, 64})}, {"flat"});
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  CHECK(cat->output(0)->type().str() == "tensor(float)[batch,12,past+seq,64]");
  CHECK(reshape->output(0)->type().str() == "tensor(float)[batch,12*past+12*seq,64]");
}

TEST_CASE("Reshape target computed from Shape/Gather/Concat via data propagation", "[shape_inference]") {
  auto m = newModel();
  Value* x = input(*m, "x", DType::Float, shapeOf({"batch", "seq", "768"}));
  Node* shape = m->graph->addNode("Shape", {x}, {"s"});
  Node* dims = m->graph->addNode("Gather", {shape->output(0), ints(*m, "idx", {0, 1})}, {"bs"});
  Node* cat = m->graph->addNode("Concat", {dims->output(0), ints(*m, "heads", {12, -1})}, {"target"});
  cat->setAttr(Attribute::ofInt("axis", 0));
  Node* r = m->graph->addNode("Reshape", {x, cat->output(0)}, {"y"});
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  CHECK(r->output(0)->type().str() == "tensor(float)[batch,seq,12,64]");
  CHECK(report.valuesFullyKnown == report.valuesTotal);
}

TEST_CASE("Conv output size over a symbolic height", "[shape_inference]") {
  auto m = newModel();
  Value* x = input(*m, "x", DType::Float, shapeOf({"n", "3", "h", "224"}));
  Value* w = m->graph->addInitializer(Tensor::fromFloats("w", {8, 3, 3, 3}, std::vector<float>(8 * 27)));
  Node* conv = m->graph->addNode("Conv", {x, w}, {"y"});
  conv->setAttr(Attribute::ofInts("strides", {2, 2}));
  conv->setAttr(Attribute::ofInts("pads", {1, 1, 1, 1}));
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  // floor((h + 2 - 3) / 2) + 1 == floor((h+1)/2)
  CHECK(conv->output(0)->type().str() == "tensor(float)[n,8,floor((h+1)/2),112]");
}

TEST_CASE("MatMul with different inner dimensions is a finding naming the node", "[shape_inference]") {
  auto m = newModel();
  Value* a = input(*m, "a", DType::Float, shapeOf({"2", "3"}));
  Value* b = input(*m, "b", DType::Float, shapeOf({"4", "5"}));
  Node* n = m->graph->addNode("MatMul", {a, b}, {"y"});
  n->name = "MatMul_3";
  auto report = inferShapes(*m);
  REQUIRE(report.errors.size() == 1);
  CHECK(report.errors[0] == "node 'MatMul_3' (MatMul): inner dimensions differ, 3 vs 4");
  InferOptions strict;
  strict.strict = true;
  CHECK_THROWS_AS(inferShapes(*m, strict), Error);
}

TEST_CASE("type-constraint violations and declared conflicts are findings", "[shape_inference]") {
  auto m = newModel();
  Value* a = input(*m, "a", DType::Float, shapeOf({"2"}));
  Value* b = input(*m, "b", DType::Int64, shapeOf({"2"}));
  m->graph->addNode("Add", {a, b}, {"y"})->name = "add";
  Node* n = m->graph->addNode("Relu", {a}, {"z"});
  n->output(0)->setType(TypeInfo::tensor(DType::Float, shapeOf({"3"})));
  auto report = inferShapes(*m);
  REQUIRE(report.errors.size() == 2);
  CHECK(report.errors[0].starts_with("node 'add' (Add): input 'b' has type tensor(int64) but input 'a' bound T"));
  CHECK(report.errors[1].find("inferred as tensor(float)[2] but declared as tensor(float)[3]") != std::string::npos);
}

TEST_CASE("--shape renames input dims and inferred types are written as value_info", "[shape_inference]") {
  auto m = newModel();
  Value* x = input(*m, "x", DType::Float, shapeOf({"N", "4"}));
  Node* n = m->graph->addNode("Relu", {x}, {"r"});
  m->graph->addNode("Identity", {n->output(0)}, {"out"});
  m->graph->addOutput(m->graph->findLocal("out"));
  InferOptions o;
  o.inputDims["x"] = {"batch", "4"};
  inferShapes(*m, o);
  CHECK(m->graph->findLocal("out")->type().str() == "tensor(float)[batch,4]");
  CHECK(writeInferredValueInfos(*m) == 1);
  CHECK(m->graph->valueInfos().at(0).value->name() == "r");
  o.inputDims["nope"] = {"1"};
  CHECK_THROWS_AS(inferShapes(*m, o), Error);
}

TEST_CASE("If merges branch shapes; subgraphs see outer values", "[shape_inference]") {
  auto m = newModel();
  Value* c = input(*m, "c", DType::Bool, shapeOf({}));
  Value* x = input(*m, "x", DType::Float, shapeOf({"n", "4"}));
  Node* node = m->graph->addNode("If", {c}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto g = std::make_shared<Graph>(m->graph.get(), node);
    Node* inner = g->addNode(branch[0] == 't' ? "Relu" : "Transpose", {x}, {std::string(branch) + "_out"});
    g->addOutput(inner->output(0));
    Attribute a;
    a.name = branch;
    a.type = AttrType::Graph;
    a.g = g;
    node->setAttr(a);
  }
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  // [n,4] vs [4,n]: the rank agrees, the dims do not, so they get fresh names.
  const TypeInfo& t = node->output(0)->type();
  REQUIRE(t.shape.hasRank);
  CHECK(t.shape.rank() == 2);
  CHECK(t.shape.dims[0].param.starts_with("unk__"));
}

// Correctness over a long chain; its speed is measured by scripts/bench_shape_inference.py (timed
// assertions do not belong in tests: sanitizers and loaded CI machines make them flaky).
TEST_CASE("inference over a 1000-node chain keeps every shape", "[shape_inference]") {
  auto m = newModel();
  Value* v = input(*m, "x", DType::Float, shapeOf({"batch", "seq", "768"}));
  Value* w = m->graph->addInitializer(Tensor::fromFloats("w", {768}, std::vector<float>(768)));
  for (int i = 0; i < 1000; ++i) v = m->graph->addNode(i % 2 ? "Add" : "Relu", i % 2 ? std::vector<Value*>{v, w} : std::vector<Value*>{v}, {"v" + std::to_string(i)})->output(0);
  auto report = inferShapes(*m);
  CHECK(report.valuesFullyKnown == 1000);
  const TypeInfo& last = v->type();
  REQUIRE(last.shape.rank() == 3);
  CHECK(last.shape.dims[0].param == "batch");
  CHECK(last.shape.dims[1].param == "seq");
  CHECK(last.shape.dims[2].value == 768);
}

TEST_CASE("declared types are claims: values take the inferred type, contradicted entries are rewritten", "[shape_inference]") {
  auto m = newModel();
  Value* x = input(*m, "x", DType::Float, shapeOf({"N", "3"}));
  Node* relu = m->graph->addNode("Relu", {x}, {"r"});
  Node* flat = m->graph->addNode("Flatten", {relu->output(0)}, {"out"});
  Value* r = relu->output(0);
  Value* out = flat->output(0);
  // As loaded: value_info says r is [5, 3] (a static dim where the input has a symbol), the graph
  // output says [1, seqlen] where Flatten gives [N, 3]: neither may reach a pass.
  r->setType(TypeInfo::tensor(DType::Float, shapeOf({"5", "3"})));
  ValueInfoEntry e;
  e.value = r;
  m->graph->valueInfos().push_back(e);
  m->graph->addOutput(out);
  out->setType(TypeInfo::tensor(DType::Float, shapeOf({"1", "seqlen", "7"})));
  auto report = inferShapes(*m);
  CHECK(r->type().str() == "tensor(float)[N,3]");
  CHECK(out->type().str() == "tensor(float)[N,3]");
  REQUIRE(report.declarationConflicts.size() == 2);
  CHECK(report.declarationConflicts[0].message() ==
        "output 'out' is declared float32[1,seqlen,7] but computes float32[N,3]; the written model declares float32[N,3]");
  CHECK(report.declarationConflicts[1].message() ==
        "value_info 'r' is declared float32[5,3] but computes float32[N,3]; the written model declares float32[N,3]");
  CHECK(m->graph->outputs()[0].type().str() == "tensor(float)[N,3]");
  CHECK(m->graph->valueInfos()[0].type().str() == "tensor(float)[N,3]");
  // A rank conflict of a node output is an error finding (check reports it); a static dim where
  // inference proves a symbol is only a warning.
  REQUIRE(report.errors.size() == 1);
  CHECK(report.errors[0].find("output 'out' inferred as tensor(float)[N,3] but declared as tensor(float)[1,seqlen,7]") !=
        std::string::npos);
  // Inference again: the rewritten declarations stand, nothing more to report.
  auto again = inferShapes(*m);
  CHECK(again.declarationConflicts.empty());
  CHECK(again.errors.empty());
}

TEST_CASE("declarations inference cannot refute are kept for writing, never read by passes", "[shape_inference]") {
  auto m = newModel();
  m->opsetImports.push_back({"com.example", 1, ""});
  Value* x = input(*m, "x", DType::Float, shapeOf({"N", "3"}));
  Node* foo = m->graph->addNode("Foo", {x}, {"f"}, "com.example");
  Node* relu = m->graph->addNode("Relu", {x}, {"r"});
  Value* f = foo->output(0);
  Value* r = relu->output(0);
  f->setType(TypeInfo::tensor(DType::Float, shapeOf({"5", "3"})));
  r->setType(TypeInfo::tensor(DType::Float, shapeOf({"batch", "cols"})));
  for (Value* v : {f, r}) {
    ValueInfoEntry e;
    e.value = v;
    m->graph->valueInfos().push_back(e);
  }
  auto report = inferShapes(*m);
  // No schema for Foo: the declared element type is kept, the claimed shape is not.
  CHECK(f->type().str() == "tensor(float)?");
  // A symbol of its own where inference proves N: not a contradiction, but no proof either; a
  // symbol where inference proves a size is refined in the written declaration.
  CHECK(r->type().str() == "tensor(float)[N,3]");
  CHECK(report.declarationConflicts.empty());
  CHECK(report.errors.empty());
  CHECK(m->graph->valueInfos()[0].type().str() == "tensor(float)[5,3]");
  CHECK(m->graph->valueInfos()[1].type().str() == "tensor(float)[batch,3]");  // declared [batch,cols]
}

TEST_CASE("Slice ends meaning 'to the end' (1e9, INT32_MAX, INT64_MAX) give the symbolic dim", "[shape_inference]") {
  auto m = newModel(13);
  Value* x = input(*m, "x", DType::Float, shapeOf({"N", "seq", "4"}));
  Value* axis = ints(*m, "axis", {1});
  std::vector<Node*> slices;
  int i = 0;
  for (int64_t end : {int64_t{1000000000}, int64_t{2147483647}, INT64_MAX}) {
    std::string k = std::to_string(i++);
    slices.push_back(m->graph->addNode("Slice", {x, ints(*m, ("one" + k).c_str(), {1}), ints(*m, ("end" + k).c_str(), {end}), axis},
                                       {"s" + k}));
  }
  Node* tail = m->graph->addNode("Slice", {x, ints(*m, "minus3", {-3}), ints(*m, "e9", {1000000000}), axis}, {"tail"});
  Node* head = m->graph->addNode("Slice", {x, ints(*m, "big_neg", {-1000000000}), ints(*m, "two", {2}), axis}, {"head"});
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  for (Node* n : slices) CHECK(n->output(0)->type().str() == "tensor(float)[N,seq-1,4]");
  // x[:, -3:] and x[:, :2] have 3 and 2 rows only when seq has that many: unknown (a fresh
  // symbol), as ONNX's inference leaves them; a detector's Slice of its detections to [:100] was
  // planned as 100 rows and failed on an image with none.
  CHECK(tail->output(0)->type().str().rfind("tensor(float)[N,unk__", 0) == 0);
  CHECK(head->output(0)->type().str().rfind("tensor(float)[N,unk__", 0) == 0);
  CHECK(tail->output(0)->type().shape.dims.at(2).str() == "4");
}

TEST_CASE("Slice steps near INT64_MAX or INT64_MIN take one element, not an overflowed length", "[shape_inference]") {
  auto m = newModel(13);
  Value* x = input(*m, "x", DType::Float, shapeOf({"17"}));
  Value* axis = ints(*m, "axis", {0});
  // The reference kernel (and the ONNX spec's loop) take index 1, then index 15.
  Node* up = m->graph->addNode("Slice", {x, ints(*m, "s1", {1}), ints(*m, "e16", {16}), axis, ints(*m, "big", {INT64_MAX})}, {"up"});
  Node* down = m->graph->addNode("Slice", {x, ints(*m, "s15", {15}), ints(*m, "e0", {0}), axis, ints(*m, "small", {INT64_MIN})},
                                 {"down"});
  Node* none = m->graph->addNode("Slice", {x, ints(*m, "s3", {3}), ints(*m, "e3", {3}), axis, ints(*m, "big2", {INT64_MAX})}, {"none"});
  auto report = inferShapes(*m);
  CHECK(report.errors.empty());
  CHECK(up->output(0)->type().str() == "tensor(float)[1]");
  CHECK(down->output(0)->type().str() == "tensor(float)[1]");
  CHECK(none->output(0)->type().str() == "tensor(float)[0]");
}
