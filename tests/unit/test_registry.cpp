// test_registry.cpp: operator schema registry facts checked by hand against onnx.defs, and the
// hidden [.dump] case that tests/py/test_registry_vs_onnx.py uses to compare the whole table.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lib/attr_type.h"
#include "lib/ops/op_schema.h"

using namespace onnxtool;

namespace {

int sinceOf(std::string_view domain, std::string_view op, int64_t opset) {
  const OpSchema* s = findSchema(domain, op, opset);
  return s ? s->sinceVersion : 0;
}

// The schema in force; fails the test case (instead of crashing) when there is none.
const OpSchema& schemaAt(std::string_view domain, std::string_view op, int64_t opset) {
  const OpSchema* s = findSchema(domain, op, opset);
  REQUIRE(s != nullptr);
  return *s;
}

}  // namespace

TEST_CASE("findSchema picks the newest version not after the opset", "[registry]") {
  CHECK(sinceOf("", "Add", 13) == 13);
  CHECK(sinceOf("", "Add", 12) == 7);
  CHECK(sinceOf("", "Add", 28) == 14);
  CHECK(sinceOf("", "Softmax", 13) == 13);
  CHECK(sinceOf("", "Relu", 5) == 1);
  CHECK(sinceOf("", "Relu", 28) == 14);
  CHECK(sinceOf("ai.onnx.ml", "LabelEncoder", 1) == 1);
  CHECK(sinceOf("ai.onnx.ml", "LabelEncoder", 3) == 2);
  CHECK(sinceOf("ai.onnx.ml", "LabelEncoder", 5) == 4);
}

TEST_CASE("findSchema returns nullptr for unknown ops, domains and early opsets", "[registry]") {
  CHECK(findSchema("", "NoSuchOp", 28) == nullptr);
  CHECK(findSchema("", "Gelu", 19) == nullptr);  // Gelu appeared in opset 20
  CHECK(findSchema("", "Gelu", 20) != nullptr);
  CHECK(findSchema("", "Add", 0) == nullptr);
  CHECK(findSchema("com.example", "Add", 13) == nullptr);
  CHECK(findSchema("", "LabelEncoder", 5) == nullptr);  // wrong domain
  CHECK(findSchema("ai.onnx.ml", "Add", 5) == nullptr);
  CHECK_FALSE(opExists("", "NoSuchOp"));
  CHECK(opExists("", "Upsample"));
  CHECK(opExists("ai.onnx.ml", "TreeEnsemble"));
}

TEST_CASE("ai.onnx names the default domain", "[registry]") {
  CHECK(findSchema("ai.onnx", "Add", 13) == findSchema("", "Add", 13));
  CHECK(opExists("ai.onnx", "Conv"));
  CHECK(isKnownDomain("ai.onnx"));
  CHECK(isKnownDomain(""));
  CHECK(isKnownDomain("ai.onnx.ml"));
  CHECK(isKnownDomain("com.microsoft"));
  CHECK(isKnownDomain("com.microsoft.nchwc"));
  CHECK_FALSE(isKnownDomain("com.example"));
  CHECK(maxKnownOpset("") == 28);
  CHECK(maxKnownOpset("ai.onnx") == 28);
  CHECK(maxKnownOpset("ai.onnx.ml") == 5);
  CHECK(maxKnownOpset("com.microsoft") == 1);
  CHECK(maxKnownOpset("com.example") == 0);
  CHECK(isKnownDomain("ai.onnx.preview"));
  CHECK(isKnownDomain("ai.onnx.preview.training"));
  CHECK_FALSE(isKnownDomain("ai.onnx.training"));  // onnx versions it but defines no op in it
  CHECK(maxKnownOpset("ai.onnx.preview") == 1);
  CHECK(maxKnownOpset("ai.onnx.preview.training") == 1);
  CHECK(schemaSourceVersion() == "1.23.2");
}

