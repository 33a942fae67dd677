// test_cpu_int8.cpp: the cpu executor's int8 kernels. The int8 GEMM (exec/cpu/qgemm.h) on every
// path this CPU can run (portable, AVX2, AVX-512 VNNI), at 1 and 2 threads, against a plain
// int32 loop on randomised shapes around the tile sizes, with full-range operands (the u8 x s8
// pair sums that saturate int16), zero points, both epilogues and guard columns; the vectorised
// DynamicQuantizeLinear pieces against the reference formula; and, through the executor,
// MatMulInteger and the fused dynamically quantized MatMul against the reference executor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "exec/cpu/isa.h"
#include "exec/cpu/qgemm.h"
#include "exec/executor.h"
#include "exec/value_ops.h"
#include "lib/error.h"
#include "lib/ir.h"
#include "quant/dynamic.h"
#include "quant/int4.h"
#include "quant/qoperator.h"
#include "quant/static_qdq.h"
#include "ref_test_util.h"

using namespace onnxtool;
using namespace onnxtool::cpu;

namespace {

std::vector<qgemm::Path> availablePaths() {
  std::vector<qgemm::Path> paths = {qgemm::Path::Portable};
  Isa isa = detectedIsa();
  if (isa >= Isa::Avx2) paths.push_back(qgemm::Path::Avx2);
  if (qgemm::pathFor(isa) == qgemm::Path::Avx512Vnni) paths.push_back(qgemm::Path::Avx512Vnni);
  return paths;
}

/// One product checked against the plain loop: int32 output and float epilogue, with guard
/// columns right of each row that must stay untouched.
void checkGemm(qgemm::Path path, int threads, int64_t m, int64_t k, int64_t n, bool bZeros, std::mt19937& rng,
               bool extremes = false) {
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  std::vector<uint8_t> a(static_cast<size_t>(m * k));
  std::vector<int8_t> b(static_cast<size_t>(k * n));
  for (auto& v : a) v = static_cast<uint8_t>(extremes ? 255 : u8(rng));
  for (auto& v : b) v = static_cast<int8_t>(extremes ? (s8(rng) < 0 ? -128 : 127) : s8(rng));
  int32_t aZero = extremes ? 0 : u8(rng);
  std::vector<int32_t> bZero;
  if (bZeros)
    for (int64_t j = 0; j < n; ++j) bZero.push_back(s8(rng));
  std::vector<float> colScale(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
  std::uniform_real_distribution<float> uf(-1, 1);
  for (auto& v : colScale) v = uf(rng) * 1e-3f;
  for (auto& v : bias) v = uf(rng);
  // The expected values.
  std::vector<int32_t> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int32_t acc = 0;
      for (int64_t q = 0; q < k; ++q)
        acc += (a[static_cast<size_t>(i * k + q)] - aZero) * (b[static_cast<size_t>(q * n + j)] - (bZeros ? bZero[static_cast<size_t>(j)] : 0));
      want[static_cast<size_t>(i * n + j)] = acc;
    }
  qgemm::PackedB packed = qgemm::packB(path, b.data(), k, n);
  std::vector<uint8_t> ws(qgemm::packedABytes(path, m, k) + 64);
  std::vector<int32_t> rowSum(static_cast<size_t>(m));
  qgemm::packA(path, a.data(), m, k, k, ws.data(), rowSum.data());
  const int64_t ldc = n + 3;  // guard columns
  const int32_t guard = 0x7eadbeef;
  ThreadPool pool(threads);
  std::vector<int32_t> c32(static_cast<size_t>(m * ldc), guard);
  qgemm::Epilogue e;
  e.aZero = aZero;
  e.bZero = bZeros ? bZero.data() : nullptr;
  e.rowSumA = rowSum.data();
  e.c32 = c32.data();
  e.ldc = ldc;
  qgemm::gemm(packed, ws.data(), m, e, &pool);
  INFO("path " << qgemm::pathName(path) << " threads " << threads << " m " << m << " k " << k << " n " << n << " bZero "
               << bZeros);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j)
      if (c32[static_cast<size_t>(i * ldc + j)] != want[static_cast<size_t>(i * n + j)] && bad++ < 3) {
        INFO("at " << i << "," << j);
        CHECK(c32[static_cast<size_t>(i * ldc + j)] == want[static_cast<size_t>(i * n + j)]);
      }
    for (int64_t j = n; j < ldc; ++j) bad += c32[static_cast<size_t>(i * ldc + j)] != guard;
  }
  CHECK(bad == 0);
  // Float epilogue: float(acc) * colScale + bias, the same float operations as Cast -> Mul -> Add.
  std::vector<float> cf(static_cast<size_t>(m * ldc), 1234.5f);
  e.c32 = nullptr;
  e.cf = cf.data();
  e.colScale = colScale.data();
  e.bias = bias.data();
  qgemm::gemm(packed, ws.data(), m, e, &pool);
  bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float y = static_cast<float>(want[static_cast<size_t>(i * n + j)]) * colScale[static_cast<size_t>(j)];
      y = y + bias[static_cast<size_t>(j)];
      bad += cf[static_cast<size_t>(i * ldc + j)] != y;
    }
    for (int64_t j = n; j < ldc; ++j) bad += cf[static_cast<size_t>(i * ldc + j)] != 1234.5f;
  }
  CHECK(bad == 0);
  // A zero point and a scale per row of A (the per-row dynamic quantizer):
  // (float(sum (a - aZero[i]) (b - bZero[j])) * colScale[j]) * rowScale[i] + bias[j].
  std::vector<int32_t> aZeroRow(static_cast<size_t>(m));
  std::vector<float> rowScale(static_cast<size_t>(m));
  for (auto& v : aZeroRow) v = extremes ? 255 : u8(rng);
  for (auto& v : rowScale) v = uf(rng);
  std::fill(cf.begin(), cf.end(), 1234.5f);
  e.aZero = 77;  // ignored when aZeroRow is given
  e.aZeroRow = aZeroRow.data();
  e.rowScale = rowScale.data();
  qgemm::gemm(packed, ws.data(), m, e, &pool);
  bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int32_t acc = 0;
      for (int64_t q = 0; q < k; ++q)
        acc += (a[static_cast<size_t>(i * k + q)] - aZeroRow[static_cast<size_t>(i)]) *
               (b[static_cast<size_t>(q * n + j)] - (bZeros ? bZero[static_cast<size_t>(j)] : 0));
      float y = static_cast<float>(acc) * colScale[static_cast<size_t>(j)];
      y = y * rowScale[static_cast<size_t>(i)];
      y = y + bias[static_cast<size_t>(j)];
      bad += cf[static_cast<size_t>(i * ldc + j)] != y;
    }
    for (int64_t j = n; j < ldc; ++j) bad += cf[static_cast<size_t>(i * ldc + j)] != 1234.5f;
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("int8 GEMM matches the int32 loop on every path and thread count", "[cpu][int8]") {
  std::mt19937 rng(13);
  const int64_t ms[] = {1, 2, 5, 6, 7, 8, 9, 13, 17}, ks[] = {1, 2, 3, 4, 5, 7, 8, 31, 64, 67},
                ns[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 65};
  std::uniform_int_distribution<size_t> pm(0, std::size(ms) - 1), pk(0, std::size(ks) - 1), pn(0, std::size(ns) - 1);
  for (qgemm::Path path : availablePaths()) {
    for (int threads : {1, 2}) {
      for (int iter = 0; iter < 30; ++iter) checkGemm(path, threads, ms[pm(rng)], ks[pk(rng)], ns[pn(rng)], iter % 3 == 0, rng);
      // Large enough that two threads split the panels (and K past a few hundred groups).
      checkGemm(path, threads, 70, 515, 100, false, rng);
      checkGemm(path, threads, 33, 1030, 129, true, rng);
      // 255 x 127 and 255 x -128 everywhere: pair sums beyond int16.
      checkGemm(path, threads, 9, 130, 40, false, rng, true);
    }
  }
}

TEST_CASE("int8 GEMM: zero rows, K = 0", "[cpu][int8]") {
  std::mt19937 rng(5);
  for (qgemm::Path path : availablePaths()) {
    checkGemm(path, 1, 0, 8, 16, false, rng);
    checkGemm(path, 1, 3, 0, 16, true, rng);
  }
}

TEST_CASE("vectorised DynamicQuantizeLinear pieces match the reference formula", "[cpu][int8]") {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.3f, 2.0f);
  for (qgemm::Path path : availablePaths()) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 257}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = nd(rng);
      if (n > 3) x[2] = 0.5f * 3 / 255.0f * 7;  // a value on a rounding tie for some scales
      float mn = 0, mx = 0, wantMn = 0, wantMx = 0;
      REQUIRE(qgemm::minMax(path, x.data(), n, mn, mx));
      for (float v : x) wantMn = std::min(wantMn, v), wantMx = std::max(wantMx, v);
      CHECK(mn == wantMn);
      CHECK(mx == wantMx);
      float scale = (mx - mn) / 255.0f;
      float zero = std::nearbyint(std::clamp(0.0f - mn / scale, 0.0f, 255.0f));
      // Quantize as one row and read back (AVX2 stores int16, the others uint8).
      std::vector<uint8_t> dst(qgemm::packedABytes(path, 1, n));
      int32_t rowSum = -1;
      qgemm::quantizeA(path, x.data(), 1, n, scale, zero, dst.data(), &rowSum);
      int32_t wantSum = 0;
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        float q = std::clamp(std::nearbyint(x[static_cast<size_t>(i)] / scale) + zero, 0.0f, 255.0f);
        int got = path == qgemm::Path::Avx2 ? reinterpret_cast<const int16_t*>(dst.data())[i] : dst[static_cast<size_t>(i)];
        bad += got != static_cast<int>(q);
        wantSum += static_cast<int32_t>(q);
      }
      INFO("path " << qgemm::pathName(path) << " n " << n);
      CHECK(bad == 0);
      CHECK(rowSum == wantSum);
    }
    float x[3] = {1.0f, std::nanf(""), -2.0f};
    float mn, mx;
    CHECK_FALSE(qgemm::minMax(path, x, 3, mn, mx));
  }
}

