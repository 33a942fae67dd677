// test_cpu_control_flow.cpp: the cpu executor's NonMaxSuppression kernel (an output whose
// length is known only when it runs) against the reference kernel on random boxes, and If/Loop/
// Scan bodies run as cpu sub-plans against the reference executor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "exec/executor.h"
#include "exec/value_ops.h"
#include "formats/onnx_text.h"
#include "lib/ir.h"
#include "ref_test_util.h"

using namespace onnxtool;
using testutil::f32;
using testutil::i64;

namespace {

struct NmsCase {
  int64_t batches = 1, classes = 1, boxes = 0;
  bool center = false;
  std::optional<int64_t> maxOut;   ///< omitted input when unset
  std::optional<float> iou, score;
  bool scalarsAsInputs = false;    ///< graph inputs rather than initializers
};

/// A one-node NonMaxSuppression model (opset 11) and its feeds.
std::unique_ptr<Model> nmsModel(const NmsCase& c, const Tensor& boxes, const Tensor& scores, std::map<std::string, RtValue>& feeds) {
  auto m = std::make_unique<Model>();
  m->irVersion = 8;
  m->opsetImports = {{"", 11, {}}};
  m->graph = std::make_unique<Graph>();
  Graph* g = m->graph.get();
  auto input = [&](const std::string& name, const Tensor& t, bool constant) -> Value* {
    if (constant) {
      Tensor x = t;
      x.name = name;
      return g->addInitializer(std::move(x));
    }
    Value* v = g->createValue(name);
    TypeInfo ti;
    ti.kind = TypeInfo::Kind::Tensor;
    ti.elemType = t.dataType;
    ti.shape.hasRank = true;
    for (int64_t d : t.dims) ti.shape.dims.push_back(Dim::ofValue(d));
    v->setType(ti);
    g->addInput(v);
    feeds[name] = RtValue::ofTensor(t);
    return v;
  };
  std::vector<Value*> ins{input("boxes", boxes, false), input("scores", scores, false)};
  ins.push_back(c.maxOut ? input("max_out", i64({1}, {*c.maxOut}), !c.scalarsAsInputs) : nullptr);
  ins.push_back(c.iou ? input("iou", f32({1}, {*c.iou}), !c.scalarsAsInputs) : nullptr);
  ins.push_back(c.score ? input("score", f32({}, {*c.score}), !c.scalarsAsInputs) : nullptr);
  while (!ins.empty() && !ins.back()) ins.pop_back();
  Node* n = g->addNode("NonMaxSuppression", ins, {"selected"});
  n->name = "nms";
  if (c.center) n->setAttr(Attribute::ofInt("center_point_box", 1));
  g->addOutput(n->output(0));
  return m;
}

/// Boxes in clusters (so that many overlap), corners in either order, or centre + size; scores
/// from a small set (many ties).
void randomBoxes(const NmsCase& c, std::mt19937& rng, Tensor& boxes, Tensor& scores) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> b(static_cast<size_t>(c.batches * c.boxes * 4)), s(static_cast<size_t>(c.batches * c.classes * c.boxes));
  for (size_t i = 0; i < b.size(); i += 4) {
    float cx = std::floor(u(rng) * 4) * 0.25f + u(rng) * 0.05f, cy = std::floor(u(rng) * 4) * 0.25f + u(rng) * 0.05f;
    float w = 0.05f + u(rng) * 0.2f, h = 0.05f + u(rng) * 0.2f;
    if (c.center) {
      b[i] = cx, b[i + 1] = cy, b[i + 2] = w, b[i + 3] = h;
    } else {
      b[i] = cy - h / 2, b[i + 1] = cx - w / 2, b[i + 2] = cy + h / 2, b[i + 3] = cx + w / 2;
      if (u(rng) < 0.3f) std::swap(b[i], b[i + 2]);  // flipped corners
      if (u(rng) < 0.3f) std::swap(b[i + 1], b[i + 3]);
      if (u(rng) < 0.02f) b[i + 2] = b[i];          // empty box
    }
  }
  for (auto& x : s) x = std::floor(u(rng) * 16) / 16;
  boxes = f32({c.batches, c.boxes, 4}, b);
  scores = f32({c.batches, c.classes, c.boxes}, s);
}

