// kernels_winograd.cpp: cpu.conv.f32.winograd, the 3x3 stride-1 convolution (group 1, no
// dilation, any pads) by Winograd F(4x4, 3x3) (the algorithm and layouts: conv_winograd.h).
// Weights are transformed once at prepare (in double, rounded once to float) and packed into
// the GEMM's row panels. A run goes over blocks of tiles (4x4 output pixels, numbered image by
// image, row by row): transform the block's input (V), 36 GEMMs (M = U V), transform M back into
// output rows with the fused epilogue (bias, a folded BatchNormalization, residual, Relu/Clip,
// then an activation: SiLU, HardSwish, ...).
// A block's V and M are sized to stay in L2. Threads take whole ranges of tiles when there are
// enough of them (no barrier inside), else split each phase of each block: channels, (xi,
// row panel) pairs, output channels.
//
// Precision: the transforms scale values by up to 5 (B^T) and 8 (A^T) before they cancel, and
// mix a tile's whole 6x6 input patch, so the rounding error of an output follows the size of its
// tile rather than of its own window: on random data (tests/unit/test_cpu_conv.cpp, every ISA
// path) it stays below 2e-6 x the largest sum |w x| over the taps of an output of the same 4x4
// tile; the tests assert 1e-4 x that. ResNet-50 (all 3x3 stride-1 convolutions on this kernel)
// gives ONNX Runtime's logits within 5e-5 (logits up to ~100). ONNXTOOL_WINOGRAD=never turns
// the kernel off (always: every convolution it can run, for tests).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exec/cpu/conv_common.h"
#include "exec/cpu/conv_winograd.h"
#include "exec/cpu/cpu_kernel.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/prefaulted.h"

namespace onnxtool::cpu {

namespace {

/// Inputs of this magnitude or more (and NaN, infinities) run on the direct fallback: the
/// transforms multiply by up to 100 (B^T twice) before the GEMM sums thousands of terms.
constexpr float kFiniteLimit = 1e30f;

/// Floats of a block's V and M together (the threads share each block's phases; larger blocks
/// read the transformed weights fewer times).
constexpr int64_t kPhaseBlockFloats = 768 * 1024;
/// Split input rows kept per channel: a tile row reads six, the next one shares two of them.
constexpr int64_t kSlots = 8;
/// Input channels per GEMM pass (the panels of U and V it reads stay in L1/L2).
constexpr int64_t kChannelBlock = 256;

class WinogradConvKernel : public CpuKernel {
 public:
  WinogradConvKernel(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights, const uint8_t* rawWeights,
                     std::vector<float> scale, std::vector<float> ownBias, const std::string& suffix, int threads)
      : g_(g), ep_(ep), ops_(winogradOps()), ownBias_(std::move(ownBias)),
        variant_(".winograd." + std::string(isaName(ops_.isa)) + suffix), threads_(std::max(threads, 1)),
        rawWeights_(rawWeights), scale_(std::move(scale)) {
    if (ep.act != VecUnary::Count) act_ = vecKernels().unary[static_cast<int>(ep.act)];
    const int64_t wd = ops_.width, mr = ops_.mr, nr = ops_.nr;
    tx_ = (g.ow + 3) / 4;
    ty_ = (g.oh + 3) / 4;
    tilesPerImage_ = tx_ * ty_;
    tiles_ = g.n * tilesPerImage_;
    kPanels_ = (g.m + mr - 1) / mr;
    kpad_ = kPanels_ * mr;
    qs_ = roundUp(tx_ + wd + 1, wd);
    ldo_ = 4 * (tx_ + wd);
    // Tiles per block: a multiple of nr within the budget.
    const int64_t perTile = 36 * (g.c + kpad_);
    tbPhase_ = std::min(std::max<int64_t>(nr, kPhaseBlockFloats / perTile / nr * nr), roundUp(std::max<int64_t>(tiles_, 1), nr));
    tcols_ = roundUp(tbPhase_, nr) + wd;
    // Tile rows that would leave the transforms' vectors mostly empty are packed one after
    // another first (28x28 maps: 7 tiles a row, 14x14: 4, on 16 lanes).
    packed_ = tx_ % wd != 0 && tx_ < 2 * wd;
    // U[xi][panel][c][mr] = (G g G^T)[xi], rows past m zero (conv_winograd.h).
    u_.resize(static_cast<size_t>(36 * kpad_ * g.c));  // zeros (prefaulted.h)
    ops_.transformWeights(weights, g.m, g.c, kPanels_, u_.data());
  }

