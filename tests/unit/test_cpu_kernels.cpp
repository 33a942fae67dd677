// test_cpu_kernels.cpp: every fast kernel of the cpu executor against the reference kernel, on
// randomised shapes (tails around vector widths, broadcasting, empty tensors) with NaN/Inf values
// mixed in; each case also asserts that the fast kernel (not a fallback) ran. Plus the seam:
// memory plan (views, in place), re-planning on new input shapes, concurrent runs of one plan,
// and prepare leaving the caller's model untouched.
#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <thread>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "exec/cpu/conv_microkernels.h"
#include "exec/executor.h"
#include "exec/ref/ref_executor.h"
#include "exec/value_ops.h"
#include "formats/onnx_text.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "lib/ir_clone.h"
#include "ref_test_util.h"

using namespace onnxtool;
using testutil::f32;
using testutil::i64;

namespace {

/// The cpu executor's own kernels and fusions on the graph as written (no optimizer preset).
PrepareOptions rawGraph() {
  PrepareOptions po;
  po.graphOptLevel = 0;
  return po;
}

/// A graph input or a constant (initializer) of a test model.
struct Arg {
  Tensor value;
  bool constant = false;
};

/// A one-node model importing ai.onnx at `opset`; inputs in0.. (initializers when constant).
std::unique_ptr<Model> oneNode(const std::string& op, int64_t opset, const std::vector<Arg>& args,
                               std::vector<Attribute> attrs, std::map<std::string, RtValue>& feeds, size_t nOutputs = 1) {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports = {{"", opset, {}}};
  m->graph = std::make_unique<Graph>();
  Graph* g = m->graph.get();
  std::vector<Value*> ins;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    if (args[i].constant) {
      Tensor t = args[i].value;
      t.name = name;
      ins.push_back(g->addInitializer(std::move(t)));
    } else {
      Value* v = g->createValue(name);
      TypeInfo ti;
      ti.kind = TypeInfo::Kind::Tensor;
      ti.elemType = args[i].value.dataType;
      ti.shape.hasRank = true;
      for (int64_t d : args[i].value.dims) ti.shape.dims.push_back(Dim::ofValue(d));
      v->setType(ti);
      g->addInput(v);
      ins.push_back(v);
      feeds[name] = RtValue::ofTensor(args[i].value);
    }
  }
  std::vector<std::string> outs{"out"};
  for (size_t i = 1; i < nOutputs; ++i) outs.push_back("out" + std::to_string(i));
  Node* n = g->addNode(op, ins, outs);
  n->name = "n";
  for (auto& a : attrs) n->setAttr(std::move(a));
  for (size_t i = 0; i < nOutputs; ++i) g->addOutput(n->output(i));
  return m;
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

/// Runs the model on ref and on cpu; outputs must agree within rtol/atol (NaN equals NaN) and
/// the node must have run on a fast kernel whose name starts with `kernelPrefix`.
void checkAgainstRef(const Model& m, const std::map<std::string, RtValue>& feeds, const std::string& kernelPrefix,
                     double rtol = 1e-4, double atol = 1e-5) {
  auto want = makeExecutor("ref")->prepare(m, {})->run(feeds);
  for (int threads : {1, 3}) {  // inline, and split over a pool
    INFO("threads " << threads);
    PrepareOptions po;
    po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
    po.threads = threads;
    auto plan = makeExecutor("cpu")->prepare(m, po);
    RunProfile prof;
    auto got = plan->runProfiled(feeds, prof);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CompareResult r = compareValues(got[i], want[i], rtol, atol);
      INFO(r.message);
      CHECK(r.ok);
    }
    REQUIRE(!prof.nodes.empty());
    INFO("kernel " << prof.nodes.back().kernel);
    CHECK(prof.nodes.back().kernel.rfind(kernelPrefix, 0) == 0);
    CHECK_FALSE(prof.nodes.back().fallback);
  }
}

}  // namespace

TEST_CASE("cpu MatMul matches the reference kernel", "[cpu][kernels]") {
  std::mt19937 rng(11);
  const int64_t sizes[] = {1, 3, 7, 8, 15, 16, 17, 33};
  std::uniform_int_distribution<size_t> pick(0, std::size(sizes) - 1);
  for (int iter = 0; iter < 24; ++iter) {
    int64_t m = sizes[pick(rng)], k = sizes[pick(rng)], n = sizes[pick(rng)];
    bool constant = iter % 2 == 0;
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("MatMul", 17, {{randomTensor({m, k}, rng), false}, {randomTensor({k, n}, rng), constant}}, {}, feeds);
    INFO("MatMul " << m << "x" << k << " * " << k << "x" << n);
    checkAgainstRef(*model, feeds, "cpu.matmul");
  }
  struct Case {
    std::vector<int64_t> a, b;
  };
  const Case batched[] = {{{2, 3, 5, 7}, {7, 4}},       {{2, 1, 5, 7}, {3, 7, 4}}, {{5, 7}, {2, 7, 9}},
                          {{4, 2, 3}, {4, 3, 6}},        {{0, 5}, {5, 3}},          {{4, 0}, {0, 3}},
                          {{1, 3, 1, 16}, {2, 1, 16, 17}}};
  for (const Case& c : batched) {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("MatMul", 17, {{randomTensor(c.a, rng, true), false}, {randomTensor(c.b, rng), c.b.size() == 2}}, {}, feeds);
    INFO("MatMul batched, a rank " << c.a.size());
    checkAgainstRef(*model, feeds, "cpu.matmul");
  }
}

TEST_CASE("cpu Gemm matches the reference kernel", "[cpu][kernels]") {
  std::mt19937 rng(12);
  for (int iter = 0; iter < 32; ++iter) {
    std::uniform_int_distribution<int64_t> dim(1, 19);
    int64_t m = dim(rng), k = dim(rng), n = dim(rng);
    bool ta = iter & 1, tb = iter & 2;
    int cKind = (iter / 4) % 6;  // none, scalar, [N], [1,N], [M,1], [M,N]
    std::vector<Arg> args{{randomTensor(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, rng), false},
                          {randomTensor(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, rng), true}};
    const std::vector<int64_t> cDims[] = {{}, {}, {n}, {1, n}, {m, 1}, {m, n}};
    if (cKind) args.push_back({randomTensor(cDims[cKind], rng), true});
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Gemm", 13, args,
                         {testutil::one("transA", ta), testutil::one("transB", tb), Attribute::ofFloat("alpha", 0.5f),
                          Attribute::ofFloat("beta", iter % 3 ? 2.0f : 0.0f)},
                         feeds);
    INFO("Gemm " << m << "x" << k << "x" << n << " ta " << ta << " tb " << tb << " C kind " << cKind);
    checkAgainstRef(*model, feeds, "cpu.gemm");
  }
}

TEST_CASE("cpu MatMulNBits (com.microsoft) dequantizes its constant weight as the reference kernel does", "[cpu][kernels]") {
  std::mt19937 rng(15);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    int64_t bits, k, n, block;
    int zp;  // 0 none, 1 packed uint8, 2 float
    bool gidx, bias, rank3;
    int64_t rows = 5;  // of A when not rank 3
  };
  // 4-bit codes without g_idx or float zero points stay packed (PackedB4): K over several of its
  // K blocks (a multiple of the block size) with a partial last block, columns over several
  // panels with a partial last one, 1 to 150 rows (GEMV and tiled kernels, row blocks).
  const Case cases[] = {{4, 64, 24, 32, 0, false, false, false}, {4, 70, 17, 16, 1, false, true, false},
                        {4, 48, 9, 16, 2, true, false, true},    {8, 40, 33, 16, 1, false, false, true},
                        {2, 64, 5, 32, 1, false, true, false},   {4, 16, 1, 16, 0, false, false, false},
                        {4, 600, 70, 64, 1, false, true, false, 1}, {4, 777, 45, 128, 0, false, false, false, 150},
                        {4, 520, 33, 16, 1, false, true, true},  {4, 256, 96, 256, 1, false, false, false, 13}};
  for (const Case& c : cases) {
    const int64_t blocks = (c.k + c.block - 1) / c.block, blob = c.block * c.bits / 8, perByte = 8 / c.bits;
    std::vector<uint8_t> b(static_cast<size_t>(c.n * blocks * blob));
    for (auto& x : b) x = static_cast<uint8_t>(byte(rng));
    auto u8 = [](std::vector<int64_t> dims, const std::vector<uint8_t>& v) { return testutil::tensorOf(DType::UInt8, std::move(dims), v); };
    std::vector<float> scales = randomFloats(static_cast<size_t>(c.n * blocks), rng);
    std::vector<Arg> args{{randomTensor(c.rank3 ? std::vector<int64_t>{2, 3, c.k} : std::vector<int64_t>{c.rows, c.k}, rng, true), false},
                          {u8({c.n, blocks, blob}, b), true},
                          {f32({c.n * blocks}, scales), true}};
    if (c.zp == 1) {
      std::vector<uint8_t> z(static_cast<size_t>(c.n * ((blocks + perByte - 1) / perByte)));
      for (auto& x : z) x = static_cast<uint8_t>(byte(rng));
      args.push_back({u8({static_cast<int64_t>(z.size())}, z), true});
    } else {
      args.push_back({f32({c.n * blocks}, randomFloats(static_cast<size_t>(c.n * blocks), rng)), true});  // dropped below when 0
    }
    std::vector<int32_t> g(static_cast<size_t>(c.k));
    for (int64_t i = 0; i < c.k; ++i) g[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % blocks);
    args.push_back({testutil::i32({c.k}, g), true});
    args.push_back({randomTensor({c.n}, rng), true});
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("MatMulNBits", 17, args,
                         {Attribute::ofInt("K", c.k), Attribute::ofInt("N", c.n), Attribute::ofInt("bits", c.bits),
                          Attribute::ofInt("block_size", c.block)},
                         feeds);
    model->opsetImports.push_back({"com.microsoft", 1, {}});
    Node* n = model->graph->nodes().front().get();
    n->domain = "com.microsoft";
    if (!c.bias) n->truncateInputs(5);
    if (!c.gidx) n->setInput(4, nullptr);
    if (c.zp == 0) n->setInput(3, nullptr);
    INFO("MatMulNBits bits " << c.bits << " K " << c.k << " N " << c.n << " block " << c.block << " zp " << c.zp << " g_idx "
                             << c.gidx << " bias " << c.bias);
    const bool packed4 = c.bits == 4 && !c.gidx && c.zp != 2;
    // float sums of K products of up to 15 * |scale| * |a| (the reference sums in double)
    checkAgainstRef(*model, feeds, packed4 ? "cpu.ms.matmulnbits.f32.int4" : "cpu.ms.matmulnbits", 1e-4, c.k > 200 ? 1e-3 : 1e-5);
  }
}

TEST_CASE("cpu Gemm with B and C computed at run time, beta 1 and GEMV shapes matches the reference kernel", "[cpu][kernels]") {
  std::mt19937 rng(14);
  for (int iter = 0; iter < 24; ++iter) {
    std::uniform_int_distribution<int64_t> dim(1, 70);
    int64_t m = iter % 4 == 0 ? 1 : dim(rng), k = dim(rng), n = dim(rng);
    bool ta = iter & 1, tb = iter & 2, constB = iter % 3 == 0, constC = iter % 5 < 2;
    int cKind = iter % 6;  // none, scalar, [N], [1,N], [M,1], [M,N]
    std::vector<Arg> args{{randomTensor(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, rng), false},
                          {randomTensor(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, rng), constB}};
    const std::vector<int64_t> cDims[] = {{}, {}, {n}, {1, n}, {m, 1}, {m, n}};
    if (cKind) args.push_back({randomTensor(cDims[cKind], rng), constC});
    float beta = iter % 7 == 3 ? 0.25f : 1.f;
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Gemm", 13, args,
                         {testutil::one("transA", ta), testutil::one("transB", tb), Attribute::ofFloat("alpha", iter % 2 ? 1.f : -2.f),
                          Attribute::ofFloat("beta", beta)},
                         feeds);
    INFO("Gemm " << m << "x" << k << "x" << n << " ta " << ta << " tb " << tb << " const B " << constB << " C kind " << cKind
                 << " const C " << constC << " beta " << beta);
    checkAgainstRef(*model, feeds, "cpu.gemm");
  }
  // The classifier of MobileNetV2 scaled down: one row, B transposed and constant, C along N.
  std::map<std::string, RtValue> feeds;
  auto model = oneNode("Gemm", 13,
                       {{randomTensor({1, 320}, rng), false}, {randomTensor({250, 320}, rng), true}, {randomTensor({250}, rng), true}},
                       {testutil::one("transB", 1)}, feeds);
  checkAgainstRef(*model, feeds, "cpu.gemm");
}

TEST_CASE("cpu MatMul: attention-shaped broadcast batches and a constant B of rank 3", "[cpu][kernels]") {
  std::mt19937 rng(15);
  struct Case {
    std::vector<int64_t> a, b;
    bool constB;
  };
  const Case cases[] = {{{1, 4, 33, 16}, {1, 4, 16, 33}, false},  // Q*K^T per head
                        {{1, 4, 33, 33}, {1, 4, 33, 16}, false},  // P*V per head
                        {{2, 1, 17, 65}, {1, 3, 65, 63}, false},  // both broadcast
                        {{3, 1, 40}, {3, 40, 129}, true},         // a constant B of rank 3 (packed per call)
                        {{5, 129, 70}, {70, 130}, true}};         // a weight: batches fold into M
  for (const Case& c : cases) {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("MatMul", 17, {{randomTensor(c.a, rng), false}, {randomTensor(c.b, rng), c.constB}}, {}, feeds);
    INFO("MatMul a rank " << c.a.size() << " b rank " << c.b.size());
    checkAgainstRef(*model, feeds, "cpu.matmul");
  }
}

