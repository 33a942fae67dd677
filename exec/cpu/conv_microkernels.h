// conv_microkernels.h: the register-blocked SGEMM micro-kernels of the convolution kernels
// (kernels_conv.cpp) and of the GEMM driver (gemm.h: MatMul, Gemm), one family per ISA path,
// each in its own source file compiled for that ISA with __attribute__((target)) (never the
// build machine's -march): conv_microkernel_avx512.cpp, conv_microkernel_avx2.cpp, and the
// portable one in kernels_conv.cpp.
//
// A micro-kernel computes one MR x NR tile of C = A * B over kc steps of the inner dimension:
//   A: a packed panel of MR rows, k-major (a[k * MR + i]), rows past the matrix are zeros;
//   B: a packed panel of NR columns, k-major (b[k * NR + j]), columns past the matrix are zeros;
//   C: row-major with leading dimension ldc; only the first m rows and n columns are written.
// With `accumulate` the tile adds to what C holds (a later block of k); with `last` the epilogue
// runs before the store: + bias[i] (per row), + colBias[j] (per column), + residual (same layout
// as C, leading dimension ldr), then clamping to [lo, hi] (ReLU is [0, +inf], ReLU6 [0, 6]).
// Every kernel of a family accumulates each element of C over k in the same order (one FMA per
// k), but for the 1-row GEMV kernels, which interleave four chains over k.
#pragma once

#include <cstdint>

#include "exec/cpu/isa.h"

namespace onnxtool::cpu {

struct TileEpilogue {
  bool accumulate = false;
  bool last = true;
  const float* bias = nullptr;      ///< bias of the tile's first row, or nullptr
  const float* colBias = nullptr;   ///< bias of the tile's first column (per column), or nullptr
  const float* residual = nullptr;  ///< residual at the tile's first element, or nullptr
  int64_t ldr = 0;
  bool clamp = false;
  float lo = 0, hi = 0;
  /// Lines (64 bytes) from `prefetch` on that the kernel fetches towards L2 while it runs, two
  /// per k step (the next panel of a streamed operand; the GEMV kernels fetch their own B
  /// instead), or none.
  const float* prefetch = nullptr;
  int64_t prefetchLines = 0;
  /// B's k rows `ldb` floats apart instead of packed (NR): an unpacked B whose NR columns from
  /// `b` on are all readable in every row (a pointwise convolution's input planes); 0: packed.
  int64_t ldb = 0;
  /// B's k row kk at b + bOff[kk] (an implicit convolution: each row one kernel tap of the
  /// phase-split input planes, every NR columns from there on readable), overriding ldb; for
  /// kernels with GemmMicroKernelInfo::splitB only; nullptr: packed (or ldb).
  const int64_t* bOff = nullptr;
  /// With bOff, kernels with GemmMicroKernelInfo::splitB only: each 16-column half h of the
  /// tile (columns 16 h + t, t < 16) reads b + bOff[k] + (h ? bHalf : 0) + t for t < bSplit[h]
  /// and that + bSkip from there on (a tile of output pixels wrapping to the next row of an
  /// implicit convolution's planes; both runs are read whole: 16 floats from b + bOff[k] (+
  /// bHalf) and 16 from there + bSkip must be readable); bSkip 0: no split.
  int64_t bSkip = 0, bHalf = 16;
  int bSplit[2] = {16, 16};
  /// A unpacked, element (i, k) at a[aOff[k] + i * aStride] (a direct convolution's input:
  /// row i an output pixel, k a kernel tap): for the AVX-512 transposing kernels
  /// (GemmMicroKernelInfo::transposed) only; every one of the kernel's MR rows readable.
  const int64_t* aOff = nullptr;
  int64_t aStride = 1;
  /// With aOff, the 14-row kernel only: rows 7 to 13 read aDelta floats further (two output
  /// rows of 7 pixels); 0: one run.
  int64_t aDelta = 0;
  /// A unpacked, element (i, k) at a[i * lda + k], every one of the kernel's MR rows readable
  /// (kernels with GemmMicroKernelInfo::stridedA only); 0: packed.
  int64_t lda = 0;
};

using GemmMicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                                 const TileEpilogue& ep);

