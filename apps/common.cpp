// common.cpp: error-to-exit-code mapping shared by the subcommands.
#include "apps/common.h"

#include <exception>
#include <new>

#include <spdlog/spdlog.h>

#include "lib/error.h"

namespace onnxtool::app {

int runGuarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    return e.kind() == ErrorKind::Unsupported ? kUnsupported : kUsage;
  } catch (const std::bad_alloc&) {
    spdlog::error("out of memory");
    return kUsage;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kUsage;
  }
}

}  // namespace onnxtool::app
