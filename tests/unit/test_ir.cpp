// test_ir.cpp: IR invariants: use lists, mutation, outer-scope uses, topological order.
#include <catch2/catch.hpp>

#include "lib/ir.h"

using namespace onnxtool;

namespace {

struct Chain {
  Graph g;
  Value* x;
  Node* a;
  Node* b;
  Chain() {
    x = g.createValue("x");
    g.addInput(x);
    a = g.addNode("Relu", {x}, {"a"});
    b = g.addNode("Neg", {a->output(0)}, {"b"});
    g.addOutput(b->output(0));
  }
};

}  // namespace

TEST_CASE("use lists follow setInput and replaceAllUsesWith", "[ir]") {
  Chain c;
  Value* a = c.a->output(0);
  REQUIRE(a->uses().size() == 1);
  REQUIRE(a->uses()[0].node == c.b);
  REQUIRE(c.x->uses().size() == 1);
  a->replaceAllUsesWith(c.x);
  CHECK(c.b->input(0) == c.x);
  CHECK(c.x->uses().size() == 2);
  CHECK_FALSE(a->hasUses());
  CHECK(c.g.verifyLinks().empty());
  c.g.removeNode(c.a);
  CHECK(c.g.numNodes() == 1);
  CHECK(c.g.findLocal("a") == nullptr);
  CHECK(c.g.verifyLinks().empty());
}

TEST_CASE("graph outputs follow replaceAllUsesWith", "[ir]") {
  Chain c;
  Value* b = c.b->output(0);
  Value* a = c.a->output(0);
  REQUIRE(b->isGraphOutput());
  b->replaceAllUsesWith(a);
  CHECK(c.g.outputs()[0].value == a);
  CHECK(a->isGraphOutput());
  CHECK_FALSE(b->isGraphOutput());
  c.g.removeNode(c.b);
  CHECK(c.g.numNodes() == 1);
}

TEST_CASE("removing a node drops the value_info entries of its outputs", "[ir]") {
  // A value_info entry left pointing at a destroyed value would be read when saving.
  Chain c;
  Value* a = c.a->output(0);
  c.g.valueInfos().push_back({a, {}, {}, std::nullopt, true, {}});
  a->replaceAllUsesWith(c.x);
  c.g.removeNode(c.a);
  CHECK(c.g.valueInfos().empty());
}

TEST_CASE("removing a node whose output is used fails", "[ir]") {
  Chain c;
  CHECK_THROWS(c.g.removeNode(c.a));
  CHECK_THROWS(c.g.removeNode(c.b));  // produces a graph output
}

TEST_CASE("outer-scope uses are recorded on the outer value", "[ir]") {
  Chain c;
  Value* cond = c.g.createValue("cond");
  c.g.addInput(cond);
  Node* iff = c.g.addNode("If", {cond}, {"r"});
  auto body = std::make_shared<Graph>(&c.g, iff);
  body->name = "then";
  Node* inner = body->addNode("Identity", {c.g.find("a")}, {"t"});
  body->addOutput(inner->output(0));
  Attribute attr;
  attr.name = "then_branch";
  attr.type = AttrType::Graph;
  attr.g = body;
  iff->setAttr(attr);
  Value* a = c.a->output(0);
  REQUIRE(a->uses().size() == 2);
  CHECK(body->find("x") == c.x);       // lookup reaches the enclosing graph
  CHECK(body->findLocal("x") == nullptr);
  a->replaceAllUsesWith(c.x);
  CHECK(inner->input(0) == c.x);
  CHECK(c.g.totalNodeCount() == 4);
  // the If must stay after Relu's replacement source; order by subgraph reads
  auto order = c.g.topologicalOrder();
  REQUIRE(order);
  CHECK(order->size() == 3);
}

TEST_CASE("removing an If drops the outer-value uses of its bodies", "[ir]") {
  Chain c;
  Value* cond = c.g.createValue("cond");
  c.g.addInput(cond);
  Node* iff = c.g.addNode("If", {cond}, {"r"});
  auto body = std::make_shared<Graph>(&c.g, iff);
  Node* inner = body->addNode("Identity", {c.g.find("a")}, {"t"});
  body->addOutput(inner->output(0));
  Attribute attr;
  attr.name = "then_branch";
  attr.type = AttrType::Graph;
  attr.g = body;
  iff->setAttr(attr);
  body.reset();  // the node owns its body alone
  Value* a = c.a->output(0);
  REQUIRE(a->uses().size() == 2);
  c.g.removeNode(iff);
  // Only Neg reads a now; a stale use would point into the destroyed body.
  REQUIRE(a->uses().size() == 1);
  CHECK(a->uses()[0].node == c.b);
  a->replaceAllUsesWith(c.x);
  CHECK(c.b->input(0) == c.x);
  CHECK(c.g.verifyLinks().empty());
}

