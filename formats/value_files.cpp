// value_files.cpp: `.pb` value files.
#include "formats/value_files.h"

#include <fstream>
#include <iterator>

#include "formats/onnx.pb.h"
#include "formats/onnx_data.pb.h"
#include "formats/proto_convert.h"
#include "lib/error.h"

namespace onnxtool {

namespace {

Tensor tensorFrom(pb::TensorProto& p, const std::string& displayName) {
  std::vector<std::string> issues;
  protoconv::FromCtx ctx;
  ctx.file = displayName;
  ctx.issues = &issues;
  Tensor t;
  protoconv::fromProto(p, t, ctx, "tensor");
  if (!issues.empty()) fail(ErrorKind::InvalidInput, "{}", issues.front());
  if (t.storage == Tensor::Storage::External)
    fail(ErrorKind::InvalidInput, "{}: tensor '{}' uses external data, which value files do not support", displayName, t.name);
  auto expected = t.expectedBytes();
  if (t.dtype() != DType::String && (!expected || t.raw.size() != *expected))
    fail(ErrorKind::InvalidInput, "{}: tensor '{}' holds {} bytes, its dims and type need {}", displayName, t.name,
         t.raw.size(), expected ? std::to_string(*expected) : std::string("an impossible size"));
  auto n = t.numElements();
  if (t.dtype() == DType::String && (!n || t.strings.size() != static_cast<uint64_t>(*n)))
    fail(ErrorKind::InvalidInput, "{}: tensor '{}' holds {} strings, its dims need {}", displayName, t.name,
         t.strings.size(), n ? std::to_string(*n) : std::string("an impossible count"));
  return t;
}

RtValue fromSequence(pb::SequenceProto& p, const std::string& dn);
RtValue fromOptional(pb::OptionalProto& p, const std::string& dn);

RtValue fromMap(pb::MapProto& p, const std::string& dn) {
  RtValue v;
  v.kind = RtValue::Kind::Map;
  Tensor keys;
  if (p.key_type() == static_cast<int32_t>(DType::String)) {
    keys.dataType = static_cast<int32_t>(DType::String);
    keys.strings.assign(p.string_keys().begin(), p.string_keys().end());
    keys.dims = {static_cast<int64_t>(keys.strings.size())};
  } else {
    keys = Tensor::fromInt64s("", {p.keys_size()}, std::vector<int64_t>(p.keys().begin(), p.keys().end()));
  }
  v.mapKeys = std::make_shared<const RtTensor>(std::move(keys));
  RtValue vals = fromSequence(*p.mutable_values(), dn);
  // values are a sequence of tensors; keep them as one sequence in elements
  v.elements = std::move(vals.elements);
  return v;
}

RtValue fromSequence(pb::SequenceProto& p, const std::string& dn) {
  std::vector<RtValue> items;
  for (auto& t : *p.mutable_tensor_values()) items.push_back(RtValue::ofTensor(tensorFrom(t, dn)));
  for (auto& s : *p.mutable_sequence_values()) items.push_back(fromSequence(s, dn));
  for (auto& m : *p.mutable_map_values()) items.push_back(fromMap(m, dn));
  for (auto& o : *p.mutable_optional_values()) items.push_back(fromOptional(o, dn));
  if (p.sparse_tensor_values_size()) fail(ErrorKind::Unsupported, "{}: sequences of sparse tensors are not supported", dn);
  RtValue v = RtValue::sequence(std::move(items));
  v.elemTypeHint = p.elem_type();
  return v;
}

RtValue fromOptional(pb::OptionalProto& p, const std::string& dn) {
  if (p.has_tensor_value()) return RtValue::optionalOf(RtValue::ofTensor(tensorFrom(*p.mutable_tensor_value(), dn)));
  if (p.has_sequence_value()) return RtValue::optionalOf(fromSequence(*p.mutable_sequence_value(), dn));
  if (p.has_map_value()) return RtValue::optionalOf(fromMap(*p.mutable_map_value(), dn));
  if (p.has_optional_value()) return RtValue::optionalOf(fromOptional(*p.mutable_optional_value(), dn));
  RtValue v = RtValue::optionalNone();
  v.elemTypeHint = p.elem_type();
  return v;
}

template <typename M>
M parseOrFail(std::string_view bytes, const std::string& dn, const char* what) {
  M m;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) || !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    fail(ErrorKind::InvalidInput, "{}: not a valid {} (protobuf parsing failed)", dn, what);
  return m;
}

}  // namespace

RtValue parseValueProto(std::string_view bytes, const TypeInfo& expected, const std::string& dn, std::string* name) {
  switch (expected.kind) {
    case TypeInfo::Kind::Sequence: {
      auto p = parseOrFail<pb::SequenceProto>(bytes, dn, "SequenceProto");
      if (name) *name = p.name();
      return fromSequence(p, dn);
    }
    case TypeInfo::Kind::Optional: {
      auto p = parseOrFail<pb::OptionalProto>(bytes, dn, "OptionalProto");
      if (name) *name = p.name();
      return fromOptional(p, dn);
    }
    case TypeInfo::Kind::Map: {
      auto p = parseOrFail<pb::MapProto>(bytes, dn, "MapProto");
      if (name) *name = p.name();
      return fromMap(p, dn);
    }
    default: {
      auto p = parseOrFail<pb::TensorProto>(bytes, dn, "TensorProto");
      if (name) *name = p.name();
      return RtValue::ofTensor(tensorFrom(p, dn));
    }
  }
}

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::Io, "{}: cannot open", path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace onnxtool
