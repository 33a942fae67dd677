// kernels_int8.h: int8 kernels of the cpu executor (kernels_int8.cpp) and the fusion of
// dynamically quantized MatMuls found at prepare:
//
//   x(float) -> DynamicQuantizeLinear -> (xq, xs, xz)
//   MatMulInteger(xq, Wq const int8, xz, wz const) -> Cast(float) -> Mul(., Mul(xs, wscale const))
//   [-> Add(., bias const)]
//
// (what `onnxtool quantize --int8 --dynamic` and ONNX Runtime's quantize_dynamic write) becomes one
// step per MatMul reading x: quantize x into the workspace, int8 GEMM, float epilogue. Fused only
// when every reader of the DynamicQuantizeLinear outputs belongs to such a chain and no
// intermediate is a graph output. Likewise the QDQ form `quantize --int8 --static` writes:
//
//   x -> QuantizeLinear(sx, zx const) -> DequantizeLinear(sx, zx) -> MatMul/Gemm(.,
//        DequantizeLinear(Wq const int8, ws, wz const)) [Gemm bias const]
//
// becomes quantize x with (sx, zx), int8 GEMM, float epilogue float(acc) * sx * ws[n] (+ bias):
// the exact integer sum of the products the float MatMul of the dequantized values rounds.
// The QuantizeLinear/DequantizeLinear nodes go when every reader is fused. The per-row dynamic
// form (quant/dynamic.h's default) is fused by findRowDynamicFusions (kernels_int8_rows.cpp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "exec/cpu/cpu_kernel.h"

namespace onnxtool::cpu {

std::unique_ptr<CpuKernel> createMatMulInteger(const CpuNodeInfo& info);
/// QuantizeLinear float -> uint8, per tensor; DequantizeLinear uint8/int8 -> float, per tensor or axis.
std::unique_ptr<CpuKernel> createQuantizeLinear(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createDequantizeLinearU8(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createDequantizeLinearS8(const CpuNodeInfo& info);
/// QLinearMatMul uint8 x constant int8 -> uint8, per-tensor activation and output parameters.
std::unique_ptr<CpuKernel> createQLinearMatMul(const CpuNodeInfo& info);
/// QLinearConv 2-D, group 1, uint8 x constant int8 -> uint8, constant scales and zero points.
std::unique_ptr<CpuKernel> createQLinearConv(const CpuNodeInfo& info);

/// One fused step: it runs at the position of `last`, reads `input` (x) and writes `output`,
/// replacing every node in `covered`.
struct FusedInt8Step {
  const Node* last = nullptr;
  std::vector<const Node*> covered;
  const Value* input = nullptr;
  const Value* output = nullptr;
  std::unique_ptr<CpuKernel> kernel;
  const CpuKernelDef* def = nullptr;  ///< the name and output reuse the step reports
};

/// DequantizeLinear of constant inputs (int4/uint4/int8/uint8/int16/uint16/int32 data; float scale per tensor, per
/// axis or blocked; optional zero point of the data's type) computed once, as the reference does:
/// float(float(x - zero) * scale). False for anything else.
bool dequantizeConstant(const Node& dq, const std::function<const Tensor*(const Value*)>& constantOf, std::vector<float>& out);

/// The fusable chains of `g` (main graph, nodes in topological order). `typeOf` gives a value's
/// concrete type (nullptr when unknown), `constantOf` its constant tensor (nullptr when none).
std::vector<FusedInt8Step> findInt8Fusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                           const std::function<const Tensor*(const Value*)>& constantOf, int threads);

/// The MatMuls whose activation is quantized per row in standard ops (quant/dynamic.h's default
/// form; kernels_int8_rows.cpp), appended to `out` (findInt8Fusions calls it).
void findRowDynamicFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                           const std::function<const Tensor*(const Value*)>& constantOf, std::vector<FusedInt8Step>& out);

}  // namespace onnxtool::cpu
