// tensor_files.cpp: .pb, .npy, .npz and JSON tensor files.
#include "formats/tensor_files.h"

#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/atomic_file.h"
#include "formats/model_io.h"
#include "formats/onnx.pb.h"
#include "formats/onnx_data.pb.h"
#include "formats/proto_convert.h"
#include "formats/value_files.h"
#include "lib/error.h"

namespace onnxtool {

namespace fs = std::filesystem;

namespace {

std::string lowerExt(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// ---------------------------------------------------------------- npy

struct NpyType {
  const char* descr;  // without the byte-order character
  DType dtype;
};
constexpr NpyType kNpyTypes[] = {
    {"f4", DType::Float},   {"f8", DType::Double},  {"f2", DType::Float16}, {"i1", DType::Int8},
    {"i2", DType::Int16},   {"i4", DType::Int32},   {"i8", DType::Int64},   {"u1", DType::UInt8},
    {"u2", DType::UInt16},  {"u4", DType::UInt32},  {"u8", DType::UInt64},  {"b1", DType::Bool},
    {"c8", DType::Complex64}, {"c16", DType::Complex128},
};

/// Value of key `key` in the npy header dict (a Python literal), as raw text.
std::string headerField(const std::string& header, const std::string& key, const std::string& dn) {
  auto k = header.find("'" + key + "'");
  if (k == std::string::npos) fail(ErrorKind::InvalidInput, "{}: .npy header has no '{}'", dn, key);
  auto colon = header.find(':', k);
  if (colon == std::string::npos) fail(ErrorKind::InvalidInput, "{}: malformed .npy header", dn);
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) fail(ErrorKind::InvalidInput, "{}: malformed .npy header", dn);
  char open = header[start];
  size_t end;
  if (open == '(') end = header.find(')', start) + 1;
  else if (open == '\'' || open == '"') end = header.find(open, start + 1) + 1;
  else end = header.find_first_of(",}", start);
  if (end == std::string::npos || end == 0 || end <= start) fail(ErrorKind::InvalidInput, "{}: malformed .npy header", dn);
  return header.substr(start, end - start);
}

std::vector<int64_t> parseShapeTuple(const std::string& s, const std::string& dn) {
  std::vector<int64_t> dims;
  size_t i = 1;
  while (i < s.size()) {
    size_t j = s.find_first_of(",)", i);
    std::string tok = s.substr(i, j - i);
    tok.erase(0, tok.find_first_not_of(' '));
    tok.erase(tok.find_last_not_of(' ') + 1);
    if (!tok.empty()) {
      try {
        size_t used = 0;
        long long v = std::stoll(tok, &used);
        if (used != tok.size() || v < 0) throw std::invalid_argument(tok);
        dims.push_back(v);
      } catch (...) {
        fail(ErrorKind::InvalidInput, "{}: bad dimension '{}' in .npy shape", dn, tok);
      }
    }
    if (j == std::string::npos || s[j] == ')') break;
    i = j + 1;
  }
  return dims;
}

std::string npyDescr(DType t) {
  for (const auto& e : kNpyTypes)
    if (e.dtype == t) return (t == DType::Int8 || t == DType::UInt8 || t == DType::Bool ? "|" : "<") + std::string(e.descr);
  fail(ErrorKind::Unsupported, "{} tensors cannot be written as .npy (numpy has no such type); use .pb", dtypeName(t));
}

/// Reads raw zip members: name -> bytes (stored or deflated).
std::map<std::string, std::string> readZip(const std::string& bytes, const std::string& dn) {
  std::map<std::string, std::string> out;
  auto u16 = [&](size_t o) -> uint32_t {
    if (o + 2 > bytes.size()) fail(ErrorKind::InvalidInput, "{}: truncated .npz archive", dn);
    return static_cast<uint8_t>(bytes[o]) | static_cast<uint8_t>(bytes[o + 1]) << 8;
  };
  auto u32 = [&](size_t o) -> uint64_t { return u16(o) | static_cast<uint64_t>(u16(o + 2)) << 16; };
  // End of central directory: search backwards for its signature.
  if (bytes.size() < 22) fail(ErrorKind::InvalidInput, "{}: not a .npz (zip) archive", dn);
  size_t eocd = std::string::npos;
  for (size_t i = bytes.size() - 22 + 1; i-- > 0 && bytes.size() - i <= 22 + 65535;)
    if (u32(i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) fail(ErrorKind::InvalidInput, "{}: not a .npz (zip) archive", dn);
  uint64_t count = u16(eocd + 10);
  uint64_t cdOffset = u32(eocd + 16);
  size_t p = static_cast<size_t>(cdOffset);
  for (uint64_t k = 0; k < count; ++k) {
    if (u32(p) != 0x02014b50) fail(ErrorKind::InvalidInput, "{}: corrupt zip central directory", dn);
    uint32_t method = u16(p + 10);
    uint64_t csize = u32(p + 20), usize = u32(p + 24);
    uint32_t nlen = u16(p + 28), xlen = u16(p + 30), clen = u16(p + 32);
    uint64_t local = u32(p + 42);
    if (p + 46 + nlen > bytes.size()) fail(ErrorKind::InvalidInput, "{}: truncated .npz archive", dn);
    std::string name = bytes.substr(p + 46, nlen);
    if (csize == 0xffffffffu || usize == 0xffffffffu || local == 0xffffffffu)
      fail(ErrorKind::Unsupported, "{}: zip64 archives are not supported", dn);
    p += 46 + nlen + xlen + clen;
    size_t lp = static_cast<size_t>(local);
    if (u32(lp) != 0x04034b50) fail(ErrorKind::InvalidInput, "{}: corrupt zip entry '{}'", dn, name);
    size_t data = lp + 30 + u16(lp + 26) + u16(lp + 28);
    if (data > bytes.size() || csize > bytes.size() - data) fail(ErrorKind::InvalidInput, "{}: truncated zip entry '{}'", dn, name);
    if (usize > (uint64_t{1} << 36)) fail(ErrorKind::InvalidInput, "{}: zip entry '{}' is too large", dn, name);
    if (method == 0) {
      out[name] = bytes.substr(data, static_cast<size_t>(csize));
    } else if (method == 8) {
      std::string inflated(static_cast<size_t>(usize), '\0');
      z_stream zs{};
      if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(ErrorKind::Internal, "zlib init failed");
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + data));
      zs.avail_in = static_cast<uInt>(csize);
      zs.next_out = reinterpret_cast<Bytef*>(inflated.data());
      zs.avail_out = static_cast<uInt>(usize);
      int rc = inflate(&zs, Z_FINISH);
      inflateEnd(&zs);
      if (rc != Z_STREAM_END || zs.total_out != usize) fail(ErrorKind::InvalidInput, "{}: corrupt deflated entry '{}'", dn, name);
      out[name] = std::move(inflated);
    } else {
      fail(ErrorKind::Unsupported, "{}: zip compression method {} of entry '{}' is not supported", dn, method, name);
    }
  }
  return out;
}

// ---------------------------------------------------------------- json

using json = nlohmann::json;

void jsonShape(const json& j, std::vector<int64_t>& dims, size_t depth, const std::string& dn) {
  if (!j.is_array()) return;
  if (dims.size() == depth) dims.push_back(static_cast<int64_t>(j.size()));
  else if (dims[depth] != static_cast<int64_t>(j.size()))
    fail(ErrorKind::InvalidInput, "{}: ragged nested lists (dimension {} has sizes {} and {})", dn, depth, dims[depth], j.size());
  if (!j.empty()) jsonShape(j[0], dims, depth + 1, dn);
}

void jsonFlatten(const json& j, std::vector<const json*>& out, size_t depth, size_t rank, const std::string& dn) {
  if (depth == rank) {
    if (j.is_array()) fail(ErrorKind::InvalidInput, "{}: ragged nested lists", dn);
    out.push_back(&j);
    return;
  }
  if (!j.is_array()) fail(ErrorKind::InvalidInput, "{}: ragged nested lists", dn);
  for (const auto& e : j) jsonFlatten(e, out, depth + 1, rank, dn);
}

double jsonNumber(const json& j, const std::string& dn) {
  if (j.is_number()) return j.get<double>();
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    if (s == "nan" || s == "NaN") return NAN;
    if (s == "inf" || s == "Infinity") return INFINITY;
    if (s == "-inf" || s == "-Infinity") return -INFINITY;
  }
  fail(ErrorKind::InvalidInput, "{}: '{}' is not a number", dn, j.dump());
}

