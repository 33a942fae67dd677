// model_io.cpp: model files in and out: mapping, parsing, external data (validated, mapped,
// written), the streaming writer for large initializers, and atomic replacement of outputs.
#include "formats/model_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <map>
#include <set>

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/logging.h>

#include "formats/atomic_file.h"
#include "formats/onnx_text.h"
#include "formats/proto_convert.h"
#include "formats/wire_splice.h"
#include "lib/error.h"
#include "lib/limits.h"
#include "lib/tensor_check.h"

namespace onnxtool {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kProtoLimit = static_cast<uint64_t>(INT_MAX);  // protobuf's message size limit
constexpr uint64_t kExternalAlign = 64;
constexpr size_t kMinBorrowBytes = 256;  // smaller raw_data is cheaper to copy than to track

void quietProtobufLogs() {
  static bool done = [] {
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)done;
}

/// Resolves external data for tensors of one model, caching one map per file.
class ExternalResolver {
 public:
  ExternalResolver(std::string modelFile, std::string baseDir, bool strict, std::vector<std::string>* issues)
      : modelFile_(std::move(modelFile)), baseDir_(std::move(baseDir)), strict_(strict), issues_(issues) {}

  void bind(Tensor& t, const std::string& where) {
    try {
      bindOrThrow(t, where);
    } catch (const Error& e) {
      if (strict_) throw;
      issues_->push_back(e.what());
    }
  }

 private:
  [[noreturn]] void refuse(const Tensor& t, const std::string& where, const std::string& what) {
    fail(ErrorKind::InvalidInput, "{}: {} '{}': {}", modelFile_, where, t.name, what);
  }

  void bindOrThrow(Tensor& t, const std::string& where) {
    const ExternalDataInfo& info = *t.external;
    const std::string& loc = info.location;
    if (loc.empty()) refuse(t, where, "external data has no location");
    if (loc.find('\0') != std::string::npos) refuse(t, where, "external data location contains a NUL byte");
    fs::path rel(loc);
    if (rel.is_absolute()) refuse(t, where, fmt::format("external data location '{}' is absolute, expected a path relative to the model's folder", loc));
    std::error_code ec;
    fs::path base = fs::canonical(baseDir_.empty() ? fs::path(".") : fs::path(baseDir_), ec);
    if (ec) refuse(t, where, fmt::format("cannot resolve the model's folder '{}'", baseDir_));
    fs::path full = base / rel;
    fs::path real = fs::weakly_canonical(full, ec);
    if (ec) refuse(t, where, fmt::format("cannot resolve external data location '{}'", loc));
    auto [bi, ri] = std::mismatch(base.begin(), base.end(), real.begin(), real.end());
    if (bi != base.end())
      refuse(t, where, fmt::format("external data location '{}' escapes the model's folder", loc));
    if (!fs::exists(real, ec)) {
      if (!strict_) {  // one finding per missing file (finish()), not one per tensor
        auto& [count, first] = missing_[loc];
        if (count++ == 0) first = fmt::format("{} '{}'", where, t.name);
        return;
      }
      refuse(t, where, fmt::format("external data file '{}' not found", loc));
    }
    if (!fs::is_regular_file(real, ec)) refuse(t, where, fmt::format("external data location '{}' is not a regular file", loc));
    std::string key = real.string();
    auto it = maps_.find(key);
    if (it == maps_.end()) it = maps_.emplace(key, MappedFile::open(key)).first;
    const auto& mf = it->second;
    uint64_t size = mf->size();
    uint64_t offset = static_cast<uint64_t>(info.offset);
    if (offset > size)
      refuse(t, where, fmt::format("external data offset {} is past the end of '{}' ({} bytes)", offset, loc, size));
    uint64_t length = info.length ? static_cast<uint64_t>(*info.length) : size - offset;
    if (length > size - offset)
      refuse(t, where, fmt::format("external data range {}+{} is past the end of '{}' ({} bytes)", offset, length, loc, size));
    auto expected = t.expectedBytes();
    if (t.dtype() != DType::String && expected && *expected != length)
      refuse(t, where, fmt::format("external data length {} does not match its dims and type, expected {} bytes", length, *expected));
    t.raw = mf->buffer(mf, static_cast<size_t>(offset), static_cast<size_t>(length));
  }

  std::string modelFile_, baseDir_;
  bool strict_;
  std::vector<std::string>* issues_;
  std::map<std::string, std::shared_ptr<MappedFile>> maps_;
  std::map<std::string, std::pair<size_t, std::string>> missing_;  // location -> tensors, the first

