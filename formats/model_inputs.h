// model_inputs.h: the inputs a command feeds a model: files given with -i, the ONNX test-data
// layout, and random values. One generator serves `run --random`, `optimize --verify` and (later)
// `bench`, so that what one command feeds a model, the others feed it too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

/// Where the inputs come from. Dims of random inputs are the model's declared input dims (set
/// them with applyInputShapes first); symbolic or unknown dims take `symbolicDim`.
struct ModelInputOptions {
  std::vector<std::string> files;  ///< -i FILE or NAME=FILE (.pb, .npy, .npz, .json)
  std::string testDataDir;         ///< --inputs-dir: DIR/input_0.pb, input_1.pb, ... in input order
  bool random = false;             ///< fill the inputs not given with random values
  uint64_t seed = 0;
  int64_t symbolicDim = 1;  ///< the size of a symbolic or unknown dim in a random input
  /// A symbol -> size table used before symbolicDim (`batch` -> 3), for checks at several sizes.
  std::map<std::string, int64_t> symbolSizes;
};

/// The graph inputs a caller must feed (those without an initializer), in graph order.
std::vector<const ValueInfoEntry*> feedableInputs(const Graph& g);

/// Collects inputs (name -> value). Throws Error(InvalidInput) naming the input or file on a
/// mismatch (unknown input name, given twice, more files than inputs, a string input asked to be
/// random), Error(Unsupported) for random non-tensor inputs.
std::map<std::string, RtValue> gatherModelInputs(const Graph& g, const ModelInputOptions& options);

/// How random values of one input are drawn: floats from a standard normal distribution (negative
/// values included); integers uniformly in [low, high), where `high` is the smallest table size an
/// index input reaches (Gather/GatherElements/Embedding-style lookups, through Cast, Reshape,
/// Unsqueeze, Squeeze, Flatten and Identity), else 10; bools either.
struct RandomInputRange {
  int64_t low = 0, high = 10;
};
RandomInputRange randomInputRange(const Graph& g, const Value* input);

/// A random tensor drawn as RandomInputRange says. Throws Error(InvalidInput) when too large.
Tensor randomInput(DType dtype, const std::vector<int64_t>& dims, const RandomInputRange& range, std::mt19937_64& rng);

}  // namespace onnxtool
