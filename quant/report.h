// report.h: how far a quantized (or float16) model is from its float32 reference: per output
// max/mean absolute error, cosine similarity and SQNR over a set of input samples, and per layer
// the same for every quantized tensor (a DequantizeLinear output matched to the float tensor it
// replaces, and the outputs of the ops that read them or were rewritten), in execution order.
// Both models run on the reference executor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

/// Accumulates the error of `got` against `ref` over any number of tensor pairs.
struct ErrorStats {
  uint64_t count = 0;        ///< elements compared
  double sumAbs = 0;         ///< sum |ref - got|
  double maxAbs = 0;         ///< max |ref - got|
  double maxRef = 0;         ///< max |ref|
  double dot = 0, refSq = 0, gotSq = 0, errSq = 0;
  uint64_t nonFinite = 0;    ///< pairs where either side is NaN or infinite (left out of the sums)

  /// Adds the element pairs of two tensors of the same element count (any float or integer
  /// dtypes, compared as doubles). Returns false (and adds nothing) on a count mismatch or strings.
  bool add(const TensorData& ref, const TensorData& got);
  double meanAbs() const { return count ? sumAbs / static_cast<double>(count) : 0; }
  /// dot / (|ref| |got|); 1 when both are all zeros, 0 when exactly one is.
  double cosine() const;
  /// 10 log10(sum ref^2 / sum (ref - got)^2) in dB; +infinity when the error is zero.
  double sqnrDb() const;
};

/// One compared tensor.
struct TensorError {
  std::string name;       ///< the name in the reference model
  std::string candidate;  ///< the name in the compared model (the DequantizeLinear output, ...)
  std::string kind;       ///< "output", "weight", "activation" (a DequantizeLinear output) or "op-output"
  std::string op;         ///< the producing op in the compared model
  int64_t order = 0;      ///< position of the producer in the compared model's execution order
  ErrorStats stats;
};

struct AccuracyReport {
  size_t samples = 0;
  std::vector<TensorError> outputs;  ///< graph outputs, in order
  std::vector<TensorError> layers;   ///< with `layers`: in execution order
  double minCosine() const;          ///< over the outputs with elements (1 when none)
};

/// Runs `reference` and `candidate` (graph outputs in the same order, as quantize writes them)
/// on every sample, on `executor` ("cpu" or "ref"), and compares them. Float feeds are converted to the candidate's declared
/// input type (a float16 model with float16 inputs gets them as float16). Neither model is
/// changed (copies are run when `layers`). Throws Error(InvalidInput) when the models' outputs
/// differ in count, and the executor's errors.
AccuracyReport compareModels(const Model& reference, const Model& candidate,
                             const std::vector<std::map<std::string, RtValue>>& samples, bool layers,
                             const std::string& executor = "ref");

/// The executor an accuracy report runs on for --eval-executor `choice`: "auto" is "ref" when
/// the candidate computes in float16 or bfloat16 (the cpu executor computes those in float32,
/// which would hide the rounding being measured), else "cpu".
std::string reportExecutor(const std::string& choice, const Model& candidate);

/// The float tensor of `reference` that the DequantizeLinear node `dq` of the compared model
/// stands for: the QuantizeLinear input feeding it, else its input or output name with the
/// quantizers' suffixes (_quantized, _dequantized, _DequantizeLinear_Output, ...) dropped; empty
/// when none of these names a float value of `reference`'s main graph.
std::string dequantizedSource(const Node& dq, const Graph& reference);

}  // namespace onnxtool
