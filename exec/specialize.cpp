// specialize.cpp: see specialize.h.
#include "exec/specialize.h"

#include <chrono>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "lib/input_shapes.h"
#include "lib/ir_clone.h"
#include "lib/shape_inference.h"
#include "passes/pass_manager.h"
#include "passes/upcast_half.h"

namespace onnxtool {

namespace {

/// A float16 model is computed in float32: the fast kernels are float32; the interface stays
/// float16 through Casts at the inputs and outputs.
void upcastHalf(Model& m, std::string_view who) {
  HalfTypes types;
  types.bfloat16 = false;  // per-op bfloat16 rounding matters (passes/upcast_half.h)
  if (!hasHalfPrecision(m, types)) return;
  inferShapes(m);  // the outputs' element types, which stay half precision
  UpcastHalfReport r = upcastHalfToFloat(m, types);
  if (r.skipped) spdlog::debug("{}: half precision kept: a graph output's type is unknown", who);
  spdlog::debug("{}: half precision computed in float32 ({} tensors, {} value types, {} Casts at the interface)", who,
                r.initializers, r.values, r.casts);
}

std::vector<std::string> names(const std::vector<ValueInfoEntry>& es) {
  std::vector<std::string> out;
  for (const auto& e : es) out.push_back(e.value ? e.value->name() : std::string());
  return out;
}

}  // namespace

std::unique_ptr<Model> specializeModel(const Model& original, const std::map<std::string, std::vector<int64_t>>& inputDims,
                                       int level, std::string_view who, std::string* timing, bool* typesFresh) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::unique_ptr<Model> m = cloneModel(original);
  upcastHalf(*m, who);
  auto t1 = Clock::now();
  if (timing) *timing = fmt::format("clone {:.1f} ms", ms(t0, t1));
  if (level <= 0) return m;
  try {
    std::vector<InputShapeSpec> specs;
    for (const auto& [name, dims] : inputDims) {
      InputShapeSpec sp;
      sp.text = name;
      sp.name = name;
      for (int64_t d : dims) sp.dims.push_back(std::to_string(d));
      specs.push_back(std::move(sp));
    }
    applyInputShapes(*m, specs);
    PassRunReport report = runPipeline(*m, presetPipeline(level, false));
    if (timing) *timing += fmt::format(", -O{} {:.1f} ms", level, ms(t1, Clock::now()));
    if (spdlog::should_log(spdlog::level::debug)) {
      std::string passes;
      for (const auto& [name, st] : report.stats)
        if (st.seconds >= 0.0005) passes += fmt::format(" {} {:.1f}", name, st.seconds * 1e3);
      spdlog::debug("{}: -O{}: {} iterations, inference {}x {:.1f} ms, passes (ms):{}", who, level, report.iterations,
                    report.inferRuns, report.inferSeconds * 1e3, passes);
    }
    if (names(m->graph->inputs()) == names(original.graph->inputs()) &&
        names(m->graph->outputs()) == names(original.graph->outputs())) {
      if (typesFresh) *typesFresh = report.shapesFresh;
      return m;
    }
    spdlog::debug("{}: -O{} changed the model's interface; running the graph as written", who, level);
  } catch (const std::exception& e) {
    spdlog::debug("{}: -O{} failed ({}); running the graph as written", who, level, e.what());
  }
  m = cloneModel(original);
  upcastHalf(*m, who);
  return m;
}

}  // namespace onnxtool
