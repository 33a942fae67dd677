// quant_scheme.h: the choices the int8 quantizers (dynamic, static QDQ, QOperator) share: the
// integer types of weights and activations, symmetric or asymmetric activations, per-channel or
// per-tensor weights, 7-bit weights (--reduce-range), which nodes to quantize (--op-types,
// --exclude), and the runtime the model is for (--target), with the arithmetic that turns a
// float range into a scale and a zero point.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/tensor.h"
#include "quant/static_qdq.h"

namespace onnxtool {

/// The runtime a quantized model is for: Generic writes what was asked; Ort only the integer
/// types ONNX Runtime's CPU kernels implement; Trt what TensorRT's explicit quantization
/// accepts (QDQ only, int8 symmetric activations and weights, per-channel weights, float bias).
enum class QuantTarget { Generic, Ort, Trt };

struct QuantScheme {
  DType weightType = DType::Int8;      ///< Int8 (symmetric, zero point 0) or UInt8 (asymmetric)
  DType activationType = DType::UInt8; ///< UInt8, Int8, UInt16 or Int16 (16 bits: opset 21+)
  bool symmetricActivations = false;   ///< zero point 0 (signed) or the middle (unsigned)
  bool perChannel = true;              ///< weights: one scale per output channel, else one scale
  bool reduceRange = false;            ///< weights in 7 bits: int8 [-64, 64], uint8 [0, 127]
  bool quantizeBias = true;            ///< static: constant Conv/Gemm bias to int32 (x scale * w scale)
  /// Dynamic only: Conv weights as uint8 with zero point 128 (ONNX Runtime's ConvInteger is uint8
  /// x uint8 only): the default, and always for --target ort; int8 only when asked for generic.
  bool convWeightsUInt8 = false;
  std::vector<std::string> opTypes;    ///< ops to quantize; empty: every one the mode supports
  std::vector<std::string> exclude;    ///< node names or op types that stay float
};

/// What the user asked for; unset fields take the target's defaults.
struct QuantRequest {
  QuantTarget target = QuantTarget::Generic;
  bool dynamic = false;
  bool qoperator = false;
  std::optional<DType> weightType, activationType;
  std::optional<bool> perChannel;
  bool symmetricActivations = false;
  bool reduceRange = false;
  std::vector<std::string> opTypes, exclude;
};

/// The scheme for a request. Throws Error(InvalidInput) for a combination the mode or the target
/// cannot run (say, --dynamic with int8 activations: DynamicQuantizeLinear writes uint8 only;
/// --target trt with --dynamic, uint8 types, per-tensor weights or --format qoperator; 16-bit
/// activations with --dynamic or --format qoperator) and for an op type the mode does not
/// quantize.
QuantScheme resolveScheme(const QuantRequest& request);

/// The op types --op-types may name: Conv, MatMul, Gemm (static QDQ; dynamic, Conv through
/// ConvInteger), and with `dynamic` Gather too (an embedding table, int8 per row: quant/dynamic.h).
const std::vector<std::string>& quantizableOpTypes(bool dynamic = false);

/// Why the scheme leaves `node` float ("" when it is selected): not in --op-types, or excluded.
std::string exclusionReason(const Node& node, const QuantScheme& scheme);

/// --exclude entries that name no node and no op type of the main graph.
std::vector<std::string> unmatchedExcludes(const Graph& g, const QuantScheme& scheme);

struct QuantParams {
  float scale = 1;
  int64_t zeroPoint = 0;
};

/// [qmin, qmax] of an activation type under the scheme (symmetric signed: [-qmax, qmax]).
std::pair<int64_t, int64_t> activationLimits(const QuantScheme& scheme);

/// Scale and zero point of an activation whose calibrated range is `r` (widened to include 0 so
/// that 0, the padding value, is exact). Asymmetric: scale = (hi - lo) / (qmax - qmin), zero
/// point round(qmin - lo / scale); symmetric: scale = max|r| / qmax' (127 or 32767), zero point
/// 0 (signed) or 128 / 32768 (unsigned).
QuantParams activationParams(const ValueRange& r, const QuantScheme& scheme);

/// A scalar tensor of `dt` (Float: the value; integer types: the value as that integer type).
Tensor scalarTensor(DType dt, double v);

/// One quantized weight: the integer tensor, its scales and zero points, and the DequantizeLinear
/// axis (-1: per tensor, scalar scale and zero point).
struct QuantizedWeight {
  Tensor q, scale, zero;
  int64_t axis = -1;
  std::vector<float> scales;  ///< one per channel (per tensor: one)
};

/// Quantizes a float weight along `channelAxis` (the output channels) when the scheme is
/// per-channel, else as one tensor. Int8: symmetric, scale = max|w| / 127 (64 with reduceRange),
/// zero point 0. UInt8: asymmetric over [min(0, w), max(0, w)] with 255 (127) steps. An all-zero
/// channel gets scale 1.
QuantizedWeight quantizeWeight(const TensorData& w, int64_t channelAxis, const QuantScheme& scheme, DType type);

/// The integers [q_min, q_max] quantizeWeight rounds a weight of `type` into under the scheme.
std::pair<int64_t, int64_t> weightLimits(const QuantScheme& scheme, DType type);

/// An int32 bias for a layer whose activation scale is `xScale` and weight scales `wScales`
/// (one, or one per channel): scale[c] = xScale * wScales[c] (float32 product), zero point 0.
/// Empty `q.raw` when a value would overflow int32 or a scale is 0: the bias then stays float.
struct QuantizedBias {
  Tensor q, scale, zero;
  bool perChannel = false;
};
QuantizedBias quantizeBias(const TensorData& bias, float xScale, const std::vector<float>& wScales);

}  // namespace onnxtool