  /// One block's V and M, then each thread's small buffers (a page apart).
  size_t workspaceBytes() const override { return static_cast<size_t>(vFloats() + mFloats() + threads_ * smallSlice()) * sizeof(float); }

  void compute(const CpuComputeArgs& args) const override {
    if (!ops_.allBelow(static_cast<const float*>(args.inputs[0]), g_.n * g_.c * g_.h * g_.w, kFiniteLimit)) {
      directFallback(args);
      return;
    }
    float* ws = static_cast<float*>(args.workspace);
    // A thread per ~4 MFLOP (of the direct convolution) at most: waking a worker costs microseconds.
    // The threads share each block's three phases (input transforms split by channels, the
    // GEMMs by transform point and output panel, output transforms by output channels). Each
    // thread running whole blocks of its own tiles (removed) read all of the transformed weights
    // per block of a few tiles from L3, both threads at once: 2 threads, Winograd layers only,
    // ResNet-50 batch 8 26.5-26.8 -> 23.5-24.2 ms, batch 1 3.68-3.80 -> 3.49-3.57 ms,
    // DenseNet-121 5.1-5.3 -> 4.4, Inception-v3 9.8-9.9 -> 9.1, GoogLeNet 2.9-3.1 -> 2.5.
    const int threads = static_cast<int>(std::clamp<double>(flops() / 4e6, 1, threads_));
    for (int64_t t = 0; t < tiles_; t += tbPhase_) runBlock(args, t, std::min(tiles_, t + tbPhase_), ws, args.pool, threads);
  }

  double flops() const override { return 2.0 * g_.n * g_.m * g_.c * 9 * g_.oh * g_.ow; }
  /// The direct fallback reads the weights' own bytes (rawWeights_: input 1 as the plan's model
  /// holds it, cpu.conv taking unalignedConstants) with memcpy: the plan keeps them, in place.
  bool readsInput(size_t i) const override { return i != 2 || ownBias_.empty(); }
  bool readsInputUnaligned(size_t i) const override { return i == 1; }
  std::string variant() const override { return variant_; }

 private:
  int64_t vFloats() const { return 36 * g_.c * tcols_; }
  int64_t mFloats() const { return 36 * kpad_ * tcols_; }
  /// Per part: V, M, the ring of split rows, a zero split row, four output rows, the packed
  /// input patches or outputs of a block (packed_).
  int64_t smallFloats() const { return (kSlots + 1) * 4 * qs_ + 4 * ldo_ + (packed_ ? 36 * tcols_ : 0); }
  int64_t smallSlice() const { return threadSliceFloats(smallFloats()); }  // a page apart

