// checker.cpp: the model checker. One pass over the model in file order, keeping the names in
// scope the way onnx/checker.cc's LexicalScopeContext does (a graph sees its inputs, initializers,
// the outputs of earlier nodes, and what its enclosing graphs saw at the node holding it), so that
// the findings and their order follow the model. Every finding is recorded; nothing stops early.
#include "lib/checker.h"

#include <algorithm>
#include <climits>
#include <exception>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "lib/ops/op_schema.h"
#include "lib/tensor_check.h"
#include "lib/shape_inference.h"

namespace onnxtool {

namespace {

using tensor_check::dimsStr;
using tensor_check::dtypeProblem;
using tensor_check::humanBytes;
using tensor_check::plural;

/// Domain spelled for messages: "" is "ai.onnx".
std::string domainName(std::string_view d) { return d.empty() || d == "ai.onnx" ? "ai.onnx" : std::string(d); }

/// `s` made safe for a one-line message: control characters (C0, DEL, C1) and bytes that are not
/// UTF-8 are escaped (\n, \x01, ...), as names in a hostile model may hold anything.
std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xc2 && c1 < 0xa0) ||  // C1 controls
          (c == 0xe0 && c1 < 0xa0) || (c == 0xf0 && c1 < 0x90) ||  // overlong forms
          (c == 0xed && c1 >= 0xa0) ||  // UTF-16 surrogates
          (c == 0xf4 && c1 >= 0x90))    // beyond U+10FFFF
        ok = false;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

/// "expected 2", "expected at least 1", "expected 2 to 3".
std::string arityExpectation(int lo, int hi) {
  if (lo == hi) return fmt::format("expected {}", lo);
  if (hi == kUnboundedArity) return fmt::format("expected at least {}", lo);
  return fmt::format("expected {} to {}", lo, hi);
}

// Ops onnx/checker.cc treats as experimental: it skips their schema check and warns.
bool isExperimentalOp(std::string_view opType) {
  static const std::set<std::string_view> kOps = {"ATen",           "Affine",         "ConstantFill",
                                                  "Crop",           "DynamicSlice",   "GRUUnit",
                                                  "GivenTensorFill", "ImageScaler",   "ParametricSoftplus",
                                                  "Scale",          "ScaledTanh"};
  return kOps.count(opType) > 0;
}

// Int attributes whose value is a TensorProto.DataType (Cast.to, RandomNormal.dtype, ...).
bool isDTypeAttribute(std::string_view name) {
  return name == "to" || name == "dtype" || name == "stash_type" || name == "output_dtype";
}

bool isValidMapKeyType(int32_t t) {
  switch (static_cast<DType>(t)) {
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64:
    case DType::String:
      return true;
    default:
      return false;
  }
}

/// Problems of a type (TypeProto); `strict` adds what onnx requires of main graph inputs and
/// outputs: a type, an element type, and a shape.
std::string typeProblem(const TypeInfo& t, bool strict) {
  switch (t.kind) {
    case TypeInfo::Kind::None:
      return strict ? "has no type, expected a type (required on main graph inputs and outputs)" : "";
    case TypeInfo::Kind::Tensor:
    case TypeInfo::Kind::SparseTensor: {
      const char* what = t.kind == TypeInfo::Kind::Tensor ? "tensor" : "sparse tensor";
      if (t.elemType == 0 && strict)
        return fmt::format("has {} elem_type UNDEFINED, expected a valid element type", what);
      if (t.elemType != 0 && !isValidDType(t.elemType))
        return fmt::format("has {} elem_type {} which is not a TensorProto.DataType, expected a value from 1 to {}",
                           what, t.elemType, kMaxDType);
      if (strict && !t.shape.hasRank)
        return fmt::format(
            "has a {} type without a shape, expected a shape (required on main graph inputs and outputs; dims may be "
            "symbolic)",
            what);
      for (const Dim& d : t.shape.dims)
        if (d.isValue() && d.value < 0)
          return fmt::format("has shape {} with a negative dimension, expected dims >= 0", t.shape.str());
      return "";
    }
    case TypeInfo::Kind::Sequence:
    case TypeInfo::Kind::Optional: {
      const char* what = t.kind == TypeInfo::Kind::Sequence ? "sequence" : "optional";
      if (!t.inner) return strict ? fmt::format("has a {} type without elem_type, expected an element type", what) : "";
      return typeProblem(*t.inner, false);  // onnx requires a shape only at the top level
    }
    case TypeInfo::Kind::Map:
      if (t.elemType != 0 && !isValidMapKeyType(t.elemType))
        return fmt::format("has map key type {}, expected an integer type or string", dtypeOnnxName(t.dtype()));
      if (strict && t.elemType == 0) return "has map key type UNDEFINED, expected an integer type or string";
      if (!t.inner) return strict ? "has a map type without value_type, expected a value type" : "";
      return typeProblem(*t.inner, false);
    case TypeInfo::Kind::Opaque:
      if (strict && t.opaqueName.empty()) return "has an opaque type without a name, expected a name";
      return "";
  }
  return "";
}

/// Names visible in one graph: its own so far, then the enclosing graph's at the holding node.
struct Scope {
  const Scope* parent = nullptr;
  std::unordered_set<std::string> names;
  bool hasHere(const std::string& n) const { return names.count(n) > 0; }
  bool hasOuter(const std::string& n) const { return parent && parent->has(n); }
  bool has(const std::string& n) const { return hasHere(n) || hasOuter(n); }
};

