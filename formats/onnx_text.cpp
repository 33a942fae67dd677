// onnx_text.cpp: printer and recursive-descent parser of the ONNX textual syntax (see
// onnx_text.h for what the text holds and where we follow onnx's printer).
#include "formats/onnx_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "lib/error.h"
#include "lib/limits.h"

namespace onnxtool {

namespace {

// ---------------------------------------------------------------- names shared by both sides

// Element type spellings of the syntax, indexed by TensorProto.DataType: the enum names in
// lower case, as onnx's printer writes them.
constexpr std::array<std::string_view, kMaxDType + 1> kPrimNames = {
    "undefined", "float",          "uint8",      "int8",           "uint16",     "int16",
    "int32",     "int64",          "string",     "bool",           "float16",    "double",
    "uint32",    "uint64",         "complex64",  "complex128",     "bfloat16",   "float8e4m3fn",
    "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4",     "int4",       "float4e2m1",
    "float8e8m0", "uint2",         "int2",       "float6e2m3",     "float6e3m2",
};

std::optional<int32_t> primFromName(std::string_view s) {
  for (size_t i = 0; i < kPrimNames.size(); ++i)
    if (kPrimNames[i] == s) return static_cast<int32_t>(i);
  return std::nullopt;
}

bool isTypeKeyword(std::string_view s) {
  return primFromName(s) || s == "seq" || s == "optional" || s == "map" || s == "sparse_tensor" || s == "opaque";
}

bool isIdStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isIdChar(char c) { return isIdStart(c) || (c >= '0' && c <= '9'); }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

bool isIdentifier(std::string_view s) {
  if (s.empty() || !isIdStart(s[0])) return false;
  return std::all_of(s.begin(), s.end(), isIdChar);
}

/// Words a bare name must not spell: they start a type or a number in some position.
bool isReserved(std::string_view s) {
  return isTypeKeyword(s) || s == "inf" || s == "nan" || s == "infinity" || s == "true" || s == "false";
}

struct AttrKindName {
  AttrType type;
  std::string_view name;
};
constexpr AttrKindName kAttrKinds[] = {
    {AttrType::Float, "float"},       {AttrType::Int, "int"},         {AttrType::String, "string"},
    {AttrType::Tensor, "tensor"},     {AttrType::Graph, "graph"},     {AttrType::Floats, "floats"},
    {AttrType::Ints, "ints"},         {AttrType::Strings, "strings"}, {AttrType::Tensors, "tensors"},
    {AttrType::Graphs, "graphs"},     {AttrType::TypeProto, "type_proto"}, {AttrType::TypeProtos, "type_protos"},
    {AttrType::SparseTensor, "sparse_tensor"}, {AttrType::SparseTensors, "sparse_tensors"},
    // read, never printed: the shorter spellings of Syntax.md's later versions
    {AttrType::TypeProto, "type"},    {AttrType::TypeProtos, "types"},
};

std::string_view attrTypeSpelling(AttrType t) {
  for (const auto& k : kAttrKinds)
    if (k.type == t) return k.name;
  return {};
}

// ---------------------------------------------------------------- printer

/// A string literal: only the quote and the backslash are escaped, every other byte is written as
/// it is (onnx's parser reads backslash-x as x, so backslash-n would not mean a newline to it).
std::string quoted(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

/// A name: bare when it is an identifier that no keyword spells, else quoted.
std::string quotable(std::string_view s) { return isIdentifier(s) && !isReserved(s) ? std::string(s) : quoted(s); }

class Printer {
 public:
  explicit Printer(const TextPrintOptions& o) : opts_(o) {}
  std::string out;

  void model(const Model& m) {
    if (!m.graph) fail(ErrorKind::Unsupported, "model has no graph; the textual syntax needs one");
    out += "<\n";
    field(3, "ir_version", std::to_string(m.irVersion), true);
    field(3, "opset_import", opsets(m.opsetImports), false);
    if (!m.producerName.empty()) field(3, "producer_name", quoted(m.producerName), false);
    if (!m.producerVersion.empty()) field(3, "producer_version", quoted(m.producerVersion), false);
    if (!m.domain.empty()) field(3, "domain", quoted(m.domain), false);
    if (m.modelVersion != 0) field(3, "model_version", std::to_string(m.modelVersion), false);
    if (!m.docString.empty()) field(3, "doc_string", quoted(m.docString), false);
    if (!m.metadata.empty()) field(3, "metadata_props", pairs(m.metadata), false);
    out += "\n>\n";
    graph(*m.graph, 0);
    out += "\n";
    for (const auto& f : m.functions) function(*f);
  }

  void graph(const Graph& g, int indent) {
    if (!g.sparseInitializers().empty())
      fail(ErrorKind::Unsupported, "graph '{}': sparse initializer '{}' has no textual syntax", g.name,
           g.sparseInitializers().front()->name());
    out += quotable(g.name);
    out += " (";
    entries(g.inputs());
    out += ") => (";
    entries(g.outputs());
    out += ")";
    bool hasList = !g.initializers().empty() || !g.valueInfos().empty();
    if (hasList) {
      out += "\n";
      pad(indent + 3);
      out += "<";
      bool first = true;
      for (Value* v : g.initializers()) {
        if (!first) out += ", ";
        first = false;
        const Tensor& t = *v->initializer();
        tensorType(t);
        out += " ";
        out += quotable(v->name());
        out += " = ";
        tensorData(t);
      }
      for (const auto& e : g.valueInfos()) {
        if (!first) out += ", ";
        first = false;
        entry(e);
      }
      out += ">\n";
      pad(indent);
      out += "{\n";
    } else {
      out += " {\n";
    }
    for (const auto& n : g.nodes()) node(*n, indent + 3);
    pad(indent);
    out += "}";
  }

 private:
  const TextPrintOptions& opts_;

  void pad(int n) { out.append(static_cast<size_t>(n), ' '); }

  void field(int indent, std::string_view key, const std::string& value, bool first) {
    if (!first) out += ",\n";
    pad(indent);
    out += key;
    out += ": ";
    out += value;
  }

  static std::string opsets(const std::vector<OpsetImport>& ops) {
    std::string s = "[";
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i) s += ", ";
      s += quoted(ops[i].domain) + " : " + std::to_string(ops[i].version);
    }
    return s + "]";
  }

  static std::string pairs(const StringPairs& ps) {
    std::string s = "[";
    for (size_t i = 0; i < ps.size(); ++i) {
      if (i) s += ", ";
      s += quoted(ps[i].first) + ": " + quoted(ps[i].second);
    }
    return s + "]";
  }

  /// A dotted name (domain, opaque domain): bare when every part is an identifier.
  static bool isDotted(std::string_view s) {
    if (s.empty()) return false;
    size_t start = 0;
    while (true) {
      size_t dot = s.find('.', start);
      std::string_view part = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
      if (!isIdentifier(part)) return false;
      if (dot == std::string_view::npos) return true;
      start = dot + 1;
    }
  }

