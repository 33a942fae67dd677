// test_shape_inference_ops.cpp: every schema (ai.onnx, ai.onnx.ml, the previews) has an inference
// function, and hand-computed inference cases for the op families beyond the core ones.
#include <catch2/catch.hpp>
#include <cstdlib>

#include <fmt/format.h>

#include "exec/kernel.h"
#include "lib/ir.h"
#include "lib/ops/op_schema.h"
#include "lib/shape_inference.h"
#include "lib/symbolic.h"

using namespace onnxtool;

namespace {

/// A model under construction: inputs, initializers and nodes of one graph at given opsets.
struct Builder {
  std::unique_ptr<Model> m = std::make_unique<Model>();
  explicit Builder(int64_t opset, int64_t mlOpset = 0) {
    m->irVersion = 10;
    m->opsetImports.push_back({"", opset, ""});
    if (mlOpset) m->opsetImports.push_back({"ai.onnx.ml", mlOpset, ""});
    m->graph = std::make_unique<Graph>();
  }
  Value* input(const char* name, DType t, std::initializer_list<const char*> dims) {
    Shape s;
    s.hasRank = true;
    for (const char* d : dims) {
      char* end = nullptr;
      long long v = std::strtoll(d, &end, 10);
      s.dims.push_back(*d == '?' ? Dim{} : *end == '\0' ? Dim::ofValue(v) : Dim::ofParam(d));
    }
    Value* v = m->graph->createValue(name);
    v->setType(TypeInfo::tensor(t, std::move(s)));
    m->graph->addInput(v);
    return v;
  }
  Value* ints(const char* name, std::vector<int64_t> dims, std::vector<int64_t> v) {
    return m->graph->addInitializer(Tensor::fromInt64s(name, std::move(dims), v));
  }
  Value* ints(const char* name, std::vector<int64_t> v) {
    auto n = static_cast<int64_t>(v.size());
    return ints(name, {n}, std::move(v));
  }
  Value* floats(const char* name, std::vector<int64_t> dims, std::vector<float> v) {
    return m->graph->addInitializer(Tensor::fromFloats(name, std::move(dims), v));
  }
  Node* node(const char* op, std::vector<Value*> in, std::vector<std::string> out, std::string domain = "") {
    return m->graph->addNode(op, in, out, std::move(domain));
  }
  /// Infers and requires no finding.
  void infer() {
    auto report = inferShapes(*m);
    INFO(fmt::format("{}", fmt::join(report.errors, "\n")));
    REQUIRE(report.errors.empty());
  }
};

std::string typeOf(Node* n, size_t i = 0) { return n->output(i)->type().str(); }

Attribute graphAttr(const char* name, std::shared_ptr<Graph> g) {
  Attribute a;
  a.name = name;
  a.type = AttrType::Graph;
  a.g = std::move(g);
  return a;
}

}  // namespace

// Every domain of the ONNX spec: ai.onnx, ai.onnx.ml and the two preview domains. ONNX
// Runtime's contrib domains have inference for the ops its tools write (and every op with a
// reference kernel), not for all 158.
TEST_CASE("every schema version of every domain has an inference function", "[shape][registry]") {
  registerShapeInference();
  registerRefKernels();
  std::vector<std::string> missing;
  for (const OpSchema& s : allSchemas()) {
    bool needed = !isOrtContribDomain(s.domain) || KernelRegistry::instance().find("ref", s.domain, s.name, s.sinceVersion);
    if (needed && !InferRegistry::instance().find(s.domain, s.name, s.sinceVersion))
      missing.push_back(fmt::format("{}:{}-{}", s.domain, s.name, s.sinceVersion));
  }
  for (std::string_view op : {"Attention", "QAttention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding",
                              "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
                              "QEmbedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "QuickGelu", "BiasAdd",
                              "FusedMatMul", "FusedConv", "FusedGemm", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
                              "MatMulNBits", "DynamicQuantizeLSTM", "QGemm", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
                              "QLinearLeakyRelu", "QLinearConcat", "QLinearAveragePool", "QLinearGlobalAveragePool",
                              "QLinearConv", "QuantizeLinear", "DequantizeLinear"})
    if (!InferRegistry::instance().find("com.microsoft", op, 1)) missing.push_back(fmt::format("com.microsoft:{}", op));
  INFO(fmt::format("{} without inference: {}", missing.size(), fmt::join(missing, "\n")));
  CHECK(missing.empty());
}

