// kernels_pool.cpp: 2-D MaxPool and AveragePool (pads, strides, dilations for MaxPool; the
// output size, and so ceil_mode, comes from shape inference) and GlobalAveragePool, NCHW.
#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, dh, dw, padT, padL, padB, padR;
};

class PoolKernel : public CpuKernel {
 public:
  PoolKernel(PoolGeometry g, bool max, bool countIncludePad) : g_(g), max_(max), countPad_(countIncludePad) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t p = 0; p < g_.planes; ++p) {
      const float* xp = x + p * g_.h * g_.w;
      float* yp = y + p * g_.oh * g_.ow;
      for (int64_t oy = 0; oy < g_.oh; ++oy)
        for (int64_t ox = 0; ox < g_.ow; ++ox) {
          int64_t y0 = oy * g_.sh - g_.padT, x0 = ox * g_.sw - g_.padL;
          float acc = max_ ? -std::numeric_limits<float>::infinity() : 0.f;
          int64_t count = 0;
          bool nan = false;
          for (int64_t ki = 0; ki < g_.kh; ++ki) {
            int64_t iy = y0 + ki * g_.dh;
            if (iy < 0 || iy >= g_.h) continue;
            for (int64_t kj = 0; kj < g_.kw; ++kj) {
              int64_t ix = x0 + kj * g_.dw;
              if (ix < 0 || ix >= g_.w) continue;
              float v = xp[iy * g_.w + ix];
              if (max_) {
                if (v != v) nan = true;
                acc = std::max(acc, v);
              } else {
                acc += v;
              }
              ++count;
            }
          }
          if (max_) {
            yp[oy * g_.ow + ox] = nan ? std::numeric_limits<float>::quiet_NaN() : acc;
          } else {
            int64_t div = count;
            if (countPad_) {  // the window clipped to the padded input
              int64_t hs = std::max<int64_t>(y0, -g_.padT), he = std::min<int64_t>(y0 + g_.kh, g_.h + g_.padB);
              int64_t ws = std::max<int64_t>(x0, -g_.padL), we = std::min<int64_t>(x0 + g_.kw, g_.w + g_.padR);
              div = (he - hs) * (we - ws);
            }
            yp[oy * g_.ow + ox] = acc / static_cast<float>(div);
          }
        }
    }
  }

 private:
  PoolGeometry g_;
  bool max_, countPad_;
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
  return std::make_unique<PoolKernel>(g, max, n.attrInt("count_include_pad", 0) != 0);
}

class GlobalAveragePoolKernel : public CpuKernel {
 public:
  GlobalAveragePoolKernel(int64_t planes, int64_t size) : planes_(planes), size_(size) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t p = 0; p < planes_; ++p) {
      double acc = 0;
      for (int64_t i = 0; i < size_; ++i) acc += x[p * size_ + i];
      y[p] = static_cast<float>(acc / static_cast<double>(size_));
    }
  }

 private:
  int64_t planes_, size_;
};

}  // namespace

std::unique_ptr<CpuKernel> createMaxPool(const CpuNodeInfo& info) { return createPool(info, true); }
std::unique_ptr<CpuKernel> createAveragePool(const CpuNodeInfo& info) { return createPool(info, false); }

std::unique_ptr<CpuKernel> createGlobalAveragePool(const CpuNodeInfo& info) {
  const auto& x = info.in(0).dims;
  if (x.size() < 3) return nullptr;
  int64_t size = 1;
  for (size_t i = 2; i < x.size(); ++i) size *= x[i];
  if (size == 0) return nullptr;
  return std::make_unique<GlobalAveragePoolKernel>(x[0] * x[1], size);
}

}  // namespace onnxtool::cpu