template <typename T>
void putElement(Tensor& t, size_t i, double v) {
  T x = static_cast<T>(v);
  std::memcpy(t.raw.mutableData() + i * sizeof(T), &x, sizeof(T));
}

Tensor jsonTensor(const json& data, DType dtype, const std::string& dn) {
  std::vector<int64_t> dims;
  jsonShape(data, dims, 0, dn);
  std::vector<const json*> flat;
  jsonFlatten(data, flat, 0, dims.size(), dn);
  Tensor t;
  t.dataType = static_cast<int32_t>(dtype);
  t.dims = dims;
  if (dtype == DType::String) {
    for (const json* e : flat) {
      if (!e->is_string()) fail(ErrorKind::InvalidInput, "{}: expected strings", dn);
      t.strings.push_back(e->get<std::string>());
    }
    t.storage = Tensor::Storage::Raw;
    return t;
  }
  auto bytes = t.expectedBytes();
  if (!bytes || dtypeBits(dtype) < 8) fail(ErrorKind::Unsupported, "{}: JSON tensors of {} are not supported", dn, dtypeName(dtype));
  t.setRaw(Buffer::zeros(static_cast<size_t>(*bytes)));
  for (size_t i = 0; i < flat.size(); ++i) {
    double v = jsonNumber(*flat[i], dn);
    switch (dtype) {
      case DType::Float: putElement<float>(t, i, v); break;
      case DType::Double: putElement<double>(t, i, v); break;
      case DType::Float16: putElement<uint16_t>(t, i, floatToHalf(static_cast<float>(v))); break;
      case DType::BFloat16: putElement<uint16_t>(t, i, floatToBfloat16(static_cast<float>(v))); break;
      case DType::Int8: putElement<int8_t>(t, i, v); break;
      case DType::Int16: putElement<int16_t>(t, i, v); break;
      case DType::Int32: putElement<int32_t>(t, i, v); break;
      case DType::Int64:
        if (flat[i]->is_number_integer()) {
          int64_t x = flat[i]->get<int64_t>();
          std::memcpy(t.raw.mutableData() + i * 8, &x, 8);
        } else {
          putElement<int64_t>(t, i, v);
        }
        break;
      case DType::UInt8: putElement<uint8_t>(t, i, v); break;
      case DType::UInt16: putElement<uint16_t>(t, i, v); break;
      case DType::UInt32: putElement<uint32_t>(t, i, v); break;
      case DType::UInt64:
        if (flat[i]->is_number_unsigned()) {
          uint64_t x = flat[i]->get<uint64_t>();
          std::memcpy(t.raw.mutableData() + i * 8, &x, 8);
        } else {
          putElement<uint64_t>(t, i, v);
        }
        break;
      case DType::Bool: putElement<uint8_t>(t, i, v != 0 ? 1 : 0); break;
      default: fail(ErrorKind::Unsupported, "{}: JSON tensors of {} are not supported", dn, dtypeName(dtype));
    }
  }
  return t;
}