/// Runs the model on ref and on cpu (1 and 3 threads): identical selections, and the fast
/// kernel ran.
void checkNms(const Model& m, const std::map<std::string, RtValue>& feeds) {
  auto want = makeExecutor("ref")->prepare(m, {})->run(feeds);
  for (int threads : {1, 3}) {
    PrepareOptions po;
    po.graphOptLevel = 0;
    po.threads = threads;
    auto plan = makeExecutor("cpu")->prepare(m, po);
    RunProfile prof;
    auto got = plan->runProfiled(feeds, prof);
    REQUIRE(got.size() == 1);
    CompareResult r = compareValues(got[0], want[0], 0, 0);
    INFO(r.message);
    CHECK(r.ok);
    REQUIRE(prof.nodes.size() == 1);
    CHECK(prof.nodes[0].kernel.rfind("cpu.nonmaxsuppression.f32", 0) == 0);
    CHECK_FALSE(prof.nodes[0].fallback);
    // a second run of the same plan gives the same (the output is allocated per run)
    auto again = plan->run(feeds);
    CHECK(compareValues(again[0], want[0], 0, 0).ok);
  }
}

}  // namespace

TEST_CASE("cpu NonMaxSuppression selects exactly the reference kernel's boxes", "[cpu][nms]") {
  std::mt19937 rng(7);
  const int64_t counts[] = {0, 1, 2, 5, 17, 64, 300};
  int iter = 0;
  for (int64_t n : counts)
    for (bool center : {false, true})
      for (int variant = 0; variant < 4; ++variant, ++iter) {
        NmsCase c;
        c.boxes = n;
        c.center = center;
        c.batches = 1 + iter % 2;
        c.classes = 1 + (iter / 2) % 3;
        switch (variant) {
          case 0: c.maxOut = n; c.iou = 0.5f; c.score = 0.3f; break;          // all three
          case 1: c.maxOut = 1000; break;                                      // no thresholds: iou 0
          case 2: c.maxOut = 3; c.iou = 0.f; c.score = 0.5f; c.scalarsAsInputs = true; break;
          case 3: c.maxOut = 0; c.iou = 0.4f; break;                           // selects nothing
        }
        Tensor boxes, scores;
        randomBoxes(c, rng, boxes, scores);
        std::map<std::string, RtValue> feeds;
        auto m = nmsModel(c, boxes, scores, feeds);
        INFO("boxes " << n << " batches " << c.batches << " classes " << c.classes << " center " << center << " variant " << variant);
        checkNms(*m, feeds);
      }
}

TEST_CASE("cpu NonMaxSuppression: no max_output input selects nothing; NaN and Inf scores and corners as on ref", "[cpu][nms]") {
  std::mt19937 rng(3);
  NmsCase c;
  c.boxes = 40;
  Tensor boxes, scores;
  randomBoxes(c, rng, boxes, scores);
  std::map<std::string, RtValue> feeds;
  auto m = nmsModel(c, boxes, scores, feeds);  // only boxes and scores
  checkNms(*m, feeds);
  auto got = makeExecutor("cpu")->prepare(*m, {})->run(feeds);
  CHECK(got[0].tensor->dims == std::vector<int64_t>{0, 3});

  c.maxOut = 100;
  c.iou = 0.3f;
  std::vector<float> b(40 * 4), s(40);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::uniform_real_distribution<float>(0, 1)(rng);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(i % 5) / 5;
  const float nan = testutil::kNan, inf = testutil::kInf;
  s[3] = nan, s[9] = nan, s[11] = inf, s[12] = -inf, s[20] = -0.f, s[21] = 0.f;
  b[4 * 5 + 1] = nan, b[4 * 6 + 2] = inf, b[4 * 7 + 0] = -inf, b[4 * 7 + 2] = inf;
  feeds.clear();
  auto m2 = nmsModel(c, f32({1, 40, 4}, b), f32({1, 1, 40}, s), feeds);
  checkNms(*m2, feeds);
}

