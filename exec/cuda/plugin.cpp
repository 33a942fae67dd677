// plugin.cpp: the entry points of libonnxtool_cuda, which exec/executor.cpp loads with dlopen
// the first time the `cuda` executor is asked for (so that no other command loads CUDA).
#include <fmt/format.h>

#include "exec/cuda/cuda_executor.h"

extern "C" {

__attribute__((visibility("default"))) onnxtool::Executor* onnxtool_cuda_make_executor() {
  return onnxtool::makeCudaExecutor().release();
}

/// The GPU as key/value pairs for `bench` (exec/executor.h executorDevice), or {"error", why}.
__attribute__((visibility("default"))) void onnxtool_cuda_device(std::vector<std::pair<std::string, std::string>>* out) {
  std::string why;
  auto d = onnxtool::cudaDevice(&why);
  if (!d) {
    *out = {{"error", "no usable CUDA GPU: " + why}};
    return;
  }
  auto ver = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  *out = {{"name", d->name},
          {"compute_capability", fmt::format("{}.{}", d->computeMajor, d->computeMinor)},
          {"multiprocessors", std::to_string(d->multiprocessors)},
          {"memory_mib", std::to_string(d->memoryBytes >> 20)},
          {"driver", ver(d->driverVersion)},
          {"runtime", ver(d->runtimeVersion)},
          {"cudnn", std::to_string(d->cudnnVersion)},
          {"cublas", std::to_string(d->cublasVersion)}};
}

}  // extern "C"
