// wire_splice.cpp: a minimal protobuf wire-format walker for ModelProto.graph.initializer.raw_data.
#include "formats/wire_splice.h"

#include <algorithm>

namespace onnxtool::wire {

namespace {

constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorRawData = 9;

struct Field {
  uint32_t number;
  uint32_t wireType;
  size_t start;         ///< offset of the tag
  size_t payloadStart;  ///< LEN fields: first payload byte
  size_t end;           ///< one past the field
};

bool readVarint(const uint8_t* data, size_t end, size_t& pos, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= end) return false;
    uint8_t b = data[pos++];
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/// Walks the fields of the message [begin, end). Returns false on malformed input or groups.
template <typename F>
bool walk(const uint8_t* data, size_t begin, size_t end, F&& f) {
  size_t pos = begin;
  while (pos < end) {
    Field fd{};
    fd.start = pos;
    uint64_t tag;
    if (!readVarint(data, end, pos, tag)) return false;
    fd.number = static_cast<uint32_t>(tag >> 3);
    fd.wireType = static_cast<uint32_t>(tag & 7);
    if (fd.number == 0) return false;
    uint64_t v;
    switch (fd.wireType) {
      case 0:
        if (!readVarint(data, end, pos, v)) return false;
        break;
      case 1:
        if (end - pos < 8) return false;
        pos += 8;
        break;
      case 5:
        if (end - pos < 4) return false;
        pos += 4;
        break;
      case 2:
        if (!readVarint(data, end, pos, v) || v > end - pos) return false;
        fd.payloadStart = pos;
        pos += static_cast<size_t>(v);
        break;
      default: return false;  // groups (3, 4) and invalid types: leave it to protobuf
    }
    fd.end = pos;
    if (!f(fd)) return false;
  }
  return pos == end;
}

void appendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void appendTag(std::string& out, uint32_t number) { appendVarint(out, static_cast<uint64_t>(number) << 3 | 2); }

// Field numbers of onnx.proto walked by checkNodeLimits.
constexpr uint32_t kModelFunctions = 25;
constexpr uint32_t kModelTrainingInfo = 20;
constexpr uint32_t kTrainingInitialization = 1;
constexpr uint32_t kTrainingAlgorithm = 2;
constexpr uint32_t kGraphNode = 1;
constexpr uint32_t kFunctionNode = 7;
constexpr uint32_t kFunctionAttributeProto = 11;
constexpr uint32_t kNodeName = 3;
constexpr uint32_t kNodeOpType = 4;
constexpr uint32_t kNodeAttribute = 5;
constexpr uint32_t kAttributeGraph = 6;
constexpr uint32_t kAttributeGraphs = 11;

/// The walk of checkNodeLimits: stops at the first limit exceeded (`problem`) or malformed field.
class NodeCensus {
 public:
  NodeCensus(const uint8_t* data, uint64_t maxNodes, int maxDepth) : data_(data), maxNodes_(maxNodes), maxDepth_(maxDepth) {}
  std::optional<std::string> problem;

  /// The nodes (field `nodeField`) of a graph or function body [begin, end) at subgraph depth `depth`.
  bool body(size_t begin, size_t end, uint32_t nodeField, int depth) {
    return walk(data_, begin, end, [&](const Field& f) {
      if (f.number != nodeField) return true;
      return f.wireType == 2 && node(f, depth);
    });
  }

  /// Default attribute values of a function (they may hold graphs).
  bool functionAttributes(size_t begin, size_t end) {
    return walk(data_, begin, end, [&](const Field& f) {
      if (f.number != kFunctionAttributeProto) return true;
      return f.wireType == 2 && attribute(f, "a default attribute value of a function", 0);
    });
  }

 private:
  bool node(const Field& nf, int depth) {
    if (++nodes_ > maxNodes_) {
      problem = "model has more than " + std::to_string(maxNodes_) +
                " nodes (main graph, subgraphs and functions together), refused as too large (onnxtool's limit)";
      return false;
    }
    std::string name, opType;
    std::vector<Field> attributes;
    if (!walk(data_, nf.payloadStart, nf.end, [&](const Field& f) {
          if (f.wireType != 2) return true;
          if (f.number == kNodeName || f.number == kNodeOpType) {
            size_t n = std::min<size_t>(f.end - f.payloadStart, 64);
            (f.number == kNodeName ? name : opType).assign(reinterpret_cast<const char*>(data_ + f.payloadStart), n);
          } else if (f.number == kNodeAttribute) {
            attributes.push_back(f);
          }
          return true;
        }))
      return false;
    std::string label = "node '" + name + "' (" + opType + ")";
    for (const Field& a : attributes)
      if (!attribute(a, label, depth)) return false;
    return true;
  }

