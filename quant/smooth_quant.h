// smooth_quant.h: SmoothQuant (Xiao et al., 2022) before static quantization. Transformer
// activations have a few channels with large outliers that stretch a per-tensor activation scale;
// weights are easy to quantize per channel. For each MatMul/Gemm with a constant weight, one
// factor per input channel j
//
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)        (max over the calibration samples)
//
// divides the activation and multiplies the weight's row j, so X W = (X / s) (s W) is unchanged
// in float while X / s has a flatter range. The division folds into the producer when it is a
// LayerNormalization (over the last axis, constant scale and bias) read only by such layers:
// gamma / s and beta / s; otherwise an explicit Mul by 1 / s goes before the layers. Layers that
// read the same activation share one s (max |W_j| over all of their weights).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"
#include "quant/quant_scheme.h"

namespace onnxtool {

struct SmoothQuantReport {
  int64_t layers = 0;   ///< MatMul/Gemm nodes whose weight rows were scaled
  int64_t folded = 0;   ///< activations whose 1/s went into a LayerNormalization's scale and bias
  int64_t muls = 0;     ///< activations that got an explicit Mul by 1/s
  std::vector<std::string> skipped;
};

/// Smooths the main graph in place (see above); `samples` feed the per-channel calibration on the
/// cpu executor. Nodes the scheme leaves float (--op-types, --exclude) and weights with
/// fewer than `minElements` elements are left as they are. With `normOutputsOnly`, only
/// activations that a LayerNormalization/RMSNormalization writes are smoothed (the inputs of a
/// transformer's Q/K/V and first FFN layer, whose outliers sit in the same few channels for every
/// token, as in the SmoothQuant paper); elsewhere (a GELU output, the attention context) outliers
/// come from single tokens, which a per-channel factor cannot flatten: it only coarsens the
/// weights. Throws Error(InvalidInput) when alpha is outside [0, 1].
SmoothQuantReport smoothQuant(Model& model, const std::vector<std::map<std::string, RtValue>>& samples, double alpha,
                              const QuantScheme& scheme, int64_t minElements = 16, bool normOutputsOnly = false);

}  // namespace onnxtool