json jsonElement(const TensorData& t, size_t i) {
  if (t.dtype() == DType::String) return t.strings[i];
  if (t.dtype() == DType::Bool) return t.raw.data()[i] != 0;
  if (t.dtype() == DType::Int64) return t.elementAsInt(i);
  if (t.dtype() == DType::UInt64) {
    uint64_t v;
    std::memcpy(&v, t.raw.data() + 8 * i, 8);
    return v;
  }
  double v = t.elementAsDouble(i);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (dtypeIsInteger(t.dtype())) return static_cast<int64_t>(v);
  return v;
}

json jsonNest(const TensorData& t, size_t depth, size_t& index) {
  if (depth == t.dims.size()) return jsonElement(t, index++);
  json a = json::array();
  for (int64_t k = 0; k < t.dims[depth]; ++k) a.push_back(jsonNest(t, depth + 1, index));
  return a;
}

json valueJson(const RtValue& v, const std::string& name) {
  json j;
  if (!name.empty()) j["name"] = name;
  switch (v.kind) {
    case RtValue::Kind::Tensor: {
      const TensorData& t = hostTensor(*v.tensor, "tensor '" + name + "'");
      if (t.dtype() != DType::String && dtypeBits(t.dtype()) < 8)
        fail(ErrorKind::Unsupported, "tensor '{}': {} cannot be written as JSON; use .pb", name, dtypeName(t.dtype()));
      if (t.dtype() == DType::Complex64 || t.dtype() == DType::Complex128 || (dtypeIsFloat(t.dtype()) && dtypeBits(t.dtype()) == 8))
        fail(ErrorKind::Unsupported, "tensor '{}': {} cannot be written as JSON; use .pb", name, dtypeName(t.dtype()));
      j["dtype"] = std::string(dtypeName(t.dtype()));
      j["shape"] = t.dims;
      size_t idx = 0;
      j["data"] = jsonNest(t, 0, idx);
      return j;
    }
    case RtValue::Kind::Sequence: {
      json items = json::array();
      for (const auto& e : v.elements) items.push_back(valueJson(e, ""));
      j["sequence"] = items;
      return j;
    }
    case RtValue::Kind::Optional:
      j["optional"] = v.elements.empty() ? json(nullptr) : valueJson(v.elements[0], "");
      return j;
    default: fail(ErrorKind::Unsupported, "value '{}': maps cannot be written as JSON", name);
  }
}

