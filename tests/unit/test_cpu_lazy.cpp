// test_cpu_lazy.cpp: the cpu executor's lazy kernels (fast kernels made at run time for nodes
// whose input shapes depend on data: NonZero -> Gather -> MatMul/Gemm/Conv/elementwise) against
// the reference executor, shape after shape (the per-node cache and its eviction), at 1 and 2
// threads and from several threads at once; and the kernels detectors reach that way (RoiAlign,
// Expand, ConstantOfShape, ScatterElements, Max/Min) against the reference kernels on random
// inputs. `unit.cpu.avx2` and `unit.cpu.portable` run them again on the lower ISA paths.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "exec/executor.h"
#include "exec/value_ops.h"
#include "formats/onnx_text.h"
#include "lib/ir.h"
#include "ref_test_util.h"

using namespace onnxtool;
using testutil::f32;
using testutil::i64;

namespace {

std::string literal(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{:.4f}", i ? ", " : "", u(rng));
  return s + "}";
}

Tensor randomFloats(std::vector<int64_t> dims, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return f32(std::move(dims), v);
}

Tensor boolMask(const std::vector<bool>& m) {
  std::vector<uint8_t> b(m.begin(), m.end());
  return testutil::tensorOf(DType::Bool, {static_cast<int64_t>(m.size())}, b);
}

/// Runs `plan` and compares every output with the reference executor's; returns the profile.
RunProfile checkAgainstRef(Plan& plan, Plan& ref, const std::map<std::string, RtValue>& feeds, double tol) {
  auto want = ref.run(feeds);
  RunProfile prof;
  auto got = plan.runProfiled(feeds, prof);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CompareResult r = compareValues(got[i], want[i], tol, tol);
    INFO("output " << i << ": " << r.message);
    CHECK(r.ok);
  }
  return prof;
}

/// The kernels of the profile's nodes of op `op`: each must be a lazy fast kernel.
void checkLazyFast(const RunProfile& prof, std::string_view op) {
  bool seen = false;
  for (const NodeRun& n : prof.nodes)
    if (n.opType == op) {
      seen = true;
      INFO(n.node << " ran " << n.kernel);
      CHECK_FALSE(n.fallback);
      CHECK(n.kernel.find("(lazy)") != std::string::npos);
    }
  CHECK(seen);
}

/// Rows picked by a mask (NonZero -> Squeeze -> Gather: a count known only at run time) go
/// through MatMul + bias + Relu, a Gemm with a constant B, a Conv after a Reshape, and Mul.
std::string lazyModel(std::mt19937& rng) {
  return std::string(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[40, 8] x, bool[40] mask) => (float[N, 20] y, float[N, 6] z, float[M, 3, 2, 2] c, float[N, 20] e) <float[8, 20] w = )") +
         literal(160, rng) + ", float[6, 8] w2 = " + literal(48, rng) + ", float[6] b2 = " + literal(6, rng) +
         ", float[3, 2, 1, 1] cw = " + literal(6, rng) + ", float[20] bias = " + literal(20, rng) +
         R"(, int64[1] zero = {0}, int64[4] shp = {-1, 2, 2, 2}> {
  nz = NonZero (mask)
  idx = Squeeze (nz, zero)
  rows = Gather <axis: int = 0> (x, idx)
  m = MatMul (rows, w)
  mb = Add (m, bias)
  y = Relu (mb)
  z = Gemm <transB: int = 1> (rows, w2, b2)
  r4 = Reshape (rows, shp)
  c = Conv (r4, cw)
  e = Mul (y, mb)
}
)";
}

std::map<std::string, RtValue> maskFeeds(const Tensor& x, int64_t count, std::mt19937& rng) {
  std::vector<bool> m(40, false);
  std::vector<int> order(40);
  for (int i = 0; i < 40; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < count; ++i) m[static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
  return {{"x", RtValue::ofTensor(x)}, {"mask", RtValue::ofTensor(boolMask(m))}};
}

}  // namespace