TEST_CASE("cpu Conv matches the reference kernel", "[cpu][kernels]") {
  std::mt19937 rng(13);
  int ran = 0;
  for (int iter = 0; iter < 60 && ran < 30; ++iter) {
    std::uniform_int_distribution<int64_t> small(1, 3), chans(1, 6), spatial(1, 11);
    int64_t group = iter % 5 == 0 ? 2 : 1;
    int64_t n = small(rng) % 2 + 1, c = chans(rng) * group, h = spatial(rng), w = spatial(rng), mo = chans(rng) * group;
    int64_t kh = small(rng), kw = small(rng), s = small(rng) % 2 + 1, d = iter % 7 == 0 ? 2 : 1, p = small(rng) - 1;
    if (iter % 6 == 1) kh = kw = 1, s = 1, p = 0, d = 1;  // the 1x1 path
    int64_t oh = (h + 2 * p - d * (kh - 1) - 1) / s + 1, ow = (w + 2 * p - d * (kw - 1) - 1) / s + 1;
    if (oh <= 0 || ow <= 0) continue;
    std::vector<Arg> args{{randomTensor({n, c, h, w}, rng, iter % 4 == 3), false}, {randomTensor({mo, c / group, kh, kw}, rng), true}};
    if (iter % 2) args.push_back({randomTensor({mo}, rng), true});
    std::vector<Attribute> attrs{testutil::ints("kernel_shape", {kh, kw}), testutil::ints("strides", {s, s}),
                                 testutil::ints("dilations", {d, d}), testutil::one("group", group)};
    if (iter % 9 == 4) attrs.push_back(Attribute::ofString("auto_pad", "SAME_UPPER"));
    else attrs.push_back(testutil::ints("pads", {p, p, p, p}));
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Conv", 11, args, attrs, feeds);
    INFO("Conv n" << n << " c" << c << " " << h << "x" << w << " m" << mo << " k" << kh << "x" << kw << " s" << s << " d" << d
                  << " p" << p << " g" << group);
    checkAgainstRef(*model, feeds, "cpu.conv", 1e-4, 1e-4);
    ++ran;
  }
  CHECK(ran >= 20);
}

TEST_CASE("cpu binary elementwise ops broadcast like the reference kernels", "[cpu][kernels]") {
  std::mt19937 rng(14);
  struct Case {
    std::vector<int64_t> a, b;
  };
  const Case cases[] = {{{17}, {17}},          {{2, 3, 4}, {}},      {{}, {5, 7}},       {{3, 1}, {1, 4}},
                        {{2, 3, 4}, {4}},      {{2, 3, 4}, {3, 1}},  {{0, 3}, {3}},      {{1, 5, 1}, {2, 1, 33}},
                        {{4, 1, 16}, {4, 9, 16}}, {{2, 2, 3, 5}, {2, 1, 3, 1}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"})
    for (const Case& c : cases) {
      std::map<std::string, RtValue> feeds;
      auto model = oneNode(op, 14, {{randomTensor(c.a, rng, true), false}, {randomTensor(c.b, rng, true), false}}, {}, feeds);
      INFO(op << " rank " << c.a.size() << " with rank " << c.b.size());
      std::string prefix = std::string("cpu.") + char(std::tolower(op[0])) + std::string(op + 1);
      for (auto& ch : prefix) ch = static_cast<char>(std::tolower(ch));
      checkAgainstRef(*model, feeds, prefix);
    }
  {  // Pow by the constant 2, the squared-deviation step of exported LayerNorms
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Pow", 13, {{randomTensor({3, 17}, rng, true), false}, {f32({}, {2.f}), true}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.pow");
  }
  for (const Case& c : cases) {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Sum", 13, {{randomTensor(c.a, rng, true), false}, {randomTensor(c.b, rng, true), false}}, {}, feeds);
    INFO("Sum rank " << c.a.size() << " with rank " << c.b.size());
    checkAgainstRef(*model, feeds, "cpu.sum");
  }
}

TEST_CASE("cpu activations and Softmax match the reference kernels, NaN and Inf included", "[cpu][kernels]") {
  std::mt19937 rng(15);
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp"})
    for (std::vector<int64_t> dims : {std::vector<int64_t>{31}, {2, 16}, {0, 4}, {3, 5, 7}}) {
      std::map<std::string, RtValue> feeds;
      Tensor x = randomTensor(dims, rng, true);
      if (x.numElements().value_or(0) > 6) {  // far tails: overflow of exp must not make NaN
        float* p = reinterpret_cast<float*>(x.raw.mutableData());
        p[0] = 100.f, p[1] = -100.f, p[2] = 1e-30f;
      }
      auto model = oneNode(op, 14, {{x, false}}, {}, feeds);
      INFO(op);
      std::string prefix = std::string("cpu.") + op;
      for (auto& ch : prefix) ch = static_cast<char>(std::tolower(ch));
      checkAgainstRef(*model, feeds, prefix, 1e-5, 1e-6);
    }
  for (const char* approximate : {"none", "tanh"})
    for (std::vector<int64_t> dims : {std::vector<int64_t>{31}, {3, 16}, {0, 4}, {2, 3, 17}, {40000}}) {
      std::map<std::string, RtValue> feeds;
      Tensor x = randomTensor(dims, rng, true);
      if (x.numElements().value_or(0) > 6) {
        float* p = reinterpret_cast<float*>(x.raw.mutableData());
        p[0] = 100.f, p[1] = -100.f, p[2] = 1e-30f;
      }
      auto model = oneNode("Gelu", 20, {{x, false}}, {Attribute::ofString("approximate", approximate)}, feeds);
      INFO("Gelu " << approximate);
      checkAgainstRef(*model, feeds, "cpu.gelu", 1e-5, 1e-6);
    }
  {  // long rows split over the pool: Softmax rows of the attention scores' length
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Softmax", 13, {{randomTensor({2, 12, 128, 128}, rng), false}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.softmax", 1e-5, 1e-7);
  }
  {  // a non-last axis with many columns (YOLOv8's distribution head): several column blocks and a tail
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Softmax", 13, {{randomTensor({2, 16, 4, 300}, rng, true), false}}, {testutil::one("axis", 1)}, feeds);
    checkAgainstRef(*model, feeds, "cpu.softmax", 1e-5, 1e-6);
  }
  for (int64_t opset : {11, 13})
    for (int64_t axis : {-1, 0, 1, 2}) {
      std::map<std::string, RtValue> feeds;
      auto model = oneNode("Softmax", opset, {{randomTensor({3, 4, 17}, rng, axis == 1), false}}, {testutil::one("axis", axis)}, feeds);
      INFO("Softmax opset " << opset << " axis " << axis);
      checkAgainstRef(*model, feeds, "cpu.softmax", 1e-5, 1e-6);
    }
}

TEST_CASE("cpu Softmax on masked rows (results below FLT_MIN) gives ref's outputs and leaves the thread's float mode as it was",
          "[cpu][kernels]") {
  std::mt19937 rng(16);
  // Half of each row 95 below the rest (exp lands among the denormals), or -FLT_MAX, or -inf.
  for (float offset : {-95.f, -std::numeric_limits<float>::max(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> v = randomFloats(4 * 3 * 40, rng);
    for (size_t i = 0; i < v.size(); ++i)
      if (i % 40 >= 20) v[i] = offset == -95.f ? v[i] + offset : offset;
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Softmax", 13, {{f32({4, 3, 40}, v), false}}, {Attribute::ofInt("axis", -1)}, feeds);
#if defined(__x86_64__)
    const unsigned before = _mm_getcsr() & ~0x3Fu;  // the mode bits, not the sticky exception flags
#endif
    INFO("offset " << offset);
    checkAgainstRef(*model, feeds, "cpu.softmax", 1e-5, 1e-30);
#if defined(__x86_64__)
    CHECK((_mm_getcsr() & ~0x3Fu) == before);
#endif
  }
}

TEST_CASE("cpu Clip matches the reference kernel: attribute and input bounds, omitted ones, min > max, NaN", "[cpu][kernels]") {
  std::mt19937 rng(18);
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    int64_t opset;
    std::optional<float> lo, hi;
    bool constantBounds;
  };
  const Case cases[] = {{6, 0.f, 6.f, true},     {6, -0.5f, std::nullopt, true}, {6, std::nullopt, std::nullopt, true},
                        {13, 0.f, 6.f, true},    {13, 0.f, 6.f, false},          {13, std::nullopt, 1.f, true},
                        {13, -1.f, std::nullopt, false}, {13, 2.f, -2.f, true},  {13, -inf, inf, true}};
  for (const Case& c : cases) {
    std::vector<Arg> args{{randomTensor({3, 37}, rng, true), false}};
    std::vector<Attribute> attrs;
    if (c.opset < 11) {
      if (c.lo) attrs.push_back(Attribute::ofFloat("min", *c.lo));
      if (c.hi) attrs.push_back(Attribute::ofFloat("max", *c.hi));
    } else {
      args.push_back({f32({}, {c.lo.value_or(0.f)}), c.constantBounds});
      args.push_back({f32({}, {c.hi.value_or(0.f)}), c.constantBounds});
    }
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Clip", c.opset, args, attrs, feeds);
    if (c.opset >= 11) {  // omitted bounds: the inputs dropped
      Node* n = model->graph->nodes().front().get();
      if (!c.hi) n->truncateInputs(2);
      if (!c.lo) n->setInput(1, nullptr);
    }
    INFO("Clip opset " << c.opset << " lo " << c.lo.value_or(-999) << " hi " << c.hi.value_or(999) << " constant " << c.constantBounds);
    checkAgainstRef(*model, feeds, "cpu.clip", 0, 0);
  }
}

TEST_CASE("cpu Cast between float32 and float16/bfloat16 matches the reference kernel bit for bit", "[cpu][kernels]") {
  std::mt19937 rng(17);
  std::vector<float> v = randomFloats(1000, rng, true);
  // Rounding ties, overflow to inf, subnormals of both half formats, signed zeros.
  const float extra[] = {65504.f, 65520.f, 1e6f, -1e6f, 6e-8f, 3e-8f, 1e-40f, -0.f, 0.f, 1.00048828125f, 1.0009765625f, 3.4e38f};
  v.insert(v.end(), std::begin(extra), std::end(extra));
  const auto n = static_cast<int64_t>(v.size());
  for (DType half : {DType::Float16, DType::BFloat16}) {
    INFO("half type " << static_cast<int>(half));
    std::map<std::string, RtValue> feeds;
    auto down = oneNode("Cast", 19, {{f32({n}, v), false}}, {Attribute::ofInt("to", static_cast<int64_t>(half))}, feeds);
    checkAgainstRef(*down, feeds, "cpu.cast", 0, 0);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = half == DType::Float16 ? floatToHalf(v[i]) : floatToBfloat16(v[i]);
    std::map<std::string, RtValue> feeds2;
    auto up = oneNode("Cast", 19, {{testutil::tensorOf(half, {n}, h), false}}, {Attribute::ofInt("to", 1)}, feeds2);
    checkAgainstRef(*up, feeds2, "cpu.cast", 0, 0);
  }
}

TEST_CASE("cpu LayerNormalization matches the reference kernel", "[cpu][kernels]") {
  std::mt19937 rng(21);
  struct Case {
    std::vector<int64_t> x;
    int64_t axis;
    bool bias;
  };
  const Case cases[] = {{{2, 5, 768}, -1, true}, {{3, 17}, 1, true},  {{3, 17}, 1, false}, {{2, 3, 4, 5}, 2, true},
                        {{4, 33}, 0, true},      {{0, 16}, -1, true}, {{7, 1}, -1, true},  {{6, 15}, -1, false}};
  for (const Case& c : cases) {
    std::vector<int64_t> norm(c.x.begin() + (c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis), c.x.end());
    std::map<std::string, RtValue> feeds;
    std::vector<Arg> args = {{randomTensor(c.x, rng, c.x.size() == 3), false}, {randomTensor(norm, rng), true}};
    if (c.bias) args.push_back({randomTensor(norm, rng), true});
    auto model = oneNode("LayerNormalization", 17, args, {testutil::one("axis", c.axis), Attribute::ofFloat("epsilon", 1e-3f)}, feeds);
    INFO("LayerNormalization rank " << c.x.size() << " axis " << c.axis);
    checkAgainstRef(*model, feeds, "cpu.layernorm", 1e-4, 1e-4);
  }
}

TEST_CASE("cpu pooling matches the reference kernels", "[cpu][kernels]") {
  std::mt19937 rng(16);
  for (int iter = 0; iter < 24; ++iter) {
    std::uniform_int_distribution<int64_t> d(1, 3), sp(3, 12);
    int64_t k = d(rng), s = d(rng) % 2 + 1, p = std::min<int64_t>(d(rng) - 1, k - 1), h = sp(rng), w = sp(rng);
    bool maxPool = iter % 2 == 0;
    std::vector<Attribute> attrs{testutil::ints("kernel_shape", {k, k}), testutil::ints("strides", {s, s}),
                                 testutil::ints("pads", {p, p, p, p})};
    if (maxPool && iter % 4 == 0) attrs.push_back(testutil::one("ceil_mode", 1));
    if (!maxPool && iter % 4 == 1) attrs.push_back(testutil::one("count_include_pad", 1));
    std::map<std::string, RtValue> feeds;
    auto model = oneNode(maxPool ? "MaxPool" : "AveragePool", 12, {{randomTensor({2, 3, h, w}, rng, iter % 3 == 0), false}}, attrs, feeds);
    INFO((maxPool ? "MaxPool" : "AveragePool") << " k" << k << " s" << s << " p" << p << " " << h << "x" << w);
    checkAgainstRef(*model, feeds, maxPool ? "cpu.maxpool" : "cpu.averagepool");
  }
  std::map<std::string, RtValue> feeds;
  auto model = oneNode("GlobalAveragePool", 12, {{randomTensor({2, 5, 7, 3}, rng), false}}, {}, feeds);
  checkAgainstRef(*model, feeds, "cpu.globalaveragepool");
}

TEST_CASE("cpu GlobalAveragePool matches the reference kernel on tails, large planes, 3-D/5-D inputs and NaN/Inf",
          "[cpu][kernels][pool]") {
  std::mt19937 rng(63);
  // Plane sizes around the vector widths and unroll (8, 16, 64 floats), EfficientNet's SE-block
  // inputs (planes of 56x56 and 112x112: split over threads), rank 3 and 5, one-element planes.
  const std::vector<int64_t> shapes[] = {{2, 5, 7, 3}, {1, 3, 1, 1},   {1, 4, 1, 7},    {1, 3, 4, 4},   {1, 2, 1, 17},
                                         {1, 3, 8, 8}, {1, 3, 9, 9},   {2, 2, 3, 43},   {1, 7, 5},      {2, 3, 2, 3, 5},
                                         {1, 96, 56, 56}, {1, 32, 112, 112}, {1, 3, 100, 101}, {2, 40, 28, 28}};
  int iter = 0;
  for (const auto& dims : shapes) {
    for (bool specials : {false, true}) {
      std::map<std::string, RtValue> feeds;
      Tensor x = randomTensor(dims, rng, specials);
      if (iter % 3 == 1)  // a large common offset: the sum must not lose the small parts
        for (size_t i = 0; i < x.raw.size() / 4; ++i) reinterpret_cast<float*>(x.raw.mutableData())[i] += 1000.f;
      auto model = oneNode("GlobalAveragePool", 12, {{x, false}}, {}, feeds);
      std::string shape;
      for (int64_t d : dims) shape += std::to_string(d) + " ";
      INFO("shape " << shape << "specials " << specials);
      checkAgainstRef(*model, feeds, "cpu.globalaveragepool", 1e-5, 1e-6);
      ++iter;
    }
  }
}

TEST_CASE("cpu BatchNormalization matches the reference kernel", "[cpu][kernels]") {
  std::mt19937 rng(18);
  for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 5, 7}, {1, 4}, {3, 2, 17}}) {
    int64_t c = dims[1];
    Tensor var = randomTensor({c}, rng);
    for (size_t i = 0; i < static_cast<size_t>(c); ++i)
      reinterpret_cast<float*>(var.raw.mutableData())[i] = std::abs(reinterpret_cast<const float*>(var.raw.data())[i]);
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("BatchNormalization", 15,
                         {{randomTensor(dims, rng, true), false}, {randomTensor({c}, rng), true}, {randomTensor({c}, rng), true},
                          {randomTensor({c}, rng), true}, {var, true}},
                         {Attribute::ofFloat("epsilon", 1e-3f)}, feeds);
    checkAgainstRef(*model, feeds, "cpu.batchnorm");
  }
}

