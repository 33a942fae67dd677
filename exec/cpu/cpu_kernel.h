// cpu_kernel.h: the kernel seam of the `cpu` executor. A kernel is an object created once per
// node when a plan is prepared (from the node, its opset and the concrete types shape inference
// gave its inputs and outputs), may prepack its constant inputs (weights) once, and then
// computes many times, possibly from several threads at once (compute is const). The executor
// allocates every output (and the kernel's scratch workspace) from the plan's memory arena;
// kernels never allocate on the compute path.
//
// Kernels are found in one explicit table (cpu_kernels.cpp) keyed by domain, op, a schema
// version range and the element type, and named like coordinates (`cpu.conv.f32.im2col`).
// A `create` may decline a node (return nullptr: an attribute or shape it does not handle);
// the node then falls back to the reference kernel through the same seam.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "exec/cpu/thread_pool.h"
#include "exec/cpu/vec.h"
#include "lib/dtype.h"
#include "lib/ir.h"

namespace onnxtool::cpu {

/// The concrete type of a tensor value in a prepared plan: every dim is known.
struct StaticTensorType {
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

/// An epilogue the executor fused into a node at prepare (Conv followed by an inference
/// BatchNormalization with constant parameters, Add/Sum of a tensor of its output's shape, then
/// Relu or Clip): the kernel applies it before storing its output.
struct FusedEpilogue {
  /// BatchNormalization folded in, per output channel: y = conv * scale + shift (empty: none).
  std::vector<float> scale, shift;
  bool residual = false;  ///< input 3 (after the node's own three) is added to the output
  bool clamp = false;     ///< then clamped to [lo, hi] (Relu: [0, +inf]; Clip: its bounds)
  float lo = 0, hi = 0;
  VecUnary act = VecUnary::Count;  ///< then this activation (HardSwish); Count: none
  /// The input is first multiplied per (image, input channel) by input 4 (N x C elements): a
  /// channel-scale Mul fused in front of a pointwise Conv (input 3 absent without residual).
  bool inputScale = false;
  /// A pre-activation BatchNormalization + Relu in front of a pointwise Conv (DenseNet), per
  /// input channel: the conv reads relu(x * inScale + inShift), applied as it packs its input
  /// (empty: none). Input 0 is then the BatchNormalization's input.
  std::vector<float> inScale, inShift;
  std::string suffix;     ///< for the kernel's name in profiles: "+add+relu"
};

/// Constant inputs of one node packed once for every kernel made for it. The executor makes
/// a kernel per set of input shapes for a node whose shapes are known only at run time (lazy
/// kernels, cpu_executor.cpp); those kernels share what they pack here (a GEMM's B packed for
/// a panel width, whatever the row count), keyed by what the packing depends on. Thread-safe.
class PackCache {
 public:
  /// The object stored under `key`, made by `make` (under the cache's lock) if there is none.
  template <class T>
  std::shared_ptr<const T> get(const std::string& key, const std::function<std::shared_ptr<const T>()>& make) {
    std::lock_guard lock(mutex_);
    auto it = packs_.find(key);
    if (it == packs_.end()) it = packs_.emplace(key, std::shared_ptr<const void>(make())).first;
    return std::static_pointer_cast<const T>(it->second);
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const void>> packs_;
};

/// What a kernel is created from. `inputs`/`outputs` hold nullptr for omitted values; every
/// present one has a concrete type (outputs of OutputReuse::Dynamic kernels: nullptr).
/// `constants[i]` is input i's constant value (an initializer), else nullptr; its bytes are
/// aligned to 16 unless the kernel's def says `unalignedConstants`.
struct CpuNodeInfo {
  const Node* node = nullptr;
  int64_t opset = 0;        ///< opset of the node's domain imported by the model
  int sinceVersion = 0;     ///< schema version in force
  std::vector<const StaticTensorType*> inputs, outputs;
  std::vector<const TensorData*> constants;
  int threads = 1;
  /// Set when the executor fused following nodes into this one; a kernel that cannot apply it
  /// must decline (return nullptr), and the nodes then run unfused.
  const FusedEpilogue* fused = nullptr;
  /// Set for kernels made at run time (per set of input shapes): where packed constants are
  /// shared between the kernels of this node; null at prepare (the kernel packs its own).
  PackCache* packs = nullptr;
  /// A buffer create() may use for temporary copies of constants (weights at an odd address),
  /// kept by the plan build from one node to the next of the thread creating it, so that a copy
  /// reuses mapped pages instead of faulting fresh ones in; null: allocate one's own.
  std::vector<float>* scratch = nullptr;
  /// Whether the plan may use the blocked channel layout (kernels_nchwc.h): its graph has a
  /// depthwise convolution of whole channel blocks (where the layout gains); kernels then make
  /// their blocked twins (CpuKernel::nchwcTwin), else none (no packing twice).
  bool nchwc = false;
  /// Set when the plan creates the plain kernel of a step whose blocked twin it did not keep
  /// (kernels_nchwc.h PendingPlainConv): create() must not decline what it took the first time.
  bool deferredFrom = false;
  const StaticTensorType& in(size_t i) const { return *inputs.at(i); }
  const StaticTensorType& out(size_t i) const { return *outputs.at(i); }
  bool hasInput(size_t i) const { return i < inputs.size() && inputs[i]; }
};

/// Allocates the outputs of a kernel whose output shapes depend on its input values
/// (OutputReuse::Dynamic: NonMaxSuppression), while it computes.
class OutputAllocator {
 public:
  /// Fresh bytes for output k of the running node, of `dtype` and `dims` (aligned to 16 bytes,
  /// uninitialised, held by the run, not the arena). Throws Error(Internal) when shape inference
  /// had planned another type for it.
  virtual void* allocate(size_t k, DType dtype, std::span<const int64_t> dims) = 0;

