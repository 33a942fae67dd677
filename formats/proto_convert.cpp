// proto_convert.cpp: protobuf <-> IR conversion. The load side consumes the parsed message
// (fields are moved out, never copied); what is left of each message after the modelled fields
// are taken is its residual.
#include "formats/proto_convert.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <google/protobuf/unknown_field_set.h>

#include "lib/error.h"

namespace onnxtool::protoconv {

namespace gp = google::protobuf;

namespace {

bool contains(std::initializer_list<int> l, int v) { return std::find(l.begin(), l.end(), v) != l.end(); }

bool isDefaultValued(const gp::Message& m, const gp::FieldDescriptor* fd) {
  const gp::Reflection* r = m.GetReflection();
  switch (fd->cpp_type()) {
    case gp::FieldDescriptor::CPPTYPE_INT32: return r->GetInt32(m, fd) == 0;
    case gp::FieldDescriptor::CPPTYPE_INT64: return r->GetInt64(m, fd) == 0;
    case gp::FieldDescriptor::CPPTYPE_UINT32: return r->GetUInt32(m, fd) == 0;
    case gp::FieldDescriptor::CPPTYPE_UINT64: return r->GetUInt64(m, fd) == 0;
    case gp::FieldDescriptor::CPPTYPE_FLOAT: {
      float f = r->GetFloat(m, fd);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return bits == 0;
    }
    case gp::FieldDescriptor::CPPTYPE_DOUBLE: return r->GetDouble(m, fd) == 0;
    case gp::FieldDescriptor::CPPTYPE_BOOL: return !r->GetBool(m, fd);
    case gp::FieldDescriptor::CPPTYPE_ENUM: return r->GetEnumValue(m, fd) == 0;
    case gp::FieldDescriptor::CPPTYPE_STRING: return r->GetString(m, fd).empty();
    default: return false;
  }
}

/// Clears the `heavy` fields (already converted) and returns what is left, serialized, or "" when
/// the IR's fields say everything: no unknown fields, no unmodelled field, and every present
/// `scalar` non-default (an explicitly present default is kept to preserve presence). `implied`
/// fields are written back by the saver whenever they apply, so their presence needs no record.
std::string residualOf(gp::Message& msg, std::initializer_list<int> scalars, std::initializer_list<int> heavy,
                       std::initializer_list<int> implied = {}) {
  const gp::Reflection* r = msg.GetReflection();
  const gp::Descriptor* d = msg.GetDescriptor();
  for (int num : heavy)
    if (const gp::FieldDescriptor* fd = d->FindFieldByNumber(num)) r->ClearField(&msg, fd);
  bool need = !r->GetUnknownFields(msg).empty();
  if (!need) {
    std::vector<const gp::FieldDescriptor*> fields;
    r->ListFields(msg, &fields);
    for (const gp::FieldDescriptor* fd : fields) {
      int num = fd->number();
      if (contains(implied, num)) continue;
      if (!contains(scalars, num) || isDefaultValued(msg, fd)) {
        need = true;
        break;
      }
    }
  }
  return need ? msg.SerializeAsString() : std::string();
}

// Typed fast checks: `plainX(p)` is true when residualOf(p, ...) at X's call site would return "",
// read through the generated accessors. The first reflection call builds protobuf's descriptors
// for the whole file (~0.3 ms a process, more than loading a small model takes), so reflection
// runs only when a check says a message holds an unknown field, a field the IR does not model,
// or a scalar explicitly present with its default value. Each check lists every field of its
// message that is neither converted (`heavy`) nor a scalar the IR keeps; a test walks every field
// of every message by reflection to keep these lists complete.
bool isDefault(const std::string& s) { return s.empty(); }
bool isDefault(int64_t v) { return v == 0; }
bool isDefault(int32_t v) { return v == 0; }
bool isDefault(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits == 0;
}
#define ONNXTOOL_PRESENT_DEFAULT(m, f) ((m).has_##f() && isDefault((m).f()))

bool plainOpset(const pb::OperatorSetIdProto& p) {
  return p.unknown_fields().empty() && !ONNXTOOL_PRESENT_DEFAULT(p, domain) && !ONNXTOOL_PRESENT_DEFAULT(p, version);
}
bool plainNode(const pb::NodeProto& p) {
  return p.unknown_fields().empty() && p.device_configurations_size() == 0 && !ONNXTOOL_PRESENT_DEFAULT(p, name) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, op_type) && !ONNXTOOL_PRESENT_DEFAULT(p, domain) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, overload) && !ONNXTOOL_PRESENT_DEFAULT(p, doc_string);
}
bool plainGraph(const pb::GraphProto& p) {
  return p.unknown_fields().empty() && p.quantization_annotation_size() == 0 && !ONNXTOOL_PRESENT_DEFAULT(p, name) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, doc_string);
}
bool plainModel(const pb::ModelProto& p) {
  return p.unknown_fields().empty() && p.training_info_size() == 0 && p.configuration_size() == 0 &&
         !ONNXTOOL_PRESENT_DEFAULT(p, ir_version) && !ONNXTOOL_PRESENT_DEFAULT(p, producer_name) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, producer_version) && !ONNXTOOL_PRESENT_DEFAULT(p, domain) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, model_version) && !ONNXTOOL_PRESENT_DEFAULT(p, doc_string);
}
bool plainFunction(const pb::FunctionProto& p) {
  return p.unknown_fields().empty() && !ONNXTOOL_PRESENT_DEFAULT(p, name) && !ONNXTOOL_PRESENT_DEFAULT(p, doc_string) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, domain) && !ONNXTOOL_PRESENT_DEFAULT(p, overload);
}
bool plainValueInfo(const pb::ValueInfoProto& p) {
  return p.unknown_fields().empty() && !ONNXTOOL_PRESENT_DEFAULT(p, doc_string);
}
bool plainTensor(const pb::TensorProto& p) {
  // Typed data fields (4, 5, 7, 10, 11) travel in the residual as before; segment is not modelled.
  return p.unknown_fields().empty() && !p.has_segment() && p.float_data_size() == 0 && p.int32_data_size() == 0 &&
         p.int64_data_size() == 0 && p.double_data_size() == 0 && p.uint64_data_size() == 0 &&
         !ONNXTOOL_PRESENT_DEFAULT(p, data_type) && !ONNXTOOL_PRESENT_DEFAULT(p, name) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, doc_string) && !(p.has_data_location() && p.data_location() == 0);
}
/// `valueField`: the field number of the attribute's value (kept by the saver whenever it applies).
bool plainAttribute(const pb::AttributeProto& p, int valueField) {
  return p.unknown_fields().empty() && !ONNXTOOL_PRESENT_DEFAULT(p, name) && !ONNXTOOL_PRESENT_DEFAULT(p, ref_attr_name) &&
         !ONNXTOOL_PRESENT_DEFAULT(p, doc_string) && !(p.has_type() && p.type() == 0) &&
         (valueField == 2 || !ONNXTOOL_PRESENT_DEFAULT(p, f)) && (valueField == 3 || !ONNXTOOL_PRESENT_DEFAULT(p, i)) &&
         (valueField == 4 || !ONNXTOOL_PRESENT_DEFAULT(p, s));
}
template <typename TensorLike>
bool plainTensorKind(const TensorLike& k) {
  return k.unknown_fields().empty() && !ONNXTOOL_PRESENT_DEFAULT(k, elem_type);
}

