// executor.cpp: the table of executors this build has, looked up by name. Registration is this
// explicit list (a static self-registering object would be dropped by the linker from a static
// library without a word).
#include "exec/executor.h"

#include <fmt/format.h>

#include "exec/cpu/cpu_executor.h"
#include "exec/ref/ref_executor.h"
#include "lib/error.h"

#ifdef ONNXTOOL_HAVE_CUDA
#include <dlfcn.h>

#include <filesystem>
#endif

namespace onnxtool {

namespace {

#ifdef ONNXTOOL_HAVE_CUDA
/// libonnxtool_cuda (exec/cuda/plugin.cpp), loaded the first time the `cuda` executor is asked
/// for: from this library's folder, else the loader's search path. Never unloaded.
struct CudaPlugin {
  Executor* (*make)() = nullptr;
  void (*device)(std::vector<std::pair<std::string, std::string>>*) = nullptr;
  std::string error;
};

const CudaPlugin& cudaPlugin() {
  static const CudaPlugin plugin = [] {
    CudaPlugin p;
    const char* name = "libonnxtool_cuda.so.0";
    void* h = nullptr;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&makeExecutor), &info) && info.dli_fname) {
      std::filesystem::path own(info.dli_fname);
      h = dlopen((own.parent_path() / name).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      p.error = e ? e : "dlopen failed";
      return p;
    }
    p.make = reinterpret_cast<Executor* (*)()>(dlsym(h, "onnxtool_cuda_make_executor"));
    p.device = reinterpret_cast<void (*)(std::vector<std::pair<std::string, std::string>>*)>(dlsym(h, "onnxtool_cuda_device"));
    if (!p.make || !p.device) p.error = fmt::format("{}: not an onnxtool CUDA executor", name), p.make = nullptr;
    return p;
  }();
  return plugin;
}

/// The `cuda` executor when its library could not be loaded (CUDA libraries missing): prepare
/// fails saying why.
class UnloadedCudaExecutor : public Executor {
 public:
  std::string name() const override { return "cuda"; }
  std::unique_ptr<Plan> prepare(const Model&, const PrepareOptions&) override {
    fail(ErrorKind::Unsupported, "--device cuda: the CUDA executor could not be loaded: {}", cudaPlugin().error);
  }
};

std::unique_ptr<Executor> makeCudaExecutor() {
  const CudaPlugin& p = cudaPlugin();
  if (!p.make) return std::make_unique<UnloadedCudaExecutor>();
  return std::unique_ptr<Executor>(p.make());
}
#endif

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
  const CudaPlugin& p = cudaPlugin();
  if (!p.make) return {{"error", "the CUDA executor could not be loaded: " + p.error}};
  std::vector<std::pair<std::string, std::string>> out;
  p.device(&out);
  return out;
#else
  return {{"error", "this build has no CUDA executor"}};
#endif
}

}  // namespace onnxtool