TEST_CASE("provably non-negative symbolic expressions", "[shape][symbolic]") {
  SymExpr past = SymExpr::symbol("past"), seq = SymExpr::symbol("seq");
  CHECK((past + seq - past).provablyNonNegative());
  CHECK_FALSE((past - seq).provablyNonNegative());
  CHECK(SymExpr::floorDiv(past - SymExpr(1), 2).provablyNonNegative() == false);  // floor((past+1)/2)-1
  CHECK(SymExpr::floorDiv(past + SymExpr(3), 2).provablyNonNegative());
  CHECK(SymExpr(0).provablyNonNegative());
}

TEST_CASE("Expand keeps known input sizes against unknown target entries", "[shape]") {
  Builder b(17);
  Value* x = b.input("x", DType::Float, {"3", "1"});
  Value* target = b.input("target", DType::Int64, {"3"});
  Node* n = b.node("Expand", {x, target}, {"y"});
  b.infer();
  // target is [?, 1|3, ?]: the second output dim must be 3 (3 broadcasts only with 1 or 3).
  REQUIRE(n->output(0)->type().shape.rank() == 3);
  CHECK(n->output(0)->type().shape.dims[1].value == 3);
  CHECK(n->output(0)->type().shape.dims[0].isParam());
}

TEST_CASE("Slice of a static mask by symbolic bounds gives end - start", "[shape]") {
  Builder b(17);
  Value* mask = b.input("mask", DType::Bool, {"1024", "1024"});
  Value* x = b.input("x", DType::Float, {"batch", "seq"});
  Value* past = b.input("past", DType::Float, {"batch", "12", "past", "64"});
  Node* ps = b.node("Shape", {past}, {"ps"});
  ps->setAttr(Attribute::ofInt("start", 2));
  ps->setAttr(Attribute::ofInt("end", 3));
  Node* xs = b.node("Shape", {x}, {"xs"});
  xs->setAttr(Attribute::ofInt("start", 1));
  Node* total = b.node("Add", {ps->output(0), xs->output(0)}, {"total"});
  Node* rows = b.node("Slice", {mask, ps->output(0), total->output(0), b.ints("axes0", {0})}, {"rows"});
  Node* cols =
      b.node("Slice", {rows->output(0), b.ints("zero", {0}), total->output(0), b.ints("axes1", {1})}, {"cols"});
  b.infer();
  CHECK(typeOf(rows) == "tensor(bool)[seq,1024]");
  CHECK(typeOf(cols) == "tensor(bool)[seq,past+seq]");
}

TEST_CASE("Concat keeps known entries of a shape with unknown pieces", "[shape]") {
  Builder b(17);
  Value* x = b.input("x", DType::Float, {"2", "3", "8"});
  Value* n = b.input("n", DType::Int64, {"1"});
  Node* s = b.node("Shape", {x}, {"s"});
  s->setAttr(Attribute::ofInt("end", 2));
  Node* cat = b.node("Concat", {s->output(0), n}, {"target"});
  cat->setAttr(Attribute::ofInt("axis", 0));
  Node* e = b.node("Expand", {b.input("one", DType::Float, {"1", "1", "1"}), cat->output(0)}, {"y"});
  b.infer();
  const Shape& y = e->output(0)->type().shape;
  REQUIRE(y.rank() == 3);
  CHECK(y.dims[0].value == 2);
  CHECK(y.dims[1].value == 3);
  CHECK_FALSE(y.dims[2].isValue());
}

TEST_CASE("GatherND, OneHot, DepthToSpace, SpaceToDepth, Det, CenterCropPad", "[shape]") {
  Builder b(18);
  Value* data = b.input("data", DType::Float, {"2", "3", "4", "5"});
  Value* idx = b.input("idx", DType::Int64, {"2", "7", "1"});
  Node* gnd = b.node("GatherND", {data, idx}, {"g"});
  gnd->setAttr(Attribute::ofInt("batch_dims", 1));
  Value* cls = b.input("cls", DType::Int64, {"n", "4"});
  Node* oh = b.node("OneHot", {cls, b.ints("depth", {}, {10}), b.input("vals", DType::Float, {"2"})}, {"oh"});
  oh->setAttr(Attribute::ofInt("axis", 1));
  Value* img = b.input("img", DType::Float, {"n", "8", "h", "6"});
  Node* d2s = b.node("DepthToSpace", {img}, {"d2s"});
  d2s->setAttr(Attribute::ofInt("blocksize", 2));
  Node* s2d = b.node("SpaceToDepth", {img}, {"s2d"});
  s2d->setAttr(Attribute::ofInt("blocksize", 2));
  Node* det = b.node("Det", {data}, {"det"});
  Node* crop = b.node("CenterCropPad", {img, b.ints("crop", {5, 7})}, {"crop"});
  crop->setAttr(Attribute::ofInts("axes", {-2, -1}));
  b.infer();
  CHECK(typeOf(gnd) == "tensor(float)[2,7,4,5]");  // idx[:-1] + data[1+1:]
  CHECK(typeOf(oh) == "tensor(float)[n,10,4]");
  CHECK(typeOf(d2s) == "tensor(float)[n,2,2*h,12]");
  CHECK(typeOf(s2d) == "tensor(float)[n,32,floor(h/2),3]");
  CHECK(typeOf(det) == "tensor(float)[2,3]");
  CHECK(typeOf(crop) == "tensor(float)[n,8,5,7]");
}