template <typename M>
void parseResidual(M& p, const std::string& residual) {
  if (!residual.empty()) p.ParseFromString(residual);
}

template <typename RepeatedEntries>
StringPairs pairsFrom(const RepeatedEntries& entries) {
  StringPairs out;
  out.reserve(static_cast<size_t>(entries.size()));
  for (const auto& e : entries) out.emplace_back(e.key(), e.value());
  return out;
}

template <typename RepeatedEntries>
void pairsTo(const StringPairs& pairs, RepeatedEntries* out) {
  for (const auto& [k, v] : pairs) {
    auto* e = out->Add();
    e->set_key(k);
    e->set_value(v);
  }
}

// Scalars are set when they differ from what the residual holds (absent reads as default), so
// a field present-with-default in the source stays present, and an absent one stays absent.
#define ONNXTOOL_SET_IF_DIFFERENT(p, field, value) \
  do {                                             \
    if ((p).field() != (value)) (p).set_##field(value); \
  } while (0)

// ---------------------------------------------------------------- types

Shape shapeFromProto(const pb::TensorShapeProto& sp) {
  Shape s;
  s.hasRank = true;
  s.dims.reserve(static_cast<size_t>(sp.dim_size()));
  for (const auto& dp : sp.dim()) {
    Dim d;
    if ((dp.has_dim_value() && dp.dim_value() < 0) || (dp.has_dim_param() && dp.dim_param() == "?")) {
      // Exporters (paddle2onnx, some older converters) write -1 for a dynamic dim, and "?" for
      // several unrelated ones (a PaddleOCR classifier's input is [-1,3,"?","?"], fed 48x192).
      // onnx.checker accepts both and ONNX Runtime reads them as unknown, not as one named dim;
      // so do we (saved back as unknown dims).
    } else if (dp.has_dim_value()) {
      d.kind = Dim::Kind::Value;
      d.value = dp.dim_value();
    } else if (dp.has_dim_param()) {
      d.kind = Dim::Kind::Param;
      d.param = dp.dim_param();
    }
    d.denotation = dp.denotation();
    if (!dp.unknown_fields().empty() || (dp.has_denotation() && dp.denotation().empty())) {
      pb::TensorShapeProto::Dimension copy(dp);
      copy.clear_value();
      d.residual = residualOf(copy, {3}, {});
    }
    s.dims.push_back(std::move(d));
  }
  if (!sp.unknown_fields().empty()) {
    pb::TensorShapeProto copy(sp);
    s.residual = residualOf(copy, {}, {1});
  }
  return s;
}

void shapeToProto(const Shape& s, pb::TensorShapeProto& sp) {
  parseResidual(sp, s.residual);
  for (const Dim& d : s.dims) {
    auto* dp = sp.add_dim();
    parseResidual(*dp, d.residual);
    if (d.kind == Dim::Kind::Value) dp->set_dim_value(d.value);
    if (d.kind == Dim::Kind::Param) dp->set_dim_param(d.param);
    ONNXTOOL_SET_IF_DIFFERENT(*dp, denotation, d.denotation);
  }
}

template <typename TensorLike>
void tensorKindFrom(const TensorLike& k, TypeInfo& t) {
  t.elemType = k.elem_type();
  if (k.has_shape()) t.shape = shapeFromProto(k.shape());
  if (plainTensorKind(k)) return;
  TensorLike copy(k);
  t.kindResidual = residualOf(copy, {1}, {2});
}

}  // namespace

