// kernels_conv.cpp: 2-D convolution, NCHW, float, with constant weights:
//   - cpu.conv.f32.gemm: per image and group, Y_g[M/g, OH*OW] = W_g[M/g, K] * X_col[K, OH*OW]
//     (K = C/g*kh*kw) on our own packed SGEMM: W packed once at prepare into MR-row panels of
//     the ISA's micro-kernel (conv_microkernels.h); the column matrix is never materialised:
//     each KC x NC block of it is packed straight from the image into NR-column panels (for a
//     1x1 stride-1 convolution that is a plain copy of the input rows, no im2col);
//   - cpu.conv.f32.depthwise: one filter per channel (group = C = M), a direct kernel over
//     groups of output rows, vectorised over output columns (any stride, dilation and pads);
//   - cpu.conv.f32.winograd (kernels_winograd.cpp) for the 3x3 stride-1 shapes where
//     winogradApplies().
// All run the epilogue the executor may fuse at prepare into the store: + bias, + a residual
// tensor of the output's shape (Conv + Add/Sum), then Relu or Clip.
// Work is split over output pixels ([begin, end) ranges: the unit a thread pool hands out).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/cpu/conv_common.h"
#include "exec/cpu/conv_microkernels.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

constexpr int kPortableMr = 4, kPortableNr = 16;

void kernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                    const TileEpilogue& ep) {
  float acc[kPortableMr][kPortableNr] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kPortableNr;
    const float* ak = a + k * kPortableMr;
    for (int i = 0; i < kPortableMr; ++i)
      for (int j = 0; j < kPortableNr; ++j) acc[i][j] += ak[i] * bk[j];
  }
  storeTileScalar(&acc[0][0], kPortableNr, c, ldc, m, n, ep);
}

void lrnRow075Portable(float* y, const float* x, const float* t, int64_t n, float bias, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    float r = std::sqrt(bias + scale * t[i]);
    y[i] = x[i] / (r * std::sqrt(r));
  }
}

}  // namespace

GemmMicroKernelInfo gemmMicroKernelPortable() { return {kPortableMr, kPortableNr, kernelPortable, Isa::Portable}; }
RowOps rowOpsPortable() {
  return {gatherStridedScalar, deinterleave2Scalar, lrnRow075Portable, depthwiseRowsScalar, nullptr, 0, maxPoolPlaneScalar};
}

const RowOps& activeRowOps() {
  static const RowOps ops = activeIsa() == Isa::Avx512 ? rowOpsAvx512() : activeIsa() == Isa::Avx2 ? rowOpsAvx2() : rowOpsPortable();
  return ops;
}

GemmMicroKernelInfo activeGemmMicroKernel(int64_t m) {
  switch (activeIsa()) {
    case Isa::Avx512: return gemmMicroKernelAvx512(m);
    case Isa::Avx2: return gemmMicroKernelAvx2();
    case Isa::Portable: break;
  }
  return gemmMicroKernelPortable();
}

namespace {

class PackedConvKernel : public CpuKernel {
 public:
  PackedConvKernel(ConvGeometry g, ConvEpilogue ep, const float* weights, GemmMicroKernelInfo mk, std::string suffix, int threads)
      : g_(g), ep_(ep), mk_(mk), variant_(".gemm." + std::string(isaName(mk.isa)) + suffix), threads_(std::max(threads, 1)) {
    cg_ = g.c / g.group;
    mg_ = g.m / g.group;
    kdim_ = cg_ * g.kh * g.kw;
    pix_ = g.oh * g.ow;
    mPanels_ = (mg_ + mk.mr - 1) / mk.mr;
    pointwise_ = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.padT == 0 && g.padL == 0 && g.oh == g.h && g.ow == g.w;
    // K blocks of at most ~320, equal sizes; N blocks so that a packed KC x NC block of the
    // column matrix stays in L2 (~512 KiB).
    int64_t kBlocks = std::max<int64_t>(1, (kdim_ + 319) / 320);
    kc_ = std::max<int64_t>(1, (kdim_ + kBlocks - 1) / kBlocks);
    nc_ = std::max<int64_t>(mk.nr, (131072 / std::max<int64_t>(kc_, 1)) / mk.nr * mk.nr);
    nc_ = std::min(nc_, roundUp(std::max<int64_t>(pix_, 1), mk.nr));
    // W_g[mg, K] -> panels[group][mPanels][K][MR], rows past mg zero.
    packedW_.assign(static_cast<size_t>(g.group * mPanels_ * kdim_ * mk.mr), 0.f);
    for (int64_t grp = 0; grp < g.group; ++grp)
      for (int64_t r = 0; r < mg_; ++r) {
        const float* src = weights + (grp * mg_ + r) * kdim_;
        float* dst = packedW_.data() + ((grp * mPanels_ + r / mk.mr) * kdim_) * mk.mr + r % mk.mr;
        for (int64_t k = 0; k < kdim_; ++k) dst[k * mk.mr] = src[k];
      }
  }

