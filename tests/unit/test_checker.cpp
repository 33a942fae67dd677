// test_checker.cpp: the model checker on small IR models built by hand: what it accepts, the
// exact message of each kind of finding, and that findings are all reported, not the first only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lib/checker.h"
#include "lib/ir.h"
#include "lib/ops/op_schema.h"

using namespace onnxtool;

namespace {

TypeInfo floatVec() { return TypeInfo::tensor(DType::Float, Shape::of({2})); }

/// m.onnx: ir 8, ai.onnx 13, graph "g" with input x (float [2]).
struct TestModel {
  Model m;
  Graph* g;
  Value* x;
  TestModel() {
    m.path = "m.onnx";
    m.irVersion = 8;
    m.opsetImports.push_back({"", 13, {}});
    m.graph = std::make_unique<Graph>();
    g = m.graph.get();
    g->name = "g";
    x = g->createValue("x");
    x->setType(floatVec());
    g->addInput(x);
  }
  Node* node(const std::string& op, const std::vector<Value*>& ins, const std::vector<std::string>& outs,
             const std::string& name, Graph* in = nullptr) {
    Node* n = (in ? in : g)->addNode(op, ins, outs);
    n->name = name;
    return n;
  }
  void output(Value* v) {
    v->setType(floatVec());
    g->addOutput(v);
  }
  std::vector<std::string> messages() const {
    std::vector<std::string> out;
    for (const Diagnostic& d : checkModel(m)) out.push_back(d.message);
    return out;
  }
};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("a valid model has no findings", "[checker]") {
  TestModel t;
  Node* r = t.node("Relu", {t.x}, {"r"}, "relu");
  Node* a = t.node("Add", {t.x, r->output(0)}, {"y"}, "add");
  t.output(a->output(0));
  CHECK(t.messages().empty());
  CHECK_FALSE(hasErrors(checkModel(t.m)));
}

TEST_CASE("an op the opset does not define names the version that introduces it", "[checker]") {
  TestModel t;
  Node* n = t.node("Gelu", {t.x}, {"y"}, "gelu");
  t.output(n->output(0));
  auto ds = checkModel(t.m);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].message ==
        "m.onnx: node 'gelu' (Gelu): op 'Gelu' is not defined in opset 13 of domain ai.onnx, expected opset 20 or "
        "newer for this op");
  CHECK(ds[0].severity == Diagnostic::Severity::Error);
  CHECK(ds[0].nodeName == "gelu");
  CHECK(ds[0].opType == "Gelu");
}

TEST_CASE("every finding is reported, not only the first", "[checker]") {
  TestModel t;
  t.node("Add", {t.x}, {"a"}, "add");                                 // too few inputs
  Node* r = t.node("Relu", {t.x}, {"y"}, "relu");
  r->setAttr(Attribute::ofFloat("alpha", 0.5f));                      // unknown attribute
  t.output(r->output(0));
  t.output(t.g->createValue("z"));                                    // produced by nothing
  auto msgs = t.messages();
  CHECK(msgs.size() == 3);
  CHECK(contains(msgs, "m.onnx: node 'add' (Add): has 1 input, expected 2"));
  CHECK(contains(msgs, "m.onnx: node 'relu' (Relu): has unknown attribute 'alpha', expected no attributes"));
  CHECK(contains(
      msgs,
      "m.onnx: graph 'g': output 'z' is not produced by any node, expected a graph input, initializer or node output"));
}

TEST_CASE("undefined inputs, use before definition and cycles", "[checker]") {
  SECTION("undefined") {
    TestModel t;
    Node* n = t.node("Add", {t.x, t.g->createValue("ghost")}, {"y"}, "add");
    t.output(n->output(0));
    CHECK(t.messages() ==
          std::vector<std::string>{
              "m.onnx: node 'add' (Add): input 'ghost' is not defined, expected a graph input, initializer or "
              "the output of an earlier node"});
  }
  SECTION("out of order") {
    TestModel t;
    Node* a = t.node("Relu", {t.x}, {"a"}, "first");
    Node* b = t.node("Neg", {a->output(0)}, {"y"}, "second");
    t.output(b->output(0));
    t.g->moveNode(a, nullptr);  // first now runs after its consumer
    CHECK(t.messages() ==
          std::vector<std::string>{
              "m.onnx: node 'second' (Neg): input 'a' is used before it is defined (by node 'first' (Relu)), "
              "expected nodes in topological order"});
  }
  SECTION("cycle") {
    TestModel t;
    Value* b = t.g->createValue("b");  // forward reference, adopted by the node defining it
    Node* n1 = t.node("Add", {t.x, b}, {"a"}, "n1");
    Node* n2 = t.node("Relu", {n1->output(0)}, {"b"}, "n2");
    REQUIRE(n2->output(0) == b);
    t.output(b);
    auto msgs = t.messages();
    CHECK(contains(msgs, "m.onnx: graph 'g': nodes 'n1' -> 'n2' -> 'n1' form a cycle, expected an acyclic graph"));
  }
}

