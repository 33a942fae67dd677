// float16.h: float32 -> float16 / bfloat16 conversion of weights and computation that never
// writes an invalid model. Each main-graph node whose schema lets a float-bound type parameter
// take the narrow type computes in it; everything else stays float32 with Cast nodes at the
// borders: ops whose schema has no float16 (bfloat16) for that parameter, Resize/Upsample scales
// and roi, Range and whatever computes its inputs, shape-computing chains (values derived from
// Shape/Size and constants only), ops whose output type comes from an attribute (Cast,
// ConstantOfShape, Random*, EyeLike, ...), nodes holding subgraphs (If/Loop/Scan, whose bodies
// stay float32 as they are: outer values they read keep their float32 names), the ops of
// --op-block-list, and functions' bodies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/dtype.h"
#include "lib/ir.h"

namespace onnxtool {

struct Float16Options {
  DType target = DType::Float16;  ///< Float16 or BFloat16
  /// Graph inputs and outputs stay float32 (Casts right after the inputs, before the outputs).
  bool keepIoTypes = false;
  /// Op types (any domain) that stay float32.
  std::vector<std::string> opBlockList;
};

struct Float16Report {
  int64_t nodesConverted = 0;        ///< main-graph nodes now computing in the narrow type
  int64_t nodesKeptFloat = 0;        ///< nodes with float32 data that stayed float32
  int64_t castsInserted = 0;         ///< Cast nodes in the result that the conversion added
  int64_t initializersConverted = 0;
  uint64_t floatWeightBytes = 0;     ///< float32 bytes of the converted initializers
  uint64_t halfWeightBytes = 0;      ///< and their bytes after
  int64_t clamped = 0;               ///< finite initializer values beyond the range, clamped to +-max
  int64_t flushedToZero = 0;         ///< non-zero values below the smallest subnormal, now 0
  float largestClamped = 0;          ///< the largest |value| clamped
  std::vector<std::string> kept;     ///< "node 'x' (Range): why" for each node kept float32
};

/// Converts the model in place (types are inferred first). Throws Error(Unsupported) below opset
/// 6 (Cast's `to` was a string) and, for bfloat16, below opset 13.
Float16Report convertToFloat16(Model& model, const Float16Options& options = {});

}  // namespace onnxtool
