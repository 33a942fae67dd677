// convert_opset.cpp: opset conversion (see convert_opset.h) and the pass `convert-opset{to=N}`.
// The driver walks every graph, subgraph and model-local function body; each node of a converted
// domain moves one schema version at a time. A step listed in passes/opset_adapters.def goes
// through its adapter; any other step moves the node as it is when the schemas on both sides
// differ only in allowed types or in optional inputs, outputs and attributes the node leaves
// unset (or at their defaults); the node's types are checked against the schema it lands on.
#include "passes/convert_opset.h"

#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "lib/error.h"
#include "lib/ir_clone.h"
#include "lib/ops/op_schema.h"
#include "lib/shape_inference.h"
#include "passes/opset_adapters.h"
#include "passes/pass.h"
#include "passes/pass_util.h"

namespace onnxtool {

int64_t irVersionForOpset(int64_t opset) {
  // onnx.helper.VERSION_TABLE: the IR version of the onnx release that introduced each opset.
  if (opset <= 8) return 3;
  if (opset == 9) return 4;
  if (opset == 10) return 5;
  if (opset == 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  if (opset == 23) return 11;
  if (opset == 24) return 12;
  if (opset <= 27) return 13;
  return 14;
}

namespace {

bool sameSpan(const auto& a, const auto& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return std::equal(a->begin(), a->end(), b->begin(), b->end());
}

bool sameDefault(const AttrSchema& a, const AttrSchema& b) {
  return a.hasDefault == b.hasDefault && a.defaultInt() == b.defaultInt() && a.defaultFloat() == b.defaultFloat() &&
         a.defaultString() == b.defaultString() && sameSpan(a.defaultInts(), b.defaultInts()) &&
         sameSpan(a.defaultFloats(), b.defaultFloats()) && sameSpan(a.defaultStrings(), b.defaultStrings()) &&
         a.defaultProto() == b.defaultProto();
}

bool equalsDefault(const Attribute& a, const AttrSchema& s) {
  if (!s.hasDefault || !a.refAttrName.empty()) return false;
  switch (a.type) {
    case AttrType::Int: return s.defaultInt() == a.i;
    case AttrType::Float: return s.defaultFloat() == a.f;
    case AttrType::String: return s.defaultString() == std::string_view(a.s);
    case AttrType::Ints: {
      auto d = s.defaultInts();
      return d && std::equal(d->begin(), d->end(), a.ints.begin(), a.ints.end());
    }
    case AttrType::Floats: {
      auto d = s.defaultFloats();
      return d && std::equal(d->begin(), d->end(), a.floats.begin(), a.floats.end());
    }
    default: return false;
  }
}

bool present(const std::vector<Value*>& vs, size_t i) { return i < vs.size() && vs[i]; }

/// Whether a node moves between adjacent schemas `older` and `newer` without an adapter; applies
/// what that takes (dropping new attributes set to their defaults, going down). "" when it moved.
std::string genericStep(Node* n, const OpSchema& older, const OpSchema& newer, bool down) {
  if (older.deprecated || newer.deprecated)
    return fmt::format("{} is deprecated at opset {}", n->opType, (older.deprecated ? older : newer).sinceVersion);
  int v = newer.sinceVersion;
  auto params = [&](std::span<const FormalParam> o, std::span<const FormalParam> w, const std::vector<Value*>& actual,
                    const char* what) -> std::string {
    for (size_t i = 0; i < std::max(o.size(), w.size()); ++i) {
      const FormalParam* a = i < o.size() ? &o[i] : nullptr;
      const FormalParam* b = i < w.size() ? &w[i] : nullptr;
      if (a && b) {
        if (a->option == b->option) continue;
        if (a->option == ParamOption::Single && b->option == ParamOption::Optional) {
          if (down && !present(actual, i))
            return fmt::format("{} '{}' is optional from opset {} on and absent here", what, b->name, v);
          continue;
        }
        return fmt::format("{} '{}' changed form at opset {}", what, b->name, v);
      }
      if (b) {
        if (b->option != ParamOption::Optional) return fmt::format("{} '{}' was added at opset {}", what, b->name, v);
        if (down && present(actual, i)) return fmt::format("uses {} '{}', which opset {} lacks", what, b->name, v - 1);
        continue;
      }
      return fmt::format("{} '{}' was removed at opset {}", what, a->name, v);
    }
    return "";
  };
  if (auto r = params(older.inputs, newer.inputs, n->inputs(), "input"); !r.empty()) return r;
  if (auto r = params(older.outputs, newer.outputs, n->outputs(), "output"); !r.empty()) return r;
  for (const AttrSchema& a : older.attributes) {
    const AttrSchema* b = newer.findAttr(a.name);
    if (!b) return fmt::format("attribute '{}' was removed at opset {}", a.name, v);
    if (a.type != b->type) return fmt::format("attribute '{}' changed type at opset {}", a.name, v);
    if (a.required != b->required) {
      // Required before and optional after: fine up, and down when the node sets it.
      if (!a.required || (down && !n->attr(a.name)))
        return fmt::format("attribute '{}' is required {} opset {}", a.name, a.required ? "before" : "from", v);
      continue;
    }
    if (!sameDefault(a, *b)) return fmt::format("the default of attribute '{}' changed at opset {}", a.name, v);
  }
  std::vector<std::string> drop;
  for (const AttrSchema& b : newer.attributes) {
    if (older.findAttr(b.name)) continue;
    if (b.required) return fmt::format("attribute '{}' is required from opset {} on", b.name, v);
    if (!down) continue;
    if (const Attribute* set = n->attr(b.name)) {
      if (!equalsDefault(*set, b))
        return fmt::format("attribute '{}' (from opset {} on) is set to a value opset {} cannot express", b.name, v, v - 1);
      drop.emplace_back(b.name);
    }
  }
  for (const std::string& d : drop) n->removeAttr(d);
  return "";
}

std::string actualType(const Value* v) {
  if (!v || v->type().isNone()) return "";
  if ((v->type().isTensor() || v->type().kind == TypeInfo::Kind::SparseTensor) && v->type().elemType == 0) return "";
  return v->type().constraintStr();
}

/// Checks the node's inferred types against schema `s` (where a type is known).
std::string checkTypes(const Node* n, const OpSchema& s, const std::string& where) {
  std::map<std::string_view, std::string> bound;
  auto check = [&](std::span<const FormalParam> formals, const std::vector<Value*>& actual, const char* what) -> std::string {
    if (formals.empty()) return "";
    for (size_t i = 0; i < actual.size(); ++i) {
      size_t f = std::min(i, formals.size() - 1);
      if (i >= formals.size() && formals.back().option != ParamOption::Variadic) break;
      const FormalParam& p = formals[f];
      std::string t = actualType(actual[i]);
      if (t.empty()) continue;
      if (p.typeStr.find('(') != std::string_view::npos) {
        if (t != p.typeStr)
          return fmt::format("type {} of {} '{}' is not allowed for {} {} ({} expected)", t, what,
                             actual[i]->name(), n->opType, where, p.typeStr);
        continue;
      }
      const TypeConstraint* c = s.findConstraint(p.typeStr);
      if (!c) continue;
      if (std::find(c->allowedTypes.begin(), c->allowedTypes.end(), t) == c->allowedTypes.end())
        return fmt::format("type {} of {} '{}' is not allowed for {} {}", t, what, actual[i]->name(), n->opType, where);
      if (p.option == ParamOption::Variadic && !p.isHomogeneous) continue;
      auto [it, fresh] = bound.emplace(p.typeStr, t);
      if (!fresh && it->second != t)
        return fmt::format("{} at opset {} needs one type for {}, got {} and {}", n->opType, s.sinceVersion, p.typeStr,
                           it->second, t);
    }
    return "";
  };
  if (auto r = check(s.inputs, n->inputs(), "input"); !r.empty()) return r;
  return check(s.outputs, n->outputs(), "output");
}

struct Converter {
  std::map<std::string, int64_t> targets;  // domain -> target version
  std::vector<NodeReach> all;               // every visited node of a converted domain
  std::vector<NodeReach> blocked;
  int64_t adaptersApplied = 0;
  int64_t nodesConverted = 0;

  /// Moves n (expressed at opset `cur` of `domain`) to `target`. "" when done.
  std::string convertNode(Graph& g, Node* n, const std::string& domain, int64_t cur, int64_t target, bool inFunction,
                          int depth) {
    if (depth > 8) return "conversion does not converge";
    const std::string op = n->opType;
    for (int guard = 0; guard < 64; ++guard) {
      const OpSchema* sc = findSchema(domain, op, cur);
      const OpSchema* st = findSchema(domain, op, target);
      if (!sc) return fmt::format("{} is not an operator of opset {}", op, cur);
      if (sc == st && !sc->deprecated) return "";
      if (sc == st) return fmt::format("{} {} is deprecated: no model of opset {} may use it", op, sc->sinceVersion, target);
      if (target < cur) {
        int boundary = sc->sinceVersion;
        const OpSchema* prev = boundary > 1 ? findSchema(domain, op, boundary - 1) : nullptr;
        AdaptStep step(g, n, boundary, boundary - 1, inFunction);
        const AdapterInfo* ad = domain.empty() ? findAdapter(op, boundary, AdaptDirection::Down) : nullptr;
        std::string r;
        if (ad) {
          r = ad->fn(step);
          if (r.empty() && !step.removed && prev && runsGenericAfter(*ad)) r = genericStep(n, *prev, *sc, true);
        } else if (!prev) r = fmt::format("{} does not exist before opset {} and has no lowering", op, boundary);
        else r = genericStep(n, *prev, *sc, true);
        if (!r.empty()) return fmt::format("{} {} -> {}: {}", op, boundary, boundary - 1, r);
        if (ad) ++adaptersApplied;
        if (auto rc = convertCreated(g, step, domain, target, inFunction, depth); !rc.empty()) return rc;
        if (step.removed) return "";
        if (!prev) return fmt::format("{} {} -> {}: no older schema", op, boundary, boundary - 1);
        if (auto rt = checkTypes(n, *prev, fmt::format("before opset {}", boundary)); !rt.empty()) return fmt::format("{} {} -> {}: {}", op, boundary, boundary - 1, rt);
        cur = boundary - 1;
      } else {
        auto versions = schemaVersions(domain, op);
        const OpSchema* nx = nullptr;
        for (const OpSchema& v : versions)
          if (v.sinceVersion > sc->sinceVersion) {
            nx = &v;
            break;
          }
        if (!nx || nx->sinceVersion > target) return "";
        int boundary = nx->sinceVersion;
        AdaptStep step(g, n, boundary - 1, boundary, inFunction);
        const AdapterInfo* ad = domain.empty() ? findAdapter(op, boundary, AdaptDirection::Up) : nullptr;
        std::string r = ad ? ad->fn(step) : genericStep(n, *sc, *nx, false);
        if (!r.empty()) return fmt::format("{} {} -> {}: {}", op, sc->sinceVersion, boundary, r);
        if (ad) ++adaptersApplied;
        if (auto rc = convertCreated(g, step, domain, target, inFunction, depth); !rc.empty()) return rc;
        if (step.removed) return "";
        if (auto rt = checkTypes(n, *nx, fmt::format("at opset {}", boundary)); !rt.empty()) return fmt::format("{} {} -> {}: {}", op, sc->sinceVersion, boundary, rt);
        cur = boundary;
      }
    }
    return "conversion does not converge";
  }

  std::string convertCreated(Graph& g, AdaptStep& step, const std::string& domain, int64_t target, bool inFunction,
                             int depth) {
    for (Node* m : step.created) {
      if (m == step.n) continue;
      std::string r = convertNode(g, m, domain, step.to, target, inFunction, depth + 1);
      if (!r.empty()) return fmt::format("its {} form needs {}", step.to, r);
    }
    return "";
  }

  void convertGraph(Graph& g, const std::string& path, const std::map<std::string, int64_t>& from, bool inFunction) {
    std::vector<Node*> nodes;
    std::vector<Node*> usedConstants;  // Constant nodes read before: dead afterwards means an adapter moved them
    std::set<Value*> initsBefore, usedBefore;  // the same for initializers, and those adapters create
    for (Value* v : g.initializers()) {
      initsBefore.insert(v);
      if (v->hasUses()) usedBefore.insert(v);
    }
    for (const auto& n : g.nodes()) {
      nodes.push_back(n.get());
      if (n->opType == "Constant" && n->isDomain("") && n->output(0) && n->output(0)->hasUses())
        usedConstants.push_back(n.get());
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* n = nodes[i];
      for (Attribute& a : n->attributes) {
        std::string sub = path + "/" + n->displayName() + "/" + a.name;
        if (a.g) convertGraph(*a.g, sub, from, inFunction);
        for (size_t k = 0; k < a.graphs.size(); ++k)
          if (a.graphs[k]) convertGraph(*a.graphs[k], sub + "[" + std::to_string(k) + "]", from, inFunction);
      }
      std::string domain(canonicalDomain(n->domain));
      auto t = targets.find(domain);
      auto f = from.find(domain);
      if (t == targets.end() || f == from.end()) continue;
      NodeReach r;
      r.graph = path;
      r.node = n->displayName();
      r.op = n->opType;
      r.domain = domain;
      r.from = f->second;
      r.to = t->second;
      r.key = path + "#" + std::to_string(i);
      all.push_back(r);
      if (f->second == t->second) continue;
      int64_t before = adaptersApplied;
      r.reason = convertNode(g, n, domain, f->second, t->second, inFunction, 0);
      if (!r.reason.empty()) blocked.push_back(r);
      else if (adaptersApplied != before || findSchema(domain, r.op, r.from) != findSchema(domain, r.op, r.to))
        ++nodesConverted;
    }
    std::set<Node*> alive;
    for (const auto& n : g.nodes()) alive.insert(n.get());
    for (Node* c : usedConstants)
      if (alive.count(c) && !c->output(0)->hasUses() && !c->output(0)->isGraphOutput()) g.removeNode(c);
    // Initializers an adapter moved into an attribute, or created for one step and made dead by
    // the next (a split input that became the attribute again), are dropped as well.
    std::vector<Value*> dead;
    for (Value* v : g.initializers())
      if (!v->hasUses() && !v->isGraphInput() && !v->isGraphOutput() && (usedBefore.count(v) || !initsBefore.count(v)))
        dead.push_back(v);
    for (Value* v : dead) g.removeInitializer(v);
  }
};

std::map<std::string, int64_t> targetsOf(const Model& model, const OpsetConvertOptions& o) {
  std::map<std::string, int64_t> t;
  if (o.target != 0) {
    if (o.target < 1 || o.target > maxKnownOpset(""))
      fail(ErrorKind::Unsupported, "opset {}: this build knows ai.onnx opsets 1 to {}", o.target, maxKnownOpset(""));
    t[""] = o.target;
  }
  for (const auto& [d, v] : o.domains) {
    std::string dom(canonicalDomain(d));
    if (dom.empty()) {
      if (v < 1 || v > maxKnownOpset(""))
        fail(ErrorKind::Unsupported, "opset {}: this build knows ai.onnx opsets 1 to {}", v, maxKnownOpset(""));
      t[""] = v;
      continue;
    }
    if (dom != "ai.onnx.ml") fail(ErrorKind::Unsupported, "--domain {}: only ai.onnx.ml converts besides ai.onnx", d);
    if (v < 1 || v > maxKnownOpset(dom))
      fail(ErrorKind::Unsupported, "{} opset {}: this build knows {} opsets 1 to {}", dom, v, dom, maxKnownOpset(dom));
    if (!model.opsetVersion(dom)) fail(ErrorKind::InvalidInput, "--domain {}: the model does not import {}", d, dom);
    t[dom] = v;
  }
  return t;
}

std::map<std::string, int64_t> importsOf(const std::vector<OpsetImport>& imports) {
  std::map<std::string, int64_t> m;
  for (const OpsetImport& i : imports) m[std::string(canonicalDomain(i.domain))] = i.version;
  return m;
}

/// Runs the conversion on `model` in place (no precheck).
Converter run(Model& model, const std::map<std::string, int64_t>& targets) {
  Converter c;
  c.targets = targets;
  inferShapes(model);
  c.convertGraph(*model.graph, "main", importsOf(model.opsetImports), false);
  for (auto& f : model.functions)
    if (f->body) c.convertGraph(*f->body, "function " + (f->domain.empty() ? f->name : f->domain + "." + f->name),
                                importsOf(f->opsetImports), true);
  return c;
}

/// onnx's checker expands MeanVarianceNormalization's function body with the caller's `axes`
/// and fails from opset 14 on when the node leaves it at its default: state it.
void stateCheckerDefaults(Model& model) {
  auto fix = [](Graph& g) {
    for (const auto& n : g.nodes())
      if (n->opType == "MeanVarianceNormalization" && n->isDomain("") && !n->attr("axes"))
        n->setAttr(Attribute::ofInts("axes", {0, 2, 3}));
  };
  model.graph->forEachGraph(fix);
  for (auto& f : model.functions)
    if (f->body) f->body->forEachGraph(fix);
}

void updateImports(Model& model, const std::map<std::string, int64_t>& targets) {
  auto update = [&](std::vector<OpsetImport>& imports) {
    for (OpsetImport& i : imports) {
      auto t = targets.find(std::string(canonicalDomain(i.domain)));
      if (t != targets.end()) i.version = t->second;
    }
  };
  int64_t sourceOpset = model.opsetVersion("").value_or(0);
  update(model.opsetImports);
  for (auto& f : model.functions) update(f->opsetImports);
  auto t = targets.find("");
  if (t == targets.end() || !model.opsetVersion("")) return;
  int64_t from = model.irVersion;
  int64_t need = irVersionForOpset(t->second);
  if (need >= from || t->second >= sourceOpset) {  // raising (or keeping) the opset never lowers the IR
    model.irVersion = std::max(from, need);
    return;
  }
  // Lowering: the target's IR version, but never below what the model's structure needs
  // (initializers that are not inputs: 4; model-local functions: 8).
  int64_t floor = 3;
  model.graph->forEachGraph([&](Graph& g) {
    for (Value* v : g.initializers())
      if (!v->isGraphInput()) floor = std::max<int64_t>(floor, 4);
  });
  if (!model.functions.empty()) floor = std::max<int64_t>(floor, 8);
  model.irVersion = std::min(from, std::max(need, floor));
}

}  // namespace

OpsetConvertReport convertOpset(Model& model, const OpsetConvertOptions& options) {
  if (!model.graph) fail(ErrorKind::InvalidInput, "the model has no graph");
  auto targets = targetsOf(model, options);
  OpsetConvertReport report;
  report.fromOpset = model.opsetVersion("").value_or(0);
  report.toOpset = targets.count("") ? targets.at("") : report.fromOpset;
  report.irVersionBefore = model.irVersion;
  {
    auto trial = cloneModel(model);
    Converter c = run(*trial, targets);
    if (!c.blocked.empty()) {
      report.blocked = c.blocked;
      report.irVersionAfter = model.irVersion;
      if (!options.computeReach) return report;
      // The reachable range of each blocked node, from trial conversions to every opset.
      auto reach = opsetReach(model, options);
      std::map<std::string, const NodeReach*> byKey;
      for (const NodeReach& r : reach) byKey[r.key] = &r;
      for (NodeReach& b : report.blocked)
        if (auto it = byKey.find(b.key); it != byKey.end()) {
          b.lowest = it->second->lowest;
          b.highest = it->second->highest;
        }
      report.irVersionAfter = model.irVersion;
      return report;
    }
  }
  Converter c = run(model, targets);
  if (!c.blocked.empty())  // the trial on the copy succeeded: the same steps must succeed here
    fail(ErrorKind::Internal, "opset conversion of '{}' failed after a successful trial: {}", c.blocked[0].node,
         c.blocked[0].reason);
  updateImports(model, targets);
  if (report.toOpset != report.fromOpset) stateCheckerDefaults(model);
  report.nodesConverted = c.nodesConverted;
  report.adaptersApplied = c.adaptersApplied;
  report.irVersionAfter = model.irVersion;
  return report;
}

std::vector<NodeReach> opsetReach(const Model& model, const OpsetConvertOptions& options, std::vector<int64_t>* reachable) {
  if (!model.graph) fail(ErrorKind::InvalidInput, "the model has no graph");
  auto targets = targetsOf(model, options);
  int64_t maxOpset = maxKnownOpset("");
  int64_t source = model.opsetVersion("").value_or(0);
  // ok[key][t]: node `key` reaches opset t.
  std::map<std::string, std::vector<char>> ok;
  std::map<std::string, std::string> reasonAtTarget;
  std::vector<NodeReach> nodes;
  if (reachable) reachable->clear();
  for (int64_t t = 1; t <= maxOpset; ++t) {
    auto tt = targets;
    tt[""] = t;
    if (!source) tt.erase("");
    auto trial = cloneModel(model);
    Converter c = run(*trial, tt);
    if (nodes.empty()) nodes = c.all;
    std::set<std::string> bad;
    for (const NodeReach& b : c.blocked) {
      bad.insert(b.key);
      if (t == options.target) reasonAtTarget[b.key] = b.reason;
    }
    for (const NodeReach& r : c.all) {
      auto& v = ok[r.key];
      v.resize(static_cast<size_t>(maxOpset + 1), 0);
      v[static_cast<size_t>(t)] = !bad.count(r.key);
    }
    if (reachable && c.blocked.empty() && source) reachable->push_back(t);
  }
  for (NodeReach& r : nodes) {
    const auto& v = ok[r.key];
    int64_t lo = r.from, hi = r.from;
    while (lo - 1 >= 1 && v[static_cast<size_t>(lo - 1)]) --lo;
    while (hi + 1 <= maxOpset && v[static_cast<size_t>(hi + 1)]) ++hi;
    r.lowest = lo;
    r.highest = hi;
    r.to = options.target ? options.target : r.from;
    if (auto it = reasonAtTarget.find(r.key); it != reasonAtTarget.end()) r.reason = it->second;
  }
  return nodes;
}

// ---------------------------------------------------------------- the pass

namespace {

class ConvertOpsetPass : public Pass {
 public:
  explicit ConvertOpsetPass(int64_t to) : to_(to) {}
  bool run(Graph& g, PassContext& ctx) override {
    if (&g != ctx.model().graph.get()) return false;  // the whole model converts at the main graph
    if (to_ <= 0) fail(ErrorKind::InvalidInput, "convert-opset: give the target opset, convert-opset{{to=N}}");
    int64_t from = ctx.opset("");
    if (from == to_ || from == 0) return false;
    if (!ctx.tryRewrite(fmt::format("convert opset {} -> {}", from, to_))) return false;
    OpsetConvertReport r = convertOpset(ctx.model(), {to_, {}, true});
    if (!r.blocked.empty()) {
      const NodeReach& b = r.blocked[0];
      fail(ErrorKind::Unsupported, "convert-opset{{to={}}}: {} node{} cannot move; first: {} '{}': {} (reaches opsets {} to {})",
           to_, r.blocked.size(), r.blocked.size() == 1 ? "" : "s", b.op, b.node, b.reason, b.lowest, b.highest);
    }
    ctx.count("nodes-converted", r.nodesConverted);
    ctx.count("adapters-applied", r.adaptersApplied);
    return true;
  }

 private:
  int64_t to_;
};

}  // namespace

std::unique_ptr<Pass> createConvertOpsetPass(const PassOptions& o) {
  return std::make_unique<ConvertOpsetPass>(o.getInt("to"));
}

}  // namespace onnxtool
