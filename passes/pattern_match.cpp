// pattern_match.cpp: matchers shared by the pattern fusions.
#include "passes/pattern_match.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "passes/pass_util.h"

namespace onnxtool {

std::optional<double> scalarOf(const Value* v) {
  auto d = constantAsDoubles(v);
  if (!d || d->size() != 1) return std::nullopt;
  return (*d)[0];
}

bool isNearScalar(const Value* v, double x) {
  auto s = scalarOf(v);
  if (!s) return false;
  return std::fabs(*s - x) <= std::max(1e-6 * std::fabs(x), 1e-12);
}

Node* soleUser(const Value* v) {
  if (!hasSingleUse(v)) return nullptr;
  return v->uses().front().node;
}

Value* otherOperand(const Node* n, const Value* v) {
  if (!n || n->inputs().size() != 2) return nullptr;
  if (n->input(0) == v) return n->input(1);
  if (n->input(1) == v) return n->input(0);
  return nullptr;
}

Value* operandBesideScalar(const Node* n, double c) {
  if (!n || n->inputs().size() != 2 || !n->input(0) || !n->input(1)) return nullptr;
  if (isNearScalar(n->input(1), c)) return n->input(0);
  if (isNearScalar(n->input(0), c)) return n->input(1);
  return nullptr;
}

std::optional<std::vector<int64_t>> reduceAxesKeepDims(const Node& n, int64_t opset) {
  if (n.attrInt("keepdims", 1) != 1) return std::nullopt;
  int64_t axesAsInput = n.opType == "ReduceSum" ? 13 : 18;
  if (opset < axesAsInput) {
    if (!n.attr("axes")) return std::nullopt;
    return n.attrInts("axes");
  }
  if (n.inputs().size() > 2) return std::nullopt;
  auto d = constantAsDoubles(n.input(1));
  if (!d || d->empty()) return std::nullopt;
  std::vector<int64_t> axes;
  for (double a : *d) axes.push_back(static_cast<int64_t>(a));
  return axes;
}

int trailingAxesCount(std::vector<int64_t> axes, int64_t rank) {
  if (axes.empty()) return 0;
  for (int64_t& a : axes) {
    if (a >= 0) {
      if (rank < 0 || a >= rank) return 0;
      a -= rank;
    }
    if (rank >= 0 && a < -rank) return 0;
  }
  std::sort(axes.begin(), axes.end());
  int n = static_cast<int>(axes.size());
  for (int i = 0; i < n; ++i)
    if (axes[static_cast<size_t>(i)] != i - n) return 0;  // must be -n, ..., -1
  return n;
}

bool clipBounds(const Node& clip, int64_t opset, double& lo, double& hi) {
  lo = -std::numeric_limits<double>::infinity();
  hi = std::numeric_limits<double>::infinity();
  if (opset < 11) {
    if (opset < 6) return false;
    lo = clip.attrFloat("min", static_cast<float>(lo));
    hi = clip.attrFloat("max", static_cast<float>(hi));
    return true;
  }
  for (size_t i = 1; i < 3; ++i) {
    if (!clip.input(i)) continue;
    auto s = scalarOf(clip.input(i));
    if (!s) return false;
    (i == 1 ? lo : hi) = *s;
  }
  return true;
}

Value* matchRelu6OfXPlus3(const Node& n, int64_t opset) {
  double lo, hi;
  if (n.opType != "Clip" || !n.isDomain("") || !clipBounds(n, opset, lo, hi) || lo != 0 || hi != 6) return nullptr;
  Value* a = n.input(0);
  Node* add = a ? a->producer() : nullptr;
  if (!add || add->opType != "Add" || !add->isDomain("") || !hasSingleUse(a)) return nullptr;
  return operandBesideScalar(add, 3.0);
}

namespace {

bool isDefaultOp(const Node* n, const char* op) { return n && n->opType == op && n->isDomain(""); }

/// Whether `n` divides `v` by 6 (Div(v, 6) or Mul(v, 1/6)).
bool isDivBySix(const Node* n, const Value* v) {
  if (isDefaultOp(n, "Div")) return n->input(0) == v && isNearScalar(n->input(1), 6.0);
  return isDefaultOp(n, "Mul") && operandBesideScalar(n, 1.0 / 6.0) == v;
}

}  // namespace

Value* matchHardSwish(const Node& n, int64_t opset, std::vector<Node*>& pattern) {
  if (isDefaultOp(&n, "HardSigmoid")) {
    if (std::fabs(n.attrFloat("alpha", 0.2f) - 1.0 / 6.0) > 1e-6 || std::fabs(n.attrFloat("beta", 0.5f) - 0.5) > 1e-6)
      return nullptr;
    Value* x = n.input(0);
    Node* mul = soleUser(n.output(0));
    if (!isDefaultOp(mul, "Mul") || otherOperand(mul, n.output(0)) != x) return nullptr;
    pattern = {const_cast<Node*>(&n), mul};
    return x;
  }
  Value* x = matchRelu6OfXPlus3(n, opset);
  if (!x) return nullptr;
  Value* r = n.output(0);
  Node* u = soleUser(r);
  if (!u) return nullptr;
  Node* add = n.input(0)->producer();
  if (isDefaultOp(u, "Mul") && otherOperand(u, r) == x) {  // (x * r) / 6
    Node* div = soleUser(u->output(0));
    if (!isDivBySix(div, u->output(0))) return nullptr;
    pattern = {add, const_cast<Node*>(&n), u, div};
    return x;
  }
  if (isDivBySix(u, r)) {  // x * (r / 6)
    Node* mul = soleUser(u->output(0));
    if (!isDefaultOp(mul, "Mul") || otherOperand(mul, u->output(0)) != x) return nullptr;
    pattern = {add, const_cast<Node*>(&n), u, mul};
    return x;
  }
  return nullptr;
}

bool sameDim(const Dim& a, const Dim& b) {
  if (a.isValue() && b.isValue()) return a.value == b.value;
  // Names shape inference invented (unk__N) prove nothing: a saved model's value_info may reuse one
  // for another dim (as in eliminate-identity).
  if (a.isParam() && b.isParam()) return a.param == b.param && a.param.rfind("unk__", 0) != 0;
  return false;
}

int64_t rankOf(const Value* v) {
  if (!v || !v->type().isTensor() || !v->type().shape.hasRank) return -1;
  return static_cast<int64_t>(v->type().shape.rank());
}

bool isFloatTensor(const Value* v) {
  if (!v || !v->type().isTensor()) return false;
  DType t = v->type().dtype();
  return t == DType::Float || t == DType::Float16 || t == DType::Double || t == DType::BFloat16;
}

bool keepsShapeOf(const Value* out, const Value* x) {
  int64_t r = rankOf(x);
  if (r < 0 || rankOf(out) != r || out->type().elemType != x->type().elemType) return false;
  for (size_t i = 0; i < static_cast<size_t>(r); ++i) {
    const Dim& a = out->type().shape.dims[i];
    const Dim& b = x->type().shape.dims[i];
    if (a.isValue() && b.isValue() && a.value != b.value) return false;
  }
  return true;
}

std::string fusedNodeName(const Graph& g, const Node& first, const std::string& op) {
  std::string base;
  size_t slash = first.name.rfind('/');
  if (first.name.empty())
    base = op;
  else if (slash != std::string::npos && slash + 1 < first.name.size())
    base = first.name.substr(0, slash + 1) + op;
  else
    base = first.name + "/" + op;
  std::set<std::string> taken;
  for (const auto& n : g.nodes()) taken.insert(n->name);
  std::string name = base;
  for (int i = 1; taken.count(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

Node* replaceWithNode(Graph& g, Node& first, Node& last, const std::string& op, const std::vector<Value*>& inputs) {
  Value* old = last.output(0);
  Node* n = g.addNode(op, inputs, {g.uniqueName(old->name() + "_fused")}, "", &last);
  n->name = fusedNodeName(g, first, op);
  Value* out = n->output(0);
  out->setType(old->type());
  bool wasOutput = old->isGraphOutput();
  std::string name = old->name();
  if (!replaceValue(old, out)) {
    g.removeNode(n);
    return nullptr;
  }
  if (!wasOutput) {  // the result keeps the replaced value's name, so readers still read "n5"
    g.renameValue(old, g.uniqueName(name + "__replaced"));
    g.renameValue(out, name);
  }
  return n;
}

bool allInGraph(const std::vector<Node*>& nodes, const Graph& g) {
  for (const Node* n : nodes)
    if (n->graph() != &g) return false;
  return true;
}

void removeDeadPattern(const std::vector<Node*>& nodes) {
  std::set<Node*> left(nodes.begin(), nodes.end());
  for (bool progress = true; progress && !left.empty();) {
    progress = false;
    for (Node* n : nodes) {
      if (!left.count(n)) continue;
      bool used = false;
      for (Value* o : n->outputs())
        if (o && (o->hasUses() || o->isGraphOutput())) used = true;
      if (used) continue;
      left.erase(n);
      n->graph()->removeNode(n);
      progress = true;
    }
  }
}

}  // namespace onnxtool