 public:
  /// Reports each missing external data file once, with the number of tensors that need it.
  void finish() {
    for (const auto& [loc, m] : missing_) {
      if (m.first == 1)
        issues_->push_back(fmt::format("{}: {}: external data file '{}' not found", modelFile_, m.second, loc));
      else
        issues_->push_back(fmt::format("{}: external data file '{}' not found (needed by {} tensors, the first {})",
                                       modelFile_, loc, m.first, m.second));
    }
    missing_.clear();
  }
};

/// A string field holding a name (64 KiB limit) rather than free text (64 MiB).
bool isNameField(const std::string& field) {
  static const std::set<std::string> names = {"name",   "op_type",   "domain",      "input",    "output",
                                              "key",    "dim_param", "ref_attr_name", "overload", "tensor_name",
                                              "attribute"};
  return names.count(field) > 0;
}

/// Refuses a name over limits::kMaxNameBytes or another string over limits::kMaxStringBytes
/// anywhere in the parsed message (raw_data aside: tensor bytes have their own limit), naming the
/// field by its path ("graph.node[3].attribute[0].s").
class StringLimits {
 public:
  explicit StringLimits(const std::string& file) : file_(file) {}

  void check(const google::protobuf::Message& m) {
    namespace gp = google::protobuf;
    const gp::Reflection* r = m.GetReflection();
    std::vector<const gp::FieldDescriptor*> fields;
    r->ListFields(m, &fields);
    for (const gp::FieldDescriptor* fd : fields) {
      if (fd->type() == gp::FieldDescriptor::TYPE_MESSAGE) {
        if (fd->is_repeated()) {
          for (int i = 0; i < r->FieldSize(m, fd); ++i) {
            path_.push_back({fd->name(), i});
            check(r->GetRepeatedMessage(m, fd, i));
            path_.pop_back();
          }
        } else {
          path_.push_back({fd->name(), -1});
          check(r->GetMessage(m, fd));
          path_.pop_back();
        }
      } else if (fd->cpp_type() == gp::FieldDescriptor::CPPTYPE_STRING && fd->name() != "raw_data") {
        std::string scratch;
        if (fd->is_repeated()) {
          for (int i = 0; i < r->FieldSize(m, fd); ++i)
            one(fd->name(), i, r->GetRepeatedStringReference(m, fd, i, &scratch).size());
        } else {
          one(fd->name(), -1, r->GetStringReference(m, fd, &scratch).size());
        }
      }
    }
  }

 private:
  void one(const std::string& field, int index, size_t bytes) {
    bool name = isNameField(field);
    uint64_t limit = name ? limits::kMaxNameBytes : limits::kMaxStringBytes;
    if (bytes <= limit) return;
    std::string where;
    for (const auto& [f, i] : path_) where += (where.empty() ? "" : ".") + f + (i >= 0 ? fmt::format("[{}]", i) : "");
    where += (where.empty() ? "" : ".") + field + (index >= 0 ? fmt::format("[{}]", index) : "");
    fail(ErrorKind::InvalidInput, "{}: {} is {} bytes long, expected at most {} (onnxtool's limit for {})", file_, where,
         bytes, name ? "64 KiB" : "64 MiB", name ? "names" : "strings");
  }