  bool attribute(const Field& af, const std::string& nodeLabel, int depth) {
    return walk(data_, af.payloadStart, af.end, [&](const Field& f) {
      if (f.number != kAttributeGraph && f.number != kAttributeGraphs) return true;
      if (f.wireType != 2) return false;
      if (depth + 1 > maxDepth_) {
        problem = nodeLabel + " nests subgraphs " + std::to_string(depth + 1) + (depth == 0 ? " level" : " levels") +
                  " deep, expected at most " + std::to_string(maxDepth_) + " (onnxtool's limit)";
        return false;
      }
      return body(f.payloadStart, f.end, kGraphNode, depth + 1);
    });
  }

  const uint8_t* data_;
  uint64_t maxNodes_;
  int maxDepth_;
  uint64_t nodes_ = 0;
};

}  // namespace

std::optional<std::string> checkNodeLimits(const uint8_t* data, size_t size, uint64_t maxNodes, int maxDepth) {
  NodeCensus census(data, maxNodes, maxDepth);
  walk(data, 0, size, [&](const Field& f) {
    if (f.wireType != 2) return true;
    if (f.number == kModelGraph) return census.body(f.payloadStart, f.end, kGraphNode, 0);
    if (f.number == kModelFunctions)
      return census.body(f.payloadStart, f.end, kFunctionNode, 0) && census.functionAttributes(f.payloadStart, f.end);
    if (f.number == kModelTrainingInfo)
      return walk(data, f.payloadStart, f.end, [&](const Field& t) {
        if (t.wireType != 2 || (t.number != kTrainingInitialization && t.number != kTrainingAlgorithm)) return true;
        return census.body(t.payloadStart, t.end, kGraphNode, 0);
      });
    return true;
  });
  return census.problem;
}

namespace {

/// Which length-delimited fields of a message type hold a submessage (and of what type), and
/// which hold packed numbers or tensor bytes (never strings): what mayHoldLongStrings needs.
enum class Msg { Model, Graph, Node, Attribute, Tensor, SparseTensor, Function, Training, None };

Msg submessage(Msg in, uint32_t field) {
  switch (in) {
    case Msg::Model: return field == 7 ? Msg::Graph : field == 25 ? Msg::Function : field == 20 ? Msg::Training : Msg::None;
    case Msg::Graph: return field == 1 ? Msg::Node : field == 5 ? Msg::Tensor : field == 15 ? Msg::SparseTensor : Msg::None;
    case Msg::Node: return field == 5 ? Msg::Attribute : Msg::None;
    case Msg::Attribute:
      return field == 5 || field == 10 ? Msg::Tensor : field == 6 || field == 11 ? Msg::Graph : field == 22 || field == 23 ? Msg::SparseTensor
                                                                                                                        : Msg::None;
    case Msg::SparseTensor: return field == 1 || field == 2 ? Msg::Tensor : Msg::None;
    case Msg::Function: return field == 7 ? Msg::Node : Msg::None;
    case Msg::Training: return field == 1 || field == 2 ? Msg::Graph : Msg::None;
    default: return Msg::None;
  }
}

/// TensorProto's fields that are never strings: dims (1), float/int32/int64/double/uint64
/// data packed (4, 5, 7, 10, 11), raw_data (9).
bool numericTensorField(uint32_t field) { return field == 1 || field == 4 || field == 5 || field == 7 || field == 9 || field == 10 || field == 11; }

bool noLongStrings(const uint8_t* data, size_t begin, size_t end, Msg type, size_t limit) {
  return walk(data, begin, end, [&](const Field& f) {
    if (f.wireType != 2 || f.end - f.payloadStart <= limit) return true;  // a string within the limit, or no string
    if (type == Msg::Tensor && numericTensorField(f.number)) return true;
    const Msg sub = submessage(type, f.number);
    return sub != Msg::None && noLongStrings(data, f.payloadStart, f.end, sub, limit);
  });
}

}  // namespace

bool mayHoldLongStrings(const uint8_t* data, size_t size, size_t limit) {
  return !noLongStrings(data, 0, size, Msg::Model, limit);
}

namespace {

constexpr uint32_t kAttributeTensor = 5;

/// The single raw_data field of the TensorProto [begin, end) when it holds at least `minBytes`;
/// nullopt when there is none, it is small or there are two (protobuf keeps the last: left to
/// it, uncut). False on malformed input.
bool findRaw(const uint8_t* data, size_t begin, size_t end, size_t minBytes, std::optional<Field>& raw) {
  int count = 0;
  if (!walk(data, begin, end, [&](const Field& t) {
        if (t.number == kTensorRawData) {
          if (t.wireType != 2) return false;
          raw = t;
          ++count;
        }
        return true;
      }))
    return false;
  if (count > 1 || (raw && raw->end - raw->payloadStart < minBytes)) raw.reset();
  return true;
}

/// Appends [from, to) of data.
void copy(std::string& out, const uint8_t* data, size_t from, size_t to) { out.append(reinterpret_cast<const char*>(data + from), to - from); }

/// Appends LEN field `number` holding `payload`.
void appendLen(std::string& out, uint32_t number, const std::string& payload) {
  appendTag(out, number);
  appendVarint(out, payload.size());
  out += payload;
}

/// The payload of message [begin, end) with the fields in `cuts` (sorted, non-overlapping, whole
/// fields of it) replaced by `with` (the same count).
std::string rebuild(const uint8_t* data, size_t begin, size_t end, const std::vector<Field>& cuts, const std::vector<std::string>& with) {
  std::string out;
  size_t pos = begin;
  for (size_t i = 0; i < cuts.size(); ++i) {
    copy(out, data, pos, cuts[i].start);
    out += with[i];
    pos = cuts[i].end;
  }
  copy(out, data, pos, end);
  return out;
}

/// A main-graph node [nf]: with the raw_data of its tensor attributes of at least `minBytes` cut,
/// recorded in `spans` (node index `index`); the rebuilt node field, or "" when nothing was cut.
/// False on malformed input.
bool spliceNode(const uint8_t* data, const Field& nf, size_t index, size_t minBytes, std::vector<NodeSpan>& spans, std::string& out) {
  std::vector<Field> attrCuts;
  std::vector<std::string> attrs;
  size_t attrIndex = 0;
  if (!walk(data, nf.payloadStart, nf.end, [&](const Field& a) {
        if (a.number != kNodeAttribute) return true;
        if (a.wireType != 2) return false;
        std::optional<Field> tensor, raw;
        int tensors = 0;
        if (!walk(data, a.payloadStart, a.end, [&](const Field& f) {
              if (f.number == kAttributeTensor) {
                if (f.wireType != 2) return false;
                tensor = f;
                ++tensors;
              }
              return true;
            }))
          return false;
        if (tensors > 1) tensor.reset();  // protobuf merges them: left to it, uncut
        if (tensor && !findRaw(data, tensor->payloadStart, tensor->end, minBytes, raw)) return false;
        if (raw) {
          std::string t = rebuild(data, tensor->payloadStart, tensor->end, {*raw}, {std::string()});
          std::string tensorField;
          appendLen(tensorField, kAttributeTensor, t);
          std::string attr;
          appendLen(attr, kNodeAttribute, rebuild(data, a.payloadStart, a.end, {*tensor}, {tensorField}));
          attrCuts.push_back(a);
          attrs.push_back(std::move(attr));
          spans.push_back({index, attrIndex, Span{raw->payloadStart, raw->end - raw->payloadStart}});
        }
        ++attrIndex;
        return true;
      }))
    return false;
  if (!attrCuts.empty()) {
    out.clear();
    appendLen(out, kGraphNode, rebuild(data, nf.payloadStart, nf.end, attrCuts, attrs));
  }
  return true;
}

}  // namespace

std::optional<Spliced> spliceInitializerData(const uint8_t* data, size_t size, size_t minBytes) {
  std::optional<Field> graph;
  int graphCount = 0;
  if (!walk(data, 0, size, [&](const Field& f) {
        if (f.number == kModelGraph) {
          if (f.wireType != 2) return false;
          graph = f;
          ++graphCount;
        }
        return true;
      }))
    return std::nullopt;
  if (graphCount != 1) return std::nullopt;

  // The graph's fields to replace (initializers and nodes that lose payloads), with their new bytes.
  std::vector<Field> cuts;
  std::vector<std::string> with;
  std::vector<std::optional<Span>> raw;
  std::vector<NodeSpan> nodeRaw;
  size_t nodeIndex = 0;
  bool ok = walk(data, graph->payloadStart, graph->end, [&](const Field& f) {
    if (f.number == kGraphNode) {
      if (f.wireType != 2) return false;
      std::string node;
      if (!spliceNode(data, f, nodeIndex++, minBytes, nodeRaw, node)) return false;
      if (!node.empty()) {
        cuts.push_back(f);
        with.push_back(std::move(node));
      }
      return true;
    }
    if (f.number != kGraphInitializer) return true;
    if (f.wireType != 2) return false;
    std::optional<Field> rawField;
    if (!findRaw(data, f.payloadStart, f.end, minBytes, rawField)) return false;
    if (rawField) {
      std::string tensor;
      appendLen(tensor, kGraphInitializer, rebuild(data, f.payloadStart, f.end, {*rawField}, {std::string()}));
      cuts.push_back(f);
      with.push_back(std::move(tensor));
      raw.push_back(Span{rawField->payloadStart, rawField->end - rawField->payloadStart});
    } else {
      raw.push_back(std::nullopt);
    }
    return true;
  });
  if (!ok || cuts.empty()) return std::nullopt;

  // Rebuild: [model before graph] graph-tag len' [graph content with the cuts] [model after graph]
  std::string graphBody = rebuild(data, graph->payloadStart, graph->end, cuts, with);
  Spliced out;
  out.message.reserve(size - (graph->end - graph->start) + graphBody.size() + 16);
  copy(out.message, data, 0, graph->start);
  appendLen(out.message, kModelGraph, graphBody);
  copy(out.message, data, graph->end, size);
  out.raw = std::move(raw);
  out.nodeRaw = std::move(nodeRaw);
  return out;
}

}  // namespace onnxtool::wire
