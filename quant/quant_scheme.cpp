// quant_scheme.cpp: quantization types, targets and scale arithmetic (see quant_scheme.h).
#include "quant/quant_scheme.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "lib/error.h"

namespace onnxtool {

namespace {

const char* typeName(DType t) {
  switch (t) {
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::UInt16: return "uint16";
    case DType::Int16: return "int16";
    default: return "?";
  }
}

bool isSigned(DType t) { return t == DType::Int8 || t == DType::Int16; }

std::pair<int64_t, int64_t> typeLimits(DType t) {
  switch (t) {
    case DType::UInt8: return {0, 255};
    case DType::Int8: return {-128, 127};
    case DType::UInt16: return {0, 65535};
    case DType::Int16: return {-32768, 32767};
    default: return {0, 255};
  }
}

std::string integerBytes(DType t, int64_t v) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8: return std::string(1, static_cast<char>(static_cast<uint8_t>(v)));
    case DType::UInt16:
    case DType::Int16: {
      auto u = static_cast<uint16_t>(v);
      return std::string{static_cast<char>(u & 0xff), static_cast<char>(u >> 8)};
    }
    case DType::Int32: {
      auto u = static_cast<int32_t>(v);
      std::string s(4, '\0');
      std::memcpy(s.data(), &u, 4);
      return s;
    }
    default: return {};
  }
}

}  // namespace

const std::vector<std::string>& quantizableOpTypes(bool dynamic) {
  static const std::vector<std::string> ops = {"Conv", "MatMul", "Gemm"};
  static const std::vector<std::string> dynamicOps = {"Conv", "MatMul", "Gemm", "Gather"};
  return dynamic ? dynamicOps : ops;
}

QuantScheme resolveScheme(const QuantRequest& r) {
  QuantScheme s;
  const bool trt = r.target == QuantTarget::Trt;
  if (trt && r.dynamic)
    fail(ErrorKind::InvalidInput, "--target trt: TensorRT runs no DynamicQuantizeLinear; quantize with --static (QDQ, int8 symmetric activations)");
  if (trt && r.qoperator) fail(ErrorKind::InvalidInput, "--target trt: TensorRT reads the QDQ form only, not --format qoperator");
  if (trt && r.weightType && *r.weightType != DType::Int8) fail(ErrorKind::InvalidInput, "--target trt: TensorRT takes int8 weights only");
  if (trt && r.activationType && *r.activationType != DType::Int8)
    fail(ErrorKind::InvalidInput, "--target trt: TensorRT takes int8 activations only (symmetric), not {}", typeName(*r.activationType));
  if (trt && r.perChannel && !*r.perChannel) fail(ErrorKind::InvalidInput, "--target trt: weights are per channel for TensorRT (no --per-tensor)");
  if (r.dynamic && r.activationType && *r.activationType != DType::UInt8)
    fail(ErrorKind::InvalidInput, "--dynamic quantizes activations with DynamicQuantizeLinear, which writes uint8 only (--activation-type {} needs --static)",
        typeName(*r.activationType));
  if (r.dynamic && r.symmetricActivations)
    fail(ErrorKind::InvalidInput, "--symmetric-activations needs --static: DynamicQuantizeLinear picks an asymmetric uint8 range at run time");
  s.weightType = r.weightType.value_or(DType::Int8);
  s.activationType = r.activationType.value_or(trt ? DType::Int8 : DType::UInt8);
  if (r.target == QuantTarget::Ort && r.qoperator && s.activationType == DType::Int8 && s.weightType == DType::UInt8)
    fail(ErrorKind::InvalidInput, "--target ort: ONNX Runtime's QLinearConv/QLinearMatMul have no int8 x uint8 kernel; "
         "use --weight-type int8 with --activation-type int8");
  if (r.qoperator && (s.activationType == DType::Int16 || s.activationType == DType::UInt16))
    fail(ErrorKind::InvalidInput, "--format qoperator: QLinearConv/QLinearMatMul are 8-bit; --activation-type {} needs --format qdq", typeName(s.activationType));
  s.symmetricActivations = r.symmetricActivations || trt;
  s.perChannel = r.perChannel.value_or(true);
  s.reduceRange = r.reduceRange;
  s.quantizeBias = !trt;  // TensorRT dequantizes int8 only: a bias stays float and is fused as such
  // ConvInteger weights: uint8 unless int8 was asked for a generic model (ONNX Runtime has no u8s8 ConvInteger).
  s.convWeightsUInt8 = r.dynamic && (r.target == QuantTarget::Ort || !r.weightType);
  const auto& ops = quantizableOpTypes(r.dynamic);
  for (const std::string& op : r.opTypes)
    if (std::find(ops.begin(), ops.end(), op) == ops.end())
      fail(ErrorKind::InvalidInput, "--op-types {}: not an op this mode quantizes ({})", op,
           r.dynamic ? "Conv, MatMul, Gemm, Gather" : "Conv, MatMul, Gemm; Gather with --dynamic");
  s.opTypes = r.opTypes;
  s.exclude = r.exclude;
  return s;
}

