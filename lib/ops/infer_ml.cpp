// infer_ml.cpp: shape inference for the ai.onnx.ml domain (classic machine-learning operators:
// linear models, SVMs, tree ensembles, encoders and feature transforms).
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

constexpr std::string_view kMl = "ai.onnx.ml";

SymDim rows(InferContext& c) {
  auto x = c.inputShape(0);
  if (!x || x->empty()) return std::nullopt;
  return x->size() == 1 ? SymDim(SymExpr(1)) : (*x)[0];
}

void sameShape(InferContext& c, DType dt) {
  if (auto x = c.inputShape(0)) c.setOutput(0, dt, *x);
  else c.setOutputDType(0, dt);
}

void sameTypeAndShape(InferContext& c) { sameShape(c, c.inputDType(0)); }
void floatSameShape(InferContext& c) { sameShape(c, DType::Float); }

void arrayFeatureExtractor(InferContext& c) {
  auto x = c.inputShape(0), y = c.inputShape(1);
  if (!x) return;
  if (x->empty()) c.fail("X must have rank >= 1");
  SymDim k = y ? [&]() -> SymDim {
    SymExpr n(1);
    for (const SymDim& d : *y) {
      if (!d) return std::nullopt;
      n = n * *d;
    }
    return n;
  }()
               : std::nullopt;
  SymShape out = x->size() == 1 ? SymShape{SymExpr(1)} : SymShape(x->begin(), x->end() - 1);
  out.push_back(k);
  c.setOutput(0, c.inputDType(0), out);
}

void castMap(InferContext& c) {
  std::string to = c.attrString("cast_to", "TO_FLOAT");
  DType dt = to == "TO_STRING" ? DType::String : to == "TO_INT64" ? DType::Int64 : DType::Float;
  SymDim n;
  if (c.attrString("map_form", "DENSE") == "SPARSE") n = SymExpr(c.attrInt("max_map", 1));
  c.setOutput(0, dt, {SymExpr(1), n});
}

void categoryMapper(InferContext& c) {
  sameShape(c, c.inputDType(0) == DType::String ? DType::Int64 : DType::String);
}

void dictVectorizer(InferContext& c) {
  const TypeInfo& t = c.inputType(0);
  DType dt = t.kind == TypeInfo::Kind::Map && t.inner && t.inner->isTensor() ? t.inner->dtype() : DType::Undefined;
  size_t n = 0;
  if (const Attribute* a = c.attr("string_vocabulary")) n = a->strings.size();
  if (const Attribute* a = c.attr("int64_vocabulary")) n = a->ints.size();
  if (dt != DType::Undefined) c.setOutput(0, dt, {SymExpr(1), SymExpr(static_cast<int64_t>(n))});
}

void featureVectorizer(InferContext& c) {
  auto dims = c.attrInts("inputdimensions");
  SymDim total;
  if (dims) {
    int64_t sum = 0;
    for (int64_t d : *dims) sum += d;
    total = SymExpr(sum);
  }
  c.setOutput(0, DType::Float, {rows(c), total});
}

void labelEncoder(InferContext& c) {
  DType dt = DType::Undefined;
  if (c.attr("values_strings")) dt = DType::String;
  else if (c.attr("values_int64s")) dt = DType::Int64;
  else if (c.attr("values_floats")) dt = DType::Float;
  else if (const Attribute* a = c.attr("values_tensor"); a && a->t) dt = a->t->dtype();
  else if (c.sinceVersion() < 2) dt = c.inputDType(0) == DType::String ? DType::Int64 : DType::String;
  sameShape(c, dt);
}

/// Classifiers: labels (N) as ints or strings, scores (N, classes).
void classifier(InferContext& c, size_t classes) {
  DType labels = c.attr("classlabels_strings") ? DType::String : DType::Int64;
  SymDim n = rows(c);
  c.setOutput(0, labels, {n});
  SymDim columns = classes ? SymDim(SymExpr(static_cast<int64_t>(classes))) : std::nullopt;
  if (c.hasOutput(1)) c.setOutput(1, DType::Float, {n, columns});
}

