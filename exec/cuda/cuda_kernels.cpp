// cuda_kernels.cpp: the `cuda` executor's kernel objects and their table. Convolutions run on
// cuDNN (algorithm measured once per shape at prepare, cached for the process), matrix products
// on cuBLAS (float32, TF32, float16 or bfloat16 inputs with float32 accumulation), everything else
// on our own kernels (kernels.cu). A create() that meets anything it does not compute exactly
// declines, and the node runs on the reference kernel on the host.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include <cublas_v2.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "exec/cuda/cuda_kernel.h"
#include "lib/error.h"

namespace onnxtool::cuda {

std::string_view precisionName(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
  }
  return "?";
}

void check(cudaError_t e, std::string_view what) {
  if (e != cudaSuccess) fail(ErrorKind::Internal, "CUDA: {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes) check(cudaMalloc(&p_, bytes), fmt::format("cudaMalloc of {} bytes", bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_, n_ = o.n_;
    o.p_ = nullptr, o.n_ = 0;
  }
  return *this;
}
DeviceBuffer DeviceBuffer::upload(const void* host, size_t bytes) {
  DeviceBuffer b(bytes);
  if (!bytes) return b;
  // cudaMemcpy from pageable memory may return before its transfer lands, and our plans' streams
  // do not wait for the legacy stream it runs on: a kernel reading these bytes next (a weight
  // converted to half precision) read them half written. Wait for the transfer itself.
  check(cudaMemcpyAsync(b.p_, host, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy), "upload");
  check(cudaStreamSynchronize(cudaStreamLegacy), "upload");
  return b;
}

DType storageType(DType logical, Precision p) {
  if (logical != DType::Float) return logical;
  if (p == Precision::FP16) return DType::Float16;
  if (p == Precision::BF16) return DType::BFloat16;
  return DType::Float;
}

namespace {

int dt(DType t) { return static_cast<int>(t); }
bool isFloat(DType t) { return t == DType::Float || t == DType::Float16 || t == DType::BFloat16; }
size_t elemBytes(DType t) { return static_cast<size_t>(dtypeBits(t) / 8); }

void checkDnn(cudnnStatus_t s, std::string_view what) {
  if (s != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Internal, "cuDNN: {}: {}", what, cudnnGetErrorString(s));
}
void checkBlas(cublasStatus_t s, std::string_view what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(ErrorKind::Internal, "cuBLAS: {}: {} ({})", what, cublasGetStatusString(s), static_cast<int>(s));
}

std::vector<int64_t> stridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to && k < d.size(); ++k) p *= d[k];
  return p;
}

/// All inputs and wanted outputs have a type, and every present input is a tensor of a type.
bool typed(const CudaNodeInfo& info, size_t outputs = 1) {
  for (size_t i = 0; i < info.inputs.size(); ++i)
    if (info.node->input(i) && !info.inputs[i]) return false;
  for (size_t k = 0; k < outputs && k < info.outputs.size(); ++k)
    if (!info.outputs[k]) return false;
  return !info.outputs.empty() && info.outputs[0];
}
/// Only output 0 is wanted.
bool onlyOutput0(const CudaNodeInfo& info) {
  for (size_t k = 1; k < info.node->outputs().size(); ++k)
    if (info.node->output(k)) return false;
  return true;
}

std::optional<Bcast> makeBcast(const std::vector<int64_t>& out, const std::vector<const std::vector<int64_t>*>& ops) {
  Bcast b;
  if (out.size() > static_cast<size_t>(kMaxRank)) return std::nullopt;
  b.rank = static_cast<int>(out.size());
  b.n = product(out, 0, out.size());
  for (size_t k = 0; k < out.size(); ++k) b.dims[k] = out[k];
  int64_t* strides[3] = {b.s0, b.s1, b.s2};
  bool* contiguous[3] = {&b.contiguous0, &b.contiguous1, &b.contiguous2};
  bool* scalar[3] = {&b.scalar0, &b.scalar1, &b.scalar2};
  for (size_t j = 0; j < ops.size(); ++j) {
    const auto& d = *ops[j];
    if (d.size() > out.size()) return std::nullopt;
    std::vector<int64_t> st = stridesOf(d);
    size_t off = out.size() - d.size();
    for (size_t k = 0; k < d.size(); ++k) {
      if (d[k] != out[off + k] && d[k] != 1) return std::nullopt;
      strides[j][off + k] = d[k] == 1 ? 0 : st[k];
    }
    *contiguous[j] = d == out;
    *scalar[j] = product(d, 0, d.size()) == 1;
  }
  return b;
}

// ---- elementwise ----

class UnaryKernel : public CudaKernel {
 public:
  UnaryKernel(Unary op, DType t, int64_t n, float a, float b) : op_(op), t_(t), n_(n), a_(a), b_(b) {}
  void compute(const CudaComputeArgs& args) const override {
    unary(op_, dt(t_), args.inputs[0], args.outputs[0], n_, a_, b_, args.ctx->stream);
  }
  bool readsInput(size_t i) const override { return i == 0; }

 private:
  Unary op_;
  DType t_;
  int64_t n_;
  float a_, b_;
};

std::unique_ptr<CudaKernel> makeUnary(const CudaNodeInfo& info, Unary op, float a = 0, float b = 0) {
  if (!typed(info) || !onlyOutput0(info)) return nullptr;
  DType t = info.in(0).dtype;
  if (!isFloat(t) || info.out(0).dtype != t || info.out(0).dims != info.in(0).dims) return nullptr;
  return std::make_unique<UnaryKernel>(op, t, info.in(0).numElements(), a, b);
}

#define UNARY(Name, Op) \
  std::unique_ptr<CudaKernel> create##Name(const CudaNodeInfo& info) { return makeUnary(info, Unary::Op); }
UNARY(Relu, Relu)
UNARY(Sigmoid, Sigmoid)
UNARY(Tanh, Tanh)
UNARY(Erf, Erf)
UNARY(Exp, Exp)
UNARY(Log, Log)
UNARY(Sqrt, Sqrt)
UNARY(Reciprocal, Reciprocal)
UNARY(Neg, Neg)
UNARY(Abs, Abs)
UNARY(Floor, Floor)
UNARY(Ceil, Ceil)
UNARY(Round, Round)
UNARY(Sign, Sign)
UNARY(HardSwish, HardSwish)
UNARY(Softplus, Softplus)
UNARY(Softsign, Softsign)
UNARY(Sin, Sin)
UNARY(Cos, Cos)
UNARY(Tan, Tan)
UNARY(Asin, Asin)
UNARY(Acos, Acos)
UNARY(Atan, Atan)
UNARY(Sinh, Sinh)
UNARY(Cosh, Cosh)
UNARY(Asinh, Asinh)
UNARY(Acosh, Acosh)
UNARY(Atanh, Atanh)
UNARY(Mish, Mish)
#undef UNARY

std::unique_ptr<CudaKernel> createLeakyRelu(const CudaNodeInfo& info) {
  return makeUnary(info, Unary::LeakyRelu, info.node->attrFloat("alpha", 0.01f));
}
std::unique_ptr<CudaKernel> createElu(const CudaNodeInfo& info) {
  return makeUnary(info, Unary::Elu, info.node->attrFloat("alpha", 1.0f));
}
std::unique_ptr<CudaKernel> createCelu(const CudaNodeInfo& info) {
  return makeUnary(info, Unary::Celu, info.node->attrFloat("alpha", 1.0f));
}
std::unique_ptr<CudaKernel> createSelu(const CudaNodeInfo& info) {
  return makeUnary(info, Unary::Selu, info.node->attrFloat("alpha", 1.67326319217681884765625f),
                   info.node->attrFloat("gamma", 1.05070102214813232421875f));
}
std::unique_ptr<CudaKernel> createThresholdedRelu(const CudaNodeInfo& info) {
  return makeUnary(info, Unary::ThresholdedRelu, info.node->attrFloat("alpha", 1.0f));
}
std::unique_ptr<CudaKernel> createHardSigmoid(const CudaNodeInfo& info) {
  return makeUnary(info, Unary::HardSigmoid, info.node->attrFloat("alpha", 0.2f), info.node->attrFloat("beta", 0.5f));
}
std::unique_ptr<CudaKernel> createGelu(const CudaNodeInfo& info) {
  std::string approx = info.node->attrString("approximate", "none");
  if (approx != "none" && approx != "tanh") return nullptr;
  return makeUnary(info, approx == "tanh" ? Unary::GeluTanh : Unary::GeluErf);
}
std::unique_ptr<CudaKernel> createClip(const CudaNodeInfo& info) {
  float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  if (info.sinceVersion < 11) {
    lo = info.node->attrFloat("min", lo);
    hi = info.node->attrFloat("max", hi);
  } else {
    for (size_t i = 1; i <= 2; ++i) {
      if (!info.node->input(i)) continue;
      const TensorData* c = info.constant(i);
      if (!c || c->numElements().value_or(0) != 1) return nullptr;
      (i == 1 ? lo : hi) = static_cast<float>(c->elementAsDouble(0));
    }
  }
  if (info.hasInput(0) && info.in(0).dtype != DType::Float && info.in(0).dtype != DType::Float16 &&
      info.in(0).dtype != DType::BFloat16)
    return nullptr;
  return makeUnary(info, Unary::Clip, lo, hi);
}

