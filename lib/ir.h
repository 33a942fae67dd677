// ir.h: the in-memory model: Model, Graph, Node, Value, Attribute, Function.
//
// Values are SSA edges owned by the graph that defines them (graph input, initializer, or node
// output). Nodes of a subgraph (If/Loop/Scan bodies) may use values of enclosing graphs; those
// uses are recorded on the outer value too, so replaceAllUsesWith reaches into subgraphs.
// Every object keeps `residual`: the serialized proto fields the IR does not model plus unknown
// fields, so load -> IR -> save is lossless.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lib/attr_type.h"
#include "lib/tensor.h"
#include "lib/type.h"

namespace onnxtool {

class Graph;
class Node;
class Value;

/// AttributeProto. Only the field matching `type` is meaningful (ref_attr_name aside).
struct Attribute {
  std::string name;
  AttrType type = AttrType::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<Tensor> t;
  std::shared_ptr<Graph> g;
  std::shared_ptr<SparseTensor> sparseTensor;
  std::shared_ptr<TypeInfo> tp;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<std::shared_ptr<Tensor>> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::vector<std::shared_ptr<SparseTensor>> sparseTensors;
  std::vector<TypeInfo> typeProtos;
  std::string refAttrName;  ///< set in function bodies: value comes from the caller's attribute
  std::string docString;
  std::string residual;

  static Attribute ofFloat(std::string name, float v);
  static Attribute ofInt(std::string name, int64_t v);
  static Attribute ofString(std::string name, std::string v);
  static Attribute ofInts(std::string name, std::vector<int64_t> v);
  static Attribute ofFloats(std::string name, std::vector<float> v);
  static Attribute ofTensor(std::string name, Tensor v);
};

/// A use of a value: node input `index` of `node`.
struct Use {
  Node* node;
  int index;
  bool operator==(const Use& o) const { return node == o.node && index == o.index; }
};

/// A named SSA value.
class Value {
 public:
  const std::string& name() const { return name_; }
  Graph* graph() const { return graph_; }
  /// Producing node and output index; nullptr for graph inputs, initializers and undefined names.
  Node* producer() const { return producer_; }
  int producerIndex() const { return producerIndex_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  /// The best known type (declared, value_info, or inferred). kind None when nothing is known.
  const TypeInfo& type() const { return type_; }
  void setType(TypeInfo t) { type_ = std::move(t); }
  /// The initializer holding this value's constant data, or nullptr.
  Tensor* initializer() const { return initializer_.get(); }
  SparseTensor* sparseInitializer() const { return sparseInitializer_.get(); }
  bool isGraphInput() const { return isInput_; }
  bool isGraphOutput() const { return outputCount_ > 0; }
  /// True when a node or initializer of its graph defines it, or it is a graph input.
  bool isDefined() const { return producer_ || initializer_ || sparseInitializer_ || isInput_; }
  /// Redirects every use (in this graph and nested subgraphs) and graph-output reference to `v`.
  void replaceAllUsesWith(Value* v);

 private:
  friend class Graph;
  friend class Node;
  std::string name_;
  Graph* graph_ = nullptr;
  Node* producer_ = nullptr;
  int producerIndex_ = -1;
  std::vector<Use> uses_;
  TypeInfo type_;
  std::unique_ptr<Tensor> initializer_;
  std::unique_ptr<SparseTensor> sparseInitializer_;
  bool isInput_ = false;
  int outputCount_ = 0;
};

class Node {
 public:
  std::string name;
  std::string opType;
  std::string domain;
  std::string overload;
  std::string docString;
  StringPairs metadata;
  std::vector<Attribute> attributes;
  std::string residual;

  Graph* graph() const { return graph_; }
  /// Inputs; nullptr marks an omitted optional input ("" in the proto).
  const std::vector<Value*>& inputs() const { return inputs_; }
  /// Outputs; nullptr marks an omitted optional output.
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  void setInput(size_t i, Value* v);
  void addInput(Value* v);
  /// Drops inputs from index n on.
  void truncateInputs(size_t n);

