// gemm.h: our single-precision GEMM for the cpu executor's MatMul and Gemm kernels (and the
// gemm-bench tool), Goto/BLIS style on the register-blocked micro-kernels of conv_microkernels.h:
// C[m, n] = epilogue(alpha * op(A)[m, k] * op(B)[k, n] (+ C)), op() an optional transpose.
//   - B in NR-column panels, k-major, in KC-deep blocks: packed once at prepare when it is a
//     constant (PackedB, both transB layouts), else one KC x NC block at a time per call;
//   - A in MR-row panels of an MC x KC block per call (alpha folded in); AVX-512 reads a
//     row-major A with alpha 1 in place instead (TileEpilogue::lda), and a partial last row
//     panel runs on the kernel of its own row count;
//   - the micro-kernel's store applies the cheap epilogue (per-column bias, per-row bias, a
//     residual, a clamp such as ReLU); other activations (vec.h) run on each finished MC x NC
//     block while it is in cache;
//   - work splits over the plan's pool by batch, else over a grid of row and column panels
//     (never over k), each part with its own slice of the caller's workspace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "exec/cpu/conv_microkernels.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/prefaulted.h"
#include "exec/cpu/thread_pool.h"
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

/// The register tile and cache blocks of one ISA path for a GEMM of m rows.
struct GemmConfig {
  GemmMicroKernelInfo mk;
  Isa isa = Isa::Portable;
  int64_t kcMax = 256;  ///< K is cut into equal blocks of at most this depth
  int64_t mc = 144;     ///< rows of a packed A block (a multiple of MR)
  int64_t nc = 1024;    ///< columns of a packed B block when B is packed per call (a multiple of NR)
  /// Work per thread below which fewer threads run (waking a worker costs microseconds); tests
  /// set 0 to split even tiny products.
  double minFlopsPerThread = 2e6;
};

/// The configuration of path `isa` (which must not be above detectedIsa()) for m rows: the
/// micro-kernel that pads m least (1, 2 or 4 rows for skinny products).
GemmConfig gemmConfig(Isa isa, int64_t m);

/// The depth of each K block for a K of k and blocks of at most kcMax (equal blocks; 0 for k 0).
int64_t gemmKc(int64_t k, int64_t kcMax);

/// A constant B packed once: blocks of kc rows of k, each NR-column panels, k-major
/// ([kBlock][panel][kc][NR]); columns past n are zeros.
class PackedB {
 public:
  /// Packs op(B) [k, n] of B (row-major, leading dimension ldb; transB: B is [n, k]) for the
  /// panels of `nr` columns and K blocks of gemmKc(k, kcMax). B's floats are read with memcpy:
  /// `b` may sit at any address (a model file's bytes).
  PackedB(const float* b, int64_t ldb, bool transB, int64_t k, int64_t n, int nr, int64_t kcMax);
  int nr() const { return nr_; }
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t kc() const { return kc_; }
  /// Panel jp of K block p (its depth: min(kc, k - p * kc)).
  const float* panel(int64_t p, int64_t jp) const {
    return data_.data() + p * kc_ * panels_ * nr_ + jp * std::min(kc_, k_ - p * kc_) * nr_;
  }
  size_t bytes() const { return static_cast<size_t>(size_) * sizeof(float); }

 private:

  int nr_;
  int64_t k_, n_, kc_, panels_, size_ = 0;
  PackedFloats data_;
};

/// A constant B of 4-bit codes (weight-only int4: com.microsoft MatMulNBits, or a blocked
/// DequantizeLinear of int4/uint4 weights), kept at about an eighth of its float bytes and
/// dequantized one kc x nc block at a time while the GEMM runs, into the block gemm() packs a
/// non-constant B into (so the float micro-kernels run unchanged; the block is reused by every
/// row block of A). Element (k, n) = (code - zero) * scale, with a scale and a zero point per
/// column and block of `block` rows along K: one rounding, as the reference DequantizeLinear and
/// MatMulNBits compute it.
class PackedB4 {
 public:
  /// From MatMulNBits' layout: `codes` [n][blocks][block / 2] bytes, element k of a block in the
  /// low nibble of byte k / 2 when k is even; `scales` [n][blocks]; `zeros` [n][ceil(blocks /
  /// 2)] bytes packed the same way, or null (zero point 8). blocks = ceil(k / block). The
  /// panels have `nr` columns (the GEMM configuration's), K blocks a multiple of `block` rows
  /// (about kcMax), and `isa` picks the dequantizing loop. Bytes are read with memcpy-safe
  /// accesses (any address).
  PackedB4(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t k, int64_t n, int64_t block, int nr,
           int64_t kcMax, Isa isa);
  int nr() const { return nr_; }
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t kc() const { return kc_; }
  /// Writes K block p, columns [j0, j0 + nc) (j0 a multiple of nr) as float panels of nr
  /// columns, k-major, one after the other (PackedB::panel's layout; columns past n are zeros).
  void unpack(int64_t p, int64_t j0, int64_t nc, float* dst) const;
  size_t bytes() const { return codes_.size() + (scale_.size() + zero_.size()) * sizeof(float); }