TEST_CASE("subgraphs see outer values defined before their node", "[checker]") {
  TestModel t;
  Value* cond = t.g->createValue("cond");
  cond->setType(TypeInfo::tensor(DType::Bool, Shape::of({})));
  t.g->addInput(cond);
  Node* ifNode = t.node("If", {cond}, {"y"}, "if1");
  auto branch = [&](const std::string& attr, std::vector<Value*> ins) {
    auto sg = std::make_shared<Graph>(t.g, ifNode);
    sg->name = attr + "_g";
    Node* n = sg->addNode("Add", ins, {attr + "_out"});
    n->name = attr + "_add";
    sg->addOutput(n->output(0));
    Attribute a;
    a.name = attr;
    a.type = AttrType::Graph;
    a.g = sg;
    ifNode->setAttr(a);
    return sg;
  };
  branch("then_branch", {t.x, t.x});
  auto elseG = branch("else_branch", {t.x, nullptr});
  t.output(ifNode->output(0));
  SECTION("outer scope use is valid; a required input left empty is not") {
    CHECK(t.messages() ==
          std::vector<std::string>{
              "m.onnx: node 'else_branch_add' (Add) in subgraph 'else_branch' of node 'if1' (If): input 1 ('B') "
              "is empty, expected a value (the input is required)"});
  }
  SECTION("a name no scope defines") {
    Node* n = elseG->nodes().front().get();
    n->setInput(1, elseG->createValue("ghost"));
    CHECK(t.messages() ==
          std::vector<std::string>{
              "m.onnx: node 'else_branch_add' (Add) in subgraph 'else_branch' of node 'if1' (If): input 'ghost' "
              "is not defined, expected an input, initializer or earlier node output of this graph or an enclosing "
              "graph"});
  }
}

TEST_CASE("unknown domains are warnings, unknown imports errors", "[checker]") {
  TestModel t;
  t.m.opsetImports.push_back({"com.example", 1, {}});
  Node* n = t.node("Fused", {t.x}, {"y"}, "f");
  n->domain = "com.example";
  t.output(n->output(0));
  auto ds = checkModel(t.m);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].severity == Diagnostic::Severity::Warning);
  CHECK_FALSE(hasErrors(ds));
  t.m.opsetImports.pop_back();
  ds = checkModel(t.m);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].message ==
        "m.onnx: node 'f' (Fused): domain 'com.example' is not imported, expected an opset_import entry for it in the "
        "model");
  CHECK(hasErrors(ds));
}

TEST_CASE("model fields: IR version and opset imports", "[checker]") {
  TestModel t;
  Node* n = t.node("Relu", {t.x}, {"y"}, "relu");
  t.output(n->output(0));
  t.m.irVersion = 0;
  t.m.opsetImports = {{"", 99, {}}, {"ai.onnx", 13, {}}};
  auto msgs = t.messages();
  CHECK(msgs.size() == 3);
  CHECK(contains(msgs, "m.onnx: model: ir_version is missing, expected a version from 1 to 14"));
  CHECK(contains(
      msgs,
      "m.onnx: model: opset_import version 99 of domain 'ai.onnx' is newer than this build knows, expected at most " +
          std::to_string(maxKnownOpset(""))));
  CHECK(contains(
      msgs,
      "m.onnx: model: opset_import lists domain 'ai.onnx' more than once (versions 99 and 13), expected one entry "
      "per domain"));
}

TEST_CASE("tensors declaring more than they hold are refused without allocating", "[checker]") {
  TestModel t;
  Tensor w = Tensor::fromFloats("w", {2}, {1.0f, 2.0f});
  w.dims = {int64_t{1} << 40, int64_t{1} << 40};  // 2^80 elements: the product overflows
  t.g->addInitializer(std::move(w));
  Tensor v = Tensor::fromFloats("v", {2}, {1.0f, 2.0f});
  v.dims = {int64_t{1} << 30, int64_t{1} << 9};  // 2^39 floats: 2 TiB, within the element limit
  t.g->addInitializer(std::move(v));
  Tensor s = Tensor::fromFloats("s", {2}, {1.0f, 2.0f});
  s.dims = {int64_t{1} << 30, int64_t{1} << 20};  // 2^50 elements: over the element limit
  t.g->addInitializer(std::move(s));
  Tensor u = Tensor::fromFloats("u", {3}, {1.0f, 2.0f});
  t.g->addInitializer(std::move(u));
  Node* n = t.node("Relu", {t.x}, {"y"}, "relu");
  t.output(n->output(0));
  auto msgs = t.messages();
  CHECK(msgs ==
        std::vector<std::string>{
            "m.onnx: initializer 'w': dims [1099511627776, 1099511627776] hold more than 2^63 elements, refused as too "
            "large to allocate",
            "m.onnx: initializer 'v': dims [1073741824, 512] of float32 declare 2199023255552 bytes, refused as "
            "too large to allocate (limit 1 TiB)",
            "m.onnx: initializer 's': dims [1073741824, 1048576] declare 1125899906842624 elements, refused as "
            "too large to allocate (limit 2^40 elements)",
            "m.onnx: initializer 'u': raw_data holds 8 bytes, expected 12 for dims [3] of float32"});
}