TEST_CASE("cpu Transpose and trailing-axes ReduceMean match the reference kernels", "[cpu][kernels]") {
  std::mt19937 rng(19);
  struct TCase {
    std::vector<int64_t> dims, perm;
  };
  const TCase tcases[] = {{{2, 3, 4}, {}},           {{2, 3, 4}, {0, 2, 1}}, {{1, 128, 12, 64}, {0, 2, 1, 3}},
                          {{2, 12, 5, 17}, {0, 2, 3, 1}}, {{0, 3}, {1, 0}},  {{7}, {0}}, {{1, 128, 12, 64}, {0, 2, 3, 1}},
                          // a last axis of 3 moved forward (NHWC -> NCHW images: the deinterleaving kernel on
                          // AVX-512), pixel counts around the 16-pixel blocks and the 4096-pixel slices
                          {{1, 5, 7, 3}, {0, 3, 1, 2}}, {{2, 4, 3}, {0, 2, 1}}, {{3, 2, 17, 3}, {0, 3, 1, 2}},
                          {{1, 33, 3}, {0, 2, 1}}, {{2, 3, 3}, {0, 2, 1}}, {{1, 1, 3}, {0, 2, 1}}, {{1, 97, 71, 3}, {0, 3, 1, 2}},
                          {{5, 3}, {1, 0}}, {{2, 9, 3}, {2, 0, 1}}};
  for (const TCase& c : tcases) {
    std::map<std::string, RtValue> feeds;
    std::vector<Attribute> attrs;
    if (!c.perm.empty()) attrs.push_back(testutil::ints("perm", c.perm));
    auto model = oneNode("Transpose", 13, {{randomTensor(c.dims, rng, true), false}}, attrs, feeds);
    INFO("Transpose rank " << c.dims.size());
    checkAgainstRef(*model, feeds, "cpu.transpose");
  }
  {  // int64 elements are copied by size too
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Transpose", 13, {{i64({2, 3}, {1, 2, 3, 4, 5, 6}), false}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.transpose");
  }
  struct RCase {
    std::vector<int64_t> dims, axes;
    int64_t keepdims;
  };
  const RCase rcases[] = {{{2, 5, 17}, {-1}, 1}, {{2, 5, 17}, {1, 2}, 0}, {{3, 768}, {1}, 1}, {{4, 1}, {-1}, 0}};
  for (const RCase& c : rcases)
    for (int64_t opset : {13, 18}) {
      std::map<std::string, RtValue> feeds;
      std::vector<Arg> args{{randomTensor(c.dims, rng, c.dims.size() == 3), false}};
      std::vector<Attribute> attrs{testutil::one("keepdims", c.keepdims)};
      if (opset >= 18) args.push_back({i64({static_cast<int64_t>(c.axes.size())}, c.axes), true});
      else attrs.push_back(testutil::ints("axes", c.axes));
      auto model = oneNode("ReduceMean", opset, args, attrs, feeds);
      INFO("ReduceMean opset " << opset << " rank " << c.dims.size());
      checkAgainstRef(*model, feeds, "cpu.reducemean", 1e-4, 1e-5);
    }
}

TEST_CASE("cpu views: Reshape, Flatten, Squeeze, Unsqueeze alias their input", "[cpu][kernels]") {
  std::mt19937 rng(17);
  {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Reshape", 14, {{randomTensor({2, 3, 4}, rng), false}, {i64({2}, {6, -1}), true}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.reshape.view");
  }
  {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Flatten", 13, {{randomTensor({2, 3, 4}, rng), false}}, {testutil::one("axis", 2)}, feeds);
    checkAgainstRef(*model, feeds, "cpu.flatten.view");
  }
  {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Unsqueeze", 13, {{randomTensor({3, 4}, rng), false}, {i64({1}, {1}), true}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.unsqueeze.view");
  }
  {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Squeeze", 13, {{randomTensor({3, 1, 4}, rng), false}, {i64({1}, {1}), true}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.squeeze.view");
  }
}

namespace {

/// x[N,8] -> MatMul W1 -> Relu -> Reshape [N,2,4] -> Flatten -> Add x -> Sigmoid -> Shape-dependent
/// Tanh, with a branch kept alive to the end (out2), so views, in-place writes and lifetimes all
/// matter; Shape is a reference fallback feeding nothing fast.
std::unique_ptr<Model> chainModel() {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports = {{"", 17, {}}};
  m->graph = std::make_unique<Graph>();
  Graph* g = m->graph.get();
  Value* x = g->createValue("x");
  TypeInfo ti;
  ti.kind = TypeInfo::Kind::Tensor;
  ti.elemType = static_cast<int32_t>(DType::Float);
  ti.shape.hasRank = true;
  ti.shape.dims = {Dim::ofParam("N"), Dim::ofValue(8)};
  x->setType(ti);
  g->addInput(x);
  std::mt19937 rng(3);
  Tensor w = randomTensor({8, 8}, rng);
  w.name = "W";
  Value* wv = g->addInitializer(w);
  Tensor shape = i64({3}, {-1, 2, 4});
  shape.name = "shape";
  Value* sv = g->addInitializer(shape);
  Node* mm = g->addNode("MatMul", {x, wv}, {"mm"});
  Node* relu = g->addNode("Relu", {mm->output(0)}, {"r"});
  Node* rs = g->addNode("Reshape", {relu->output(0), sv}, {"rs"});
  Node* fl = g->addNode("Flatten", {rs->output(0)}, {"fl"});
  Node* add = g->addNode("Add", {fl->output(0), x}, {"add"});
  Node* sig = g->addNode("Sigmoid", {add->output(0)}, {"sig"});
  Node* shp = g->addNode("Shape", {sig->output(0)}, {"shp"});
  Node* mul = g->addNode("Mul", {sig->output(0), mm->output(0)}, {"mul"});
  Node* th = g->addNode("Tanh", {mul->output(0)}, {"out"});
  g->addOutput(th->output(0));
  g->addOutput(relu->output(0));
  g->addOutput(shp->output(0));
  return m;
}

std::map<std::string, RtValue> chainFeeds(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  return {{"x", RtValue::ofTensor(randomTensor({n, 8}, rng))}};
}

void expectSame(const std::vector<RtValue>& got, const std::vector<RtValue>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CompareResult r = compareValues(got[i], want[i], 1e-5, 1e-6);
    INFO("output " << i << ": " << r.message);
    CHECK(r.ok);
  }
}

}  // namespace

TEST_CASE("cpu plan: views, in-place writes and fallbacks in one graph give ref's outputs", "[cpu][plan]") {
  auto m = chainModel();
  auto ref = makeExecutor("ref")->prepare(*m, {});
  auto cpu = makeExecutor("cpu")->prepare(*m, rawGraph());
  for (int64_t n : {3, 1, 5, 3}) {  // new shapes re-plan; 3 again comes from the cache
    INFO("N = " << n);
    auto feeds = chainFeeds(n, static_cast<uint32_t>(n + 1));
    RunProfile prof;
    expectSame(cpu->runProfiled(feeds, prof), ref->run(feeds));
    size_t fallbacks = 0;
    for (const NodeRun& r : prof.nodes) fallbacks += r.fallback;
    CHECK(prof.nodes.size() == 9);
    CHECK(fallbacks == 1);  // Shape
  }
}

TEST_CASE("cpu plan: concurrent runs of one plan each get their own arena", "[cpu][plan]") {
  auto m = chainModel();
  auto ref = makeExecutor("ref")->prepare(*m, {});
  PrepareOptions po;
  po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
  po.threads = 1;
  auto cpu = makeExecutor("cpu")->prepare(*m, po);
  std::vector<std::vector<RtValue>> want;
  for (int t = 0; t < 4; ++t) want.push_back(ref->run(chainFeeds(4, static_cast<uint32_t>(100 + t))));
  std::vector<std::vector<RtValue>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto feeds = chainFeeds(4, static_cast<uint32_t>(100 + t));
      for (int i = 0; i < 50; ++i) got[static_cast<size_t>(t)] = cpu->run(feeds);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) expectSame(got[static_cast<size_t>(t)], want[static_cast<size_t>(t)]);
}

TEST_CASE("cpu prepare and run leave the caller's model untouched", "[cpu][plan]") {
  auto m = chainModel();
  const Value* mm = m->graph->findLocal("mm");
  REQUIRE(mm->type().kind == TypeInfo::Kind::None);  // no value_info: only inference would type it
  auto cpu = makeExecutor("cpu")->prepare(*m, rawGraph());
  cpu->run(chainFeeds(2, 1));
  CHECK(mm->type().kind == TypeInfo::Kind::None);
  CHECK(m->graph->inputs()[0].type().shape.dims[0].isParam());
}

