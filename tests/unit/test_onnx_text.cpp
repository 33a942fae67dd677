// test_onnx_text.cpp: the ONNX textual syntax: exact printer output for a small model, parse ->
// print -> parse round trips over every attribute kind, type and element type, exact float
// round trips, one-line error messages with positions, and no crash on mutated input.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "formats/model_io.h"
#include "formats/onnx_text.h"
#include "lib/error.h"

using namespace onnxtool;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> parse(std::string_view text) { return parseModelText(text, "t.onnxtxt"); }

/// The message of the Error(InvalidInput) that parsing `text` throws ("" if it parses).
std::string parseError(std::string_view text) {
  try {
    parse(text);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidInput);
    return e.what();
  }
  return "";
}

/// Parses, prints, parses the print and prints again: both prints must agree.
std::string roundTrip(std::string_view text) {
  auto m1 = parse(text);
  std::string t1 = printModelText(*m1);
  INFO(t1);
  auto m2 = parse(t1);
  std::string t2 = printModelText(*m2);
  CHECK(t1 == t2);
  return t1;
}

Node* nodeAt(Graph& g, size_t i) {
  auto it = g.nodes().begin();
  std::advance(it, static_cast<long>(i));
  return it->get();
}

template <typename T>
T rawAt(const Tensor& t, size_t i) {
  T v;
  std::memcpy(&v, t.raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

const char* kEveryKind = R"(<
  ir_version: 10,
  opset_import: ["" : 18, "com.example" : 1, "local" : 1],
  producer_name: "unit \"test\"",
  producer_version: "1.0",
  domain: "org.test",
  model_version: 7,
  doc_string: "a model",
  metadata_props: ["k": "v", "k2": "v2"]
>
every (float[N,3,?] x, float y, float[] z, seq(float[2]) s, map(int64, seq(string)) m,
       optional(int32[4]) o, sparse_tensor(float[3,3]) sp, opaque(ai.custom, Thing) op, bool c,
       int64[2] shape = {2, 3}) => (float[N,3,?] out1, "odd name" , float[2] out3)
   <float[2] w = {1.5, -0.0}, float16[2] h = {15360, 1.5}, bfloat16[1] bf = {16256},
    int4[3] i4 = {-8, 7, 1}, uint4[3] u4 = {0, 15, 9}, complex64[2] cx = {1.0, 2.0, -3.5, inf},
    bool[3] b = {1, 0, true}, string[2] str = {"a\"b", "\\c"}, uint64[1] big = {18446744073709551615},
    int64[2] small = {-9223372036854775808, 9223372036854775807}, double[2] d = {0.1, 1e300},
    float8e4m3fn[2] f8 = {0, 255}, float vi_scalar = {3.25}, float[N] vi1>
{
   # a comment line
   ["first node"] out1 = Relu (x)
   a, , b = com.example.Multi:v2 <i: int = -3, f: float = 0.1, s: string = "x", fs: floats = [1.0, inf, -inf, nan],
        is: ints = [], ss: strings = ["p", "q"], t: tensor = int64[2] named {4, 5},
        ts: tensors = [float {1.0}, int8[2] {-1, 1}], tp: type_proto = seq(float[2]),
        tps: types = [float, map(string, float)]> (x, "", y)
   "odd name" = If (c) <then_branch: graph = then_g () => (float[2] t_out) <float[2] tv = {1.0, 2.0}> {
        t_out = Identity (tv)
     }, else_branch: graph = else_g () => (float[2] e_out) {
        e_out = local.fn <alpha: float = 2.0> (y)
     }>
   out3 = Loop ("", c) <body: graph = body (int64 iter, bool cin) => (bool cout, float[2] v) {
        cout = Identity (cin)
        v = Identity (w)
     }, gs: graphs = [g1 () => (q) { q = Identity(w) }, g2 () => () {}]>
   = NoOutputs ()
   "1bad", "x.y" = "weird-domain"."Op.Type" (a, b)
}
<
  domain: "local",
  opset_import: ["" : 18]
>
fn <alpha, beta: int = 3> (p) => (r)
   <float[2] p>
{
  k = Constant <value_float: float = @alpha> ()
  j = Constant <value_int = @beta> ()
  r = Mul (p, k)
}
)";

}  // namespace