struct GemmMicroKernelInfo {
  int mr, nr;
  GemmMicroKernel kernel;
  Isa isa;
  /// The same tile stored transposed, or null where the path has none: element (i, j) goes to
  /// c[j * ldc + i] (accumulate reads it there; bias[i] is per row, colBias[j] per column, the
  /// residual at residual[j * ldr + i]). The pixel-major convolution (rows = output pixels)
  /// stores its tiles straight into NCHW through it.
  GemmMicroKernel transposed = nullptr;
  /// Whether `kernel` honours TileEpilogue::lda (an unpacked A): the AVX-512 kernels of 2 to 14
  /// rows; the others read A packed only.
  bool stridedA = false;
  /// Whether `kernel` honours TileEpilogue::bOff (B rows at a table of offsets) and bSkip: the
  /// AVX-512 kernels of 2 to 14 rows.
  bool splitB = false;
};

/// The micro-kernel of an ISA path (defined in the ISA's own file); AVX-512 picks its row count
/// for a matrix of m rows.
GemmMicroKernelInfo gemmMicroKernelAvx512(int64_t m = 12);
GemmMicroKernelInfo gemmMicroKernelAvx2();
GemmMicroKernelInfo gemmMicroKernelPortable();
/// The micro-kernel of activeIsa() for a matrix of m rows.
GemmMicroKernelInfo activeGemmMicroKernel(int64_t m = 12);
/// The kernel of at least `mr` rows (the smallest the path has, up to its largest tile; same NR
/// as the path's main kernel): every count from 1 (GEMV) to 14 on AVX-512, 1 to 6 on AVX2. The
/// portable path has one 4 x 16 kernel (gemm.cpp).
GemmMicroKernelInfo gemmMicroKernelRowsAvx512(int mr);
GemmMicroKernelInfo gemmMicroKernelRowsAvx2(int mr);
GemmMicroKernelInfo gemmMicroKernelRowsPortable(int mr);

struct DepthwiseShape {
  int64_t kh, kw, sh, sw, dh, dw, oh, ow;
};

/// Output rows of a depthwise convolution computed together (each loaded input vector serves
/// every one of them it is a tap of; R x 1-2 vector accumulators hide the FMA latency).
constexpr int kDepthwiseRows = 4;

/// kDepthwiseRows output rows of one depthwise plane (see DepthwiseConvKernel): the input rows
/// arrive zero-padded and split by the column stride sw into sw phases, phase q of a padded row
/// holding its columns q, q + sw, q + 2 sw, ... (phaseLen floats each, phase after phase), so
/// that every tap of a vector of outputs is one contiguous load at any stride: tap column kj of
/// output column ox reads phase (kj dw) % sw at (kj dw) / sw + ox. rows[j] is padded input row
/// (first output row) * sh + j for j < (kDepthwiseRows - 1) * sh + (kh - 1) * dh + 1 (an
/// all-zero row where that is padding); every phase is readable to roundUp(ow, 32) + (kw - 1) dw
/// / sw floats. Output row r (< nrows) = bias + sum of taps (+ res row r when res is not null,
/// rows ow apart as y), clamped to [lo, hi] when `clamp` (a NaN stays NaN).
struct DepthwiseRows {
  const float* const* rows;
  int64_t phaseLen;
  /// RowOps::depthwiseRowsDirect only: rows[j] is the unpadded input row itself (inW floats;
  /// where the row is padding, a zero row readable from padL floats before it to inW + 32 sw + 16
  /// after), column ix = px - padL of padded column px; the kernel reads it in place, masking off
  /// the columns outside [0, inW) (no branch per row: a branch kept the accumulators in memory).
  int64_t inW, padL;
  const float* w;  ///< the filter, kh x kw
  int64_t kh, kw, sh, sw, dh, dw, ow;
  int nrows;
  float bias;
  const float* res;
  float* y;
  bool clamp;
  float lo, hi;
};

/// Up to L depthwise planes of one image at once, channels in the L vector lanes (L = 16 on
/// AVX-512, 8 on AVX2: RowOps::depthwiseLanes; for small planes, where a plane's rows are too
/// short to fill vectors). The planes x + c * h * w (c < nch) are gathered into t: padded
/// pixel (py, px) at t[(py * pw + px) * L + c], zero where padding (t holds zeros there on
/// entry; only the image is written); each output pixel o then sums its taps t[pixOff[o] +
/// tapOff[k]] times wl[k * L + c] (plus bias[c]) into out[o * L + c]; the planes are gathered
/// back into y + c * oh * ow (+ res likewise, clamped as DepthwiseRows). pixOff has
/// roundUp(oh * ow, 8) entries (0 past oh * ow), out as many pixels; t and out 64-byte aligned.
struct DepthwiseChannels {
  const float* x;
  int64_t h, w, padT, padL, pw;  ///< pw: the padded row length of t, in pixels
  int nch;
  float* t;
  const int32_t* tapOff;
  const int32_t* pixOff;
  int64_t ntaps, pix;  ///< pix = oh * ow
  const float* wl;
  const float* bias;  ///< bias[c] for c < nch, or nullptr
  float* out;
  const float* res;
  float* y;
  bool clamp;
  float lo, hi;
};