  /// Per thread: the packed KC x NC block and one gathered row of NC pixels.
  size_t workspaceBytes() const override { return static_cast<size_t>(threads_ * (kc_ + 1) * nc_) * sizeof(float); }

  /// Threads split the output pixels (in NR multiples) when there are enough of them, else the
  /// MR-row panels of the weights (each thread then packs the same columns).
  void compute(const CpuComputeArgs& args) const override {
    float* ws = static_cast<float*>(args.workspace);
    const int64_t wsPart = (kc_ + 1) * nc_;
    // A thread per ~2 MFLOP at most: waking a worker costs microseconds.
    const int threads = static_cast<int>(std::clamp<double>(flops() / 2e6, 1, threads_));
    if (pix_ >= 4 * mk_.nr * threads || mPanels_ < 2 * threads) {
      parallelRanges(args.pool, threads, pix_, mk_.nr,
                     [&](int64_t b, int64_t e, int part) { computeRange(args, b, e, 0, mPanels_, ws + part * wsPart); });
    } else {
      parallelRanges(args.pool, threads, mPanels_, 1,
                     [&](int64_t b, int64_t e, int part) { computeRange(args, 0, pix_, b, e, ws + part * wsPart); });
    }
  }

  double flops() const override { return 2.0 * g_.n * g_.m * kdim_ * pix_; }
  std::vector<float> ownBias;  ///< the bias with a folded BatchNormalization, else empty (input 2)
  std::string variant() const override { return variant_; }

  /// Output pixels [begin, end) and weight panels [mpBegin, mpEnd) of every image and group;
  /// `packed` holds (kc_ + 1) * nc_ floats: the packed block, then the row gather buffer.
  void computeRange(const CpuComputeArgs& args, int64_t begin, int64_t end, int64_t mpBegin, int64_t mpEnd, float* packed) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int mr = mk_.mr, nr = mk_.nr;
    TileEpilogue te;
    te.clamp = ep_.clamp;
    te.lo = ep_.lo;
    te.hi = ep_.hi;
    te.ldr = pix_;
    void (*act)(const float*, float*, int64_t) = ep_.act != VecUnary::Count ? vecKernels().unary[static_cast<int>(ep_.act)] : nullptr;
    for (int64_t img = 0; img < g_.n; ++img)
      for (int64_t grp = 0; grp < g_.group; ++grp) {
        const float* xg = x + (img * g_.c + grp * cg_) * g_.h * g_.w;
        const int64_t yOff = (img * g_.m + grp * mg_) * pix_;
        for (int64_t nb = begin; nb < end; nb += nc_) {
          const int64_t nc = std::min(nc_, end - nb);
          const int64_t nPanels = (nc + nr - 1) / nr;
          for (int64_t kb = 0; kb < kdim_; kb += kc_) {
            const int64_t kc = std::min(kc_, kdim_ - kb);
            packColumns(xg, kb, kc, nb, nc, packed, packed + kc_ * nc_);
            te.accumulate = kb > 0;
            te.last = kb + kc == kdim_;
            for (int64_t mp = mpBegin; mp < mpEnd; ++mp) {
              const float* a = packedW_.data() + ((grp * mPanels_ + mp) * kdim_ + kb) * mr;
              const int rows = static_cast<int>(std::min<int64_t>(mr, mg_ - mp * mr));
              te.bias = bias ? bias + grp * mg_ + mp * mr : nullptr;
              for (int64_t jp = 0; jp < nPanels; ++jp) {
                const int cols = static_cast<int>(std::min<int64_t>(nr, nc - jp * nr));
                const int64_t off = yOff + mp * mr * pix_ + nb + jp * nr;
                te.residual = res ? res + off : nullptr;
                mk_.kernel(kc, a, packed + jp * kc * nr, y + off, pix_, rows, cols, te);
              }
              if (te.last && ep_.act != VecUnary::Count)  // the panel's rows of this pixel block, still in cache
                for (int r = 0; r < rows; ++r) {
                  float* yr = y + yOff + (mp * mr + r) * pix_ + nb;
                  act(yr, yr, nc);
                }
            }
          }
        }
      }
  }