 protected:
  ~OutputAllocator() = default;
};

/// Buffers of one compute call: input and output data (outputs sized by the plan), and the
/// scratch workspace the kernel asked for (aligned to 64 bytes).
struct CpuComputeArgs {
  std::span<const void* const> inputs;  ///< nullptr for omitted inputs
  /// nullptr for omitted outputs, and for every output of an OutputReuse::Dynamic kernel
  std::span<void* const> outputs;
  void* workspace = nullptr;
  /// The plan's intra-op pool (parallelFor(pool, ...) runs inline when null or busy).
  ThreadPool* pool = nullptr;
  /// Where an OutputReuse::Dynamic kernel gets its outputs (null for the others).
  OutputAllocator* alloc = nullptr;
};

class CpuKernel {
 public:
  virtual ~CpuKernel() = default;
  /// Bytes of scratch memory compute() needs (allocated in the plan's arena, live only while
  /// this node runs).
  virtual size_t workspaceBytes() const { return 0; }
  /// Runs the node. Must not allocate or keep state between calls (several runs may call it at
  /// once). Throws nothing for inputs of the types it was created for.
  virtual void compute(const CpuComputeArgs& args) const = 0;
  /// Floating-point operations of one compute call (for bench --profile), 0 when not counted.
  virtual double flops() const { return 0; }
  /// Appended to the table's kernel name in profiles: which variant create() chose (".gemm").
  virtual std::string variant() const { return {}; }
  /// Executor fusions at prepare (an epilogue applied while the output is hot): add a constant
  /// bias of `n` floats along output 0's last axis (copied), or apply `act` to output 0 after
  /// everything else. Return false when this kernel cannot (the nodes then stay apart).
  virtual bool fuseBias(const float* bias, int64_t n) { return false; }
  virtual bool fuseActivation(VecUnary act) { return false; }
  /// Whether compute() reads input i (its pointer in CpuComputeArgs::inputs). False only for a
  /// constant input the kernel copied (packed) at creation and keeps no pointer into: the plan
  /// then releases the initializer's bytes (and passes nullptr for it).
  virtual bool readsInput(size_t i) const {
    (void)i;
    return true;
  }
  /// Whether compute() reads input i with memcpy-safe accesses only (bytes at any address): an
  /// initializer read at run time is then given in place, where the model file put it, instead
  /// of as an aligned copy (an embedding table: only the rows gathered are ever paged in).
  virtual bool readsInputUnaligned(size_t i) const {
    (void)i;
    return false;
  }
  /// The node's kernel in the plan's blocked channel layout (kernels_nchwc.h: an NchwcKernel),
  /// made next to this one where that applies; the plan swaps it in (cpu_executor.cpp
  /// planBlockedLayout) or drops it.
  std::unique_ptr<CpuKernel> nchwcTwin;
};

/// How a kernel's output 0 relates to input 0, so that the memory plan can save buffers.
enum class OutputReuse : uint8_t {
  None,     ///< a fresh buffer
  InPlace,  ///< may be written over input 0 when input 0 dies here and has the same size
  View,     ///< is input 0's bytes reinterpreted (Reshape, Squeeze, ...): compute does nothing
  /// The output shapes depend on input values: created with null output types (unknown to
  /// shape inference), the kernel allocates its outputs through CpuComputeArgs::alloc.
  Dynamic,
};

struct CpuKernelDef {
  std::string_view domain;   ///< "" for ai.onnx
  std::string_view opType;
  int sinceVersion;          ///< first schema version served
  int lastVersion;           ///< last schema version served
  DType dtype;               ///< element type of input 0 this kernel handles
  std::string_view name;     ///< "cpu.matmul.f32"
  OutputReuse reuse;
  /// The kernel for this node, with its constant inputs prepacked; nullptr to decline.
  std::unique_ptr<CpuKernel> (*create)(const CpuNodeInfo& info);
  /// create() reads CpuNodeInfo::constants with memcpy-safe accesses only (bytes at any
  /// address): the plan then gives it the model's own initializer bytes, with no aligned copy.
  /// Otherwise (the default) every constant's bytes are aligned to 16.
  bool unalignedConstants = false;
  /// compute() writes every output the node has (Split, LSTM's Y, Y_h and Y_c). Otherwise only
  /// output 0: a node using another output of the op runs on the reference kernel.
  bool allOutputs = false;
};

/// The fast kernels of this build (cpu_kernels.cpp), in lookup order.
std::span<const CpuKernelDef> cpuKernels();

/// The first kernel of the table for (domain, op, schema version, dtype of input 0), or nullptr.
const CpuKernelDef* findCpuKernel(std::string_view domain, std::string_view opType, int schemaVersion, DType dtype);

}  // namespace onnxtool::cpu
