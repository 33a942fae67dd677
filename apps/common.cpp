// common.cpp: error-to-exit-code mapping and the options the subcommands share.
#include "apps/common.h"

#include <algorithm>

#include "exec/executor.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "formats/atomic_file.h"
#include "lib/checker.h"
#include "lib/error.h"

namespace onnxtool::app {

void printError(const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "onnxtool: error: {}\n", message);
}

namespace {

/// "filesystem error: cannot create directories: Not a directory [out]" -> "out: cannot create
/// directories: Not a directory".
std::string filesystemMessage(const std::filesystem::filesystem_error& e) {
  std::string what = e.what();
  constexpr std::string_view kPrefix = "filesystem error: ";
  if (what.starts_with(kPrefix)) what = what.substr(kPrefix.size());
  if (auto bracket = what.find(" ["); bracket != std::string::npos) what = what.substr(0, bracket);
  std::string path = e.path1().string();
  return path.empty() ? what : fmt::format("{}: {}", path, what);
}

}  // namespace

int runGuarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::OutputClosed) return kOk;  // `| head` read what it wanted
    if (e.kind() == ErrorKind::Internal) {
      std::fflush(stdout);
      fmt::print(stderr, "onnxtool: internal error: {} (a bug in onnxtool: please report it with the model)\n", e.what());
      return kInternal;
    }
    printError(e.what());
    return e.kind() == ErrorKind::Unsupported ? kUnsupported : kUsage;
  } catch (const std::filesystem::filesystem_error& e) {
    printError(filesystemMessage(e));
    return kUsage;
  } catch (const std::bad_alloc&) {
    printError("out of memory");
    return kUsage;
  } catch (const std::exception& e) {
    printError(e.what());
    return kUsage;
  }
}

CLI::Validator nonNegative() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (v.empty() || !end || *end != '\0' || !std::isfinite(d) || d < 0 || v[0] == '-')
          return fmt::format("must be a number >= 0, got '{}'", v);
        return {};
      },
      "NUMBER>=0");
}

CLI::Option* addShapeOption(CLI::App* sub, std::vector<std::string>& dest) {
  return sub
      ->add_option("--shape", dest,
                   "Set input NAME's dims before anything else (repeatable): integers fix dims, names rename "
                   "symbolic dims everywhere the model uses them, ? leaves one unknown; e.g. input_ids=1x128, "
                   "input=N,3,224,224")
      ->type_name("NAME=DIMS")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void addDeviceOptions(CLI::App* sub, DeviceOptions& dest) {
  auto names = executorNames();  // (not makeExecutor: that would load the CUDA libraries for every command)
  bool cuda = std::find(names.begin(), names.end(), "cuda") != names.end();
  sub->add_option("--device", dest.device,
                  std::string("Device: cpu (default) or cuda (the cuda executor on GPU 0; ") +
                      (cuda ? "exits 3 when no usable GPU is found)" : "exits 3: this build has no CUDA executor)"))
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--precision", dest.precision,
                  "--device cuda: fp32 (default), tf32 (TF32 tensor cores for MatMul/Gemm/Conv), fp16 or bf16 (half-precision "
                  "storage and matrix inputs, float32 accumulation; Softmax, LayerNorm and reductions in float32)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  sub->add_flag("--no-cuda-graph", dest.noCudaGraph,
                "--device cuda: launch every kernel every run instead of replaying the run captured as a CUDA graph");
}

std::string resolveExecutor(const std::string& executor, const DeviceOptions& d) {
  bool cuda = d.device == "cuda" || executor == "cuda";
  if (cuda) {
    if (!executor.empty() && executor != "cuda")
      fail(ErrorKind::InvalidInput, "--device cuda runs on the cuda executor, not --executor {}", executor);
    if (!makeExecutor("cuda"))
      fail(ErrorKind::Unsupported, "--device cuda: this build has no CUDA executor (built without the CUDA toolkit and cuDNN)");
    return "cuda";
  }
  if (d.precision != "fp32") fail(ErrorKind::InvalidInput, "--precision {}: only --device cuda computes in other precisions", d.precision);
  return executor.empty() ? "cpu" : executor;
}

CLI::Option* addAllowNewerOpsetOption(CLI::App* sub, bool& dest) {
  return sub->add_flag("--allow-newer-opset", dest,
                       "Go on (with a warning) when the model's opset is newer than this build knows; its ops are "
                       "then read with the newest schemas known");
}

void requireKnownOpsets(const Model& model, bool allowNewer) {
  std::string newer = newerOpsetThanKnown(model);
  if (newer.empty()) return;
  std::string name = model.path == "-" ? "<stdin>" : model.path;
  if (allowNewer) {
    spdlog::warn("{}: {}; going on as --allow-newer-opset asks", name, newer);
    return;
  }
  fail(ErrorKind::Unsupported, "{}: {} (--allow-newer-opset goes on anyway)", name, newer);
}

ModelValidity validityOf(const Model& model) {
  ModelValidity v;
  v.skipped = !newerOpsetThanKnown(model).empty();  // --allow-newer-opset: schemas are guesses
  if (v.skipped) return v;
  for (const Diagnostic& d : checkModel(model))
    if (d.severity == Diagnostic::Severity::Error && v.errors++ == 0) v.firstError = d.message;
  return v;
}

void requireValidOutput(const Model& out, const ModelValidity& input, std::string_view command) {
  if (input.skipped) return;
  ModelValidity v = validityOf(out);
  if (v.errors == 0) return;
  std::string more = v.errors > 1 ? fmt::format(" (and {} more)", v.errors - 1) : "";
  if (input.errors > 0)
    fail(ErrorKind::InvalidInput, "{}; the model {} made from it is invalid too ({}{}); nothing written", input.firstError,
         command, v.firstError, more);
  fail(ErrorKind::Internal, "{} made an invalid model from a valid one: {}{}; nothing written", command, v.firstError, more);
}

ModelInputOptions modelInputOptions(const InputOptions& o) {
  ModelInputOptions m;
  m.files = o.inputs;
  m.testDataDir = o.inputsDir;
  m.random = o.random;
  m.seed = o.seed.value_or(0);
  return m;
}

}  // namespace onnxtool::app
