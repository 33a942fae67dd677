// kernel.cpp: the kernel registry and KernelContext helpers.
#include "exec/kernel.h"

#include <algorithm>
#include <mutex>

#include "lib/error.h"

namespace onnxtool {

const Attribute* AttrScope::find(std::string_view name) const {
  if (callerAttrs)
    for (const Attribute& a : *callerAttrs)
      if (a.name == name) return a.refAttrName.empty() || !parent ? &a : parent->find(a.refAttrName);
  if (defaults)
    for (const Attribute& a : *defaults)
      if (a.name == name) return &a;
  return nullptr;
}

const Attribute* KernelContext::attr(std::string_view name) const {
  const Attribute* a = node_.attr(name);
  if (a && !a->refAttrName.empty()) return scope_ ? scope_->find(a->refAttrName) : nullptr;
  return a;
}

int64_t KernelContext::attrInt(std::string_view name, int64_t def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Int ? a->i : def;
}

float KernelContext::attrFloat(std::string_view name, float def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Float ? a->f : def;
}

std::string KernelContext::attrString(std::string_view name, const std::string& def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::String ? a->s : def;
}

std::vector<int64_t> KernelContext::attrInts(std::string_view name, std::vector<int64_t> def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Ints ? a->ints : def;
}

std::vector<float> KernelContext::attrFloats(std::string_view name, std::vector<float> def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Floats ? a->floats : def;
}

std::vector<std::string> KernelContext::attrStrings(std::string_view name, std::vector<std::string> def) const {
  const Attribute* a = attr(name);
  return a && a->type == AttrType::Strings ? a->strings : def;
}

const RtTensor& KernelContext::tensor(size_t i) const {
  const RtValue* v = input(i);
  if (!v || v->isEmpty()) fail(fmt::format("input {} is missing", i));
  if (!v->isTensor()) fail(fmt::format("input {} is not a tensor", i));
  if (!v->tensor->device.isCpu()) fail(fmt::format("input {} is on {}; host kernels read host tensors", i, v->tensor->device.str()));
  return *v->tensor;
}

void KernelContext::fail(std::string_view what) const {
  onnxtool::fail(ErrorKind::InvalidInput, "node '{}' ({}): {}", node_.displayName(), node_.opType, what);
}

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry r;
  return r;
}

void KernelRegistry::add(const KernelDef& def) { kernels_.push_back(def); }

const KernelDef* KernelRegistry::find(std::string_view executor, std::string_view domain, std::string_view opType,
                                      int64_t schemaVersion) const {
  const KernelDef* best = nullptr;
  for (const KernelDef& k : kernels_) {
    if (k.executor != executor || k.opType != opType || canonicalDomain(k.domain) != canonicalDomain(domain)) continue;
    if (k.sinceVersion > schemaVersion) continue;
    if (!best || k.sinceVersion > best->sinceVersion) best = &k;
  }
  return best;
}

}  // namespace onnxtool
