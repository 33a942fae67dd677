// infer_quantize.cpp: shape inference for QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear, and com.microsoft's QuantizeLinear/DequantizeLinear (the quantized
// MatMul/Conv forms live with their float ops in infer_nn.cpp).
#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

void setSameShape(InferContext& c, size_t out, DType dt) {
  if (auto s = c.inputShape(0)) c.setOutput(out, dt, *s);
  else c.setOutputDType(out, dt);
}

void quantizeLinear(InferContext& c) {
  // The zero point's type wins; without one, output_dtype (21+), else uint8.
  DType dt = DType::UInt8;
  if (c.hasInput(2) && c.inputDType(2) != DType::Undefined) dt = c.inputDType(2);
  else if (int64_t o = c.attrInt("output_dtype", 0); o != 0) dt = static_cast<DType>(o);
  setSameShape(c, 0, dt);
}

void dequantizeLinear(InferContext& c) {
  // float before 19; then the scale's type, unless output_dtype (23+) names one.
  DType dt = DType::Float;
  if (c.sinceVersion() >= 19 && c.inputDType(1) != DType::Undefined) dt = c.inputDType(1);
  if (int64_t o = c.attrInt("output_dtype", 0); o != 0) dt = static_cast<DType>(o);
  setSameShape(c, 0, dt);
}

/// com.microsoft DequantizeLinear: the scale's type (float or float16).
void msDequantizeLinear(InferContext& c) {
  setSameShape(c, 0, c.inputDType(1) != DType::Undefined ? c.inputDType(1) : DType::Float);
}

void dynamicQuantizeLinear(InferContext& c) {
  setSameShape(c, 0, DType::UInt8);
  c.setOutput(1, DType::Float, {});
  c.setOutput(2, DType::UInt8, {});
}

}  // namespace

void registerInferQuantize(InferRegistry& r) {
  r.add({"", "QuantizeLinear", 1, quantizeLinear});
  r.add({"", "DequantizeLinear", 1, dequantizeLinear});
  r.add({"", "DynamicQuantizeLinear", 1, dynamicQuantizeLinear});
  r.add({"com.microsoft", "QuantizeLinear", 1, quantizeLinear});
  r.add({"com.microsoft", "DequantizeLinear", 1, msDequantizeLinear});
}

}  // namespace onnxtool