TEST_CASE("Einsum: explicit, implicit and ellipsis equations", "[shape]") {
  Builder b(12);
  Value* a = b.input("a", DType::Float, {"b", "i", "j"});
  Value* c = b.input("c", DType::Float, {"b", "j", "k"});
  Node* bmm = b.node("Einsum", {a, c}, {"bmm"});
  bmm->setAttr(Attribute::ofString("equation", "bij,bjk->bik"));
  Node* implicit = b.node("Einsum", {a, c}, {"imp"});
  implicit->setAttr(Attribute::ofString("equation", "bij,bjk"));  // letters once: i, k (sorted)
  Value* x = b.input("x", DType::Float, {"2", "1", "3", "3"});
  Value* y = b.input("y", DType::Float, {"5", "3", "4"});
  Node* ell = b.node("Einsum", {x, y}, {"ell"});
  ell->setAttr(Attribute::ofString("equation", "...ij,...jk->...ik"));
  Node* diag = b.node("Einsum", {x}, {"diag"});
  diag->setAttr(Attribute::ofString("equation", "...ii->...i"));
  b.infer();
  CHECK(typeOf(bmm) == "tensor(float)[b,i,k]");
  CHECK(typeOf(implicit) == "tensor(float)[i,k]");
  CHECK(typeOf(ell) == "tensor(float)[2,5,3,4]");
  CHECK(typeOf(diag) == "tensor(float)[2,1,3]");
}

TEST_CASE("Unique shares one count among Y, indices and counts", "[shape]") {
  Builder b(11);
  Node* u = b.node("Unique", {b.input("x", DType::Float, {"2", "3"})}, {"y", "indices", "inverse", "counts"});
  b.infer();
  const TypeInfo& y = u->output(0)->type();
  REQUIRE(y.shape.rank() == 1);
  CHECK(y.shape.dims[0].isParam());
  CHECK(typeOf(u, 1) == "tensor(int64)[" + y.shape.dims[0].param + "]");
  CHECK(typeOf(u, 2) == "tensor(int64)[6]");
  CHECK(typeOf(u, 3) == typeOf(u, 1));
}

TEST_CASE("Resize by constant scales and sizes; Upsample; GridSample; RoiAlign; Col2Im", "[shape]") {
  Builder b(19);
  Value* x = b.input("x", DType::Float, {"n", "3", "10", "w"});
  Value* none = nullptr;
  Node* byScale = b.node("Resize", {x, none, b.floats("scales", {4}, {1, 1, 0.5f, 2})}, {"r1"});
  Node* halfW = b.node("Resize", {x, none, b.floats("half", {4}, {1, 1, 1, 0.5f})}, {"r3"});
  Node* oddScale = b.node("Resize", {x, none, b.floats("odd", {4}, {1, 1, 1, 0.3f})}, {"r4"});
  Node* bySize = b.node("Resize", {x, none, none, b.ints("sizes", {2}, {5, 7})}, {"r2"});
  bySize->setAttr(Attribute::ofInts("axes", {2, 3}));
  Node* grid = b.node("GridSample", {x, b.input("grid", DType::Float, {"n", "4", "6", "2"})}, {"gs"});
  Value* rois = b.input("rois", DType::Float, {"r", "4"});
  Node* roi = b.node("RoiAlign", {x, rois, b.input("bi", DType::Int64, {"r"})}, {"roi"});
  roi->setAttr(Attribute::ofInt("output_height", 7));
  roi->setAttr(Attribute::ofInt("output_width", 5));
  Value* columns = b.input("cols", DType::Float, {"1", "12", "20"});
  Node* col = b.node("Col2Im", {columns, b.ints("image", {5, 6}), b.ints("block", {2, 2})}, {"col"});
  b.infer();
  CHECK(typeOf(byScale) == "tensor(float)[n,3,5,2*w]");
  CHECK(typeOf(halfW) == "tensor(float)[n,3,10,floor(w/2)]");
  CHECK(oddScale->output(0)->type().shape.dims[3].param.starts_with("unk__"));  // 0.3 is no p / 2^k
  CHECK(typeOf(bySize) == "tensor(float)[n,3,5,7]");
  CHECK(typeOf(grid) == "tensor(float)[n,3,4,6]");
  CHECK(typeOf(roi) == "tensor(float)[r,3,7,5]");
  CHECK(typeOf(col) == "tensor(float)[1,3,5,6]");
}