TEST_CASE("cpu plan: weights packed at prepare are released, weights read at run kept, the caller's model intact",
          "[cpu][plan]") {
  // W1 is read by a packing MatMul only (the plan drops its bytes), W2 also by a fast Transpose
  // and W3 also by a reference fallback (ReduceSum) at run time: both must stay, as must W4, read
  // by a fallback only (never asked for while kernels were made); W5 is a transposed Gemm B,
  // packed and dropped too; W6 is an embedding table read in place by Gather; W7 is the B^T of
  // a one-row Gemm (a classifier), read in place by its dot products, never packed. Every weight
  // sits at an odd address, as a model file's bytes may (the plan reads aligned copies).
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports = {{"", 17, {}}};
  m->graph = std::make_unique<Graph>();
  Graph* g = m->graph.get();
  Value* x = g->createValue("x");
  TypeInfo ti;
  ti.kind = TypeInfo::Kind::Tensor;
  ti.elemType = static_cast<int32_t>(DType::Float);
  ti.shape.hasRank = true;
  ti.shape.dims = {Dim::ofValue(5), Dim::ofValue(8)};
  x->setType(ti);
  g->addInput(x);
  std::mt19937 rng(11);
  std::vector<std::vector<uint8_t>> before;
  std::vector<const uint8_t*> where;
  Value* w[7];
  for (int i = 0; i < 7; ++i) {
    Tensor t = randomTensor(i == 4 || i == 6 ? std::vector<int64_t>{16, 8} : std::vector<int64_t>{8, 16}, rng);
    t.name = "W" + std::to_string(i + 1);
    auto owner = std::make_shared<std::string>(t.raw.size() + 1, '\0');
    std::memcpy(owner->data() + 1, t.raw.data(), t.raw.size());
    t.setRaw(Buffer::borrow(owner, reinterpret_cast<const uint8_t*>(owner->data()) + 1, t.raw.size()));
    REQUIRE_FALSE(t.raw.isAligned(4));
    before.emplace_back(t.raw.data(), t.raw.data() + t.raw.size());
    where.push_back(t.raw.data());
    w[i] = g->addInitializer(std::move(t));
  }
  for (int i = 0; i < 3; ++i) g->addOutput(g->addNode("MatMul", {x, w[i]}, {"mm" + std::to_string(i + 1)})->output(0));
  g->addOutput(g->addNode("Transpose", {w[1]}, {"t2"})->output(0));
  g->addOutput(g->addNode("ReduceSum", {w[2]}, {"s3"})->output(0));
  g->addOutput(g->addNode("ReduceSum", {w[3]}, {"s4"})->output(0));
  Node* gemm = g->addNode("Gemm", {x, w[4]}, {"g5"});
  gemm->setAttr(Attribute::ofInt("transB", 1));
  g->addOutput(gemm->output(0));
  Value* x1 = g->createValue("x1");
  ti.shape.dims = {Dim::ofValue(1), Dim::ofValue(8)};
  x1->setType(ti);
  g->addInput(x1);
  Node* gemv = g->addNode("Gemm", {x1, w[6]}, {"g7"});
  gemv->setAttr(Attribute::ofInt("transB", 1));
  g->addOutput(gemv->output(0));
  Value* ids = g->createValue("ids");
  TypeInfo it;
  it.kind = TypeInfo::Kind::Tensor;
  it.elemType = static_cast<int32_t>(DType::Int64);
  it.shape.hasRank = true;
  it.shape.dims = {Dim::ofValue(3)};
  ids->setType(it);
  g->addInput(ids);
  g->addOutput(g->addNode("Gather", {w[5], ids}, {"emb"})->output(0));
  std::mt19937 frng(5);
  std::map<std::string, RtValue> feeds{{"x", RtValue::ofTensor(randomTensor({5, 8}, frng))},
                                       {"ids", RtValue::ofTensor(i64({3}, {7, 0, -1}))},
                                       {"x1", RtValue::ofTensor(randomTensor({1, 8}, frng))}};
  auto want = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  for (int level : {0, 3}) {
    INFO("-O" << level);
    PrepareOptions po;
    po.graphOptLevel = level;
    po.threads = 1;
    const uint64_t copiedBefore = initializerCopyBytes();
    auto plan = makeExecutor("cpu")->prepare(*m, po);
    // aligned copies for the Transpose's and the fallbacks' W2-W4 only: the packing kernels,
    // Gather and the one-row Gemm read W1, W5, W6 and W7 where they are (the int8 fusion finder
    // once copied W6)
    CHECK(initializerCopyBytes() - copiedBefore == 3 * 8 * 16 * sizeof(float));
    for (int run = 0; run < 2; ++run) {
      RunProfile prof;
      expectSame(plan->runProfiled(feeds, prof), want);
      size_t fallbacks = 0;
      for (const NodeRun& r : prof.nodes) fallbacks += r.fallback;
      CHECK(fallbacks == 2);  // the ReduceSums (graph outputs: never folded)
    }
    for (int i = 0; i < 7; ++i) {  // the caller's weights: the same bytes at the same place
      const Tensor& t = *w[i]->initializer();
      CHECK(t.raw.data() == where[static_cast<size_t>(i)]);
      CHECK(std::vector<uint8_t>(t.raw.data(), t.raw.data() + t.raw.size()) == before[static_cast<size_t>(i)]);
    }
  }
  // the ref executor (and a second plan) still read the caller's model as it was
  expectSame(makeExecutor("cpu")->prepare(*m, rawGraph())->run(feeds), want);
}

TEST_CASE("cloneModel copies graphs and shares weight bytes", "[ir]") {
  auto m = chainModel();
  auto c = cloneModel(*m);
  REQUIRE(c->graph->numNodes() == m->graph->numNodes());
  CHECK(c->graph->verifyLinks().empty());
  const Value* w = c->graph->findLocal("W");
  REQUIRE(w);
  REQUIRE(w->initializer());
  CHECK(w != m->graph->findLocal("W"));
  CHECK(w->initializer()->raw.data() == m->graph->findLocal("W")->initializer()->raw.data());
  auto it = c->graph->nodes().begin();
  for (const auto& n : m->graph->nodes()) {
    CHECK((*it)->opType == n->opType);
    CHECK((*it)->inputs().size() == n->inputs().size());
    for (size_t i = 0; i < n->inputs().size(); ++i) CHECK((*it)->inputs()[i]->name() == n->inputs()[i]->name());
    CHECK((*it)->graph() == c->graph.get());
    ++it;
  }
}

namespace {

/// "{v0, v1, ...}": n standard-normal floats for a tensor literal of the textual syntax.
std::string literal(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d;
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d(rng) * scale);
  return s + "}";
}

/// Runs `text` on ref and on cpu (1 and 3 threads) with random float inputs of `inputs`;
/// outputs must agree, and the cpu profile must list exactly `kernels` (in order) and count
/// `graphNodes` nodes.
void checkFused(const std::string& text, const std::map<std::string, std::vector<int64_t>>& inputs,
                const std::vector<std::string>& kernels, int graphNodes, std::map<std::string, RtValue> feeds = {}) {
  auto m = parseModelText(text, "fusion.onnxtxt");
  std::mt19937 rng(7);
  for (const auto& [name, dims] : inputs) feeds[name] = RtValue::ofTensor(randomTensor(dims, rng));
  auto want = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  for (int threads : {1, 3}) {
    INFO("threads " << threads);
    PrepareOptions po;
    po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
    po.threads = threads;
    RunProfile prof;
    auto got = makeExecutor("cpu")->prepare(*m, po)->runProfiled(feeds, prof);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CompareResult r = compareValues(got[i], want[i], 1e-4, 1e-5);
      INFO("output " << i << ": " << r.message);
      CHECK(r.ok);
    }
    std::vector<std::string> ran;
    int counted = 0;
    for (const NodeRun& r : prof.nodes) ran.push_back(r.kernel), counted += r.graphNodes;
    CHECK(ran == kernels);
    CHECK(counted == graphNodes);
  }
}

}  // namespace

TEST_CASE("cpu fusions: GEMM + bias + activation epilogues give ref's outputs", "[cpu][fusion]") {
  std::mt19937 rng(31);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  const std::string w = "float[20, 19] w = " + literal(20 * 19, rng, 0.3f) + ", float[19] b = " + literal(19, rng);
  // The erf GELU as PyTorch exports it, after MatMul + bias (BERT's FFN): one step.
  checkFused(head + "g (float[3, 5, 20] x) => (float[3, 5, 19] y) <" + w +
                 ", float s2 = {1.4142135}, float one = {1.0}, float half = {0.5}> {\n"
                 "  m = MatMul(x, w)\n  h = Add(m, b)\n  d = Div(h, s2)\n  e = Erf(d)\n  a = Add(e, one)\n"
                 "  p = Mul(h, a)\n  y = Mul(p, half)\n}",
             {{"x", {3, 5, 20}}}, {"cpu.matmul.f32+Add+Div+Erf+Add+Mul+Mul"}, 7);
  // The bias on the left of the Add, Relu after.
  checkFused(head + "g (float[7, 20] x) => (float[7, 19] y) <" + w + "> {\n  m = MatMul(x, w)\n  h = Add(b, m)\n  y = Relu(h)\n}",
             {{"x", {7, 20}}}, {"cpu.matmul.f32+Add+Relu"}, 3);
  // Gemm (transB) + Sigmoid; Gemm + Tanh.
  checkFused(head + "g (float[6, 20] x) => (float[6, 19] y) <float[19, 20] wt = " + literal(19 * 20, rng, 0.3f) +
                 ", float[19] b = " + literal(19, rng) + "> {\n  m = Gemm<transB: int = 1>(x, wt, b)\n  y = Sigmoid(m)\n}",
             {{"x", {6, 20}}}, {"cpu.gemm.f32+Sigmoid"}, 2);
  // Gelu (opset 20, tanh form) after MatMul + bias, with a 2-thread column split (N = 64).
  checkFused("<ir_version: 9, opset_import: [\"\" : 20]>\ng (float[33, 40] x) => (float[33, 64] y) <float[40, 64] w = " +
                 literal(40 * 64, rng, 0.2f) + ", float[64] b = " + literal(64, rng) +
                 "> {\n  m = MatMul(x, w)\n  h = Add(m, b)\n  y = Gelu<approximate: string = \"tanh\">(h)\n}",
             {{"x", {33, 40}}}, {"cpu.matmul.f32+Add+Gelu"}, 3);
}

TEST_CASE("cpu fusions stay apart where a fused value is read elsewhere or broadcasts", "[cpu][fusion]") {
  std::mt19937 rng(32);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  const std::string w = "float[20, 19] w = " + literal(20 * 19, rng, 0.3f) + ", float[19] b = " + literal(19, rng);
  // h is a graph output too: the bias fuses (h is the GEMM's output), the Relu does not.
  checkFused(head + "g (float[4, 20] x) => (float[4, 19] y, float[4, 19] h) <" + w +
                 "> {\n  m = MatMul(x, w)\n  h = Add(m, b)\n  y = Relu(h)\n}",
             {{"x", {4, 20}}}, {"cpu.matmul.f32+Add", "cpu.relu.f32"}, 3);
  // m is read twice: nothing fuses.
  checkFused(head + "g (float[4, 20] x) => (float[4, 19] y) <" + w + "> {\n  m = MatMul(x, w)\n  h = Add(m, b)\n  y = Mul(h, m)\n}",
             {{"x", {4, 20}}}, {"cpu.matmul.f32", "cpu.add.f32", "cpu.mul.f32"}, 3);
  // A per-row bias [4, 1] is no row vector along N: the Add stays.
  checkFused(head + "g (float[4, 20] x) => (float[4, 19] y) <float[20, 19] w = " + literal(20 * 19, rng) +
                 ", float[4, 1] c = " + literal(4, rng) + "> {\n  m = MatMul(x, w)\n  y = Add(m, c)\n}",
             {{"x", {4, 20}}}, {"cpu.matmul.f32", "cpu.add.f32"}, 2);
  // A Div by something other than sqrt(2) is no GELU.
  checkFused(head + "g (float[3, 20] x) => (float[3, 19] y) <" + w +
                 ", float s2 = {1.5}, float one = {1.0}, float half = {0.5}> {\n"
                 "  m = MatMul(x, w)\n  h = Add(m, b)\n  d = Div(h, s2)\n  e = Erf(d)\n  a = Add(e, one)\n"
                 "  p = Mul(h, a)\n  y = Mul(p, half)\n}",
             {{"x", {3, 20}}}, {"cpu.matmul.f32+Add", "cpu.div.f32", "cpu.erf.f32", "cpu.add.f32", "cpu.mul.f32", "cpu.mul.f32"},
             7);
}

TEST_CASE("cpu fusions: residual Add + LayerNormalization gives ref's outputs", "[cpu][fusion]") {
  std::mt19937 rng(33);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  const std::string p = "float[48] g = " + literal(48, rng) + ", float[48] be = " + literal(48, rng);
  checkFused(head + "g (float[2, 9, 48] x, float[2, 9, 48] r) => (float[2, 9, 48] y) <" + p +
                 "> {\n  s = Add(x, r)\n  y = LayerNormalization<epsilon: float = 1e-5>(s, g, be)\n}",
             {{"x", {2, 9, 48}}, {"r", {2, 9, 48}}}, {"cpu.layernorm.f32+residual"}, 2);
  // The sum is also a graph output: no fusion.
  checkFused(head + "g (float[2, 9, 48] x, float[2, 9, 48] r) => (float[2, 9, 48] y, float[2, 9, 48] s) <" + p +
                 "> {\n  s = Add(x, r)\n  y = LayerNormalization(s, g, be)\n}",
             {{"x", {2, 9, 48}}, {"r", {2, 9, 48}}}, {"cpu.add.f32", "cpu.layernorm.f32"}, 2);
  // A broadcasting Add: no fusion.
  checkFused(head + "g (float[2, 9, 48] x, float[48] r) => (float[2, 9, 48] y) <" + p +
                 "> {\n  s = Add(x, r)\n  y = LayerNormalization(s, g, be)\n}",
             {{"x", {2, 9, 48}}, {"r", {48}}}, {"cpu.add.f32", "cpu.layernorm.f32"}, 2);
}