  void primName(int32_t elemType) {
    if (elemType < 0 || elemType > kMaxDType)
      fail(ErrorKind::Unsupported, "element type {} has no name in the textual syntax", elemType);
    out += kPrimNames[static_cast<size_t>(elemType)];
  }

  void shape(const Shape& s) {
    if (!s.hasRank) {
      out += "[]";
      return;
    }
    if (s.dims.empty()) return;
    out += "[";
    for (size_t i = 0; i < s.dims.size(); ++i) {
      if (i) out += ",";
      const Dim& d = s.dims[i];
      if (d.isValue()) out += std::to_string(d.value);
      else if (d.isParam()) out += quotable(d.param);
      else out += "?";
    }
    out += "]";
  }

  void type(const TypeInfo& t) {
    switch (t.kind) {
      case TypeInfo::Kind::Tensor:
        primName(t.elemType);
        shape(t.shape);
        return;
      case TypeInfo::Kind::SparseTensor:
        out += "sparse_tensor(";
        primName(t.elemType);
        shape(t.shape);
        out += ")";
        return;
      case TypeInfo::Kind::Sequence:
      case TypeInfo::Kind::Optional:
        out += t.kind == TypeInfo::Kind::Sequence ? "seq(" : "optional(";
        if (t.inner) type(*t.inner);
        out += ")";
        return;
      case TypeInfo::Kind::Map:
        out += "map(";
        primName(t.elemType);
        out += ", ";
        if (t.inner) type(*t.inner);
        out += ")";
        return;
      case TypeInfo::Kind::Opaque:
        out += "opaque(";
        if (!t.opaqueDomain.empty()) {
          out += isDotted(t.opaqueDomain) ? t.opaqueDomain : quoted(t.opaqueDomain);
          out += ", ";
        }
        if (!t.opaqueName.empty() || !t.opaqueDomain.empty()) out += quotable(t.opaqueName);
        out += ")";
        return;
      case TypeInfo::Kind::None: return;
    }
  }

  void entry(const ValueInfoEntry& e) {
    if (e.value && e.hasType && !e.type().isNone()) {
      type(e.type());
      out += " ";
    }
    out += quotable(e.value ? e.value->name() : std::string());
  }

  void entries(const std::vector<ValueInfoEntry>& es) {
    for (size_t i = 0; i < es.size(); ++i) {
      if (i) out += ", ";
      entry(es[i]);
    }
  }

  void tensorType(const Tensor& t) {
    primName(t.dataType);
    if (t.dims.empty()) return;
    out += "[";
    for (size_t i = 0; i < t.dims.size(); ++i) {
      if (i) out += ",";
      out += std::to_string(t.dims[i]);
    }
    out += "]";
  }

  template <typename F>
  void number(F v) {
    if (std::isnan(v)) {
      out += "nan";
      return;
    }
    if (std::isinf(v)) {
      out += v < 0 ? "-inf" : "inf";
      return;
    }
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
    out += s;
    // keep a float a float when read back without a declared type
    if (s.find_first_of(".e") == std::string_view::npos) out += ".0";
  }

  template <typename T>
  static T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }

  /// Element i of a 2-, 4- or 6-bit type: bits [i*b, i*b+b) of the packed bytes, low bits first.
  static uint32_t subByte(const uint8_t* p, size_t i, int bits) {
    uint32_t v = 0;
    size_t bit = i * static_cast<size_t>(bits);
    for (int b = 0; b < bits; ++b, ++bit)
      if (p[bit / 8] >> (bit % 8) & 1u) v |= 1u << b;
    return v;
  }

  void element(const Tensor& t, const uint8_t* p, size_t i) {
    switch (t.dtype()) {
      case DType::Float: number(load<float>(p + 4 * i)); break;
      case DType::Double: number(load<double>(p + 8 * i)); break;
      case DType::Complex64:
        number(load<float>(p + 8 * i));
        out += ",";
        number(load<float>(p + 8 * i + 4));
        break;
      case DType::Complex128:
        number(load<double>(p + 16 * i));
        out += ",";
        number(load<double>(p + 16 * i + 8));
        break;
      case DType::Int8: out += std::to_string(load<int8_t>(p + i)); break;
      case DType::Int16: out += std::to_string(load<int16_t>(p + 2 * i)); break;
      case DType::Int32: out += std::to_string(load<int32_t>(p + 4 * i)); break;
      case DType::Int64: out += std::to_string(load<int64_t>(p + 8 * i)); break;
      case DType::UInt16:
      case DType::Float16:
      case DType::BFloat16: out += std::to_string(load<uint16_t>(p + 2 * i)); break;
      case DType::UInt32: out += std::to_string(load<uint32_t>(p + 4 * i)); break;
      case DType::UInt64: out += std::to_string(load<uint64_t>(p + 8 * i)); break;
      case DType::Int4: out += std::to_string(static_cast<int>(subByte(p, i, 4) ^ 8u) - 8); break;
      case DType::Int2: out += std::to_string(static_cast<int>(subByte(p, i, 2) ^ 2u) - 2); break;
      case DType::UInt4:
      case DType::Float4E2M1: out += std::to_string(subByte(p, i, 4)); break;
      case DType::UInt2: out += std::to_string(subByte(p, i, 2)); break;
      case DType::Float6E2M3:
      case DType::Float6E3M2: out += std::to_string(subByte(p, i, 6)); break;
      default: out += std::to_string(p[i]); break;  // 8-bit types, bool
    }
  }

  void tensorData(const Tensor& t) {
    auto n = t.numElements();
    if (!n) fail(ErrorKind::InvalidInput, "tensor '{}': dims are negative or too large to print", t.name);
    if (opts_.elideTensorsOver && static_cast<uint64_t>(*n) > opts_.elideTensorsOver) {
      out += "{...}";
      return;
    }
    if (t.dtype() == DType::String) {
      if (t.strings.size() != static_cast<size_t>(*n))
        fail(ErrorKind::InvalidInput, "tensor '{}': has {} strings, expected {} for its dims", t.name, t.strings.size(), *n);
      out += "{";
      for (size_t i = 0; i < t.strings.size(); ++i) {
        if (i) out += ", ";
        out += quoted(t.strings[i]);
      }
      out += "}";
      return;
    }
    if (t.storage == Tensor::Storage::External && t.raw.empty() && *n > 0 && t.external) {
      out += pairs(t.external->entries);
      return;
    }
    if (!isValidDType(t.dataType))
      fail(ErrorKind::Unsupported, "tensor '{}': element type {} has no textual syntax", t.name, t.dataType);
    auto bytes = t.expectedBytes();
    if (!bytes || t.raw.size() != *bytes)
      fail(ErrorKind::InvalidInput, "tensor '{}': has {} bytes of data, expected {} for its dims and type", t.name,
           t.raw.size(), bytes.value_or(0));
    out += "{";
    for (size_t i = 0; i < static_cast<size_t>(*n); ++i) {
      if (i) out += ",";
      element(t, t.raw.data(), i);
    }
    out += "}";
  }

