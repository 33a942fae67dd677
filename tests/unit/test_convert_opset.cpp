// test_convert_opset.cpp: invariants of opset conversion that the golden tests cannot state: the
// adapter table names real schema steps, the IR version table matches onnx's, a failed conversion
// leaves the model untouched, and a conversion round trip is the identity on the graph.
#include <catch2/catch.hpp>

#include "formats/onnx_text.h"
#include "lib/error.h"
#include "lib/ops/op_schema.h"
#include "passes/convert_opset.h"
#include "passes/opset_adapters.h"

using namespace onnxtool;

TEST_CASE("every adapter names a schema step of the registry") {
  for (const AdapterInfo& a : allAdapters()) {
    INFO(std::string(a.op) << " " << a.version);
    bool found = false;
    for (const OpSchema& s : schemaVersions("", a.op)) found |= s.sinceVersion == a.version;
    CHECK(found);
    // Up adapters need an older schema to start from.
    if (a.direction == AdaptDirection::Up) CHECK(findSchema("", a.op, a.version - 1) != nullptr);
  }
}

TEST_CASE("no adapter is listed twice") {
  auto all = allAdapters();
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      CHECK_FALSE((all[i].op == all[j].op && all[i].version == all[j].version && all[i].direction == all[j].direction));
}

TEST_CASE("IR version per opset follows onnx's VERSION_TABLE") {
  CHECK(irVersionForOpset(7) == 3);
  CHECK(irVersionForOpset(9) == 4);
  CHECK(irVersionForOpset(11) == 6);
  CHECK(irVersionForOpset(13) == 7);
  CHECK(irVersionForOpset(17) == 8);
  CHECK(irVersionForOpset(21) == 10);
  CHECK(irVersionForOpset(23) == 11);
  CHECK(irVersionForOpset(28) == 14);
}

namespace {
const char* kSqueeze = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 1, 3] x, int64[1] ax) => (float[2, 3] y, float[2, 3] z)
<int64[1] one = {1}>
{
  y = Squeeze (x, one)
  z = Squeeze (x, ax)
}
)";
}

TEST_CASE("a conversion that cannot move a node leaves the model unchanged and names the node") {
  auto m = parseModelText(kSqueeze, "squeeze.onnxtxt");
  std::string before = printModelText(*m);
  OpsetConvertOptions o;
  o.target = 12;
  OpsetConvertReport r = convertOpset(*m, o);
  REQUIRE(r.blocked.size() == 1);  // z's axes come from a graph input, not a constant
  CHECK(r.blocked[0].op == "Squeeze");
  CHECK(r.blocked[0].reason.find("input axes ('ax') is not a constant") != std::string::npos);
  CHECK(r.blocked[0].lowest == 13);
  CHECK(r.blocked[0].highest == 28);
  CHECK(printModelText(*m) == before);
}

TEST_CASE("down and up again gives the graph back") {
  const char* text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 1, 3] x) => (float[2, 3] y)
<int64[1] one = {1}>
{
  y = Squeeze (x, one)
}
)";
  auto m = parseModelText(text, "squeeze.onnxtxt");
  OpsetConvertOptions down;
  down.target = 11;
  REQUIRE(convertOpset(*m, down).blocked.empty());
  CHECK(m->opsetVersion("") == 11);
  CHECK(m->irVersion == 6);
  CHECK(m->graph->initializers().empty());  // the axes moved into the attribute
  OpsetConvertOptions up;
  up.target = 17;
  REQUIRE(convertOpset(*m, up).blocked.empty());
  CHECK(m->opsetVersion("") == 17);
  CHECK(m->irVersion == 8);
  CHECK(m->graph->initializers().size() == 1);
  CHECK(m->graph->nodes().front()->inputs().size() == 2);
}

TEST_CASE("targets beyond the registry are unsupported") {
  auto m = parseModelText(kSqueeze, "squeeze.onnxtxt");
  OpsetConvertOptions o;
  o.target = 99;
  try {
    convertOpset(*m, o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unsupported);
  }
}

TEST_CASE("the IR version is raised with the opset and lowered only when the opset is") {
  const char* text = R"(<ir_version: 10, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y)
{
  y = Neg (x)
}
)";
  auto m = parseModelText(text, "neg.onnxtxt");
  OpsetConvertOptions o;
  o.target = 18;  // raising keeps IR 10 (18 needs 8)
  REQUIRE(convertOpset(*m, o).blocked.empty());
  CHECK(m->irVersion == 10);
  o.target = 13;  // lowering: 13's IR version
  REQUIRE(convertOpset(*m, o).blocked.empty());
  CHECK(m->irVersion == 7);
  o.target = 23;
  REQUIRE(convertOpset(*m, o).blocked.empty());
  CHECK(m->irVersion == 11);
}
