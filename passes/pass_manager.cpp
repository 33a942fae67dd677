// pass_manager.cpp: the pass list (from passes.def), pipeline text, presets, and running.
#include "passes/pass_manager.h"

#include <chrono>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "lib/checker.h"
#include "lib/error.h"
#include "lib/shape_inference.h"

namespace onnxtool {

#define ONNXTOOL_PASS(name, Class, summary, options) std::unique_ptr<Pass> create##Class(const PassOptions&);
#include "passes/passes.def"
#undef ONNXTOOL_PASS

const std::vector<PassInfo>& allPasses() {
  static const std::vector<PassInfo> passes = {
#define ONNXTOOL_PASS(name, Class, summary, options) {name, summary, options, &create##Class},
#include "passes/passes.def"
#undef ONNXTOOL_PASS
  };
  return passes;
}

bool isTestPass(const PassInfo& p) { return p.name.starts_with("test-"); }

bool testPassesEnabled() {
  const char* e = std::getenv("ONNXTOOL_TEST_PASSES");
  return e && std::string_view(e) == "1";
}

const PassInfo* findPass(std::string_view name) {
  for (const PassInfo& p : allPasses())
    if (p.name == name) return isTestPass(p) && !testPassesEnabled() ? nullptr : &p;
  return nullptr;
}

// ---------------------------------------------------------------- options

std::string PassOptions::getString(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) fail(ErrorKind::Internal, "pass {}: no option '{}'", pass_, key);
  return it->second;
}

int64_t PassOptions::getInt(const std::string& key) const {
  std::string s = getString(key);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || errno) fail(ErrorKind::InvalidInput, "pass {}: option {}={} is not an integer", pass_, key, s);
  return v;
}

double PassOptions::getDouble(const std::string& key) const {
  std::string s = getString(key);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) fail(ErrorKind::InvalidInput, "pass {}: option {}={} is not a number", pass_, key, s);
  return v;
}

bool PassOptions::getBool(const std::string& key) const {
  std::string s = getString(key);
  if (s == "true" || s == "1") return true;
  if (s == "false" || s == "0") return false;
  fail(ErrorKind::InvalidInput, "pass {}: option {}={} is not true or false", pass_, key, s);
}

static std::map<std::string, std::string> defaultOptions(const PassInfo& info) {
  std::map<std::string, std::string> out;
  std::string_view rest = info.options;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string_view item = rest.substr(0, semi);
    size_t eq = item.find('=');
    out[std::string(item.substr(0, eq))] = eq == std::string_view::npos ? "" : std::string(item.substr(eq + 1));
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
  }
  return out;
}

bool PassContext::tryRewrite(const std::string& what) {
  if (*budget_ == 0) return false;
  if (*budget_ > 0) --*budget_;
  stats_.rewrites++;
  *lastRewrite_ = what;
  spdlog::debug("rewrite: {}", what);
  return true;
}

// ---------------------------------------------------------------- pipeline text

bool Pipeline::operator==(const Pipeline& o) const {
  if (passes.size() != o.passes.size()) return false;
  for (size_t i = 0; i < passes.size(); ++i)
    if (passes[i].name != o.passes[i].name || passes[i].options != o.passes[i].options) return false;
  return true;
}

namespace {

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

struct PipelineParser {
  std::string_view text;
  size_t pos = 0;

  [[noreturn]] void error(const std::string& what) const {
    fail(ErrorKind::InvalidInput, "--passes: {} at column {} of '{}'", what, pos + 1, text);
  }
  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n')) ++pos;
  }
  std::string name() {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && isNameChar(text[pos])) ++pos;
    if (pos == start) error(pos < text.size() ? fmt::format("expected a name, got '{}'", text[pos]) : "expected a name");
    return std::string(text.substr(start, pos - start));
  }
  std::string value() {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && text[pos] != ',' && text[pos] != '}' && text[pos] != ' ') ++pos;
    return std::string(text.substr(start, pos - start));
  }
  Pipeline parse() {
    Pipeline p;
    skipSpace();
    if (pos == text.size()) return p;
    for (;;) {
      size_t at = pos;
      PipelineEntry e;
      e.name = name();
      const PassInfo* info = findPass(e.name);
      if (!info) {
        pos = at;
        error(fmt::format("unknown pass '{}' (see --list-passes)", e.name));
      }
      e.options = defaultOptions(*info);
      skipSpace();
      if (pos < text.size() && text[pos] == '{') {
        ++pos;
        skipSpace();
        while (pos < text.size() && text[pos] != '}') {
          size_t keyAt = pos;
          std::string key = name();
          if (!e.options.count(key)) {
            pos = keyAt;
            error(fmt::format("pass {} has no option '{}'", e.name, key));
          }
          skipSpace();
          if (pos >= text.size() || text[pos] != '=') error("expected '='");
          ++pos;
          e.options[key] = value();
          skipSpace();
          if (pos < text.size() && text[pos] == ',') ++pos;
          skipSpace();
        }
        if (pos >= text.size()) error("expected '}'");
        ++pos;
      }
      p.passes.push_back(std::move(e));
      skipSpace();
      if (pos == text.size()) break;
      if (text[pos] != ',') error(fmt::format("expected ',', got '{}'", text[pos]));
      ++pos;
    }
    return p;
  }
};

}  // namespace

