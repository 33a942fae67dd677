// kernels_lrn.cpp: LRN (local response normalisation across channels, NCHW and any rank >= 2):
// y = x / (bias + alpha / size * sum of x^2 over the channel window)^beta. Vectorised over the
// pixels of a channel in chunks; beta = 0.75 (AlexNet/GoogLeNet) as sqrt(t) * sqrt(sqrt(t)).
#include <algorithm>
#include <cmath>

#include "exec/cpu/conv_microkernels.h"
#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

class LrnKernel : public CpuKernel {
 public:
  LrnKernel(int64_t n, int64_t c, int64_t sp, int64_t size, float alpha, float beta, float bias)
      : n_(n), c_(c), sp_(sp), size_(size), scale_(alpha / static_cast<float>(size)), beta_(beta), bias_(bias) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    const int64_t lo = (size_ - 1) / 2, hi = (size_ - 1) - lo;  // floor and ceil of (size-1)/2
    constexpr int64_t kChunk = 64;
    const RowOps& rows = activeRowOps();
    float t[kChunk];
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t ch = 0; ch < c_; ++ch) {
        const int64_t k0 = std::max<int64_t>(0, ch - lo), k1 = std::min(c_ - 1, ch + hi);
        const float* xc = x + (b * c_ + ch) * sp_;
        float* yc = y + (b * c_ + ch) * sp_;
        for (int64_t p0 = 0; p0 < sp_; p0 += kChunk) {
          const int64_t len = std::min(kChunk, sp_ - p0);
          std::fill(t, t + len, 0.f);
          for (int64_t k = k0; k <= k1; ++k) {
            const float* xk = x + (b * c_ + k) * sp_ + p0;
            if (len == kChunk)  // a constant trip count: vectorised at every ISA
              for (int64_t i = 0; i < kChunk; ++i) t[i] += xk[i] * xk[i];
            else
              for (int64_t i = 0; i < len; ++i) t[i] += xk[i] * xk[i];
          }
          if (beta_ == 0.75f) {
            rows.lrnRow075(yc + p0, xc + p0, t, len, bias_, scale_);
          } else {
            for (int64_t i = 0; i < len; ++i) yc[p0 + i] = xc[p0 + i] / std::pow(bias_ + scale_ * t[i], beta_);
          }
        }
      }
  }

 private:
  int64_t n_, c_, sp_, size_;
  float scale_, beta_, bias_;
};

}  // namespace

std::unique_ptr<CpuKernel> createLrn(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  int64_t size = n.attrInt("size", 0);
  if (x.size() < 2 || size <= 0) return nullptr;  // the reference kernel reports the error
  int64_t sp = 1;
  for (size_t i = 2; i < x.size(); ++i) sp *= x[i];
  return std::make_unique<LrnKernel>(x[0], x[1], sp, size, n.attrFloat("alpha", 1e-4f), n.attrFloat("beta", 0.75f),
                                     n.attrFloat("bias", 1.0f));
}

}  // namespace onnxtool::cpu
