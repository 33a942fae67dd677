// kernels_conv_transpose.cpp: cpu.convtranspose.f32.gemm, 2-D ConvTranspose of float NCHW with
// constant weights, group 1, explicit pads (no auto_pad, no output_shape: other nodes run the
// reference kernel), any strides, dilations and output_padding. Per image, one GEMM
//   C[(co, ki, kj)][ih * W + iw] = sum_ci W[ci][co][ki][kj] * X[ci][ih][iw]
// on the tile GEMM of conv_winograd.h (weights packed once at prepare into its row panels), then
// col2im: each row of C is added into the output at oy = ih * sh - padT + ki * dh,
// ox = iw * sw - padL + kj * dw, after the bias.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "exec/cpu/conv_common.h"
#include "exec/cpu/conv_winograd.h"
#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

/// Input channels per GEMM pass.
constexpr int64_t kChannelBlock = 256;

class ConvTransposeKernel : public CpuKernel {
 public:
  ConvTransposeKernel(const ConvGeometry& g, const float* weights, int threads)
      : g_(g), ops_(winogradOps()), threads_(std::max(threads, 1)) {
    // Here g.c is the input channels, g.m the output channels, (h, w) the input and (oh, ow)
    // the output extents.
    rows_ = g.m * g.kh * g.kw;
    panels_ = (rows_ + ops_.mr - 1) / ops_.mr;
    ldb_ = roundUp(std::max<int64_t>(g.h * g.w, 1), ops_.nr);
    // A[r][ci] = W[ci][r] (r = (co, ki, kj)): panels of mr rows, k-major over ci, rows past zero.
    a_.assign(static_cast<size_t>(panels_ * g.c * ops_.mr), 0.f);
    for (int64_t ci = 0; ci < g.c; ++ci)
      for (int64_t r = 0; r < rows_; ++r)
        a_[static_cast<size_t>(((r / ops_.mr) * g.c + ci) * ops_.mr + r % ops_.mr)] = weights[ci * rows_ + r];
  }

  /// The image's input rows padded to ldb_ columns, then C.
  size_t workspaceBytes() const override { return static_cast<size_t>((g_.c + panels_ * ops_.mr) * ldb_) * sizeof(float); }

  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    float* b = static_cast<float*>(args.workspace);
    float* c = b + g_.c * ldb_;
    const int64_t hw = g_.h * g_.w, ohw = g_.oh * g_.ow;
    const int threads = static_cast<int>(std::clamp<double>(flops() / 2e6, 1, threads_));
    for (int64_t img = 0; img < g_.n; ++img) {
      for (int64_t ci = 0; ci < g_.c; ++ci) {
        std::memcpy(b + ci * ldb_, x + (img * g_.c + ci) * hw, static_cast<size_t>(hw) * sizeof(float));
        std::fill(b + ci * ldb_ + hw, b + (ci + 1) * ldb_, 0.f);
      }
      parallelRanges(args.pool, threads, panels_, 1, [&](int64_t pb, int64_t pe, int) {
        for (int64_t p = pb; p < pe; ++p)
          for (int64_t cb = 0; cb < g_.c; cb += kChannelBlock)
            ops_.gemm(std::min(kChannelBlock, g_.c - cb), a_.data() + (p * g_.c + cb) * ops_.mr, b + cb * ldb_, ldb_,
                      c + p * ops_.mr * ldb_, ldb_, ldb_, cb > 0);
      });
      parallelRanges(args.pool, threads, g_.m, 1, [&](int64_t cb, int64_t ce, int) {
        for (int64_t co = cb; co < ce; ++co) col2im(c, co, bias ? bias[co] : 0.f, y + (img * g_.m + co) * ohw);
      });
    }
  }

  double flops() const override { return 2.0 * g_.n * g_.c * rows_ * g_.h * g_.w; }
  std::string variant() const override { return ".gemm." + std::string(isaName(ops_.isa)); }

 private:
  /// Output channel co: bias, then every (ki, kj) row of C added at its output positions.
  void col2im(const float* c, int64_t co, float bias, float* out) const {
    std::fill(out, out + g_.oh * g_.ow, bias);
    for (int64_t ki = 0; ki < g_.kh; ++ki)
      for (int64_t kj = 0; kj < g_.kw; ++kj) {
        const float* row = c + ((co * g_.kh + ki) * g_.kw + kj) * ldb_;
        // Input columns iw whose ox = iw * sw + off lies in [0, ow).
        const int64_t off = kj * g_.dw - g_.padL, sw = g_.sw;
        const int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
        const int64_t hi = std::clamp<int64_t>(g_.ow - off <= 0 ? 0 : (g_.ow - off - 1) / sw + 1, lo, g_.w);
        if (lo >= hi) continue;
        for (int64_t ih = 0; ih < g_.h; ++ih) {
          const int64_t oy = ih * g_.sh - g_.padT + ki * g_.dh;
          if (oy < 0 || oy >= g_.oh) continue;
          const float* src = row + ih * g_.w;
          float* dst = out + oy * g_.ow;
          if (sw == 1)
            for (int64_t iw = lo; iw < hi; ++iw) dst[iw + off] += src[iw];
          else
            for (int64_t iw = lo; iw < hi; ++iw) dst[iw * sw + off] += src[iw];
        }
      }
  }

  ConvGeometry g_;
  const WinogradOps& ops_;
  int threads_;
  int64_t rows_, panels_, ldb_;
  std::vector<float> a_;
};

}  // namespace

