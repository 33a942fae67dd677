// test_cpu_conv.cpp: the cpu executor's convolution kernels (packed GEMM, depthwise, Winograd,
// ConvTranspose), Resize, and the Conv + Add/Sum + Relu/Clip fusion against the reference
// executor (Winograd against a double-precision sum), on randomised shapes around
// the micro-kernels' tile sizes and K blocks (strides, pads, dilations, groups, depthwise, empty
// tensors, NaN/Inf), at 1 and 2 threads; plus each ISA's GEMM micro-kernel directly against a
// scalar product. CTest runs the [cpu] cases once more per lower ISA path (ONNXTOOL_ISA).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>

#include "exec/cpu/conv_microkernels.h"
#include "exec/cpu/isa.h"
#include "exec/cpu/kernels_nchwc.h"
#include "exec/executor.h"
#include "exec/value_ops.h"
#include "lib/ir.h"
#include "ref_test_util.h"

using namespace onnxtool;
using testutil::f32;

namespace {

/// The cpu executor's own kernels and fusions on the graph as written (no optimizer preset).
PrepareOptions rawGraph() {
  PrepareOptions po;
  po.graphOptLevel = 0;
  return po;
}

std::vector<float> randomFloats(size_t n, std::mt19937& rng, bool specials = false) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  if (specials && n >= 4) {
    std::uniform_int_distribution<size_t> pick(0, n - 1);
    v[pick(rng)] = testutil::kNan;
    v[pick(rng)] = testutil::kInf;
    v[pick(rng)] = -testutil::kInf;
  }
  return v;
}

Tensor randomTensor(std::vector<int64_t> dims, std::mt19937& rng, bool specials = false) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return f32(std::move(dims), randomFloats(static_cast<size_t>(n), rng, specials));
}

/// A model builder: graph inputs, initializers and nodes by value name.
struct Builder {
  std::unique_ptr<Model> m = std::make_unique<Model>();
  std::map<std::string, Value*> vals;
  std::map<std::string, RtValue> feeds;
  explicit Builder(int64_t opset) {
    m->irVersion = 8;
    m->opsetImports = {{"", opset, {}}};
    m->graph = std::make_unique<Graph>();
  }
  void input(const std::string& name, Tensor t) {
    Value* v = m->graph->createValue(name);
    TypeInfo ti;
    ti.kind = TypeInfo::Kind::Tensor;
    ti.elemType = t.dataType;
    ti.shape.hasRank = true;
    for (int64_t d : t.dims) ti.shape.dims.push_back(Dim::ofValue(d));
    v->setType(ti);
    m->graph->addInput(v);
    vals[name] = v;
    feeds[name] = RtValue::ofTensor(std::move(t));
  }
  void constant(const std::string& name, Tensor t) {
    t.name = name;
    vals[name] = m->graph->addInitializer(std::move(t));
  }
  Node* node(const std::string& op, const std::vector<std::string>& ins, const std::string& out, std::vector<Attribute> attrs = {}) {
    std::vector<Value*> in;
    for (const auto& s : ins) in.push_back(s.empty() ? nullptr : vals.at(s));
    Node* n = m->graph->addNode(op, in, {out});
    n->name = out + "_node";
    for (auto& a : attrs) n->setAttr(std::move(a));
    vals[out] = n->output(0);
    return n;
  }
  void output(const std::string& name) { m->graph->addOutput(vals.at(name)); }
};

/// Runs on ref and on cpu at 1 and 2 threads: outputs equal within rtol/atol (NaN equals NaN),
/// the same kernels and fusions at both (at 2 the plan creates kernels side by side on its pool);
/// returns the kernel names that ran on cpu (at 1 thread).
std::vector<std::string> checkAgainstRef(const Model& m, const std::map<std::string, RtValue>& feeds, double rtol = 1e-4,
                                         double atol = 1e-4) {
  auto want = makeExecutor("ref")->prepare(m, {})->run(feeds);
  std::vector<std::string> kernels;
  for (int threads : {1, 2}) {
    PrepareOptions po;
    po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
    po.threads = threads;
    auto plan = makeExecutor("cpu")->prepare(m, po);
    RunProfile prof;
    auto got = plan->runProfiled(feeds, prof);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CompareResult r = compareValues(got[i], want[i], rtol, atol);
      INFO("threads " << threads << ": " << r.message);
      CHECK(r.ok);
    }
    std::vector<std::string> ran;
    for (const auto& n : prof.nodes) ran.push_back(n.kernel + (n.fallback ? " (fallback)" : ""));
    if (threads == 1) kernels = ran;
    else CHECK(ran == kernels);
  }
  return kernels;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "; ";
  return s;
}

bool ranOn(const std::vector<std::string>& kernels, const std::string& prefix) {
  for (const auto& k : kernels)
    if (k.rfind(prefix, 0) == 0 && k.find("fallback") == std::string::npos) return true;
  return false;
}

/// Sets an environment variable for one scope (restored after).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group;
};

Builder convModel(const ConvCase& k, std::mt19937& rng, bool bias, bool specials) {
  Builder b(13);
  b.input("x", randomTensor({k.n, k.c, k.h, k.w}, rng, specials));
  b.constant("w", randomTensor({k.m, k.c / k.group, k.kh, k.kw}, rng));
  if (bias) b.constant("b", randomTensor({k.m}, rng));
  b.node("Conv", {"x", "w", bias ? "b" : ""}, "y",
         {testutil::ints("kernel_shape", {k.kh, k.kw}), testutil::ints("strides", {k.sh, k.sw}),
          testutil::ints("dilations", {k.dh, k.dw}), testutil::ints("pads", {k.pt, k.pl, k.pb, k.pr}),
          testutil::one("group", k.group)});
  b.output("y");
  return b;
}

}  // namespace