TEST_CASE("Integer and quantized MatMul/Conv; Quantize/Dequantize types", "[shape]") {
  Builder b(21);
  Value* a = b.input("a", DType::UInt8, {"m", "4"});
  Value* w = b.input("w", DType::UInt8, {"4", "6"});
  Node* mmi = b.node("MatMulInteger", {a, w}, {"mmi"});
  Value* f = b.input("f", DType::Float, {"2", "3"});
  Value* s = b.input("s", DType::Float, {});
  Value* zp = b.input("zp", DType::Int8, {});
  Node* q = b.node("QuantizeLinear", {f, s, zp}, {"q"});
  Node* q16 = b.node("QuantizeLinear", {f, s}, {"q16"});
  q16->setAttr(Attribute::ofInt("output_dtype", static_cast<int64_t>(DType::UInt16)));
  Node* dq = b.node("DequantizeLinear", {q->output(0), b.input("s16", DType::Float16, {}), zp}, {"dq"});
  Node* dyn = b.node("DynamicQuantizeLinear", {f}, {"y", "ys", "yz"});
  Value* x = b.input("x", DType::UInt8, {"1", "1", "7", "7"});
  Value* cw = b.input("cw", DType::UInt8, {"2", "1", "3", "3"});
  Node* ci = b.node("ConvInteger", {x, cw}, {"ci"});
  b.infer();
  CHECK(typeOf(mmi) == "tensor(int32)[m,6]");
  CHECK(typeOf(q) == "tensor(int8)[2,3]");
  CHECK(typeOf(q16) == "tensor(uint16)[2,3]");
  CHECK(typeOf(dq) == "tensor(float16)[2,3]");
  CHECK(typeOf(dyn, 0) == "tensor(uint8)[2,3]");
  CHECK(typeOf(dyn, 1) == "tensor(float)[]");
  CHECK(typeOf(ci) == "tensor(int32)[1,2,5,5]");
}

TEST_CASE("RNN family: layouts, directions and hidden size", "[shape]") {
  Builder b(14);
  Value* x = b.input("x", DType::Float, {"seq", "batch", "10"});
  Value* w = b.input("w", DType::Float, {"2", "32", "10"});
  Node* lstm = b.node("LSTM", {x, w, b.input("r", DType::Float, {"2", "32", "8"})}, {"y", "yh", "yc"});
  lstm->setAttr(Attribute::ofString("direction", "bidirectional"));
  Value* xb = b.input("xb", DType::Float, {"batch", "seq", "10"});
  Value* gw = b.input("gw", DType::Float, {"1", "18", "10"});
  Node* gru = b.node("GRU", {xb, gw, b.input("gr", DType::Float, {"1", "18", "6"})}, {"gy", "gyh"});
  gru->setAttr(Attribute::ofInt("layout", 1));
  gru->setAttr(Attribute::ofInt("hidden_size", 6));
  b.infer();
  CHECK(typeOf(lstm, 0) == "tensor(float)[seq,2,batch,8]");  // hidden size from R
  CHECK(typeOf(lstm, 1) == "tensor(float)[2,batch,8]");
  CHECK(typeOf(lstm, 2) == "tensor(float)[2,batch,8]");
  CHECK(typeOf(gru, 0) == "tensor(float)[batch,seq,1,6]");
  CHECK(typeOf(gru, 1) == "tensor(float)[batch,1,6]");
}

TEST_CASE("Attention with 3-D inputs and a past cache", "[shape]") {
  Builder b(23);
  Value* q = b.input("q", DType::Float, {"b", "s", "64"});
  Value* k = b.input("k", DType::Float, {"b", "s", "32"});
  Value* v = b.input("v", DType::Float, {"b", "s", "48"});
  Value* pk = b.input("pk", DType::Float, {"b", "2", "p", "16"});
  Value* pv = b.input("pv", DType::Float, {"b", "2", "p", "24"});
  Value* none = nullptr;
  Node* n = b.node("Attention", {q, k, v, none, pk, pv}, {"y", "present_k", "present_v", "qk"});
  n->setAttr(Attribute::ofInt("q_num_heads", 4));
  n->setAttr(Attribute::ofInt("kv_num_heads", 2));
  b.infer();
  CHECK(typeOf(n, 0) == "tensor(float)[b,s,96]");  // 4 heads * v head size 24
  CHECK(typeOf(n, 1) == "tensor(float)[b,2,p+s,16]");
  CHECK(typeOf(n, 2) == "tensor(float)[b,2,p+s,24]");
  CHECK(typeOf(n, 3) == "tensor(float)[b,4,s,p+s]");
}

