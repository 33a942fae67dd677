// convert.cpp: `onnxtool convert`: re-save a model, moving weights to or from external data, and
// convert it to another opset (--opset, the library's passes/convert_opset.h).
#include <map>
#include <optional>
#include <vector>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/common.h"
#include <filesystem>

#include "formats/atomic_file.h"
#include "formats/model_io.h"
#include "lib/error.h"
#include "lib/input_shapes.h"
#include "lib/shape_inference.h"
#include "passes/convert_opset.h"

namespace onnxtool::app {

namespace {

struct ConvertOptions {
  std::string input;
  std::string output;
  std::optional<std::string> externalData;  // --external-data [FILE]
  bool externalFlag = false;
  uint64_t sizeThreshold = 1024;
  bool inlineAll = false;
  bool inferShapes = false;              // --infer-shapes
  std::vector<std::string> inputShapes;  // --shape NAME=D1,D2,...
  std::string to;                        // --to onnx|text; "" infers from the output name
  int64_t opset = 0;                     // --opset N
  std::vector<std::string> domains;      // --domain ai.onnx.ml=V
  bool dryRun = false;
  bool json = false;
};

using json = nlohmann::ordered_json;

json reachJson(const NodeReach& r) {
  json j{{"graph", r.graph}, {"node", r.node}, {"op", r.op}, {"domain", r.domain.empty() ? "ai.onnx" : r.domain},
         {"from", r.from}, {"to", r.to}, {"lowest", r.lowest}, {"highest", r.highest}};
  j["reason"] = r.reason.empty() ? json(nullptr) : json(r.reason);
  return j;
}

std::string reachLine(const NodeReach& r) {
  std::string where = r.graph == "main" ? "" : fmt::format(" in {}", r.graph);
  return fmt::format("node '{}' ({}){}: cannot move from opset {} to {}: {}; it reaches opsets {} to {}", r.node, r.op,
                     where, r.from, r.to, r.reason, r.lowest, r.highest);
}

OpsetConvertOptions parseDomains(int64_t opset, const std::vector<std::string>& domains) {
  OpsetConvertOptions c;
  c.target = opset;
  for (const std::string& d : domains) {
    auto eq = d.find('=');
    int64_t v = 0;
    bool okNum = eq != std::string::npos && eq + 1 < d.size();
    if (okNum) {
      try {
        size_t used = 0;
        v = std::stoll(d.substr(eq + 1), &used);
        okNum = used == d.size() - eq - 1;
      } catch (const std::exception&) {
        okNum = false;
      }
    }
    if (!okNum) fail(ErrorKind::InvalidInput, "--domain {}: expected DOMAIN=VERSION (ai.onnx.ml=3)", d);
    c.domains[d.substr(0, eq)] = v;
  }
  return c;
}

}  // namespace

int convertModelOpset(Model& model, int64_t opset, const std::vector<std::string>& domains, bool asJson,
                      bool jsonToStderr) {
  OpsetConvertOptions c = parseDomains(opset, domains);
  OpsetConvertReport r = convertOpset(model, c);
  if (!r.blocked.empty()) {
    if (asJson) {
      json nodes = json::array();
      for (const NodeReach& b : r.blocked) nodes.push_back(reachJson(b));
      json doc{{"schema_version", 1}, {"model", model.path}, {"from_opset", r.fromOpset}, {"to_opset", r.toOpset},
               {"converted", false}, {"blocked", nodes}};
      std::fputs((doc.dump(2) + "\n").c_str(), jsonToStderr ? stderr : stdout);
    }
    for (const NodeReach& b : r.blocked) printError(reachLine(b));
    printError(fmt::format("{}: cannot convert to opset {}: {} node{} cannot move; nothing was written", model.path,
                           r.toOpset, r.blocked.size(), r.blocked.size() == 1 ? "" : "s"));
    return kFinding;
  }
  spdlog::info("converted ai.onnx opset {} -> {}: {} nodes changed ({} adapter steps), IR version {} -> {}", r.fromOpset,
               r.toOpset, r.nodesConverted, r.adaptersApplied, r.irVersionBefore, r.irVersionAfter);
  if (asJson) {
    json doc{{"schema_version", 1},          {"model", model.path},
             {"from_opset", r.fromOpset},    {"to_opset", r.toOpset},
             {"converted", true},            {"nodes_converted", r.nodesConverted},
             {"adapter_steps", r.adaptersApplied}, {"ir_version_before", r.irVersionBefore},
             {"ir_version_after", r.irVersionAfter}, {"blocked", json::array()}};
    // stdout carries the model when -o -; the report then goes to stderr.
    std::fputs((doc.dump(2) + "\n").c_str(), jsonToStderr ? stderr : stdout);
  }
  return kOk;
}

namespace {

int runConvert(const ConvertOptions& o) {
  SaveOptions save;
  if (o.inlineAll && o.externalFlag)
    fail(ErrorKind::InvalidInput, "--inline and --external-data exclude each other");
  if (o.inlineAll) save.mode = SaveOptions::ExternalMode::Inline;
  if (o.externalFlag) {
    save.mode = SaveOptions::ExternalMode::Externalize;
    if (o.externalData) save.externalFile = *o.externalData;
  }
  save.sizeThreshold = o.sizeThreshold;
  bool text = o.to == "text" || (o.to.empty() && isTextModelPath(o.output));
  if (text && (o.externalFlag || o.inlineAll))
    fail(ErrorKind::InvalidInput, "--external-data and --inline apply to binary output; text output holds every tensor inline");
  auto specs = parseInputShapes(o.inputShapes);
  if (o.externalFlag && !text) {
    // The data file is named relative to the output's folder (default OUTPUT.data).
    std::filesystem::path out(o.output);
    std::string data = o.externalData && !o.externalData->empty() ? *o.externalData : out.filename().string() + ".data";
    requireDistinctOutputs({{"-o", o.output}, {"--external-data", (out.parent_path() / data).string()}});
  }
  auto model = loadModel(o.input);
  applyInputShapes(*model, specs);
  if (o.dryRun) {
    if (o.opset == 0 && o.domains.empty()) fail(ErrorKind::InvalidInput, "--dry-run needs --opset N (or --domain)");
    OpsetConvertOptions c = parseDomains(o.opset, o.domains);
    std::vector<int64_t> reachable;
    std::vector<NodeReach> nodes = opsetReach(*model, c, &reachable);
    bool ok = true;
    for (const NodeReach& n : nodes) ok &= n.reason.empty();
    if (o.json) {
      json arr = json::array();
      for (const NodeReach& n : nodes) arr.push_back(reachJson(n));
      json doc{{"schema_version", 1}, {"model", o.input}, {"from_opset", model->opsetVersion("").value_or(0)},
               {"to_opset", o.opset}, {"convertible", ok}, {"reachable_opsets", reachable}, {"nodes", arr}};
      std::fputs((doc.dump(2) + "\n").c_str(), stdout);
    } else {
      std::string out = fmt::format("model {} (ai.onnx opset {}) reaches opsets: {}\n", o.input,
                                    model->opsetVersion("").value_or(0), fmt::join(reachable, " "));
      for (const NodeReach& n : nodes)
        out += fmt::format("  {:<28} {:<20} {:>2} -> [{}, {}]{}{}\n", n.graph == "main" ? n.node : n.graph + ": " + n.node,
                           n.op, n.from, n.lowest, n.highest, n.reason.empty() ? "" : "  ", n.reason);
      out += ok ? fmt::format("opset {}: every node can move\n", o.opset)
                : fmt::format("opset {}: some nodes cannot move (reasons above)\n", o.opset);
      std::fputs(out.c_str(), stdout);
    }
    return ok ? kOk : kFinding;
  }
  if (o.output.empty()) fail(ErrorKind::InvalidInput, "convert: -o OUTPUT is required");
  if (o.opset != 0 || !o.domains.empty()) {
    // A format conversion writes the model as it is; an opset conversion writes a model it made.
    const ModelValidity inputValidity = validityOf(*model);
    if (int rc = convertModelOpset(*model, o.opset, o.domains, o.json, o.output == "-"); rc != kOk) return rc;
    requireValidOutput(*model, inputValidity, "convert");
  }
  if (o.inferShapes) {
    InferReport report = inferShapes(*model);
    for (const std::string& e : report.errors) spdlog::warn("{}", e);
    writeInferredValueInfos(*model);
    spdlog::info("inferred shapes: {} of {} values fully known", report.valuesFullyKnown, report.valuesTotal);
  }
  if (text) saveModelText(*model, o.output);
  else saveModel(*model, o.output, save);
  spdlog::info("wrote {}", o.output);
  return kOk;
}

}  // namespace

std::function<int()> addConvert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* sub = app.add_subcommand("convert", "Re-save a model: another opset, external data, textual syntax");
  sub->add_option("MODEL", o->input, "Input model (.onnx, .onnxtxt for the textual syntax, - for stdin)")->required();
  sub->add_option("-o,--output", o->output, "Output model (- for stdout; not with --dry-run)");
  sub->add_option("--external-data", o->externalData,
                  "Move tensors of at least --size-threshold bytes to external file FILE (default: OUTPUT.data)")
      ->expected(0, 1);
  sub->add_option("--size-threshold", o->sizeThreshold, "Smallest tensor moved to external data, in bytes (default 1024)")
      ->check(nonNegative());
  sub->add_flag("--inline", o->inlineAll, "Move all external data into the model file (fails over 2 GiB)");
  sub->add_flag("--infer-shapes", o->inferShapes,
                "Infer types and shapes of every value and store them as value_info");
  addShapeOption(sub, o->inputShapes);
  sub->add_option("--to", o->to, "Output format: onnx (binary protobuf) or text (ONNX textual syntax); default: text when OUTPUT ends in .onnxtxt, else onnx")
      ->check(CLI::IsMember({"onnx", "text"}));
  sub->add_option("--opset", o->opset,
                  "Convert the default domain (every graph, subgraph and function) to ai.onnx opset N, up or down; "
                  "nodes that cannot move are reported and nothing is written")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  sub->add_option("--domain", o->domains, "Also convert DOMAIN to VERSION (ai.onnx.ml=V; repeatable)")
      ->type_name("DOMAIN=V")->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("--dry-run", o->dryRun,
                "With --opset: print every node's lowest and highest reachable opset and the opsets the whole model "
                "reaches; write nothing (exit 1 when the target is not reachable)");
  sub->add_flag("--json", o->json, "With --opset/--dry-run: print the conversion report as JSON to stdout");
  sub->footer("Exit codes: 0 success, 1 a node cannot move to the --opset target (nothing written), 2 invalid input or usage error, 3 a model the textual syntax cannot hold (sparse tensors), or an opset beyond this build's registry.");
  return [o, sub] {
    ConvertOptions opts = *o;
    opts.externalFlag = sub->count("--external-data") > 0;
    return runConvert(opts);
  };
}

}  // namespace onnxtool::app
