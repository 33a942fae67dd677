// test_pass_manager.cpp: pipeline text parse/print round trip, presets, the manager's instruments
// (bisect, disable, fixpoint), and the cleanup and folding passes on small graphs built in code.
#include <catch2/catch.hpp>

#include "lib/error.h"
#include "passes/pass_manager.h"

using namespace onnxtool;

namespace {

std::unique_ptr<Model> newModel(int64_t opset = 17) {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports.push_back({"", opset, {}});
  m->graph = std::make_unique<Graph>();
  m->graph->name = "g";
  return m;
}

Value* input(Graph& g, const std::string& name, std::vector<int64_t> dims) {
  Value* v = g.createValue(name);
  v->setType(TypeInfo::tensor(DType::Float, Shape::of(std::move(dims))));
  g.addInput(v);
  return v;
}

int count(const Graph& g, std::string_view op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->opType == op;
  return n;
}

}  // namespace

TEST_CASE("pipeline text round trips through print and parse", "[passes]") {
  for (int level = 0; level <= 3; ++level) {
    Pipeline p = presetPipeline(level, false);
    std::string text = printPipeline(p);
    CHECK(parsePipeline(text) == p);
    CHECK(printPipeline(parsePipeline(text)) == text);
  }
  Pipeline p = parsePipeline(" fold-constants{size-limit=64} , eliminate-dead ");
  REQUIRE(p.passes.size() == 2);
  CHECK(p.passes[0].options.at("size-limit") == "64");
  CHECK(printPipeline(p) == "fold-constants{size-limit=64},eliminate-dead");
  CHECK(presetPipeline(0, false).passes.empty());
  CHECK(presetPipeline(2, false).passes.size() > presetPipeline(1, false).passes.size());
}