TEST_CASE("cpu Gather matches the reference kernel and refuses indices out of range", "[cpu][kernels]") {
  std::mt19937 rng(41);
  struct Case {
    std::vector<int64_t> data, idx;
    int64_t axis;
  };
  const Case cases[] = {{{50, 16}, {1, 7}, 0}, {{50, 16}, {3}, 0}, {{4, 9, 5}, {2, 3}, 1}, {{4, 9, 5}, {6}, -1}, {{7}, {}, 0}, {{7, 3}, {0}, 0}};
  for (const Case& c : cases)
    for (DType it : {DType::Int64, DType::Int32}) {
      int64_t dim = c.data[static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(c.data.size()) : c.axis)];
      std::uniform_int_distribution<int64_t> pick(-dim, dim - 1);  // negative indices count from the end
      int64_t n = 1;
      for (int64_t d : c.idx) n *= d;
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (auto& v : ids) v = pick(rng);
      Tensor idx = i64(c.idx, ids);
      if (it == DType::Int32) {
        std::vector<int32_t> v32(ids.begin(), ids.end());
        idx = testutil::i32(c.idx, v32);
      }
      std::map<std::string, RtValue> feeds;
      auto model = oneNode("Gather", 13, {{randomTensor(c.data, rng, true), false}, {idx, false}}, {testutil::one("axis", c.axis)}, feeds);
      INFO("Gather data rank " << c.data.size() << " axis " << c.axis);
      checkAgainstRef(*model, feeds, "cpu.gather", 0, 0);
    }
  std::map<std::string, RtValue> feeds;
  auto model = oneNode("Gather", 13, {{randomTensor({5, 3}, rng), false}, {i64({2}, {1, 5}), false}}, {}, feeds);
  PrepareOptions po;
  po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
  po.threads = 1;
  try {
    makeExecutor("cpu")->prepare(*model, po)->run(feeds);
    FAIL("an index out of range ran");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidInput);
    CHECK(std::string(e.what()) == "node 'n' (Gather): Gather index 5 is out of range, expected [-5, 5)");
  }
}

TEST_CASE("cpu fusions: the spelled-out LayerNorm (and its residual Add) is one step", "[cpu][fusion]") {
  std::mt19937 rng(34);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  const std::string p = "float[40] g = " + literal(40, rng) + ", float[40] be = " + literal(40, rng) +
                        ", float two = {2.0}, float eps = {1e-5}";
  const std::string ln =
      "  mean = ReduceMean<axes: ints = [-1]>(s)\n  d = Sub(s, mean)\n  sq = Pow(d, two)\n"
      "  var = ReduceMean<axes: ints = [-1]>(sq)\n  ve = Add(var, eps)\n  sd = Sqrt(ve)\n  n = Div(d, sd)\n";
  const std::string full = "cpu.layernorm.f32 (ReduceMean+Sub+Pow+ReduceMean+Add+Sqrt+Div+Mul+Add)+residual";
  checkFused(head + "g (float[3, 7, 40] x, float[3, 7, 40] r) => (float[3, 7, 40] y) <" + p + "> {\n  s = Add(x, r)\n" + ln +
                 "  m = Mul(n, g)\n  y = Add(m, be)\n}",
             {{"x", {3, 7, 40}}, {"r", {3, 7, 40}}}, {full}, 10);
  // No gamma/beta; the input also read by a later node (so it is neither fused nor written over).
  checkFused(head + "g (float[5, 33] s) => (float[5, 33] y) <" + p + "> {\n" + ln + "  y = Add(n, s)\n}",
             {{"s", {5, 33}}}, {"cpu.layernorm.f32 (ReduceMean+Sub+Pow+ReduceMean+Add+Sqrt+Div)", "cpu.add.f32"}, 8);
  // d read by a third node: not a LayerNorm.
  checkFused(head + "g (float[5, 40] s) => (float[5, 40] y, float[5, 40] d) <" + p + "> {\n" + ln + "  y = Mul(n, g)\n}",
             {{"s", {5, 40}}},
             {"cpu.reducemean.f32.trailing", "cpu.sub.f32", "cpu.pow.f32", "cpu.reducemean.f32.trailing", "cpu.add.f32",
              "cpu.sqrt.f32", "cpu.div.f32", "cpu.mul.f32"},
             8);
}

TEST_CASE("cpu plan: pooled runs from several threads, and kept outputs keep their arena", "[cpu][plan]") {
  std::mt19937 rng(35);
  auto m = parseModelText("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[64, 96] x) => (float[64, 128] y) <float[96, 128] w = " +
                              literal(96 * 128, rng, 0.1f) + ", float[128] b = " + literal(128, rng) +
                              ", float[128] g = " + literal(128, rng) + "> {\n  m = MatMul(x, w)\n  h = Add(m, b)\n  t = Tanh(h)\n"
                              "  e = Erf(t)\n  s = Add(e, h)\n  y = LayerNormalization(s, g)\n}",
                          "pooled.onnxtxt");
  auto ref = makeExecutor("ref")->prepare(*m, {});
  auto feedsOf = [](uint32_t seed) {
    std::mt19937 r(seed);
    return std::map<std::string, RtValue>{{"x", RtValue::ofTensor(randomTensor({64, 96}, r))}};
  };
  std::vector<std::vector<RtValue>> want;
  for (uint32_t t = 0; t < 4; ++t) want.push_back(ref->run(feedsOf(200 + t)));
  // Tanh/Erf approximations (vec.h) pass through a LayerNorm: 1e-4, not expectSame's 1e-5.
  auto same = [](const std::vector<RtValue>& got, const std::vector<RtValue>& w) {
    REQUIRE(got.size() == w.size());
    CompareResult r = compareValues(got[0], w[0], 1e-4, 1e-5);
    INFO(r.message);
    CHECK(r.ok);
  };
  for (int threads : {2, 3}) {
    INFO("threads " << threads);
    PrepareOptions po;
    po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
    po.threads = threads;
    auto cpu = makeExecutor("cpu")->prepare(*m, po);
    // Outputs kept while later runs go on must not be overwritten by a reused arena.
    auto first = cpu->run(feedsOf(200));
    for (int i = 0; i < 5; ++i) cpu->run(feedsOf(201));
    same(first, want[0]);
    std::vector<std::vector<RtValue>> got(4);
    std::vector<std::thread> callers;
    for (uint32_t t = 0; t < 4; ++t)
      callers.emplace_back([&, t] {
        auto feeds = feedsOf(200 + t);
        for (int i = 0; i < 30; ++i) got[t] = cpu->run(feeds);
      });
    for (auto& th : callers) th.join();
    for (size_t t = 0; t < 4; ++t) same(got[t], want[t]);
  }
}

TEST_CASE("cpu plan: the optimizer preset folds data-dependent shape arithmetic so fast kernels take the nodes",
          "[cpu][plan]") {
  // As exporters write a reshape to heads: the target shape computed from Shape/Gather/Concat of
  // the activation, so the MatMul after it has no static input shape in the file. With the input
  // shape fixed, -O3 folds the arithmetic into a constant and the MatMul gets a fast kernel;
  // at -O0 it falls back. Both give ref's outputs.
  std::mt19937 rng(51);
  const std::string text =
      "<ir_version: 8, opset_import: [\"\" : 17]>\n"
      "g (float[N, 12] x) => (float[N, 3, 5] y) <float[4, 5] w = " + literal(20, rng, 0.3f) +
      ", int64[1] i0 = {0}, int64[1] three = {3}, int64[1] four = {4}, float zero = {0.0}> {\n"
      "  s = Shape(x)\n  n = Gather<axis: int = 0>(s, i0)\n  t = Concat<axis: int = 0>(n, three, four)\n"
      "  r = Reshape(x, t)\n  z = Add(r, zero)\n  y = MatMul(z, w)\n}";
  auto m = parseModelText(text, "shape_arith.onnxtxt");
  std::map<std::string, RtValue> feeds;
  feeds["x"] = RtValue::ofTensor(randomTensor({2, 12}, rng));
  auto want = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  for (int level : {0, 3}) {
    INFO("-O" << level);
    PrepareOptions po;
    po.threads = 1;
    po.graphOptLevel = level;
    RunProfile prof;
    auto got = makeExecutor("cpu")->prepare(*m, po)->runProfiled(feeds, prof);
    REQUIRE(got.size() == 1);
    CompareResult r = compareValues(got[0], want[0], 1e-5, 1e-6);
    INFO(r.message);
    CHECK(r.ok);
    std::string matmul;
    size_t fallbacks = 0;
    for (const NodeRun& n : prof.nodes) {
      if (n.opType == "MatMul") matmul = n.kernel;
      fallbacks += n.fallback;
    }
    if (level == 0) {
      CHECK(prof.nodes.size() >= 6);  // Shape, Gather, Concat, Reshape, Add, MatMul as written
      CHECK(fallbacks >= 1);
    } else {
      CHECK(prof.nodes.size() == 2);  // Reshape (a view) and the MatMul; x + 0 went too
      CHECK(fallbacks == 0);
      CHECK(matmul.rfind("cpu.", 0) == 0);
    }
    // The caller's model is untouched either way.
    CHECK(m->graph->nodes().size() == 6);
  }
}

namespace {

/// A tensor of `dims` of type t with distinct small values (any integer or float type).
Tensor countingTensor(DType t, std::vector<int64_t> dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_int_distribution<int> d(0, 250);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  if (t == DType::Int64) return i64(std::move(dims), v);
  if (t == DType::UInt8) return testutil::tensorOf(DType::UInt8, std::move(dims), std::vector<uint8_t>(v.begin(), v.end()));
  return f32(std::move(dims), std::vector<float>(v.begin(), v.end()));
}

}  // namespace

TEST_CASE("cpu Slice matches the reference kernel: negative axes, clamped and negative bounds, steps, empty", "[cpu][kernels]") {
  std::mt19937 rng(41);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  struct SCase {
    std::vector<int64_t> dims, starts, ends, axes, steps;  // axes/steps empty: omitted
  };
  const SCase cases[] = {
      {{5, 7, 9}, {1}, {4}, {0}, {}},                        // outer axis: one contiguous block per row
      {{5, 7, 9}, {2, 1}, {-1, kMax}, {-1, 1}, {}},           // negative axis, INT64_MAX end
      {{5, 7, 9}, {-100, 3}, {100, -2}, {2, 0}, {1, 1}},      // clamped starts/ends
      {{5, 7, 9}, {-1}, {kMin}, {-1}, {-1}},                 // reversed innermost
      {{5, 7, 9}, {6, 8}, {-kMax, 0}, {1, 2}, {-2, -3}},      // negative steps on two axes
      {{5, 7, 9}, {0, 1}, {5, 9}, {0, 2}, {2, 2}},            // step 2 (strided innermost)
      {{5, 7, 9}, {3}, {3}, {1}, {}},                        // empty
      {{5, 7, 9}, {4}, {1}, {0}, {1}},                       // empty: end before start
      {{4, 3}, {0, 0}, {kMax, kMax}, {}, {}},               // everything
      {{1, 116, 28, 28}, {0}, {58}, {1}, {}},               // ShuffleNet's channel halves
      {{1, 116, 28, 28}, {58}, {116}, {1}, {1}},
      {{17}, {1}, {16}, {0}, {kMax}},                        // a huge step: one element
      {{2, 3, 33}, {0, 2}, {1, 3}, {0, 1}, {}},              // single elements along outer axes
      {{0, 5}, {1}, {4}, {1}, {}},                           // empty input
      {{64, 300, 9}, {8, -1}, {1, kMin}, {2, 1}, {-2, -3}},  // many rows: split over the pool
      {{300, 64, 20}, {1}, {19}, {-1}, {}},                   // many short blocks over the pool
  };
  for (const SCase& c : cases)
    for (DType t : {DType::Float, DType::Int64, DType::UInt8})
      for (int64_t opset : {10, 13}) {
        if (opset == 10 && t == DType::UInt8) continue;
        std::map<std::string, RtValue> feeds;
        int64_t k = static_cast<int64_t>(c.starts.size());
        std::vector<Arg> args{{t == DType::Float ? randomTensor(c.dims, rng, true) : countingTensor(t, c.dims, rng), false},
                              {i64({k}, c.starts), true},
                              {i64({k}, c.ends), true}};
        if (!c.axes.empty() || !c.steps.empty()) {
          std::vector<int64_t> axes = c.axes;
          if (axes.empty())
            for (int64_t i = 0; i < k; ++i) axes.push_back(i);
          args.push_back({i64({k}, axes), true});
        }
        if (!c.steps.empty()) args.push_back({i64({k}, c.steps), true});
        auto model = oneNode("Slice", opset, args, {}, feeds);
        INFO("Slice opset " << opset << " dims " << c.dims.size() << " starts " << c.starts[0] << " dtype " << static_cast<int>(t));
        checkAgainstRef(*model, feeds, "cpu.slice.copy");
      }
  {  // Slice-1: attributes
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Slice", 1, {{randomTensor({4, 6, 5}, rng), false}},
                         {testutil::ints("starts", {1, -4}), testutil::ints("ends", {3, 1000}), testutil::ints("axes", {0, -2})}, feeds);
    checkAgainstRef(*model, feeds, "cpu.slice.copy");
  }
  {  // starts computed at run time: the output shape is known only then, a lazy fast kernel made for those starts
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Slice", 13, {{randomTensor({4, 6}, rng), false}, {i64({1}, {1}), false}, {i64({1}, {3}), true}}, {}, feeds);
    PrepareOptions po = rawGraph();
    RunProfile prof;
    auto got = makeExecutor("cpu")->prepare(*model, po)->runProfiled(feeds, prof);
    auto want = makeExecutor("ref")->prepare(*model, {})->run(feeds);
    CHECK(compareValues(got[0], want[0], 0, 0).ok);
    REQUIRE(prof.nodes.size() == 1);
    CHECK_FALSE(prof.nodes[0].fallback);
    CHECK(prof.nodes[0].kernel.rfind("cpu.slice.copy", 0) == 0);
    CHECK(prof.nodes[0].kernel.find("(lazy)") != std::string::npos);
  }
}

