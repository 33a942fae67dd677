// int4.h: weight-only int4 quantization: every MatMul (and Gemm with transA 0, alpha 1) whose
// weight is a constant 2-D float matrix [K, N] (a Gemm's transposed [N, K]) gets int4 weights,
// symmetric (max|block| / 7), one float scale per block of `blockSize` values along K per column,
// behind a blocked DequantizeLinear (axis along K, block_size; opset 21+). Activations stay
// float. Standard ONNX ops only.
#pragma once

#include <cstdint>

#include "lib/ir.h"
#include "quant/dynamic.h"

namespace onnxtool {

struct Int4QuantizeOptions {
  int64_t blockSize = 32;     ///< rows of K per scale (16 or more, a power of 2)
  int64_t minElements = 16;   ///< smaller weights stay float
};

/// Quantizes the main graph in place; the report's int8WeightBytes counts the int4 bytes and
/// scales. Throws Error(Unsupported) below opset 21.
DynamicQuantizeReport quantizeInt4(Model& model, const Int4QuantizeOptions& options = {});

}  // namespace onnxtool