 private:
  /// Packs rows [kb, kb + kc) and output pixels [nb, nb + nc) of the (virtual) column matrix of
  /// one image's group into NR-column panels, k-major, columns past nc zero. Each row is first
  /// gathered whole into `row` (output row by output row: copies and zero fills, no per-element
  /// bounds tests), then dealt out to the panels in NR-float copies.
  void packColumns(const float* xg, int64_t kb, int64_t kc, int64_t nb, int64_t nc, float* packed, float* row) const {
    const int64_t nr = mk_.nr, khw = g_.kh * g_.kw;
    const int64_t nPanels = (nc + nr - 1) / nr;
    std::fill(row + nc, row + nPanels * nr, 0.f);
    for (int64_t kk = 0; kk < kc; ++kk) {
      const int64_t k = kb + kk;
      float* dst = packed + kk * nr;
      if (pointwise_) {  // 1x1, stride 1, no padding: the input row is the column row
        const float* src = xg + k * g_.h * g_.w + nb;
        const int64_t full = nc / nr;
        for (int64_t jp = 0; jp < full; ++jp) std::memcpy(dst + jp * kc * nr, src + jp * nr, static_cast<size_t>(nr) * sizeof(float));
        if (full < nPanels) {
          const int64_t tail = nc - full * nr;
          std::memcpy(dst + full * kc * nr, src + full * nr, static_cast<size_t>(tail) * sizeof(float));
          std::fill(dst + full * kc * nr + tail, dst + full * kc * nr + nr, 0.f);
        }
        continue;
      }
      const int64_t ch = k / khw, ki = (k / g_.kw) % g_.kh, kj = k % g_.kw;
      fillRow(xg + ch * g_.h * g_.w, ki, kj, nb / g_.ow, nb % g_.ow, nc, row);
      if (nr == 32)
        for (int64_t jp = 0; jp < nPanels; ++jp) std::memcpy(dst + jp * kc * 32, row + jp * 32, 32 * sizeof(float));
      else if (nr == 16)
        for (int64_t jp = 0; jp < nPanels; ++jp) std::memcpy(dst + jp * kc * 16, row + jp * 16, 16 * sizeof(float));
      else
        for (int64_t jp = 0; jp < nPanels; ++jp)
          std::memcpy(dst + jp * kc * nr, row + jp * nr, static_cast<size_t>(nr) * sizeof(float));
    }
  }

  /// dst[0, len) = the input pixels under kernel tap (ki, kj) for output pixels from (oy, ox) on.
  void fillRow(const float* plane, int64_t ki, int64_t kj, int64_t oy, int64_t ox, int64_t len, float* dst) const {
    const int64_t sw = g_.sw;
    while (len > 0) {
      const int64_t seg = std::min(len, g_.ow - ox);
      const int64_t iy = oy * g_.sh - g_.padT + ki * g_.dh;
      if (iy < 0 || iy >= g_.h) {
        std::fill(dst, dst + seg, 0.f);
      } else {
        const float* src = plane + iy * g_.w;
        const int64_t ix0 = ox * sw - g_.padL + kj * g_.dw;
        // t in [t0, t1) reads inside the row: 0 <= ix0 + t*sw < W.
        const int64_t t0 = std::min(seg, ix0 >= 0 ? int64_t{0} : (-ix0 + sw - 1) / sw);
        const int64_t t1 = std::clamp<int64_t>(g_.w - ix0 <= 0 ? 0 : (g_.w - ix0 - 1) / sw + 1, t0, seg);
        std::fill(dst, dst + t0, 0.f);
        if (sw == 1) {
          if (t1 > t0) std::memcpy(dst + t0, src + ix0 + t0, static_cast<size_t>(t1 - t0) * sizeof(float));
        } else {
          if (t1 > t0) activeRowOps().gatherStrided(dst + t0, src + ix0 + t0 * sw, t1 - t0, sw);
        }
        std::fill(dst + t1, dst + seg, 0.f);
      }
      dst += seg;
      len -= seg;
      ox = 0;
      ++oy;
    }
  }