namespace {

Value* graphInput(Graph& g, const std::string& name, DType dt, const std::vector<int64_t>& dims) {
  Value* v = g.createValue(name);
  TypeInfo ti;
  ti.kind = TypeInfo::Kind::Tensor;
  ti.elemType = static_cast<int32_t>(dt);
  ti.shape.hasRank = true;
  for (int64_t d : dims) ti.shape.dims.push_back(Dim::ofValue(d));
  v->setType(ti);
  g.addInput(v);
  return v;
}

std::unique_ptr<Model> emptyModel(int64_t opset) {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports = {{"", opset, {}}};
  m->graph = std::make_unique<Graph>();
  return m;
}

/// Runs on ref and on cpu (1 and 2 threads); outputs within tolerance; returns the cpu profile.
RunProfile compareWithRef(const Model& m, const std::map<std::string, RtValue>& feeds, double rtol, double atol) {
  auto want = makeExecutor("ref")->prepare(m, {})->run(feeds);
  RunProfile prof;
  for (int threads : {1, 2}) {
    PrepareOptions po;
    po.graphOptLevel = 0;  // the executor's own kernels and fusions, on the graph as written
    po.threads = threads;
    auto got = makeExecutor("cpu")->prepare(m, po)->runProfiled(feeds, prof);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CompareResult r = compareValues(got[i], want[i], rtol, atol);
      INFO("threads " << threads << ": " << r.message);
      CHECK(r.ok);
    }
  }
  return prof;
}

bool ranKernel(const RunProfile& p, const std::string& prefix) {
  return std::any_of(p.nodes.begin(), p.nodes.end(), [&](const NodeRun& n) { return n.kernel.rfind(prefix, 0) == 0 && !n.fallback; });
}

