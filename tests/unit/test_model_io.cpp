// test_model_io.cpp: model files: external data as untrusted input, zero-copy mapping, atomic
// saving, automatic external data past the inline limit, tensor typed-field decoding.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <google/protobuf/util/message_differencer.h>

#include "exec/executor.h"
#include "formats/model_io.h"
#include "formats/wire_splice.h"
#include "formats/onnx.pb.h"
#include "lib/error.h"

using namespace onnxtool;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "onnxtool-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& s) const { return (path / s).string(); }
};

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

/// A one-initializer model whose tensor "w" (float32 [4]) points at external data.
pb::ModelProto externalModel(const std::string& location, int64_t offset = 0, int64_t length = 16) {
  pb::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* t = g->add_initializer();
  t->set_name("w");
  t->set_data_type(pb::TensorProto::FLOAT);
  t->add_dims(4);
  t->set_data_location(pb::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  add("length", std::to_string(length));
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->add_input("w");
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  return m;
}

std::string loadError(const std::string& path) {
  try {
    loadModel(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool addressIsMappedFrom(const void* p, const std::string& file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  std::string real = fs::canonical(file).string();
  while (std::getline(maps, line)) {
    std::istringstream ls(line);
    std::string range, perms, off, dev, inode, name;
    ls >> range >> perms >> off >> dev >> inode >> name;
    auto dash = range.find('-');
    uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return name == real;
  }
  return false;
}

}  // namespace

TEST_CASE("external data is mapped, not copied", "[io]") {
  TempDir d;
  float data[4] = {1, 2, 3, 4};
  writeFile(d / "w.bin", std::string(reinterpret_cast<char*>(data), sizeof data));
  writeFile(d / "m.onnx", externalModel("w.bin").SerializeAsString());
  auto m = loadModel(d / "m.onnx");
  const Tensor* t = m->graph->findLocal("w")->initializer();
  REQUIRE(t->raw.size() == 16);
  CHECK(t->elementAsDouble(3) == 4.0);
  CHECK(addressIsMappedFrom(t->raw.data(), d / "w.bin"));
}

TEST_CASE("external data locations are untrusted", "[io]") {
  TempDir d;
  fs::create_directory(d.path / "model");
  writeFile(d / "secret.bin", std::string(16, 'x'));
  writeFile(d / "model/w.bin", std::string(16, '\0'));
  fs::create_symlink(d / "secret.bin", d / "model/link.bin");
  struct Case {
    pb::ModelProto model;
    const char* expected;
  };
  Case cases[] = {
      {externalModel("../secret.bin"), "escapes the model's folder"},
      {externalModel("sub/../../secret.bin"), "escapes the model's folder"},
      {externalModel("link.bin"), "escapes the model's folder"},
      {externalModel(d / "secret.bin"), "is absolute"},
      {externalModel("missing.bin"), "not found"},
      {externalModel("w.bin", 32, 16), "past the end"},
      {externalModel("w.bin", 8, 16), "past the end"},
      {externalModel("w.bin", 0, 12), "does not match its dims"},
      {externalModel(""), "has no location"},
      {externalModel("."), "not a regular file"},
  };
  for (auto& c : cases) {
    writeFile(d / "model/m.onnx", c.model.SerializeAsString());
    std::string err = loadError(d / "model/m.onnx");
    INFO(err);
    CHECK(err.find(c.expected) != std::string::npos);
    CHECK(err.find("initializer 'w'") != std::string::npos);
    CHECK(err.find("m.onnx") != std::string::npos);
  }
  // Non-strict loading turns the same problem into a finding for `check`.
  writeFile(d / "model/m.onnx", externalModel("../secret.bin").SerializeAsString());
  LoadOptions lenient;
  lenient.strictExternalData = false;
  auto m = loadModel(d / "model/m.onnx", lenient);
  REQUIRE(m->loadIssues.size() == 1);
  CHECK(m->loadIssues[0].find("escapes") != std::string::npos);
}

TEST_CASE("unreadable input gets a one-line error naming the file", "[io]") {
  TempDir d;
  writeFile(d / "empty.onnx", "");
  CHECK(loadError(d / "empty.onnx").find("empty file") != std::string::npos);
  std::string good = externalModel("w.bin").SerializeAsString();
  writeFile(d / "trunc.onnx", good.substr(0, good.size() / 2));
  CHECK(loadError(d / "trunc.onnx").find("protobuf parsing failed") != std::string::npos);
  CHECK(loadError(d / "nope.onnx").find("nope.onnx: cannot open") != std::string::npos);
  CHECK(loadError(d.path.string()).find("is a directory") != std::string::npos);
  writeFile(d / "text.onnx", "hello world, this is not a model\n");
  CHECK_FALSE(loadError(d / "text.onnx").empty());
}

TEST_CASE("a failed save leaves no file behind", "[io]") {
  TempDir d;
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports.push_back({"", 17, {}});
  m->graph = std::make_unique<Graph>();
  m->graph->addInitializer(Tensor::fromFloats("w", {1024}, std::vector<float>(1024, 1.f)));
  // the external file's name is taken by a directory: the data write fails after the model started
  fs::create_directory(d.path / "taken.data");
  SaveOptions o;
  o.mode = SaveOptions::ExternalMode::Externalize;
  o.externalFile = "taken.data";
  CHECK_THROWS_AS(saveModel(*m, d / "out.onnx", o), Error);
  o.externalFile = "../outside.data";
  CHECK_THROWS_AS(saveModel(*m, d / "out.onnx", o), Error);
  CHECK_THROWS_AS(saveModel(*m, d / "no/such/dir/out.onnx"), Error);
  size_t entries = 0;
  for (auto& e : fs::directory_iterator(d.path)) {
    (void)e;
    ++entries;
  }
  CHECK(entries == 1);  // only taken.data
  CHECK_FALSE(fs::exists(d / "out.onnx"));
}

TEST_CASE("models over the inline limit are saved with external data automatically", "[io]") {
  TempDir d;
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports.push_back({"", 17, {}});
  m->graph = std::make_unique<Graph>();
  m->graph->addInitializer(Tensor::fromFloats("big", {4096}, std::vector<float>(4096, 0.5f)));
  m->graph->addInitializer(Tensor::fromFloats("small", {2}, {1.f, 2.f}));
  SaveOptions o;
  o.inlineLimit = 8192;  // stands in for protobuf's 2 GiB
  saveModel(*m, d / "m.onnx", o);
  REQUIRE(fs::exists(d / "m.onnx.data"));
  CHECK(fs::file_size(d / "m.onnx.data") >= 4096 * 4);
  auto back = loadModel(d / "m.onnx");
  const Tensor* big = back->graph->findLocal("big")->initializer();
  CHECK(big->storage == Tensor::Storage::External);
  CHECK(big->elementAsDouble(4095) == 0.5);
  // --inline refuses instead of writing a corrupt file
  o.mode = SaveOptions::ExternalMode::Inline;
  CHECK_THROWS_AS(saveModel(*back, d / "inline.onnx", o), Error);
  CHECK_FALSE(fs::exists(d / "inline.onnx"));
}

TEST_CASE("typed data fields decode to raw layout and round trip unchanged", "[io]") {
  pb::TensorProto p;
  p.set_name("h");
  p.set_data_type(pb::TensorProto::FLOAT16);
  p.add_dims(2);
  p.add_int32_data(0x3c00);
  p.add_int32_data(0xc000);
  Tensor t = loadTensorProto(p.SerializeAsString(), "h.pb");
  CHECK(t.storage == Tensor::Storage::Typed);
  REQUIRE(t.raw.size() == 4);
  CHECK(t.elementAsDouble(0) == 1.0);
  CHECK(t.elementAsDouble(1) == -2.0);
  pb::TensorProto back;
  REQUIRE(back.ParseFromString(serializeTensorProto(t)));
  CHECK(back.int32_data_size() == 2);
  CHECK_FALSE(back.has_raw_data());

  pb::TensorProto i4;
  i4.set_data_type(pb::TensorProto::INT4);
  i4.add_dims(3);
  i4.add_int32_data(0x21);  // elements 1, 2 packed low nibble first
  i4.add_int32_data(0x03);
  Tensor t4 = loadTensorProto(i4.SerializeAsString(), "i4.pb");
  REQUIRE(t4.raw.size() == 2);
  CHECK(t4.raw.data()[0] == 0x21);
  CHECK(t4.expectedBytes() == 2u);

  // modifying the data switches the tensor to raw_data on save
  t.setRaw(Buffer::copyOf(std::string("\x00\x3c\x00\x3c", 4)));
  pb::TensorProto mod;
  REQUIRE(mod.ParseFromString(serializeTensorProto(t)));
  CHECK(mod.int32_data_size() == 0);
  CHECK(mod.raw_data().size() == 4);
}

TEST_CASE("inline initializer bytes are borrowed from the mapped model file", "[io]") {
  TempDir d;
  pb::ModelProto m = externalModel("unused");
  auto* t = m.mutable_graph()->mutable_initializer(0);
  t->clear_external_data();
  t->clear_data_location();
  t->clear_dims();
  t->add_dims(1024);
  std::string bytes(4096, '\0');
  for (size_t i = 0; i < bytes.size(); i += 4) bytes[i + 3] = 0x3f;  // 0.5f pattern
  t->set_raw_data(bytes);
  auto* small = m.mutable_graph()->add_initializer();  // below the borrow threshold: copied
  small->set_name("s");
  small->set_data_type(pb::TensorProto::FLOAT);
  small->add_dims(1);
  small->set_raw_data(std::string(4, '\0'));
  writeFile(d / "m.onnx", m.SerializeAsString());
  auto model = loadModel(d / "m.onnx");
  const Tensor* w = model->graph->findLocal("w")->initializer();
  REQUIRE(w->raw.size() == 4096);
  CHECK(w->storage == Tensor::Storage::Raw);
  CHECK(addressIsMappedFrom(w->raw.data(), d / "m.onnx"));
  CHECK(w->elementAsDouble(1023) == 0.5);
  CHECK(model->graph->findLocal("s")->initializer()->raw.size() == 4);
  // saved back byte-identical in content
  saveModel(*model, d / "out.onnx");
  pb::ModelProto back;
  std::ifstream f(d / "out.onnx", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(back.ParseFromString(s));
  CHECK(back.graph().initializer(0).raw_data() == bytes);
  CHECK(back.graph().initializer_size() == 2);
}

TEST_CASE("Constant nodes' tensors are borrowed from the mapped model file (Paddle2ONNX's weights)", "[io]") {
  // Every weight of a Paddle2ONNX export sits in a Constant node's `value`; the loader cuts their
  // raw_data out before protobuf parses (no copy), attached back by node and attribute index.
  TempDir d;
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto payload = [](int k, size_t n) {
    std::string b(n, '\0');
    for (size_t i = 0; i < n; i += 4) {
      float v = static_cast<float>(k) + static_cast<float>(i / 4);
      std::memcpy(b.data() + i, &v, 4);
    }
    return b;
  };
  std::vector<std::string> sent;
  for (int k = 0; k < 3; ++k) {
    auto* n = g->add_node();
    n->set_op_type("Constant");
    n->set_name("c" + std::to_string(k));
    n->add_output("w" + std::to_string(k));
    if (k == 1) {  // an attribute before the tensor: indices count every attribute
      auto* doc = n->add_attribute();
      doc->set_name("unused");
      doc->set_type(pb::AttributeProto::INT);
    }
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(pb::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(pb::TensorProto::FLOAT);
    a->mutable_t()->add_dims(k == 2 ? 2 : 300);
    sent.push_back(payload(k, k == 2 ? 8 : 1200));  // the last below the threshold: copied
    a->mutable_t()->set_raw_data(sent.back());
    auto* out = g->add_output();
    out->set_name(n->output(0));
    out->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  }
  writeFile(d / "m.onnx", m.SerializeAsString());
  auto model = loadModel(d / "m.onnx");
  REQUIRE(model->graph->nodes().size() == 3);
  size_t k = 0;
  for (const auto& n : model->graph->nodes()) {
    const Attribute* a = n->attr("value");
    REQUIRE(a);
    REQUIRE(a->t);
    INFO("node " << k);
    CHECK(a->t->storage == Tensor::Storage::Raw);
    CHECK(a->t->raw.view() == sent[k]);
    CHECK(addressIsMappedFrom(a->t->raw.data(), d / "m.onnx") == (k < 2));
    ++k;
  }
  CHECK(model->loadIssues.empty());
  // Runs, and saves back with the same bytes.
  auto outs = makeExecutor("ref")->prepare(*model, {})->run({});
  CHECK(outs.at(1).tensor->elementAsDouble(299) == 1.0 + 299.0);
  saveModel(*model, d / "out.onnx");
  pb::ModelProto back;
  std::ifstream f(d / "out.onnx", std::ios::binary);
  REQUIRE(back.ParseFromString(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>())));
  for (int i = 0; i < 3; ++i) {
    const auto& n = back.graph().node(i);
    CHECK(n.attribute(n.attribute_size() - 1).t().raw_data() == sent[static_cast<size_t>(i)]);
  }
  // An attribute holding its tensor twice (protobuf merges the two messages, the last raw_data
  // wins) is left to protobuf: node 0 written by hand with a second `t` in its `value`.
  auto lenField = [](char tag, const std::string& payload) {
    std::string out(1, tag);
    for (uint64_t v = payload.size();; v >>= 7) {
      if (v < 0x80) {
        out.push_back(static_cast<char>(v));
        break;
      }
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    }
    return out + payload;
  };
  pb::AttributeProto second;
  second.mutable_t()->set_raw_data(std::string(400, '\x07'));
  const std::string attr0 = m.graph().node(0).attribute(0).SerializeAsString() + second.SerializeAsString();
  pb::AttributeProto merged;
  REQUIRE(merged.ParseFromString(attr0));  // what protobuf makes of it
  pb::NodeProto node0 = m.graph().node(0);
  node0.clear_attribute();
  pb::GraphProto rest = m.graph();
  rest.mutable_node()->DeleteSubrange(0, 1);
  pb::ModelProto shell = m;
  shell.clear_graph();
  const std::string node0Bytes = node0.SerializeAsString() + lenField('\x2a', attr0);             // NodeProto.attribute = 5
  const std::string graphBytes = lenField('\x0a', node0Bytes) + rest.SerializeAsString();         // GraphProto.node = 1
  writeFile(d / "twice.onnx", shell.SerializeAsString() + lenField('\x3a', graphBytes));           // ModelProto.graph = 7
  auto t2 = loadModel(d / "twice.onnx");
  const Attribute* v0 = t2->graph->nodes().front()->attr("value");
  REQUIRE(v0);
  REQUIRE(v0->t);
  CHECK(v0->t->raw.view() == merged.t().raw_data());
  CHECK(v0->t->raw.view() == std::string(400, '\x07'));
  CHECK(t2->graph->nodes().size() == 3);
}

TEST_CASE("a tensor with its raw_data field twice keeps protobuf's last-one-wins meaning", "[io]") {
  TempDir d;
  pb::ModelProto m = externalModel("unused");
  auto* t = m.mutable_graph()->mutable_initializer(0);
  t->clear_external_data();
  t->clear_data_location();
  t->clear_dims();
  t->add_dims(128);
  t->set_raw_data(std::string(512, '\x01'));
  std::string bytes = m.SerializeAsString();
  // append a second initializer-level raw_data by re-serializing a tensor with two raw fields
  pb::TensorProto second;
  second.set_raw_data(std::string(512, '\x02'));
  pb::GraphProto g2;
  *g2.add_initializer() = second;
  pb::ModelProto m2;
  *m2.mutable_graph() = g2;
  // Two graph fields merge: the initializer lists concatenate. Protobuf semantics must hold.
  writeFile(d / "m.onnx", bytes + m2.SerializeAsString());
  auto model = loadModel(d / "m.onnx");
  CHECK(model->graph->initializers().size() == 2);
  CHECK(model->graph->initializers()[1]->initializer()->raw.data()[0] == 2);
}

TEST_CASE("node count and subgraph depth are counted on the wire, functions and training included", "[io][limits]") {
  using onnxtool::wire::checkNodeLimits;
  // main graph: If 'outer' whose then_branch holds If 'inner' whose then_branch holds one node
  pb::ModelProto m;
  m.set_ir_version(8);
  auto* g = m.mutable_graph();
  auto addIf = [](pb::GraphProto* owner, const std::string& name) {
    auto* n = owner->add_node();
    n->set_name(name);
    n->set_op_type("If");
    auto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(pb::AttributeProto::GRAPH);
    return a->mutable_g();
  };
  pb::GraphProto* inner = addIf(addIf(g, "outer"), "inner");
  inner->add_node()->set_op_type("Relu");
  auto check = [&](uint64_t maxNodes, int maxDepth) {
    std::string bytes = m.SerializeAsString();
    return checkNodeLimits(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), maxNodes, maxDepth);
  };
  CHECK_FALSE(check(3, 2));
  CHECK(check(3, 1).value_or("") == "node 'inner' (If) nests subgraphs 2 levels deep, expected at most 1 (onnxtool's limit)");
  CHECK(check(2, 2).value_or("").rfind("model has more than 2 nodes", 0) == 0);
  // nodes of model-local functions (in their subgraphs too) and of training graphs count
  auto* f = m.add_functions();
  auto* call = f->add_node();
  call->set_op_type("Loop");
  auto* body = call->add_attribute();
  body->set_name("body");
  body->set_type(pb::AttributeProto::GRAPH);
  body->mutable_g()->add_node()->set_op_type("Neg");
  CHECK_FALSE(check(5, 2));
  CHECK(check(4, 2).value_or("").rfind("model has more than 4 nodes", 0) == 0);
  m.add_training_info()->mutable_algorithm()->add_node()->set_op_type("Neg");
  CHECK(check(5, 2).value_or("").rfind("model has more than 5 nodes", 0) == 0);
  // a default attribute value of a function may hold a graph: its depth counts
  m.Clear();
  auto* dflt = m.add_functions()->add_attribute_proto();
  dflt->set_name("g");
  dflt->set_type(pb::AttributeProto::GRAPH);
  dflt->mutable_g()->add_node()->set_op_type("Neg");
  CHECK_FALSE(check(1, 1));
  CHECK(check(100, 0).value_or("") ==
        "a default attribute value of a function nests subgraphs 1 level deep, expected at most 0 (onnxtool's limit)");
  // bytes that are not plain wire format are left to protobuf
  const uint8_t junk[] = {0x3a, 0x7f, 0x01};
  CHECK_FALSE(checkNodeLimits(junk, sizeof junk, 1, 1));
}

TEST_CASE("long strings are found on the wire before the reflection check runs", "[io][limits]") {
  using onnxtool::wire::mayHoldLongStrings;
  constexpr size_t kLimit = 65536;
  // big tensors (raw_data, packed floats) in big graphs, nodes and attributes: no long string
  pb::ModelProto m;
  m.set_ir_version(8);
  auto* g = m.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(pb::TensorProto::FLOAT);
  w->add_dims(30000);
  w->set_raw_data(std::string(120000, '\1'));
  auto* p = g->add_initializer();
  p->set_name("p");
  p->set_data_type(pb::TensorProto::FLOAT);
  p->add_dims(20000);
  for (int i = 0; i < 20000; ++i) p->add_float_data(1.f);
  auto* n = g->add_node();
  n->set_op_type("Constant");
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(pb::AttributeProto::TENSOR);
  a->mutable_t()->set_raw_data(std::string(100000, '\2'));
  auto check = [&] {
    std::string bytes = m.SerializeAsString();
    return mayHoldLongStrings(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kLimit);
  };
  CHECK_FALSE(check());
  // a long name inside a big initializer, a long doc string of a node, a long string attribute
  w->set_name(std::string(kLimit + 1, 'n'));
  CHECK(check());
  w->set_name("w");
  n->set_doc_string(std::string(kLimit + 1, 'd'));
  CHECK(check());
  n->clear_doc_string();
  a->set_s(std::string(kLimit + 1, 's'));
  CHECK(check());
  a->clear_s();
  CHECK_FALSE(check());
  // at the limit: fine
  w->set_name(std::string(kLimit, 'n'));
  CHECK_FALSE(check());
  // and the loader still names the field past the limit when it sits in such a model
  w->set_name(std::string(kLimit + 1, 'n'));
  try {
    loadModelFromBytes(m.SerializeAsString(), ".", "m.onnx");
    FAIL("a 64 KiB + 1 name was accepted");
  } catch (const onnxtool::Error& e) {
    CHECK(std::string(e.what()).find("graph.initializer[0].name is 65537 bytes long") != std::string::npos);
  }
  // bytes that are not plain wire format go to the full check
  const uint8_t junk[] = {0x3a, 0x7f, 0x01};
  CHECK(mayHoldLongStrings(junk, sizeof junk, kLimit));
}

TEST_CASE("dynamic dims written as -1 or as \"?\" load as unknown dims", "[io]") {
  // paddle2onnx writes a PaddleOCR classifier's input as [-1, 3, "?", "?"] and feeds it 48x192:
  // onnx.checker accepts that, and ONNX Runtime reads each of them as an independent unknown dim.
  pb::ModelProto m = externalModel("unused");
  auto* g = m.mutable_graph();
  g->clear_initializer();
  auto* in = g->add_input();
  in->set_name("w");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(pb::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(-1);
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  tt->mutable_shape()->add_dim()->set_dim_param("?");
  tt->mutable_shape()->add_dim()->set_dim_param("h");
  auto model = loadModelFromBytes(m.SerializeAsString(), ".", "m.onnx");
  const Shape& s = model->graph->inputs().at(0).type().shape;
  REQUIRE(s.rank() == 4);
  CHECK(s.dims[0].isUnknown());
  CHECK(s.dims[1].isValue());
  CHECK(s.dims[1].value == 3);
  CHECK(s.dims[2].isUnknown());
  CHECK(s.dims[3].isParam());
  pb::ModelProto back;
  REQUIRE(back.ParseFromString(serializeModel(*model)));
  const auto& bs = back.graph().input(0).type().tensor_type().shape();
  CHECK_FALSE(bs.dim(0).has_dim_value());
  CHECK_FALSE(bs.dim(0).has_dim_param());
  CHECK(bs.dim(3).dim_param() == "h");
}

namespace {

namespace gp = google::protobuf;
using FieldPath = std::vector<std::pair<const gp::FieldDescriptor*, int>>;  // (field, index or -1)

gp::Message* messageAt(gp::Message& root, const FieldPath& path) {
  gp::Message* m = &root;
  for (const auto& [fd, index] : path) {
    const gp::Reflection* r = m->GetReflection();
    m = index < 0 ? r->MutableMessage(m, fd) : r->MutableRepeatedMessage(m, fd, index);
  }
  return m;
}

/// Every message in `m`'s tree, as paths from the root.
void collectSites(const gp::Message& m, FieldPath& path, std::vector<FieldPath>& out) {
  out.push_back(path);
  const gp::Reflection* r = m.GetReflection();
  std::vector<const gp::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const gp::FieldDescriptor* fd : fields) {
    if (fd->cpp_type() != gp::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (fd->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, fd); ++i) {
        path.emplace_back(fd, i);
        collectSites(r->GetRepeatedMessage(m, fd, i), path, out);
        path.pop_back();
      }
    } else {
      path.emplace_back(fd, -1);
      collectSites(r->GetMessage(m, fd), path, out);
      path.pop_back();
    }
  }
}

/// Gives every singular scalar of a fresh message a non-default value (an empty entry or value
/// info would be saved back with its presence normalised, which is not what is tested here).
void fillScalars(gp::Message& m) {
  const gp::Descriptor* d = m.GetDescriptor();
  const gp::Reflection* r = m.GetReflection();
  using F = gp::FieldDescriptor;
  for (int i = 0; i < d->field_count(); ++i) {
    const F* fd = d->field(i);
    if (fd->is_repeated() || fd->containing_oneof()) continue;
    switch (fd->cpp_type()) {
      case F::CPPTYPE_STRING: r->SetString(&m, fd, "e" + std::to_string(i)); break;
      case F::CPPTYPE_INT32: r->SetInt32(&m, fd, 1); break;
      case F::CPPTYPE_INT64: r->SetInt64(&m, fd, 1); break;
      default: break;
    }
  }
}

/// Sets `fd` on `m`: one element for a repeated field, a present empty message, or for a scalar
/// its default (`asDefault`, explicitly present) or a non-default value.
void setField(gp::Message& m, const gp::FieldDescriptor* fd, bool asDefault) {
  const gp::Reflection* r = m.GetReflection();
  using F = gp::FieldDescriptor;
  if (fd->is_repeated()) {
    switch (fd->cpp_type()) {
      case F::CPPTYPE_MESSAGE: fillScalars(*r->AddMessage(&m, fd)); break;
      case F::CPPTYPE_STRING: r->AddString(&m, fd, "x"); break;
      case F::CPPTYPE_INT32: r->AddInt32(&m, fd, 7); break;
      case F::CPPTYPE_INT64: r->AddInt64(&m, fd, 7); break;
      case F::CPPTYPE_UINT64: r->AddUInt64(&m, fd, 7); break;
      case F::CPPTYPE_FLOAT: r->AddFloat(&m, fd, 1.5f); break;
      case F::CPPTYPE_DOUBLE: r->AddDouble(&m, fd, 1.5); break;
      default: FAIL("unexpected repeated field type " << fd->full_name());
    }
    return;
  }
  switch (fd->cpp_type()) {
    case F::CPPTYPE_MESSAGE: r->MutableMessage(&m, fd); break;
    case F::CPPTYPE_STRING: r->SetString(&m, fd, asDefault ? "" : "x"); break;
    case F::CPPTYPE_INT32: r->SetInt32(&m, fd, asDefault ? 0 : 7); break;
    case F::CPPTYPE_INT64: r->SetInt64(&m, fd, asDefault ? 0 : 7); break;
    case F::CPPTYPE_FLOAT: r->SetFloat(&m, fd, asDefault ? 0.0f : 1.5f); break;
    case F::CPPTYPE_ENUM: r->SetEnumValue(&m, fd, asDefault ? 0 : 1); break;
    default: FAIL("unexpected field type " << fd->full_name());
  }
}

}  // namespace

TEST_CASE("every field of every message, or a scalar present at its default, survives a round trip", "[io]") {
  // Loading skips protobuf reflection for messages that typed checks find plain (formats/
  // proto_convert.cpp); a field missing from a check would be dropped silently. This sets each
  // field of each message of a model touching every message kind, one at a time, and requires
  // the saved model to equal the one loaded.
  pb::ModelProto base;
  base.set_ir_version(10);
  base.add_opset_import()->set_version(18);
  auto* g = base.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->add_input("x");
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("alpha");
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(0.5f);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(pb::TensorProto::FLOAT);
  w->add_dims(1);
  w->set_raw_data(std::string(4, '\0'));
  auto* sp = g->add_sparse_initializer();
  sp->mutable_values()->set_name("s");
  sp->mutable_values()->set_data_type(pb::TensorProto::FLOAT);
  sp->mutable_values()->add_dims(0);
  sp->mutable_indices()->set_data_type(pb::TensorProto::INT64);
  sp->mutable_indices()->add_dims(0);
  sp->add_dims(4);
  auto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(pb::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(1);
  auto* q = g->add_input();
  q->set_name("q");
  q->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
  auto* o = g->add_input();
  o->set_name("o");
  o->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_sparse_tensor_type()->set_elem_type(1);
  auto* mp = g->add_input();
  mp->set_name("mp");
  mp->mutable_type()->mutable_map_type()->set_key_type(7);
  mp->mutable_type()->mutable_map_type()->mutable_value_type()->mutable_opaque_type()->set_name("t");
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  auto* f = base.add_functions();
  f->set_name("F");
  f->set_domain("local");
  f->add_input("a");
  f->add_output("b");
  f->add_node()->set_op_type("Neg");
  f->mutable_node(0)->add_input("a");
  f->mutable_node(0)->add_output("b");
  base.add_opset_import()->set_domain("local");
  base.mutable_opset_import(1)->set_version(1);

  std::vector<FieldPath> sites;
  FieldPath path;
  collectSites(base, path, sites);
  REQUIRE(sites.size() > 20);
  int checked = 0;
  std::set<std::string> messagesSeen;
  for (const FieldPath& site : sites) {
    const gp::Descriptor* d = messageAt(base, site)->GetDescriptor();
    messagesSeen.insert(d->full_name());
    for (int i = 0; i < d->field_count(); ++i) {
      const gp::FieldDescriptor* fd = d->field(i);
      // external_data entries mean something only with data_location EXTERNAL (tested elsewhere)
      if (fd->name() == "external_data") continue;
      for (bool asDefault : {false, true}) {
        if (asDefault && (fd->is_repeated() || fd->cpp_type() == gp::FieldDescriptor::CPPTYPE_MESSAGE)) continue;
        pb::ModelProto m = base;
        gp::Message* target = messageAt(m, site);
        if (d->name() == "TensorProto" && fd->is_repeated() && fd->name().size() > 5 &&
            fd->name().compare(fd->name().size() - 5, 5, "_data") == 0) {
          auto* t = static_cast<pb::TensorProto*>(target);  // typed data instead of raw_data, type to match
          t->clear_raw_data();
          t->set_data_type(fd->name() == "float_data"    ? pb::TensorProto::FLOAT
                           : fd->name() == "int32_data"  ? pb::TensorProto::INT32
                           : fd->name() == "int64_data"  ? pb::TensorProto::INT64
                           : fd->name() == "double_data" ? pb::TensorProto::DOUBLE
                           : fd->name() == "uint64_data" ? pb::TensorProto::UINT64
                                                         : pb::TensorProto::STRING);
          t->clear_dims();
          t->add_dims(1);
        }
        setField(*target, fd, asDefault);
        std::string bytes = m.SerializeAsString();
        std::unique_ptr<Model> loaded;
        try {
          loaded = loadModelFromBytes(bytes, ".", "m.onnx");
        } catch (const onnxtool::Error&) {
          continue;  // not a loadable model (say, a second graph value named like the first)
        }
        pb::ModelProto back;
        REQUIRE(back.ParseFromString(serializeModel(*loaded)));
        INFO(d->full_name() << "." << fd->name() << (asDefault ? " (present, default)" : "") << " at depth "
                            << site.size());
        CHECK(gp::util::MessageDifferencer::Equals(m, back));
        ++checked;
      }
    }
  }
  CHECK(checked > 150);
  for (const char* kind : {"onnxtool.pb.ModelProto", "onnxtool.pb.GraphProto", "onnxtool.pb.NodeProto", "onnxtool.pb.AttributeProto", "onnxtool.pb.TensorProto",
                           "onnxtool.pb.SparseTensorProto", "onnxtool.pb.ValueInfoProto", "onnxtool.pb.TypeProto", "onnxtool.pb.TypeProto.Tensor",
                           "onnxtool.pb.TypeProto.Sequence", "onnxtool.pb.TypeProto.Optional", "onnxtool.pb.TypeProto.Map",
                           "onnxtool.pb.TypeProto.Opaque", "onnxtool.pb.TypeProto.SparseTensor", "onnxtool.pb.TensorShapeProto",
                           "onnxtool.pb.TensorShapeProto.Dimension", "onnxtool.pb.OperatorSetIdProto", "onnxtool.pb.FunctionProto"})
    CHECK(messagesSeen.count(kind) == 1);
}