TEST_CASE("text printer output of a small model is exact", "[text]") {
  Model m;
  m.irVersion = 8;
  m.opsetImports.push_back({"", 17, {}});
  m.producerName = "unit";
  m.graph = std::make_unique<Graph>();
  Graph& g = *m.graph;
  g.name = "small";
  Value* x = g.createValue("X");
  x->setType(TypeInfo::tensor(DType::Float, Shape{true, {Dim::ofParam("N"), Dim::ofValue(2)}, {}}));
  g.addInput(x);
  Value* w = g.addInitializer(Tensor::fromFloats("W", {2}, {0.5f, -1.25f}));
  Node* add = g.addNode("Add", {x, w}, {"S"});
  add->name = "add0";
  Node* lrelu = g.addNode("LeakyRelu", {add->output(0)}, {"Y"});
  lrelu->setAttr(Attribute::ofFloat("alpha", 0.1f));
  Node* split = g.addNode("Split", {lrelu->output(0), nullptr}, {"A", "", "B"});
  split->setAttr(Attribute::ofInt("axis", 1));
  split->setAttr(Attribute::ofInts("sizes", {1, 1}));
  g.addOutput(split->output(0));
  Value* b = split->output(2);
  b->setType(TypeInfo::tensor(DType::Float, Shape::unknownRank()));
  g.addOutput(b);
  const char* expected = R"(<
   ir_version: 8,
   opset_import: ["" : 17],
   producer_name: "unit"
>
small (float[N,2] X) => (A, float[] B)
   <float[2] W = {0.5,-1.25}>
{
   [add0] S = Add (X, W)
   Y = LeakyRelu <alpha: float = 0.1> (S)
   A, "", B = Split <axis: int = 1, sizes: ints = [1, 1]> (Y, "")
}
)";
  CHECK(printModelText(m) == expected);
  std::string graphPart = std::string(expected).substr(std::string(expected).find("small ("));
  CHECK(printGraphText(*m.graph) == graphPart);
  // and it reads back into the same structure
  auto back = parse(expected);
  CHECK(printModelText(*back) == expected);
  CHECK(back->graph->inputs()[0].value->type().str() == "tensor(float)[N,2]");
  CHECK(nodeAt(*back->graph, 2)->inputs()[1] == nullptr);
  CHECK(nodeAt(*back->graph, 2)->outputs()[1] == nullptr);
}

