// fuzz_common.h: what every fuzz target shares. A target's entry point is libFuzzer's
// `LLVMFuzzerTestOneInput`; it is linked with libFuzzer (scripts/fuzz, clang) or with
// standalone_main.cpp (any compiler: replays a corpus and runs seeded mutations, the CTest smoke).
// The promise under test: malformed input throws onnxtool::Error (a one-line message, a non-zero
// exit in the CLI) and nothing else: no crash, no sanitizer report, no other exception, no hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lib/error.h"

namespace onnxtool::fuzz {

inline std::string_view asView(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Runs `fn`; onnxtool::Error is the expected way to refuse an input. Any other exception
/// escapes and aborts the process, which the fuzzer reports as a finding.
template <class F>
void refusesCleanly(F&& fn) {
  try {
    fn();
  } catch (const onnxtool::Error&) {
  }
}

}  // namespace onnxtool::fuzz
