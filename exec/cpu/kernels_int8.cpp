// kernels_int8.cpp: MatMulInteger (uint8 x constant int8) and the fused dynamically quantized
// MatMul (see kernels_int8.h) on the int8 GEMM of qgemm.h, on the path activeIsa() allows.
#include "exec/cpu/kernels_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "exec/cpu/dwconv_int8.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/qgemm.h"
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

namespace {

constexpr size_t kAlign = 64;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// A Relu or Clip fused into a float epilogue: min(max(y, lo), hi).
struct Clamp {
  bool on = false;
  float lo = 0, hi = 0;
  static Clamp relu() { return {true, 0.f, std::numeric_limits<float>::infinity()}; }
};

/// A QuantizeLinear (uint8, per tensor, constant parameters) fused into a step's float epilogue:
/// the step writes saturate(nearbyint(y / scale) + zero), what the node computes from y.
struct OutQuant {
  bool on = false;
  float scale = 1, zero = 0;
};

/// QuantizeLinear of one float as the reference computes it.
inline uint8_t quantizeOne(float y, float scale, float zero) {
  float r = std::nearbyint(y / scale);
  if (std::isnan(r)) r = 0;
  return static_cast<uint8_t>(std::clamp(r + zero, 0.0f, 255.0f));
}

/// The same with the reciprocal of the scale (within one step of it, see dwconv_int8.h) and no
/// libm call (the baseline build has no SSE4.1 rounding instruction): y is finite.
inline uint8_t quantizeFast(float y, float inv, float zero) {
  float q = std::min(std::max(y * inv, -zero), 255.0f - zero);  // (integer bounds: clamping commutes with rounding)
  q = (q + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23: rounds half to even in the default mode
  return static_cast<uint8_t>(q + zero);
}

/// MatMulInteger, A uint8 [..., M, K] (batch folded into M), B a constant int8 [K, N] packed at
/// prepare, a scalar a_zero_point read at run time, a constant b_zero_point (scalar or [N]).
class MatMulIntegerKernel : public CpuKernel {
 public:
  MatMulIntegerKernel(qgemm::PackedB b, int64_t m, std::vector<int32_t> bZero)
      : b_(std::move(b)), m_(m), bZero_(std::move(bZero)) {}
  size_t workspaceBytes() const override {
    return alignUp(qgemm::packedABytes(b_.path, m_, b_.k)) + static_cast<size_t>(m_) * sizeof(int32_t);
  }
  void compute(const CpuComputeArgs& args) const override {
    const uint8_t* a = static_cast<const uint8_t*>(args.inputs[0]);
    auto* ws = static_cast<uint8_t*>(args.workspace);
    auto* rowSum = reinterpret_cast<int32_t*>(ws + alignUp(qgemm::packedABytes(b_.path, m_, b_.k)));
    qgemm::packA(b_.path, a, m_, b_.k, b_.k, ws, rowSum);
    qgemm::Epilogue e;
    e.aZero = args.inputs.size() > 2 && args.inputs[2] ? *static_cast<const uint8_t*>(args.inputs[2]) : 0;
    e.bZero = bZero_.empty() ? nullptr : bZero_.data();
    e.rowSumA = rowSum;
    e.c32 = static_cast<int32_t*>(args.outputs[0]);
    e.ldc = b_.n;
    qgemm::gemm(b_, ws, m_, e, args.pool);
  }
  double flops() const override { return 2.0 * static_cast<double>(m_) * b_.n * b_.k; }

 private:
  qgemm::PackedB b_;
  int64_t m_;
  std::vector<int32_t> bZero_;
};

/// A quantized MatMul from float x in one step: quantize x into the workspace (dynamically, as
/// DynamicQuantizeLinear, or with a calibrated constant scale and zero point, as QuantizeLinear),
/// int8 GEMM, float epilogue float(acc) * (xScale * wScale[n]) (+ bias[n]).
class QuantMatMulKernel : public CpuKernel {
 public:
  /// Dynamic when `fixedScale` is 0.
  /// `u8In`: the input is the QuantizeLinear's uint8 output already (static, fixed scale only).
  QuantMatMulKernel(qgemm::PackedB b, int64_t m, std::vector<int32_t> bZero, std::vector<float> wScale, std::vector<float> bias,
                    float fixedScale, float fixedZero, Clamp clamp = {}, bool u8In = false)
      : b_(std::move(b)), m_(m), bZero_(std::move(bZero)), wScale_(std::move(wScale)), bias_(std::move(bias)),
        fixedScale_(fixedScale), fixedZero_(fixedZero), clamp_(clamp), u8In_(u8In && fixedScale != 0) {
    if (fixedScale_ != 0)
      for (float& w : wScale_) w = fixedScale_ * w;  // DequantizeLinear x MatMul: scales multiply
  }
  size_t workspaceBytes() const override {
    return alignUp(qgemm::packedABytes(b_.path, m_, b_.k)) + alignUp(static_cast<size_t>(m_) * sizeof(int32_t)) +
           static_cast<size_t>(b_.n) * sizeof(float);
  }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    auto* ws = static_cast<uint8_t*>(args.workspace);
    size_t aBytes = alignUp(qgemm::packedABytes(b_.path, m_, b_.k));
    auto* rowSum = reinterpret_cast<int32_t*>(ws + aBytes);
    auto* colScale = reinterpret_cast<float*>(ws + aBytes + alignUp(static_cast<size_t>(m_) * sizeof(int32_t)));
    float scale = fixedScale_, zero = fixedZero_;
    if (scale == 0) {  // DynamicQuantizeLinear, in the reference's float operations
      float mn = 0, mx = 0;
      if (qgemm::minMax(b_.path, x, m_ * b_.k, mn, mx)) {
        scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
        zero = std::nearbyint(std::clamp(0.0f - mn / scale, 0.0f, 255.0f));
      } else {  // a NaN: the scale is NaN, every quantized value 0, every output NaN
        scale = std::numeric_limits<float>::quiet_NaN();
        zero = 0;
      }
      for (int64_t j = 0; j < b_.n; ++j) colScale[j] = scale * wScale_[static_cast<size_t>(j)];
    }
    const void* packed = ws;
    if (u8In_ && b_.path == qgemm::Path::Avx512Vnni && b_.k % 4 == 0 && bZero_.empty())
      packed = args.inputs[0];  // the uint8 rows are the packed layout already (row sums: only for weight zero points)
    else if (u8In_)
      qgemm::packA(b_.path, static_cast<const uint8_t*>(args.inputs[0]), m_, b_.k, b_.k, ws, rowSum);
    else
      qgemm::quantizeA(b_.path, x, m_, b_.k, scale, zero, ws, rowSum, fixedScale_ != 0);
    qgemm::Epilogue e;
    e.aZero = static_cast<int32_t>(zero);
    e.bZero = bZero_.empty() ? nullptr : bZero_.data();
    e.rowSumA = rowSum;
    e.cf = static_cast<float*>(args.outputs[0]);
    e.colScale = fixedScale_ != 0 ? wScale_.data() : colScale;
    e.bias = bias_.empty() ? nullptr : bias_.data();
    e.clamp = clamp_.on, e.lo = clamp_.lo, e.hi = clamp_.hi;
    e.ldc = b_.n;
    qgemm::gemm(b_, packed, m_, e, args.pool);
    if (act_ != VecUnary::Count) {  // a fused activation (GELU, Sigmoid, ...) over the float output
      float* y = static_cast<float*>(args.outputs[0]);
      auto f = vecKernels().unary[static_cast<int>(act_)];
      parallelFor(args.pool, m_ * b_.n, 4096, [&](int64_t s, int64_t t) { f(y + s, y + s, t - s); });
    }
  }
  double flops() const override { return 2.0 * static_cast<double>(m_) * b_.n * b_.k; }
  /// Executor fusions after the chain's bias: Relu in the epilogue, other activations in a
  /// pass over the output right after (the GELU of a BERT layer: 5 ops on the float tensor before).
  bool fuseActivation(VecUnary act) override {
    if (clamp_.on || act_ != VecUnary::Count) return false;
    if (act == VecUnary::Relu)
      clamp_ = Clamp::relu();
    else
      act_ = act;
    return true;
  }

 private:
  qgemm::PackedB b_;
  int64_t m_;
  std::vector<int32_t> bZero_;
  std::vector<float> wScale_, bias_;
  float fixedScale_, fixedZero_;
  Clamp clamp_;
  bool u8In_;
  VecUnary act_ = VecUnary::Count;
};

/// A quantized 2-D convolution (NCHW, group 1) from float x in one step, per image: quantize x
/// with the calibrated (scale, zero point), then
///  - VNNI path, symmetric weights: im2col rows (out-of-image taps hold the zero point: the
///    quantized 0.0 of the padding), packed in panels of 32 pixels, Y[M, pixels] = W x col with
///    the weights broadcast: NCHW rows straight out of the epilogue;
///  - other paths: im2row into the packed A layout [OH*OW, C*KH*KW], int8 GEMM against the
///    prepacked W^T, float epilogue, then transpose [pixels, M] into NCHW.
class QdqConvKernel : public CpuKernel {
 public:
  struct Geometry {
    int64_t n, c, h, w, m, oh, ow, kh, kw, sh, sw, dh, dw, padT, padL;
  };
  /// QLinearConv: uint8 input and output; y = saturate(nearbyint(double(int32(acc + bias[m]))
  /// * mult[m] + yZero)), the reference's requantization.
  struct Requantize {
    bool on = false;
    std::vector<int32_t> bias;  ///< [M] or empty
    std::vector<float> mult;    ///< [M]: float(x_scale * w_scale[m]) / y_scale
    double yZero = 0;
  };
  /// `w`: the int8 weights [M, K]; `colScale`: x scale * weight scale per output channel.
  /// The input is uint8 (a QuantizeLinear's output, QLinearConv's); `oq`: the
  /// float output quantized as a following QuantizeLinear does.
  QdqConvKernel(Geometry g, qgemm::Path path, const int8_t* w, std::vector<int32_t> bZero, std::vector<float> colScale,
                std::vector<float> bias, float zero, Clamp clamp, Requantize rq, OutQuant oq = {},
                bool residual = false, OutQuant side = {})
      : g_(g), path_(path), bZero_(std::move(bZero)), colScale_(std::move(colScale)), bias_(std::move(bias)), zero_(zero),
        clamp_(clamp), rq_(std::move(rq)), oq_(oq), residual_(residual), side_(side) {
    k_ = g_.c * g_.kh * g_.kw;
    pix_ = g_.oh * g_.ow;
    direct_ = path_ == qgemm::Path::Avx512Vnni && bZero_.empty();
    if (oq_.on) {  // the fused QuantizeLinear's epilogue constants (qgemm.h DirectConvArgs::y8)
      const float inv = 1.0f / oq_.scale;
      for (size_t i = 0; i < colScale_.size(); ++i) {
        qScale_.push_back(colScale_[i] * inv);
        qBias_.push_back(bias_.empty() ? 0.0f : bias_[i] * inv);
      }
      float lo = 0, hi = 255;
      if (clamp_.on) lo = std::max(lo, static_cast<float>(quantizeOne(clamp_.lo, oq_.scale, oq_.zero))),
                     hi = std::min(hi, static_cast<float>(quantizeOne(clamp_.hi, oq_.scale, oq_.zero)));
      qLo_ = lo - oq_.zero, qHi_ = hi - oq_.zero;
      qInv_ = inv;
    }
    pointwise_ = g_.kh == 1 && g_.kw == 1 && g_.sh == 1 && g_.sw == 1 && g_.padT == 0 && g_.padL == 0 && g_.oh == g_.h &&
                 g_.ow == g_.w;
    if (direct_) {
      kp_ = (k_ + 3) / 4 * 4;
      panels_ = (pix_ + 31) / 32;
      w_.assign(static_cast<size_t>(g_.m * kp_), 0);
      wRowSum_.assign(static_cast<size_t>(g_.m), 0);
      for (int64_t i = 0; i < g_.m; ++i)
        for (int64_t q = 0; q < k_; ++q) {
          w_[static_cast<size_t>(i * kp_ + q)] = w[i * k_ + q];
          wRowSum_[static_cast<size_t>(i)] += w[i * k_ + q];
        }
      colBytes_ = alignUp(static_cast<size_t>(kp_ * panels_ * 32));
    } else {
      std::vector<int8_t> kn(static_cast<size_t>(k_ * g_.m));  // W [M, K] -> B [K, M]
      for (int64_t j = 0; j < g_.m; ++j)
        for (int64_t q = 0; q < k_; ++q) kn[static_cast<size_t>(q * g_.m + j)] = w[j * k_ + q];
      b_ = qgemm::packB(path_, kn.data(), k_, g_.m);
      aBytes_ = alignUp(qgemm::packedABytes(path_, pix_, k_));
      rowSumBytes_ = alignUp(static_cast<size_t>(pix_) * sizeof(int32_t));
    }
  }
  size_t workspaceBytes() const override {
    size_t acc = rq_.on ? alignUp(static_cast<size_t>(pix_ * g_.m) * sizeof(int32_t)) : 0;
    if (direct_) return 2 * colBytes_ + acc;
    return aBytes_ + rowSumBytes_ + static_cast<size_t>(pix_ * g_.m) * sizeof(float);
  }
  void compute(const CpuComputeArgs& args) const override {
    float* y = static_cast<float*>(args.outputs[0]);
    auto* ws = static_cast<uint8_t*>(args.workspace);
    const int64_t chw = g_.c * g_.h * g_.w;
    for (int64_t img = 0; img < g_.n; ++img) {
      const uint8_t* qx = static_cast<const uint8_t*>(args.inputs[0]) + img * chw;  // (the AVX2 GEMM's im2row widens it)
      float* yi = oq_.on || rq_.on ? nullptr : y + img * g_.m * pix_;  // (a uint8 output otherwise)
      if (direct_) {
        uint8_t* col = ws;
        uint8_t* panels = col + colBytes_;
        const int64_t ld = panels_ * 32;
        if (!pointwise_)  // (a 1x1, stride-1, unpadded conv's channel planes are its im2col rows)
          parallelFor(args.pool, g_.c, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, g_.kh * g_.kw * pix_)),
                      [&](int64_t c0, int64_t c1) {
                        if (g_.sw > 2) return im2col(qx, col, ld, c0, c1);
                        qgemm::Im2colArgs ia;  // column stride 1 or 2: whole vectors, the padding by mask
                        ia.x = qx, ia.h = g_.h, ia.w = g_.w, ia.kh = g_.kh, ia.kw = g_.kw, ia.dh = g_.dh, ia.dw = g_.dw;
                        ia.sh = g_.sh, ia.sw = g_.sw;
                        ia.padT = g_.padT, ia.padL = g_.padL, ia.oh = g_.oh, ia.ow = g_.ow;
                        ia.pad = static_cast<uint8_t>(zero_), ia.col = col, ia.ld = ld;
                        qgemm::im2colAvx512(ia, c0, c1);
                        if (c1 == g_.c)
                          for (int64_t kk = k_; kk < kp_; ++kk) std::memset(col + kk * ld, 0, static_cast<size_t>(ld));
                      });
        qgemm::DirectConvArgs c;
        c.w = w_.data();
        c.wRowSum = wRowSum_.data();
        c.m = g_.m, c.kp = kp_, c.pix = pix_;
        c.colPanels = panels;
        c.aZero = static_cast<int32_t>(zero_);
        c.rowScale = colScale_.data();
        c.bias = bias_.empty() ? nullptr : bias_.data();
        c.clamp = clamp_.on, c.lo = clamp_.lo, c.hi = clamp_.hi;
        c.y = yi;
        if (residual_) c.residual = static_cast<const float*>(args.inputs[1]) + img * g_.m * pix_, c.qInv = qInv_;
        if (side_.on) {
          c.side8 = static_cast<uint8_t*>(args.outputs[1]) + img * g_.m * pix_;
          c.sideInv = 1.0f / side_.scale, c.sideLo = -side_.zero, c.sideHi = 255.0f - side_.zero;
          c.sideZero = static_cast<int32_t>(side_.zero);
        }
        if (oq_.on) {
          c.y8 = static_cast<uint8_t*>(args.outputs[0]) + img * g_.m * pix_;
          c.qScale = qScale_.data(), c.qBias = qBias_.data(), c.qLo = qLo_, c.qHi = qHi_;
          c.yZero = static_cast<int32_t>(oq_.zero);
        }
        if (rq_.on) c.c32 = reinterpret_cast<int32_t*>(panels + colBytes_);
        // each thread packs the panels it computes, right before
        qgemm::parallelPanels(panels_, g_.m * pix_ * k_, args.pool, [&](int64_t p0, int64_t p1) {
          if (pointwise_)
            qgemm::packRowsAvx512(qx + p0 * 32, pix_, g_.c, pix_ - p0 * 32, kp_, p1 - p0, panels + p0 * kp_ * 32);
          else
            qgemm::packColPanelsAvx512(col + p0 * 32, ld, kp_, p1 - p0, panels + p0 * kp_ * 32);
          qgemm::convGemmAvx512Vnni(c, p0, p1);
        });
        if (rq_.on) requantize(c.c32, pix_, 1, static_cast<uint8_t*>(args.outputs[0]) + img * g_.m * pix_);
        continue;
      }
      uint8_t* a = ws;
      auto* rowSum = reinterpret_cast<int32_t*>(a + aBytes_);
      auto* cbuf = reinterpret_cast<float*>(a + aBytes_ + rowSumBytes_);
      if (path_ == qgemm::Path::Avx2) im2row(qx, reinterpret_cast<int16_t*>(a), rowSum);
      else im2row(qx, a, rowSum);
      qgemm::Epilogue e;
      e.aZero = static_cast<int32_t>(zero_);
      e.bZero = bZero_.empty() ? nullptr : bZero_.data();
      e.rowSumA = rowSum;
      if (rq_.on) {  // [pixels, M] int32, requantized into NCHW
        e.c32 = reinterpret_cast<int32_t*>(cbuf);
        e.ldc = g_.m;
        qgemm::gemm(b_, a, pix_, e, args.pool);
        requantize(e.c32, 1, g_.m, static_cast<uint8_t*>(args.outputs[0]) + img * g_.m * pix_);
        continue;
      }
      e.cf = cbuf;
      e.colScale = colScale_.data();
      e.bias = bias_.empty() ? nullptr : bias_.data();
      e.clamp = clamp_.on && !residual_, e.lo = clamp_.lo, e.hi = clamp_.hi;
      e.ldc = g_.m;
      qgemm::gemm(b_, a, pix_, e, args.pool);
      // [pixels, M] -> [M, pixels], in blocks that stay in cache.
      constexpr int64_t kBlk = 32;
      if (residual_) {  // + the residual, then the clamp (and the QuantizeLinear)
        const float* res = static_cast<const float*>(args.inputs[1]) + img * g_.m * pix_;
        uint8_t* y8 = oq_.on ? static_cast<uint8_t*>(args.outputs[0]) + img * g_.m * pix_ : nullptr;
        const float lo = clamp_.on ? clamp_.lo : -std::numeric_limits<float>::infinity();
        const float hi = clamp_.on ? clamp_.hi : std::numeric_limits<float>::infinity();
        for (int64_t p0 = 0; p0 < pix_; p0 += kBlk)
          for (int64_t m0 = 0; m0 < g_.m; m0 += kBlk)
            for (int64_t mm = m0; mm < std::min(g_.m, m0 + kBlk); ++mm) {
              const int64_t pe = std::min(pix_, p0 + kBlk);
              if (y8)
                for (int64_t p = p0; p < pe; ++p)
                  y8[mm * pix_ + p] = quantizeFast(std::min(std::max(cbuf[p * g_.m + mm] + res[mm * pix_ + p], lo), hi), qInv_, oq_.zero);
              else
                for (int64_t p = p0; p < pe; ++p) yi[mm * pix_ + p] = std::min(std::max(cbuf[p * g_.m + mm] + res[mm * pix_ + p], lo), hi);
            }
        quantizeSide(yi, args, img);
        continue;
      }
      if (oq_.on) {
        uint8_t* y8 = static_cast<uint8_t*>(args.outputs[0]) + img * g_.m * pix_;
        for (int64_t p0 = 0; p0 < pix_; p0 += kBlk)
          for (int64_t m0 = 0; m0 < g_.m; m0 += kBlk)
            for (int64_t mm = m0; mm < std::min(g_.m, m0 + kBlk); ++mm)
              for (int64_t p = p0; p < std::min(pix_, p0 + kBlk); ++p)
                y8[mm * pix_ + p] = quantizeFast(cbuf[p * g_.m + mm], qInv_, oq_.zero);
        continue;
      }
      for (int64_t p0 = 0; p0 < pix_; p0 += kBlk)
        for (int64_t m0 = 0; m0 < g_.m; m0 += kBlk)
          for (int64_t mm = m0; mm < std::min(g_.m, m0 + kBlk); ++mm)
            for (int64_t p = p0; p < std::min(pix_, p0 + kBlk); ++p) yi[mm * pix_ + p] = cbuf[p * g_.m + mm];
      quantizeSide(yi, args, img);
    }
  }
  double flops() const override { return 2.0 * g_.n * g_.m * k_ * pix_; }

 private:
  /// The uint8 second output of image `img` from its float output (the GEMM paths).
  void quantizeSide(const float* yi, const CpuComputeArgs& args, int64_t img) const {
    if (!side_.on) return;
    uint8_t* y8 = static_cast<uint8_t*>(args.outputs[1]) + img * g_.m * pix_;
    const float inv = 1.0f / side_.scale;
    for (int64_t i = 0; i < g_.m * pix_; ++i) y8[i] = quantizeFast(yi[i], inv, side_.zero);
  }

  /// acc[m * mStride + p * pStride] -> y [M, pixels] uint8.
  void requantize(const int32_t* acc, int64_t mStride, int64_t pStride, uint8_t* y) const {
    for (int64_t mm = 0; mm < g_.m; ++mm) {
      const double mult = rq_.mult[static_cast<size_t>(mm)];
      const int64_t b = rq_.bias.empty() ? 0 : rq_.bias[static_cast<size_t>(mm)];
      for (int64_t p = 0; p < pix_; ++p) {
        auto v = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(acc[mm * mStride + p * pStride] + b)));
        double r = std::nearbyint(static_cast<double>(v) * mult + rq_.yZero);
        y[mm * pix_ + p] = static_cast<uint8_t>(std::clamp(r, 0.0, 255.0));
      }
    }
  }

  /// im2col rows [kp][ld] of uint8: row (c, ki, kj) holds the tap over every output pixel.
  /// Channels [c0, c1) (the zero rows past K with the last channel).
  void im2col(const uint8_t* q, uint8_t* col, int64_t ld, int64_t c0, int64_t c1) const {
    const uint8_t pad = static_cast<uint8_t>(zero_);
    for (int64_t ch = c0; ch < c1; ++ch)
      for (int64_t ki = 0; ki < g_.kh; ++ki)
        for (int64_t kj = 0; kj < g_.kw; ++kj) {
          uint8_t* row = col + ((ch * g_.kh + ki) * g_.kw + kj) * ld;
          const uint8_t* qc = q + ch * g_.h * g_.w;
          // Output columns whose input column is inside the image: [lo, hi).
          int64_t off = kj * g_.dw - g_.padL;
          int64_t lo = off >= 0 ? 0 : (-off + g_.sw - 1) / g_.sw;
          int64_t hi = g_.w - off <= 0 ? 0 : std::min(g_.ow, (g_.w - off + g_.sw - 1) / g_.sw);
          lo = std::min(lo, hi);
          for (int64_t oy = 0; oy < g_.oh; ++oy) {
            uint8_t* dst = row + oy * g_.ow;
            int64_t iy = oy * g_.sh - g_.padT + ki * g_.dh;
            if (iy < 0 || iy >= g_.h) {
              std::memset(dst, pad, static_cast<size_t>(g_.ow));
              continue;
            }
            const uint8_t* src = qc + iy * g_.w + off;
            std::memset(dst, pad, static_cast<size_t>(lo));
            if (g_.sw == 1) std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
            else
              for (int64_t ox = lo; ox < hi; ++ox) dst[ox] = src[ox * g_.sw];
            std::memset(dst + hi, pad, static_cast<size_t>(g_.ow - hi));
          }
          std::memset(row + pix_, 0, static_cast<size_t>(ld - pix_));
        }
    if (c1 == g_.c)
      for (int64_t kk = k_; kk < kp_; ++kk) std::memset(col + kk * ld, 0, static_cast<size_t>(ld));
  }

  template <typename TIn, typename T>
  void im2row(const TIn* q, T* a, int32_t* rowSum) const {
    const int64_t kp = static_cast<int64_t>(qgemm::packedABytes(path_, 1, k_)) / (path_ == qgemm::Path::Avx2 ? 2 : 1);
    const T pad = static_cast<T>(zero_);
    if (pointwise_) {  // a transpose [C][pixels] -> [pixels][kp]
      const int64_t hw = g_.h * g_.w;
      for (int64_t p = 0; p < pix_; ++p) {
        T* row = a + p * kp;
        int32_t sum = 0;
        for (int64_t ch = 0; ch < g_.c; ++ch) {
          const T v = static_cast<T>(q[ch * hw + p]);
          row[ch] = v;
          sum += v;
        }
        for (int64_t idx = g_.c; idx < kp; ++idx) row[idx] = 0;
        rowSum[p] = sum;
      }
      return;
    }
    for (int64_t oy = 0; oy < g_.oh; ++oy)
      for (int64_t ox = 0; ox < g_.ow; ++ox) {
        T* row = a + (oy * g_.ow + ox) * kp;
        int32_t sum = 0;
        int64_t idx = 0;
        for (int64_t ch = 0; ch < g_.c; ++ch) {
          const TIn* qc = q + ch * g_.h * g_.w;
          for (int64_t ki = 0; ki < g_.kh; ++ki) {
            int64_t iy = oy * g_.sh - g_.padT + ki * g_.dh;
            bool rowIn = iy >= 0 && iy < g_.h;
            for (int64_t kj = 0; kj < g_.kw; ++kj) {
              int64_t ix = ox * g_.sw - g_.padL + kj * g_.dw;
              T v = rowIn && ix >= 0 && ix < g_.w ? static_cast<T>(qc[iy * g_.w + ix]) : pad;
              row[idx++] = v;
              sum += v;
            }
          }
        }
        for (; idx < kp; ++idx) row[idx] = 0;
        rowSum[oy * g_.ow + ox] = sum;
      }
  }

  Geometry g_;
  qgemm::Path path_;
  qgemm::PackedB b_;
  std::vector<int8_t> w_;
  std::vector<int32_t> wRowSum_, bZero_;
  std::vector<float> colScale_, bias_;
  float zero_;
  Clamp clamp_;
  Requantize rq_;
  OutQuant oq_;
  bool direct_ = false, pointwise_ = false;
  bool residual_;  ///< a second input [N, M, OH, OW] float added before the clamp (a fused Add)
  OutQuant side_;  ///< the float output also quantized into a second, uint8 output (a QuantizeLinear among its readers)
  std::vector<float> qScale_, qBias_;
  float qLo_ = 0, qHi_ = 0, qInv_ = 1;
  int64_t k_ = 0, pix_ = 0, kp_ = 0, panels_ = 0;
  size_t aBytes_ = 0, rowSumBytes_ = 0, colBytes_ = 0;
};

