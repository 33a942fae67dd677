// kernels_conv.cpp: 2-D convolution, NCHW, float, with constant weights:
//   - cpu.conv.f32.gemm: per image and group, Y_g[M/g, OH*OW] = W_g[M/g, K] * X_col[K, OH*OW]
//     (K = C/g*kh*kw) on our own packed SGEMM: W packed once at prepare into MR-row panels of
//     the ISA's micro-kernel (conv_microkernels.h); the column matrix is never materialised:
//     each KC x NC block of it is packed straight from the image into NR-column panels (for a
//     1x1 stride-1 convolution that is a plain copy of the input rows, no im2col; with at most
//     four weight panels not even that: the kernels read the input planes in place); a fused
//     squeeze-and-excitation channel scale (ConvEpilogue::inputScale) scales the packed weights
//     per image;
//   - cpu.conv.f32.gemm.px, the same product transposed for small output maps (pixelMajor()):
//     Y_g^T[OH*OW, M/g] = X_col^T * W_g^T, rows = output pixels in panels of any count (AVX-512:
//     14 rows, the tail exact: 49 = 14 + 14 + 14 + 7), columns = output channels in NR panels of
//     W_g^T packed once (the next panel prefetched while one computes: small maps read each weight
//     from L3 or memory for few pixels); the tiles go transposed into NCHW through the epilogue
//     (AVX-512: transposing micro-kernels; the other paths: a product buffer and SSE transposes);
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
#include "exec/cpu/gemm.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/kernels_nchwc.h"
#include "exec/cpu/prefaulted.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace onnxtool::cpu {

