// onnx_text.h: the ONNX textual syntax (onnx's docs/Syntax.md, as read and written by
// onnx.parser / onnx.printer) for our IR: print a Model as text, parse text into a Model.
//
// What the text holds: the model header (ir_version, opset_import, producer_name,
// producer_version, domain, model_version, doc_string, metadata_props), the main graph (name,
// typed inputs and outputs, initializers, value_info), nodes with their names (`[name]` labels),
// domains, overloads and attributes of every kind (subgraphs inline, `@ref` attributes in
// functions), omitted optional inputs and outputs (`""`), and model-local functions (domain,
// overload, opset_import, attribute names with defaults, value_info).
//
// What the text does not hold (dropped by the printer): doc_string and metadata_props of graphs,
// nodes, attributes, tensors, value infos and functions; type and dim denotations; training_info
// and other fields the IR keeps only as residual bytes; NaN payloads and signs (every NaN prints
// as `nan`). Sparse tensors (initializers or attributes) have no syntax: printing them fails.
//
// Where the syntax leaves the form open we follow onnx 1.23's parser and printer: `float[]` is a
// tensor of unknown shape and `float` a scalar (rank 0); float16/bfloat16/float8 elements are
// written as their bit patterns (like TensorProto.int32_data); bool as 0/1. Our extensions, which
// onnx's parser does not read: complex tensors as interleaved real and imaginary parts, 2/4/6-bit
// types one value per element, quoted op types, domains and function names, `seq()`; when
// parsing, float16/bfloat16 values may also be written as floats (`1.5`), bool as true/false.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "lib/ir.h"

namespace onnxtool {

struct TextPrintOptions {
  /// Tensors with more elements than this print as `{...}` (not parseable), for display. 0 prints
  /// every element (the default: the text then parses back into the same model).
  size_t elideTensorsOver = 0;
};

/// Prints the model in the textual syntax; floats print with the shortest form that reads back
/// to the same value. Throws Error(Unsupported) for what the syntax cannot hold (sparse tensors,
/// attributes of undefined type, a model without a graph).
std::string printModelText(const Model& model, const TextPrintOptions& options = {});

/// Prints one graph (as it appears inside a model, e.g. a subgraph), for messages and debugging.
std::string printGraphText(const Graph& graph, const TextPrintOptions& options = {});

/// Parses a model in the textual syntax. `path` names the source in messages. Errors throw
/// Error(InvalidInput) with one line `PATH:LINE:COL: expected ..., got ...`; no input crashes
/// (nesting depth is bounded). Tensors given as external data references keep their
/// ExternalDataInfo (storage External, bytes not bound: loadModel binds them).
std::unique_ptr<Model> parseModelText(std::string_view text, const std::string& path);

}  // namespace onnxtool