TEST_CASE("loader findings come first, as recorded", "[checker]") {
  TestModel t;
  Node* n = t.node("Relu", {t.x}, {"y"}, "relu");
  t.output(n->output(0));
  t.m.loadIssues.push_back("m.onnx: initializer 'w': external data file 'w.bin' not found");
  auto ds = checkModel(t.m);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].message == t.m.loadIssues[0]);
  CHECK(ds[0].severity == Diagnostic::Severity::Error);
}

TEST_CASE("calls of model-local functions are checked against the function", "[checker]") {
  TestModel t;
  t.m.opsetImports.push_back({"local", 1, {}});
  auto f = std::make_unique<Function>();
  f->name = "Twice";
  f->domain = "local";
  f->attributeNames = {"alpha"};
  f->opsetImports.push_back({"", 13, {}});
  f->body = std::make_unique<Graph>();
  Value* a = f->body->createValue("a");
  f->body->addInput(a);
  Node* add = f->body->addNode("Add", {a, a}, {"c"});
  add->name = "fadd";
  f->body->addOutput(add->output(0));
  t.m.functions.push_back(std::move(f));
  Node* call = t.node("Twice", {t.x, t.x}, {"y"}, "call");
  call->domain = "local";
  call->setAttr(Attribute::ofFloat("alpha", 1.0f));
  call->setAttr(Attribute::ofInt("beta", 1));
  t.output(call->output(0));
  CHECK(t.messages() ==
        std::vector<std::string>{
            "m.onnx: node 'call' (Twice): has 2 inputs, expected at most 1 (the inputs of function 'local::Twice')",
            "m.onnx: node 'call' (Twice): has unknown attribute 'beta', expected one of: alpha (the attributes of "
            "function 'local::Twice')"});
}

TEST_CASE("names from the model cannot break a message over lines", "[checker]") {
  TestModel t;
  Node* n = t.node("No\nSuchOp", {t.x}, {"y"}, std::string("evil\r\nname\x01\xff"));
  t.output(n->output(0));
  auto ds = checkModel(t.m);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].message ==
        "m.onnx: node 'evil\\r\\nname\\x01\\xff' (No\\nSuchOp): op 'No\\nSuchOp' is not defined in opset 13 of domain "
        "ai.onnx, "
        "expected an operator that domain defines");
  CHECK(ds[0].nodeName == "evil\\r\\nname\\x01\\xff");
}

TEST_CASE("shape-inference findings are errors of their node; the model keeps its types", "[checker]") {
  TestModel t;
  Value* w = t.g->createValue("w");
  w->setType(TypeInfo::tensor(DType::Float, Shape::of({4, 5})));
  t.g->addInput(w);
  t.x->setType(TypeInfo::tensor(DType::Float, Shape::of({2, 3})));
  Node* relu = t.node("Relu", {t.x}, {"r"}, "relu");  // inference types r: float [2, 3]
  Node* mm = t.node("MatMul", {relu->output(0), w}, {"y"}, "mm");
  Value* y = mm->output(0);
  Shape unknown2;  // rank 2, dims left to inference
  unknown2.hasRank = true;
  unknown2.dims = {Dim{}, Dim{}};
  y->setType(TypeInfo::tensor(DType::Float, unknown2));
  t.g->addOutput(y);
  auto ds = checkModel(t.m);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].message == "m.onnx: node 'mm' (MatMul): inner dimensions differ, 3 vs 4");
  CHECK(ds[0].severity == Diagnostic::Severity::Error);
  CHECK(ds[0].nodeName == "mm");
  CHECK(ds[0].opType == "MatMul");
  CHECK(relu->output(0)->type().isNone());  // as before inference
  CHECK(y->type() == TypeInfo::tensor(DType::Float, unknown2));
}

TEST_CASE("inference runs only on a model without structural errors", "[checker]") {
  TestModel t;
  t.x->setType(TypeInfo::tensor(DType::Float, Shape::of({2, 3})));
  Node* mm = t.node("MatMul", {t.x, t.x}, {"y"}, "mm");  // inner dims 3 vs 2
  t.node("Frobnicate", {t.x}, {"z"}, "f");
  t.output(mm->output(0));
  auto msgs = t.messages();
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].find("'Frobnicate' is not defined") != std::string::npos);
}