  static_assert(limits::kMaxNameBytes == uint64_t{64} << 10 && limits::kMaxStringBytes == uint64_t{64} << 20,
                "update the limits in StringLimits' message");
  const std::string& file_;
  std::vector<std::pair<std::string, int>> path_;
};

/// Refuses a model whose inline initializers declare more bytes than the whole file holds: a
/// corrupt or malicious file, named by its first tensor that cannot hold what its dims declare.
void checkInlineBytes(const Model& m, uint64_t fileSize, const std::string& file) {
  if (!m.graph) return;
  uint64_t total = 0;
  const Tensor* first = nullptr;
  for (Value* v : m.graph->initializers()) {
    const Tensor& t = *v->initializer();
    if (t.storage == Tensor::Storage::External || t.dtype() == DType::String) continue;
    auto bytes = t.expectedBytes();
    if (bytes && *bytes <= limits::kMaxTensorBytes) {
      if (*bytes > t.raw.size() && !first) first = &t;
      if (total <= fileSize) total += *bytes;  // stops once over: no overflow (each is at most 1 TiB)
    }
  }
  if (total > fileSize && first)
    fail(ErrorKind::InvalidInput,
         "{}: inline initializers declare at least {} bytes but the file holds {} (initializer '{}': dims {} of {} need {} "
         "bytes, the file gives {}), a truncated or corrupt model",
         file, total, fileSize, first->name, tensor_check::dimsStr(first->dims), dtypeName(first->dtype()),
         *first->expectedBytes(), first->raw.size());
}

/// Parses the model in [data, data+size); `owner` keeps those bytes alive, and initializers
/// borrow their raw_data from them (zero copy) when it is set.
std::unique_ptr<Model> parseModel(const uint8_t* data, size_t size, std::shared_ptr<const void> owner,
                                  const std::shared_ptr<MappedFile>& mapped, const std::string& baseDir,
                                  const std::string& displayName, const LoadOptions& options) {
  quietProtobufLogs();
  if (size == 0) fail(ErrorKind::InvalidInput, "{}: empty file, expected an ONNX model", displayName);
  if (size > kProtoLimit)
    fail(ErrorKind::InvalidInput, "{}: {} bytes is over protobuf's 2 GiB message limit, not a valid ONNX model", displayName, size);
  if (auto problem = wire::checkNodeLimits(data, size, limits::kMaxNodes, limits::kMaxSubgraphDepth))
    fail(ErrorKind::InvalidInput, "{}: {}", displayName, *problem);
  std::optional<wire::Spliced> spliced;
  if (owner) spliced = wire::spliceInitializerData(data, size, kMinBorrowBytes);
  const uint8_t* parseData = spliced ? reinterpret_cast<const uint8_t*>(spliced->message.data()) : data;
  size_t parseSize = spliced ? spliced->message.size() : size;
  pb::ModelProto p;
  google::protobuf::io::CodedInputStream in(parseData, static_cast<int>(parseSize));
  in.SetTotalBytesLimit(INT_MAX);
  // Subgraphs take 3 message levels each (graph, node, attribute); types nest besides.
  in.SetRecursionLimit(3 * limits::kMaxSubgraphDepth + 100);
  if (!p.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    fail(ErrorKind::InvalidInput, "{}: not a valid ONNX model: protobuf parsing failed (truncated or corrupt file)", displayName);
  if (!p.has_graph() && !p.has_ir_version() && p.opset_import_size() == 0 && p.functions_size() == 0)
    fail(ErrorKind::InvalidInput, "{}: not an ONNX model: no ir_version, opset_import or graph", displayName);
  if (wire::mayHoldLongStrings(data, size, limits::kMaxNameBytes)) StringLimits(displayName).check(p);
  auto model = std::make_unique<Model>();
  model->path = displayName;
  model->baseDir = baseDir;
  model->fileSize = size;
  ExternalResolver resolver(displayName, baseDir, options.strictExternalData, &model->loadIssues);
  protoconv::FromCtx ctx;
  ctx.file = displayName;
  ctx.issues = &model->loadIssues;
  if (spliced) {
    for (const auto& span : spliced->raw) {
      if (span && mapped) ctx.mainGraphRaw.push_back(mapped->buffer(mapped, span->offset, span->length));
      else if (span) ctx.mainGraphRaw.push_back(Buffer::borrow(owner, data + span->offset, span->length));
      else ctx.mainGraphRaw.push_back(std::nullopt);
    }
    for (const auto& s : spliced->nodeRaw)
      ctx.mainGraphNodeRaw.emplace(std::make_pair(s.node, s.attribute), mapped ? mapped->buffer(mapped, s.raw.offset, s.raw.length)
                                                                                : Buffer::borrow(owner, data + s.raw.offset, s.raw.length));
  }
  if (options.loadExternalData) ctx.bindExternal = [&](Tensor& t, const std::string& where) { resolver.bind(t, where); };
  protoconv::fromProto(p, *model, ctx);
  resolver.finish();
  checkInlineBytes(*model, size, displayName);
  return model;
}

std::string readAll(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------- writing

/// Validates an output external data location: relative, no "..", no NUL.
void checkOutputLocation(const std::string& loc) {
  fs::path p(loc);
  if (loc.empty() || p.is_absolute() || loc.find('\0') != std::string::npos)
    fail(ErrorKind::InvalidInput, "external data file '{}' must be a relative path inside the output folder", loc);
  for (const auto& part : p)
    if (part == "..") fail(ErrorKind::InvalidInput, "external data file '{}' must not contain '..'", loc);
}

template <typename F>
void forEachTensor(const Graph& g, bool topLevel, F&& f) {
  for (Value* v : g.initializers()) f(*v->initializer(), true, topLevel);
  for (Value* v : g.sparseInitializers()) {
    f(v->sparseInitializer()->values, true, false);
    f(v->sparseInitializer()->indices, true, false);
  }
  for (const auto& n : g.nodes()) {
    for (const Attribute& a : n->attributes) {
      if (a.t) f(*a.t, false, false);
      for (const auto& t : a.tensors) f(*t, false, false);
      if (a.g) forEachTensor(*a.g, false, f);
      for (const auto& sg : a.graphs) forEachTensor(*sg, false, f);
    }
  }
}

template <typename F>
void forEachModelTensor(const Model& m, F&& f) {
  if (m.graph) forEachTensor(*m.graph, true, f);
  for (const auto& fn : m.functions) forEachTensor(*fn->body, false, f);
}

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void appendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

bool tensorNeedsRaw(const Tensor& t, const pb::TensorProto& p) {
  if (p.data_location() == pb::TensorProto::EXTERNAL) return false;
  if (t.dtype() == DType::String || t.storage == Tensor::Storage::Typed) return false;
  return !(t.storage == Tensor::Storage::None && t.raw.empty());
}

void bindTextExternal(Graph& g, ExternalResolver& resolver) {
  auto bind = [&](Tensor& t, const char* where) {
    if (t.storage == Tensor::Storage::External && t.external) resolver.bind(t, where);
  };
  for (Value* v : g.initializers()) bind(*v->initializer(), "initializer");
  for (const auto& n : g.nodes()) {
    for (const Attribute& a : n->attributes) {
      if (a.t) bind(*a.t, "attribute");
      for (const auto& t : a.tensors) bind(*t, "attribute");
    }
    for (Graph* sg : n->subgraphs()) bindTextExternal(*sg, resolver);
  }
}

/// ONNX's textual syntax starts with '<' (the model header) after blanks and '#' comments; a binary
/// ModelProto never does ('<' would be field 7 with the end-group wire type).
bool looksLikeText(const uint8_t* data, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
      ++i;
    } else if (data[i] == '#') {
      while (i < n && data[i] != '\n') ++i;
    } else {
      return data[i] == '<';
    }
  }
  return false;
}

std::unique_ptr<Model> loadTextModel(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(ErrorKind::InvalidInput, "{}: is a directory, expected an ONNX model file", path);
  auto mf = MappedFile::open(path);
  auto model = parseModelText(std::string_view(reinterpret_cast<const char*>(mf->data()), mf->size()), path);
  fs::path pp(path);
  model->baseDir = pp.has_parent_path() ? pp.parent_path().string() : ".";
  model->fileSize = mf->size();
  if (options.loadExternalData) {
    ExternalResolver resolver(path, model->baseDir, options.strictExternalData, &model->loadIssues);
    bindTextExternal(*model->graph, resolver);
    for (const auto& f : model->functions) bindTextExternal(*f->body, resolver);
    resolver.finish();
  }
  return model;
}

}  // namespace