TEST_CASE("cpu NonMaxSuppression on thousands of boxes in far-apart classes (batched NMS as torchvision exports it)",
          "[cpu][nms]") {
  std::mt19937 rng(5);
  NmsCase c;
  c.boxes = 3000;
  c.maxOut = int64_t{1} << 40;
  c.iou = 0.55f;
  Tensor boxes, scores;
  randomBoxes(c, rng, boxes, scores);
  std::vector<float> b(reinterpret_cast<const float*>(boxes.raw.data()), reinterpret_cast<const float*>(boxes.raw.data()) + 3000 * 4);
  for (size_t i = 0; i < 3000; ++i) {  // 30 classes, each shifted by its index times an offset
    float off = static_cast<float>(i % 30) * 2.f;
    for (size_t k = 0; k < 4; ++k) b[i * 4 + k] += off;
  }
  std::map<std::string, RtValue> feeds;
  auto m = nmsModel(c, f32({1, 3000, 4}, b), scores, feeds);
  checkNms(*m, feeds);
}

namespace {

/// Runs `text` on ref and cpu (1 and 3 threads, -O0 and -O3): the same outputs, and the
/// profile's entry for the (one) node of type `op` names `kernel` and is no fallback unless `fallback`.
void checkControlFlow(const std::string& text, const std::map<std::string, RtValue>& feeds, const std::string& op,
                      const std::string& kernel, bool fallback = false) {
  auto m = parseModelText(text, "control_flow.onnxtxt");
  auto want = makeExecutor("ref")->prepare(*m, {})->run(feeds);
  for (int threads : {1, 3})
    for (int level : {0, 3}) {
      INFO("threads " << threads << " -O" << level);
      PrepareOptions po;
      po.threads = threads;
      po.graphOptLevel = level;
      auto plan = makeExecutor("cpu")->prepare(*m, po);
      for (int run = 0; run < 2; ++run) {  // the second run finds the body's plan in the cache
        RunProfile prof;
        auto got = plan->runProfiled(feeds, prof);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          CompareResult r = compareValues(got[i], want[i], 1e-5, 1e-6);
          INFO("output " << i << ": " << r.message);
          CHECK(r.ok);
        }
        bool found = false;
        for (const NodeRun& nr : prof.nodes)
          if (nr.opType == op) {
            found = true;
            CHECK(nr.kernel == kernel);
            CHECK(nr.fallback == fallback);
          }
        if (level == 0) CHECK(found);  // -O3 may fold an If whose condition it knows
      }
    }
}

/// As torchvision's detectors export batched_nms: no boxes, or NMS on boxes shifted per class.
const std::string kBatchedNms = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] boxes, float[N] scores, int64[N] labels) => (int64[K] keep) {
  s = Shape (boxes)
  p = ReduceProd <keepdims: int = 0> (s)
  zero = Constant <value: tensor = int64 {0}> ()
  empty = Equal (p, zero)
  keep = If (empty) <then_branch: graph = then_g () => (int64[0] t_out) {
      t_out = Constant <value: tensor = int64[0] {}> ()
    }, else_branch: graph = else_g () => (int64[K] e_out) {
      mx = ReduceMax <keepdims: int = 0> (boxes)
      lf = Cast <to: int = 1> (labels)
      one = Constant <value: tensor = float {1.0}> ()
      mx1 = Add (mx, one)
      off = Mul (lf, mx1)
      ax1 = Constant <value: tensor = int64[1] {1}> ()
      off2 = Unsqueeze (off, ax1)
      b2 = Add (boxes, off2)
      ax0 = Constant <value: tensor = int64[1] {0}> ()
      b3 = Unsqueeze (b2, ax0)
      s2 = Unsqueeze (scores, ax0)
      s3 = Unsqueeze (s2, ax0)
      mo = Constant <value: tensor = int64[1] {9223372036854775807}> ()
      th = Constant <value: tensor = float[1] {0.5}> ()
      sel = NonMaxSuppression (b3, s3, mo, th)
      two = Constant <value: tensor = int64[1] {2}> ()
      g2 = Gather <axis: int = 1> (sel, two)
      e_out = Squeeze (g2, ax1)
    }>
}
)";

