// kernels_elementwise.cpp: binary elementwise ops with numpy broadcasting (Add, Sub, Mul, Div,
// Pow), activations (Relu, Sigmoid, Tanh, Erf, Gelu, HardSwish, HardSigmoid), Softmax, and the Reshape family as views.
// The float loops are the runtime-dispatched ones of vec.h, split over the plan's thread pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

namespace {

/// Elements per task of the pool: below this a loop runs on one thread (a dispatch costs about
/// a microsecond; 16K floats are 64 KiB, a few microseconds of work).
constexpr int64_t kGrain = 16384;

struct PowOp {  // the general Pow (x^2 takes the vectorised Mul path instead)
  static float apply(float a, float b) { return std::pow(a, b); }
};

/// y[i] = a[i * sa] op b[i * sb] for one run of n elements, strides 0 or 1 (vectorised), else
/// the scalar loop.
template <typename Op>
void binaryRun(const VecKernels& vk, int op, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  if (op >= 0) {
    if (sa == 1 && sb == 1) return vk.binary[op](a, b, y, n);
    if (sa == 1 && sb == 0) return vk.binaryScalarB[op](a, b[0], y, n);
    if (sa == 0 && sb == 1) return vk.binaryScalarA[op](a[0], b, y, n);
  }
  for (int64_t i = 0; i < n; ++i) y[i] = Op::apply(a[i * sa], b[i * sb]);
}

/// out = a OP b, both broadcast to out's shape. The output may be input 0's buffer (in place):
/// every element is read before it is written at the same index. `vecOp` is the VecBinary of
/// Op, or -1 for the scalar loop; `square` makes Pow by a constant 2 the product a * a.
template <typename Op>
class BinaryKernel : public CpuKernel {
 public:
  BinaryKernel(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& out, int vecOp,
               bool square)
      : plan_({a, b}, out), vecOp_(vecOp), square_(square), vk_(vecKernels()) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* a = static_cast<const float*>(args.inputs[0]);
    const float* b = static_cast<const float*>(args.inputs[1]);
    float* y = static_cast<float*>(args.outputs[0]);
    if (plan_.total == 0) return;
    if (square_) {
      parallelFor(args.pool, plan_.total, kGrain, [&](int64_t s, int64_t e) {
        vk_.binary[static_cast<int>(VecBinary::Mul)](a + s, a + s, y + s, e - s);
      });
      return;
    }
    const size_t r = plan_.dims.size();
    const int64_t inner = plan_.dims[r - 1], sa = plan_.strides[0][r - 1], sb = plan_.strides[1][r - 1];
    if (r == 1) {  // one run: split it
      parallelFor(args.pool, inner, kGrain, [&](int64_t s, int64_t e) {
        binaryRun<Op>(vk_, vecOp_, a + s * sa, sa, b + s * sb, sb, y + s, e - s);
      });
      return;
    }
    const int64_t rows = plan_.total / inner;
    parallelFor(args.pool, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t s, int64_t e) {
      // Odometer over all dims but the last, started at row s.
      int64_t idx[16] = {}, rem = s, ao = 0, bo = 0;
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rem % plan_.dims[d];
        rem /= plan_.dims[d];
        ao += idx[d] * plan_.strides[0][d];
        bo += idx[d] * plan_.strides[1][d];
      }
      for (int64_t row = s; row < e; ++row) {
        binaryRun<Op>(vk_, vecOp_, a + ao, sa, b + bo, sb, y + row * inner, inner);
        for (size_t d = r - 1; d-- > 0;) {
          ao += plan_.strides[0][d];
          bo += plan_.strides[1][d];
          if (++idx[d] < plan_.dims[d]) break;
          ao -= idx[d] * plan_.strides[0][d];
          bo -= idx[d] * plan_.strides[1][d];
          idx[d] = 0;
        }
      }
    });
  }

 private:
  BroadcastPlan plan_;
  int vecOp_;
  bool square_;
  const VecKernels& vk_;
};

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
struct MaxOp {  // NaN propagates (the reference's foldStep)
  static float apply(float a, float b) { return a != a || b != b ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b); }
};
struct MinOp {
  static float apply(float a, float b) { return a != a || b != b ? std::numeric_limits<float>::quiet_NaN() : std::min(a, b); }
};

