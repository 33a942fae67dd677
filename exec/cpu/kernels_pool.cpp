// kernels_pool.cpp: 2-D MaxPool and AveragePool (pads, strides, dilations for MaxPool; the
// output size, and so ceil_mode, comes from shape inference) and GlobalAveragePool, NCHW.
// Row-wise loops without bounds tests inside; MaxPool on a padded plane copy (see PoolKernel),
// 3x3 stride 1 or 2 separably straight from the input where the ISA path has it (RowOps::maxPool3x3),
// stride 1 with the input's size separably and flat over the plane (RowOps::maxPoolFlat).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/cpu/conv_common.h"
#include "exec/cpu/conv_microkernels.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/kernels_nchwc.h"

namespace onnxtool::cpu {

namespace {

struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, dh, dw, padT, padL, padB, padR;
};

/// dst[0, n) = src[0, n); whether any of them is NaN (vectorised at the build's baseline: the
/// loop is bound by reading the plane).
bool copyFindNan(float* dst, const float* src, int64_t n) {
  typedef float V __attribute__((vector_size(16)));
  typedef int32_t M __attribute__((vector_size(16)));
  M any{};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    V v;
    std::memcpy(&v, src + i, sizeof v);
    std::memcpy(dst + i, &v, sizeof v);
    any |= v != v;
  }
  bool nan = (any[0] | any[1] | any[2] | any[3]) != 0;
  for (; i < n; ++i) {
    dst[i] = src[i];
    nan = nan || src[i] != src[i];
  }
  return nan;
}