TEST_CASE("Losses, RMSNormalization, DFT, STFT, windows", "[shape]") {
  Builder b(20);
  Value* scores = b.input("scores", DType::Float, {"n", "5", "d"});
  Value* labels = b.input("labels", DType::Int64, {"n", "d"});
  Node* mean = b.node("SoftmaxCrossEntropyLoss", {scores, labels}, {"loss", "logp"});
  Node* none = b.node("NegativeLogLikelihoodLoss", {scores, labels}, {"nll"});
  none->setAttr(Attribute::ofString("reduction", "none"));
  Value* sig = b.input("sig", DType::Float, {"2", "16", "1"});
  Node* rfft = b.node("DFT", {sig}, {"rfft"});
  rfft->setAttr(Attribute::ofInt("onesided", 1));
  Value* half = b.input("half", DType::Float, {"2", "9", "2"});
  Node* irfft = b.node("DFT", {half}, {"irfft"});
  irfft->setAttr(Attribute::ofInt("onesided", 1));
  irfft->setAttr(Attribute::ofInt("inverse", 1));
  Value* audio = b.input("audio", DType::Float, {"1", "128", "1"});
  Node* stft = b.node("STFT", {audio, b.ints("step", {}, {8}), nullptr, b.ints("frame", {}, {32})}, {"spec"});
  Node* win = b.node("HannWindow", {b.ints("size", {}, {10})}, {"win"});
  b.infer();
  CHECK(typeOf(mean, 0) == "tensor(float)[]");
  CHECK(typeOf(mean, 1) == "tensor(float)[n,5,d]");
  CHECK(typeOf(none) == "tensor(float)[n,d]");
  CHECK(typeOf(rfft) == "tensor(float)[2,9,2]");
  CHECK(typeOf(irfft) == "tensor(float)[2,16,1]");
  CHECK(typeOf(stft) == "tensor(float)[1,13,17,2]");  // (128-32)/8+1 frames, 32/2+1 bins
  CHECK(typeOf(win) == "tensor(float)[10]");
}

TEST_CASE("sequence and optional types", "[shape]") {
  Builder b(18);
  Value* a = b.input("a", DType::Float, {"n", "3"});
  Value* c = b.input("c", DType::Float, {"n", "4"});
  Node* seq = b.node("SequenceConstruct", {a, c}, {"seq"});
  Node* at = b.node("SequenceAt", {seq->output(0), b.ints("pos", {}, {0})}, {"at"});
  Node* len = b.node("SequenceLength", {seq->output(0)}, {"len"});
  Node* split = b.node("SplitToSequence", {a}, {"parts"});
  split->setAttr(Attribute::ofInt("axis", 1));
  Node* cat = b.node("ConcatFromSequence", {split->output(0)}, {"cat"});
  cat->setAttr(Attribute::ofInt("axis", 0));
  cat->setAttr(Attribute::ofInt("new_axis", 1));
  Node* opt = b.node("Optional", {a}, {"opt"});
  Node* has = b.node("OptionalHasElement", {opt->output(0)}, {"has"});
  Node* get = b.node("OptionalGetElement", {opt->output(0)}, {"get"});
  b.infer();
  CHECK(typeOf(seq) == "seq(tensor(float)[n,?])");
  CHECK(typeOf(at) == "tensor(float)[n,?]");
  CHECK(typeOf(len) == "tensor(int64)[]");
  CHECK(typeOf(split) == "seq(tensor(float)[n,1])");
  const Shape& catShape = cat->output(0)->type().shape;
  REQUIRE(catShape.rank() == 3);
  CHECK(catShape.dims[1].param == "n");
  CHECK(typeOf(opt) == "optional(tensor(float)[n,3])");
  CHECK(typeOf(has) == "tensor(bool)[]");
  CHECK(typeOf(get) == "tensor(float)[n,3]");
}