using OpsetMap = std::map<std::string, int64_t, std::less<>>;  // canonical domain -> version

/// Where a graph sits, for messages and for the rules that differ between graphs.
struct GraphCtx {
  std::string where;   ///< "graph 'main'", "subgraph 'then_branch' of node 'if1' (If)", "function 'd::f'"
  std::string suffix;  ///< appended to node locations: "", " in subgraph ...", " in function 'd::f'"
  const Scope* outer = nullptr;
  const OpsetMap* opsets = nullptr;
  bool isMain = false;
  const Function* function = nullptr;  ///< the function whose body this is (or encloses it)
};

std::string functionId(std::string_view domain, std::string_view name, std::string_view overload) {
  return overload.empty() ? fmt::format("{}::{}", domain, name) : fmt::format("{}::{}:{}", domain, name, overload);
}

class Checker {
 public:
  explicit Checker(const Model& m) : m_(m) {}

  std::vector<Diagnostic> run() {
    for (const auto& issue : m_.loadIssues) out_.push_back({Diagnostic::Severity::Error, printable(issue), {}, {}, "load"});
    indexFunctions();
    checkModelFields();
    if (m_.graph) {
      GraphCtx ctx;
      ctx.where = fmt::format("graph '{}'", m_.graph->name);
      ctx.opsets = &opsets_;
      ctx.isMain = true;
      checkGraph(*m_.graph, ctx);
    }
    checkFunctions();
    checkInference();
    return std::move(out_);
  }

 private:
  // ------------------------------------------------------------------ reporting

  void report(Diagnostic::Severity sev, std::string_view where, std::string_view what, const Node* n,
              std::string_view code = "spec") {
    Diagnostic d;
    d.severity = sev;
    d.code = code;
    d.message = printable(fmt::format("{}: {}: {}", m_.path, where, what));
    if (n) {
      d.nodeName = printable(n->displayName());
      d.opType = printable(n->opType);
    }
    out_.push_back(std::move(d));
  }
  void error(std::string_view where, std::string_view what, const Node* n = nullptr, std::string_view code = "spec") {
    report(Diagnostic::Severity::Error, where, what, n, code);
  }
  void warning(std::string_view where, std::string_view what, const Node* n, std::string_view code) {
    report(Diagnostic::Severity::Warning, where, what, n, code);
  }

  static std::string nodeWhere(const Node& n, const GraphCtx& ctx) {
    return fmt::format("node '{}' ({}){}", n.displayName(), n.opType, ctx.suffix);
  }

  // ------------------------------------------------------------------ model

  void indexFunctions() {
    for (const auto& f : m_.functions) {
      std::string id = functionId(canonicalDomain(f->domain), f->name, f->overload);
      if (!functions_.emplace(id, f.get()).second) duplicateFunctions_.insert(f.get());
    }
  }

  const Function* findFunction(const Node& n) const {
    auto it = functions_.find(functionId(canonicalDomain(n.domain), n.opType, n.overload));
    return it == functions_.end() ? nullptr : it->second;
  }

  /// Builds the opset map of an opset_import list, reporting duplicates and bad versions.
  OpsetMap readOpsets(const std::vector<OpsetImport>& imports, std::string_view where) {
    OpsetMap map;
    for (const OpsetImport& o : imports) {
      std::string d(canonicalDomain(o.domain));
      auto [it, inserted] = map.emplace(d, o.version);
      if (!inserted && it->second == o.version) {
        // skl2onnx writes the default domain twice with one version: harmless, onnx accepts it.
        warning(where, fmt::format("opset_import lists domain '{}' twice with the same version {}, expected one entry",
                                   domainName(d), o.version),
                nullptr, "duplicate-opset-import");
      } else if (!inserted) {
        error(where,
              fmt::format(
                  "opset_import lists domain '{}' more than once (versions {} and {}), expected one entry per domain",
                  domainName(d), it->second, o.version));
        it->second = o.version;  // onnx keeps the last
      }
      int64_t maxKnown = maxKnownOpset(d);
      if (o.version < 0 || o.version > INT32_MAX) {
        error(where, fmt::format("opset_import version {} of domain '{}' is out of range, expected 1 to {}", o.version,
                                 domainName(d), maxKnown ? maxKnown : INT32_MAX));
      } else if (maxKnown && o.version < 1) {
        error(where, fmt::format("opset_import version {} of domain '{}' is invalid, expected 1 to {}", o.version,
                                 domainName(d), maxKnown));
      } else if (maxKnown && o.version > maxKnown) {
        error(where,
              fmt::format("opset_import version {} of domain '{}' is newer than this build knows, expected at most {}",
                          o.version, domainName(d), maxKnown));
      }
    }
    return map;
  }

