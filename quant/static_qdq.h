// static_qdq.h: int8 static quantization in the QDQ format: QuantizeLinear/DequantizeLinear pairs
// around the activations MatMul/Gemm/Conv read, with ranges from calibration, and weights stored
// as int8 behind a DequantizeLinear (per output channel). Standard ONNX ops only (opset 13+, for
// per-axis DequantizeLinear); runtimes fuse the pairs into int8 kernels, every other runtime
// still computes the same thing in float.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

/// The observed range of one float value over the calibration samples.
struct ValueRange {
  float min = 0, max = 0;
};

struct QuantScheme;
struct QuantizedWeight;

/// Weights already quantized (by quant/gptq.h), by the name of the float initializer they
/// replace: quantizeStaticQdq and correctBiases take these integers instead of rounding to nearest.
using PresetWeights = std::map<std::string, QuantizedWeight>;

/// The constant float weight of a node static quantization handles (MatMul, Gemm without transA
/// and with alpha 1: 2-D; Conv), with the axis of its output channels; null when it does not qualify.
const Tensor* staticQuantWeight(const Node& n, int64_t* channelAxis);

/// The float values MatMul/Gemm/Conv read as activations (their first input) in the main graph:
/// those calibration must observe (with a scheme: only the nodes it selects).
std::vector<std::string> activationsToCalibrate(const Model& model);
std::vector<std::string> activationsToCalibrate(const Model& model, const QuantScheme& scheme);

/// Runs the model (a copy with `values` exposed as graph outputs; the caller's model stays as it
/// is) on every sample with the cpu executor and calls `visit` with each exposed value
/// that came out as a tensor.
/// With `exposedOnly` the copy's other outputs go: only what the values need is computed.
void observeValues(const Model& model, const std::vector<std::string>& values,
                   const std::vector<std::map<std::string, RtValue>>& samples,
                   const std::function<void(const std::string&, const TensorData&)>& visit, bool exposedOnly = false);

/// How calibration turns the observed values into a range.
struct CalibrationMethod {
  /// Entropy: the threshold t minimising the KL divergence between the histogram of |x| clipped
  /// at t and its 128-level quantization (the int8 calibration TensorRT describes), range
  /// [max(min, -t), min(max, t)].
  /// Mse: the range [t*min, t*max] (t in (0, 1], one step per bin) whose uint8 quantization has the
  /// least mean squared error over the 2048-bin histogram of the values (clipping error included).
  enum class Kind { MinMax, Percentile, Entropy, Mse } kind = Kind::MinMax;
  /// Percentile: the range keeps this share of the values, cutting (100-P)/2 % off each tail
  /// (from a 2048-bin histogram over the min/max range; outliers stop stretching the scale).
  double percentile = 99.999;
};

/// Runs the model (a copy with the activations exposed as outputs) on every sample with the cpu
/// executor (reference kernels where it has no fast one) and returns each activation's range.
/// `samples` map input names to values.
/// Percentile runs the samples twice (min/max, then the histogram).
std::map<std::string, ValueRange> calibrateRanges(const Model& model, const std::vector<std::string>& activations,
                                                  const std::vector<std::map<std::string, RtValue>>& samples,
                                                  const CalibrationMethod& method = {});

struct StaticQuantizeReport {
  int64_t nodesQuantized = 0;
  int64_t weightsQuantized = 0;
  uint64_t floatWeightBytes = 0, int8WeightBytes = 0;
  int64_t biasesQuantized = 0;  ///< Conv/Gemm biases written as int32
  std::vector<std::string> skipped;
};

/// Inserts the QDQ pairs (uint8 activations, asymmetric over [min(0,lo), max(0,hi)]; int8
/// weights symmetric per output channel) in place. Throws Error(Unsupported) below opset 13.
StaticQuantizeReport quantizeStaticQdq(Model& model, const std::map<std::string, ValueRange>& ranges,
                                       int64_t minElements = 16);