class BinaryKernel : public CudaKernel {
 public:
  BinaryKernel(Binary op, DType t, Bcast d) : op_(op), t_(t), d_(d) {}
  void compute(const CudaComputeArgs& args) const override {
    binary(op_, dt(t_), args.inputs[0], args.inputs[1], args.outputs[0], d_, args.ctx->stream);
  }

 private:
  Binary op_;
  DType t_;
  Bcast d_;
};

std::unique_ptr<CudaKernel> makeBinary(const CudaNodeInfo& info, Binary op) {
  if (!typed(info) || info.inputs.size() != 2 || !info.hasInput(1) || !onlyOutput0(info)) return nullptr;
  DType t = info.in(0).dtype;
  if (info.in(1).dtype != t || !binarySupported(op, dt(t))) return nullptr;
  bool cmp = op == Binary::Equal || op == Binary::Less || op == Binary::Greater || op == Binary::LessEq ||
             op == Binary::GreaterEq || op == Binary::And || op == Binary::Or || op == Binary::Xor;
  if (info.out(0).dtype != (cmp ? DType::Bool : t)) return nullptr;
  auto d = makeBcast(info.out(0).dims, {&info.in(0).dims, &info.in(1).dims});
  if (!d) return nullptr;
  return std::make_unique<BinaryKernel>(op, t, *d);
}

#define BINARY(Name, Op) \
  std::unique_ptr<CudaKernel> create##Name(const CudaNodeInfo& info) { return makeBinary(info, Binary::Op); }
BINARY(Add, Add)
BINARY(Sub, Sub)
BINARY(Mul, Mul)
BINARY(Div, Div)
BINARY(Pow, Pow)
BINARY(Max, Max)
BINARY(Min, Min)
BINARY(Sum, Add)
BINARY(PRelu, PRelu)
BINARY(Equal, Equal)
BINARY(Less, Less)
BINARY(Greater, Greater)
BINARY(LessOrEqual, LessEq)
BINARY(GreaterOrEqual, GreaterEq)
BINARY(And, And)
BINARY(Or, Or)
BINARY(Xor, Xor)
#undef BINARY

class WhereKernel : public CudaKernel {
 public:
  WhereKernel(int bytes, Bcast d) : bytes_(bytes), d_(d) {}
  void compute(const CudaComputeArgs& a) const override {
    where(bytes_, a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0], d_, a.ctx->stream);
  }

 private:
  int bytes_;
  Bcast d_;
};

std::unique_ptr<CudaKernel> createWhere(const CudaNodeInfo& info) {
  if (!typed(info) || info.inputs.size() != 3 || !info.hasInput(1) || !info.hasInput(2)) return nullptr;
  DType t = info.in(1).dtype;
  if (info.in(0).dtype != DType::Bool || info.in(2).dtype != t || info.out(0).dtype != t) return nullptr;
  size_t b = elemBytes(t);
  if (dtypeBits(t) % 8 || (b != 1 && b != 2 && b != 4 && b != 8)) return nullptr;
  auto d = makeBcast(info.out(0).dims, {&info.in(0).dims, &info.in(1).dims, &info.in(2).dims});
  if (!d) return nullptr;
  return std::make_unique<WhereKernel>(static_cast<int>(b), *d);
}

// ---- normalisation ----

class SoftmaxKernel : public CudaKernel {
 public:
  SoftmaxKernel(DType t, int64_t outer, int64_t len, int64_t inner, bool log)
      : t_(t), outer_(outer), len_(len), inner_(inner), log_(log) {}
  void compute(const CudaComputeArgs& a) const override {
    softmax(dt(t_), a.inputs[0], a.outputs[0], outer_, len_, inner_, log_, a.ctx->stream);
  }

 private:
  DType t_;
  int64_t outer_, len_, inner_;
  bool log_;
};

std::unique_ptr<CudaKernel> makeSoftmax(const CudaNodeInfo& info, bool log) {
  if (!typed(info) || !isFloat(info.in(0).dtype) || info.out(0).dtype != info.in(0).dtype) return nullptr;
  const auto& d = info.in(0).dims;
  auto r = static_cast<int64_t>(d.size());
  int64_t axis = info.node->attrInt("axis", info.sinceVersion < 13 ? 1 : -1);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return nullptr;
  auto a = static_cast<size_t>(axis);
  if (info.sinceVersion < 13)
    return std::make_unique<SoftmaxKernel>(info.in(0).dtype, product(d, 0, a), product(d, a, d.size()), 1, log);
  return std::make_unique<SoftmaxKernel>(info.in(0).dtype, product(d, 0, a), d[a], product(d, a + 1, d.size()), log);
}
std::unique_ptr<CudaKernel> createSoftmax(const CudaNodeInfo& info) { return makeSoftmax(info, false); }
std::unique_ptr<CudaKernel> createLogSoftmax(const CudaNodeInfo& info) { return makeSoftmax(info, true); }

class LayerNormKernel : public CudaKernel {
 public:
  LayerNormKernel(DType t, int64_t rows, int64_t cols, float eps) : t_(t), rows_(rows), cols_(cols), eps_(eps) {}
  void compute(const CudaComputeArgs& a) const override {
    layerNorm(dt(t_), a.inputs[0], a.inputs[1], a.inputs.size() > 2 ? a.inputs[2] : nullptr, a.outputs[0], rows_, cols_, eps_,
              a.ctx->stream);
  }

 private:
  DType t_;
  int64_t rows_, cols_;
  float eps_;
};

