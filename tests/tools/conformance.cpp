// conformance.cpp: runs the ONNX backend node tests (DIR/<case>/model.onnx with
// test_data_set_*/input_*.pb and output_*.pb) on an executor and compares outputs with the
// suite's tolerance (rtol 1e-3, atol 1e-7 by default). Each case runs in a forked child so a crash
// is a failure of that case, not of the run. Prints one line per failure with its reason, a per-op
// summary, and the final line `N passed, M failed, K skipped`.
//
// usage: conformance DIR [--executor ref] [--filter REGEX] [--expected-failures FILE] [--rtol R]
//                        [--atol A] [--timeout SECONDS] [--quiet] [--optimize LEVEL] [--in-process]
// --in-process runs every case in this process (no timeout; a crash ends the run): for the cuda
// executor, whose GPU context a child would make again for every case.
// --optimize runs the optimizer's preset pipeline -O LEVEL (3: with the fusions) on each model
// before executing it, then saves and reloads the result: optimized models must pass as the
// originals do.
// --convert-opset N converts each model to ai.onnx opset N first (passes/convert_opset.h), saves
// and reloads it (with --write-converted DIR also writes it as DIR/<case>.onnx); a model that
// cannot move fails with "refused: <node>: <reason>" (scripts/convert-sweep counts those apart).
// Exit 0 when every failure is listed in the expected-failures file, 1 otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/executor.h"
#include "exec/value_ops.h"
#include "formats/model_io.h"
#include "formats/value_files.h"
#include "lib/error.h"
#include "passes/convert_opset.h"
#include "passes/pass_manager.h"

using namespace onnxtool;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string dir;
  std::string executor = "ref";
  std::string filter;
  std::string expectedFailures;
  double rtol = 1e-3, atol = 1e-7;
  int timeout = 60;
  bool inProcess = false;  ///< no child per case (no timeout, a crash ends the run): a GPU context made once
  bool quiet = false;
  int optimize = -1;
  int64_t convertOpset = 0;
  std::string writeConverted;
};

/// Runs one case; returns "" on success or the reason of failure.
std::string runCase(const fs::path& caseDir, const Options& o) {
  auto model = loadModel((caseDir / "model.onnx").string());
  std::string bytes;  // outlives the model loaded from it
  if (o.convertOpset > 0) {
    OpsetConvertOptions co;
    co.target = o.convertOpset;
    co.computeReach = false;
    OpsetConvertReport r = convertOpset(*model, co);
    if (!r.blocked.empty())
      return fmt::format("refused: {} '{}': {}", r.blocked[0].op, r.blocked[0].node, r.blocked[0].reason);
    bytes = serializeModel(*model);
    if (!o.writeConverted.empty()) {
      std::ofstream f(fs::path(o.writeConverted) / (caseDir.filename().string() + ".onnx"), std::ios::binary);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    model = loadModelFromBytes(bytes, caseDir.string(), (caseDir / "model.onnx").string() + " (converted)");
  }
  if (o.optimize >= 0) {
    runPipeline(*model, presetPipeline(o.optimize, false));
    // Run what a user gets: the optimized model saved and loaded again, so a rewrite that only
    // holds in memory (a type, a name, an attribute the writer drops) fails here.
    bytes = serializeModel(*model);
    model = loadModelFromBytes(bytes, caseDir.string(), (caseDir / "model.onnx").string() + " (optimized)");
  }
  auto exec = makeExecutor(o.executor);
  if (!exec) return "no executor named " + o.executor;
  PrepareOptions po;
  po.seed = 0;
  auto plan = exec->prepare(*model, po);
  std::vector<fs::path> sets;
  for (auto& e : fs::directory_iterator(caseDir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  const Graph& g = *model->graph;
  for (const fs::path& set : sets) {
    std::map<std::string, RtValue> inputs;
    std::vector<const ValueInfoEntry*> feedable;
    for (const auto& e : g.inputs())
      if (!e.value->initializer()) feedable.push_back(&e);
    for (size_t i = 0;; ++i) {
      fs::path f = set / fmt::format("input_{}.pb", i);
      if (!fs::exists(f)) break;
      if (i >= feedable.size()) return fmt::format("{}: more input files than graph inputs", set.filename().string());
      inputs[feedable[i]->value->name()] = parseValueProto(readFile(f.string()), feedable[i]->type(), f.string());
    }
    std::vector<RtValue> outs = plan->run(inputs);
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      fs::path f = set / fmt::format("output_{}.pb", i);
      if (!fs::exists(f)) continue;
      RtValue want = parseValueProto(readFile(f.string()), g.outputs()[i].type(), f.string());
      CompareResult r = compareValues(outs.at(i), want, o.rtol, o.atol);
      if (!r.ok) return fmt::format("output {} ('{}'): {}", i, g.outputs()[i].value->name(), r.message);
    }
  }
  return {};
}

/// Runs a case in a child process: "" on success, the reason otherwise (crash and timeout too).
std::string runIsolated(const fs::path& caseDir, const Options& o) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  std::fflush(nullptr);  // the child must not inherit (and later repeat) buffered output
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(static_cast<unsigned>(o.timeout));
    std::string r;
    try {
      r = runCase(caseDir, o);
    } catch (const Error& e) {
      r = std::string(e.kind() == ErrorKind::Unsupported ? "unsupported: " : "error: ") + e.what();
    } catch (const std::exception& e) {
      r = std::string("exception: ") + e.what();
    }
    if (r.empty()) r = "\x01ok";
    ssize_t w = ::write(fds[1], r.data(), r.size());
    (void)w;
    ::close(fds[1]);
    ::_exit(0);  // no exit handlers, no flushing of the parent's buffers
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (out == "\x01ok") return {};
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return sig == SIGALRM ? fmt::format("timeout after {} s", o.timeout) : fmt::format("crashed: {}", strsignal(sig));
  }
  if (out.empty()) return fmt::format("child exited with status {}", WEXITSTATUS(status));
  return out;
}

