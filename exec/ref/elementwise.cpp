// elementwise.cpp: reference kernels of element-wise ops: arithmetic, comparison, logic,
// activations, and their broadcasting.
#include <cmath>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

/// out[i] = f(a[bcast(i)], b[bcast(i)]) with numpy broadcasting; output type R.
template <typename T, typename R, typename F>
Tensor binaryMap(const KernelContext& ctx, const Tensor& a, const Tensor& b, DType outType, F&& f) {
  std::vector<int64_t> dims = broadcastShapes(ctx, {a.dims, b.dims});
  Tensor out = makeTensor(outType, dims);
  Broadcaster ba(dims, a.dims), bb(dims, b.dims);
  const T* pa = data<T>(a);
  const T* pb = data<T>(b);
  R* po = mutableData<R>(out);
  int64_t n = numel(dims);
  for (int64_t i = 0; i < n; ++i) po[i] = f(pa[ba.offset(i)], pb[bb.offset(i)]);
  return out;
}

void add(KernelContext& ctx) {
  const Tensor& a = ctx.tensor(0);
  const Tensor& b = ctx.tensor(1);
  dispatchNumeric(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("Add does not take bool");
    } else {
      ctx.setOutput(0, binaryMap<T, T>(ctx, a, b, a.dtype(), [](T x, T y) {
        if constexpr (isFloatLike<T>) return T(float(x) + float(y));
        else return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) + static_cast<std::make_unsigned_t<T>>(y));
      }));
    }
  });
}

void relu(KernelContext& ctx) {
  const Tensor& x = ctx.tensor(0);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) {
      if constexpr (isFloatLike<T>) {
        float v = float(px[i]);
        po[i] = T(v > 0 || std::isnan(v) ? v : 0.0f);
      } else {
        po[i] = px[i] > T(0) ? px[i] : T(0);
      }
    }
    ctx.setOutput(0, std::move(out));
  });
}

}  // namespace

void registerElementwise() {
  addRef("", "Add", 7, "ref.add", add);
  addRef("", "Relu", 6, "ref.relu", relu);
}

}  // namespace onnxtool::ref