TEST_CASE("cpu lazy kernels: data-dependent row counts run on fast kernels made per shape, as the reference computes",
          "[cpu][lazy]") {
  std::mt19937 rng(5);
  auto m = parseModelText(lazyModel(rng), "lazy.onnxtxt");
  Tensor x = randomFloats({40, 8}, rng);
  auto ref = makeExecutor("ref")->prepare(*m, {});
  for (int threads : {1, 2})
    for (int opt : {0, 3}) {
      PrepareOptions po;
      po.threads = threads;
      po.graphOptLevel = opt;
      auto plan = makeExecutor("cpu")->prepare(*m, po);
      // several counts in a row, then back to earlier ones (kept kernels), 0 rows included
      for (int64_t count : {7, 1, 0, 12, 7, 40, 0, 3, 12}) {
        INFO("threads " << threads << " -O" << opt << " rows " << count);
        RunProfile prof = checkAgainstRef(*plan, *ref, maskFeeds(x, count, rng), 1e-5);
        if (count == 0) continue;  // no element to compute: nothing ran
        for (std::string_view op : {"Gemm", "Conv", "Relu", "Mul", "Gather"}) checkLazyFast(prof, op);
        if (opt == 0) checkLazyFast(prof, "MatMul");  // -O3 makes MatMul + Add one Gemm
      }
    }
}

TEST_CASE("cpu lazy kernels: more shapes than a node keeps evicts the least recently used, results stay right", "[cpu][lazy]") {
  std::mt19937 rng(6);
  auto m = parseModelText(lazyModel(rng), "lazy.onnxtxt");
  Tensor x = randomFloats({40, 8}, rng);
  auto ref = makeExecutor("ref")->prepare(*m, {});
  PrepareOptions po;
  po.threads = 1;
  auto plan = makeExecutor("cpu")->prepare(*m, po);
  for (int round = 0; round < 2; ++round)
    for (int64_t count = 1; count <= 40; ++count) {  // 40 shapes: past the 32 kept
      INFO("round " << round << " rows " << count);
      RunProfile prof = checkAgainstRef(*plan, *ref, maskFeeds(x, count, rng), 1e-5);
      checkLazyFast(prof, "Gemm");
    }
}

TEST_CASE("cpu lazy kernels: concurrent runs of one plan with different row counts", "[cpu][lazy]") {
  std::mt19937 rng(8);
  auto m = parseModelText(lazyModel(rng), "lazy.onnxtxt");
  Tensor x = randomFloats({40, 8}, rng);
  auto ref = makeExecutor("ref")->prepare(*m, {});
  PrepareOptions po;
  po.threads = 2;
  auto plan = makeExecutor("cpu")->prepare(*m, po);
  std::vector<std::map<std::string, RtValue>> feeds;
  std::vector<std::vector<RtValue>> want;
  for (int64_t count : {3, 9, 17, 33, 40}) {
    feeds.push_back(maskFeeds(x, count, rng));
    want.push_back(ref->run(feeds.back()));
  }
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 25; ++i) {
        size_t k = (t + i) % feeds.size();
        auto got = plan->run(feeds[k]);
        for (size_t o = 0; o < got.size(); ++o)
          if (!compareValues(got[o], want[k][o], 1e-5, 1e-5).ok) ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int b : bad) CHECK(b == 0);
}

TEST_CASE("cpu lazy kernels: outputs a caller keeps stay intact while later runs recycle the buffers of dropped ones",
          "[cpu][lazy]") {
  std::mt19937 rng(9);
  auto m = parseModelText(lazyModel(rng), "lazy.onnxtxt");
  auto ref = makeExecutor("ref")->prepare(*m, {});
  PrepareOptions po;
  po.threads = 1;
  auto plan = makeExecutor("cpu")->prepare(*m, po);
  std::vector<std::vector<RtValue>> kept, want;
  for (int i = 0; i < 6; ++i) {
    Tensor x = randomFloats({40, 8}, rng);
    auto feeds = maskFeeds(x, 10 + (i % 2), rng);  // two shapes: the same size classes again and again
    want.push_back(ref->run(feeds));
    auto got = plan->run(feeds);
    if (i % 2 == 0) kept.push_back(std::move(got));  // kept; the odd runs' outputs go back at once
  }
  for (size_t k = 0; k < kept.size(); ++k)
    for (size_t o = 0; o < kept[k].size(); ++o) {
      CompareResult r = compareValues(kept[k][o], want[2 * k][o], 1e-5, 1e-5);
      INFO("run " << 2 * k << " output " << o << ": " << r.message);
      CHECK(r.ok);
    }
}

