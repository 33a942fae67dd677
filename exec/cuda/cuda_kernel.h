// cuda_kernel.h: the kernel seam of the `cuda` executor, the device twin of exec/cpu/cpu_kernel.h.
// A kernel is an object created once per node when a plan is prepared, from the node and the
// concrete types of its values as they are stored on the device (float32 values are float16 or
// bfloat16 under --precision fp16/bf16); it may upload or transform its constant inputs once and
// then computes many times on the plan's stream. The executor places every output (and the
// kernel's workspace) in the plan's device arena; kernels never allocate on the compute path, so
// a run can be captured into a CUDA graph and replayed.
//
// Kernels are found in one table (cuda_kernels.cpp) keyed by domain, op and a schema version
// range; `create` declines (returns nullptr) what it does not handle exactly (an element type, an
// attribute, asymmetric padding), and the node then runs on the reference kernel on the host,
// with copies at the border.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include "exec/cuda/launch.h"
#include "lib/dtype.h"
#include "lib/ir.h"

struct cublasContext;
struct cudnnContext;
struct cublasLtContext;

namespace onnxtool::cuda {

/// How float32 values are stored and multiplied on the device (`--precision`).
enum class Precision : uint8_t {
  FP32,  ///< float32 everywhere; cuBLAS and cuDNN without TF32
  TF32,  ///< float32 storage; matrix products and convolutions on TF32 tensor cores
  FP16,  ///< float16 storage, float32 accumulation (Softmax, LayerNorm, reductions in float32)
  BF16,  ///< bfloat16 storage, float32 accumulation
};
std::string_view precisionName(Precision p);

/// Throws Error(kind, ...) naming `what` when a CUDA runtime call failed.
void check(cudaError_t e, std::string_view what);

/// Device memory owned by one object (weights a kernel transformed at creation).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// A buffer holding these host bytes (copied synchronously).
  static DeviceBuffer upload(const void* host, size_t bytes);
  void* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

/// Library handles of one plan, bound to its stream.
struct DeviceContext {
  cudaStream_t stream = nullptr;
  cublasContext* blas = nullptr;
  cudnnContext* dnn = nullptr;
  void* blasWorkspace = nullptr;  ///< given to cuBLAS so that it allocates nothing while a graph is captured
  size_t blasWorkspaceBytes = 0;
  Precision precision = Precision::FP32;
  int device = 0;
};

/// The concrete type of a value as stored on the device.
struct DevTensorType {
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

/// What a kernel is created from. `inputs`/`outputs` hold nullptr for omitted values.
/// `constants[i]` is input i's constant value on the host (an initializer, in the model's own
/// element type: float32 even when it is stored as float16 on the device), else nullptr.
struct CudaNodeInfo {
  const Node* node = nullptr;
  int64_t opset = 0;
  int sinceVersion = 0;
  std::vector<const DevTensorType*> inputs, outputs;
  std::vector<const TensorData*> constants;
  const DeviceContext* ctx = nullptr;
  const DevTensorType& in(size_t i) const { return *inputs.at(i); }
  const DevTensorType& out(size_t i) const { return *outputs.at(i); }
  bool hasInput(size_t i) const { return i < inputs.size() && inputs[i]; }
  const TensorData* constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
};

struct CudaComputeArgs {
  std::span<const void* const> inputs;  ///< device pointers; nullptr for omitted inputs
  std::span<void* const> outputs;       ///< device pointers; nullptr for omitted outputs
  void* workspace = nullptr;
  const DeviceContext* ctx = nullptr;
};

class CudaKernel {
 public:
  virtual ~CudaKernel() = default;
  /// Device bytes of scratch compute() needs (live only while this node runs).
  virtual size_t workspaceBytes() const { return 0; }
  /// Enqueues the node's work on ctx->stream. Must not allocate or synchronise.
  virtual void compute(const CudaComputeArgs& args) const = 0;
  /// Floating-point operations of one compute call (bench --profile), 0 when not counted.
  virtual double flops() const { return 0; }
  /// Appended to the table's kernel name in profiles (the cuDNN algorithm chosen).
  virtual std::string variant() const { return {}; }
  /// Whether compute() reads input i on the device. False for constants the kernel only read at
  /// creation (Reshape's shape) or transformed into its own buffers: those are not uploaded.
  virtual bool readsInput(size_t i) const {
    (void)i;
    return true;
  }
  /// Executor fusion: apply `act` (with its attributes a, b) to output 0 as it is stored, after
  /// adding input `residualInput` (a tensor of output 0's shape; -1: none). False: the kernel
  /// cannot, and the nodes stay apart.
  virtual bool fuseEpilogue(Unary act, float a, float b, int residualInput) {
    (void)act, (void)a, (void)b, (void)residualInput;
    return false;
  }
  /// Executor fusion: multiply output 0 by `s` (a following Mul or Div by a constant scalar),
  /// before any epilogue. False: the kernel cannot.
  virtual bool fuseScale(float s) {
    (void)s;
    return false;
  }

 protected:
  bool isResidual(size_t i) const { return residual_ >= 0 && static_cast<size_t>(residual_) == i; }
  /// For kernels that take fuseEpilogue: records it.
  bool takeEpilogue(Unary act, float a, float b, int residualInput) {
    act_ = act, actA_ = a, actB_ = b, residual_ = residualInput;
    return true;
  }
  bool hasEpilogue() const { return act_ != Unary::Identity || residual_ >= 0; }
  const void* residualPtr(const CudaComputeArgs& args) const {
    return residual_ >= 0 ? args.inputs[static_cast<size_t>(residual_)] : nullptr;
  }
  Unary act_ = Unary::Identity;
  float actA_ = 0, actB_ = 0;
  int residual_ = -1;
};

enum class Reuse : uint8_t {
  None,  ///< a fresh buffer
  View,  ///< output 0 is input 0's bytes (Reshape, Squeeze, ...): compute does nothing
};

struct CudaKernelDef {
  std::string_view domain;
  std::string_view opType;
  int sinceVersion, lastVersion;
  std::string_view name;  ///< "cuda.conv.cudnn"
  Reuse reuse;
  std::unique_ptr<CudaKernel> (*create)(const CudaNodeInfo& info);
  bool allOutputs = false;  ///< computes every output (Split); else only output 0
};

/// The first kernel of the table for (domain, op, schema version), or nullptr.
const CudaKernelDef* findCudaKernel(std::string_view domain, std::string_view opType, int schemaVersion);
std::span<const CudaKernelDef> cudaKernels();

/// The device element type a float32 value is stored in under `p`.
DType storageType(DType logical, Precision p);

}  // namespace onnxtool::cuda