inline void depthwiseRowsScalar(const DepthwiseRows& a) {
  for (int r = 0; r < a.nrows; ++r)
    for (int64_t ox = 0; ox < a.ow; ++ox) {
      float acc = a.bias;
      for (int64_t ki = 0; ki < a.kh; ++ki) {
        const float* row = a.rows[r * a.sh + ki * a.dh] + ox;
        for (int64_t kj = 0; kj < a.kw; ++kj) {
          const int64_t t = kj * a.dw;
          acc += a.w[ki * a.kw + kj] * row[(t % a.sw) * a.phaseLen + t / a.sw];
        }
      }
      if (a.res) acc += a.res[r * a.ow + ox];
      if (a.clamp) {
        acc = acc < a.lo ? a.lo : acc;
        acc = acc > a.hi ? a.hi : acc;
      }
      a.y[r * a.ow + ox] = acc;
    }
}

inline void maxPoolPlaneScalar(const float* p, int64_t pw, const DepthwiseShape& s, float* y) {
  for (int64_t oy = 0; oy < s.oh; ++oy)
    for (int64_t ox = 0; ox < s.ow; ++ox) {
      float acc = p[oy * s.sh * pw + ox * s.sw];
      for (int64_t ki = 0; ki < s.kh; ++ki)
        for (int64_t kj = 0; kj < s.kw; ++kj) {
          float v = p[(oy * s.sh + ki * s.dh) * pw + ox * s.sw + kj * s.dw];
          acc = acc < v ? v : acc;
        }
      y[oy * s.ow + ox] = acc;
    }
}

inline void gatherStridedScalar(float* dst, const float* src, int64_t n, int64_t sw) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * sw];
}

inline void deinterleave2Scalar(const float* src, int64_t n, float* even, float* odd) {
  for (int64_t i = 0; i + 1 < n; i += 2) {
    even[i / 2] = src[i];
    odd[i / 2] = src[i + 1];
  }
  if (n % 2) even[n / 2] = src[n - 1];
}

/// y[i] = the larger of a[i] and b[i], a[i] on ties, NaN when either is NaN (MaxPool's exact
/// semantics for two taps in order).
inline void maxNanScalar(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = b[i] > a[i] || b[i] != b[i] ? b[i] : a[i];
}