TEST_CASE("Scan 8 keeps the batch dim on state and scan outputs", "[shape]") {
  Builder b(8);
  Value* state = b.input("state", DType::Float, {"2", "3"});
  Value* xs = b.input("xs", DType::Float, {"2", "t", "3"});
  Node* scan = b.node("Scan", {nullptr, state, xs}, {"final", "ys"});
  scan->setAttr(Attribute::ofInt("num_scan_inputs", 1));
  auto body = std::make_shared<Graph>(b.m->graph.get(), scan);
  Value* s = body->createValue("s");
  Value* x = body->createValue("x");
  body->addInput(s);
  body->addInput(x);
  Node* add = body->addNode("Add", {s, x}, {"sum"});
  Node* copy = body->addNode("Identity", {add->output(0)}, {"out"});
  body->addOutput(add->output(0));
  body->addOutput(copy->output(0));
  scan->setAttr(graphAttr("body", body));
  b.infer();
  CHECK(typeOf(scan, 0) == "tensor(float)[2,3]");
  CHECK(typeOf(scan, 1) == "tensor(float)[2,t,3]");
}

TEST_CASE("ai.onnx.ml: regressors, classifiers, encoders", "[shape]") {
  Builder b(17, 3);
  Value* x = b.input("x", DType::Float, {"n", "4"});
  Node* lr = b.node("LinearRegressor", {x}, {"lr"}, "ai.onnx.ml");
  lr->setAttr(Attribute::ofInt("targets", 2));
  Node* afe = b.node("ArrayFeatureExtractor", {x, b.ints("cols", {0, 2, 3})}, {"afe"}, "ai.onnx.ml");
  Node* tec = b.node("TreeEnsembleClassifier", {x}, {"label", "probs"}, "ai.onnx.ml");
  tec->setAttr(Attribute::ofInts("classlabels_int64s", {1, 2, 3}));
  Node* norm = b.node("Normalizer", {x}, {"norm"}, "ai.onnx.ml");
  Node* ohe = b.node("OneHotEncoder", {b.input("cat", DType::Int64, {"n"})}, {"ohe"}, "ai.onnx.ml");
  ohe->setAttr(Attribute::ofInts("cats_int64s", {1, 5, 9}));
  b.infer();
  CHECK(typeOf(lr) == "tensor(float)[n,2]");
  CHECK(typeOf(afe) == "tensor(float)[n,3]");
  CHECK(typeOf(tec, 0) == "tensor(int64)[n]");
  CHECK(typeOf(tec, 1) == "tensor(float)[n,3]");
  CHECK(typeOf(norm) == "tensor(float)[n,4]");
  CHECK(typeOf(ohe) == "tensor(float)[n,3]");
}

TEST_CASE("Loop 16: an optional initial value with a plain body output gives the body's type", "[shape]") {
  Builder b(16);
  Value* cond = b.input("cond", DType::Bool, {});
  Node* empty = b.node("SequenceEmpty", {}, {"empty"});
  Node* opt = b.node("Optional", {empty->output(0)}, {"opt"});
  Node* loop = b.node("Loop", {b.ints("trips", {}, {2}), cond, opt->output(0)}, {"seq_res"});
  auto body = std::make_shared<Graph>(b.m->graph.get(), loop);
  Value* iter = body->createValue("i");
  Value* c = body->createValue("c");
  Value* carried = body->createValue("carried");
  for (Value* v : {iter, c, carried}) body->addInput(v);
  Node* keep = body->addNode("Identity", {c}, {"c_out"});
  Node* seq = body->addNode("SequenceEmpty", {}, {"s_out"});
  body->addOutput(keep->output(0));
  body->addOutput(seq->output(0));
  loop->setAttr(graphAttr("body", body));
  b.infer();
  CHECK(typeOf(opt) == "optional(seq(tensor(float)?))");
  CHECK(typeOf(loop) == "seq(tensor(float)?)");
}

TEST_CASE("preview training ops: Gradient and Adam shapes follow the values they update", "[shape]") {
  Builder b(17);
  b.m->opsetImports.push_back({"ai.onnx.preview.training", 1, ""});
  Value* a = b.input("a", DType::Float, {"2", "3"});
  Node* y = b.node("Relu", {a}, {"y"});
  Node* g = b.node("Gradient", {a}, {"da"}, "ai.onnx.preview.training");
  Attribute xs;
  xs.name = "xs";
  xs.type = AttrType::Strings;
  xs.strings = {"a"};
  g->setAttr(xs);
  g->setAttr(Attribute::ofString("y", "y"));
  Value* r = b.input("r", DType::Float, {});
  Value* t = b.input("t", DType::Int64, {});
  Value* w = b.input("w", DType::Float, {"5"});
  Node* adam = b.node("Adam", {r, t, w, g->output(0), w, a}, {"w_new", "v_new", "h_new"}, "ai.onnx.preview.training");
  b.infer();
  CHECK(typeOf(y) == "tensor(float)[2,3]");
  CHECK(typeOf(g) == "tensor(float)[2,3]");
  CHECK(typeOf(adam, 0) == "tensor(float)[5]");  // like X
  CHECK(typeOf(adam, 1) == "tensor(float)[5]");  // like V (input block 2)
  CHECK(typeOf(adam, 2) == "tensor(float)[2,3]");  // like H (input block 3)
}