/// The same with the types, granularity and node selection of `scheme` (quant/quant_scheme.h);
/// a constant Conv/Gemm bias becomes int32 behind a DequantizeLinear with scale x scale * w scale
/// when scheme.quantizeBias. 16-bit activations need opset 21 (Error(Unsupported) below).
StaticQuantizeReport quantizeStaticQdq(Model& model, const std::map<std::string, ValueRange>& ranges,
                                       int64_t minElements, const QuantScheme& scheme,
                                       const PresetWeights* preset = nullptr);

/// Bias correction (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias
/// Correction", 2019, with the input means measured on calibration data): quantizing a weight
/// moves each output channel's mean by (dequantized W - W) . E[x], which the bias takes back,
/// b[m] -= sum over the weights of output channel m of (Wq - W) * mean of the input channel they
/// multiply (Conv: axis 1 of its input, groups respected; MatMul/Gemm: the last axis). For every
/// layer quantizeStaticQdq would quantize under `scheme` that has a constant float bias of one
/// value per output channel read by it alone: a Conv's B, a Gemm's C (beta 1), the Add after a
/// MatMul. Changes only those biases (the float model's outputs move by the same amount the
/// quantized model's move back); run it on the model quantizeStaticQdq then quantizes.
struct BiasCorrectionReport {
  int64_t corrected = 0;
  std::vector<std::string> skipped;
};
/// `preset`: weights rounded otherwise than to nearest (their integers give Wq).
BiasCorrectionReport correctBiases(Model& model, const std::vector<std::map<std::string, RtValue>>& samples,
                                   const QuantScheme& scheme, int64_t minElements,
                                   const PresetWeights* preset = nullptr);

/// Gives every Conv and Gemm (beta 1) that quantizeStaticQdq would quantize under `scheme` a
/// float bias of its own, so that bias correction and int32 biases reach it: zeros where it has
/// none, a private copy where it shares one with other nodes or reads it through an Identity
/// (exporters deduplicate equal biases, all-zero ones above all); the Identity and the shared
/// initializer go when nothing else reads them. The float model computes the same. Returns how
/// many layers got one.
int64_t giveOwnBiases(Model& model, const QuantScheme& scheme, int64_t minElements);

/// Empirical bias correction, on the quantized model: quantization also shifts each layer's output
/// mean through its inputs (rounding and clipping of the activations, errors from the layers
/// before), which the weight-only correction above cannot see. For every quantized Conv/Gemm
/// (bias: int32 behind a DequantizeLinear, or float) and MatMul + Add (float bias), in graph
/// order, the per-channel mean of its output over `samples` in the quantized model (the cpu
/// executor) minus the same in `reference` (the float model, the same value names) is taken off
/// its bias. Layers go one pass over the samples at a time, in order, so that each sees the
/// corrections before it (one pass takes every next layer that does not read another of the pass:
/// parallel branches share a pass). Int32 biases move by round(shift / scale), clamped.
struct EmpiricalBiasReport {
  int64_t corrected = 0;
  int passes = 0;
  double meanShift = 0;  ///< mean |shift| taken off, over the corrected channels
  std::vector<std::string> skipped;
};
/// `maxSamples` (0: all): at most that many of the samples, evenly spaced.
EmpiricalBiasReport correctBiasesEmpirically(Model& quantized, const Model& reference,
                                             const std::vector<std::map<std::string, RtValue>>& samples,
                                             size_t maxSamples = 0);

/// Calibration samples from DATA: a folder of ONNX test-data sets (test_data_set_*/input_*.pb, in
/// graph input order), a folder of .npz files (one sample each, keys = input names), or one .npz
/// whose arrays have a leading sample axis. At most `maxSamples` (0: all). Throws
/// Error(InvalidInput) naming the file on a mismatch.
std::vector<std::map<std::string, RtValue>> readCalibrationData(const Graph& g, const std::string& data,
                                                               size_t maxSamples);

}  // namespace onnxtool
