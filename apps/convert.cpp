// convert.cpp: `onnxtool convert`: re-save a model, moving weights to or from external data.
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "apps/common.h"
#include "formats/model_io.h"
#include "lib/error.h"

namespace onnxtool::app {

namespace {

struct ConvertOptions {
  std::string input;
  std::string output;
  std::optional<std::string> externalData;  // --external-data [FILE]
  bool externalFlag = false;
  uint64_t sizeThreshold = 1024;
  bool inlineAll = false;
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
  auto model = loadModel(o.input);
  saveModel(*model, o.output, save);
  spdlog::info("wrote {}", o.output);
  return kOk;
}

}  // namespace

std::function<int()> addConvert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* sub = app.add_subcommand("convert", "Re-save a model, moving weights to or from external data");
  sub->add_option("MODEL", o->input, "Input model (.onnx, - for stdin)")->required();
  sub->add_option("-o,--output", o->output, "Output model (- for stdout)")->required();
  sub->add_option("--external-data", o->externalData,
                  "Move tensors of at least --size-threshold bytes to external file FILE (default: OUTPUT.data)")
      ->expected(0, 1);
  sub->add_option("--size-threshold", o->sizeThreshold, "Smallest tensor moved to external data, in bytes (default 1024)");
  sub->add_flag("--inline", o->inlineAll, "Move all external data into the model file (fails over 2 GiB)");
  sub->footer("Exit codes: 0 success, 2 invalid input or usage error.");
  return [o, sub] {
    ConvertOptions opts = *o;
    opts.externalFlag = sub->count("--external-data") > 0;
    return runConvert(opts);
  };
}

}  // namespace onnxtool::app
