// fuzz_text: ONNX textual syntax -> parse -> check -> shape inference -> print again.
#include <string>

#include "formats/onnx_text.h"
#include "lib/checker.h"
#include "lib/shape_inference.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnxtool;
  fuzz::refusesCleanly([&] {
    auto model = parseModelText(fuzz::asView(data, size), "fuzz.onnxtxt");
    fuzz::refusesCleanly([&] { (void)checkModel(*model); });
    fuzz::refusesCleanly([&] { (void)inferShapes(*model); });
    fuzz::refusesCleanly([&] { (void)printModelText(*model); });
  });
  return 0;
}
