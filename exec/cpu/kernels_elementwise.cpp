// kernels_elementwise.cpp: binary elementwise ops with numpy broadcasting (Add, Sub, Mul, Div),
// activations (Relu, Sigmoid, Tanh), Softmax, and the Reshape family as views. Scalar loops the
// compiler vectorises at the build's baseline ISA; runtime-dispatched SIMD versions are to come.
#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

struct AddOp {
  static float apply(float a, float b) { return a + b; }
};
struct SubOp {
  static float apply(float a, float b) { return a - b; }
};
struct MulOp {
  static float apply(float a, float b) { return a * b; }
};
struct DivOp {
  static float apply(float a, float b) { return a / b; }
};
struct PowOp {  // x^2 (LayerNorm's variance as exporters spell it) without a call to pow
  static float apply(float a, float b) { return b == 2.f ? a * a : std::pow(a, b); }
};

/// out = a OP b, both broadcast to out's shape. The output may be input 0's buffer (in place):
/// every element is read before it is written at the same index.
template <typename Op>
class BinaryKernel : public CpuKernel {
 public:
  BinaryKernel(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& out)
      : outDims_(out) {
    size_t r = out.size();
    aStrides_.assign(r, 0);
    bStrides_.assign(r, 0);
    auto strides = [&](const std::vector<int64_t>& d, std::vector<int64_t>& s) {
      int64_t st = 1;
      for (size_t i = d.size(); i-- > 0;) {
        size_t oi = i + r - d.size();
        s[oi] = d[i] == 1 ? 0 : st;
        st *= d[i];
      }
    };
    strides(a, aStrides_);
    strides(b, bStrides_);
    total_ = 1;
    for (int64_t d : out) total_ *= d;
    int64_t an = 1, bn = 1;
    for (int64_t d : a) an *= d;
    for (int64_t d : b) bn *= d;
    if (an == total_ && bn == total_) mode_ = Mode::Same;
    else if (an == total_ && bn == 1) mode_ = Mode::ScalarB;
    else if (bn == total_ && an == 1) mode_ = Mode::ScalarA;
    else mode_ = Mode::General;
  }
  void compute(const CpuComputeArgs& args) const override {
    const float* a = static_cast<const float*>(args.inputs[0]);
    const float* b = static_cast<const float*>(args.inputs[1]);
    float* y = static_cast<float*>(args.outputs[0]);
    switch (mode_) {
      case Mode::Same:
        for (int64_t i = 0; i < total_; ++i) y[i] = Op::apply(a[i], b[i]);
        return;
      case Mode::ScalarB: {
        float bv = b[0];
        for (int64_t i = 0; i < total_; ++i) y[i] = Op::apply(a[i], bv);
        return;
      }
      case Mode::ScalarA: {
        float av = a[0];
        for (int64_t i = 0; i < total_; ++i) y[i] = Op::apply(av, b[i]);
        return;
      }
      case Mode::General: break;
    }
    if (total_ == 0) return;
    // Odometer over all dims but the last; the innermost loop runs with fixed strides.
    size_t r = outDims_.size();
    int64_t inner = outDims_[r - 1], sa = aStrides_[r - 1], sb = bStrides_[r - 1];
    std::vector<int64_t> idx(r, 0);  // small: the rank
    int64_t outer = total_ / inner;
    for (int64_t o = 0; o < outer; ++o) {
      int64_t ao = 0, bo = 0;
      for (size_t d = 0; d + 1 < r; ++d) ao += idx[d] * aStrides_[d], bo += idx[d] * bStrides_[d];
      float* yo = y + o * inner;
      for (int64_t i = 0; i < inner; ++i) yo[i] = Op::apply(a[ao + i * sa], b[bo + i * sb]);
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < outDims_[d]) break;
        idx[d] = 0;
      }
    }
  }

 private:
  enum class Mode { Same, ScalarA, ScalarB, General };
  std::vector<int64_t> outDims_, aStrides_, bStrides_;
  int64_t total_ = 0;
  Mode mode_ = Mode::General;
};

template <typename Op>
std::unique_ptr<CpuKernel> createBinary(const CpuNodeInfo& info) {
  if (!info.hasInput(1) || info.in(1).dtype != DType::Float) return nullptr;
  return std::make_unique<BinaryKernel<Op>>(info.in(0).dims, info.in(1).dims, info.out(0).dims);
}

template <typename F>
class UnaryKernel : public CpuKernel {
 public:
  explicit UnaryKernel(int64_t n) : n_(n) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t i = 0; i < n_; ++i) y[i] = F::apply(x[i]);
  }

 private:
  int64_t n_;
};