std::unique_ptr<CpuKernel> createConvTranspose(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (info.constants.size() < 2 || !info.constants[1] || info.fused) return nullptr;
  const auto& x = info.in(0).dims;
  const auto& w = info.in(1).dims;
  const auto& y = info.out(0).dims;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return nullptr;
  if (n.attrInt("group", 1) != 1 || n.attr("output_shape") || n.attrString("auto_pad", "NOTSET") != "NOTSET") return nullptr;
  ConvGeometry g{};
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.m = w[1], g.kh = w[2], g.kw = w[3];
  g.oh = y[2], g.ow = y[3];
  g.group = 1;
  if (w[0] != g.c || y[0] != g.n || y[1] != g.m) return nullptr;
  auto strides = n.attrInts("strides", {1, 1}), dil = n.attrInts("dilations", {1, 1}), pads = n.attrInts("pads", {0, 0, 0, 0});
  auto outPad = n.attrInts("output_padding", {0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4 || outPad.size() != 2) return nullptr;
  g.sh = strides[0], g.sw = strides[1], g.dh = dil[0], g.dw = dil[1], g.padT = pads[0], g.padL = pads[1];
  if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1) return nullptr;
  // The output extents the attributes give must be the ones shape inference gave.
  if (g.oh != g.sh * (g.h - 1) + outPad[0] + (g.kh - 1) * g.dh + 1 - pads[0] - pads[2] ||
      g.ow != g.sw * (g.w - 1) + outPad[1] + (g.kw - 1) * g.dw + 1 - pads[1] - pads[3])
    return nullptr;
  if (g.n * g.c * g.h * g.w == 0 || g.m * g.kh * g.kw == 0 || g.oh <= 0 || g.ow <= 0) return nullptr;
  if (info.hasInput(2) && info.in(2).numElements() != g.m) return nullptr;
  const TensorData& wt = *info.constants[1];
  if (wt.dtype() != DType::Float || static_cast<int64_t>(wt.raw.size()) != g.c * g.m * g.kh * g.kw * 4) return nullptr;
  std::vector<float> weights(static_cast<size_t>(g.c * g.m * g.kh * g.kw));
  std::memcpy(weights.data(), wt.raw.data(), wt.raw.size());  // the bytes may be unaligned
  auto k = std::make_unique<ConvTransposeKernel>(g, weights.data(), info.threads);
  // The whole column matrix of an image is one workspace: past 128 MiB (a large decoder layer),
  // the reference kernel instead (a column-blocked GEMM is to come).
  if (k->workspaceBytes() > (size_t{128} << 20)) return nullptr;
  return k;
}

}  // namespace onnxtool::cpu
