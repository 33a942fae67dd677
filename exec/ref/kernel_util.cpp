// kernel_util.cpp: shared helpers of the reference kernels, and the list of kernel families.
#include "exec/ref/kernel_util.h"

#include <algorithm>
#include <mutex>

#include <unistd.h>

#include <fmt/format.h>

#include "lib/limits.h"

namespace onnxtool::ref {

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

uint64_t physicalMemoryBytes() {
  static const uint64_t bytes = [] {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : UINT64_MAX;
  }();
  return bytes;
}

void checkFitsInMemory(const KernelContext& ctx, uint64_t bytes, const std::string& what) {
  uint64_t mem = physicalMemoryBytes();
  if (bytes > mem)
    ctx.fail(fmt::format("{} need {} bytes, more than this machine's memory ({} GiB)", what, bytes, mem >> 30));
}

Tensor makeTensor(DType dtype, std::vector<int64_t> dims) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dtype);
  t.dims = std::move(dims);
  for (int64_t d : t.dims)
    if (d < 0) fail(ErrorKind::InvalidInput, "cannot allocate a tensor with negative dimension {}", d);
  auto n = t.numElements();
  if (!n) fail(ErrorKind::InvalidInput, "tensor size overflows");
  if (dtype == DType::String) {
    if (*n > (int64_t{1} << 32)) fail(ErrorKind::InvalidInput, "string tensor of {} elements is too large", *n);
    t.strings.assign(static_cast<size_t>(*n), std::string());
    t.storage = Tensor::Storage::Raw;
    return t;
  }
  auto bytes = t.expectedBytes();
  if (!bytes || static_cast<uint64_t>(*n) > limits::kMaxTensorElements || *bytes > limits::kMaxTensorBytes)
    fail(ErrorKind::InvalidInput, "tensor of {} elements of {} is too large to allocate", *n, dtypeName(dtype));
  if (*bytes > physicalMemoryBytes())
    fail(ErrorKind::InvalidInput, "tensor of {} elements of {} needs {} bytes, more than this machine's memory ({} GiB)", *n,
         dtypeName(dtype), *bytes, physicalMemoryBytes() >> 30);
  t.setRaw(Buffer::zeros(static_cast<size_t>(*bytes)));
  return t;
}

int64_t checkedMul(const KernelContext& ctx, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) ctx.fail(fmt::format("size {} * {} overflows int64", a, b));
  return r;
}

int64_t checkedAdd(const KernelContext& ctx, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) ctx.fail(fmt::format("size {} + {} overflows int64", a, b));
  return r;
}

int64_t checkedElements(const KernelContext& ctx, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) ctx.fail(fmt::format("dimension {} is negative, expected dimensions >= 0", d));
    n = checkedMul(ctx, n, d);
  }
  return n;
}

std::vector<double> zeroDoubles(const KernelContext& ctx, int64_t n) {
  if (n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / sizeof(double))
    ctx.fail(fmt::format("a buffer of {} elements is too large to allocate", n));
  return std::vector<double>(static_cast<size_t>(n), 0.0);
}

std::vector<int64_t> broadcastShapes(const KernelContext& ctx, const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string all;
      for (const auto& sh : shapes) {
        std::string x;
        for (int64_t v : sh) x += (x.empty() ? "" : ",") + std::to_string(v);
        all += (all.empty() ? "" : " and ") + ("[" + x + "]");
      }
      ctx.fail(fmt::format("shapes {} cannot be broadcast together", all));
    }
  }
  return out;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

Broadcaster::Broadcaster(const std::vector<int64_t>& outDims, const std::vector<int64_t>& inDims) {
  outStrides_ = stridesOf(outDims);
  std::vector<int64_t> inStr = stridesOf(inDims);
  inStrides_.assign(outDims.size(), 0);
  size_t off = outDims.size() - inDims.size();
  for (size_t i = 0; i < inDims.size(); ++i) inStrides_[off + i] = inDims[i] == 1 ? 0 : inStr[i];
}

int64_t Broadcaster::offset(int64_t flat) const {
  int64_t o = 0;
  for (size_t i = 0; i < outStrides_.size(); ++i) {
    int64_t idx = flat / outStrides_[i];
    flat -= idx * outStrides_[i];
    o += idx * inStrides_[i];
  }
  return o;
}

int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    ctx.fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  return axis < 0 ? axis + rank : axis;
}

int64_t axisIn(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (rank == 0) ctx.fail(fmt::format("input is a scalar, axis {} needs rank >= 1", axis));
  return normalizeAxis(ctx, axis, rank);
}

std::vector<int64_t> inputInts(const KernelContext& ctx, size_t i) {
  const TensorData& t = ctx.tensor(i);
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
    ctx.fail(fmt::format("input {} must be int32 or int64, got {}", i, dtypeName(t.dtype())));
  return t.toInt64s();
}

double inputScalar(const KernelContext& ctx, size_t i) {
  const TensorData& t = ctx.tensor(i);
  if (numel(t) != 1) ctx.fail(fmt::format("input {} must have one element", i));
  return t.elementAsDouble(0);
}

Tensor reshaped(const TensorData& t, std::vector<int64_t> dims) {
  Tensor out;
  out.dataType = t.dataType;
  out.dims = std::move(dims);
  out.raw = t.raw;  // shared bytes: tensors are immutable once produced
  out.strings = t.strings;
  out.storage = Tensor::Storage::Raw;
  return out;
}

void addRef(std::string_view domain, std::string_view opType, int sinceVersion, std::string_view name, KernelFn fn) {
  KernelRegistry::instance().add({"ref", domain, opType, sinceVersion, name, fn});
}

}  // namespace onnxtool::ref

namespace onnxtool {

void registerRefKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    ref::registerElementwise();
    ref::registerTensorOps();
    ref::registerNnOps();
    ref::registerControlFlowOps();
    ref::registerConvRnnOps();
    ref::registerMlOps();
    ref::registerPreviewOps();
    ref::registerImageDecoder();
    ref::registerContribOps();
  });
}

}  // namespace onnxtool
