// kernels_nchwc.h: the blocked channel layout of the cpu executor (NCHWc, c = 8 floats: one
// AVX2 vector holds one pixel's block of eight channels). A tensor [N, C, H, W] with C a
// multiple of 8 is stored as [N][C / 8][H][W][8]: the same number of bytes as NCHW, so the
// memory plan does not change, only how the bytes are read.
//
// Convolution chains run in it inside a plan (cpu_executor.cpp planBlockedLayout): a pointwise
// convolution is then a GEMM whose A element (pixel, channel) is a broadcast from the input as
// it lies, its output tile 8 channels of a pixel per vector store; a depthwise convolution
// multiplies whole vectors (8 channels) per tap, with no padding copies, every lane busy on maps
// of any width (on NCHW rows, a 14- or 7-pixel row wastes half a vector and pays a row's setup
// per plane). The plan keeps a value blocked when the step writing it and every step reading it
// run blocked; a blocked kernel reading a plain value reorders it into its workspace (or reads
// it in place: the pointwise convolution broadcasts from either layout), and one whose output
// some plain step reads writes it plain (NchwcAdapter). The layout is chosen per plan, never
// visible outside it (graph inputs and outputs are plain).
//
// Blocked twins are made next to the plain kernels (createPackedConv, createGlobalAveragePool)
// where nchwcEnabled(); the plan swaps a twin in or drops it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/cpu/conv_common.h"
#include "exec/cpu/cpu_kernel.h"

namespace onnxtool::cpu {

constexpr int64_t kNchwcBlock = 8;

/// Whether plans use the blocked layout: on the AVX2 path (activeIsa() Avx2), unless
/// ONNXTOOL_NCHWC=0 (A/B measurements and tests).
bool nchwcEnabled();

/// A tensor [n, c, hw...] as the blocked kernels see it (c a multiple of kNchwcBlock).
struct NchwcPlane {
  int64_t n = 0, c = 0, hw = 0;
  int64_t floats() const { return n * c * hw; }
};

/// A kernel computing in the blocked layout. Inputs listed in blockedInputs() are read blocked,
/// output 0 is written blocked when outputBlocked() (else in its plain layout, which for
/// GlobalAveragePool's [N, C, 1, 1] is the same bytes).
class NchwcKernel : public CpuKernel {
 public:
  std::vector<size_t> blockedInputs() const;
  virtual bool outputBlocked() const { return true; }
  /// Whether the kernel gains only with both its input 0 and its output blocked (a pointwise
  /// convolution: about as fast as the plain GEMM, slower reading a plain input or writing
  /// through a reorder); else it gains alone (depthwise, stem, GlobalAveragePool).
  virtual bool gainsOnlyInChains() const { return false; }
  /// Asks the kernel to read input 0 in the plain layout as it lies; false when it cannot (the
  /// plan then reorders it into the adapter's workspace).
  virtual bool readPlainInput0() { return false; }
  /// The shapes of input i (in blockedInputs) and of output 0.
  NchwcPlane in0, in3, out;
  bool residual = false;     ///< input 3 read blocked too
  bool plainInput0 = false;  ///< input 0 read plain (a stem's few channels), never blocked
};

/// The twin of a convolution: pointwise (1x1, stride 1, no pads, one group) or depthwise
/// (group = c = m), with c and m multiples of kNchwcBlock, or a stem (one group, c < 8: its
/// plain input read as it lies, the output blocked), on weights [m][c / group][kh][kw]
/// (a folded BatchNormalization already applied), `bias` (m floats, copied) or none, and the
/// epilogue (residual, clamp, activation, and for the pointwise one the channel scale of input
/// 4). nullptr where it does not apply.
std::unique_ptr<NchwcKernel> makeNchwcConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights,
                                           const float* bias, const std::string& suffix, int threads);
/// What createPackedConv returns in a plan that may use the blocked layout (CpuNodeInfo::nchwc)
/// where a convolution has a blocked twin: the twin only, the plain kernel not packed yet. The
/// plan runs the twin or, where the layout stays plain, creates the plain kernel then (from the
/// same node and epilogue, nchwc off); meanwhile it reads every input (the weights stay). Its
/// compute() is never called.
class PendingPlainConv : public CpuKernel {
 public:
  void compute(const CpuComputeArgs& args) const override;
  std::string variant() const override { return ".pending"; }
};

/// GlobalAveragePool [n, c, hw...] -> [n, c, 1, 1] reading a blocked input (c a multiple of 8).
std::unique_ptr<NchwcKernel> makeNchwcGlobalAveragePool(int64_t n, int64_t c, int64_t hw, int threads);

/// `k` for a plan in which the inputs `plainInputs` (of k's blockedInputs) arrive plain and,
/// with `plainOutput`, output 0 is read plain: the adapter reorders them through its workspace.
std::unique_ptr<CpuKernel> adaptNchwc(std::unique_ptr<NchwcKernel> k, std::vector<size_t> plainInputs, bool plainOutput,
                                      int threads);

/// The reorders (p.c a multiple of kNchwcBlock), over up to `threads` threads of `pool`.
void nchwcFromPlain(const float* x, float* y, const NchwcPlane& p, ThreadPool* pool, int threads);
void nchwcToPlain(const float* x, float* y, const NchwcPlane& p, ThreadPool* pool, int threads);

}  // namespace onnxtool::cpu
