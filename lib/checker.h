// checker.h: the model checker behind `onnxtool check`: every structural problem of a loaded
// model (IR version and opset rules, SSA and scoping, node order, ops and attributes against the
// schema registry, tensors and types, model-local functions) and what shape inference finds,
// reported all at once, one line each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/ir.h"
#include "lib/tensor_check.h"  // kMaxTensorBytes and tensorDataProblems, which checkModel applies

namespace onnxtool {

/// One finding of the checker.
struct Diagnostic {
  enum class Severity { Error, Warning };
  Severity severity = Severity::Error;
  /// The complete one-line message, file prefix included:
  /// `<file>: node '<name>' (<Op>): <what is wrong>, <what was expected>`, or with `graph '<g>'`,
  /// `subgraph '<attr>' of node '<n>' (<Op>)`, `initializer '<x>'`, `function '<domain>::<name>'`
  /// or `model` in place of the node. Always one printable line: control characters and bytes
  /// that are not UTF-8 (from names in the model) are escaped as \n, \x01, ...
  std::string message;
  std::string nodeName;  ///< the node concerned (Node::displayName()), empty for other findings
  std::string opType;    ///< its op_type, empty for other findings
  /// Stable category for scripts (`check --json`), listed in onnxtool-check(1): "spec" (the model
  /// breaks a rule of the ONNX spec), "load" (the file or its external data), "inference",
  /// "declared-type-mismatch", "declared-shape-mismatch" (a warning), "unverifiable-domain",
  /// "unverifiable-experimental-op", "duplicate-opset-import", "inference-incomplete".
  std::string code = "spec";
};

/// The newest IR version this checker knows (onnx 1.23's IR_VERSION).
inline constexpr int64_t kMaxKnownIrVersion = 14;


/// Checks `m` and returns every finding, in model order: problems the loader recorded
/// (Model::loadIssues) first, then model-level, graph, node and function findings. A model with
/// none of those errors then goes through shape inference (lib/shape_inference.h), whose findings
/// (shapes or types that cannot meet, inferred types contradicting declared ones) are errors of
/// the node concerned; `m` is left unchanged.
/// Nodes of domains the registry does not know (and no model-local function defines) are
/// warnings ("unverifiable"), not errors; the model is valid iff no finding is an Error.
/// Never throws on malformed models, never allocates in proportion to declared tensor sizes;
/// only reads what the model holds. Messages name `m.path` as the file.
std::vector<Diagnostic> checkModel(const Model& m);

/// For commands that execute or rewrite a model: the first opset_import (model or model-local
/// function) of a known domain whose version is newer than this build's registry, as a message
/// "the model imports opset 99 of domain 'ai.onnx'; this build knows opsets up to 23"; empty
/// when every known domain's version is within the registry.
std::string newerOpsetThanKnown(const Model& m);

/// Whether any diagnostic is an Error.
bool hasErrors(const std::vector<Diagnostic>& diagnostics);


}  // namespace onnxtool
