// quantize.cpp: reference kernels of QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear:
// per-tensor, per-axis and blocked scales, integer (int2..int16, uint2..uint16), float8, float4
// and float6 quantized types, rounding half to even with saturation.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "exec/ref/float_formats.h"
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

/// Maps an element of x to the element of a scale (or zero point) tensor that applies to it:
/// one value for the whole tensor, one per index along `axis` (1-D scale), or one per block of
/// `blockSize` consecutive indices along `axis` (scale of x's rank).
class ParamIndexer {
 public:
  ParamIndexer(const KernelContext& ctx, const std::vector<int64_t>& xDims, const TensorData& param, int64_t axis,
               int64_t blockSize)
      : xDims_(xDims), xStrides_(stridesOf(xDims)) {
    auto rank = static_cast<int64_t>(xDims.size());
    if (param.dims.empty() || numel(param) == 1) return;  // per tensor
    axis_ = normalizeAxis(ctx, axis, rank);
    if (blockSize <= 0) {
      if (param.dims.size() != 1 || param.dims[0] != xDims[static_cast<size_t>(axis_)])
        ctx.fail(fmt::format("a per-axis scale must be 1-D with {} elements (axis {}), got {} elements",
                             xDims[static_cast<size_t>(axis_)], axis, numel(param)));
      mode_ = Mode::PerAxis;
      return;
    }
    if (static_cast<int64_t>(param.dims.size()) != rank)
      ctx.fail(fmt::format("a blocked scale must have the input's rank {}, got rank {}", rank, param.dims.size()));
    for (int64_t d = 0; d < rank; ++d) {
      int64_t want = d == axis_ ? (xDims[static_cast<size_t>(d)] + blockSize - 1) / blockSize : xDims[static_cast<size_t>(d)];
      if (param.dims[static_cast<size_t>(d)] != want)
        ctx.fail(fmt::format("blocked scale dimension {} is {}, expected {} (block_size {})", d,
                             param.dims[static_cast<size_t>(d)], want, blockSize));
    }
    mode_ = Mode::Blocked;
    blockSize_ = blockSize;
    paramStrides_ = stridesOf(param.dims);
  }

  int64_t offset(int64_t flat) const {
    switch (mode_) {
      case Mode::PerTensor: return 0;
      case Mode::PerAxis: {
        auto a = static_cast<size_t>(axis_);
        return (flat / xStrides_[a]) % xDims_[a];
      }
      case Mode::Blocked: {
        int64_t off = 0;
        for (size_t d = 0; d < xDims_.size(); ++d) {
          int64_t c = (flat / xStrides_[d]) % xDims_[d];
          if (static_cast<int64_t>(d) == axis_) c /= blockSize_;
          off += c * paramStrides_[d];
        }
        return off;
      }
    }
    return 0;
  }

 private:
  enum class Mode { PerTensor, PerAxis, Blocked };
  Mode mode_ = Mode::PerTensor;
  std::vector<int64_t> xDims_, xStrides_, paramStrides_;
  int64_t axis_ = 0;
  int64_t blockSize_ = 0;
};

/// v rounded to float type t (the precision arithmetic runs in); other types leave v as is.
double roundTo(DType t, double v) {
  switch (t) {
    case DType::Float: return static_cast<float>(v);
    case DType::Float16:
    case DType::BFloat16: return decodeNarrowFloat(t, encodeNarrowFloat(t, v, false));
    default: return v;
  }
}

/// The saturation range of an integer quantized type.
bool integerRange(DType t, double& lo, double& hi) {
  switch (t) {
    case DType::UInt8: lo = 0, hi = 255; return true;
    case DType::Int8: lo = -128, hi = 127; return true;
    case DType::UInt16: lo = 0, hi = 65535; return true;
    case DType::Int16: lo = -32768, hi = 32767; return true;
    case DType::UInt4: lo = 0, hi = 15; return true;
    case DType::Int4: lo = -8, hi = 7; return true;
    case DType::UInt2: lo = 0, hi = 3; return true;
    case DType::Int2: lo = -2, hi = 1; return true;
    default: return false;
  }
}