TEST_CASE("cpu Concat and Split match the reference kernels on any element type", "[cpu][kernels]") {
  std::mt19937 rng(43);
  for (DType t : {DType::Float, DType::Int64, DType::UInt8})
    for (int64_t axis : {0, 1, -1, 2}) {
      std::vector<int64_t> a{axis == 0 ? 3 : 3000, 4, 5}, b = a, c = a;  // 3000 rows: split over the pool
      size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
      b[ax] = 0;  // an empty piece
      c[ax] = 7;
      std::map<std::string, RtValue> feeds;
      auto model = oneNode("Concat", 13,
                           {{countingTensor(t, a, rng), false}, {countingTensor(t, b, rng), false}, {countingTensor(t, c, rng), true}},
                           {testutil::one("axis", axis)}, feeds);
      INFO("Concat axis " << axis << " dtype " << static_cast<int>(t));
      checkAgainstRef(*model, feeds, "cpu.concat.copy");
    }
  // Few rows of many bytes (a channel concat of one or two images): copied in 64 KiB chunks over
  // the threads, parts starting and ending inside chunks.
  for (int64_t n : {1, 2})
    for (DType t : {DType::Float, DType::UInt8}) {
      std::map<std::string, RtValue> feeds;
      auto model = oneNode("Concat", 13,
                           {{countingTensor(t, {n, 1777, 31}, rng), false},
                            {countingTensor(t, {n, 3, 31}, rng), false},
                            {countingTensor(t, {n, 0, 31}, rng), false},
                            {countingTensor(t, {n, 4099, 31}, rng), true}},
                           {testutil::one("axis", 1)}, feeds);
      INFO("Concat of long rows, n " << n << " dtype " << static_cast<int>(t));
      checkAgainstRef(*model, feeds, "cpu.concat.copy");
      std::map<std::string, RtValue> sfeeds;
      auto split = oneNode("Split", 13, {{countingTensor(t, {n, 5879, 31}, rng), false}, {i64({3}, {1777, 3, 4099}), true}},
                           {testutil::one("axis", 1)}, sfeeds, 3);
      INFO("Split of long rows");
      checkAgainstRef(*split, sfeeds, "cpu.split.copy");
    }
  struct PCase {
    int64_t opset;
    std::vector<int64_t> dims;
    int64_t axis;
    std::vector<int64_t> split;  // empty: equal parts (num_outputs at 18)
    size_t outputs;
  };
  const PCase cases[] = {{13, {2, 9, 5}, 1, {2, 0, 7}, 3}, {13, {2, 9, 5}, -1, {}, 5},  {18, {2, 9, 5}, 1, {}, 4},
                         {18, {7, 3}, 0, {}, 3},          {11, {4, 6, 3}, -2, {1, 5}, 2}, {11, {4, 6, 3}, 0, {}, 2},
                         {13, {1, 232, 7, 7}, 1, {}, 2}, {13, {3000, 6, 5}, 1, {1, 2, 3}, 3}};
  for (const PCase& c : cases)
    for (DType t : {DType::Float, DType::Int64, DType::UInt8}) {
      std::map<std::string, RtValue> feeds;
      std::vector<Arg> args{{countingTensor(t, c.dims, rng), false}};
      std::vector<Attribute> attrs{testutil::one("axis", c.axis)};
      if (c.opset >= 13 && !c.split.empty()) args.push_back({i64({static_cast<int64_t>(c.split.size())}, c.split), true});
      if (c.opset < 13 && !c.split.empty()) attrs.push_back(testutil::ints("split", c.split));
      if (c.opset >= 18) attrs.push_back(testutil::one("num_outputs", static_cast<int64_t>(c.outputs)));
      auto model = oneNode("Split", c.opset, args, attrs, feeds, c.outputs);
      INFO("Split opset " << c.opset << " axis " << c.axis << " outputs " << c.outputs << " dtype " << static_cast<int>(t));
      checkAgainstRef(*model, feeds, "cpu.split.copy");
    }
}

TEST_CASE("cpu HardSwish and HardSigmoid match the reference kernels within 1 ulp", "[cpu][kernels]") {
  std::mt19937 rng(47);
  auto ulps = [](float a, float b) -> int64_t {  // distance in representable floats (same sign)
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : 1 << 30;
    if (a == b) return 0;
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return 1 << 30;
    return std::abs(static_cast<int64_t>(ia) - ib);
  };
  // A dense sweep of [-4, 4] (every region: zero, the cubic middle, identity) and the specials.
  std::vector<float> xs;
  for (int i = -400000; i <= 400000; ++i) xs.push_back(static_cast<float>(i) * 1e-5f);
  for (float v : {3.f, -3.f, std::nextafter(3.f, 0.f), std::nextafter(-3.f, 0.f), 0.f, -0.f, 1e-30f, -1e-30f, 1e30f, -1e30f,
                  testutil::kInf, -testutil::kInf, testutil::kNan, -2.5f, 2.5f})
    xs.push_back(v);
  std::vector<float> noise = randomFloats(1001, rng);
  for (float v : noise) xs.push_back(v * 3.f);
  struct HCase {
    const char* op;
    int64_t opset;
    std::vector<Attribute> attrs;
    const char* prefix;
  };
  const HCase cases[] = {{"HardSwish", 14, {}, "cpu.hardswish"},
                         {"HardSigmoid", 6, {}, "cpu.hardsigmoid"},
                         {"HardSigmoid", 6, {Attribute::ofFloat("alpha", 1.f / 6.f), Attribute::ofFloat("beta", 0.5f)}, "cpu.hardsigmoid"},
                         {"HardSigmoid", 22, {Attribute::ofFloat("alpha", -0.3f), Attribute::ofFloat("beta", 0.25f)}, "cpu.hardsigmoid"}};
  for (const HCase& c : cases) {
    INFO(c.op << " opset " << c.opset);
    std::map<std::string, RtValue> feeds;
    auto model = oneNode(c.op, c.opset, {{f32({static_cast<int64_t>(xs.size())}, xs), false}}, c.attrs, feeds);
    checkAgainstRef(*model, feeds, c.prefix, 2e-7, 1e-38);
    auto want = makeExecutor("ref")->prepare(*model, {})->run(feeds);
    auto got = makeExecutor("cpu")->prepare(*model, rawGraph())->run(feeds);
    const float* w = reinterpret_cast<const float*>(want[0].tensor->raw.data());
    const float* g = reinterpret_cast<const float*>(got[0].tensor->raw.data());
    int64_t worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      if (int64_t u = ulps(g[i], w[i]); u > worst) worst = u, at = i;
    INFO("worst at x = " << xs[at] << ": " << g[at] << " vs " << w[at]);
    CHECK(worst <= 1);
  }
  // Odd shapes and tails on every vector width (n = 0 included).
  for (int64_t n : {0, 1, 3, 5, 15, 17, 33, 40001}) {
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("HardSwish", 14, {{randomTensor({n}, rng, true), false}}, {}, feeds);
    checkAgainstRef(*model, feeds, "cpu.hardswish", 2e-7, 1e-38);
  }
}

TEST_CASE("cpu fusions: HardSwish after MatMul + bias is the GEMM's epilogue", "[cpu][fusion]") {
  std::mt19937 rng(48);
  checkFused("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[7, 20] x) => (float[7, 19] y) <float[20, 19] w = " +
                 literal(20 * 19, rng, 0.3f) + ", float[19] b = " + literal(19, rng) +
                 "> {\n  m = MatMul(x, w)\n  h = Add(m, b)\n  y = HardSwish(h)\n}",
             {{"x", {7, 20}}}, {"cpu.matmul.f32+Add+HardSwish"}, 3);
}

TEST_CASE("cpu plan: Split's outputs live in the arena and feed later kernels, Slice and Concat around them", "[cpu][plan]") {
  // Every output of the fast Split is written (none left to a fallback), and arena reuse after
  // it keeps the parts apart: ShuffleNet's channel split and shuffle, spelled with Split.
  checkFused("<ir_version: 8, opset_import: [\"\" : 18]>\n"
             "g (float[2, 12, 5, 7] x) => (float[2, 12, 5, 7] y, float[2, 3, 5, 7] z)"
             " <int64[1] s = {1}, int64[1] e = {12}, int64[1] ax = {1}, int64[1] st = {4}> {\n"
             "  a, b, c = Split<axis: int = 1, num_outputs: int = 3>(x)\n"
             "  ra = Relu(a)\n  sb = Sigmoid(b)\n  t = Concat<axis: int = 1>(c, ra, sb)\n"
             "  y = HardSwish(t)\n  z = Slice(y, s, e, ax, st)\n}",
             {{"x", {2, 12, 5, 7}}},
             {"cpu.split.copy", "cpu.relu.f32", "cpu.sigmoid.f32", "cpu.concat.copy", "cpu.hardswish.f32", "cpu.slice.copy.blocks"}, 6);
}

TEST_CASE("cpu fusions: Conv (+ BatchNormalization) + HardSwish is one step on the packed and depthwise kernels", "[cpu][fusion]") {
  std::mt19937 rng(49);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  // 3x3 stride 1 (Winograd-shaped: the packed kernel takes it with the activation), 21 output
  // channels (a partial weight panel), 1x1 pointwise, and a depthwise 3x3 with a folded BN.
  checkFused(head + "g (float[1, 8, 9, 11] x) => (float[1, 21, 9, 11] y) <float[21, 8, 3, 3] w = " + literal(21 * 8 * 9, rng, 0.3f) +
                 ", float[21] b = " + literal(21, rng) + "> {\n  c = Conv<pads: ints = [1, 1, 1, 1]>(x, w, b)\n  y = HardSwish(c)\n}",
             {{"x", {1, 8, 9, 11}}},
             {"cpu.conv.f32.gemm." + std::string(cpu::activeGemmMicroKernel(21).isa == cpu::Isa::Avx2 ? "implicit." : "") +
              std::string(cpu::isaName(cpu::activeGemmMicroKernel(21).isa)) + "+hardswish"},
             2);  // (the AVX2 path computes a 3x3 of 8 input channels as an implicit GEMM)
  checkFused(head + "g (float[2, 16, 7, 5] x) => (float[2, 40, 7, 5] y) <float[40, 16, 1, 1] w = " + literal(40 * 16, rng, 0.3f) +
                 "> {\n  c = Conv(x, w)\n  y = HardSwish(c)\n}",
             {{"x", {2, 16, 7, 5}}}, {"cpu.conv.f32.gemm." + std::string(cpu::isaName(cpu::activeGemmMicroKernel(40).isa)) + "+hardswish"}, 2);
  checkFused(head + "g (float[1, 6, 13, 9] x) => (float[1, 6, 7, 5] y) <float[6, 1, 3, 3] w = " + literal(6 * 9, rng, 0.5f) +
                 ", float[6] s = " + literal(6, rng) + ", float[6] bb = " + literal(6, rng) + ", float[6] mu = " + literal(6, rng) +
                 ", float[6] var = {1.0, 0.5, 2.0, 0.25, 1.5, 0.75}> {\n"
                 "  c = Conv<group: int = 6, strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>(x, w)\n"
                 "  n = BatchNormalization(c, s, bb, mu, var)\n  y = HardSwish(n)\n}",
             {{"x", {1, 6, 13, 9}}}, {"cpu.conv.f32.depthwise+bn+hardswish"}, 3);
}

TEST_CASE("cpu fusions: Conv (+ BatchNormalization) + x * Sigmoid(x) (SiLU) is one step; partial patterns stay apart",
          "[cpu][fusion]") {
  std::mt19937 rng(53);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  // EfficientNet's block: pointwise Conv then SiLU written as Sigmoid + Mul (either operand order).
  checkFused(head + "g (float[2, 16, 7, 5] x) => (float[2, 24, 7, 5] y) <float[24, 16, 1, 1] w = " + literal(24 * 16, rng, 0.3f) +
                 ", float[24] b = " + literal(24, rng) + "> {\n  c = Conv(x, w, b)\n  s = Sigmoid(c)\n  y = Mul(c, s)\n}",
             {{"x", {2, 16, 7, 5}}}, {"cpu.conv.f32.gemm." + std::string(cpu::isaName(cpu::activeGemmMicroKernel(24).isa)) + "+silu"}, 3);
  // Depthwise with a folded BatchNormalization, Mul(sigmoid, x).
  checkFused(head + "g (float[1, 6, 13, 9] x) => (float[1, 6, 7, 5] y) <float[6, 1, 3, 3] w = " + literal(6 * 9, rng, 0.5f) +
                 ", float[6] s = " + literal(6, rng) + ", float[6] bb = " + literal(6, rng) + ", float[6] mu = " + literal(6, rng) +
                 ", float[6] var = {1.0, 0.5, 2.0, 0.25, 1.5, 0.75}> {\n"
                 "  c = Conv<group: int = 6, strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]>(x, w)\n"
                 "  n = BatchNormalization(c, s, bb, mu, var)\n  g = Sigmoid(n)\n  y = Mul(g, n)\n}",
             {{"x", {1, 6, 13, 9}}}, {"cpu.conv.f32.depthwise+bn+silu"}, 4);
  // The Sigmoid's output is also a graph output: no fusion (Conv, Sigmoid and Mul run apart).
  checkFused(head + "g (float[2, 16, 7, 5] x) => (float[2, 24, 7, 5] y, float[2, 24, 7, 5] s) <float[24, 16, 1, 1] w = " +
                 literal(24 * 16, rng, 0.3f) + "> {\n  c = Conv(x, w)\n  s = Sigmoid(c)\n  y = Mul(c, s)\n}",
             {{"x", {2, 16, 7, 5}}},
             {"cpu.conv.f32.gemm." + std::string(cpu::isaName(cpu::activeGemmMicroKernel(24).isa)), "cpu.sigmoid.f32", "cpu.mul.f32"}, 3);
}

