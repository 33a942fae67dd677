// common.h: what every subcommand shares: exit codes, the subcommand table entry, running a
// subcommand body with errors mapped to exit codes, and the options several subcommands take in
// one spelling (--shape, the input options, --allow-newer-opset). The work itself is in the
// library: lib/input_shapes.h (--shape), formats/model_inputs.h (inputs), formats/model_io.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "exec/value.h"
#include "formats/model_inputs.h"
#include "lib/ir.h"

namespace onnxtool::app {

/// Exit codes in the grep tradition (see man/onnxtool.1).
enum ExitCode : int {
  kOk = 0,           ///< success
  kFinding = 1,      ///< a finding: check failed, outputs differ
  kUsage = 2,        ///< usage error, unreadable or invalid input
  kUnsupported = 3,  ///< unsupported op, opset or device
  kInternal = 4,     ///< a broken invariant of ours (a bug to report), e.g. a --verify-each failure
};

/// One subcommand: adds itself to the app and returns the function to run when selected.
struct Subcommand {
  const char* name;
  std::function<std::function<int()>(CLI::App&)> add;
};

/// Runs `body`, turning library errors and exceptions into one line on stderr,
/// `onnxtool: error: <what>: <why>`, and an exit code (Error(InvalidInput/Io) -> 2,
/// Error(Unsupported) -> 3, Error(Internal) -> 4 as `onnxtool: internal error: ...`, a closed
/// standard output -> 0 quietly, anything else -> 2).
int runGuarded(const std::function<int()>& body);

/// Prints `onnxtool: error: MESSAGE` on stderr (also under -q).
void printError(const std::string& message);

/// Validates a number option: a finite number >= 0 ("--rtol: must be a number >= 0, got -1").
CLI::Validator nonNegative();

/// Adds `--shape NAME=DIMS` (repeatable) with the one help text every subcommand shares.
CLI::Option* addShapeOption(CLI::App* sub, std::vector<std::string>& dest);

/// Where `run` and `bench` execute: --device, --precision, --no-cuda-graph.
struct DeviceOptions {
  std::string device = "cpu";
  std::string precision = "fp32";
  bool noCudaGraph = false;
};
/// Adds --device cpu|cuda, --precision and --no-cuda-graph with the help every subcommand shares.
void addDeviceOptions(CLI::App* sub, DeviceOptions& dest);
/// The executor to use for --executor `executor` (as given, or empty when not given) and these
/// device options: `cuda` for --device cuda. Throws Error(Unsupported) (exit 3) when this build
/// has no CUDA executor, Error(InvalidInput) for a combination that makes no sense
/// (--precision fp16 on the CPU, --device cuda --executor ref).
std::string resolveExecutor(const std::string& executor, const DeviceOptions& d);

/// Adds --allow-newer-opset; requireKnownOpsets() then warns instead of failing.
CLI::Option* addAllowNewerOpsetOption(CLI::App* sub, bool& dest);
/// Executing or rewriting a model whose opset is newer than the registry: Error(Unsupported)
/// naming the domain and version (exit 3), or a warning when `allowNewer`.
void requireKnownOpsets(const Model& model, bool allowNewer);

/// The checker's verdict on a model: its errors (not warnings), the first one's message.
struct ModelValidity {
  size_t errors = 0;
  std::string firstError;
  bool skipped = false;  ///< the model imports opsets newer than this build knows
};
ModelValidity validityOf(const Model& model);

/// For commands that write a model they made (optimize, convert --opset, quantize): checks `out`
/// before it is written, so that no invalid model leaves onnxtool. An invalid result throws
/// Error(InvalidInput) (exit 2) naming the input's first error when the input was invalid too
/// (`input`, from validityOf before the work), else Error(Internal) (exit 4: our bug). An input
/// may be invalid and its result valid (convert --opset 21 of a deprecated GroupNormalization-18).
/// Skipped for models importing opsets newer than this build knows (--allow-newer-opset).
void requireValidOutput(const Model& out, const ModelValidity& input, std::string_view command);

/// Where a subcommand that runs a model gets its inputs: -i files, a test-layout folder, random
/// values (run, optimize --verify; later bench).
struct InputOptions {
  std::vector<std::string> inputs;  ///< -i FILE or NAME=FILE
  std::string inputsDir;            ///< --inputs-dir (input_0.pb, ...)
  bool random = false;              ///< fill inputs not given with random values
  std::optional<uint64_t> seed;
};
/// The library's ModelInputOptions for these options.
ModelInputOptions modelInputOptions(const InputOptions& o);

/// Converts `model` to ai.onnx `opset` (0: leave) and the `DOMAIN=V` entries of `domains`
/// (convert --opset, optimize --opset). Returns kOk, or kFinding after printing every node that
/// cannot move; the model is unchanged then. With `asJson` the report (converted or not) is also
/// one JSON document on stdout (stderr when `jsonToStderr`, for -o -). Throws Error(Unsupported)
/// for a target beyond the registry.
int convertModelOpset(Model& model, int64_t opset, const std::vector<std::string>& domains, bool asJson,
                      bool jsonToStderr = false);

// One function per subcommand file.
std::function<int()> addInspect(CLI::App& app);
std::function<int()> addCheck(CLI::App& app);
std::function<int()> addConvert(CLI::App& app);
std::function<int()> addRun(CLI::App& app);
std::function<int()> addOptimize(CLI::App& app);
std::function<int()> addQuantize(CLI::App& app);
std::function<int()> addBench(CLI::App& app);

}  // namespace onnxtool::app