TEST_CASE("text round trip keeps every attribute kind, type and element type", "[text]") {
  std::string printed = roundTrip(kEveryKind);
  auto m = parse(printed);
  REQUIRE(m->graph);
  Graph& g = *m->graph;
  CHECK(m->irVersion == 10);
  CHECK(m->opsetImports.size() == 3);
  CHECK(m->producerName == "unit \"test\"");
  CHECK(m->modelVersion == 7);
  CHECK(m->docString == "a model");
  CHECK(m->metadata == StringPairs{{"k", "v"}, {"k2", "v2"}});

  // inputs: types of every kind, scalar vs unknown rank, the initializer that is also an input
  REQUIRE(g.inputs().size() == 10);
  CHECK(g.inputs()[0].value->type().str() == "tensor(float)[N,3,?]");
  CHECK(g.inputs()[1].value->type().shape.hasRank);
  CHECK(g.inputs()[1].value->type().shape.rank() == 0);
  CHECK_FALSE(g.inputs()[2].value->type().shape.hasRank);
  CHECK(g.inputs()[3].value->type().kind == TypeInfo::Kind::Sequence);
  CHECK(g.inputs()[4].value->type().kind == TypeInfo::Kind::Map);
  CHECK(g.inputs()[4].value->type().elemType == static_cast<int32_t>(DType::Int64));
  CHECK(g.inputs()[5].value->type().kind == TypeInfo::Kind::Optional);
  CHECK(g.inputs()[6].value->type().kind == TypeInfo::Kind::SparseTensor);
  CHECK(g.inputs()[7].value->type().opaqueDomain == "ai.custom");
  CHECK(g.inputs()[7].value->type().opaqueName == "Thing");
  CHECK(g.inputs()[9].value->initializer() != nullptr);
  CHECK(g.outputs()[1].value->name() == "odd name");
  CHECK_FALSE(g.outputs()[1].hasType);

  // initializers: exact element values
  auto init = [&](const char* name) -> const Tensor& {
    Value* v = g.findLocal(name);
    REQUIRE(v);
    REQUIRE(v->initializer());
    return *v->initializer();
  };
  CHECK(std::signbit(rawAt<float>(init("w"), 1)));
  CHECK(rawAt<uint16_t>(init("h"), 0) == 15360);
  CHECK(rawAt<uint16_t>(init("h"), 1) == floatToHalf(1.5f));
  CHECK(rawAt<uint16_t>(init("bf"), 0) == 16256);
  CHECK(init("i4").raw.size() == 2);
  CHECK(init("i4").raw.data()[0] == 0x78);  // -8 in the low nibble, 7 in the high one
  CHECK(init("i4").raw.data()[1] == 0x01);
  CHECK(init("u4").raw.data()[0] == 0xf0);
  CHECK(rawAt<float>(init("cx"), 2) == -3.5f);
  CHECK(std::isinf(rawAt<float>(init("cx"), 3)));
  CHECK(init("b").raw.data()[2] == 1);
  CHECK(init("str").strings == std::vector<std::string>{"a\"b", "\\c"});
  CHECK(rawAt<uint64_t>(init("big"), 0) == UINT64_MAX);
  CHECK(rawAt<int64_t>(init("small"), 0) == INT64_MIN);
  CHECK(rawAt<double>(init("d"), 0) == 0.1);
  CHECK(rawAt<double>(init("d"), 1) == 1e300);
  CHECK(init("f8").raw.data()[1] == 255);
  CHECK(init("vi_scalar").dims.empty());
  REQUIRE(g.valueInfos().size() == 1);
  CHECK(g.valueInfos()[0].value->name() == "vi1");

  // nodes
  REQUIRE(g.numNodes() == 6);
  Node* relu = nodeAt(g, 0);
  CHECK(relu->name == "first node");
  Node* multi = nodeAt(g, 1);
  CHECK(multi->domain == "com.example");
  CHECK(multi->opType == "Multi");
  CHECK(multi->overload == "v2");
  CHECK(multi->outputs()[1] == nullptr);
  CHECK(multi->inputs()[1] == nullptr);
  CHECK(multi->attrInt("i", 0) == -3);
  CHECK(multi->attrFloat("f", 0) == 0.1f);
  CHECK(multi->attrString("s", "") == "x");
  const Attribute* fs = multi->attr("fs");
  REQUIRE(fs);
  CHECK(fs->type == AttrType::Floats);
  CHECK(std::isnan(fs->floats[3]));
  CHECK(multi->attr("is")->type == AttrType::Ints);
  CHECK(multi->attr("is")->ints.empty());
  CHECK(multi->attr("ss")->strings == std::vector<std::string>{"p", "q"});
  CHECK(multi->attr("t")->t->name == "named");
  CHECK(multi->attr("ts")->tensors.size() == 2);
  CHECK(multi->attr("tp")->tp->str() == "seq(tensor(float)[2])");
  CHECK(multi->attr("tps")->typeProtos.size() == 2);
  Node* ifNode = nodeAt(g, 2);
  REQUIRE(ifNode->subgraphs().size() == 2);
  CHECK(ifNode->subgraphs()[0]->parentNode() == ifNode);
  CHECK(ifNode->subgraphs()[0]->initializers().size() == 1);
  // a subgraph's use of an outer value is linked to the outer value
  Node* loop = nodeAt(g, 3);
  CHECK(loop->inputs()[0] == nullptr);
  CHECK(loop->attr("gs")->graphs.size() == 2);
  Graph* body = loop->attr("body")->g.get();
  CHECK(nodeAt(*body, 1)->inputs()[0] == g.findLocal("w"));
  CHECK(nodeAt(g, 4)->outputs().empty());
  Node* weird = nodeAt(g, 5);
  CHECK(weird->domain == "weird-domain");
  CHECK(weird->opType == "Op.Type");
  CHECK(weird->outputs()[1]->name() == "x.y");

  // functions: attribute names, defaults, @refs, value_info
  REQUIRE(m->functions.size() == 1);
  const Function& f = *m->functions[0];
  CHECK(f.domain == "local");
  CHECK(f.attributeNames == std::vector<std::string>{"alpha"});
  REQUIRE(f.attributeDefaults.size() == 1);
  CHECK(f.attributeDefaults[0].i == 3);
  CHECK(nodeAt(*f.body, 0)->attr("value_float")->refAttrName == "alpha");
  CHECK(nodeAt(*f.body, 0)->attr("value_float")->type == AttrType::Float);
  CHECK(nodeAt(*f.body, 1)->attr("value_int")->type == AttrType::Undefined);
  REQUIRE(f.body->valueInfos().size() == 1);
  CHECK(f.body->valueInfos()[0].value->name() == "p");
  CHECK(f.body->verifyLinks().empty());
  CHECK(g.verifyLinks().empty());
}

