// fuzz_model: protobuf bytes of a model -> load (external data resolved in a scratch folder that
// holds one small data file, so references into it and out of it are both exercised) -> check ->
// shape inference -> serialize again. What `onnxtool check` and `inspect --shapes` do to a file.
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/model_io.h"
#include "lib/checker.h"
#include "lib/shape_inference.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const std::string& scratchDir() {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / "onnxtool-fuzz-model";
    std::filesystem::create_directories(d);
    std::ofstream(d / "data.bin", std::ios::binary) << std::string(4096, '\x3f');
    return d.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnxtool;
  fuzz::refusesCleanly([&] {
    auto model = loadModelFromBytes(fuzz::asView(data, size), scratchDir(), "fuzz.onnx");
    fuzz::refusesCleanly([&] { (void)checkModel(*model); });
    fuzz::refusesCleanly([&] { (void)inferShapes(*model); });
    fuzz::refusesCleanly([&] { (void)serializeModel(*model); });
  });
  return 0;
}
