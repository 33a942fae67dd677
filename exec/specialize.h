// specialize.h: the model an executor's plan runs for one set of concrete input shapes, shared
// by the `cpu` and `cuda` executors so that both see the same graph.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ir.h"

namespace onnxtool {

/// A deep clone of `original` (weights shared) to execute with these input dims: a float16
/// model computed in float32 (passes/upcast_half.h, the interface kept through Casts), then,
/// for `level` > 0, the -O<level> preset of passes/ run with the input shapes fixed (shape
/// arithmetic folded, no-ops gone, the standard fusions), as ONNX Runtime optimises at session
/// creation. When the preset fails or changes the graph's interface, the clone as written.
/// Not shape-inferred as such: the caller runs inferShapes after its own passes, unless
/// `typesFresh` (may be null) is set true: then the pipeline's last shape inference ran on the
/// returned model as it is, input dims applied. `who` prefixes the debug log lines ("cpu
/// executor"). `timing` (may be null) gets "clone X ms, -O3 Y ms".
std::unique_ptr<Model> specializeModel(const Model& original, const std::map<std::string, std::vector<int64_t>>& inputDims,
                                       int level, std::string_view who, std::string* timing = nullptr,
                                       bool* typesFresh = nullptr);

}  // namespace onnxtool
