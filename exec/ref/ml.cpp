// ml.cpp: reference kernels of the ai.onnx.ml domain, string ops, random ops and signal ops
// (DFT, STFT, window functions, MelWeightMatrix).
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

void registerMlOps() {}

}  // namespace onnxtool::ref