  void checkModelFields() {
    if (m_.irVersion <= 0)
      error("model", fmt::format("ir_version is missing, expected a version from 1 to {}", kMaxKnownIrVersion));
    else if (m_.irVersion > kMaxKnownIrVersion)
      error("model", fmt::format("ir_version {} is newer than this checker knows, expected at most {}", m_.irVersion,
                                 kMaxKnownIrVersion));
    std::unordered_set<std::string> keys;
    for (const auto& [k, v] : m_.metadata)
      if (!keys.insert(k).second)
        error("model", fmt::format("metadata_props has key '{}' more than once, expected unique keys", k));
    opsets_ = readOpsets(m_.opsetImports, "model");
    if (m_.irVersion >= 3 || m_.irVersion <= 0) {
      if (m_.opsetImports.empty())
        error("model", "has no opset_import, expected at least the ai.onnx version (required from ir_version 3)");
    } else if (!m_.opsetImports.empty()) {
      error("model",
            fmt::format("has opset_import with ir_version {}, expected none before ir_version 3", m_.irVersion));
    } else {
      opsets_[""] = 1;  // IR 1 and 2 imply ai.onnx version 1
    }
    if (!m_.graph) error("model", "has no graph, expected a main graph");
    if (!m_.functions.empty() && m_.irVersion > 0 && m_.irVersion < 8)
      error("model",
            fmt::format("has {} with ir_version {}, expected ir_version 8 or newer for functions",
                        plural(m_.functions.size(), "model-local function", "model-local functions"), m_.irVersion));
  }

  // ------------------------------------------------------------------ graphs

  void checkValueInfo(const ValueInfoEntry& e, const GraphCtx& ctx, std::string_view kind, size_t index, bool strict) {
    const std::string& name = e.value ? e.value->name() : std::string();
    if (name.empty()) {
      error(ctx.where, fmt::format("{} #{} has an empty name, expected the name of a value", kind, index));
      return;
    }
    std::string p;
    if (!e.hasType) p = strict ? "has no type, expected a type (required on main graph inputs and outputs)" : "";
    else p = typeProblem(e.type(), strict);
    if (!p.empty()) error(ctx.where, fmt::format("{} '{}' {}", kind, name, p));
  }

  void checkGraph(const Graph& g, const GraphCtx& ctx) {
    if (!ctx.function && g.name.empty()) error(ctx.where, "has no name, expected a non-empty graph name");
    Scope scope;
    scope.parent = ctx.outer;
    std::string initSuffix = ctx.suffix;

    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const ValueInfoEntry& e = g.inputs()[i];
      if (!ctx.function) checkValueInfo(e, ctx, "input", i, ctx.isMain);
      if (e.value && !e.value->name().empty()) scope.names.insert(e.value->name());
    }
    for (Value* v : g.initializers()) {
      const Tensor& t = *v->initializer();
      std::string where = fmt::format("initializer '{}'{}", t.name, initSuffix);
      if (t.name.empty()) error(where, "has an empty name, expected a name");
      for (const auto& p : tensorDataProblems(t)) error(where, p);
      if (m_.irVersion > 0 && m_.irVersion <= 3 && !v->isGraphInput())
        error(where,
              fmt::format(
                  "is not listed in the graph inputs, expected every initializer among the inputs with ir_version {}",
                  m_.irVersion));
      scope.names.insert(t.name);
    }
    for (Value* v : g.sparseInitializers()) {
      const SparseTensor& s = *v->sparseInitializer();
      std::string where = fmt::format("sparse initializer '{}'{}", v->name(), initSuffix);
      if (v->name().empty()) error(where, "has an empty name, expected a name");
      for (const auto& p : sparseTensorDataProblems(s)) error(where, p);
      scope.names.insert(v->name());
    }

