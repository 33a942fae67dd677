// test_runtime_tensor.cpp: the executors' runtime tensor (exec/value.h RtTensor) against the IR's
// Tensor: conversions share the bytes (never copy them), the IR's bookkeeping stays out of the
// runtime, and the device field is honoured: every executor of this build, the host kernels and
// the value writers refuse a tensor that is not on the host, naming it and the device.
#include <catch2/catch.hpp>

#include <cstring>

#include "exec/executor.h"
#include "exec/kernel.h"
#include "exec/value_ops.h"
#include "formats/onnx_text.h"
#include "formats/tensor_files.h"
#include "lib/error.h"
#include "lib/ir.h"

using namespace onnxtool;
using Catch::Matchers::Contains;

namespace {

Tensor floats(std::string name, std::vector<int64_t> dims, const std::vector<float>& v) {
  Tensor t = Tensor::fromFloats(std::move(name), std::move(dims), v);
  t.docString = "doc";
  t.metadata = {{"k", "v"}};
  return t;
}

/// A host tensor whose device field says cuda:0 (its bytes stay host memory, which no check
/// may read past: the refusals happen before any element is touched).
RtValue onDevice(const Tensor& t) {
  RtTensor r = RtTensor::viewOf(t);
  r.device = Device::cuda(0);
  return RtValue::ofTensor(std::move(r));
}

const char* kAddModel = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x) => (float[2, 3] y) {
  y = Add (x, x)
}
)";

}  // namespace

TEST_CASE("runtime tensors view IR tensors' bytes and convert back without copies", "[value]") {
  Tensor ir = floats("w", {2, 3}, {1, 2, 3, 4, 5, 6});
  RtTensor view = RtTensor::viewOf(ir);
  CHECK(view.raw.data() == ir.raw.data());  // the same bytes, not a copy
  CHECK(view.dims == std::vector<int64_t>{2, 3});
  CHECK(view.dtype() == DType::Float);
  CHECK(view.device == Device::cpu());
  CHECK(view.device.str() == "cpu");
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(view.elementAsDouble(5) == 6.0);

  RtValue v = RtValue::viewOf(ir);
  REQUIRE(v.isTensor());
  CHECK(v.tensor->raw.data() == ir.raw.data());

  // Back to the IR: a fresh, named tensor (none of the source's doc or metadata), bytes shared,
  // marked for raw_data.
  Tensor back = toIrTensor(view, "out");
  CHECK(back.name == "out");
  CHECK(back.docString.empty());
  CHECK(back.metadata.empty());
  CHECK(back.raw.data() == ir.raw.data());
  CHECK(back.storage == Tensor::Storage::Raw);

  // An IR tensor moved into a value keeps its bytes where they are.
  Tensor moved = floats("m", {3}, {7, 8, 9});
  const uint8_t* bytes = moved.raw.data();
  RtValue mv = RtValue::ofTensor(std::move(moved));
  CHECK(mv.tensor->raw.data() == bytes);

  // Strings travel as strings; their IR form is the typed field, as loaded from a proto.
  RtTensor s;
  s.dataType = static_cast<int32_t>(DType::String);
  s.dims = {2};
  s.strings = {"a", "b"};
  Tensor sir = toIrTensor(s, "s");
  CHECK(sir.strings == std::vector<std::string>{"a", "b"});
  CHECK(sir.storage == Tensor::Storage::Typed);

  // Errors of the data readers name the tensor (an IR tensor: its own name).
  Tensor i = floats("shape", {1}, {1});
  CHECK_THROWS_WITH(i.toInt64s(), Contains("tensor 'shape'") && Contains("expected integer data"));
  CHECK_THROWS_WITH(view.toInt64s("x"), Contains("tensor 'x'"));
  CHECK_THROWS_WITH(view.toInt64s(), Contains("tensor: expected integer data"));
}

TEST_CASE("executors refuse inputs that are not on the host, naming the input and the device", "[value]") {
  auto m = parseModelText(kAddModel, "add.onnxtxt");
  Tensor x = floats("x", {2, 3}, {1, 2, 3, 4, 5, 6});
  for (const std::string& name : executorNames()) {
    if (name == "cuda") continue;  // needs a GPU to prepare (tests/py/test_cuda.py)
    INFO("executor " << name);
    auto plan = makeExecutor(name)->prepare(*m, {});
    auto host = plan->run({{"x", RtValue::viewOf(x)}});
    REQUIRE(host.at(0).isTensor());
    CHECK(host[0].tensor->device.isCpu());
    CHECK(host[0].tensor->elementAsDouble(5) == 12.0);
    try {
      plan->run({{"x", onDevice(x)}});
      FAIL("a cuda:0 input ran on " << name);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidInput);
      CHECK_THAT(e.what(), Contains("input 'x'") && Contains("cuda:0"));
    }
  }
}

TEST_CASE("executors refuse a sequence holding a tensor on a device", "[value]") {
  auto m = parseModelText(R"(<ir_version: 8, opset_import: ["" : 17]>
g (seq(float[2]) s) => (int64 n) {
  n = SequenceLength (s)
}
)",
                          "seq.onnxtxt");
  Tensor a = floats("a", {2}, {1, 2});
  for (const std::string& name : executorNames()) {
    if (name == "cuda") continue;
    INFO("executor " << name);
    auto plan = makeExecutor(name)->prepare(*m, {});
    auto host = plan->run({{"s", RtValue::sequence({RtValue::viewOf(a), RtValue::viewOf(a)})}});
    CHECK(host.at(0).tensor->elementAsInt(0) == 2);
    CHECK_THROWS_WITH(plan->run({{"s", RtValue::sequence({RtValue::viewOf(a), onDevice(a)})}}),
                      Contains("input 's' holds a tensor that is on cuda:0"));
  }
}

TEST_CASE("host kernels and value writers refuse device tensors", "[value]") {
  auto m = parseModelText(kAddModel, "add.onnxtxt");
  const Node& add = *m->graph->nodes().front();
  Tensor x = floats("x", {2, 3}, {1, 2, 3, 4, 5, 6});
  RtValue dev = onDevice(x);
  std::vector<const RtValue*> ins{&dev, &dev};
  KernelContext ctx(add, 17, ins, 1, nullptr, nullptr, m.get(), nullptr);
  CHECK_THROWS_WITH(ctx.tensor(0), Contains("input 0 is on cuda:0"));

  CHECK_THROWS_WITH(toPb(dev, "y"), Contains("cuda:0"));
  CHECK_THROWS_WITH(toJson(dev, "y"), Contains("tensor 'y'") && Contains("cuda:0"));
  CHECK_THROWS_WITH(toIrTensor(*dev.tensor, "y"), Contains("tensor 'y'") && Contains("cuda:0"));
  CHECK_THROWS_WITH(hostTensor(*dev.tensor, "output 'y'"), Contains("output 'y' is on cuda:0"));
  CHECK(&hostTensor(*RtValue::viewOf(x).tensor, "x") != nullptr);
}
