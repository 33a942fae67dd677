// common.cpp: error-to-exit-code mapping shared by the subcommands.
#include "apps/common.h"

#include <exception>
#include <new>

#include <spdlog/spdlog.h>

#include "lib/error.h"

#include <string>

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

ShapeSpec parseShapeSpec(const std::string& spec) {
  auto eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 > spec.size())
    fail(ErrorKind::InvalidInput, "--shape '{}': expected NAME=DIMS, e.g. input_ids=1x128 or input_ids=batch,seq", spec);
  ShapeSpec s;
  s.name = spec.substr(0, eq);
  std::string dims = spec.substr(eq + 1);
  if (dims.empty() || dims == "scalar") return s;  // rank 0
  std::string cur;
  for (size_t i = 0; i <= dims.size(); ++i) {
    if (i == dims.size() || dims[i] == 'x' || dims[i] == ',') {
      // 'x' separates only between numbers ("1x128"); inside a symbol it is a letter
      bool numericSoFar = !cur.empty() && cur.find_first_not_of("0123456789") == std::string::npos;
      if (i < dims.size() && dims[i] == 'x' && !numericSoFar) {
        cur += 'x';
        continue;
      }
      if (cur.empty()) fail(ErrorKind::InvalidInput, "--shape '{}': empty dimension", spec);
      s.dims.push_back(cur);
      cur.clear();
    } else {
      cur += dims[i];
    }
  }
  return s;
}

}  // namespace onnxtool::app