  /// The direct convolution, for inputs holding NaN, an infinity or a magnitude the transforms
  /// could overflow: there a tile's transforms would spread the NaN to all of its 16 outputs (and
  /// turn infinities into NaN), where a direct sum keeps them to the windows that hold them.
  void directFallback(const CpuComputeArgs& args) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* bias = !ownBias_.empty() ? ownBias_.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t pix = g_.oh * g_.ow;
    for (int64_t img = 0; img < g_.n; ++img)
      for (int64_t k = 0; k < g_.m; ++k) {
        float* out = y + (img * g_.m + k) * pix;
        std::fill(out, out + pix, 0.f);
        for (int64_t c = 0; c < g_.c; ++c) {
          const float* plane = x + (img * g_.c + c) * g_.h * g_.w;
          float w[9];  // the model's own bytes: maybe unaligned
          std::memcpy(w, rawWeights_ + (k * g_.c + c) * 9 * sizeof(float), sizeof w);
          for (int64_t a = 0; a < 3; ++a)
            for (int64_t b = 0; b < 3; ++b) {
              // Output columns whose input column ox - padL + b lies inside the row.
              const int64_t off = b - g_.padL, lo = std::clamp<int64_t>(-off, 0, g_.ow), hi = std::clamp<int64_t>(g_.w - off, lo, g_.ow);
              for (int64_t oy = 0; oy < g_.oh; ++oy) {
                const int64_t iy = oy - g_.padT + a;
                if (iy < 0 || iy >= g_.h) continue;
                const float* row = plane + iy * g_.w;
                float* o = out + oy * g_.ow;
                for (int64_t ox = lo; ox < hi; ++ox) o[ox] += w[a * 3 + b] * row[ox + off];
              }
            }
        }
        if (!scale_.empty())
          for (int64_t i = 0; i < pix; ++i) out[i] *= scale_[static_cast<size_t>(k)];
        for (int64_t r = 0; r < g_.oh; ++r) {
          const int64_t off = ((img * g_.m + k) * g_.oh + r) * g_.ow;
          ops_.epilogueRow(y + off, bias ? bias[k] : 0.f, res ? res + off : nullptr, y + off, g_.ow, ep_.clamp, ep_.lo, ep_.hi);
          if (act_) act_(y + off, y + off, g_.ow);
        }
      }
  }

  /// Calls fn(image, tile row, first tile column, tiles, column in the block) for each tile row
  /// segment of the tiles [t0, t1).
  template <class F>
  void forSegments(int64_t t0, int64_t t1, F&& fn) const {
    for (int64_t t = t0; t < t1;) {
      const int64_t img = t / tilesPerImage_, rem = t % tilesPerImage_, ty = rem / tx_, tx = rem % tx_;
      const int64_t seg = std::min(tx_ - tx, t1 - t);
      fn(img, ty, tx, seg, t - t0);
      t += seg;
    }
  }