TEST_CASE("attribute defaults are typed and exact", "[registry]") {
  const OpSchema* conv = findSchema("", "Conv", 22);
  REQUIRE(conv);
  const AttrSchema* autoPad = conv->findAttr("auto_pad");
  REQUIRE(autoPad);
  CHECK(autoPad->type == AttrType::String);
  CHECK_FALSE(autoPad->required);
  CHECK(autoPad->defaultString() == std::optional<std::string_view>("NOTSET"));
  CHECK_FALSE(autoPad->defaultInt());  // wrong type asks give nullopt
  REQUIRE(conv->findAttr("group"));
  CHECK(conv->findAttr("group")->defaultInt() == std::optional<int64_t>(1));
  const AttrSchema* pads = conv->findAttr("pads");
  REQUIRE(pads);
  CHECK(pads->type == AttrType::Ints);
  CHECK_FALSE(pads->hasDefault);
  CHECK_FALSE(pads->defaultInts());
  CHECK(conv->findAttr("no_such_attr") == nullptr);

  const OpSchema* leaky = findSchema("", "LeakyRelu", 16);
  REQUIRE(leaky);
  REQUIRE(leaky->findAttr("alpha"));
  CHECK(leaky->findAttr("alpha")->defaultFloat() == std::optional<float>(0.01f));

  // The default_float of LabelEncoder-2 is -0.0: the sign must survive generation.
  const OpSchema* labelEncoder = findSchema("ai.onnx.ml", "LabelEncoder", 2);
  REQUIRE(labelEncoder);
  auto minusZero = labelEncoder->findAttr("default_float")->defaultFloat();
  REQUIRE(minusZero);
  CHECK(*minusZero == 0.0f);
  CHECK(std::signbit(*minusZero));

  const OpSchema* mvn = findSchema("", "MeanVarianceNormalization", 13);
  REQUIRE(mvn);
  auto axes = mvn->findAttr("axes")->defaultInts();
  REQUIRE(axes);
  CHECK(std::vector<int64_t>(axes->begin(), axes->end()) == std::vector<int64_t>{0, 2, 3});

  const OpSchema* constant = findSchema("", "Constant", 21);
  REQUIRE(constant);
  REQUIRE(constant->findAttr("value"));
  CHECK(constant->findAttr("value")->type == AttrType::Tensor);
  CHECK_FALSE(constant->findAttr("value")->required);
  CHECK_FALSE(constant->findAttr("value")->defaultProto());

  const OpSchema* scan = findSchema("", "Scan", 21);
  REQUIRE(scan);
  CHECK(scan->findAttr("body")->required);
  CHECK(scan->findAttr("body")->type == AttrType::Graph);
}

TEST_CASE("input and output counts, options and type constraints", "[registry]") {
  const OpSchema* clip13 = findSchema("", "Clip", 13);
  REQUIRE(clip13);
  CHECK(clip13->minInputs == 1);
  CHECK(clip13->maxInputs == 3);
  REQUIRE(clip13->inputs.size() == 3);
  CHECK(clip13->inputs[1].name == "min");
  CHECK(clip13->inputs[1].option == ParamOption::Optional);
  const TypeConstraint* t = clip13->findConstraint("T");
  REQUIRE(t);
  CHECK(std::find(t->allowedTypes.begin(), t->allowedTypes.end(), "tensor(bfloat16)") !=
        t->allowedTypes.end());
  CHECK(clip13->findConstraint("T9") == nullptr);

  const OpSchema* clip6 = findSchema("", "Clip", 6);
  REQUIRE(clip6);
  CHECK(clip6->minInputs == 1);
  CHECK(clip6->maxInputs == 1);
  CHECK(clip6->findAttr("min"));

  const OpSchema* concat = findSchema("", "Concat", 13);
  REQUIRE(concat);
  REQUIRE(concat->inputs.size() == 1);
  CHECK(concat->inputs[0].option == ParamOption::Variadic);
  CHECK(concat->inputs[0].isHomogeneous);
  CHECK(concat->inputs[0].minArity == 1);
  CHECK(concat->maxInputs == kUnboundedArity);
  CHECK(concat->findAttr("axis")->required);

  const OpSchema* loop = findSchema("", "Loop", 21);
  REQUIRE(loop);
  CHECK(loop->inputs[2].option == ParamOption::Variadic);
  CHECK_FALSE(loop->inputs[2].isHomogeneous);
  CHECK(loop->inputs[2].minArity == 0);
  CHECK(loop->maxOutputs == kUnboundedArity);

  const OpSchema* split = findSchema("", "Split", 18);
  REQUIRE(split);
  CHECK(split->inputs[1].typeStr == "tensor(int64)");
}