std::string exclusionReason(const Node& n, const QuantScheme& s) {
  if (!s.opTypes.empty() && std::find(s.opTypes.begin(), s.opTypes.end(), n.opType) == s.opTypes.end())
    return "not in --op-types";
  for (const std::string& e : s.exclude)
    if ((!n.name.empty() && e == n.name) || e == n.opType) return fmt::format("excluded by --exclude {}", e);
  return {};
}

std::vector<std::string> unmatchedExcludes(const Graph& g, const QuantScheme& s) {
  std::vector<std::string> out;
  for (const std::string& e : s.exclude) {
    bool hit = false;
    for (const auto& n : g.nodes()) hit |= n->name == e || n->opType == e;
    if (!hit) out.push_back(e);
  }
  return out;
}

std::pair<int64_t, int64_t> activationLimits(const QuantScheme& s) {
  auto [lo, hi] = typeLimits(s.activationType);
  if (s.symmetricActivations && isSigned(s.activationType)) lo = -hi;
  return {lo, hi};
}

QuantParams activationParams(const ValueRange& r, const QuantScheme& s) {
  auto [qmin, qmax] = typeLimits(s.activationType);
  QuantParams p;
  if (s.symmetricActivations) {
    double m = std::max(std::fabs(static_cast<double>(r.min)), std::fabs(static_cast<double>(r.max)));
    int64_t half = isSigned(s.activationType) ? qmax : (qmax + 1) / 2 - 1;  // 127 / 32767 either way
    p.scale = m > 0 && std::isfinite(m) ? static_cast<float>(m / static_cast<double>(half)) : 1.0f;
    p.zeroPoint = isSigned(s.activationType) ? 0 : (qmax + 1) / 2;
    return p;
  }
  double lo = std::min(0.0f, r.min), hi = std::max(0.0f, r.max);
  double scale = hi > lo && std::isfinite(hi - lo) ? (hi - lo) / static_cast<double>(qmax - qmin) : 1.0;
  p.scale = static_cast<float>(scale);
  p.zeroPoint = static_cast<int64_t>(std::clamp(std::nearbyint(static_cast<double>(qmin) - lo / scale),
                                                static_cast<double>(qmin), static_cast<double>(qmax)));
  return p;
}

Tensor scalarTensor(DType dt, double v) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dt);
  if (dt == DType::Float) {
    float f = static_cast<float>(v);
    std::string raw(4, '\0');
    std::memcpy(raw.data(), &f, 4);
    t.setRaw(Buffer::fromString(std::move(raw)));
  } else {
    t.setRaw(Buffer::fromString(integerBytes(dt, static_cast<int64_t>(v))));
  }
  return t;
}

std::pair<int64_t, int64_t> weightLimits(const QuantScheme& s, DType type) {
  if (type == DType::UInt8) return {0, s.reduceRange ? 127 : 255};
  return {s.reduceRange ? -64 : -127, s.reduceRange ? 64 : 127};
}