std::unique_ptr<CudaKernel> createLayerNormalization(const CudaNodeInfo& info) {
  if (!typed(info) || !onlyOutput0(info) || !info.hasInput(1)) return nullptr;
  DType t = info.in(0).dtype;
  if (!isFloat(t) || info.in(1).dtype != t || info.out(0).dtype != t) return nullptr;
  const auto& d = info.in(0).dims;
  auto r = static_cast<int64_t>(d.size());
  int64_t axis = info.node->attrInt("axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return nullptr;
  int64_t cols = product(d, static_cast<size_t>(axis), d.size());
  if (info.in(1).numElements() != cols) return nullptr;
  if (info.hasInput(2) && (info.in(2).dtype != t || info.in(2).numElements() != cols)) return nullptr;
  return std::make_unique<LayerNormKernel>(t, product(d, 0, static_cast<size_t>(axis)), cols,
                                           info.node->attrFloat("epsilon", 1e-5f));
}

/// Per-channel y = act(x * scale + shift): BatchNormalization with constant statistics.
class ChannelAffineKernel : public CudaKernel {
 public:
  ChannelAffineKernel(DType t, int64_t n, int64_t c, int64_t inner, const std::vector<float>& scale,
                      const std::vector<float>& shift)
      : t_(t), n_(n), c_(c), inner_(inner), scale_(DeviceBuffer::upload(scale.data(), scale.size() * 4)),
        shift_(DeviceBuffer::upload(shift.data(), shift.size() * 4)) {}
  void compute(const CudaComputeArgs& a) const override {
    channelAffine(dt(t_), a.inputs[0], static_cast<const float*>(scale_.get()), static_cast<const float*>(shift_.get()),
                  residualPtr(a), a.outputs[0], n_, c_, inner_, act_, actA_, actB_, a.ctx->stream);
  }
  bool readsInput(size_t i) const override { return i == 0 || isResidual(i); }
  bool fuseEpilogue(Unary act, float a, float b, int residual) override { return takeEpilogue(act, a, b, residual); }

 private:
  DType t_;
  int64_t n_, c_, inner_;
  DeviceBuffer scale_, shift_;
};

std::unique_ptr<CudaKernel> createBatchNormalization(const CudaNodeInfo& info) {
  if (!typed(info) || !onlyOutput0(info) || info.inputs.size() < 5) return nullptr;
  if (info.node->attrInt("training_mode", 0) != 0) return nullptr;
  DType t = info.in(0).dtype;
  const auto& d = info.in(0).dims;
  if (!isFloat(t) || info.out(0).dtype != t || d.size() < 2) return nullptr;
  int64_t c = d[1];
  std::vector<std::vector<double>> p(4);
  for (size_t i = 1; i <= 4; ++i) {
    const TensorData* k = info.constant(i);
    if (!k || k->numElements().value_or(-1) != c) return nullptr;
    for (int64_t j = 0; j < c; ++j) p[i - 1].push_back(k->elementAsDouble(static_cast<size_t>(j)));
  }
  double eps = info.node->attrFloat("epsilon", 1e-5f);
  std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  for (size_t j = 0; j < static_cast<size_t>(c); ++j) {
    double s = p[0][j] / std::sqrt(p[3][j] + eps);
    scale[j] = static_cast<float>(s);
    shift[j] = static_cast<float>(p[1][j] - p[2][j] * s);
  }
  return std::make_unique<ChannelAffineKernel>(t, d[0], c, product(d, 2, d.size()), scale, shift);
}

// ---- pooling and reductions ----

class PoolKernel : public CudaKernel {
 public:
  PoolKernel(DType t, Pool2d p) : t_(t), p_(p) {}
  void compute(const CudaComputeArgs& a) const override { pool2d(dt(t_), a.inputs[0], a.outputs[0], p_, a.ctx->stream); }

 private:
  DType t_;
  Pool2d p_;
};

std::unique_ptr<CudaKernel> makePool(const CudaNodeInfo& info, bool isMax) {
  if (!typed(info) || !onlyOutput0(info)) return nullptr;
  DType t = info.in(0).dtype;
  const auto& x = info.in(0).dims;
  const auto& y = info.out(0).dims;
  if (!isFloat(t) || info.out(0).dtype != t || (x.size() != 3 && x.size() != 4) || y.size() != x.size()) return nullptr;
  size_t sp = x.size() - 2;
  auto k = info.node->attrInts("kernel_shape");
  auto s = info.node->attrInts("strides", std::vector<int64_t>(sp, 1));
  auto dl = info.node->attrInts("dilations", std::vector<int64_t>(sp, 1));
  auto pads = info.node->attrInts("pads", std::vector<int64_t>(2 * sp, 0));
  if (k.size() != sp || s.size() != sp || dl.size() != sp || pads.size() != 2 * sp) return nullptr;
  if (isMax && info.node->attrInt("storage_order", 0) != 0) return nullptr;
  std::string autoPad = info.node->attrString("auto_pad", "NOTSET");
  if (autoPad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < sp; ++i) {
      int64_t total = std::max<int64_t>(0, (y[2 + i] - 1) * s[i] + (k[i] - 1) * dl[i] + 1 - x[2 + i]);
      int64_t small = total / 2, big = total - small;
      pads[i] = autoPad == "SAME_UPPER" ? small : big;
      pads[i + sp] = total - pads[i];
    }
  } else if (autoPad != "NOTSET") return nullptr;
  Pool2d p;
  p.max = isMax;
  p.countIncludePad = !isMax && info.node->attrInt("count_include_pad", 0) != 0;
  p.nc = x[0] * x[1];
  if (sp == 1) {
    p.h = 1, p.w = x[2], p.oh = 1, p.ow = y[2];
    p.kw = static_cast<int>(k[0]), p.sw = static_cast<int>(s[0]), p.dw = static_cast<int>(dl[0]);
    p.padL = static_cast<int>(pads[0]), p.padR = static_cast<int>(pads[1]);
  } else {
    p.h = x[2], p.w = x[3], p.oh = y[2], p.ow = y[3];
    p.kh = static_cast<int>(k[0]), p.kw = static_cast<int>(k[1]);
    p.sh = static_cast<int>(s[0]), p.sw = static_cast<int>(s[1]);
    p.dh = static_cast<int>(dl[0]), p.dw = static_cast<int>(dl[1]);
    p.padT = static_cast<int>(pads[0]), p.padL = static_cast<int>(pads[1]);
    p.padB = static_cast<int>(pads[2]), p.padR = static_cast<int>(pads[3]);
  }
  if (y[0] != x[0] || y[1] != x[1]) return nullptr;
  return std::make_unique<PoolKernel>(t, p);
}
std::unique_ptr<CudaKernel> createMaxPool(const CudaNodeInfo& info) { return makePool(info, true); }
std::unique_ptr<CudaKernel> createAveragePool(const CudaNodeInfo& info) { return makePool(info, false); }

class ReduceKernel : public CudaKernel {
 public:
  ReduceKernel(Reduce op, DType t, int64_t outer, int64_t r, int64_t inner)
      : op_(op), t_(t), outer_(outer), r_(r), inner_(inner) {}
  void compute(const CudaComputeArgs& a) const override {
    reduce(op_, dt(t_), a.inputs[0], a.outputs[0], outer_, r_, inner_, a.ctx->stream);
  }
  bool readsInput(size_t i) const override { return i == 0; }

 private:
  Reduce op_;
  DType t_;
  int64_t outer_, r_, inner_;
};

std::unique_ptr<CudaKernel> makeGlobalPool(const CudaNodeInfo& info, Reduce op) {
  if (!typed(info)) return nullptr;
  DType t = info.in(0).dtype;
  const auto& x = info.in(0).dims;
  if (!isFloat(t) || info.out(0).dtype != t || x.size() < 3) return nullptr;
  return std::make_unique<ReduceKernel>(op, t, x[0] * x[1], product(x, 2, x.size()), 1);
}
std::unique_ptr<CudaKernel> createGlobalAveragePool(const CudaNodeInfo& info) { return makeGlobalPool(info, Reduce::Mean); }
std::unique_ptr<CudaKernel> createGlobalMaxPool(const CudaNodeInfo& info) { return makeGlobalPool(info, Reduce::Max); }

/// Copies input 0 to output 0 unchanged (a reduction over no axis).
class CopyKernel : public CudaKernel {
 public:
  explicit CopyKernel(size_t bytes) : bytes_(bytes) {}
  void compute(const CudaComputeArgs& a) const override {
    if (bytes_)
      check(cudaMemcpyAsync(a.outputs[0], a.inputs[0], bytes_, cudaMemcpyDeviceToDevice, a.ctx->stream), "copy");
  }
  bool readsInput(size_t i) const override { return i == 0; }

 private:
  size_t bytes_;
};