bool isTextModelPath(const std::string& path) {
  constexpr std::string_view kExt = ".onnxtxt";
  return path.size() > kExt.size() && path.compare(path.size() - kExt.size(), kExt.size(), kExt) == 0;
}

uint64_t saveModelText(const Model& model, const std::string& path) {
  std::string text = printModelText(model);
  if (path == "-") {
    writeStdout(text);
    return text.size();
  }
  AtomicFile f(path);
  f.write(text);
  f.close();
  f.rename();
  return text.size();
}

std::unique_ptr<Model> loadModel(const std::string& path, const LoadOptions& options) {
  if (isTextModelPath(path)) return loadTextModel(path, options);
  if (path == "-") {
    auto bytes = std::make_shared<std::string>(readAll(std::cin));
    if (looksLikeText(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()))
      return parseModelText(*bytes, "<stdin>");
    return parseModel(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), bytes, nullptr, ".", "<stdin>", options);
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(ErrorKind::InvalidInput, "{}: is a directory, expected an ONNX model file", path);
  auto mf = MappedFile::open(path);
  if (looksLikeText(mf->data(), mf->size())) return loadTextModel(path, options);
  fs::path pp(path);
  std::string base = pp.has_parent_path() ? pp.parent_path().string() : ".";
  return parseModel(mf->data(), mf->size(), mf, mf, base, path, options);
}

