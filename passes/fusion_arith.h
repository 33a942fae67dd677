// fusion_arith.h: weight arithmetic shared by the arithmetic fusions (fuse-conv-bn, fuse-conv-mul,
// fuse-conv-add, fuse-bn-into-gemm, fuse-consecutive-mul-add): reading float constants as doubles,
// writing them back in their dtype, per-channel broadcasts, and the BatchNormalization affine
// form. Arithmetic happens in double and is rounded once to the weight dtype.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/ir.h"
#include "passes/pass.h"

namespace onnxtool {

/// A constant of a floating dtype we rewrite (float32, float64, float16, bfloat16) as doubles.
struct FloatConstant {
  DType dtype = DType::Float;
  std::vector<int64_t> dims;
  std::vector<double> values;
};

/// The constant behind `v` when it has a floating dtype and consistent data, else nullopt.
std::optional<FloatConstant> floatConstantOf(const Value* v);

/// A tensor of `dtype` (one of the floating dtypes above) holding `values` rounded once.
Tensor tensorFromDoubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values);

/// Whether every value is finite (folding inf/nan into weights changes 0*inf cases).
bool allFinite(const std::vector<double>& values);

/// `c` (dims `cDims`) broadcast against an output of rank `outRank` whose axis `axis` has
/// `channels` entries, as one value per channel, when it varies along `axis` only (dims 1
/// elsewhere) and does not raise the output's rank. nullopt otherwise. A scalar repeats.
std::optional<std::vector<double>> perChannel(const std::vector<int64_t>& cDims, const std::vector<double>& c,
                                              size_t outRank, size_t axis, int64_t channels);

/// Inference-mode BatchNormalization as y = x * scale + shift per channel.
struct BnAffine {
  std::vector<double> scale, shift;
};

/// The affine form of BatchNormalization node `bn` at the model's opset when it is exactly that:
/// only output Y read, inference mode (is_test=1 before opset 7, training_mode=0 from 14),
/// spatial=1 before opset 9, and scale/B/mean/var constant with `channels` entries each.
std::optional<BnAffine> bnAffine(const Node& bn, int64_t opset, int64_t channels);

/// Whether we rewrite constants of dtype `d` (float32, float64, float16, bfloat16).
bool isFloatDType(DType d);

/// Output channels of Conv / ConvTranspose weights of dims `wDims` with attribute `group`, or 0
/// when the layout does not fit (rank < 3, group not dividing).
int64_t convOutChannels(const Node& conv, const std::vector<int64_t>& wDims);

/// Conv / ConvTranspose `conv`'s constant weights multiplied by one factor per output channel
/// (each product in double, rounded once to the weights' dtype; float32 weights are read and
/// written directly, without a copy in doubles: they run to millions of elements), or nullopt
/// when the weights are not a float constant with consistent data.
std::optional<Tensor> scaledConvWeights(const Node& conv, const std::vector<double>& perOut);

/// Gives Conv / ConvTranspose `conv` new weights `w` and a new bias of `dtype` (each kept when
/// absent), as new initializers named after the old ones (the bias after the weights when absent).
void setConvWeights(Graph& g, Node& conv, std::optional<Tensor> w, DType dtype, const std::vector<double>* bias);

/// The Conv / ConvTranspose producing `v` when its weights are a floating constant, its bias
/// (if any) a constant of the same dtype, `v` read only by one node of `g` and not a graph output.
/// Looks at dtypes and dims only (cheap); the data is read when rewriting.
Node* fusableConvProducer(const Graph& g, const Value* v);

}  // namespace onnxtool
