// tensor_check.h: whether a tensor's bytes hold what its element type and dims declare. Below
// the checker and the executors, which both call it before trusting a tensor from a model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ir.h"
#include "lib/limits.h"

namespace onnxtool {

/// Tensors declaring more bytes than this are refused as too large to allocate (lib/limits.h).
using limits::kMaxTensorBytes;

/// Problems of one tensor's declaration against its data (element type, dims, byte or string
/// count, the limits of lib/limits.h), each a "<what is wrong>, <what was expected>" phrase; empty
/// when the bytes hold exactly what the dims and type declare. Never allocates in proportion to
/// the declared dims. Executors call it before trusting a tensor from the model.
std::vector<std::string> tensorDataProblems(const Tensor& t);
/// Likewise for a sparse tensor (values, indices: their shapes, range and order).
std::vector<std::string> sparseTensorDataProblems(const SparseTensor& s);

/// Message pieces shared with the checker.
namespace tensor_check {
std::string plural(uint64_t n, std::string_view one, std::string_view many);  ///< "1 byte", "3 bytes"
std::string dimsStr(const std::vector<int64_t>& dims);                        ///< "[2, 3]"
std::string humanBytes(uint64_t b);                                           ///< "1 TiB"
std::string dtypeProblem(int32_t v);  ///< why `v` is no TensorProto.DataType
}  // namespace tensor_check

}  // namespace onnxtool
