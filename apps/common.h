// common.h: what every subcommand shares: exit codes, the subcommand table entry, running a
// subcommand body with errors mapped to exit codes, and --shape parsing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "exec/value.h"
#include "lib/ir.h"

namespace onnxtool::app {

/// Exit codes in the grep tradition (see man/onnxtool.1).
enum ExitCode : int {
  kOk = 0,           ///< success
  kFinding = 1,      ///< a finding: check failed, outputs differ
  kUsage = 2,        ///< usage error, unreadable or invalid input
  kUnsupported = 3,  ///< unsupported op, opset or device
};

/// One subcommand: adds itself to the app and returns the function to run when selected.
struct Subcommand {
  const char* name;
  std::function<std::function<int()>(CLI::App&)> add;
};

/// Runs `body`, turning library errors and exceptions into a one-line message on stderr and an
/// exit code (Error(InvalidInput/Io) -> 2, Error(Unsupported) -> 3, anything else -> 2).
int runGuarded(const std::function<int()>& body);

/// A `--shape NAME=DIMS` value: DIMS like `1x128`, `1,128` or `batch,seq` (a name keeps or names a
/// symbolic dim, `?` leaves it unknown). Throws Error(InvalidInput) on a malformed spec.
struct ShapeSpec {
  std::string name;
  std::vector<std::string> dims;  ///< each a decimal number, a symbol, or "?"
};
ShapeSpec parseShapeSpec(const std::string& spec);

/// Where a subcommand that runs a model gets its inputs: -i files, a test-layout folder, random
/// values, and --shape dims for random inputs (run, optimize --verify; later bench).
struct InputOptions {
  std::vector<std::string> inputs;  ///< -i FILE or NAME=FILE
  std::string inputsDir;            ///< --inputs-dir (input_0.pb, ...)
  bool random = false;              ///< fill inputs not given with random values
  std::optional<uint64_t> seed;
  std::vector<std::string> shapes;  ///< --shape NAME=DIMS (numbers) for random inputs
};
/// Collects inputs into `feeds` (name -> value); throws Error(InvalidInput) naming the input or
/// file on a mismatch. Random inputs use the declared dims, symbolic ones as 1 unless --shape.
void gatherInputs(const onnxtool::Graph& g, const InputOptions& o, std::map<std::string, onnxtool::RtValue>& feeds);
/// The graph inputs a caller must feed (those without an initializer).
std::vector<const onnxtool::ValueInfoEntry*> feedable(const onnxtool::Graph& g);

// One function per subcommand file.
std::function<int()> addInspect(CLI::App& app);
std::function<int()> addCheck(CLI::App& app);
std::function<int()> addConvert(CLI::App& app);
std::function<int()> addRun(CLI::App& app);
std::function<int()> addOptimize(CLI::App& app);

}  // namespace onnxtool::app
