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
// becomes one step reading xq = QuantizeLinear(x) (uint8), int8 GEMM, float epilogue
// float(acc) * sx * ws[n] (+ bias): the exact integer sum of the products the float MatMul of the
// dequantized values rounds. Any uint8 xq behind a DequantizeLinear with constant per-tensor
// parameters will do. Conv steps (group 1, and depthwise ones on dwconv_int8.h) also take a
// following residual Add (group 1: the other side as a second input), Relu/Clip and then a
// QuantizeLinear (uint8, per tensor) that is the only reader of their output: the step writes
// that uint8 tensor directly, and the next QDQ step reads it, so that a chain of QDQ convolutions
// keeps its activations in uint8 (no float round trip between the layers); a QuantizeLinear among
// several readers becomes a second, uint8 output of the step. The DequantizeLinear nodes go when
// every reader is fused; a QuantizeLinear goes into the step that produces its input, or else
// runs (its output is what the steps read).
// The per-row dynamic form (quant/dynamic.h's default) is fused by findRowDynamicFusions
// (kernels_int8_rows.cpp), its int8 embedding lookups by findGatherDequantizeFusions
// (kernels_int8_gather.cpp).
#pragma once

#include <cstdint>
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
/// Cast int8 -> float (kernels_int8_gather.cpp).
std::unique_ptr<CpuKernel> createCastS8(const CpuNodeInfo& info);
/// QLinearMatMul uint8 x constant int8 -> uint8, per-tensor activation and output parameters.
std::unique_ptr<CpuKernel> createQLinearMatMul(const CpuNodeInfo& info);
/// QLinearConv 2-D, group 1, uint8 x constant int8 -> uint8, constant scales and zero points.
std::unique_ptr<CpuKernel> createQLinearConv(const CpuNodeInfo& info);

/// One fused step: it runs at the position of `last`, reads `input` (x) [and `input2`] and writes `output`,
/// replacing every node in `covered`.
/// Whether `n` is the ai.onnx op `op`.
inline bool isOp(const Node* n, const char* op) { return n && n->isDomain("") && n->opType == op; }

/// The only reader of `v` (not a graph output), in graph g, or nullptr.
inline const Node* singleReader(const Value* v, const Graph& g) {
  if (!v || v->isGraphOutput() || v->uses().size() != 1) return nullptr;
  const Node* n = v->uses()[0].node;
  return n->graph() == &g ? n : nullptr;
}

/// A chain of nodes run as one step of the plan (the int8 fusions, and attention:
/// kernels_attention.h), reported under its last node.
struct FusedInt8Step {
  const Node* last = nullptr;
  std::vector<const Node*> covered;
  const Value* input = nullptr;
  const Value* input2 = nullptr;  ///< a second input (the residual of a fused Add), or none
  std::vector<const Value*> moreInputs;  ///< inputs after input2 (attention's V and mask)
  const char* fusedOp = nullptr;  ///< the op profiles name the step by, when not the last node's
  const Value* output = nullptr;
  const Value* output2 = nullptr;  ///< a second output (a QuantizeLinear of `output` among its readers), or none
  std::unique_ptr<CpuKernel> kernel;
  const CpuKernelDef* def = nullptr;  ///< the name and output reuse the step reports
};

/// DequantizeLinear of constant inputs (int4/uint4/int8/uint8/int16/uint16/int32 data; float scale per tensor, per
/// axis or blocked; optional zero point of the data's type) computed once, as the reference does:
/// float(float(x - zero) * scale). False for anything else.
bool dequantizeConstant(const Node& dq, const std::function<const TensorData*(const Value*)>& constantOf, std::vector<float>& out);

/// The fusable chains of `g` (main graph, nodes in topological order). `typeOf` gives a value's
/// concrete type (nullptr when unknown), `constantOf` its constant tensor (nullptr when none).
std::vector<FusedInt8Step> findInt8Fusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                           const std::function<const TensorData*(const Value*)>& constantOf, int threads);

/// The MatMuls whose activation is quantized per row in standard ops (quant/dynamic.h's default
/// form; kernels_int8_rows.cpp), appended to `out` (findInt8Fusions calls it).
void findRowDynamicFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                           const std::function<const TensorData*(const Value*)>& constantOf, std::vector<FusedInt8Step>& out);

/// The int8 embedding lookups Mul(Cast<float>(Gather(Tq int8, ids)), Gather(Ts, ids)) (quant/dynamic.h's
/// Gather form; kernels_int8_gather.cpp), appended to `out` (findInt8Fusions calls it).
void findGatherDequantizeFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                 const std::function<const TensorData*(const Value*)>& constantOf, std::vector<FusedInt8Step>& out);

/// The int8 lookup whose ids were constant (the optimizer folded both Gathers of the chain above:
/// BERT's position and token-type embeddings once the input shapes are fixed; it keeps the Cast of
/// int8 weights): Mul(Cast<float>(C const int8), S const float broadcasting into C) computed once
/// into a float initializer of `g` (the plan's clone), the graph's values (float(c) * s, one
/// rounding), as the executor folds a DequantizeLinear of constants. Returns whether any was.
bool foldConstantInt8Lookups(Graph& g);

/// The element data of a constant tensor of `dt`, or nullptr when its bytes are not all there
/// (the int8 fusions' constants: aligned copies the plan made).
template <typename T>
const T* constData(const TensorData* t, DType dt) {
  if (!t || t->dtype() != dt || t->raw.size() != t->expectedBytes().value_or(UINT64_MAX)) return nullptr;
  return reinterpret_cast<const T*>(t->raw.data());
}

/// A zero point or scale given as a scalar or one value per column, expanded to [n].
template <typename T, typename U>
bool perColumn(const TensorData* t, DType dt, int64_t n, std::vector<U>& out) {
  const T* d = constData<T>(t, dt);
  if (!d) return false;
  const int64_t cnt = t->numElements().value_or(-1);
  if (cnt == 1 && t->dims.size() <= 1) {
    out.assign(static_cast<size_t>(n), static_cast<U>(d[0]));
    return true;
  }
  if (cnt != n || t->dims.size() != 1) return false;
  out.assign(d, d + n);
  return true;
}

}  // namespace onnxtool::cpu
