// ir.cpp: IR mutation and queries: use lists, node insertion/removal, topological order.
#include "lib/ir.h"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "lib/error.h"

namespace onnxtool {

// ---------------------------------------------------------------- Attribute

Attribute Attribute::ofFloat(std::string name, float v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Float;
  a.f = v;
  return a;
}
Attribute Attribute::ofInt(std::string name, int64_t v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Int;
  a.i = v;
  return a;
}
Attribute Attribute::ofString(std::string name, std::string v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::String;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::ofInts(std::string name, std::vector<int64_t> v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::ofFloats(std::string name, std::vector<float> v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Floats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::ofTensor(std::string name, Tensor v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Tensor;
  a.t = std::make_shared<Tensor>(std::move(v));
  return a;
}

// ---------------------------------------------------------------- Value

static void eraseUse(std::vector<Use>& uses, Use u) {
  auto it = std::find(uses.begin(), uses.end(), u);
  if (it != uses.end()) uses.erase(it);
}

void Value::replaceAllUsesWith(Value* v) {
  if (v == this) return;
  std::vector<Use> uses = uses_;
  for (const Use& u : uses) u.node->setInput(static_cast<size_t>(u.index), v);
  // Graph outputs that name this value now name v.
  if (outputCount_ > 0 && graph_) {
    for (size_t i = 0; i < graph_->outputs_.size(); ++i)
      if (graph_->outputs_[i].value == this) graph_->setOutput(i, v);
  }
}

// ---------------------------------------------------------------- Node

void Node::setInput(size_t i, Value* v) {
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  if (inputs_[i] == v) return;
  if (inputs_[i]) eraseUse(inputs_[i]->uses_, {this, static_cast<int>(i)});
  inputs_[i] = v;
  if (v) v->uses_.push_back({this, static_cast<int>(i)});
}

void Node::addInput(Value* v) { setInput(inputs_.size(), v); }

void Node::truncateInputs(size_t n) {
  while (inputs_.size() > n) {
    setInput(inputs_.size() - 1, nullptr);
    inputs_.pop_back();
  }
}

const Attribute* Node::attr(std::string_view attrName) const {
  for (const Attribute& a : attributes)
    if (a.name == attrName) return &a;
  return nullptr;
}

Attribute* Node::attr(std::string_view attrName) {
  for (Attribute& a : attributes)
    if (a.name == attrName) return &a;
  return nullptr;
}

void Node::setAttr(Attribute a) {
  if (Attribute* existing = attr(a.name)) {
    *existing = std::move(a);
  } else {
    attributes.push_back(std::move(a));
  }
}

bool Node::removeAttr(std::string_view attrName) {
  auto it = std::find_if(attributes.begin(), attributes.end(), [&](const Attribute& a) { return a.name == attrName; });
  if (it == attributes.end()) return false;
  attributes.erase(it);
  return true;
}

int64_t Node::attrInt(std::string_view attrName, int64_t def) const {
  const Attribute* a = attr(attrName);
  return a && a->type == AttrType::Int ? a->i : def;
}

float Node::attrFloat(std::string_view attrName, float def) const {
  const Attribute* a = attr(attrName);
  return a && a->type == AttrType::Float ? a->f : def;
}

std::string Node::attrString(std::string_view attrName, std::string def) const {
  const Attribute* a = attr(attrName);
  return a && a->type == AttrType::String ? a->s : def;
}

std::vector<int64_t> Node::attrInts(std::string_view attrName, std::vector<int64_t> def) const {
  const Attribute* a = attr(attrName);
  return a && a->type == AttrType::Ints ? a->ints : def;
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const Attribute& a : attributes) {
    if (a.g) out.push_back(a.g.get());
    for (const auto& g : a.graphs)
      if (g) out.push_back(g.get());
  }
  return out;
}

bool Node::isDomain(std::string_view d) const { return canonicalDomain(domain) == canonicalDomain(d); }

std::string Node::displayName() const {
  if (!name.empty()) return name;
  if (!outputs_.empty() && outputs_[0]) return fmt::format("<unnamed, output '{}'>", outputs_[0]->name());
  return "<unnamed>";
}

// ---------------------------------------------------------------- Graph

Value* Graph::findLocal(std::string_view valueName) const {
  auto it = byName_.find(std::string(valueName));
  return it == byName_.end() ? nullptr : it->second;
}

Value* Graph::find(std::string_view valueName) const {
  for (const Graph* g = this; g; g = g->parent_)
    if (Value* v = g->findLocal(valueName)) return v;
  return nullptr;
}

Value* Graph::createValue(std::string valueName, bool allowDuplicate) {
  if (!valueName.empty() && byName_.count(valueName) && !allowDuplicate)
    fail(ErrorKind::Internal, "graph '{}': value '{}' already exists", name, valueName);
  auto v = std::make_unique<Value>();
  v->name_ = std::move(valueName);
  v->graph_ = this;
  Value* raw = v.get();
  if (!raw->name_.empty()) byName_.emplace(raw->name_, raw);  // keeps the first on duplicates
  values_.push_back(std::move(v));
  return raw;
}

std::string Graph::uniqueName(std::string_view base) const {
  std::string b(base.empty() ? "v" : base);
  if (!find(b)) return b;
  for (size_t i = 1;; ++i) {
    std::string candidate = fmt::format("{}_{}", b, i);
    if (!find(candidate)) return candidate;
  }
}

void Graph::renameValue(Value* v, std::string newName) {
  if (findLocal(newName)) fail(ErrorKind::Internal, "graph '{}': value '{}' already exists", name, newName);
  auto it = byName_.find(v->name_);
  if (it != byName_.end() && it->second == v) byName_.erase(it);
  v->name_ = std::move(newName);
  if (v->initializer_) v->initializer_->name = v->name_;
  if (v->sparseInitializer_) v->sparseInitializer_->values.name = v->name_;
  byName_.emplace(v->name_, v);
}

Node* Graph::addNode(std::string opType, const std::vector<Value*>& inputs,
                     const std::vector<std::string>& outputNames, std::string domain, Node* before) {
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  n->opType = std::move(opType);
  n->domain = std::move(domain);
  n->graph_ = this;
  auto pos = before ? before->self_ : nodes_.end();
  n->self_ = nodes_.insert(pos, std::move(node));
  for (Value* v : inputs) n->addInput(v);
  for (size_t i = 0; i < outputNames.size(); ++i) {
    if (outputNames[i].empty()) {
      n->outputs_.push_back(nullptr);
      continue;
    }
    Value* out = findLocal(outputNames[i]);
    if (out && !out->isDefined()) {
      // A value created earlier for a forward reference (e.g. by the loader): adopt it.
    } else {
      out = createValue(outputNames[i], out != nullptr);
    }
    out->producer_ = n;
    out->producerIndex_ = static_cast<int>(i);
    n->outputs_.push_back(out);
  }
  return n;
}

namespace {

/// Drops every input link of the nodes of `g` and its nested subgraphs, so that values of
/// enclosing graphs they read no longer list them as uses once `g` is destroyed.
void detachUses(Graph& g) {
  for (const auto& n : g.nodes()) {
    for (size_t i = 0; i < n->inputs().size(); ++i) n->setInput(i, nullptr);
    for (Graph* sg : n->subgraphs()) detachUses(*sg);
  }
}

}  // namespace

void Graph::removeNode(Node* n) {
  for (Value* out : n->outputs_) {
    if (!out) continue;
    if (out->hasUses() || out->isGraphOutput())
      fail(ErrorKind::Internal, "cannot remove node '{}': output '{}' is still used", n->displayName(), out->name());
  }
  for (size_t i = 0; i < n->inputs_.size(); ++i) n->setInput(i, nullptr);
  // A removed If/Loop/Scan takes its bodies along: their reads of outer values go too. (A pass
  // that moves a body to another node moves the attribute, as fold-if does.)
  for (Attribute& a : n->attributes) {
    if (a.g) detachUses(*a.g);
    for (auto& sg : a.graphs)
      if (sg) detachUses(*sg);
  }
  for (Value* out : n->outputs_) {
    if (!out) continue;
    out->producer_ = nullptr;
    // value_info entries must not outlive the value they describe
    valueInfos_.erase(std::remove_if(valueInfos_.begin(), valueInfos_.end(),
                                     [&](const ValueInfoEntry& e) { return e.value == out; }),
                      valueInfos_.end());
    auto it = byName_.find(out->name_);
    if (it != byName_.end() && it->second == out) byName_.erase(it);
    auto vit = std::find_if(values_.begin(), values_.end(), [&](const auto& p) { return p.get() == out; });
    if (vit != values_.end()) values_.erase(vit);
  }
  nodes_.erase(n->self_);
}

void Graph::moveNode(Node* n, Node* before) {
  auto dest = before ? before->self_ : nodes_.end();
  nodes_.splice(dest, nodes_, n->self_);
}

void Graph::addInput(Value* v) {
  v->isInput_ = true;
  inputs_.push_back({v, {}, {}, std::nullopt, true, {}});
}

void Graph::removeInput(Value* v) {
  inputs_.erase(std::remove_if(inputs_.begin(), inputs_.end(), [&](const ValueInfoEntry& e) { return e.value == v; }),
                inputs_.end());
  v->isInput_ = false;
}

void Graph::addOutput(Value* v) {
  if (v) v->outputCount_++;
  outputs_.push_back({v, {}, {}, std::nullopt, true, {}});
}

void Graph::setOutput(size_t i, Value* v) {
  Value* old = outputs_[i].value;
  if (old == v) return;
  if (old) old->outputCount_--;
  if (v) v->outputCount_++;
  outputs_[i].value = v;
}

void Graph::removeOutput(size_t i) {
  if (i >= outputs_.size()) fail(ErrorKind::Internal, "graph '{}': no output {}", name, i);
  if (Value* v = outputs_[i].value) v->outputCount_--;
  outputs_.erase(outputs_.begin() + static_cast<std::ptrdiff_t>(i));
}

void Graph::removeNodeOutput(Node* n, size_t i) {
  if (i >= n->outputs_.size()) fail(ErrorKind::Internal, "node '{}': no output {}", n->displayName(), i);
  Value* out = n->outputs_[i];
  if (out && (out->hasUses() || out->isGraphOutput()))
    fail(ErrorKind::Internal, "cannot remove output '{}' of node '{}': it is still used", out->name(), n->displayName());
  n->outputs_.erase(n->outputs_.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t k = i; k < n->outputs_.size(); ++k)
    if (n->outputs_[k]) n->outputs_[k]->producerIndex_ = static_cast<int>(k);
  if (!out) return;
  out->producer_ = nullptr;
  valueInfos_.erase(std::remove_if(valueInfos_.begin(), valueInfos_.end(), [&](const ValueInfoEntry& e) { return e.value == out; }),
                    valueInfos_.end());
  auto it = byName_.find(out->name_);
  if (it != byName_.end() && it->second == out) byName_.erase(it);
  auto vit = std::find_if(values_.begin(), values_.end(), [&](const auto& p) { return p.get() == out; });
  if (vit != values_.end()) values_.erase(vit);
}

Value* Graph::addInitializer(Tensor t, bool allowDuplicate) {
  Value* v = findLocal(t.name);
  if (!v || v->initializer_ || v->sparseInitializer_ || v->producer_) {
    v = createValue(t.name, allowDuplicate || v != nullptr);
  }
  v->initializer_ = std::make_unique<Tensor>(std::move(t));
  initializers_.push_back(v);
  return v;
}

Value* Graph::addSparseInitializer(SparseTensor t, bool allowDuplicate) {
  Value* v = findLocal(t.values.name);
  if (!v || v->initializer_ || v->sparseInitializer_ || v->producer_) {
    v = createValue(t.values.name, allowDuplicate || v != nullptr);
  }
  v->sparseInitializer_ = std::make_unique<SparseTensor>(std::move(t));
  sparseInitializers_.push_back(v);
  return v;
}

void Graph::removeInitializer(Value* v) {
  if (v->hasUses() || v->isGraphOutput())
    fail(ErrorKind::Internal, "cannot remove initializer '{}': still used", v->name());
  initializers_.erase(std::remove(initializers_.begin(), initializers_.end(), v), initializers_.end());
  sparseInitializers_.erase(std::remove(sparseInitializers_.begin(), sparseInitializers_.end(), v),
                            sparseInitializers_.end());
  inputs_.erase(std::remove_if(inputs_.begin(), inputs_.end(), [&](const ValueInfoEntry& e) { return e.value == v; }),
                inputs_.end());
  valueInfos_.erase(
      std::remove_if(valueInfos_.begin(), valueInfos_.end(), [&](const ValueInfoEntry& e) { return e.value == v; }),
      valueInfos_.end());
  auto it = byName_.find(v->name_);
  if (it != byName_.end() && it->second == v) byName_.erase(it);
  values_.erase(std::find_if(values_.begin(), values_.end(), [&](const auto& p) { return p.get() == v; }));
}

size_t Graph::totalNodeCount() const {
  size_t n = nodes_.size();
  for (const auto& node : nodes_)
    for (Graph* g : node->subgraphs()) n += g->totalNodeCount();
  return n;
}

std::string Graph::verifyLinks() const {
  for (const auto& np : nodes_) {
    const Node* n = np.get();
    for (size_t i = 0; i < n->inputs_.size(); ++i) {
      Value* v = n->inputs_[i];
      if (!v) continue;
      if (std::find(v->uses_.begin(), v->uses_.end(), Use{const_cast<Node*>(n), static_cast<int>(i)}) == v->uses_.end())
        return fmt::format("node '{}': input {} ('{}') lacks its use record", n->displayName(), i, v->name());
    }
    for (size_t i = 0; i < n->outputs_.size(); ++i) {
      Value* v = n->outputs_[i];
      if (v && (v->producer_ != n || v->producerIndex_ != static_cast<int>(i)))
        return fmt::format("node '{}': output '{}' has a wrong producer link", n->displayName(), v->name());
    }
    for (Graph* g : n->subgraphs()) {
      std::string e = g->verifyLinks();
      if (!e.empty()) return e;
    }
  }
  for (const auto& v : values_) {
    for (const Use& u : v->uses_) {
      if (u.node->input(static_cast<size_t>(u.index)) != v.get())
        return fmt::format("value '{}': stale use by node '{}'", v->name(), u.node->displayName());
    }
  }
  return {};
}

// Values of graph `g` (or its ancestors) that node n's subgraphs read: they order n after their producers.
static void collectOuterReads(const Graph& sub, std::vector<Value*>& out) {
  for (const auto& np : sub.nodes()) {
    for (Value* v : np->inputs())
      if (v && v->graph() != &sub) out.push_back(v);
    for (Graph* g : np->subgraphs()) collectOuterReads(*g, out);
  }
}

std::optional<std::vector<Node*>> Graph::topologicalOrder() const {
  // Nodes by file position; each node's producers as positions (deduplicated), `count` for a
  // producer that is not among this graph's nodes (the node then never becomes ready). Shape
  // inference orders every graph on every run: no hashing per edge, and a graph already in
  // order (the common case) is returned as it is.
  const uint32_t count = static_cast<uint32_t>(nodes_.size());
  std::vector<Node*> byPosition;
  byPosition.reserve(count);
  std::unordered_map<const Node*, uint32_t> position;
  position.reserve(count);
  for (const auto& np : nodes_) {
    position.emplace(np.get(), static_cast<uint32_t>(byPosition.size()));
    byPosition.push_back(np.get());
  }
  std::vector<uint32_t> depStart(count + 1), deps;
  deps.reserve(count * 2);
  std::vector<Value*> reads;
  bool inOrder = true;
  for (uint32_t i = 0; i < count; ++i) {
    Node* n = byPosition[i];
    depStart[i] = static_cast<uint32_t>(deps.size());
    reads.assign(n->inputs_.begin(), n->inputs_.end());
    for (Graph* g : n->subgraphs()) collectOuterReads(*g, reads);
    for (Value* v : reads) {
      if (!v || !v->producer_) continue;
      uint32_t d;
      if (v->producer_ == n) {
        d = i;  // self loop
      } else if (v->graph_ == this) {
        auto it = position.find(v->producer_);
        d = it == position.end() ? count : it->second;
      } else {
        continue;
      }
      if (std::find(deps.begin() + depStart[i], deps.end(), d) == deps.end()) deps.push_back(d);
      inOrder &= d < i;
    }
  }
  depStart[count] = static_cast<uint32_t>(deps.size());
  if (inOrder) return byPosition;
  // Kahn's algorithm; among ready nodes the first in file order goes first.
  std::vector<uint32_t> pending(count), consumerStart(count + 3, 0), consumers(deps.size());
  for (uint32_t i = 0; i < count; ++i) {
    pending[i] = depStart[i + 1] - depStart[i];
    for (uint32_t k = depStart[i]; k < depStart[i + 1]; ++k) ++consumerStart[deps[k] + 2];
  }
  for (uint32_t d = 0; d <= count + 1; ++d) consumerStart[d + 1] += consumerStart[d];
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t k = depStart[i]; k < depStart[i + 1]; ++k) consumers[consumerStart[deps[k] + 1]++] = i;
  std::vector<uint32_t> ready;
  for (uint32_t i = 0; i < count; ++i)
    if (!pending[i]) ready.push_back(i);
  std::vector<Node*> order;
  order.reserve(count);
  const auto later = std::greater<uint32_t>();
  std::make_heap(ready.begin(), ready.end(), later);
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), later);
    const uint32_t i = ready.back();
    ready.pop_back();
    order.push_back(byPosition[i]);
    for (uint32_t k = consumerStart[i]; k < consumerStart[i + 1]; ++k)
      if (--pending[consumers[k]] == 0) {
        ready.push_back(consumers[k]);
        std::push_heap(ready.begin(), ready.end(), later);
      }
  }
  if (order.size() != count) return std::nullopt;
  return order;
}

bool Graph::sortTopologically() {
  auto order = topologicalOrder();
  if (!order) return false;
  for (Node* n : *order) nodes_.splice(nodes_.end(), nodes_, n->self_);
  return true;
}

// ---------------------------------------------------------------- Model

Model::Model() = default;
Model::~Model() = default;

std::optional<int64_t> Model::opsetVersion(std::string_view d) const {
  for (const OpsetImport& o : opsetImports)
    if (canonicalDomain(o.domain) == canonicalDomain(d)) return o.version;
  return std::nullopt;
}

const Function* Model::findFunction(std::string_view d, std::string_view fname, std::string_view overload) const {
  for (const auto& f : functions)
    if (f->domain == d && f->name == fname && f->overload == overload) return f.get();
  return nullptr;
}

}  // namespace onnxtool
