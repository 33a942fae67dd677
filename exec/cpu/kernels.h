// kernels.h: the create functions of the cpu executor's kernels, for the table in
// cpu_kernels.cpp. One file per family: kernels_gemm.cpp (MatMul, Gemm, Conv),
// kernels_elementwise.cpp (binary and unary elementwise, Softmax, views), kernels_pool.cpp,
// kernels_resize.cpp, kernels_norm.cpp, kernels_layout.cpp (Transpose, Gather, Slice, Concat, Split,
// ReduceMean).
#pragma once

#include <memory>
#include <vector>

#include "exec/cpu/cpu_kernel.h"

namespace onnxtool::cpu {

/// Points OpenBLAS at the kernels of activeIsa() (once per process) and sets its thread count.
void configureBlas(int threads);

std::unique_ptr<CpuKernel> createMatMul(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createMatMulNBits(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createCast(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createClip(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createGemm(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createConv(const CpuNodeInfo& info);
/// Conv with constant weights on the packed micro-kernels (kernels_conv.cpp), else createConv;
/// the only Conv kernels that apply a fused epilogue.
std::unique_ptr<CpuKernel> createConvFast(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createPackedConv(const CpuNodeInfo& info);
/// ConvTranspose with constant weights, group 1, explicit pads (kernels_conv_transpose.cpp).
std::unique_ptr<CpuKernel> createConvTranspose(const CpuNodeInfo& info);

/// LSTM and GRU (opset 7+) with constant W, R, B, P and the default activations (kernels_rnn.cpp).
std::unique_ptr<CpuKernel> createLstm(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createGru(const CpuNodeInfo& info);

/// Multidirectional broadcasting of several inputs to `out`'s shape as runs along the last kept
/// dim: size-1 output dims are dropped and neighbouring dims merged where every input steps
/// through them alike, so that the innermost run is as long as it can be ([1,128,768] + [768]
/// becomes 128 rows of 768 with a row-vector second input). strides[k][d]: input k's element
/// stride along dims[d] (0 where it broadcasts).
struct BroadcastPlan {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;
  int64_t total = 0;
  BroadcastPlan(const std::vector<std::vector<int64_t>>& inputs, const std::vector<int64_t>& out);
};

/// Where with multidirectional broadcasting, any element type of 1-8 bytes (kernels_broadcast.cpp).
std::unique_ptr<CpuKernel> createWhere(const CpuNodeInfo& info);
/// The ONNX Attention op (23+) on float32 (kernels_attention.cpp).
std::unique_ptr<CpuKernel> createAttention(const CpuNodeInfo& info);
/// TopK on float32, every opset (kernels_topk.cpp).
std::unique_ptr<CpuKernel> createTopK(const CpuNodeInfo& info);
/// Pad (every mode) with constant non-negative pads (kernels_layout.cpp).
std::unique_ptr<CpuKernel> createPad(const CpuNodeInfo& info);

std::unique_ptr<CpuKernel> createAdd(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createSub(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createMul(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createDiv(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createPow(const CpuNodeInfo& info);
/// Two-input Max and Min (NaN propagates, as in the reference kernel); more inputs: reference.
std::unique_ptr<CpuKernel> createMax(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createMin(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createErf(const CpuNodeInfo& info);
/// Exp through vec.h's exp (relative error <= 2e-7 where the result is a normal float).
std::unique_ptr<CpuKernel> createExp(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createSqrt(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createSum(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createRelu(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createSigmoid(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createTanh(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createGelu(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createHardSwish(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createHardSigmoid(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createSoftmax(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createView(const CpuNodeInfo& info);

std::unique_ptr<CpuKernel> createMaxPool(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createAveragePool(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createGlobalAveragePool(const CpuNodeInfo& info);
/// Resize over the spatial axes of NCHW, nearest/linear (kernels_resize.cpp).
std::unique_ptr<CpuKernel> createResize(const CpuNodeInfo& info);

std::unique_ptr<CpuKernel> createBatchNorm(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createLrn(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createLayerNorm(const CpuNodeInfo& info);
/// A LayerNorm over rows of n with its scale (n floats) and bias (n or none) held: the executor's
/// fusion of the spelled-out ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul][/Add] form.
std::unique_ptr<CpuKernel> makeLayerNorm(int64_t rows, int64_t n, float eps, std::vector<float> gamma, std::vector<float> beta);
/// Makes a kernel of createLayerNorm (or makeLayerNorm) read inputs (A, R, Scale[, B]) and normalise A + R: the
/// executor's fusion of a residual Add into the LayerNormalization after it (with makeLayerNorm's
/// held parameters the inputs are A, R).
void makeLayerNormResidual(CpuKernel& layerNorm);

/// NonMaxSuppression on float boxes (kernels_nms.cpp); its output is OutputReuse::Dynamic.
std::unique_ptr<CpuKernel> createNonMaxSuppression(const CpuNodeInfo& info);

/// RoiAlign on float maps, opsets 10 and 16 (kernels_roialign.cpp).
std::unique_ptr<CpuKernel> createRoiAlign(const CpuNodeInfo& info);

/// Expand (broadcast copy), ConstantOfShape (fill) and ScatterElements (kernels_broadcast.cpp).
std::unique_ptr<CpuKernel> createExpand(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createConstantOfShape(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createScatterElements(const CpuNodeInfo& info);

std::unique_ptr<CpuKernel> createTranspose(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createReduceMean(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createGather(const CpuNodeInfo& info);
/// Slice with constant starts/ends/axes/steps (or Slice-1's attributes) as a strided copy of
/// contiguous blocks; Concat and Split as block copies along the axis (sizes from the plan's types).
std::unique_ptr<CpuKernel> createSlice(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createConcat(const CpuNodeInfo& info);
std::unique_ptr<CpuKernel> createSplit(const CpuNodeInfo& info);

}  // namespace onnxtool::cpu