  /// Rows of one panel through the path's loop: `rows` rows of nr / 2 bytes each (column c in
  /// the low nibble of byte c, column c + nr / 2 in the high nibble of byte c), every row's
  /// floats (code - zero[c]) * scale[c] written to dst (nr floats a row).
  using RowsFn = void (*)(const uint8_t* codes, int64_t rows, int nr, const float* zero, const float* scale, float* dst);

 private:
  int nr_;
  int64_t k_, n_, block_, kc_, panels_;
  std::vector<uint8_t, PrefaultedAllocator<uint8_t>> codes_;  ///< [kBlock][panel][row][nr / 2]
  /// Per block of `block` rows along K and padded column: [qBlock][panels * nr].
  std::vector<float> scale_, zero_;
  RowsFn rows_;
};

/// The dequantizing loops of PackedB4 per ISA path (gemm_int4.cpp); null where the path has none
/// for this nr (the portable loop then runs).
PackedB4::RowsFn packedB4RowsAvx512(int nr);
PackedB4::RowsFn packedB4RowsAvx2(int nr);

/// The epilogue of a GEMM, in the order applied: + C's prior contents (accumulateC: the caller
/// filled C, e.g. with beta * Gemm's C), + rowBias[i], + colBias[j], + residual[i, j], clamp to
/// [lo, hi], then act (a vec.h function; VecUnary::Count: none).
struct GemmEpilogue {
  bool accumulateC = false;
  const float* rowBias = nullptr;
  const float* colBias = nullptr;
  const float* residual = nullptr;
  int64_t ldr = 0;
  bool clamp = false;
  float lo = 0, hi = 0;
  VecUnary act = VecUnary::Count;
};

/// One GEMM, or a batch of them of one shape.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  bool transA = false;
  float alpha = 1;
  const float* b = nullptr;  ///< unused when packedB is set
  int64_t ldb = 0;
  bool transB = false;
  const PackedB* packedB = nullptr;  ///< packed for this configuration's NR and kcMax
  const PackedB4* packedB4 = nullptr;  ///< or a 4-bit B, for the same NR (b, packedB unused)
  float* c = nullptr;
  int64_t ldc = 0;
  /// Batches: A, B (when not packed) and C of batch i start at aOffsets[i], bOffsets[i] and
  /// i * cStride floats (null offsets: every batch reads the same matrix). The epilogue's
  /// pointers are the same for every batch.
  int64_t batches = 1;
  const int64_t* aOffsets = nullptr;
  const int64_t* bOffsets = nullptr;
  int64_t cStride = 0;
  GemmEpilogue ep;
};

/// Floats of workspace one thread needs for `p` (its packed blocks).
size_t gemmWorkspaceFloats(const GemmConfig& cfg, const GemmProblem& p);

/// Four rows of a row-major matrix (row stride lda), kc columns from s on, times alpha, into a
/// k-major panel of mr rows at d (rows 0..3 of it from d on: d[k * mr + i] = alpha s[i lda + k]);
/// 4 x 4 SSE transposes. Reads s with unaligned loads.
void packRows4(const float* s, int64_t lda, float alpha, int64_t kc, int mr, float* d);

/// Runs `p` on up to `threads` threads of `pool` (inline when null). `workspace` holds
/// threads * gemmWorkspaceFloats(cfg, p) floats, 64-byte aligned. C must not overlap A or B.
void gemm(const GemmConfig& cfg, const GemmProblem& p, ThreadPool* pool, int threads, float* workspace);

}  // namespace onnxtool::cpu
