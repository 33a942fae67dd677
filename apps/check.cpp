// check.cpp
#include "apps/common.h"
namespace onnxtool::app {
std::function<int()> addCheck(CLI::App& app) { app.add_subcommand("check", "Validate a model"); return [] { return 0; }; }
}