std::map<std::string, RtValue> batchedNmsFeeds(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> b(static_cast<size_t>(n * 4)), s(static_cast<size_t>(n));
  std::vector<int64_t> l(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float x = u(rng) * 100, y = u(rng) * 100;
    b[static_cast<size_t>(i * 4)] = x, b[static_cast<size_t>(i * 4 + 1)] = y;
    b[static_cast<size_t>(i * 4 + 2)] = x + 5 + u(rng) * 30, b[static_cast<size_t>(i * 4 + 3)] = y + 5 + u(rng) * 30;
    s[static_cast<size_t>(i)] = std::floor(u(rng) * 20) / 20;
    l[static_cast<size_t>(i)] = static_cast<int64_t>(u(rng) * 4);
  }
  return {{"boxes", RtValue::ofTensor(f32({n, 4}, b))},
          {"scores", RtValue::ofTensor(f32({n}, s))},
          {"labels", RtValue::ofTensor(i64({n}, l))}};
}

RtValue boolScalar(bool b) { return RtValue::ofTensor(testutil::tensorOf(DType::Bool, {}, std::vector<uint8_t>{b})); }

}  // namespace

TEST_CASE("cpu If: both branches run as cpu sub-plans reading outer values, nested If included", "[cpu][controlflow]") {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (bool c, bool c2, float[4, 3] x) => (float[4, 5] y, float[4, 5] z) <float[3, 5] w = {1.0, -2.0, 3.0, 0.5, 0.25, 1.0, 1.0, -1.0, 2.0, 0.0, 0.5, 0.5, 0.5, 0.5, -3.0}> {
  h = Relu (x)
  y = If (c) <then_branch: graph = then_g () => (float[4, 5] t_out) {
      m = MatMul (h, w)
      t_out = Sigmoid (m)
    }, else_branch: graph = else_g () => (float[4, 5] e_out) {
      m2 = MatMul (x, w)
      e_out = If (c2) <then_branch: graph = inner_t () => (float[4, 5] it_out) {
          it_out = Relu (m2)
        }, else_branch: graph = inner_e () => (float[4, 5] ie_out) {
          two = Constant <value: tensor = float {2.0}> ()
          ie_out = Mul (m2, two)
        }>
    }>
  z = Add (y, y)
}
)";
  std::mt19937 rng(1);
  std::vector<float> xv(12);
  for (auto& v : xv) v = std::normal_distribution<float>()(rng);
  for (bool c : {true, false})
    for (bool c2 : {true, false}) {
      INFO("c " << c << " c2 " << c2);
      std::map<std::string, RtValue> feeds{{"c", boolScalar(c)}, {"c2", boolScalar(c2)}, {"x", RtValue::ofTensor(f32({4, 3}, xv))}};
      checkControlFlow(text, feeds, "If", "cpu.if (subgraphs on cpu)");
    }
}

TEST_CASE("cpu If: torchvision's batched NMS (the offset trick) runs its NonMaxSuppression as a cpu sub-plan",
          "[cpu][controlflow][nms]") {
  std::mt19937 rng(9);
  for (int64_t n : {0, 1, 50, 400}) {
    INFO(n << " boxes");
    checkControlFlow(kBatchedNms, batchedNmsFeeds(n, rng), "If", "cpu.if (subgraphs on cpu)");
  }
}