  ConvGeometry g_;
  ConvEpilogue ep_;
  GemmMicroKernelInfo mk_;
  std::string variant_;
  int threads_;
  bool pointwise_ = false;
  int64_t cg_, mg_, kdim_, pix_, mPanels_, kc_, nc_;
  std::vector<float> packedW_;
};

/// Depthwise: one kh x kw filter per channel, direct, kDepthwiseRows output rows at a time
/// (RowOps::depthwiseRows). Each input row is read once per plane into a small ring of padded
/// rows, split by the column stride into phases (see DepthwiseRows: every tap a contiguous
/// load), just before the first output rows that need it; padding rows are one shared zero row.
/// Planes (image, channel) split across threads; the activation epilogue (HardSwish, SiLU) runs
/// on each group of output rows while they are in L1.
class DepthwiseConvKernel : public CpuKernel {
 public:
  DepthwiseConvKernel(ConvGeometry g, ConvEpilogue ep, const float* weights, std::string suffix, int threads)
      : g_(g), ep_(ep), variant_(".depthwise" + suffix), threads_(std::max(threads, 1)) {
    w_.assign(weights, weights + g.c * g.kh * g.kw);
    const char* env = std::getenv("ONNXTOOL_DEPTHWISE");  // rows | channels: force one path where it can run (tests)
    const std::string force = env ? env : "";
    // Small planes L channels at a time (L = 16 on AVX-512, 8 on AVX2): rows shorter than a
    // vector waste lanes and per-row work dominates there.
    const RowOps& ops = activeRowOps();
    lanes_ = ops.depthwiseLanes;
    const int64_t pix = g.oh * g.ow, taps = g.kh * g.kw;
    chanPw_ = std::max(g.padL + g.w, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1);
    const int64_t chanPh = std::max(g.padT + g.h, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1);
    chanT_ = chanPh * chanPw_ * lanes_;
    const int64_t chanBytes = (chanT_ + roundUp(pix, 8) * lanes_) * static_cast<int64_t>(sizeof(float));
    channels_ = ops.depthwiseChannels && force != "rows" && (force == "channels" || g.ow <= 16) && chanBytes <= 131072 && pix > 0;
    if (channels_) {
      const int64_t blocks = (g.c + lanes_ - 1) / lanes_;
      wl_.assign(static_cast<size_t>(blocks * taps * lanes_), 0.f);
      for (int64_t ch = 0; ch < g.c; ++ch)
        for (int64_t k = 0; k < taps; ++k) wl_[static_cast<size_t>((ch / lanes_ * taps + k) * lanes_ + ch % lanes_)] = weights[ch * taps + k];
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) tapOff_.push_back(static_cast<int32_t>((ki * g.dh * chanPw_ + kj * g.dw) * lanes_));
      pixOff_.assign(static_cast<size_t>(roundUp(pix, 8)), 0);
      for (int64_t o = 0; o < pix; ++o)
        pixOff_[static_cast<size_t>(o)] = static_cast<int32_t>((o / g.ow * g.sh * chanPw_ + o % g.ow * g.sw) * lanes_);
      partBytes_ = roundUp(chanBytes, 64);
      return;
    }
    span_ = (kDepthwiseRows - 1) * g.sh + (g.kh - 1) * g.dh + 1;
    phaseLen_ = roundUp(roundUp(g.ow, 32) + (g.kw - 1) * g.dw / g.sw, 16);
    rowFloats_ = g.sw * phaseLen_;
    // Image columns a row keeps: those inside the phases (the rest no output reads).
    imageCols_ = std::clamp<int64_t>(rowFloats_ - g.padL, 0, g.w);
    partBytes_ = roundUp(static_cast<int64_t>((span_ + 1) * rowFloats_ * sizeof(float) + span_ * sizeof(float*)), 64);
  }
  size_t workspaceBytes() const override { return static_cast<size_t>(threads_ * partBytes_); }
  void compute(const CpuComputeArgs& args) const override {
    const int64_t planeWork = std::max<int64_t>(1, g_.oh * g_.ow * g_.kh * g_.kw);
    const int threads = g_.n * g_.c * planeWork < 262144 ? 1 : threads_;  // not worth waking a thread below ~250k taps
    if (channels_) {
      const int64_t blocks = (g_.c + lanes_ - 1) / lanes_;
      parallelRanges(args.pool, threads, g_.n * blocks, 1, [&](int64_t b, int64_t e, int part) {
        computeChannels(args, b, e, reinterpret_cast<float*>(static_cast<char*>(args.workspace) + part * partBytes_));
      });
      return;
    }
    parallelRanges(args.pool, threads, g_.n * g_.c, 1, [&](int64_t b, int64_t e, int part) {
      computeRange(args, b, e, static_cast<char*>(args.workspace) + part * partBytes_);
    });
  }
  double flops() const override { return 2.0 * g_.n * g_.c * g_.kh * g_.kw * g_.oh * g_.ow; }
  std::vector<float> ownBias;  ///< the bias with a folded BatchNormalization, else empty (input 2)
  std::string variant() const override { return variant_; }

  /// Blocks of lanes_ channels [begin, end) (image-major); `ws` holds the channels-in-lanes padded
  /// input (chanT_ floats), then the outputs likewise.
  void computeChannels(const CpuComputeArgs& args, int64_t begin, int64_t end, float* ws) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t pix = g_.oh * g_.ow, taps = g_.kh * g_.kw, blocks = (g_.c + lanes_ - 1) / lanes_;
    void (*act)(const float*, float*, int64_t) = ep_.act != VecUnary::Count ? vecKernels().unary[static_cast<int>(ep_.act)] : nullptr;
    std::fill(ws, ws + chanT_, 0.f);  // the padding; every block writes the same image pixels
    DepthwiseChannels a{};
    a.h = g_.h, a.w = g_.w, a.padT = g_.padT, a.padL = g_.padL, a.pw = chanPw_;
    a.t = ws;
    a.tapOff = tapOff_.data();
    a.pixOff = pixOff_.data();
    a.ntaps = taps, a.pix = pix;
    a.out = ws + chanT_;
    a.clamp = ep_.clamp, a.lo = ep_.lo, a.hi = ep_.hi;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t img = u / blocks, ch0 = u % blocks * lanes_, plane0 = img * g_.c + ch0;
      a.nch = static_cast<int>(std::min<int64_t>(lanes_, g_.c - ch0));
      a.x = x + plane0 * g_.h * g_.w;
      a.wl = wl_.data() + ch0 * taps;
      a.bias = bias ? bias + ch0 : nullptr;
      a.res = res ? res + plane0 * pix : nullptr;
      a.y = y + plane0 * pix;
      activeRowOps().depthwiseChannels(a);
      if (act) act(a.y, a.y, a.nch * pix);
    }
  }

  /// Planes (image, channel) [begin, end); `ws` holds partBytes_: the ring of span_ padded rows,
  /// the zero row, then span_ row pointers.
  void computeRange(const CpuComputeArgs& args, int64_t begin, int64_t end, char* ws) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t pix = g_.oh * g_.ow;
    const RowOps& ops = activeRowOps();
    void (*act)(const float*, float*, int64_t) = ep_.act != VecUnary::Count ? vecKernels().unary[static_cast<int>(ep_.act)] : nullptr;
    float* ring = reinterpret_cast<float*>(ws);
    const float* zero = ring + span_ * rowFloats_;
    const float** rows = reinterpret_cast<const float**>(ws + (span_ + 1) * rowFloats_ * sizeof(float));
    // Every row keeps the same image columns, so the padding columns stay zero from here on.
    std::fill(ring, ring + (span_ + 1) * rowFloats_, 0.f);
    DepthwiseRows a{};
    a.rows = rows;
    a.phaseLen = phaseLen_;
    a.kh = g_.kh, a.kw = g_.kw, a.sh = g_.sh, a.sw = g_.sw, a.dh = g_.dh, a.dw = g_.dw, a.ow = g_.ow;
    a.clamp = ep_.clamp, a.lo = ep_.lo, a.hi = ep_.hi;
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t ch = plane % g_.c;
      const float* xp = x + plane * g_.h * g_.w;
      a.w = w_.data() + ch * g_.kh * g_.kw;
      a.bias = bias ? bias[ch] : 0.f;
      int64_t loaded = -1;  // the last padded row read into the ring
      int64_t first = 0;    // the ring slot of padded row oy * sh: (oy * sh) % span_
      for (int64_t oy = 0; oy < g_.oh; oy += kDepthwiseRows) {
        for (int64_t j = 0, slot = first; j < span_; ++j, slot = slot + 1 == span_ ? 0 : slot + 1) {
          const int64_t py = oy * g_.sh + j, iy = py - g_.padT;
          if (iy < 0 || iy >= g_.h) {
            rows[j] = zero;
            continue;
          }
          float* row = ring + slot * rowFloats_;
          if (py > loaded) {
            loadRow(xp + iy * g_.w, row, ops);
            loaded = py;
          }
          rows[j] = row;
        }
        for (first += kDepthwiseRows * g_.sh; first >= span_;) first -= span_;
        a.nrows = static_cast<int>(std::min<int64_t>(kDepthwiseRows, g_.oh - oy));
        a.res = res ? res + plane * pix + oy * g_.ow : nullptr;
        a.y = y + plane * pix + oy * g_.ow;
        ops.depthwiseRows(a);
        if (act) act(a.y, a.y, a.nrows * g_.ow);
      }
    }
  }

 private:
  /// One input row into its padded, phase-split slot (the image columns only): padded column
  /// px = ix + padL goes to phase px % sw at px / sw.
  void loadRow(const float* src, float* dst, const RowOps& ops) const {
    const int64_t sw = g_.sw;
    if (sw == 1) {
      std::memcpy(dst + g_.padL, src, static_cast<size_t>(imageCols_) * sizeof(float));
      return;
    }
    if (sw == 2) {  // image column ix = px - padL: the even ones to phase padL % 2, the odd ones to the other
      const int64_t p = g_.padL;
      ops.deinterleave2(src, imageCols_, dst + p % 2 * phaseLen_ + p / 2, dst + (p + 1) % 2 * phaseLen_ + (p + 1) / 2);
      return;
    }
    for (int64_t q = 0; q < sw; ++q) {
      const int64_t i0 = q >= g_.padL ? 0 : (g_.padL - q + sw - 1) / sw, ix0 = i0 * sw + q - g_.padL;
      if (ix0 >= imageCols_) continue;
      ops.gatherStrided(dst + q * phaseLen_ + i0, src + ix0, (imageCols_ - 1 - ix0) / sw + 1, sw);
    }
  }

  ConvGeometry g_;
  ConvEpilogue ep_;
  std::string variant_;
  int threads_;
  std::vector<float> w_;
  int64_t span_ = 0, phaseLen_ = 0, rowFloats_ = 0, imageCols_ = 0, partBytes_ = 0;
  bool channels_ = false;
  std::vector<float> wl_;                  ///< channels_: the filters lanes_ channels a block, tap-major
  std::vector<int32_t> tapOff_, pixOff_;  ///< channels_: tap and output pixel offsets into the gathered input
  int64_t lanes_ = 0, chanPw_ = 0, chanT_ = 0;
};

