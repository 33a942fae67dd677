// qoperator.h: the QOperator form of int8 static quantization: after quantizeStaticQdq, every
// MatMul, bias-free Gemm and Conv whose activation and weight are in the QDQ form and whose output
// range was calibrated becomes QLinearMatMul / QLinearConv (uint8 activations, int8 weights per
// output channel, an int32 bias with scale x scale * weight scale), with a DequantizeLinear after
// it for the float consumers. Standard ONNX ops only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lib/ir.h"
#include "quant/quant_scheme.h"
#include "quant/static_qdq.h"

namespace onnxtool {

/// The float outputs of the ops quantizeStaticQdq quantizes (MatMul, Gemm, Conv with a constant
/// weight): what calibration must also observe for the QOperator form.
std::vector<std::string> outputsToCalibrate(const Model& model);

struct QOperatorReport {
  int64_t nodesConverted = 0;
  std::vector<std::string> kept;  ///< quantized nodes left in the QDQ form, with the reason
};

/// Rewrites the QDQ form written by quantizeStaticQdq in place; `ranges` holds the calibrated
/// output ranges (by value name).
/// The output scale and zero point follow `scheme` (the activation type and symmetry the QDQ form
/// was written with).
QOperatorReport convertQdqToQOperator(Model& model, const std::map<std::string, ValueRange>& ranges,
                                      const QuantScheme& scheme);
QOperatorReport convertQdqToQOperator(Model& model, const std::map<std::string, ValueRange>& ranges);

}  // namespace onnxtool