TEST_CASE("cpu Loop and Scan: bodies run as cpu sub-plans, re-planned when a carried shape grows", "[cpu][controlflow]") {
  const std::string loop = R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64 n, float[2, 3] x, float[1, 3] acc0) => (float[2, 3] v, float[K, 3] grown, float[N, 2, 3] scan) <float[3, 3] w = {0.5, -0.25, 0.1, 0.2, 0.3, -0.4, 0.0, 0.6, 0.7}> {
  t = Constant <value: tensor = bool {1}> ()
  v, grown, scan = Loop (n, t, x, acc0) <body: graph = body (int64 i, bool cin, float[2, 3] vin, float[M, 3] ain) => (bool cout, float[2, 3] vout, float[M1, 3] aout, float[2, 3] sout) {
      cout = Identity (cin)
      m = MatMul (vin, w)
      vout = Tanh (m)
      zero = Constant <value: tensor = int64[1] {0}> ()
      one = Constant <value: tensor = int64[1] {1}> ()
      r = Slice (vin, zero, one, zero)
      aout = Concat <axis: int = 0> (ain, r)
      fi = Cast <to: int = 1> (i)
      sout = Mul (vout, fi)
    }>
}
)";
  std::map<std::string, RtValue> feeds{{"n", RtValue::ofTensor(i64({}, {4}))},
                                       {"x", RtValue::ofTensor(f32({2, 3}, {1, 2, 3, -1, -2, 0.5f}))},
                                       {"acc0", RtValue::ofTensor(f32({1, 3}, {9, 8, 7}))}};
  checkControlFlow(loop, feeds, "Loop", "cpu.loop (subgraphs on cpu)");
  // 40 iterations, 40 shapes of the growing value: past 32 plans the body runs on ref
  feeds["n"] = RtValue::ofTensor(i64({}, {40}));
  checkControlFlow(loop, feeds, "Loop", "ref.loop (subgraphs on ref)", true);

  const std::string scan = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[3] s0, float[5, 3] xs) => (float[3] s, float[5, 3] ys) {
  s, ys = Scan (s0, xs) <num_scan_inputs: int = 1, body: graph = body (float[3] sin, float[3] xin) => (float[3] sout, float[3] yout) {
      sout = Add (sin, xin)
      yout = Sigmoid (sout)
    }>
}
)";
  std::vector<float> xs(15);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i) * 0.3f - 2;
  std::map<std::string, RtValue> sf{{"s0", RtValue::ofTensor(f32({3}, {0.1f, 0.2f, 0.3f}))}, {"xs", RtValue::ofTensor(f32({5, 3}, xs))}};
  checkControlFlow(scan, sf, "Scan", "cpu.scan (subgraphs on cpu)");
}

TEST_CASE("cpu Loop: a body carrying a sequence runs on the reference machinery, and the profile says so",
          "[cpu][controlflow]") {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64 n, float[2] x) => (float[K, 2] y) {
  t = Constant <value: tensor = bool {1}> ()
  e = SequenceEmpty <dtype: int = 1> ()
  sq = Loop (n, t, e) <body: graph = body (int64 i, bool cin, seq(float[2]) sin) => (bool cout, seq(float[2]) sout) {
      cout = Identity (cin)
      sout = SequenceInsert (sin, x)
    }>
  y = ConcatFromSequence <axis: int = 0, new_axis: int = 1> (sq)
}
)";
  std::map<std::string, RtValue> feeds{{"n", RtValue::ofTensor(i64({}, {3}))}, {"x", RtValue::ofTensor(f32({2}, {1, 2}))}};
  checkControlFlow(text, feeds, "Loop", "ref.loop (subgraphs on ref)", true);
}

TEST_CASE("cpu If: concurrent runs of one plan, each with its own box count, plan and share the body's plans",
          "[cpu][controlflow]") {
  auto m = parseModelText(kBatchedNms, "batched_nms.onnxtxt");
  PrepareOptions po;
  po.threads = 1;
  po.graphOptLevel = 0;  // keeps the If
  auto plan = makeExecutor("cpu")->prepare(*m, po);
  auto ref = makeExecutor("ref")->prepare(*m, {});
  std::vector<std::map<std::string, RtValue>> feeds;
  std::vector<std::vector<RtValue>> want;
  std::mt19937 rng(21);
  for (int t = 0; t < 4; ++t) {
    feeds.push_back(batchedNmsFeeds(20 + 37 * t, rng));
    want.push_back(ref->run(feeds.back()));
  }
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 30; ++i) {
        size_t k = (t + i) % 4;
        auto got = plan->run(feeds[k]);
        if (!compareValues(got[0], want[k][0], 0, 0).ok) ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int b : bad) CHECK(b == 0);
}