TEST_CASE("text floats round trip bit for bit", "[text]") {
  std::mt19937 rng(7);
  std::vector<float> fs;
  std::vector<double> ds;
  for (int i = 0; i < 4000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    uint64_t dbits = (static_cast<uint64_t>(rng()) << 32) | rng();
    float f;
    double d;
    std::memcpy(&f, &bits, 4);
    std::memcpy(&d, &dbits, 8);
    if (!std::isnan(f)) fs.push_back(f);
    if (!std::isnan(d)) ds.push_back(d);
  }
  fs.insert(fs.end(), {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                       std::numeric_limits<float>::min(), -0.0f, 1e-45f, 3.4028235e38f});
  Model m;
  m.irVersion = 8;
  m.graph = std::make_unique<Graph>();
  m.graph->name = "f";
  m.graph->addInitializer(Tensor::fromFloats("fs", {static_cast<int64_t>(fs.size())}, fs));
  Tensor dt;
  dt.name = "ds";
  dt.dataType = static_cast<int32_t>(DType::Double);
  dt.dims = {static_cast<int64_t>(ds.size())};
  dt.setRaw(Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(ds.data()), ds.size() * 8)));
  m.graph->addInitializer(std::move(dt));
  Node* n = m.graph->addNode("Foo", {}, {"o"});
  n->setAttr(Attribute::ofFloats("fl", fs));
  auto back = parse(printModelText(m));
  const Tensor& t = *back->graph->findLocal("fs")->initializer();
  REQUIRE(t.raw.size() == fs.size() * 4);
  CHECK(std::memcmp(t.raw.data(), fs.data(), t.raw.size()) == 0);
  const Tensor& t2 = *back->graph->findLocal("ds")->initializer();
  REQUIRE(t2.raw.size() == ds.size() * 8);
  CHECK(std::memcmp(t2.raw.data(), ds.data(), t2.raw.size()) == 0);
  const auto& fl = nodeAt(*back->graph, 0)->attr("fl")->floats;
  REQUIRE(fl.size() == fs.size());
  CHECK(std::memcmp(fl.data(), fs.data(), fs.size() * 4) == 0);
}

TEST_CASE("text printer refuses what the syntax cannot hold", "[text]") {
  auto m = parse("<ir_version: 8>\ng () => () { y = Foo () }");
  SparseTensor sp;
  sp.values = Tensor::fromFloats("s", {1}, {1.0f});
  sp.indices = Tensor::fromInt64s("", {1}, {0});
  sp.dims = {4};
  m->graph->addSparseInitializer(std::move(sp));
  try {
    printModelText(*m);
    FAIL("sparse initializer printed");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unsupported);
    CHECK(std::string(e.what()) == "graph 'g': sparse initializer 's' has no textual syntax");
  }
  TextPrintOptions elide;
  elide.elideTensorsOver = 2;
  auto small = parse("<ir_version: 8>\ng () => () <float[3] w = {1.0, 2.0, 3.0}, float[2] v = {1.0, 2.0}> {}");
  std::string shown = printModelText(*small, elide);
  CHECK(shown.find("float[3] w = {...}") != std::string::npos);
  CHECK(shown.find("float[2] v = {1.0,2.0}") != std::string::npos);
}

TEST_CASE("text parse errors name the file, line and column", "[text]") {
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  CHECK(parseError(head + "g (float x) => (float y) {\n  y = Relu(x)\n") ==
        "t.onnxtxt:4:1: expected a node or '}', got end of input");
  CHECK(parseError(head + "g (float x) => (float y) {\n  y = Relu(x\n}") ==
        "t.onnxtxt:4:1: expected ',' or ')', got '}'");
  CHECK(parseError(head + "g (flot[2] x) => (y) { y = Relu(x) }") ==
        "t.onnxtxt:2:4: expected a type (float, int64[N], seq(...), ...) or a value name, got 'flot'");
  CHECK(parseError(head + "g (float x) => (y) <float[2] w = {1.0}> { y = Relu(x) }") ==
        "t.onnxtxt:2:34: expected 2 values for a tensor of 2 elements, got 1");
  CHECK(parseError(head + "g (float x) => (y) <int8[1] w = {300}> { y = Relu(x) }") ==
        "t.onnxtxt:2:34: expected an integer in [-128, 127] for int8, got number 300");
  CHECK(parseError(head + "g (float x) => (y) { y = Foo <a = []> (x) }") ==
        "t.onnxtxt:2:35: expected a typed empty list (e.g. 'axes: ints = []'), got '['");
  CHECK(parseError("<ir_version: 8, bogus: 1> g () => () {}") ==
        "t.onnxtxt:1:17: expected a model field (ir_version, opset_import, producer_name, producer_version, "
        "domain, model_version, doc_string, metadata_props), got 'bogus'");
  CHECK(parseError(head + "g (float x) => (y) { y = Foo <s: string = \"abc> (x) }") ==
        "t.onnxtxt:2:43: expected a closing '\"', got end of input inside a string");
  CHECK(parseError(head + "g (float x) => (y) { y = Foo <a: tensor = float[3] {...}> (x) }") ==
        "t.onnxtxt:2:53: expected tensor values, got '...' (the tensor was printed with its data elided)");
  CHECK(parseError(std::string("g () => () {}\x01")) == "t.onnxtxt:1:14: expected a name, number, string or punctuation, got byte 0x01");
  CHECK(parseError("") == "t.onnxtxt:1:1: expected a graph name, got end of input");
}