namespace {

constexpr int kPortableMr = 4, kPortableNr = 16;

void kernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                    const TileEpilogue& ep) {
  float acc[kPortableMr][kPortableNr] = {};
  const int64_t ldb = ep.ldb ? ep.ldb : kPortableNr;
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * ldb;
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
  return {gatherStridedScalar, deinterleave2Scalar, lrnRow075Portable, depthwiseRowsScalar, nullptr, nullptr, 0, maxPoolPlaneScalar, nullptr, nullptr, nullptr, nullptr,
          maxNanScalar};
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

/// The kernel of at least `rows` rows of path `isa` (conv_microkernels.h).
GemmMicroKernelInfo rowsKernel(Isa isa, int rows) {
  switch (isa) {
    case Isa::Avx512: return gemmMicroKernelRowsAvx512(rows);
    case Isa::Avx2: return gemmMicroKernelRowsAvx2(rows);
    case Isa::Portable: break;
  }
  return gemmMicroKernelRowsPortable(rows);
}

/// Whether the packed kernel computes a convolution of this geometry pixel-major (rows = output
/// pixels, columns = output channels) rather than channel-major (`cm`: the channel-major
/// micro-kernel): where that pads the register tiles less, with the transposing store counted
/// against it: about 60 k steps of a tile row per output with AVX-512's transposing kernels, 90
/// (scaled to the vector width) through the product buffer and SSE transposes of the other paths
/// (measured on ResNet-50's and MobileNetV2's convolutions at 14x14 and 7x7 with their weights
/// cold: pixel-major is 10-25% faster on layer4's, ~8% on layer3's 1024 -> 256, 5-10% slower on
/// its 256 -> 1024 and 20-30% slower at K = 64 or 96).
/// ONNXTOOL_CONV_LAYOUT=channel|pixel forces one (tests, measurements).
bool pixelMajor(const ConvGeometry& g, const GemmMicroKernelInfo& cm) {
  const int64_t mg = g.m / g.group, pix = g.oh * g.ow, k = g.c / g.group * g.kh * g.kw;
  if (mg == 0 || pix == 0 || k == 0) return false;
  const char* env = std::getenv("ONNXTOOL_CONV_LAYOUT");
  const std::string mode = env ? env : "";
  if (mode == "channel") return false;
  if (mode == "pixel") return true;
  const GemmMicroKernelInfo pm = rowsKernel(cm.isa, 14);
  // Cycles per k step of a tile of r rows: r (the FMA ports), but at least 4 when the FMA
  // latency bounds it (few accumulators); the GEMV kernel interleaves four chains.
  auto rowsCost = [&](int64_t r) -> double {
    if (r <= 0) return 0;
    const int kr = rowsKernel(cm.isa, static_cast<int>(r)).mr;
    return kr == 1 ? 2.0 : std::max(kr, 4);
  };
  const double pixCost = static_cast<double>(pix / pm.mr) * pm.mr + rowsCost(pix % pm.mr);
  // On cores whose 512-bit FMAs run at half rate (Zen 4) the transposing store costs half as many
  // FMA slots (ResNet-50's 256 -> 1024 at 14x14 on Zen 4: pixel-major 969 us, channel-major 1054).
  const double perOutput = pm.transposed ? (avx512HalfRate() ? 30.0 : 60.0) : 90.0 * pm.nr / 32;
  const double pmCost = static_cast<double>(roundUp(mg, pm.nr)) * pixCost * (1.0 + perOutput / static_cast<double>(k));
  const double cmCost = static_cast<double>(roundUp(mg, cm.mr)) * static_cast<double>(roundUp(pix, cm.nr));
  return pmCost < cmCost;
}

/// Whether the packed kernel computes a convolution of this geometry channel-major as an
/// implicit GEMM over phase-split input planes (PackedConvKernel::computeImplicit) instead of
/// packing the column matrix from the image.
/// - AVX-512: the stems (one group of at most 4 input channels, a kernel wider than 1x1, 16 or
///   more output columns), whose kernels read the planes in place (GemmMicroKernelInfo::splitB):
///   there the im2col gather is a fifth of the work (min latency, 1 thread, Sapphire Rapids:
///   ResNet-50's 7x7/2 stem 1.79 -> 1.45 ms, MobileNetV2's 3x3/2 0.251 -> 0.224 ms). Not chosen
///   elsewhere: ResNet-50's 3x3/2 convolutions gain 2% at most with the planes packed, its 1x1/2
///   ones lose 10-15% (the planes are an extra pass).
/// - AVX2 (kernels that pack their B panels from the planes: contiguous runs of a plane instead of
///   the im2col's per-row gathers and bounds): every kernel wider than 1x1 of one group that
///   stays channel-major, but stride-1 convolutions of at most 4 input channels. On an AVX2-only
///   core (Zen 2, 1 thread, the Conv + Clip alone, alternating; before -> after): 7x7/2 3 -> 64
///   stem at 224 4.92-5.07 -> 4.22-4.30 ms, 3x3/2 3 -> 32 at 224 0.76-0.78 -> 0.62-0.64, 3x3/2
///   16 -> 32 at 56 223 -> 161 us, 3x3/2 128 -> 128 at 56 3.90-4.02 -> 3.59-3.67 ms, 3x3 8 -> 16
///   at 14x14 27 -> 17 us (LeNet's second conv), at 56x56 234 -> 204 us, 5x5 48 -> 64 at 28x28
///   2.15-2.18 -> 2.13 ms; 1x1/2 256 -> 512 about even (not taken). Stride 1 with 1-3 input
///   channels lost: 3 -> 32 3x3 at 112x112 0.56-0.58 -> 0.58-0.62 ms, 1 -> 16 at 28x28 25 -> 27
///   us. (The AVX2 path capped on Sapphire Rapids had lost 5% on a 3x3/2 stem.)
/// ONNXTOOL_CONV_LAYOUT=implicit forces it wherever it runs (tests; packed planes without
/// splitB), channel, pixel or gemm turn it off.
bool implicitGemm(const ConvGeometry& g, const GemmMicroKernelInfo& cm, bool pixelMajor, bool pointwise, bool inputScale) {
  if (inputScale || g.n * g.oh * g.ow == 0) return false;
  if (pointwise && g.sh == 1 && g.sw == 1) return false;
  const char* env = std::getenv("ONNXTOOL_CONV_LAYOUT");
  const std::string mode = env ? env : "";
  if (mode == "implicit") return true;
  if (mode == "channel" || mode == "pixel" || mode == "gemm" || pixelMajor) return false;
  if (g.group != 1 || g.kh * g.kw <= 1) return false;
  if (cm.splitB) return g.c <= 4 && g.ow >= 16;
  if (cm.isa == Isa::Avx2) return g.dh == 1 && g.dw == 1 && (g.sh > 1 || g.sw > 1 || g.c > 4);
  return false;
}

/// Whether the packed kernel computes a convolution of this geometry pixel-major and direct
/// (PackedConvKernel::computePxDirect): the input zero-padded once, the transposing AVX-512
/// micro-kernels broadcasting each output pixel's taps straight from it (no pixel packing),
/// output rows in segments of up to 14 pixels (rows of 7 two at a time). Chosen for kernels
/// larger than 1x1 with rows of 14 or more output pixels, or 7, the stems aside (implicitGemm);
/// min latency of one Conv + Relu, 1 thread, Sapphire Rapids, against the default before: 3x3/2
/// 128 -> 128 to 28x28 1.86 -> 1.67 ms, 256 -> 256 to 14x14 1.81 -> 1.55, 512 -> 512 to 7x7
/// 1.72 -> 1.55, 3x3/1 512 at 7x7 1.74 -> 1.50, 64 at 56x56 1.84 -> 1.53, 128 at 28x28 1.64
/// -> 1.51, 16 -> 32 at 112x112 1.10 -> 0.81; slower for 1x1/2 (the padded copy is 4x the
/// input read: +25-45%). Not for few output channels: its tiles are 32 channels wide, so 8
/// use a quarter of each (YOLOv8n's 8 -> 8 3x3 at 80x80: 0.31 ms direct, 0.18 channel-major;
/// 64 -> 8 at 40x40 0.56 vs 0.39), and 16 half, which only a deep K (>= 256) pays for (16 -> 16
/// 3x3/2 to 80x80 0.159 vs 0.141, 8 -> 16 at 80x80 0.32 vs 0.24; 128 -> 16 at 14x14 0.14 vs
/// 0.18: direct). Zen 4, 1 thread, min latency of the Conv alone.
/// ONNXTOOL_CONV_LAYOUT=direct forces it wherever it runs; channel, pixel, implicit or gemm
/// turn it off.
bool directPixels(const ConvGeometry& g, const GemmMicroKernelInfo& cm, bool pointwise, bool inputScale) {
  if (inputScale || pointwise || g.n * g.oh * g.ow == 0 || !rowsKernel(cm.isa, 14).transposed) return false;
  const char* env = std::getenv("ONNXTOOL_CONV_LAYOUT");
  const std::string mode = env ? env : "";
  if (mode == "direct") return true;
  if (!mode.empty()) return false;
  const int64_t mg = g.m / std::max<int64_t>(g.group, 1), k = g.c / std::max<int64_t>(g.group, 1) * g.kh * g.kw;
  if (mg <= 8 || (mg <= 16 && k < 256)) return false;
  return g.kh * g.kw > 1 && (g.ow >= 14 || g.ow == 7);
}

class PackedConvKernel : public CpuKernel {
 public:
  /// `direct` (with pixelMajor): the pixel panels read from the padded input (computePxDirect).
  PackedConvKernel(ConvGeometry g, ConvEpilogue ep, const float* weights, GemmMicroKernelInfo mk, bool pixelMajor, bool implicit,
                   bool direct, std::string suffix, int threads)
      : g_(g), ep_(ep), mk_(mk),
        variant_((pixelMajor ? (direct ? ".gemm.direct." : ".gemm.px.") : implicit ? ".gemm.implicit." : ".gemm.") +
                 std::string(isaName(mk.isa)) + suffix),
        threads_(std::max(threads, 1)), pixelMajor_(pixelMajor), implicit_(implicit && !pixelMajor) {
    cg_ = g.c / g.group;
    mg_ = g.m / g.group;
    kdim_ = cg_ * g.kh * g.kw;
    pix_ = g.oh * g.ow;
    pointwise_ = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.padT == 0 && g.padL == 0 && g.oh == g.h && g.ow == g.w;
    if (pixelMajor_) {
      initPixelMajor(weights, direct);
      return;
    }
    mPanels_ = (mg_ + mk.mr - 1) / mk.mr;
    // K blocks of at most ~320, equal sizes; N blocks so that a packed KC x NC block of the
    // column matrix stays in L2 (~512 KiB).
    int64_t kBlocks = std::max<int64_t>(1, (kdim_ + 319) / 320);
    kc_ = std::max<int64_t>(1, (kdim_ + kBlocks - 1) / kBlocks);
    nc_ = std::max<int64_t>(mk.nr, (131072 / std::max<int64_t>(kc_, 1)) / mk.nr * mk.nr);
    nc_ = std::min(nc_, roundUp(std::max<int64_t>(pix_, 1), mk.nr));
    // W_g[mg, K] -> panels[group][mPanels][K][MR], rows past mg zero.
    packedW_.resize(static_cast<size_t>(g.group * mPanels_ * kdim_ * mk.mr));  // zeros (prefaulted.h)
    for (int64_t grp = 0; grp < g.group; ++grp)
      for (int64_t r = 0; r < mg_;) {
        const float* src = weights + (grp * mg_ + r) * kdim_;
        float* dst = packedW_.data() + ((grp * mPanels_ + r / mk.mr) * kdim_) * mk.mr + r % mk.mr;
        if (r % 4 == 0 && r + 4 <= mg_ && mk.mr % 4 == 0) {  // four rows of one panel: 4 x 4 transposes
          packRows4(src, kdim_, 1.f, kdim_, mk.mr, dst);
          r += 4;
          continue;
        }
        for (int64_t k = 0; k < kdim_; ++k) std::memcpy(dst + k * mk.mr, src + k, sizeof(float));  // src: any address
        ++r;
      }
    if (implicit_) initImplicit();
  }

  /// A thread's slice of the workspace, channel-major (the packed block, then the row gather
  /// buffer) and implicit (scratch and packed block): a page apart (threadSliceFloats).
  int64_t chPartFloats() const { return threadSliceFloats((kc_ + 1) * nc_); }
  int64_t imPartFloats() const { return threadSliceFloats(imScratchFloats_ + imPackedFloats_); }

  /// Per thread: the packed KC x NC block and one gathered row of NC pixels (pixel-major: the
  /// packed pixel panels, a gathered row, and the block's transposed product).
  size_t workspaceBytes() const override {
    if (implicit_) return static_cast<size_t>(imPhaseFloats_ + threads_ * imPartFloats()) * sizeof(float);
    if (pxDirect_) return static_cast<size_t>(cg_ * pdPh_ * pdPw_) * sizeof(float);
    return static_cast<size_t>(threads_ * (pixelMajor_ ? pmWsFloats_ : chPartFloats()) + sharedPanelsFloats_ + scaledWFloats()) *
           sizeof(float);
  }

  /// Threads split the output pixels (in NR multiples) when there are enough of them, else the
  /// MR-row panels of the weights (each thread then packs the same columns). Pixel-major: the
  /// channel panels (each thread streams its own part of the weights), unless there are too few
  /// of them.
  void compute(const CpuComputeArgs& args) const override {
    float* ws = static_cast<float*>(args.workspace);
    // A thread per ~2 MFLOP at most: waking a worker costs microseconds.
    const int threads = static_cast<int>(std::clamp<double>(flops() / 2e6, 1, threads_));
    if (implicit_) {
      computeImplicit(args, threads);
      return;
    }
    if (pxDirect_) {
      computePxDirect(args, threads);
      return;
    }
    if (pixelMajor_) {
      if (sharedPanelsFloats_ > 0 && threads > 1 && splitChannels(threads)) {
        // One image and group, one pixel block: the threads pack the pixel panels of all of K
        // together (each its K blocks), then split the channel panels, instead of each packing
        // them all (1/8 to 1/6 of a 7x7 map's work).
        float* shared = ws + threads_ * pmWsFloats_;
        const float* x = static_cast<const float*>(args.inputs[0]);
        const int64_t kc = packedWT_.front().kc(), kBlocks = (kdim_ + kc - 1) / kc, rPanels = (pix_ + pmMk_.mr - 1) / pmMk_.mr;
        const int tailMr = pmByRows_[static_cast<size_t>(pix_ - (rPanels - 1) * pmMk_.mr - 1)].mr;
        parallelRanges(args.pool, threads, kBlocks, 1, [&](int64_t b, int64_t e, int part) {
          float* row = ws + part * pmWsFloats_ + pmPackedFloats_;
          for (int64_t kbi = b; kbi < e; ++kbi)
            packPixels(x, kbi * kc, std::min(kc, kdim_ - kbi * kc), 0, pix_, tailMr, shared + kbi * kc * rPanels * pmMk_.mr, row);
        });
        parallelRanges(args.pool, threads, cPanels_, 1, [&](int64_t b, int64_t e, int part) {
          computePixelMajor(args, 0, pix_, b, e, ws + part * pmWsFloats_, shared);
        });
        return;
      }
      if (splitChannels(threads)) {
        parallelRanges(args.pool, threads, cPanels_, 1,
                       [&](int64_t b, int64_t e, int part) { computePixelMajor(args, 0, pix_, b, e, ws + part * pmWsFloats_); });
      } else {
        parallelRanges(args.pool, threads, pix_, pmMk_.mr,
                       [&](int64_t b, int64_t e, int part) { computePixelMajor(args, b, e, 0, cPanels_, ws + part * pmWsFloats_); });
      }
      return;
    }
    const int64_t wsPart = chPartFloats();
    const float* weights = packedW_.data();
    if (ep_.inputScale) {
      // (x * s) W^T = x (W diag(s))^T: the packed weights scaled per image by the channel scale
      // (input 4), for all images before the threads start.
      float* scaled = ws + threads_ * wsPart;
      const float* sc = static_cast<const float*>(args.inputs[4]);
      const int64_t per = mPanels_ * kdim_ * mk_.mr, mr = mk_.mr;
      for (int64_t img = 0; img < g_.n; ++img)
        for (int64_t mp = 0; mp < mPanels_; ++mp)
          for (int64_t k = 0; k < kdim_; ++k) {
            const float f = sc[img * g_.c + k];
            const float* src = packedW_.data() + (mp * kdim_ + k) * mr;
            float* dst = scaled + img * per + (mp * kdim_ + k) * mr;
            for (int64_t r = 0; r < mr; ++r) dst[r] = src[r] * f;
          }
      weights = scaled;
    }
    // Threads split the pixels where each has enough of them and the weights are not the larger
    // operand: split by pixels, every thread streams all of the weights (M x K) and packs its
    // share of the input (K x pixels); by weight panels, its share of the weights and all of the
    // input. ResNet-50's 14x14 layers, 2 threads, Zen 2 (the conv alone, alternating): 1x1
    // 256 -> 1024 0.69-0.70 -> 0.63-0.65 ms, 1x1/2 512 -> 1024 1.45-1.47 -> 1.38-1.40 ms.
    const bool byPixels = mPanels_ < 2 * threads || (pix_ >= 4 * mk_.nr * threads && mg_ <= pix_);
    if (byPixels) {
      parallelRanges(args.pool, threads, pix_, mk_.nr,
                     [&](int64_t b, int64_t e, int part) { computeRange(args, b, e, 0, mPanels_, ws + part * wsPart, weights); });
    } else {
      parallelRanges(args.pool, threads, mPanels_, 1,
                     [&](int64_t b, int64_t e, int part) { computeRange(args, 0, pix_, b, e, ws + part * wsPart, weights); });
    }
  }

  double flops() const override { return 2.0 * g_.n * g_.m * kdim_ * pix_; }
  std::vector<float> ownBias;  ///< the bias with a folded BatchNormalization, else empty (input 2)
  /// The weights (input 1) were packed at creation; the bias too when folded into ownBias.
  bool readsInput(size_t i) const override { return i != 1 && (i != 2 || ownBias.empty()); }
  std::string variant() const override { return variant_; }

  /// Output pixels [begin, end) and weight panels [mpBegin, mpEnd) of every image and group;
  /// `packed` holds (kc_ + 1) * nc_ floats: the packed block, then the row gather buffer;
  /// `weights`: the packed weights (packedW_), or with inputScale those of every image in turn.
  void computeRange(const CpuComputeArgs& args, int64_t begin, int64_t end, int64_t mpBegin, int64_t mpEnd, float* packed,
                    const float* weights) const {
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
          // Pointwise with few weight panels: the full panels read the input planes in place
          // (rows pix_ apart), only a partial last panel is packed. A pack copies the whole
          // input for a product that reuses each element only mPanels_ times (MobileNet's and
          // EfficientNet's projections to 16-32 channels: 20-35% faster in place); with more
          // panels the packed block's contiguous rows win (each k row of an unpacked panel is
          // another page: TLB misses on every pass; 5-15% slower at 64 or 256 channels).
          const int64_t direct = pointwise_ && mPanels_ <= 4 && ep_.inScale.empty() ? nc / nr : 0;
          for (int64_t kb = 0; kb < kdim_; kb += kc_) {
            const int64_t kc = std::min(kc_, kdim_ - kb);
            if (direct < nPanels) packColumns(xg, kb, kc, nb + direct * nr, nc - direct * nr, packed, packed + kc_ * nc_);
            te.accumulate = kb > 0;
            te.last = kb + kc == kdim_;
            for (int64_t mp = mpBegin; mp < mpEnd; ++mp) {
              const float* a = weights + (ep_.inputScale ? img * mPanels_ * kdim_ * mr : 0) + ((grp * mPanels_ + mp) * kdim_ + kb) * mr;
              const int rows = static_cast<int>(std::min<int64_t>(mr, mg_ - mp * mr));
              te.bias = bias ? bias + grp * mg_ + mp * mr : nullptr;
              // The next weight panel, fetched in slices while this one computes: with few
              // pixels each weight is used for few FMAs, read from L3 or memory.
              const float* next = mp + 1 < mpEnd ? a + kdim_ * mr : nullptr;
              const int64_t nextFloats = kc * mr, slice = (((nextFloats + 15) / 16 + nPanels - 1) / nPanels) * 16;
              for (int64_t jp = 0; jp < nPanels; ++jp) {
                const int cols = static_cast<int>(std::min<int64_t>(nr, nc - jp * nr));
                const int64_t off = yOff + mp * mr * pix_ + nb + jp * nr;
                te.residual = res ? res + off : nullptr;
                te.prefetch = next ? next + jp * slice : nullptr;
                te.prefetchLines = next ? std::max<int64_t>(0, std::min(nextFloats - jp * slice, slice)) / 16 : 0;
                te.ldb = jp < direct ? pix_ : 0;
                const float* b = jp < direct ? xg + kb * pix_ + nb + jp * nr : packed + (jp - direct) * kc * nr;
                mk_.kernel(kc, a, b, y + off, pix_, rows, cols, te);
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

  /// Pixel-major and direct (pxDirect_): per image and group, the input zero-padded once
  /// (pdPh_ x pdPw_ per channel); each output row in segments of at most 14 pixels, a segment's
  /// pixel panel read by the transposing micro-kernel straight from the padded planes (pixel i
  /// of tap k at pdOff_[k] + i sw: TileEpilogue::aOff; no pixel packing), times the W^T panels,
  /// stored transposed into NCHW with the epilogue. Threads split the channel panels (or the
  /// output rows where there are fewer panels than threads).
  void computePxDirect(const CpuComputeArgs& args, int threads) const {
    float* pad = static_cast<float*>(args.workspace);
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t nr = pmMk_.nr, ow = g_.ow, segs = (ow + pmMk_.mr - 1) / pmMk_.mr;
    const bool pair = ow == 7 && pmMk_.mr == 14;
    for (int64_t img = 0; img < g_.n; ++img)
      for (int64_t grp = 0; grp < g_.group; ++grp) {
        const float* xg = x + (img * g_.c + grp * cg_) * g_.h * g_.w;
        const int64_t yOff = (img * g_.m + grp * mg_) * pix_;
        parallelRanges(args.pool, threads, cg_, 1, [&](int64_t c0, int64_t c1, int) {
          const int64_t x0 = std::clamp<int64_t>(g_.padL, 0, pdPw_), x1 = std::clamp<int64_t>(g_.padL + g_.w, x0, pdPw_);
          for (int64_t ch = c0; ch < c1; ++ch)
            for (int64_t py = 0; py < pdPh_; ++py) {
              float* d = pad + (ch * pdPh_ + py) * pdPw_;
              const int64_t iy = py - g_.padT;
              if (iy < 0 || iy >= g_.h) {
                std::fill(d, d + pdPw_, 0.f);
                continue;
              }
              std::fill(d, d + x0, 0.f);
              std::memcpy(d + x0, xg + (ch * g_.h + iy) * g_.w + (x0 - g_.padL), static_cast<size_t>(x1 - x0) * sizeof(float));
              std::fill(d + x1, d + pdPw_, 0.f);
            }
        });
        const PackedB& wt = packedWT_[static_cast<size_t>(grp)];
        auto run = [&](int64_t oy0, int64_t oy1, int64_t j0, int64_t j1) {
          TileEpilogue td;
          td.ldr = pix_;
          td.clamp = ep_.clamp;
          td.lo = ep_.lo;
          td.hi = ep_.hi;
          td.aStride = g_.sw;
          for (int64_t kb = 0, kbi = 0; kb < kdim_; kb += wt.kc(), ++kbi) {
            const int64_t kc = std::min(wt.kc(), kdim_ - kb);
            td.accumulate = kb > 0;
            td.last = kb + kc >= kdim_;
            td.aOff = pdOff_.data() + kb;
            for (int64_t oy = oy0; oy < oy1; oy += pair && oy + 1 < oy1 ? 2 : 1)
              for (int64_t sgi = 0; sgi < segs; ++sgi) {
                // Rows of 7 pixels two at a time: one 14-row panel (TileEpilogue::aDelta).
                const bool two = pair && oy + 1 < oy1;
                const int64_t ox0 = ow * sgi / segs, len = two ? 14 : ow * (sgi + 1) / segs - ox0, p = oy * ow + ox0;
                td.aDelta = two ? g_.sh * pdPw_ - 7 * g_.sw : 0;
                const GemmMicroKernelInfo& k = pmByRows_[static_cast<size_t>(len - 1)];
                const float* a = pad + oy * g_.sh * pdPw_ + ox0 * g_.sw;
                // The first segment of a K block reads its weight panels cold (from L3 or
                // memory): each call fetches the next panel towards L2 while it computes.
                const bool cold = oy == oy0 && sgi == 0;
                for (int64_t jp = j0; jp < j1; ++jp) {
                  const int cols = static_cast<int>(std::min<int64_t>(nr, mg_ - jp * nr));
                  const float* next = !cold ? nullptr : jp + 1 < j1 ? wt.panel(kbi, jp + 1) : kb + kc < kdim_ ? wt.panel(kbi + 1, j0) : nullptr;
                  td.prefetch = next;
                  td.prefetchLines = next ? std::min(kc, std::max<int64_t>(0, kdim_ - kb - (jp + 1 < j1 ? 0 : kc))) * nr / 16 : 0;
                  td.colBias = bias ? bias + grp * mg_ + jp * nr : nullptr;
                  td.residual = res ? res + yOff + jp * nr * pix_ + p : nullptr;
                  k.transposed(kc, a, wt.panel(kbi, jp), y + yOff + jp * nr * pix_ + p, pix_, static_cast<int>(len), cols, td);
                }
              }
          }
          if (ep_.act != VecUnary::Count)
            for (int64_t ch = j0 * nr; ch < std::min(mg_, j1 * nr); ++ch) {
              float* yc = y + yOff + ch * pix_ + oy0 * ow;
              vecKernels().unary[static_cast<int>(ep_.act)](yc, yc, (oy1 - oy0) * ow);
            }
        };
        if (threads > 1 && cPanels_ < threads)
          parallelRanges(args.pool, threads, g_.oh, 1, [&](int64_t b, int64_t e, int) { run(b, e, 0, cPanels_); });
        else
          parallelRanges(args.pool, threads, cPanels_, 1, [&](int64_t b, int64_t e, int) { run(0, g_.oh, b, e); });
      }
  }

  /// Implicit GEMM (implicit_): per image and group, the input is first split into zero-padded
  /// phase planes (stride sh x sw: padded pixel (py, px) to phase (py % sh, px % sw) at
  /// (py / sh, px / sw), rows imPw_ floats), so that kernel tap (c, ki, kj) of output pixel
  /// (oy, ox) is element (oy + ki dh / sh) imPw_ + ox + kj dw / sw of one phase plane: over the
  /// "extended" output grid of oh rows of imPw_ pixels every row of the column matrix is one
  /// contiguous run of a plane at the tap's offset (imOff_), read by the micro-kernel in place
  /// (TileEpilogue::bOff), no im2col. The extended columns ox >= ow are computed and dropped:
  /// the tiles go to a per-thread scratch block, then its valid columns to Y (straight into Y
  /// when imPw_ == ow).
  void computeImplicit(const CpuComputeArgs& args, int threads) const {
    float* ws = static_cast<float*>(args.workspace);
    float* phases = ws;
    const float* x = static_cast<const float*>(args.inputs[0]);
    for (int64_t img = 0; img < g_.n; ++img)
      for (int64_t grp = 0; grp < g_.group; ++grp) {
        const float* xg = x + (img * g_.c + grp * cg_) * g_.h * g_.w;
        parallelRanges(args.pool, threads, cg_, 1, [&](int64_t b, int64_t e, int) { fillPhases(xg, b, e, phases); });
        parallelRanges(args.pool, threads, g_.oh, 1, [&](int64_t b, int64_t e, int part) {
          for (int64_t r = b; r < e; r += imRows_)
            implicitBlock(args, img, grp, r, std::min(e, r + imRows_), phases, ws + imPhaseFloats_ + part * imPartFloats());
        });
      }
  }

  /// The phase planes of channels [c0, c1) of one image's group (see computeImplicit).
  void fillPhases(const float* xg, int64_t c0, int64_t c1, float* phases) const {
    const int64_t pw = imPw_, nph = static_cast<int64_t>(imPhases_.size());
    const RowOps& ops = activeRowOps();
    for (int64_t ch = c0; ch < c1; ++ch)
      for (int64_t pi = 0; pi < nph; ++pi) {
        if (imPairs_) {  // column phases 0 and 1 of a row phase together: one pass over each input row
          if (pi % 2 == 0) fillPhasePair(xg + ch * g_.h * g_.w, imPhases_[static_cast<size_t>(pi)] / 2,
                                         phases + (ch * nph + pi) * imPlaneFloats_, ops);
          continue;
        }
        const int64_t qy = imPhases_[static_cast<size_t>(pi)] / g_.sw, qx = imPhases_[static_cast<size_t>(pi)] % g_.sw;
        float* plane = phases + (ch * nph + pi) * imPlaneFloats_;
        // Columns j with 0 <= j sw + qx - padL < w: [j0, j1).
        const int64_t first = g_.padL - qx;  // j sw >= first
        const int64_t j0 = std::clamp<int64_t>(first <= 0 ? 0 : (first + g_.sw - 1) / g_.sw, 0, pw);
        const int64_t lim = g_.w + g_.padL - qx;  // j sw < lim
        const int64_t j1 = std::clamp<int64_t>(lim <= 0 ? 0 : (lim + g_.sw - 1) / g_.sw, j0, pw);
        for (int64_t r = 0; r < imPh_; ++r) {
          float* dst = plane + r * pw;
          const int64_t iy = r * g_.sh + qy - g_.padT;
          if (iy < 0 || iy >= g_.h || j1 <= j0) {
            std::fill(dst, dst + pw, 0.f);
            continue;
          }
          std::fill(dst, dst + j0, 0.f);
          const float* src = xg + (ch * g_.h + iy) * g_.w + j0 * g_.sw + qx - g_.padL;
          if (g_.sw == 1) std::memcpy(dst + j0, src, static_cast<size_t>(j1 - j0) * sizeof(float));
          else activeRowOps().gatherStrided(dst + j0, src, j1 - j0, g_.sw);
          std::fill(dst + j1, dst + pw, 0.f);
        }
      }
    if (c1 == cg_) std::fill(phases + cg_ * nph * imPlaneFloats_, phases + imPhaseFloats_, 0.f);  // the slack past the last plane
  }

  /// Row phase qy of one channel's plane `src`, stride 2 across: column phases 0 and 1 into
  /// the planes at `dst` and dst + imPlaneFloats_, each padded input row split by deinterleave2.
  void fillPhasePair(const float* src, int64_t qy, float* dst, const RowOps& ops) const {
    const int64_t pw = imPw_, padL = g_.padL;
    // Image columns ix land at padded px = ix + padL: phase px % 2, column px / 2 < pw.
    const int64_t cols = std::clamp<int64_t>(2 * pw - padL, 0, g_.w);
    float* even = dst + (padL % 2) * imPlaneFloats_;
    float* odd = dst + ((padL + 1) % 2) * imPlaneFloats_;
    for (int64_t r = 0; r < imPh_; ++r) {
      float* d0 = dst + r * pw;
      float* d1 = d0 + imPlaneFloats_;
      const int64_t iy = r * g_.sh + qy - g_.padT;
      std::fill(d0, d0 + pw, 0.f);
      std::fill(d1, d1 + pw, 0.f);
      if (iy < 0 || iy >= g_.h || cols == 0) continue;
      ops.deinterleave2(src + iy * g_.w, cols, even + r * pw + padL / 2, odd + r * pw + (padL + 1) / 2);
    }
  }

  /// Output rows [r0, r1) of one image's group, every output channel; `scratch` holds
  /// imScratchFloats_ floats.
  void implicitBlock(const CpuComputeArgs& args, int64_t img, int64_t grp, int64_t r0, int64_t r1, const float* phases,
                     float* scratch) const {
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int mr = mk_.mr, nr = mk_.nr;
    const int64_t pw = imPw_, e0 = r0 * pw, ne = (r1 - r0) * pw, tiles = (ne + nr - 1) / nr;
    const int64_t yOff = (img * g_.m + grp * mg_) * pix_;
    if (imSplit_) {
      // Tiles of output pixels straight into Y, each 16-pixel half reading its row's plane
      // run and, past a row's end, the next row's (TileEpilogue::bSkip; ow >= 16: at most one
      // row end in a half).
      const int64_t ow = g_.ow, p0 = r0 * ow, p1 = r1 * ow;
      auto ext = [&](int64_t p) { return p / ow * pw + p % ow; };  // a pixel's extended index
      auto split = [&](int64_t p) { return static_cast<int>(std::min<int64_t>(16, ow - p % ow)); };
      TileEpilogue te;
      te.clamp = ep_.clamp;
      te.lo = ep_.lo;
      te.hi = ep_.hi;
      te.ldr = pix_;
      for (int64_t kb = 0; kb < kdim_; kb += imKc_) {
        const int64_t kc = std::min(imKc_, kdim_ - kb);
        te.accumulate = kb > 0;
        te.last = kb + kc == kdim_;
        te.bOff = imOff_.data() + kb;
        for (int64_t p = p0; p < p1; p += nr) {
          const int cols = static_cast<int>(std::min<int64_t>(nr, p1 - p));
          const int64_t e = ext(p);
          te.bSplit[0] = split(p);
          te.bSplit[1] = split(p + 16);
          te.bHalf = ext(p + 16) - e;  // 16 + pw - ow where a row ends between the halves
          te.bSkip = te.bSplit[0] < 16 || te.bSplit[1] < 16 || te.bHalf != 16 ? pw - ow : 0;
          for (int64_t mp = 0; mp < mPanels_; ++mp) {
            const int rows = static_cast<int>(std::min<int64_t>(mr, mg_ - mp * mr));
            const float* a = packedW_.data() + ((grp * mPanels_ + mp) * kdim_ + kb) * mr;
            te.bias = bias ? bias + grp * mg_ + mp * mr : nullptr;
            const int64_t off = yOff + mp * mr * pix_ + p;
            te.residual = res ? res + off : nullptr;
            mk_.kernel(kc, a, phases + e, y + off, pix_, rows, cols, te);
          }
        }
      }
      if (ep_.act != VecUnary::Count)
        for (int64_t m = 0; m < mg_; ++m) vecKernels().unary[static_cast<int>(ep_.act)](y + yOff + m * pix_ + p0, y + yOff + m * pix_ + p0, p1 - p0);
      return;
    }
    const bool direct = pw == g_.ow;  // the extended grid is the output's
    // Residual, clamp and activation after the copy out of the scratch (the residual comes
    // before the clamp); the bias always in the kernel.
    const bool late = !direct && ep_.residual;
    TileEpilogue te;
    te.clamp = ep_.clamp && !late;
    te.lo = ep_.lo;
    te.hi = ep_.hi;
    te.ldr = pix_;
    // The column matrix's block over the extended pixels: each row one run of a plane, copied
    // into the NR-column panels in whole panels (the last one reads past the block: slack).
    float* packed = scratch + imScratchFloats_;
    for (int64_t kb = 0; kb < kdim_; kb += kc_) {
      const int64_t kc = std::min(kc_, kdim_ - kb);
      te.accumulate = kb > 0;
      te.last = kb + kc == kdim_;
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = phases + imOff_[static_cast<size_t>(kb + kk)] + e0;
        float* dst = packed + kk * nr;
        if (nr == 32)
          for (int64_t jp = 0; jp < tiles; ++jp) std::memcpy(dst + jp * kc * 32, src + jp * 32, 32 * sizeof(float));
        else
          for (int64_t jp = 0; jp < tiles; ++jp) std::memcpy(dst + jp * kc * nr, src + jp * nr, static_cast<size_t>(nr) * sizeof(float));
      }
      for (int64_t mp = 0; mp < mPanels_; ++mp) {
        const int rows = static_cast<int>(std::min<int64_t>(mr, mg_ - mp * mr));
        const float* a = packedW_.data() + ((grp * mPanels_ + mp) * kdim_ + kb) * mr;
        te.bias = bias ? bias + grp * mg_ + mp * mr : nullptr;
        for (int64_t jp = 0; jp < tiles; ++jp) {
          const int cols = static_cast<int>(std::min<int64_t>(nr, ne - jp * nr));
          const float* b = packed + jp * kc * nr;
          if (direct) {
            const int64_t off = yOff + mp * mr * pix_ + e0 + jp * nr;
            te.residual = res ? res + off : nullptr;
            mk_.kernel(kc, a, b, y + off, pix_, rows, cols, te);
          } else {
            mk_.kernel(kc, a, b, scratch + mp * mr * ne + jp * nr, ne, rows, cols, te);
          }
        }
      }
    }
    const int64_t ow = g_.ow, len = (r1 - r0) * ow;
    void (*act)(const float*, float*, int64_t) = ep_.act != VecUnary::Count ? vecKernels().unary[static_cast<int>(ep_.act)] : nullptr;
    for (int64_t m = 0; m < mg_; ++m) {
      float* dst = y + yOff + m * pix_ + r0 * ow;
      if (!direct) {
        const float* src = scratch + m * ne;
        for (int64_t r = 0; r < r1 - r0; ++r) std::memcpy(dst + r * ow, src + r * pw, static_cast<size_t>(ow) * sizeof(float));
        if (late) {
          const float* rr = res + yOff + m * pix_ + r0 * ow;
          for (int64_t i = 0; i < len; ++i) {
            float v = dst[i] + rr[i];
            if (ep_.clamp) {  // max then min, as Clip; NaN stays NaN
              v = v < ep_.lo ? ep_.lo : v;
              v = v > ep_.hi ? ep_.hi : v;
            }
            dst[i] = v;
          }
        }
      }
      if (act) act(dst, dst, len);
    }
  }

  /// Implicit GEMM set-up: the phases the taps read, the planes' extent, each tap's offset,
  /// the rows per block.
  void initImplicit() {
    const int64_t nr = mk_.nr;
    // K blocks: a tile's rows of B (kc runs of 32 floats from all over the planes, two or
    // three lines each) stay in L1 across the weight panels.
    const int64_t kBlocks = std::max<int64_t>(1, (kdim_ + 159) / 160);
    imKc_ = std::max<int64_t>(1, (kdim_ + kBlocks - 1) / kBlocks);
    imPw_ = g_.ow + (g_.kw - 1) * g_.dw / g_.sw;
    imPh_ = g_.oh + (g_.kh - 1) * g_.dh / g_.sh;
    imPlaneFloats_ = imPh_ * imPw_;
    std::vector<int64_t> index(static_cast<size_t>(g_.sh * g_.sw), -1);
    for (int64_t ki = 0; ki < g_.kh; ++ki)
      for (int64_t kj = 0; kj < g_.kw; ++kj) {
        const int64_t ph = (ki * g_.dh) % g_.sh * g_.sw + (kj * g_.dw) % g_.sw;
        if (index[static_cast<size_t>(ph)] < 0) index[static_cast<size_t>(ph)] = 0;
      }
    for (int64_t ph = 0; ph < g_.sh * g_.sw; ++ph)
      if (index[static_cast<size_t>(ph)] == 0) {
        index[static_cast<size_t>(ph)] = static_cast<int64_t>(imPhases_.size());
        imPhases_.push_back(ph);
      }
    const int64_t nph = static_cast<int64_t>(imPhases_.size());
    // Stride 2 across with both column phases of every row phase read: filled in pairs.
    imPairs_ = g_.sw == 2 && nph == 2 * g_.sh;
    imOff_.resize(static_cast<size_t>(kdim_));
    for (int64_t k = 0; k < kdim_; ++k) {
      const int64_t ch = k / (g_.kh * g_.kw), ki = (k / g_.kw) % g_.kh, kj = k % g_.kw;
      const int64_t ph = (ki * g_.dh) % g_.sh * g_.sw + (kj * g_.dw) % g_.sw;
      imOff_[static_cast<size_t>(k)] = (ch * nph + index[static_cast<size_t>(ph)]) * imPlaneFloats_ + (ki * g_.dh) / g_.sh * imPw_ +
                                       (kj * g_.dw) / g_.sw;
    }
    // A tile past the last pixel reads past the last plane (up to a row and a tile).
    imPhaseFloats_ = roundUp(cg_ * nph * imPlaneFloats_ + 2 * (imPw_ + nr), 16);
    // Rows per block: the block's product (all output channels) within ~256 KiB.
    const int64_t mpad = mPanels_ * mk_.mr;
    imRows_ = std::clamp<int64_t>(65536 / std::max<int64_t>(mpad * imPw_, 1), 1, std::max<int64_t>(g_.oh, 1));
    // Few input channels (the stems): B read in place (TileEpilogue::bSkip), else packed.
    imSplit_ = mk_.splitB && imPw_ != g_.ow && g_.ow >= 16 && cg_ <= 4;
    imScratchFloats_ = imPw_ == g_.ow || imSplit_ ? 0 : roundUp(mpad * imRows_ * imPw_, 16);
    imPackedFloats_ = imSplit_ ? 0 : kc_ * roundUp(imRows_ * imPw_, nr);
  }

  /// Floats of the per-image scaled weights (inputScale), else 0.
  int64_t scaledWFloats() const { return ep_.inputScale ? g_.n * mPanels_ * kdim_ * mk_.mr : 0; }

  /// Pixel-major, `threads` > 1: whether threads split the channel panels (each streams its part
  /// of the weights) rather than the pixel panels (each reads all of them): the split that
  /// balances the parts better (in channels or pixels, not padding), channels on a near tie or
  /// when the weights are large (above ~1 MiB).
  bool splitChannels(int threads) const {
    if (threads <= 1) return true;
    auto largestPart = [&](int64_t units, int64_t unitSize, int64_t total) {  // as parallelRanges splits
      const int64_t parts = std::clamp<int64_t>(units, 1, threads);
      int64_t largest = 0;
      for (int64_t part = 0; part < parts; ++part)
        largest = std::max(largest, std::min(total, units * (part + 1) / parts * unitSize) - units * part / parts * unitSize);
      return static_cast<double>(largest) / (static_cast<double>(total) / threads);
    };
    const double byChannels = largestPart(cPanels_, pmMk_.nr, mg_);
    const double byPixels = largestPart((pix_ + pmMk_.mr - 1) / pmMk_.mr, pmMk_.mr, pix_);
    return byChannels <= byPixels * 1.1 || g_.group * mg_ * kdim_ > 262144;
  }

  /// Pixel-major: output pixels [p0, p1) and channel panels [j0, j1) of every image and group;
  /// `ws` holds pmWsFloats_ floats.
  /// `prepacked`: every K block of the pixel panels, packed beforehand by all threads together
  /// (compute(), sharedPanelsFloats_), or null.
  void computePixelMajor(const CpuComputeArgs& args, int64_t p0, int64_t p1, int64_t j0, int64_t j1, float* ws,
                         const float* prepacked = nullptr) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int mr = pmMk_.mr, nr = pmMk_.nr;
    float* packed = ws;
    float* row = ws + pmPackedFloats_;
    float* t = row + pmRowFloats_;
    // The product's rows: all the part's channels while K takes several blocks, else one panel
    // (each panel is stored transposed as soon as it is final, while it is in L1); not a
    // multiple of 4 KiB, so that a tile's rows fall in distinct L1 sets.
    const bool oneBlock = packedWT_.front().kc() >= kdim_;
    const int64_t ldt = (oneBlock ? nr : (j1 - j0) * nr) + 16;
    TileEpilogue te;  // the raw product: the epilogue runs on the transposed store
    for (int64_t img = 0; img < g_.n; ++img)
      for (int64_t grp = 0; grp < g_.group; ++grp) {
        const float* xg = x + (img * g_.c + grp * cg_) * g_.h * g_.w;
        const int64_t yOff = (img * g_.m + grp * mg_) * pix_;
        const PackedB& wt = packedWT_[static_cast<size_t>(grp)];
        for (int64_t pb = p0; pb < p1; pb += pmBlock_) {
          const int64_t rows = std::min(pmBlock_, p1 - pb), rPanels = (rows + mr - 1) / mr;
          const int tailRows = static_cast<int>(rows - (rPanels - 1) * mr);
          const GemmMicroKernelInfo& tail = pmByRows_[static_cast<size_t>(tailRows - 1)];
          for (int64_t kb = 0, kbi = 0; kb < kdim_; kb += wt.kc(), ++kbi) {
            const int64_t kc = std::min(wt.kc(), kdim_ - kb);
            if (prepacked) packed = const_cast<float*>(prepacked) + kb * rPanels * mr;
            else packPixels(xg, kb, kc, pb, rows, tail.mr, packed, row);
            te.accumulate = kb > 0;
            const bool lastK = kb + kc >= kdim_;
            for (int64_t jp = j0; jp < j1; ++jp) {
              const float* bPanel = wt.panel(kbi, jp);
              const int cols = static_cast<int>(std::min<int64_t>(nr, mg_ - jp * nr));
              float* tp = t + (oneBlock ? 0 : (jp - j0) * nr);
              // The next weight panel, fetched in slices by the kernels while this one computes.
              const float* next = jp + 1 < j1 ? wt.panel(kbi, jp + 1) : !lastK ? wt.panel(kbi + 1, j0) : nullptr;
              const int64_t nextFloats = jp + 1 < j1 ? kc * nr : !lastK ? std::min(wt.kc(), kdim_ - kb - kc) * nr : 0;
              const int64_t slice = (((nextFloats + 15) / 16 + rPanels - 1) / rPanels) * 16;
              if (pix_ == 1) {  // one pixel (a 1x1 map): its product row is the output, the epilogue in the kernel's store
                float* yc = y + yOff + jp * nr;
                TileEpilogue direct;
                direct.accumulate = kb > 0;
                direct.last = lastK;
                direct.colBias = bias ? bias + grp * mg_ + jp * nr : nullptr;
                direct.residual = res ? res + yOff + jp * nr : nullptr;
                direct.clamp = ep_.clamp;
                direct.lo = ep_.lo;
                direct.hi = ep_.hi;
                tail.kernel(kc, packed, bPanel, yc, nr, 1, cols, direct);
                if (lastK && ep_.act != VecUnary::Count) vecKernels().unary[static_cast<int>(ep_.act)](yc, yc, cols);
                continue;
              }
              if (pmMk_.transposed) {  // tiles stored transposed straight into NCHW, the epilogue in the store
                TileEpilogue td;
                td.accumulate = kb > 0;
                td.last = lastK;
                td.colBias = bias ? bias + grp * mg_ + jp * nr : nullptr;
                td.ldr = pix_;
                td.clamp = ep_.clamp;
                td.lo = ep_.lo;
                td.hi = ep_.hi;
                float* yc = y + yOff + jp * nr * pix_ + pb;
                for (int64_t ip = 0; ip < rPanels; ++ip) {
                  td.prefetch = next ? next + ip * slice : nullptr;
                  td.prefetchLines = next ? std::max<int64_t>(0, std::min(nextFloats - ip * slice, slice)) / 16 : 0;
                  td.residual = res ? res + yOff + jp * nr * pix_ + pb + ip * mr : nullptr;
                  const bool isTail = ip == rPanels - 1;
                  const GemmMicroKernelInfo& k = isTail ? tail : pmMk_;
                  k.transposed(kc, packed + ip * mr * kc, bPanel, yc + ip * mr, pix_, isTail ? tailRows : mr, cols, td);
                }
                if (lastK && ep_.act != VecUnary::Count)
                  for (int j = 0; j < cols; ++j) vecKernels().unary[static_cast<int>(ep_.act)](yc + j * pix_, yc + j * pix_, rows);
                continue;
              }
              for (int64_t ip = 0; ip < rPanels; ++ip) {
                te.prefetch = next ? next + ip * slice : nullptr;
                te.prefetchLines = next ? std::max<int64_t>(0, std::min(nextFloats - ip * slice, slice)) / 16 : 0;
                const bool isTail = ip == rPanels - 1;
                const GemmMicroKernelInfo& k = isTail ? tail : pmMk_;
                k.kernel(kc, packed + ip * mr * kc, bPanel, tp + ip * mr * ldt, ldt, isTail ? tailRows : mr, cols, te);
              }
              if (lastK)
                storeTransposed(tp, ldt, rows, jp * nr, jp * nr + cols, bias ? bias + grp * mg_ : nullptr, res ? res + yOff + pb : nullptr,
                                y + yOff + pb);
            }
          }
        }
      }
  }

 private:
  /// Pixel-major set-up: W_g^T packed per group, the pixel panels' kernels, the pixel block.
  void initPixelMajor(const float* weights, bool direct) {
    pmMk_ = rowsKernel(mk_.isa, mk_.isa == Isa::Avx512 ? 14 : mk_.isa == Isa::Avx2 ? 6 : 4);
    for (int r = 1; r <= pmMk_.mr; ++r) pmByRows_.push_back(rowsKernel(mk_.isa, r));
    cPanels_ = (mg_ + pmMk_.nr - 1) / pmMk_.nr;
    // K blocks of at most 256: a weight panel (kc x NR) stays in L1 across the pixel panels;
    // on AVX-512 512: each K block stores the tiles (transposed) once more, which costs more
    // than the panel streaming from L2 (against 256, 1 thread: ResNet-50's 1x1 convolutions at
    // 14x14 and 7x7 2-5% faster, its 3x3 ones on the direct kernel 3-7%).
    const int64_t kcMax = pmMk_.isa == Isa::Avx512 ? 512 : 256;
    for (int64_t grp = 0; grp < g_.group; ++grp)
      packedWT_.emplace_back(weights + grp * mg_ * kdim_, kdim_, true, kdim_, mg_, pmMk_.nr, kcMax);
    const int64_t kc = std::max<int64_t>(1, packedWT_.front().kc());
    // Pixel blocks: the packed pixels (block x kc) within ~256 KiB and, without a transposing
    // kernel, the product (block x channels) within ~1 MiB of L2; equal blocks in whole panels.
    const int64_t ldt = (kc >= kdim_ ? pmMk_.nr : cPanels_ * pmMk_.nr) + 16;  // as computePixelMajor
    const int64_t byProduct = pmMk_.transposed ? 65536 / kc : 262144 / ldt;
    int64_t block = std::max<int64_t>(pmMk_.mr, std::min(byProduct, 65536 / kc) / pmMk_.mr * pmMk_.mr);
    block = std::min(block, std::max<int64_t>(pix_, 1));
    const int64_t blocks = (std::max<int64_t>(pix_, 1) + block - 1) / block;
    pmBlock_ = roundUp((std::max<int64_t>(pix_, 1) + blocks - 1) / blocks, pmMk_.mr);
    pmPackedFloats_ = roundUp(pmBlock_ * kc, 16);
    pmRowFloats_ = roundUp(pmBlock_, 16);
    pmWsFloats_ = threadSliceFloats(pmPackedFloats_ + pmRowFloats_ + (pmMk_.transposed ? 0 : roundUp(pmBlock_ * ldt, 16)));
    // Threads packing the pixel panels together (compute): one image and group, one pixel
    // block, several K blocks, the panels of all of K within ~2 MiB.
    const int64_t allPanels = kdim_ * roundUp(pix_, pmMk_.mr);
    if (threads_ > 1 && g_.n * g_.group == 1 && pix_ <= pmBlock_ && kdim_ > kc && allPanels <= 524288) sharedPanelsFloats_ = allPanels;
    // Direct (computePxDirect): the AVX-512 transposing kernels read the pixel panels from
    // the zero-padded input.
    pxDirect_ = direct && pmMk_.transposed && !pointwise_;
    if (pxDirect_) {
      pdPh_ = (g_.oh - 1) * g_.sh + (g_.kh - 1) * g_.dh + 1;
      pdPw_ = (g_.ow - 1) * g_.sw + (g_.kw - 1) * g_.dw + 1;
      pdOff_.resize(static_cast<size_t>(kdim_));
      for (int64_t k = 0; k < kdim_; ++k) {
        const int64_t ch = k / (g_.kh * g_.kw), ki = (k / g_.kw) % g_.kh, kj = k % g_.kw;
        pdOff_[static_cast<size_t>(k)] = (ch * pdPh_ + ki * g_.dh) * pdPw_ + kj * g_.dw;
      }
      return;
    }
    // Small maps: per kernel tap, the input offset of every output pixel in its channel's plane
    // (-1: padding), so that packing a row of the column matrix is one gather (fillRow's
    // per-output-row bounds cost more than the copy when rows are 7 or 14 pixels).
    if (!pointwise_ && pix_ * g_.kh * g_.kw <= 65536 && g_.h * g_.w < (int64_t{1} << 31)) {
      tapOffsets_.resize(static_cast<size_t>(g_.kh * g_.kw * pix_));
      for (int64_t ki = 0; ki < g_.kh; ++ki)
        for (int64_t kj = 0; kj < g_.kw; ++kj)
          for (int64_t p = 0; p < pix_; ++p) {
            const int64_t iy = p / g_.ow * g_.sh - g_.padT + ki * g_.dh, ix = p % g_.ow * g_.sw - g_.padL + kj * g_.dw;
            tapOffsets_[static_cast<size_t>((ki * g_.kw + kj) * pix_ + p)] =
                iy >= 0 && iy < g_.h && ix >= 0 && ix < g_.w ? static_cast<int32_t>(iy * g_.w + ix) : -1;
          }
    }
  }

  /// dst[ip * kMr * kc + i] = src[ip * kMr + i] for i < kMr, ip < panels: one row of k of
  /// `panels` pixel panels.
  template <int kMr>
  static void copyPanels(const float* src, int64_t panels, int64_t kc, float* dst) {
    for (int64_t ip = 0; ip < panels; ++ip) std::memcpy(dst + ip * kMr * kc, src + ip * kMr, kMr * sizeof(float));
  }

  /// Packs rows [kb, kb + kc) of the column matrix and its output pixels [pb, pb + rows) as
  /// pixel panels (MR rows, k-major, the last of `tailMr` rows, rows past `rows` zero): the
  /// transposed column matrix, the A of the pixel-major product.
  /// dst[i] = relu(src[i] * inScale[k] + inShift[k]) for n floats of input channel k (the
  /// BatchNormalization + Relu prologue; NaN stays NaN, as Relu keeps it).
  void prologueRow(const float* src, int64_t k, int64_t n, float* dst) const {
    const float s = ep_.inScale[static_cast<size_t>(k % g_.c)], b = ep_.inShift[static_cast<size_t>(k % g_.c)];
    const VecKernels& vk = vecKernels();  // three passes over a row in L1, each on the ISA path's vectors
    vk.binaryScalarB[static_cast<int>(VecBinary::Mul)](src, s, dst, n);
    vk.binaryScalarB[static_cast<int>(VecBinary::Add)](dst, b, dst, n);
    vk.unary[static_cast<int>(VecUnary::Relu)](dst, dst, n);
  }

  void packPixels(const float* xg, int64_t kb, int64_t kc, int64_t pb, int64_t rows, int tailMr, float* packed, float* row) const {
    const int64_t mr = pmMk_.mr, rPanels = (rows + mr - 1) / mr, khw = g_.kh * g_.kw;
    const int64_t tailRows = rows - (rPanels - 1) * mr;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const int64_t k = kb + kk;
      const float* src;
      if (pointwise_) {
        src = xg + k * g_.h * g_.w + pb;
        if (!ep_.inScale.empty()) {  // relu(x * s + b) of the channel first (the BatchNormalization + Relu prologue)
          prologueRow(src, k, rows, row);
          src = row;
        }
      } else if (!tapOffsets_.empty()) {  // small maps: the tap's offsets straight into the panels
        const float* plane = xg + (k / khw) * g_.h * g_.w;
        const int32_t* off = tapOffsets_.data() + (k % khw) * pix_ + pb;
        for (int64_t ip = 0; ip < rPanels; ++ip) {
          const bool last = ip == rPanels - 1;
          float* d = packed + ip * mr * kc + kk * (last ? tailMr : mr);
          const int32_t* o = off + ip * mr;
          const int64_t n = last ? tailRows : mr;
          for (int64_t i = 0; i < n; ++i) d[i] = o[i] >= 0 ? plane[o[i]] : 0.f;
          if (last) std::fill(d + n, d + tailMr, 0.f);
        }
        continue;
      } else {
        const int64_t ch = k / khw, ki = (k / g_.kw) % g_.kh, kj = k % g_.kw;
        fillRow(xg + ch * g_.h * g_.w, ki, kj, pb / g_.ow, pb % g_.ow, rows, row);
        src = row;
      }
      // Whole panels in copies of a constant size (the main kernels' row counts).
      if (mr == 14) copyPanels<14>(src, rPanels - 1, kc, packed + kk * 14);
      else if (mr == 6) copyPanels<6>(src, rPanels - 1, kc, packed + kk * 6);
      else if (mr == 4) copyPanels<4>(src, rPanels - 1, kc, packed + kk * 4);
      else
        for (int64_t ip = 0; ip + 1 < rPanels; ++ip)
          std::memcpy(packed + ip * mr * kc + kk * mr, src + ip * mr, static_cast<size_t>(mr) * sizeof(float));
      float* d = packed + (rPanels - 1) * mr * kc + kk * tailMr;
      std::memcpy(d, src + (rPanels - 1) * mr, static_cast<size_t>(tailRows) * sizeof(float));
      std::fill(d + tailRows, d + tailMr, 0.f);
    }
  }

  /// y[c][p] = epilogue(t[p][c - c0] + bias[c]) for channels [c0, c1) and pixels [0, rows) of a
  /// pixel block (y, res: the block's first pixel of the group's first channel; rows of pix_):
  /// 4 x 4 SSE transposes (the x86-64 baseline) with bias, residual and clamp, the tails scalar;
  /// then the activation over each finished row.
  void storeTransposed(const float* t, int64_t ldt, int64_t rows, int64_t c0, int64_t c1, const float* bias, const float* res,
                       float* y) const {
    auto finish = [&](float v, int64_t c, int64_t p) {
      if (bias) v += bias[c];
      if (res) v += res[c * pix_ + p];
      if (ep_.clamp) {  // max then min, as Clip; NaN stays NaN
        v = v < ep_.lo ? ep_.lo : v;
        v = v > ep_.hi ? ep_.hi : v;
      }
      y[c * pix_ + p] = v;
    };
    int64_t c = c0;
#if defined(__SSE2__)
    const __m128 lo = _mm_set1_ps(ep_.lo), hi = _mm_set1_ps(ep_.hi);
    for (; c + 4 <= c1; c += 4) {
      const float* tc = t + (c - c0);
      __m128 b[4];
      for (int r = 0; r < 4; ++r) b[r] = _mm_set1_ps(bias ? bias[c + r] : 0.f);
      int64_t p = 0;
      for (; p + 4 <= rows; p += 4) {
        __m128 r0 = _mm_loadu_ps(tc + p * ldt), r1 = _mm_loadu_ps(tc + (p + 1) * ldt), r2 = _mm_loadu_ps(tc + (p + 2) * ldt),
               r3 = _mm_loadu_ps(tc + (p + 3) * ldt);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // r_i: channel c + i at pixels p .. p + 3
        __m128 v[4] = {_mm_add_ps(r0, b[0]), _mm_add_ps(r1, b[1]), _mm_add_ps(r2, b[2]), _mm_add_ps(r3, b[3])};
        for (int r = 0; r < 4; ++r) {
          if (res) v[r] = _mm_add_ps(v[r], _mm_loadu_ps(res + (c + r) * pix_ + p));
          if (ep_.clamp) v[r] = _mm_min_ps(hi, _mm_max_ps(lo, v[r]));  // returns v when v is NaN (the second operand)
          _mm_storeu_ps(y + (c + r) * pix_ + p, v[r]);
        }
      }
      for (; p < rows; ++p)
        for (int64_t r = 0; r < 4; ++r) finish(tc[p * ldt + r], c + r, p);
    }
#endif
    for (; c < c1; ++c)
      for (int64_t p = 0; p < rows; ++p) finish(t[p * ldt + (c - c0)], c, p);
    if (ep_.act != VecUnary::Count) {
      void (*act)(const float*, float*, int64_t) = vecKernels().unary[static_cast<int>(ep_.act)];
      for (c = c0; c < c1; ++c) act(y + c * pix_, y + c * pix_, rows);
    }
  }

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
        if (!ep_.inScale.empty()) {  // relu(x * s + b) of the channel first (the BatchNormalization + Relu prologue)
          prologueRow(src, k, nc, row);
          src = row;
        }
        const int64_t full = nc / nr;
        // Copies of a constant size (inline moves, not a libc call per panel row).
        if (nr == 32)
          for (int64_t jp = 0; jp < full; ++jp) std::memcpy(dst + jp * kc * 32, src + jp * 32, 32 * sizeof(float));
        else if (nr == 16)
          for (int64_t jp = 0; jp < full; ++jp) std::memcpy(dst + jp * kc * 16, src + jp * 16, 16 * sizeof(float));
        else
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
  bool pixelMajor_ = false;
  bool implicit_ = false;
  bool pointwise_ = false;
  // Implicit GEMM (computeImplicit): the phases read (index sy * sw + sx), plane extent,
  // per-tap offsets, rows per block, workspace floats (the planes; scratch per thread).
  std::vector<int64_t> imPhases_, imOff_;
  bool pxDirect_ = false;  ///< pixel-major, pixel panels read from the padded input (computePxDirect)
  int64_t pdPh_ = 0, pdPw_ = 0;
  std::vector<int64_t> pdOff_;  ///< per tap: its offset in the padded planes
  bool imSplit_ = false;  ///< tiles of output pixels straight into Y (TileEpilogue::bSkip)
  bool imPairs_ = false;  ///< phases filled two at a time (fillPhasePair)
  int64_t imKc_ = 1, imPw_ = 0, imPh_ = 0, imPlaneFloats_ = 0, imPhaseFloats_ = 0, imRows_ = 1, imScratchFloats_ = 0, imPackedFloats_ = 0;
  int64_t cg_, mg_, kdim_, pix_, mPanels_ = 0, kc_ = 0, nc_ = 0;
  PackedFloats packedW_;
  // Pixel-major: the pixel panels' kernel and one per tail row count, W_g^T per group, channel
  // panels, pixels per block, workspace floats per thread (packed pixels, a row, the product).
  GemmMicroKernelInfo pmMk_{};
  std::vector<GemmMicroKernelInfo> pmByRows_;
  std::vector<PackedB> packedWT_;
  std::vector<int32_t> tapOffsets_;  ///< [kh * kw][pix]: see initPixelMajor
  int64_t cPanels_ = 0, pmBlock_ = 0, pmPackedFloats_ = 0, pmRowFloats_ = 0, pmWsFloats_ = 0, sharedPanelsFloats_ = 0;
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
    const char* env = std::getenv("ONNXTOOL_DEPTHWISE");  // rows | direct | channels: force one path where it can run (tests)
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
    // Channels mode for rows of at most 8 outputs, or 16 with 5x5 and larger filters (Zen 4, 1
    // thread: 5x5 on 672 x 14x14 174 us vs 235 in rows, 5x5/2 on 240 x 28x28 104 vs 153; 3x3 on
    // 384 x 14x14 65 vs 45: rows).
    const bool small = g.ow <= 8 || (g.ow <= 16 && taps >= 25);
    channels_ = ops.depthwiseChannels && force != "rows" && force != "direct" && (force == "channels" || small) && chanBytes <= 131072 && pix > 0;
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
      partBytes_ = threadSliceBytes(chanBytes);
      return;
    }
    span_ = (kDepthwiseRows - 1) * g.sh + (g.kh - 1) * g.dh + 1;
    // The rows read in place where the path can (AVX-512's masked loads): no ring of copied
    // rows (MobileNetV2 on Sapphire Rapids spent a quarter of its depthwise time copying and
    // deinterleaving rows). ONNXTOOL_DEPTHWISE=rows keeps the ring (tests).
    direct_ = ops.depthwiseRowsDirect && force != "rows" && depthwiseDirectFits(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw);
    if (direct_) {
      zeroRow_.assign(static_cast<size_t>(g.padL + g.w + 32 * g.sw + 16), 0.f);
      return;
    }
    phaseLen_ = roundUp(roundUp(g.ow, 32) + (g.kw - 1) * g.dw / g.sw, 16);
    rowFloats_ = g.sw * phaseLen_;
    // Image columns a row keeps: those inside the phases (the rest no output reads).
    imageCols_ = std::clamp<int64_t>(rowFloats_ - g.padL, 0, g.w);
    partBytes_ = threadSliceBytes(static_cast<int64_t>((span_ + 1) * rowFloats_ * sizeof(float) + span_ * sizeof(float*)));
  }
  size_t workspaceBytes() const override { return static_cast<size_t>(threads_ * partBytes_); }
  void compute(const CpuComputeArgs& args) const override {
    const int64_t planeWork = std::max<int64_t>(1, g_.oh * g_.ow * g_.kh * g_.kw);
    // Not worth waking a thread below ~250k taps (~64k in channels mode, whose transposes in
    // and out cost about as much again: 576 x 7x7 3x3 outputs, 254k taps, 1 -> 2 threads 56 -> 33 us).
    const int threads = g_.n * g_.c * planeWork < (channels_ ? 65536 : 262144) ? 1 : threads_;
    if (channels_) {
      const int64_t blocks = (g_.c + lanes_ - 1) / lanes_;
      parallelRanges(args.pool, threads, g_.n * blocks, 1, [&](int64_t b, int64_t e, int part) {
        computeChannels(args, b, e, reinterpret_cast<float*>(static_cast<char*>(args.workspace) + part * partBytes_));
      });
      return;
    }
    if (direct_) {
      parallelRanges(args.pool, threads, g_.n * g_.c, 1, [&](int64_t b, int64_t e, int) { computeDirect(args, b, e); });
      return;
    }
    parallelRanges(args.pool, threads, g_.n * g_.c, 1, [&](int64_t b, int64_t e, int part) {
      computeRange(args, b, e, static_cast<char*>(args.workspace) + part * partBytes_);
    });
  }
  double flops() const override { return 2.0 * g_.n * g_.c * g_.kh * g_.kw * g_.oh * g_.ow; }
  std::vector<float> ownBias;  ///< the bias with a folded BatchNormalization, else empty (input 2)
  /// The weights (input 1) were packed at creation; the bias too when folded into ownBias.
  bool readsInput(size_t i) const override { return i != 1 && (i != 2 || ownBias.empty()); }
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

  /// Planes (image, channel) [begin, end) from their rows in place (RowOps::depthwiseRowsDirect).
  void computeDirect(const CpuComputeArgs& args, int64_t begin, int64_t end) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias.empty() ? ownBias.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t pix = g_.oh * g_.ow;
    const RowOps& ops = activeRowOps();
    void (*act)(const float*, float*, int64_t) = ep_.act != VecUnary::Count ? vecKernels().unary[static_cast<int>(ep_.act)] : nullptr;
    const float* rows[(kDepthwiseRows - 1) * 2 + 7];  // span_ at most (depthwiseDirectFits)
    DepthwiseRows a{};
    a.rows = rows;
    a.inW = g_.w, a.padL = g_.padL;
    a.kh = g_.kh, a.kw = g_.kw, a.sh = g_.sh, a.sw = g_.sw, a.dh = 1, a.dw = 1, a.ow = g_.ow;
    a.clamp = ep_.clamp, a.lo = ep_.lo, a.hi = ep_.hi;
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t ch = plane % g_.c;
      const float* xp = x + plane * g_.h * g_.w;
      a.w = w_.data() + ch * g_.kh * g_.kw;
      a.bias = bias ? bias[ch] : 0.f;
      for (int64_t oy = 0; oy < g_.oh; oy += kDepthwiseRows) {
        for (int64_t j = 0; j < span_; ++j) {
          const int64_t iy = oy * g_.sh + j - g_.padT;
          rows[j] = iy >= 0 && iy < g_.h ? xp + iy * g_.w : zeroRow_.data() + g_.padL;
        }
        a.nrows = static_cast<int>(std::min<int64_t>(kDepthwiseRows, g_.oh - oy));
        a.res = res ? res + plane * pix + oy * g_.ow : nullptr;
        a.y = y + plane * pix + oy * g_.ow;
        ops.depthwiseRowsDirect(a);
      }
      if (act) act(y + plane * pix, y + plane * pix, pix);
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
      }
      // The activation once per plane (still in L1), not per block of rows: a call per 4 rows
      // of 14 outputs cost EfficientNet's 5x5 depthwise + SiLU on 672 x 14x14 a third more.
      if (act) act(y + plane * pix, y + plane * pix, pix);
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
  bool direct_ = false;  ///< the rows read in place (RowOps::depthwiseRowsDirect)
  std::vector<float> zeroRow_;  ///< direct_: what a padding row reads (DepthwiseRows::inW)
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
  // A 1-D convolution (audio front ends: [N, C, L], weights [M, C/g, k]) is the 2-D one of a
  // map one row high: the same bytes, height 1 and a 1-row kernel.
  const bool oneD = x.size() == 3 && w.size() == 3 && y.size() == 3;
  if (!oneD && (x.size() != 4 || w.size() != 4 || y.size() != 4)) return nullptr;
  ConvGeometry g{};
  g.n = x[0], g.c = x[1], g.h = oneD ? 1 : x[2], g.w = x.back();
  g.m = w[0], g.kh = oneD ? 1 : w[2], g.kw = w.back();
  g.oh = oneD ? 1 : y[2], g.ow = y.back();
  g.group = n.attrInt("group", 1);
  if (g.group <= 0 || g.c % g.group || g.m % g.group || w[1] != g.c / g.group || y[1] != g.m || y[0] != g.n) return nullptr;
  auto strides = n.attrInts("strides", oneD ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1});
  auto dil = n.attrInts("dilations", oneD ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1});
  auto pads = n.attrInts("pads", oneD ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{0, 0, 0, 0});
  if (oneD) {
    if (strides.size() != 1 || dil.size() != 1 || pads.size() != 2) return nullptr;
    strides.insert(strides.begin(), 1);
    dil.insert(dil.begin(), 1);
    pads = {0, pads[0], 0, pads[1]};
  }
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
  const TensorData& wt = *info.constants[1];
  if (wt.dtype() != DType::Float || static_cast<int64_t>(wt.raw.size()) != g.m * w[1] * g.kh * g.kw * 4) return nullptr;
  // The weights as floats: the initializer's own bytes when they are float-aligned and kept as
  // they are (every kernel below packs them into buffers of its own), a copy when unaligned or
  // scaled by a folded BatchNormalization (ResNet-50: copying all 100 MB of weights cost more of
  // the plan's build than packing them).
  const size_t wCount = static_cast<size_t>(g.m * w[1] * g.kh * g.kw);
  const bool scaled = info.fused && !info.fused->scale.empty();
  std::vector<float> ownCopy;
  float* wCopy = nullptr;
  const float* weights = nullptr;
  // Unaligned bytes (three initializers in four, at the offsets protobuf gives them) are read
  // in place by the packers that load through memcpy (PackedConvKernel, Winograd's transform:
  // ResNet-50's prepare copied 100 MB for them); the others get an aligned copy (alignedWeights).
  const bool unaligned = reinterpret_cast<uintptr_t>(wt.raw.data()) % alignof(float) != 0;
  if (wCount && scaled) {
    // The plan build's scratch (pages already mapped by earlier nodes), else a vector of our own;
    // only read while the kernel is made (every kernel below keeps what it needs).
    std::vector<float>& buf = info.scratch ? *info.scratch : ownCopy;
    if (buf.size() < wCount) buf.resize(wCount);
    wCopy = buf.data();
    if (scaled && info.fused->scale.size() == static_cast<size_t>(g.m)) {
      // copied and scaled per output channel in one pass (the bias is scaled below)
      const int64_t per = static_cast<int64_t>(wCount) / std::max<int64_t>(g.m, 1);
      const uint8_t* src = wt.raw.data();
      for (int64_t oc = 0; oc < g.m; ++oc) {
        const float sc = info.fused->scale[static_cast<size_t>(oc)];
        float* dst = wCopy + oc * per;
        for (int64_t i = 0; i < per; ++i) {
          float v;
          std::memcpy(&v, src + (oc * per + i) * 4, sizeof v);  // any alignment
          dst[i] = v * sc;
        }
      }
    } else {
      std::memcpy(wCopy, wt.raw.data(), wt.raw.size());
    }
    weights = wCopy;
  } else if (wCount) {
    weights = reinterpret_cast<const float*>(wt.raw.data());  // read through memcpy where unaligned
  }
  bool inPlaceUnaligned = wCount && !scaled && unaligned;
  auto alignedWeights = [&]() -> const float* {
    if (!inPlaceUnaligned) return weights;
    std::vector<float>& buf = info.scratch ? *info.scratch : ownCopy;
    if (buf.size() < wCount) buf.resize(wCount);
    std::memcpy(buf.data(), wt.raw.data(), wt.raw.size());
    inPlaceUnaligned = false;
    return weights = buf.data();
  };
  ConvEpilogue ep;
  std::string suffix;
  if (info.fused) {
    suffix = info.fused->suffix;
    ep.residual = info.fused->residual;
    ep.clamp = info.fused->clamp;
    ep.lo = info.fused->lo;
    ep.hi = info.fused->hi;
    ep.act = info.fused->act;
    ep.inputScale = info.fused->inputScale;
    ep.inScale = info.fused->inScale;
    ep.inShift = info.fused->inShift;
    if (ep.residual && (!info.hasInput(3) || info.in(3).dims != y)) return nullptr;
    // The BatchNormalization + Relu prologue: pointwise, one group, a scale and shift per channel.
    if (!ep.inScale.empty() && (ep.inputScale || static_cast<int64_t>(ep.inScale.size()) != g.c || ep.inShift.size() != ep.inScale.size() ||
                                g.group != 1 || g.kh != 1 || g.kw != 1 || g.sh != 1 || g.sw != 1 || g.oh != g.h || g.ow != g.w ||
                                g.padT != 0 || g.padL != 0))
      return nullptr;
    // The channel scale: pointwise, one group, N x C floats; channel-major (the weights scaled).
    if (ep.inputScale && (!info.hasInput(4) || info.in(4).dtype != DType::Float || info.in(4).numElements() != g.n * g.c || g.group != 1 ||
                          g.kh != 1 || g.kw != 1 || g.sh != 1 || g.sw != 1 || g.oh != g.h || g.ow != g.w || g.padT != 0 || g.padL != 0))
      return nullptr;
  }
  if (g.c / g.group * g.kh * g.kw == 0 && g.n * g.m * g.oh * g.ow > 0) return nullptr;  // no taps: the reference kernel
  // A folded BatchNormalization: weights and bias scaled per output channel, the bias then
  // owned by the kernel (so the conv's own bias must be a constant, or absent).
  std::vector<float> ownBias;
  if (info.fused && !info.fused->scale.empty()) {
    const auto& sc = info.fused->scale;
    const auto& sh = info.fused->shift;
    if (static_cast<int64_t>(sc.size()) != g.m) return nullptr;
    const TensorData* b = info.hasInput(2) ? info.constants[2] : nullptr;
    if (info.hasInput(2) && (!b || b->dtype() != DType::Float || b->raw.size() != static_cast<size_t>(g.m) * sizeof(float))) return nullptr;
    ownBias.assign(static_cast<size_t>(g.m), 0.f);
    if (b) std::memcpy(ownBias.data(), b->raw.data(), b->raw.size());
    for (int64_t oc = 0; oc < g.m; ++oc)  // the weights were scaled as they were copied
      ownBias[static_cast<size_t>(oc)] = ownBias[static_cast<size_t>(oc)] * sc[static_cast<size_t>(oc)] + sh[static_cast<size_t>(oc)];
  }
  // The blocked-layout twin (kernels_nchwc.h), with a constant bias (or the folded one).
  std::unique_ptr<CpuKernel> twin;
  if (info.nchwc && nchwcEnabled() && g.n * g.oh * g.ow > 0) {
    const TensorData* b = info.hasInput(2) ? info.constants[2] : nullptr;
    const bool biasOk = !info.hasInput(2) || !ownBias.empty() ||
                        (b && b->dtype() == DType::Float && b->raw.size() == static_cast<size_t>(g.m) * sizeof(float));
    std::vector<float> bias;
    if (!ownBias.empty()) bias = ownBias;
    else if (b && biasOk) {
      bias.resize(static_cast<size_t>(g.m));
      std::memcpy(bias.data(), b->raw.data(), b->raw.size());
    }
    if (biasOk) twin = makeNchwcConv(g, ep, alignedWeights(), bias.empty() ? nullptr : bias.data(), suffix, info.threads);
    // The plain kernel only if the plan keeps this step plain (it asks again, nchwc off): most
    // steps of such plans run blocked, and packing both doubled MobileNetV2's weight packing.
    if (twin) {
      auto pending = std::make_unique<PendingPlainConv>();
      pending->nchwcTwin = std::move(twin);
      return pending;
    }
  }
  std::unique_ptr<CpuKernel> k;
  if (g.group == g.c && g.group == g.m && g.padT >= 0 && g.padL >= 0 && !ep.inputScale && ep.inScale.empty()) {
    auto d = std::make_unique<DepthwiseConvKernel>(g, ep, alignedWeights(), suffix, info.threads);
    d->ownBias = std::move(ownBias);
    k = std::move(d);
  } else if (!ep.inputScale && ep.inScale.empty() && winogradApplies(g)) {
    k = makeWinogradConv(g, ep, weights, reinterpret_cast<const uint8_t*>(wt.raw.data()),
                         info.fused ? info.fused->scale : std::vector<float>{}, ownBias, suffix, info.threads);
  }
  if (!k) {
    const GemmMicroKernelInfo mk = activeGemmMicroKernel(g.m / g.group);
    bool px = pixelMajor(g, mk);
    if (px && ep.inputScale) {
      // The executor then runs the Mul, and the conv pixel-major; but in a plan with blocked
      // twins (which scale their input themselves) the fused step stays, channel-major where it
      // runs plain.
      if (!info.deferredFrom) return nullptr;
      px = false;
    }
    const bool pointwise = g.kh == 1 && g.kw == 1 && g.padT == 0 && g.padL == 0 && g.oh == g.h && g.ow == g.w;
    const bool prologue = !ep.inScale.empty();  // packed from the input, never read in place
    const bool implicit = !prologue && implicitGemm(g, mk, px, pointwise, ep.inputScale);
    if (implicit) px = false;
    const bool direct = !prologue && !implicit && directPixels(g, mk, pointwise, ep.inputScale);
    if (direct) px = true;
    auto p = std::make_unique<PackedConvKernel>(g, ep, weights, mk, px, implicit, direct, suffix, info.threads);
    p->ownBias = std::move(ownBias);
    k = std::move(p);
  }
  if (k) k->nchwcTwin = std::move(twin);
  return k;
}

std::unique_ptr<CpuKernel> createConvFast(const CpuNodeInfo& info) {
  if (auto k = createPackedConv(info)) return k;
  if (info.fused) return nullptr;  // only the packed kernels apply a fused epilogue
  return createConv(info);
}

}  // namespace onnxtool::cpu
