// input_shapes.h: `--shape NAME=DIMS`, parsed and applied one way for every subcommand (inspect,
// check, convert, optimize, run, and later bench and quantize).
//
// DIMS is a list of dims separated by ',' (or 'x' between numbers: "1x128"): a non-negative
// integer fixes the dim, an identifier names it (a symbolic dim), '?' leaves it unknown; an empty
// DIMS (or "scalar") is rank 0. A symbol of the model that --shape renames or fixes is renamed or
// fixed everywhere the model's declarations use it (other inputs, outputs, value_info), as ONNX
// Runtime's free-dimension overrides do, so `--shape input=N,1,28,28` on a model saying `batch`
// makes its outputs read [N,10].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/ir.h"

namespace onnxtool {

/// One parsed `--shape NAME=DIMS`.
struct InputShapeSpec {
  std::string text;               ///< as given, for messages
  std::string name;               ///< the input's name
  std::vector<std::string> dims;  ///< each a decimal integer, an identifier, or "?"

  /// The dims as numbers when every one is an integer; nullopt otherwise.
  std::optional<std::vector<int64_t>> numericDims() const;
};

/// Parses one spec. Throws Error(InvalidInput) "--shape 'TEXT': why" on a malformed one (no '=',
/// an empty dim, a dim that is neither an integer, an identifier nor '?', a number too large).
InputShapeSpec parseInputShape(const std::string& spec);

/// Parses every spec; an input named twice is an error too.
std::vector<InputShapeSpec> parseInputShapes(const std::vector<std::string>& specs);

/// Sets the dims of the main graph's inputs. Throws Error(InvalidInput) naming the spec when the
/// model has no such input (listing those it has), the input is an initializer or not a tensor, or
/// the rank differs from the declared one, or two specs give one model symbol different values.
/// A model symbol replaced by a spec is replaced in every declaration of the model.
void applyInputShapes(Model& model, const std::vector<InputShapeSpec>& specs);

/// Parses and applies in one step (what most subcommands want).
void applyInputShapes(Model& model, const std::vector<std::string>& specs);

}  // namespace onnxtool
