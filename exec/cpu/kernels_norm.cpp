// kernels_norm.cpp: BatchNormalization in inference mode (one output): per channel
// y = x * a + b with a = scale / sqrt(var + epsilon), b = bias - mean * a.
#include <cmath>

#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

class BatchNormKernel : public CpuKernel {
 public:
  BatchNormKernel(int64_t n, int64_t c, int64_t spatial, float eps) : n_(n), c_(c), spatial_(spatial), eps_(eps) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* scale = static_cast<const float*>(args.inputs[1]);
    const float* bias = static_cast<const float*>(args.inputs[2]);
    const float* mean = static_cast<const float*>(args.inputs[3]);
    const float* var = static_cast<const float*>(args.inputs[4]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t ch = 0; ch < c_; ++ch) {
      float a = scale[ch] / std::sqrt(var[ch] + eps_), b = bias[ch] - mean[ch] * a;
      for (int64_t img = 0; img < n_; ++img) {
        const float* xp = x + (img * c_ + ch) * spatial_;
        float* yp = y + (img * c_ + ch) * spatial_;
        for (int64_t i = 0; i < spatial_; ++i) yp[i] = xp[i] * a + b;
      }
    }
  }

 private:
  int64_t n_, c_, spatial_;
  float eps_;
};

}  // namespace

std::unique_ptr<CpuKernel> createBatchNorm(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (n.attrInt("training_mode", 0) != 0 || info.outputs.size() != 1 || info.inputs.size() != 5) return nullptr;
  const auto& x = info.in(0).dims;
  if (x.size() < 2) return nullptr;
  for (size_t i = 1; i < 5; ++i)
    if (!info.hasInput(i) || info.in(i).dtype != DType::Float || info.in(i).numElements() != x[1]) return nullptr;
  int64_t spatial = 1;
  for (size_t i = 2; i < x.size(); ++i) spatial *= x[i];
  return std::make_unique<BatchNormKernel>(x[0], x[1], spatial, n.attrFloat("epsilon", 1e-5f));
}

}  // namespace onnxtool::cpu