TypeInfo typeFromProto(const pb::TypeProto& p) {
  TypeInfo t;
  switch (p.value_case()) {
    case pb::TypeProto::kTensorType:
      t.kind = TypeInfo::Kind::Tensor;
      tensorKindFrom(p.tensor_type(), t);
      break;
    case pb::TypeProto::kSparseTensorType:
      t.kind = TypeInfo::Kind::SparseTensor;
      tensorKindFrom(p.sparse_tensor_type(), t);
      break;
    case pb::TypeProto::kSequenceType: {
      t.kind = TypeInfo::Kind::Sequence;
      if (p.sequence_type().has_elem_type())
        t.inner = std::make_shared<TypeInfo>(typeFromProto(p.sequence_type().elem_type()));
      pb::TypeProto::Sequence copy(p.sequence_type());
      t.kindResidual = residualOf(copy, {}, {1});
      break;
    }
    case pb::TypeProto::kOptionalType: {
      t.kind = TypeInfo::Kind::Optional;
      if (p.optional_type().has_elem_type())
        t.inner = std::make_shared<TypeInfo>(typeFromProto(p.optional_type().elem_type()));
      pb::TypeProto::Optional copy(p.optional_type());
      t.kindResidual = residualOf(copy, {}, {1});
      break;
    }
    case pb::TypeProto::kMapType: {
      t.kind = TypeInfo::Kind::Map;
      t.elemType = p.map_type().key_type();
      if (p.map_type().has_value_type())
        t.inner = std::make_shared<TypeInfo>(typeFromProto(p.map_type().value_type()));
      pb::TypeProto::Map copy(p.map_type());
      t.kindResidual = residualOf(copy, {1}, {2});
      break;
    }
    case pb::TypeProto::kOpaqueType: {
      t.kind = TypeInfo::Kind::Opaque;
      t.opaqueDomain = p.opaque_type().domain();
      t.opaqueName = p.opaque_type().name();
      pb::TypeProto::Opaque copy(p.opaque_type());
      t.kindResidual = residualOf(copy, {1, 2}, {});
      break;
    }
    case pb::TypeProto::VALUE_NOT_SET: break;
  }
  t.denotation = p.denotation();
  if (!p.unknown_fields().empty() || (p.has_denotation() && p.denotation().empty())) {
    pb::TypeProto copy;
    if (p.has_denotation()) copy.set_denotation(p.denotation());
    copy.mutable_unknown_fields()->MergeFrom(p.unknown_fields());
    t.residual = residualOf(copy, {6}, {});
  }
  return t;
}

void typeToProto(const TypeInfo& t, pb::TypeProto& p) {
  parseResidual(p, t.residual);
  auto tensorKind = [&](auto* k) {
    parseResidual(*k, t.kindResidual);
    ONNXTOOL_SET_IF_DIFFERENT(*k, elem_type, t.elemType);
    if (t.shape.hasRank) shapeToProto(t.shape, *k->mutable_shape());
  };
  switch (t.kind) {
    case TypeInfo::Kind::Tensor: tensorKind(p.mutable_tensor_type()); break;
    case TypeInfo::Kind::SparseTensor: tensorKind(p.mutable_sparse_tensor_type()); break;
    case TypeInfo::Kind::Sequence: {
      auto* k = p.mutable_sequence_type();
      parseResidual(*k, t.kindResidual);
      if (t.inner) typeToProto(*t.inner, *k->mutable_elem_type());
      break;
    }
    case TypeInfo::Kind::Optional: {
      auto* k = p.mutable_optional_type();
      parseResidual(*k, t.kindResidual);
      if (t.inner) typeToProto(*t.inner, *k->mutable_elem_type());
      break;
    }
    case TypeInfo::Kind::Map: {
      auto* k = p.mutable_map_type();
      parseResidual(*k, t.kindResidual);
      ONNXTOOL_SET_IF_DIFFERENT(*k, key_type, t.elemType);
      if (t.inner) typeToProto(*t.inner, *k->mutable_value_type());
      break;
    }
    case TypeInfo::Kind::Opaque: {
      auto* k = p.mutable_opaque_type();
      parseResidual(*k, t.kindResidual);
      ONNXTOOL_SET_IF_DIFFERENT(*k, domain, t.opaqueDomain);
      ONNXTOOL_SET_IF_DIFFERENT(*k, name, t.opaqueName);
      break;
    }
    case TypeInfo::Kind::None: break;
  }
  ONNXTOOL_SET_IF_DIFFERENT(p, denotation, t.denotation);
}

// ---------------------------------------------------------------- tensors

