// registry.cpp: the operator schema table (generated schemas.inc) and its lookups.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <string_view>
#include <tuple>

#include "lib/ops/op_schema.h"

namespace onnxtool {
namespace schema_data {

/// Opset versions of one domain, as onnx reports them.
struct DomainVersions {
  std::string_view domain;
  int64_t minVersion;
  int64_t maxVersion;
};

}  // namespace schema_data
}  // namespace onnxtool

#include "lib/ops/schemas.inc"

namespace onnxtool {
namespace {

using schema_data::kSchemas;

constexpr bool schemaLess(const OpSchema& a, const OpSchema& b) {
  return std::tie(a.domain, a.name, a.sinceVersion) < std::tie(b.domain, b.name, b.sinceVersion);
}

// Lookups binary-search the table, so its order is checked when compiling, not trusted.
static_assert(std::is_sorted(kSchemas.begin(), kSchemas.end(), schemaLess),
              "schemas.inc must be sorted by (domain, name, sinceVersion)");

constexpr std::string_view canonicalDomain(std::string_view domain) {
  return domain == "ai.onnx" ? std::string_view() : domain;
}

constexpr std::span<const OpSchema> versionsOf(std::string_view domain, std::string_view opType) {
  auto key = std::tie(domain, opType);
  auto first = std::lower_bound(
      kSchemas.begin(), kSchemas.end(), key,
      [](const OpSchema& s, const auto& k) { return std::tie(s.domain, s.name) < k; });
  auto last = std::upper_bound(first, kSchemas.end(), key, [](const auto& k, const OpSchema& s) {
    return k < std::tie(s.domain, s.name);
  });
  return {first, last};
}

constexpr bool opInTable(std::string_view domain, std::string_view opType) {
  return !versionsOf(domain, opType).empty();
}

// ops.def and the schema table come from the same generator run; a hand edit or a partial
// regeneration breaks the build here rather than a lookup at run time.
constexpr size_t countOpsInTable() {
  size_t n = 0;
  for (size_t i = 0; i < kSchemas.size(); ++i) {
    if (i == 0 || kSchemas[i].domain != kSchemas[i - 1].domain ||
        kSchemas[i].name != kSchemas[i - 1].name)
      ++n;
  }
  return n;
}
constexpr size_t kOpsInDef = 0
#define ONNXTOOL_OP(domain, name) +1
#include "lib/ops/ops.def"
    ;
static_assert(kOpsInDef == countOpsInTable(), "lib/ops/ops.def and schemas.inc list different ops");
#define ONNXTOOL_OP(domain, name) \
  static_assert(opInTable(domain, #name), "ops.def op missing in schemas.inc");
#include "lib/ops/ops.def"

template <typename T, size_t N>
std::span<const T> poolSlice(const std::array<T, N>& pool, const AttrSchema& a) {
  return std::span<const T>(pool).subspan(a.defaultOffset_, a.defaultCount_);
}

bool hasDefaultOf(const AttrSchema& a, AttrType t) { return a.hasDefault && a.type == t; }

}  // namespace

std::optional<float> AttrSchema::defaultFloat() const {
  if (!hasDefaultOf(*this, AttrType::Float)) return std::nullopt;
  return schema_data::kFloats[defaultOffset_];
}

std::optional<int64_t> AttrSchema::defaultInt() const {
  if (!hasDefaultOf(*this, AttrType::Int)) return std::nullopt;
  return schema_data::kInts[defaultOffset_];
}

std::optional<std::string_view> AttrSchema::defaultString() const {
  if (!hasDefaultOf(*this, AttrType::String)) return std::nullopt;
  return schema_data::kStrings[defaultOffset_];
}

std::optional<std::span<const float>> AttrSchema::defaultFloats() const {
  if (!hasDefaultOf(*this, AttrType::Floats)) return std::nullopt;
  return poolSlice(schema_data::kFloats, *this);
}

std::optional<std::span<const int64_t>> AttrSchema::defaultInts() const {
  if (!hasDefaultOf(*this, AttrType::Ints)) return std::nullopt;
  return poolSlice(schema_data::kInts, *this);
}

std::optional<std::span<const std::string_view>> AttrSchema::defaultStrings() const {
  if (!hasDefaultOf(*this, AttrType::Strings)) return std::nullopt;
  return poolSlice(schema_data::kStrings, *this);
}

std::optional<std::string_view> AttrSchema::defaultProto() const {
  switch (type) {
    case AttrType::Float:
    case AttrType::Int:
    case AttrType::String:
    case AttrType::Floats:
    case AttrType::Ints:
    case AttrType::Strings: return std::nullopt;
    default:
      if (!hasDefault) return std::nullopt;
      return schema_data::kStrings[defaultOffset_];
  }
}

const AttrSchema* OpSchema::findAttr(std::string_view attrName) const {
  auto it = std::lower_bound(attributes.begin(), attributes.end(), attrName,
                             [](const AttrSchema& a, std::string_view n) { return a.name < n; });
  return it != attributes.end() && it->name == attrName ? &*it : nullptr;
}

const TypeConstraint* OpSchema::findConstraint(std::string_view param) const {
  for (const TypeConstraint& c : typeConstraints) {
    if (c.typeParamStr == param) return &c;
  }
  return nullptr;
}

const OpSchema* findSchema(std::string_view domain, std::string_view opType, int64_t opsetVersion) {
  std::span<const OpSchema> versions = versionsOf(canonicalDomain(domain), opType);
  // Last version with sinceVersion <= opsetVersion.
  auto it = std::upper_bound(versions.begin(), versions.end(), opsetVersion,
                             [](int64_t v, const OpSchema& s) { return v < s.sinceVersion; });
  return it == versions.begin() ? nullptr : &*(it - 1);
}

std::span<const OpSchema> schemaVersions(std::string_view domain, std::string_view opType) {
  return versionsOf(canonicalDomain(domain), opType);
}

std::span<const OpSchema> allSchemas() { return kSchemas; }

bool opExists(std::string_view domain, std::string_view opType) {
  return opInTable(canonicalDomain(domain), opType);
}

bool isKnownDomain(std::string_view domain) { return maxKnownOpset(domain) != 0; }

int64_t maxKnownOpset(std::string_view domain) {
  domain = canonicalDomain(domain);
  for (const schema_data::DomainVersions& d : schema_data::kDomains) {
    if (d.domain == domain) return d.maxVersion;
  }
  return 0;
}

std::string_view schemaSourceVersion() { return schema_data::kOnnxVersion; }

std::string_view ortSchemaSourceVersion() { return schema_data::kOrtVersion; }

bool isOrtContribDomain(std::string_view domain) {
  return domain == "com.microsoft" || domain == "com.microsoft.nchwc";
}

}  // namespace onnxtool