/// The int8 depthwise convolution (dwconv_int8.h) of a QDQ Conv(group = C = M): uint8 input (a
/// QuantizeLinear's output), one int8 filter per channel; float output
/// y = acc * (x_scale * w_scale[c]) + bias[c] [clamped], or that quantized by a fused QuantizeLinear.
class QdqDepthwiseKernel : public CpuKernel {
 public:
  QdqDepthwiseKernel(dwint8::Plane p, int64_t n, int64_t c, std::vector<float> wt, std::vector<float> scale, std::vector<float> bias,
                     float xZero, Clamp clamp, OutQuant oq, int threads)
      : p_(p), n_(n), c_(c), wt_(std::move(wt)), scale_(std::move(scale)), bias_(std::move(bias)), xZero_(xZero), clamp_(clamp),
        oq_(oq), pre_(std::make_unique<dwint8::Prepared>(dwint8::prepare(activeIsa(), p_))), slots_(std::max(1, threads)) {
    slotFloats_ = static_cast<size_t>(threadSliceFloats(pre_->scratchFloats));  // slots a page apart
  }
  size_t workspaceBytes() const override { return static_cast<size_t>(slots_) * slotFloats_ * sizeof(float); }
  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const uint8_t*>(args.inputs[0]);
    auto* scratch = static_cast<float*>(args.workspace);
    const int64_t planes = n_ * c_, hw = p_.h * p_.w, ohw = p_.oh * p_.ow;
    const int64_t chunks = std::min<int64_t>(slots_, planes);
    // Chunk t of the planes uses scratch slot t: a fixed split, whichever thread runs it.
    parallelFor(args.pool, chunks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t pl = t * planes / chunks; pl < (t + 1) * planes / chunks; ++pl) {
          const auto ch = static_cast<size_t>(pl % c_);
          dwint8::Channel cc;
          cc.x = x + pl * hw;
          cc.xZero = xZero_;
          cc.wt = wt_.data() + ch * static_cast<size_t>(p_.kh * p_.kw);
          cc.scale = scale_[ch];
          cc.bias = bias_.empty() ? 0.0f : bias_[ch];
          cc.clamp = clamp_.on, cc.lo = clamp_.lo, cc.hi = clamp_.hi;
          if (oq_.on) {
            cc.y8 = static_cast<uint8_t*>(args.outputs[0]) + pl * ohw;
            cc.yScale = oq_.scale, cc.yZero = oq_.zero;
          } else {
            cc.y = static_cast<float*>(args.outputs[0]) + pl * ohw;
          }
          dwint8::planeFor(*pre_, p_, cc, scratch + static_cast<size_t>(t) * slotFloats_);
        }
    });
  }
  double flops() const override { return 2.0 * n_ * c_ * p_.oh * p_.ow * p_.kh * p_.kw; }

 private:
  dwint8::Plane p_;
  int64_t n_, c_;
  std::vector<float> wt_, scale_, bias_;
  float xZero_;
  Clamp clamp_;
  OutQuant oq_;
  std::unique_ptr<dwint8::Prepared> pre_;
  int slots_;
  size_t slotFloats_ = 0;
};

