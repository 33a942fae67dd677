// infer_strings_random_signal.cpp: shape inference for string ops (StringConcat, StringNormalizer,
// StringSplit, RegexFullMatch), TfIdfVectorizer, random ops (RandomNormal/Uniform[Like],
// Bernoulli, Multinomial), signal ops (DFT, STFT, window functions, MelWeightMatrix) and
// ImageDecoder.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

/// The single known value of a scalar (or one-element) integer input.
SymDim scalarOf(InferContext& c, size_t i) {
  if (!c.hasInput(i)) return std::nullopt;
  const auto* d = c.inputData(i);
  return d && d->size() == 1 ? (*d)[0] : std::nullopt;
}

void stringConcat(InferContext& c) {
  auto a = c.inputShape(0), b = c.inputShape(1);
  if (a && b) c.setOutput(0, DType::String, c.broadcast(*a, *b));
}

void stringNormalizer(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return c.setOutputDType(0, DType::String);
  if (x->size() != 1 && !(x->size() == 2 && (*x)[0] && (*x)[0]->asConstant() == 1))
    c.fail(fmt::format("input must be [C] or [1, C], got rank {}", x->size()));
  // Stop words remove elements; without them the shape is kept.
  const Attribute* stop = c.attr("stopwords");
  SymDim n = stop && !stop->strings.empty() ? SymDim(c.freshDim()) : x->back();
  SymShape out = *x;
  out.back() = n;
  c.setOutput(0, DType::String, out);
}

void stringSplit(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  SymShape sub = *x;
  sub.push_back(std::nullopt);  // the most substrings of any element
  c.setOutput(0, DType::String, sub);
  c.setOutput(1, DType::Int64, *x);
}

void regexFullMatch(InferContext& c) {
  if (auto x = c.inputShape(0)) c.setOutput(0, DType::Bool, *x);
}

void tfIdfVectorizer(InferContext& c) {
  auto x = c.inputShape(0);
  auto idx = c.attrInts("ngram_indexes");
  SymDim size;
  if (idx && !idx->empty()) size = SymExpr(*std::max_element(idx->begin(), idx->end()) + 1);
  if (!x) return c.setOutputDType(0, DType::Float);
  if (x->size() == 1) c.setOutput(0, DType::Float, {size});
  else if (x->size() == 2) c.setOutput(0, DType::Float, {(*x)[0], size});
  else c.fail(fmt::format("input must have rank 1 or 2, got {}", x->size()));
}

void randomFromShape(InferContext& c) {
  auto dt = static_cast<DType>(c.attrInt("dtype", static_cast<int64_t>(DType::Float)));
  auto shape = c.attrInts("shape");
  if (!shape) c.fail("attribute 'shape' is required");
  SymShape s;
  for (int64_t d : *shape) s.push_back(SymExpr(d));
  c.setOutput(0, dt, s);
}

/// RandomNormalLike, RandomUniformLike and Bernoulli: the input's shape, dtype or the input's type.
void randomLike(InferContext& c) {
  auto dt = static_cast<DType>(c.attrInt("dtype", static_cast<int64_t>(c.inputDType(0))));
  if (auto s = c.inputShape(0)) c.setOutput(0, dt, *s);
  else c.setOutputDType(0, dt);
}

void multinomial(InferContext& c) {
  auto dt = static_cast<DType>(c.attrInt("dtype", static_cast<int64_t>(DType::Int32)));
  auto x = c.inputShape(0);
  if (x && x->size() != 2) c.fail(fmt::format("input must have rank 2, got {}", x->size()));
  c.setOutput(0, dt, {x ? (*x)[0] : std::nullopt, SymExpr(c.attrInt("sample_size", 1))});
}

void window(InferContext& c) {
  auto dt = static_cast<DType>(c.attrInt("output_datatype", static_cast<int64_t>(DType::Float)));
  c.setOutput(0, dt, {scalarOf(c, 0)});
}

void melWeightMatrix(InferContext& c) {
  auto dt = static_cast<DType>(c.attrInt("output_datatype", static_cast<int64_t>(DType::Float)));
  SymDim bins = scalarOf(c, 0), dft = scalarOf(c, 1);
  c.setOutput(0, dt, {dft ? SymDim(SymExpr::floorDiv(*dft, 2) + SymExpr(1)) : std::nullopt, bins});
}