namespace {

template <typename T>
void appendLE(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

/// Decodes the typed repeated fields into raw_data layout (see the TensorProto field comments
/// of the spec: which field holds which element type, sub-byte types packed per int32 entry).
Buffer decodeTyped(const pb::TensorProto& p, DType dt) {
  std::string out;
  switch (dt) {
    case DType::Float:
    case DType::Complex64:
      out.reserve(static_cast<size_t>(p.float_data_size()) * 4);
      for (float v : p.float_data()) appendLE(out, v);
      break;
    case DType::Double:
    case DType::Complex128:
      for (double v : p.double_data()) appendLE(out, v);
      break;
    case DType::Int64:
      for (int64_t v : p.int64_data()) appendLE(out, v);
      break;
    case DType::UInt32:
      for (uint64_t v : p.uint64_data()) appendLE(out, static_cast<uint32_t>(v));
      break;
    case DType::UInt64:
      for (uint64_t v : p.uint64_data()) appendLE(out, v);
      break;
    case DType::Int32:
      for (int32_t v : p.int32_data()) appendLE(out, v);
      break;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
      for (int32_t v : p.int32_data()) appendLE(out, static_cast<uint16_t>(v));
      break;
    case DType::Float6E2M3:
    case DType::Float6E3M2: {
      // one 6-bit value per int32 entry; raw layout packs them contiguously, low bits first
      uint64_t bitPos = 0;
      out.assign((static_cast<size_t>(p.int32_data_size()) * 6 + 7) / 8, '\0');
      for (int32_t v : p.int32_data()) {
        uint32_t bits = static_cast<uint32_t>(v) & 0x3fu;
        for (int b = 0; b < 6; ++b, ++bitPos)
          if (bits >> b & 1u) out[bitPos / 8] = static_cast<char>(out[bitPos / 8] | (1 << (bitPos % 8)));
      }
      break;
    }
    default:  // 8-bit types and packed 2/4-bit types: one byte per int32 entry
      out.reserve(static_cast<size_t>(p.int32_data_size()));
      for (int32_t v : p.int32_data()) out.push_back(static_cast<char>(static_cast<uint8_t>(v)));
      break;
  }
  return Buffer::fromString(std::move(out));
}

bool hasTypedData(const pb::TensorProto& p) {
  return p.float_data_size() || p.int32_data_size() || p.int64_data_size() || p.double_data_size() ||
         p.uint64_data_size();
}

}  // namespace

void fromProto(pb::TensorProto& p, Tensor& t, FromCtx& ctx, const std::string& where) {
  t.name = p.name();
  t.dataType = p.data_type();
  t.dims.assign(p.dims().begin(), p.dims().end());
  t.docString = p.doc_string();
  t.metadata = pairsFrom(p.metadata_props());
  bool isExternal = p.data_location() == pb::TensorProto::EXTERNAL;
  if (p.external_data_size() > 0 || isExternal) {
    ExternalDataInfo info;
    info.entries = pairsFrom(p.external_data());
    for (const auto& [k, v] : info.entries) {
      if (k == "location") {
        info.location = v;
      } else if (k == "offset" || k == "length") {
        int64_t n = -1;
        try {
          size_t used = 0;
          n = std::stoll(v, &used);
          if (used != v.size()) n = -1;
        } catch (...) {
          n = -1;
        }
        if (n < 0) {
          ctx.issues->push_back(fmt::format("{}: {} '{}': external data {} '{}' is not a non-negative integer",
                                            ctx.file, where, t.name, k, v));
          n = 0;
        }
        if (k == "offset") info.offset = n;
        else info.length = n;
      } else if (k == "checksum") {
        info.checksum = v;
      }
    }
    t.external = std::move(info);
  }
  if (static_cast<DType>(t.dataType) == DType::String) {
    t.strings.assign(p.string_data().begin(), p.string_data().end());
    t.storage = Tensor::Storage::Typed;
  } else if (isExternal) {
    t.storage = Tensor::Storage::External;
  } else if (p.has_raw_data()) {
    t.raw = Buffer::fromString(std::move(*p.mutable_raw_data()));
    t.storage = Tensor::Storage::Raw;
  } else if (hasTypedData(p)) {
    t.raw = decodeTyped(p, t.dtype());
    t.storage = Tensor::Storage::Typed;
  } else {
    t.storage = Tensor::Storage::None;
  }
  if (!plainTensor(p)) t.residual = residualOf(p, {2, 8, 12, 14}, {1, 6, 9, 13, 16});
  if (t.storage == Tensor::Storage::External && ctx.bindExternal) ctx.bindExternal(t, where);
}

void toProto(const Tensor& t, pb::TensorProto& p, ToCtx& ctx, bool isInitializer, bool writeRaw) {
  parseResidual(p, t.residual);
  for (int64_t d : t.dims) p.add_dims(d);
  ONNXTOOL_SET_IF_DIFFERENT(p, data_type, t.dataType);
  ONNXTOOL_SET_IF_DIFFERENT(p, name, t.name);
  ONNXTOOL_SET_IF_DIFFERENT(p, doc_string, t.docString);
  pairsTo(t.metadata, p.mutable_metadata_props());
  if (t.dtype() == DType::String) {
    for (const auto& s : t.strings) p.add_string_data(s);
    return;
  }
  bool external = ctx.placeExternal && ctx.placeExternal(t, p, isInitializer);
  if (external) {
    p.clear_float_data(); p.clear_int32_data(); p.clear_int64_data(); p.clear_double_data(); p.clear_uint64_data();
    p.set_data_location(pb::TensorProto::EXTERNAL);
    return;
  }
  if (p.data_location() == pb::TensorProto::EXTERNAL) p.clear_data_location();
  if (t.storage == Tensor::Storage::Typed) return;  // typed fields travel in the residual
  p.clear_float_data(); p.clear_int32_data(); p.clear_int64_data(); p.clear_double_data(); p.clear_uint64_data();
  if (t.storage == Tensor::Storage::None && t.raw.empty()) return;
  if (writeRaw) p.set_raw_data(t.raw.data(), t.raw.size());
}

// ---------------------------------------------------------------- graphs, nodes, attributes

namespace {

void graphFromProto(pb::GraphProto& p, Graph& g, FromCtx& ctx, const std::string& where, bool mainGraph = false);
void graphToProto(const Graph& g, pb::GraphProto& p, ToCtx& ctx, bool topLevel);

std::shared_ptr<SparseTensor> sparseFromProto(pb::SparseTensorProto& p, FromCtx& ctx, const std::string& where) {
  auto s = std::make_shared<SparseTensor>();
  s->hasValues = p.has_values();
  s->hasIndices = p.has_indices();
  if (p.has_values()) fromProto(*p.mutable_values(), s->values, ctx, where);
  if (p.has_indices()) fromProto(*p.mutable_indices(), s->indices, ctx, where);
  s->dims.assign(p.dims().begin(), p.dims().end());
  if (!p.unknown_fields().empty()) s->residual = residualOf(p, {}, {1, 2, 3});
  return s;
}

void sparseToProto(const SparseTensor& s, pb::SparseTensorProto& p, ToCtx& ctx, bool isInitializer) {
  parseResidual(p, s.residual);
  if (s.hasValues) toProto(s.values, *p.mutable_values(), ctx, isInitializer);
  if (s.hasIndices) toProto(s.indices, *p.mutable_indices(), ctx, isInitializer);
  for (int64_t d : s.dims) p.add_dims(d);
}

int valueFieldOf(AttrType t) {
  switch (t) {
    case AttrType::Float: return 2;
    case AttrType::Int: return 3;
    case AttrType::String: return 4;
    default: return -1;
  }
}

Attribute attrFromProto(pb::AttributeProto& p, FromCtx& ctx, Graph* owner, Node* node, const std::string& where) {
  Attribute a;
  a.name = p.name();
  a.type = static_cast<AttrType>(p.type());
  a.f = p.f();
  a.i = p.i();
  a.s = p.s();
  a.refAttrName = p.ref_attr_name();
  a.docString = p.doc_string();
  std::string here = fmt::format("{} attribute '{}'", where, a.name);
  if (p.has_t()) {
    a.t = std::make_shared<Tensor>();
    fromProto(*p.mutable_t(), *a.t, ctx, here);
  }
  if (p.has_g()) {
    a.g = std::make_shared<Graph>(owner, node);
    graphFromProto(*p.mutable_g(), *a.g, ctx, here);
  }
  if (p.has_sparse_tensor()) a.sparseTensor = sparseFromProto(*p.mutable_sparse_tensor(), ctx, here);
  if (p.has_tp()) a.tp = std::make_shared<TypeInfo>(typeFromProto(p.tp()));
  a.floats.assign(p.floats().begin(), p.floats().end());
  a.ints.assign(p.ints().begin(), p.ints().end());
  a.strings.assign(p.strings().begin(), p.strings().end());
  for (auto& tp : *p.mutable_tensors()) {
    auto t = std::make_shared<Tensor>();
    fromProto(tp, *t, ctx, here);
    a.tensors.push_back(std::move(t));
  }
  for (auto& gp : *p.mutable_graphs()) {
    auto g = std::make_shared<Graph>(owner, node);
    graphFromProto(gp, *g, ctx, here);
    a.graphs.push_back(std::move(g));
  }
  for (auto& sp : *p.mutable_sparse_tensors()) a.sparseTensors.push_back(sparseFromProto(sp, ctx, here));
  for (const auto& tp : p.type_protos()) a.typeProtos.push_back(typeFromProto(tp));

  // Which value fields are set, against the declared type: the IR keeps one; record conflicts.
  int setCount = 0;
  setCount += p.has_f() + p.has_i() + p.has_s() + p.has_t() + p.has_g() + p.has_sparse_tensor() + p.has_tp();
  setCount += (p.floats_size() > 0) + (p.ints_size() > 0) + (p.strings_size() > 0) + (p.tensors_size() > 0) +
              (p.graphs_size() > 0) + (p.sparse_tensors_size() > 0) + (p.type_protos_size() > 0);
  if (setCount > 1)
    ctx.issues->push_back(fmt::format("{}: {}: more than one value field is set, expected only the field of its type", ctx.file, here));

  int valueField = a.refAttrName.empty() ? valueFieldOf(a.type) : -1;
  std::initializer_list<int> implied1 = {2};
  std::initializer_list<int> implied2 = {3};
  std::initializer_list<int> implied3 = {4};
  std::initializer_list<int> none = {};
  const auto& implied = valueField == 2 ? implied1 : valueField == 3 ? implied2 : valueField == 4 ? implied3 : none;
  if (!plainAttribute(p, valueField))
    a.residual = residualOf(p, {1, 21, 13, 20, 2, 3, 4}, {5, 6, 22, 14, 7, 8, 9, 10, 11, 23, 15}, implied);
  return a;
}

void attrToProto(const Attribute& a, pb::AttributeProto& p, ToCtx& ctx) {
  parseResidual(p, a.residual);
  ONNXTOOL_SET_IF_DIFFERENT(p, name, a.name);
  ONNXTOOL_SET_IF_DIFFERENT(p, ref_attr_name, a.refAttrName);
  ONNXTOOL_SET_IF_DIFFERENT(p, doc_string, a.docString);
  if (p.type() != static_cast<pb::AttributeProto::AttributeType>(a.type))
    p.set_type(static_cast<pb::AttributeProto::AttributeType>(a.type));
  int valueField = a.refAttrName.empty() ? valueFieldOf(a.type) : -1;
  if (valueField == 2) p.set_f(a.f);
  else ONNXTOOL_SET_IF_DIFFERENT(p, f, a.f);
  if (valueField == 3) p.set_i(a.i);
  else ONNXTOOL_SET_IF_DIFFERENT(p, i, a.i);
  if (valueField == 4) p.set_s(a.s);
  else ONNXTOOL_SET_IF_DIFFERENT(p, s, a.s);
  if (a.t) toProto(*a.t, *p.mutable_t(), ctx, false);
  if (a.g) graphToProto(*a.g, *p.mutable_g(), ctx, false);
  if (a.sparseTensor) sparseToProto(*a.sparseTensor, *p.mutable_sparse_tensor(), ctx, false);
  if (a.tp) typeToProto(*a.tp, *p.mutable_tp());
  for (float v : a.floats) p.add_floats(v);
  for (int64_t v : a.ints) p.add_ints(v);
  for (const auto& v : a.strings) p.add_strings(v);
  for (const auto& t : a.tensors) toProto(*t, *p.add_tensors(), ctx, false);
  for (const auto& g : a.graphs) graphToProto(*g, *p.add_graphs(), ctx, false);
  for (const auto& s : a.sparseTensors) sparseToProto(*s, *p.add_sparse_tensors(), ctx, false);
  for (const auto& t : a.typeProtos) typeToProto(t, *p.add_type_protos());
}

ValueInfoEntry entryFrom(pb::ValueInfoProto& p, Value* v, bool first) {
  ValueInfoEntry e;
  e.value = v;
  e.docString = p.doc_string();
  e.metadata = pairsFrom(p.metadata_props());
  e.hasType = p.has_type();
  if (p.has_type()) {
    TypeInfo t = typeFromProto(p.type());
    if (first || v->type().isNone()) {
      v->setType(std::move(t));
    } else if (!(t == v->type())) {
      e.typeOverride = std::move(t);
    }
  }
  // name is implied by the value
  if (!plainValueInfo(p)) e.residual = residualOf(p, {3}, {2, 4}, {1});
  return e;
}

void entryTo(const ValueInfoEntry& e, pb::ValueInfoProto& p) {
  parseResidual(p, e.residual);
  p.set_name(e.value ? e.value->name() : std::string());
  ONNXTOOL_SET_IF_DIFFERENT(p, doc_string, e.docString);
  if (e.hasType && !e.type().isNone()) typeToProto(e.type(), *p.mutable_type());
  pairsTo(e.metadata, p.mutable_metadata_props());
}

/// Resolves a name used as a node input (or graph output): this graph, then enclosing graphs;
/// an unknown name becomes an undefined value of this graph (check reports it).
Value* resolveUse(Graph& g, const std::string& n) {
  if (n.empty()) return nullptr;
  if (Value* v = g.find(n)) return v;
  return g.createValue(n);
}

void graphFromProto(pb::GraphProto& p, Graph& g, FromCtx& ctx, const std::string& where, bool mainGraph) {
  g.name = p.name();
  g.docString = p.doc_string();
  g.metadata = pairsFrom(p.metadata_props());
  std::string here = where.empty() ? fmt::format("graph '{}'", g.name) : fmt::format("{} graph '{}'", where, g.name);

  // Initializers first: they define values; graph inputs may name them (IR < 4 style).
  size_t initIndex = 0;
  for (auto& tp : *p.mutable_initializer()) {
    Tensor t;
    fromProto(tp, t, ctx, "initializer");
    if (mainGraph && initIndex < ctx.mainGraphRaw.size() && ctx.mainGraphRaw[initIndex] &&
        t.storage != Tensor::Storage::External && t.dtype() != DType::String) {
      t.raw = std::move(*ctx.mainGraphRaw[initIndex]);
      t.storage = Tensor::Storage::Raw;
    }
    ++initIndex;
    bool dup = g.findLocal(t.name) != nullptr;
    if (dup) ctx.issues->push_back(fmt::format("{}: {}: initializer '{}' is defined more than once, expected unique initializer names", ctx.file, here, t.name));
    g.addInitializer(std::move(t), dup);
  }
  for (auto& sp : *p.mutable_sparse_initializer()) {
    auto s = sparseFromProto(sp, ctx, "sparse initializer");
    bool dup = g.findLocal(s->values.name) != nullptr;
    if (dup)
      ctx.issues->push_back(
          fmt::format("{}: {}: initializer '{}' is defined more than once, expected unique initializer names", ctx.file, here, s->values.name));
    g.addSparseInitializer(std::move(*s), dup);
  }
  bool firstType = true;
  for (auto& vp : *p.mutable_input()) {
    Value* v = g.findLocal(vp.name());
    bool isInit = v && (v->initializer() || v->sparseInitializer()) && !v->isGraphInput();
    if (!v || !isInit) {
      if (v) ctx.issues->push_back(fmt::format("{}: {}: graph input '{}' is listed more than once, expected unique input names", ctx.file, here, vp.name()));
      v = g.createValue(vp.name(), v != nullptr);
    }
    g.addInput(v);
    g.inputs().back() = entryFrom(vp, v, firstType);
    g.inputs().back().value = v;
  }
  // Nodes in file order; outputs define values. A use of a value defined by a later node
  // (invalid order) binds to a placeholder that the later definition adopts.
  size_t nodeIndex = 0;  // for ctx.mainGraphNodeRaw
  for (auto& np : *p.mutable_node()) {
    std::vector<Value*> ins;
    ins.reserve(static_cast<size_t>(np.input_size()));
    for (const auto& in : np.input()) ins.push_back(resolveUse(g, in));
    std::vector<std::string> outs(np.output().begin(), np.output().end());
    // An output name already defined (SSA violation) gets a distinct value; check reports it.
    for (const auto& o : outs) {
      Value* existing = o.empty() ? nullptr : g.findLocal(o);
      if (existing && existing->isDefined())
        ctx.issues->push_back(fmt::format("{}: node '{}' ({}): output '{}' is already defined, each value must have one producer",
                                          ctx.file, np.name(), np.op_type(), o));
    }
    Node* n = g.addNode(np.op_type(), ins, outs, np.domain());
    n->name = np.name();
    n->overload = np.overload();
    n->docString = np.doc_string();
    n->metadata = pairsFrom(np.metadata_props());
    std::string nodeWhere = fmt::format("node '{}' ({})", n->name, n->opType);
    for (auto& ap : *np.mutable_attribute()) {
      n->attributes.push_back(attrFromProto(ap, ctx, &g, n, nodeWhere));
      // A tensor attribute whose raw_data was cut before parsing (wire_splice.h) borrows it.
      Attribute& a = n->attributes.back();
      auto cut = mainGraph ? ctx.mainGraphNodeRaw.find({nodeIndex, n->attributes.size() - 1}) : ctx.mainGraphNodeRaw.end();
      if (cut != ctx.mainGraphNodeRaw.end() && a.t && a.t->storage != Tensor::Storage::External && a.t->dtype() != DType::String) {
        a.t->raw = cut->second;
        a.t->storage = Tensor::Storage::Raw;
      }
    }
    ++nodeIndex;
    if (!plainNode(np)) n->residual = residualOf(np, {3, 4, 7, 8, 6}, {1, 2, 5, 9});
  }
  for (auto& vp : *p.mutable_output()) {
    Value* v = resolveUse(g, vp.name());
    if (!v) v = g.createValue("", true);
    g.addOutput(v);
    g.outputs().back() = entryFrom(vp, v, false);
    g.outputs().back().value = v;
  }
  for (auto& vp : *p.mutable_value_info()) {
    Value* v = resolveUse(g, vp.name());
    if (!v) v = g.createValue("", true);
    ValueInfoEntry e = entryFrom(vp, v, false);
    e.value = v;
    g.valueInfos().push_back(std::move(e));
  }
  if (!plainGraph(p)) g.residual = residualOf(p, {2, 10}, {1, 5, 15, 11, 12, 13, 16});
}

void graphToProto(const Graph& g, pb::GraphProto& p, ToCtx& ctx, bool topLevel) {
  parseResidual(p, g.residual);
  for (const auto& n : g.nodes()) {
    auto* np = p.add_node();
    parseResidual(*np, n->residual);
    for (Value* v : n->inputs()) np->add_input(v ? v->name() : std::string());
    for (Value* v : n->outputs()) np->add_output(v ? v->name() : std::string());
    ONNXTOOL_SET_IF_DIFFERENT(*np, name, n->name);
    ONNXTOOL_SET_IF_DIFFERENT(*np, op_type, n->opType);
    ONNXTOOL_SET_IF_DIFFERENT(*np, domain, n->domain);
    ONNXTOOL_SET_IF_DIFFERENT(*np, overload, n->overload);
    ONNXTOOL_SET_IF_DIFFERENT(*np, doc_string, n->docString);
    for (const Attribute& a : n->attributes) attrToProto(a, *np->add_attribute(), ctx);
    pairsTo(n->metadata, np->mutable_metadata_props());
  }
  ONNXTOOL_SET_IF_DIFFERENT(p, name, g.name);
  for (Value* v : g.initializers())
    toProto(*v->initializer(), *p.add_initializer(), ctx, true, !(topLevel && ctx.deferTopLevelRaw));
  for (Value* v : g.sparseInitializers()) sparseToProto(*v->sparseInitializer(), *p.add_sparse_initializer(), ctx, true);
  ONNXTOOL_SET_IF_DIFFERENT(p, doc_string, g.docString);
  for (const auto& e : g.inputs()) entryTo(e, *p.add_input());
  for (const auto& e : g.outputs()) entryTo(e, *p.add_output());
  for (const auto& e : g.valueInfos()) entryTo(e, *p.add_value_info());
  pairsTo(g.metadata, p.mutable_metadata_props());
}

OpsetImport opsetFrom(pb::OperatorSetIdProto& p) {
  OpsetImport o;
  o.domain = p.domain();
  o.version = p.version();
  if (plainOpset(p)) return o;
  if (p.unknown_fields().empty()) {
    // Only a present default, as onnx.helper.make_opsetid("", v) writes domain "": the residual
    // records the presence without reflection.
    pb::OperatorSetIdProto r;
    if (p.has_domain()) r.set_domain(p.domain());
    if (p.has_version()) r.set_version(p.version());
    o.residual = r.SerializeAsString();
  } else {
    o.residual = residualOf(p, {1, 2}, {});
  }
  return o;
}

void opsetTo(const OpsetImport& o, pb::OperatorSetIdProto& p) {
  parseResidual(p, o.residual);
  ONNXTOOL_SET_IF_DIFFERENT(p, domain, o.domain);
  ONNXTOOL_SET_IF_DIFFERENT(p, version, o.version);
}

std::unique_ptr<Function> functionFrom(pb::FunctionProto& p, FromCtx& ctx) {
  auto f = std::make_unique<Function>();
  f->name = p.name();
  f->domain = p.domain();
  f->overload = p.overload();
  f->docString = p.doc_string();
  f->attributeNames.assign(p.attribute().begin(), p.attribute().end());
  for (auto& o : *p.mutable_opset_import()) f->opsetImports.push_back(opsetFrom(o));
  f->metadata = pairsFrom(p.metadata_props());
  f->body = std::make_unique<Graph>();
  Graph& g = *f->body;
  g.name = f->name;
  std::string where = fmt::format("function '{}::{}'", f->domain, f->name);
  for (auto& ap : *p.mutable_attribute_proto()) f->attributeDefaults.push_back(attrFromProto(ap, ctx, &g, nullptr, where));
  for (const auto& in : p.input()) {
    Value* v = g.findLocal(in);
    if (v) ctx.issues->push_back(fmt::format("{}: {}: input '{}' is listed more than once, expected unique input names", ctx.file, where, in));
    v = g.createValue(in, v != nullptr);
    g.addInput(v);
  }
  // The body as a graph message, so node conversion is shared.
  pb::GraphProto gp;
  gp.mutable_node()->Swap(p.mutable_node());
  for (auto& vi : *p.mutable_value_info()) *gp.add_value_info() = std::move(vi);
  for (const auto& out : p.output()) gp.add_output()->set_name(out);
  graphFromProto(gp, g, ctx, where);
  // graphFromProto appended outputs with empty ValueInfo extras; function outputs are names only.
  if (!plainFunction(p)) f->residual = residualOf(p, {1, 8, 10, 13}, {4, 5, 6, 11, 7, 9, 12, 14});
  return f;
}

void functionTo(const Function& f, pb::FunctionProto& p, ToCtx& ctx) {
  parseResidual(p, f.residual);
  ONNXTOOL_SET_IF_DIFFERENT(p, name, f.name);
  for (const auto& e : f.body->inputs()) p.add_input(e.value->name());
  for (const auto& e : f.body->outputs()) p.add_output(e.value ? e.value->name() : std::string());
  for (const auto& a : f.attributeNames) p.add_attribute(a);
  for (const auto& a : f.attributeDefaults) attrToProto(a, *p.add_attribute_proto(), ctx);
  pb::GraphProto gp;
  graphToProto(*f.body, gp, ctx, false);
  p.mutable_node()->Swap(gp.mutable_node());
  ONNXTOOL_SET_IF_DIFFERENT(p, doc_string, f.docString);
  for (const auto& o : f.opsetImports) opsetTo(o, *p.add_opset_import());
  ONNXTOOL_SET_IF_DIFFERENT(p, domain, f.domain);
  ONNXTOOL_SET_IF_DIFFERENT(p, overload, f.overload);
  for (auto& vi : *gp.mutable_value_info()) *p.add_value_info() = std::move(vi);
  pairsTo(f.metadata, p.mutable_metadata_props());
}

}  // namespace

void fromProto(pb::ModelProto& p, Model& m, FromCtx& ctx) {
  m.irVersion = p.ir_version();
  for (auto& o : *p.mutable_opset_import()) m.opsetImports.push_back(opsetFrom(o));
  m.producerName = p.producer_name();
  m.producerVersion = p.producer_version();
  m.domain = p.domain();
  m.modelVersion = p.model_version();
  m.docString = p.doc_string();
  m.metadata = pairsFrom(p.metadata_props());
  if (p.has_graph()) {
    m.graph = std::make_unique<Graph>();
    graphFromProto(*p.mutable_graph(), *m.graph, ctx, "", true);
  }
  for (auto& f : *p.mutable_functions()) m.functions.push_back(functionFrom(f, ctx));
  if (!plainModel(p)) m.residual = residualOf(p, {1, 2, 3, 4, 5, 6}, {8, 7, 14, 25});
}

void toProto(const Model& m, pb::ModelProto& p, ToCtx& ctx) {
  parseResidual(p, m.residual);
  ONNXTOOL_SET_IF_DIFFERENT(p, ir_version, m.irVersion);
  for (const auto& o : m.opsetImports) opsetTo(o, *p.add_opset_import());
  ONNXTOOL_SET_IF_DIFFERENT(p, producer_name, m.producerName);
  ONNXTOOL_SET_IF_DIFFERENT(p, producer_version, m.producerVersion);
  ONNXTOOL_SET_IF_DIFFERENT(p, domain, m.domain);
  ONNXTOOL_SET_IF_DIFFERENT(p, model_version, m.modelVersion);
  ONNXTOOL_SET_IF_DIFFERENT(p, doc_string, m.docString);
  if (m.graph) graphToProto(*m.graph, *p.mutable_graph(), ctx, true);
  pairsTo(m.metadata, p.mutable_metadata_props());
  for (const auto& f : m.functions) functionTo(*f, *p.add_functions(), ctx);
}

}  // namespace onnxtool::protoconv