/// The geometry of a 2-D, group-1 convolution with explicit pads (or VALID); false otherwise.
/// `depthwise`: group = C = M instead, weights [M, 1, KH, KW] (geo.c is then C).
bool convGeometry(const Node& op, const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
                  QdqConvKernel::Geometry& geo, bool depthwise = false) {
  for (const Attribute& a : op.attributes)
    if (!a.refAttrName.empty()) return false;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return false;
  if (depthwise ? (op.attrInt("group", 1) != x[1] || w[1] != 1 || w[0] != x[1]) : op.attrInt("group", 1) != 1) return false;
  std::string autoPad = op.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID") return false;
  geo.n = x[0], geo.c = x[1], geo.h = x[2], geo.w = x[3];
  geo.m = w[0], geo.kh = w[2], geo.kw = w[3];
  geo.oh = y[2], geo.ow = y[3];
  if ((!depthwise && w[1] != geo.c) || y[1] != geo.m || y[0] != geo.n) return false;
  auto strides = op.attrInts("strides", {1, 1}), dil = op.attrInts("dilations", {1, 1});
  auto pads = op.attrInts("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) return false;
  auto ks = op.attrInts("kernel_shape", {geo.kh, geo.kw});
  if (ks.size() != 2 || ks[0] != geo.kh || ks[1] != geo.kw) return false;
  geo.sh = strides[0], geo.sw = strides[1], geo.dh = dil[0], geo.dw = dil[1];
  geo.padT = autoPad == "VALID" ? 0 : pads[0], geo.padL = autoPad == "VALID" ? 0 : pads[1];
  return true;
}

/// The packed weight and zero points of a MatMulInteger-shaped node, or false when its B is not a
/// constant int8 [K, N] with a constant scalar or per-column zero point.
bool weightOf(const TensorData* b, const TensorData* bZeroT, bool hasBZero, int64_t k, qgemm::PackedB& packed, std::vector<int32_t>& bZero) {
  const int8_t* bd = constData<int8_t>(b, DType::Int8);
  if (!bd || b->dims.size() != 2 || b->dims[0] != k) return false;
  int64_t n = b->dims[1];
  bZero.clear();
  if (hasBZero) {
    if (!perColumn<int8_t>(bZeroT, DType::Int8, n, bZero)) return false;
    if (std::all_of(bZero.begin(), bZero.end(), [](int32_t z) { return z == 0; })) bZero.clear();
  }
  packed = qgemm::packB(qgemm::pathFor(activeIsa()), bd, k, n);
  return true;
}

/// QuantizeLinear to uint8 with one scale and zero point (run-time inputs).
class QuantizeLinearKernel : public CpuKernel {
 public:
  QuantizeLinearKernel(int64_t n, qgemm::Path path) : n_(n), path_(path) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float scale = *static_cast<const float*>(args.inputs[1]);
    float zero = args.inputs.size() > 2 && args.inputs[2] ? *static_cast<const uint8_t*>(args.inputs[2]) : 0.0f;
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    // (pieces over the pool: this runs on every activation of a static QDQ model the steps don't fuse)
    if (path_ == qgemm::Path::Avx512Vnni) {
      parallelFor(args.pool, n_, 1 << 15, [&](int64_t s, int64_t e) {
        int32_t unused = 0;
        qgemm::quantizeRowAvx512(x + s, e - s, scale, zero, y + s, unused, true);
      });
      return;
    }
    if (path_ == qgemm::Path::Avx2) {
      parallelFor(args.pool, n_, 1 << 15, [&](int64_t s, int64_t e) { qgemm::quantizeU8Avx2(x + s, e - s, scale, zero, y + s); });
      return;
    }
    for (int64_t i = 0; i < n_; ++i) {
      float r = std::nearbyint(x[i] / scale);
      if (std::isnan(r)) r = 0;
      y[i] = static_cast<uint8_t>(std::clamp(r + zero, 0.0f, 255.0f));
    }
  }

 private:
  int64_t n_;
  qgemm::Path path_;
};