TEST_CASE("cpu lazy kernels: a shape no fast kernel takes runs on the reference kernel and says so", "[cpu][lazy]") {
  // MatMul of a 1-D operand: the fast kernel declines (createMatMul), the reference computes
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[6] x, bool[6] mask) => (float y) <float[6] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, int64[1] zero = {0}> {
  nz = NonZero (mask)
  idx = Squeeze (nz, zero)
  a = Gather (x, idx)
  b = Gather (w, idx)
  y = MatMul (a, b)
}
)";
  auto m = parseModelText(text, "decline.onnxtxt");
  auto ref = makeExecutor("ref")->prepare(*m, {});
  PrepareOptions po;
  po.threads = 1;
  auto plan = makeExecutor("cpu")->prepare(*m, po);
  std::mt19937 rng(3);
  std::map<std::string, RtValue> feeds = {{"x", RtValue::ofTensor(randomFloats({6}, rng))},
                                          {"mask", RtValue::ofTensor(boolMask({true, false, true, true, false, true}))}};
  RunProfile prof = checkAgainstRef(*plan, *ref, feeds, 1e-6);
  bool seen = false;
  for (const NodeRun& n : prof.nodes)
    if (n.opType == "MatMul") {
      seen = true;
      CHECK(n.fallback);
      CHECK(n.kernel.rfind("ref.", 0) == 0);
    }
  CHECK(seen);
}

// ---- RoiAlign ----

namespace {

struct RoiCase {
  int64_t n = 1, c = 3, h = 8, w = 9, rois = 5, oh = 2, ow = 3, ratio = 2;
  float scale = 1.f;
  std::string mode = "avg";
  std::string coord;  ///< empty: the opset's default
  int64_t opset = 16;
  bool hugeRois = false;  ///< boxes far larger than the map (adaptive ratio: past the sample table)
};

/// A one-node RoiAlign model with static shapes (the fast kernel is made at prepare) and random
/// feeds: boxes partly outside the map, some with flipped corners.
std::unique_ptr<Model> roiModel(const RoiCase& c, std::mt19937& rng, std::map<std::string, RtValue>& feeds) {
  std::string attrs = fmt::format("output_height: int = {}, output_width: int = {}, sampling_ratio: int = {}, spatial_scale: float = {}, mode: string = \"{}\"",
                                  c.oh, c.ow, c.ratio, c.scale, c.mode);
  if (!c.coord.empty()) attrs += fmt::format(", coordinate_transformation_mode: string = \"{}\"", c.coord);
  std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : {}]>
g (float[{}, {}, {}, {}] x, float[{}, 4] rois, int64[{}] bi) => (float[{}, {}, {}, {}] y) {{
  y = RoiAlign <{}> (x, rois, bi)
}}
)",
                                 c.opset, c.n, c.c, c.h, c.w, c.rois, c.rois, c.rois, c.c, c.oh, c.ow, attrs);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> boxes;
  const float extentX = static_cast<float>(c.w) / c.scale, extentY = static_cast<float>(c.h) / c.scale;
  for (int64_t r = 0; r < c.rois; ++r) {
    float x0 = (u(rng) * 1.4f - 0.2f) * extentX, y0 = (u(rng) * 1.4f - 0.2f) * extentY;
    float bw = u(rng) * extentX * (c.hugeRois ? 6.f : 0.8f), bh = u(rng) * extentY * (c.hugeRois ? 6.f : 0.8f);
    float x1 = x0 + bw, y1 = y0 + bh;
    if (u(rng) < 0.15f) std::swap(x0, x1);  // malformed: forced to 1x1 by output_half_pixel
    boxes.insert(boxes.end(), {x0, y0, x1, y1});
  }
  std::vector<int64_t> batch;
  std::uniform_int_distribution<int64_t> ub(0, c.n - 1);
  for (int64_t r = 0; r < c.rois; ++r) batch.push_back(ub(rng));
  feeds = {{"x", RtValue::ofTensor(randomFloats({c.n, c.c, c.h, c.w}, rng, -2.f, 2.f))},
           {"rois", RtValue::ofTensor(f32({c.rois, 4}, boxes))},
           {"bi", RtValue::ofTensor(i64({c.rois}, batch))}};
  return parseModelText(text, "roialign.onnxtxt");
}

