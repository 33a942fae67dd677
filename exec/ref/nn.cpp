// nn.cpp: reference kernels of neural-network ops: MatMul, Gemm, Conv, pooling, normalisation,
// Softmax, reductions, recurrent layers, quantisation.
#include <cmath>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

void matMul(KernelContext& ctx) {
  const Tensor& a = ctx.tensor(0);
  const Tensor& b = ctx.tensor(1);
  if (a.dims.empty() || b.dims.empty()) ctx.fail("MatMul inputs must have rank >= 1");
  // numpy matmul: 1-D operands are promoted and the added axis removed afterwards
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  bool aVec = ad.size() == 1, bVec = bd.size() == 1;
  if (aVec) ad.insert(ad.begin(), 1);
  if (bVec) bd.push_back(1);
  int64_t m = ad[ad.size() - 2], k = ad.back(), k2 = bd[bd.size() - 2], n = bd.back();
  if (k != k2) ctx.fail(fmt::format("inner dimensions differ, {} vs {}", k, k2));
  std::vector<int64_t> abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  std::vector<int64_t> batch = broadcastShapes(ctx, {abatch, bbatch});
  std::vector<int64_t> outDims = batch;
  if (!aVec) outDims.push_back(m);
  if (!bVec) outDims.push_back(n);
  Tensor out = makeTensor(a.dtype(), outDims);
  Broadcaster ba(batch, abatch), bb(batch, bbatch);
  int64_t nb = numel(batch);
  dispatchNumeric(ctx, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("MatMul does not take bool");
    } else {
      using Acc = std::conditional_t<isFloatLike<T>, double, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
      const T* pa = data<T>(a);
      const T* pb = data<T>(b);
      T* po = mutableData<T>(out);
      for (int64_t bi = 0; bi < nb; ++bi) {
        const T* A = pa + ba.offset(bi) * m * k;
        const T* B = pb + bb.offset(bi) * k * n;
        T* C = po + bi * m * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            Acc s = 0;
            for (int64_t p = 0; p < k; ++p) s += static_cast<Acc>(A[i * k + p]) * static_cast<Acc>(B[p * n + j]);
            if constexpr (isFloatLike<T>) C[i * n + j] = T(static_cast<float>(s));
            else C[i * n + j] = static_cast<T>(s);
          }
      }
    }
  });
  ctx.setOutput(0, std::move(out));
}

}  // namespace

void registerNnOps() { addRef("", "MatMul", 1, "ref.matmul", matMul); }

}  // namespace onnxtool::ref
