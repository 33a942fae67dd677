// shape_inference.h: type and shape inference over a whole model, with symbolic dimensions and
// data propagation of small integer tensors (shapes computed inside the graph).
//
// The engine walks each graph in topological order and, for every node, looks up the inference
// function registered for (domain, op, since-version) at the schema version in force, like the
// kernel registry does for kernels. Inference functions live beside their op family in
// lib/ops/infer_*.cpp and see a node only through InferContext.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lib/ir.h"
#include "lib/ops/op_schema.h"
#include "lib/symbolic.h"

namespace onnxtool {

struct InferOptions {
  /// Replaces the shape of graph input NAME: each entry is a size ("3"), a symbol name
  /// ("batch") or "?" (unknown). The element type is kept.
  std::map<std::string, std::vector<std::string>> inputDims;
  /// Throw Error(InvalidInput) on the first error finding instead of collecting it.
  bool strict = false;
  /// When set, receives the known integer contents of values (data propagation), e.g. for
  /// `fold-shapes` to replace shape computations whose result is static.
  std::unordered_map<const Value*, std::vector<std::optional<SymExpr>>>* valueData = nullptr;
};

/// One finding of inference with the node it concerns, for callers that place it themselves
/// (the checker names the subgraph or function holding the node).
struct InferFinding {
  const Node* node = nullptr;  ///< nullptr for graph-level findings (a cycle)
  std::string what;            ///< the message without the "node '<n>' (<Op>): " prefix
  /// Stable category: "inference" (shapes that cannot meet, types a constraint refuses),
  /// "declared-shape-mismatch" (a node output's declared rank or dims contradict the computed
  /// ones: ONNX Runtime warns and computes), "declared-type-mismatch" (its declared kind or
  /// element type does: ONNX Runtime refuses the model).
  std::string code = "inference";
};

/// A declared type (graph output, value_info or subgraph input) that the computation contradicts:
/// a different rank, a static dim of another size, or a static dim where inference proves an input
/// symbol. Inference keeps the computed type for the value; the entry is rewritten to `written`.
struct DeclarationConflict {
  std::string role;   ///< "output", "value_info" or "subgraph input"
  std::string name;   ///< the value's name
  std::string where;  ///< "" in the main graph, else " in subgraph 'body' of node 'loop' (Loop)"
  TypeInfo declared, inferred, written;
  /// "output 'out' is declared float32[1,seqlen] but computes float32[N,1,8210]; the written model
  /// declares float32[N,1,8210]"
  std::string message() const;
};

struct InferReport {
  /// Findings: incompatible shapes, wrong ranks, type-constraint violations, conflicts with
  /// declared value_info. One line each: "node 'MatMul_3' (MatMul): inner dimensions differ, 3 vs 4".
  std::vector<std::string> errors;
  /// The same findings, one per entry of `errors`, with the node concerned.
  std::vector<InferFinding> findings;
  /// Why the first value was left without a full shape ("no inference for NonMaxSuppression"),
  /// empty when none.
  std::string firstGiveUp;
  /// Ops met without an inference function, with how many nodes each.
  std::map<std::string, size_t> opsWithoutInference;
  /// Declared types that inference contradicts (one per entry), in graph order. Node output
  /// conflicts of rank or static dims are also in `findings`.
  std::vector<DeclarationConflict> declarationConflicts;
  size_t valuesTotal = 0;       ///< node outputs in all graphs
  size_t valuesFullyKnown = 0;  ///< of those: tensors with a rank and every dim a size or symbol
};

/// Infers the type of every node output of the model (main graph, subgraphs with their outer
/// scope, and model-local function calls). Declared types of node outputs (graph outputs,
/// value_info) and of subgraph inputs are claims, not facts: a value's type (Value::type()) is
/// what inference proves, never specialised by a declaration; where inference says nothing the
/// declared element type alone is kept (a wrong one is refused by runtimes, a wrong shape is not).
/// Declarations are checked: a contradicted element type, kind, rank or static dim of a node output
/// is an error finding; every contradicted entry is rewritten to a correct declaration (the
/// declared one refined by inference, conflicting dims and ranks replaced by the inferred ones)
/// and listed in `declarationConflicts`; an uncontradicted declaration is kept as written.
/// Main graph inputs (and --shape) are facts. Dimensions that cannot be expressed in the input
/// symbols get fresh names ("unk__0", numbered in visiting order, so stable for a given model).
/// Throws Error(InvalidInput) for a malformed --shape entry, and on the first finding if strict.
InferReport inferShapes(Model& model, const InferOptions& options = {});

/// The types of node `n`'s outputs (of `model`, whose opset imports apply) for inputs of the
/// given types (one per input of n; ignored for omitted inputs), the inputs with a non-null entry
/// in `inputValues` read as those constants: n's inference function run on a model holding n
/// alone. For executors that meet shapes only at run time (a fast kernel made for the shapes it
/// is given). An output inference says nothing about is TypeInfo{}; a finding (shapes that
/// cannot meet) leaves the types as far as inferred. n must have no subgraphs.
std::vector<TypeInfo> inferNodeOutputTypes(const Model& model, const Node& n, std::span<const TypeInfo> inputTypes,
                                           std::span<const TensorData* const> inputValues);

/// Adds a value_info entry for every node output (all graphs) that has a type and no entry yet,
/// so that saving the model persists the inferred types. Returns how many were added.
size_t writeInferredValueInfos(Model& model);

// ------------------------------------------------------------------------------------------
// The interface of inference functions.

/// A dimension during inference: a symbolic expression, or nullopt when unknown.
using SymDim = std::optional<SymExpr>;
using SymShape = std::vector<SymDim>;

class InferEngine;

/// What an inference function sees of one node. Absent inputs (omitted optional ones, or past
/// the end) have type None. Functions report problems through fail(), which names the node.
class InferContext {
 public:
  InferContext(InferEngine& engine, const Node& node, const OpSchema* schema, int64_t opset,
               const std::vector<const Attribute*>* callerAttrs);

