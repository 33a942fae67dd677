// kernels_norm.cpp: BatchNormalization in inference mode (one output): per channel
// y = x * a + b with a = scale / sqrt(var + epsilon), b = bias - mean * a. LayerNormalization
// (output Y only) over the trailing axes from `axis`, rows split over the pool; the executor
// may fuse a residual Add before it (the sum is formed in the row kernel, never stored).
#include <cmath>
#include <limits>
#include <string>

#include "exec/cpu/kernels.h"
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

namespace {

class BatchNormKernel : public CpuKernel {
 public:
  BatchNormKernel(int64_t n, int64_t c, int64_t spatial, float eps, bool relu = false)
      : n_(n), c_(c), spatial_(spatial), eps_(eps), relu_(relu) {}
  std::string variant() const override { return relu_ ? "+relu" : ""; }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* scale = static_cast<const float*>(args.inputs[1]);
    const float* bias = static_cast<const float*>(args.inputs[2]);
    const float* mean = static_cast<const float*>(args.inputs[3]);
    const float* var = static_cast<const float*>(args.inputs[4]);
    float* y = static_cast<float*>(args.outputs[0]);
    // Channels over the pool, ~64 KiB of input a chunk at least (DenseNet's pre-activation
    // BatchNormalizations ran on one thread: 8.6% of the model at 1 thread).
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_ * spatial_));
    void (*relu)(const float*, float*, int64_t) = relu_ ? vecKernels().unary[static_cast<int>(VecUnary::Relu)] : nullptr;
    parallelFor(args.pool, c_, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        float a = scale[ch] / std::sqrt(var[ch] + eps_), b = bias[ch] - mean[ch] * a;
        for (int64_t img = 0; img < n_; ++img) {
          const float* xp = x + (img * c_ + ch) * spatial_;
          float* yp = y + (img * c_ + ch) * spatial_;
          for (int64_t i = 0; i < spatial_; ++i) yp[i] = xp[i] * a + b;
          if (relu) relu(yp, yp, spatial_);  // the plane still in cache (the vec.h Relu: a NaN stays NaN)
        }
      }
    });
  }

 private:
  int64_t n_, c_, spatial_;
  float eps_;
  bool relu_ = false;  ///< a Relu fused after it (the executor's BatchNormalization + Relu)
};

/// Inputs X, Scale[, B] (or, fused with a residual Add, A, R, Scale[, B] with X = A + R).
class LayerNormKernel : public CpuKernel {
 public:
  LayerNormKernel(int64_t rows, int64_t n, float eps, bool bias) : rows_(rows), n_(n), eps_(eps), bias_(bias), vk_(vecKernels()) {}
  /// Scale and bias held by the kernel (a LayerNorm the executor fused from its spelled-out
  /// form): the inputs are then X alone (or A, R).
  LayerNormKernel(int64_t rows, int64_t n, float eps, std::vector<float> gamma, std::vector<float> beta)
      : rows_(rows), n_(n), eps_(eps), bias_(!beta.empty()), vk_(vecKernels()), gamma_(std::move(gamma)), beta_(std::move(beta)) {}
  void setResidual() { residual_ = true; }
  void compute(const CpuComputeArgs& args) const override {
    size_t k = residual_ ? 1 : 0;
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* r = residual_ ? static_cast<const float*>(args.inputs[1]) : nullptr;
    bool held = !gamma_.empty();
    const float* scale = held ? gamma_.data() : static_cast<const float*>(args.inputs[k + 1]);
    const float* b = !bias_ ? nullptr : held ? beta_.data() : static_cast<const float*>(args.inputs[k + 2]);
    float* y = static_cast<float*>(args.outputs[0]);
    if (n_ == 0) return;
    parallelFor(args.pool, rows_, std::max<int64_t>(1, 4096 / n_), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) vk_.layerNormRow(x + i * n_, r ? r + i * n_ : nullptr, scale, b, eps_, y + i * n_, n_);
    });
  }

 private:
  int64_t rows_, n_;
  float eps_;
  bool bias_, residual_ = false;
  const VecKernels& vk_;
  std::vector<float> gamma_, beta_;
};

}  // namespace

std::unique_ptr<CpuKernel> createLayerNorm(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (info.outputs.size() > 1 && (info.outputs[1] || (info.outputs.size() > 2 && info.outputs[2]))) return nullptr;
  const auto& x = info.in(0).dims;
  int64_t r = static_cast<int64_t>(x.size()), axis = n.attrInt("axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return nullptr;
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? rows : cols) *= x[static_cast<size_t>(i)];
  // Scale and B as full [cols] rows (broadcasting ones are left to the reference kernel).
  if (!info.hasInput(1) || info.in(1).dtype != DType::Float || info.in(1).numElements() != cols) return nullptr;
  bool bias = info.hasInput(2);
  if (bias && (info.in(2).dtype != DType::Float || info.in(2).numElements() != cols)) return nullptr;
  return std::make_unique<LayerNormKernel>(rows, cols, n.attrFloat("epsilon", 1e-5f), bias);
}

std::unique_ptr<CpuKernel> makeLayerNorm(int64_t rows, int64_t n, float eps, std::vector<float> gamma, std::vector<float> beta) {
  return std::make_unique<LayerNormKernel>(rows, n, eps, std::move(gamma), std::move(beta));
}

void makeLayerNormResidual(CpuKernel& k) { static_cast<LayerNormKernel&>(k).setResidual(); }

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
  // A fused epilogue: only the Relu clamp [0, +inf) (planFusions' BatchNormalization + Relu).
  bool relu = false;
  if (const FusedEpilogue* f = info.fused) {
    if (!f->scale.empty() || !f->shift.empty() || f->residual || f->inputScale || f->act != VecUnary::Count || !f->clamp ||
        f->lo != 0.f || f->hi != std::numeric_limits<float>::infinity())
      return nullptr;
    relu = true;
  }
  return std::make_unique<BatchNormKernel>(x[0], x[1], spatial, n.attrFloat("epsilon", 1e-5f), relu);
}

}  // namespace onnxtool::cpu