TEST_CASE("text parser bounds nesting and never crashes on mutated input", "[text]") {
  // deep types and deep subgraphs fail with a message, not a stack overflow
  std::string deepType = "g (";
  for (int i = 0; i < 20000; ++i) deepType += "seq(";
  deepType += "float" + std::string(20000, ')') + " x) => () {}";
  CHECK(parseError(deepType).find("expected at most 128 levels of nested graphs and types") != std::string::npos);
  std::string deepGraph = "g () => () {";
  for (int i = 0; i < 5000; ++i) deepGraph += " y = If (c) <then_branch: graph = t () => () {";
  CHECK(parseError(deepGraph).find("expected at most 128 levels") != std::string::npos);

  // every truncation and many random byte edits of a rich model: parse or throw InvalidInput
  std::string base = kEveryKind;
  std::mt19937 rng(11);
  int parsed = 0, rejected = 0;
  auto attempt = [&](const std::string& text) {
    try {
      auto m = parse(text);
      printModelText(*m);
      ++parsed;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Unsupported) ++parsed;  // e.g. an attribute left with no type
      else {
        CHECK(e.kind() == ErrorKind::InvalidInput);
        ++rejected;
      }
    }
  };
  for (size_t cut = 0; cut < base.size(); cut += 3) attempt(base.substr(0, cut));
  const char pool[] = "<>()[]{},:=@.?\"#-+0123456789eaxz \n\\";
  for (int i = 0; i < 3000; ++i) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = pool[rng() % (sizeof pool - 1)]; break;
        case 1: s.erase(at, 1 + rng() % 8); break;
        default: s.insert(at, 1, static_cast<char>(rng() % 256)); break;
      }
    }
    attempt(s);
  }
  CHECK(parsed > 0);
  CHECK(rejected > 1000);
}

TEST_CASE("loadModel reads .onnxtxt and binds external data beside it", "[text]") {
  std::string tmpl = (fs::temp_directory_path() / "onnxtool-text-XXXXXX").string();
  fs::path dir = ::mkdtemp(tmpl.data());
  {
    float data[2] = {1.5f, -2.0f};
    std::ofstream(dir / "w.bin", std::ios::binary).write(reinterpret_cast<const char*>(data), sizeof data);
    std::ofstream(dir / "m.onnxtxt") << "<ir_version: 8, opset_import: [\"\" : 17]>\n"
                                        "g (float[2] x) => (float[2] y)\n"
                                        "  <float[2] w = [\"location\": \"w.bin\", \"offset\": \"0\", \"length\": \"8\"]>\n"
                                        "{ y = Add (x, w) }\n";
    std::ofstream(dir / "bad.onnxtxt") << "<ir_version: 8>\ng () => (y) <float[2] w = [\"location\": \"../w.bin\"]> {}\n";
  }
  auto m = loadModel((dir / "m.onnxtxt").string());
  const Tensor* w = m->graph->findLocal("w")->initializer();
  REQUIRE(w->raw.size() == 8);
  CHECK(rawAt<float>(*w, 1) == -2.0f);
  // a text copy holds the values inline and reads back the same
  auto copy = parse(printModelText(*m));
  CHECK(rawAt<float>(*copy->graph->findLocal("w")->initializer(), 0) == 1.5f);
  CHECK_THROWS_WITH(loadModel((dir / "bad.onnxtxt").string()), Catch::Contains("escapes the model's folder"));
  CHECK(isTextModelPath("a/b.onnxtxt"));
  CHECK_FALSE(isTextModelPath("a/b.onnx"));
  fs::remove_all(dir);
}
