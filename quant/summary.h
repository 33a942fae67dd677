// summary.h: what quantization a model carries, for `inspect`: the quantization ops by type, the
// float ops that compute on dequantized values (the QDQ form's quantized ops), the weights by
// dtype, and how the scales are laid out (per tensor, per channel, blocked). Reads no weight bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "lib/ir.h"

namespace onnxtool {

struct QuantizationSummary {
  /// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
  /// QLinear*, Gather of an int8/uint8 table read by a Cast to float (an int8 embedding lookup),
  /// and ONNX Runtime's contrib quantized ops (MatMulNBits, QAttention, ...), by "op" or
  /// "domain::op", main graph and subgraphs.
  std::map<std::string, int64_t> quantizationOps;
  /// Ops reading a DequantizeLinear output (Conv, MatMul, ... in the QDQ form), by type.
  std::map<std::string, int64_t> qdqOps;
  struct Bytes {
    int64_t tensors = 0;
    uint64_t elements = 0, bytes = 0;
  };
  /// Every initializer by dtype name ("float32", "int8", "int4", ...).
  std::map<std::string, Bytes> weightsByDtype;
  /// The quantized weights alone: initializers that a quantization op reads as its quantized data
  /// (DequantizeLinear's x, MatMulInteger/ConvInteger's B, QLinearConv's w, QLinearMatMul's b,
  /// MatMulNBits's B, an int8 Gather's table, ...), by dtype.
  std::map<std::string, Bytes> quantizedWeightsByDtype;
  /// Scales of QuantizeLinear/DequantizeLinear and the QLinear ops: one value (per tensor), a
  /// vector along an axis (per channel), block_size > 0 (blocked; MatMulNBits too), or not a
  /// constant (computed at run time: each DynamicQuantizeLinear counts one). MatMulInteger and
  /// ConvInteger count their weight zero point instead (their scales are in a float Mul after it).
  int64_t perTensorScales = 0, perChannelScales = 0, blockedScales = 0, runtimeScales = 0;
  bool any() const { return !quantizationOps.empty(); }
};

/// Summarises `model` (all graphs). Works on models loaded without external data.
QuantizationSummary summarizeQuantization(const Model& model);

}  // namespace onnxtool