TEST_CASE("pipeline text errors name the problem", "[passes]") {
  auto message = [](const std::string& text) {
    try {
      parsePipeline(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("fold-constant") == "--passes: unknown pass 'fold-constant' (see --list-passes) at column 1 of 'fold-constant'");
  CHECK(message("fold-constants{limit=3}") ==
        "--passes: pass fold-constants has no option 'limit' at column 16 of 'fold-constants{limit=3}'");
  CHECK(message("eliminate-dead eliminate-identity") ==
        "--passes: expected ',', got 'e' at column 16 of 'eliminate-dead eliminate-identity'");
  CHECK(message("fold-constants{size-limit=3") ==
        "--passes: expected '}' at column 28 of 'fold-constants{size-limit=3'");
  CHECK_THROWS_AS(presetPipeline(4, false), Error);
}

TEST_CASE("eliminate-dead removes unread chains but keeps graph outputs", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  Node* a = g.addNode("Relu", {x}, {"a"});
  g.addNode("Neg", {a->output(0)}, {"dead1"});
  Node* keep = g.addNode("Abs", {x}, {"y"});
  g.addOutput(keep->output(0));
  PassRunReport r = runPipeline(*m, parsePipeline("eliminate-dead"));
  CHECK(g.numNodes() == 1);
  CHECK(g.nodes().front()->opType == "Abs");
  CHECK(r.rewrites == 2);
  CHECK(g.verifyLinks().empty());
}

TEST_CASE("eliminate-identity keeps graph output names", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  Node* r = g.addNode("Relu", {x}, {"r"});
  Node* id = g.addNode("Identity", {r->output(0)}, {"y"});
  g.addOutput(id->output(0));
  // Identity straight from a graph input to a graph output must stay: both names are interface.
  Node* id2 = g.addNode("Identity", {x}, {"z"});
  g.addOutput(id2->output(0));
  runPipeline(*m, parsePipeline("eliminate-identity"));
  CHECK(count(g, "Identity") == 1);
  CHECK(g.outputs()[0].value->name() == "y");
  CHECK(g.outputs()[0].value->producer()->opType == "Relu");
  CHECK(g.outputs()[1].value->name() == "z");
  CHECK(g.verifyLinks().empty());
}

TEST_CASE("eliminate-identity removes only no-op Transpose and Reshape", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {3, 3});
  Node* t1 = g.addNode("Transpose", {x}, {"t1"});
  t1->setAttr(Attribute::ofInts("perm", {0, 1}));
  Node* t2 = g.addNode("Transpose", {t1->output(0)}, {"t2"});  // no perm: reverses, same shape [3,3]
  Value* shape = g.addInitializer(Tensor::fromInt64s("shape", {2}, {3, 3}));
  Node* rs = g.addNode("Reshape", {t2->output(0), shape}, {"rs"});
  Node* out = g.addNode("Relu", {rs->output(0)}, {"y"});
  g.addOutput(out->output(0));
  runPipeline(*m, parsePipeline("eliminate-identity"));
  CHECK(count(g, "Transpose") == 1);  // the reversing one stays
  CHECK(count(g, "Reshape") == 0);
  CHECK(g.nodes().front()->input(0) == x);
}

TEST_CASE("eliminate-common-subexpressions merges equal nodes, not random ones", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  Node* a = g.addNode("LeakyRelu", {x}, {"a"});
  a->setAttr(Attribute::ofFloat("alpha", 0.1f));
  Node* b = g.addNode("LeakyRelu", {x}, {"b"});
  b->setAttr(Attribute::ofFloat("alpha", 0.1f));
  Node* c = g.addNode("LeakyRelu", {x}, {"c"});
  c->setAttr(Attribute::ofFloat("alpha", 0.2f));
  Node* r1 = g.addNode("RandomUniformLike", {x}, {"r1"});
  Node* r2 = g.addNode("RandomUniformLike", {x}, {"r2"});
  Node* sum = g.addNode("Sum", {a->output(0), b->output(0), c->output(0), r1->output(0), r2->output(0)}, {"y"});
  g.addOutput(sum->output(0));
  runPipeline(*m, parsePipeline("eliminate-common-subexpressions"));
  CHECK(count(g, "LeakyRelu") == 2);
  CHECK(count(g, "RandomUniformLike") == 2);
  CHECK(sum->input(0) == sum->input(1));
}

TEST_CASE("fold-constants evaluates with the reference kernels and respects the size limit", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  Value* c1 = g.addInitializer(Tensor::fromFloats("c1", {2}, {1.5f, 2}));
  Value* c2 = g.addInitializer(Tensor::fromFloats("c2", {2}, {0.25f, -4}));
  Node* add = g.addNode("Add", {c1, c2}, {"s"});
  Node* mul = g.addNode("Mul", {x, add->output(0)}, {"y"});
  g.addOutput(mul->output(0));
  // ConstantOfShape of a big shape stays: folding it would inflate the model.
  Value* bigShape = g.addInitializer(Tensor::fromInt64s("big_shape", {1}, {1 << 20}));
  Node* cos = g.addNode("ConstantOfShape", {bigShape}, {"big"});
  Node* red = g.addNode("ReduceSum", {cos->output(0)}, {"z"});
  g.addOutput(red->output(0));
  PassRunReport r = runPipeline(*m, parsePipeline("fold-constants{size-limit=4096}"));
  CHECK(count(g, "Add") == 0);
  CHECK(count(g, "ConstantOfShape") == 1);
  Value* s = mul->input(1);
  REQUIRE(s->initializer());
  CHECK(s->name() == "s");
  CHECK(s->initializer()->elementAsDouble(0) == 1.75);
  CHECK(s->initializer()->elementAsDouble(1) == -2.0);
  CHECK(r.stats[0].second.counters.at("skipped-too-large") >= 1);
}

TEST_CASE("fold-shapes folds static parts of symbolic shapes", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = g.createValue("x");
  TypeInfo t = TypeInfo::tensor(DType::Float, Shape::of({1, 768}));
  t.shape.dims[0] = Dim::ofParam("batch");
  x->setType(t);
  g.addInput(x);
  Node* shape = g.addNode("Shape", {x}, {"shape"});
  Value* idx = g.addInitializer(Tensor::fromInt64s("idx", {}, {1}));
  Node* gather = g.addNode("Gather", {shape->output(0), idx}, {"d1"});
  Node* cast = g.addNode("Cast", {gather->output(0)}, {"d1f"});
  cast->setAttr(Attribute::ofInt("to", 1));
  Node* mul = g.addNode("Mul", {x, cast->output(0)}, {"y"});
  g.addOutput(mul->output(0));
  runPipeline(*m, parsePipeline("fold-shapes,fold-constants,eliminate-dead"));
  CHECK(count(g, "Shape") == 0);  // its batch dim was not needed
  CHECK(count(g, "Gather") == 0);
  CHECK(count(g, "Cast") == 0);
  REQUIRE(mul->input(1)->initializer());
  CHECK(mul->input(1)->initializer()->elementAsDouble(0) == 768.0);
}

TEST_CASE("dedupe-initializers and eliminate-unused-initializers", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  Value* a = g.addInitializer(Tensor::fromFloats("a", {2}, {1, 2}));
  Value* b = g.addInitializer(Tensor::fromFloats("b", {2}, {1, 2}));
  g.addInitializer(Tensor::fromFloats("unused", {1}, {3}));
  Node* n1 = g.addNode("Add", {x, a}, {"t"});
  Node* n2 = g.addNode("Mul", {n1->output(0), b}, {"y"});
  g.addOutput(n2->output(0));
  runPipeline(*m, parsePipeline("dedupe-initializers,eliminate-unused-initializers"));
  CHECK(g.initializers().size() == 1);
  CHECK(n2->input(1) == a);
}

TEST_CASE("dedupe-initializers compares big tensors in full, not only their sampled bytes", "[passes]") {
  // The fingerprint reads the start, middle and end of a tensor: tensors equal there but not
  // elsewhere must stay apart, and equal ones must merge.
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {1000});
  std::vector<float> base(1000);
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<float>(i);
  std::vector<float> other = base;
  other[250] = -1.f;  // outside the sampled windows (bytes 0-127, 1936-2063, 3872-3999)
  Value* a = g.addInitializer(Tensor::fromFloats("a", {1000}, base));
  Value* b = g.addInitializer(Tensor::fromFloats("b", {1000}, other));
  Value* c = g.addInitializer(Tensor::fromFloats("c", {1000}, base));
  Node* n1 = g.addNode("Add", {x, a}, {"t1"});
  Node* n2 = g.addNode("Add", {n1->output(0), b}, {"t2"});
  Node* n3 = g.addNode("Add", {n2->output(0), c}, {"y"});
  g.addOutput(n3->output(0));
  runPipeline(*m, parsePipeline("dedupe-initializers,eliminate-unused-initializers"));
  CHECK(g.initializers().size() == 2);
  CHECK(n1->input(1) == a);
  CHECK(n2->input(1) == b);
  CHECK(n3->input(1) == a);
}