  /// Tiles [t0, t1): input transform, GEMMs, output transform. `ws` is part 0's workspace; with
  /// a pool each phase is split over `threads` parts (part p's scratch rows in part p's slice).
  void runBlock(const CpuComputeArgs& args, int64_t t0, int64_t t1, float* ws, ThreadPool* pool, int threads) const {
    float* v = ws;
    float* m = ws + vFloats();
    const int64_t cols = roundUp(t1 - t0, ops_.nr);
    auto small = [&](int part) { return ws + vFloats() + mFloats() + part * smallSlice(); };
    parallelRanges(pool, threads, g_.c, 1, [&](int64_t b, int64_t e, int part) { inputPhase(args, t0, t1, b, e, v, small(part)); });
    parallelRanges(pool, threads, 36 * kPanels_, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t xi = item / kPanels_, kp = item % kPanels_;
        for (int64_t cb = 0; cb < g_.c; cb += kChannelBlock) {
          const int64_t kc = std::min(kChannelBlock, g_.c - cb);
          ops_.gemm(kc, u_.data() + ((xi * kPanels_ + kp) * g_.c + cb) * ops_.mr, v + (xi * g_.c + cb) * tcols_, tcols_,
                    m + (xi * kpad_ + kp * ops_.mr) * tcols_, tcols_, cols, cb > 0);
        }
      }
    });
    parallelRanges(pool, threads, g_.m, 1, [&](int64_t b, int64_t e, int part) { outputPhase(args, t0, t1, b, e, m, small(part)); });
  }

  /// V for channels [cb, ce) of the tiles [t0, t1).
  void inputPhase(const CpuComputeArgs& args, int64_t t0, int64_t t1, int64_t cb, int64_t ce, float* v, float* scratch) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    // Scratch: kSlots split rows (a ring keyed by padded row index), and a split row of zeros
    // (rows above and below the image).
    float* slots = scratch;
    float* zeros = scratch + kSlots * 4 * qs_;
    float* patches = scratch + (kSlots + 1) * 4 * qs_ + 4 * ldo_;
    // Split columns q < nqs hold image data or left/right padding; those past stay zero.
    const int64_t nqs = std::min(qs_ / ops_.width * ops_.width, roundUp((g_.padL + g_.w + 3) / 4, ops_.width));
    std::fill(zeros, zeros + 4 * qs_, 0.f);
    for (int64_t sl = 0; sl < kSlots; ++sl)
      for (int64_t p = 0; p < 4; ++p) std::fill(slots + (sl * 4 + p) * qs_ + nqs, slots + (sl * 4 + p + 1) * qs_, 0.f);
    for (int64_t c = cb; c < ce; ++c) {
      int64_t slotRow[kSlots], slotImg = -1;
      forSegments(t0, t1, [&](int64_t img, int64_t ty, int64_t tx, int64_t seg, int64_t col) {
        if (img != slotImg) std::fill(slotRow, slotRow + kSlots, -1), slotImg = img;
        const float* plane = x + (img * g_.c + c) * g_.h * g_.w;
        const float* rows[6];
        for (int64_t a = 0; a < 6; ++a) {
          const int64_t py = ty * 4 + a, iy = py - g_.padT;
          if (iy < 0 || iy >= g_.h) {
            rows[a] = zeros + tx;
            continue;
          }
          float* slot = slots + py % kSlots * 4 * qs_;
          if (slotRow[py % kSlots] != py) {
            ops_.splitRow(plane + iy * g_.w, -g_.padL, g_.w, nqs, slot, qs_);
            slotRow[py % kSlots] = py;
          }
          rows[a] = slot + tx;
        }
        if (packed_) ops_.packTiles(rows, qs_, seg, patches + col, tcols_);
        else ops_.inputTransform(rows, qs_, seg, v + c * tcols_ + col, g_.c * tcols_);
      });
      if (packed_) {
        const float* rows[6];
        for (int64_t a = 0; a < 6; ++a) rows[a] = patches + a * 6 * tcols_;
        ops_.inputTransform(rows, -tcols_, t1 - t0, v + c * tcols_, g_.c * tcols_);
      }
    }
    // The GEMM reads columns up to the next multiple of nr: zeros past the block's tiles (never
    // stale arena bytes, which could hold denormals that slow every FMA touching them).
    const int64_t e = t1 - t0, cols = roundUp(e, ops_.nr);
    if (cols > e)
      for (int64_t c = cb; c < ce; ++c)
        for (int64_t xi = 0; xi < 36; ++xi) std::fill(v + (xi * g_.c + c) * tcols_ + e, v + (xi * g_.c + c) * tcols_ + cols, 0.f);
  }

  /// Output channels [kb, ke) of the tiles [t0, t1), epilogue included.
  void outputPhase(const CpuComputeArgs& args, int64_t t0, int64_t t1, int64_t kb, int64_t ke, const float* m, float* scratch) const {
    const float* bias = !ownBias_.empty() ? ownBias_.data() : args.inputs.size() > 2 ? static_cast<const float*>(args.inputs[2]) : nullptr;
    const float* res = ep_.residual ? static_cast<const float*>(args.inputs[3]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    float* rows = scratch + (kSlots + 1) * 4 * qs_;
    float* tiles = rows + 4 * ldo_;
    for (int64_t k = kb; k < ke; ++k) {
      if (packed_) ops_.outputTransform(m + k * tcols_, kpad_ * tcols_, t1 - t0, tiles, -tcols_);
      forSegments(t0, t1, [&](int64_t img, int64_t ty, int64_t tx, int64_t seg, int64_t col) {
        if (packed_) ops_.unpackTiles(tiles + col, tcols_, seg, rows, ldo_);
        else ops_.outputTransform(m + k * tcols_ + col, kpad_ * tcols_, seg, rows, ldo_);
        const int64_t ox = 4 * tx, n = std::min(4 * seg, g_.ow - ox);
        for (int64_t r = 0; r < 4 && ty * 4 + r < g_.oh; ++r) {
          const int64_t off = ((img * g_.m + k) * g_.oh + ty * 4 + r) * g_.ow + ox;
          ops_.epilogueRow(rows + r * ldo_, bias ? bias[k] : 0.f, res ? res + off : nullptr, y + off, n, ep_.clamp, ep_.lo, ep_.hi);
          if (act_) act_(y + off, y + off, n);  // the fused activation (SiLU, HardSwish) on the row just stored
        }
      });
    }
  }

  ConvGeometry g_;
  ConvEpilogue ep_;
  const WinogradOps& ops_;
  std::vector<float> ownBias_;
  std::string variant_;
  int threads_;
  bool packed_ = false;
  int64_t tx_, ty_, tilesPerImage_, tiles_, kPanels_, kpad_, qs_, ldo_, tbPhase_, tcols_;
  const uint8_t* rawWeights_;  ///< the initializer's bytes (the direct fallback's weights)
  std::vector<float> scale_;    ///< a folded BatchNormalization's per-channel scale, or empty
  /// The fused activation after the clamp (SiLU, HardSwish: ConvEpilogue::act), or null.
  void (*act_)(const float*, float*, int64_t) = nullptr;
  PackedFloats u_;
};

}  // namespace

