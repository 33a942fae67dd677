// model_inputs.cpp: inputs from files, the test-data layout and the random generator.
#include "formats/model_inputs.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "formats/tensor_files.h"
#include "formats/value_files.h"
#include "lib/error.h"
#include "lib/tensor.h"

namespace onnxtool {

namespace {

namespace fs = std::filesystem;

const ValueInfoEntry* findInput(const Graph& g, const std::string& name) {
  for (const auto& e : g.inputs())
    if (e.value && e.value->name() == name) return &e;
  return nullptr;
}

std::string inputNames(const Graph& g) {
  std::string s;
  for (const auto* e : feedableInputs(g)) s += (s.empty() ? "" : ", ") + e->value->name();
  return s.empty() ? "none" : s;
}

std::string dimsStr(const std::vector<int64_t>& d) {
  std::string s;
  for (int64_t v : d) s += (s.empty() ? "" : ",") + std::to_string(v);
  return "[" + s + "]";
}

/// The size of dim `axis` of `v` when known (initializer dims or a static declared dim).
std::optional<int64_t> dimOf(const Value* v, int64_t axis) {
  if (!v) return std::nullopt;
  std::vector<std::optional<int64_t>> dims;
  if (const Tensor* t = v->initializer()) {
    for (int64_t d : t->dims) dims.push_back(d);
  } else if (v->type().isTensor() && v->type().shape.hasRank) {
    for (const Dim& d : v->type().shape.dims) dims.push_back(d.isValue() ? std::optional<int64_t>(d.value) : std::nullopt);
  } else {
    return std::nullopt;
  }
  int64_t r = static_cast<int64_t>(dims.size());
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return std::nullopt;
  return dims[static_cast<size_t>(axis)];
}

void boundIndexUses(const Value* v, RandomInputRange& range, std::set<const Value*>& seen) {
  if (!v || !seen.insert(v).second) return;
  for (const Use& u : v->uses()) {
    const Node& n = *u.node;
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    const std::string& op = n.opType;
    if ((op == "Gather" || op == "GatherElements") && u.index == 1) {
      if (auto size = dimOf(n.input(0), n.attrInt("axis", 0)); size && *size > 0) range.high = std::min(range.high, *size);
    } else if (u.index == 0 && (op == "Cast" || op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" ||
                                op == "Flatten" || op == "Identity")) {
      boundIndexUses(n.output(0), range, seen);
    }
  }
}

}  // namespace

std::vector<const ValueInfoEntry*> feedableInputs(const Graph& g) {
  std::vector<const ValueInfoEntry*> out;
  for (const auto& e : g.inputs())
    if (e.value && !e.value->initializer() && !e.value->sparseInitializer()) out.push_back(&e);
  return out;
}

RandomInputRange randomInputRange(const Graph& g, const Value* input) {
  (void)g;
  RandomInputRange r;
  std::set<const Value*> seen;
  boundIndexUses(input, r, seen);
  return r;
}

Tensor randomInput(DType dtype, const std::vector<int64_t>& dims, const RandomInputRange& range, std::mt19937_64& rng) {
  Tensor t;
  t.dataType = static_cast<int32_t>(dtype);
  t.dims = dims;
  auto bytes = t.expectedBytes();
  if (!bytes || *bytes > (uint64_t{1} << 34))
    fail(ErrorKind::InvalidInput, "a random input of shape {} would be too large", dimsStr(dims));
  t.setRaw(Buffer::zeros(static_cast<size_t>(*bytes)));
  size_t n = static_cast<size_t>(*t.numElements());
  std::normal_distribution<double> normal(0.0, 1.0);
  int64_t low = range.low, high = std::max(range.high, range.low + 1);
  std::uniform_int_distribution<int64_t> ints(low, high - 1);
  uint8_t* p = t.raw.mutableData();
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::Float: { float v = static_cast<float>(normal(rng)); std::memcpy(p + 4 * i, &v, 4); break; }
      case DType::Double: { double v = normal(rng); std::memcpy(p + 8 * i, &v, 8); break; }
      case DType::Float16: { uint16_t v = floatToHalf(static_cast<float>(normal(rng))); std::memcpy(p + 2 * i, &v, 2); break; }
      case DType::BFloat16: { uint16_t v = floatToBfloat16(static_cast<float>(normal(rng))); std::memcpy(p + 2 * i, &v, 2); break; }
      case DType::Bool: p[i] = static_cast<uint8_t>(rng() & 1); break;
      case DType::Int8: case DType::UInt8: p[i] = static_cast<uint8_t>(std::clamp<int64_t>(ints(rng), 0, 127)); break;
      case DType::Int16: case DType::UInt16: { uint16_t v = static_cast<uint16_t>(std::clamp<int64_t>(ints(rng), 0, 32767)); std::memcpy(p + 2 * i, &v, 2); break; }
      case DType::Int32: case DType::UInt32: { uint32_t v = static_cast<uint32_t>(std::clamp<int64_t>(ints(rng), 0, INT32_MAX)); std::memcpy(p + 4 * i, &v, 4); break; }
      case DType::Int64: case DType::UInt64: { uint64_t v = static_cast<uint64_t>(ints(rng)); std::memcpy(p + 8 * i, &v, 8); break; }
      default: fail(ErrorKind::Unsupported, "random {} values are not generated", dtypeName(dtype));
    }
  }
  return t;
}