Pipeline parsePipeline(std::string_view text) { return PipelineParser{text}.parse(); }

std::string printPipeline(const Pipeline& p) {
  std::string out;
  for (const PipelineEntry& e : p.passes) {
    if (!out.empty()) out += ',';
    out += e.name;
    if (!e.options.empty()) {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : e.options) {
        if (!first) out += ',';
        first = false;
        out += k + "=" + v;
      }
      out += '}';
    }
  }
  return out;
}

// ---------------------------------------------------------------- presets

// Ordering lives here and only here. Cleanup first (so folding sees fewer nodes), folding, the
// fusions, then cleanup again for what fusions leave behind; the manager repeats to a fixpoint.
static const char* const kCleanup =
    "eliminate-identity,eliminate-default-inputs,eliminate-dead,eliminate-common-subexpressions,"
    "dedupe-initializers,eliminate-unused-initializers";
static const char* const kFolding = "fold-shapes,fold-constants,fold-if,hoist-loop-constants";

Pipeline fusionPipeline() {
  std::string names;
  // Fusions are listed by name when they exist in this build's passes.def, in this order.
  static const char* const kFusions[] = {
      "fuse-reshapes",     "fuse-slices",      "fuse-transposes",  "fuse-pad-into-conv",       "fuse-conv-bn",     "fuse-conv-mul",
      "fuse-conv-add",     "fuse-bn-into-gemm", "fuse-consecutive-mul-add", "fuse-matmul-add", "sink-reshapes", "fuse-gelu",
      "fuse-layer-norm",   "fuse-rms-norm",    "fuse-attention",           "fuse-hard-sigmoid", "fuse-hard-swish",
      "fuse-softmax",
  };
  for (const char* f : kFusions) {
    // A preset naming a pass this build lacks is our bug: say so instead of running less.
    if (!findPass(f)) fail(ErrorKind::Internal, "the fusion preset names pass '{}', which does not exist", f);
    if (!names.empty()) names += ',';
    names += f;
  }
  return parsePipeline(names);
}

Pipeline presetPipeline(int level, bool fuse) {
  if (level < 0 || level > 3) fail(ErrorKind::InvalidInput, "optimization level -O{} does not exist (0..3)", level);
  Pipeline p;
  auto append = [&p](const Pipeline& q) { p.passes.insert(p.passes.end(), q.passes.begin(), q.passes.end()); };
  if (level == 0 && !fuse) return p;
  append(parsePipeline(kCleanup));
  if (level >= 2) append(parsePipeline(kFolding));
  if (level >= 3 || fuse) {
    // Fusions start by inlining exporters' module functions, so patterns across calls are seen
    // (-O3, and --fuse which is -O3's fusions on top of any level).
    append(parsePipeline("inline-functions"));
    append(fusionPipeline());
    append(parsePipeline(kCleanup));
  }
  return p;
}

// ---------------------------------------------------------------- running

namespace {

bool runOnGraphs(Pass& pass, Graph& g, PassContext& ctx, PassStats& stats) {
  stats.runs++;
  bool changed = pass.run(g, ctx);
  // Subgraphs after their parent: the parent's rewrite may have removed the node holding them.
  std::vector<Graph*> subs;
  for (const auto& n : g.nodes())
    for (Graph* s : n->subgraphs()) subs.push_back(s);
  for (Graph* s : subs) changed |= runOnGraphs(pass, *s, ctx, stats);
  return changed;
}

bool hasRefAttributes(const Graph& g) {
  for (const auto& n : g.nodes()) {
    for (const Attribute& a : n->attributes)
      if (!a.refAttrName.empty()) return true;
    for (Graph* sg : n->subgraphs())
      if (hasRefAttributes(*sg)) return true;
  }
  return false;
}

/// Bodies of model-local functions the passes may rewrite like graphs: bodies without attribute
/// references (a pass reading an attribute would see the default, not the caller's value) whose
/// opset imports agree with the model's (passes check versions through the model's imports).
/// Shape-reading passes find their values untyped (inference restores the body's own types after
/// each call), so they leave these bodies alone; the rest applies as in any graph.
std::vector<Function*> optimizableFunctions(Model& model) {
  std::vector<Function*> out;
  for (const auto& f : model.functions) {
    if (!f->body || hasRefAttributes(*f->body)) continue;
    bool agree = true;
    for (const OpsetImport& o : f->opsetImports) {
      auto v = model.opsetVersion(o.domain);
      agree &= !v || *v == o.version;
    }
    if (agree) out.push_back(f.get());
  }
  return out;
}

/// Function bodies hold no initializers (FunctionProto has none): what a pass made one becomes a
/// Constant node of the same name.
void initializersToConstants(Graph& body) {
  std::vector<Value*> inits = body.initializers();
  for (Value* v : inits) {
    std::string name = v->name();
    Tensor t = *v->initializer();
    Node* c = body.addNode("Constant", {}, {body.uniqueName(name + "__const")}, "",
                           body.nodes().empty() ? nullptr : body.nodes().front().get());
    t.name.clear();
    Attribute a;
    a.name = "value";
    a.type = AttrType::Tensor;
    a.t = std::make_shared<Tensor>(std::move(t));
    c->setAttr(std::move(a));
    c->output(0)->setType(v->type());
    v->replaceAllUsesWith(c->output(0));
    body.removeInitializer(v);
    body.renameValue(c->output(0), name);
  }
}

void verifyModel(Model& model, const std::string& passName) {
  std::string links = model.graph->verifyLinks();
  if (!links.empty()) fail(ErrorKind::Internal, "--verify-each: after pass {}: {}", passName, links);
  // checkModel includes shape inference's findings (type errors, incompatible shapes).
  for (const Diagnostic& d : checkModel(model))
    if (d.severity == Diagnostic::Severity::Error)
      fail(ErrorKind::Internal, "--verify-each: after pass {}: {}", passName, d.message);
}

}  // namespace