std::map<std::string, std::string> readExpected(const std::string& path) {
  std::map<std::string, std::string> m;
  if (path.empty()) return m;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    auto hash = line.find('#');
    std::string reason = hash == std::string::npos ? "" : line.substr(hash + 1);
    std::string name = line.substr(0, hash);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1 == 0 ? 0 : name.find_last_not_of(" \t") + 1);
    if (!name.empty()) m[name] = reason;
  }
  return m;
}

std::string caseOp(const fs::path& caseDir) {
  try {
    LoadOptions lo;
    lo.loadExternalData = false;
    auto m = loadModel((caseDir / "model.onnx").string(), lo);
    if (m->graph && m->graph->numNodes() > 0) {
      std::string op = m->graph->nodes().front()->opType;
      std::string name = caseDir.filename().string();
      if (name.find("_expanded") != std::string::npos) op += " (expanded)";
      return op;
    }
  } catch (...) {
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "conformance: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--executor") o.executor = next();
    else if (a == "--filter") o.filter = next();
    else if (a == "--expected-failures") o.expectedFailures = next();
    else if (a == "--rtol") o.rtol = std::stod(next());
    else if (a == "--atol") o.atol = std::stod(next());
    else if (a == "--timeout") o.timeout = std::stoi(next());
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--in-process") o.inProcess = true;
    else if (a == "--optimize") o.optimize = std::stoi(next());
    else if (a == "--convert-opset") o.convertOpset = std::stoll(next());
    else if (a == "--write-converted") o.writeConverted = next();
    else if (!a.empty() && a[0] != '-') o.dir = a;
    else {
      std::fprintf(stderr, "usage: conformance DIR [--executor NAME] [--filter REGEX] [--expected-failures FILE] [--rtol R] [--atol A] [--timeout S] [--quiet] [--optimize LEVEL] [--in-process] [--convert-opset N [--write-converted DIR]]\n");
      return 2;
    }
  }
  if (o.dir.empty() || !fs::is_directory(o.dir)) {
    std::fprintf(stderr, "conformance: '%s' is not a directory of ONNX node tests\n", o.dir.c_str());
    return 2;
  }
  std::vector<fs::path> cases;
  for (auto& e : fs::directory_iterator(o.dir))
    if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  std::regex re(o.filter.empty() ? ".*" : o.filter);
  auto expected = readExpected(o.expectedFailures);
  int passed = 0, failed = 0, skipped = 0, unexpected = 0, fixed = 0;
  std::map<std::string, std::pair<int, int>> perOp;  // op -> (passed, failed)
  auto t0 = std::chrono::steady_clock::now();
  for (const fs::path& c : cases) {
    std::string name = c.filename().string();
    if (!std::regex_search(name, re)) continue;
    bool hasData = false;
    for (auto& e : fs::directory_iterator(c))
      if (e.is_directory()) hasData = true;
    if (!hasData) {
      ++skipped;
      continue;
    }
    std::string reason;
    if (o.inProcess) {
      try {
        reason = runCase(c, o);
      } catch (const std::exception& e) {
        reason = e.what();
      }
    } else {
      reason = runIsolated(c, o);
    }
    std::string op = caseOp(c);
    bool listed = expected.count(name) > 0;
    if (reason.empty()) {
      ++passed;
      perOp[op].first++;
      if (listed) {
        ++fixed;
        std::printf("FIXED %s: passes but is listed in the expected failures; remove it from the list\n", name.c_str());
      }
    } else {
      ++failed;
      perOp[op].second++;
      if (!listed) ++unexpected;
      std::string line = reason.substr(0, reason.find('\n'));
      if (!o.quiet || !listed) std::printf("%s %s: %s\n", listed ? "XFAIL" : "FAIL", name.c_str(), line.c_str());
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet) {
    std::printf("\nper op (passed/total):\n");
    for (const auto& [op, pf] : perOp)
      if (pf.second) std::printf("  %-32s %d/%d\n", op.c_str(), pf.first, pf.first + pf.second);
  }
  std::printf("executor %s, %.1f s; %d unexpected failures, %d listed cases now pass\n", o.executor.c_str(), secs, unexpected, fixed);
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return unexpected ? 1 : 0;
}
