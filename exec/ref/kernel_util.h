// kernel_util.h: what reference kernels share: typed access to tensor bytes, output allocation,
// numpy broadcasting, axis normalisation, and dispatch over element types. Reference kernels are
// small and obviously correct, not fast: clarity first.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/kernel.h"
#include "lib/error.h"
#include "lib/tensor.h"

namespace onnxtool::ref {

/// IEEE binary16 stored as bits; converts to and from float implicitly (arithmetic runs in float).
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  Float16(float f) : bits(floatToHalf(f)) {}  // NOLINT: implicit by design
  operator float() const { return halfToFloat(bits); }
};
/// bfloat16 stored as bits; converts to and from float implicitly.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(floatToBfloat16(f)) {}  // NOLINT: implicit by design
  operator float() const { return bfloat16ToFloat(bits); }
};
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

/// Type -> DType.
template <typename T> constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::Float; }
template <> constexpr DType dtypeOf<double>() { return DType::Double; }
template <> constexpr DType dtypeOf<int8_t>() { return DType::Int8; }
template <> constexpr DType dtypeOf<int16_t>() { return DType::Int16; }
template <> constexpr DType dtypeOf<int32_t>() { return DType::Int32; }
template <> constexpr DType dtypeOf<int64_t>() { return DType::Int64; }
template <> constexpr DType dtypeOf<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtypeOf<uint16_t>() { return DType::UInt16; }
template <> constexpr DType dtypeOf<uint32_t>() { return DType::UInt32; }
template <> constexpr DType dtypeOf<uint64_t>() { return DType::UInt64; }
template <> constexpr DType dtypeOf<bool>() { return DType::Bool; }
template <> constexpr DType dtypeOf<Float16>() { return DType::Float16; }
template <> constexpr DType dtypeOf<BFloat16>() { return DType::BFloat16; }

template <typename T>
constexpr bool isFloatLike = std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

/// Product of dims (0 for any zero dim). Precondition: dims non-negative and no overflow.
int64_t numel(const std::vector<int64_t>& dims);
inline int64_t numel(const TensorData& t) { return numel(t.dims); }

/// A fresh tensor of `dtype` and `dims`, zero-filled (strings: empty strings). Throws
/// Error(InvalidInput) on negative dims or sizes over 2^40 bytes instead of allocating.
Tensor makeTensor(DType dtype, std::vector<int64_t> dims);
/// This machine's physical memory in bytes (UINT64_MAX when unknown).
uint64_t physicalMemoryBytes();
/// Fails (invalid input) when `bytes` exceed this machine's physical memory: such an allocation
/// could only end in the out-of-memory killer or hours of paging. `what` names the request.
void checkFitsInMemory(const KernelContext& ctx, uint64_t bytes, const std::string& what);

/// Typed element pointers. Preconditions: t's dtype matches T's size; mutable access only on
/// tensors made by makeTensor (not yet shared).
template <typename T>
const T* data(const TensorData& t) {
  return reinterpret_cast<const T*>(t.raw.data());
}
template <typename T>
T* mutableData(Tensor& t) {
  return reinterpret_cast<T*>(t.raw.mutableData());
}

/// a * b and a + b for sizes, offsets and dims computed from untrusted attributes and inputs;
/// fail naming the node when the result overflows int64 instead of wrapping (undefined behaviour).
int64_t checkedMul(const KernelContext& ctx, int64_t a, int64_t b);
int64_t checkedAdd(const KernelContext& ctx, int64_t a, int64_t b);

/// Product of dims, failing naming the node on a negative dim or int64 overflow.
int64_t checkedElements(const KernelContext& ctx, const std::vector<int64_t>& dims);
/// A zero-filled scratch buffer of n doubles; fails like makeTensor (negative n, over 2^40
/// bytes) instead of letting std::vector throw length_error or allocate without bound.
std::vector<double> zeroDoubles(const KernelContext& ctx, int64_t n);

/// Numpy (multidirectional) broadcast of shapes; throws via ctx.fail when incompatible.
std::vector<int64_t> broadcastShapes(const KernelContext& ctx, const std::vector<std::vector<int64_t>>& shapes);

/// Maps flat indices of an output shape to flat offsets in an input broadcast to it.
class Broadcaster {
 public:
  Broadcaster(const std::vector<int64_t>& outDims, const std::vector<int64_t>& inDims);
  /// Offset in the input of output element `flat`.
  int64_t offset(int64_t flat) const;

 private:
  std::vector<int64_t> outStrides_;  // per output axis
  std::vector<int64_t> inStrides_;   // 0 where the input broadcasts
};

/// Row-major strides of `dims`.
std::vector<int64_t> stridesOf(const std::vector<int64_t>& dims);

/// Normalises a possibly negative axis into [0, rank); fails naming the node otherwise.
int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank);
/// Like normalizeAxis, but refuses a scalar: an op indexing a dimension needs rank >= 1.
int64_t axisIn(const KernelContext& ctx, int64_t axis, int64_t rank);

/// Reads input i (an integer tensor) as int64 values (shapes, axes, indices).
std::vector<int64_t> inputInts(const KernelContext& ctx, size_t i);
/// Reads a scalar or 1-element input as double.
double inputScalar(const KernelContext& ctx, size_t i);

/// Calls f(T{}) for the C++ type of `t` among the numeric types (float, double, float16,
/// bfloat16, int8..int64, uint8..uint64, bool); fails naming the node for other types.
template <typename F>
void dispatchNumeric(const KernelContext& ctx, DType t, F&& f) {
  switch (t) {
    case DType::Float: f(float{}); break;
    case DType::Double: f(double{}); break;
    case DType::Float16: f(Float16{}); break;
    case DType::BFloat16: f(BFloat16{}); break;
    case DType::Int8: f(int8_t{}); break;
    case DType::Int16: f(int16_t{}); break;
    case DType::Int32: f(int32_t{}); break;
    case DType::Int64: f(int64_t{}); break;
    case DType::UInt8: f(uint8_t{}); break;
    case DType::UInt16: f(uint16_t{}); break;
    case DType::UInt32: f(uint32_t{}); break;
    case DType::UInt64: f(uint64_t{}); break;
    case DType::Bool: f(bool{}); break;
    default: ctx.fail(std::string("unsupported element type ") + std::string(dtypeName(t)));
  }
}

/// Like dispatchNumeric, restricted to float, double, float16, bfloat16.
template <typename F>
void dispatchFloat(const KernelContext& ctx, DType t, F&& f) {
  switch (t) {
    case DType::Float: f(float{}); break;
    case DType::Double: f(double{}); break;
    case DType::Float16: f(Float16{}); break;
    case DType::BFloat16: f(BFloat16{}); break;
    default: ctx.fail(std::string("unsupported element type ") + std::string(dtypeName(t)) + ", expected a float type");
  }
}

/// Copies a tensor's bytes into a new tensor of other dims (same element count): Reshape & co.
Tensor reshaped(const TensorData& t, std::vector<int64_t> dims);

/// Registers a reference kernel. Use from a family's register function.
void addRef(std::string_view domain, std::string_view opType, int sinceVersion, std::string_view name, KernelFn fn);

// One registration function per op family (exec/ref/<family>.cpp); registerRefKernels() calls all.
void registerElementwise();
void registerTensorOps();
void registerNnOps();
void registerControlFlowOps();
void registerConvRnnOps();
void registerMlOps();
void registerPreviewOps();
void registerImageDecoder();
void registerContribOps();  // com.microsoft (contrib.cpp)

}  // namespace onnxtool::ref
