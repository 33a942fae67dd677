// roundtrip.cpp: test tool: loads each IN model into the IR and saves it to OUT, keeping
// external data where it was (`roundtrip IN OUT [IN OUT]...`). Used by tests/py/test_roundtrip.py
// to run the lossless round trip over thousands of models in one process.
#include <cstdio>
#include <exception>

#include "formats/model_io.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 != 1) {
    std::fprintf(stderr, "usage: roundtrip IN OUT [IN OUT]...\n");
    return 2;
  }
  int failures = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    try {
      auto m = onnxtool::loadModel(argv[i]);
      onnxtool::saveModel(*m, argv[i + 1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