/// Checks the case at 1 and 2 threads; returns the kernel that ran (cpu.roialign.f32, or
/// cpu.roialign.f32.nhwc when the maps were copied channels-last first).
std::string checkRoi(const RoiCase& c, std::mt19937& rng) {
  std::map<std::string, RtValue> feeds;
  auto m = roiModel(c, rng, feeds);
  auto ref = makeExecutor("ref")->prepare(*m, {});
  std::string kernel;
  for (int threads : {1, 2}) {
    PrepareOptions po;
    po.threads = threads;
    auto plan = makeExecutor("cpu")->prepare(*m, po);
    RunProfile prof = checkAgainstRef(*plan, *ref, feeds, 1e-4);
    REQUIRE(prof.nodes.size() == 1);
    CHECK(prof.nodes[0].kernel.rfind("cpu.roialign.f32", 0) == 0);
    kernel = prof.nodes[0].kernel;
  }
  return kernel;
}

}  // namespace

TEST_CASE("cpu RoiAlign equals the reference kernel: both modes, both coordinate modes, opsets 10 and 16", "[cpu][roialign]") {
  std::mt19937 rng(11);
  int iter = 0;
  std::set<std::string> kernels;
  for (int64_t opset : {10, 16})
    for (const char* mode : {"avg", "max"})
      for (const char* coord : {"", "half_pixel", "output_half_pixel"})
        for (int64_t rois : {0, 1, 7, 33}) {
          RoiCase c;
          c.opset = opset;
          c.mode = mode;
          c.coord = coord;
          c.rois = rois;
          c.n = 1 + iter % 2;
          c.c = std::vector<int64_t>{1, 3, 17, 16}[static_cast<size_t>(iter % 4)];
          c.h = 5 + iter % 7;
          c.w = 3 + (iter * 5) % 11;
          c.oh = 1 + iter % 4;
          c.ow = 1 + (iter / 2) % 7;
          c.ratio = iter % 3;  // 0: adaptive
          c.scale = std::vector<float>{1.f, 0.5f, 0.0625f}[static_cast<size_t>(iter % 3)];
          ++iter;
          INFO("opset " << opset << " mode " << mode << " coord '" << coord << "' rois " << rois << " C " << c.c << " map " << c.h << "x"
                        << c.w << " out " << c.oh << "x" << c.ow << " ratio " << c.ratio << " scale " << c.scale);
          kernels.insert(checkRoi(c, rng));
        }
  CHECK(kernels == std::set<std::string>{"cpu.roialign.f32", "cpu.roialign.f32.nhwc"});  // both paths ran
}

TEST_CASE("cpu RoiAlign: torchvision's shape (7x7 bins, ratio 2) and boxes past the sample table", "[cpu][roialign]") {
  std::mt19937 rng(12);
  for (const char* mode : {"avg", "max"}) {
    RoiCase c;
    c.mode = mode;
    c.c = 32;
    c.h = c.w = 20;
    c.oh = c.ow = 7;
    c.rois = 40;
    c.scale = 0.0625f;
    CHECK(checkRoi(c, rng) == "cpu.roialign.f32.nhwc");
    c.hugeRois = true;  // adaptive grids of ~30x30 samples per bin: past the sample table
    c.ratio = 0;
    c.scale = 1.f;
    c.rois = 1;
    c.h = c.w = 64;
    CHECK(checkRoi(c, rng) == "cpu.roialign.f32");
    c.rois = 40;  // the same, channels-last
    CHECK(checkRoi(c, rng) == "cpu.roialign.f32.nhwc");
  }
}

