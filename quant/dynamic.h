// dynamic.h: int8 dynamic quantization with standard ONNX ops only. Each MatMul (and Gemm) whose
// weight is a constant 2-D float matrix gets int8 weights, symmetric per output column, and
// quantizes its activation at run time. By default with one scale and zero point per row of the
// activation (per token of a transformer: a few tokens with outliers, BERT's [CLS]/[SEP], no
// longer flatten the resolution of every other one):
//
//   x -> ReduceMax/ReduceMin over the last axis -> scale [..., 1] = Max((hi - lo) / 255, FLT_MIN),
//        zero [..., 1] = Round(Clip(-lo / scale, 0, 255)), with lo = Min(min x, 0), hi = Max(max x, 0)
//   xq = Cast<uint8>(Clip(Round(x / scale) + zero, 0, 255))   (shared by every layer reading x)
//   y = Cast<float>(MatMulInteger(xq, Wq) - Cast<int32>(zero) * colSum(Wq)) * Ws * scale [+ bias]
//
// (DynamicQuantizeLinear's arithmetic per row; MatMulInteger's a_zero_point is per tensor in ONNX
// Runtime, so the zero point comes off in int32 after it, exactly.) With `rowScales` false, one
// scale per tensor, the form ONNX Runtime fuses into its own kernels:
//
//   x -> DynamicQuantizeLinear -> (xq uint8, xs, xz)          (shared by every layer reading x)
//   y = Cast<float>(MatMulInteger(xq, Wq, xz, Wz)) * (xs * Ws)   [+ bias for Gemm]
//
// Wq int8 [K, N] = round(W / Ws) in [-127, 127], Ws float [N] = max|W[:, n]| / 127, Wz int8 [N]
// zeros. Every runtime that implements opset 11 runs the result (ONNX Runtime's u8s8 kernels).
// Conv (ConvInteger) always quantizes its input per tensor.
//
// Gather of a constant float embedding table T [V, ...] along axis 0 (a token's vector): T gets
// int8 symmetric per row, Ts float [V, 1, ...] = max|T[v]| / 127, Tq int8 = round(T / Ts) in
// [-127, 127], zero point 0 (whatever the scheme says: the table feeds no integer GEMM), and
//
//   y = Mul(Cast<float>(Gather(Tq, ids)), Gather(Ts, ids))
//
// so that a run reads and dequantizes only the rows it gathers (a DequantizeLinear of the table
// before the Gather would make ONNX Runtime dequantize all of it on every run). The cpu
// executor runs the four nodes as one step (exec/cpu/kernels_int8_gather.cpp).
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
  /// Ops to quantize: "MatMul", "Gemm", "Gather" (embedding tables); "Conv" when asked.
  std::vector<std::string> ops = {"MatMul", "Gemm", "Gather"};
  /// Weight type (int8 symmetric or uint8 asymmetric), per-channel or per-tensor, 7-bit weights,
  /// and --op-types (replaces `ops` when set) / --exclude. Activations are uint8 whatever it says.
  QuantScheme scheme;
  /// Activation scale and zero point per row (last axis) of each MatMul/Gemm input, computed with
  /// standard ops (the default), or per tensor by DynamicQuantizeLinear.
  bool rowScales = true;
};

struct DynamicQuantizeReport {
  int64_t nodesQuantized = 0;
  int64_t weightsQuantized = 0;     ///< distinct weight initializers
  uint64_t floatWeightBytes = 0;    ///< their float bytes before
  uint64_t int8WeightBytes = 0;     ///< and int8 + scale bytes after
  std::vector<std::string> skipped; ///< "node 'x' (MatMul): weight is not a constant 2-D float matrix"
  int64_t gptqLayers = 0;           ///< --int4 with calibration: weights GPTQ rounded
  double gptqErrorRatio = 1;        ///< their output error / nearest rounding's (mean over layers)
};

/// Quantizes the main graph in place. Throws Error(Unsupported) below opset 11 (no
/// DynamicQuantizeLinear/MatMulInteger there).
DynamicQuantizeReport quantizeDynamic(Model& model, const DynamicQuantizeOptions& options = {});

}  // namespace onnxtool