TEST_CASE("malformed inputs to the new functions are findings, not crashes", "[shape]") {
  Builder b(20, 3);
  b.m->opsetImports.push_back({"ai.onnx.preview.training", 1, ""});
  Value* v = b.input("v", DType::Float, {"4"});
  b.node("GridSample", {v, v}, {"gs"})->name = "gs";
  Value* scalar = b.input("s", DType::Float, {});
  b.node("ArrayFeatureExtractor", {scalar, b.ints("i", {0})}, {"afe"}, "ai.onnx.ml")->name = "afe";
  Value* r = b.input("r", DType::Float, {});
  b.node("Adam", {r, b.input("t", DType::Int64, {})}, {"x"}, "ai.onnx.preview.training")->name = "adam";
  b.node("DepthToSpace", {v}, {"d2s"})->name = "d2s";
  b.node("STFT", {b.input("scalar", DType::Float, {}), b.ints("step", {}, {2})}, {"spec"})->name = "stft";
  auto report = inferShapes(*b.m);
  REQUIRE(report.errors.size() == 5);
  CHECK(report.errors[4] == "node 'stft' (STFT): signal must have rank 3 (batch, length, 1 or 2), got 0");
  CHECK(report.errors[0] == "node 'gs' (GridSample): input and grid must have rank >= 3, got 1");
  CHECK(report.errors[1] == "node 'afe' (ArrayFeatureExtractor): X must have rank >= 1");
  CHECK(report.errors[2] == "node 'adam' (Adam): inputs do not form X, G and state blocks");
  CHECK(report.errors[3] == "node 'd2s' (DepthToSpace): input must have rank 4, got 1");
}

TEST_CASE("data propagation through ReduceProd and Max of shape vectors", "[shape]") {
  Builder b(17);
  Value* x = b.input("x", DType::Float, {"b", "s", "12", "64"});
  Node* lead = b.node("Shape", {x}, {"lead"});
  lead->setAttr(Attribute::ofInt("end", 2));
  Node* rows = b.node("ReduceProd", {lead->output(0)}, {"rows"});  // keepdims: [1] holding b*s
  Node* seq = b.node("Shape", {x}, {"seq"});
  seq->setAttr(Attribute::ofInt("start", 1));
  seq->setAttr(Attribute::ofInt("end", 2));
  Node* atLeast = b.node("Max", {seq->output(0), b.ints("zero", {0})}, {"at_least"});  // max(s, 0) == s
  Node* cat = b.node("Concat", {rows->output(0), b.ints("hidden", {768})}, {"target"});
  cat->setAttr(Attribute::ofInt("axis", 0));
  Node* flat = b.node("Reshape", {x, cat->output(0)}, {"flat"});
  Node* cut = b.node("Reshape", {b.input("y", DType::Float, {"1", "s"}), atLeast->output(0)}, {"cut"});
  b.infer();
  CHECK(typeOf(rows) == "tensor(int64)[1]");
  CHECK(typeOf(flat) == "tensor(float)[b*s,768]");
  CHECK(typeOf(cut) == "tensor(float)[s]");
}

namespace {
/// The propagated integer contents of `v` after inference, as constants (empty when unknown).
std::vector<int64_t> dataOf(Builder& b, const Value* v) {
  std::unordered_map<const Value*, std::vector<std::optional<SymExpr>>> data;
  InferOptions opts;
  opts.valueData = &data;
  auto report = inferShapes(*b.m, opts);
  INFO(fmt::format("{}", fmt::join(report.errors, "\n")));
  REQUIRE(report.errors.empty());
  std::vector<int64_t> r;
  auto it = data.find(v);
  if (it == data.end()) return r;
  for (const auto& e : it->second) {
    if (!e || !e->asConstant()) return {};
    r.push_back(*e->asConstant());
  }
  return r;
}
}  // namespace