  const Attribute* attr(std::string_view attrName) const;
  Attribute* attr(std::string_view attrName);
  /// Adds or replaces an attribute.
  void setAttr(Attribute a);
  bool removeAttr(std::string_view attrName);
  int64_t attrInt(std::string_view attrName, int64_t def) const;
  float attrFloat(std::string_view attrName, float def) const;
  std::string attrString(std::string_view attrName, std::string def) const;
  std::vector<int64_t> attrInts(std::string_view attrName, std::vector<int64_t> def = {}) const;
  /// Subgraphs held by attributes (g and graphs), in attribute order.
  std::vector<Graph*> subgraphs() const;
  /// "ai.onnx" is spelled "" here, as in the proto.
  bool isDomain(std::string_view d) const;
  /// A name for messages: the node name, or "<op_type> #<index>" style when unnamed.
  std::string displayName() const;

 private:
  friend class Graph;
  Graph* graph_ = nullptr;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::list<std::unique_ptr<Node>>::iterator self_;
};

/// One entry of GraphProto.input/output/value_info: the value and the ValueInfoProto extras.
struct ValueInfoEntry {
  Value* value = nullptr;
  std::string docString;
  StringPairs metadata;
  /// Set when this entry's declared type differs from value->type() as loaded (kept for saving).
  std::optional<TypeInfo> typeOverride;
  bool hasType = true;
  std::string residual;
  /// The type to write for this entry.
  const TypeInfo& type() const { return typeOverride ? *typeOverride : value->type(); }
};

class Graph {
 public:
  explicit Graph(Graph* parent = nullptr, Node* parentNode = nullptr)
      : parent_(parent), parentNode_(parentNode) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name;
  std::string docString;
  StringPairs metadata;
  std::string residual;  ///< incl. quantization_annotation

  Graph* parent() const { return parent_; }
  Node* parentNode() const { return parentNode_; }
  void setParent(Graph* parent, Node* parentNode) { parent_ = parent; parentNode_ = parentNode; }

  // --- nodes, in file (and, for a valid model, topological) order
  const std::list<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t numNodes() const { return nodes_.size(); }
  /// Appends a node (or inserts it before `before`). Output values are created in this graph
  /// with the given names ("" leaves an output omitted). Names must be new in this graph.
  Node* addNode(std::string opType, const std::vector<Value*>& inputs,
                const std::vector<std::string>& outputNames, std::string domain = "",
                Node* before = nullptr);
  /// Removes a node; its outputs must have no uses and must not be graph outputs.
  void removeNode(Node* n);
  /// Moves node n to just before `before` (nullptr: the end).
  void moveNode(Node* n, Node* before);

  // --- values
  /// The value named `name` defined in this graph, or nullptr (no outer-scope lookup).
  Value* findLocal(std::string_view valueName) const;
  /// Looks up this graph then the enclosing graphs.
  Value* find(std::string_view valueName) const;
  /// Creates a value in this graph. The name must be new in this graph (unless allowDuplicate,
  /// used by the loader to keep invalid models representable for `check`).
  Value* createValue(std::string valueName, bool allowDuplicate = false);
  /// A name not used in this graph or its ancestors, based on `base`.
  std::string uniqueName(std::string_view base) const;
  /// Renames a value (which must be new in this graph).
  void renameValue(Value* v, std::string newName);
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  // --- inputs, outputs, value_info, initializers (all in file order)
  std::vector<ValueInfoEntry>& inputs() { return inputs_; }
  const std::vector<ValueInfoEntry>& inputs() const { return inputs_; }
  std::vector<ValueInfoEntry>& outputs() { return outputs_; }
  const std::vector<ValueInfoEntry>& outputs() const { return outputs_; }
  std::vector<ValueInfoEntry>& valueInfos() { return valueInfos_; }
  const std::vector<ValueInfoEntry>& valueInfos() const { return valueInfos_; }
  void addInput(Value* v);
  /// Drops v from the graph inputs (v itself stays, e.g. as an initializer).
  void removeInput(Value* v);
  void addOutput(Value* v);
  void setOutput(size_t i, Value* v);
  /// Drops graph output i (the value stays; later outputs move down by one).
  void removeOutput(size_t i);
  /// Drops output i of node n, whose value must have no uses and not be a graph output; later
  /// outputs move down by one (for If/Loop outputs nothing reads, with their bodies' outputs).
  void removeNodeOutput(Node* n, size_t i);
  /// Initializer values in file order (dense, then sparse kept separately).
  const std::vector<Value*>& initializers() const { return initializers_; }
  const std::vector<Value*>& sparseInitializers() const { return sparseInitializers_; }
  /// Makes `t` the constant data of a new value named t.name (or of existing undefined `v`).
  Value* addInitializer(Tensor t, bool allowDuplicate = false);
  Value* addSparseInitializer(SparseTensor t, bool allowDuplicate = false);
  /// Drops the initializer of v (v must have no uses, not be an output; input entry removed).
  void removeInitializer(Value* v);