/// DequantizeLinear of uint8 or int8 to float: one scale (and zero point), or one per index along
/// `axis` (1-D).
template <typename T>
class DequantizeLinearKernel : public CpuKernel {
 public:
  DequantizeLinearKernel(int64_t outer, int64_t channels, int64_t inner) : outer_(outer), channels_(channels), inner_(inner) {}
  void compute(const CpuComputeArgs& args) const override {
    const T* x = static_cast<const T*>(args.inputs[0]);
    const float* scale = static_cast<const float*>(args.inputs[1]);
    const T* zero = args.inputs.size() > 2 ? static_cast<const T*>(args.inputs[2]) : nullptr;
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t c = 0; c < channels_; ++c) {
        const float s = scale[c], z = zero ? static_cast<float>(zero[c]) : 0.0f;
        const int64_t base = (o * channels_ + c) * inner_;
        for (int64_t i = 0; i < inner_; ++i) y[base + i] = (static_cast<float>(x[base + i]) - z) * s;
      }
  }

 private:
  int64_t outer_, channels_, inner_;
};

/// QLinearMatMul, A uint8 [..., M, K] with a per-tensor scale and zero point (run-time inputs),
/// B a constant int8 [K, N] (per-tensor or per-column scale and zero point), y uint8 per tensor:
/// int32 products on the int8 GEMM, then the reference's requantization: multiplier
/// float(float(a_scale * b_scale[n]) / y_scale), y = saturate(nearbyint(acc * multiplier + y_zero)) in double.
class QLinearMatMulKernel : public CpuKernel {
 public:
  QLinearMatMulKernel(qgemm::PackedB b, int64_t m, std::vector<int32_t> bZero, std::vector<float> bScale)
      : b_(std::move(b)), m_(m), bZero_(std::move(bZero)), bScale_(std::move(bScale)) {}
  size_t workspaceBytes() const override {
    return aBytes() + alignUp(static_cast<size_t>(m_) * 4) + alignUp(static_cast<size_t>(m_ * b_.n) * 4) +
           static_cast<size_t>(b_.n) * sizeof(double);
  }
  void compute(const CpuComputeArgs& args) const override {
    const uint8_t* a = static_cast<const uint8_t*>(args.inputs[0]);
    const float sa = *static_cast<const float*>(args.inputs[1]);
    const int32_t za = args.inputs[2] ? *static_cast<const uint8_t*>(args.inputs[2]) : 0;
    const float sy = *static_cast<const float*>(args.inputs[6]);
    const double zy = args.inputs.size() > 7 && args.inputs[7] ? *static_cast<const uint8_t*>(args.inputs[7]) : 0;
    auto* ws = static_cast<uint8_t*>(args.workspace);
    auto* rowSum = reinterpret_cast<int32_t*>(ws + aBytes());
    auto* acc = reinterpret_cast<int32_t*>(ws + aBytes() + alignUp(static_cast<size_t>(m_) * 4));
    auto* mult = reinterpret_cast<double*>(reinterpret_cast<uint8_t*>(acc) + alignUp(static_cast<size_t>(m_ * b_.n) * 4));
    qgemm::packA(b_.path, a, m_, b_.k, b_.k, ws, rowSum);
    qgemm::Epilogue e;
    e.aZero = za;
    e.bZero = bZero_.empty() ? nullptr : bZero_.data();
    e.rowSumA = rowSum;
    e.c32 = acc;
    e.ldc = b_.n;
    qgemm::gemm(b_, ws, m_, e, args.pool);
    for (int64_t j = 0; j < b_.n; ++j) {
      float p = sa * bScale_[static_cast<size_t>(j)];
      mult[j] = static_cast<double>(p / sy);
    }
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < b_.n; ++j) {
        double v = std::nearbyint(static_cast<double>(acc[i * b_.n + j]) * mult[j] + zy);
        y[i * b_.n + j] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  }
  double flops() const override { return 2.0 * static_cast<double>(m_) * b_.n * b_.k; }

 private:
  size_t aBytes() const { return alignUp(qgemm::packedABytes(b_.path, m_, b_.k)); }
  qgemm::PackedB b_;
  int64_t m_;
  std::vector<int32_t> bZero_;
  std::vector<float> bScale_;
};

template <typename T>
std::unique_ptr<CpuKernel> createDequantize(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (n.attrInt("block_size", 0) != 0 || (n.attrInt("output_dtype", 0) != 0 && n.attrInt("output_dtype", 0) != 1)) return nullptr;
  if (!info.hasInput(1) || info.in(1).dtype != DType::Float || info.out(0).dtype != DType::Float) return nullptr;
  const auto& xd = info.in(0).dims;
  const auto& sd = info.in(1).dims;
  if (info.hasInput(2) && (info.in(2).dtype != info.in(0).dtype || info.in(2).dims != sd)) return nullptr;
  if (info.in(1).numElements() == 1 && sd.size() <= 1)
    return std::make_unique<DequantizeLinearKernel<T>>(1, 1, info.in(0).numElements());
  if (sd.size() != 1) return nullptr;
  auto rank = static_cast<int64_t>(xd.size());
  int64_t axis = n.attrInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || xd[static_cast<size_t>(axis)] != sd[0]) return nullptr;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= xd[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= xd[static_cast<size_t>(d)];
  return std::make_unique<DequantizeLinearKernel<T>>(outer, sd[0], inner);
}

}  // namespace

std::unique_ptr<CpuKernel> createQuantizeLinear(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (n.attrInt("block_size", 0) != 0 || n.attrInt("precision", 0) != 0) return nullptr;
  if (!info.hasInput(1) || info.in(1).dtype != DType::Float || info.in(1).numElements() != 1) return nullptr;
  if (info.hasInput(2) && (info.in(2).dtype != DType::UInt8 || info.in(2).numElements() != 1)) return nullptr;
  if (info.out(0).dtype != DType::UInt8) return nullptr;
  return std::make_unique<QuantizeLinearKernel>(info.in(0).numElements(), qgemm::pathFor(activeIsa()));
}