TEST_CASE("cpu RoiAlign: a batch index out of range fails the run with a message", "[cpu][roialign]") {
  std::mt19937 rng(13);
  RoiCase c;
  std::map<std::string, RtValue> feeds;
  auto m = roiModel(c, rng, feeds);
  feeds["bi"] = RtValue::ofTensor(i64({5}, {0, 0, 3, 0, 0}));
  PrepareOptions po;
  po.threads = 1;
  auto plan = makeExecutor("cpu")->prepare(*m, po);
  CHECK_THROWS_WITH(plan->run(feeds), Catch::Contains("batch index 3 is out of range"));
}

// ---- Expand, ConstantOfShape, ScatterElements, Max/Min on data-dependent shapes ----

TEST_CASE("cpu Expand, ConstantOfShape, ScatterElements, Max, Min: torchvision's multi-scale RoiAlign merge, lazily",
          "[cpu][lazy][scatter]") {
  // The result of a level's pooling scattered into a zero tensor at the rows of its boxes
  // (the index expanded to the pooled shape), boxes clipped by Max/Min: counts from NonZero.
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[30, 2, 3] pooled, bool[30] mask, float[30, 4] boxes) => (float[N, 2, 3] merged, float[K, 4] clipped, int64[K, 2, 3] ex, float[N, 2, 3] added) <int64[1] zero = {0}, float[1] lo = {0.25}, float[4] hi = {0.5, 0.75, 0.8, 0.9}, int64[2] rest = {1, 2}> {
  nz = NonZero (mask)
  idx = Squeeze (nz, zero)
  sel = Gather <axis: int = 0> (pooled, idx)
  n = Shape (idx)
  one = Constant <value: tensor = int64 {1}> ()
  c0 = Constant <value: tensor = int64[2] {2, 3}> ()
  shape = Concat <axis: int = 0> (n, c0)
  base = ConstantOfShape <value: tensor = float[1] {0.0}> (shape)
  ns = Squeeze (n)
  z0 = Constant <value: tensor = int64 {0}> ()
  pos = Range (z0, ns, one)
  i3 = Unsqueeze (pos, rest)
  ex = Expand (i3, shape)
  rev = Neg (ex)
  rev1 = Sub (rev, one)
  merged = ScatterElements <axis: int = 0> (base, rev1, sel)
  added = ScatterElements <axis: int = 0, reduction: string = "add"> (merged, ex, sel)
  b = Gather <axis: int = 0> (boxes, idx)
  bl = Max (b, lo)
  clipped = Min (bl, hi)
}
)";
  auto m = parseModelText(text, "merge.onnxtxt");
  auto ref = makeExecutor("ref")->prepare(*m, {});
  std::mt19937 rng(17);
  for (int threads : {1, 2}) {
    PrepareOptions po;
    po.threads = threads;
    auto plan = makeExecutor("cpu")->prepare(*m, po);
    for (int64_t count : {5, 0, 30, 11, 5}) {
      std::vector<bool> mask(30, false);
      for (int64_t i = 0; i < count; ++i) mask[static_cast<size_t>((i * 7) % 30)] = true;
      Tensor boxes = randomFloats({30, 4}, rng, 0.f, 1.f);
      if (count) {  // NaN propagates through Max and Min
        std::vector<float> b(120);
        std::memcpy(b.data(), boxes.raw.data(), 480);
        b[0] = std::nanf("");
        boxes = f32({30, 4}, b);
      }
      std::map<std::string, RtValue> feeds = {{"pooled", RtValue::ofTensor(randomFloats({30, 2, 3}, rng))},
                                              {"mask", RtValue::ofTensor(boolMask(mask))},
                                              {"boxes", RtValue::ofTensor(boxes)}};
      INFO("threads " << threads << " rows " << count);
      RunProfile prof = checkAgainstRef(*plan, *ref, feeds, 0);
      if (count == 0) continue;
      for (std::string_view op : {"ConstantOfShape", "Expand", "ScatterElements", "Max", "Min"}) checkLazyFast(prof, op);
    }
  }
}