    bool outOfOrder = false;
    for (const auto& np : g.nodes()) {
      const Node& n = *np;
      std::string where = nodeWhere(n, ctx);
      for (size_t i = 0; i < n.inputs().size(); ++i) {
        const Value* v = n.inputs()[i];
        if (!v || v->name().empty() || scope.has(v->name())) continue;
        if (reportUndefinedInput(n, *v, g, ctx, where)) outOfOrder = true;
      }
      checkNode(n, ctx, scope);
      for (const Value* v : n.outputs()) {
        if (!v || v->name().empty()) continue;
        if (scope.hasOuter(v->name()))
          error(where,
                fmt::format("output '{}' is already defined in an enclosing graph, expected a new name (values are "
                            "assigned once)",
                            v->name()),
                &n);
        scope.names.insert(v->name());
      }
    }
    if (outOfOrder) reportCycle(g, ctx);

    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const ValueInfoEntry& e = g.outputs()[i];
      const std::string& name = e.value ? e.value->name() : std::string();
      if (ctx.function) {
        if (name.empty())
          error(ctx.where, fmt::format("output #{} has an empty name, expected the name of a value", i));
      } else {
        checkValueInfo(e, ctx, "output", i, ctx.isMain);
      }
      if (name.empty() || scope.hasHere(name)) continue;
      if (scope.hasOuter(name))
        error(ctx.where,
              fmt::format("output '{}' is a value of an enclosing graph, expected a value defined in this graph "
                          "(an Identity node can forward it)",
                          name));
      else if (ctx.function)
        error(ctx.where,
              fmt::format("output '{}' is not produced by any node, expected a function input or node output", name));
      else
        error(ctx.where,
              fmt::format("output '{}' is not produced by any node, expected a graph input, initializer or node output",
                          name));
    }
    for (const ValueInfoEntry& e : g.valueInfos()) {
      if (!e.hasType || !e.value) continue;
      std::string p = typeProblem(e.type(), false);
      if (!p.empty()) error(ctx.where, fmt::format("value_info '{}' {}", e.value->name(), p));
    }
  }

  /// Reports node input `v` that is not in scope; returns true when it is defined later (order).
  bool reportUndefinedInput(const Node& n, const Value& v, const Graph& g, const GraphCtx& ctx,
                            const std::string& where) {
    for (const Graph* h = &g; h; h = h->parent()) {
      const Value* d = h->findLocal(v.name());
      if (d && d->producer()) {
        const Node& p = *d->producer();
        std::string by = &p == &n ? "by this node itself" : fmt::format("by node '{}' ({})", p.displayName(), p.opType);
        if (h != &g) by += " of the enclosing graph";
        error(where, fmt::format("input '{}' is used before it is defined ({}), expected nodes in topological order",
                                 v.name(), by), &n);
        return h == &g;
      }
    }
    std::string expected = ctx.function ? "a function input or the output of an earlier node"
                           : ctx.outer
                               ? "an input, initializer or earlier node output of this graph or an enclosing graph"
                               : "a graph input, initializer or the output of an earlier node";
    error(where, fmt::format("input '{}' is not defined, expected {}", v.name(), expected), &n);
    return false;
  }

  /// After a use before definition: names one cycle among the nodes of `g`, if there is one.
  void reportCycle(const Graph& g, const GraphCtx& ctx) {
    std::vector<const Node*> nodes;
    std::unordered_map<const Node*, size_t> index;
    for (const auto& np : g.nodes()) {
      index.emplace(np.get(), nodes.size());
      nodes.push_back(np.get());
    }
    // preds[i]: nodes of g whose outputs node i uses, directly or from inside its subgraphs.
    std::vector<std::vector<size_t>> preds(nodes.size());
    std::vector<std::vector<size_t>> succs(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::vector<const Value*> used;
      collectUses(*nodes[i], used);
      for (const Value* v : used) {
        if (!v || v->graph() != &g || !v->producer()) continue;
        auto it = index.find(v->producer());
        if (it == index.end()) continue;
        preds[i].push_back(it->second);
        succs[it->second].push_back(i);
      }
    }
    std::vector<size_t> indeg(nodes.size());
    std::vector<size_t> ready;
    for (size_t i = 0; i < nodes.size(); ++i) {
      indeg[i] = preds[i].size();
      if (indeg[i] == 0) ready.push_back(i);
    }
    std::vector<bool> done(nodes.size(), false);
    while (!ready.empty()) {
      size_t i = ready.back();
      ready.pop_back();
      done[i] = true;
      for (size_t s : succs[i])
        if (--indeg[s] == 0) ready.push_back(s);
    }
    size_t start = nodes.size();
    for (size_t i = 0; i < nodes.size() && start == nodes.size(); ++i)
      if (!done[i]) start = i;
    if (start == nodes.size()) return;  // out of order, but acyclic
    // Walk back through unfinished predecessors until a node repeats: that stretch is a cycle.
    std::vector<size_t> path;
    std::unordered_map<size_t, size_t> pos;
    size_t cur = start;
    while (!pos.count(cur)) {
      pos[cur] = path.size();
      path.push_back(cur);
      size_t next = cur;
      for (size_t p : preds[cur])
        if (!done[p]) {
          next = p;
          break;
        }
      cur = next;
    }
    std::vector<size_t> cycle(path.begin() + static_cast<std::ptrdiff_t>(pos[cur]), path.end());
    std::reverse(cycle.begin(), cycle.end());  // producer -> consumer order
    std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()),
                cycle.end());  // start at the first in file order
    std::string chain;
    for (size_t i : cycle) chain += fmt::format("'{}' -> ", nodes[i]->displayName());
    chain += fmt::format("'{}'", nodes[cycle.front()]->displayName());
    error(ctx.where, fmt::format("nodes {} form a cycle, expected an acyclic graph", chain));
  }

  static void collectUses(const Node& n, std::vector<const Value*>& out) {
    for (const Value* v : n.inputs()) out.push_back(v);
    for (const Graph* sg : n.subgraphs())
      for (const auto& inner : sg->nodes()) collectUses(*inner, out);
  }

  // ------------------------------------------------------------------ nodes

  void checkNode(const Node& n, const GraphCtx& ctx, const Scope& scope) {
    std::string where = nodeWhere(n, ctx);
    if (n.inputs().empty() && n.outputs().empty())
      error(where, "has no inputs and no outputs, expected at least one of either", &n);
    checkAttributes(n, ctx, scope, where);
    if (n.opType.empty()) {
      error(where, "has an empty op_type, expected an operator name", &n);
      return;
    }
    std::string domain(canonicalDomain(n.domain));
    auto it = ctx.opsets->find(domain);
    if (it == ctx.opsets->end()) {
      std::string in = ctx.function
                           ? fmt::format("function '{}'", functionId(ctx.function->domain, ctx.function->name, ""))
                           : std::string("the model");
      error(where,
            fmt::format("domain '{}' is not imported, expected an opset_import entry for it in {}", domainName(domain),
                        in),
            &n);
      return;
    }
    int64_t version = it->second;
    const Function* fn = findFunction(n);
    if (ctx.function) checkOpsetCompatibility(n, ctx, domain, version, where);
    if (isKnownDomain(domain)) {
      if (domain.empty() && isExperimentalOp(n.opType)) {
        warning(where,
                fmt::format("unverifiable: experimental op '{}', expected a standard op (not checked against a schema)",
                            n.opType),
                &n, "unverifiable-experimental-op");
        return;
      }
      const OpSchema* s = findSchema(domain, n.opType, version);
      if (!s && fn) {
        checkFunctionCall(n, *fn, where);
        return;
      }
      if (!s) {
        auto versions = schemaVersions(domain, n.opType);
        if (versions.empty())
          error(where,
                fmt::format("op '{}' is not defined in opset {} of domain {}, expected an operator that domain defines",
                            n.opType, version, domainName(domain)),
                &n);
        else
          error(where,
                fmt::format("op '{}' is not defined in opset {} of domain {}, expected opset {} or newer for this op",
                            n.opType, version, domainName(domain), versions.front().sinceVersion),
                &n);
        return;
      }
      if (s->deprecated) {
        error(where,
              fmt::format("op '{}' is deprecated in opset {} of domain {} (since version {}), expected an op that is "
                          "not deprecated at that opset",
                          n.opType, version, domainName(domain), s->sinceVersion),
              &n);
        return;
      }
      checkAgainstSchema(n, *s, where);
      return;
    }
    if (fn) {
      checkFunctionCall(n, *fn, where);
      return;
    }
    warning(where,
            fmt::format("unverifiable: unknown domain '{}', expected a domain of the ONNX spec (ai.onnx, ai.onnx.ml, "
                        "ai.onnx.preview, ai.onnx.preview.training) or a model-local function (not checked against a schema)",
                        domain),
            &n, "unverifiable-domain");
  }

  /// onnx's check_opset_compatibility: a function body node whose domain the model imports at
  /// another version must resolve to the same schema version under both imports.
  void checkOpsetCompatibility(const Node& n, const GraphCtx& ctx, const std::string& domain, int64_t fnVersion,
                               const std::string& where) {
    auto mit = opsets_.find(domain);
    if (mit == opsets_.end() || mit->second == fnVersion || !isKnownDomain(domain)) return;
    const OpSchema* a = findSchema(domain, n.opType, mit->second);
    const OpSchema* b = findSchema(domain, n.opType, fnVersion);
    if (!a && !b) return;
    if (!a || !b || a->sinceVersion != b->sinceVersion)
      error(where,
            fmt::format("opset {} of domain {} imported by function '{}' gives another version of '{}' than opset {} "
                        "imported by the model, expected compatible opset imports",
                        fnVersion, domainName(domain), functionId(ctx.function->domain, ctx.function->name, ""),
                        n.opType, mit->second),
            &n);
  }

  void checkAgainstSchema(const Node& n, const OpSchema& s, const std::string& where) {
    int nIn = static_cast<int>(std::min<size_t>(n.inputs().size(), INT32_MAX));
    int nOut = static_cast<int>(std::min<size_t>(n.outputs().size(), INT32_MAX));
    if (nIn < s.minInputs || nIn > s.maxInputs)
      error(where, fmt::format("has {}, {}", plural(static_cast<uint64_t>(nIn), "input", "inputs"),
                               arityExpectation(s.minInputs, s.maxInputs)), &n);
    if (nOut < s.minOutputs || nOut > s.maxOutputs)
      error(where, fmt::format("has {}, {}", plural(static_cast<uint64_t>(nOut), "output", "outputs"),
                               arityExpectation(s.minOutputs, s.maxOutputs)), &n);
    for (size_t i = 0; i < n.inputs().size() && i < s.inputs.size(); ++i)
      if (!n.inputs()[i] && s.inputs[i].option == ParamOption::Single)
        error(where,
              fmt::format("input {} ('{}') is empty, expected a value (the input is required)", i, s.inputs[i].name),
              &n);
    for (size_t i = 0; i < n.outputs().size() && i < s.outputs.size(); ++i)
      if (!n.outputs()[i] && s.outputs[i].option == ParamOption::Single)
        error(where,
              fmt::format("output {} ('{}') is empty, expected a name (the output is required)", i, s.outputs[i].name),
              &n);

    // onnx lets LayerNormalization carry extra attributes, and ignores "__"-prefixed ones.
    bool uncheckedAllowed = s.domain.empty() && s.name == "LayerNormalization";
    for (const Attribute& a : n.attributes) {
      if (a.name.empty() || (a.name.size() >= 2 && a.name[0] == '_' && a.name[1] == '_')) continue;
      const AttrSchema* as = s.findAttr(a.name);
      if (!as) {
        if (uncheckedAllowed) continue;
        std::string known;
        for (const AttrSchema& x : s.attributes) known += (known.empty() ? "" : ", ") + std::string(x.name);
        error(where, fmt::format("has unknown attribute '{}', expected {}", a.name,
                                 known.empty() ? "no attributes" : "one of: " + known), &n);
        continue;
      }
      if (a.type != AttrType::Undefined && a.type != as->type) {
        error(where,
              fmt::format("attribute '{}' has type {}, expected {}", a.name, attrTypeName(a.type),
                          attrTypeName(as->type)),
              &n);
        continue;
      }
      if (a.refAttrName.empty() && as->type == AttrType::Int && isDTypeAttribute(a.name) &&
          (a.i < 1 || a.i > kMaxDType) && !(a.name == "output_dtype" && a.i == 0))
        error(where,
              fmt::format("attribute '{}' = {} is not a TensorProto.DataType, expected a value from 1 to {}", a.name,
                          a.i, kMaxDType),
              &n);
    }
    for (const AttrSchema& as : s.attributes)
      if (as.required && !n.attr(as.name))
        error(where,
              fmt::format("is missing required attribute '{}', expected it to be set ({})", as.name,
                          attrTypeName(as.type)),
              &n);
  }

  void checkFunctionCall(const Node& n, const Function& f, const std::string& where) {
    std::string id = functionId(f.domain, f.name, f.overload);
    size_t fin = f.body->inputs().size(), fout = f.body->outputs().size();
    if (n.inputs().size() > fin)
      error(where, fmt::format("has {}, expected at most {} (the inputs of function '{}')",
                               plural(n.inputs().size(), "input", "inputs"), fin, id), &n);
    if (n.outputs().size() > fout)
      error(where, fmt::format("has {}, expected at most {} (the outputs of function '{}')",
                               plural(n.outputs().size(), "output", "outputs"), fout, id), &n);
    std::set<std::string_view> known(f.attributeNames.begin(), f.attributeNames.end());
    for (const Attribute& a : f.attributeDefaults) known.insert(a.name);
    for (const Attribute& a : n.attributes) {
      if (a.name.empty() || known.count(a.name)) continue;
      std::string list;
      for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      error(where, fmt::format("has unknown attribute '{}', expected {} (the attributes of function '{}')", a.name,
                               list.empty() ? "no attributes" : "one of: " + list, id), &n);
    }
  }

  // ------------------------------------------------------------------ attributes

  /// Value fields an attribute holds, as attribute types (scalars count when non-default).
  static std::vector<AttrType> heldFields(const Attribute& a) {
    std::vector<AttrType> f;
    if (a.f != 0) f.push_back(AttrType::Float);
    if (a.i != 0) f.push_back(AttrType::Int);
    if (!a.s.empty()) f.push_back(AttrType::String);
    if (a.t) f.push_back(AttrType::Tensor);
    if (a.g) f.push_back(AttrType::Graph);
    if (a.sparseTensor) f.push_back(AttrType::SparseTensor);
    if (a.tp) f.push_back(AttrType::TypeProto);
    if (!a.floats.empty()) f.push_back(AttrType::Floats);
    if (!a.ints.empty()) f.push_back(AttrType::Ints);
    if (!a.strings.empty()) f.push_back(AttrType::Strings);
    if (!a.tensors.empty()) f.push_back(AttrType::Tensors);
    if (!a.graphs.empty()) f.push_back(AttrType::Graphs);
    if (!a.sparseTensors.empty()) f.push_back(AttrType::SparseTensors);
    if (!a.typeProtos.empty()) f.push_back(AttrType::TypeProtos);
    return f;
  }

  void checkAttributes(const Node& n, const GraphCtx& ctx, const Scope& scope, const std::string& where) {
    std::unordered_set<std::string> seen;
    for (const Attribute& a : n.attributes) {
      if (a.name.empty()) error(where, "has an attribute with an empty name, expected a name", &n);
      else if (!seen.insert(a.name).second)
        error(where, fmt::format("has attribute '{}' more than once, expected unique attribute names", a.name), &n);
      int32_t t = static_cast<int32_t>(a.type);
      if (a.type == AttrType::Undefined) {
        if (m_.irVersion >= 2 || m_.irVersion <= 0)
          error(where,
                fmt::format("attribute '{}' has no type, expected its AttributeType (required from ir_version 2)",
                            a.name),
                &n);
      } else if (t < 1 || t > static_cast<int32_t>(AttrType::TypeProtos)) {
        error(where,
              fmt::format("attribute '{}' has type {}, which is not an AttributeType, expected 1 to 14", a.name, t),
              &n);
      }
      if (!a.refAttrName.empty()) {
        if (!ctx.function) {
          error(where,
                fmt::format(
                    "attribute '{}' refers to caller attribute '{}', expected ref_attr_name only in function bodies",
                    a.name, a.refAttrName),
                &n);
        } else {
          const Function& f = *ctx.function;
          bool declared =
              std::find(f.attributeNames.begin(), f.attributeNames.end(), a.refAttrName) != f.attributeNames.end() ||
              std::any_of(f.attributeDefaults.begin(), f.attributeDefaults.end(),
                          [&](const Attribute& d) { return d.name == a.refAttrName; });
          if (!declared)
            error(where, fmt::format("attribute '{}' refers to '{}', expected an attribute of function '{}'", a.name,
                                     a.refAttrName, functionId(f.domain, f.name, "")), &n);
        }
      } else {
        auto held = heldFields(a);
        if (held.size() == 1 && a.type != AttrType::Undefined && held[0] != a.type)
          error(where,
                fmt::format("attribute '{}' has type {} but holds a {} value, expected the value field of its type",
                            a.name, attrTypeName(a.type), attrTypeName(held[0])),
                &n);
        if (held.empty()) {
          const char* field = a.type == AttrType::Tensor         ? "t"
                              : a.type == AttrType::Graph        ? "g"
                              : a.type == AttrType::SparseTensor ? "sparse_tensor"
                              : a.type == AttrType::TypeProto    ? "tp"
                                                                 : nullptr;
          if (field)
            error(where,
                  fmt::format("attribute '{}' of type {} has no value, expected field '{}'", a.name,
                              attrTypeName(a.type), field),
                  &n);
        }
      }
      std::string attrWhere = fmt::format("{}: attribute '{}'", where, a.name);
      if (a.t)
        for (const auto& p : tensorDataProblems(*a.t)) error(attrWhere, p, &n);
      for (size_t i = 0; i < a.tensors.size(); ++i)
        if (a.tensors[i])
          for (const auto& p : tensorDataProblems(*a.tensors[i])) error(attrWhere, fmt::format("tensor #{}: {}", i, p), &n);
      if (a.sparseTensor)
        for (const auto& p : sparseTensorDataProblems(*a.sparseTensor)) error(attrWhere, p, &n);
      for (size_t i = 0; i < a.sparseTensors.size(); ++i)
        if (a.sparseTensors[i])
          for (const auto& p : sparseTensorDataProblems(*a.sparseTensors[i]))
            error(attrWhere, fmt::format("sparse tensor #{}: {}", i, p), &n);
      if (a.tp) {
        std::string p = typeProblem(*a.tp, false);
        if (!p.empty()) error(attrWhere, "type " + p, &n);
      }
      for (size_t i = 0; i < a.typeProtos.size(); ++i) {
        std::string p = typeProblem(a.typeProtos[i], false);
        if (!p.empty()) error(attrWhere, fmt::format("type #{} {}", i, p), &n);
      }
      if (a.g) checkSubgraph(*a.g, a.name, n, ctx, scope);
      for (size_t i = 0; i < a.graphs.size(); ++i)
        if (a.graphs[i]) checkSubgraph(*a.graphs[i], fmt::format("{}[{}]", a.name, i), n, ctx, scope);
    }
  }

  void checkSubgraph(const Graph& sg, const std::string& attrName, const Node& n, const GraphCtx& ctx,
                     const Scope& scope) {
    GraphCtx sub;
    sub.where = fmt::format("subgraph '{}' of node '{}' ({}){}", attrName, n.displayName(), n.opType, ctx.suffix);
    sub.suffix = " in " + sub.where;
    sub.outer = &scope;
    sub.opsets = ctx.opsets;
    sub.isMain = false;
    sub.function = ctx.function;
    checkGraph(sg, sub);
  }

  // ------------------------------------------------------------------ functions

  void checkFunctions() {
    if (m_.functions.empty()) return;
    checkFunctionCycles();
    for (const auto& fp : m_.functions) {
      const Function& f = *fp;
      std::string id = functionId(f.domain, f.name, f.overload);
      std::string where = fmt::format("function '{}'", id);
      if (f.name.empty()) error(where, "has an empty name, expected a name");
      if (duplicateFunctions_.count(&f))
        error(where, "is defined more than once, expected one function per (domain, name, overload)");
      OpsetMap imports = readOpsets(f.opsetImports, where);
      std::unordered_set<std::string> outs, attrs;
      for (const auto& e : f.body->outputs())
        if (e.value && !e.value->name().empty() && !outs.insert(e.value->name()).second)
          error(where, fmt::format("lists output '{}' more than once, expected unique outputs", e.value->name()));
      for (const auto& a : f.attributeNames)
        if (!attrs.insert(a).second)
          error(where, fmt::format("lists attribute '{}' more than once, expected unique attributes", a));
      for (const auto& a : f.attributeDefaults)
        if (!attrs.insert(a.name).second)
          error(where, fmt::format("lists attribute '{}' more than once, expected unique attributes", a.name));
      GraphCtx ctx;
      ctx.where = where;
      ctx.suffix = " in " + where;
      ctx.opsets = &imports;
      ctx.function = &f;
      checkGraph(*f.body, ctx);
    }
  }

  /// Model-local functions must not call themselves, directly or through others.
  void checkFunctionCycles() {
    std::unordered_map<const Function*, std::vector<const Function*>> calls;
    for (const auto& fp : m_.functions) {
      auto& callees = calls[fp.get()];
      collectCalls(*fp->body, callees);
    }
    enum class State : uint8_t { Unvisited, OnPath, Done };
    std::unordered_map<const Function*, State> state;
    for (const auto& root : m_.functions) {
      if (state[root.get()] != State::Unvisited) continue;
      // Iterative DFS: a deep call chain must not exhaust the stack.
      struct Frame {
        const Function* f;
        size_t next;
      };
      std::vector<Frame> stack{{root.get(), 0}};
      state[root.get()] = State::OnPath;
      while (!stack.empty()) {
        Frame& fr = stack.back();
        const auto& callees = calls[fr.f];
        if (fr.next == callees.size()) {
          state[fr.f] = State::Done;
          stack.pop_back();
          continue;
        }
        const Function* c = callees[fr.next++];
        if (state[c] == State::OnPath) {
          std::string chain;
          bool on = false;
          for (const Frame& x : stack) {
            if (x.f == c) on = true;
            if (on) chain += fmt::format("'{}' -> ", functionId(x.f->domain, x.f->name, x.f->overload));
          }
          chain += fmt::format("'{}'", functionId(c->domain, c->name, c->overload));
          error(fmt::format("function '{}'", functionId(c->domain, c->name, c->overload)),
                fmt::format("calls itself through {}, expected no recursion among model-local functions", chain));
          state[c] = State::Done;  // report each cycle once
        } else if (state[c] == State::Unvisited) {
          state[c] = State::OnPath;
          stack.push_back({c, 0});
        }
      }
    }
  }

  // ------------------------------------------------------------------ shape inference

  /// Type and shape inference over a model the checks above found well formed (inference relies
  /// on arities, scoping and order being right): each finding (shapes that cannot meet, types a
  /// constraint refuses, inferred types contradicting declared ones) is an error of its node. The
  /// model is left as it was: inference writes types into the values, restored here afterwards.
  void checkInference() {
    if (!m_.graph || hasErrors(out_)) return;
    Model& m = const_cast<Model&>(m_);
    std::vector<std::pair<Value*, TypeInfo>> saved;
    // Inference also rewrites contradicted declarations: the entries are restored as well.
    std::vector<std::pair<ValueInfoEntry*, std::optional<TypeInfo>>> savedEntries;
    auto save = [&](Graph& g) {
      for (const auto& v : g.values()) saved.emplace_back(v.get(), v->type());
      for (auto* list : {&g.inputs(), &g.outputs(), &g.valueInfos()})
        for (ValueInfoEntry& e : *list) savedEntries.emplace_back(&e, e.typeOverride);
    };
    m.graph->forEachGraph(save);
    for (const auto& f : m.functions)
      if (f->body) f->body->forEachGraph(save);
    InferReport inferred;
    try {
      inferred = inferShapes(m);
    } catch (const std::exception& e) {
      // A bug of inference, not of the model: said, so that no finding goes missing unnoticed.
      warning("model", fmt::format("shape inference stopped ({}), expected it to complete; its findings are incomplete",
                                   e.what()),
              nullptr, "inference-incomplete");
    }
    for (auto& [v, t] : saved) v->setType(std::move(t));
    for (auto& [e, t] : savedEntries) e->typeOverride = std::move(t);
    std::set<std::pair<const Node*, std::string>> seen;  // a function body is inferred once per call
    for (const InferFinding& f : inferred.findings) {
      if (!seen.emplace(f.node, f.what).second) continue;
      // A declared rank or dims that the computation contradicts: onnx.checker accepts the model and
      // ONNX Runtime computes the real shape with a warning, so it is a warning here too.
      auto sev = f.code == "declared-shape-mismatch" ? Diagnostic::Severity::Warning : Diagnostic::Severity::Error;
      if (f.node)
        report(sev, fmt::format("node '{}' ({}){}", f.node->displayName(), f.node->opType, placeOf(*f.node->graph())),
               f.what, f.node, f.code);
      else
        out_.push_back({sev, printable(fmt::format("{}: {}", m_.path, f.what)), {}, {}, f.code});
    }
  }

  /// " in subgraph 'body' of node 'loop' (Loop)...", " in function 'd::f'" or "" for the main
  /// graph: where a graph sits, spelled as checkSubgraph and checkFunctions spell it.
  std::string placeOf(const Graph& g) const {
    if (const Node* p = g.parentNode()) {
      std::string attrName = "?";
      for (const Attribute& a : p->attributes) {
        if (a.g.get() == &g) attrName = a.name;
        for (size_t i = 0; i < a.graphs.size(); ++i)
          if (a.graphs[i].get() == &g) attrName = fmt::format("{}[{}]", a.name, i);
      }
      return fmt::format(" in subgraph '{}' of node '{}' ({}){}", attrName, p->displayName(), p->opType,
                         p->graph() ? placeOf(*p->graph()) : "");
    }
    for (const auto& f : m_.functions)
      if (f->body.get() == &g) return fmt::format(" in function '{}'", functionId(f->domain, f->name, f->overload));
    return "";
  }

  void collectCalls(const Graph& g, std::vector<const Function*>& out) const {
    for (const auto& n : g.nodes()) {
      if (const Function* f = findFunction(*n); f && std::find(out.begin(), out.end(), f) == out.end())
        out.push_back(f);
      for (const Graph* sg : n->subgraphs()) collectCalls(*sg, out);
    }
  }

  const Model& m_;
  std::vector<Diagnostic> out_;
  OpsetMap opsets_;
  std::unordered_map<std::string, const Function*> functions_;
  std::unordered_set<const Function*> duplicateFunctions_;
};

}  // namespace

std::vector<Diagnostic> checkModel(const Model& m) { return Checker(m).run(); }

std::string newerOpsetThanKnown(const Model& m) {
  auto scan = [](const std::vector<OpsetImport>& imports, const std::string& where) -> std::string {
    for (const OpsetImport& o : imports) {
      int64_t maxKnown = maxKnownOpset(o.domain);
      if (maxKnown && o.version > maxKnown)
        return fmt::format("{}imports opset {} of domain '{}'; this build knows opsets up to {}", where, o.version,
                           domainName(canonicalDomain(o.domain)), maxKnown);
    }
    return {};
  };
  if (std::string s = scan(m.opsetImports, "the model "); !s.empty()) return s;
  for (const auto& f : m.functions)
    if (std::string s = scan(f->opsetImports, fmt::format("function '{}' ", f->name)); !s.empty()) return s;
  return {};
}

bool hasErrors(const std::vector<Diagnostic>& diagnostics) {
  return std::any_of(diagnostics.begin(), diagnostics.end(),
                     [](const Diagnostic& d) { return d.severity == Diagnostic::Severity::Error; });
}

}  // namespace onnxtool
