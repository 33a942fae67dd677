// gptq.h: error-compensating weight rounding for static quantization (GPTQ: Frantar et al., 2022,
// "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers", built on
// the Optimal Brain Quantization update of Frantar and Alistarh, 2022).
//
// Rounding each weight to its nearest integer minimises the error of every weight alone; what
// matters is the error of the layer's output, ||(W - Q) X||^2 over the inputs X the layer sees.
// With H = X X^T (the inputs' second moments, from the calibration samples), the weights of
// each output row are quantized one input column at a time, and the rounding error of column i
// is spread over the columns not yet quantized, in proportion to how the inputs correlate:
//   e = (w_i - q_i) / U_ii,   w_j -= e * U_ij  (j > i),   U = upper Cholesky factor of H^-1
// (H damped by a small multiple of its mean diagonal so that it is invertible). Columns go in
// order of decreasing H_ii (the inputs with the most energy first: "act order"), in blocks whose
// pending updates are applied to the rest of the row as one matrix product. The scales and zero
// points stay those of nearest rounding (quantizeWeight: per output channel or per tensor), so
// the model's layout and the runtimes' kernels do not change: only which integers are stored.
//
// Conv: X = the input patches (im2col columns, zero padding included) of each group, one H per
// group; MatMul/Gemm: the rows of the input over its last axis. A layer whose H is not finite or
// not positive definite after damping, or whose rounding would come out worse than nearest
// rounding on the calibration inputs (tr((W-Q) H (W-Q)^T), checked per layer), keeps nearest
// rounding.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"
#include "quant/quant_scheme.h"

namespace onnxtool {

struct GptqOptions {
  double damp = 0.01;              ///< added to H's diagonal: this share of its mean
  int64_t block = 128;             ///< columns whose updates are batched into one product
  bool actOrder = true;            ///< columns by decreasing H_ii
  uint64_t memoryBytes = 1ull << 30;  ///< H matrices accumulated per pass over the samples
  /// A layer whose calibration inputs are fewer than this many vectors per input of a row keeps
  /// nearest rounding (H rank-deficient: the error would go where no sample looked).
  double minVectorsPerInput = 2;
};

struct GptqReport {
  int64_t layers = 0;       ///< weights rounded by GPTQ
  int64_t keptNearest = 0;  ///< layers where nearest rounding was as good or better
  int passes = 0;           ///< runs over the calibration samples
  /// Sum over the layers of the output error tr((W-Q) H (W-Q)^T), relative to each layer's error
  /// under nearest rounding: the mean of GPTQ / nearest (1 = no gain).
  double meanErrorRatio = 1;
  std::vector<std::string> skipped;
};

/// For every layer quantizeStaticQdq would quantize under `scheme` (weights of at least
/// `minElements`), rounds its weight by GPTQ on the inputs the float model sees for `samples`
/// (the cpu executor) and stores the result in `out` under the weight's initializer name, for
/// quantizeStaticQdq and correctBiases to use instead of nearest rounding. The model is not
/// changed.
GptqReport roundWeightsGptq(const Model& model, const std::vector<std::map<std::string, RtValue>>& samples,
                            const QuantScheme& scheme, int64_t minElements, PresetWeights& out,
                            const GptqOptions& options = {});

/// One weight rounded on an explicit grid (the int4 quantizer's blocks): `node` multiplies the rows
/// of its input 0 (over the last axis, `cols` long) by the weight, given here as `rows` (outputs) x
/// `cols` floats; the integers of (row r, column c) lie in [qmin, qmax] with scale and zero point
/// scale[r * blocks + c / block] (blocks = ceil(cols / block)), dequantized (q - zero) * scale.
/// roundWeightsGptq fills `q` (rows x cols) with GPTQ's integers, or leaves it empty where
/// nearest rounding stays (too few calibration vectors, no gain, H not factorizable).
struct GptqWeight {
  const Node* node = nullptr;
  int64_t rows = 0, cols = 0, block = 0;
  std::vector<double> w, scale, zero;
  double qmin = 0, qmax = 15;
  std::vector<double> q;
};
GptqReport roundWeightsGptq(const Model& model, const std::vector<std::map<std::string, RtValue>>& samples,
                            std::vector<GptqWeight>& weights, const GptqOptions& options = {});

}  // namespace onnxtool