TEST_CASE("cpu LSTM and GRU match the reference kernel (directions, layouts, sequence_lens, states, peepholes, clip)",
          "[cpu][kernels]") {
  std::mt19937 rng(31);
  for (int iter = 0; iter < 48; ++iter) {
    const bool gru = iter % 2 == 1;
    std::uniform_int_distribution<int64_t> small(1, 5), hid(1, 33), in(1, 20);
    const int64_t S = small(rng) + (iter % 7 == 0 ? 9 : 0), B = small(rng), H = hid(rng), I = in(rng), G = gru ? 3 : 4;
    const char* dirNames[] = {"forward", "reverse", "bidirectional"};
    const std::string direction = dirNames[(iter / 2) % 3];
    const int64_t D = direction == "bidirectional" ? 2 : 1;
    const bool layout1 = iter % 5 == 1, withB = iter % 4 != 3, withLens = iter % 3 == 1, withH0 = iter % 4 < 2,
               withC0 = !gru && iter % 6 < 3, withP = !gru && iter % 8 < 4, clip = iter % 9 == 4, lbr = gru && iter % 4 == 1,
               inputForget = !gru && iter % 10 == 6;
    auto scaled = [&](std::vector<int64_t> dims, float scale) {
      Tensor t = randomTensor(std::move(dims), rng);
      auto* p = reinterpret_cast<float*>(t.raw.mutableData());
      for (size_t i = 0; i < t.raw.size() / 4; ++i) p[i] *= scale;
      return t;
    };
    std::vector<Arg> args{{scaled(layout1 ? std::vector<int64_t>{B, S, I} : std::vector<int64_t>{S, B, I}, 1.f), false},
                          {scaled({D, G * H, I}, 0.5f), true},
                          {scaled({D, G * H, H}, 0.5f), true},
                          {scaled({D, 2 * G * H}, 0.5f), true}};
    std::vector<int32_t> lens(static_cast<size_t>(B));
    for (auto& l : lens) l = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, S)(rng));
    args.push_back({testutil::i32({B}, lens), false});
    const std::vector<int64_t> state = layout1 ? std::vector<int64_t>{B, D, H} : std::vector<int64_t>{D, B, H};
    args.push_back({scaled(state, 1.f), false});
    if (!gru) {
      args.push_back({scaled(state, 1.f), false});
      args.push_back({scaled({D, 3 * H}, 0.5f), true});
    }
    std::vector<Attribute> attrs{Attribute::ofString("direction", direction), Attribute::ofInt("hidden_size", H)};
    if (layout1) attrs.push_back(Attribute::ofInt("layout", 1));
    if (clip) attrs.push_back(Attribute::ofFloat("clip", 0.7f));
    if (lbr) attrs.push_back(Attribute::ofInt("linear_before_reset", 1));
    if (inputForget) attrs.push_back(Attribute::ofInt("input_forget", 1));
    std::map<std::string, RtValue> feeds;
    auto model = oneNode(gru ? "GRU" : "LSTM", 14, args, attrs, feeds, gru ? 2 : 3);
    Node* n = model->graph->nodes().front().get();
    if (!withB) n->setInput(3, nullptr);
    if (!withLens) n->setInput(4, nullptr);
    if (!withH0) n->setInput(5, nullptr);
    if (!gru && !withC0) n->setInput(6, nullptr);
    if (!gru && !withP) n->setInput(7, nullptr);
    INFO((gru ? "GRU" : "LSTM") << " S " << S << " B " << B << " H " << H << " I " << I << " " << direction << " layout " << layout1
                                << " B " << withB << " lens " << withLens << " h0 " << withH0 << " c0 " << withC0 << " P " << withP
                                << " clip " << clip << " lbr " << lbr << " input_forget " << inputForget);
    checkAgainstRef(*model, feeds, gru ? "cpu.gru" : "cpu.lstm", 1e-4, 2e-5);
  }
}

TEST_CASE("cpu Pad matches the reference kernel in every mode (constant value, axes, int64 data, rank 1 to 4)", "[cpu][kernels]") {
  std::mt19937 rng(37);
  const char* modes[] = {"constant", "reflect", "edge", "wrap"};
  for (int iter = 0; iter < 40; ++iter) {
    std::uniform_int_distribution<int64_t> dim(1, 6), rank(1, 4), pad(0, 3);
    const std::string mode = modes[iter % 4];
    const int64_t r = rank(rng);
    std::vector<int64_t> dims(static_cast<size_t>(r));
    for (auto& d : dims) d = dim(rng) + (mode == "reflect" ? 3 : 0);
    const bool withAxes = iter % 3 == 2, intData = iter % 5 == 4;
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < r; ++a)
      if (!withAxes || a % 2 == 1 || r == 1) axes.push_back(withAxes && a == r - 1 ? -1 : a);
    std::vector<int64_t> pads(2 * axes.size());
    for (auto& p : pads) p = pad(rng);
    Tensor x = intData ? testutil::i64(dims, std::vector<int64_t>(static_cast<size_t>(std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>())), 7))
                       : randomTensor(dims, rng, true);
    if (intData) {
      auto* p = reinterpret_cast<int64_t*>(x.raw.mutableData());
      for (size_t i = 0; i < x.raw.size() / 8; ++i) p[i] = static_cast<int64_t>(i * 31 % 17) - 8;
    }
    std::vector<Arg> args{{x, false}, {testutil::i64({static_cast<int64_t>(pads.size())}, pads), true}};
    if (mode == "constant") args.push_back({intData ? testutil::i64({}, {-3}) : f32({}, {2.5f}), true});
    else args.push_back({intData ? testutil::i64({}, {0}) : f32({}, {0.f}), true});
    if (withAxes) args.push_back({testutil::i64({static_cast<int64_t>(axes.size())}, axes), true});
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("Pad", withAxes || mode == "wrap" ? 19 : 13, args, {Attribute::ofString("mode", mode)}, feeds);
    INFO("Pad " << mode << " rank " << r << " axes " << withAxes << " int " << intData);
    checkAgainstRef(*model, feeds, "cpu.pad.copy");
  }
}

TEST_CASE("cpu TopK matches the reference kernel (largest and smallest, any axis, ties, NaN, k = 0 and k = dim)", "[cpu][kernels]") {
  std::mt19937 rng(43);
  for (int iter = 0; iter < 36; ++iter) {
    std::uniform_int_distribution<int64_t> dim(1, 9);
    const int64_t r = 1 + iter % 3;
    std::vector<int64_t> dims(static_cast<size_t>(r));
    for (auto& d : dims) d = dim(rng);
    if (iter % 6 == 0) dims.back() = 300;  // a long row: nth_element then sort
    const int64_t axis = iter % 2 ? -1 : iter % r;
    const int64_t ax = axis < 0 ? axis + r : axis, n = dims[static_cast<size_t>(ax)];
    const int64_t k = iter % 5 == 0 ? 0 : iter % 5 == 1 ? n : std::uniform_int_distribution<int64_t>(1, n)(rng);
    Tensor x = randomTensor(dims, rng, iter % 3 == 0);
    if (iter % 4 == 1) {  // ties: values from a small set
      auto* p = reinterpret_cast<float*>(x.raw.mutableData());
      for (size_t i = 0; i < x.raw.size() / 4; ++i) p[i] = static_cast<float>(static_cast<int>(i * 7 % 5));
    }
    std::map<std::string, RtValue> feeds;
    auto model = oneNode("TopK", 11, {{x, false}, {testutil::i64({1}, {k}), true}},
                         {Attribute::ofInt("axis", axis), Attribute::ofInt("largest", iter % 3 != 2)}, feeds, 2);
    INFO("TopK dims rank " << r << " axis " << axis << " k " << k << " largest " << (iter % 3 != 2));
    checkAgainstRef(*model, feeds, "cpu.topk");
  }
}

TEST_CASE("cpu Attention matches the reference kernel", "[cpu][kernels][attention]") {
  std::mt19937 rng(71);
  struct Case {
    bool is3d;
    int64_t b, hq, hkv, sq, skv, dh, dv;
    int mask;  // 0 none, 1 float, 2 bool, 3 float with a shorter last dim (padded: masked out), 4 bool, whole rows masked
    std::vector<int64_t> maskDims;
    bool causal;
    float scale;  // 0: the default 1/sqrt(dh)
  };
  const Case cases[] = {
      {false, 2, 3, 3, 5, 7, 8, 8, 0, {}, false, 0},
      {false, 1, 4, 2, 17, 33, 16, 12, 1, {17, 33}, false, 0.3f},   // grouped-query heads, a 2-D float mask
      {false, 2, 2, 1, 9, 9, 4, 4, 2, {2, 1, 9, 9}, true, 0},        // bool mask and causal
      {false, 1, 2, 2, 6, 10, 8, 8, 3, {1, 6, 7}, false, 0},          // mask covers 7 of 10 keys
      {false, 1, 1, 1, 130, 140, 32, 32, 0, {}, true, 0},             // causal, several row blocks
      {false, 1, 2, 2, 4, 12, 8, 8, 4, {1, 2, 4, 12}, false, 0},      // rows with every key masked: zeros
      {true, 2, 4, 2, 6, 11, 8, 8, 1, {2, 4, 6, 11}, false, 0},       // 3-D (B, S, H*D) layout
      {true, 1, 3, 3, 1, 19, 16, 8, 0, {}, false, 0.125f},            // one query (decoding), dv != dh
      {false, 1, 2, 2, 3, 1, 8, 8, 0, {}, false, 0},                  // one key
      {false, 1, 2, 2, 8, 3, 8, 8, 0, {}, true, 0},                   // causal with fewer keys than queries
  };
  for (const Case& c : cases) {
    std::map<std::string, RtValue> feeds;
    auto dims = [&](int64_t h, int64_t s, int64_t d) {
      return c.is3d ? std::vector<int64_t>{c.b, s, h * d} : std::vector<int64_t>{c.b, h, s, d};
    };
    std::vector<Arg> args = {{randomTensor(dims(c.hq, c.sq, c.dh), rng), false},
                             {randomTensor(dims(c.hkv, c.skv, c.dh), rng), false},
                             {randomTensor(dims(c.hkv, c.skv, c.dv), rng), false}};
    if (c.mask) {
      int64_t n = 1;
      for (int64_t d : c.maskDims) n *= d;
      if (c.mask == 1 || c.mask == 3) {
        std::vector<float> f = randomFloats(static_cast<size_t>(n), rng);
        for (int64_t i = 0; i < n; i += 5) f[static_cast<size_t>(i)] = -testutil::kInf;  // some keys masked out
        args.push_back({f32(c.maskDims, f), false});
      } else {
        std::vector<uint8_t> keep(static_cast<size_t>(n));
        std::bernoulli_distribution coin(0.7);
        for (auto& v : keep) v = coin(rng);
        if (c.mask == 4)  // rows 1 and 3 of every head: no key attended
          for (int64_t i = 0; i < n; ++i)
            if ((i / c.maskDims.back()) % 4 == 1 || (i / c.maskDims.back()) % 4 == 3) keep[static_cast<size_t>(i)] = 0;
        args.push_back({testutil::tensorOf(DType::Bool, c.maskDims, keep), false});
      }
    }
    std::vector<Attribute> attrs;
    if (c.causal) attrs.push_back(testutil::one("is_causal", int64_t{1}));
    if (c.scale != 0) attrs.push_back(Attribute::ofFloat("scale", c.scale));
    if (c.is3d) {
      attrs.push_back(testutil::one("q_num_heads", c.hq));
      attrs.push_back(testutil::one("kv_num_heads", c.hkv));
    }
    auto model = oneNode("Attention", 23, args, attrs, feeds);
    INFO("Attention " << (c.is3d ? "3-D" : "4-D") << " b " << c.b << " heads " << c.hq << "/" << c.hkv << " sq " << c.sq
                      << " skv " << c.skv << " mask " << c.mask << " causal " << c.causal);
    checkAgainstRef(*model, feeds, "cpu.attention.f32", 1e-4, 1e-5);
  }
  // A KV cache is left to the reference kernel (and still computed right).
  std::map<std::string, RtValue> feeds;
  auto model = oneNode("Attention", 23,
                       {{randomTensor({1, 2, 3, 8}, rng), false}, {randomTensor({1, 2, 3, 8}, rng), false},
                        {randomTensor({1, 2, 3, 8}, rng), false}, {randomTensor({3, 7}, rng), false},
                        {randomTensor({1, 2, 4, 8}, rng), false}, {randomTensor({1, 2, 4, 8}, rng), false}},
                       {}, feeds);
  auto want = makeExecutor("ref")->prepare(*model, {})->run(feeds);
  RunProfile prof;
  auto got = makeExecutor("cpu")->prepare(*model, rawGraph())->runProfiled(feeds, prof);
  CHECK(compareValues(got[0], want[0], 1e-4, 1e-5).ok);
  CHECK(prof.nodes.back().fallback);
}

