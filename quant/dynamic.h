// dynamic.h: int8 dynamic quantization with standard ONNX ops only. Each MatMul (and Gemm) whose
// weight is a constant 2-D float matrix gets int8 weights, symmetric per output column, and
// quantizes its activation at run time:
//
//   x -> DynamicQuantizeLinear -> (xq uint8, xs, xz)          (shared by every layer reading x)
//   y = Cast<float>(MatMulInteger(xq, Wq, xz, Wz)) * (xs * Ws)   [+ bias for Gemm]
//
// Wq int8 [K, N] = round(W / Ws) in [-127, 127], Ws float [N] = max|W[:, n]| / 127, Wz int8 [N]
// zeros. Every runtime that implements opset 11 runs the result (ONNX Runtime's u8s8 kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/ir.h"
#include "quant/quant_scheme.h"

namespace onnxtool {

struct DynamicQuantizeOptions {
  /// Weights with fewer elements stay float (tiny layers gain nothing and lose accuracy).
  int64_t minElements = 16;
  /// Ops to quantize: "MatMul", "Gemm".
  std::vector<std::string> ops = {"MatMul", "Gemm"};
  /// Weight type (int8 symmetric or uint8 asymmetric), per-channel or per-tensor, 7-bit weights,
  /// and --op-types (replaces `ops` when set) / --exclude. Activations are uint8 whatever it says.
  QuantScheme scheme;
};

struct DynamicQuantizeReport {
  int64_t nodesQuantized = 0;
  int64_t weightsQuantized = 0;     ///< distinct weight initializers
  uint64_t floatWeightBytes = 0;    ///< their float bytes before
  uint64_t int8WeightBytes = 0;     ///< and int8 + scale bytes after
  std::vector<std::string> skipped; ///< "node 'x' (MatMul): weight is not a constant 2-D float matrix"
};

/// Quantizes the main graph in place. Throws Error(Unsupported) below opset 11 (no
/// DynamicQuantizeLinear/MatMulInteger there).
DynamicQuantizeReport quantizeDynamic(Model& model, const DynamicQuantizeOptions& options = {});

}  // namespace onnxtool