TEST_CASE("cpu packed and depthwise Conv match the reference kernel", "[cpu][conv]") {
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");  // the packed GEMM on 3x3 stride-1 shapes too
  std::mt19937 rng(21);
  // Hand-picked: tiles around MR (4/6/12) and NR (16/32), K across the 320 block, 1x1, strided,
  // dilated, asymmetric pads, groups, depthwise, empty batch.
  const ConvCase fixed[] = {
      {1, 8, 8, 4, 12, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 1x1, 32 pixels, M = 12
      {1, 7, 5, 7, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 35 pixels, M = 13
      {2, 40, 6, 6, 25, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // K = 360: two K blocks, accumulate
      {1, 3, 23, 21, 16, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},  // stem-like 7x7 stride 2
      {1, 6, 9, 10, 6, 3, 3, 1, 2, 2, 1, 2, 0, 1, 3, 2},    // asymmetric pads, strides, dilations, groups
      {1, 16, 12, 11, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16},  // depthwise
      {2, 10, 9, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 10},    // depthwise stride 2
      {1, 5, 8, 13, 5, 5, 3, 1, 1, 2, 2, 4, 2, 0, 1, 5},      // depthwise dilated, asymmetric
      {1, 4, 3, 3, 4, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 4},       // depthwise: pads wider than the image
      {0, 4, 5, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},       // empty batch
      {1, 12, 4, 4, 48, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // 16 pixels: one partial NR tile
      {1, 3, 9, 75, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},      // stride 2, rows of 38: the vector gather and its tail
      {1, 3, 9, 75, 8, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1},      // stride 3 on wide rows
      {1, 4, 7, 70, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4},      // depthwise stride 2, rows of 35
      {1, 4, 7, 70, 4, 3, 5, 1, 1, 1, 2, 1, 4, 1, 3, 4},      // depthwise stride 1, rows of 70, dilated
      {1, 4, 7, 40, 4, 3, 3, 1, 3, 1, 1, 1, 1, 1, 1, 4},      // depthwise stride 3 (the scalar plane)
      // depthwise with enough work for two threads and rows for each (the output-row split)
      {1, 48, 28, 28, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 48},    // MobileNet's 28x28
      {1, 48, 57, 56, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 48},    // stride 2, odd height: row blocks across the split
      {1, 40, 30, 21, 40, 5, 5, 1, 1, 2, 2, 4, 3, 4, 5, 40},    // dilated 5x5, asymmetric pads
      {1, 64, 19, 19, 64, 3, 3, 1, 1, 1, 1, 0, 0, 2, 2, 64},    // rows not a multiple of the 4-row blocks
  };
  for (size_t i = 0; i < std::size(fixed); ++i) {
    const ConvCase& k = fixed[i];
    Builder b = convModel(k, rng, i % 2 == 0, i % 3 == 0);
    INFO("fixed case " << i);
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    CHECK((ranOn(kernels, "cpu.conv.f32.gemm") || ranOn(kernels, "cpu.conv.f32.depthwise")));
    if (k.group == k.c && k.group == k.m) CHECK(ranOn(kernels, "cpu.conv.f32.depthwise"));
  }
  int ran = 0;
  for (int iter = 0; iter < 80 && ran < 40; ++iter) {
    std::uniform_int_distribution<int64_t> chans(1, 20), spatial(1, 14), kern(1, 4), str(1, 2), pad(0, 2);
    ConvCase k{};
    k.group = iter % 4 == 0 ? 3 : 1;
    k.n = iter % 5 == 0 ? 2 : 1;
    k.c = chans(rng) * k.group;
    k.m = iter % 6 == 1 ? k.c : chans(rng) * k.group;
    if (iter % 7 == 2) k.group = k.m = k.c;  // depthwise
    k.h = spatial(rng), k.w = spatial(rng), k.kh = kern(rng), k.kw = kern(rng);
    k.sh = str(rng), k.sw = str(rng), k.dh = iter % 3 == 0 ? 2 : 1, k.dw = iter % 5 == 0 ? 2 : 1;
    k.pt = pad(rng), k.pl = pad(rng), k.pb = pad(rng), k.pr = pad(rng);
    int64_t oh = (k.h + k.pt + k.pb - k.dh * (k.kh - 1) - 1) / k.sh + 1, ow = (k.w + k.pl + k.pr - k.dw * (k.kw - 1) - 1) / k.sw + 1;
    if (oh <= 0 || ow <= 0) continue;
    Builder b = convModel(k, rng, iter % 2 == 1, iter % 4 == 3);
    INFO("random n" << k.n << " c" << k.c << " " << k.h << "x" << k.w << " m" << k.m << " k" << k.kh << "x" << k.kw << " s" << k.sh
                    << "," << k.sw << " d" << k.dh << "," << k.dw << " p" << k.pt << "," << k.pl << "," << k.pb << "," << k.pr
                    << " g" << k.group);
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    CHECK((ranOn(kernels, "cpu.conv.f32.gemm") || ranOn(kernels, "cpu.conv.f32.depthwise")));
    ++ran;
  }
  CHECK(ran >= 30);
}

TEST_CASE("cpu Conv reads weights at unaligned addresses (as a model file maps them) on every path", "[cpu][conv]") {
  // Protobuf puts raw_data at any offset: the packed and Winograd kernels read such weights in
  // place, the others from an aligned copy. One byte off: the weights as floats are unaligned.
  std::mt19937 rng(77);
  const ConvCase cases[] = {
      {1, 16, 14, 14, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 1x1, channel-major
      {1, 64, 7, 7, 72, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // 1x1 on a small map: pixel-major
      {1, 13, 12, 12, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // 3x3 stride 1 (Winograd when it applies)
      {1, 5, 11, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},      // strided, K not a multiple of 4
      {1, 16, 10, 10, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16},  // depthwise
  };
  for (const char* wino : {"never", "always"}) {
    ScopedEnv w("ONNXTOOL_WINOGRAD", wino);
    for (size_t i = 0; i < std::size(cases); ++i) {
      Builder b = convModel(cases[i], rng, true, false);
      Tensor& t = *b.m->graph->find("w")->initializer();
      auto bytes = std::make_shared<std::vector<uint8_t>>(t.raw.size() + 1);
      std::memcpy(bytes->data() + 1, t.raw.data(), t.raw.size());
      t.raw = Buffer::borrow(bytes, bytes->data() + 1, t.raw.size());
      REQUIRE(reinterpret_cast<uintptr_t>(t.raw.data()) % alignof(float) != 0);
      INFO("case " << i << ", ONNXTOOL_WINOGRAD=" << wino);
      auto kernels = checkAgainstRef(*b.m, b.feeds);
      INFO(joined(kernels));
      CHECK((ranOn(kernels, "cpu.conv.f32.gemm") || ranOn(kernels, "cpu.conv.f32.depthwise") || ranOn(kernels, "cpu.conv.f32.winograd")));
      if (i == 2 && std::string(wino) == "always") CHECK(ranOn(kernels, "cpu.conv.f32.winograd"));
    }
  }
}

TEST_CASE("cpu Conv large enough to split across threads matches the reference kernel", "[cpu][conv]") {
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  std::mt19937 rng(28);
  const ConvCase cases[] = {
      {1, 32, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // threads split the output pixels
      {1, 64, 7, 7, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // few pixels: threads split the weight panels
      {1, 96, 12, 12, 200, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 144 pixels, more output channels: the panels too
      {1, 96, 24, 24, 200, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},   // the same 1x1/2 (a ResNet downsample)
      {2, 64, 32, 32, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 64},   // depthwise: threads split the planes (2*64*16*16*9 taps)
  };
  for (const ConvCase& k : cases) {
    Builder b = convModel(k, rng, true, true);
    INFO("m" << k.m << " c" << k.c << " " << k.h << "x" << k.w << " g" << k.group);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
    INFO(joined(kernels));
    CHECK((ranOn(kernels, "cpu.conv.f32.gemm") || ranOn(kernels, "cpu.conv.f32.depthwise")));
  }
}

namespace {

/// Conv [+ BatchNormalization] [+ Add of a residual input] [+ activation] on a random model:
/// the chain the executor fuses into one packed convolution.
struct EpilogueCase {
  bool bias, bn, residual;
  std::string act;  ///< "", "relu", "clip", "hardswish", "silu"
};

Builder fusedConvModel(const ConvCase& k, const EpilogueCase& e, std::mt19937& rng) {
  Builder b(17);
  b.input("x", randomTensor({k.n, k.c, k.h, k.w}, rng, true));
  b.constant("w", randomTensor({k.m, k.c / k.group, k.kh, k.kw}, rng));
  if (e.bias) b.constant("b", randomTensor({k.m}, rng));
  b.node("Conv", {"x", "w", e.bias ? "b" : ""}, "c",
         {testutil::ints("kernel_shape", {k.kh, k.kw}), testutil::ints("strides", {k.sh, k.sw}),
          testutil::ints("dilations", {k.dh, k.dw}), testutil::ints("pads", {k.pt, k.pl, k.pb, k.pr}),
          testutil::one("group", k.group)});
  std::string cur = "c";
  if (e.bn) {
    auto variances = randomFloats(static_cast<size_t>(k.m), rng);
    for (float& v : variances) v = std::fabs(v) + 0.1f;
    b.constant("bn_s", randomTensor({k.m}, rng));
    b.constant("bn_b", randomTensor({k.m}, rng));
    b.constant("bn_m", randomTensor({k.m}, rng));
    b.constant("bn_v", f32({k.m}, variances));
    b.node("BatchNormalization", {cur, "bn_s", "bn_b", "bn_m", "bn_v"}, "n", {Attribute::ofFloat("epsilon", 1e-3f)});
    cur = "n";
  }
  if (e.residual) {
    const int64_t oh = (k.h + k.pt + k.pb - k.dh * (k.kh - 1) - 1) / k.sh + 1, ow = (k.w + k.pl + k.pr - k.dw * (k.kw - 1) - 1) / k.sw + 1;
    b.input("r", randomTensor({k.n, k.m, oh, ow}, rng));
    b.node("Add", {cur, "r"}, "a");
    cur = "a";
  }
  if (e.act == "relu") {
    b.node("Relu", {cur}, "y");
  } else if (e.act == "clip") {
    b.constant("lo", f32({}, {-0.5f}));
    b.constant("hi", f32({}, {1.5f}));
    b.node("Clip", {cur, "lo", "hi"}, "y");
  } else if (e.act == "hardswish") {
    b.node("HardSwish", {cur}, "y");
  } else if (e.act == "silu") {
    b.node("Sigmoid", {cur}, "s");
    b.node("Mul", {cur, "s"}, "y");
  }
  b.output(e.act.empty() ? cur : "y");
  return b;
}

/// A depthwise ConvCase (c = m = group) of output size oh x ow for a kernel, stride, dilation
/// and pads (top, left, bottom, right): the input size that gives it.
ConvCase depthwiseCase(int64_t n, int64_t c, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t s, int64_t d, int64_t pt,
                       int64_t pl, int64_t pb, int64_t pr) {
  const int64_t h = (oh - 1) * s + d * (kh - 1) + 1 - pt - pb, w = (ow - 1) * s + d * (kw - 1) + 1 - pl - pr;
  return {n, c, h, w, c, kh, kw, s, s, d, d, pt, pl, pb, pr, c};
}

std::string describe(const ConvCase& k) {
  std::ostringstream os;
  os << "n" << k.n << " c" << k.c << " " << k.h << "x" << k.w << " k" << k.kh << "x" << k.kw << " s" << k.sh << "," << k.sw << " d" << k.dh
     << "," << k.dw << " p" << k.pt << "," << k.pl << "," << k.pb << "," << k.pr;
  return os.str();
}

}  // namespace

// Both layouts of the packed GEMM kernel, forced with ONNXTOOL_CONV_LAYOUT: channel-major
// (rows = output channels) and pixel-major (rows = output pixels, the product transposed into
// NCHW with the epilogue), on small output maps (1x1, 2x3, 7x7, 14x14), many and odd channel
// counts (weight panel tails), K across several blocks, strides, pads, dilations, groups, batch 2,
// and every fused epilogue, at 1 and 2 threads (CTest runs it again per lower ISA path).
TEST_CASE("cpu packed Conv in both layouts matches the reference kernel on small maps and every epilogue", "[cpu][conv]") {
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  std::mt19937 rng(61);
  const ConvCase cases[] = {
      {1, 96, 7, 7, 130, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // 7x7: 49 pixels (14 + 14 + 14 + 7), K = 864, M tail
      {1, 64, 14, 14, 47, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 14x14 pointwise, odd M
      {1, 130, 1, 1, 33, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // 1x1 map: one pixel
      {2, 40, 2, 3, 65, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // 2x3 map, batch 2
      {1, 48, 14, 14, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},    // stride 2 to 7x7
      {1, 64, 13, 13, 96, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},    // 1x1 stride 2 (a downsample) to 7x7
      {1, 32, 9, 8, 40, 3, 3, 1, 1, 2, 2, 2, 1, 2, 3, 1},     // dilated, asymmetric pads
      {2, 24, 7, 7, 36, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},     // groups
      {1, 17, 15, 14, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 210 pixels, few channels
      {1, 3, 20, 20, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},     // a stem: 3 input channels, stride 2
      {1, 320, 7, 7, 45, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // K = 320 in one block, M tail
      {1, 2, 100, 90, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // a large map: several pixel blocks, rows gathered per output row
      {1, 600, 1, 1, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // one pixel (squeeze-excitation), K across blocks
      {1, 24, 3, 3, 50, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1},      // one output pixel from a 3x3 window
  };
  const EpilogueCase epilogues[] = {
      {false, false, false, ""},          {true, false, false, "relu"},      {true, true, false, "clip"},
      {false, true, true, "relu"},        {true, false, true, ""},           {true, true, false, "hardswish"},
      {false, true, false, "silu"},       {true, false, true, "clip"},
  };
  for (const char* layout : {"channel", "pixel"}) {
    ScopedEnv forced("ONNXTOOL_CONV_LAYOUT", layout);
    for (size_t ci = 0; ci < std::size(cases); ++ci) {
      const ConvCase& k = cases[ci];
      for (size_t ei = 0; ei < std::size(epilogues); ++ei) {
        if ((ci + ei) % 2) continue;  // every case with half of the epilogues, every epilogue with half of the cases
        Builder b = fusedConvModel(k, epilogues[ei], rng);
        INFO("layout " << layout << " case " << ci << " epilogue " << ei);
        auto kernels = checkAgainstRef(*b.m, b.feeds);
        INFO(joined(kernels));
        REQUIRE(kernels.size() == 1);  // the whole chain fused into the convolution
        const bool px = kernels[0].rfind("cpu.conv.f32.gemm.px.", 0) == 0;
        CHECK(ranOn(kernels, "cpu.conv.f32.gemm."));
        CHECK(px == (std::string(layout) == "pixel"));
      }
    }
  }
}

TEST_CASE("cpu packed Conv splits either layout across threads and matches the reference kernel", "[cpu][conv]") {
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  std::mt19937 rng(62);
  const ConvCase cases[] = {
      {1, 256, 7, 7, 200, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // threads split the channel panels; K across blocks
      {1, 512, 14, 14, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // two channel panels: threads split the pixels
      {1, 160, 14, 14, 480, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // a 14x14 pointwise expansion
      {2, 96, 7, 7, 320, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // batch 2
      {1, 200, 28, 14, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // K in one block, threads split the pixels
  };
  for (const char* layout : {"channel", "pixel", "auto"}) {
    ScopedEnv forced("ONNXTOOL_CONV_LAYOUT", layout);
    for (size_t ci = 0; ci < std::size(cases); ++ci) {
      Builder b = fusedConvModel(cases[ci], {true, true, ci % 2 == 0, ci % 2 ? "relu" : "hardswish"}, rng);
      INFO("layout " << layout << " case " << ci);
      auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 1);
      CHECK(ranOn(kernels, "cpu.conv.f32.gemm."));
    }
  }
}

// The implicit GEMM (forced with ONNXTOOL_CONV_LAYOUT=implicit): the input split into
// zero-padded phase planes, each row of the column matrix a run of one plane. Stems (at most
// 4 input channels, 16 or more output columns) read the planes in place on AVX-512, tiles of
// output pixels wrapping from one output row to the next (TileEpilogue::bSkip) at every offset
// of a row end in a tile (widths 16 to 70); the rest, and the other ISA paths, pack the runs
// over the "extended" output rows and copy the valid columns out (straight into Y where the
// rows have no extra columns: 1x1 stride 2). Strides 1 to 3, dilations, asymmetric and zero
// pads, K across several blocks, groups, batch 2, weight panel tails and every epilogue, at 1
// and 2 threads (CTest runs it again per lower ISA path).
TEST_CASE("cpu implicit-GEMM Conv over phase-split planes matches the reference kernel", "[cpu][conv]") {
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  ScopedEnv implicit("ONNXTOOL_CONV_LAYOUT", "implicit");
  std::mt19937 rng(64);
  const ConvCase cases[] = {
      {1, 3, 40, 36, 20, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},     // a 7x7/2 stem, 18 columns: rows end inside both halves
      {1, 4, 30, 65, 13, 7, 7, 2, 2, 1, 1, 3, 3, 2, 3, 1},     // K = 196: two K blocks, asymmetric pads, 33 columns
      {1, 3, 37, 37, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},     // a 3x3/2 stem, 19 columns
      {2, 1, 20, 64, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // stride 1, 64 columns (rows end on tile edges), batch 2
      {1, 3, 20, 70, 12, 5, 5, 3, 3, 1, 1, 2, 2, 2, 2, 1},     // stride 3 (9 phases), 24 columns
      {1, 2, 30, 40, 9, 3, 3, 2, 2, 2, 2, 2, 1, 2, 3, 1},      // dilated: taps of one phase only per row
      {1, 3, 17, 33, 16, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1},     // no pads, 16 columns
      {1, 3, 20, 20, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},     // 10 columns: packed
      {1, 24, 15, 17, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},    // many channels: packed planes
      {1, 64, 11, 13, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},    // K = 576 across blocks
      {1, 40, 13, 13, 30, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},    // 1x1 stride 2: straight into Y
      {2, 24, 12, 12, 36, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},    // groups, batch 2
      {1, 16, 9, 30, 130, 3, 3, 1, 2, 1, 1, 1, 0, 1, 2, 1},    // strides 1 x 2, M tail
      {1, 8, 34, 34, 24, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 1},     // 2x2/2 (patchify): one phase per tap
  };
  const EpilogueCase epilogues[] = {
      {false, false, false, ""},   {true, false, false, "relu"}, {true, true, false, "clip"},  {false, true, true, "relu"},
      {true, false, true, ""},     {true, true, false, "hardswish"}, {false, true, false, "silu"}, {true, false, true, "clip"},
  };
  for (size_t ci = 0; ci < std::size(cases); ++ci)
    for (size_t ei = 0; ei < std::size(epilogues); ++ei) {
      if ((ci + ei) % 3) continue;
      Builder b = fusedConvModel(cases[ci], epilogues[ei], rng);
      INFO("case " << ci << " epilogue " << ei << " " << describe(cases[ci]));
      auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 1);
      CHECK(ranOn(kernels, "cpu.conv.f32.gemm.implicit."));
    }
}

// The direct pixel-major convolution (forced with ONNXTOOL_CONV_LAYOUT=direct; AVX-512 only,
// elsewhere the packed kernel runs): the input zero-padded once, output rows in segments of up
// to 14 pixels broadcast by the transposing micro-kernels straight from it (every segment
// length 1 to 14: rows of 1 to 33 pixels), K across several blocks, channel panel tails,
// strides, dilations, asymmetric pads, groups, batch 2, every epilogue; 2 threads split the
// channel panels, or the rows where there is one panel.
TEST_CASE("cpu direct pixel-major Conv matches the reference kernel", "[cpu][conv]") {
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  ScopedEnv direct("ONNXTOOL_CONV_LAYOUT", "direct");
  std::mt19937 rng(66);
  const bool avx512 = cpu::activeIsa() == cpu::Isa::Avx512;
  const ConvCase cases[] = {
      {1, 16, 30, 30, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},    // 15-pixel rows: segments of 8 and 7
      {1, 40, 28, 28, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 28: two of 14; K = 360; M tail
      {1, 8, 9, 33, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // 33: 11 + 11 + 11, one channel panel and a tail
      {2, 12, 12, 12, 20, 3, 3, 1, 1, 2, 2, 2, 1, 2, 3, 1},    // dilated, asymmetric pads, batch 2
      {1, 64, 9, 9, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // 9-pixel rows; K = 576: two K blocks
      {1, 24, 20, 41, 36, 5, 5, 3, 2, 1, 1, 2, 2, 2, 2, 2},    // strides 3 x 2, 5x5, groups
      {1, 6, 7, 3, 30, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},       // 3-pixel rows
      {1, 10, 5, 1, 20, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1},      // 1-pixel rows
      {1, 32, 16, 40, 30, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},    // 1x1 stride 2, 20-pixel rows
      {1, 300, 14, 14, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // 7x7 output (rows in pairs), K = 2700: many K blocks
      {1, 512, 7, 7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // 7x7, one panel: threads split the rows (a pair and a single)
      {1, 64, 40, 40, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // one channel panel: 2 threads split the rows
  };
  const EpilogueCase epilogues[] = {
      {false, false, false, ""},   {true, false, false, "relu"}, {true, true, false, "clip"},  {false, true, true, "relu"},
      {true, false, true, ""},     {true, true, false, "hardswish"}, {false, true, false, "silu"}, {true, false, true, "clip"},
  };
  for (size_t ci = 0; ci < std::size(cases); ++ci)
    for (size_t ei = 0; ei < std::size(epilogues); ++ei) {
      if ((ci + ei) % 3) continue;
      Builder b = fusedConvModel(cases[ci], epilogues[ei], rng);
      INFO("case " << ci << " epilogue " << ei << " " << describe(cases[ci]));
      auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 1);
      CHECK(ranOn(kernels, "cpu.conv.f32.gemm.direct.") == avx512);
      CHECK(ranOn(kernels, "cpu.conv.f32.gemm."));
    }
}

// Which convolutions take the implicit GEMM by default: on AVX-512 the stems (at most 4 input
// channels, 16+ output columns); on AVX2 every channel-major kernel wider than 1x1 of one group
// but stride-1 ones of at most 4 input channels; never on the portable path, never 1x1/2.
TEST_CASE("cpu Conv takes the implicit GEMM by default where its path gains", "[cpu][conv]") {
  ScopedEnv layout("ONNXTOOL_CONV_LAYOUT", "");
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  std::mt19937 rng(65);
  const bool avx512 = cpu::activeIsa() == cpu::Isa::Avx512, avx2 = cpu::activeIsa() == cpu::Isa::Avx2;
  struct Pick {
    ConvCase k;
    bool implicit;
  };
  const Pick picks[] = {
      {{1, 3, 64, 64, 16, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1}, avx512 || avx2},  // a 7x7/2 stem
      {{1, 3, 64, 64, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, avx512 || avx2},  // a 3x3/2 stem
      {{1, 3, 64, 64, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, avx512},          // stride 1, 3 channels
      {{1, 3, 24, 24, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, avx2},            // 12 columns
      {{1, 16, 32, 32, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, avx2},           // 16 input channels (AVX-512: direct)
      {{1, 8, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, avx2},            // LeNet's second conv
      {{1, 8, 14, 14, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1}, false},           // dilated
      {{1, 8, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2}, false},           // two groups
      {{1, 16, 32, 32, 16, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1}, false},          // 1x1 stride 2
  };
  for (const Pick& p : picks) {
    Builder b = fusedConvModel(p.k, {true, false, false, "relu"}, rng);
    INFO(describe(p.k));
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
    INFO(joined(kernels));
    REQUIRE(kernels.size() == 1);
    CHECK(ranOn(kernels, "cpu.conv.f32.gemm.implicit.") == p.implicit);
  }
}

// Which convolutions take the direct pixel-major path by default: on AVX-512, kernels larger
// than 1x1 with rows of 14 or more output pixels or 7, the stems aside.
TEST_CASE("cpu Conv takes the direct pixel-major path for rows of 7 or 14+ pixels on AVX-512 only", "[cpu][conv]") {
  ScopedEnv layout("ONNXTOOL_CONV_LAYOUT", "");
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  std::mt19937 rng(67);
  const bool avx512 = cpu::activeIsa() == cpu::Isa::Avx512;
  struct Pick {
    ConvCase k;
    bool direct;
  };
  const Pick picks[] = {
      {{1, 16, 32, 32, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, avx512},  // 3x3/2 to 16x16
      // Few outputs: 8 fill a quarter of its 32-channel tiles, 16 half, paid for by K >= 256 only.
      {{1, 16, 32, 32, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, false},   // 16 outputs, K 144
      {{1, 64, 20, 20, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false},    // 8 outputs, K 576
      {{1, 32, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, avx512},  // 16 outputs, K 288
      {{1, 32, 14, 14, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, avx512},  // 3x3/1 at 14x14
      {{1, 32, 13, 13, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false},   // 13-pixel rows
      {{1, 32, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, avx512},    // 7-pixel rows: in pairs
      {{1, 3, 64, 64, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, false},    // a stem: implicit on AVX-512
      {{1, 32, 40, 40, 16, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1}, false},   // 1x1 stride 2
      {{1, 32, 16, 16, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, false},   // pointwise
  };
  for (const Pick& p : picks) {
    Builder b = fusedConvModel(p.k, {true, false, false, "relu"}, rng);
    INFO(describe(p.k));
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
    INFO(joined(kernels));
    REQUIRE(kernels.size() == 1);
    CHECK(ranOn(kernels, "cpu.conv.f32.gemm.direct.") == p.direct);
  }
}

// Channel-major pointwise convolutions with at most four weight panels read their full pixel
// panels straight from the input planes (TileEpilogue::ldb) and pack only a partial last panel:
// pixel counts with and without a tail panel, below one panel, K across blocks, groups, batch 2,
// several pixel blocks, one more weight panel (packed again), every epilogue, at 1 and 2 threads.
TEST_CASE("cpu pointwise Conv reading its input in place matches the reference kernel", "[cpu][conv]") {
  std::mt19937 rng(63);
  const ConvCase cases[] = {
      {1, 32, 16, 16, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 256 pixels: full panels only
      {1, 24, 9, 11, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 99 pixels: 3 full panels and a tail
      {1, 5, 3, 7, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},       // 21 pixels: only a partial panel
      {2, 700, 6, 11, 20, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // K = 700: three K blocks, batch 2
      {1, 40, 10, 10, 48, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2},   // groups: each group's planes in place
      {1, 16, 64, 72, 12, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 4608 pixels
      {1, 520, 24, 24, 30, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // K = 520 and 576 pixels: several pixel blocks
      {1, 16, 12, 12, 56, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 5 or 7 weight panels: packed
  };
  const EpilogueCase epilogues[] = {{true, false, false, ""}, {false, true, true, "relu"}, {true, true, false, "silu"},
                                    {true, false, true, "clip"}, {false, false, false, "hardswish"}};
  ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
  ScopedEnv channel("ONNXTOOL_CONV_LAYOUT", "channel");
  for (size_t ci = 0; ci < std::size(cases); ++ci)
    for (size_t ei = 0; ei < std::size(epilogues); ++ei) {
      if ((ci + ei) % 2) continue;
      Builder b = fusedConvModel(cases[ci], epilogues[ei], rng);
      INFO("case " << ci << " epilogue " << ei << " " << describe(cases[ci]));
      auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 1);
      CHECK(ranOn(kernels, "cpu.conv.f32.gemm."));
    }
}

TEST_CASE("cpu depthwise Conv on every kernel size, stride, row tail and tiny plane matches the reference kernel",
          "[cpu][conv][depthwise]") {
  // Each path the kernel has: its own choice, output rows from a ring of copied rows forced,
  // output rows from the input rows in place forced (AVX-512 only, else the ring), channels in
  // the lanes forced (16 on AVX-512, 8 on AVX2; the portable path has the ring rows only).
  const char* path = GENERATE("", "rows", "direct", "channels");
  ScopedEnv forced("ONNXTOOL_DEPTHWISE", path);
  INFO("ONNXTOOL_DEPTHWISE=" << path);
  std::mt19937 rng(61);
  struct Kern {
    int64_t kh, kw;
  };
  // Output widths around the vector widths (8, 16) and their multiples, for 3x3, 5x5, 3x5 and
  // 7x7 at strides 1, 2 and 3 (3: the general path), with "same" pads, NaN/Inf in every other.
  int iter = 0;
  for (Kern kn : {Kern{3, 3}, Kern{5, 5}, Kern{3, 5}, Kern{7, 7}})
    for (int64_t s : {1, 2, 3})
      for (int64_t ow : {1, 7, 15, 16, 17, 33}) {
        const int64_t oh = 1 + (ow + s) % 5;  // 1 to 5 output rows
        ConvCase k = depthwiseCase(1 + iter % 2, 3, oh, ow, kn.kh, kn.kw, s, 1, kn.kh / 2, kn.kw / 2, kn.kh / 2, kn.kw / 2);
        if (k.h < 1 || k.w < 1) {  // pads wider than the image: the smallest image instead
          k.h = std::max<int64_t>(k.h, 1);
          k.w = std::max<int64_t>(k.w, 1);
        }
        Builder b = convModel(k, rng, iter % 3 != 2, iter % 2 == 1);
        INFO(describe(k));
        auto kernels = checkAgainstRef(*b.m, b.feeds);
        INFO(joined(kernels));
        CHECK(ranOn(kernels, "cpu.conv.f32.depthwise"));
        ++iter;
      }
  // Dilation 2, asymmetric and zero pads, pads wider than the image, tiny planes (1x1, 2x2).
  const ConvCase fixed[] = {
      depthwiseCase(1, 4, 6, 17, 3, 3, 1, 2, 2, 2, 2, 2),   // dilated 3x3, "same"
      depthwiseCase(1, 4, 5, 33, 3, 3, 2, 2, 2, 2, 1, 1),   // dilated 3x3 stride 2
      depthwiseCase(2, 3, 4, 15, 5, 5, 1, 2, 0, 3, 4, 1),   // dilated 5x5, asymmetric
      depthwiseCase(1, 3, 7, 7, 3, 3, 1, 1, 0, 0, 2, 2),    // pads only bottom and right
      depthwiseCase(1, 3, 7, 17, 3, 3, 2, 1, 1, 0, 0, 1),   // stride 2, pads top-right only (as TF "same")
      depthwiseCase(1, 3, 3, 40, 5, 5, 2, 1, 2, 2, 1, 1),   // stride 2 5x5, asymmetric
      depthwiseCase(1, 3, 9, 31, 3, 5, 1, 1, 0, 0, 0, 0),   // no pads at all
      depthwiseCase(1, 3, 4, 18, 7, 7, 2, 1, 3, 3, 3, 3),   // 7x7 stride 2
      {1, 5, 1, 1, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5},     // 1x1 plane, 3x3 pad 1
      {2, 5, 2, 2, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5},     // 2x2 plane
      {1, 5, 2, 2, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5},     // 2x2 plane, stride 2 -> 1x1
      {1, 5, 1, 1, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 5},     // 1x1 plane, 5x5 pad 2
      {1, 5, 2, 2, 5, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 5},     // 2x2 plane, 5x5 stride 2
      {1, 3, 2, 9, 3, 3, 3, 1, 1, 1, 1, 4, 0, 4, 0, 3},     // pads much taller than the image
      {1, 3, 6, 9, 3, 1, 1, 1, 2, 1, 1, 0, 0, 0, 0, 3},     // 1x1 kernel, stride 2 across
      {1, 3, 5, 9, 3, 3, 1, 2, 1, 1, 1, 1, 0, 1, 0, 3},     // strides 2 down, 1 across
      {1, 3, 9, 21, 3, 3, 3, 1, 3, 1, 2, 1, 2, 1, 2, 3},    // strides 1 down, 3 across, dilated across
      {1, 3, 13, 40, 3, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 3},   // 1x1 stride 2: input rows no output reads
      {1, 3, 12, 36, 3, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 3},   // 2x2 stride 2 (even kernel)
      {1, 3, 11, 50, 3, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1, 3},   // stride 4, wider than the kernel
  };
  for (const ConvCase& k : fixed) {
    for (bool specials : {false, true}) {
      Builder b = convModel(k, rng, true, specials);
      INFO(describe(k) << " specials " << specials);
      auto kernels = checkAgainstRef(*b.m, b.feeds);
      INFO(joined(kernels));
      CHECK(ranOn(kernels, "cpu.conv.f32.depthwise"));
    }
  }
  // Large enough that the planes split across two threads: 3x3 and 5x5, strides 1 and 2.
  const ConvCase large[] = {
      depthwiseCase(1, 24, 40, 40, 3, 3, 1, 1, 1, 1, 1, 1),
      depthwiseCase(1, 21, 28, 29, 3, 3, 2, 1, 0, 0, 1, 1),
      depthwiseCase(2, 13, 19, 23, 5, 5, 1, 1, 2, 2, 2, 2),
      depthwiseCase(1, 20, 28, 28, 5, 5, 2, 1, 2, 2, 2, 2),
  };
  for (const ConvCase& k : large) {
    Builder b = convModel(k, rng, true, true);
    INFO(describe(k));
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, "cpu.conv.f32.depthwise"));
  }
}

TEST_CASE("cpu depthwise Conv applies every fused epilogue: BatchNormalization, residual Add, Relu, Clip, HardSwish, SiLU",
          "[cpu][conv][depthwise][fusion]") {
  const char* path = GENERATE("", "rows", "channels");
  ScopedEnv forced("ONNXTOOL_DEPTHWISE", path);
  INFO("ONNXTOOL_DEPTHWISE=" << path);
  std::mt19937 rng(62);
  enum Act { None, Relu, Clip, HardSwish, Silu };
  const ConvCase shapes[] = {
      depthwiseCase(1, 5, 6, 17, 3, 3, 1, 1, 1, 1, 1, 1),
      depthwiseCase(2, 3, 5, 33, 3, 3, 2, 1, 1, 1, 1, 1),
      depthwiseCase(1, 4, 4, 7, 5, 5, 1, 1, 2, 2, 2, 2),
      depthwiseCase(1, 4, 3, 15, 5, 5, 2, 1, 2, 2, 1, 1),
      depthwiseCase(1, 24, 30, 30, 3, 3, 1, 1, 1, 1, 1, 1),  // two threads
  };
  int iter = 0;
  for (const ConvCase& k : shapes)
    for (bool bn : {false, true})
      for (bool residual : {false, true})
        for (Act act : {None, Relu, Clip, HardSwish, Silu}) {
          if (!bn && !residual && act == None) continue;  // nothing fused
          Builder b(17);
          b.input("x", randomTensor({k.n, k.c, k.h, k.w}, rng, iter % 2 == 0));
          b.constant("w", randomTensor({k.c, 1, k.kh, k.kw}, rng));
          b.constant("b", randomTensor({k.c}, rng));
          b.node("Conv", {"x", "w", "b"}, "c",
                 {testutil::ints("kernel_shape", {k.kh, k.kw}), testutil::ints("strides", {k.sh, k.sw}),
                  testutil::ints("pads", {k.pt, k.pl, k.pb, k.pr}), testutil::one("group", k.c)});
          std::string cur = "c", suffix;
          if (bn) {
            auto variances = randomFloats(static_cast<size_t>(k.c), rng);
            for (float& v : variances) v = std::fabs(v) + 0.1f;
            b.constant("bn_s", randomTensor({k.c}, rng));
            b.constant("bn_b", randomTensor({k.c}, rng));
            b.constant("bn_m", randomTensor({k.c}, rng));
            b.constant("bn_v", f32({k.c}, variances));
            b.node("BatchNormalization", {cur, "bn_s", "bn_b", "bn_m", "bn_v"}, "n");
            cur = "n", suffix += "+bn";
          }
          if (residual) {
            const int64_t oh = (k.h + k.pt + k.pb - k.kh) / k.sh + 1, ow = (k.w + k.pl + k.pr - k.kw) / k.sw + 1;
            b.input("r", randomTensor({k.n, k.c, oh, ow}, rng, iter % 4 == 1));
            b.node("Add", {"r", cur}, "a");
            cur = "a", suffix += "+add";
          }
          switch (act) {
            case None: break;
            case Relu: b.node("Relu", {cur}, "t"), suffix += "+relu"; break;
            case Clip:
              b.constant("lo", f32({}, {-0.5f}));
              b.constant("hi", f32({}, {1.5f}));
              b.node("Clip", {cur, "lo", "hi"}, "t"), suffix += "+clip";
              break;
            case HardSwish: b.node("HardSwish", {cur}, "t"), suffix += "+hardswish"; break;
            case Silu:
              b.node("Sigmoid", {cur}, "sg");
              b.node("Mul", {"sg", cur}, "t"), suffix += "+silu";
              break;
          }
          if (act != None) cur = "t";
          b.output(cur);
          INFO(describe(k) << " epilogue " << suffix);
          auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-4);
          INFO(joined(kernels));
          REQUIRE(kernels.size() == 1);
          CHECK(kernels[0] == "cpu.conv.f32.depthwise" + suffix);
          ++iter;
        }
}

TEST_CASE("cpu 1-D Conv (audio front ends) runs on the packed and depthwise kernels and matches the reference", "[cpu][conv]") {
  std::mt19937 rng(41);
  struct Case {
    int64_t n, c, l, m, k, s, d, pb, pe, group;
    bool bias, relu;
  };
  const Case cases[] = {{1, 1, 576, 258, 256, 128, 1, 0, 0, 1, false, false},  // an STFT as a strided conv
                        {2, 129, 40, 128, 3, 1, 1, 1, 1, 1, true, true},
                        {1, 16, 33, 24, 5, 2, 2, 2, 3, 1, true, false},
                        {3, 32, 50, 32, 3, 1, 1, 1, 1, 32, true, true},       // depthwise
                        {1, 12, 17, 8, 1, 1, 1, 0, 0, 4, false, false}};
  for (const Case& k : cases) {
    Builder b(17);
    b.input("x", randomTensor({k.n, k.c, k.l}, rng, true));
    b.constant("w", randomTensor({k.m, k.c / k.group, k.k}, rng));
    if (k.bias) b.constant("b", randomTensor({k.m}, rng));
    b.node("Conv", {"x", "w", k.bias ? "b" : ""}, k.relu ? "c" : "y",
           {testutil::ints("kernel_shape", {k.k}), testutil::ints("strides", {k.s}), testutil::ints("dilations", {k.d}),
            testutil::ints("pads", {k.pb, k.pe}), testutil::one("group", k.group)});
    if (k.relu) b.node("Relu", {"c"}, "y");
    b.output("y");
    INFO("1-D conv c" << k.c << " l" << k.l << " m" << k.m << " k" << k.k << " s" << k.s << " d" << k.d << " g" << k.group);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
    INFO(joined(kernels));
    CHECK((ranOn(kernels, "cpu.conv.f32.gemm") || ranOn(kernels, "cpu.conv.f32.depthwise") || ranOn(kernels, "cpu.conv.f32.winograd")));
    CHECK(std::none_of(kernels.begin(), kernels.end(), [](const std::string& k) { return k.find("(fallback)") != std::string::npos; }));
  }
}

TEST_CASE("cpu Conv with weights computed at run time runs on the im2col kernel", "[cpu][conv]") {
  std::mt19937 rng(22);
  Builder b(13);
  b.input("x", randomTensor({1, 3, 6, 6}, rng));
  b.input("w", randomTensor({4, 3, 3, 3}, rng));
  b.node("Conv", {"x", "w"}, "y0", {testutil::ints("kernel_shape", {3, 3})});
  b.node("Relu", {"y0"}, "y");
  b.output("y");
  auto kernels = checkAgainstRef(*b.m, b.feeds);
  INFO(joined(kernels));
  CHECK(ranOn(kernels, "cpu.conv.f32.im2col"));
  CHECK(ranOn(kernels, "cpu.relu"));  // not fused: the im2col kernel has no epilogue
}

TEST_CASE("cpu executor fuses Conv + Add/Sum + Relu/Clip into the convolution's store", "[cpu][conv][fusion]") {
  std::mt19937 rng(23);
  auto conv = [&](Builder& b, const std::string& x, const std::string& out, int64_t c, int64_t m, int64_t group = 1) {
    b.constant(out + "_w", randomTensor({m, c / group, 3, 3}, rng));
    b.constant(out + "_b", randomTensor({m}, rng));
    b.node("Conv", {x, out + "_w", out + "_b"}, out,
           {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {1, 1, 1, 1}), testutil::one("group", group)});
  };
  SECTION("Conv + Relu, Conv + Add + Relu (residual), Conv + Sum") {
    Builder b(13);
    b.input("x", randomTensor({1, 8, 9, 7}, rng, true));
    conv(b, "x", "c1", 8, 8);
    b.node("Relu", {"c1"}, "r1");
    conv(b, "r1", "c2", 8, 8);
    b.node("Add", {"x", "c2"}, "a2");  // the residual first: either operand order
    b.node("Relu", {"a2"}, "r2");
    conv(b, "r2", "c3", 8, 8);
    b.node("Sum", {"c3", "r1"}, "y");
    b.output("y");
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    CHECK(kernels.size() == 3);
    CHECK(ranOn(kernels, "cpu.conv.f32.gemm.") );
    CHECK(std::count_if(kernels.begin(), kernels.end(), [](const std::string& k) { return k.ends_with("+relu") && !k.ends_with("+add+relu"); }) == 1);
    CHECK(std::count_if(kernels.begin(), kernels.end(), [](const std::string& k) { return k.ends_with("+add+relu"); }) == 1);
    CHECK(std::count_if(kernels.begin(), kernels.end(), [](const std::string& k) { return k.ends_with("+add"); }) == 1);
  }
  SECTION("Conv + Clip (ReLU6) with bound inputs, and depthwise + Clip with attributes (opset 6)") {
    for (int64_t opset : {6, 13}) {
      Builder b(opset);
      b.input("x", randomTensor({1, 6, 8, 8}, rng, true));
      b.constant("w", randomTensor({6, 1, 3, 3}, rng));
      b.node("Conv", {"x", "w"}, "c", {testutil::ints("kernel_shape", {3, 3}), testutil::one("group", 6)});
      if (opset >= 11) {
        b.constant("lo", f32({}, {0.f}));
        b.constant("hi", f32({}, {0.5f}));
        b.node("Clip", {"c", "lo", "hi"}, "y");
      } else {
        b.node("Clip", {"c"}, "y", {Attribute::ofFloat("min", -0.25f), Attribute::ofFloat("max", 0.5f)});
      }
      b.output("y");
      INFO("opset " << opset);
      auto kernels = checkAgainstRef(*b.m, b.feeds);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 1);
      CHECK(kernels[0] == "cpu.conv.f32.depthwise+clip");
    }
  }
  SECTION("Conv + a decomposed HardSwish at opsets without the op (x * Relu6(x + 3) / 6 and its spellings)") {
    // PaddleOCR's PP-OCRv4 recogniser (opset 12) writes Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)
    // after 28 convolutions; -O3 cannot write HardSwish before opset 14, the executor fuses it.
    for (int spelling = 0; spelling < 5; ++spelling) {
      Builder b(12);
      b.input("x", randomTensor({1, 6, 8, 8}, rng, true));
      conv(b, "x", "c", 6, 8);
      b.constant("three", f32({}, {3.f}));
      b.constant("zero", f32({}, {0.f}));
      b.constant("six", f32({}, {6.f}));
      b.constant("sixth", f32({1}, {1.f / 6.f}));
      if (spelling == 4) {
        b.node("HardSigmoid", {"c"}, "r", {Attribute::ofFloat("alpha", 1.f / 6.f), Attribute::ofFloat("beta", 0.5f)});
        b.node("Mul", {"r", "c"}, "y");
      } else {
        b.node("Add", spelling == 1 ? std::vector<std::string>{"three", "c"} : std::vector<std::string>{"c", "three"}, "a");
        b.node("Clip", {"a", "zero", "six"}, "r");
        if (spelling == 2) {
          b.node("Div", {"r", "six"}, "d");
          b.node("Mul", {"c", "d"}, "y");
        } else {
          b.node("Mul", {"c", "r"}, "m");
          if (spelling == 3) b.node("Mul", {"sixth", "m"}, "y");
          else b.node("Div", {"m", "six"}, "y");
        }
      }
      b.output("y");
      INFO("spelling " << spelling);
      auto kernels = checkAgainstRef(*b.m, b.feeds);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 1);
      CHECK(kernels[0].starts_with("cpu.conv.f32."));
      CHECK(kernels[0].ends_with("+hardswish"));
    }
    // Not fused: the conv's output read by a third node; a Clip to 5; a division by 3.
    for (int variant = 0; variant < 3; ++variant) {
      Builder b(12);
      b.input("x", randomTensor({1, 6, 8, 8}, rng, true));
      conv(b, "x", "c", 6, 8);
      b.constant("three", f32({}, {3.f}));
      b.constant("zero", f32({}, {0.f}));
      b.constant("hi", f32({}, {variant == 1 ? 5.f : 6.f}));
      b.constant("div", f32({}, {variant == 2 ? 3.f : 6.f}));
      b.node("Add", {"c", "three"}, "a");
      b.node("Clip", {"a", "zero", "hi"}, "r");
      b.node("Mul", {"c", "r"}, "m");
      b.node("Div", {"m", "div"}, variant == 0 ? "h" : "y");
      if (variant == 0) b.node("Add", {"h", "c"}, "y");
      b.output("y");
      INFO("variant " << variant);
      auto kernels = checkAgainstRef(*b.m, b.feeds);
      INFO(joined(kernels));
      for (const auto& k : kernels) CHECK(k.find("hardswish") == std::string::npos);
    }
  }
  SECTION("not fused: the Conv output read twice, a graph output, a broadcast Add, Clip bounds from an input") {
    Builder b(13);
    b.input("x", randomTensor({1, 4, 5, 5}, rng));
    b.input("bias", randomTensor({4, 1, 1}, rng));
    b.input("hi", f32({}, {1.f}));
    conv(b, "x", "c1", 4, 4);
    b.node("Relu", {"c1"}, "r1");
    b.node("Add", {"c1", "r1"}, "a1");  // c1 read twice
    conv(b, "a1", "c2", 4, 4);
    b.node("Add", {"c2", "bias"}, "a2");  // broadcast: not a residual
    conv(b, "a2", "c3", 4, 4);
    b.node("Relu", {"c3"}, "r3");
    conv(b, "r3", "c4", 4, 4);
    b.node("Clip", {"c4", "", "hi"}, "y");
    b.output("y");
    b.output("c3");  // a graph output is not absorbed
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    for (const auto& k : kernels) CHECK(k.find('+') == std::string::npos);
  }
  SECTION("squeeze-and-excitation: the channel-scale Mul runs inside the next pointwise Conv (weights scaled per image)") {
    // x -> GlobalAveragePool -> 1x1 conv -> Sigmoid = s [N, C, 1, 1]; Mul(x, s) (either operand
    // order) read only by a pointwise conv: fused (+scale), with BN, a residual Add and Relu
    // after it; batch 2 (a scale per image), K across blocks (C = 400), pixel tails (9 x 7).
    for (int64_t n : {1, 2})
      for (int64_t c : {12, 400})
        for (bool swapped : {false, true}) {
          Builder b(13);
          const int64_t m = 24;
          b.input("x", randomTensor({n, c, 9, 7}, rng, n == 2));
          b.input("r", randomTensor({n, m, 9, 7}, rng));
          b.node("GlobalAveragePool", {"x"}, "gap");
          b.constant("se_w", randomTensor({c, c, 1, 1}, rng));
          b.node("Conv", {"gap", "se_w"}, "se", {testutil::ints("kernel_shape", {1, 1})});
          b.node("Sigmoid", {"se"}, "s");
          b.node("Mul", swapped ? std::vector<std::string>{"s", "x"} : std::vector<std::string>{"x", "s"}, "xs");
          b.constant("w", randomTensor({m, c, 1, 1}, rng));
          b.constant("bias", randomTensor({m}, rng));
          b.node("Conv", {"xs", "w", "bias"}, "c", {testutil::ints("kernel_shape", {1, 1})});
          b.node("Add", {"c", "r"}, "a");
          b.node("Relu", {"a"}, "y");
          b.output("y");
          INFO("n " << n << " c " << c << " swapped " << swapped);
          auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-3);
          INFO(joined(kernels));
          CHECK(std::count(kernels.begin(), kernels.end(), "cpu.conv.f32.gemm.avx512+scale+add+relu") +
                    std::count(kernels.begin(), kernels.end(), "cpu.conv.f32.gemm.avx2+scale+add+relu") +
                    std::count(kernels.begin(), kernels.end(), "cpu.conv.f32.gemm.portable+scale+add+relu") ==
                1);
          CHECK(std::none_of(kernels.begin(), kernels.end(), [](const std::string& k) { return k.rfind("cpu.mul", 0) == 0; }));
        }
    // A conv computed pixel-major declines the scale: the Mul runs, the conv keeps the rest of
    // its chain (a plan without depthwise convolutions has no blocked twins, kernels_nchwc.h).
    {
      ScopedEnv pixel("ONNXTOOL_CONV_LAYOUT", "pixel");
      Builder b(13);
      b.input("x", randomTensor({1, 16, 7, 7}, rng));
      b.input("s", randomTensor({1, 16, 1, 1}, rng));
      b.input("r", randomTensor({1, 40, 7, 7}, rng));
      b.node("Mul", {"x", "s"}, "xs");
      b.constant("w", randomTensor({40, 16, 1, 1}, rng));
      b.node("Conv", {"xs", "w"}, "c", {testutil::ints("kernel_shape", {1, 1})});
      b.node("Add", {"r", "c"}, "y");
      b.output("y");
      auto kernels = checkAgainstRef(*b.m, b.feeds);
      INFO(joined(kernels));
      REQUIRE(kernels.size() == 2);
      CHECK(kernels[0] == "cpu.mul.f32");
      CHECK(kernels[1].rfind("cpu.conv.f32.gemm.px.", 0) == 0);
      CHECK(kernels[1].ends_with("+add"));
    }
    // Not fused: the Mul's output read twice, a 3x3 conv after it, a map less than twice the
    // output channels (3 x 3 < 2 x 8), a scale of a full map's shape.
    Builder b(13);
    b.input("x", randomTensor({1, 4, 5, 5}, rng));
    b.input("s", randomTensor({1, 4, 1, 1}, rng));
    b.input("t", randomTensor({1, 4, 5, 5}, rng));
    b.input("small", randomTensor({1, 4, 3, 3}, rng));
    b.node("Mul", {"x", "s"}, "m1");
    b.constant("w1", randomTensor({4, 4, 1, 1}, rng));
    b.node("Conv", {"m1", "w1"}, "c1", {testutil::ints("kernel_shape", {1, 1})});
    b.node("Add", {"c1", "m1"}, "a1");  // m1 read twice
    b.node("Mul", {"a1", "s"}, "m2");
    conv(b, "m2", "c2", 4, 4);  // 3x3
    b.node("Mul", {"small", "s"}, "m3");
    b.constant("w3", randomTensor({8, 4, 1, 1}, rng));
    b.node("Conv", {"m3", "w3"}, "c3", {testutil::ints("kernel_shape", {1, 1})});
    b.node("Mul", {"c2", "t"}, "m4");  // not a per-channel scale
    b.constant("w4", randomTensor({4, 4, 1, 1}, rng));
    b.node("Conv", {"m4", "w4"}, "c4", {testutil::ints("kernel_shape", {1, 1})});
    b.output("c3");
    b.output("c4");
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    for (const auto& k : kernels) CHECK(k.find("+scale") == std::string::npos);
    CHECK(std::count_if(kernels.begin(), kernels.end(), [](const std::string& k) { return k.rfind("cpu.mul", 0) == 0; }) == 4);
  }
  SECTION("BatchNormalization folded into the convolution: with and without bias, then Add, Relu, Clip") {
    auto bn = [&](Builder& b, const std::string& x, const std::string& out, int64_t c, bool constant) {
      auto variances = randomFloats(static_cast<size_t>(c), rng);
      for (float& v : variances) v = std::fabs(v) + 0.1f;
      Tensor var = f32({c}, variances);
      std::vector<std::pair<std::string, Tensor>> params{{out + "_s", randomTensor({c}, rng)},
                                                         {out + "_b", randomTensor({c}, rng)},
                                                         {out + "_m", randomTensor({c}, rng)},
                                                         {out + "_v", var}};
      for (auto& [name, t] : params) {
        if (constant) b.constant(name, t);
        else b.input(name, t);
      }
      b.node("BatchNormalization", {x, out + "_s", out + "_b", out + "_m", out + "_v"}, out, {Attribute::ofFloat("epsilon", 1e-3f)});
    };
    Builder b(15);
    b.input("x", randomTensor({2, 6, 7, 9}, rng, true));
    conv(b, "x", "c1", 6, 6);
    bn(b, "c1", "n1", 6, true);
    b.node("Relu", {"n1"}, "r1");
    b.constant("w2", randomTensor({6, 6, 1, 1}, rng));
    b.node("Conv", {"r1", "w2"}, "c2", {testutil::ints("kernel_shape", {1, 1})});  // no bias
    bn(b, "c2", "n2", 6, true);
    b.node("Add", {"n2", "x"}, "a2");
    b.node("Relu", {"a2"}, "r2");
    conv(b, "r2", "c3", 6, 6, 6);  // depthwise
    bn(b, "c3", "n3", 6, true);
    b.constant("lo", f32({}, {-0.5f}));
    b.constant("hi", f32({}, {0.5f}));
    b.node("Clip", {"n3", "lo", "hi"}, "k3");
    conv(b, "k3", "c4", 6, 6);
    bn(b, "c4", "y", 6, false);  // parameters fed at run time: not folded
    b.output("y");
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    REQUIRE(kernels.size() == 5);
    CHECK(kernels[0].ends_with("+bn+relu"));
    CHECK(kernels[1].ends_with("+bn+add+relu"));
    CHECK(kernels[2] == "cpu.conv.f32.depthwise+bn+clip");
    CHECK(kernels[3].find('+') == std::string::npos);
    CHECK(kernels[4].rfind("cpu.batchnorm", 0) == 0);
  }
  SECTION("Add of two convolutions: one of them fuses, the other feeds it") {
    Builder b(13);
    b.input("x", randomTensor({1, 5, 6, 6}, rng));
    conv(b, "x", "c1", 5, 7);
    conv(b, "x", "c2", 5, 7);
    b.node("Add", {"c1", "c2"}, "a");
    b.node("Relu", {"a"}, "y");
    b.output("y");
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    CHECK(kernels.size() == 2);
    CHECK(std::count_if(kernels.begin(), kernels.end(), [](const std::string& k) { return k.ends_with("+add+relu"); }) == 1);
  }
}

TEST_CASE("every GEMM micro-kernel this CPU runs matches a scalar product, epilogues included", "[cpu][conv]") {
  using namespace onnxtool::cpu;
  std::vector<GemmMicroKernelInfo> kernels{gemmMicroKernelPortable()};
  if (detectedIsa() >= Isa::Avx2) kernels.push_back(gemmMicroKernelAvx2());
  if (detectedIsa() >= Isa::Avx512) {
    kernels.push_back(gemmMicroKernelAvx512(12));
    kernels.push_back(gemmMicroKernelAvx512(16));
    CHECK(kernels.back().mr == 8);
  }
  // The row kernels (skinny GEMMs, the pixel-major convolution's panels and their tails): AVX-512
  // has one of every row count up to 14.
  for (int r = 1; r <= 14; ++r) {
    if (detectedIsa() >= Isa::Avx512) {
      kernels.push_back(gemmMicroKernelRowsAvx512(r));
      CHECK(kernels.back().mr == r);
    }
    if (detectedIsa() >= Isa::Avx2 && r <= 6) kernels.push_back(gemmMicroKernelRowsAvx2(r));
  }
  std::mt19937 rng(24);
  for (const auto& mk : kernels) {
    // B packed (ldb 0: rows NR apart) or unpacked (TileEpilogue::ldb: rows ldb apart).
    for (int64_t ldb : {int64_t{0}, int64_t{mk.nr + 5}})
    for (int64_t kc : {1, 7, 64}) {
      for (int m : {1, mk.mr - 1, mk.mr}) {
        for (int n : {1, mk.nr / 2, mk.nr / 2 + 1, mk.nr - 1, mk.nr}) {
          if (m < 1) continue;
          const int64_t bs = ldb ? ldb : mk.nr;
          auto a = randomFloats(static_cast<size_t>(kc * mk.mr), rng), b = randomFloats(static_cast<size_t>(kc * bs), rng);
          const int64_t ldc = mk.nr + 3;
          auto c0 = randomFloats(static_cast<size_t>(mk.mr * ldc), rng, true), res = randomFloats(static_cast<size_t>(mk.mr * ldc), rng);
          auto bias = randomFloats(static_cast<size_t>(mk.mr), rng), colBias = randomFloats(static_cast<size_t>(mk.nr), rng);
          for (int variant = 0; variant < 3; ++variant) {
            TileEpilogue ep;
            ep.accumulate = variant == 1;
            ep.last = variant != 1;
            ep.bias = variant == 2 ? bias.data() : nullptr;
            ep.colBias = variant == 2 ? colBias.data() : nullptr;
            ep.residual = variant == 2 ? res.data() : nullptr;
            ep.ldr = ldc;
            ep.clamp = variant == 2;
            ep.lo = -0.5f, ep.hi = 0.75f;
            ep.ldb = ldb;
            auto c = c0;
            mk.kernel(kc, a.data(), b.data(), c.data(), ldc, m, n, ep);
            if (mk.stridedA) {  // A unpacked (rows lda apart): the same products, bit for bit
              const int64_t lda = kc + 3;
              std::vector<float> as(static_cast<size_t>(mk.mr * lda), testutil::kNan);
              for (int i = 0; i < mk.mr; ++i)
                for (int64_t k = 0; k < kc; ++k) as[static_cast<size_t>(i * lda + k)] = a[static_cast<size_t>(k * mk.mr + i)];
              TileEpilogue es = ep;
              es.lda = lda;
              auto cs = c0;
              mk.kernel(kc, as.data(), b.data(), cs.data(), ldc, m, n, es);
              INFO("strided A: isa " << isaName(mk.isa) << " mr " << mk.mr << " kc " << kc << " m " << m << " n " << n);
              CHECK(std::memcmp(cs.data(), c.data(), cs.size() * sizeof(float)) == 0);
            }
            for (int i = 0; i < mk.mr; ++i)
              for (int64_t j = 0; j < ldc; ++j) {
                float want = c0[static_cast<size_t>(i * ldc + j)];
                if (i < m && j < n) {
                  double s = 0;
                  for (int64_t k = 0; k < kc; ++k) s += double(a[static_cast<size_t>(k * mk.mr + i)]) * b[static_cast<size_t>(k * bs + j)];
                  if (ep.accumulate) s += want;
                  if (ep.bias) s += bias[static_cast<size_t>(i)];
                  if (ep.colBias) s += colBias[static_cast<size_t>(j)];
                  if (ep.residual) s += res[static_cast<size_t>(i * ldc + j)];
                  if (ep.clamp) s = std::min<double>(std::max<double>(s, ep.lo), ep.hi);
                  want = static_cast<float>(s);
                }
                float got = c[static_cast<size_t>(i * ldc + j)];
                INFO("isa " << isaName(mk.isa) << " mr " << mk.mr << " ldb " << ldb << " kc " << kc << " m " << m << " n " << n << " variant " << variant << " at " << i
                            << "," << j);
                if (std::isnan(want)) CHECK(std::isnan(got));
                else if (std::isinf(want)) CHECK(got == want);
                else CHECK(got == Approx(want).epsilon(1e-4).margin(1e-4));
              }
            if (!mk.transposed) continue;
            // The transposed store: element (i, j) at ct[j * ldt + i], the residual likewise.
            const int64_t ldt = mk.mr + 3;
            auto ct0 = randomFloats(static_cast<size_t>(mk.nr * ldt), rng, true), rest = randomFloats(static_cast<size_t>(mk.nr * ldt), rng);
            auto ct = ct0;
            TileEpilogue et = ep;
            et.residual = ep.residual ? rest.data() : nullptr;
            et.ldr = ldt;
            mk.transposed(kc, a.data(), b.data(), ct.data(), ldt, m, n, et);
            for (int64_t j = 0; j < mk.nr; ++j)
              for (int64_t i = 0; i < ldt; ++i) {
                float want = ct0[static_cast<size_t>(j * ldt + i)];
                if (i < m && j < n) {
                  double s = 0;
                  for (int64_t k = 0; k < kc; ++k) s += double(a[static_cast<size_t>(k * mk.mr + i)]) * b[static_cast<size_t>(k * bs + j)];
                  if (et.accumulate) s += want;
                  if (et.bias) s += bias[static_cast<size_t>(i)];
                  if (et.colBias) s += colBias[static_cast<size_t>(j)];
                  if (et.residual) s += rest[static_cast<size_t>(j * ldt + i)];
                  if (et.clamp) s = std::min<double>(std::max<double>(s, et.lo), et.hi);
                  want = static_cast<float>(s);
                }
                float got = ct[static_cast<size_t>(j * ldt + i)];
                INFO("transposed: isa " << isaName(mk.isa) << " mr " << mk.mr << " ldb " << ldb << " kc " << kc << " m " << m << " n " << n << " variant "
                                        << variant << " at " << i << "," << j);
                if (std::isnan(want)) CHECK(std::isnan(got));
                else if (std::isinf(want)) CHECK(got == want);
                else CHECK(got == Approx(want).epsilon(1e-4).margin(1e-4));
              }
          }
        }
      }
    }
  }
}

TEST_CASE("every ISA's strided row gather (im2col of strided convolutions) matches a scalar gather", "[cpu][conv]") {
  using namespace onnxtool::cpu;
  std::vector<RowOps> paths{rowOpsPortable()};
  if (detectedIsa() >= Isa::Avx2) paths.push_back(rowOpsAvx2());
  if (detectedIsa() >= Isa::Avx512) paths.push_back(rowOpsAvx512());
  std::mt19937 rng(63);
  for (const RowOps& ops : paths)
    for (int64_t sw : {1, 2, 3})
      for (int64_t n = 1; n <= 70; ++n) {
        // The source holds exactly the elements read: the vector paths must not load past it
        // (masked loads for the tail).
        auto src = randomFloats(static_cast<size_t>((n - 1) * sw + 1), rng);
        std::vector<float> got(static_cast<size_t>(n) + 1, -7.f);
        ops.gatherStrided(got.data(), src.data(), n, sw);
        INFO("sw " << sw << " n " << n);
        for (int64_t i = 0; i < n; ++i) CHECK(got[static_cast<size_t>(i)] == src[static_cast<size_t>(i * sw)]);
        CHECK(got[static_cast<size_t>(n)] == -7.f);  // nothing written past n
      }
}

TEST_CASE("cpu MaxPool and AveragePool match the reference kernel on asymmetric windows", "[cpu][pool]") {
  std::mt19937 rng(25);
  int ran = 0;
  for (int iter = 0; iter < 120 && ran < 60; ++iter) {
    std::uniform_int_distribution<int64_t> spatial(1, 19), kern(1, 4), str(1, 3), pad(0, 2), dil(1, 2);
    bool maxPool = iter % 2 == 0;
    int64_t h = spatial(rng), w = spatial(rng), kh = kern(rng), kw = kern(rng), sh = str(rng), sw = str(rng);
    int64_t dh = maxPool ? dil(rng) : 1, dw = maxPool ? dil(rng) : 1;
    int64_t pt = std::min(pad(rng), kh - 1), pl = std::min(pad(rng), kw - 1), pb = std::min(pad(rng), kh - 1), pr = std::min(pad(rng), kw - 1);
    int64_t ceil = maxPool && iter % 4 == 0 ? 1 : 0;
    if ((h + pt + pb - dh * (kh - 1) - 1) < 0 || (w + pl + pr - dw * (kw - 1) - 1) < 0) continue;
    Builder b(12);
    b.input("x", randomTensor({2, 3, h, w}, rng, iter % 3 == 0));
    std::vector<Attribute> attrs{testutil::ints("kernel_shape", {kh, kw}), testutil::ints("strides", {sh, sw}),
                                 testutil::ints("pads", {pt, pl, pb, pr})};
    if (maxPool) attrs.push_back(testutil::ints("dilations", {dh, dw}));
    if (ceil) attrs.push_back(testutil::one("ceil_mode", 1));
    if (!maxPool && iter % 4 == 1) attrs.push_back(testutil::one("count_include_pad", 1));
    b.node(maxPool ? "MaxPool" : "AveragePool", {"x"}, "y", attrs);
    b.output("y");
    INFO((maxPool ? "MaxPool" : "AveragePool") << " " << h << "x" << w << " k" << kh << "x" << kw << " s" << sh << "," << sw << " d" << dh
                                               << "," << dw << " p" << pt << "," << pl << "," << pb << "," << pr << " ceil " << ceil);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-6);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, maxPool ? "cpu.maxpool" : "cpu.averagepool"));
    ++ran;
  }
  CHECK(ran >= 40);
  // Wide rows: the vector paths (16 lanes, stride 2 by permute) and their tails.
  for (int64_t w : {33, 34, 64, 71}) {
    for (int64_t sw : {1, 2, 3}) {
      for (bool nan : {false, true}) {
        Builder b(12);
        b.input("x", randomTensor({1, 2, 5, w}, rng, nan));
        b.node("MaxPool", {"x"}, "y",
               {testutil::ints("kernel_shape", {3, 3}), testutil::ints("strides", {2, sw}), testutil::ints("pads", {1, 1, 1, 1})});
        b.output("y");
        INFO("MaxPool width " << w << " stride " << sw << " nan " << nan);
        auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-6, 0);
        CHECK(ranOn(kernels, "cpu.maxpool"));
      }
    }
  }
  // Planes split across threads (ResNet's 3x3 stride-2 MaxPool, smaller): NaN in some planes
  // (those take the exact loop, the others the padded copy), and a NaN in a column no window
  // covers (width 41, 2x2 stride 2, no pads: column 40), which must not reach the output.
  for (int64_t w : {40, 41}) {
    Builder b(12);
    auto xd = randomFloats(static_cast<size_t>(48 * 33 * w), rng);
    xd[static_cast<size_t>(5 * 33 * w + 7 * w + 3)] = testutil::kNan;
    xd[static_cast<size_t>(30 * 33 * w + 32 * w + w - 1)] = testutil::kNan;
    b.input("x", f32({1, 48, 33, w}, xd));
    const bool stem = w == 40;
    b.node("MaxPool", {"x"}, "y",
           {testutil::ints("kernel_shape", {stem ? 3 : 2, stem ? 3 : 2}), testutil::ints("strides", {2, 2}),
            testutil::ints("pads", stem ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{0, 0, 0, 0})});
    b.output("y");
    INFO("MaxPool split across threads, width " << w);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-6, 0);
    CHECK(ranOn(kernels, "cpu.maxpool"));
  }
}

TEST_CASE("cpu MaxPool 3x3 stride 1 and 2 (separable, from the input) matches the reference kernel", "[cpu][pool]") {
  // Both strides, every pad combination of 0/1 per side, ceil_mode, widths around the 16- and
  // 32-lane blocks (the tap-2 column past a block, masked loads before column 0 and past the
  // row), one-row planes, and NaN where a window reads it: first column, last column (read as
  // the column after a block), a middle one.
  std::mt19937 rng(77);
  const bool direct = onnxtool::cpu::activeRowOps().maxPool3x3 != nullptr;
  const int64_t widths[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 34, 35, 63, 64, 65, 66, 112};
  const int64_t heights[] = {1, 2, 3, 4, 7, 8};
  int cases = 0;
  for (int64_t st : {1, 2})
    for (int64_t w : widths)
      for (int pads = 0; pads < 16; ++pads) {
      const int64_t pt = pads & 1, pl = (pads >> 1) & 1, pb = (pads >> 2) & 1, pr = (pads >> 3) & 1;
      const int64_t h = heights[(cases + w) % 6], ceil = cases % 3 == 0 ? 1 : 0;
      ++cases;
      if (h + pt + pb < 3 || w + pl + pr < 3) continue;
      const int nanAt = cases % 4;  // 0: none; 1: column 0; 2: last column; 3: a random element
      auto xd = randomFloats(static_cast<size_t>(2 * h * w), rng);
      if (nanAt == 1) xd[static_cast<size_t>((h / 2) * w)] = testutil::kNan;
      if (nanAt == 2) xd[static_cast<size_t>(h * w + w - 1)] = testutil::kNan;  // row 0: not the last of a window
      if (nanAt == 3) xd[static_cast<size_t>(rng() % (2 * h * w))] = testutil::kNan;
      Builder b(12);
      b.input("x", f32({1, 2, h, w}, xd));
      std::vector<Attribute> attrs{testutil::ints("kernel_shape", {3, 3}), testutil::ints("strides", {st, st}),
                                   testutil::ints("pads", {pt, pl, pb, pr})};
      if (ceil) attrs.push_back(testutil::one("ceil_mode", 1));
      b.node("MaxPool", {"x"}, "y", attrs);
      b.output("y");
      INFO("MaxPool 3x3/" << st << " " << h << "x" << w << " pads " << pt << pl << pb << pr << " ceil " << ceil << " nan " << nanAt);
      auto kernels = checkAgainstRef(*b.m, b.feeds, 0, 0);
      INFO(joined(kernels));
      // Stride 1 keeping the size on a plane of up to 64x64: the flat kernel (the next test).
      const bool flat = onnxtool::cpu::activeRowOps().maxPoolFlat && st == 1 && pt + pb == 2 && pl + pr == 2 && h * w <= 4096;
      CHECK(ranOn(kernels, flat ? "cpu.maxpool.f32.flat" : direct ? "cpu.maxpool.f32.3x3" : "cpu.maxpool"));
    }
}

TEST_CASE("cpu MaxPool stride 1 keeping the size (flat, separable) matches the reference kernel", "[cpu][pool]") {
  // Kernels 1x1 to 7x7 and rectangular ones, every split of the pads between the two sides,
  // planes from 1x1 to 20x20 and 9x33 (blocks of 16 positions crossing rows, partial last
  // blocks), ceil_mode (no effect at stride 1), NaN at the first, last or a random position.
  std::mt19937 rng(79);
  const bool flat = onnxtool::cpu::activeRowOps().maxPoolFlat != nullptr;
  const std::pair<int64_t, int64_t> kernelsHw[] = {{1, 1}, {2, 2}, {3, 3}, {5, 5}, {3, 5}, {7, 1}, {1, 7}, {7, 7}};
  const std::pair<int64_t, int64_t> planes[] = {{1, 1}, {1, 17}, {3, 5}, {7, 7}, {4, 16}, {5, 16}, {13, 13}, {20, 20}, {14, 14}, {9, 33}};
  int cases = 0;
  for (auto [kh, kw] : kernelsHw)
    for (auto [h, w] : planes)
      for (int64_t pt = 0; pt < kh; ++pt) {
        const int64_t pl = (pt + cases) % kw, pb = kh - 1 - pt, pr = kw - 1 - pl;
        ++cases;
        const int nanAt = cases % 5;  // 0, 4: none; 1: the first; 2: the last; 3: a random element
        auto xd = randomFloats(static_cast<size_t>(3 * h * w), rng);
        if (nanAt == 1) xd[0] = testutil::kNan;
        if (nanAt == 2) xd.back() = testutil::kNan;
        if (nanAt == 3) xd[static_cast<size_t>(rng() % xd.size())] = testutil::kNan;
        Builder b(12);
        b.input("x", f32({1, 3, h, w}, xd));
        std::vector<Attribute> attrs{testutil::ints("kernel_shape", {kh, kw}), testutil::ints("pads", {pt, pl, pb, pr})};
        if (cases % 3 == 0) attrs.push_back(testutil::one("ceil_mode", 1));
        b.node("MaxPool", {"x"}, "y", attrs);
        b.output("y");
        INFO("MaxPool " << kh << "x" << kw << " on " << h << "x" << w << " pads " << pt << pl << pb << pr << " nan " << nanAt);
        auto kernels = checkAgainstRef(*b.m, b.feeds, 0, 0);
        INFO(joined(kernels));
        CHECK(ranOn(kernels, flat ? "cpu.maxpool.f32.flat" : "cpu.maxpool"));
      }
  CHECK(cases > 200);
}

TEST_CASE("cpu AveragePool stride 1 keeping the size (flat, separable sums) matches the reference kernel", "[cpu][pool]") {
  // Inception's 3x3 branch pools and other kernels; every split of the pads, count_include_pad
  // 0 and 1, planes 1x1 to 20x20 and 9x33; NaN and infinities propagate as in the reference sum.
  std::mt19937 rng(80);
  const bool flat = onnxtool::cpu::activeRowOps().avgPoolFlat != nullptr;
  const std::pair<int64_t, int64_t> kernelsHw[] = {{1, 1}, {2, 2}, {3, 3}, {5, 5}, {3, 5}, {7, 1}, {7, 7}};
  const std::pair<int64_t, int64_t> planes[] = {{1, 1}, {1, 17}, {3, 5}, {8, 8}, {5, 16}, {17, 17}, {9, 33}, {20, 20}};
  int cases = 0;
  for (auto [kh, kw] : kernelsHw)
    for (auto [h, w] : planes)
      for (int64_t pt = 0; pt < kh; ++pt) {
        const int64_t pl = (pt + cases) % kw, pb = kh - 1 - pt, pr = kw - 1 - pl;
        ++cases;
        const int special = cases % 6;  // 1: NaN; 2: +inf; 3: +inf and -inf in one window
        auto xd = randomFloats(static_cast<size_t>(2 * h * w), rng);
        const size_t at = static_cast<size_t>(rng() % xd.size());
        if (special == 1) xd[at] = testutil::kNan;
        if (special == 2) xd[at] = std::numeric_limits<float>::infinity();
        if (special == 3) {
          xd[0] = std::numeric_limits<float>::infinity();
          if (xd.size() > 1) xd[1] = -std::numeric_limits<float>::infinity();
        }
        Builder b(12);
        b.input("x", f32({1, 2, h, w}, xd));
        std::vector<Attribute> attrs{testutil::ints("kernel_shape", {kh, kw}), testutil::ints("pads", {pt, pl, pb, pr}),
                                     testutil::one("count_include_pad", cases % 2)};
        b.node("AveragePool", {"x"}, "y", attrs);
        b.output("y");
        INFO("AveragePool " << kh << "x" << kw << " on " << h << "x" << w << " pads " << pt << pl << pb << pr << " include "
                            << cases % 2 << " special " << special);
        auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-5);
        INFO(joined(kernels));
        CHECK(ranOn(kernels, flat && kh * kw > 1 ? "cpu.averagepool.f32.flat" : "cpu.averagepool"));
      }
  CHECK(cases > 150);
}

TEST_CASE("cpu AveragePool 2x2 stride 2 (DenseNet's transitions) matches the reference kernel", "[cpu][pool]") {
  // Even and odd sizes (the last row or column left out), one-pixel outputs, rows around the
  // 16-lane blocks, count_include_pad either way (no pads: full windows), NaN and infinities;
  // ceil_mode with an odd size and padded windows take the general kernel.
  std::mt19937 rng(81);
  struct Case {
    int64_t n, c, h, w, ceil, pad;
  };
  const Case cases[] = {{1, 3, 8, 8, 0, 0},  {2, 5, 7, 9, 0, 0},  {1, 4, 56, 56, 0, 0}, {1, 2, 2, 2, 0, 0},
                        {1, 3, 2, 33, 0, 0}, {1, 2, 3, 65, 0, 0}, {1, 3, 7, 7, 1, 0},   {1, 3, 8, 8, 0, 1}};
  int i = 0;
  for (const Case& k : cases) {
    auto xd = randomFloats(static_cast<size_t>(k.n * k.c * k.h * k.w), rng);
    if (i % 3 == 1) xd[static_cast<size_t>(rng() % xd.size())] = testutil::kNan;
    if (i % 3 == 2) xd[static_cast<size_t>(rng() % xd.size())] = std::numeric_limits<float>::infinity();
    Builder b(12);
    b.input("x", f32({k.n, k.c, k.h, k.w}, xd));
    std::vector<Attribute> attrs{testutil::ints("kernel_shape", {2, 2}), testutil::ints("strides", {2, 2}),
                                 testutil::one("count_include_pad", i % 2)};
    if (k.ceil) attrs.push_back(testutil::one("ceil_mode", 1));
    if (k.pad) attrs.push_back(testutil::ints("pads", {1, 1, 1, 1}));
    b.node("AveragePool", {"x"}, "y", attrs);
    b.output("y");
    INFO("AveragePool 2x2/2 on " << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " ceil " << k.ceil << " pad " << k.pad);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-5);
    INFO(joined(kernels));
    const bool plane = k.h == 2 && k.w == 2 && !k.pad;  // the whole plane: a plane mean
    const bool fast = !k.pad && !(k.ceil && (k.h % 2 || k.w % 2)) && !plane;
    if (fast) CHECK(ranOn(kernels, "cpu.averagepool.f32.2x2"));
    if (plane) CHECK(ranOn(kernels, "cpu.averagepool.f32.plane"));
    if (k.pad) CHECK(ranOn(kernels, "cpu.averagepool"));
    if (!fast) CHECK(!ranOn(kernels, "cpu.averagepool.f32.2x2"));  // (ceil_mode: the reference kernel)
    ++i;
  }
}

TEST_CASE("cpu MaxPool 2x2 stride 2 (LeNet/VGG downsampling) matches the reference kernel", "[cpu][pool]") {
  // The AveragePool 2x2/2 cases with maxima: even and odd sizes, one-pixel outputs, rows around
  // the 16-lane blocks; NaN in either row or column of a window (propagated without the exact
  // loop), infinities, ties of +0 and -0, a plane of -inf; ceil_mode with an odd size, pads and
  // dilations take the general kernel.
  std::mt19937 rng(83);
  struct Case {
    int64_t n, c, h, w, ceil, pad, dil;
  };
  const Case cases[] = {{1, 3, 8, 8, 0, 0, 1},  {2, 5, 7, 9, 0, 0, 1},  {1, 8, 28, 28, 0, 0, 1}, {1, 2, 2, 2, 0, 0, 1},
                        {1, 3, 2, 33, 0, 0, 1}, {1, 2, 3, 65, 0, 0, 1}, {1, 16, 14, 14, 0, 0, 1}, {1, 3, 7, 7, 1, 0, 1},
                        {1, 3, 8, 8, 0, 1, 1},  {1, 3, 9, 9, 0, 0, 2}};
  int i = 0;
  for (const Case& k : cases) {
    auto xd = randomFloats(static_cast<size_t>(k.n * k.c * k.h * k.w), rng);
    const size_t at = static_cast<size_t>(rng() % xd.size());
    if (i % 4 == 1) xd[at] = testutil::kNan, xd[(at + 1) % xd.size()] = testutil::kNan;
    if (i % 4 == 2) xd[at] = std::numeric_limits<float>::infinity(), xd[(at + 3) % xd.size()] = -std::numeric_limits<float>::infinity();
    if (i % 4 == 3)
      for (size_t j = 0; j < xd.size(); ++j) xd[j] = j % 3 == 0 ? 0.0f : j % 3 == 1 ? -0.0f : -std::numeric_limits<float>::infinity();
    Builder b(12);
    b.input("x", f32({k.n, k.c, k.h, k.w}, xd));
    std::vector<Attribute> attrs{testutil::ints("kernel_shape", {2, 2}), testutil::ints("strides", {2, 2})};
    if (k.ceil) attrs.push_back(testutil::one("ceil_mode", 1));
    if (k.pad) attrs.push_back(testutil::ints("pads", {1, 1, 1, 1}));
    if (k.dil > 1) attrs.push_back(testutil::ints("dilations", {k.dil, k.dil}));
    b.node("MaxPool", {"x"}, "y", attrs);
    b.output("y");
    INFO("MaxPool 2x2/2 on " << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " ceil " << k.ceil << " pad " << k.pad
                             << " dilation " << k.dil);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 0, 0);
    INFO(joined(kernels));
    const bool fast = !k.pad && k.dil == 1 && !(k.ceil && (k.h % 2 || k.w % 2));
    CHECK(ranOn(kernels, "cpu.maxpool.f32") == true);
    CHECK(ranOn(kernels, "cpu.maxpool.f32.2x2") == fast);
    ++i;
  }
}

TEST_CASE("cpu BatchNormalization followed by Relu runs as one step", "[cpu][conv]") {
  // DenseNet's pre-activation BN + Relu: fused when the Relu alone reads the BN (NaN kept, as
  // Relu keeps it); a BN whose output is also read elsewhere, or a graph output, runs alone.
  std::mt19937 rng(82);
  for (int variant = 0; variant < 3; ++variant) {
    const int64_t c = 24, h = 9, w = 13;
    auto xd = randomFloats(static_cast<size_t>(2 * c * h * w), rng);
    xd[5] = testutil::kNan;
    Builder b(15);
    b.input("x", f32({2, c, h, w}, xd));
    auto pos = randomFloats(static_cast<size_t>(c), rng);
    for (float& v : pos) v = std::fabs(v) + 0.1f;
    b.constant("s", f32({c}, randomFloats(static_cast<size_t>(c), rng)));
    b.constant("bb", f32({c}, randomFloats(static_cast<size_t>(c), rng)));
    b.constant("m", f32({c}, randomFloats(static_cast<size_t>(c), rng)));
    b.constant("v", f32({c}, pos));
    b.node("BatchNormalization", {"x", "s", "bb", "m", "v"}, "n", {});
    b.node("Relu", {"n"}, "y", {});
    b.output("y");
    if (variant == 1) b.output("n");                  // the BN's output is a graph output too
    if (variant == 2) b.node("Sigmoid", {"n"}, "z", {}), b.output("z");  // and read by another node
    INFO("variant " << variant);
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, variant == 0 ? "cpu.batchnorm.f32+relu" : "cpu.batchnorm.f32"));
    if (variant != 0) CHECK(!ranOn(kernels, "cpu.batchnorm.f32+relu"));
  }
}

TEST_CASE("cpu AveragePool over the whole plane runs as a plane mean", "[cpu][pool]") {
  // open_nsfw's (tf2onnx) 7x7 pool on a 7x7 map; odd shapes, strides, count_include_pad without
  // pads, ceil_mode; a padded window is not a plane mean and takes the general kernel.
  std::mt19937 rng(78);
  struct Case {
    int64_t c, h, w, s;
    bool countPad, ceil, padded;
  };
  for (const Case& t : {Case{1024, 7, 7, 1, false, false, false}, Case{3, 1, 1, 1, false, false, false},
                        Case{5, 3, 17, 2, true, false, false}, Case{2, 9, 4, 3, false, true, false},
                        Case{4, 7, 7, 1, false, false, true}}) {
    Builder b(19);
    b.input("x", randomTensor({2, t.c, t.h, t.w}, rng, t.c == 5));
    const int64_t p = t.padded ? 1 : 0;
    std::vector<Attribute> attrs{testutil::ints("kernel_shape", {t.h + 2 * p, t.w + 2 * p}), testutil::ints("strides", {t.s, t.s}),
                                 testutil::ints("pads", {p, p, p, p})};
    if (t.countPad) attrs.push_back(testutil::one("count_include_pad", 1));
    if (t.ceil) attrs.push_back(testutil::one("ceil_mode", 1));
    b.node("AveragePool", {"x"}, "y", attrs);
    b.output("y");
    INFO("AveragePool " << t.c << "x" << t.h << "x" << t.w << " padded " << t.padded);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-6);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, t.padded ? "cpu.averagepool.f32" : "cpu.averagepool.f32.plane"));
    CHECK(ranOn(kernels, "cpu.averagepool.f32.plane") == !t.padded);
  }
}

TEST_CASE("cpu ConvTranspose matches the reference kernel", "[cpu][convtranspose]") {
  std::mt19937 rng(35);
  int ran = 0;
  for (int iter = 0; iter < 60; ++iter) {
    std::uniform_int_distribution<int64_t> chans(1, 20), spatial(1, 9), kern(1, 4), str(1, 3), pad(0, 2);
    const int64_t n = iter % 5 == 0 ? 2 : 1, c = iter == 0 ? 65 : chans(rng), m = iter == 1 ? 17 : chans(rng), h = spatial(rng), w = spatial(rng);
    const int64_t kh = kern(rng), kw = kern(rng), sh = str(rng), sw = str(rng), dh = iter % 3 == 0 ? 2 : 1, dw = iter % 4 == 0 ? 2 : 1;
    const int64_t pt = std::min(pad(rng), kh - 1), pl = std::min(pad(rng), kw - 1), pb = std::min(pad(rng), kh - 1), pr = std::min(pad(rng), kw - 1);
    const int64_t oph = iter % 2 ? std::min<int64_t>(sh, dh) - 1 : 0, opw = iter % 3 ? std::min<int64_t>(sw, dw) - 1 : 0;
    const int64_t oh = sh * (h - 1) + oph + (kh - 1) * dh + 1 - pt - pb, ow = sw * (w - 1) + opw + (kw - 1) * dw + 1 - pl - pr;
    if (oh <= 0 || ow <= 0) continue;
    Builder b(13);
    b.input("x", randomTensor({n, c, h, w}, rng, iter % 7 == 6));
    b.constant("w", randomTensor({c, m, kh, kw}, rng));
    std::vector<std::string> ins{"x", "w"};
    if (iter % 2 == 0) {
      b.constant("b", randomTensor({m}, rng));
      ins.push_back("b");
    }
    b.node("ConvTranspose", ins, "y",
           {testutil::ints("kernel_shape", {kh, kw}), testutil::ints("strides", {sh, sw}), testutil::ints("dilations", {dh, dw}),
            testutil::ints("pads", {pt, pl, pb, pr}), testutil::ints("output_padding", {oph, opw})});
    b.output("y");
    INFO("n" << n << " c" << c << " m" << m << " " << h << "x" << w << " k" << kh << "x" << kw << " s" << sh << "," << sw << " d" << dh << ","
              << dw << " p" << pt << "," << pl << "," << pb << "," << pr << " op" << oph << "," << opw);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-4);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, "cpu.convtranspose.f32.gemm"));
    ++ran;
  }
  CHECK(ran >= 40);
  SECTION("declined: groups, auto_pad, output_shape (the reference kernel runs)") {
    Builder b(13);
    b.input("x", randomTensor({1, 4, 5, 5}, rng));
    b.constant("w", randomTensor({4, 2, 3, 3}, rng));
    b.node("ConvTranspose", {"x", "w"}, "a", {testutil::one("group", 2)});
    b.node("ConvTranspose", {"x", "w"}, "c", {Attribute::ofString("auto_pad", "SAME_UPPER"), testutil::ints("strides", {2, 2})});
    b.output("a");
    b.output("c");
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    for (const auto& k : kernels) CHECK(k.find("fallback") != std::string::npos);
  }
}

TEST_CASE("cpu Resize (nearest, bilinear) matches the reference kernel", "[cpu][resize]") {
  std::mt19937 rng(34);
  const char* coords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"};
  const char* nearestModes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  const float factors[] = {0.5f, 0.6f, 1.f, 1.5f, 2.f, 3.f, 0.25f};
  std::uniform_int_distribution<int64_t> spatial(1, 11);
  int ran = 0;
  for (int iter = 0; iter < 160; ++iter) {
    const int64_t opset = iter % 3 == 0 ? 11 : iter % 3 == 1 ? 13 : 19;
    const bool linear = iter % 2 == 1;
    const char* coord = coords[iter / 2 % 5];
    if (std::string(coord) == "half_pixel_symmetric" && opset < 19) continue;
    const int64_t n = iter % 5 == 0 ? 2 : 1, c = iter % 4 == 0 ? 3 : 1, h = spatial(rng), w = spatial(rng);
    const float fh = factors[static_cast<size_t>(iter) % 7], fw = factors[static_cast<size_t>(iter / 7) % 7];
    const bool bySizes = iter % 4 == 2;
    Builder b(opset);
    b.input("x", randomTensor({n, c, h, w}, rng, iter % 6 == 5));
    std::vector<std::string> ins{"x", ""};
    if (opset == 11) {
      b.constant("roi", f32({0}, {}));
      ins[1] = "roi";
    }
    if (bySizes) {
      const int64_t oh = std::max<int64_t>(1, static_cast<int64_t>(static_cast<float>(h) * fh)), ow = std::max<int64_t>(1, static_cast<int64_t>(static_cast<float>(w) * fw));
      if (opset == 11) {
        b.constant("scales", f32({0}, {}));
        ins.push_back("scales");
      } else {
        ins.push_back("");
      }
      b.constant("sizes", testutil::i64({4}, {n, c, oh, ow}));
      ins.push_back("sizes");
    } else {
      if (static_cast<int64_t>(static_cast<float>(h) * fh) < 1 || static_cast<int64_t>(static_cast<float>(w) * fw) < 1) continue;
      b.constant("scales", f32({4}, {1.f, 1.f, fh, fw}));
      ins.push_back("scales");
    }
    std::vector<Attribute> attrs{Attribute::ofString("mode", linear ? "linear" : "nearest"),
                                 Attribute::ofString("coordinate_transformation_mode", coord)};
    if (!linear) attrs.push_back(Attribute::ofString("nearest_mode", nearestModes[static_cast<size_t>(iter / 3) % 4]));
    b.node("Resize", ins, "y", attrs);
    b.output("y");
    INFO("opset " << opset << (linear ? " linear " : " nearest ") << coord << " " << n << "x" << c << "x" << h << "x" << w << " by "
                  << (bySizes ? "sizes " : "scales ") << fh << "," << fw);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-6);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, linear ? "cpu.resize.f32.linear" : "cpu.resize.f32.nearest"));
    ++ran;
  }
  CHECK(ran >= 100);
  SECTION("declined: cubic, antialias, a resized channel axis (the reference kernel runs)") {
    Builder b(19);
    b.input("x", randomTensor({1, 2, 4, 4}, rng));
    b.constant("s1", f32({4}, {1.f, 1.f, 2.f, 2.f}));
    b.constant("s2", f32({4}, {1.f, 2.f, 2.f, 2.f}));
    b.node("Resize", {"x", "", "s1"}, "a", {Attribute::ofString("mode", "cubic")});
    b.node("Resize", {"x", "", "s1"}, "c", {Attribute::ofString("mode", "linear"), Attribute::ofInt("antialias", 1)});
    b.node("Resize", {"x", "", "s2"}, "d", {});
    b.output("a");
    b.output("c");
    b.output("d");
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-6);
    INFO(joined(kernels));
    for (const auto& k : kernels) CHECK(k.find("fallback") != std::string::npos);
  }
}

TEST_CASE("cpu LRN matches the reference kernel", "[cpu][lrn]") {
  std::mt19937 rng(26);
  struct Case {
    std::vector<int64_t> dims;
    int64_t size;
    float alpha, beta, bias;
  };
  const Case cases[] = {{{1, 7, 9, 11}, 5, 1e-4f, 0.75f, 1.f}, {{2, 3, 70}, 3, 0.5f, 0.6f, 2.f}, {{1, 16, 5, 5}, 4, 2.f, 0.75f, 0.5f},
                        {{1, 2, 3, 3}, 7, 1.f, 1.5f, 1.f}, {{0, 4, 3, 3}, 5, 1e-4f, 0.75f, 1.f}, {{3, 5}, 2, 1.f, 0.75f, 1.f}};
  for (const Case& c : cases) {
    Builder b(13);
    b.input("x", randomTensor(c.dims, rng, true));
    b.node("LRN", {"x"}, "y",
           {testutil::one("size", c.size), Attribute::ofFloat("alpha", c.alpha), Attribute::ofFloat("beta", c.beta),
            Attribute::ofFloat("bias", c.bias)});
    b.output("y");
    INFO("LRN rank " << c.dims.size() << " size " << c.size << " beta " << c.beta);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-5, 1e-6);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, "cpu.lrn"));
  }
}

TEST_CASE("cpu runs reuse a finished run's arena only when none of its outputs is held", "[cpu][arena]") {
  std::mt19937 rng(27);
  Builder b(13);
  b.input("x", randomTensor({1, 3, 6, 6}, rng));
  b.constant("w", randomTensor({4, 3, 3, 3}, rng));
  b.node("Conv", {"x", "w"}, "c", {testutil::ints("kernel_shape", {3, 3})});
  b.node("Relu", {"c"}, "y");
  b.output("y");
  auto ref = makeExecutor("ref")->prepare(*b.m, {});
  auto plan = makeExecutor("cpu")->prepare(*b.m, rawGraph());
  std::vector<std::map<std::string, RtValue>> feeds;
  for (int i = 0; i < 4; ++i) feeds.push_back({{"x", RtValue::ofTensor(randomTensor({1, 3, 6, 6}, rng))}});
  auto held = plan->run(feeds[0]);  // kept while the next runs go on
  for (int i = 1; i < 4; ++i) {
    auto got = plan->run(feeds[static_cast<size_t>(i)]);  // dropped at once: its arena is reused
    CompareResult r = compareValues(got[0], ref->run(feeds[static_cast<size_t>(i)])[0], 1e-5, 1e-5);
    INFO("run " << i << ": " << r.message);
    CHECK(r.ok);
  }
  CompareResult r = compareValues(held[0], ref->run(feeds[0])[0], 1e-5, 1e-5);
  INFO(r.message);
  CHECK(r.ok);
}

namespace {

/// The convolution in double, group 1: outputs and, per output, the sum of |w x| over its taps
/// plus |bias| (the scale of the rounding error any float algorithm makes).
void directConvDouble(const ConvCase& k, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                      int64_t oh, int64_t ow, std::vector<double>& out, std::vector<double>& mag) {
  out.assign(static_cast<size_t>(k.n * k.m * oh * ow), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = b.empty() ? 0.0 : b[static_cast<size_t>(m)], a = b.empty() ? 0.0 : std::fabs(s);
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t iy = oy * k.sh - k.pt + i * k.dh, ix = ox * k.sw - k.pl + j * k.dw;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const double p = double(w[static_cast<size_t>(((m * k.c + c) * k.kh + i) * k.kw + j)]) *
                                 x[static_cast<size_t>(((n * k.c + c) * k.h + iy) * k.w + ix)];
                s += p;
                a += std::fabs(p);
              }
          const size_t o = static_cast<size_t>(((n * k.m + m) * oh + oy) * ow + ox);
          out[o] = s;
          mag[o] = a;
        }
}

}  // namespace

// The Winograd kernel's stated precision (kernels_winograd.cpp): |error| <= 1e-4 x the largest
// sum of |w x| over the taps of an output of its 4x4 tile (measured: about 2e-6), on
// channels 1, 3, 17, 65, images not a multiple of the 4x4 tile, asymmetric pads, batch 2, at 1
// and 2 threads (tiles split across threads, or each phase split), every ISA path CTest runs.
TEST_CASE("cpu Winograd F(4x4,3x3) Conv matches a direct double-precision sum", "[cpu][conv][winograd]") {
  ScopedEnv always("ONNXTOOL_WINOGRAD", "always");
  std::mt19937 rng(31);
  const ConvCase cases[] = {
      {1, 1, 1, 1, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // one pixel, one channel
      {1, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // RGB-like input, 2x2 tiles
      {2, 17, 9, 13, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // batch 2: tiles of two images in one block
      {1, 65, 6, 6, 33, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // no padding: output 4x4, one tile
      {1, 17, 10, 11, 65, 3, 3, 1, 1, 1, 1, 2, 0, 1, 3, 1},  // asymmetric pads, M past two row panels
      {1, 4, 3, 30, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // a wide row: tile rows longer than a vector
      {2, 3, 41, 3, 7, 3, 3, 1, 1, 1, 1, 1, 2, 1, 2, 1},     // tall and narrow, pads wider than the kernel
      {1, 300, 5, 5, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // channels past the 256 block: accumulated GEMM
      {1, 16, 48, 48, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // 144 tiles in one block, its phases split
      {1, 64, 60, 58, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // 225 tiles: two blocks (160 + 65), phases split
      {1, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // 16 tiles: threads split each phase
      {2, 65, 7, 7, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 7x7 maps
      {1, 5, 6, 62, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // 16 tiles a row: rows transformed in place
      {2, 4, 9, 130, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 33 tiles a row: in place, a partial vector
  };
  double worst = 0;
  for (size_t ci = 0; ci < std::size(cases); ++ci) {
    const ConvCase& k = cases[ci];
    const bool bias = ci % 2 == 0;
    Builder b = convModel(k, rng, bias, false);
    const int64_t oh = k.h + k.pt + k.pb - 2, ow = k.w + k.pl + k.pr - 2;
    auto floats = [&](const std::string& name) {
      const TensorData& t = name == "x" ? static_cast<const TensorData&>(*b.feeds.at("x").tensor) : *b.vals.at(name)->initializer();
      std::vector<float> v(t.raw.size() / sizeof(float));
      std::memcpy(v.data(), t.raw.data(), v.size() * sizeof(float));
      return v;
    };
    std::vector<double> want, mag;
    directConvDouble(k, floats("x"), floats("w"), bias ? floats("b") : std::vector<float>{}, oh, ow, want, mag);
    for (int threads : {1, 2}) {
      PrepareOptions po;
      po.threads = threads;
      auto plan = makeExecutor("cpu")->prepare(*b.m, po);
      RunProfile prof;
      auto got = plan->runProfiled(b.feeds, prof);
      INFO("case " << ci << " threads " << threads);
      REQUIRE(prof.nodes.size() == 1);
      CHECK(prof.nodes[0].kernel.rfind("cpu.conv.f32.winograd", 0) == 0);
      const RtTensor& y = *got[0].tensor;
      REQUIRE(y.raw.size() == want.size() * sizeof(float));
      const float* p = reinterpret_cast<const float*>(y.raw.data());
      // The scale of an output's error is that of its 4x4 tile (the transforms mix the tile's
      // whole 6x6 input patch): the largest sum |w x| among the tile's outputs.
      std::vector<double> tileMag(mag.size(), 0.0);
      for (int pass = 0; pass < 2; ++pass)
        for (size_t i = 0; i < mag.size(); ++i) {
          const int64_t plane = static_cast<int64_t>(i) / (oh * ow), oy = static_cast<int64_t>(i) / ow % oh, ox = static_cast<int64_t>(i) % ow;
          const size_t key = static_cast<size_t>((plane * oh + oy / 4 * 4) * ow + ox / 4 * 4);  // the tile's first output
          if (pass == 0) tileMag[key] = std::max(tileMag[key], mag[i]);
          else tileMag[i] = tileMag[key];
        }
      double caseWorst = 0;
      for (size_t i = 0; i < want.size(); ++i) caseWorst = std::max(caseWorst, std::fabs(p[i] - want[i]) / std::max(tileMag[i], 1e-30));
      INFO("max |error| / sum |w x| of the tile = " << caseWorst);
      CHECK(caseWorst <= 1e-4);
      worst = std::max(worst, caseWorst);
    }
  }
  INFO("worst " << worst);
  CHECK(worst > 0);  // the comparison ran on real differences
}

TEST_CASE("cpu Winograd Conv applies the fused epilogues and keeps NaN/Inf where a direct sum does", "[cpu][conv][winograd]") {
  ScopedEnv always("ONNXTOOL_WINOGRAD", "always");
  std::mt19937 rng(32);
  for (bool specials : {false, true}) {
    // Conv + BatchNormalization + Relu, Conv + Add (residual) + Clip, Conv (bias from an input).
    Builder b(15);
    b.input("x", randomTensor({2, 5, 9, 10}, rng, specials));
    b.constant("w1", randomTensor({6, 5, 3, 3}, rng));
    b.constant("b1", randomTensor({6}, rng));
    b.node("Conv", {"x", "w1", "b1"}, "c1", {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {1, 1, 1, 1})});
    auto var = randomFloats(6, rng);
    for (float& v : var) v = std::fabs(v) + 0.1f;
    b.constant("s", randomTensor({6}, rng));
    b.constant("o", randomTensor({6}, rng));
    b.constant("mu", randomTensor({6}, rng));
    b.constant("var", f32({6}, var));
    b.node("BatchNormalization", {"c1", "s", "o", "mu", "var"}, "n1");
    b.node("Relu", {"n1"}, "r1");
    b.constant("w2", randomTensor({5, 6, 3, 3}, rng));
    b.node("Conv", {"r1", "w2"}, "c2", {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {1, 1, 1, 1})});
    b.node("Add", {"c2", "x"}, "a2");
    b.constant("lo", f32({}, {-0.5f}));
    b.constant("hi", f32({}, {0.75f}));
    b.node("Clip", {"a2", "lo", "hi"}, "k2");
    b.constant("w3", randomTensor({3, 5, 3, 3}, rng));
    b.input("b3", randomTensor({3}, rng));
    b.node("Conv", {"k2", "w3", "b3"}, "y", {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {0, 1, 2, 1})});
    b.output("y");
    INFO("specials " << specials);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-4);
    INFO(joined(kernels));
    REQUIRE(kernels.size() == 3);
    CHECK(kernels[0].rfind("cpu.conv.f32.winograd", 0) == 0);
    CHECK(kernels[0].ends_with("+bn+relu"));
    CHECK(kernels[1].ends_with("+add+clip"));
    CHECK(kernels[2].rfind("cpu.conv.f32.winograd", 0) == 0);
  }
  for (bool specials : {false, true}) {
    // Conv + SiLU (x * Sigmoid(x): YOLOv5-v8's every conv), Conv + BatchNormalization + residual
    // Add + HardSwish: the activation on each output row after the rest (NaN/Inf inputs: the
    // direct fallback applies it too).
    Builder b(15);
    b.input("x", randomTensor({2, 5, 9, 10}, rng, specials));
    b.constant("w1", randomTensor({6, 5, 3, 3}, rng));
    b.constant("b1", randomTensor({6}, rng));
    b.node("Conv", {"x", "w1", "b1"}, "c1", {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {1, 1, 1, 1})});
    b.node("Sigmoid", {"c1"}, "g1");
    b.node("Mul", {"c1", "g1"}, "s1");
    b.constant("w2", randomTensor({5, 6, 3, 3}, rng));
    b.node("Conv", {"s1", "w2"}, "c2", {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {1, 1, 1, 1})});
    auto var = randomFloats(5, rng);
    for (float& v : var) v = std::fabs(v) + 0.1f;
    b.constant("s", randomTensor({5}, rng));
    b.constant("o", randomTensor({5}, rng));
    b.constant("mu", randomTensor({5}, rng));
    b.constant("var", f32({5}, var));
    b.node("BatchNormalization", {"c2", "s", "o", "mu", "var"}, "n2");
    b.node("Add", {"n2", "x"}, "a2");
    b.node("HardSwish", {"a2"}, "y");
    b.output("y");
    INFO("specials " << specials);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-4);
    INFO(joined(kernels));
    REQUIRE(kernels.size() == 2);
    CHECK(kernels[0] == "cpu.conv.f32.winograd." + std::string(cpu::isaName(cpu::activeIsa())) + "+silu");
    CHECK(kernels[1] == "cpu.conv.f32.winograd." + std::string(cpu::isaName(cpu::activeIsa())) + "+bn+add+hardswish");
  }
  SECTION("a weight too large for the transforms: the packed GEMM instead") {
    Builder b(13);
    b.input("x", randomTensor({1, 4, 8, 8}, rng));
    auto w = randomFloats(144, rng);
    w[5] = 3e30f;
    b.constant("w", f32({4, 4, 3, 3}, w));
    b.node("Conv", {"x", "w"}, "y", {testutil::ints("kernel_shape", {3, 3}), testutil::ints("pads", {1, 1, 1, 1})});
    b.output("y");
    auto kernels = checkAgainstRef(*b.m, b.feeds);
    INFO(joined(kernels));
    CHECK(ranOn(kernels, "cpu.conv.f32.gemm"));
  }
}

TEST_CASE("ONNXTOOL_WINOGRAD picks the Winograd kernel where it pays and never when told", "[cpu][conv][winograd]") {
  std::mt19937 rng(33);
  auto kernelOf = [&](const ConvCase& k) {
    Builder b = convModel(k, rng, true, false);
    return checkAgainstRef(*b.m, b.feeds, 1e-3, 1e-3).at(0);
  };
  const ConvCase resnetLike{1, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const ConvCase strided{1, 64, 28, 28, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1};
  const ConvCase fewChannels{1, 3, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const ConvCase map14{1, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // 4x4 tiles: the direct kernel on AVX-512
  const ConvCase dense28{1, 128, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // one output panel, 7x7 tiles: direct on AVX-512
  const ConvCase dense56{1, 128, 56, 56, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // 14x14 tiles: Winograd
  {
    ScopedEnv unset("ONNXTOOL_WINOGRAD", "");
    ScopedEnv layout("ONNXTOOL_CONV_LAYOUT", "");
    CHECK(kernelOf(resnetLike).rfind("cpu.conv.f32.winograd", 0) == 0);
    CHECK(kernelOf(map14).rfind(cpu::activeIsa() == cpu::Isa::Avx512 ? "cpu.conv.f32.gemm.direct" : "cpu.conv.f32.winograd", 0) == 0);
    CHECK(kernelOf(dense28).rfind(cpu::activeIsa() == cpu::Isa::Avx512 ? "cpu.conv.f32.gemm.direct" : "cpu.conv.f32.winograd", 0) == 0);
    CHECK(kernelOf(dense56).rfind("cpu.conv.f32.winograd", 0) == 0);
    CHECK(kernelOf(strided).rfind("cpu.conv.f32.gemm", 0) == 0);
    CHECK(kernelOf(fewChannels).rfind("cpu.conv.f32.gemm", 0) == 0);
  }
  {
    ScopedEnv never("ONNXTOOL_WINOGRAD", "never");
    CHECK(kernelOf(resnetLike).rfind("cpu.conv.f32.gemm", 0) == 0);
  }
}

TEST_CASE("cpu Conv reads weights borrowed at any byte offset (mapped model files) and scales them for a fused BatchNormalization",
          "[cpu][conv]") {
  // A model file's raw_data sits at any offset: the kernels read float-aligned weights in place
  // and copy the others first; a folded BatchNormalization scales a copy, never the model's bytes.
  std::mt19937 rng(91);
  struct Kind {
    ConvCase k;
    const char* kernel;
  };
  const Kind kinds[] = {
      {{1, 16, 9, 11, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, "cpu.conv.f32"},          // pointwise GEMM
      // AVX-512 channel-major: the weights read in place at any offset (no copy), a last
      // panel of 1 row, of 5 rows, and two groups of 13
      {{1, 16, 9, 11, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, "cpu.conv.f32"},
      {{1, 20, 12, 11, 29, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, "cpu.conv.f32"},
      {{1, 16, 9, 11, 26, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2}, "cpu.conv.f32"},
      {{1, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, "cpu.conv.f32.winograd"},  // Winograd
      {{1, 24, 12, 13, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 24}, "cpu.conv.f32"},        // depthwise
      {{1, 8, 15, 14, 12, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 1}, "cpu.conv.f32"},          // im2col GEMM
  };
  ScopedEnv unset("ONNXTOOL_WINOGRAD", "");
  ScopedEnv layout("ONNXTOOL_CONV_LAYOUT", "");
  for (const Kind& kind : kinds)
    for (size_t offset : {size_t{0}, size_t{1}, size_t{2}, size_t{3}})
      for (bool bn : {false, true}) {
        const ConvCase& k = kind.k;
        Builder b = convModel(k, rng, true, false);
        // the weights' bytes again, at `offset` into a buffer of their own
        Value* wv = b.vals.at("w");
        Tensor& wt = *wv->initializer();
        const std::vector<uint8_t> before(wt.raw.data(), wt.raw.data() + wt.raw.size());
        auto owner = std::make_shared<std::vector<uint8_t>>(before.size() + 8);
        const uint8_t* base = owner->data() + (16 - reinterpret_cast<uintptr_t>(owner->data()) % 16) % 16;
        REQUIRE(base + offset + before.size() <= owner->data() + owner->size());
        std::memcpy(const_cast<uint8_t*>(base + offset), before.data(), before.size());
        wt.raw = Buffer::borrow(owner, base + offset, before.size());
        REQUIRE(wt.raw.isAligned(4) == (offset == 0));
        if (bn) {
          auto pos = randomFloats(static_cast<size_t>(k.m), rng);
          for (float& v : pos) v = std::fabs(v) + 0.1f;
          b.constant("s", f32({k.m}, randomFloats(static_cast<size_t>(k.m), rng)));
          b.constant("bb", f32({k.m}, randomFloats(static_cast<size_t>(k.m), rng)));
          b.constant("mean", f32({k.m}, randomFloats(static_cast<size_t>(k.m), rng)));
          b.constant("var", f32({k.m}, pos));
          b.node("BatchNormalization", {"y", "s", "bb", "mean", "var"}, "z", {});
          b.m->graph->removeOutput(0);
          b.output("z");
        }
        INFO("kernel " << kind.kernel << " offset " << offset << " bn " << bn);
        auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-3, 1e-3);
        INFO(joined(kernels));
        CHECK(ranOn(kernels, kind.kernel));
        CHECK(std::memcmp(wt.raw.data(), before.data(), before.size()) == 0);  // the model's weights untouched
      }
  // Several such convolutions in one plan: each copy reuses the build's scratch (a larger one
  // first, then smaller ones over its stale tail; a scaled one), side by side at 2 threads.
  Builder b(13);
  b.input("x", randomTensor({1, 32, 12, 12}, rng));
  auto misaligned = [&](const std::string& name, std::vector<int64_t> dims, size_t offset) {
    Tensor t = randomTensor(std::move(dims), rng);
    auto owner = std::make_shared<std::vector<uint8_t>>(t.raw.size() + 8);
    std::memcpy(owner->data() + offset, t.raw.data(), t.raw.size());
    t.setRaw(Buffer::borrow(owner, owner->data() + offset, t.raw.size()));
    b.constant(name, std::move(t));
  };
  misaligned("w1", {48, 32, 3, 3}, 1);
  misaligned("w2", {16, 48, 1, 1}, 2);
  misaligned("w3", {24, 16, 3, 3}, 3);
  const auto pads = testutil::ints("pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "w1"}, "c1", {pads});
  b.node("Conv", {"c1", "w2"}, "c2", {});
  b.node("Conv", {"c2", "w3"}, "c3", {pads});
  auto pos = randomFloats(24, rng);
  for (float& v : pos) v = std::fabs(v) + 0.1f;
  b.constant("s", f32({24}, randomFloats(24, rng)));
  b.constant("bb", f32({24}, randomFloats(24, rng)));
  b.constant("mean", f32({24}, randomFloats(24, rng)));
  b.constant("var", f32({24}, pos));
  b.node("BatchNormalization", {"c3", "s", "bb", "mean", "var"}, "z", {});
  b.output("z");
  auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-3, 1e-3);
  INFO(joined(kernels));
  CHECK(ranOn(kernels, "cpu.conv.f32"));
}

TEST_CASE("cpu BatchNormalization -> Relu -> 1x1 Conv runs as one step, the conv applying them as it packs", "[cpu][conv]") {
  // DenseNet's pre-activation layers: relu(x * s + b) per input channel applied while the conv
  // packs its input, channel-major and pixel-major; NaN kept (as Relu keeps it); not taken when
  // the BatchNormalization or the Relu has another reader, or the conv is not 1x1.
  std::mt19937 rng(93);
  struct Shape {
    int64_t c, h, w, m;
  };
  for (const Shape& sh : {Shape{24, 28, 28, 40}, Shape{96, 14, 14, 32}, Shape{20, 7, 9, 16}})
    for (const char* layout : {"channel", "pixel"})
      for (int variant = 0; variant < 4; ++variant) {
        ScopedEnv env("ONNXTOOL_CONV_LAYOUT", layout);
        const int64_t c = sh.c, m = sh.m;
        auto xd = randomFloats(static_cast<size_t>(c * sh.h * sh.w), rng);
        xd[7] = testutil::kNan;
        Builder b(15);
        b.input("x", f32({1, c, sh.h, sh.w}, xd));
        auto pos = randomFloats(static_cast<size_t>(c), rng);
        for (float& v : pos) v = std::fabs(v) + 0.1f;
        b.constant("s", f32({c}, randomFloats(static_cast<size_t>(c), rng)));
        b.constant("bb", f32({c}, randomFloats(static_cast<size_t>(c), rng)));
        b.constant("mean", f32({c}, randomFloats(static_cast<size_t>(c), rng)));
        b.constant("var", f32({c}, pos));
        const int64_t k = variant == 3 ? 3 : 1;
        b.constant("w", randomTensor({m, c, k, k}, rng));
        b.constant("cb", randomTensor({m}, rng));
        b.node("BatchNormalization", {"x", "s", "bb", "mean", "var"}, "n", {});
        b.node("Relu", {"n"}, "r", {});
        std::vector<Attribute> attrs;
        if (k == 3) attrs.push_back(testutil::ints("pads", {1, 1, 1, 1}));
        b.node("Conv", {"r", "w", "cb"}, "y", attrs);
        b.node("Relu", {"y"}, "z", {});
        b.output("z");
        if (variant == 1) b.output("r");                                      // the Relu's output read elsewhere
        if (variant == 2) b.node("Sigmoid", {"n"}, "q", {}), b.output("q");  // the BatchNormalization's too
        INFO("shape " << c << "x" << sh.h << "x" << sh.w << " -> " << m << " " << layout << " variant " << variant);
        auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-4);
        INFO(joined(kernels));
        bool fused = false;
        for (const auto& kn : kernels) fused = fused || kn.find("+bn+relu_in") != std::string::npos;
        CHECK(fused == (variant == 0));
        if (variant == 0) CHECK(kernels.size() == 1);  // BatchNormalization, Relu, Conv and Relu: one step
      }
}

namespace {

/// A chain of convolutions as MobileNet/EfficientNet write them, for the blocked layout
/// (kernels_nchwc.h): 3x3 stem (3 channels: plain) -> depthwise -> pointwise -> pointwise ->
/// strided depthwise -> pointwise -> pointwise + residual Add -> squeeze-excitation (GAP, two 1x1
/// convs, Sigmoid, Mul) -> pointwise -> GlobalAveragePool; a middle value is also a graph output
/// (kept plain), and `c` picks the widths (multiples of 8, odd block counts among them).
Builder nchwcChain(int64_t n, int64_t h, int64_t w, int64_t c, int64_t dwK, int64_t dil, bool silu, std::mt19937& rng,
                   bool specials) {
  Builder b(17);
  b.input("x", randomTensor({n, 3, h, w}, rng, specials));
  auto conv = [&](const std::string& in, const std::string& out, int64_t ci, int64_t co, int64_t k, int64_t s, int64_t group,
                  int64_t d, std::vector<int64_t> pads) {
    auto wv = randomFloats(static_cast<size_t>(co * ci / group * k * k), rng);
    for (float& v : wv) v *= 0.5f;  // keeps the chain's values near 1
    b.constant(out + "_w", f32({co, ci / group, k, k}, wv));
    b.constant(out + "_b", randomTensor({co}, rng));
    b.node("Conv", {in, out + "_w", out + "_b"}, out,
           {testutil::ints("kernel_shape", {k, k}), testutil::ints("strides", {s, s}), testutil::ints("dilations", {d, d}),
            testutil::ints("pads", pads), testutil::one("group", group)});
  };
  b.constant("lo", f32({}, {0.f}));
  b.constant("hi", f32({}, {6.f}));
  auto act = [&](const std::string& in, const std::string& out) {
    if (silu) {
      b.node("Sigmoid", {in}, out + "_sg");
      b.node("Mul", {in, out + "_sg"}, out);
    } else {
      b.node("Clip", {in, "lo", "hi"}, out);
    }
  };
  const int64_t pd = dwK / 2 * dil;
  conv("x", "stem", 3, c, 3, 1, 1, 1, {1, 1, 1, 1});
  act("stem", "stem_a");
  conv("stem_a", "dw1", c, c, dwK, 1, c, dil, {pd, pd, pd, pd});
  act("dw1", "dw1_a");
  conv("dw1_a", "pw1", c, 16, 1, 1, 1, 1, {0, 0, 0, 0});
  conv("pw1", "pw2", 16, 3 * c, 1, 1, 1, 1, {0, 0, 0, 0});
  act("pw2", "pw2_a");
  conv("pw2_a", "dw2", 3 * c, 3 * c, dwK, 2, 3 * c, 1, {dwK / 2, dwK / 2 - 1 + dwK % 2, dwK / 2 + 1, dwK / 2});  // asymmetric
  act("dw2", "dw2_a");
  conv("dw2_a", "pw3", 3 * c, 24, 1, 1, 1, 1, {0, 0, 0, 0});
  conv("pw3", "pw4", 24, 24, 1, 1, 1, 1, {0, 0, 0, 0});
  b.node("Add", {"pw4", "pw3"}, "res");
  // squeeze-excitation over res: its channel scale is fused into the pointwise conv after it
  b.node("GlobalAveragePool", {"res"}, "se_p");
  conv("se_p", "se1", 24, 8, 1, 1, 1, 1, {0, 0, 0, 0});
  b.node("Relu", {"se1"}, "se1_a");
  conv("se1_a", "se2", 8, 24, 1, 1, 1, 1, {0, 0, 0, 0});
  b.node("Sigmoid", {"se2"}, "se2_s");
  b.node("Mul", {"res", "se2_s"}, "se");
  conv("se", "pw5", 24, 40, 1, 1, 1, 1, {0, 0, 0, 0});
  act("pw5", "pw5_a");
  b.node("GlobalAveragePool", {"pw5_a"}, "pool");
  b.output("pool");
  b.output("pw2_a");  // a graph output in the middle of the chain
  return b;
}

}  // namespace

TEST_CASE("cpu convolution chains in the blocked layout (NCHWc) match the reference kernel", "[cpu][conv][nchwc]") {
  const char* setting = GENERATE("", "0");
  ScopedEnv forced("ONNXTOOL_NCHWC", setting);
  // small maps' depthwise convolutions from a zero-padded plane, or on edge-checked rows
  const char* padded = GENERATE("", "0");
  ScopedEnv forcedPad("ONNXTOOL_NCHWC_DWPAD", padded);
  // The layout is chosen where the AVX2 path runs (ONNXTOOL_ISA=avx2 on an AVX-512 machine too),
  // and on the AVX-512 path of cores with half-rate 512-bit FMAs (Zen 4).
  const cpu::Isa isa = cpu::activeIsa();
  const bool expectBlocked =
      (isa == cpu::Isa::Avx2 || (isa == cpu::Isa::Avx512 && cpu::avx512HalfRate())) && std::string(setting) != "0";
  INFO("ONNXTOOL_NCHWC=" << setting << " ONNXTOOL_NCHWC_DWPAD=" << padded << ", isa " << cpu::isaName(cpu::activeIsa()));
  std::mt19937 rng(811);
  struct Shape {
    int64_t n, h, w, c, k, dil;
    bool silu;
  };
  const Shape shapes[] = {
      {1, 15, 13, 8, 3, 1, false},  // odd map: row tails, one tile of 1 pixel
      {2, 9, 7, 16, 3, 2, true},    // two images, dilation, SiLU
      {1, 6, 11, 24, 5, 1, false},  // 5x5, three blocks (a pointwise group of one block)
      {1, 1, 1, 8, 3, 1, true},     // a 1x1 map: every tap but the centre is padding
      {1, 28, 28, 32, 3, 1, false}, // enough work for two threads
      {1, 10, 10, 96, 3, 1, true},  // 288 channels: the pointwise conv sums two blocks of 256 input channels
      {1, 14, 21, 8, 5, 1, true},   // 5x5 rows of 17 interior pixels: two runs of 8 sharing loads, a tail
      {2, 22, 20, 8, 3, 1, true},   // two images, the channel scale in per-image weights (40 < 11x10 pixels)
  };
  int iter = 0;
  for (const Shape& s : shapes) {
    Builder b = nchwcChain(s.n, s.h, s.w, s.c, s.k, s.dil, s.silu, rng, iter++ % 2 == 1);
    INFO("n " << s.n << " map " << s.h << "x" << s.w << " c " << s.c << " k " << s.k << " dil " << s.dil << " silu " << s.silu);
    auto kernels = checkAgainstRef(*b.m, b.feeds, 1e-4, 1e-4);
    INFO(joined(kernels));
    int blocked = 0;
    for (const auto& k : kernels) blocked += k.find(".nchwc8") != std::string::npos;
    // steps left plain got their plain kernel (deferred while the twin was made)
    for (const auto& k : kernels) CHECK(k.find(".pending") == std::string::npos);
    if (!expectBlocked) {
      CHECK(blocked == 0);
      continue;
    }
    // dw1 (plain input from the stem: reordered in), pw1 (blocked), pw2 (a graph output: written
    // plain), dw2 (reads pw2's plain output), pw3, pw4 + residual, pw5 (+ the channel scale),
    // the last GlobalAveragePool; the SE's GlobalAveragePool reads res (blocked).
    CHECK(ranOn(kernels, "cpu.conv.f32.nchwc8.depthwise"));
    CHECK(ranOn(kernels, "cpu.conv.f32.nchwc8+add"));
    // the channel scale is fused where the plain kernel would run channel-major (large maps)
    if (s.h * s.w >= 784) CHECK(ranOn(kernels, "cpu.conv.f32.nchwc8+scale"));
    CHECK(ranOn(kernels, "cpu.globalaveragepool.f32.nchwc8"));
    CHECK(blocked >= 8);
  }
}

TEST_CASE("the blocked-layout reorders round-trip every channel block and pixel tail", "[cpu][nchwc]") {
  if (cpu::activeIsa() != cpu::Isa::Avx2) SUCCEED("no blocked layout on this path");
  else
    for (int64_t hw : {1, 7, 8, 9, 49, 196}) {
      cpu::NchwcPlane p{2, 24, hw};
      std::vector<float> x(static_cast<size_t>(p.floats())), y(x.size()), z(x.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
      cpu::nchwcFromPlain(x.data(), y.data(), p, nullptr, 1);
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 24; ++c)
          for (int64_t q = 0; q < hw; ++q)
            REQUIRE(y[static_cast<size_t>(((n * 3 + c / 8) * hw + q) * 8 + c % 8)] == x[static_cast<size_t>((n * 24 + c) * hw + q)]);
      cpu::nchwcToPlain(y.data(), z.data(), p, nullptr, 1);
      CHECK(z == x);
    }
}