TEST_CASE("cpu ScatterElements and Expand on static shapes equal the reference: axes, negative indices, reductions, dtypes",
          "[cpu][scatter]") {
  std::mt19937 rng(19);
  for (const char* red : {"none", "add", "mul", "max", "min"})
    for (int64_t axis : {0, 1, 2, -1})
      for (const char* idxType : {"int64", "int32"}) {
        // data [4, 5, 6], indices/updates [3, 4, 5]: each index in [-d, d) of the axis
        const int64_t dims[3] = {4, 5, 6};
        const int64_t ax = axis < 0 ? axis + 3 : axis;
        std::uniform_int_distribution<int64_t> ui(-dims[ax], dims[ax] - 1);
        std::vector<int64_t> idx(60);
        for (auto& v : idx) v = ui(rng);
        std::string idxLit = "{";
        for (size_t i = 0; i < idx.size(); ++i) idxLit += fmt::format("{}{}", i ? ", " : "", idx[i]);
        idxLit += "}";
        std::string attrs = fmt::format("axis: int = {}", axis);
        if (std::string(red) != "none") attrs += fmt::format(", reduction: string = \"{}\"", red);
        std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[4, 5, 6] data, float[3, 4, 5] upd, float[5, 1] e) => (float[4, 5, 6] y, float[2, 5, 6] z) <{}[3, 4, 5] ind = {}, int64[3] s = {{2, 5, 6}}> {{
  y = ScatterElements <{}> (data, ind, upd)
  z = Expand (e, s)
}}
)",
                                       idxType, idxLit, attrs);
        auto m = parseModelText(text, "scatter.onnxtxt");
        std::map<std::string, RtValue> feeds = {{"data", RtValue::ofTensor(randomFloats({4, 5, 6}, rng))},
                                                {"upd", RtValue::ofTensor(randomFloats({3, 4, 5}, rng))},
                                                {"e", RtValue::ofTensor(randomFloats({5, 1}, rng))}};
        auto ref = makeExecutor("ref")->prepare(*m, {});
        PrepareOptions po;
        po.threads = 2;
        po.graphOptLevel = 0;
        auto plan = makeExecutor("cpu")->prepare(*m, po);
        INFO("reduction " << red << " axis " << axis << " " << idxType);
        RunProfile prof = checkAgainstRef(*plan, *ref, feeds, 0);
        for (const NodeRun& n : prof.nodes) {
          INFO(n.node << " ran " << n.kernel);
          CHECK_FALSE(n.fallback);
        }
      }
}

TEST_CASE("cpu ScatterElements along axis 0 with whole-row indices copies rows, and mixed rows still scatter per element",
          "[cpu][scatter]") {
  std::mt19937 rng(23);
  for (bool sameRows : {true, false})
    for (int64_t rows : {1, 3, 6}) {
      // data [6, 3, 4]; indices [rows, 3, 4]: one target row each (negative ones too, a duplicate
      // last), or one element changed so that the row is no longer uniform
      std::vector<int64_t> target = {5, -6, 2, -1, 0, 5};
      std::vector<int64_t> idx;
      for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < 12; ++k) idx.push_back(target[static_cast<size_t>(r)]);
      if (!sameRows) idx[static_cast<size_t>(rows * 12 - 5)] = 1;
      std::string lit = "{";
      for (size_t i = 0; i < idx.size(); ++i) lit += fmt::format("{}{}", i ? ", " : "", idx[i]);
      lit += "}";
      auto m = parseModelText(fmt::format(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[6, 3, 4] data, float[{0}, 3, 4] upd) => (float[6, 3, 4] y) <int64[{0}, 3, 4] ind = {1}> {{
  y = ScatterElements <axis: int = 0> (data, ind, upd)
}}
)",
                                          rows, lit),
                              "rows.onnxtxt");
      std::map<std::string, RtValue> feeds = {{"data", RtValue::ofTensor(randomFloats({6, 3, 4}, rng))},
                                              {"upd", RtValue::ofTensor(randomFloats({rows, 3, 4}, rng))}};
      auto ref = makeExecutor("ref")->prepare(*m, {});
      PrepareOptions po;
      po.threads = 1;
      auto plan = makeExecutor("cpu")->prepare(*m, po);
      INFO("rows " << rows << " uniform " << sameRows);
      RunProfile prof = checkAgainstRef(*plan, *ref, feeds, 0);
      REQUIRE(prof.nodes.size() == 1);
      CHECK_FALSE(prof.nodes[0].fallback);
    }
}