QuantizedWeight quantizeWeight(const TensorData& w, int64_t channelAxis, const QuantScheme& s, DType type) {
  std::vector<float> f(w.raw.size() / 4);
  std::memcpy(f.data(), w.raw.data(), f.size() * 4);
  QuantizedWeight out;
  out.axis = s.perChannel ? channelAxis : -1;
  int64_t channels = 1, inner = static_cast<int64_t>(f.size());
  if (s.perChannel) {
    channels = w.dims.at(static_cast<size_t>(channelAxis));
    inner = 1;
    for (size_t d = static_cast<size_t>(channelAxis) + 1; d < w.dims.size(); ++d) inner *= w.dims[d];
  }
  auto channelOf = [&](size_t i) { return static_cast<size_t>(static_cast<int64_t>(i / static_cast<size_t>(inner)) % channels); };
  const bool u8 = type == DType::UInt8;
  const double qmax = u8 ? (s.reduceRange ? 127 : 255) : (s.reduceRange ? 64 : 127);
  std::vector<float> lo(static_cast<size_t>(channels), 0.0f), hi(static_cast<size_t>(channels), 0.0f);
  for (size_t i = 0; i < f.size(); ++i) {
    if (!std::isfinite(f[i])) continue;
    size_t c = channelOf(i);
    lo[c] = std::min(lo[c], f[i]);
    hi[c] = std::max(hi[c], f[i]);
  }
  out.scales.resize(static_cast<size_t>(channels));
  std::vector<int64_t> zero(static_cast<size_t>(channels), 0);
  for (size_t c = 0; c < out.scales.size(); ++c) {
    double range = u8 ? static_cast<double>(hi[c]) - lo[c] : std::max(std::fabs(lo[c]), std::fabs(hi[c]));
    float scale = range > 0 && std::isfinite(range) ? static_cast<float>(range / qmax) : 1.0f;
    out.scales[c] = scale;
    if (u8) zero[c] = static_cast<int64_t>(std::clamp(std::nearbyint(-static_cast<double>(lo[c]) / scale), 0.0, qmax));
  }
  std::string q(f.size(), '\0');
  for (size_t i = 0; i < f.size(); ++i) {
    size_t c = channelOf(i);
    double r = std::nearbyint(static_cast<double>(f[i]) / out.scales[c]) + static_cast<double>(zero[c]);
    if (std::isnan(r)) r = static_cast<double>(zero[c]);  // a NaN weight: no integer holds it, 0 does least harm
    double v = u8 ? std::clamp(r, 0.0, qmax) : std::clamp(r, -qmax, qmax);
    q[i] = static_cast<char>(u8 ? static_cast<uint8_t>(v) : static_cast<uint8_t>(static_cast<int8_t>(v)));
  }
  out.q.dataType = static_cast<int32_t>(type);
  out.q.dims = w.dims;
  out.q.setRaw(Buffer::fromString(std::move(q)));
  std::string z;
  for (int64_t v : zero) z += integerBytes(type, v);
  out.zero.dataType = static_cast<int32_t>(type);
  if (s.perChannel) out.zero.dims = {channels};
  out.zero.setRaw(Buffer::fromString(std::move(z)));
  out.scale = Tensor::fromFloats("", s.perChannel ? std::vector<int64_t>{channels} : std::vector<int64_t>{}, out.scales);
  return out;
}

QuantizedBias quantizeBias(const TensorData& bias, float xScale, const std::vector<float>& wScales) {
  QuantizedBias out;
  size_t n = bias.raw.size() / 4;
  if (bias.dtype() != DType::Float || bias.raw.size() != bias.expectedBytes().value_or(UINT64_MAX)) return out;
  out.perChannel = wScales.size() > 1;
  if (out.perChannel && (bias.dims.size() != 1 || static_cast<size_t>(bias.dims[0]) != wScales.size())) return out;
  std::vector<float> b(n), scale(wScales.size());
  std::memcpy(b.data(), bias.raw.data(), n * 4);
  for (size_t c = 0; c < wScales.size(); ++c) {
    scale[c] = xScale * wScales[c];  // the float32 product, as a runtime computes it
    if (!(scale[c] > 0) || !std::isfinite(scale[c])) return out;
  }
  std::string raw(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    double q = std::nearbyint(static_cast<double>(b[i]) / scale[out.perChannel ? i : 0]);
    if (!(std::fabs(q) <= 2147483647.0)) return out;  // overflow or NaN: keep the float bias
    auto v = static_cast<int32_t>(q);
    std::memcpy(raw.data() + i * 4, &v, 4);
  }
  out.q.dataType = static_cast<int32_t>(DType::Int32);
  out.q.dims = bias.dims;
  out.q.setRaw(Buffer::fromString(std::move(raw)));
  out.scale = Tensor::fromFloats("", out.perChannel ? std::vector<int64_t>{static_cast<int64_t>(scale.size())} : std::vector<int64_t>{}, scale);
  out.zero.dataType = static_cast<int32_t>(DType::Int32);
  if (out.perChannel) out.zero.dims = {static_cast<int64_t>(scale.size())};
  out.zero.setRaw(Buffer::zeros((out.perChannel ? scale.size() : 1) * 4));
  return out;
}

}  // namespace onnxtool