size_t classCount(InferContext& c) {
  if (const Attribute* a = c.attr("classlabels_strings")) return a->strings.size();
  // LinearClassifier and SVMClassifier say classlabels_ints, TreeEnsembleClassifier _int64s.
  if (const Attribute* a = c.attr("classlabels_ints")) return a->ints.size();
  if (const Attribute* a = c.attr("classlabels_int64s")) return a->ints.size();
  return 0;
}

void linearClassifier(InferContext& c) {
  // A single class label list of length 1 still scores 2 columns in onnxruntime; leave it open.
  size_t n = classCount(c);
  classifier(c, n > 1 ? n : 0);
}

void svmClassifier(InferContext& c) {
  size_t n = classCount(c);
  classifier(c, n > 2 ? n : 0);
}

void treeEnsembleClassifier(InferContext& c) {
  size_t n = classCount(c);
  classifier(c, n > 2 ? n : 0);
}

void linearRegressor(InferContext& c) { c.setOutput(0, DType::Float, {rows(c), SymExpr(c.attrInt("targets", 1))}); }

void svmRegressor(InferContext& c) { c.setOutput(0, DType::Float, {rows(c), SymExpr(1)}); }

void treeEnsembleRegressor(InferContext& c) {
  c.setOutput(0, DType::Float, {rows(c), SymExpr(c.attrInt("n_targets", 1))});
}

void treeEnsemble(InferContext& c) {
  const Attribute* a = c.attr("n_targets");
  c.setOutput(0, c.inputDType(0), {rows(c), a ? SymDim(SymExpr(a->i)) : std::nullopt});
}

void oneHotEncoder(InferContext& c) {
  size_t n = 0;
  if (const Attribute* a = c.attr("cats_strings")) n = a->strings.size();
  if (const Attribute* a = c.attr("cats_int64s")) n = a->ints.size();
  auto x = c.inputShape(0);
  if (!x) return c.setOutputDType(0, DType::Float);
  SymShape out = *x;
  out.push_back(SymExpr(static_cast<int64_t>(n)));
  c.setOutput(0, DType::Float, out);
}

void zipMap(InferContext& c) {
  TypeInfo map;
  map.kind = TypeInfo::Kind::Map;
  map.elemType = static_cast<int32_t>(c.attr("classlabels_strings") ? DType::String : DType::Int64);
  map.inner = std::make_shared<TypeInfo>(TypeInfo::tensor(DType::Float, Shape::unknownRank()));
  TypeInfo seq;
  seq.kind = TypeInfo::Kind::Sequence;
  seq.inner = std::make_shared<TypeInfo>(std::move(map));
  c.setOutputType(0, std::move(seq));
}

}  // namespace

void registerInferMl(InferRegistry& r) {
  r.add({kMl, "ArrayFeatureExtractor", 1, arrayFeatureExtractor});
  for (std::string_view op : {"Binarizer", "Imputer"}) r.add({kMl, op, 1, sameTypeAndShape});
  for (std::string_view op : {"Normalizer", "Scaler"}) r.add({kMl, op, 1, floatSameShape});
  r.add({kMl, "CastMap", 1, castMap});
  r.add({kMl, "CategoryMapper", 1, categoryMapper});
  r.add({kMl, "DictVectorizer", 1, dictVectorizer});
  r.add({kMl, "FeatureVectorizer", 1, featureVectorizer});
  r.add({kMl, "LabelEncoder", 1, labelEncoder});
  r.add({kMl, "LinearClassifier", 1, linearClassifier});
  r.add({kMl, "LinearRegressor", 1, linearRegressor});
  r.add({kMl, "OneHotEncoder", 1, oneHotEncoder});
  r.add({kMl, "SVMClassifier", 1, svmClassifier});
  r.add({kMl, "SVMRegressor", 1, svmRegressor});
  r.add({kMl, "TreeEnsembleClassifier", 1, treeEnsembleClassifier});
  r.add({kMl, "TreeEnsembleRegressor", 1, treeEnsembleRegressor});
  r.add({kMl, "TreeEnsemble", 1, treeEnsemble});
  r.add({kMl, "ZipMap", 1, zipMap});
}

}  // namespace onnxtool