std::unique_ptr<CpuKernel> createQLinearMatMul(const CpuNodeInfo& info) {
  if (info.inputs.size() < 8 || !info.hasInput(1) || !info.hasInput(3) || !info.hasInput(4) || !info.hasInput(6)) return nullptr;
  const auto& a = info.in(0).dims;
  if (a.size() < 2 || info.out(0).dtype != DType::UInt8) return nullptr;
  auto scalarOfType = [&](size_t i, DType dt) { return info.hasInput(i) && info.in(i).dtype == dt && info.in(i).numElements() == 1; };
  if (!scalarOfType(1, DType::Float) || !scalarOfType(6, DType::Float)) return nullptr;
  if ((info.hasInput(2) && !scalarOfType(2, DType::UInt8)) || (info.hasInput(7) && !scalarOfType(7, DType::UInt8))) return nullptr;
  if (!info.hasInput(2) || !info.hasInput(7)) return nullptr;
  int64_t k = a.back();
  qgemm::PackedB packed;
  std::vector<int32_t> bZero;
  if (!weightOf(info.constants.at(3), info.hasInput(5) ? info.constants.at(5) : nullptr, info.hasInput(5), k, packed, bZero))
    return nullptr;
  std::vector<float> bScale;
  const TensorData* bs = info.constants.at(4);
  if (!bs || bs->dims.size() > 1 || !perColumn<float>(bs, DType::Float, packed.n, bScale)) return nullptr;
  int64_t m = k == 0 ? 0 : info.in(0).numElements() / k;
  if (info.out(0).numElements() != m * packed.n) return nullptr;
  return std::make_unique<QLinearMatMulKernel>(std::move(packed), m, std::move(bZero), std::move(bScale));
}

std::unique_ptr<CpuKernel> createQLinearConv(const CpuNodeInfo& info) {
  if (info.inputs.size() < 8 || info.out(0).dtype != DType::UInt8) return nullptr;
  for (size_t i = 1; i < 8; ++i)
    if (!info.hasInput(i) || !info.constants.at(i)) return nullptr;
  float sx, sy, zx, zy;
  auto scalar = [&](size_t i, DType dt, float& v) {
    const TensorData* t = info.constants.at(i);
    if (t->numElements().value_or(0) != 1 || t->dims.size() > 1) return false;
    if (dt == DType::Float) {
      const float* p = constData<float>(t, dt);
      return p ? (v = *p, true) : false;
    }
    const uint8_t* p = constData<uint8_t>(t, dt);
    return p ? (v = *p, true) : false;
  };
  if (!scalar(1, DType::Float, sx) || !scalar(2, DType::UInt8, zx) || !scalar(6, DType::Float, sy) || !scalar(7, DType::UInt8, zy))
    return nullptr;
  const TensorData* wq = info.constants.at(3);
  const int8_t* wd = constData<int8_t>(wq, DType::Int8);
  if (!wd) return nullptr;
  QdqConvKernel::Geometry geo{};
  if (!convGeometry(*info.node, info.in(0).dims, wq->dims, info.out(0).dims, geo)) return nullptr;
  std::vector<float> wScale;
  std::vector<int32_t> bZero;
  const TensorData* wsT = info.constants.at(4);
  if (wsT->dims.size() > 1 || !perColumn<float>(wsT, DType::Float, geo.m, wScale)) return nullptr;
  if (info.constants.at(5)->dims.size() > 1 || !perColumn<int8_t>(info.constants.at(5), DType::Int8, geo.m, bZero)) return nullptr;
  if (std::all_of(bZero.begin(), bZero.end(), [](int32_t z) { return z == 0; })) bZero.clear();
  QdqConvKernel::Requantize rq;
  rq.on = true;
  rq.yZero = zy;
  for (float ws : wScale) rq.mult.push_back(sx * ws / sy);
  if (info.hasInput(8)) {
    const int32_t* b = info.constants.at(8) ? constData<int32_t>(info.constants.at(8), DType::Int32) : nullptr;
    if (!b || info.constants.at(8)->numElements().value_or(0) != geo.m) return nullptr;
    rq.bias.assign(b, b + geo.m);
  }
  return std::make_unique<QdqConvKernel>(geo, qgemm::pathFor(activeIsa()), wd, std::move(bZero), std::vector<float>{},
                                         std::vector<float>{}, zx, Clamp{}, std::move(rq));
}

std::unique_ptr<CpuKernel> createDequantizeLinearU8(const CpuNodeInfo& info) { return createDequantize<uint8_t>(info); }
std::unique_ptr<CpuKernel> createDequantizeLinearS8(const CpuNodeInfo& info) { return createDequantize<int8_t>(info); }

std::unique_ptr<CpuKernel> createMatMulInteger(const CpuNodeInfo& info) {
  const auto& a = info.in(0).dims;
  if (a.size() < 2 || !info.hasInput(1) || info.in(1).dtype != DType::Int8) return nullptr;
  int64_t k = a.back();
  if (info.hasInput(2) && (info.in(2).dtype != DType::UInt8 || info.in(2).numElements() != 1)) return nullptr;
  qgemm::PackedB packed;
  std::vector<int32_t> bZero;
  bool hasBZero = info.hasInput(3);
  if (!weightOf(info.constants.at(1), hasBZero ? info.constants.at(3) : nullptr, hasBZero, k, packed, bZero)) return nullptr;
  int64_t m = k == 0 ? 0 : info.in(0).numElements() / k;
  if (info.out(0).numElements() != m * packed.n) return nullptr;
  return std::make_unique<MatMulIntegerKernel>(std::move(packed), m, std::move(bZero));
}