  void tensorConstant(const Tensor& t) {
    tensorType(t);
    out += " ";
    if (!t.name.empty()) out += quotable(t.name) + " ";
    tensorData(t);
  }

  static bool holdsGraph(const Attribute& a) { return a.g || !a.graphs.empty(); }

  void attribute(const Attribute& a, int indent) {
    out += quotable(a.name);
    std::string_view kind = attrTypeSpelling(a.type);
    if (!a.refAttrName.empty()) {
      if (!kind.empty()) {
        out += ": ";
        out += kind;
      }
      out += " = @";
      out += quotable(a.refAttrName);
      return;
    }
    if (kind.empty()) fail(ErrorKind::Unsupported, "attribute '{}' has undefined type {}, which has no textual syntax", a.name, static_cast<int>(a.type));
    out += ": ";
    out += kind;
    out += " = ";
    auto list = [&](size_t n, auto&& one) {
      out += "[";
      for (size_t i = 0; i < n; ++i) {
        if (i) out += ", ";
        one(i);
      }
      out += "]";
    };
    switch (a.type) {
      case AttrType::Float: number(a.f); break;
      case AttrType::Int: out += std::to_string(a.i); break;
      case AttrType::String: out += quoted(a.s); break;
      case AttrType::Tensor:
        if (!a.t) fail(ErrorKind::InvalidInput, "attribute '{}' of type tensor has no tensor", a.name);
        tensorConstant(*a.t);
        break;
      case AttrType::Graph:
        if (!a.g) fail(ErrorKind::InvalidInput, "attribute '{}' of type graph has no graph", a.name);
        graph(*a.g, indent);
        break;
      case AttrType::Floats: list(a.floats.size(), [&](size_t i) { number(a.floats[i]); }); break;
      case AttrType::Ints: list(a.ints.size(), [&](size_t i) { out += std::to_string(a.ints[i]); }); break;
      case AttrType::Strings: list(a.strings.size(), [&](size_t i) { out += quoted(a.strings[i]); }); break;
      case AttrType::Tensors: list(a.tensors.size(), [&](size_t i) { tensorConstant(*a.tensors[i]); }); break;
      case AttrType::Graphs: list(a.graphs.size(), [&](size_t i) { graph(*a.graphs[i], indent); }); break;
      case AttrType::TypeProto:
        if (!a.tp || a.tp->isNone()) fail(ErrorKind::Unsupported, "attribute '{}': an empty type has no textual syntax", a.name);
        type(*a.tp);
        break;
      case AttrType::TypeProtos: list(a.typeProtos.size(), [&](size_t i) { type(a.typeProtos[i]); }); break;
      default:
        fail(ErrorKind::Unsupported, "attribute '{}': {} attributes have no textual syntax", a.name, kind);
    }
  }

  void attributes(const std::vector<Attribute>& as, int indent) {
    out += "<";
    for (size_t i = 0; i < as.size(); ++i) {
      if (i) out += ", ";
      attribute(as[i], indent);
    }
    out += ">";
  }

  void opName(const Node& n) {
    bool bare = isIdentifier(n.opType) && (n.domain.empty() || isDotted(n.domain));
    if (bare) {
      if (!n.domain.empty()) out += n.domain + ".";
      out += n.opType;
    } else {
      if (!n.domain.empty()) out += quoted(n.domain) + ".";
      out += quoted(n.opType);
    }
    if (!n.overload.empty()) out += ":" + quotable(n.overload);
  }

  void names(const std::vector<Value*>& vs) {
    for (size_t i = 0; i < vs.size(); ++i) {
      if (i) out += ", ";
      out += vs[i] ? quotable(vs[i]->name()) : std::string("\"\"");
    }
  }

  void node(const Node& n, int indent) {
    pad(indent);
    if (!n.name.empty()) out += "[" + quotable(n.name) + "] ";
    names(n.outputs());
    out += n.outputs().empty() ? "= " : " = ";
    opName(n);
    bool after = std::any_of(n.attributes.begin(), n.attributes.end(), holdsGraph);
    if (!n.attributes.empty() && !after) {
      out += " ";
      attributes(n.attributes, indent);
    }
    out += " (";
    names(n.inputs());
    out += ")";
    if (after) {
      out += " ";
      attributes(n.attributes, indent);
    }
    out += "\n";
  }

 public:
  void function(const Function& f) {
    out += "<\n";
    field(3, "domain", quoted(f.domain), true);
    if (!f.overload.empty()) field(3, "overload", quoted(f.overload), false);
    field(3, "opset_import", opsets(f.opsetImports), false);
    out += "\n>\n";
    out += quotable(f.name);
    if (!f.attributeNames.empty() || !f.attributeDefaults.empty()) {
      out += " <";
      bool first = true;
      for (const auto& a : f.attributeNames) {
        if (!first) out += ", ";
        first = false;
        out += quotable(a);
      }
      for (const auto& a : f.attributeDefaults) {
        if (!first) out += ", ";
        first = false;
        attribute(a, 0);
      }
      out += ">";
    }
    const Graph& g = *f.body;
    out += " (";
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      if (i) out += ", ";
      out += quotable(g.inputs()[i].value->name());
    }
    out += ") => (";
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      if (i) out += ", ";
      const Value* v = g.outputs()[i].value;
      out += quotable(v ? v->name() : std::string());
    }
    out += ")";
    if (!g.valueInfos().empty()) {
      out += "\n   <";
      entries(g.valueInfos());
      out += ">";
    }
    out += "\n{\n";
    for (const auto& n : g.nodes()) node(*n, 3);
    out += "}\n";
  }
};

// ---------------------------------------------------------------- lexer

enum class Tok : uint8_t { End, Id, Str, Num, Punct, Arrow };

struct Token {
  Tok kind = Tok::End;
  std::string_view text;  ///< Str: with quotes and escapes, as written
  size_t pos = 0;
  bool is(char c) const { return kind == Tok::Punct && text[0] == c; }
};

constexpr int kMaxDepth = limits::kMaxTextNestingDepth;

class Parser {
 public:
  Parser(std::string_view src, const std::string& path, Model& model) : src_(src), path_(path), model_(model) {}

  void parseModel() {
    if (peek().is('<')) modelHeader();
    model_.graph = std::make_unique<Graph>();
    graph(*model_.graph);
    while (peek().kind != Tok::End) model_.functions.push_back(function());
  }

 private:
  std::string_view src_;
  const std::string& path_;
  Model& model_;
  size_t lexPos_ = 0;
  std::array<Token, 3> ahead_;
  size_t aheadCount_ = 0;
  int depth_ = 0;