std::unique_ptr<CudaKernel> makeReduce(const CudaNodeInfo& info, Reduce op, int axesInputSince) {
  if (!typed(info) || !onlyOutput0(info)) return nullptr;
  DType t = info.in(0).dtype;
  const auto& x = info.in(0).dims;
  if (!isFloat(t) || info.out(0).dtype != t) return nullptr;
  std::vector<int64_t> axes;
  if (info.sinceVersion >= axesInputSince) {
    if (info.node->input(1)) {
      const TensorData* c = info.constant(1);
      if (!c) return nullptr;
      axes = c->toInt64s();
    }
  } else {
    axes = info.node->attrInts("axes");
  }
  if (axes.empty()) {
    if (info.sinceVersion >= axesInputSince && info.node->attrInt("noop_with_empty_axes", 0))
      return std::make_unique<CopyKernel>(static_cast<size_t>(info.in(0).numElements()) * elemBytes(t));
    for (size_t k = 0; k < x.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  auto r = static_cast<int64_t>(x.size());
  for (int64_t& a : axes) {
    if (a < 0) a += r;
    if (a < 0 || a >= r) return nullptr;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  if (x.empty()) return std::make_unique<ReduceKernel>(op, t, 1, 1, 1);
  for (size_t k = 1; k < axes.size(); ++k)
    if (axes[k] != axes[k - 1] + 1) return nullptr;  // not one block of axes
  auto a0 = static_cast<size_t>(axes.front()), a1 = static_cast<size_t>(axes.back()) + 1;
  return std::make_unique<ReduceKernel>(op, t, product(x, 0, a0), product(x, a0, a1), product(x, a1, x.size()));
}
std::unique_ptr<CudaKernel> createReduceMean(const CudaNodeInfo& info) { return makeReduce(info, Reduce::Mean, 18); }
std::unique_ptr<CudaKernel> createReduceSum(const CudaNodeInfo& info) { return makeReduce(info, Reduce::Sum, 13); }
std::unique_ptr<CudaKernel> createReduceMax(const CudaNodeInfo& info) { return makeReduce(info, Reduce::Max, 18); }
std::unique_ptr<CudaKernel> createReduceMin(const CudaNodeInfo& info) { return makeReduce(info, Reduce::Min, 18); }
std::unique_ptr<CudaKernel> createReduceProd(const CudaNodeInfo& info) { return makeReduce(info, Reduce::Prod, 18); }
std::unique_ptr<CudaKernel> createReduceSumSquare(const CudaNodeInfo& info) { return makeReduce(info, Reduce::SumSquare, 18); }
std::unique_ptr<CudaKernel> createReduceL1(const CudaNodeInfo& info) { return makeReduce(info, Reduce::L1, 18); }
std::unique_ptr<CudaKernel> createReduceL2(const CudaNodeInfo& info) { return makeReduce(info, Reduce::L2, 18); }
std::unique_ptr<CudaKernel> createReduceLogSumExp(const CudaNodeInfo& info) { return makeReduce(info, Reduce::LogSumExp, 18); }

// ---- layout ----

/// Output 0 is input 0's bytes: the executor aliases them, nothing runs.
class ViewKernel : public CudaKernel {
 public:
  void compute(const CudaComputeArgs&) const override {}
  bool readsInput(size_t i) const override { return i == 0; }
};

std::unique_ptr<CudaKernel> createView(const CudaNodeInfo& info) {
  if (!typed(info) || !onlyOutput0(info) || info.in(0).dtype != info.out(0).dtype) return nullptr;
  if (info.in(0).numElements() != info.out(0).numElements() || dtypeBits(info.in(0).dtype) % 8) return nullptr;
  return std::make_unique<ViewKernel>();
}

class CopyStridedKernel : public CudaKernel {
 public:
  struct Part {
    int input = 0, output = 0;
    int64_t srcOffset = 0, dstOffset = 0;  ///< elements
    StridedCopy c;
  };
  CopyStridedKernel(size_t bytes, std::vector<Part> parts) : bytes_(bytes), parts_(std::move(parts)) {}
  void compute(const CudaComputeArgs& a) const override {
    for (const Part& p : parts_)
      stridedCopy(static_cast<int>(bytes_), static_cast<const uint8_t*>(a.inputs[static_cast<size_t>(p.input)]) + p.srcOffset * static_cast<int64_t>(bytes_),
                  static_cast<uint8_t*>(a.outputs[static_cast<size_t>(p.output)]) + p.dstOffset * static_cast<int64_t>(bytes_), p.c,
                  a.ctx->stream);
  }
  bool readsInput(size_t i) const override {
    for (const Part& p : parts_)
      if (static_cast<size_t>(p.input) == i) return true;
    return false;
  }

 private:
  size_t bytes_;
  std::vector<Part> parts_;
};

bool copyableType(DType t) {
  int b = dtypeBits(t);
  return b == 8 || b == 16 || b == 32 || b == 64;
}

/// A part copying src dims (with strides) onto dst (with strides), merged where contiguous.
std::optional<CopyStridedKernel::Part> part(const std::vector<int64_t>& dims, const std::vector<int64_t>& src,
                                            const std::vector<int64_t>& dst) {
  CopyStridedKernel::Part p;
  std::vector<int64_t> d, s, t;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    if (!d.empty() && s.back() == src[k] * dims[k] && t.back() == dst[k] * dims[k]) {  // merge with the previous axis
      d.back() *= dims[k];
      s.back() = src[k];
      t.back() = dst[k];
      continue;
    }
    d.push_back(dims[k]), s.push_back(src[k]), t.push_back(dst[k]);
  }
  if (d.size() > static_cast<size_t>(kMaxRank)) return std::nullopt;
  p.c.rank = static_cast<int>(d.size());
  p.c.n = 1;
  for (size_t k = 0; k < d.size(); ++k) {
    p.c.dims[k] = d[k], p.c.src[k] = s[k], p.c.dst[k] = t[k];
    p.c.n *= d[k];
  }
  return p;
}

std::unique_ptr<CudaKernel> createTranspose(const CudaNodeInfo& info) {
  if (!typed(info)) return nullptr;
  DType t = info.in(0).dtype;
  if (!copyableType(t) || info.out(0).dtype != t) return nullptr;
  const auto& x = info.in(0).dims;
  std::vector<int64_t> perm = info.node->attrInts("perm");
  if (perm.empty())
    for (size_t k = x.size(); k-- > 0;) perm.push_back(static_cast<int64_t>(k));
  if (perm.size() != x.size()) return nullptr;
  auto xs = stridesOf(x);
  std::vector<int64_t> dims, src;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(x.size())) return nullptr;
    dims.push_back(x[static_cast<size_t>(p)]);
    src.push_back(xs[static_cast<size_t>(p)]);
  }
  if (dims != info.out(0).dims) return nullptr;
  auto p = part(dims, src, stridesOf(dims));
  if (!p) return nullptr;
  return std::make_unique<CopyStridedKernel>(elemBytes(t), std::vector{*p});
}

std::unique_ptr<CudaKernel> createConcat(const CudaNodeInfo& info) {
  if (!typed(info)) return nullptr;
  DType t = info.out(0).dtype;
  const auto& y = info.out(0).dims;
  if (!copyableType(t) || y.empty()) return nullptr;
  int64_t axis = info.node->attrInt("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(y.size());
  if (axis < 0 || axis >= static_cast<int64_t>(y.size())) return nullptr;
  auto a = static_cast<size_t>(axis);
  auto ys = stridesOf(y);
  std::vector<CopyStridedKernel::Part> parts;
  int64_t at = 0;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    if (!info.hasInput(i) || info.in(i).dtype != t || info.in(i).dims.size() != y.size()) return nullptr;
    const auto& x = info.in(i).dims;
    if (info.in(i).numElements() > 0) {
      auto p = part(x, stridesOf(x), ys);
      if (!p) return nullptr;
      p->input = static_cast<int>(i);
      p->dstOffset = at * ys[a];
      parts.push_back(*p);
    }
    at += x[a];
  }
  if (at != y[a]) return nullptr;
  return std::make_unique<CopyStridedKernel>(elemBytes(t), std::move(parts));
}

std::unique_ptr<CudaKernel> createSplit(const CudaNodeInfo& info) {
  if (!typed(info, info.outputs.size())) return nullptr;
  DType t = info.in(0).dtype;
  const auto& x = info.in(0).dims;
  if (!copyableType(t) || x.empty()) return nullptr;
  int64_t axis = info.node->attrInt("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.size())) return nullptr;
  auto a = static_cast<size_t>(axis);
  auto xs = stridesOf(x);
  std::vector<CopyStridedKernel::Part> parts;
  int64_t at = 0;
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    if (!info.outputs[k]) return nullptr;  // every output is computed
    const auto& y = info.out(k).dims;
    if (info.out(k).dtype != t || y.size() != x.size()) return nullptr;
    if (info.out(k).numElements() > 0) {
      auto p = part(y, xs, stridesOf(y));
      if (!p) return nullptr;
      p->output = static_cast<int>(k);
      p->srcOffset = at * xs[a];
      parts.push_back(*p);
    }
    at += y[a];
  }
  if (at != x[a]) return nullptr;
  return std::make_unique<CopyStridedKernel>(elemBytes(t), std::move(parts));
}

std::unique_ptr<CudaKernel> createSlice(const CudaNodeInfo& info) {
  if (!typed(info)) return nullptr;
  DType t = info.in(0).dtype;
  const auto& x = info.in(0).dims;
  const auto& y = info.out(0).dims;
  if (!copyableType(t) || info.out(0).dtype != t || y.size() != x.size()) return nullptr;
  std::vector<int64_t> starts, axes, steps;
  if (info.sinceVersion < 10) {
    starts = info.node->attrInts("starts");
    axes = info.node->attrInts("axes");
  } else {
    for (size_t i = 1; i < 5; ++i) {
      if (!info.node->input(i)) continue;
      const TensorData* c = info.constant(i);
      if (!c) return nullptr;
      if (i == 1) starts = c->toInt64s();
      if (i == 3) axes = c->toInt64s();
      if (i == 4) steps = c->toInt64s();
    }
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) return nullptr;
  auto xs = stridesOf(x);
  std::vector<int64_t> src = xs;
  int64_t offset = 0;
  for (size_t j = 0; j < axes.size(); ++j) {
    int64_t ax = axes[j] < 0 ? axes[j] + static_cast<int64_t>(x.size()) : axes[j];
    if (ax < 0 || ax >= static_cast<int64_t>(x.size()) || steps[j] == 0) return nullptr;
    auto k = static_cast<size_t>(ax);
    int64_t dim = x[k], s = starts[j];
    if (s < 0) s += dim;
    s = dim == 0 ? 0 : steps[j] > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    if (y[k] > 0) offset += s * xs[k];
    src[k] = xs[k] * steps[j];
  }
  auto p = part(y, src, stridesOf(y));
  if (!p) return nullptr;
  p->srcOffset = offset;
  return std::make_unique<CopyStridedKernel>(elemBytes(t), std::vector{*p});
}