void quantizeLinear(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& scale = ctx.tensor(1);
  const TensorData* zeroPoint = ctx.hasInput(2) ? &ctx.tensor(2) : nullptr;
  auto outputDtype = static_cast<DType>(ctx.attrInt("output_dtype", 0));
  DType outType = DType::UInt8;
  if (zeroPoint) {
    if (outputDtype != DType::Undefined && outputDtype != zeroPoint->dtype())
      ctx.fail(fmt::format("output_dtype {} differs from the zero point's type {}", dtypeName(outputDtype),
                           dtypeName(zeroPoint->dtype())));
    outType = zeroPoint->dtype();
  } else if (outputDtype != DType::Undefined) {
    outType = outputDtype;
  }
  double lo = 0, hi = 0;
  bool isInteger = integerRange(outType, lo, hi);
  if (!isInteger && !isNarrowFloat(outType))
    ctx.fail(fmt::format("{} is not a quantized type", dtypeName(outType)));
  if (outType == DType::Float16 || outType == DType::BFloat16)
    ctx.fail(fmt::format("{} is not a quantized type", dtypeName(outType)));
  if (x.dtype() == DType::String || scale.dtype() == DType::String) ctx.fail("string inputs are not supported");

  int64_t axis = ctx.attrInt("axis", 1);
  int64_t blockSize = ctx.attrInt("block_size", 0);
  ParamIndexer index(ctx, x.dims, scale, axis, blockSize);
  std::optional<ParamIndexer> zpIndex;
  if (zeroPoint) zpIndex.emplace(ctx, x.dims, *zeroPoint, axis, blockSize);
  // The division runs in the scale's precision unless `precision` names another.
  auto precision = static_cast<DType>(ctx.attrInt("precision", 0));
  if (precision == DType::Undefined) precision = scale.dtype() == DType::Float8E8M0 || scale.dtype() == DType::Int32 ? DType::Float : scale.dtype();
  ConvertOptions opts;
  opts.saturate = ctx.attrInt("saturate", 1) != 0;

  Tensor out = makeTensor(outType, x.dims);
  for (int64_t i = 0, n = numel(x); i < n; ++i) {
    int64_t p = index.offset(i);
    double q = roundTo(precision, roundTo(precision, loadDouble(x, i)) / roundTo(precision, loadDouble(scale, p)));
    double zp = zeroPoint ? loadDouble(*zeroPoint, zpIndex->offset(i)) : 0.0;
    if (isInteger) {
      double r = std::isnan(q) ? 0.0 : std::nearbyint(q);  // half to even
      storeElement(out, i, Scalar::ofFloat(std::clamp(r + zp, lo, hi)));
    } else {
      // The reference adds the zero point for float4/float6 (so -0 becomes +0) and ignores it
      // for float8, where it must be zero.
      if (zeroPoint && !isSaturableFloat8(outType)) q = q + zp;
      storeElement(out, i, Scalar::ofFloat(q), opts);
    }
  }
  ctx.setOutput(0, std::move(out));
}

void dequantizeLinear(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  const TensorData& scale = ctx.tensor(1);
  const TensorData* zeroPoint = ctx.hasInput(2) ? &ctx.tensor(2) : nullptr;
  if (zeroPoint && zeroPoint->dtype() != x.dtype()) ctx.fail("the zero point must have the input's type");
  if (x.dtype() == DType::String) ctx.fail("string inputs are not supported");
  auto outType = static_cast<DType>(ctx.attrInt("output_dtype", 0));
  if (outType == DType::Undefined) outType = scale.dtype() == DType::Float8E8M0 ? DType::Float : scale.dtype();
  if (outType != DType::Float && outType != DType::Float16 && outType != DType::BFloat16 && outType != DType::Double)
    ctx.fail(fmt::format("cannot dequantize to {}", dtypeName(outType)));
  int64_t axis = ctx.attrInt("axis", 1);
  int64_t blockSize = ctx.attrInt("block_size", 0);
  ParamIndexer index(ctx, x.dims, scale, axis, blockSize);
  std::optional<ParamIndexer> zpIndex;
  if (zeroPoint) zpIndex.emplace(ctx, x.dims, *zeroPoint, axis, blockSize);
  Tensor out = makeTensor(outType, x.dims);
  for (int64_t i = 0, n = numel(x); i < n; ++i) {
    int64_t p = index.offset(i);
    // (x - zero_point) * scale in float, then one rounding to the output type, as the reference does
    double dx = static_cast<float>(loadDouble(x, i));
    if (zeroPoint) dx = static_cast<float>(dx - loadDouble(*zeroPoint, zpIndex->offset(i)));
    double y = outType == DType::Double ? dx * loadDouble(scale, p) : static_cast<float>(dx * static_cast<float>(loadDouble(scale, p)));
    storeElement(out, i, Scalar::ofFloat(y));
  }
  ctx.setOutput(0, std::move(out));
}

/// DynamicQuantizeLinear: uint8 with scale (max(0, max x) - min(0, min x)) / 255 and the zero
/// point that maps min(0, min x) to 0, all in float arithmetic like the reference.
void dynamicQuantizeLinear(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dtype() != DType::Float) ctx.fail("input must be float");
  const float* px = data<float>(x);
  int64_t n = numel(x);
  float maxX = 0, minX = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(px[i])) {
      maxX = minX = px[i];
      break;
    }
    maxX = std::max(maxX, px[i]);
    minX = std::min(minX, px[i]);
  }
  float scale = (maxX == minX ? 1.0f : maxX - minX) / 255.0f;
  float zp = std::nearbyint(std::clamp(0.0f - minX / scale, 0.0f, 255.0f));
  Tensor y = makeTensor(DType::UInt8, x.dims);
  uint8_t* py = mutableData<uint8_t>(y);
  for (int64_t i = 0; i < n; ++i) {
    float q = std::nearbyint(px[i] / scale) + zp;
    py[i] = std::isnan(q) ? 0 : static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
  }
  Tensor s = makeTensor(DType::Float, {});
  mutableData<float>(s)[0] = scale;
  Tensor z = makeTensor(DType::UInt8, {});
  mutableData<uint8_t>(z)[0] = static_cast<uint8_t>(zp);
  ctx.setOutput(0, std::move(y));
  ctx.setOutput(1, std::move(s));
  ctx.setOutput(2, std::move(z));
}

}  // namespace

void registerQuantizeOps() {
  // One kernel serves every version: later versions only add attributes (axis 13, saturate 19,
  // block_size/output_dtype 21, precision 23) whose defaults give the earlier behaviour, and types.
  addRef("", "QuantizeLinear", 10, "ref.quantize_linear", quantizeLinear);
  addRef("", "DequantizeLinear", 10, "ref.dequantize_linear", dequantizeLinear);
  addRef("", "DynamicQuantizeLinear", 11, "ref.dynamic_quantize_linear", dynamicQuantizeLinear);
}

}  // namespace onnxtool::ref
