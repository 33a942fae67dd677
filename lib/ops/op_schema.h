// op_schema.h: operator schemas (ai.onnx, ai.onnx.ml, ai.onnx.preview and
// ai.onnx.preview.training, every version; ONNX Runtime's contrib domains com.microsoft and
// com.microsoft.nchwc) and their lookup. An op is keyed by (domain, name): com.microsoft reuses
// ai.onnx names (Attention, Gelu, LayerNormalization's relatives), so a name alone is ambiguous.
//
// The schemas are data generated from the `onnx` and `onnxruntime` packages by
// scripts/gen_op_schemas.py into lib/ops/schemas.inc; tests/py/test_registry_vs_onnx.py checks them
// against onnx.defs and ONNX Runtime's get_all_operator_schema(). All
// objects returned here are static: pointers, spans and string_views stay valid for the
// program's lifetime, and every function is thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

#include "lib/attr_type.h"

namespace onnxtool {

/// How many actual arguments a formal input/output takes (onnx FormalParameterOption).
enum class ParamOption : uint8_t {
  Single = 0,    ///< exactly one
  Optional = 1,  ///< zero or one (an empty name in a node means absent)
  Variadic = 2,  ///< minArity or more; only the last formal parameter can be variadic
};

/// Bound of maxInputs/maxOutputs meaning "no limit" (onnx's value).
inline constexpr int kUnboundedArity = std::numeric_limits<int32_t>::max();

/// One formal input or output of an operator.
struct FormalParam {
  std::string_view name;
  std::string_view typeStr;  ///< a type parameter ("T") or a concrete type ("tensor(int64)")
  ParamOption option;
  bool isHomogeneous;  ///< variadic only: all actual arguments have the same type
  int minArity;        ///< variadic only: fewest actual arguments (onnx reports 1 otherwise)
};

/// One attribute an operator accepts. The default value, if any, is read through the typed
/// accessors; each gives nullopt when there is no default or the attribute has another type.
struct AttrSchema {
  std::string_view name;
  AttrType type;
  bool required;
  bool hasDefault;
  // Where the default lives in the generated pools (see schemas.inc); use the accessors.
  uint32_t defaultOffset_;
  uint32_t defaultCount_;

  std::optional<float> defaultFloat() const;                                ///< type Float
  std::optional<int64_t> defaultInt() const;                                ///< type Int
  std::optional<std::string_view> defaultString() const;                    ///< type String (bytes)
  std::optional<std::span<const float>> defaultFloats() const;              ///< type Floats
  std::optional<std::span<const int64_t>> defaultInts() const;              ///< type Ints
  std::optional<std::span<const std::string_view>> defaultStrings() const;  ///< type Strings
  /// Types other than the six above (Tensor, Graph, SparseTensor, TypeProto, ...): the default
  /// as the bytes of a serialized AttributeProto (name, type and value), as onnx encodes it.
  std::optional<std::string_view> defaultProto() const;
};

/// A type parameter of an operator and the types it may be bound to, in onnx's order.
struct TypeConstraint {
  std::string_view typeParamStr;                   ///< "T", "T1", ...
  std::span<const std::string_view> allowedTypes;  ///< "tensor(float)", "seq(tensor(int64))", ...
};

/// One version of one operator: in force from sinceVersion of its domain's opset until the
/// next version's sinceVersion.
struct OpSchema {
  std::string_view domain;  ///< "" (ai.onnx), "ai.onnx.ml", "ai.onnx.preview[.training]", "com.microsoft[.nchwc]"
  std::string_view name;
  int sinceVersion;
  bool deprecated;  ///< a model using this version is invalid (onnx removes the op here)
  std::span<const FormalParam> inputs;
  std::span<const FormalParam> outputs;
  std::span<const AttrSchema> attributes;  ///< sorted by name
  std::span<const TypeConstraint> typeConstraints;
  int minInputs;
  int maxInputs;  ///< kUnboundedArity when variadic
  int minOutputs;
  int maxOutputs;                    ///< kUnboundedArity when variadic
  bool hasFunction;                  ///< onnx defines a function body for this version
  bool hasContextDependentFunction;  ///< onnx builds a function body per node
  /// An ai.onnx op version that ONNX Runtime defines and the ONNX spec does not
  /// (SimplifiedLayerNormalization, LayerNormalization before 17): ORT's tools write it, ORT runs
  /// it, onnx.checker rejects it. Inference and kernels treat it like any op; `check` warns.
  bool ortExtension;

  /// The attribute called `name`, or nullptr if this version has none.
  const AttrSchema* findAttr(std::string_view name) const;
  /// The type constraint for type parameter `param` ("T"), or nullptr.
  const TypeConstraint* findConstraint(std::string_view param) const;
};

/// The schema of `opType` in force at `opsetVersion` of `domain`: the version with the greatest
/// sinceVersion <= opsetVersion. "ai.onnx" is the same domain as "". nullptr if the domain or op
/// is unknown or opsetVersion precedes the op's first version. Deprecated versions are returned
/// as they are (check `deprecated`). O(log n).
const OpSchema* findSchema(std::string_view domain, std::string_view opType, int64_t opsetVersion);

/// Every version of `opType` in `domain`, oldest first; empty if unknown.
std::span<const OpSchema> schemaVersions(std::string_view domain, std::string_view opType);

/// The whole registry, sorted by (domain, name, sinceVersion).
std::span<const OpSchema> allSchemas();

/// Whether `domain` has an op `opType` at any version.
bool opExists(std::string_view domain, std::string_view opType);

/// Whether the registry holds `domain` ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview",
/// "ai.onnx.preview.training", "com.microsoft" or "com.microsoft.nchwc"; onnx's
/// "ai.onnx.training" defines no ops and is not held).
bool isKnownDomain(std::string_view domain);

/// The newest opset version of `domain` the registry knows (onnx's, which may exceed the
/// greatest sinceVersion in the domain); 0 for an unknown domain.
int64_t maxKnownOpset(std::string_view domain);

/// The version of the `onnx` package the schemas were generated from ("1.23.2").
std::string_view schemaSourceVersion();

/// The version of the `onnxruntime` package the com.microsoft* schemas were generated from.
std::string_view ortSchemaSourceVersion();

/// Whether `domain` is one of ONNX Runtime's contrib domains (com.microsoft, com.microsoft.nchwc),
/// whose schemas come from ONNX Runtime rather than the ONNX spec.
bool isOrtContribDomain(std::string_view domain);

}  // namespace onnxtool
