// int4.h: weight-only blocked int4 quantization: every MatMul (and Gemm with transA 0, alpha 1)
// whose weight is a constant 2-D float matrix [K, N] (a Gemm's transposed [N, K]) gets 4-bit
// weights with one float scale per block of `blockSize` values along K per output column.
// Activations stay float. Two output forms:
//  - standard ONNX (default): a blocked DequantizeLinear (axis along K, block_size; opset 21+)
//    of an int4 (symmetric) or uint4 + uint4 zero point (asymmetric) weight;
//  - ONNX Runtime's com.microsoft MatMulNBits (bits 4; any opset), for `--target ort`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"
#include "quant/dynamic.h"

namespace onnxtool {

struct Int4QuantizeOptions {
  int64_t blockSize = 32;     ///< rows of K per scale (16 or more, a power of 2)
  int64_t minElements = 16;   ///< smaller weights stay float
  /// true: int4 in [-7, 7], scale max|block| / 7, no zero point. false (default): uint4 codes
  /// over [min(0, block), max(0, block)], scale (max - min) / 15 and a zero point per block
  /// (zero stays exact); one more level and a range fitted to skewed blocks.
  bool symmetric = false;
  /// Emit com.microsoft MatMulNBits (B as [N, blocks, blockSize/2] bytes) instead of
  /// DequantizeLinear + MatMul; a Gemm's C becomes an Add after it.
  bool matmulNBits = false;
  /// Op types to quantize: MatMul, Gemm (default) and Gather (an embedding table [V, H] read
  /// along axis 0: blocks along H, behind a blocked DequantizeLinear in both output forms).
  std::vector<std::string> opTypes{"MatMul", "Gemm"};
  /// Node names or op types left float.
  std::vector<std::string> exclude;
  /// Calibration samples: MatMul/Gemm weights are then rounded by GPTQ (quant/gptq.h) on the
  /// blocks' scales and zero points instead of to nearest; null: nearest rounding.
  const std::vector<std::map<std::string, RtValue>>* calibration = nullptr;
};

/// Quantizes the main graph in place; the report's int8WeightBytes counts the 4-bit bytes,
/// scales and zero points. Throws Error(Unsupported) below opset 21 unless `matmulNBits`.
DynamicQuantizeReport quantizeInt4(Model& model, const Int4QuantizeOptions& options = {});

}  // namespace onnxtool