TEST_CASE("topological order sorts, keeps file order among ready nodes, and finds cycles", "[ir]") {
  Graph g;
  Value* x = g.createValue("x");
  g.addInput(x);
  // b uses a's output, but is listed first
  Node* b = g.addNode("Neg", {g.createValue("a")}, {"b"});
  Node* a = g.addNode("Relu", {x}, {"a"});
  Node* c = g.addNode("Abs", {x}, {"c"});
  REQUIRE(b->input(0) == a->output(0));  // the forward reference was adopted
  auto order = g.topologicalOrder();
  REQUIRE(order);
  CHECK((*order)[0] == a);
  CHECK((*order)[1] == b);
  CHECK((*order)[2] == c);
  REQUIRE(g.sortTopologically());
  CHECK(g.nodes().front().get() == a);

  Graph cyc;
  Node* p = cyc.addNode("Neg", {cyc.createValue("q")}, {"p"});
  cyc.addNode("Neg", {p->output(0)}, {"q"});
  CHECK_FALSE(cyc.topologicalOrder());
  CHECK_FALSE(cyc.sortTopologically());

  // a node reading one producer twice, listed before it, and a diamond after it
  Graph d;
  Value* in = d.createValue("in");
  d.addInput(in);
  Value* mv = d.createValue("m");
  Value* sv = d.createValue("s");
  Node* sq = d.addNode("Mul", {mv, mv}, {"sq"});
  Node* l = d.addNode("Neg", {sv}, {"l"});
  Node* r = d.addNode("Abs", {sv}, {"r"});
  Node* j = d.addNode("Add", {l->output(0), r->output(0)}, {"j"});
  Node* m = d.addNode("Relu", {in}, {"m"});
  Node* sn = d.addNode("Sin", {sq->output(0)}, {"s"});
  auto o = d.topologicalOrder();
  REQUIRE(o);
  CHECK(*o == std::vector<Node*>{m, sq, sn, l, r, j});
  // in order already: returned as listed
  REQUIRE(d.sortTopologically());
  CHECK(*d.topologicalOrder() == std::vector<Node*>{m, sq, sn, l, r, j});

  // a node reading its own output
  Graph self;
  self.addNode("Neg", {self.createValue("z")}, {"z"});
  CHECK_FALSE(self.topologicalOrder());
}

TEST_CASE("uniqueName avoids names of enclosing graphs", "[ir]") {
  Chain c;
  Graph sub(&c.g, nullptr);
  CHECK(sub.uniqueName("x") == "x_1");
  CHECK(sub.uniqueName("fresh") == "fresh");
  c.g.renameValue(c.x, "input");
  CHECK(c.g.findLocal("input") == c.x);
  CHECK(c.g.findLocal("x") == nullptr);
  CHECK_THROWS(c.g.renameValue(c.x, "a"));
}

TEST_CASE("initializers own their tensor and can be removed", "[ir]") {
  Graph g;
  Value* w = g.addInitializer(Tensor::fromFloats("w", {2}, {1.f, 2.f}));
  REQUIRE(w->initializer());
  CHECK(w->initializer()->elementAsDouble(1) == 2.0);
  CHECK(w->isDefined());
  g.removeInitializer(w);
  CHECK(g.initializers().empty());
  CHECK(g.findLocal("w") == nullptr);
}

TEST_CASE("dtype table", "[ir]") {
  CHECK(dtypeName(DType::Float) == "float32");
  CHECK(dtypeName(DType::Double) == "float64");
  CHECK(dtypeFromName("tensor(float)") == DType::Float);
  CHECK(dtypeFromName("INT64") == DType::Int64);
  CHECK(dtypeFromName("bfloat16") == DType::BFloat16);
  CHECK_FALSE(dtypeFromName("float128"));
  CHECK(dtypeStorageBytes(DType::Int4, 3) == 2u);
  CHECK(dtypeStorageBytes(DType::Float6E2M3, 4) == 3u);
  CHECK(dtypeStorageBytes(DType::Int2, 5) == 2u);
  CHECK_FALSE(dtypeStorageBytes(DType::String, 3));
  CHECK_FALSE(dtypeStorageBytes(DType::Double, UINT64_MAX / 2));
  CHECK_FALSE(isValidDType(0));
  CHECK_FALSE(isValidDType(29));
  CHECK(isValidDType(28));
}

TEST_CASE("half and bfloat16 conversions round to nearest even", "[ir]") {
  CHECK(floatToHalf(1.0f) == 0x3c00);
  CHECK(floatToHalf(65504.0f) == 0x7bff);
  CHECK(floatToHalf(65520.0f) == 0x7c00);      // rounds up to inf
  CHECK(floatToHalf(5.96046448e-08f) == 0x0001);  // smallest subnormal
  CHECK(floatToHalf(1.0f + 1.0f / 2048) == 0x3c00);  // tie to even
  CHECK(halfToFloat(0x0001) == Approx(5.96046448e-08f));
  CHECK(halfToFloat(0xc000) == -2.0f);
  CHECK(std::isnan(halfToFloat(0x7e00)));
  CHECK(floatToBfloat16(1.0f) == 0x3f80);
  CHECK(bfloat16ToFloat(0x4049) == Approx(3.140625f));
}