/// Max/AveragePool over output rows: each valid (kernel row, kernel column) tap updates the
/// range of output columns it covers, without bounds tests in the inner loop (precomputed per
/// kernel column), so the unit-stride case vectorises. The windows' element counts are
/// separable: (valid rows of oy) x (valid columns of ox).
class PoolKernel : public CpuKernel {
 public:
  PoolKernel(PoolGeometry g, bool max, bool countIncludePad, int threads)
      : g_(g), max_(max), countPad_(countIncludePad), threads_(std::max(threads, 1)) {
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      int64_t off = kj * g.dw - g.padL;
      int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
      int64_t hi = g.w - off <= 0 ? 0 : (g.w - off - 1) / g.sw + 1;
      lo = std::min(lo, g.ow);
      colLo_.push_back(lo);
      colHi_.push_back(std::clamp(hi, lo, g.ow));
    }
    for (int64_t ox = 0; ox < g.ow; ++ox) colCount_.push_back(count(ox, g.sw, g.padL, g.padR, g.kw, g.w));
    // MaxPool's padded plane: the windows' extent, 32 * sw floats of slack right of each row
    // and one row below (whole-vector loads of a row's tail stay inside).
    shape_ = {g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.oh, g.ow};
    ph_ = std::max<int64_t>(0, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1);
    pw_ = std::max<int64_t>(0, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1) + 32 * g.sw;
    planeFloats_ = max ? roundUp((ph_ + 1) * pw_, 16) : 0;
    // 3x3 stride 1 or 2 (ResNet's, GoogLeNet's pools): separable, straight from the input,
    // when the path has it.
    direct3x3_ = max && g.kh == 3 && g.kw == 3 && g.sh == g.sw && (g.sh == 1 || g.sh == 2) && g.dh == 1 && g.dw == 1 &&
                 g.padT >= 0 && g.padT <= 1 && g.padL >= 0 && g.padL <= 1 && activeRowOps().maxPool3x3;
    if (direct3x3_) planeFloats_ = 3 * roundUp(g.ow, 16);
    // Stride 1 with the input's size (GoogLeNet's branch pools, YOLO's SPPF): separable and
    // flat over the plane, masks per tap and block of 16 positions computed here. Min latency,
    // 1 thread, Sapphire Rapids, against the kernels before: 3x3 on 832x7x7 68 -> 25 us, 528x14x14
    // 102 -> 41, 480x28x28 220 -> 154, 192x56x56 377 -> 239; 64x112x112 316 -> 359 (the 3x3
    // row kernel keeps planes over 64x64); 5x5 on 256x20x20 (SPPF) 307 -> 58 (ONNX Runtime 114).
    // ONNXTOOL_POOL_FLAT=0 turns it off (measurements).
    const char* env = std::getenv("ONNXTOOL_POOL_FLAT");
    // AveragePool of that geometry too (Inception-v3's 3x3 branch pools on 35x35, 17x17, 8x8:
    // 1.16 ms a call on the row loop below, 11.5% of the model), the sums scaled by 1 / count.
    flat_ = g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.oh == g.h && g.ow == g.w && g.padT >= 0 &&
            g.padT < g.kh && g.padL >= 0 && g.padL < g.kw && g.h * g.w > 0 &&
            (max ? activeRowOps().maxPoolFlat != nullptr : activeRowOps().avgPoolFlat != nullptr) &&
            !(direct3x3_ && g.h * g.w > 4096) && !(env && std::string(env) == "0");
    if (flat_) {
      direct3x3_ = false;
      const int64_t hw = g.h * g.w, nb = (hw + 15) / 16;
      hmask_.assign(static_cast<size_t>(g.kw * nb), 0);
      vmask_.assign(static_cast<size_t>(g.kh * nb), 0);
      for (int64_t o = 0; o < hw; ++o) {
        const int64_t oy = o / g.w, ox = o % g.w, b = o / 16, bit = o % 16;
        for (int64_t j = 0; j < g.kw; ++j)
          if (ox + j - g.padL >= 0 && ox + j - g.padL < g.w) hmask_[static_cast<size_t>(j * nb + b)] |= static_cast<uint16_t>(1u << bit);
        for (int64_t i = 0; i < g.kh; ++i)
          if (oy + i - g.padT >= 0 && oy + i - g.padT < g.h) vmask_[static_cast<size_t>(i * nb + b)] |= static_cast<uint16_t>(1u << bit);
      }
      planeFloats_ = nb * 16;
      if (!max) {
        inv_.assign(static_cast<size_t>(nb * 16), 0.0f);
        for (int64_t o = 0; o < hw; ++o)
          inv_[static_cast<size_t>(o)] = 1.0f / static_cast<float>(count(o / g.w, 1, g.padT, g.padB, g.kh, g.h) *
                                                                    count(o % g.w, 1, g.padL, g.padR, g.kw, g.w));
      }
    }
    // AveragePool 2x2 stride 2 without pads (DenseNet's transitions): two rows added, their
    // even and odd columns split by RowOps::deinterleave2 and added, times 1/4 (the windows are
    // always full). Before: the generic loop's strided taps and a division per output (128x56x56:
    // 284 us, ONNX Runtime 43).
    // MaxPool 2x2/2 without pads (LeNet/VGG/U-Net-style downsampling) the same way with maxima
    // that propagate NaN (no exact-loop fallback needed). Before: the generic -inf-padded copy
    // and window loop, 9-12 us for LeNet's 8x28x28 and 16x14x14 pools (Zen 2, 1 thread).
    pool2x2_ = !flat_ && !direct3x3_ && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 &&
               g.padT == 0 && g.padL == 0 && g.padB == 0 && g.padR == 0 && g.oh == g.h / 2 && g.ow == g.w / 2 && g.ow > 0;
    // Even widths: the plane's row sums (maxima) contiguous, so that one deinterleave and one
    // scaling pass cover the whole plane (small maps: no per-row calls).
    if (pool2x2_) planeFloats_ = g.w % 2 == 0 ? 2 * roundUp(g.oh * g.w, 16) : 4 * roundUp(g.ow, 16);
  }
  std::string variant() const override { return flat_ ? ".flat" : direct3x3_ ? ".3x3" : pool2x2_ ? ".2x2" : ""; }
  /// MaxPool: a padded plane per thread.
  size_t workspaceBytes() const override { return static_cast<size_t>(threadSliceFloats(planeFloats_) * threads_) * sizeof(float); }
  /// Planes split across threads where there is enough to read (~64 KiB a thread at least).
  void compute(const CpuComputeArgs& args) const override {
    // (the flat kernel reads a plane about twice as fast: ~128 KiB a thread at least; on 832x7x7
    // and 528x14x14 a second thread gained nothing measurable, on 480x28x28 213 -> 146 us)
    const int threads = g_.planes * g_.h * g_.w >= (flat_ ? 2 * 65536 : 2 * 16384) ? threads_ : 1;
    parallelRanges(args.pool, threads, g_.planes, 1, [&](int64_t b, int64_t e, int part) {
      computePlanes(args, b, e, static_cast<float*>(args.workspace) + part * threadSliceFloats(planeFloats_));
    });
  }

 private:
  /// Planes [begin, end); `padded`: planeFloats_ floats (MaxPool).
  void computePlanes(const CpuComputeArgs& args, int64_t begin, int64_t end, float* padded) const {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    const float init = max_ ? -std::numeric_limits<float>::infinity() : 0.f;
    const RowOps& rows = activeRowOps();
    if (max_ && !direct3x3_ && !flat_ && !pool2x2_) std::fill(padded, padded + planeFloats_, init);
    for (int64_t p = begin; p < end; ++p) {
      const float* xp = x + p * g_.h * g_.w;
      bool nan = false;
      if (pool2x2_ && g_.w % 2 == 0) {
        const int64_t n = g_.oh * g_.w;
        float* sum = padded;
        float* even = padded + roundUp(n, 16);
        float* odd = even + n / 2;
        for (int64_t oy = 0; oy < g_.oh; ++oy) {
          const float* r0 = xp + 2 * oy * g_.w;
          const float* r1 = r0 + g_.w;
          float* so = sum + oy * g_.w;
          if (max_)
            rows.maxNan(r0, r1, so, g_.w);
          else
            for (int64_t i = 0; i < g_.w; ++i) so[i] = r0[i] + r1[i];
        }
        rows.deinterleave2(sum, n, even, odd);
        float* out = y + p * g_.oh * g_.ow;
        if (max_)
          rows.maxNan(even, odd, out, n / 2);
        else
          for (int64_t i = 0; i < n / 2; ++i) out[i] = (even[i] + odd[i]) * 0.25f;
        continue;
      }
      if (pool2x2_) {
        float* sum = padded;
        float* even = padded + 2 * roundUp(g_.ow, 16);
        float* odd = even + roundUp(g_.ow, 16);
        for (int64_t oy = 0; oy < g_.oh; ++oy) {
          const float* r0 = xp + 2 * oy * g_.w;
          const float* r1 = r0 + g_.w;
          if (max_)
            rows.maxNan(r0, r1, sum, 2 * g_.ow);
          else
            for (int64_t i = 0; i < 2 * g_.ow; ++i) sum[i] = r0[i] + r1[i];
          rows.deinterleave2(sum, 2 * g_.ow, even, odd);
          float* out = y + (p * g_.oh + oy) * g_.ow;
          if (max_)
            rows.maxNan(even, odd, out, g_.ow);
          else
            for (int64_t ox = 0; ox < g_.ow; ++ox) out[ox] = (even[ox] + odd[ox]) * 0.25f;
        }
        continue;
      }
      if (flat_ && !max_) {
        rows.avgPoolFlat(xp, g_.h * g_.w, g_.w, g_.kh, g_.kw, g_.padT, g_.padL, hmask_.data(), vmask_.data(), inv_.data(),
                         y + p * g_.oh * g_.ow, padded);
        continue;
      }
      if (flat_) {
        if (rows.maxPoolFlat(xp, g_.h * g_.w, g_.w, g_.kh, g_.kw, g_.padT, g_.padL, hmask_.data(), vmask_.data(),
                             y + p * g_.oh * g_.ow, padded))
          continue;
        nan = true;  // the exact loop below
      } else if (direct3x3_) {
        if (rows.maxPool3x3(xp, g_.h, g_.w, g_.sh, g_.padT, g_.padL, g_.oh, g_.ow, y + p * g_.oh * g_.ow, padded)) continue;
        nan = true;  // the exact loop below
      } else if (max_) {  // on a -inf-padded copy, each output vector held in a register over the taps
        // Padded (py, px) = input (py - padT, px - padL); only the image's rows and columns
        // inside the windows' extent are copied (a NaN elsewhere is in no window), the rest
        // stays -inf from the fill above. The copy tests for NaN on the way (one pass over the
        // plane); a NaN sends the plane to the exact loop below.
        const int64_t x0 = std::max<int64_t>(0, -g_.padL), x1 = std::min(g_.w, pw_ - 32 * g_.sw - g_.padL);
        for (int64_t py = 0; py < ph_; ++py) {
          const int64_t iy = py - g_.padT;
          if (iy < 0 || iy >= g_.h || x1 <= x0) continue;
          nan |= copyFindNan(padded + py * pw_ + x0 + g_.padL, xp + iy * g_.w + x0, x1 - x0);
        }
        if (!nan) {
          rows.maxPoolPlane(padded, pw_, shape_, y + p * g_.oh * g_.ow);
          continue;
        }
      }
      for (int64_t oy = 0; oy < g_.oh; ++oy) {
        float* out = y + (p * g_.oh + oy) * g_.ow;
        std::fill(out, out + g_.ow, init);
        for (int64_t ki = 0; ki < g_.kh; ++ki) {
          const int64_t iy = oy * g_.sh - g_.padT + ki * g_.dh;
          if (iy < 0 || iy >= g_.h) continue;
          const float* row = xp + iy * g_.w;
          for (int64_t kj = 0; kj < g_.kw; ++kj) {
            const int64_t off = kj * g_.dw - g_.padL, lo = colLo_[static_cast<size_t>(kj)], hi = colHi_[static_cast<size_t>(kj)];
            if (max_ && nan) {  // exact NaN propagation: a NaN input wins, a NaN maximum stays
              for (int64_t ox = lo; ox < hi; ++ox) {
                float v = row[ox * g_.sw + off];
                out[ox] = out[ox] < v || v != v ? v : out[ox];
              }
            } else {
              if (g_.sw == 1)
                for (int64_t ox = lo; ox < hi; ++ox) out[ox] += row[ox + off];
              else
                for (int64_t ox = lo; ox < hi; ++ox) out[ox] += row[ox * g_.sw + off];
            }
          }
        }
        if (!max_) {
          const float rows = static_cast<float>(count(oy, g_.sh, g_.padT, g_.padB, g_.kh, g_.h));
          for (int64_t ox = 0; ox < g_.ow; ++ox) out[ox] /= rows * static_cast<float>(colCount_[static_cast<size_t>(ox)]);
        }
      }
    }
  }

  /// Elements of window o along one axis: valid input positions, or with count_include_pad the
  /// window clipped to the padded input (AveragePool has no dilation).
  int64_t count(int64_t o, int64_t s, int64_t padBegin, int64_t padEnd, int64_t k, int64_t in) const {
    int64_t start = o * s - padBegin;
    if (countPad_) return std::min(start + k, in + padEnd) - std::max(start, -padBegin);
    return std::max<int64_t>(0, std::min(start + k, in) - std::max<int64_t>(start, 0));
  }

  PoolGeometry g_;
  bool max_, countPad_;
  int threads_;
  std::vector<int64_t> colLo_, colHi_, colCount_;
  DepthwiseShape shape_;
  int64_t ph_ = 0, pw_ = 0, planeFloats_ = 0;
  bool direct3x3_ = false;  ///< RowOps::maxPool3x3 (workspace: its 3 rows of maxima)
  bool flat_ = false;       ///< RowOps::maxPoolFlat (workspace: the plane's row maxima)
  bool pool2x2_ = false;    ///< 2x2/2, no pads (workspace: a row sum or maximum, its even and odd columns)
  std::vector<uint16_t> hmask_, vmask_;
  std::vector<float> inv_;  ///< flat AveragePool: 1 / the window's element count per position
};

