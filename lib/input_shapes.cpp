// input_shapes.cpp: parsing and applying `--shape NAME=DIMS` (see input_shapes.h).
#include "lib/input_shapes.h"

#include <cctype>
#include <charconv>
#include <map>
#include <set>

#include "lib/error.h"

namespace onnxtool {

namespace {

bool isInteger(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

bool isIdentifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

Dim toDim(const std::string& d) {
  if (d == "?") return Dim();
  if (isInteger(d)) {
    int64_t v = 0;
    std::from_chars(d.data(), d.data() + d.size(), v);
    return Dim::ofValue(v);
  }
  return Dim::ofParam(d);
}

/// Replaces the symbols of `renames` inside a (possibly nested) type.
void substitute(TypeInfo& t, const std::map<std::string, Dim>& renames) {
  for (Dim& d : t.shape.dims) {
    if (!d.isParam()) continue;
    auto it = renames.find(d.param);
    if (it == renames.end()) continue;
    std::string denotation = d.denotation;
    d = it->second;
    d.denotation = denotation;
  }
  if (t.inner) {
    auto inner = std::make_shared<TypeInfo>(*t.inner);
    substitute(*inner, renames);
    t.inner = std::move(inner);
  }
}

void substituteEntries(std::vector<ValueInfoEntry>& entries, const std::map<std::string, Dim>& renames) {
  for (ValueInfoEntry& e : entries) {
    if (e.typeOverride) substitute(*e.typeOverride, renames);
    if (e.value && !e.value->type().isNone()) {
      TypeInfo t = e.value->type();
      substitute(t, renames);
      e.value->setType(std::move(t));
    }
  }
}

}  // namespace

std::optional<std::vector<int64_t>> InputShapeSpec::numericDims() const {
  std::vector<int64_t> out;
  for (const std::string& d : dims) {
    if (!isInteger(d)) return std::nullopt;
    out.push_back(toDim(d).value);
  }
  return out;
}

InputShapeSpec parseInputShape(const std::string& spec) {
  auto eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0)
    fail(ErrorKind::InvalidInput, "--shape '{}': expected NAME=DIMS, e.g. input_ids=1x128 or input_ids=batch,seq", spec);
  InputShapeSpec s;
  s.text = spec;
  s.name = spec.substr(0, eq);
  std::string dims = spec.substr(eq + 1);
  if (dims.empty() || dims == "scalar") return s;  // rank 0
  std::string cur;
  for (size_t i = 0; i <= dims.size(); ++i) {
    char c = i < dims.size() ? dims[i] : ',';
    // 'x' separates only between numbers ("1x128"); inside a name it is a letter
    if (c == 'x' && !isInteger(cur)) {
      cur += c;
      continue;
    }
    if (c != ',' && c != 'x') {
      cur += c;
      continue;
    }
    if (cur.empty()) fail(ErrorKind::InvalidInput, "--shape '{}': empty dimension, expected DIMS like 1,3,224,224", spec);
    if (isInteger(cur)) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(cur.data(), cur.data() + cur.size(), v);
      if (ec != std::errc() || v > (int64_t{1} << 40))
        fail(ErrorKind::InvalidInput, "--shape '{}': dimension {} is too large", spec, cur);
    } else if (cur != "?" && !isIdentifier(cur)) {
      fail(ErrorKind::InvalidInput,
           "--shape '{}': dimension '{}' is not a non-negative integer, a name (letters, digits, _) or '?'", spec, cur);
    }
    s.dims.push_back(cur);
    cur.clear();
  }
  return s;
}

std::vector<InputShapeSpec> parseInputShapes(const std::vector<std::string>& specs) {
  std::vector<InputShapeSpec> out;
  std::set<std::string> seen;
  for (const std::string& text : specs) {
    InputShapeSpec s = parseInputShape(text);
    if (!seen.insert(s.name).second)
      fail(ErrorKind::InvalidInput, "--shape '{}': input '{}' is given more than once", text, s.name);
    out.push_back(std::move(s));
  }
  return out;
}

void applyInputShapes(Model& model, const std::vector<InputShapeSpec>& specs) {
  if (specs.empty()) return;
  if (!model.graph) fail(ErrorKind::InvalidInput, "--shape: the model has no graph");
  Graph& g = *model.graph;
  auto inputList = [&] {
    std::string names;
    for (const ValueInfoEntry& e : g.inputs())
      if (e.value && !e.value->initializer() && !e.value->sparseInitializer())
        names += (names.empty() ? "" : ", ") + e.value->name();
    return names.empty() ? std::string("none") : names;
  };
  // model symbol -> (replacement, the spec that asked for it)
  std::map<std::string, std::pair<Dim, std::string>> renames;
  std::vector<std::pair<ValueInfoEntry*, TypeInfo>> updates;
  for (const InputShapeSpec& s : specs) {
    ValueInfoEntry* entry = nullptr;
    for (ValueInfoEntry& e : g.inputs())
      if (e.value && e.value->name() == s.name) entry = &e;
    if (!entry || entry->value->initializer() || entry->value->sparseInitializer())
      fail(ErrorKind::InvalidInput, "--shape '{}': the model has no input '{}'; its inputs are: {}", s.text, s.name,
           inputList());
    TypeInfo t = entry->type();
    if (t.isNone()) t.kind = TypeInfo::Kind::Tensor;
    if (!t.isTensor())
      fail(ErrorKind::InvalidInput, "--shape '{}': input '{}' is {}, not a tensor", s.text, s.name, t.str());
    if (t.shape.hasRank && t.shape.rank() != s.dims.size())
      fail(ErrorKind::InvalidInput, "--shape '{}': input '{}' has rank {} ({}), got {} dims", s.text, s.name,
           t.shape.rank(), t.shape.str(), s.dims.size());
    Shape shape;
    shape.hasRank = true;
    for (size_t i = 0; i < s.dims.size(); ++i) {
      Dim d = toDim(s.dims[i]);
      if (t.shape.hasRank) {
        const Dim& old = t.shape.dims[i];
        d.denotation = old.denotation;
        if (old.isParam() && !d.isUnknown() && !(d.isParam() && d.param == old.param)) {
          auto [it, fresh] = renames.try_emplace(old.param, d, s.text);
          if (!fresh && !(it->second.first == d))
            fail(ErrorKind::InvalidInput, "--shape '{}': the model's dim '{}' is set to {} here but to {} by --shape '{}'",
                 s.text, old.param, d.str(), it->second.first.str(), it->second.second);
        }
      }
      shape.dims.push_back(std::move(d));
    }
    t.shape = std::move(shape);
    updates.emplace_back(entry, std::move(t));
  }
  std::map<std::string, Dim> subst;
  for (const auto& [from, to] : renames) subst[from] = to.first;
  g.forEachGraph([&](Graph& sub) {
    substituteEntries(sub.inputs(), subst);
    substituteEntries(sub.outputs(), subst);
    substituteEntries(sub.valueInfos(), subst);
  });
  for (auto& [entry, t] : updates) {
    entry->typeOverride.reset();
    entry->hasType = true;
    entry->value->setType(std::move(t));
  }
}

void applyInputShapes(Model& model, const std::vector<std::string>& specs) {
  applyInputShapes(model, parseInputShapes(specs));
}

}  // namespace onnxtool