template <typename Op>
std::unique_ptr<CpuKernel> createBinary(const CpuNodeInfo& info, int vecOp) {
  if (!info.hasInput(1) || info.in(1).dtype != DType::Float || info.out(0).dims.size() > 16) return nullptr;
  bool square = false;
  if (std::is_same_v<Op, PowOp> && info.constants.size() > 1 && info.constants[1] && info.in(1).numElements() == 1 &&
      info.in(0).dims == info.out(0).dims) {
    const TensorData& t = *info.constants[1];
    float e = 0;
    std::memcpy(&e, t.raw.data(), sizeof e);
    square = e == 2.f;
  }
  return std::make_unique<BinaryKernel<Op>>(info.in(0).dims, info.in(1).dims, info.out(0).dims, vecOp, square);
}

/// y = f(x) elementwise through the vec.h table, split over the pool.
class VecUnaryKernel : public CpuKernel {
 public:
  VecUnaryKernel(int64_t n, VecUnary f) : n_(n), f_(vecKernels().unary[static_cast<int>(f)]) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    parallelFor(args.pool, n_, kGrain / 4, [&](int64_t s, int64_t e) { f_(x + s, y + s, e - s); });
  }

 private:
  int64_t n_;
  void (*f_)(const float*, float*, int64_t);
};

template <typename F>
class UnaryKernel : public CpuKernel {
 public:
  explicit UnaryKernel(int64_t n) : n_(n) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    parallelFor(args.pool, n_, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = F::apply(x[i]);
    });
  }

 private:
  int64_t n_;
};

/// HardSigmoid: max(0, min(1, alpha x + beta)) through the vec.h table, split over the pool.
class HardSigmoidKernel : public CpuKernel {
 public:
  HardSigmoidKernel(int64_t n, float alpha, float beta) : n_(n), alpha_(alpha), beta_(beta), f_(vecKernels().hardSigmoid) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    parallelFor(args.pool, n_, kGrain, [&](int64_t s, int64_t e) { f_(x + s, y + s, e - s, alpha_, beta_); });
  }

 private:
  int64_t n_;
  float alpha_, beta_;
  void (*f_)(const float*, float*, int64_t, float, float);
};

struct SqrtF {
  static float apply(float x) { return std::sqrt(x); }
};

std::unique_ptr<CpuKernel> createVecUnary(const CpuNodeInfo& info, VecUnary f) {
  return std::make_unique<VecUnaryKernel>(info.in(0).numElements(), f);
}

/// Softmax over `n` elements `inner` apart, for each of `outer * inner` rows; the max is
/// subtracted first. Before opset 13 the input is coerced to 2-D at `axis` (inner = 1).
/// Contiguous rows (inner = 1) go through the vectorised row kernel, rows split over the pool.
class SoftmaxKernel : public CpuKernel {
 public:
  SoftmaxKernel(int64_t outer, int64_t n, int64_t inner) : outer_(outer), n_(n), inner_(inner), vk_(vecKernels()) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    if (n_ == 0) return;
    if (inner_ == 1) {
      parallelFor(args.pool, outer_, std::max<int64_t>(1, kGrain / 4 / n_), [&](int64_t s, int64_t e) {
        FlushDenormals ftz;  // masked scores: exp(x - max) and its scaling below FLT_MIN give 0
        for (int64_t o = s; o < e; ++o) vk_.softmaxRow(x + o * n_, y + o * n_, n_);
      });
      return;
    }
    // A softmax over a non-last axis (YOLOv8's distribution head: 16 bins, 8400 anchors inner):
    // blocks of up to kCols contiguous columns, each pass a vector operation along a row of the
    // block (max, x - max, exp, sum, scale), blocks split over the pool.
    const int64_t colBlocks = (inner_ + kCols - 1) / kCols;
    parallelFor(args.pool, outer_ * colBlocks, std::max<int64_t>(1, kGrain / 8 / (n_ * kCols)), [&](int64_t s, int64_t e) {
      FlushDenormals ftz;
      alignas(64) float mx[kCols], sum[kCols];
      for (int64_t b = s; b < e; ++b) {
        const int64_t o = b / colBlocks, j0 = b % colBlocks * kCols, cols = std::min(kCols, inner_ - j0);
        const float* xb = x + o * n_ * inner_ + j0;
        float* yb = y + o * n_ * inner_ + j0;
        std::fill(mx, mx + cols, -std::numeric_limits<float>::infinity());
        for (int64_t i = 0; i < n_; ++i)
          for (int64_t j = 0; j < cols; ++j) mx[j] = std::max(mx[j], xb[i * inner_ + j]);
        std::fill(sum, sum + cols, 0.f);
        for (int64_t i = 0; i < n_; ++i) {
          float* yr = yb + i * inner_;
          vk_.binary[kSubOp](xb + i * inner_, mx, yr, cols);
          vk_.unary[static_cast<int>(VecUnary::Exp)](yr, yr, cols);
          vk_.binary[kAddOp](sum, yr, sum, cols);
        }
        for (int64_t j = 0; j < cols; ++j) sum[j] = 1.f / sum[j];
        for (int64_t i = 0; i < n_; ++i) vk_.binary[kMulOp](yb + i * inner_, sum, yb + i * inner_, cols);
      }
    });
  }

 private:
  static constexpr int64_t kCols = 512;
  static constexpr int kSubOp = static_cast<int>(VecBinary::Sub), kAddOp = static_cast<int>(VecBinary::Add),
                       kMulOp = static_cast<int>(VecBinary::Mul);
  int64_t outer_, n_, inner_;
  const VecKernels& vk_;
};