/// The padding at the start of one spatial axis for auto_pad SAME_UPPER/SAME_LOWER.
int64_t samePadBegin(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, bool upper) {
  int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
  return upper ? total / 2 : total - total / 2;
}

}  // namespace

std::unique_ptr<CpuKernel> createPackedConv(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (info.constants.size() < 2 || !info.constants[1]) return nullptr;  // weights computed at run time
  const auto& x = info.in(0).dims;
  const auto& w = info.in(1).dims;
  const auto& y = info.out(0).dims;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return nullptr;
  ConvGeometry g{};
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.m = w[0], g.kh = w[2], g.kw = w[3];
  g.oh = y[2], g.ow = y[3];
  g.group = n.attrInt("group", 1);
  if (g.group <= 0 || g.c % g.group || g.m % g.group || w[1] != g.c / g.group || y[1] != g.m || y[0] != g.n) return nullptr;
  auto strides = n.attrInts("strides", {1, 1}), dil = n.attrInts("dilations", {1, 1});
  auto pads = n.attrInts("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) return nullptr;
  g.sh = strides[0], g.sw = strides[1], g.dh = dil[0], g.dw = dil[1];
  if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1) return nullptr;
  std::string autoPad = n.attrString("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    g.padT = pads[0], g.padL = pads[1];
  } else if (autoPad == "VALID") {
    g.padT = g.padL = 0;
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    bool upper = autoPad == "SAME_UPPER";
    g.padT = samePadBegin(g.h, g.oh, g.kh, g.sh, g.dh, upper);
    g.padL = samePadBegin(g.w, g.ow, g.kw, g.sw, g.dw, upper);
  } else {
    return nullptr;
  }
  if (info.hasInput(2) && info.in(2).numElements() != g.m) return nullptr;
  const Tensor& wt = *info.constants[1];
  if (wt.dtype() != DType::Float || static_cast<int64_t>(wt.raw.size()) != g.m * w[1] * g.kh * g.kw * 4) return nullptr;
  std::vector<float> weights(static_cast<size_t>(g.m * w[1] * g.kh * g.kw));
  if (!weights.empty()) std::memcpy(weights.data(), wt.raw.data(), wt.raw.size());  // the bytes may be unaligned
  ConvEpilogue ep;
  std::string suffix;
  if (info.fused) {
    suffix = info.fused->suffix;
    ep.residual = info.fused->residual;
    ep.clamp = info.fused->clamp;
    ep.lo = info.fused->lo;
    ep.hi = info.fused->hi;
    ep.act = info.fused->act;
    if (ep.residual && (!info.hasInput(3) || info.in(3).dims != y)) return nullptr;
  }
  if (g.c / g.group * g.kh * g.kw == 0 && g.n * g.m * g.oh * g.ow > 0) return nullptr;  // no taps: the reference kernel
  // A folded BatchNormalization: weights and bias scaled per output channel, the bias then
  // owned by the kernel (so the conv's own bias must be a constant, or absent).
  std::vector<float> ownBias;
  if (info.fused && !info.fused->scale.empty()) {
    const auto& sc = info.fused->scale;
    const auto& sh = info.fused->shift;
    if (static_cast<int64_t>(sc.size()) != g.m) return nullptr;
    const Tensor* b = info.hasInput(2) ? info.constants[2] : nullptr;
    if (info.hasInput(2) && (!b || b->dtype() != DType::Float || b->raw.size() != static_cast<size_t>(g.m) * sizeof(float))) return nullptr;
    ownBias.assign(static_cast<size_t>(g.m), 0.f);
    if (b) std::memcpy(ownBias.data(), b->raw.data(), b->raw.size());
    const int64_t per = static_cast<int64_t>(weights.size()) / std::max<int64_t>(g.m, 1);
    for (int64_t oc = 0; oc < g.m; ++oc) {
      for (int64_t i = 0; i < per; ++i) weights[static_cast<size_t>(oc * per + i)] *= sc[static_cast<size_t>(oc)];
      ownBias[static_cast<size_t>(oc)] = ownBias[static_cast<size_t>(oc)] * sc[static_cast<size_t>(oc)] + sh[static_cast<size_t>(oc)];
    }
  }
  std::unique_ptr<CpuKernel> k;
  if (g.group == g.c && g.group == g.m && g.padT >= 0 && g.padL >= 0) {
    auto d = std::make_unique<DepthwiseConvKernel>(g, ep, weights.data(), suffix, info.threads);
    d->ownBias = std::move(ownBias);
    k = std::move(d);
  } else if (ep.act == VecUnary::Count && winogradApplies(g)) {
    k = makeWinogradConv(g, ep, weights.data(), reinterpret_cast<const uint8_t*>(wt.raw.data()),
                         info.fused ? info.fused->scale : std::vector<float>{}, ownBias, suffix, info.threads);
  }
  if (!k) {
    auto p = std::make_unique<PackedConvKernel>(g, ep, weights.data(), activeGemmMicroKernel(g.m / g.group), suffix, info.threads);
    p->ownBias = std::move(ownBias);
    k = std::move(p);
  }
  return k;
}

std::unique_ptr<CpuKernel> createConvFast(const CpuNodeInfo& info) {
  if (auto k = createPackedConv(info)) return k;
  if (info.fused) return nullptr;  // only the packed kernels apply a fused epilogue
  return createConv(info);
}

}  // namespace onnxtool::cpu