std::unique_ptr<Model> loadModelFromBytes(std::string_view bytes, const std::string& baseDir,
                                          const std::string& displayName, const LoadOptions& options) {
  return parseModel(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), nullptr, nullptr, baseDir, displayName,
                    options);
}

std::string serializeModel(const Model& model) {
  pb::ModelProto p;
  protoconv::ToCtx ctx;
  protoconv::toProto(model, p, ctx);
  if (p.ByteSizeLong() > kProtoLimit)
    fail(ErrorKind::InvalidInput, "model is over protobuf's 2 GiB limit when inlined; save it with external data");
  return p.SerializeAsString();
}

uint64_t saveModel(const Model& model, const std::string& path, const SaveOptions& options) {
  using Mode = SaveOptions::ExternalMode;
  bool toStdout = path == "-";
  if (toStdout && options.refuseTerminal && ::isatty(STDOUT_FILENO))
    fail(ErrorKind::InvalidInput, "refusing to write a binary model to a terminal; redirect standard output or use a file name");

  Mode mode = options.mode;
  uint64_t threshold = options.sizeThreshold;
  bool externalizeAttrs = options.externalizeAttributes;
  // Inline size estimate: tensors that would stay inline.
  uint64_t inlineBytes = 0;
  forEachModelTensor(model, [&](const Tensor& t, bool isInit, bool) {
    bool ext = (mode == Mode::Keep && t.storage == Tensor::Storage::External) ||
               (mode == Mode::Externalize && (isInit || externalizeAttrs) && t.raw.size() >= threshold);
    if (!ext) inlineBytes += t.raw.size() + 64;
    if (t.storage == Tensor::Storage::External && t.raw.empty() && t.expectedBytes().value_or(0) > 0)
      fail(ErrorKind::InvalidInput, "tensor '{}': external data was not loaded, cannot save it", t.name);
  });
  const uint64_t kInlineBudget = options.inlineLimit ? options.inlineLimit : kProtoLimit - (64u << 20);
  if (inlineBytes > kInlineBudget) {
    if (mode == Mode::Inline || toStdout)
      fail(ErrorKind::InvalidInput, "{}: the model's {} bytes of tensors exceed protobuf's 2 GiB limit when inlined; save with external data",
           path, inlineBytes);
    mode = Mode::Externalize;  // never write a corrupt >2 GiB protobuf
    threshold = std::min<uint64_t>(threshold, 1024);
    externalizeAttrs = true;
  }
  if (toStdout && mode == Mode::Externalize)
    fail(ErrorKind::InvalidInput, "cannot write external data when the model goes to standard output");

  fs::path out(path);
  fs::path outDir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::string defaultExternal = out.filename().string() + ".data";
  std::string externalName = options.externalFile.empty() ? defaultExternal : options.externalFile;
  if (mode == Mode::Externalize) {
    checkOutputLocation(externalName);
    if (!toStdout && samePath((outDir / externalName).string(), path))
      fail(ErrorKind::InvalidInput, "{}: the external data file '{}' would be the model file itself; name another file",
           path, externalName);
  }

  std::map<std::string, std::unique_ptr<AtomicFile>> dataFiles;
  protoconv::ToCtx ctx;
  ctx.placeExternal = [&](const Tensor& t, pb::TensorProto& p, bool isInit) -> bool {
    std::string location;
    if (mode == Mode::Keep && t.storage == Tensor::Storage::External && t.external) {
      location = t.external->location;
      if (toStdout) fail(ErrorKind::InvalidInput, "tensor '{}' uses external data; cannot write it to standard output without --inline", t.name);
      checkOutputLocation(location);
      // Saving beside the source under another name must not replace the source's data file:
      // the source model would then point into a file laid out for the new one.
      std::error_code ec;
      if (!model.baseDir.empty() && !model.path.empty() && model.path != "-" &&
          !fs::equivalent(out, fs::path(model.path), ec) &&
          fs::equivalent(outDir / location, fs::path(model.baseDir) / location, ec))
        location = defaultExternal;
      // Nor may a data file land on the model file being written.
      if (samePath((outDir / location).string(), path)) location = defaultExternal;
    } else if (mode == Mode::Externalize && (isInit || externalizeAttrs) && t.raw.size() >= threshold) {
      location = externalName;
    } else {
      return false;
    }
    auto& file = dataFiles[location];
    if (!file) file = std::make_unique<AtomicFile>((outDir / location).string());
    file->pad(kExternalAlign);
    uint64_t offset = file->written();
    file->write(t.raw.data(), t.raw.size());
    p.clear_external_data();
    auto add = [&](const std::string& k, const std::string& v) {
      auto* e = p.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(t.raw.size()));
    if (t.external)
      for (const auto& [k, v] : t.external->entries)
        if (k != "location" && k != "offset" && k != "length" && k != "checksum") add(k, v);
    p.clear_raw_data();
    return true;
  };
  ctx.deferTopLevelRaw = true;

  pb::ModelProto p;
  protoconv::toProto(model, p, ctx);

  // Stream: model fields, then the graph with its initializers' raw bytes written straight from
  // the IR's buffers (no second copy of the weights in memory). Field order is free in protobuf.
  bool hasGraph = p.has_graph();
  pb::GraphProto g;
  g.Swap(p.mutable_graph());
  p.clear_graph();
  google::protobuf::RepeatedPtrField<pb::TensorProto> inits;
  inits.Swap(g.mutable_initializer());
  std::string head = p.SerializeAsString();
  std::string graphHead = g.SerializeAsString();
  std::vector<std::string> tensorHeads;
  std::vector<const Tensor*> rawOf;
  uint64_t graphLen = graphHead.size();
  const auto& initValues = model.graph ? model.graph->initializers() : std::vector<Value*>{};
  for (int i = 0; i < inits.size(); ++i) {
    const Tensor& t = *initValues[static_cast<size_t>(i)]->initializer();
    std::string th = inits.Get(i).SerializeAsString();
    bool raw = tensorNeedsRaw(t, inits.Get(i));
    if (raw) {
      th.push_back(static_cast<char>((9 << 3) | 2));
      appendVarint(th, t.raw.size());
    }
    uint64_t tensorLen = th.size() + (raw ? t.raw.size() : 0);
    graphLen += 1 + varintSize(tensorLen) + tensorLen;
    std::string framed;
    framed.push_back(static_cast<char>((5 << 3) | 2));
    appendVarint(framed, tensorLen);
    tensorHeads.push_back(framed + th);
    rawOf.push_back(raw ? &t : nullptr);
  }
  uint64_t total = head.size() + (hasGraph ? 1 + varintSize(graphLen) + graphLen : 0);
  if (total > kProtoLimit)
    fail(ErrorKind::InvalidInput, "{}: the serialized model would be {} bytes, over protobuf's 2 GiB limit; use external data", path, total);

  auto emit = [&](auto&& writeFn) {
    writeFn(head);
    if (!hasGraph) return;
    std::string frame;
    frame.push_back(static_cast<char>((7 << 3) | 2));
    appendVarint(frame, graphLen);
    writeFn(frame);
    writeFn(graphHead);
    for (size_t i = 0; i < tensorHeads.size(); ++i) {
      writeFn(tensorHeads[i]);
      if (rawOf[i]) writeFn(rawOf[i]->raw.view());
    }
  };
  if (toStdout) {
    uint64_t n = 0;
    emit([&n](std::string_view s) {
      writeStdout(s);
      n += s.size();
    });
    return n;
  }
  AtomicFile modelFile(path);
  emit([&](std::string_view s) { modelFile.write(s); });
  for (auto& [loc, f] : dataFiles) f->close();
  modelFile.close();
  for (auto& [loc, f] : dataFiles) f->rename();
  modelFile.rename();
  return modelFile.written();
}

Tensor loadTensorProto(std::string_view bytes, const std::string& displayName) {
  quietProtobufLogs();
  pb::TensorProto p;
  if (bytes.size() > kProtoLimit || !p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    fail(ErrorKind::InvalidInput, "{}: not a valid TensorProto (protobuf parsing failed)", displayName);
  std::vector<std::string> issues;
  protoconv::FromCtx ctx;
  ctx.file = displayName;
  ctx.issues = &issues;
  Tensor t;
  protoconv::fromProto(p, t, ctx, "tensor");
  if (!issues.empty()) fail(ErrorKind::InvalidInput, "{}", issues.front());
  return t;
}

std::string serializeTensorProto(const Tensor& t) {
  pb::TensorProto p;
  protoconv::ToCtx ctx;
  protoconv::toProto(t, p, ctx, false);
  return p.SerializeAsString();
}

}  // namespace onnxtool