  // ---- errors

  std::pair<size_t, size_t> lineCol(size_t pos) const {
    size_t line = 1, lineStart = 0;
    for (size_t i = 0; i < pos && i < src_.size(); ++i)
      if (src_[i] == '\n') {
        ++line;
        lineStart = i + 1;
      }
    return {line, pos - lineStart + 1};
  }

  [[noreturn]] void errorAt(size_t pos, std::string_view expected, const std::string& got) const {
    auto [line, col] = lineCol(pos);
    fail(ErrorKind::InvalidInput, "{}:{}:{}: expected {}, got {}", path_, line, col, expected, got);
  }

  static std::string describe(const Token& t) {
    auto clip = [](std::string_view s) {
      std::string r(s.substr(0, 40));
      for (char& c : r)
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
      return s.size() > 40 ? r + "..." : r;
    };
    switch (t.kind) {
      case Tok::End: return "end of input";
      case Tok::Id: return fmt::format("'{}'", clip(t.text));
      case Tok::Str: return fmt::format("string {}", clip(t.text));
      case Tok::Num: return fmt::format("number {}", clip(t.text));
      case Tok::Punct: return fmt::format("'{}'", t.text);
      case Tok::Arrow: return "'=>'";
    }
    return "?";
  }

  [[noreturn]] void expected(std::string_view what) { errorAt(peek().pos, what, describe(peek())); }

  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, size_t pos) : p(parser) {
      if (++p.depth_ > kMaxDepth)
        p.errorAt(pos, fmt::format("at most {} levels of nested graphs and types", kMaxDepth), "deeper nesting");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // ---- lexing

  Token lex() {
    size_t& p = lexPos_;
    while (p < src_.size()) {
      char c = src_[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++p;
      } else if (c == '#') {
        while (p < src_.size() && src_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    Token t;
    t.pos = p;
    if (p >= src_.size()) return t;
    char c = src_[p];
    size_t start = p;
    auto next = [&](size_t k) { return p + k < src_.size() ? src_[p + k] : '\0'; };
    if (isIdStart(c)) {
      while (p < src_.size() && isIdChar(src_[p])) ++p;
      t.kind = Tok::Id;
    } else if (isDigit(c) || (c == '.' && isDigit(next(1))) ||
               ((c == '-' || c == '+') && (isDigit(next(1)) || next(1) == '.' || next(1) == 'i' || next(1) == 'n'))) {
      if (c == '-' || c == '+') ++p;
      if (p < src_.size() && isIdStart(src_[p])) {
        while (p < src_.size() && isIdChar(src_[p])) ++p;  // -inf, -nan
      } else {
        while (p < src_.size() && isDigit(src_[p])) ++p;
        if (p < src_.size() && src_[p] == '.') {
          ++p;
          while (p < src_.size() && isDigit(src_[p])) ++p;
        }
        if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && isDigit(src_[q])) {
            p = q;
            while (p < src_.size() && isDigit(src_[p])) ++p;
          }
        }
      }
      t.kind = Tok::Num;
    } else if (c == '"') {
      ++p;
      while (true) {
        if (p >= src_.size()) errorAt(start, "a closing '\"'", "end of input inside a string");
        if (src_[p] == '\\') {
          p += 2;
        } else if (src_[p] == '"') {
          ++p;
          break;
        } else {
          ++p;
        }
      }
      if (p > src_.size()) errorAt(start, "a closing '\"'", "end of input inside a string");
      t.kind = Tok::Str;
    } else if (c == '=' && next(1) == '>') {
      p += 2;
      t.kind = Tok::Arrow;
    } else if (std::string_view("<>()[]{},:=@.?").find(c) != std::string_view::npos) {
      ++p;
      t.kind = Tok::Punct;
    } else {
      auto uc = static_cast<unsigned char>(c);
      errorAt(start, "a name, number, string or punctuation",
              uc >= 0x20 && uc < 0x7f ? fmt::format("character '{}'", c) : fmt::format("byte 0x{:02x}", uc));
    }
    t.text = src_.substr(start, p - start);
    return t;
  }

  const Token& peek(size_t k = 0) {
    while (aheadCount_ <= k) ahead_[aheadCount_++] = lex();
    return ahead_[k];
  }

  Token take() {
    peek();
    Token t = ahead_[0];
    for (size_t i = 1; i < aheadCount_; ++i) ahead_[i - 1] = ahead_[i];
    --aheadCount_;
    return t;
  }

  bool accept(char c) {
    if (!peek().is(c)) return false;
    take();
    return true;
  }

  void expect(char c) {
    if (!peek().is(c)) expected(fmt::format("'{}'", c));
    take();
  }

  static std::string unquote(std::string_view s) {
    std::string r;
    r.reserve(s.size());
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] == '\\' && i + 2 < s.size()) ++i;
      r += s[i];
    }
    return r;
  }

  std::string string(std::string_view what) {
    if (peek().kind != Tok::Str) expected(what);
    return unquote(take().text);
  }

  /// A name: an identifier or a quoted string.
  std::string name(std::string_view what) {
    if (peek().kind == Tok::Id) return std::string(take().text);
    if (peek().kind == Tok::Str) return unquote(take().text);
    expected(what);
  }

  int64_t integer(std::string_view what) {
    const Token& t = peek();
    int64_t v = 0;
    if (t.kind != Tok::Num || !parseInt(t.text, v)) expected(what);
    take();
    return v;
  }

  // ---- numbers

  static std::string_view stripPlus(std::string_view s) { return !s.empty() && s[0] == '+' ? s.substr(1) : s; }

  static bool parseInt(std::string_view s, int64_t& v) {
    s = stripPlus(s);
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  }

  static bool parseUInt(std::string_view s, uint64_t& v) {
    s = stripPlus(s);
    if (!s.empty() && s[0] == '-') return false;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  }

  static bool looksFloat(std::string_view s) { return s.find_first_of(".eEin") != std::string_view::npos; }

  template <typename F>
  static bool parseFloat(std::string_view s, F& v) {
    s = stripPlus(s);
    bool neg = !s.empty() && s[0] == '-';
    std::string_view body = neg ? s.substr(1) : s;
    if (body == "inf" || body == "infinity") {
      v = neg ? -std::numeric_limits<F>::infinity() : std::numeric_limits<F>::infinity();
      return true;
    }
    if (body == "nan") {
      v = neg ? -std::numeric_limits<F>::quiet_NaN() : std::numeric_limits<F>::quiet_NaN();
      return true;
    }
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ptr != s.data() + s.size()) return false;
    // out of range: from_chars leaves v unset; the nearest value is 0 or infinity
    if (r.ec == std::errc::result_out_of_range) {
      double d = std::strtod(std::string(s).c_str(), nullptr);
      v = static_cast<F>(d);
      return true;
    }
    return r.ec == std::errc();
  }

  /// A number token (or inf/nan spelled as a name) at the front.
  bool atNumber() {
    const Token& t = peek();
    if (t.kind == Tok::Num) return true;
    return t.kind == Tok::Id && (t.text == "inf" || t.text == "nan" || t.text == "infinity");
  }

  template <typename F>
  F floating(std::string_view what) {
    F v{};
    if (!atNumber() || !parseFloat(peek().text, v)) expected(what);
    take();
    return v;
  }

  // ---- headers

  void opsetList(std::vector<OpsetImport>& out) {
    expect('[');
    if (!accept(']')) {
      do {
        OpsetImport o;
        o.domain = string("an opset domain string");
        expect(':');
        o.version = integer("an opset version");
        out.push_back(std::move(o));
      } while (accept(','));
      expect(']');
    }
  }

  void pairList(StringPairs& out) {
    expect('[');
    if (!accept(']')) {
      do {
        std::string k = string("a key string");
        expect(':');
        out.emplace_back(std::move(k), string("a value string"));
      } while (accept(','));
      expect(']');
    }
  }

  void modelHeader() {
    expect('<');
    if (!accept('>')) {
      do {
        const char* kWhat = "a model field (ir_version, opset_import, producer_name, producer_version, domain, "
                            "model_version, doc_string, metadata_props)";
        if (peek().kind != Tok::Id) expected(kWhat);
        std::string_view key = peek().text;
        Token keyTok = take();
        expect(':');
        if (key == "ir_version") model_.irVersion = integer("an integer");
        else if (key == "opset_import") opsetList(model_.opsetImports);
        else if (key == "producer_name") model_.producerName = string("a string");
        else if (key == "producer_version") model_.producerVersion = string("a string");
        else if (key == "domain") model_.domain = string("a string");
        else if (key == "model_version") model_.modelVersion = integer("an integer");
        else if (key == "doc_string") model_.docString = string("a string");
        else if (key == "metadata_props") pairList(model_.metadata);
        else errorAt(keyTok.pos, kWhat, describe(keyTok));
      } while (accept(','));
      expect('>');
    }
  }

  // ---- types

  Shape dims() {
    Shape s;
    expect('[');
    if (accept(']')) return s;  // unknown rank
    s.hasRank = true;
    do {
      if (accept('?')) {
        s.dims.emplace_back();
      } else if (peek().kind == Tok::Num) {
        int64_t v = integer("a dimension");
        s.dims.push_back(Dim::ofValue(v));
      } else if (peek().kind == Tok::Id || peek().kind == Tok::Str) {
        s.dims.push_back(Dim::ofParam(name("a dimension")));
      } else {
        expected("a dimension (a number, a name or '?')");
      }
    } while (accept(','));
    expect(']');
    return s;
  }

  int32_t prim() {
    if (peek().kind == Tok::Id)
      if (auto p = primFromName(peek().text)) {
        take();
        return *p;
      }
    expected("an element type (float, int64, ...)");
  }

  TypeInfo tensorType() {
    TypeInfo t;
    t.kind = TypeInfo::Kind::Tensor;
    t.elemType = prim();
    if (peek().is('[')) t.shape = dims();
    else t.shape.hasRank = true;  // a bare element type is a scalar
    return t;
  }

  TypeInfo type() {
    DepthGuard guard(*this, peek().pos);
    if (peek().kind != Tok::Id || !isTypeKeyword(peek().text)) expected("a type");
    std::string_view k = peek().text;
    if (primFromName(k)) return tensorType();
    take();
    TypeInfo t;
    expect('(');
    if (k == "seq" || k == "optional") {
      t.kind = k == "seq" ? TypeInfo::Kind::Sequence : TypeInfo::Kind::Optional;
      if (!peek().is(')')) t.inner = std::make_shared<TypeInfo>(type());
    } else if (k == "map") {
      t.kind = TypeInfo::Kind::Map;
      t.elemType = prim();
      expect(',');
      t.inner = std::make_shared<TypeInfo>(type());
    } else if (k == "sparse_tensor") {
      t = tensorType();
      t.kind = TypeInfo::Kind::SparseTensor;
    } else {  // opaque
      t.kind = TypeInfo::Kind::Opaque;
      if (!peek().is(')')) {
        std::string first = dotted("an opaque type name");
        if (accept(',')) {
          t.opaqueDomain = std::move(first);
          t.opaqueName = name("an opaque type name");
        } else {
          t.opaqueName = std::move(first);
        }
      }
    }
    expect(')');
    return t;
  }

  /// id ('.' id)* or one quoted string.
  std::string dotted(std::string_view what) {
    if (peek().kind == Tok::Str) return unquote(take().text);
    if (peek().kind != Tok::Id) expected(what);
    std::string s(take().text);
    while (peek().is('.') && peek(1).kind == Tok::Id) {
      take();
      s += ".";
      s += take().text;
    }
    return s;
  }

  /// At `type name` (rather than a bare name) in a list that allows both.
  bool atTypedEntry() {
    const Token& t = peek();
    if (t.kind != Tok::Id || !isTypeKeyword(t.text)) return false;
    const Token& n = peek(1);
    return !(n.is(',') || n.is(')') || n.is('>') || n.is('=') || n.kind == Tok::End);
  }

  // ---- tensors

  /// Appends `v` as `bits` low bits at element `i` of a packed buffer.
  static void putBits(std::string& buf, size_t i, int bits, uint32_t v) {
    size_t bit = i * static_cast<size_t>(bits);
    for (int b = 0; b < bits; ++b, ++bit) {
      if (buf.size() <= bit / 8) buf.push_back('\0');
      if (v >> b & 1u) buf[bit / 8] = static_cast<char>(buf[bit / 8] | (1 << (bit % 8)));
    }
  }

  template <typename T>
  static void put(std::string& buf, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    buf.append(b, sizeof(T));
  }

  /// Consumes one literal of a numeric tensor and appends it in raw layout (sub-byte types are
  /// packed at element `index`).
  void literal(DType dt, std::string& buf, size_t index) {
    const Token& t = peek();
    std::string_view txt = t.text;
    auto intIn = [&](int64_t lo, int64_t hi) -> int64_t {
      int64_t v = 0;
      if (t.kind != Tok::Num || !parseInt(txt, v) || v < lo || v > hi)
        expected(fmt::format("an integer in [{}, {}] for {}", lo, hi, kPrimNames[static_cast<size_t>(dt)]));
      return v;
    };
    switch (dt) {
      case DType::Float: put(buf, floating<float>("a float")); return;
      case DType::Double: put(buf, floating<double>("a number")); return;
      case DType::Complex64: put(buf, floating<float>("a float (complex parts are listed real, imaginary)")); return;
      case DType::Complex128: put(buf, floating<double>("a number (complex parts are listed real, imaginary)")); return;
      case DType::Float16:
      case DType::BFloat16:
        if (t.kind == Tok::Num && !looksFloat(txt)) {
          put(buf, static_cast<uint16_t>(intIn(0, 65535)));
        } else {
          float f = floating<float>("a float or a 16-bit pattern");
          put(buf, dt == DType::Float16 ? floatToHalf(f) : floatToBfloat16(f));
          return;
        }
        break;
      case DType::Bool:
        if (t.kind == Tok::Id && (txt == "true" || txt == "false")) {
          buf.push_back(txt == "true" ? '\1' : '\0');
        } else {
          buf.push_back(static_cast<char>(intIn(0, 255)));
        }
        break;
      case DType::Int8: put(buf, static_cast<int8_t>(intIn(INT8_MIN, INT8_MAX))); break;
      case DType::UInt8: put(buf, static_cast<uint8_t>(intIn(0, UINT8_MAX))); break;
      case DType::Int16: put(buf, static_cast<int16_t>(intIn(INT16_MIN, INT16_MAX))); break;
      case DType::UInt16: put(buf, static_cast<uint16_t>(intIn(0, UINT16_MAX))); break;
      case DType::Int32: put(buf, static_cast<int32_t>(intIn(INT32_MIN, INT32_MAX))); break;
      case DType::UInt32: put(buf, static_cast<uint32_t>(intIn(0, UINT32_MAX))); break;
      case DType::Int64: put(buf, intIn(INT64_MIN, INT64_MAX)); break;
      case DType::UInt64: {
        uint64_t v = 0;
        if (t.kind != Tok::Num || !parseUInt(txt, v)) expected("an integer in [0, 18446744073709551615] for uint64");
        put(buf, v);
        break;
      }
      case DType::Int4: putBits(buf, index, 4, static_cast<uint32_t>(intIn(-8, 7)) & 0xfu); break;
      case DType::UInt4:
      case DType::Float4E2M1: putBits(buf, index, 4, static_cast<uint32_t>(intIn(0, 15))); break;
      case DType::Int2: putBits(buf, index, 2, static_cast<uint32_t>(intIn(-2, 1)) & 0x3u); break;
      case DType::UInt2: putBits(buf, index, 2, static_cast<uint32_t>(intIn(0, 3))); break;
      case DType::Float6E2M3:
      case DType::Float6E3M2: putBits(buf, index, 6, static_cast<uint32_t>(intIn(0, 63))); break;
      default: buf.push_back(static_cast<char>(intIn(0, 255))); break;  // float8 bit patterns
    }
    take();
  }

  /// `{ values }` or `[ "location": ..., ... ]` for a tensor whose dtype and dims are set.
  void tensorData(Tensor& t, size_t typePos) {
    DType dt = t.dtype();
    auto n = t.numElements();
    if (!n) errorAt(typePos, "dims whose product fits in int64", "an overflowing shape");
    if (peek().is('[')) {
      size_t at = peek().pos;
      ExternalDataInfo info;
      pairList(info.entries);
      for (const auto& [k, v] : info.entries) {
        int64_t num = 0;
        if (k == "location") info.location = v;
        else if (k == "checksum") info.checksum = v;
        else if (k == "offset" || k == "length") {
          if (!parseInt(v, num) || num < 0) errorAt(at, fmt::format("a non-negative integer for external data '{}'", k), fmt::format("\"{}\"", v));
          if (k == "offset") info.offset = num;
          else info.length = num;
        }
      }
      if (info.location.empty()) errorAt(at, "external data with a \"location\" entry", "none");
      t.external = std::move(info);
      t.storage = Tensor::Storage::External;
      return;
    }
    size_t open = peek().pos;
    expect('{');
    if (peek().is('.')) errorAt(peek().pos, "tensor values", "'...' (the tensor was printed with its data elided)");
    bool complex = dt == DType::Complex64 || dt == DType::Complex128;
    uint64_t want = static_cast<uint64_t>(*n) * (complex ? 2 : 1);
    uint64_t count = 0;
    std::string buf;
    if (!peek().is('}')) {
      do {
        if (dt == DType::String) {
          t.strings.push_back(string("a string"));
        } else {
          literal(dt, buf, static_cast<size_t>(count));
        }
        ++count;
      } while (accept(','));
    }
    if (!peek().is('}')) expected("',' or '}'");
    if (count != want)
      errorAt(open, fmt::format("{} values for a tensor of {} elements", want, *n), fmt::format("{}", count));
    take();
    if (dt != DType::String) {
      auto bytes = dtypeStorageBytes(dt, static_cast<uint64_t>(*n));
      if (bytes) buf.resize(static_cast<size_t>(*bytes), '\0');  // packed types: pad the last byte
      t.raw = Buffer::fromString(std::move(buf));
      t.storage = Tensor::Storage::Raw;
    } else {
      t.storage = Tensor::Storage::Typed;
    }
  }

  /// Sets dtype and dims from a tensor type (static dims only).
  void tensorHeader(Tensor& t, const TypeInfo& ty, size_t pos) {
    if (ty.kind != TypeInfo::Kind::Tensor) errorAt(pos, "a tensor type for a constant", "another type");
    if (!ty.shape.hasRank) errorAt(pos, "the dims of a constant (write 'float' for a scalar)", "'[]'");
    t.dataType = ty.elemType;
    if (!isValidDType(t.dataType)) errorAt(pos, "an element type for a constant", "'undefined'");
    for (const Dim& d : ty.shape.dims) {
      if (!d.isValue() || d.value < 0) errorAt(pos, "fixed non-negative dims for a constant", fmt::format("'{}'", d.str()));
      t.dims.push_back(d.value);
    }
  }

  /// tensor-type name? '='? data
  Tensor tensorConstant() {
    size_t pos = peek().pos;
    TypeInfo ty = tensorType();
    Tensor t;
    tensorHeader(t, ty, pos);
    if (peek().kind == Tok::Id || peek().kind == Tok::Str) t.name = name("a tensor name");
    accept('=');
    tensorData(t, pos);
    return t;
  }

  // ---- attributes

  std::shared_ptr<Graph> subgraph(Graph* owner) {
    auto g = std::make_shared<Graph>(owner, nullptr);
    graph(*g);
    return g;
  }

  bool atTensorConstant() {
    return peek().kind == Tok::Id && primFromName(peek().text).has_value();
  }

  void attrValue(Attribute& a, Graph* owner, size_t kindPos) {
    auto list = [&](auto&& one) {
      expect('[');
      if (!accept(']')) {
        do one();
        while (accept(','));
        expect(']');
      }
    };
    switch (a.type) {
      case AttrType::Float: a.f = floating<float>("a float"); return;
      case AttrType::Int: a.i = integer("an integer"); return;
      case AttrType::String: a.s = string("a string"); return;
      case AttrType::Tensor: a.t = std::make_shared<Tensor>(tensorConstant()); return;
      case AttrType::Graph: a.g = subgraph(owner); return;
      case AttrType::Floats: list([&] { a.floats.push_back(floating<float>("a float")); }); return;
      case AttrType::Ints: list([&] { a.ints.push_back(integer("an integer")); }); return;
      case AttrType::Strings: list([&] { a.strings.push_back(string("a string")); }); return;
      case AttrType::Tensors: list([&] { a.tensors.push_back(std::make_shared<Tensor>(tensorConstant())); }); return;
      case AttrType::Graphs: list([&] { a.graphs.push_back(subgraph(owner)); }); return;
      case AttrType::TypeProto: a.tp = std::make_shared<TypeInfo>(type()); return;
      case AttrType::TypeProtos: list([&] { a.typeProtos.push_back(type()); }); return;
      default: errorAt(kindPos, "an attribute type with a textual syntax", fmt::format("'{}'", attrTypeSpelling(a.type)));
    }
  }

  /// The kind of an attribute written without `: type`, from its value.
  AttrType inferKind() {
    const Token& t = peek();
    if (atNumber()) return t.kind == Tok::Num && !looksFloat(t.text) ? AttrType::Int : AttrType::Float;
    if (t.kind == Tok::Str) return AttrType::String;
    if (atTensorConstant()) return AttrType::Tensor;
    if (t.kind == Tok::Id) return AttrType::Graph;
    if (t.is('[')) {
      const Token& e = peek(1);
      if (e.is(']')) expected("a typed empty list (e.g. 'axes: ints = []')");
      if (e.kind == Tok::Str) return AttrType::Strings;
      if (e.kind == Tok::Id && primFromName(e.text)) return AttrType::Tensors;
      if (e.kind == Tok::Id && e.text != "inf" && e.text != "nan") return AttrType::Graphs;
      // numbers: floats if any element looks like one
      size_t save = lexPos_;
      auto saved = ahead_;
      size_t savedCount = aheadCount_;
      take();
      bool anyFloat = false;
      while (atNumber()) {
        anyFloat |= peek().kind != Tok::Num || looksFloat(peek().text);
        take();
        if (!accept(',')) break;
      }
      lexPos_ = save;
      ahead_ = saved;
      aheadCount_ = savedCount;
      return anyFloat ? AttrType::Floats : AttrType::Ints;
    }
    expected("an attribute value");
  }

  Attribute attribute(Graph* owner) {
    Attribute a;
    a.name = name("an attribute name");
    size_t kindPos = peek().pos;
    bool typed = false;
    if (accept(':')) {
      if (peek().kind != Tok::Id) expected("an attribute type (int, float, string, tensor, graph, ints, ...)");
      kindPos = peek().pos;
      std::string_view k = peek().text;
      auto it = std::find_if(std::begin(kAttrKinds), std::end(kAttrKinds), [&](const AttrKindName& x) { return x.name == k; });
      if (it == std::end(kAttrKinds)) expected("an attribute type (int, float, string, tensor, graph, ints, ...)");
      take();
      a.type = it->type;
      typed = true;
    }
    expect('=');
    if (accept('@')) {
      a.refAttrName = name("the name of a function attribute after '@'");
      return a;
    }
    if (!typed) a.type = inferKind();
    attrValue(a, owner, kindPos);
    return a;
  }

  std::vector<Attribute> attributes(Graph* owner) {
    std::vector<Attribute> as;
    expect('<');
    if (!accept('>')) {
      do as.push_back(attribute(owner));
      while (accept(','));
      expect('>');
    }
    return as;
  }

  // ---- graphs

  struct Pending {
    std::string name;
    std::optional<TypeInfo> type;
  };

  /// Name lists with omitted elements: `a, , b` or `a, "", b`; stops before `end`.
  std::vector<std::string> nameList(char end) {
    std::vector<std::string> names;
    if (peek().is(end)) return names;
    while (true) {
      if (peek().is(',') || peek().is(end)) names.emplace_back();
      else names.push_back(name("a value name"));
      if (!accept(',')) break;
    }
    if (!peek().is(end)) expected(fmt::format("',' or '{}'", end));
    return names;
  }

  /// `type? name ('=' data)?` entries until `close`; initializers go to `inits`.
  std::vector<Pending> entryList(char close, std::vector<Tensor>* inits) {
    std::vector<Pending> out;
    if (accept(close)) return out;
    do {
      Pending p;
      size_t typePos = peek().pos;
      if (atTypedEntry()) p.type = type();
      Token nameTok = peek();
      p.name = name("a value name");
      if (!p.type && (peek().is('[') || peek().kind == Tok::Id || peek().is('(')))
        errorAt(nameTok.pos, "a type (float, int64[N], seq(...), ...) or a value name", describe(nameTok));
      if (inits && peek().is('=')) {
        take();
        if (!p.type) errorAt(typePos, "a tensor type before an initializer's name", fmt::format("'{}'", p.name));
        Tensor t;
        tensorHeader(t, *p.type, typePos);
        t.name = p.name;
        tensorData(t, typePos);
        inits->push_back(std::move(t));
        if (close == '>') continue;  // an initializer in the <...> list is no value_info
      }
      out.push_back(std::move(p));
    } while (accept(','));
    if (!peek().is(close)) expected(fmt::format("',' or '{}'", close));
    take();
    return out;
  }

  Value* resolveUse(Graph& g, const std::string& n) {
    if (n.empty()) return nullptr;
    if (Value* v = g.find(n)) return v;
    return g.createValue(n);
  }

  static void applyType(ValueInfoEntry& e, Value* v, const std::optional<TypeInfo>& t, bool first) {
    e.hasType = t.has_value();
    if (!t) return;
    if (first || v->type().isNone()) v->setType(*t);
    else if (!(*t == v->type())) e.typeOverride = *t;
  }

  void issue(const std::string& msg) { model_.loadIssues.push_back(fmt::format("{}: {}", path_, msg)); }

  void node(Graph& g) {
    std::string label;
    if (accept('[')) {
      label = name("a node name");
      expect(']');
    }
    std::vector<std::string> outs = nameList('=');
    if (outs.size() == 1 && outs[0].empty()) outs.clear();
    expect('=');
    std::string domain, op;
    opName(domain, op);
    std::string overload;
    if (accept(':')) overload = name("an overload name");
    std::vector<Attribute> attrs;
    bool haveAttrs = false;
    if (peek().is('<')) {
      attrs = attributes(&g);
      haveAttrs = true;
    }
    expect('(');
    std::vector<std::string> insNames = nameList(')');
    expect(')');
    if (!haveAttrs && peek().is('<')) attrs = attributes(&g);
    std::vector<Value*> ins;
    ins.reserve(insNames.size());
    for (const auto& n : insNames) ins.push_back(resolveUse(g, n));
    for (const auto& o : outs) {
      Value* existing = o.empty() ? nullptr : g.findLocal(o);
      if (existing && existing->isDefined())
        issue(fmt::format("node '{}' ({}): output '{}' is already defined, each value must have one producer", label, op, o));
    }
    Node* n = g.addNode(op, ins, outs, domain);
    n->name = std::move(label);
    n->overload = std::move(overload);
    n->attributes = std::move(attrs);
    for (Graph* sg : n->subgraphs()) sg->setParent(&g, n);
  }

  void opName(std::string& domain, std::string& op) {
    std::vector<std::string> parts;
    bool quoted = false;
    do {
      if (peek().kind == Tok::Str) quoted = true;
      parts.push_back(name("an operator name"));
    } while (peek().is('.') && (peek(1).kind == Tok::Id || peek(1).kind == Tok::Str) && (take(), true));
    if (quoted && parts.size() > 2) expected("at most \"domain\".\"op\" when names are quoted");
    op = std::move(parts.back());
    parts.pop_back();
    for (size_t i = 0; i < parts.size(); ++i) domain += (i ? "." : "") + parts[i];
  }

  void graph(Graph& g) {
    DepthGuard guard(*this, peek().pos);
    g.name = name("a graph name");
    std::vector<Tensor> inits;
    expect('(');
    std::vector<Pending> ins = entryList(')', &inits);
    if (peek().kind != Tok::Arrow) expected("'=>'");
    take();
    expect('(');
    std::vector<Pending> outs = entryList(')', nullptr);
    std::vector<Pending> infos;
    if (accept('<')) infos = entryList('>', &inits);
    for (Tensor& t : inits) {
      bool dup = g.findLocal(t.name) != nullptr;
      if (dup) issue(fmt::format("graph '{}': initializer '{}' is defined more than once, expected unique initializer names", g.name, t.name));
      g.addInitializer(std::move(t), dup);
    }
    for (const Pending& p : ins) {
      Value* v = g.findLocal(p.name);
      bool isInit = v && v->initializer() && !v->isGraphInput();
      if (!v || !isInit) {
        if (v) issue(fmt::format("graph '{}': graph input '{}' is listed more than once, expected unique input names", g.name, p.name));
        v = g.createValue(p.name, v != nullptr);
      }
      g.addInput(v);
      applyType(g.inputs().back(), v, p.type, true);
    }
    expect('{');
    while (!peek().is('}')) {
      if (peek().kind == Tok::End) expected("a node or '}'");
      node(g);
    }
    take();
    for (const Pending& p : outs) {
      Value* v = resolveUse(g, p.name);
      if (!v) v = g.createValue("", true);
      g.addOutput(v);
      applyType(g.outputs().back(), v, p.type, false);
    }
    for (const Pending& p : infos) {
      Value* v = resolveUse(g, p.name);
      if (!v) v = g.createValue("", true);
      ValueInfoEntry e;
      e.value = v;
      applyType(e, v, p.type, false);
      g.valueInfos().push_back(std::move(e));
    }
  }

  // ---- functions

  std::unique_ptr<Function> function() {
    auto f = std::make_unique<Function>();
    if (accept('<')) {
      if (!accept('>')) {
        do {
          const char* kWhat = "a function field (domain, overload, opset_import, doc_string, metadata_props)";
          if (peek().kind != Tok::Id) expected(kWhat);
          Token key = take();
          expect(':');
          if (key.text == "domain") f->domain = string("a string");
          else if (key.text == "overload") f->overload = string("a string");
          else if (key.text == "opset_import") opsetList(f->opsetImports);
          else if (key.text == "doc_string") f->docString = string("a string");
          else if (key.text == "metadata_props") pairList(f->metadata);
          else errorAt(key.pos, kWhat, describe(key));
        } while (accept(','));
        expect('>');
      }
    }
    f->name = name("a function name");
    f->body = std::make_unique<Graph>();
    Graph& g = *f->body;
    g.name = f->name;
    if (accept('<')) {
      if (!accept('>')) {
        do {
          const Token& n1 = peek(1);
          if ((peek().kind == Tok::Id || peek().kind == Tok::Str) && (n1.is(',') || n1.is('>')))
            f->attributeNames.push_back(name("an attribute name"));
          else
            f->attributeDefaults.push_back(attribute(&g));
        } while (accept(','));
        expect('>');
      }
    }
    expect('(');
    std::vector<Pending> ins = entryList(')', nullptr);
    if (peek().kind != Tok::Arrow) expected("'=>'");
    take();
    expect('(');
    std::vector<Pending> outs = entryList(')', nullptr);
    std::vector<Pending> infos;
    if (accept('<')) infos = entryList('>', nullptr);
    std::vector<std::pair<Value*, TypeInfo>> typedIns;
    for (const Pending& p : ins) {
      Value* v = g.findLocal(p.name);
      if (v) issue(fmt::format("function '{}': input '{}' is listed more than once, expected unique input names", f->name, p.name));
      v = g.createValue(p.name, v != nullptr);
      g.addInput(v);
      if (p.type) typedIns.emplace_back(v, *p.type);
    }
    // typed formal parameters are value_info of the function, as onnx's parser reads them
    for (auto& [v, t] : typedIns) {
      ValueInfoEntry e;
      e.value = v;
      applyType(e, v, t, false);
      g.valueInfos().push_back(std::move(e));
    }
    expect('{');
    while (!peek().is('}')) {
      if (peek().kind == Tok::End) expected("a node or '}'");
      node(g);
    }
    take();
    for (const Pending& p : outs) {
      Value* v = resolveUse(g, p.name);
      if (!v) v = g.createValue("", true);
      g.addOutput(v);
      g.outputs().back().hasType = false;
      if (p.type) {
        ValueInfoEntry e;
        e.value = v;
        applyType(e, v, p.type, false);
        g.valueInfos().push_back(std::move(e));
      }
    }
    for (const Pending& p : infos) {
      Value* v = resolveUse(g, p.name);
      if (!v) v = g.createValue("", true);
      ValueInfoEntry e;
      e.value = v;
      applyType(e, v, p.type, false);
      g.valueInfos().push_back(std::move(e));
    }
    return f;
  }
};

}  // namespace

std::string printModelText(const Model& model, const TextPrintOptions& options) {
  Printer p(options);
  p.model(model);
  return std::move(p.out);
}

std::string printGraphText(const Graph& graph, const TextPrintOptions& options) {
  Printer p(options);
  p.graph(graph, 0);
  p.out += "\n";
  return std::move(p.out);
}

std::unique_ptr<Model> parseModelText(std::string_view text, const std::string& path) {
  auto model = std::make_unique<Model>();
  model->path = path;
  model->fileSize = text.size();
  Parser parser(text, path, *model);
  parser.parseModel();
  return model;
}

}  // namespace onnxtool
