// kernels_attention.h: the cpu executor's scaled dot-product attention (kernels_attention.cpp),
// shared by the ONNX Attention op's kernel and the executor's fusion of the same pattern written
// with standard ops (MatMul, [Mul|Div], [Add], Softmax, MatMul) at opsets without Attention.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "exec/cpu/cpu_kernel.h"
#include "exec/cpu/kernels_int8.h"

namespace onnxtool::cpu {

/// Where the elements of Q, K, V, the mask and Y are: element strides of batch (B), head (H)
/// and row (S); the last axis (head size) is contiguous. K is [Skv, Dh] per head, or K^T
/// [Dh, Skv] per head when kTransposed (then kS is the stride between its Dh rows).
struct AttentionLayout {
  int64_t batch = 0, hq = 0, hkv = 0, sq = 0, skv = 0, dh = 0, dv = 0;
  int64_t qB = 0, qH = 0, qS = 0;
  int64_t kB = 0, kH = 0, kS = 0;
  bool kTransposed = false;
  int64_t vB = 0, vH = 0, vS = 0;
  int64_t yB = 0, yH = 0, yS = 0;
  float scale = 1;
  bool causal = false;
  /// A row whose keys are all masked gives zeros (Attention), else Softmax's NaN.
  bool zeroMaskedRows = false;
  enum class Mask : uint8_t { None, Float, Bool } maskKind = Mask::None;
  int64_t mB = 0, mH = 0, mS = 0;  ///< mask strides (0: broadcast)
  int64_t mLastStride = 1;         ///< 0: one value for every key of a row
  int64_t mLen = 0;                ///< keys the mask covers; later keys are masked out
  /// Bool masks: the logit a masked key gets (Where's fill; -inf for Attention), and whether
  /// true marks a masked key (Where(masked, fill, scores)) rather than a kept one.
  float fill = -std::numeric_limits<float>::infinity();
  bool trueMasks = false;
};

/// The kernel for `layout` on `threads` threads (inputs Q, K or K^T, V[, mask]; output Y), or
/// nullptr for a layout it does not take.
std::unique_ptr<CpuKernel> makeAttentionKernel(const AttentionLayout& layout, int threads);

/// Sets `l`'s mask fields for a mask of `dims` broadcast right-aligned against [B, Hq, Sq, Skv]:
/// padLast (ONNX Attention) pads a shorter last dim with "masked out", else (Add) a last dim of
/// 1 broadcasts. False when the dims do not broadcast so.
bool setAttentionMask(AttentionLayout& l, const std::vector<int64_t>& dims, bool boolean, bool padLast);

/// MatMul(Softmax(MatMul(Q, K^T) [* s | / s] [+ mask | Where(cond, ., fill) | Where(cond, fill, .)],
/// axis -1), V) chains of the main graph
/// on float tensors of static shapes, with no batch broadcasting between Q, K^T and V and
/// intermediates read only inside the chain, as fused steps (appended to `out`).
void findAttentionFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                          const std::function<const TensorData*(const Value*)>& constantOf, int opset, int threads,
                          std::vector<FusedInt8Step>& out);

}  // namespace onnxtool::cpu