std::unique_ptr<CpuKernel> createPool(const CpuNodeInfo& info, bool max) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (n.outputs().size() > 1 && n.outputs()[1]) return nullptr;  // MaxPool's indices: reference kernel
  const auto& x = info.in(0).dims;
  const auto& y = info.out(0).dims;
  auto k = n.attrInts("kernel_shape");
  if (x.size() != 4 || y.size() != 4 || k.size() != 2) return nullptr;
  if (n.attrString("auto_pad", "NOTSET") != "NOTSET") return nullptr;
  auto strides = n.attrInts("strides", {1, 1}), dil = n.attrInts("dilations", {1, 1});
  auto pads = n.attrInts("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) return nullptr;
  if (!max && (dil[0] != 1 || dil[1] != 1 || n.attrInt("ceil_mode", 0) != 0)) return nullptr;
  PoolGeometry g{x[0] * x[1], x[2], x[3], y[2], y[3], k[0], k[1], strides[0], strides[1], dil[0], dil[1],
                 pads[0], pads[1], pads[2], pads[3]};
  return std::make_unique<PoolKernel>(g, max, n.attrInt("count_include_pad", 0) != 0, info.threads);
}

/// GlobalAveragePool: each plane summed by vec.h sum (vectorised, several chains, blocks of
/// float sums added in double), planes split across threads when there is enough to read
/// (~256 KiB a thread).
class GlobalAveragePoolKernel : public CpuKernel {
 public:
  GlobalAveragePoolKernel(int64_t planes, int64_t size, int threads, std::string variant = {})
      : planes_(planes), size_(size), threads_(std::max(threads, 1)), variant_(std::move(variant)) {}
  std::string variant() const override { return variant_; }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    double (*sum)(const float*, int64_t) = vecKernels().sum;
    const int64_t grain = std::max<int64_t>(1, 65536 / size_);  // planes per task
    const int threads = planes_ * size_ >= 2 * 65536 ? threads_ : 1;
    parallelRanges(args.pool, threads, planes_, grain, [&](int64_t b, int64_t e, int) {
      for (int64_t p = b; p < e; ++p) y[p] = static_cast<float>(sum(x + p * size_, size_) / static_cast<double>(size_));
    });
  }

 private:
  int64_t planes_, size_;
  int threads_;
  std::string variant_;
};

}  // namespace