TEST_CASE("cpu fusions: attention written with standard ops runs as one step", "[cpu][fusion][attention]") {
  std::mt19937 rng(73);
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  // BERT's form: MatMul, Div by sqrt(d), Add of a mask broadcast over heads and queries, Softmax, MatMul.
  checkFused(head + "g (float[2, 3, 9, 8] q, float[2, 3, 8, 11] kt, float[2, 3, 11, 8] v, float[2, 1, 1, 11] m) => "
                    "(float[2, 3, 9, 8] y) <float s = {2.828427}> {\n"
                    "  a = MatMul(q, kt)\n  b = Div(a, s)\n  c = Add(b, m)\n  p = Softmax<axis: int = -1>(c)\n  y = MatMul(p, v)\n}",
             {{"q", {2, 3, 9, 8}}, {"kt", {2, 3, 8, 11}}, {"v", {2, 3, 11, 8}}, {"m", {2, 1, 1, 11}}}, {"cpu.attention.f32.fused"}, 5);
  // Scale on the left of a Mul, the mask first in the Add, a last mask dim of 1 (broadcast), rank 3, many rows.
  checkFused(head + "g (float[2, 150, 16] q, float[2, 16, 140] kt, float[2, 140, 5] v, float[150, 1] m) => "
                    "(float[2, 150, 5] y) <float s = {0.25}> {\n"
                    "  a = MatMul(q, kt)\n  b = Mul(s, a)\n  c = Add(m, b)\n  p = Softmax<axis: int = 2>(c)\n  y = MatMul(p, v)\n}",
             {{"q", {2, 150, 16}}, {"kt", {2, 16, 140}}, {"v", {2, 140, 5}}, {"m", {150, 1}}}, {"cpu.attention.f32.fused"}, 5);
  // No scale, no mask, rank 2; Softmax-11 over its last axis.
  checkFused("<ir_version: 7, opset_import: [\"\" : 11]>\ng (float[7, 4] q, float[4, 6] kt, float[6, 3] v) => (float[7, 3] y) {\n"
             "  a = MatMul(q, kt)\n  p = Softmax<axis: int = 1>(a)\n  y = MatMul(p, v)\n}",
             {{"q", {7, 4}}, {"kt", {4, 6}}, {"v", {6, 3}}}, {"cpu.attention.f32.fused"}, 3);
  // The probabilities are also a graph output: nothing fuses.
  checkFused(head + "g (float[1, 2, 5, 4] q, float[1, 2, 4, 6] kt, float[1, 2, 6, 4] v) => (float[1, 2, 5, 4] y, float[1, 2, 5, 6] p) {\n"
                    "  a = MatMul(q, kt)\n  p = Softmax(a)\n  y = MatMul(p, v)\n}",
             {{"q", {1, 2, 5, 4}}, {"kt", {1, 2, 4, 6}}, {"v", {1, 2, 6, 4}}}, {"cpu.matmul.f32", "cpu.softmax.f32", "cpu.matmul.f32"},
             3);
  // Softmax over another axis, or V broadcast over the batch: nothing fuses.
  checkFused(head + "g (float[1, 2, 5, 4] q, float[1, 2, 4, 5] kt, float[1, 2, 5, 4] v) => (float[1, 2, 5, 4] y) {\n"
                    "  a = MatMul(q, kt)\n  p = Softmax<axis: int = 2>(a)\n  y = MatMul(p, v)\n}",
             {{"q", {1, 2, 5, 4}}, {"kt", {1, 2, 4, 5}}, {"v", {1, 2, 5, 4}}}, {"cpu.matmul.f32", "cpu.softmax.f32", "cpu.matmul.f32"},
             3);
  checkFused(head + "g (float[2, 2, 5, 4] q, float[2, 2, 4, 6] kt, float[6, 4] v) => (float[2, 2, 5, 4] y) {\n"
                    "  a = MatMul(q, kt)\n  p = Softmax(a)\n  y = MatMul(p, v)\n}",
             {{"q", {2, 2, 5, 4}}, {"kt", {2, 2, 4, 6}}, {"v", {6, 4}}}, {"cpu.matmul.f32", "cpu.softmax.f32", "cpu.matmul.f32"}, 3);
}

TEST_CASE("cpu Where matches the reference kernel", "[cpu][kernels][where]") {
  std::mt19937 rng(79);
  struct Case {
    std::vector<int64_t> c, x, y;
  };
  const Case cases[] = {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},     {{1, 1, 5, 7}, {2, 3, 5, 7}, {}},  // GPT-2's causal mask, a scalar fill
                        {{5, 1}, {1, 6}, {5, 6}},              {{3, 1, 4}, {3, 2, 1}, {1, 4}},    {{0, 3}, {1, 3}, {3}},
                        {{17}, {17}, {1}},                     {{2, 1, 33}, {2, 9, 33}, {9, 1}}};
  auto bcast = [](std::vector<std::vector<int64_t>> ds) {
    size_t r = 0;
    for (auto& d : ds) r = std::max(r, d.size());
    std::vector<int64_t> out(r, 1);
    for (auto& d : ds)
      for (size_t i = 0; i < d.size(); ++i) {
        int64_t& o = out[r - d.size() + i];
        if (d[i] != 1) o = d[i];
      }
    return out;
  };
  for (const Case& cs : cases)
    for (DType dt : {DType::Float, DType::Int64, DType::UInt8}) {
      int64_t nc = 1;
      for (int64_t d : cs.c) nc *= d;
      std::vector<uint8_t> cond(static_cast<size_t>(nc));
      std::bernoulli_distribution coin(0.5);
      for (auto& v : cond) v = coin(rng);
      auto values = [&](const std::vector<int64_t>& dims) {
        if (dt == DType::Float) return randomTensor(dims, rng, true);
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        std::uniform_int_distribution<int64_t> pick(0, 200);
        std::vector<int64_t> v(static_cast<size_t>(n));
        for (auto& e : v) e = pick(rng);
        if (dt == DType::Int64) return i64(dims, v);
        std::vector<uint8_t> u(v.begin(), v.end());
        return testutil::tensorOf(DType::UInt8, dims, u);
      };
      std::map<std::string, RtValue> feeds;
      auto model = oneNode("Where", 16,
                           {{testutil::tensorOf(DType::Bool, cs.c, cond), false}, {values(cs.x), false}, {values(cs.y), false}}, {},
                           feeds);
      INFO("Where " << cs.c.size() << "-D cond, out rank " << bcast({cs.c, cs.x, cs.y}).size() << " dtype " << static_cast<int>(dt));
      checkAgainstRef(*model, feeds, "cpu.where", 0, 0);
    }
}

TEST_CASE("cpu fusions: attention with a Where mask runs as one step", "[cpu][fusion][attention]") {
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  // GPT-2's form: Where(masked, fill, scores) with a causal bool mask broadcast over batch and heads.
  // Row 0 of the mask is all true (every key masked): a uniform row, as Softmax of equal fills gives.
  std::string mask = "bool[1, 1, 6, 6] m = {1, 1, 1, 1, 1, 1";
  for (int i = 1; i < 6; ++i)
    for (int j = 0; j < 6; ++j) mask += std::string(", ") + (j > i ? "1" : "0");
  mask += "}";
  checkFused(head + "g (float[2, 3, 6, 8] q, float[2, 3, 8, 6] kt, float[2, 3, 6, 4] v) => (float[2, 3, 6, 4] y) <" + mask +
                 ", float s = {2.828427}, float fill = {-3.4028234e38}> {\n"
                 "  a = MatMul(q, kt)\n  b = Div(a, s)\n  c = Where(m, fill, b)\n  p = Softmax(c)\n  y = MatMul(p, v)\n}",
             {{"q", {2, 3, 6, 8}}, {"kt", {2, 3, 8, 6}}, {"v", {2, 3, 6, 4}}}, {"cpu.attention.f32.fused"}, 5);
  // Where(keep, scores, -inf) with the keep mask as an input; a row with no key kept gives NaN, as Softmax does.
  checkFused(head + "g (float[1, 2, 5, 4] q, float[1, 2, 4, 7] kt, float[1, 2, 7, 3] v, bool[1, 5, 7] k) => (float[1, 2, 5, 3] y) "
                    "<float fill = {-inf}> {\n"
                    "  a = MatMul(q, kt)\n  c = Where(k, a, fill)\n  p = Softmax(c)\n  y = MatMul(p, v)\n}",
             {{"q", {1, 2, 5, 4}}, {"kt", {1, 2, 4, 7}}, {"v", {1, 2, 7, 3}}}, {"cpu.attention.f32.fused"}, 4,
             {{"k", RtValue::ofTensor(testutil::tensorOf(DType::Bool, {1, 5, 7},
                                                         std::vector<uint8_t>{1, 0, 1, 1, 0, 0, 1,  0, 0, 0, 0, 0, 0, 0,  1, 1, 1, 1, 1, 1, 1,
                                                                              0, 0, 0, 0, 0, 0, 1,  1, 0, 0, 1, 0, 1, 0}))}});
}

TEST_CASE("cpu fusions: attention reads Q, K and V through their Transposes and scalar Muls", "[cpu][fusion][attention]") {
  const std::string head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
  // BERT's head split: [B, S, H, D] -> [B, H, S, D] for Q and V, [B, H, D, S] for K^T.
  checkFused(head + "g (float[2, 5, 3, 4] q, float[2, 7, 3, 4] k, float[2, 7, 3, 4] v, float[2, 1, 1, 7] m) => (float[2, 3, 5, 4] y) "
                    "<float s = {2.0}> {\n"
                    "  qt = Transpose<perm: ints = [0, 2, 1, 3]>(q)\n  kt = Transpose<perm: ints = [0, 2, 3, 1]>(k)\n"
                    "  vt = Transpose<perm: ints = [0, 2, 1, 3]>(v)\n"
                    "  a = MatMul(qt, kt)\n  b = Div(a, s)\n  c = Add(b, m)\n  p = Softmax(c)\n  y = MatMul(p, vt)\n}",
             {{"q", {2, 5, 3, 4}}, {"k", {2, 7, 3, 4}}, {"v", {2, 7, 3, 4}}, {"m", {2, 1, 1, 7}}}, {"cpu.attention.f32.fused"}, 8);
  // Whisper's: q and k scaled after the head split, K^T a second Transpose of the scaled k.
  checkFused(head + "g (float[1, 9, 2, 8] q, float[1, 11, 2, 8] k, float[1, 11, 2, 8] v) => (float[1, 2, 9, 8] y) "
                    "<float s = {0.5946}> {\n"
                    "  q1 = Transpose<perm: ints = [0, 2, 1, 3]>(q)\n  q2 = Mul(q1, s)\n"
                    "  k1 = Transpose<perm: ints = [0, 2, 1, 3]>(k)\n  k2 = Mul(s, k1)\n  kt = Transpose<perm: ints = [0, 1, 3, 2]>(k2)\n"
                    "  vt = Transpose<perm: ints = [0, 2, 1, 3]>(v)\n"
                    "  a = MatMul(q2, kt)\n  p = Softmax(a)\n  y = MatMul(p, vt)\n}",
             {{"q", {1, 9, 2, 8}}, {"k", {1, 11, 2, 8}}, {"v", {1, 11, 2, 8}}}, {"cpu.attention.f32.fused"}, 9);
  // The same with two blocks of query rows a head: K is materialised transposed (its Transposes and
  // Mul stay steps), Q and V are still read through theirs.
  checkFused(head + "g (float[1, 150, 2, 8] q, float[1, 11, 2, 8] k, float[1, 11, 2, 8] v) => (float[1, 2, 150, 8] y) "
                    "<float s = {0.5946}> {\n"
                    "  q1 = Transpose<perm: ints = [0, 2, 1, 3]>(q)\n  q2 = Mul(q1, s)\n"
                    "  k1 = Transpose<perm: ints = [0, 2, 1, 3]>(k)\n  k2 = Mul(s, k1)\n  kt = Transpose<perm: ints = [0, 1, 3, 2]>(k2)\n"
                    "  vt = Transpose<perm: ints = [0, 2, 1, 3]>(v)\n"
                    "  a = MatMul(q2, kt)\n  p = Softmax(a)\n  y = MatMul(p, vt)\n}",
             {{"q", {1, 150, 2, 8}}, {"k", {1, 11, 2, 8}}, {"v", {1, 11, 2, 8}}},
             {"cpu.transpose.copy", "cpu.mul.f32", "cpu.transpose.copy", "cpu.attention.f32.fused"}, 9);
  // A Transpose that moves the head size off the last axis stays a copy; K^T read as it is.
  checkFused(head + "g (float[1, 2, 4, 5] qd, float[1, 2, 4, 6] kt, float[1, 2, 6, 3] v) => (float[1, 2, 5, 3] y) {\n"
                    "  q = Transpose<perm: ints = [0, 1, 3, 2]>(qd)\n  a = MatMul(q, kt)\n  p = Softmax(a)\n  y = MatMul(p, v)\n}",
             {{"qd", {1, 2, 4, 5}}, {"kt", {1, 2, 4, 6}}, {"v", {1, 2, 6, 3}}}, {"cpu.transpose.copy", "cpu.attention.f32.fused"}, 4);
}
