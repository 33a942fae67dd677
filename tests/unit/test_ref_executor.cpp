// test_ref_executor.cpp: executor-level guarantees of the ref executor that no single kernel
// owns: initializers borrowed from a model file at odd offsets reach kernels aligned.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "exec/executor.h"
#include "formats/model_io.h"
#include "formats/onnx.pb.h"

using namespace onnxtool;
namespace fs = std::filesystem;

TEST_CASE("initializers borrowed at unaligned file offsets reach kernels aligned", "[ref]") {
  std::string tmpl = (fs::temp_directory_path() / "onnxtool-exec-XXXXXX").string();
  fs::path dir = ::mkdtemp(tmpl.data());
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  for (int k = 0; k < 4; ++k) {  // names of different lengths shift the raw_data offsets
    auto* t = g->add_initializer();
    t->set_name(std::string(static_cast<size_t>(k + 1), 'w'));
    t->set_data_type(pb::TensorProto::FLOAT);
    t->add_dims(256);
    std::string bytes(1024, '\0');
    for (size_t i = 0; i < 256; ++i) {
      float v = static_cast<float>(i) + 0.5f * static_cast<float>(k);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    t->set_raw_data(bytes);
    auto* n = g->add_node();
    n->set_op_type("Identity");
    n->add_input(t->name());
    n->add_output("y" + std::to_string(k));
    auto* out = g->add_output();
    out->set_name("y" + std::to_string(k));
    out->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
  }
  std::string path = (dir / "m.onnx").string();
  {
    std::ofstream f(path, std::ios::binary);
    f << m.SerializeAsString();
  }
  auto model = loadModel(path);
  bool someUnaligned = false;
  for (Value* v : model->graph->initializers()) someUnaligned |= !v->initializer()->raw.isAligned(16);
  REQUIRE(someUnaligned);  // the file really puts some weights at odd offsets
  auto outs = makeExecutor("ref")->prepare(*model, {})->run({});
  REQUIRE(outs.size() == 4);
  for (size_t k = 0; k < 4; ++k) {
    const RtTensor& t = *outs[k].tensor;
    CHECK(t.raw.isAligned(16));
    CHECK(t.elementAsDouble(255) == 255.0 + 0.5 * static_cast<double>(k));
  }
  fs::remove_all(dir);
}