bool winogradApplies(const ConvGeometry& g) {
  if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 || g.group != 1) return false;
  if (g.n * g.oh * g.ow == 0 || g.c == 0 || g.m == 0) return false;
  const char* env = std::getenv("ONNXTOOL_WINOGRAD");
  const std::string mode = env ? env : "";
  if (mode == "never") return false;
  if (mode == "always") return true;
  // Where it measurably beats the packed GEMM (min latency of one Conv+Relu on ResNet-50's
  // shapes, AVX-512, 1 and 2 threads: 56x56x64 2.0x, 28x28x128 1.85x, 14x14x256 1.7x faster;
  // 7x7x512 1.7x slower: 2x2 tiles per image leave the vectors mostly empty and the 4x larger
  // transformed weights are read once per tile). Enough channels for the GEMMs to dominate the
  // transforms, at least 4x4 tiles per image. On AVX-512 not below 5x5 tiles where the direct
  // pixel-major kernel runs (rows of 14+ pixels: kernels_conv.cpp directPixels()): ResNet-50's
  // 14x14x256 convolutions take 1.60 ms there against 1.80 ms on Winograd, whose 4x larger
  // transformed weights (9.4 MB a layer) come from memory each run of the model.
  const int64_t tiles = (g.oh + 3) / 4 * ((g.ow + 3) / 4);
  if (activeIsa() == Isa::Avx512 && tiles < 25 && g.ow >= 14) return false;
  // Nor, there, for one channel panel of outputs (17-32) on maps up to 8x8 tiles: the transforms
  // (per input channel) then outweigh the GEMMs they save (DenseNet-121's 28x28 convolutions,
  // 128 -> 32 channels: 486 us on Winograd, 414 direct in the model; alone, 1 thread: 128 -> 24
  // at 28x28 414 vs 390, 128 -> 32 at 21x21 317 vs 232, 512 -> 32 at 28x28 1876 vs 1578;
  // Winograd still wins at 35x35, 42x42 and 56x56, and with 16 outputs).
  if (activeIsa() == Isa::Avx512 && g.m > 16 && g.m <= 32 && tiles <= 64 && g.ow >= 14) return false;
  return g.c >= 16 && g.m >= 16 && tiles >= 16;
}

std::unique_ptr<CpuKernel> makeWinogradConv(const ConvGeometry& g, const ConvEpilogue& ep, const float* weights,
                                            const uint8_t* rawWeights, const std::vector<float>& scale,
                                            const std::vector<float>& ownBias, const std::string& suffix, int threads) {
  if (!winogradOps().allBelow(weights, g.m * g.c * 9, kFiniteLimit)) return nullptr;
  return std::make_unique<WinogradConvKernel>(g, ep, weights, rawWeights, scale, ownBias, suffix, threads);
}

}  // namespace onnxtool::cpu