std::unique_ptr<CudaKernel> createExpand(const CudaNodeInfo& info) {
  if (!typed(info)) return nullptr;
  DType t = info.in(0).dtype;
  const auto& x = info.in(0).dims;
  const auto& y = info.out(0).dims;
  if (!copyableType(t) || info.out(0).dtype != t || x.size() > y.size()) return nullptr;
  auto xs = stridesOf(x);
  std::vector<int64_t> src(y.size(), 0);
  size_t off = y.size() - x.size();
  for (size_t k = 0; k < x.size(); ++k) {
    if (x[k] != y[off + k] && x[k] != 1) return nullptr;
    src[off + k] = x[k] == 1 ? 0 : xs[k];
  }
  auto p = part(y, src, stridesOf(y));
  if (!p) return nullptr;
  return std::make_unique<CopyStridedKernel>(elemBytes(t), std::vector{*p});
}

class GatherKernel : public CudaKernel {
 public:
  GatherKernel(size_t bytes, bool idx64, int64_t outer, int64_t len, int64_t inner, int64_t nIdx)
      : bytes_(bytes), idx64_(idx64), outer_(outer), len_(len), inner_(inner), nIdx_(nIdx) {}
  void compute(const CudaComputeArgs& a) const override {
    gather(static_cast<int>(bytes_), a.inputs[0], a.inputs[1], idx64_, a.outputs[0], outer_, len_, inner_, nIdx_, a.ctx->stream);
  }

 private:
  size_t bytes_;
  bool idx64_;
  int64_t outer_, len_, inner_, nIdx_;
};

