// cuda_executor.h: the `cuda` executor, built when CMake finds the CUDA toolkit and cuDNN into a
// library of its own (libonnxtool_cuda: exec/cuda/*, entry points in plugin.cpp) that
// exec/executor.cpp loads the first time `cuda` is asked for. Without a usable GPU its prepare()
// fails with Error(Unsupported) saying why, and the CLI exits 3.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "exec/executor.h"

namespace onnxtool {

std::unique_ptr<Executor> makeCudaExecutor();

/// The GPU the `cuda` executor runs on (device 0) and the libraries it uses.
struct CudaDeviceInfo {
  std::string name;
  int computeMajor = 0, computeMinor = 0;
  int multiprocessors = 0;
  size_t memoryBytes = 0;
  int driverVersion = 0, runtimeVersion = 0;  ///< CUDA versions, 1000 * major + 10 * minor
  size_t cudnnVersion = 0;
  int cublasVersion = 0;
};

/// The device, or nullopt with `why` set when no usable CUDA GPU is found.
std::optional<CudaDeviceInfo> cudaDevice(std::string* why = nullptr);

}  // namespace onnxtool