std::map<std::string, RtValue> gatherModelInputs(const Graph& g, const ModelInputOptions& o) {
  std::map<std::string, RtValue> feeds;
  auto nextUnfed = [&]() -> const ValueInfoEntry* {
    for (const auto* e : feedableInputs(g))
      if (!feeds.count(e->value->name())) return e;
    return nullptr;
  };
  auto put = [&](const std::string& name, RtValue v, const std::string& from) {
    const ValueInfoEntry* e = findInput(g, name);
    if (!e || e->value->initializer())
      fail(ErrorKind::InvalidInput, "{}: the model has no input '{}'; its inputs are: {}", from, name, inputNames(g));
    if (feeds.count(name)) fail(ErrorKind::InvalidInput, "{}: input '{}' is given twice", from, name);
    feeds[name] = std::move(v);
  };
  for (const std::string& spec : o.files) {
    std::string name, path = spec;
    auto eq = spec.find('=');
    if (eq != std::string::npos && !fs::exists(spec)) {
      name = spec.substr(0, eq);
      path = spec.substr(eq + 1);
    }
    std::string ext = fs::path(path).extension().string();
    if (ext == ".npz") {
      for (auto& [key, t] : readNpz(path)) put(name.empty() ? key : name + "." + key, RtValue::ofTensor(std::move(t)), path);
      continue;
    }
    const ValueInfoEntry* target = name.empty() ? nullptr : findInput(g, name);
    if (!name.empty() && !target)
      fail(ErrorKind::InvalidInput, "-i {}: the model has no input '{}'; its inputs are: {}", spec, name, inputNames(g));
    std::string stored;
    TypeInfo expect = target ? target->type() : (nextUnfed() ? nextUnfed()->type() : TypeInfo{});
    RtValue v = readValueFile(path, expect, &stored);
    if (name.empty()) {
      if (ext == ".npy") name = fs::path(path).stem().string();
      else if (!stored.empty() && findInput(g, stored)) name = stored;
      else if (const ValueInfoEntry* e = nextUnfed()) name = e->value->name();
      else fail(ErrorKind::InvalidInput, "-i {}: every input already has a value", spec);
    }
    put(name, std::move(v), path);
  }
  if (!o.testDataDir.empty()) {
    auto inputs = feedableInputs(g);
    for (size_t i = 0;; ++i) {
      fs::path f = fs::path(o.testDataDir) / fmt::format("input_{}.pb", i);
      if (!fs::exists(f)) {
        // A model without inputs (test_constant) has a test-data folder with outputs only.
        if (i == 0 && !inputs.empty()) fail(ErrorKind::InvalidInput, "{}: no input_0.pb in this folder", o.testDataDir);
        break;
      }
      if (i >= inputs.size())
        fail(ErrorKind::InvalidInput, "{}: more input files than the model's {} inputs", o.testDataDir, inputs.size());
      std::string stored;
      RtValue v = parseValueProto(readFile(f.string()), inputs[i]->type(), f.string(), &stored);
      put(inputs[i]->value->name(), std::move(v), f.string());
    }
  }
  if (o.random) {
    std::mt19937_64 rng(o.seed);
    for (const auto* e : feedableInputs(g)) {
      const std::string& name = e->value->name();
      if (feeds.count(name)) continue;
      const TypeInfo& t = e->type();
      if (t.kind != TypeInfo::Kind::Tensor || !isValidDType(t.elemType))
        fail(ErrorKind::Unsupported, "input '{}': random values are made only for tensors, the input is {}; give it with -i",
             name, t.str());
      if (t.dtype() == DType::String)
        fail(ErrorKind::InvalidInput, "input '{}' is a string tensor: random strings are not generated; give it with -i FILE",
             name);
      std::vector<int64_t> dims;
      if (t.shape.hasRank) {
        for (const Dim& d : t.shape.dims) {
          if (d.isValue()) dims.push_back(d.value);
          else if (auto it = o.symbolSizes.find(d.param); d.isParam() && it != o.symbolSizes.end()) dims.push_back(it->second);
          else dims.push_back(o.symbolicDim);
        }
      }
      try {
        feeds[name] = RtValue::ofTensor(randomInput(t.dtype(), dims, randomInputRange(g, e->value), rng));
      } catch (const Error& err) {
        throw Error(err.kind(), fmt::format("input '{}': {}", name, err.what()));
      }
    }
  }
  return feeds;
}

}  // namespace onnxtool
