// value_ops.h: operations on runtime values that tools need around execution: comparison with
// numpy-allclose semantics, random inputs, and summary statistics.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/type.h"

namespace onnxtool {

struct CompareResult {
  bool ok = true;
  double maxAbsError = 0;  ///< over all compared float elements
  double maxRelError = 0;  ///< |a-b|/|b| over elements with b != 0
  std::string message;     ///< why not ok: the first mismatch (dtype, shape, element and values)
};

/// Compares `got` with `want`: kinds, dtypes and shapes must match; float elements satisfy
/// |got - want| <= atol + rtol * |want| (NaN equals NaN, infinities must match), everything else
/// compares exactly. Sequences and optionals element by element.
CompareResult compareValues(const RtValue& got, const RtValue& want, double rtol, double atol);

/// A tensor of `dtype` and `dims` with reproducible random values: floats uniform in [0, 1),
/// integers in [0, 10), bools either. Throws Error(Unsupported) for other types.
Tensor randomTensor(DType dtype, const std::vector<int64_t>& dims, std::mt19937_64& rng);

struct TensorStats {
  double min = 0, max = 0, mean = 0;
  int64_t nanCount = 0, infCount = 0;
  std::vector<std::string> first;  ///< the first few elements, formatted
  std::vector<double> firstValues;  ///< the same as numbers (numeric tensors only)
};
/// Statistics for numeric tensors (strings: first values only).
TensorStats tensorStats(const TensorData& t, size_t firstN = 6);

}  // namespace onnxtool