  /// Nodes of this graph and, recursively, of all subgraphs.
  size_t totalNodeCount() const;
  /// Visits this graph and every nested subgraph, outer first.
  template <typename F>
  void forEachGraph(F&& f);
  /// Checks producer/use links against inputs/outputs of every node (for tests and --verify-each).
  /// Returns an empty string when consistent, else a description of the first inconsistency.
  std::string verifyLinks() const;
  /// Node order such that every node comes after the producers of its inputs (including
  /// producers feeding its subgraphs from this graph). nullopt if there is a cycle.
  std::optional<std::vector<Node*>> topologicalOrder() const;
  /// Reorders nodes_ topologically; returns false (and leaves the order) on a cycle.
  bool sortTopologically();

 private:
  friend class Value;
  friend class Node;
  Graph* parent_;
  Node* parentNode_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> byName_;
  std::vector<ValueInfoEntry> inputs_, outputs_, valueInfos_;
  std::vector<Value*> initializers_, sparseInitializers_;
};

struct OpsetImport {
  std::string domain;
  int64_t version = 0;
  std::string residual;
};

/// A model-local function (FunctionProto). Its body is a Graph whose inputs and outputs are the
/// formal parameters (untyped); attributes lists the attribute parameter names.
struct Function {
  std::string name;
  std::string domain;
  std::string overload;
  std::string docString;
  std::vector<std::string> attributeNames;
  std::vector<Attribute> attributeDefaults;  ///< attribute_proto
  std::vector<OpsetImport> opsetImports;
  StringPairs metadata;
  std::unique_ptr<Graph> body;
  std::string residual;
};

class Model {
 public:
  Model();
  ~Model();
  int64_t irVersion = 0;
  std::vector<OpsetImport> opsetImports;
  std::string producerName, producerVersion, domain, docString;
  int64_t modelVersion = 0;
  StringPairs metadata;
  std::unique_ptr<Graph> graph;
  std::vector<std::unique_ptr<Function>> functions;
  std::string residual;  ///< incl. training_info and configuration

  /// Problems the loader saw that the IR cannot represent (e.g. an attribute whose value field
  /// contradicts its type); `check` reports them. Each is a complete one-line message.
  std::vector<std::string> loadIssues;
  /// Path the model was loaded from ("-" for stdin), and its folder (for external data).
  std::string path;
  std::string baseDir;
  uint64_t fileSize = 0;

  /// Opset version imported for `domain` ("ai.onnx" == ""), or nullopt.
  std::optional<int64_t> opsetVersion(std::string_view domain) const;
  const Function* findFunction(std::string_view domain, std::string_view name,
                               std::string_view overload = "") const;
};

/// Normalises "ai.onnx" to "".
inline std::string_view canonicalDomain(std::string_view d) { return d == "ai.onnx" ? std::string_view() : d; }

template <typename F>
void Graph::forEachGraph(F&& f) {
  f(*this);
  for (auto& n : nodes_)
    for (Graph* g : n->subgraphs()) g->forEachGraph(f);
}

}  // namespace onnxtool
