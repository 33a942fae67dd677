// convert.cpp: `onnxtool convert`: re-save a model, moving weights to or from external data.
#include <optional>
#include <vector>
#include <string>

#include <spdlog/spdlog.h>

#include "apps/common.h"
#include <filesystem>

#include "formats/atomic_file.h"
#include "formats/model_io.h"
#include "lib/error.h"
#include "lib/input_shapes.h"
#include "lib/shape_inference.h"

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
};

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
  CLI::App* sub = app.add_subcommand("convert", "Re-save a model, moving weights to or from external data");
  sub->add_option("MODEL", o->input, "Input model (.onnx, .onnxtxt for the textual syntax, - for stdin)")->required();
  sub->add_option("-o,--output", o->output, "Output model (- for stdout)")->required();
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
  sub->footer("Exit codes: 0 success, 2 invalid input or usage error, 3 a model the textual syntax cannot hold (sparse tensors).");
  return [o, sub] {
    ConvertOptions opts = *o;
    opts.externalFlag = sub->count("--external-data") > 0;
    return runConvert(opts);
  };
}

}  // namespace onnxtool::app
