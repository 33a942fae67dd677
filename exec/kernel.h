// kernel.h: the kernel interface every executor shares, and the registry kernels plug into.
//
// A kernel is registered against (executor, domain, op type, since-version, name). Lookup for a
// node takes the op's schema version in force at the model's opset and picks the kernel with the
// greatest since-version not above it, so a kernel registered for version 13 serves 13..(next-1).
// Names are coordinates (`ref.add`, `cpu.conv.f32.im2col`); `run --profile` prints them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool {

class Model;

/// Runs a subgraph (If/Loop/Scan bodies) with the given inputs; outer-scope values are visible.
using SubgraphRunner = std::function<std::vector<RtValue>(const Graph& body, const std::vector<RtValue>& inputs)>;

/// Attribute values of an enclosing model-local function call, for `ref_attr_name` resolution.
struct AttrScope {
  const std::vector<Attribute>* callerAttrs = nullptr;    ///< the calling node's attributes
  const std::vector<Attribute>* defaults = nullptr;       ///< the function's attribute_proto
  const AttrScope* parent = nullptr;
  /// The attribute `name` resolves to in this scope, or nullptr.
  const Attribute* find(std::string_view name) const;
};

/// What a kernel sees while it runs one node. Kernels read attributes through attr()/attrInt()
/// and friends (never node().attr()), so references to a calling function's attributes resolve.
class KernelContext {
 public:
  KernelContext(const Node& node, int64_t opsetVersion, std::vector<const RtValue*> inputs, size_t numOutputs,
                SubgraphRunner runSubgraph, std::mt19937_64* rng, const Model* model, const AttrScope* scope)
      : node_(node), opset_(opsetVersion), inputs_(std::move(inputs)), outputs_(numOutputs),
        runSubgraph_(std::move(runSubgraph)), rng_(rng), model_(model), scope_(scope) {}

  /// The attribute `name` of the node (ref_attr_name resolved), or nullptr when absent.
  const Attribute* attr(std::string_view name) const;
  int64_t attrInt(std::string_view name, int64_t def) const;
  float attrFloat(std::string_view name, float def) const;
  std::string attrString(std::string_view name, const std::string& def = {}) const;
  std::vector<int64_t> attrInts(std::string_view name, std::vector<int64_t> def = {}) const;
  std::vector<float> attrFloats(std::string_view name, std::vector<float> def = {}) const;
  std::vector<std::string> attrStrings(std::string_view name, std::vector<std::string> def = {}) const;
  bool hasAttr(std::string_view name) const { return attr(name) != nullptr; }
  const AttrScope* attrScope() const { return scope_; }

  const Node& node() const { return node_; }
  /// The opset version of the node's domain imported by the model (not the schema version).
  int64_t opsetVersion() const { return opset_; }
  size_t numInputs() const { return inputs_.size(); }
  size_t numOutputs() const { return outputs_.size(); }
  /// Input i, or nullptr when absent (omitted optional input or i >= numInputs()).
  const RtValue* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  bool hasInput(size_t i) const { return input(i) && !input(i)->isEmpty(); }
  /// Input i as a tensor; throws Error(InvalidInput) naming the node when absent or not a tensor.
  const RtTensor& tensor(size_t i) const;
  /// Whether output i is wanted (present in the node and named).
  bool wantsOutput(size_t i) const { return i < node_.outputs().size() && node_.outputs()[i] != nullptr; }
  void setOutput(size_t i, RtValue v) { outputs_.at(i) = std::move(v); }
  /// A host tensor holding `t`'s data (an IR Tensor's too: its bytes move, never copy).
  void setOutput(size_t i, TensorData t) { outputs_.at(i) = RtValue::ofTensor(RtTensor(std::move(t))); }
  void setOutput(size_t i, RtTensor t) { outputs_.at(i) = RtValue::ofTensor(std::move(t)); }
  std::vector<RtValue>& outputs() { return outputs_; }

  std::vector<RtValue> runSubgraph(const Graph& body, const std::vector<RtValue>& inputs) const {
    return runSubgraph_(body, inputs);
  }
  /// The random generator for random ops (seeded by `--seed` or the op's own seed attribute).
  std::mt19937_64& rng() { return *rng_; }
  const Model* model() const { return model_; }

  [[noreturn]] void fail(std::string_view what) const;

 private:
  const Node& node_;
  int64_t opset_;
  std::vector<const RtValue*> inputs_;
  std::vector<RtValue> outputs_;
  SubgraphRunner runSubgraph_;
  std::mt19937_64* rng_;
  const Model* model_;
  const AttrScope* scope_;
};

using KernelFn = void (*)(KernelContext&);

struct KernelDef {
  std::string_view executor;  ///< "ref", "cpu", "cuda"
  std::string_view domain;    ///< "" for ai.onnx
  std::string_view opType;
  int sinceVersion;           ///< first schema version this kernel implements
  std::string_view name;      ///< e.g. "ref.add"
  KernelFn fn;
};

/// All registered kernels. Registration is explicit (registerRefKernels() lists every family),
/// never by static initialisers.
class KernelRegistry {
 public:
  static KernelRegistry& instance();
  void add(const KernelDef& def);
  /// The kernel for `node` at the model's opset of its domain, or nullptr.
  const KernelDef* find(std::string_view executor, std::string_view domain, std::string_view opType,
                        int64_t schemaVersion) const;
  std::span<const KernelDef> all() const { return kernels_; }

 private:
  std::vector<KernelDef> kernels_;
};

/// Registers every reference kernel (idempotent, thread-safe).
void registerRefKernels();

}  // namespace onnxtool