/// Row loops of the pooling and LRN kernels, per ISA (same files as the micro-kernels).
struct RowOps {
  /// dst[i] = src[i * sw] for i < n (never reads past src[(n - 1) * sw]).
  void (*gatherStrided)(float* dst, const float* src, int64_t n, int64_t sw);
  /// even[i] = src[2 i], odd[i] = src[2 i + 1] for the n floats of src (reads and writes
  /// nothing past them).
  void (*deinterleave2)(const float* src, int64_t n, float* even, float* odd);
  /// y[i] = x[i] / (bias + scale * t[i])^0.75 for i < n (LRN with beta 0.75).
  void (*lrnRow075)(float* y, const float* x, const float* t, int64_t n, float bias, float scale);
  /// Up to kDepthwiseRows output rows of a depthwise convolution (see DepthwiseRows).
  void (*depthwiseRows)(const DepthwiseRows& a);
  /// The same from the unpadded input rows in place (DepthwiseRows::inW, padL): no row copies.
  /// Dilation 1, sh = sw in {1, 2}, 3x3, 5x5 or 7x7 at stride 1, 3x3 or 5x5 at stride 2
  /// (depthwiseDirectFits); nullptr where the path has none (only AVX-512 has masked loads).
  void (*depthwiseRowsDirect)(const DepthwiseRows& a);
  /// Small planes depthwiseLanes channels at a time (see DepthwiseChannels); nullptr on the
  /// portable path.
  void (*depthwiseChannels)(const DepthwiseChannels& a);
  int depthwiseLanes;
  /// One MaxPool output plane y[oh][ow] from a -inf-padded input plane p (row stride pw, the
  /// windows' extent plus 32 * sw floats of slack right of each row and one row below: see
  /// PoolKernel), no NaN in it (the caller checks).
  void (*maxPoolPlane)(const float* p, int64_t pw, const DepthwiseShape& s, float* y);
  /// MaxPool 3x3, stride 1 or 2 (both axes), no dilation (ResNet's stem pool, GoogLeNet's
  /// branch pools) straight from the unpadded plane x [h][w], separably: each input row's
  /// 3-column maxima once (hbuf: 3 rows of roundUp(ow, 16) floats, 64-byte aligned), then the
  /// maximum of 3 such rows. Output (oy, ox) covers rows s oy - padT + {0, 1, 2} and columns
  /// s ox - padL + {0, 1, 2}, those outside the plane left out (padT, padL: 0 or 1; any
  /// padB/padR/ceil_mode through oh, ow). Returns false, y unspecified, when a value it read is
  /// NaN (the caller then runs its exact loop). nullptr where the path has none.
  bool (*maxPool3x3)(const float* x, int64_t h, int64_t w, int64_t stride, int64_t padT, int64_t padL, int64_t oh, int64_t ow,
                     float* y, float* hbuf);
  /// MaxPool kh x kw, stride 1, no dilation, whose output has the input's size (GoogLeNet's 3x3
  /// branch pools on 28x28..7x7, YOLO's SPPF 5x5 pools): separable and flat over the whole plane
  /// of hw = h * w floats, in blocks of 16 consecutive positions o = oy * w + ox whatever the
  /// row width (no per-row overhead on small maps): hbuf[o] = max over j of x[o + j - padL], then
  /// y[o] = max over i of hbuf[o + (i - padT) * w], each tap a masked load. The masks (PoolKernel
  /// computes them): hmask[j * nb + b] bit l set when o = 16 b + l < hw and column o % w + j -
  /// padL is inside the row; vmask[i * nb + b] when row o / w + i - padT is inside the plane
  /// (nb = ceil(hw / 16)). hbuf: nb * 16 floats. Returns false, y unspecified, when the plane holds
  /// a NaN (the caller runs its exact loop). nullptr where the path has none.
  bool (*maxPoolFlat)(const float* x, int64_t hw, int64_t w, int64_t kh, int64_t kw, int64_t padT, int64_t padL,
                      const uint16_t* hmask, const uint16_t* vmask, float* y, float* hbuf);
  /// AveragePool of the same geometry (Inception's 3x3 branch pools), the same way with sums
  /// (masked-off taps add 0), then y[o] = sum * inv[o] (inv: 1 / the window's element count at
  /// o, nb * 16 floats). NaN and infinities propagate as in any sum. nullptr where the path has none.
  void (*avgPoolFlat)(const float* x, int64_t hw, int64_t w, int64_t kh, int64_t kw, int64_t padT, int64_t padL,
                      const uint16_t* hmask, const uint16_t* vmask, const float* inv, float* y, float* hbuf);
  /// c0[i], c1[i], c2[i] = src[3 i], src[3 i + 1], src[3 i + 2] for i < n (an image's NHWC pixels
  /// to NCHW planes: Transpose of a 3-channel last axis). Reads and writes nothing past them;
  /// nullptr where the path has none.
  void (*deinterleave3)(const float* src, int64_t n, float* c0, float* c1, float* c2);
  /// y[i] = maxNanScalar's larger of a[i] and b[i] for i < n (y may be a or b).
  void (*maxNan)(const float* a, const float* b, float* y, int64_t n);
};
/// Whether RowOps::depthwiseRowsDirect takes this filter (see there).
inline bool depthwiseDirectFits(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  if (dh != 1 || dw != 1 || sh != sw || kh != kw) return false;
  return sh == 1 ? kh == 3 || kh == 5 || kh == 7 : sh == 2 && (kh == 3 || kh == 5);
}
RowOps rowOpsAvx512();
RowOps rowOpsAvx2();
RowOps rowOpsPortable();
/// The row loops of activeIsa().
const RowOps& activeRowOps();

/// Applies the epilogue to an m x n tile held in `tile` (row stride ldt) and stores it to C: the
/// shared tail of every ISA's kernel for partial tiles.
inline void storeTileScalar(const float* tile, int64_t ldt, float* c, int64_t ldc, int m, int n, const TileEpilogue& ep) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float v = tile[i * ldt + j];
      if (ep.accumulate) v += c[i * ldc + j];
      if (ep.last) {
        if (ep.bias) v += ep.bias[i];
        if (ep.colBias) v += ep.colBias[j];
        if (ep.residual) v += ep.residual[i * ep.ldr + j];
        if (ep.clamp) {  // max then min, as Clip (min > max gives max); NaN stays NaN
          v = v < ep.lo ? ep.lo : v;
          v = v > ep.hi ? ep.hi : v;
        }
      }
      c[i * ldc + j] = v;
    }
}

}  // namespace onnxtool::cpu
