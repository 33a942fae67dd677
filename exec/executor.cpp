// executor.cpp: the table of executors this build has, looked up by name. Registration is this
// explicit list (a static self-registering object would be dropped by the linker from a static
// library without a word).
#include "exec/executor.h"

#include "exec/cpu/cpu_executor.h"
#include "exec/ref/ref_executor.h"

namespace onnxtool {

namespace {

struct ExecutorEntry {
  const char* name;
  std::unique_ptr<Executor> (*make)();
};

constexpr ExecutorEntry kExecutors[] = {
    {"ref", makeRefExecutor},
    {"cpu", makeCpuExecutor},
};

}  // namespace

std::unique_ptr<Executor> makeExecutor(const std::string& name) {
  for (const auto& e : kExecutors)
    if (name == e.name) return e.make();
  return nullptr;
}

std::vector<std::string> executorNames() {
  std::vector<std::string> names;
  for (const auto& e : kExecutors) names.emplace_back(e.name);
  return names;
}

}  // namespace onnxtool
