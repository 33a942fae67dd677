// fuzz_tensor: the tensor file readers behind `run -i`, `quantize --calibration` and the test-data
// layout: .npy, .npz, .pb (TensorProto, and SequenceProto/MapProto/OptionalProto through the
// value reader) and JSON. The content picks the reader as a file's extension would: the npy and
// zip magics, a JSON opening bracket, else both protobuf readers.
#include <string>

#include "formats/model_io.h"
#include "formats/tensor_files.h"
#include "formats/value_files.h"
#include "lib/tensor_check.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnxtool;
  std::string_view body = fuzz::asView(data, size);
  auto startsWith = [&](std::string_view p) { return body.substr(0, p.size()) == p; };
  if (startsWith("\x93NUMPY")) {
    fuzz::refusesCleanly([&] { (void)tensorDataProblems(parseNpy(body, "fuzz.npy")); });
  } else if (startsWith("PK")) {
    fuzz::refusesCleanly([&] {
      for (auto& [name, t] : parseNpz(std::string(body), "fuzz.npz")) (void)tensorDataProblems(t);
    });
  } else if (startsWith("{") || startsWith("[")) {
    fuzz::refusesCleanly([&] { (void)parseJson(body, TypeInfo{}, "fuzz.json", nullptr); });
  } else {
    fuzz::refusesCleanly([&] { (void)tensorDataProblems(loadTensorProto(body, "fuzz.pb")); });
    fuzz::refusesCleanly([&] { (void)parseValueProto(body, TypeInfo{}, "fuzz.pb"); });
  }
  return 0;
}