std::unique_ptr<CpuKernel> createMaxPool(const CpuNodeInfo& info) { return createPool(info, true); }
std::unique_ptr<CpuKernel> createAveragePool(const CpuNodeInfo& info) {
  // A window that is the whole plane without padding (the 7x7 pool before a classifier that
  // TensorFlow and Caffe exports write instead of GlobalAveragePool): a plane's mean, summed as
  // GlobalAveragePool sums (vectorised, not one tap at a time).
  const Node& n = *info.node;
  const auto& x = info.in(0).dims;
  const auto& y = info.out(0).dims;
  const auto k = n.attrInts("kernel_shape");
  const auto pads = n.attrInts("pads", {0, 0, 0, 0});
  const bool refs = std::any_of(n.attributes.begin(), n.attributes.end(), [](const Attribute& a) { return !a.refAttrName.empty(); });
  if (!refs && x.size() == 4 && y.size() == 4 && k.size() == 2 && k[0] == x[2] && k[1] == x[3] && y[2] == 1 && y[3] == 1 &&
      x[2] * x[3] > 0 && std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) &&
      n.attrString("auto_pad", "NOTSET") != "SAME_UPPER" && n.attrString("auto_pad", "NOTSET") != "SAME_LOWER")
    return std::make_unique<GlobalAveragePoolKernel>(x[0] * x[1], x[2] * x[3], info.threads, ".plane");
  return createPool(info, false);
}

std::unique_ptr<CpuKernel> createGlobalAveragePool(const CpuNodeInfo& info) {
  const auto& x = info.in(0).dims;
  if (x.size() < 3) return nullptr;
  int64_t size = 1;
  for (size_t i = 2; i < x.size(); ++i) size *= x[i];
  if (size == 0) return nullptr;
  auto k = std::make_unique<GlobalAveragePoolKernel>(x[0] * x[1], size, info.threads);
  if (info.nchwc && x.size() == 4) k->nchwcTwin = makeNchwcGlobalAveragePool(x[0], x[1], size, info.threads);
  return k;
}

}  // namespace onnxtool::cpu