/// DFT 17 (axis attribute, default 1) and 20+ (axis input 2, default -2): the axis dim becomes
/// dft_length, halved plus one when onesided; the last dim 2 (complex), or 1 for an inverse of a
/// one-sided spectrum (real output of length 2 * (n - 1) unless dft_length says).
void dft(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x) return;
  auto rank = static_cast<int64_t>(x->size());
  if (rank < 2) c.fail(fmt::format("input must have rank >= 2, got {}", rank));
  std::optional<int64_t> axis;
  if (c.sinceVersion() < 20) {
    axis = c.attrInt("axis", 1);
  } else if (c.hasInput(2)) {
    if (auto a = c.inputInts(2); a && a->size() == 1) axis = (*a)[0];
  } else {
    axis = -2;
  }
  bool inverse = c.attrInt("inverse", 0) != 0, onesided = c.attrInt("onesided", 0) != 0;
  SymShape out = *x;
  out.back() = SymExpr(inverse && onesided ? 1 : 2);
  if (!axis) {
    // Which dim changes is unknown; none does without onesided or dft_length.
    if (onesided || c.hasInput(1))
      for (int64_t k = 0; k + 1 < rank; ++k) out[k] = std::nullopt;
    return c.setOutput(0, c.inputDType(0), out);
  }
  int64_t k = *axis < 0 ? *axis + rank : *axis;
  if (k < 0 || k >= rank - 1) c.fail(fmt::format("axis {} is out of range for rank {}", *axis, rank));
  SymDim n = (*x)[k];
  if (n && inverse && onesided) n = SymExpr(2) * (*n - SymExpr(1));
  if (c.hasInput(1)) n = scalarOf(c, 1);
  out[k] = n && onesided && !inverse ? SymDim(SymExpr::floorDiv(*n, 2) + SymExpr(1)) : n;
  c.setOutput(0, c.inputDType(0), out);
}

/// STFT: signal (B, L, 1|2) -> (B, frames, bins, 2).
void stft(InferContext& c) {
  auto x = c.inputShape(0);
  if (x && x->size() != 3) c.fail(fmt::format("signal must have rank 3 (batch, length, 1 or 2), got {}", x->size()));
  SymDim step = scalarOf(c, 1), frame = scalarOf(c, 3);
  if (!frame && c.hasInput(2))
    if (auto w = c.inputShape(2); w && w->size() == 1) frame = (*w)[0];
  SymDim len = x && x->size() >= 2 ? (*x)[1] : std::nullopt;
  SymDim frames;
  if (len && frame && step && step->isConstant() && *step->asConstant() > 0)
    frames = SymExpr::floorDiv(*len - *frame, *step->asConstant()) + SymExpr(1);
  bool onesided = c.attrInt("onesided", 1) != 0;
  SymDim bins = frame && onesided ? SymDim(SymExpr::floorDiv(*frame, 2) + SymExpr(1)) : frame;
  c.setOutput(0, c.inputDType(0), {x ? (*x)[0] : std::nullopt, frames, bins, SymExpr(2)});
}

void imageDecoder(InferContext& c) {
  std::string format = c.attrString("pixel_format", "RGB");
  c.setOutput(0, DType::UInt8, {std::nullopt, std::nullopt, SymExpr(format == "Grayscale" ? 1 : 3)});
}

}  // namespace

void registerInferStringsRandomSignal(InferRegistry& r) {
  r.add({"", "StringConcat", 1, stringConcat});
  r.add({"", "StringNormalizer", 1, stringNormalizer});
  r.add({"", "StringSplit", 1, stringSplit});
  r.add({"", "RegexFullMatch", 1, regexFullMatch});
  r.add({"", "TfIdfVectorizer", 1, tfIdfVectorizer});
  for (std::string_view op : {"RandomNormal", "RandomUniform"}) r.add({"", op, 1, randomFromShape});
  for (std::string_view op : {"RandomNormalLike", "RandomUniformLike", "Bernoulli"}) r.add({"", op, 1, randomLike});
  r.add({"", "Multinomial", 1, multinomial});
  for (std::string_view op : {"BlackmanWindow", "HammingWindow", "HannWindow"}) r.add({"", op, 1, window});
  r.add({"", "MelWeightMatrix", 1, melWeightMatrix});
  r.add({"", "DFT", 1, dft});
  r.add({"", "STFT", 1, stft});
  r.add({"", "ImageDecoder", 1, imageDecoder});
}

}  // namespace onnxtool