void fillProto(const RtValue& v, pb::SequenceProto& p);

void tensorProto(const RtTensor& t, pb::TensorProto& p) {
  protoconv::ToCtx ctx;
  Tensor copy(hostTensor(t, "tensor"));
  protoconv::toProto(copy, p, ctx, false);
}

void fillOptional(const RtValue& v, pb::OptionalProto& p) {
  if (v.elements.empty()) {
    p.set_elem_type(v.elemTypeHint);
    return;
  }
  const RtValue& e = v.elements[0];
  switch (e.kind) {
    case RtValue::Kind::Tensor: p.set_elem_type(pb::OptionalProto::TENSOR); tensorProto(*e.tensor, *p.mutable_tensor_value()); break;
    case RtValue::Kind::Sequence: p.set_elem_type(pb::OptionalProto::SEQUENCE); fillProto(e, *p.mutable_sequence_value()); break;
    case RtValue::Kind::Optional: p.set_elem_type(pb::OptionalProto::OPTIONAL); fillOptional(e, *p.mutable_optional_value()); break;
    default: fail(ErrorKind::Unsupported, "optional of map cannot be written");
  }
}

void fillProto(const RtValue& v, pb::SequenceProto& p) {
  p.set_elem_type(v.elements.empty() ? v.elemTypeHint : pb::SequenceProto::TENSOR);
  for (const auto& e : v.elements) {
    switch (e.kind) {
      case RtValue::Kind::Tensor: tensorProto(*e.tensor, *p.add_tensor_values()); break;
      case RtValue::Kind::Sequence: p.set_elem_type(pb::SequenceProto::SEQUENCE); fillProto(e, *p.add_sequence_values()); break;
      case RtValue::Kind::Optional: p.set_elem_type(pb::SequenceProto::OPTIONAL); fillOptional(e, *p.add_optional_values()); break;
      case RtValue::Kind::Map: {
        p.set_elem_type(pb::SequenceProto::MAP);
        auto* m = p.add_map_values();
        const TensorData& keys = hostTensor(*e.mapKeys, "map keys");
        m->set_key_type(keys.dataType);
        if (keys.dtype() == DType::String) {
          for (const auto& k : keys.strings) m->add_string_keys(k);
        } else {
          for (int64_t k : keys.toInt64s()) m->add_keys(k);
        }
        RtValue vals = RtValue::sequence(e.elements);
        fillProto(vals, *m->mutable_values());
        break;
      }
      default: break;
    }
  }
}

}  // namespace

TensorFileFormat tensorFileFormat(const std::string& path) {
  std::string e = lowerExt(path);
  if (e == ".pb") return TensorFileFormat::Pb;
  if (e == ".npy") return TensorFileFormat::Npy;
  if (e == ".json") return TensorFileFormat::Json;
  fail(ErrorKind::InvalidInput, "{}: unknown tensor file type '{}', expected .pb, .npy, .npz or .json", path, e);
}

const char* tensorFileExtension(TensorFileFormat f) {
  switch (f) {
    case TensorFileFormat::Pb: return ".pb";
    case TensorFileFormat::Npy: return ".npy";
    case TensorFileFormat::Json: return ".json";
  }
  return "";
}

