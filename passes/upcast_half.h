// upcast_half.h: computes a float16/bfloat16 model in float32. Every float16 (and bfloat16)
// initializer, Constant/ConstantOfShape tensor, value type, and Cast/Random*/EyeLike target type
// becomes float32, in the main graph and every subgraph; float16 graph inputs get a Cast to
// float32 in front of their readers and float16 graph outputs a Cast back, so the interface
// (names, types) is unchanged. The cpu executor runs it on its own copy of a half-precision
// model (`quantize --fp16` output): its fast kernels are float32, as ONNX Runtime's x86 CPU
// provider's are (it inserts such Casts around every float16 node and removes the pairs between
// them). Rounding to half precision between ops is gone: results are as close to the float32
// model as the half-precision weights allow, and may differ from a per-op half computation (the
// ONNX reference's) by an ulp of the half type here and there: the cpu executor upcasts float16
// only (11-bit mantissa: the node tests' float16 cases still pass); bfloat16 (8-bit mantissa: the
// bfloat16 Attention cases would be an ulp off) stays on the reference kernels.
#pragma once

#include <cstdint>

#include "lib/ir.h"

namespace onnxtool {

struct UpcastHalfReport {
  int64_t initializers = 0;  ///< tensors converted (initializers and attribute tensors)
  int64_t values = 0;        ///< value types changed
  int64_t attributes = 0;    ///< to/dtype attributes changed
  int64_t casts = 0;         ///< Casts added at the graph's inputs and outputs
  /// Nothing was changed: a graph output's element type is unknown (run shape inference first),
  /// so whether it must stay half precision cannot be told.
  bool skipped = false;
};

/// Which half-precision types to compute in float32.
struct HalfTypes {
  bool float16 = true;
  bool bfloat16 = true;
};

/// True when some tensor value, initializer or node attribute of the model's graphs is of one of
/// `types` (nothing to do otherwise).
bool hasHalfPrecision(const Model& model, const HalfTypes& types = {});

UpcastHalfReport upcastHalfToFloat(Model& model, const HalfTypes& types = {});

}  // namespace onnxtool
