// main.cpp: the onnxtool command line: global flags, then a table of subcommands, one per file.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "apps/common.h"

using namespace onnxtool::app;

static const Subcommand kSubcommands[] = {
    {"inspect", addInspect},
    {"check", addCheck},
    {"convert", addConvert},
    {"optimize", addOptimize},
    {"run", addRun},
    {"quantize", addQuantize},
    {"bench", addBench},
};

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe (| head) shows up as a write error, not a kill
  auto logger = spdlog::stderr_color_mt("onnxtool");
  logger->set_pattern("onnxtool: %^%l%$: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);

  CLI::App app{"onnxtool: inspect, check, convert, optimize, quantize, run and bench ONNX models", "onnxtool"};
  app.set_version_flag("--version", std::string("onnxtool ") + ONNXTOOL_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  int verbosity = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbosity, "More log output on stderr (repeat for more)");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");
  app.footer("Exit codes: 0 success, 1 a finding (check failed, outputs differ), 2 usage error or invalid input, 3 unsupported, 4 internal error.\nSee onnxtool(1) and onnxtool-SUBCOMMAND(1).");

  std::function<int()> selected;
  for (const Subcommand& s : kSubcommands) {
    // each subcommand adds its own CLI::App and returns its body
    auto body = s.add(app);
    app.get_subcommand(s.name)->callback([&selected, body] { selected = body; });
  }
  // The first word that is not a global flag must name a subcommand.
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.starts_with("-")) continue;
    bool known = false;
    std::string names;
    for (const Subcommand& s : kSubcommands) {
      known |= a == s.name;
      names += (names.empty() ? "" : ", ") + std::string(s.name);
    }
    if (!known) {
      printError(fmt::format("unknown subcommand '{}'; the subcommands are: {} (see onnxtool --help)", a, names));
      return kUsage;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line in our format; CLI11's own messages name the option or argument.
    std::string sub;
    for (const CLI::App* s : app.get_subcommands()) sub = s->get_name();
    printError(fmt::format("{} (see onnxtool {}--help)", e.what(), sub.empty() ? "" : sub + " "));
    return kUsage;
  }
  if (quiet) spdlog::set_level(spdlog::level::err);
  else if (verbosity == 1) spdlog::set_level(spdlog::level::info);
  else if (verbosity >= 2) spdlog::set_level(spdlog::level::debug);
  int rc = runGuarded(selected);
  std::fflush(stdout);  // a reader that closed the pipe early (| head) is not an error
  return rc;
}