Tensor parseNpy(std::string_view bytes, const std::string& dn) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    fail(ErrorKind::InvalidInput, "{}: not a .npy file (bad magic)", dn);
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(ErrorKind::InvalidInput, "{}: truncated .npy header", dn);
    hlen = 0;
    for (int i = 3; i >= 0; --i) hlen = hlen << 8 | static_cast<uint8_t>(bytes[8 + static_cast<size_t>(i)]);
    hstart = 12;
  } else {
    fail(ErrorKind::InvalidInput, "{}: unsupported .npy version {}", dn, major);
  }
  if (hstart + hlen > bytes.size()) fail(ErrorKind::InvalidInput, "{}: truncated .npy header", dn);
  std::string header(bytes.substr(hstart, hlen));
  std::string descr = headerField(header, "descr", dn);
  std::string fortran = headerField(header, "fortran_order", dn);
  std::vector<int64_t> dims = parseShapeTuple(headerField(header, "shape", dn), dn);
  if (descr.size() < 4) fail(ErrorKind::InvalidInput, "{}: bad .npy descr {}", dn, descr);
  std::string d = descr.substr(1, descr.size() - 2);  // strip quotes
  char order = d[0];
  std::string code = d.substr(1);
  if (order == '>' && code != "i1" && code != "u1" && code != "b1")
    fail(ErrorKind::Unsupported, "{}: big-endian .npy data ({}) is not supported", dn, d);
  Tensor t;
  t.dims = dims;
  std::string_view payload = bytes.substr(hstart + hlen);
  if (code[0] == 'U' || code[0] == 'S') {
    std::string w = code.substr(1);
    if (w.empty() || w.size() > 9 || w.find_first_not_of("0123456789") != std::string::npos)
      fail(ErrorKind::InvalidInput, "{}: bad string width in .npy dtype '{}'", dn, d);
    size_t width = static_cast<size_t>(std::stoul(w));
    size_t item = code[0] == 'U' ? 4 * width : width;
    t.dataType = static_cast<int32_t>(DType::String);
    auto n = t.numElements();
    if (!n || static_cast<uint64_t>(*n) * item > payload.size()) fail(ErrorKind::InvalidInput, "{}: truncated .npy data", dn);
    for (int64_t i = 0; i < *n; ++i) {
      std::string s;
      const char* p = payload.data() + static_cast<size_t>(i) * item;
      if (code[0] == 'S') {
        s.assign(p, strnlen(p, width));
      } else {
        for (size_t c = 0; c < width; ++c) {
          uint32_t cp;
          std::memcpy(&cp, p + 4 * c, 4);
          if (cp == 0) break;
          if (cp < 0x80) s += static_cast<char>(cp);
          else if (cp < 0x800) { s += static_cast<char>(0xc0 | cp >> 6); s += static_cast<char>(0x80 | (cp & 0x3f)); }
          else if (cp < 0x10000) { s += static_cast<char>(0xe0 | cp >> 12); s += static_cast<char>(0x80 | (cp >> 6 & 0x3f)); s += static_cast<char>(0x80 | (cp & 0x3f)); }
          else { s += static_cast<char>(0xf0 | cp >> 18); s += static_cast<char>(0x80 | (cp >> 12 & 0x3f)); s += static_cast<char>(0x80 | (cp >> 6 & 0x3f)); s += static_cast<char>(0x80 | (cp & 0x3f)); }
        }
      }
      t.strings.push_back(std::move(s));
    }
    t.storage = Tensor::Storage::Raw;
    return t;
  }
  DType dtype = DType::Undefined;
  for (const auto& e : kNpyTypes)
    if (code == e.descr) dtype = e.dtype;
  if (dtype == DType::Undefined) fail(ErrorKind::Unsupported, "{}: .npy element type '{}' is not supported", dn, d);
  t.dataType = static_cast<int32_t>(dtype);
  auto need = t.expectedBytes();
  if (!need || payload.size() < *need)
    fail(ErrorKind::InvalidInput, "{}: .npy data holds {} bytes, shape and type need {}", dn, payload.size(), need ? *need : 0);
  std::string data(payload.substr(0, static_cast<size_t>(*need)));
  if (fortran.find("True") != std::string::npos && dims.size() > 1) {
    // Column-major on disk: transpose into row-major.
    size_t esize = static_cast<size_t>(dtypeBits(dtype) / 8);
    std::string rowMajor(data.size(), '\0');
    size_t n = static_cast<size_t>(*t.numElements());
    std::vector<int64_t> idx(dims.size(), 0);
    for (size_t f = 0; f < n; ++f) {
      // f enumerates column-major order: first index fastest
      size_t r = 0;
      for (size_t a = 0; a < dims.size(); ++a) r = r * static_cast<size_t>(dims[a]) + static_cast<size_t>(idx[a]);
      std::memcpy(rowMajor.data() + r * esize, data.data() + f * esize, esize);
      for (size_t a = 0; a < dims.size(); ++a) {
        if (++idx[a] < dims[a]) break;
        idx[a] = 0;
      }
    }
    data = std::move(rowMajor);
  }
  t.setRaw(Buffer::fromString(std::move(data)));
  return t;
}

