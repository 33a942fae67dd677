// cpu_executor.h: the `cpu` executor: fast kernels (exec/cpu/cpu_kernels.cpp) where it has
// them, the reference kernels through the same seam everywhere else.
#pragma once

#include <memory>

#include "exec/executor.h"

namespace onnxtool {

std::unique_ptr<Executor> makeCpuExecutor();

}  // namespace onnxtool
