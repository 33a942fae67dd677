// conv_winograd.h: the per-ISA inner loops of the Winograd F(4x4, 3x3) convolution
// (kernels_winograd.cpp). One source, conv_winograd_impl.inc, is compiled once per ISA path with
// that path's target flags (CMakeLists.txt): conv_winograd_avx512.cpp (16 float lanes),
// conv_winograd_avx2.cpp (8), conv_winograd_portable.cpp (4); winogradOps() picks the table of
// activeIsa() at run time.
//
// The algorithm (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016): a
// 4x4 block of output pixels ("tile") of a 3x3 stride-1 convolution is
//   Y = A^T [ sum_c (G g_kc G^T) . (B^T d_c B) ] A
// with d_c the 6x6 input patch of channel c under the tile, g_kc the 3x3 filter, "." the
// elementwise product over the 36 positions xi. So the convolution becomes 36 independent GEMMs
//   M[xi][k][t] = sum_c U[xi][k][c] * V[xi][c][t]   (U = transformed weights, V = transformed
// input, t = tile), between an input and an output transform: 36 multiplies per tile and channel
// pair instead of 144. The matrices (interpolation points 0, +-1, +-2, inf):
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
//   G   = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
//   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
//
// Layouts (vectors run over tiles: those of one tile row, or with packTiles those of a block's
// tile rows one after another, so that short rows still fill the vectors):
//   split rows: one zero-padded input row x[0, 4q) stored by phase, s[p * qs + j] = x[4j + p]
//     (p < 4), so that the six columns 4tx + b (b < 6) of a tile are unit-stride vectors over tx;
//   V, M: [xi][channel][column], xi stride ldXi; a tile row's tiles are consecutive columns;
//   U: per xi, panels of mr rows (output channels), k-major over input channels (u[c * mr + i]).
#pragma once

#include <cstdint>

#include "exec/cpu/isa.h"

namespace onnxtool::cpu {

struct WinogradOps {
  Isa isa;
  int width;   ///< float lanes of the transforms: columns they may touch past a tile row's end
  int mr, nr;  ///< the GEMM's register tile: mr output channels x nr columns (tiles)
  /// One input row of n floats, shifted by x0 and zero-padded, split by phase:
  /// s[p * qs + j] = x[4j + p + x0] (0 outside [0, n)) for p < 4, j < nq (a multiple of width).
  void (*splitRow)(const float* x, int64_t x0, int64_t n, int64_t nq, float* s, int64_t qs);
  /// The 6x6 input patches of the tiles [0, tiles) of one tile row, tile-major:
  /// p[(a * 6 + b) * ldp + t] = column 4t + b of split row s[a] (phases qs apart), for t up to
  /// roundUp(tiles, width) (values past `tiles` of no meaning). Packing the tile rows of a block
  /// one after another fills the transforms' vectors when a tile row is short.
  void (*packTiles)(const float* const* s, int64_t qs, int64_t tiles, float* p, int64_t ldp);
  /// V for the tiles [0, tiles) of one channel: s[a] is split input row a of a tile row (a < 6;
  /// phases qs apart, each readable up to column roundUp(tiles, width)), or with qs < 0 packed
  /// patches (packTiles: s[a] = p + a * 6 * ldp, qs = -ldp); writes v[xi * ldXi + t] for
  /// t < roundUp(tiles, width) (the columns past `tiles` get values of no meaning).
  void (*inputTransform)(const float* const* s, int64_t qs, int64_t tiles, float* v, int64_t ldXi);
  /// c[i * ldc + j] (+)= sum_{k < kc} a[k * mr + i] * b[k * ldb + j] for i < mr, j < ncols
  /// (ncols a multiple of nr); `accumulate` adds to c.
  void (*gemm)(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t ncols, bool accumulate);
  /// The output transform of one output channel's tiles [0, tiles), reading m[xi * ldXi + t]
  /// for t < tiles: writes the four output rows of a tile row, out[r * ldo + 4t + j] (r, j < 4),
  /// for t < roundUp(tiles, width); or with ldo < 0 the 4x4 outputs tile-major,
  /// out[(r * 4 + j) * -ldo + t] (unpackTiles then makes the rows of each tile row).
  void (*outputTransform)(const float* m, int64_t ldXi, int64_t tiles, float* out, int64_t ldo);
  /// The output rows of the tiles [0, tiles) from tile-major outputs y (rows ldy apart, read for
  /// t < tiles only): out[r * ldo + 4t + j] = y[(r * 4 + j) * ldy + t], t < roundUp(tiles, width).
  void (*unpackTiles)(const float* y, int64_t ldy, int64_t tiles, float* out, int64_t ldo);
  /// y[i] = x[i] + bias (+ res[i] when not null), then clamped to [lo, hi] when `clamp`
  /// (max then min, NaN kept), for i < n.
  /// Whether |x[i]| < limit for every i < n (false when one is NaN).
  bool (*allBelow)(const float* x, int64_t n, float limit);
  void (*epilogueRow)(const float* x, float bias, const float* res, float* y, int64_t n, bool clamp, float lo, float hi);
  /// U = G g G^T of the m x c filters w ([m][c][3][3]) in double, rounded to float, stored as
  /// u[((xi * kPanels + k / mr) * c + ci) * mr + k % mr] (xi < 36); rows of the last panel past
  /// m are left as they are (zero in a fresh buffer).
  void (*transformWeights)(const float* w, int64_t m, int64_t c, int64_t kPanels, float* u);
};

const WinogradOps& winogradOpsPortable();
#if defined(__x86_64__) || defined(__i386__)
const WinogradOps& winogradOpsAvx2();
const WinogradOps& winogradOpsAvx512();
#endif
/// The table of one ISA path (tests); a path this CPU lacks must not be called.
const WinogradOps& winogradOpsFor(Isa isa);
/// The table of activeIsa().
const WinogradOps& winogradOps();

}  // namespace onnxtool::cpu