  const Node& node() const { return node_; }
  /// The sinceVersion of the schema in force (not the model's opset).
  int sinceVersion() const { return schema_ ? schema_->sinceVersion : 0; }
  const OpSchema* schema() const { return schema_; }
  int64_t opsetVersion() const { return opset_; }

  size_t numInputs() const { return node_.inputs().size(); }
  size_t numOutputs() const { return node_.outputs().size(); }
  bool hasInput(size_t i) const { return node_.input(i) != nullptr; }
  bool hasOutput(size_t i) const { return node_.output(i) != nullptr; }
  const TypeInfo& inputType(size_t i) const;
  DType inputDType(size_t i) const;
  /// The shape of tensor input i with each dim as an expression; nullopt when the rank is unknown.
  std::optional<SymShape> inputShape(size_t i) const;
  std::optional<int64_t> inputRank(size_t i) const;
  /// The known integer contents of input i, flattened (data propagation); nullptr when unknown.
  const std::vector<SymDim>* inputData(size_t i) const;
  /// Input i's contents when every element is a known constant.
  std::optional<std::vector<int64_t>> inputInts(size_t i) const;
  /// Input i's constant tensor (initializer or a Constant node's value), or nullptr.
  const Tensor* inputConstant(size_t i) const;

  /// The attribute (caller's attribute resolved inside function bodies), or nullptr.
  const Attribute* attr(std::string_view name) const;
  int64_t attrInt(std::string_view name, int64_t def) const;
  float attrFloat(std::string_view name, float def) const;
  std::string attrString(std::string_view name, const std::string& def = {}) const;
  std::optional<std::vector<int64_t>> attrInts(std::string_view name) const;

  /// Sets output i (ignored when omitted) to a tensor of `dtype` and `shape`.
  void setOutput(size_t i, DType dtype, const SymShape& shape);
  /// Sets output i to a tensor of `dtype` with unknown rank (nothing when dtype is Undefined).
  void setOutputDType(size_t i, DType dtype);
  void setOutputType(size_t i, TypeInfo type);
  /// Records the known integer contents of output i (flattened).
  void setOutputData(size_t i, std::vector<SymDim> data);

  /// A fresh symbol for a dimension that exists but cannot be expressed.
  SymExpr freshDim();
  Dim toDim(const SymDim& d) const;
  SymDim fromDim(const Dim& d) const;
  /// Numpy-style broadcast of two shapes; fails on incompatible static dims.
  SymShape broadcast(const SymShape& a, const SymShape& b);
  /// Normalises an axis into [0, rank); fails when out of range.
  int64_t normalizeAxis(int64_t axis, int64_t rank, std::string_view what = "axis");
  /// Infers a subgraph given the types of its formal inputs; returns its output types.
  std::vector<TypeInfo> inferSubgraph(Graph& body, const std::vector<TypeInfo>& inputTypes);

  [[noreturn]] void fail(const std::string& what) const;

 private:
  InferEngine& engine_;
  const Node& node_;
  const OpSchema* schema_;
  int64_t opset_;
  const std::vector<const Attribute*>* callerAttrs_;
};

using InferFn = void (*)(InferContext&);

struct InferFnDef {
  std::string_view domain;  ///< "" for ai.onnx
  std::string_view opType;
  int sinceVersion;         ///< first schema version this function handles
  InferFn fn;
};

/// All inference functions. Registration is explicit (registerShapeInference() lists every
/// family), never by static initialisers.
class InferRegistry {
 public:
  static InferRegistry& instance();
  void add(const InferFnDef& def);
  /// The function with the greatest sinceVersion <= schemaVersion, or nullptr.
  const InferFnDef* find(std::string_view domain, std::string_view opType, int schemaVersion) const;
  std::span<const InferFnDef> all() const { return defs_; }

 private:
  std::vector<InferFnDef> defs_;
};

/// Registers every inference function (idempotent, thread-safe).
void registerShapeInference();

// One per family file in lib/ops/infer_*.cpp.
void registerInferElementwise(InferRegistry& r);
void registerInferTensor(InferRegistry& r);
void registerInferNn(InferRegistry& r);
void registerInferControlFlow(InferRegistry& r);
void registerInferQuantize(InferRegistry& r);
void registerInferSequence(InferRegistry& r);
void registerInferAttentionRnn(InferRegistry& r);
void registerInferStringsRandomSignal(InferRegistry& r);
void registerInferMl(InferRegistry& r);
void registerInferContrib(InferRegistry& r);  // com.microsoft ops of infer_contrib.cpp

}  // namespace onnxtool