class ViewKernel : public CpuKernel {
 public:
  void compute(const CpuComputeArgs&) const override {}
};

}  // namespace

constexpr int kAdd = static_cast<int>(VecBinary::Add), kSub = static_cast<int>(VecBinary::Sub),
              kMul = static_cast<int>(VecBinary::Mul), kDiv = static_cast<int>(VecBinary::Div);

/// Cast between float32 and float16/bfloat16 (the Casts at the interface of a half-precision
/// model the plan computes in float32; float32 to float32 is a copy), elementwise with lib/tensor.h's conversions (round to
/// nearest even, NaN kept), split over the pool.
class HalfCastKernel : public CpuKernel {
 public:
  HalfCastKernel(int64_t n, DType from, DType to) : n_(n), from_(from), to_(to) {}
  void compute(const CpuComputeArgs& args) const override {
    parallelFor(args.pool, n_, kGrain, [&](int64_t s, int64_t e) {
      if (from_ == to_) {  // float -> float: what a Cast to half becomes in an upcast plan
        std::memcpy(static_cast<float*>(args.outputs[0]) + s, static_cast<const float*>(args.inputs[0]) + s,
                    static_cast<size_t>(e - s) * sizeof(float));
      } else if (to_ == DType::Float) {
        const auto* x = static_cast<const uint16_t*>(args.inputs[0]);
        float* y = static_cast<float*>(args.outputs[0]);
        if (from_ == DType::Float16)
          for (int64_t i = s; i < e; ++i) y[i] = halfToFloat(x[i]);
        else
          for (int64_t i = s; i < e; ++i) y[i] = bfloat16ToFloat(x[i]);
      } else {
        const float* x = static_cast<const float*>(args.inputs[0]);
        auto* y = static_cast<uint16_t*>(args.outputs[0]);
        if (to_ == DType::Float16)
          for (int64_t i = s; i < e; ++i) y[i] = floatToHalf(x[i]);
        else
          for (int64_t i = s; i < e; ++i) y[i] = floatToBfloat16(x[i]);
      }
    });
  }

 private:
  int64_t n_;
  DType from_, to_;
};

std::unique_ptr<CpuKernel> createCast(const CpuNodeInfo& info) {
  const DType from = info.in(0).dtype, to = info.out(0).dtype;
  const bool half = [](DType t) { return t == DType::Float16 || t == DType::BFloat16; }(from);
  const bool toHalf = to == DType::Float16 || to == DType::BFloat16;
  if (!((half && to == DType::Float) || (from == DType::Float && (toHalf || to == DType::Float)))) return nullptr;
  return std::make_unique<HalfCastKernel>(info.in(0).numElements(), from, to);
}

/// Clip (float): bounds from attributes (before opset 11; absent: none) or the optional scalar
/// inputs 1 and 2, read at run time; as the reference: v < lo gives lo, then v > hi gives hi (min > max: max
/// everywhere), NaN stays NaN. ReLU6 in the QDQ form of MobileNets runs here.
class ClipKernel : public CpuKernel {
 public:
  ClipKernel(int64_t n, bool attrs, float lo, float hi) : n_(n), attrs_(attrs), lo_(lo), hi_(hi) {}
  void compute(const CpuComputeArgs& args) const override {
    float lo = lo_, hi = hi_;
    if (!attrs_) {
      if (args.inputs.size() > 1 && args.inputs[1]) lo = *static_cast<const float*>(args.inputs[1]);
      if (args.inputs.size() > 2 && args.inputs[2]) hi = *static_cast<const float*>(args.inputs[2]);
    }
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    parallelFor(args.pool, n_, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        float v = x[i];
        v = v < lo ? lo : v;
        y[i] = v > hi ? hi : v;
      }
    });
  }

 private:
  int64_t n_;
  bool attrs_;
  float lo_, hi_;
};

