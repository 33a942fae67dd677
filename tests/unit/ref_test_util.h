// ref_test_util.h: helpers shared by the reference-kernel unit tests (tests/unit/test_ref_*.cpp):
// tensor builders, readers of results, one-node model runners and attribute shorthands.
// Header-only; include after <catch2/catch.hpp>.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exec/executor.h"
#include "lib/ir.h"

namespace onnxtool::testutil {

// ---- tensor builders ----

/// A tensor of element type `t` and shape `dims` whose raw bytes are those of `v`.
template <typename E>
Tensor tensorOf(DType t, std::vector<int64_t> dims, const std::vector<E>& v) {
  Tensor x;
  x.dataType = static_cast<int32_t>(t);
  x.dims = std::move(dims);
  x.setRaw(Buffer::copyOf(std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(E))));
  return x;
}
/// A float32 tensor.
inline Tensor f32(std::vector<int64_t> dims, const std::vector<float>& v) { return tensorOf(DType::Float, std::move(dims), v); }
/// An int64 tensor.
inline Tensor i64(std::vector<int64_t> dims, const std::vector<int64_t>& v) { return tensorOf(DType::Int64, std::move(dims), v); }
/// An int32 tensor.
inline Tensor i32(std::vector<int64_t> dims, const std::vector<int32_t>& v) { return tensorOf(DType::Int32, std::move(dims), v); }
/// A string tensor.
inline Tensor str(std::vector<int64_t> dims, const std::vector<std::string>& v) {
  Tensor x;
  x.dataType = static_cast<int32_t>(DType::String);
  x.dims = std::move(dims);
  x.strings = v;
  x.storage = Tensor::Storage::Raw;
  return x;
}

/// A tensor as a runtime value.
inline RtValue T(Tensor t) { return RtValue::ofTensor(std::move(t)); }

// ---- reading results ----

/// The raw elements of a tensor value as E (E must match the element size).
template <typename E>
std::vector<E> values(const RtValue& v) {
  REQUIRE(v.isTensor());
  const RtTensor& t = *v.tensor;
  std::vector<E> out(t.raw.size() / sizeof(E));
  if (!out.empty()) std::memcpy(out.data(), t.raw.data(), out.size() * sizeof(E));
  return out;
}
/// Every element of a numeric tensor value as double (any element type).
inline std::vector<double> valuesOf(const RtValue& v) {
  REQUIRE(v.isTensor());
  std::vector<double> out;
  for (size_t i = 0; i < static_cast<size_t>(v.tensor->numElements().value_or(0)); ++i)
    out.push_back(v.tensor->elementAsDouble(i));
  return out;
}
/// The shape of a tensor value.
inline std::vector<int64_t> dimsOf(const RtValue& v) {
  REQUIRE(v.isTensor());
  return v.tensor->dims;
}

// ---- one-node models ----

/// One input of a one-node model: a tensor, a runtime value, or omitted (std::nullopt or an
/// Empty RtValue: the node gets no value at that position, for omitted optional inputs).
struct In {
  std::optional<RtValue> value;
  In(std::nullopt_t) {}  // NOLINT: implicit by design
  In(Tensor t) : value(RtValue::ofTensor(std::move(t))) {}  // NOLINT: implicit by design
  In(RtValue v) {  // NOLINT: implicit by design
    if (!v.isEmpty()) value = std::move(v);
  }
};

/// Runs a one-node model: node `op` of `domain` (named "n", outputs "out0".."out<N-1>") reading
/// graph inputs "in0".. from `inputs`, with `attrs`, in a model importing `opsets`; prepared with
/// `seed`. Returns its `numOutputs` outputs.
inline std::vector<RtValue> runNode(const std::string& op, const std::string& domain, std::vector<In> inputs,
                                    std::vector<Attribute> attrs, size_t numOutputs,
                                    const std::vector<OpsetImport>& opsets, std::optional<uint64_t> seed) {
  Model m;
  m.irVersion = 8;
  m.opsetImports = opsets;
  m.graph = std::make_unique<Graph>();
  Graph* g = m.graph.get();
  g->name = "g";
  std::vector<Value*> ins;
  std::map<std::string, RtValue> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].value) {
      ins.push_back(nullptr);
      continue;
    }
    Value* v = g->createValue("in" + std::to_string(i));
    g->addInput(v);
    ins.push_back(v);
    feeds[v->name()] = std::move(*inputs[i].value);
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < numOutputs; ++i) outs.push_back("out" + std::to_string(i));
  Node* n = g->addNode(op, ins, outs, domain);
  n->name = "n";
  for (auto& a : attrs) n->setAttr(std::move(a));
  for (size_t i = 0; i < numOutputs; ++i) g->addOutput(n->output(i));
  PrepareOptions o;
  o.seed = seed;
  return makeExecutor("ref")->prepare(m, o)->run(feeds);
}

/// Runs a one-node model of ai.onnx `op` at `opset` (no seed); returns `numOutputs` outputs.
inline std::vector<RtValue> runOp(const std::string& op, int64_t opset, std::vector<In> inputs,
                                  std::vector<Attribute> attrs = {}, size_t numOutputs = 1) {
  return runNode(op, "", std::move(inputs), std::move(attrs), numOutputs, {{"", opset, {}}}, std::nullopt);
}

/// Runs a one-node model of `op` in `domain`, importing ai.onnx at `opset` and ai.onnx.ml at
/// `mlOpset`, with random ops seeded by `seed`; returns `numOutputs` outputs.
inline std::vector<RtValue> runOp(const std::string& op, const std::string& domain, std::vector<In> inputs,
                                  std::vector<Attribute> attrs, size_t numOutputs = 1, int64_t opset = 21,
                                  int64_t mlOpset = 5, std::optional<uint64_t> seed = 7) {
  return runNode(op, domain, std::move(inputs), std::move(attrs), numOutputs,
                 {{"", opset, {}}, {"ai.onnx.ml", mlOpset, {}}}, seed);
}

// ---- attribute shorthands ----

/// An int attribute.
inline Attribute one(const std::string& name, int64_t v) { return Attribute::ofInt(name, v); }
/// An ints attribute.
inline Attribute ints(const std::string& name, std::vector<int64_t> v) { return Attribute::ofInts(name, std::move(v)); }
/// A strings attribute.
inline Attribute stringsAttr(std::string name, std::vector<std::string> v) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Strings;
  a.strings = std::move(v);
  return a;
}
/// A graph attribute (If branches, Loop and Scan bodies, score_mod and the like).
inline Attribute graphAttr(std::string name, std::shared_ptr<Graph> g) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttrType::Graph;
  a.g = std::move(g);
  return a;
}

// ---- constants ----

inline constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

/// Shorthands for expected values.
using V = std::vector<float>;
using I = std::vector<int64_t>;

}  // namespace onnxtool::testutil