TEST_CASE("data propagation through Mod (both fmod modes, negative operands)", "[shape]") {
  Builder b(17);
  Value* a = b.ints("a", {7, -7, 7, -7, 6, 0});
  Value* d = b.ints("d", {3, 3, -3, -3, 3, 5});
  Node* py = b.node("Mod", {a, d}, {"py"});  // fmod 0: the divisor's sign
  Node* cm = b.node("Mod", {a, d}, {"c"});
  cm->setAttr(Attribute::ofInt("fmod", 1));  // the dividend's sign
  Node* zero = b.node("Mod", {a, b.ints("z", {0})}, {"by_zero"});
  CHECK(dataOf(b, py->output(0)) == std::vector<int64_t>{1, 2, -2, -1, 0, 0});
  CHECK(dataOf(b, cm->output(0)) == std::vector<int64_t>{1, -1, 1, -1, 0, 0});
  CHECK(dataOf(b, zero->output(0)).empty());
}

TEST_CASE("data propagation through Transpose and Slice of any rank", "[shape]") {
  Builder b(17);
  Value* m = b.ints("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  Node* t = b.node("Transpose", {m}, {"t"});  // [[1, 4], [2, 5], [3, 6]]
  Node* t3 = b.node("Transpose", {b.ints("c", {2, 1, 3}, {1, 2, 3, 4, 5, 6})}, {"t3"});
  t3->setAttr(Attribute::ofInts("perm", {2, 0, 1}));  // [3][2][1]
  // Rows reversed (step -1 from the end), then columns 2 and 0 (step -2 from -1).
  Node* rev = b.node("Slice", {m, b.ints("s0", {-1, -1}), b.ints("e0", {INT64_MIN, INT64_MIN}), b.ints("a0", {0, 1}),
                               b.ints("st0", {-1, -2})},
                     {"rev"});
  Node* mid = b.node("Slice", {m, b.ints("s1", {1}), b.ints("e1", {100}), b.ints("a1", {1})}, {"mid"});  // columns 1..2
  CHECK(dataOf(b, t->output(0)) == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
  CHECK(dataOf(b, t3->output(0)) == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
  CHECK(dataOf(b, rev->output(0)) == std::vector<int64_t>{6, 4, 3, 1});
  CHECK(dataOf(b, mid->output(0)) == std::vector<int64_t>{2, 3, 5, 6});
  CHECK(typeOf(rev) == "tensor(int64)[2,2]");
}

// torch's F.pad with amounts computed from the input's shape (Swin's window padding): the pads
// pass through a [-1, 2] Reshape, a reversing Slice and a Transpose; one inference now gives the
// Pad's output its static shape (before: one -O3 iteration per such block).
TEST_CASE("the exported F.pad pattern gives Pad a static output in one inference", "[shape]") {
  Builder b(17);
  Value* x = b.input("x", DType::Float, {"1", "54", "54", "96"});
  Node* shape = b.node("Shape", {x}, {"shape"});
  Node* h = b.node("Gather", {shape->output(0), b.ints("one", {}, {1})}, {"h"});
  Node* rem = b.node("Mod", {h->output(0), b.ints("win", {}, {7})}, {"rem"});          // 54 % 7 = 5
  Node* left = b.node("Sub", {b.ints("win2", {}, {7}), rem->output(0)}, {"left"});  // 2
  Node* amount = b.node("Mod", {left->output(0), b.ints("win3", {}, {7})}, {"amount"});  // 2
  Node* u = b.node("Unsqueeze", {amount->output(0), b.ints("ax", {0})}, {"u"});
  // F.pad's list, last dim first: (0, 0, 0, amount, 0, amount) -> [0,0, 0,amount, 0,amount, 0,0]
  Node* cat = b.node("Concat", {b.ints("z4", {0, 0, 0}), u->output(0), b.ints("z1", {0}), u->output(0), b.ints("z2", {0, 0})},
                     {"cat"});
  cat->setAttr(Attribute::ofInt("axis", 0));
  Node* pairs = b.node("Reshape", {cat->output(0), b.ints("pr", {-1, 2})}, {"pairs"});
  Node* rev = b.node("Slice", {pairs->output(0), b.ints("rs", {-1}), b.ints("re", {INT64_MIN}), b.ints("ra", {0}), b.ints("rst", {-1})},
                     {"rev"});
  Node* tr = b.node("Transpose", {rev->output(0)}, {"tr"});
  tr->setAttr(Attribute::ofInts("perm", {1, 0}));
  Node* flat = b.node("Reshape", {tr->output(0), b.ints("m1", {-1})}, {"flat"});
  Node* pad = b.node("Pad", {x, flat->output(0)}, {"padded"});
  CHECK(dataOf(b, flat->output(0)) == std::vector<int64_t>{0, 0, 0, 0, 0, 2, 2, 0});
  CHECK(typeOf(pad) == "tensor(float)[1,56,56,96]");
}