std::vector<float> normals(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("cpu MatMulInteger (uint8 x constant int8) matches the reference kernel", "[cpu][int8]") {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  struct Case {
    std::vector<int64_t> aDims;
    int64_t n;
    int bZero;  // 0 none, 1 scalar, 2 per column
  };
  const Case cases[] = {{{3, 5}, 7, 0}, {{2, 9, 17}, 33, 1}, {{1, 64}, 40, 2}, {{13, 4}, 16, 2}, {{2, 3, 130}, 65, 1}};
  for (const Case& c : cases) {
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    int64_t k = c.aDims.back(), aCount = 1;
    for (int64_t d : c.aDims) aCount *= d;
    std::vector<uint8_t> a(static_cast<size_t>(aCount));
    for (auto& v : a) v = static_cast<uint8_t>(u8(rng));
    std::vector<int8_t> b(static_cast<size_t>(k * c.n));
    for (auto& v : b) v = static_cast<int8_t>(s8(rng));
    std::map<std::string, RtValue> feeds;
    Value* va = graphInput(g, "a", DType::UInt8, c.aDims);
    feeds["a"] = testutil::T(testutil::tensorOf(DType::UInt8, c.aDims, a));
    Value* vaz = graphInput(g, "a_zero", DType::UInt8, {});
    feeds["a_zero"] = testutil::T(testutil::tensorOf(DType::UInt8, {}, std::vector<uint8_t>{static_cast<uint8_t>(u8(rng))}));
    Tensor tb = testutil::tensorOf(DType::Int8, {k, c.n}, b);
    tb.name = "b";
    std::vector<Value*> ins = {va, g.addInitializer(std::move(tb)), vaz};
    if (c.bZero) {
      std::vector<int8_t> z(static_cast<size_t>(c.bZero == 1 ? 1 : c.n));
      for (auto& v : z) v = static_cast<int8_t>(s8(rng));
      Tensor tz = testutil::tensorOf(DType::Int8, c.bZero == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{c.n}, z);
      tz.name = "b_zero";
      ins.push_back(g.addInitializer(std::move(tz)));
    }
    Node* n = g.addNode("MatMulInteger", ins, {"y"});
    n->name = "mmi";
    g.addOutput(n->output(0));
    INFO("A " << c.aDims.size() << "-D, K " << k << " N " << c.n << " b_zero_point " << c.bZero);
    RunProfile prof = compareWithRef(*m, feeds, 0, 0);
    CHECK(ranKernel(prof, "cpu.matmulinteger.u8s8"));
  }
}

namespace {

/// x [dims] -> MatMul(W [K, N]) (+ Add bias) -> y, dynamically quantized by quant/dynamic: per
/// tensor (DynamicQuantizeLinear) or per row (its default), at `opset`.
std::unique_ptr<Model> quantizedMlp(const std::vector<int64_t>& xDims, int64_t n, bool bias, bool twoReaders, std::mt19937& rng,
                                    bool rows = false, int64_t opset = 13) {
  auto m = emptyModel(opset);
  Graph& g = *m->graph;
  int64_t k = xDims.back();
  Value* x = graphInput(g, "x", DType::Float, xDims);
  auto weight = [&](const std::string& name, std::vector<int64_t> dims) {
    int64_t cnt = 1;
    for (int64_t d : dims) cnt *= d;
    Tensor t = testutil::f32(dims, normals(static_cast<size_t>(cnt), rng));
    t.name = name;
    return g.addInitializer(std::move(t));
  };
  Node* mm = g.addNode("MatMul", {x, weight("w", {k, n})}, {"mm"});
  mm->name = "matmul";
  Value* y = mm->output(0);
  if (bias) {
    Node* add = g.addNode("Add", {y, weight("bias", {n})}, {"biased"});
    add->name = "add";
    y = add->output(0);
  }
  g.addOutput(y);
  if (twoReaders) {  // a second MatMul on the same x shares its DynamicQuantizeLinear
    Node* mm2 = g.addNode("MatMul", {x, weight("w2", {k, n + 3})}, {"mm2"});
    mm2->name = "matmul2";
    g.addOutput(mm2->output(0));
  }
  DynamicQuantizeOptions o;
  o.rowScales = rows;
  DynamicQuantizeReport r = quantizeDynamic(*m, o);
  REQUIRE(r.nodesQuantized == (twoReaders ? 2 : 1));
  return m;
}

}  // namespace

TEST_CASE("cpu fuses DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul -> Add and matches the reference", "[cpu][int8]") {
  std::mt19937 rng(29);
  struct Case {
    std::vector<int64_t> xDims;
    int64_t n;
    bool bias, twoReaders;
  };
  const Case cases[] = {{{4, 16}, 20, true, false},  {{1, 7, 33}, 17, false, false}, {{2, 5, 64}, 48, true, true},
                        {{1, 1, 130}, 65, true, false}, {{3, 100}, 300, true, true}};
  for (const Case& c : cases) {
    auto m = quantizedMlp(c.xDims, c.n, c.bias, c.twoReaders, rng);
    std::map<std::string, RtValue> feeds;
    int64_t cnt = 1;
    for (int64_t d : c.xDims) cnt *= d;
    feeds["x"] = testutil::T(testutil::f32(c.xDims, normals(static_cast<size_t>(cnt), rng)));
    INFO("x rank " << c.xDims.size() << " K " << c.xDims.back() << " N " << c.n << " bias " << c.bias);
    // The same integer products and float operations as the graph: equal up to float rounding.
    RunProfile prof = compareWithRef(*m, feeds, 1e-5, 1e-6);
    CHECK(ranKernel(prof, "cpu.dynqmatmul.u8s8.fused"));
    for (const NodeRun& n : prof.nodes) {
      INFO("node " << n.node << " ran " << n.kernel);
      CHECK(n.opType != "DynamicQuantizeLinear");  // fused away
      CHECK(n.opType != "MatMulInteger");
    }
  }
}

TEST_CASE("cpu fuses the per-row dynamic quantizer -> MatMulInteger -> zero-point correction -> scales -> Add and matches the reference",
          "[cpu][int8]") {
  std::mt19937 rng(37);
  struct Case {
    std::vector<int64_t> xDims;
    int64_t n;
    bool bias, twoReaders;
    int64_t opset;  // 18+: ReduceMax/ReduceMin take their axes as an input
  };
  const Case cases[] = {{{4, 16}, 20, true, false, 13},  {{1, 7, 33}, 17, false, false, 18}, {{2, 5, 64}, 48, true, true, 13},
                        {{1, 1, 130}, 65, true, false, 18}, {{3, 100}, 300, true, true, 17}, {{2, 9, 31}, 33, false, true, 21}};
  for (const Case& c : cases) {
    auto m = quantizedMlp(c.xDims, c.n, c.bias, c.twoReaders, rng, true, c.opset);
    int64_t cnt = 1;
    for (int64_t d : c.xDims) cnt *= d;
    std::vector<float> x = normals(static_cast<size_t>(cnt), rng);
    const int64_t k = c.xDims.back(), rows = cnt / k;
    // Rows the per-tensor form never sees: all zero (the scale's floor: no 0 / 0), all positive
    // (zero point 0), all negative (zero point 255), one outlier ten thousand times the rest.
    for (int64_t q = 0; q < k; ++q) {
      x[static_cast<size_t>(q)] = 0;
      if (rows > 1) x[static_cast<size_t>(k + q)] = std::abs(x[static_cast<size_t>(k + q)]);
      if (rows > 2) x[static_cast<size_t>(2 * k + q)] = -std::abs(x[static_cast<size_t>(2 * k + q)]) - 1;
    }
    if (rows > 3) x[static_cast<size_t>(3 * k + 1)] = 1e4f;
    std::map<std::string, RtValue> feeds;
    feeds["x"] = testutil::T(testutil::f32(c.xDims, x));
    INFO("x rank " << c.xDims.size() << " K " << k << " N " << c.n << " bias " << c.bias << " opset " << c.opset);
    // The same row scales, zero points, integer products and float operations as the graph.
    RunProfile prof = compareWithRef(*m, feeds, 1e-5, 1e-6);
    CHECK(ranKernel(prof, "cpu.dynqmatmul.rows.u8s8.fused"));
    for (const NodeRun& n : prof.nodes) {
      INFO("node " << n.node << " ran " << n.kernel);
      CHECK((n.opType == "MatMul" || n.opType == "Mul" || n.opType == "Add"));  // one fused step per MatMul
    }
    CHECK(prof.nodes.size() == (c.twoReaders ? 2u : 1u));
  }
}

TEST_CASE("cpu leaves the per-row dynamic chain unfused when its column sums are not the weight's", "[cpu][int8]") {
  std::mt19937 rng(41);
  auto m = quantizedMlp({3, 24}, 10, true, false, rng, true);
  Graph& g = *m->graph;
  for (Value* v : g.initializers())
    if (v->name().ends_with("_column_sum")) {
      Tensor* t = v->initializer();
      REQUIRE(t);
      std::string raw(reinterpret_cast<const char*>(t->raw.data()), t->raw.size());
      raw[0] = static_cast<char>(raw[0] + 1);  // one column's sum off by one
      t->setRaw(Buffer::fromString(std::move(raw)));
    }
  std::map<std::string, RtValue> feeds;
  feeds["x"] = testutil::T(testutil::f32({3, 24}, normals(72, rng)));
  RunProfile prof = compareWithRef(*m, feeds, 1e-5, 1e-6);  // the graph's own (wrong) values, unfused
  CHECK_FALSE(ranKernel(prof, "cpu.dynqmatmul"));
}

TEST_CASE("cpu fuses the activation after a dynamic int8 MatMul chain (GELU as BERT spells it, Relu, Sigmoid)", "[cpu][int8]") {
  std::mt19937 rng(31);
  for (bool rows : {false, true})
  for (const char* act : {"gelu", "Relu", "Sigmoid"}) {
    auto m = emptyModel(17);
    Graph& g = *m->graph;
    const int64_t k = 40, n = 24;
    Value* x = graphInput(g, "x", DType::Float, {1, 6, k});
    auto weight = [&](const std::string& name, std::vector<int64_t> dims) {
      int64_t cnt = 1;
      for (int64_t d : dims) cnt *= d;
      Tensor t = testutil::f32(dims, normals(static_cast<size_t>(cnt), rng));
      t.name = name;
      return g.addInitializer(std::move(t));
    };
    auto scalar = [&](const std::string& name, float v) {
      Tensor t = testutil::f32({}, {v});
      t.name = name;
      return g.addInitializer(std::move(t));
    };
    Node* mm = g.addNode("MatMul", {x, weight("w", {k, n})}, {"mm"});
    Node* add = g.addNode("Add", {mm->output(0), weight("bias", {n})}, {"biased"});
    Value* y = add->output(0);
    if (std::string(act) == "gelu") {
      Node* div = g.addNode("Div", {y, scalar("sqrt2", 1.4142135f)}, {"d"});
      Node* erf = g.addNode("Erf", {div->output(0)}, {"e"});
      Node* plus = g.addNode("Add", {erf->output(0), scalar("one", 1.0f)}, {"e1"});
      Node* mul = g.addNode("Mul", {y, plus->output(0)}, {"m"});
      Node* half = g.addNode("Mul", {mul->output(0), scalar("half", 0.5f)}, {"gelu"});
      y = half->output(0);
    } else {
      y = g.addNode(act, {y}, {"act"})->output(0);
    }
    g.addOutput(y);
    DynamicQuantizeOptions o;
    o.rowScales = rows;
    REQUIRE(quantizeDynamic(*m, o).nodesQuantized == 1);
    std::map<std::string, RtValue> feeds;
    feeds["x"] = testutil::T(testutil::f32({1, 6, k}, normals(static_cast<size_t>(6 * k), rng)));
    INFO("activation " << act << " per row " << rows);
    RunProfile prof = compareWithRef(*m, feeds, 1e-5, 1e-5);
    REQUIRE(prof.nodes.size() == 1);  // quantize, GEMM, bias and the activation: one step
    CHECK(prof.nodes[0].kernel.rfind(rows ? "cpu.dynqmatmul.rows.u8s8.fused+" : "cpu.dynqmatmul.u8s8.fused+", 0) == 0);
  }
}

TEST_CASE("cpu leaves a quantized chain unfused when an intermediate is a graph output", "[cpu][int8]") {
  std::mt19937 rng(31);
  auto m = quantizedMlp({3, 24}, 10, true, false, rng);
  Graph& g = *m->graph;
  Value* scale = nullptr;
  for (const auto& n : g.nodes())
    if (n->opType == "DynamicQuantizeLinear") scale = n->output(1);
  REQUIRE(scale);
  g.addOutput(scale);
  std::map<std::string, RtValue> feeds;
  feeds["x"] = testutil::T(testutil::f32({3, 24}, normals(72, rng)));
  RunProfile prof = compareWithRef(*m, feeds, 1e-5, 1e-6);
  CHECK_FALSE(ranKernel(prof, "cpu.dynqmatmul"));
  CHECK(ranKernel(prof, "cpu.matmulinteger.u8s8"));  // still the int8 GEMM, unfused
}

namespace {

/// x -> MatMul(W) -> Add(bias), or x -> Gemm(W^T, bias) with transB, quantized in the QDQ format
/// with the range [lo, hi] for x.
std::unique_ptr<Model> qdqModel(bool gemm, const std::vector<int64_t>& xDims, int64_t n, float lo, float hi, std::mt19937& rng) {
  auto m = emptyModel(13);
  Graph& g = *m->graph;
  int64_t k = xDims.back();
  Value* x = graphInput(g, "x", DType::Float, xDims);
  auto weight = [&](const std::string& name, std::vector<int64_t> dims) {
    int64_t cnt = 1;
    for (int64_t d : dims) cnt *= d;
    Tensor t = testutil::f32(dims, normals(static_cast<size_t>(cnt), rng));
    t.name = name;
    return g.addInitializer(std::move(t));
  };
  Value* y;
  if (gemm) {
    Node* n1 = g.addNode("Gemm", {x, weight("w", {n, k}), weight("bias", {n})}, {"y"});
    n1->name = "gemm";
    n1->setAttr(Attribute::ofInt("transB", 1));
    y = n1->output(0);
  } else {
    Node* mm = g.addNode("MatMul", {x, weight("w", {k, n})}, {"mm"});
    mm->name = "matmul";
    Node* add = g.addNode("Add", {mm->output(0), weight("bias", {n})}, {"y"});
    add->name = "add";
    y = add->output(0);
  }
  g.addOutput(y);
  std::map<std::string, ValueRange> ranges;
  ranges["x"] = {lo, hi};
  StaticQuantizeReport r = quantizeStaticQdq(*m, ranges);
  REQUIRE(r.nodesQuantized == 1);
  return m;
}

}  // namespace

TEST_CASE("cpu fuses QuantizeLinear -> DequantizeLinear -> MatMul/Gemm with int8 weights and matches the reference",
          "[cpu][int8]") {
  std::mt19937 rng(37);
  struct Case {
    bool gemm;
    std::vector<int64_t> xDims;
    int64_t n;
    float lo, hi;
  };
  // Ranges narrower than the data (saturation) and asymmetric ones (zero points away from 128).
  const Case cases[] = {{false, {4, 16}, 20, -2, 2},  {false, {2, 7, 33}, 17, -1, 3}, {true, {5, 64}, 48, -3, 3},
                        {true, {1, 130}, 65, -0.5f, 4}, {false, {1, 3, 100}, 300, -4, 4}};
  for (const Case& c : cases) {
    auto m = qdqModel(c.gemm, c.xDims, c.n, c.lo, c.hi, rng);
    std::map<std::string, RtValue> feeds;
    int64_t cnt = 1;
    for (int64_t d : c.xDims) cnt *= d;
    std::vector<float> xv = normals(static_cast<size_t>(cnt), rng);
    xv[0] = std::nanf("");  // QuantizeLinear makes it the zero point: a 0 for the MatMul
    feeds["x"] = testutil::T(testutil::f32(c.xDims, xv));
    INFO((c.gemm ? "Gemm" : "MatMul") << " K " << c.xDims.back() << " N " << c.n);
    // Exact integer sums vs the float MatMul of the dequantized values: float rounding apart.
    RunProfile prof = compareWithRef(*m, feeds, 1e-4, 1e-4);
    CHECK(ranKernel(prof, "cpu.qdqmatmul.u8s8.fused"));
    // the input's QuantizeLinear, then DQ, DQ of the weight, MatMul (+ Add): one step on its uint8 output
    CHECK(prof.nodes.size() == 2);
  }
}

TEST_CASE("cpu fuses QuantizeLinear -> DequantizeLinear -> Conv with int8 weights and matches the reference", "[cpu][int8]") {
  std::mt19937 rng(41);
  struct Case {
    std::vector<int64_t> x, w;  // [N, C, H, W], [M, C, KH, KW]
    std::vector<int64_t> strides, pads, dilations;
    bool bias;
    bool relu = false;  // Conv -> Relu: the Relu joins the epilogue
    bool clip6 = false;  // Conv -> Clip(0, 6) (ReLU6): joins too
  };
  const Case cases[] = {
      {{1, 3, 9, 9}, {8, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, true, true},  // same padding: taps on the border read the zero point
      {{2, 5, 8, 7}, {17, 5, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, false},  // 1x1, two images, M past a panel
      {{1, 4, 11, 10}, {33, 4, 3, 2}, {2, 2}, {0, 1, 1, 0}, {1, 1}, true},  // strided, asymmetric pads
      {{1, 2, 12, 12}, {6, 2, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, true},   // dilated
      {{2, 16, 20, 20}, {40, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, true, true},  // big enough for two threads
      {{1, 8, 10, 10}, {24, 8, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, true, false, true},  // 1x1 + ReLU6
      {{1, 3, 16, 16}, {16, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true, false, true},  // MobileNet's stem + ReLU6
  };
  for (const Case& c : cases) {
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    Value* x = graphInput(g, "x", DType::Float, c.x);
    int64_t wn = c.w[0] * c.w[1] * c.w[2] * c.w[3];
    Tensor tw = testutil::f32(c.w, normals(static_cast<size_t>(wn), rng));
    tw.name = "w";
    std::vector<Value*> ins = {x, g.addInitializer(std::move(tw))};
    if (c.bias) {
      Tensor tb = testutil::f32({c.w[0]}, normals(static_cast<size_t>(c.w[0]), rng));
      tb.name = "b";
      ins.push_back(g.addInitializer(std::move(tb)));
    }
    Node* conv = g.addNode("Conv", ins, {"y"});
    conv->name = "conv";
    conv->setAttr(Attribute::ofInts("strides", c.strides));
    conv->setAttr(Attribute::ofInts("pads", c.pads));
    conv->setAttr(Attribute::ofInts("dilations", c.dilations));
    Value* y = conv->output(0);
    if (c.relu) {
      Node* relu = g.addNode("Relu", {y}, {"relu"});
      relu->name = "relu";
      y = relu->output(0);
    }
    if (c.clip6) {
      Tensor lo = testutil::f32({}, {0.f}), hi = testutil::f32({}, {0.5f});  // a bound the outputs cross
      lo.name = "lo";
      hi.name = "hi";
      Node* clip = g.addNode("Clip", {y, g.addInitializer(std::move(lo)), g.addInitializer(std::move(hi))}, {"clip"});
      clip->name = "clip";
      y = clip->output(0);
    }
    g.addOutput(y);
    std::map<std::string, ValueRange> ranges;
    ranges["x"] = {-1.5f, 2.5f};  // narrower than the data: saturation both ways
    REQUIRE(quantizeStaticQdq(*m, ranges).nodesQuantized == 1);
    std::map<std::string, RtValue> feeds;
    int64_t xn = c.x[0] * c.x[1] * c.x[2] * c.x[3];
    feeds["x"] = testutil::T(testutil::f32(c.x, normals(static_cast<size_t>(xn), rng)));
    INFO("x " << c.x[1] << "x" << c.x[2] << "x" << c.x[3] << " w " << c.w[0] << "x" << c.w[2] << "x" << c.w[3]);
    RunProfile prof = compareWithRef(*m, feeds, 1e-4, 1e-4);
    CHECK(ranKernel(prof, "cpu.qdqconv.u8s8.fused"));
    CHECK(prof.nodes.size() == 2);  // the input's QuantizeLinear, then one step on its uint8 output
  }
}

TEST_CASE("cpu runs a static QDQ depthwise Conv (+ ReLU6) on the int8 depthwise kernel, no weight DequantizeLinear at run time",
          "[cpu][int8]") {
  // MobileNets quantized --static: a depthwise conv once ran im2col on run-time weights (the
  // DequantizeLinear's output, every run) and its Clip on the reference kernel, ~10x slower than
  // float; then the float depthwise kernel on the dequantized input; now the int8 one.
  std::mt19937 rng(47);
  for (int64_t stride : {1, 2}) {
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    const int64_t c = 24;
    Value* x = graphInput(g, "x", DType::Float, {1, c, 14, 14});
    Tensor tw = testutil::f32({c, 1, 3, 3}, normals(static_cast<size_t>(c * 9), rng));
    tw.name = "w";
    Tensor tb = testutil::f32({c}, normals(static_cast<size_t>(c), rng));
    tb.name = "b";
    Value* w = g.addInitializer(std::move(tw));
    Value* b = g.addInitializer(std::move(tb));
    Node* conv = g.addNode("Conv", {x, w, b}, {"y"});
    conv->name = "dw";
    conv->setAttr(Attribute::ofInt("group", c));
    conv->setAttr(Attribute::ofInts("strides", {stride, stride}));
    conv->setAttr(Attribute::ofInts("pads", {1, 1, 1, 1}));
    Tensor lo = testutil::f32({}, {0.f}), hi = testutil::f32({}, {6.f});
    lo.name = "lo";
    hi.name = "hi";
    Node* clip = g.addNode("Clip", {conv->output(0), g.addInitializer(std::move(lo)), g.addInitializer(std::move(hi))}, {"relu6"});
    clip->name = "relu6";
    g.addOutput(clip->output(0));
    std::map<std::string, ValueRange> ranges;
    ranges["x"] = {-2.f, 3.f};
    REQUIRE(quantizeStaticQdq(*m, ranges).nodesQuantized == 1);
    std::map<std::string, RtValue> feeds;
    feeds["x"] = testutil::T(testutil::f32({1, c, 14, 14}, normals(static_cast<size_t>(c * 196), rng)));
    INFO("stride " << stride);
    RunProfile prof = compareWithRef(*m, feeds, 1e-5, 1e-5);
    CHECK(ranKernel(prof, "cpu.qdqdwconv.u8s8.fused"));
    for (const NodeRun& n : prof.nodes) {
      INFO("node " << n.node << " ran " << n.kernel);
      CHECK_FALSE(n.fallback);
      CHECK(n.kernel.find("im2col") == std::string::npos);
    }
  }
}

TEST_CASE("cpu QuantizeLinear (uint8) and DequantizeLinear (uint8/int8, per tensor and per axis) match the reference",
          "[cpu][int8]") {
  std::mt19937 rng(43);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
    // QuantizeLinear with NaN (-> the zero point), +-inf, ties and saturation both ways.
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    std::vector<float> xv = normals(static_cast<size_t>(n), rng);
    for (auto& v : xv) v *= 3;
    if (n >= 4) xv[0] = std::nanf(""), xv[1] = testutil::kInf, xv[2] = -testutil::kInf, xv[3] = 0.25f;  // 0.25 / 0.5 = 0.5: a tie
    Value* x = graphInput(g, "x", DType::Float, {n});
    std::map<std::string, RtValue> feeds;
    feeds["x"] = testutil::T(testutil::f32({n}, xv));
    Value* s = graphInput(g, "s", DType::Float, {});
    feeds["s"] = testutil::T(testutil::f32({}, {0.5f}));
    Value* z = graphInput(g, "z", DType::UInt8, {});
    feeds["z"] = testutil::T(testutil::tensorOf(DType::UInt8, {}, std::vector<uint8_t>{static_cast<uint8_t>(u8(rng))}));
    Node* q = g.addNode("QuantizeLinear", {x, s, z}, {"q"});
    q->name = "q";
    g.addOutput(q->output(0));
    INFO("QuantizeLinear n " << n);
    RunProfile prof = compareWithRef(*m, feeds, 0, 0);
    CHECK(ranKernel(prof, "cpu.quantizelinear.f32.u8"));
  }
  for (bool isSigned : {false, true})
    for (int mode = 0; mode < 3; ++mode) {  // per tensor, per axis 1, per axis -1 (last)
      auto m = emptyModel(13);
      Graph& g = *m->graph;
      std::vector<int64_t> dims = {2, 5, 7};
      DType dt = isSigned ? DType::Int8 : DType::UInt8;
      std::vector<uint8_t> raw(70);
      for (auto& v : raw) v = static_cast<uint8_t>(isSigned ? s8(rng) : u8(rng));
      std::map<std::string, RtValue> feeds;
      Value* x = graphInput(g, "x", dt, dims);
      feeds["x"] = testutil::T(testutil::tensorOf(dt, dims, raw));
      int64_t channels = mode == 0 ? 1 : mode == 1 ? 5 : 7;
      std::vector<int64_t> pd = mode == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{channels};
      std::vector<float> sv(static_cast<size_t>(channels));
      for (auto& v : sv) v = std::abs(normals(1, rng)[0]) + 0.01f;
      std::vector<uint8_t> zv(static_cast<size_t>(channels));
      for (auto& v : zv) v = static_cast<uint8_t>(isSigned ? s8(rng) : u8(rng));
      Tensor ts = testutil::f32(pd, sv);
      ts.name = "s";
      Tensor tz = testutil::tensorOf(dt, pd, zv);
      tz.name = "z";
      Value* vs = g.addInitializer(std::move(ts));
      Node* d = g.addNode("DequantizeLinear", {x, vs, g.addInitializer(std::move(tz))}, {"y"});
      d->name = "dq";
      if (mode == 2) d->setAttr(Attribute::ofInt("axis", -1));
      g.addOutput(d->output(0));
      INFO("DequantizeLinear " << (isSigned ? "int8" : "uint8") << " mode " << mode);
      RunProfile prof = compareWithRef(*m, feeds, 0, 0);
      CHECK(ranKernel(prof, isSigned ? "cpu.dequantizelinear.s8.f32" : "cpu.dequantizelinear.u8.f32"));
    }
}

TEST_CASE("cpu QLinearMatMul (uint8 x constant int8 -> uint8) matches the reference kernel exactly", "[cpu][int8]") {
  std::mt19937 rng(47);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  struct Case {
    std::vector<int64_t> aDims;
    int64_t n;
    bool perColumn, bZero;
  };
  const Case cases[] = {{{3, 5}, 7, false, false}, {{2, 9, 17}, 33, true, false}, {{1, 64}, 40, true, true}, {{70, 130}, 65, true, false}};
  for (const Case& c : cases) {
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    int64_t k = c.aDims.back(), aCount = 1;
    for (int64_t d : c.aDims) aCount *= d;
    std::vector<uint8_t> a(static_cast<size_t>(aCount));
    for (auto& v : a) v = static_cast<uint8_t>(u8(rng));
    std::map<std::string, RtValue> feeds;
    Value* va = graphInput(g, "a", DType::UInt8, c.aDims);
    feeds["a"] = testutil::T(testutil::tensorOf(DType::UInt8, c.aDims, a));
    auto init = [&](const std::string& name, Tensor t) {
      t.name = name;
      return g.addInitializer(std::move(t));
    };
    // Scales that make the products land across the whole uint8 range (and saturate some).
    float sa = 0.02f, sy = 0.05f * static_cast<float>(std::sqrt(static_cast<double>(k)));
    std::vector<int8_t> b(static_cast<size_t>(k * c.n));
    for (auto& v : b) v = static_cast<int8_t>(s8(rng));
    int64_t nScale = c.perColumn ? c.n : 1;
    std::vector<float> bs(static_cast<size_t>(nScale));
    for (auto& v : bs) v = 0.01f + 0.01f * static_cast<float>(u8(rng)) / 255.0f;
    std::vector<int8_t> bz(static_cast<size_t>(nScale), 0);
    if (c.bZero)
      for (auto& v : bz) v = static_cast<int8_t>(s8(rng) / 8);
    std::vector<int64_t> sd = c.perColumn ? std::vector<int64_t>{c.n} : std::vector<int64_t>{};
    std::vector<Value*> ins = {va,
                               init("sa", testutil::f32({}, {sa})),
                               init("za", testutil::tensorOf(DType::UInt8, {}, std::vector<uint8_t>{static_cast<uint8_t>(u8(rng))})),
                               init("b", testutil::tensorOf(DType::Int8, {k, c.n}, b)),
                               init("sb", testutil::f32(sd, bs)),
                               init("zb", testutil::tensorOf(DType::Int8, sd, bz)),
                               init("sy", testutil::f32({}, {sy})),
                               init("zy", testutil::tensorOf(DType::UInt8, {}, std::vector<uint8_t>{128}))};
    Node* q = g.addNode("QLinearMatMul", ins, {"y"});
    q->name = "qlm";
    g.addOutput(q->output(0));
    INFO("A rank " << c.aDims.size() << " K " << k << " N " << c.n << " per column " << c.perColumn);
    RunProfile prof = compareWithRef(*m, feeds, 0, 0);
    CHECK(ranKernel(prof, "cpu.qlinearmatmul.u8s8"));
  }
}

TEST_CASE("cpu QLinearConv (from quantize --format qoperator) matches the reference kernel exactly", "[cpu][int8]") {
  std::mt19937 rng(53);
  struct Case {
    std::vector<int64_t> x, w, strides, pads;
    bool bias;
  };
  const Case cases[] = {{{1, 3, 9, 9}, {8, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, true},
                        {{2, 5, 8, 7}, {17, 5, 1, 1}, {1, 1}, {0, 0, 0, 0}, false},
                        {{1, 4, 11, 10}, {33, 4, 3, 2}, {2, 2}, {0, 1, 1, 0}, true},
                        {{1, 16, 20, 20}, {40, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, true}};
  for (const Case& c : cases) {
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    Value* x = graphInput(g, "x", DType::Float, c.x);
    int64_t wn = c.w[0] * c.w[1] * c.w[2] * c.w[3];
    Tensor tw = testutil::f32(c.w, normals(static_cast<size_t>(wn), rng));
    tw.name = "w";
    std::vector<Value*> ins = {x, g.addInitializer(std::move(tw))};
    if (c.bias) {
      Tensor tb = testutil::f32({c.w[0]}, normals(static_cast<size_t>(c.w[0]), rng));
      tb.name = "b";
      ins.push_back(g.addInitializer(std::move(tb)));
    }
    Node* conv = g.addNode("Conv", ins, {"y"});
    conv->name = "conv";
    conv->setAttr(Attribute::ofInts("strides", c.strides));
    conv->setAttr(Attribute::ofInts("pads", c.pads));
    g.addOutput(conv->output(0));
    std::map<std::string, ValueRange> ranges;
    ranges["x"] = {-1.5f, 2.5f};
    ranges["y"] = {-6.0f, 5.0f};  // narrower than the outputs: requantization saturates both ways
    REQUIRE(quantizeStaticQdq(*m, ranges).nodesQuantized == 1);
    REQUIRE(convertQdqToQOperator(*m, ranges).nodesConverted == 1);
    std::map<std::string, RtValue> feeds;
    int64_t xn = c.x[0] * c.x[1] * c.x[2] * c.x[3];
    feeds["x"] = testutil::T(testutil::f32(c.x, normals(static_cast<size_t>(xn), rng)));
    INFO("x " << c.x[1] << "x" << c.x[2] << "x" << c.x[3] << " w " << c.w[0] << "x" << c.w[2] << "x" << c.w[3]);
    RunProfile prof = compareWithRef(*m, feeds, 0, 0);
    CHECK(ranKernel(prof, "cpu.qlinearconv.u8s8"));
    CHECK(ranKernel(prof, "cpu.quantizelinear.f32.u8"));
    CHECK(ranKernel(prof, "cpu.dequantizelinear.u8.f32"));
  }
}

TEST_CASE("cpu folds weight-only DequantizeLinear at prepare: MatMul+bias as Gemm after -O3 and an int4 embedding Gather, no fallback",
          "[cpu][int8]") {
  // The -O3 preset turns MatMul + Add into Gemm; a Gather reads an int4 table. Both weights
  // dequantized once at prepare: no DequantizeLinear runs (it ran on the reference kernel on
  // every run before, 7.9 s a run on an int4 BERT-base).
  std::mt19937 rng(61);
  auto m = emptyModel(21);
  Graph& g = *m->graph;
  const int64_t k = 64, n = 48, vocab = 40;
  Value* ids = graphInput(g, "ids", DType::Int64, {5});
  Tensor tt = testutil::f32({vocab, k}, normals(static_cast<size_t>(vocab * k), rng));
  tt.name = "table";
  Value* table = g.addInitializer(std::move(tt));
  Tensor tw = testutil::f32({k, n}, normals(static_cast<size_t>(k * n), rng));
  tw.name = "w";
  Value* w = g.addInitializer(std::move(tw));
  Tensor tb = testutil::f32({n}, normals(static_cast<size_t>(n), rng));
  tb.name = "b";
  Value* b = g.addInitializer(std::move(tb));
  Node* ga = g.addNode("Gather", {table, ids}, {"e"});
  ga->name = "gather";
  Node* mm = g.addNode("MatMul", {ga->output(0), w}, {"h"});
  mm->name = "mm";
  Node* add = g.addNode("Add", {mm->output(0), b}, {"y"});
  add->name = "add";
  g.addOutput(add->output(0));
  Int4QuantizeOptions o;
  o.blockSize = 16;
  o.opTypes = {"MatMul", "Gather"};
  REQUIRE(quantizeInt4(*m, o).nodesQuantized == 2);
  std::map<std::string, RtValue> feeds;
  feeds["ids"] = testutil::T(testutil::i64({5}, {0, 39, 7, 7, 21}));
  auto want = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  for (int level : {0, 3}) {
    PrepareOptions po;
    po.graphOptLevel = level;
    RunProfile prof;
    auto got = makeExecutor("cpu")->prepare(*m, po)->runProfiled(feeds, prof);
    REQUIRE(got.size() == 1);
    CompareResult r = compareValues(got[0], want[0], 1e-5, 1e-5);
    INFO("-O" << level << ": " << r.message);
    CHECK(r.ok);
    for (const NodeRun& nr : prof.nodes) {
      INFO(nr.node << " ran " << nr.kernel);
      CHECK(nr.opType != "DequantizeLinear");
      CHECK_FALSE(nr.fallback);
    }
    // -O3's Gemm (MatMul + bias) reads the int4 weight as MatMulNBits + Add, the Add fused as its bias
    CHECK(ranKernel(prof, "cpu.ms.matmulnbits.f32.int4"));
  }
}

TEST_CASE("cpu runs MatMul/Gemm on a DequantizeLinear'd constant weight: int4 blocked kept packed, int8 per axis as a prepared float weight",
          "[cpu][int8]") {
  std::mt19937 rng(59);
  // int4 symmetric block 16 (no zero point), uint4 block 32 with K not a multiple, int8 per
  // axis, and Gemm with transB and C over uint4 (K over several GEMM K blocks, 2 row blocks)
  for (int variant = 0; variant < 4; ++variant) {
    auto m = emptyModel(21);
    Graph& g = *m->graph;
    const bool gemm = variant == 3;
    const int64_t k = variant == 1 ? 70 : gemm ? 600 : 64, n = gemm ? 40 : variant == 1 ? 25 : 24, rows = gemm ? 150 : 3;
    Value* x = graphInput(g, "x", DType::Float, {rows, k});
    Tensor tw = gemm ? testutil::f32({n, k}, normals(static_cast<size_t>(k * n), rng))
                     : testutil::f32({k, n}, normals(static_cast<size_t>(k * n), rng));
    tw.name = "w";
    Value* w = g.addInitializer(std::move(tw));
    Node* mm;
    if (gemm) {
      Tensor tc = testutil::f32({n}, normals(static_cast<size_t>(n), rng));
      tc.name = "c";
      mm = g.addNode("Gemm", {x, w, g.addInitializer(std::move(tc))}, {"y"});
      mm->setAttr(Attribute::ofInt("transB", 1));
    } else {
      mm = g.addNode("MatMul", {x, w}, {"y"});
    }
    mm->name = "mm";
    g.addOutput(mm->output(0));
    if (variant != 2) {
      Int4QuantizeOptions o;
      o.blockSize = variant == 0 ? 16 : variant == 1 ? 32 : 64;
      o.symmetric = variant == 0;
      REQUIRE(quantizeInt4(*m, o).nodesQuantized == 1);
    } else {  // int8 weights, per column, behind a DequantizeLinear; float activations
      std::vector<int8_t> q(static_cast<size_t>(k * n));
      std::uniform_int_distribution<int> s8(-128, 127);
      for (auto& v : q) v = static_cast<int8_t>(s8(rng));
      Tensor tq = testutil::tensorOf(DType::Int8, {k, n}, q);
      tq.name = "wq";
      std::vector<float> sc(static_cast<size_t>(n));
      for (auto& v : sc) v = 0.01f + 0.001f * static_cast<float>(s8(rng) + 128);
      Tensor ts = testutil::f32({n}, sc);
      ts.name = "ws";
      std::vector<int8_t> zp(static_cast<size_t>(n));
      for (auto& v : zp) v = static_cast<int8_t>(s8(rng) / 16);
      Tensor tz = testutil::tensorOf(DType::Int8, {n}, zp);
      tz.name = "wz";
      Value* vq = g.addInitializer(std::move(tq));
      Value* vs = g.addInitializer(std::move(ts));
      Node* dq = g.addNode("DequantizeLinear", {vq, vs, g.addInitializer(std::move(tz))}, {"wd"}, "", mm);
      dq->name = "dq";
      dq->setAttr(Attribute::ofInt("axis", 1));
      mm->setInput(1, dq->output(0));
      g.removeInitializer(w);
    }
    std::map<std::string, RtValue> feeds;
    feeds["x"] = testutil::T(testutil::f32({rows, k}, normals(static_cast<size_t>(rows * k), rng)));
    INFO("variant " << variant);
    RunProfile prof = compareWithRef(*m, feeds, 1e-5, gemm ? 1e-4 : 1e-5);
    // int4: the codes stay packed (MatMulNBits' kernel, PackedB4); int8: the weight folded to float at prepare
    CHECK(ranKernel(prof, variant == 2 ? "cpu.matmul.f32" : "cpu.ms.matmulnbits.f32.int4"));
    CHECK(prof.nodes.size() == 1);  // no DequantizeLinear at run time; Gemm's C fused as the bias
  }
}

namespace {

/// DequantizeLinear(xq uint8 graph input) -> Conv (int8 weights behind a DequantizeLinear, per
/// output channel) [-> Clip] [-> QuantizeLinear]: what a QDQ model's layer is once the previous
/// layer's QuantizeLinear wrote xq.
struct U8ConvCase {
  std::vector<int64_t> x, w;  // [N, C, H, W], [M, C/group, KH, KW]
  int64_t group = 1;
  std::vector<int64_t> strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
  bool bias = true, int32Bias = false, clip = false, quantizeOut = false, wZero = false;
  bool residual = false;  // Conv -> Add(float input "r" of the output's shape) [-> Clip] [-> Q]
  bool sideQuant = false;  // the float output is a graph output and a QuantizeLinear's input (two outputs)
};

std::unique_ptr<Model> u8ConvModel(const U8ConvCase& c, std::mt19937& rng) {
  auto m = emptyModel(13);
  Graph& g = *m->graph;
  Value* xq = graphInput(g, "xq", DType::UInt8, c.x);
  auto init = [&](Tensor t, const std::string& name) {
    t.name = name;
    return g.addInitializer(std::move(t));
  };
  const int64_t mOut = c.w[0], wn = c.w[0] * c.w[1] * c.w[2] * c.w[3];
  std::uniform_int_distribution<int> s8(-128, 127), small(-3, 3);
  std::uniform_real_distribution<float> sc(0.005f, 0.05f);
  Node* dx = g.addNode("DequantizeLinear", {xq, init(testutil::f32({}, {0.04f}), "xs"),
                                            init(testutil::tensorOf<uint8_t>(DType::UInt8, {}, {117}), "xz")}, {"x"});
  dx->name = "dqx";
  std::vector<int8_t> wv(static_cast<size_t>(wn));
  for (auto& v : wv) v = static_cast<int8_t>(s8(rng));
  std::vector<float> ws(static_cast<size_t>(mOut));
  for (auto& v : ws) v = sc(rng);
  std::vector<Value*> dwIns = {init(testutil::tensorOf<int8_t>(DType::Int8, c.w, wv), "wq"), init(testutil::f32({mOut}, ws), "ws")};
  if (c.wZero) {
    std::vector<int8_t> z(static_cast<size_t>(mOut));
    for (auto& v : z) v = static_cast<int8_t>(small(rng));
    dwIns.push_back(init(testutil::tensorOf<int8_t>(DType::Int8, {mOut}, z), "wz"));
  }
  Node* dw = g.addNode("DequantizeLinear", dwIns, {"w"});
  dw->name = "dqw";
  dw->setAttr(Attribute::ofInt("axis", 0));
  std::vector<Value*> ins = {dx->output(0), dw->output(0)};
  if (c.bias && c.int32Bias) {  // the QDQ form's bias: int32 with scale x scale * w scale
    std::vector<int32_t> bq(static_cast<size_t>(mOut));
    std::vector<float> bs(static_cast<size_t>(mOut));
    std::uniform_int_distribution<int32_t> bd(-3000, 3000);
    for (size_t i = 0; i < bq.size(); ++i) bq[i] = bd(rng), bs[i] = 0.04f * ws[i];
    Node* db = g.addNode("DequantizeLinear", {init(testutil::i32({mOut}, bq), "bq"), init(testutil::f32({mOut}, bs), "bs")}, {"b"});
    db->name = "dqb";
    db->setAttr(Attribute::ofInt("axis", 0));
    ins.push_back(db->output(0));
  } else if (c.bias) {
    ins.push_back(init(testutil::f32({mOut}, normals(static_cast<size_t>(mOut), rng)), "b"));
  }
  Node* conv = g.addNode("Conv", ins, {"y"});
  conv->name = "conv";
  conv->setAttr(Attribute::ofInt("group", c.group));
  conv->setAttr(Attribute::ofInts("strides", c.strides));
  conv->setAttr(Attribute::ofInts("pads", c.pads));
  conv->setAttr(Attribute::ofInts("dilations", c.dilations));
  Value* y = conv->output(0);
  if (c.residual) {
    std::vector<int64_t> yd = {c.x[0], mOut, 0, 0};
    for (int i = 0; i < 2; ++i)
      yd[static_cast<size_t>(2 + i)] =
          (c.x[static_cast<size_t>(2 + i)] + c.pads[static_cast<size_t>(i)] + c.pads[static_cast<size_t>(2 + i)] -
           c.dilations[static_cast<size_t>(i)] * (c.w[static_cast<size_t>(2 + i)] - 1) - 1) / c.strides[static_cast<size_t>(i)] + 1;
    Node* add = g.addNode("Add", {graphInput(g, "r", DType::Float, yd), y}, {"sum"});
    add->name = "residual";
    y = add->output(0);
  }
  if (c.clip) {
    Node* clip = g.addNode("Clip", {y, init(testutil::f32({}, {0.f}), "lo"), init(testutil::f32({}, {6.f}), "hi")}, {"relu6"});
    clip->name = "relu6";
    y = clip->output(0);
  }
  if (c.quantizeOut || c.sideQuant) {
    Node* q = g.addNode("QuantizeLinear", {y, init(testutil::f32({}, {0.03f}), "ys"),
                                           init(testutil::tensorOf<uint8_t>(DType::UInt8, {}, {100}), "yz")}, {"yq"});
    q->name = "q";
    if (c.sideQuant) g.addOutput(y);
    y = q->output(0);
  }
  g.addOutput(y);
  return m;
}

/// Runs a u8ConvModel on ref and cpu (1 and 2 threads): a float output within rounding of the
/// exact integer sums, a QuantizeLinear'd one within one step (equal but at rounding ties, which
/// random data almost never hits: at most 1% of the elements may differ).
RunProfile checkU8Conv(const U8ConvCase& c, std::mt19937& rng) {
  auto m = u8ConvModel(c, rng);
  std::uniform_int_distribution<int> u8(0, 255);
  int64_t xn = 1;
  for (int64_t d : c.x) xn *= d;
  std::vector<uint8_t> xv(static_cast<size_t>(xn));
  for (auto& v : xv) v = static_cast<uint8_t>(u8(rng));
  std::map<std::string, RtValue> feeds;
  feeds["xq"] = testutil::T(testutil::tensorOf<uint8_t>(DType::UInt8, c.x, xv));
  for (const auto& e : m->graph->inputs())
    if (e.value->name() == "r") {
      std::vector<int64_t> rd;
      for (const Dim& d : e.value->type().shape.dims) rd.push_back(d.value);
      int64_t rn = 1;
      for (int64_t d : rd) rn *= d;
      auto rv = normals(static_cast<size_t>(rn), rng);
      for (auto& v : rv) v *= 3;
      feeds["r"] = testutil::T(testutil::f32(rd, rv));
    }
  if (!c.quantizeOut && !c.sideQuant) return compareWithRef(*m, feeds, 1e-4, 1e-4);
  auto wants = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  const size_t q = wants.size() - 1;  // the uint8 output is the last
  auto want = testutil::valuesOf(wants[q]);
  RunProfile prof;
  for (int threads : {1, 2}) {
    PrepareOptions po;
    po.graphOptLevel = 0;
    po.threads = threads;
    auto outs = makeExecutor("cpu")->prepare(*m, po)->runProfiled(feeds, prof);
    REQUIRE(outs.size() == wants.size());
    if (c.sideQuant) {  // the float output besides
      CompareResult r = compareValues(outs[0], wants[0], 1e-4, 1e-4);
      INFO("float output, threads " << threads << ": " << r.message);
      CHECK(r.ok);
    }
    auto got = testutil::valuesOf(outs[q]);
    REQUIRE(got.size() == want.size());
    size_t off = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]));
      off += got[i] != want[i];
    }
    INFO("threads " << threads << ": " << off << " of " << got.size() << " differ, by at most " << worst);
    CHECK(worst <= 1);
    CHECK(off <= got.size() / 100 + 1);
    // saturation both ways happens (the data is not all in one bucket)
    CHECK(std::count(got.begin(), got.end(), 0.0) + std::count(got.begin(), got.end(), 255.0) < static_cast<long>(got.size()));
  }
  return prof;
}

}  // namespace

TEST_CASE("cpu int8 depthwise Conv on a uint8 activation matches the reference (random shapes, strides, pads, dilations)",
          "[cpu][int8]") {
  std::mt19937 rng(59);
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  const int64_t sizes[] = {1, 2, 5, 7, 14, 17, 33};
  const int64_t chans[] = {1, 3, 16, 17, 40, 24, 96};
  const int64_t kernels[][2] = {{3, 3}, {5, 5}, {1, 1}, {3, 2}, {7, 7}};
  for (int it = 0; it < 60; ++it) {
    U8ConvCase c;
    const int64_t ch = chans[pick(rng) % 7], h = sizes[pick(rng) % 7], w = sizes[pick(rng) % 7];
    const auto& k = kernels[pick(rng) % 5];
    const int64_t s = 1 + pick(rng) % 3, d = 1 + (pick(rng) % 4 == 0);
    c.pads = {pick(rng) % k[0], pick(rng) % k[1], pick(rng) % k[0], pick(rng) % k[1]};
    if (h + c.pads[0] + c.pads[2] < d * (k[0] - 1) + 1 || w + c.pads[1] + c.pads[3] < d * (k[1] - 1) + 1) continue;  // no output
    c.x = {1 + (it % 7 == 0), ch, h, w};
    c.w = {ch, 1, k[0], k[1]};
    c.group = ch;
    c.strides = {s, 1 + pick(rng) % 2};
    c.dilations = {d, d};
    c.bias = it % 5 != 0;
    c.int32Bias = it % 2 == 0;
    c.clip = it % 3 == 0;
    c.quantizeOut = it % 2 == 1;
    c.wZero = it % 4 == 3;
    INFO("case " << it << ": C " << ch << " " << h << "x" << w << " k " << k[0] << "x" << k[1] << " strides " << c.strides[0] << ","
                 << c.strides[1] << " dilation " << d << " pads " << c.pads[0] << "," << c.pads[1] << "," << c.pads[2] << ","
                 << c.pads[3] << (c.clip ? " clip" : "") << (c.quantizeOut ? " -> uint8" : ""));
    RunProfile prof = checkU8Conv(c, rng);
    // (one channel: group 1, the other int8 conv)
    const std::string kernel = ch == 1 ? "cpu.qdqconv.u8s8.fused" : "cpu.qdqdwconv.u8s8.fused";
    CHECK(ranKernel(prof, c.quantizeOut ? kernel + ".u8out" : kernel));
    CHECK(prof.nodes.size() == 1);  // DQ, DQ of the weight (and bias), Conv [, Clip] [, Q]: one step
  }
}

TEST_CASE("cpu QDQ Conv writes the following QuantizeLinear's uint8 output directly (within one step of the reference)",
          "[cpu][int8]") {
  std::mt19937 rng(61);
  struct Case {
    std::vector<int64_t> x, w, strides, pads;
    bool clip, wZero;
  };
  const Case cases[] = {
      {{1, 8, 10, 10}, {24, 8, 1, 1}, {1, 1}, {0, 0, 0, 0}, true, false},  // 1x1, pixels past a panel of 32
      {{1, 3, 17, 16}, {16, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, true, false},  // a stem, ReLU6
      {{2, 16, 9, 9}, {33, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, false, false},  // M past a tile of 8, two images
      {{1, 5, 8, 7}, {17, 5, 1, 1}, {1, 1}, {0, 0, 0, 0}, false, true},  // weight zero points: the GEMM path's epilogue
      {{1, 32, 16, 16}, {64, 32, 1, 1}, {1, 1}, {0, 0, 0, 0}, true, false},  // big enough for two threads
      {{1, 3, 5, 70}, {8, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, true, false},  // rows past 64 columns (im2col in two vectors)
      {{1, 2, 6, 130}, {5, 2, 3, 5}, {1, 1}, {0, 2, 2, 1}, false, false},  // 130 columns, asymmetric pads
      {{1, 3, 8, 151}, {9, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, true, false},  // stride 2 over 64 output columns
      {{1, 2, 9, 40}, {6, 2, 3, 3}, {2, 1}, {1, 0, 0, 2}, true, false},   // row stride 2, column stride 1
      {{1, 3, 20, 21}, {8, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}, true, false},   // ResNet's stem
  };
  for (const Case& k : cases) {  // the float output also read by a QuantizeLinear: one step writes both
    U8ConvCase c;
    c.x = k.x, c.w = k.w, c.strides = k.strides, c.pads = k.pads, c.clip = k.clip, c.wZero = k.wZero;
    c.int32Bias = true;
    c.residual = k.clip;
    c.sideQuant = true;
    INFO("float + uint8 outputs: x " << k.x[1] << "x" << k.x[2] << "x" << k.x[3] << " w " << k.w[0] << "x" << k.w[2] << "x" << k.w[3]);
    RunProfile prof = checkU8Conv(c, rng);
    CHECK(ranKernel(prof, c.residual ? "cpu.qdqconv.u8s8.fused+residual+u8copy" : "cpu.qdqconv.u8s8.fused+u8copy"));
    CHECK(prof.nodes.size() == 1);
  }
  for (bool quantizeOut : {false, true})
    for (const Case& k : cases) {  // + a residual Add before the Clip (ResNet), joining the step
      U8ConvCase c;
      c.x = k.x, c.w = k.w, c.strides = k.strides, c.pads = k.pads, c.clip = k.clip, c.wZero = k.wZero;
      c.int32Bias = true;
      c.quantizeOut = quantizeOut;
      c.residual = true;
      INFO("residual: x " << k.x[1] << "x" << k.x[2] << "x" << k.x[3] << " w " << k.w[0] << "x" << k.w[2] << "x" << k.w[3]
                          << (quantizeOut ? " -> uint8" : ""));
      RunProfile prof = checkU8Conv(c, rng);
      CHECK(ranKernel(prof, quantizeOut ? "cpu.qdqconv.u8s8.fused+residual.u8out" : "cpu.qdqconv.u8s8.fused+residual"));
      CHECK(prof.nodes.size() == 1);
    }
  for (const Case& k : cases) {
    U8ConvCase c;
    c.x = k.x, c.w = k.w, c.strides = k.strides, c.pads = k.pads, c.clip = k.clip, c.wZero = k.wZero;
    c.int32Bias = true;
    c.quantizeOut = true;
    INFO("x " << k.x[1] << "x" << k.x[2] << "x" << k.x[3] << " w " << k.w[0] << "x" << k.w[2] << "x" << k.w[3]);
    RunProfile prof = checkU8Conv(c, rng);
    CHECK(ranKernel(prof, "cpu.qdqconv.u8s8.fused.u8out"));
    CHECK(prof.nodes.size() == 1);
  }
}

TEST_CASE("cpu keeps a static QDQ MobileNet block in uint8 between its layers and matches the reference", "[cpu][int8]") {
  // x -> Conv 1x1 -> ReLU6 -> depthwise 3x3 (stride s) -> ReLU6 -> Conv 1x1 -> y, quantized
  // --static: every QuantizeLinear after a Conv/Clip goes into the step that computes its input,
  // every step reads the previous one's uint8 output; only the input's QuantizeLinear runs alone.
  std::mt19937 rng(67);
  for (int64_t stride : {1, 2}) {
    auto m = emptyModel(13);
    Graph& g = *m->graph;
    const int64_t c = 8, e = 24, hw = 15;
    Value* x = graphInput(g, "x", DType::Float, {1, c, hw, hw});
    auto init = [&](std::vector<int64_t> dims, const std::string& name, float mul) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      auto v = normals(static_cast<size_t>(n), rng);
      for (auto& f : v) f *= mul;
      Tensor t = testutil::f32(std::move(dims), v);
      t.name = name;
      return g.addInitializer(std::move(t));
    };
    auto scalar = [&](float v, const std::string& name) {
      Tensor t = testutil::f32({}, {v});
      t.name = name;
      return g.addInitializer(std::move(t));
    };
    auto relu6 = [&](Value* v, const std::string& name) {
      Node* clip = g.addNode("Clip", {v, scalar(0.f, name + "_lo"), scalar(6.f, name + "_hi")}, {name});
      clip->name = name;
      return clip->output(0);
    };
    Node* c1 = g.addNode("Conv", {x, init({e, c, 1, 1}, "w1", 0.5f), init({e}, "b1", 0.5f)}, {"c1"});
    c1->name = "expand";
    Value* r1 = relu6(c1->output(0), "r1");
    Node* c2 = g.addNode("Conv", {r1, init({e, 1, 3, 3}, "w2", 0.5f), init({e}, "b2", 0.5f)}, {"c2"});
    c2->name = "dw";
    c2->setAttr(Attribute::ofInt("group", e));
    c2->setAttr(Attribute::ofInts("strides", {stride, stride}));
    c2->setAttr(Attribute::ofInts("pads", {1, 1, 1, 1}));
    Value* r2 = relu6(c2->output(0), "r2");
    Node* c3 = g.addNode("Conv", {r2, init({c, e, 1, 1}, "w3", 0.3f), init({c}, "b3", 0.5f)}, {"y"});
    c3->name = "project";
    g.addOutput(c3->output(0));
    std::map<std::string, ValueRange> ranges;
    ranges["x"] = {-2.5f, 2.5f};
    ranges["r1"] = {0.f, 6.f};
    ranges["r2"] = {0.f, 6.f};
    REQUIRE(quantizeStaticQdq(*m, ranges).nodesQuantized == 3);
    std::map<std::string, RtValue> feeds;
    feeds["x"] = testutil::T(testutil::f32({1, c, hw, hw}, normals(static_cast<size_t>(c * hw * hw), rng)));
    INFO("stride " << stride);
    // A one-step difference of an intermediate (at a rounding tie) moves y by ~ scale x |w|:
    // well inside 0.05 here, which a wrong tap, channel or zero point is not.
    RunProfile prof = compareWithRef(*m, feeds, 0, 0.05);
    CHECK(ranKernel(prof, "cpu.qdqconv.u8s8.fused.u8out"));
    CHECK(ranKernel(prof, "cpu.qdqdwconv.u8s8.fused.u8out"));
    CHECK(ranKernel(prof, "cpu.qdqconv.u8s8.fused"));
    CHECK(prof.nodes.size() == 4);  // the input's QuantizeLinear and three steps
    for (const NodeRun& n : prof.nodes) {
      INFO("node " << n.node << " ran " << n.kernel);
      CHECK_FALSE(n.fallback);
      CHECK(n.kernel.find("dequantize") == std::string::npos);
    }
  }
}

TEST_CASE("cpu QDQ steps read a QuantizeLinear's output that other readers also dequantize (the node then runs)", "[cpu][int8]") {
  // x -> Q -> DQ -> Conv (a fused step reading Q's uint8 output) and the same DQ's float output a
  // graph output, and Q's output also a graph output: Q and DQ must both still run.
  std::mt19937 rng(71);
  auto m = emptyModel(13);
  Graph& g = *m->graph;
  Value* x = graphInput(g, "x", DType::Float, {1, 4, 6, 6});
  auto init = [&](Tensor t, const std::string& name) {
    t.name = name;
    return g.addInitializer(std::move(t));
  };
  Value* xs = init(testutil::f32({}, {0.05f}), "xs");
  Value* xz = init(testutil::tensorOf<uint8_t>(DType::UInt8, {}, {128}), "xz");
  Node* q = g.addNode("QuantizeLinear", {x, xs, xz}, {"xq"});
  Node* dq = g.addNode("DequantizeLinear", {q->output(0), xs, xz}, {"xd"});
  std::vector<int8_t> wv(8 * 4 * 9);
  std::uniform_int_distribution<int> s8(-127, 127);
  for (auto& v : wv) v = static_cast<int8_t>(s8(rng));
  Node* dw = g.addNode("DequantizeLinear", {init(testutil::tensorOf<int8_t>(DType::Int8, {8, 4, 3, 3}, wv), "wq"),
                                            init(testutil::f32({}, {0.01f}), "ws")}, {"w"});
  Node* conv = g.addNode("Conv", {dq->output(0), dw->output(0)}, {"y"});
  conv->setAttr(Attribute::ofInts("pads", {1, 1, 1, 1}));
  g.addOutput(conv->output(0));
  g.addOutput(dq->output(0));
  g.addOutput(q->output(0));
  std::map<std::string, RtValue> feeds;
  feeds["x"] = testutil::T(testutil::f32({1, 4, 6, 6}, normals(144, rng)));
  RunProfile prof = compareWithRef(*m, feeds, 1e-4, 1e-4);
  CHECK(ranKernel(prof, "cpu.qdqconv.u8s8.fused"));
  CHECK(ranKernel(prof, "cpu.quantizelinear.f32.u8"));
  CHECK(ranKernel(prof, "cpu.dequantizelinear.u8.f32"));
}

TEST_CASE("cpu runs quantize --dynamic's int8 embedding lookup as one step, bit for bit the reference's values", "[cpu][int8]") {
  // Mul(Cast<float>(Gather(Tq int8, ids)), Gather(Ts [V, 1, ...], ids)): a 2-D table with H not a
  // multiple of any vector width and int64 ids (negative ones too), a 3-D table with int32 ids
  // and the Mul's operands swapped; and the same chain with the Cast's output also a graph output
  // (not fused: the nodes run, with the same values).
  std::mt19937 rng(71);
  for (int variant = 0; variant < 3; ++variant) {
    auto m = emptyModel(17);
    Graph& g = *m->graph;
    const int64_t vocab = 50, h = variant == 1 ? 3 * 5 : 37;
    const bool i32 = variant == 1;
    Value* ids = graphInput(g, "ids", i32 ? DType::Int32 : DType::Int64, {2, 7});
    std::vector<int64_t> dims = variant == 1 ? std::vector<int64_t>{vocab, 3, 5} : std::vector<int64_t>{vocab, h};
    std::vector<float> tf = normals(static_cast<size_t>(vocab * h), rng);
    for (int64_t j = 0; j < h; ++j) tf[static_cast<size_t>(3 * h + j)] *= 100;  // a row of outliers: its own scale
    Tensor tt = testutil::f32(dims, tf);
    tt.name = "table";
    Value* table = g.addInitializer(std::move(tt));
    Node* ga = g.addNode("Gather", {table, ids}, {"e"});
    ga->name = "lookup";
    g.addOutput(ga->output(0));
    DynamicQuantizeOptions o;
    DynamicQuantizeReport rep = quantizeDynamic(*m, o);
    REQUIRE(rep.nodesQuantized == 1);
    REQUIRE(!g.findLocal("table"));
    Node* mul = g.findLocal("e")->producer();
    REQUIRE(mul->opType == "Mul");
    if (variant == 1) {  // Mul(scales, rows)
      Value* a = mul->input(0);
      mul->setInput(0, mul->input(1));
      mul->setInput(1, a);
    }
    if (variant == 2) g.addOutput(g.findLocal("e_float"));
    std::vector<int64_t> idv = {0, 3, 49, -1, -50, 3, 17, 8, 8, 0, 25, 3, 48, 1};
    std::map<std::string, RtValue> feeds;
    if (i32)
      feeds["ids"] = testutil::T(testutil::i32({2, 7}, std::vector<int32_t>(idv.begin(), idv.end())));
    else
      feeds["ids"] = testutil::T(testutil::i64({2, 7}, idv));
    INFO("variant " << variant);
    RunProfile prof = compareWithRef(*m, feeds, 0, 0);
    CHECK(ranKernel(prof, "cpu.gather.s8.dequantize.fused") == (variant != 2));
    for (const NodeRun& nr : prof.nodes) {
      INFO(nr.node << " ran " << nr.kernel);
      CHECK_FALSE(nr.fallback);
    }
    // within half a step of fp32 per row: |T - Tq * Ts| <= Ts / 2
    auto got = makeExecutor("cpu")->prepare(*m, {})->run(feeds);
    auto e = testutil::values<float>(got[0]);
    const auto* scales = reinterpret_cast<const float*>(g.findLocal("table_scale")->initializer()->raw.data());
    for (size_t i = 0; i < idv.size(); ++i) {
      const int64_t r = idv[i] < 0 ? idv[i] + vocab : idv[i];
      for (int64_t j = 0; j < h; ++j)
        CHECK(std::fabs(e[i * static_cast<size_t>(h) + static_cast<size_t>(j)] - tf[static_cast<size_t>(r * h + j)]) <=
              scales[r] * 0.5f * 1.0001f);
    }
    // an id out of range fails as the reference's Gather does
    std::map<std::string, RtValue> bad;
    if (i32)
      bad["ids"] = testutil::T(testutil::i32({2, 7}, std::vector<int32_t>(14, 50)));
    else
      bad["ids"] = testutil::T(testutil::i64({2, 7}, std::vector<int64_t>(14, -51)));
    CHECK_THROWS_AS(makeExecutor("cpu")->prepare(*m, {})->run(bad), Error);
  }
}

TEST_CASE("cpu folds an int8 lookup with constant ids once at prepare (position embeddings), the reference's values", "[cpu][int8]") {
  // -O3 folds both Gathers of constant ids and keeps the Cast of int8 weights: the plan computes
  // Mul(Cast<float>(rows int8), row scales) once, so no Cast or Mul runs, as for the float model.
  std::mt19937 rng(73);
  auto m = emptyModel(17);
  Graph& g = *m->graph;
  const int64_t positions = 40, h = 24;
  Value* x = graphInput(g, "x", DType::Float, {1, 6, h});
  Tensor tt = testutil::f32({positions, h}, normals(static_cast<size_t>(positions * h), rng));
  tt.name = "pos";
  Value* table = g.addInitializer(std::move(tt));
  Tensor ti = testutil::i64({1, 6}, {0, 1, 2, 3, 4, 39});
  ti.name = "pos_ids";
  Value* ids = g.addInitializer(std::move(ti));
  Node* ga = g.addNode("Gather", {table, ids}, {"p"});
  ga->name = "pos_lookup";
  Node* add = g.addNode("Add", {x, ga->output(0)}, {"y"});
  add->name = "add";
  g.addOutput(add->output(0));
  REQUIRE(quantizeDynamic(*m).nodesQuantized == 1);
  std::map<std::string, RtValue> feeds;
  feeds["x"] = testutil::T(testutil::f32({1, 6, h}, normals(static_cast<size_t>(6 * h), rng)));
  auto want = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  for (int level : {0, 3}) {
    PrepareOptions po;
    po.graphOptLevel = level;
    RunProfile prof;
    auto got = makeExecutor("cpu")->prepare(*m, po)->runProfiled(feeds, prof);
    REQUIRE(got.size() == 1);
    CompareResult r = compareValues(got[0], want[0], 0, 0);
    INFO("-O" << level << ": " << r.message);
    CHECK(r.ok);
    for (const NodeRun& nr : prof.nodes) {
      INFO(nr.node << " ran " << nr.kernel);
      CHECK_FALSE(nr.fallback);
      if (level == 3) CHECK((nr.opType != "Cast" && nr.opType != "Gather" && nr.kernel.rfind("cpu.mul", 0) != 0));
    }
    CHECK(ranKernel(prof, "cpu.gather.s8.dequantize.fused") == (level == 0));
  }
}