TEST_CASE("deprecated versions and function flags", "[registry]") {
  CHECK_FALSE(schemaAt("", "Upsample", 9).deprecated);
  CHECK(schemaAt("", "Upsample", 10).deprecated);
  CHECK(schemaAt("", "Upsample", 28).deprecated);  // no later version revives it
  CHECK(schemaAt("ai.onnx.ml", "TreeEnsembleRegressor", 5).deprecated);
  CHECK_FALSE(schemaAt("ai.onnx.ml", "TreeEnsembleRegressor", 4).deprecated);
  CHECK(schemaAt("", "Relu", 14).hasFunction);
  CHECK_FALSE(schemaAt("", "Relu", 13).hasFunction);
  CHECK(schemaAt("", "Softmax", 13).hasContextDependentFunction);
  CHECK_FALSE(schemaAt("", "Softmax", 13).hasFunction);
}

TEST_CASE("schemaVersions and allSchemas are sorted and consistent", "[registry]") {
  auto add = schemaVersions("ai.onnx", "Add");
  REQUIRE(add.size() == 5);  // 1, 6, 7, 13, 14
  CHECK(add.front().sinceVersion == 1);
  CHECK(add.back().sinceVersion == 14);
  for (const OpSchema& s : add) CHECK(s.name == "Add");
  CHECK(schemaVersions("", "NoSuchOp").empty());

  auto all = allSchemas();
  // onnx 1.23.2: 629 ai.onnx + 25 ai.onnx.ml + 1 ai.onnx.preview + 4 ai.onnx.preview.training;
  // onnxruntime 1.32.0: 150 com.microsoft + 8 com.microsoft.nchwc + 2 ai.onnx extensions
  CHECK(all.size() == 819);
  size_t ops = 0;
#define ONNXTOOL_OP(domain, name)                          \
  CHECK(opExists(domain, #name));                          \
  CHECK(findSchema(domain, #name, maxKnownOpset(domain))); \
  ++ops;
#include "lib/ops/ops.def"
  CHECK(ops == 386);
}

TEST_CASE("ops are keyed by (domain, name): com.microsoft reuses ai.onnx names", "[registry]") {
  // Same name, two ops: onnx's Attention (23+) and ONNX Runtime's fused one (com.microsoft 1).
  const OpSchema* ms = findSchema("com.microsoft", "Attention", 1);
  REQUIRE(ms != nullptr);
  CHECK(ms->domain == "com.microsoft");
  CHECK(ms->findAttr("num_heads") != nullptr);
  CHECK(ms->findAttr("num_heads")->required);
  CHECK(findSchema("", "Attention", 22) == nullptr);
  REQUIRE(findSchema("", "Attention", 23) != nullptr);
  CHECK(findSchema("", "Attention", 23)->findAttr("num_heads") == nullptr);  // q_num_heads there
  for (std::string_view op : {"Gelu", "QuantizeLinear", "DequantizeLinear", "RotaryEmbedding", "Pad", "Range"}) {
    CHECK(opExists("", op));
    CHECK(opExists("com.microsoft", op));
  }
  CHECK(findSchema("com.microsoft", "SkipLayerNormalization", 1)->minInputs == 3);
  CHECK_FALSE(opExists("", "SkipLayerNormalization"));
  CHECK(opExists("com.microsoft.nchwc", "ReorderInput"));
  CHECK(isOrtContribDomain("com.microsoft"));
  CHECK_FALSE(isOrtContribDomain(""));
  CHECK(ortSchemaSourceVersion() == "1.32.0");
  // ONNX Runtime's ai.onnx extensions: marked, and LayerNormalization 17 is onnx's own
  REQUIRE(findSchema("", "SimplifiedLayerNormalization", 17) != nullptr);
  CHECK(findSchema("", "SimplifiedLayerNormalization", 17)->ortExtension);
  REQUIRE(findSchema("", "LayerNormalization", 14) != nullptr);
  CHECK(findSchema("", "LayerNormalization", 14)->ortExtension);
  CHECK_FALSE(findSchema("", "LayerNormalization", 17)->ortExtension);
  CHECK_FALSE(findSchema("com.microsoft", "Attention", 1)->ortExtension);
}

TEST_CASE("preview domains: training optimizers, Gradient and FlexAttention", "[registry]") {
  const std::string_view training = "ai.onnx.preview.training";
  CHECK(sinceOf(training, "Adam", 1) == 1);
  CHECK(findSchema("", "Adam", 28) == nullptr);  // not in ai.onnx
  CHECK(findSchema(training, "FlexAttention", 1) == nullptr);
  CHECK(findSchema("ai.onnx.preview", "Adam", 1) == nullptr);

  const OpSchema& adam = schemaAt(training, "Adam", 1);
  REQUIRE(adam.inputs.size() == 3);  // R, T, then X..., G..., V..., H... in one variadic list
  CHECK(adam.inputs[0].name == "R");
  CHECK(adam.inputs[1].typeStr == "T2");
  CHECK(adam.inputs[2].option == ParamOption::Variadic);
  CHECK_FALSE(adam.inputs[2].isHomogeneous);
  CHECK(adam.maxInputs == kUnboundedArity);
  CHECK(adam.findAttr("alpha")->defaultFloat() == std::optional<float>(0.9f));
  CHECK(adam.findAttr("beta")->defaultFloat() == std::optional<float>(0.999f));
  CHECK(adam.findAttr("epsilon")->defaultFloat() == std::optional<float>(1e-6f));
  CHECK(adam.findAttr("norm_coefficient_post")->defaultFloat() == std::optional<float>(0.0f));
  const TypeConstraint* t2 = adam.findConstraint("T2");
  REQUIRE(t2);
  CHECK(std::vector<std::string_view>(t2->allowedTypes.begin(), t2->allowedTypes.end()) ==
        std::vector<std::string_view>{"tensor(int64)"});

  const OpSchema& momentum = schemaAt(training, "Momentum", 1);
  CHECK(momentum.findAttr("mode")->type == AttrType::String);
  CHECK(momentum.findAttr("mode")->required);
  CHECK(momentum.findAttr("alpha")->required);
  CHECK_FALSE(momentum.findAttr("alpha")->hasDefault);

  const OpSchema& adagrad = schemaAt(training, "Adagrad", 1);
  CHECK(adagrad.findAttr("decay_factor")->defaultFloat() == std::optional<float>(0.0f));
  CHECK(adagrad.findAttr("epsilon")->defaultFloat() == std::optional<float>(1e-6f));

  const OpSchema& gradient = schemaAt(training, "Gradient", 1);
  CHECK(gradient.findAttr("xs")->type == AttrType::Strings);
  CHECK(gradient.findAttr("xs")->required);
  CHECK_FALSE(gradient.findAttr("zs")->required);
  CHECK(gradient.findAttr("y")->type == AttrType::String);

  const OpSchema& flex = schemaAt("ai.onnx.preview", "FlexAttention", 1);
  CHECK(flex.minInputs == 3);
  CHECK(flex.maxInputs == 3);
  CHECK(flex.findAttr("score_mod")->type == AttrType::Graph);
  CHECK(flex.findAttr("prob_mod")->type == AttrType::Graph);
  CHECK_FALSE(flex.findAttr("scale")->hasDefault);  // absent means 1/sqrt(head_size)
  CHECK(flex.findAttr("softmax_precision")->type == AttrType::Int);
  CHECK(flex.findAttr("mask_mod") == nullptr);
  CHECK(flex.hasContextDependentFunction);
  CHECK_FALSE(flex.hasFunction);
  const TypeConstraint* t1 = flex.findConstraint("T1");
  REQUIRE(t1);
  CHECK(t1->allowedTypes.size() == 4);  // bfloat16, float16, float, double
}

TEST_CASE("attrTypeName gives the spec enum names", "[registry]") {
  CHECK(attrTypeName(AttrType::Float) == "FLOAT");
  CHECK(attrTypeName(AttrType::Ints) == "INTS");
  CHECK(attrTypeName(AttrType::SparseTensor) == "SPARSE_TENSOR");
  CHECK(attrTypeName(AttrType::TypeProtos) == "TYPE_PROTOS");
  CHECK(attrTypeName(static_cast<AttrType>(99)) == "UNDEFINED");
}

// ---- Registry dump for tests/py/test_registry_vs_onnx.py -------------------------------------

namespace {

using nlohmann::json;

std::string hexBytes(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

uint32_t floatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

json paramJson(const FormalParam& p) {
  return {{"name", p.name},
          {"type_str", p.typeStr},
          {"option", static_cast<int>(p.option)},
          {"is_homogeneous", p.isHomogeneous},
          {"min_arity", p.minArity}};
}

// Strings as hex and floats as bit patterns, so the comparison is exact.
json defaultJson(const AttrSchema& a) {
  if (!a.hasDefault) return nullptr;
  if (auto v = a.defaultFloat()) return {{"float_bits", floatBits(*v)}};
  if (auto v = a.defaultInt()) return {{"int", *v}};
  if (auto v = a.defaultString()) return {{"string_hex", hexBytes(*v)}};
  json list = json::array();
  if (auto v = a.defaultFloats()) {
    for (float f : *v) list.push_back(floatBits(f));
    return {{"floats_bits", list}};
  }
  if (auto v = a.defaultInts()) {
    for (int64_t i : *v) list.push_back(i);
    return {{"ints", list}};
  }
  if (auto v = a.defaultStrings()) {
    for (std::string_view s : *v) list.push_back(hexBytes(s));
    return {{"strings_hex", list}};
  }
  if (auto v = a.defaultProto()) return {{"proto_hex", hexBytes(*v)}};
  return "hasDefault but no accessor gives it";
}

json schemaJson(const OpSchema& s) {
  json j = {{"domain", s.domain},
            {"name", s.name},
            {"since_version", s.sinceVersion},
            {"deprecated", s.deprecated},
            {"min_input", s.minInputs},
            {"max_input", s.maxInputs},
            {"min_output", s.minOutputs},
            {"max_output", s.maxOutputs},
            {"has_function", s.hasFunction},
            {"has_context_dependent_function", s.hasContextDependentFunction},
            {"ort_extension", s.ortExtension}};
  j["inputs"] = json::array();
  for (const FormalParam& p : s.inputs) j["inputs"].push_back(paramJson(p));
  j["outputs"] = json::array();
  for (const FormalParam& p : s.outputs) j["outputs"].push_back(paramJson(p));
  j["attributes"] = json::array();
  for (const AttrSchema& a : s.attributes) {
    // Each attribute is also looked up by name, so a findAttr bug shows as a difference.
    const AttrSchema* found = s.findAttr(a.name);
    j["attributes"].push_back({{"name", found ? found->name : "<findAttr failed>"},
                               {"type", attrTypeName(a.type)},
                               {"required", a.required},
                               {"default", defaultJson(a)}});
  }
  j["type_constraints"] = json::array();
  for (const TypeConstraint& c : s.typeConstraints) {
    const TypeConstraint* found = s.findConstraint(c.typeParamStr);
    j["type_constraints"].push_back(
        {{"type_param_str", found ? found->typeParamStr : "<findConstraint failed>"},
         {"allowed_type_strs", c.allowedTypes}});
  }
  return j;
}

}  // namespace

TEST_CASE("dump the registry as JSON to $ONNXTOOL_SCHEMA_DUMP", "[.dump]") {
  const char* path = std::getenv("ONNXTOOL_SCHEMA_DUMP");
  REQUIRE(path != nullptr);
  json doc;
  doc["onnx_version"] = schemaSourceVersion();
  doc["ort_version"] = ortSchemaSourceVersion();
  doc["schemas"] = json::array();
  for (const OpSchema& s : allSchemas()) doc["schemas"].push_back(schemaJson(s));
  // The version in force for every op at every opset of its domain (0: none), through findSchema.
  json resolved = json::object();
  for (std::string_view domain :
       {"", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training", "com.microsoft", "com.microsoft.nchwc"}) {
    doc["max_opset"][std::string(domain)] = maxKnownOpset(domain);
    for (const OpSchema& s : allSchemas()) {
      if (s.domain != domain) continue;
      std::string key = std::string(domain) + ":" + std::string(s.name);
      if (resolved.contains(key)) continue;
      json versions = json::array();
      for (int64_t v = 1; v <= maxKnownOpset(domain); ++v)
        versions.push_back(sinceOf(domain, s.name, v));
      resolved[key] = versions;
    }
  }
  doc["resolved"] = resolved;
  std::ofstream out(path);
  out << doc.dump(1) << "\n";
  out.close();
  REQUIRE(out.good());
}
