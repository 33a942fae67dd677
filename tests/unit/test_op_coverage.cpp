// One op, one place: every inference function, reference kernel and cpu kernel is registered
// for an (domain, op, version) that the schema registry holds, so a typo or a version the
// registry never had cannot hide a missing implementation. The hidden test [.op-coverage-table] writes
// the coverage table (scripts/op-coverage prints it).
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "exec/cpu/cpu_kernel.h"
#include "exec/kernel.h"
#include "lib/ops/op_schema.h"
#include "lib/shape_inference.h"

using namespace onnxtool;

namespace {

std::string dom(std::string_view d) { return d.empty() ? "ai.onnx" : std::string(d); }

/// Whether a registration "from version `since` on" starts at a version the registry has: the
/// op exists and `since` is one of its schema versions, or at most its first one (registrations
/// that serve an op's whole history say 1).
bool hasVersion(std::string_view domain, std::string_view op, int since) {
  auto versions = schemaVersions(domain, op);
  if (versions.empty()) return false;
  if (since <= versions.front().sinceVersion) return true;
  for (const OpSchema& s : versions)
    if (s.sinceVersion == since) return true;
  return false;
}

/// cpu_kernels.cpp's "every later version" bound.
constexpr int kEveryLaterVersion = 1 << 20;

}  // namespace

TEST_CASE("inference functions are registered for schema versions the registry has", "[registry][coverage]") {
  registerShapeInference();
  for (const InferFnDef& d : InferRegistry::instance().all()) {
    INFO(fmt::format("inference {}::{} since {}", dom(d.domain), d.opType, d.sinceVersion));
    CHECK(hasVersion(d.domain, d.opType, d.sinceVersion));
  }
}

TEST_CASE("reference kernels are registered for schema versions the registry has", "[registry][coverage]") {
  registerRefKernels();
  for (const KernelDef& k : KernelRegistry::instance().all()) {
    INFO(fmt::format("kernel {} for {}::{} since {}", k.name, dom(k.domain), k.opType, k.sinceVersion));
    CHECK(hasVersion(k.domain, k.opType, k.sinceVersion));
  }
}

TEST_CASE("cpu kernels serve version ranges the registry has", "[registry][coverage]") {
  for (const cpu::CpuKernelDef& k : cpu::cpuKernels()) {
    INFO(fmt::format("cpu kernel {} for {}::{} versions {}..{}", k.name, dom(k.domain), k.opType, k.sinceVersion,
                     k.lastVersion));
    CHECK(hasVersion(k.domain, k.opType, k.sinceVersion));
    CHECK(k.lastVersion >= k.sinceVersion);
    CHECK((k.lastVersion <= maxKnownOpset(k.domain) || k.lastVersion == kEveryLaterVersion));
  }
}

TEST_CASE("write the op coverage table to $ONNXTOOL_OP_COVERAGE", "[.op-coverage-table]") {
  const char* path = std::getenv("ONNXTOOL_OP_COVERAGE");
  REQUIRE(path);
  registerShapeInference();
  registerRefKernels();
  std::ofstream out(path);
  out << "| domain | op | version | inference | reference kernel | cpu kernels |\n|---|---|---|---|---|---|\n";
  size_t rows = 0, inferred = 0, kernels = 0, fast = 0;
  for (const OpSchema& s : allSchemas()) {
    // the version in force from s.sinceVersion: the function/kernel registered for it or before
    const InferFnDef* f = InferRegistry::instance().find(s.domain, s.name, s.sinceVersion);
    const KernelDef* k = KernelRegistry::instance().find("ref", s.domain, s.name, s.sinceVersion);
    std::set<std::string> cpuNames;
    for (const cpu::CpuKernelDef& c : cpu::cpuKernels())
      if (c.domain == s.domain && c.opType == s.name && c.sinceVersion <= s.sinceVersion && s.sinceVersion <= c.lastVersion)
        cpuNames.insert(std::string(c.name));
    std::string cpus;
    for (const auto& n : cpuNames) cpus += (cpus.empty() ? "" : ", ") + n;
    out << fmt::format("| {} | {} | {} | {} | {} | {} |\n", dom(s.domain), s.name, s.sinceVersion, f ? "yes" : "no",
                       k ? std::string(k->name) : "no", cpus.empty() ? "-" : cpus);
    ++rows;
    inferred += f != nullptr;
    kernels += k != nullptr;
    fast += !cpuNames.empty();
  }
  out << fmt::format("\n{} schema versions: {} with inference, {} with a reference kernel, {} with cpu kernels\n", rows,
                     inferred, kernels, fast);
}