struct ReluF {
  static float apply(float x) { return x < 0.f ? 0.f : x; }  // NaN stays NaN; vectorises to a max
};
struct SigmoidF {
  static float apply(float x) { return x >= 0.f ? 1.f / (1.f + std::exp(-x)) : std::exp(x) / (1.f + std::exp(x)); }
};
struct TanhF {
  static float apply(float x) { return std::tanh(x); }
};
struct ErfF {
  static float apply(float x) { return std::erf(x); }
};
struct SqrtF {
  static float apply(float x) { return std::sqrt(x); }
};

template <typename F>
std::unique_ptr<CpuKernel> createUnary(const CpuNodeInfo& info) {
  return std::make_unique<UnaryKernel<F>>(info.in(0).numElements());
}

/// Softmax over `n` elements `inner` apart, for each of `outer * inner` rows; the max is
/// subtracted first. Before opset 13 the input is coerced to 2-D at `axis` (inner = 1).
class SoftmaxKernel : public CpuKernel {
 public:
  SoftmaxKernel(int64_t outer, int64_t n, int64_t inner) : outer_(outer), n_(n), inner_(inner) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t in = 0; in < inner_; ++in) {
        const float* xr = x + o * n_ * inner_ + in;
        float* yr = y + o * n_ * inner_ + in;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n_; ++i) mx = std::max(mx, xr[i * inner_]);
        float sum = 0.f;
        for (int64_t i = 0; i < n_; ++i) {
          float e = std::exp(xr[i * inner_] - mx);
          yr[i * inner_] = e;
          sum += e;
        }
        for (int64_t i = 0; i < n_; ++i) yr[i * inner_] /= sum;
      }
  }

 private:
  int64_t outer_, n_, inner_;
};

class ViewKernel : public CpuKernel {
 public:
  void compute(const CpuComputeArgs&) const override {}
};

}  // namespace

std::unique_ptr<CpuKernel> createAdd(const CpuNodeInfo& info) { return createBinary<AddOp>(info); }
std::unique_ptr<CpuKernel> createSub(const CpuNodeInfo& info) { return createBinary<SubOp>(info); }
std::unique_ptr<CpuKernel> createMul(const CpuNodeInfo& info) { return createBinary<MulOp>(info); }
std::unique_ptr<CpuKernel> createDiv(const CpuNodeInfo& info) { return createBinary<DivOp>(info); }
std::unique_ptr<CpuKernel> createPow(const CpuNodeInfo& info) { return createBinary<PowOp>(info); }
std::unique_ptr<CpuKernel> createErf(const CpuNodeInfo& info) { return createUnary<ErfF>(info); }
std::unique_ptr<CpuKernel> createSqrt(const CpuNodeInfo& info) { return createUnary<SqrtF>(info); }
std::unique_ptr<CpuKernel> createSum(const CpuNodeInfo& info) {
  return info.inputs.size() == 2 ? createBinary<AddOp>(info) : nullptr;  // residual adds; longer sums: reference
}
std::unique_ptr<CpuKernel> createRelu(const CpuNodeInfo& info) { return createUnary<ReluF>(info); }
std::unique_ptr<CpuKernel> createSigmoid(const CpuNodeInfo& info) { return createUnary<SigmoidF>(info); }
std::unique_ptr<CpuKernel> createTanh(const CpuNodeInfo& info) { return createUnary<TanhF>(info); }

std::unique_ptr<CpuKernel> createSoftmax(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& d = info.in(0).dims;
  int64_t r = static_cast<int64_t>(d.size());
  bool opset13 = info.sinceVersion >= 13;
  int64_t axis = n.attrInt("axis", opset13 ? -1 : 1);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return nullptr;
  int64_t outer = 1, mid = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= d[static_cast<size_t>(i)];
  if (opset13) {
    mid = d[static_cast<size_t>(axis)];
    for (int64_t i = axis + 1; i < r; ++i) inner *= d[static_cast<size_t>(i)];
  } else {
    for (int64_t i = axis; i < r; ++i) mid *= d[static_cast<size_t>(i)];
  }
  return std::make_unique<SoftmaxKernel>(outer, mid, inner);
}

std::unique_ptr<CpuKernel> createView(const CpuNodeInfo& info) {
  if (info.in(0).numElements() != info.out(0).numElements() || info.in(0).dtype != info.out(0).dtype) return nullptr;
  return std::make_unique<ViewKernel>();
}

}  // namespace onnxtool::cpu