size_t promoteIr3Initializers(Model& model) {
  if (model.irVersion >= 4 || !model.graph) return 0;
  model.irVersion = 4;
  std::vector<Value*> weights;
  for (const ValueInfoEntry& e : model.graph->inputs())
    if (e.value && (e.value->initializer() || e.value->sparseInitializer())) weights.push_back(e.value);
  for (Value* v : weights) model.graph->removeInput(v);
  return weights.size();
}

PassRunReport runPipeline(Model& model, const Pipeline& pipeline, const PassManagerOptions& options) {
  PassRunReport report;
  struct Instance {
    std::string name;
    std::unique_ptr<Pass> pass;
    size_t statsIndex;
    uint64_t quietAt = UINT64_MAX;  ///< `changes` when this pass last ran and changed nothing
  };
  std::vector<Instance> instances;
  for (const PipelineEntry& e : pipeline.passes) {
    bool disabled = false;
    for (const std::string& d : options.disabled) disabled |= d == e.name;
    if (disabled) continue;
    const PassInfo* info = findPass(e.name);
    if (!info) fail(ErrorKind::InvalidInput, "unknown pass '{}' (see --list-passes)", e.name);
    size_t si = report.stats.size();
    for (size_t i = 0; i < report.stats.size(); ++i)
      if (report.stats[i].first == e.name) si = i;
    if (si == report.stats.size()) report.stats.push_back({e.name, {}});
    instances.push_back({e.name, info->create(PassOptions(e.name, e.options)), si});
  }
  for (const std::string& d : options.disabled)
    if (!findPass(d)) fail(ErrorKind::InvalidInput, "--disable {}: no such pass (see --list-passes)", d);

  int64_t budget = options.bisect;
  std::string lastRewrite;
  // Declared types are claims: inferring first replaces them by what the graph computes before
  // any pass reads a type, and corrects the declarations that the computation contradicts.
  bool shapesFresh = false;
  auto timedInfer = [&] {
    auto t0 = std::chrono::steady_clock::now();
    auto r = inferShapes(model);
    report.inferSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++report.inferRuns;
    return r;
  };
  if (!instances.empty()) {
    report.declarationConflicts = timedInfer().declarationConflicts;
    shapesFresh = true;
  }
  // Passes are deterministic functions of the model: one that changed nothing when it last ran
  // has nothing to do while no pass has changed the model since (the last iteration of a
  // fixpoint then runs only the passes before the last change's pass).
  uint64_t changes = 0;
  for (int iter = 0; iter < std::max(1, options.maxIterations); ++iter) {
    report.iterations = iter + 1;
    bool changedAny = false;
    for (Instance& inst : instances) {
      PassStats& stats = report.stats[inst.statsIndex].second;
      if (inst.quietAt == changes) continue;
      if (inst.pass->needsShapes() && !shapesFresh) {
        timedInfer();
        shapesFresh = true;
      }
      PassContext ctx(model, stats, &budget, &lastRewrite);
      auto t0 = std::chrono::steady_clock::now();
      int64_t before = stats.rewrites;
      bool changed = runOnGraphs(*inst.pass, *model.graph, ctx, stats);
      for (Function* f : optimizableFunctions(model)) {
        bool fc = runOnGraphs(*inst.pass, *f->body, ctx, stats);
        if (fc) initializersToConstants(*f->body);
        changed |= fc;
      }
      stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (stats.rewrites != before) report.lastRewritePass = inst.name;
      if (!changed) {
        inst.quietAt = changes;
        if (ctx.shapesInferred()) shapesFresh = true;  // its inference saw the model as it is now
      }
      if (changed) {
        ++changes;
        changedAny = true;
        shapesFresh = false;
        if (options.verifyEach) verifyModel(model, inst.name);
        if (options.afterPass) options.afterPass(inst.name, iter, model);
      }
      if (budget == 0) {
        report.bisectStopped = true;
        break;
      }
    }
    if (!changedAny || report.bisectStopped) break;
  }
  for (const auto& [name, s] : report.stats) report.rewrites += s.rewrites;
  report.lastRewrite = lastRewrite;
  report.shapesFresh = shapesFresh;
  return report;
}

}  // namespace onnxtool
