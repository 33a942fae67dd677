// executor.cpp: the table of executors this build has, looked up by name. Registration is this
// explicit list (a static self-registering object would be dropped by the linker from a static
// library without a word).
#include "exec/executor.h"

#include <fmt/format.h>

#include "exec/cpu/cpu_executor.h"
#include "exec/ref/ref_executor.h"
#ifdef ONNXTOOL_HAVE_CUDA
#include "exec/cuda/cuda_executor.h"
#endif

namespace onnxtool {

namespace {

struct ExecutorEntry {
  const char* name;
  std::unique_ptr<Executor> (*make)();
};

constexpr ExecutorEntry kExecutors[] = {
    {"ref", makeRefExecutor},
    {"cpu", makeCpuExecutor},
#ifdef ONNXTOOL_HAVE_CUDA
    {"cuda", makeCudaExecutor},
#endif
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

std::vector<std::pair<std::string, std::string>> executorDevice(const std::string& executor) {
  if (executor != "cuda") return {};
#ifdef ONNXTOOL_HAVE_CUDA
  std::string why;
  auto d = cudaDevice(&why);
  if (!d) return {{"error", why}};
  auto ver = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  return {{"name", d->name},
          {"compute_capability", fmt::format("{}.{}", d->computeMajor, d->computeMinor)},
          {"multiprocessors", std::to_string(d->multiprocessors)},
          {"memory_mib", std::to_string(d->memoryBytes >> 20)},
          {"driver", ver(d->driverVersion)},
          {"runtime", ver(d->runtimeVersion)},
          {"cudnn", std::to_string(d->cudnnVersion)},
          {"cublas", std::to_string(d->cublasVersion)}};
#else
  return {{"error", "this build has no CUDA executor"}};
#endif
}

}  // namespace onnxtool
