// wire_splice.cpp: a minimal protobuf wire-format walker for ModelProto.graph.initializer.raw_data.
#include "formats/wire_splice.h"

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

  struct Cut {
    Field tensor;
    Field raw;
  };
  std::vector<Cut> cuts;
  std::vector<std::optional<Span>> raw;
  bool ok = walk(data, graph->payloadStart, graph->end, [&](const Field& f) {
    if (f.number != kGraphInitializer) return true;
    if (f.wireType != 2) return false;
    std::optional<Field> rawField;
    int rawCount = 0;
    if (!walk(data, f.payloadStart, f.end, [&](const Field& t) {
          if (t.number == kTensorRawData) {
            if (t.wireType != 2) return false;
            rawField = t;
            ++rawCount;
          }
          return true;
        }))
      return false;
    if (rawCount == 1 && rawField->end - rawField->payloadStart >= minBytes) {
      cuts.push_back({f, *rawField});
      raw.push_back(Span{rawField->payloadStart, rawField->end - rawField->payloadStart});
    } else {
      raw.push_back(std::nullopt);
    }
    return true;
  });
  if (!ok || cuts.empty()) return std::nullopt;

  // Rebuild: [model before graph] graph-tag len' [graph content with cut tensors] [model after graph]
  std::string graphBody;
  size_t pos = graph->payloadStart;
  for (const Cut& c : cuts) {
    graphBody.append(reinterpret_cast<const char*>(data + pos), c.tensor.start - pos);
    size_t tensorLen = (c.tensor.end - c.tensor.payloadStart) - (c.raw.end - c.raw.start);
    appendTag(graphBody, kGraphInitializer);
    appendVarint(graphBody, tensorLen);
    graphBody.append(reinterpret_cast<const char*>(data + c.tensor.payloadStart), c.raw.start - c.tensor.payloadStart);
    graphBody.append(reinterpret_cast<const char*>(data + c.raw.end), c.tensor.end - c.raw.end);
    pos = c.tensor.end;
  }
  graphBody.append(reinterpret_cast<const char*>(data + pos), graph->end - pos);

  Spliced out;
  out.message.reserve(size - (graph->end - graph->start) + graphBody.size() + 16);
  out.message.append(reinterpret_cast<const char*>(data), graph->start);
  appendTag(out.message, kModelGraph);
  appendVarint(out.message, graphBody.size());
  out.message += graphBody;
  out.message.append(reinterpret_cast<const char*>(data + graph->end), size - graph->end);
  out.raw = std::move(raw);
  return out;
}

}  // namespace onnxtool::wire
