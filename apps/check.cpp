// check.cpp: `onnxtool check`: validate models and report every problem, one line each
// (or one JSON document per model with --json). The checking itself is lib/checker.h.
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/common.h"
#include "formats/model_io.h"
#include "lib/checker.h"
#include "lib/error.h"
#include "lib/input_shapes.h"

namespace onnxtool::app {

namespace {

using json = nlohmann::ordered_json;

constexpr int kCheckSchemaVersion = 1;

struct CheckOptions {
  std::vector<std::string> inputs;
  bool json = false;
  std::vector<std::string> inputShapes;  // --shape NAME=DIMS
  bool strict = false;                   // --strict: warnings count as errors
};

json diagnosticsJson(const std::vector<Diagnostic>& ds, Diagnostic::Severity sev) {
  json a = json::array();
  for (const Diagnostic& d : ds) {
    if (d.severity != sev) continue;
    a.push_back({{"message", d.message},
                 {"code", d.code},
                 {"node", d.nodeName.empty() ? json(nullptr) : json(d.nodeName)},
                 {"op_type", d.opType.empty() ? json(nullptr) : json(d.opType)}});
  }
  return a;
}

void printLine(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
}

bool quietSummary() { return spdlog::get_level() >= spdlog::level::err; }

/// Checks one model; returns its exit code. Unreadable input is reported here (not thrown) so
/// that the remaining models are still checked.
int checkOne(const std::string& path, bool asJson, const std::vector<InputShapeSpec>& specs, bool strict) {
  std::unique_ptr<Model> model;
  std::string loadError;
  try {
    LoadOptions lo;
    lo.loadExternalData = true;
    lo.strictExternalData = false;
    model = loadModel(path, lo);
    applyInputShapes(*model, specs);
  } catch (const Error& e) {
    model.reset();
    loadError = e.what();
  } catch (const std::bad_alloc&) {
    loadError = fmt::format("{}: out of memory while loading", path);
  }
  if (!model) {
    if (asJson) {
      printLine(json{{"schema_version", kCheckSchemaVersion},
                     {"model", path == "-" ? "<stdin>" : path},
                     {"file", path == "-" ? "<stdin>" : path},
                     {"readable", false},
                     {"valid", false},
                     {"errors", json::array({{{"message", loadError}, {"code", "load"}, {"node", nullptr}, {"op_type", nullptr}}})},
                     {"warnings", json::array()}}
                    .dump(-1, ' ', false, json::error_handler_t::replace));
    }
    spdlog::error("{}", loadError);
    return kUsage;
  }
  std::vector<Diagnostic> ds = checkModel(*model);
  size_t errors = 0, warnings = 0;
  for (const Diagnostic& d : ds) (d.severity == Diagnostic::Severity::Error ? errors : warnings)++;
  if (asJson) {
    printLine(json{{"schema_version", kCheckSchemaVersion},
                   {"model", model->path},
                   {"file", model->path},
                   {"readable", true},
                   {"valid", errors == 0 && (!strict || warnings == 0)},
                   {"errors", diagnosticsJson(ds, Diagnostic::Severity::Error)},
                   {"warnings", diagnosticsJson(ds, Diagnostic::Severity::Warning)}}
                  .dump(-1, ' ', false, json::error_handler_t::replace));
  } else {
    for (const Diagnostic& d : ds) printLine(d.message);
  }
  if (!quietSummary()) {
    std::string counts = errors ? fmt::format("{} error{}", errors, errors == 1 ? "" : "s") : "valid";
    if (warnings) counts += fmt::format(", {} warning{}", warnings, warnings == 1 ? "" : "s");
    std::fflush(stdout);
    fmt::print(stderr, "{}: {}\n", model->path, counts);
  }
  return errors || (strict && warnings) ? kFinding : kOk;
}

int runCheck(const CheckOptions& o) {
  int worst = kOk;
  auto specs = parseInputShapes(o.inputShapes);
  for (const std::string& path : o.inputs) {
    int rc = checkOne(path, o.json, specs, o.strict);
    if (rc > worst) worst = rc;
  }
  return worst;
}

}  // namespace

std::function<int()> addCheck(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* sub = app.add_subcommand("check", "Validate models: report every problem found, one line each");
  sub->add_option("MODEL", o->inputs, "Model(s) to check (.onnx, - for stdin); each is checked on its own")->required();
  sub->add_flag("--json", o->json,
                "One JSON document per model on stdout, one line each: "
                "{schema_version, model, file, readable, valid, errors[], warnings[]}");
  addShapeOption(sub, o->inputShapes);
  sub->add_flag("--strict", o->strict, "Warnings count as errors (exit 1): declared shapes that contradict the computed ones, unverifiable ops, ...");
  sub->footer(
      "Each finding is one line on stdout:\n"
      "  FILE: node 'NAME' (OP): what is wrong, what was expected\n"
      "(model, graph, subgraph, initializer or function in place of the node when no node is concerned).\n"
      "A summary line, `FILE: valid` or `FILE: N errors, M warnings`, goes to stderr (not with -q).\n"
      "Nodes of unknown domains and declared shapes that contradict the computed ones are warnings,\n"
      "not errors (--strict makes them errors).\n"
      "Exit codes: 0 all models valid (warnings allowed), 1 a model is invalid, 2 a model is\n"
      "unreadable (missing, empty, truncated, not ONNX) or usage error; with several models the\n"
      "worst. See onnxtool-check(1).");
  return [o] { return runCheck(*o); };
}

}  // namespace onnxtool::app