namespace {

const CpuKernelDef kDynamicDef{"", "MatMulInteger", 10, 1 << 20, DType::Float, "cpu.dynqmatmul.u8s8.fused", OutputReuse::None,
                               nullptr};
const CpuKernelDef kQdqDef{"", "MatMul", 1, 1 << 20, DType::Float, "cpu.qdqmatmul.u8s8.fused", OutputReuse::None, nullptr};
const CpuKernelDef kQdqConvDef{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqconv.u8s8.fused", OutputReuse::None, nullptr};
const CpuKernelDef kQdqConvResDef{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqconv.u8s8.fused+residual", OutputReuse::None,
                                  nullptr};
const CpuKernelDef kQdqConvResU8Def{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqconv.u8s8.fused+residual.u8out",
                                    OutputReuse::None, nullptr};
const CpuKernelDef kQdqConvSideDef{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqconv.u8s8.fused+u8copy", OutputReuse::None,
                                   nullptr};
const CpuKernelDef kQdqConvResSideDef{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqconv.u8s8.fused+residual+u8copy",
                                      OutputReuse::None, nullptr};
const CpuKernelDef kQdqConvU8Def{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqconv.u8s8.fused.u8out", OutputReuse::None, nullptr};
const CpuKernelDef kQdqDwDef{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqdwconv.u8s8.fused", OutputReuse::None, nullptr};
const CpuKernelDef kQdqDwU8Def{"", "Conv", 1, 1 << 20, DType::Float, "cpu.qdqdwconv.u8s8.fused.u8out", OutputReuse::None, nullptr};

bool onlyUse(const Value* v, const Node* by, const Graph& g) {
  if (!v || v->isGraphOutput() || v->uses().size() != 1) return false;
  return v->uses()[0].node == by && by->graph() == &g;
}

/// A constant scalar: its value as float (float, uint8 or int8 tensors of one element).
bool scalarOf(const TensorData* t, float& v, DType& dt) {
  if (!t || t->numElements().value_or(0) != 1 || t->dims.size() > 1) return false;
  dt = t->dtype();
  if (const float* f = constData<float>(t, DType::Float)) return v = *f, true;
  if (const uint8_t* u = constData<uint8_t>(t, DType::UInt8)) return v = *u, true;
  return false;
}

/// A Relu, or a Clip with constant bounds (ReLU6), that is the only reader of the step's output
/// joins the step: min(max(y, lo), hi) in the epilogue. A Clip's omitted bound is none (its
/// values are finite here: float(int32) * scale + bias).
Clamp fuseClamp(const Graph& g, FusedInt8Step& st, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                const std::function<const TensorData*(const Value*)>& constantOf) {
  const Node* r = singleReader(st.output, g);
  if (!r || !r->output(0) || !(isOp(r, "Relu") || isOp(r, "Clip"))) return {};
  const StaticTensorType* a = typeOf(st.output);
  const StaticTensorType* b = typeOf(r->output(0));
  if (!a || !b || a->dims != b->dims || b->dtype != DType::Float) return {};
  Clamp c = Clamp::relu();
  if (isOp(r, "Clip")) {
    const float inf = std::numeric_limits<float>::infinity();
    c.lo = r->attr("min") ? r->attrFloat("min", 0) : -inf;
    c.hi = r->attr("max") ? r->attrFloat("max", 0) : inf;
    for (size_t i : {size_t{1}, size_t{2}}) {
      if (!r->input(i)) continue;
      const float* v = constData<float>(constantOf(r->input(i)), DType::Float);
      if (!v || constantOf(r->input(i))->numElements().value_or(0) != 1) return {};
      (i == 1 ? c.lo : c.hi) = *v;
    }
  }
  st.covered.push_back(r);
  st.last = r;
  st.output = r->output(0);
  return c;
}

/// An Add that is the only reader of the step's float output, with a float tensor of the same
/// shape on its other side (ResNet's and MobileNet's residual connections), joins the step: the
/// other side becomes the step's second input, added in the epilogue before a Relu/Clip. An Add
/// joins one step only (`claimed`).
const Value* fuseResidual(const Graph& g, FusedInt8Step& st, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                          std::set<const Node*>& claimed) {
  const Node* add = singleReader(st.output, g);
  if (!isOp(add, "Add") || add->inputs().size() != 2 || !add->output(0) || claimed.count(add)) return nullptr;
  const Value* other = add->input(0) == st.output ? add->input(1) : add->input(0);
  if (!other || other == st.output) return nullptr;
  const StaticTensorType* a = typeOf(st.output);
  const StaticTensorType* b = typeOf(other);
  const StaticTensorType* y = typeOf(add->output(0));
  if (!a || !b || !y || a->dims != b->dims || a->dims != y->dims || b->dtype != DType::Float || y->dtype != DType::Float) return nullptr;
  claimed.insert(add);
  st.covered.push_back(add);
  st.last = add;
  st.output = add->output(0);
  return other;
}

/// A QuantizeLinear (uint8 output, constant per-tensor scale and zero point) that is the only
/// reader of the step's float output joins the step, which then writes its uint8 output.
OutQuant fuseOutQuant(const Graph& g, FusedInt8Step& st, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                      const std::function<const TensorData*(const Value*)>& constantOf) {
  const Node* q = singleReader(st.output, g);
  if (!isOp(q, "QuantizeLinear") || !q->output(0) || !q->input(1) || !q->input(2) || q->input(0) != st.output) return {};
  for (const Attribute& a : q->attributes)
    if (!a.refAttrName.empty()) return {};
  if (q->attrInt("block_size", 0) != 0 || q->attr("output_dtype") || q->attrInt("precision", 0) != 0) return {};
  float s, z;
  DType dts, dtz;
  if (!scalarOf(constantOf(q->input(1)), s, dts) || !scalarOf(constantOf(q->input(2)), z, dtz) || dts != DType::Float ||
      dtz != DType::UInt8 || !(s > 0) || !std::isfinite(s))
    return {};
  const StaticTensorType* a = typeOf(st.output);
  const StaticTensorType* b = typeOf(q->output(0));
  if (!a || !b || a->dims != b->dims || b->dtype != DType::UInt8) return {};
  st.covered.push_back(q);
  st.last = q;
  st.output = q->output(0);
  OutQuant o;
  o.on = true, o.scale = s, o.zero = z;
  return o;
}

/// A QuantizeLinear (as fuseOutQuant takes) among several readers of the step's float output (or
/// its only reader when the output is also a graph output) joins the step, which then also writes its uint8 output (`output2`); the step keeps its place
/// (the other readers come after it) and its float output.
OutQuant fuseSideQuant(const Graph& g, FusedInt8Step& st, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                       const std::function<const TensorData*(const Value*)>& constantOf) {
  if (!st.output || (st.output->uses().size() < 2 && !st.output->isGraphOutput())) return {};
  for (const Use& u : st.output->uses()) {
    const Node* q = u.node;
    if (q->graph() != &g || !isOp(q, "QuantizeLinear") || u.index != 0 || !q->output(0) || !q->input(1) || !q->input(2)) continue;
    bool byRef = false;
    for (const Attribute& a : q->attributes) byRef |= !a.refAttrName.empty();
    if (byRef || q->attrInt("block_size", 0) != 0 || q->attr("output_dtype") || q->attrInt("precision", 0) != 0) continue;
    float sc, z;
    DType dts, dtz;
    if (!scalarOf(constantOf(q->input(1)), sc, dts) || !scalarOf(constantOf(q->input(2)), z, dtz) || dts != DType::Float ||
        dtz != DType::UInt8 || !(sc > 0) || !std::isfinite(sc))
      continue;
    const StaticTensorType* a = typeOf(st.output);
    const StaticTensorType* b = typeOf(q->output(0));
    if (!a || !b || a->dims != b->dims || b->dtype != DType::UInt8) continue;
    st.covered.push_back(q);
    st.output2 = q->output(0);
    OutQuant o;
    o.on = true, o.scale = sc, o.zero = z;
    return o;
  }
  return {};
}

/// DequantizeLinear(xq uint8, constant scalar float scale, constant scalar uint8 zero point): xq
/// (what a fused step reads: a QuantizeLinear's output, the output of a step that fused one, or
/// any uint8 tensor), the scale and the zero point; nullptr when the activation is not in that
/// form.
const Value* quantizedActivation(const Graph& g, const Value* v, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                 const std::function<const TensorData*(const Value*)>& constantOf, float& sx, float& zx) {
  const Node* dx = v ? v->producer() : nullptr;
  if (!isOp(dx, "DequantizeLinear") || dx->graph() != &g || !dx->input(0) || !dx->input(2)) return nullptr;
  for (const Attribute& a : dx->attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (dx->attrInt("block_size", 0) != 0 || dx->attrInt("output_dtype", 0) > 1) return nullptr;
  DType dts, dtz;
  if (!scalarOf(constantOf(dx->input(1)), sx, dts) || !scalarOf(constantOf(dx->input(2)), zx, dtz)) return nullptr;
  if (dts != DType::Float || dtz != DType::UInt8 || !(sx > 0) || !std::isfinite(sx)) return nullptr;
  const StaticTensorType* qt = typeOf(dx->input(0));
  const StaticTensorType* ft = typeOf(v);
  if (!qt || !ft || qt->dtype != DType::UInt8 || ft->dtype != DType::Float || qt->dims != ft->dims) return nullptr;
  return dx->input(0);
}

/// A layer's bias [n] as float: a float constant, or a DequantizeLinear of a constant int32 tensor
/// with zero point 0 (how the QDQ form stores a bias, scale x scale * w scale): q * scale, as
/// DequantizeLinear computes it.
bool biasOf(const Graph& g, const Value* b, int64_t n, const std::function<const TensorData*(const Value*)>& constantOf,
            std::vector<float>& bias) {
  const Node* d = b ? b->producer() : nullptr;
  if (!isOp(d, "DequantizeLinear")) return perColumn<float>(constantOf(b), DType::Float, n, bias);
  // (a 1-D bias has one axis: any valid `axis` is it)
  if (d->graph() != &g || d->attrInt("block_size", 0) != 0) return false;
  std::vector<int32_t> q, zero;
  std::vector<float> scale;
  if (!perColumn<int32_t>(constantOf(d->input(0)), DType::Int32, n, q) || !perColumn<float>(constantOf(d->input(1)), DType::Float, n, scale))
    return false;
  if (d->input(2) && (!perColumn<int32_t>(constantOf(d->input(2)), DType::Int32, n, zero) ||
                      std::any_of(zero.begin(), zero.end(), [](int32_t z) { return z != 0; })))
    return false;
  bias.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(q[i]) * scale[i];
  return true;
}

/// A depthwise Conv (group = C = M, weights [C, 1, KH, KW]) on a QDQ activation (`q8`, the
/// QuantizeLinear's uint8 output) and a DequantizeLinear'd constant int8 weight (per tensor or per
/// channel, any zero point), when every channel's sum stays exact in float (see dwconv_int8.h).
std::optional<FusedInt8Step> qdqDepthwise(const Graph& g, const Node* op, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                          const std::function<const TensorData*(const Value*)>& constantOf, const Value* q8,
                                          const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, float sx, float zx,
                                          int threads) {
  const Node* dw = op->input(1) ? op->input(1)->producer() : nullptr;
  if (!isOp(dw, "DequantizeLinear") || dw->graph() != &g || dw->attrInt("block_size", 0) != 0) return std::nullopt;
  const TensorData* wq = constantOf(dw->input(0));
  if (!wq || wq->dtype() != DType::Int8 || wq->dims.size() != 4 || wq->raw.size() != wq->expectedBytes().value_or(UINT64_MAX))
    return std::nullopt;
  QdqConvKernel::Geometry geo{};
  if (!convGeometry(*op, xd, wq->dims, yd, geo, true)) return std::nullopt;
  const int64_t c = geo.c, taps = geo.kh * geo.kw;
  if (taps > dwint8::kMaxTaps) return std::nullopt;
  int64_t axis = dw->attrInt("axis", 1);
  if (axis < 0) axis += 4;
  const TensorData* wsT = constantOf(dw->input(1));
  bool perTensor = wsT && wsT->numElements().value_or(0) == 1 && wsT->dims.size() <= 1;
  std::vector<float> scale;
  if ((!perTensor && axis != 0) || !perColumn<float>(wsT, DType::Float, c, scale)) return std::nullopt;
  std::vector<int32_t> wZero(static_cast<size_t>(c), 0);
  if (dw->input(2) && !perColumn<int8_t>(constantOf(dw->input(2)), DType::Int8, c, wZero)) return std::nullopt;
  std::vector<float> bias;
  if (op->input(2) && !biasOf(g, op->input(2), c, constantOf, bias)) return std::nullopt;
  // The weights as float integers (w - zero); each channel's |sum| bound: 255 * sum |w - zero| < 2^24.
  std::vector<float> wt(static_cast<size_t>(c * taps));
  const auto* wb = reinterpret_cast<const uint8_t*>(wq->raw.data());
  for (int64_t ch = 0; ch < c; ++ch) {
    int64_t absSum = 0;
    for (int64_t t = 0; t < taps; ++t) {
      const int32_t v = static_cast<int8_t>(wb[ch * taps + t]) - wZero[static_cast<size_t>(ch)];
      wt[static_cast<size_t>(ch * taps + t)] = static_cast<float>(v);
      absSum += v < 0 ? -v : v;
    }
    if (255 * absSum >= (int64_t{1} << 24)) return std::nullopt;
  }
  for (float& s : scale) s = sx * s;
  FusedInt8Step st;
  st.last = op;
  st.covered = {op};
  st.input = q8;
  st.output = op->output(0);
  Clamp clamp = fuseClamp(g, st, typeOf, constantOf);
  OutQuant oq = fuseOutQuant(g, st, typeOf, constantOf);
  st.def = oq.on ? &kQdqDwU8Def : &kQdqDwDef;
  dwint8::Plane p;
  p.h = geo.h, p.w = geo.w, p.oh = geo.oh, p.ow = geo.ow, p.kh = geo.kh, p.kw = geo.kw;
  p.sh = geo.sh, p.sw = geo.sw, p.dh = geo.dh, p.dw = geo.dw, p.padT = geo.padT, p.padL = geo.padL;
  if (p.oh <= 0 || p.ow <= 0 || p.sh <= 0 || p.sw <= 0 || p.dh <= 0 || p.dw <= 0 || p.padT < 0 || p.padL < 0) return std::nullopt;
  st.kernel = std::make_unique<QdqDepthwiseKernel>(p, geo.n, c, std::move(wt), std::move(scale), std::move(bias), zx, clamp, oq,
                                                   threads);
  return st;
}

/// A Conv (2-D, group 1, explicit pads) on a QDQ activation and a DequantizeLinear'd constant
/// int8 weight [M, C, KH, KW] (per tensor or per output channel, axis 0).
std::optional<FusedInt8Step> qdqConv(const Graph& g, const Node* op, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                     const std::function<const TensorData*(const Value*)>& constantOf, int threads,
                                     std::set<const Node*>& claimed) {
  if (!op->output(0) || op->inputs().size() < 2) return std::nullopt;
  float sx, zx;
  const Value* q8 = quantizedActivation(g, op->input(0), typeOf, constantOf, sx, zx);
  if (!q8) return std::nullopt;
  const StaticTensorType* xt = typeOf(q8);
  const StaticTensorType* yt = typeOf(op->output(0));
  if (!xt || !yt || xt->dims.size() != 4 || yt->dims.size() != 4 || yt->dtype != DType::Float) return std::nullopt;
  if (op->attrInt("group", 1) != 1) return qdqDepthwise(g, op, typeOf, constantOf, q8, xt->dims, yt->dims, sx, zx, threads);
  const Node* dw = op->input(1)->producer();
  if (!isOp(dw, "DequantizeLinear") || dw->graph() != &g || dw->attrInt("block_size", 0) != 0) return std::nullopt;
  const TensorData* wq = constantOf(dw->input(0));
  const int8_t* wd = constData<int8_t>(wq, DType::Int8);
  if (!wd || wq->dims.size() != 4) return std::nullopt;
  QdqConvKernel::Geometry geo{};
  if (!convGeometry(*op, xt->dims, wq->dims, yt->dims, geo)) return std::nullopt;
  const int64_t n = geo.m;
  int64_t axis = dw->attrInt("axis", 1);
  if (axis < 0) axis += 4;
  const TensorData* wsT = constantOf(dw->input(1));
  bool perTensor = wsT && wsT->numElements().value_or(0) == 1 && wsT->dims.size() <= 1;
  std::vector<float> wScale;
  if ((!perTensor && axis != 0) || !perColumn<float>(wsT, DType::Float, n, wScale)) return std::nullopt;
  std::vector<int32_t> bZero;
  if (dw->input(2)) {
    if (!perColumn<int8_t>(constantOf(dw->input(2)), DType::Int8, n, bZero)) return std::nullopt;
    if (std::all_of(bZero.begin(), bZero.end(), [](int32_t z) { return z == 0; })) bZero.clear();
  }
  std::vector<float> bias;
  if (op->input(2) && !biasOf(g, op->input(2), n, constantOf, bias)) return std::nullopt;
  for (float& w : wScale) w = sx * w;
  FusedInt8Step st;
  st.last = op;
  st.covered = {op};
  st.input = q8;
  st.output = op->output(0);
  st.input2 = fuseResidual(g, st, typeOf, claimed);
  Clamp clamp = fuseClamp(g, st, typeOf, constantOf);
  OutQuant oq = fuseOutQuant(g, st, typeOf, constantOf);
  OutQuant side = oq.on ? OutQuant{} : fuseSideQuant(g, st, typeOf, constantOf);
  st.def = st.input2 ? (oq.on ? &kQdqConvResU8Def : side.on ? &kQdqConvResSideDef : &kQdqConvResDef)
                     : oq.on ? &kQdqConvU8Def : side.on ? &kQdqConvSideDef : &kQdqConvDef;
  st.kernel = std::make_unique<QdqConvKernel>(geo, qgemm::pathFor(activeIsa()), wd, std::move(bZero), std::move(wScale),
                                              std::move(bias), zx, clamp, QdqConvKernel::Requantize{}, oq,
                                              st.input2 != nullptr, side);
  return st;
}

/// The QDQ fusions: MatMul/Gemm whose A is DequantizeLinear(QuantizeLinear(x)) with constant
/// uint8 per-tensor parameters and whose B is DequantizeLinear of a constant int8 matrix.
void findQdqFusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                    const std::function<const TensorData*(const Value*)>& constantOf, int threads, std::vector<FusedInt8Step>& out) {
  std::set<const Node*> fusedOps, claimed;
  std::vector<FusedInt8Step> steps;
  for (const auto& nn : g.nodes()) {
    const Node* op = nn.get();
    if (isOp(op, "Conv")) {
      if (auto st = qdqConv(g, op, typeOf, constantOf, threads, claimed)) {
        fusedOps.insert(op);
        steps.push_back(std::move(*st));
      }
      continue;
    }
    bool gemm = isOp(op, "Gemm");
    if (!gemm && !isOp(op, "MatMul")) continue;
    if (!op->output(0) || op->inputs().size() < 2) continue;
    if (gemm && (op->attrInt("transA", 0) != 0 || op->attrFloat("alpha", 1.0f) != 1.0f ||
                 (op->input(2) && op->attrFloat("beta", 1.0f) != 1.0f)))
      continue;
    bool attrsByRef = false;
    for (const Attribute& a : op->attributes) attrsByRef |= !a.refAttrName.empty();
    if (attrsByRef) continue;
    float sx, zx;
    const Value* q8 = quantizedActivation(g, op->input(0), typeOf, constantOf, sx, zx);
    if (!q8) continue;
    const StaticTensorType* xt = typeOf(q8);
    if (!xt || xt->dims.size() < 2 || (gemm && xt->dims.size() != 2)) continue;
    // Weight: DequantizeLinear of a constant int8 matrix, per tensor or per output column.
    const Node* dw = op->input(1)->producer();
    if (!isOp(dw, "DequantizeLinear") || dw->graph() != &g || dw->attrInt("block_size", 0) != 0) continue;
    const TensorData* wq = constantOf(dw->input(0));
    const int8_t* wd = constData<int8_t>(wq, DType::Int8);
    if (!wd || wq->dims.size() != 2) continue;
    bool transB = gemm && op->attrInt("transB", 0) != 0;
    const int64_t k = xt->dims.back();
    const int64_t n = transB ? wq->dims[0] : wq->dims[1];
    if ((transB ? wq->dims[1] : wq->dims[0]) != k) continue;
    int64_t axis = dw->attrInt("axis", 1);
    if (axis < 0) axis += 2;
    const TensorData* wsT = constantOf(dw->input(1));
    std::vector<float> wScale;
    bool perTensor = wsT && wsT->numElements().value_or(0) == 1 && wsT->dims.size() <= 1;
    if (!perTensor && axis != (transB ? 0 : 1)) continue;
    if (!perColumn<float>(wsT, DType::Float, n, wScale)) continue;
    std::vector<int32_t> bZero;
    if (dw->input(2)) {
      if (!perColumn<int8_t>(constantOf(dw->input(2)), DType::Int8, n, bZero)) continue;
      if (std::all_of(bZero.begin(), bZero.end(), [](int32_t z) { return z == 0; })) bZero.clear();
    }
    std::vector<float> bias;
    if (gemm && op->input(2) && isOp(op->input(2)->producer(), "DequantizeLinear")) {
      if (!biasOf(g, op->input(2), n, constantOf, bias)) continue;
    } else if (gemm && op->input(2)) {
      const TensorData* bt = constantOf(op->input(2));
      if (!bt || !(bt->dims.size() == 1 || (bt->dims.size() == 2 && bt->dims[0] == 1)) || bt->numElements().value_or(0) != n ||
          !constData<float>(bt, DType::Float))
        continue;
      const float* bd = constData<float>(bt, DType::Float);
      bias.assign(bd, bd + n);
    }
    const StaticTensorType* yt = typeOf(op->output(0));
    const int64_t m = k == 0 ? 0 : xt->numElements() / k;
    if (!yt || yt->dtype != DType::Float || yt->numElements() != m * n) continue;
    std::vector<int8_t> kn;
    if (transB) {
      kn.resize(static_cast<size_t>(k * n));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t q = 0; q < k; ++q) kn[static_cast<size_t>(q * n + j)] = wd[j * k + q];
      wd = kn.data();
    }
    FusedInt8Step st;
    st.last = op;
    st.covered = {op};
    st.input = q8;
    st.output = op->output(0);
    st.def = &kQdqDef;
    if (!gemm) {  // MatMul -> Add(bias [N]): the bias joins the epilogue
      const Node* add = singleReader(op->output(0), g);
      if (isOp(add, "Add") && add->inputs().size() == 2) {
        const Value* bv = add->input(0) == op->output(0) ? add->input(1) : add->input(0);
        const TensorData* bt = bv ? constantOf(bv) : nullptr;
        const StaticTensorType* at = typeOf(add->output(0));
        if (bt && bt->dims.size() == 1 && perColumn<float>(bt, DType::Float, n, bias) && at && at->dims == yt->dims) {
          st.covered.push_back(add);
          st.last = add;
          st.output = add->output(0);
        } else {
          bias.clear();
        }
      }
    }
    Clamp clamp = fuseClamp(g, st, typeOf, constantOf);
    st.kernel = std::make_unique<QuantMatMulKernel>(qgemm::packB(qgemm::pathFor(activeIsa()), wd, k, n), m, std::move(bZero),
                                                    std::move(wScale), std::move(bias), sx, zx, clamp, true);
    fusedOps.insert(op);
    steps.push_back(std::move(st));
  }
  // The DequantizeLinear nodes every reader of which is fused go too, and the QuantizeLinear
  // nodes all of whose DequantizeLinear readers went, unless a step reads their uint8 output
  // (then they run, or are the last node of the step that writes it).
  std::set<const Value*> stepInputs;
  for (const auto& st : steps) {
    stepInputs.insert(st.input);
    for (const Node* c : st.covered)
      if (isOp(c, "QuantizeLinear")) fusedOps.insert(c);
  }
  std::set<const Node*> gone(fusedOps);
  bool grew = true;
  while (grew) {
    grew = false;
    for (const auto& nn : g.nodes()) {
      const Node* q = nn.get();
      if (gone.count(q) || !(isOp(q, "DequantizeLinear") || isOp(q, "QuantizeLinear")) || !q->output(0) ||
          q->output(0)->isGraphOutput() || !q->output(0)->hasUses() || stepInputs.count(q->output(0)))
        continue;
      bool all = std::all_of(q->output(0)->uses().begin(), q->output(0)->uses().end(),
                             [&](const Use& u) { return gone.count(u.node) > 0; });
      if (all) gone.insert(q), grew = true;
    }
  }
  for (auto& st : steps) {
    for (const Node* q : gone)
      if (!fusedOps.count(q)) st.covered.push_back(q);
    out.push_back(std::move(st));
  }
}

}  // namespace

/// Reads element i of type T from unaligned bytes.
template <typename T>
T load(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

/// DequantizeLinear of constant inputs (int4/uint4/int8/uint8/int16/uint16/int32 data; float
/// scale per tensor, per axis or blocked; optional zero point of the data's type) computed once,
/// as the reference does: float(float(x - zero) * scale). False for anything else.
bool dequantizeConstant(const Node& dq, const std::function<const TensorData*(const Value*)>& constantOf, std::vector<float>& out) {
  const TensorData* x = constantOf(dq.input(0));
  const TensorData* s = constantOf(dq.input(1));
  const TensorData* z = dq.input(2) ? constantOf(dq.input(2)) : nullptr;
  if (!x || !s || (dq.input(2) && !z) || s->dtype() != DType::Float || dq.attrInt("output_dtype", 0) > 1) return false;
  DType dt = x->dtype();
  if (dt != DType::Int4 && dt != DType::UInt4 && dt != DType::Int8 && dt != DType::UInt8 && dt != DType::Int16 &&
      dt != DType::UInt16 && dt != DType::Int32)
    return false;
  if (z && (z->dtype() != dt || z->dims != s->dims)) return false;
  const int64_t n = x->numElements().value_or(-1);
  if (n < 0 || x->raw.size() != x->expectedBytes().value_or(UINT64_MAX) || !constData<float>(s, DType::Float)) return false;
  if (z && z->raw.size() != z->expectedBytes().value_or(UINT64_MAX)) return false;
  auto element = [&](const TensorData& t, int64_t i) -> float {
    const auto* p = reinterpret_cast<const uint8_t*>(t.raw.data());
    switch (t.dtype()) {
      case DType::Int8: return static_cast<float>(static_cast<int8_t>(p[i]));
      case DType::UInt8: return static_cast<float>(p[i]);
      case DType::Int16: return static_cast<float>(load<int16_t>(p, i));
      case DType::UInt16: return static_cast<float>(load<uint16_t>(p, i));
      case DType::Int32: return static_cast<float>(load<int32_t>(p, i));  // rounded as the reference rounds it
      case DType::UInt4: return static_cast<float>((p[i / 2] >> (i % 2 ? 4 : 0)) & 0x0F);
      default: {  // Int4: sign-extend the nibble
        int v = (p[i / 2] >> (i % 2 ? 4 : 0)) & 0x0F;
        return static_cast<float>(v >= 8 ? v - 16 : v);
      }
    }
  };
  const auto rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = dq.attrInt("axis", 1), block = dq.attrInt("block_size", 0);
  const int64_t sn = s->numElements().value_or(0);
  std::vector<int64_t> strides(static_cast<size_t>(rank), 1);
  for (int64_t d = rank - 2; d >= 0; --d) strides[static_cast<size_t>(d)] = strides[static_cast<size_t>(d + 1)] * x->dims[static_cast<size_t>(d + 1)];
  enum { PerTensor, PerAxis, Blocked } mode = PerTensor;
  if (sn != 1 || s->dims.size() > 1) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    if (block <= 0) {
      if (s->dims.size() != 1 || s->dims[0] != x->dims[static_cast<size_t>(axis)]) return false;
      mode = PerAxis;
    } else {
      if (static_cast<int64_t>(s->dims.size()) != rank) return false;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t want = d == axis ? (x->dims[static_cast<size_t>(d)] + block - 1) / block : x->dims[static_cast<size_t>(d)];
        if (s->dims[static_cast<size_t>(d)] != want) return false;
      }
      mode = Blocked;
    }
  }
  // The scales copied out: the plan reads the model's own initializer bytes, at any address.
  std::vector<float> scales(static_cast<size_t>(sn));
  if (sn) std::memcpy(scales.data(), s->raw.data(), scales.size() * sizeof(float));
  const float* sd = scales.data();
  out.resize(static_cast<size_t>(n));
  // x as [outer, axisDim, inner]; the scale (and zero point) as [outer, axisDim / block, inner]
  // (blocked), [axisDim] (per axis) or one value.
  const int64_t axisDim = mode == PerTensor ? 1 : x->dims[static_cast<size_t>(axis)];
  const int64_t inner = mode == PerTensor ? n : strides[static_cast<size_t>(axis)];
  const int64_t outer = axisDim * inner == 0 ? 0 : n / (axisDim * inner);
  const int64_t blocks = mode == Blocked ? (axisDim + block - 1) / block : axisDim;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < axisDim; ++a) {
      const int64_t row = (o * axisDim + a) * inner;
      for (int64_t r = 0; r < inner; ++r) {
        const int64_t i = row + r;
        const int64_t p = mode == PerTensor ? 0 : mode == PerAxis ? a : (o * blocks + a / block) * inner + r;
        float v = element(*x, i);
        if (z) v = v - element(*z, p);
        out[static_cast<size_t>(i)] = v * sd[p];
      }
    }
  return true;
}