std::string toNpy(const TensorData& t) {
  std::string header;
  std::string shape = "(";
  for (size_t i = 0; i < t.dims.size(); ++i) shape += std::to_string(t.dims[i]) + (t.dims.size() == 1 || i + 1 < t.dims.size() ? "," : "");
  shape += ")";
  std::string body;
  if (t.dtype() == DType::String) {
    size_t width = 1;
    for (const auto& s : t.strings) width = std::max(width, s.size());
    header = fmt::format("{{'descr': '|S{}', 'fortran_order': False, 'shape': {}, }}", width, shape);
    for (const auto& s : t.strings) {
      body += s;
      body.append(width - s.size(), '\0');
    }
  } else {
    header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npyDescr(t.dtype()), shape);
    body.assign(t.raw.view());
  }
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + body;
}

std::vector<std::pair<std::string, Tensor>> parseNpz(const std::string& bytes, const std::string& displayName) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, data] : readZip(bytes, displayName)) {
    std::string key = name.size() > 4 && name.substr(name.size() - 4) == ".npy" ? name.substr(0, name.size() - 4) : name;
    out.emplace_back(key, parseNpy(data, displayName + ":" + name));
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> readNpz(const std::string& path) { return parseNpz(readFile(path), path); }

RtValue parseJson(std::string_view text, const TypeInfo& expected, const std::string& dn, std::string* name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail(ErrorKind::InvalidInput, "{}: invalid JSON: {}", dn, e.what());
  }
  DType dtype = expected.kind == TypeInfo::Kind::Tensor && isValidDType(expected.elemType) ? expected.dtype() : DType::Float;
  const json* data = &j;
  if (j.is_object()) {
    if (j.contains("name") && name) *name = j["name"].get<std::string>();
    if (j.contains("dtype")) {
      auto d = dtypeFromName(j["dtype"].get<std::string>());
      if (!d) fail(ErrorKind::InvalidInput, "{}: unknown dtype '{}'", dn, j["dtype"].get<std::string>());
      dtype = *d;
    }
    if (!j.contains("data")) fail(ErrorKind::InvalidInput, "{}: JSON tensor needs a \"data\" field", dn);
    data = &j["data"];
  }
  Tensor t = jsonTensor(*data, dtype, dn);
  if (j.is_object() && j.contains("shape")) {
    std::vector<int64_t> shape = j["shape"].get<std::vector<int64_t>>();
    Tensor probe;
    probe.dims = shape;
    if (probe.numElements() != t.numElements())
      fail(ErrorKind::InvalidInput, "{}: \"shape\" does not match the number of elements in \"data\"", dn);
    t.dims = shape;
  }
  return RtValue::ofTensor(std::move(t));
}

std::string toJson(const RtValue& v, const std::string& name) { return valueJson(v, name).dump() + "\n"; }

std::string toPb(const RtValue& v, const std::string& name) {
  switch (v.kind) {
    case RtValue::Kind::Tensor: {
      pb::TensorProto p;
      tensorProto(*v.tensor, p);
      p.set_name(name);
      return p.SerializeAsString();
    }
    case RtValue::Kind::Sequence: {
      pb::SequenceProto p;
      fillProto(v, p);
      p.set_name(name);
      return p.SerializeAsString();
    }
    case RtValue::Kind::Optional: {
      pb::OptionalProto p;
      fillOptional(v, p);
      p.set_name(name);
      return p.SerializeAsString();
    }
    default: fail(ErrorKind::Unsupported, "value '{}': this kind of value cannot be written as .pb", name);
  }
}

RtValue readValueFile(const std::string& path, const TypeInfo& expected, std::string* name) {
  TensorFileFormat f = tensorFileFormat(path);
  std::string bytes = readFile(path);
  switch (f) {
    case TensorFileFormat::Pb: return parseValueProto(bytes, expected, path, name);
    case TensorFileFormat::Npy: return RtValue::ofTensor(parseNpy(bytes, path));
    case TensorFileFormat::Json: return parseJson(bytes, expected, path, name);
  }
  return {};
}

void writeFileAtomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.close();
  f.rename();
}

}  // namespace onnxtool