std::unique_ptr<CpuKernel> createClip(const CpuNodeInfo& info) {
  const float inf = std::numeric_limits<float>::infinity();
  if (info.opset < 11 || info.sinceVersion < 11) {
    const Node& n = *info.node;
    float lo = n.attr("min") ? n.attrFloat("min", 0) : -inf, hi = n.attr("max") ? n.attrFloat("max", 0) : inf;
    return std::make_unique<ClipKernel>(info.in(0).numElements(), true, lo, hi);
  }
  for (size_t i : {size_t{1}, size_t{2}})
    if (info.hasInput(i) && (info.in(i).dtype != DType::Float || info.in(i).numElements() != 1)) return nullptr;
  // An omitted bound input is numeric_limits<float>::lowest()/max() (Clip-11's default; the
  // reference kernel's too): -inf and +inf are clipped to them.
  return std::make_unique<ClipKernel>(info.in(0).numElements(), false, std::numeric_limits<float>::lowest(),
                                      std::numeric_limits<float>::max());
}

std::unique_ptr<CpuKernel> createAdd(const CpuNodeInfo& info) { return createBinary<AddOp>(info, kAdd); }
std::unique_ptr<CpuKernel> createSub(const CpuNodeInfo& info) { return createBinary<SubOp>(info, kSub); }
std::unique_ptr<CpuKernel> createMul(const CpuNodeInfo& info) { return createBinary<MulOp>(info, kMul); }
std::unique_ptr<CpuKernel> createDiv(const CpuNodeInfo& info) { return createBinary<DivOp>(info, kDiv); }
std::unique_ptr<CpuKernel> createPow(const CpuNodeInfo& info) { return createBinary<PowOp>(info, -1); }
std::unique_ptr<CpuKernel> createErf(const CpuNodeInfo& info) { return createVecUnary(info, VecUnary::Erf); }
std::unique_ptr<CpuKernel> createExp(const CpuNodeInfo& info) { return createVecUnary(info, VecUnary::Exp); }
std::unique_ptr<CpuKernel> createSqrt(const CpuNodeInfo& info) {
  return std::make_unique<UnaryKernel<SqrtF>>(info.in(0).numElements());
}
std::unique_ptr<CpuKernel> createMax(const CpuNodeInfo& info) {
  return info.inputs.size() == 2 ? createBinary<MaxOp>(info, -1) : nullptr;
}
std::unique_ptr<CpuKernel> createMin(const CpuNodeInfo& info) {
  return info.inputs.size() == 2 ? createBinary<MinOp>(info, -1) : nullptr;
}
std::unique_ptr<CpuKernel> createSum(const CpuNodeInfo& info) {
  return info.inputs.size() == 2 ? createBinary<AddOp>(info, kAdd) : nullptr;  // residual adds; longer sums: reference
}
std::unique_ptr<CpuKernel> createRelu(const CpuNodeInfo& info) { return createVecUnary(info, VecUnary::Relu); }
std::unique_ptr<CpuKernel> createSigmoid(const CpuNodeInfo& info) { return createVecUnary(info, VecUnary::Sigmoid); }
std::unique_ptr<CpuKernel> createTanh(const CpuNodeInfo& info) { return createVecUnary(info, VecUnary::Tanh); }
std::unique_ptr<CpuKernel> createHardSwish(const CpuNodeInfo& info) { return createVecUnary(info, VecUnary::HardSwish); }
std::unique_ptr<CpuKernel> createHardSigmoid(const CpuNodeInfo& info) {
  for (const Attribute& a : info.node->attributes)
    if (!a.refAttrName.empty()) return nullptr;
  return std::make_unique<HardSigmoidKernel>(info.in(0).numElements(), info.node->attrFloat("alpha", 0.2f),
                                             info.node->attrFloat("beta", 0.5f));
}
std::unique_ptr<CpuKernel> createGelu(const CpuNodeInfo& info) {
  for (const Attribute& a : info.node->attributes)
    if (!a.refAttrName.empty()) return nullptr;
  std::string approximate = info.node->attrString("approximate", "none");
  if (approximate == "none") return createVecUnary(info, VecUnary::GeluErf);
  if (approximate == "tanh") return createVecUnary(info, VecUnary::GeluTanh);
  return nullptr;  // the reference kernel reports the bad attribute
}

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