std::unique_ptr<CudaKernel> createGather(const CudaNodeInfo& info) {
  if (!typed(info) || !info.hasInput(1)) return nullptr;
  DType t = info.in(0).dtype, it = info.in(1).dtype;
  const auto& x = info.in(0).dims;
  if (!copyableType(t) || info.out(0).dtype != t || (it != DType::Int64 && it != DType::Int32) || x.empty()) return nullptr;
  int64_t axis = info.node->attrInt("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.size())) return nullptr;
  auto a = static_cast<size_t>(axis);
  return std::make_unique<GatherKernel>(elemBytes(t), it == DType::Int64, product(x, 0, a), x[a], product(x, a + 1, x.size()),
                                        info.in(1).numElements());
}

class CastKernel : public CudaKernel {
 public:
  CastKernel(DType from, DType to, int64_t n) : from_(from), to_(to), n_(n) {}
  void compute(const CudaComputeArgs& a) const override { cast(dt(from_), dt(to_), a.inputs[0], a.outputs[0], n_, a.ctx->stream); }

 private:
  DType from_, to_;
  int64_t n_;
};

std::unique_ptr<CudaKernel> createCast(const CudaNodeInfo& info) {
  if (!typed(info)) return nullptr;
  DType from = info.in(0).dtype, to = info.out(0).dtype;
  // bfloat16 rounding of the ONNX test data differs between onnx releases, and double <-> half
  // would round twice: those run on the reference kernel.
  auto logicalTo = static_cast<DType>(info.node->attrInt("to", 0));
  if (logicalTo == DType::BFloat16 && from != DType::BFloat16) return nullptr;
  if ((from == DType::Double && (to == DType::Float16 || to == DType::BFloat16)) ||
      (to == DType::Double && (from == DType::Float16 || from == DType::BFloat16)))
    return nullptr;
  if (!castSupported(dt(from), dt(to))) return nullptr;
  if (from == to && dtypeBits(from) % 8 == 0) return std::make_unique<CopyKernel>(static_cast<size_t>(info.in(0).numElements()) * elemBytes(from));
  return std::make_unique<CastKernel>(from, to, info.in(0).numElements());
}

// ---- matrix products (cuBLAS) ----

cudaDataType blasType(DType t) {
  return t == DType::Float16 ? CUDA_R_16F : t == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

/// Row-major C[batch, M, N] = alpha * op(A) op(B) + beta * C, batches by stride (0: shared).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0;
  bool transA = false, transB = false;
  float alpha = 1, beta = 0;
};

void runGemm(const DeviceContext& ctx, DType t, const GemmShape& g, const void* a, const void* b, void* c) {
  if (g.m == 0 || g.n == 0) return;
  auto* h = reinterpret_cast<cublasHandle_t>(ctx.blas);
  cublasComputeType_t compute = ctx.precision == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType type = blasType(t);
  // column-major view: C^T[N, M] = op(B)^T op(A)^T
  cublasOperation_t opB = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N, opA = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto ldb = static_cast<int>(g.transB ? g.k : g.n), lda = static_cast<int>(g.transA ? g.m : g.k);
  auto m = static_cast<int>(g.n), n = static_cast<int>(g.m), k = static_cast<int>(g.k);
  if (g.batch == 1)
    checkBlas(cublasGemmEx(h, opB, opA, m, n, k, &g.alpha, b, type, ldb, a, type, lda, &g.beta, c, type, m, compute,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  else
    checkBlas(cublasGemmStridedBatchedEx(h, opB, opA, m, n, k, &g.alpha, b, type, ldb, g.strideB, a, type, lda, g.strideA,
                                         &g.beta, c, type, m, g.strideC, static_cast<int>(g.batch), compute,
                                         CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
}

class MatMulKernel : public CudaKernel {
 public:
  MatMulKernel(DType t, GemmShape g) : t_(t), g_(g) {}
  void compute(const CudaComputeArgs& a) const override {
    runGemm(*a.ctx, t_, g_, a.inputs[0], a.inputs[1], a.outputs[0]);
    if (hasEpilogue())
      rowBiasAct(dt(t_), a.outputs[0], nullptr, residualPtr(a), a.outputs[0], g_.batch * g_.m, g_.n, act_, actA_, actB_,
                 a.ctx->stream);
  }
  double flops() const override { return 2.0 * static_cast<double>(g_.m * g_.n * g_.k * g_.batch); }
  bool fuseEpilogue(Unary act, float a, float b, int residual) override { return takeEpilogue(act, a, b, residual); }
  bool fuseScale(float s) override {
    if (hasEpilogue()) return false;
    g_.alpha *= s;
    return true;
  }

 private:
  DType t_;
  GemmShape g_;
};

std::unique_ptr<CudaKernel> createMatMul(const CudaNodeInfo& info) {
  if (!info.ctx->blas || !typed(info) || !info.hasInput(1)) return nullptr;
  DType t = info.in(0).dtype;
  if (!isFloat(t) || info.in(1).dtype != t || info.out(0).dtype != t) return nullptr;
  std::vector<int64_t> a = info.in(0).dims, b = info.in(1).dims;
  if (a.empty() || b.empty()) return nullptr;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  GemmShape g;
  g.m = a[a.size() - 2], g.k = a.back(), g.n = b.back();
  if (b[b.size() - 2] != g.k || g.k == 0) return nullptr;
  std::vector<int64_t> ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  int64_t na = product(ab, 0, ab.size()), nb = product(bb, 0, bb.size());
  size_t r = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), r - ab.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  if (ab == bb) {
    g.batch = na, g.strideA = g.m * g.k, g.strideB = g.k * g.n;
  } else if (nb == 1) {  // one B for every batch of A: A's rows are one matrix
    g.m *= na;
  } else if (na == 1) {
    g.batch = nb, g.strideA = 0, g.strideB = g.k * g.n;
  } else {
    return nullptr;  // batch dims broadcast both ways
  }
  g.strideC = g.m * g.n;
  if (product(info.out(0).dims, 0, info.out(0).dims.size()) != g.batch * g.m * g.n) return nullptr;
  if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX || g.batch > INT32_MAX) return nullptr;
  return std::make_unique<MatMulKernel>(t, g);
}

/// Gemm: a bias row (C of [N] or [1, N], beta 1) added in the epilogue with the fused
/// activation; any other C (broadcast) copied into Y first, then Y = alpha A B + beta Y.
class GemmKernel : public CudaKernel {
 public:
  GemmKernel(DType t, GemmShape g, std::optional<CopyStridedKernel::Part> c, bool biasRow)
      : t_(t), g_(g), c_(c), biasRow_(biasRow) {
    if (biasRow_) g_.beta = 0;
  }
  void compute(const CudaComputeArgs& a) const override {
    if (c_ && !biasRow_) stridedCopy(static_cast<int>(elemBytes(t_)), a.inputs[2], a.outputs[0], c_->c, a.ctx->stream);
    runGemm(*a.ctx, t_, g_, a.inputs[0], a.inputs[1], a.outputs[0]);
    if (biasRow_ || hasEpilogue())
      rowBiasAct(dt(t_), a.outputs[0], biasRow_ ? a.inputs[2] : nullptr, residualPtr(a), a.outputs[0], g_.m, g_.n, act_, actA_,
                 actB_, a.ctx->stream);
  }
  double flops() const override { return 2.0 * static_cast<double>(g_.m * g_.n * g_.k); }
  bool fuseEpilogue(Unary act, float a, float b, int residual) override { return takeEpilogue(act, a, b, residual); }
  bool fuseScale(float s) override {
    if (hasEpilogue() || (c_ && !biasRow_)) return false;  // the scale would reach beta C
    if (biasRow_) return false;  // (alpha A B + C) s: the bias would need scaling too
    g_.alpha *= s;
    return true;
  }

 private:
  DType t_;
  GemmShape g_;
  std::optional<CopyStridedKernel::Part> c_;
  bool biasRow_;
};

std::unique_ptr<CudaKernel> createGemm(const CudaNodeInfo& info) {
  if (!info.ctx->blas || !typed(info) || !info.hasInput(1)) return nullptr;
  DType t = info.in(0).dtype;
  if (!isFloat(t) || info.in(1).dtype != t || info.out(0).dtype != t) return nullptr;
  const auto& a = info.in(0).dims;
  const auto& b = info.in(1).dims;
  if (a.size() != 2 || b.size() != 2) return nullptr;
  GemmShape g;
  g.transA = info.node->attrInt("transA", 0) != 0;
  g.transB = info.node->attrInt("transB", 0) != 0;
  g.alpha = info.node->attrFloat("alpha", 1.0f);
  g.m = g.transA ? a[1] : a[0];
  g.k = g.transA ? a[0] : a[1];
  g.n = g.transB ? b[0] : b[1];
  if ((g.transB ? b[1] : b[0]) != g.k) return nullptr;
  if (info.out(0).dims != std::vector<int64_t>{g.m, g.n}) return nullptr;
  if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX) return nullptr;
  std::optional<CopyStridedKernel::Part> c;
  if (info.hasInput(2)) {
    if (info.in(2).dtype != t) return nullptr;
    const auto& cd = info.in(2).dims;
    std::vector<int64_t> y{g.m, g.n};
    if (cd.size() > 2) return nullptr;
    auto cs = stridesOf(cd);
    std::vector<int64_t> src(2, 0);
    size_t off = 2 - cd.size();
    for (size_t k = 0; k < cd.size(); ++k) {
      if (cd[k] != y[off + k] && cd[k] != 1) return nullptr;
      src[off + k] = cd[k] == 1 ? 0 : cs[k];
    }
    c = part(y, src, stridesOf(y));
    if (!c) return nullptr;
    if (c->c.n == 0 && g.m * g.n > 0) {  // a one-element C: broadcast to every element
      c->c.rank = 1, c->c.n = g.m * g.n, c->c.dims[0] = g.m * g.n, c->c.src[0] = 0, c->c.dst[0] = 1;
    }
    g.beta = info.node->attrFloat("beta", 1.0f);
  }
  if (g.k == 0) return nullptr;  // Y = beta C alone: the reference kernel
  bool biasRow = info.hasInput(2) && g.beta == 1.0f && info.in(2).numElements() == g.n &&
                 (info.in(2).dims.size() == 1 || (info.in(2).dims.size() == 2 && info.in(2).dims[0] == 1));
  return std::make_unique<GemmKernel>(t, g, c, biasRow);
}

// ---- convolution (cuDNN) ----

struct ConvKey {
  std::vector<int64_t> x, w;
  std::vector<int> pads, strides, dilations;
  int group = 1;
  int dtype = 0;
  int math = 0;
  bool operator<(const ConvKey& o) const {
    return std::tie(x, w, pads, strides, dilations, group, dtype, math) <
           std::tie(o.x, o.w, o.pads, o.strides, o.dilations, o.group, o.dtype, o.math);
  }
};
struct ConvChoice {
  cudnnConvolutionFwdAlgo_t algo;
  size_t workspace;
  cudnnMathType_t math;
};
std::mutex gConvMutex;
std::map<ConvKey, ConvChoice> gConvChoices;  ///< measured once per shape for the process

cudnnDataType_t dnnType(DType t) {
  return t == DType::Float16 ? CUDNN_DATA_HALF : t == DType::BFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

constexpr size_t kConvWorkspaceLimit = size_t{1} << 30;

const char* algoName(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "implicit_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "implicit_precomp_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "fft_tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
    default: return "?";
  }
}

class ConvKernel : public CudaKernel {
 public:
  ~ConvKernel() override {
    if (x_) cudnnDestroyTensorDescriptor(x_);
    if (y_) cudnnDestroyTensorDescriptor(y_);
    if (w_) cudnnDestroyFilterDescriptor(w_);
    if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  }

  static std::unique_ptr<CudaKernel> create(const CudaNodeInfo& info);

  size_t workspaceBytes() const override { return choice_.workspace; }
  void compute(const CudaComputeArgs& a) const override {
    float one = 1, zero = 0;
    auto* h = reinterpret_cast<cudnnHandle_t>(a.ctx->dnn);
    const void* w = weights_.get() ? weights_.get() : a.inputs[1];
    checkDnn(cudnnConvolutionForward(h, &one, x_, a.inputs[0], w_, w, conv_, choice_.algo, a.workspace, choice_.workspace,
                                     &zero, y_, a.outputs[0]),
             "cudnnConvolutionForward");
    if (bias_.get() || hasEpilogue())
      channelAffine(dt(t_), a.outputs[0], nullptr, static_cast<const float*>(bias_.get()), residualPtr(a), a.outputs[0], n_,
                    c_, inner_, act_, actA_, actB_, a.ctx->stream);
  }
  double flops() const override { return flops_; }
  std::string variant() const override {
    return fmt::format(".{}{}", algoName(choice_.algo), choice_.math == CUDNN_TENSOR_OP_MATH || choice_.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? ".tc" : "");
  }
  bool readsInput(size_t i) const override {
    if (isResidual(i)) return true;
    if (i == 1) return !weights_.get();
    return i == 0;
  }
  bool fuseEpilogue(Unary act, float a, float b, int residual) override { return takeEpilogue(act, a, b, residual); }

 private:
  DType t_ = DType::Float;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  ConvChoice choice_{};
  DeviceBuffer weights_, bias_;
  int64_t n_ = 0, c_ = 0, inner_ = 0;
  double flops_ = 0;
};

/// A constant's bytes on the device in storage type `t` (float32 constants converted there).
DeviceBuffer uploadAs(const TensorData& c, DType t, cudaStream_t stream) {
  DeviceBuffer raw = DeviceBuffer::upload(c.raw.data(), c.raw.size());
  if (c.dtype() == t) return raw;
  int64_t n = c.numElements().value_or(0);
  DeviceBuffer out(static_cast<size_t>(n) * elemBytes(t));
  cast(dt(c.dtype()), dt(t), raw.get(), out.get(), n, stream);
  check(cudaStreamSynchronize(stream), "converting a constant");
  return out;
}

std::unique_ptr<CudaKernel> ConvKernel::create(const CudaNodeInfo& info) {
  if (!info.ctx->dnn || !typed(info) || !info.hasInput(1)) return nullptr;
  DType t = info.in(0).dtype;
  if (!isFloat(t) || info.in(1).dtype != t || info.out(0).dtype != t) return nullptr;
  std::vector<int64_t> x = info.in(0).dims, w = info.in(1).dims, y = info.out(0).dims;
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size() || y.size() != x.size()) return nullptr;
  size_t sp = x.size() - 2;
  auto group = info.node->attrInt("group", 1);
  std::vector<int64_t> k(w.begin() + 2, w.end());
  auto ks = info.node->attrInts("kernel_shape");
  if (!ks.empty() && ks != k) return nullptr;
  auto s = info.node->attrInts("strides", std::vector<int64_t>(sp, 1));
  auto dl = info.node->attrInts("dilations", std::vector<int64_t>(sp, 1));
  auto pads = info.node->attrInts("pads", std::vector<int64_t>(2 * sp, 0));
  if (s.size() != sp || dl.size() != sp || pads.size() != 2 * sp) return nullptr;
  std::string autoPad = info.node->attrString("auto_pad", "NOTSET");
  if (autoPad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < sp; ++i) {
      int64_t total = std::max<int64_t>(0, (y[2 + i] - 1) * s[i] + (k[i] - 1) * dl[i] + 1 - x[2 + i]);
      pads[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[i + sp] = total - pads[i];
    }
  } else if (autoPad != "NOTSET") return nullptr;
  for (size_t i = 0; i < sp; ++i)
    if (pads[i] != pads[i + sp]) return nullptr;  // cuDNN pads both sides alike
  if (group < 1 || x[1] != w[1] * group || w[0] % group) return nullptr;
  if (x[0] == 0 || y[0] * y[1] == 0) return nullptr;
  // 1-D convolutions as 2-D with a height of 1
  std::vector<int> pd, st, di;
  for (size_t i = 0; i < sp; ++i) {
    pd.push_back(static_cast<int>(pads[i]));
    st.push_back(static_cast<int>(s[i]));
    di.push_back(static_cast<int>(dl[i]));
  }
  if (sp == 1) {
    x.insert(x.begin() + 2, 1), w.insert(w.begin() + 2, 1), y.insert(y.begin() + 2, 1);
    pd.insert(pd.begin(), 0), st.insert(st.begin(), 1), di.insert(di.begin(), 1);
  }
  auto kernel = std::make_unique<ConvKernel>();
  ConvKernel& kr = *kernel;
  kr.t_ = t;
  auto toInt = [](const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
  auto xi = toInt(x), wi = toInt(w), yi = toInt(y);
  auto packed = [](const std::vector<int>& d) {
    std::vector<int> s(d.size(), 1);
    for (size_t k = d.size(); k-- > 1;) s[k - 1] = s[k] * d[k];
    return s;
  };
  auto xs = packed(xi), ys = packed(yi);
  checkDnn(cudnnCreateTensorDescriptor(&kr.x_), "descriptor");
  checkDnn(cudnnCreateTensorDescriptor(&kr.y_), "descriptor");
  checkDnn(cudnnCreateFilterDescriptor(&kr.w_), "descriptor");
  checkDnn(cudnnCreateConvolutionDescriptor(&kr.conv_), "descriptor");
  auto nd = static_cast<int>(xi.size());
  if (cudnnSetTensorNdDescriptor(kr.x_, dnnType(t), nd, xi.data(), xs.data()) != CUDNN_STATUS_SUCCESS ||
      cudnnSetTensorNdDescriptor(kr.y_, dnnType(t), nd, yi.data(), ys.data()) != CUDNN_STATUS_SUCCESS ||
      cudnnSetFilterNdDescriptor(kr.w_, dnnType(t), CUDNN_TENSOR_NCHW, nd, wi.data()) != CUDNN_STATUS_SUCCESS ||
      cudnnSetConvolutionNdDescriptor(kr.conv_, nd - 2, pd.data(), st.data(), di.data(), CUDNN_CROSS_CORRELATION,
                                      CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
      cudnnSetConvolutionGroupCount(kr.conv_, static_cast<int>(group)) != CUDNN_STATUS_SUCCESS)
    return nullptr;  // a shape cuDNN does not take
  Precision p = info.ctx->precision;
  cudnnMathType_t math = p == Precision::FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  checkDnn(cudnnSetConvolutionMathType(kr.conv_, math), "math type");
  std::vector<int> outDims(static_cast<size_t>(nd));
  if (cudnnGetConvolutionNdForwardOutputDim(kr.conv_, kr.x_, kr.w_, nd, outDims.data()) != CUDNN_STATUS_SUCCESS ||
      outDims != yi)
    return nullptr;

  cudaStream_t stream = info.ctx->stream;
  if (const TensorData* wc = info.constant(1)) kr.weights_ = uploadAs(*wc, t, stream);
  if (info.hasInput(2)) {
    const TensorData* bc = info.constant(2);
    if (!bc || bc->numElements().value_or(-1) != y[1]) return nullptr;
    std::vector<float> bias(static_cast<size_t>(y[1]));
    for (size_t j = 0; j < bias.size(); ++j) bias[j] = static_cast<float>(bc->elementAsDouble(j));
    kr.bias_ = DeviceBuffer::upload(bias.data(), bias.size() * 4);
  }
  kr.n_ = y[0], kr.c_ = y[1], kr.inner_ = product(y, 2, y.size());
  kr.flops_ = 2.0 * static_cast<double>(product(y, 0, y.size())) * static_cast<double>(product(w, 1, w.size()));

  ConvKey key{x, w, pd, st, di, static_cast<int>(group), dt(t), static_cast<int>(math)};
  bool known = false;
  {
    std::lock_guard lock(gConvMutex);
    auto it = gConvChoices.find(key);
    if (it != gConvChoices.end()) kr.choice_ = it->second, known = true;
  }
  if (!known) {
    // measure every algorithm on scratch buffers (random-free: the timings do not depend on values)
    DeviceBuffer xb(static_cast<size_t>(product(x, 0, x.size())) * elemBytes(t));
    DeviceBuffer yb(static_cast<size_t>(product(y, 0, y.size())) * elemBytes(t));
    DeviceBuffer wb;
    if (!kr.weights_.get()) wb = DeviceBuffer(static_cast<size_t>(product(w, 0, w.size())) * elemBytes(t));
    size_t freeB = 0, totalB = 0;
    cudaMemGetInfo(&freeB, &totalB);
    size_t limit = std::min(kConvWorkspaceLimit, freeB / 4);
    DeviceBuffer ws;
    try {
      ws = DeviceBuffer(limit);
    } catch (const Error&) {
      limit = 0;
    }
    check(cudaMemsetAsync(xb.get(), 0, xb.size(), stream), "cudaMemsetAsync");
    auto* h = reinterpret_cast<cudnnHandle_t>(info.ctx->dnn);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    checkDnn(cudnnFindConvolutionForwardAlgorithmEx(h, kr.x_, xb.get(), kr.w_, kr.weights_.get() ? kr.weights_.get() : wb.get(),
                                                    kr.conv_, kr.y_, yb.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf,
                                                    ws.get(), limit),
             "cudnnFindConvolutionForwardAlgorithmEx");
    bool chosen = false;
    for (int i = 0; i < found && !chosen; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit) continue;
      if (p == Precision::FP32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH) continue;

      kr.choice_ = {perf[i].algo, perf[i].memory, p == Precision::FP32 ? CUDNN_FMA_MATH : perf[i].mathType};
      chosen = true;
    }
    if (!chosen) return nullptr;
    std::lock_guard lock(gConvMutex);
    gConvChoices.emplace(key, kr.choice_);
  }
  checkDnn(cudnnSetConvolutionMathType(kr.conv_, kr.choice_.math), "math type");
  return kernel;
}

std::unique_ptr<CudaKernel> createConv(const CudaNodeInfo& info) { return ConvKernel::create(info); }

constexpr int kLast = 1 << 20;

const CudaKernelDef kKernels[] = {
    {"", "Conv", 1, kLast, "cuda.conv.cudnn", Reuse::None, createConv},
    {"", "MatMul", 1, kLast, "cuda.matmul.cublas", Reuse::None, createMatMul},
    {"", "Gemm", 7, kLast, "cuda.gemm.cublas", Reuse::None, createGemm},
    {"", "Relu", 6, kLast, "cuda.relu", Reuse::None, createRelu},
    {"", "LeakyRelu", 6, kLast, "cuda.leakyrelu", Reuse::None, createLeakyRelu},
    {"", "Sigmoid", 6, kLast, "cuda.sigmoid", Reuse::None, createSigmoid},
    {"", "Tanh", 6, kLast, "cuda.tanh", Reuse::None, createTanh},
    {"", "Erf", 9, kLast, "cuda.erf", Reuse::None, createErf},
    {"", "Exp", 6, kLast, "cuda.exp", Reuse::None, createExp},
    {"", "Log", 6, kLast, "cuda.log", Reuse::None, createLog},
    {"", "Sqrt", 6, kLast, "cuda.sqrt", Reuse::None, createSqrt},
    {"", "Reciprocal", 6, kLast, "cuda.reciprocal", Reuse::None, createReciprocal},
    {"", "Neg", 6, kLast, "cuda.neg", Reuse::None, createNeg},
    {"", "Abs", 6, kLast, "cuda.abs", Reuse::None, createAbs},
    {"", "Floor", 6, kLast, "cuda.floor", Reuse::None, createFloor},
    {"", "Ceil", 6, kLast, "cuda.ceil", Reuse::None, createCeil},
    {"", "Round", 11, kLast, "cuda.round", Reuse::None, createRound},
    {"", "Sign", 9, kLast, "cuda.sign", Reuse::None, createSign},
    {"", "Clip", 6, kLast, "cuda.clip", Reuse::None, createClip},
    {"", "HardSigmoid", 6, kLast, "cuda.hardsigmoid", Reuse::None, createHardSigmoid},
    {"", "HardSwish", 14, kLast, "cuda.hardswish", Reuse::None, createHardSwish},
    {"", "Gelu", 20, kLast, "cuda.gelu", Reuse::None, createGelu},
    {"", "Softplus", 1, kLast, "cuda.softplus", Reuse::None, createSoftplus},
    {"", "Softsign", 1, kLast, "cuda.softsign", Reuse::None, createSoftsign},
    {"", "Elu", 6, kLast, "cuda.elu", Reuse::None, createElu},
    {"", "Selu", 6, kLast, "cuda.selu", Reuse::None, createSelu},
    {"", "Celu", 12, kLast, "cuda.celu", Reuse::None, createCelu},
    {"", "ThresholdedRelu", 10, kLast, "cuda.thresholdedrelu", Reuse::None, createThresholdedRelu},
    {"", "Mish", 18, kLast, "cuda.mish", Reuse::None, createMish},
    {"", "Sin", 7, kLast, "cuda.sin", Reuse::None, createSin},
    {"", "Cos", 7, kLast, "cuda.cos", Reuse::None, createCos},
    {"", "Tan", 7, kLast, "cuda.tan", Reuse::None, createTan},
    {"", "Asin", 7, kLast, "cuda.asin", Reuse::None, createAsin},
    {"", "Acos", 7, kLast, "cuda.acos", Reuse::None, createAcos},
    {"", "Atan", 7, kLast, "cuda.atan", Reuse::None, createAtan},
    {"", "Sinh", 9, kLast, "cuda.sinh", Reuse::None, createSinh},
    {"", "Cosh", 9, kLast, "cuda.cosh", Reuse::None, createCosh},
    {"", "Asinh", 9, kLast, "cuda.asinh", Reuse::None, createAsinh},
    {"", "Acosh", 9, kLast, "cuda.acosh", Reuse::None, createAcosh},
    {"", "Atanh", 9, kLast, "cuda.atanh", Reuse::None, createAtanh},
    {"", "Add", 7, kLast, "cuda.add", Reuse::None, createAdd},
    {"", "Sub", 7, kLast, "cuda.sub", Reuse::None, createSub},
    {"", "Mul", 7, kLast, "cuda.mul", Reuse::None, createMul},
    {"", "Div", 7, kLast, "cuda.div", Reuse::None, createDiv},
    {"", "Pow", 7, kLast, "cuda.pow", Reuse::None, createPow},
    {"", "Max", 8, kLast, "cuda.max", Reuse::None, createMax},
    {"", "Min", 8, kLast, "cuda.min", Reuse::None, createMin},
    {"", "Sum", 8, kLast, "cuda.sum", Reuse::None, createSum},
    {"", "PRelu", 7, kLast, "cuda.prelu", Reuse::None, createPRelu},
    {"", "Equal", 7, kLast, "cuda.equal", Reuse::None, createEqual},
    {"", "Less", 7, kLast, "cuda.less", Reuse::None, createLess},
    {"", "Greater", 7, kLast, "cuda.greater", Reuse::None, createGreater},
    {"", "LessOrEqual", 12, kLast, "cuda.lessorequal", Reuse::None, createLessOrEqual},
    {"", "GreaterOrEqual", 12, kLast, "cuda.greaterorequal", Reuse::None, createGreaterOrEqual},
    {"", "And", 7, kLast, "cuda.and", Reuse::None, createAnd},
    {"", "Or", 7, kLast, "cuda.or", Reuse::None, createOr},
    {"", "Xor", 7, kLast, "cuda.xor", Reuse::None, createXor},
    {"", "Where", 9, kLast, "cuda.where", Reuse::None, createWhere},
    {"", "Softmax", 1, kLast, "cuda.softmax", Reuse::None, createSoftmax},
    {"", "LogSoftmax", 1, kLast, "cuda.logsoftmax", Reuse::None, createLogSoftmax},
    {"", "LayerNormalization", 17, kLast, "cuda.layernorm", Reuse::None, createLayerNormalization},
    {"", "BatchNormalization", 9, kLast, "cuda.batchnorm", Reuse::None, createBatchNormalization},
    {"", "MaxPool", 1, kLast, "cuda.maxpool", Reuse::None, createMaxPool},
    {"", "AveragePool", 7, kLast, "cuda.averagepool", Reuse::None, createAveragePool},
    {"", "GlobalAveragePool", 1, kLast, "cuda.globalaveragepool", Reuse::None, createGlobalAveragePool},
    {"", "GlobalMaxPool", 1, kLast, "cuda.globalmaxpool", Reuse::None, createGlobalMaxPool},
    {"", "ReduceMean", 1, kLast, "cuda.reducemean", Reuse::None, createReduceMean},
    {"", "ReduceSum", 1, kLast, "cuda.reducesum", Reuse::None, createReduceSum},
    {"", "ReduceMax", 1, kLast, "cuda.reducemax", Reuse::None, createReduceMax},
    {"", "ReduceMin", 1, kLast, "cuda.reducemin", Reuse::None, createReduceMin},
    {"", "ReduceProd", 1, kLast, "cuda.reduceprod", Reuse::None, createReduceProd},
    {"", "ReduceSumSquare", 1, kLast, "cuda.reducesumsquare", Reuse::None, createReduceSumSquare},
    {"", "ReduceL1", 1, kLast, "cuda.reducel1", Reuse::None, createReduceL1},
    {"", "ReduceL2", 1, kLast, "cuda.reducel2", Reuse::None, createReduceL2},
    {"", "ReduceLogSumExp", 1, kLast, "cuda.reducelogsumexp", Reuse::None, createReduceLogSumExp},
    {"", "Reshape", 5, kLast, "cuda.reshape", Reuse::View, createView},
    {"", "Flatten", 1, kLast, "cuda.flatten", Reuse::View, createView},
    {"", "Squeeze", 1, kLast, "cuda.squeeze", Reuse::View, createView},
    {"", "Unsqueeze", 1, kLast, "cuda.unsqueeze", Reuse::View, createView},
    {"", "Identity", 1, kLast, "cuda.identity", Reuse::View, createView},
    {"", "Transpose", 1, kLast, "cuda.transpose", Reuse::None, createTranspose},
    {"", "Concat", 4, kLast, "cuda.concat", Reuse::None, createConcat},
    {"", "Split", 2, kLast, "cuda.split", Reuse::None, createSplit, true},
    {"", "Slice", 1, kLast, "cuda.slice", Reuse::None, createSlice},
    {"", "Expand", 8, kLast, "cuda.expand", Reuse::None, createExpand},
    {"", "Gather", 1, kLast, "cuda.gather", Reuse::None, createGather},
    {"", "Cast", 6, kLast, "cuda.cast", Reuse::None, createCast},
};

}  // namespace

std::span<const CudaKernelDef> cudaKernels() { return kKernels; }

const CudaKernelDef* findCudaKernel(std::string_view domain, std::string_view opType, int schemaVersion) {
  for (const auto& k : kKernels)
    if (k.domain == domain && k.opType == opType && schemaVersion >= k.sinceVersion && schemaVersion <= k.lastVersion)
      return &k;
  return nullptr;
}

}  // namespace onnxtool::cuda