TEST_CASE("bisect stops after N rewrites and disable skips a pass", "[passes]") {
  auto build = [] {
    auto m = newModel();
    Graph& g = *m->graph;
    Value* v = input(g, "x", {2});
    for (int i = 0; i < 5; ++i) v = g.addNode("Identity", {v}, {"i" + std::to_string(i)})->output(0);
    Node* out = g.addNode("Relu", {v}, {"y"});
    g.addOutput(out->output(0));
    return m;
  };
  auto m = build();
  PassManagerOptions o;
  o.bisect = 2;
  PassRunReport r = runPipeline(*m, parsePipeline("eliminate-identity"), o);
  CHECK(r.bisectStopped);
  CHECK(r.rewrites == 2);
  CHECK(count(*m->graph, "Identity") == 3);
  CHECK(r.lastRewrite == "remove no-op Identity '<unnamed, output 'i1'>'");

  auto m2 = build();
  PassManagerOptions d;
  d.disabled = {"eliminate-identity"};
  runPipeline(*m2, parsePipeline("eliminate-identity"), d);
  CHECK(count(*m2->graph, "Identity") == 5);
  d.disabled = {"no-such-pass"};
  CHECK_THROWS_AS(runPipeline(*m2, parsePipeline("eliminate-identity"), d), Error);
}

TEST_CASE("the manager recurses into subgraphs", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  Value* cond = g.createValue("cond");
  cond->setType(TypeInfo::tensor(DType::Bool, Shape::of({})));
  g.addInput(cond);
  Node* iff = g.addNode("If", {cond}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto body = std::make_shared<Graph>(&g, iff);
    body->name = branch;
    Node* r = body->addNode("Relu", {x}, {std::string(branch) + "_r"});
    Node* id = body->addNode("Identity", {r->output(0)}, {std::string(branch) + "_out"});
    body->addOutput(id->output(0));
    Attribute a;
    a.name = branch;
    a.type = AttrType::Graph;
    a.g = body;
    iff->setAttr(a);
  }
  g.addOutput(iff->output(0));
  runPipeline(*m, parsePipeline("eliminate-identity"));
  for (Graph* sub : iff->subgraphs()) {
    CHECK(count(*sub, "Identity") == 0);
    CHECK(sub->outputs()[0].value->producer()->opType == "Relu");
  }
}

TEST_CASE("a pass that changed nothing is not run again until another pass changes the model", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* v = input(g, "x", {2});
  for (int i = 0; i < 3; ++i) v = g.addNode("Identity", {v}, {"i" + std::to_string(i)})->output(0);
  g.addOutput(g.addNode("Relu", {v}, {"y"})->output(0));
  // iteration 1: eliminate-identity rewrites, eliminate-dead finds nothing; iteration 2:
  // eliminate-identity finds nothing, and eliminate-dead has seen this model already
  PassRunReport r = runPipeline(*m, parsePipeline("eliminate-identity,eliminate-dead"));
  CHECK(count(g, "Identity") == 0);
  CHECK(r.iterations == 2);
  REQUIRE(r.stats.size() == 2);
  CHECK(r.stats[0].second.runs == 2);
  CHECK(r.stats[1].second.runs == 1);
  CHECK(r.inferRuns == 2);  // the opening one, and before eliminate-identity's second run
  CHECK(r.shapesFresh);     // nothing changed the model after that inference
  CHECK(g.verifyLinks().empty());
}

TEST_CASE("the report says whether the last inference saw the model as it is", "[passes]") {
  auto m = newModel();
  Graph& g = *m->graph;
  Value* x = input(g, "x", {2});
  g.addNode("Neg", {x}, {"dead"});
  g.addOutput(g.addNode("Relu", {x}, {"y"})->output(0));
  PassRunReport r = runPipeline(*m, parsePipeline("eliminate-dead"));  // reads no shapes
  CHECK(count(g, "Neg") == 0);
  CHECK(r.inferRuns == 1);
  CHECK_FALSE(r.shapesFresh);  // the opening inference saw the Neg
  PassRunReport again = runPipeline(*m, parsePipeline("eliminate-dead"));
  CHECK(again.shapesFresh);
}