std::vector<FusedInt8Step> findInt8Fusions(const Graph& g, const std::function<const StaticTensorType*(const Value*)>& typeOf,
                                           const std::function<const TensorData*(const Value*)>& constantOf, int threads) {
  std::vector<FusedInt8Step> out;
  for (const auto& dn : g.nodes()) {
    const Node* d = dn.get();
    if (!isOp(d, "DynamicQuantizeLinear") || d->outputs().size() != 3) continue;
    const Value *x = d->input(0), *xq = d->output(0), *xs = d->output(1), *xz = d->output(2);
    if (!x || !xq || !xs || !xz || xq->isGraphOutput() || xs->isGraphOutput() || xz->isGraphOutput()) continue;
    const StaticTensorType* xt = typeOf(x);
    if (!xt || xt->dtype != DType::Float || xt->dims.size() < 2) continue;
    const int64_t k = xt->dims.back();
    const int64_t m = k == 0 ? 0 : xt->numElements() / k;
    std::vector<FusedInt8Step> chains;
    std::set<const Node*> scaleMuls, mmis;
    bool ok = true;
    for (const Use& u : xq->uses()) {
      const Node* mmi = u.node;
      if (!isOp(mmi, "MatMulInteger") || mmi->graph() != &g || u.index != 0 || mmi->input(2) != xz || mmi->input(1) == xq) {
        ok = false;
        break;
      }
      qgemm::PackedB packed;
      std::vector<int32_t> bZero;
      const Value* bz = mmi->input(3);
      if (!weightOf(constantOf(mmi->input(1)), bz ? constantOf(bz) : nullptr, bz != nullptr, k, packed, bZero)) {
        ok = false;
        break;
      }
      const int64_t n = packed.n;
      const Node* cast = singleReader(mmi->output(0), g);
      if (!isOp(cast, "Cast") || cast->attrInt("to", 0) != static_cast<int64_t>(DType::Float)) {
        ok = false;
        break;
      }
      const Node* mul = singleReader(cast->output(0), g);
      if (!isOp(mul, "Mul") || mul->inputs().size() != 2) {
        ok = false;
        break;
      }
      const Value* scaleV = mul->input(0) == cast->output(0) ? mul->input(1) : mul->input(0);
      const Node* sm = scaleV ? scaleV->producer() : nullptr;
      std::vector<float> wScale;
      if (!isOp(sm, "Mul") || sm->graph() != &g || !onlyUse(scaleV, mul, g) || sm->inputs().size() != 2) {
        ok = false;
        break;
      }
      const Value* ws = sm->input(0) == xs ? sm->input(1) : sm->input(1) == xs ? sm->input(0) : nullptr;
      if (!ws || !perColumn<float>(constantOf(ws), DType::Float, n, wScale)) {
        ok = false;
        break;
      }
      const StaticTensorType* yt = typeOf(mul->output(0));
      if (!yt || yt->numElements() != m * n || yt->dims.back() != n) {
        ok = false;
        break;
      }
      FusedInt8Step st;
      st.covered = {d, mmi, cast, sm, mul};
      st.last = mul;
      st.output = mul->output(0);
      std::vector<float> bias;
      const Node* add = singleReader(mul->output(0), g);
      if (isOp(add, "Add") && add->inputs().size() == 2) {
        const Value* bv = add->input(0) == mul->output(0) ? add->input(1) : add->input(0);
        const TensorData* bt = bv ? constantOf(bv) : nullptr;
        const StaticTensorType* at = typeOf(add->output(0));
        if (bt && bt->dims.size() == 1 && perColumn<float>(bt, DType::Float, n, bias) && at && at->dims == yt->dims) {
          st.covered.push_back(add);
          st.last = add;
          st.output = add->output(0);
        } else {
          bias.clear();
        }
      }
      st.input = x;
      st.kernel = std::make_unique<QuantMatMulKernel>(std::move(packed), m, std::move(bZero), std::move(wScale), std::move(bias),
                                                      0.0f, 0.0f);
      st.def = &kDynamicDef;
      scaleMuls.insert(sm);
      mmis.insert(mmi);
      chains.push_back(std::move(st));
    }
    if (!ok || chains.empty()) continue;
    // Every reader of the scale and the zero point must be a chain's.
    for (const Use& u : xs->uses())
      if (!scaleMuls.count(u.node) || u.node->graph() != &g) ok = false;
    for (const Use& u : xz->uses())
      if (!mmis.count(u.node) || u.node->graph() != &g) ok = false;
    if (!ok) continue;
    for (auto& c : chains) out.push_back(std::move(c));
  }
  findRowDynamicFusions(g, typeOf, constantOf, out);
  findGatherDequantizeFusions(g, typeOf, constantOf, out);
  findQdqFusions(g, typeOf, constantOf, threads, out);
  return out;
}

}  // namespace onnxtool::cpu
