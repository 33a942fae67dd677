// ml.cpp: reference kernels of the ai.onnx.ml domain (classical ML: encoders, scalers, linear
// models, SVMs, tree ensembles, maps). registerMlOps() also registers the ai.onnx string,
// random and signal ops kept in strings_random_signal.cpp.
//
// The ONNX-ML spec leaves many corners open (binary classifiers, post transforms, shapes of map
// conversions); where it does, these kernels follow the ONNX Python reference runtime
// (onnx.reference) and, where that is silent, onnxruntime; each such choice is noted in place.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

void registerStringRandomSignalOps();

namespace {

constexpr const char* kMl = "ai.onnx.ml";

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// All elements of a numeric tensor as double (ML ops compute in float/double whatever the input).
std::vector<double> toDoubles(const KernelContext& ctx, const TensorData& t) {
  DType d = t.dtype();
  if (d == DType::String) ctx.fail("expected a numeric tensor, got strings");
  std::vector<double> v(static_cast<size_t>(numel(t)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.elementAsDouble(i);
  return v;
}

/// Rows and columns of an ML input: [N, C] as is, [C] as one row, [N, d1, d2...] as [N, d1*d2*...].
std::pair<int64_t, int64_t> rowsCols(const TensorData& t) {
  if (t.dims.empty()) return {1, 1};
  if (t.dims.size() == 1) return {1, t.dims[0]};
  int64_t c = 1;
  for (size_t i = 1; i < t.dims.size(); ++i) c *= t.dims[i];
  return {t.dims[0], c};
}

/// Doubles of a `name_as_tensor` attribute when present (double precision models), else of the
/// float list `name`.
std::vector<double> attrDoubles(const KernelContext& ctx, const std::string& name) {
  if (const Attribute* a = ctx.attr(name + "_as_tensor"); a && a->t) {
    std::vector<double> v(static_cast<size_t>(numel(*a->t)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = a->t->elementAsDouble(i);
    return v;
  }
  std::vector<float> f = ctx.attrFloats(name);
  return {f.begin(), f.end()};
}

/// Elements of a tensor attribute as double; empty when absent.
std::vector<double> tensorAttrDoubles(const KernelContext& ctx, const std::string& name) {
  const Attribute* a = ctx.attr(name);
  if (!a || !a->t) return {};
  std::vector<double> v(static_cast<size_t>(numel(*a->t)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = a->t->elementAsDouble(i);
  return v;
}

double sigmoid(double x) {
  // Written so that large |x| neither overflows nor loses the small tail.
  double v = 1.0 / (1.0 + std::exp(-std::fabs(x)));
  return x < 0 ? 1.0 - v : v;
}

/// The erf inverse approximation (Winitzki, a = 0.147) that onnxruntime and onnx.reference use
/// for PROBIT, kept rather than an exact inverse so that scores agree with them.
double erfInvApprox(double x) {
  double sgn = x < 0 ? -1.0 : 1.0;
  double t = (1.0 - x) * (1.0 + x);
  if (t == 0) return 0;
  double lg = std::log(t);
  constexpr double kPi = 3.14159265358979323846;
  double v = 2.0 / (kPi * 0.147) + 0.5 * lg;
  double v2 = lg / 0.147;
  return sgn * std::sqrt(-v + std::sqrt(v * v - v2));
}

double probit(double p) { return 1.41421356 * erfInvApprox(p * 2 - 1); }

void softmaxRow(std::vector<double>& r) {
  if (r.empty()) return;
  double m = *std::max_element(r.begin(), r.end());
  double s = 0;
  for (double& v : r) s += (v = std::exp(v - m));
  for (double& v : r) v /= s;
}

/// SOFTMAX_ZERO: a softmax in which (near) zero scores stay zero.
void softmaxZeroRow(std::vector<double>& r) {
  if (r.empty()) return;
  double m = *std::max_element(r.begin(), r.end());
  double e = std::exp(-m), s = 0;
  for (double& v : r) {
    v = (v > 1e-7 || v < -1e-7) ? std::exp(v - m) : v * e;
    s += v;
  }
  for (double& v : r) v = s == 0 ? 0.5 : v / s;
}

/// Index of the largest value, the first on ties; a NaN wins (numpy's argmax).
int64_t argMax(const std::vector<double>& v) {
  int64_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return static_cast<int64_t>(i);
    if (v[i] > v[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

enum class PostTransform { None, Softmax, Logistic, SoftmaxZero, Probit };

PostTransform parsePostTransform(const KernelContext& ctx, const std::string& s) {
  if (s == "NONE") return PostTransform::None;
  if (s == "SOFTMAX") return PostTransform::Softmax;
  if (s == "LOGISTIC") return PostTransform::Logistic;
  if (s == "SOFTMAX_ZERO") return PostTransform::SoftmaxZero;
  if (s == "PROBIT") return PostTransform::Probit;
  ctx.fail(fmt::format("unknown post_transform '{}', expected NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT", s));
}

void applyPostTransform(std::vector<double>& row, PostTransform pt) {
  switch (pt) {
    case PostTransform::None: break;
    case PostTransform::Softmax: softmaxRow(row); break;
    case PostTransform::SoftmaxZero: softmaxZeroRow(row); break;
    case PostTransform::Logistic:
      for (double& v : row) v = sigmoid(v);
      break;
    case PostTransform::Probit:
      for (double& v : row) v = probit(v);
      break;
  }
}

Tensor floatMatrix(int64_t rows, int64_t cols, const std::vector<double>& v) {
  Tensor out = makeTensor(DType::Float, {rows, cols});
  float* p = mutableData<float>(out);
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return out;
}

/// Class labels of a classifier: int64 or string, `size()` of whichever is set.
struct ClassLabels {
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  bool useStrings = false;
  size_t size() const { return useStrings ? strings.size() : ints.size(); }
};

ClassLabels readLabels(const KernelContext& ctx, const char* intsName, const char* stringsName) {
  ClassLabels l;
  l.ints = ctx.attrInts(intsName);
  l.strings = ctx.attrStrings(stringsName);
  l.useStrings = !l.strings.empty();
  return l;
}

/// A label output from per-row label indices into `labels`; -1 - v encodes the raw value v
/// (classifiers that output 0/1 rather than one of their labels).
Tensor labelTensor(const ClassLabels& labels, const std::vector<int64_t>& idx) {
  int64_t n = static_cast<int64_t>(idx.size());
  if (labels.useStrings) {
    Tensor t = makeTensor(DType::String, {n});
    for (size_t i = 0; i < idx.size(); ++i)
      t.strings[i] = idx[i] >= 0 ? labels.strings.at(static_cast<size_t>(idx[i])) : std::to_string(-1 - idx[i]);
    return t;
  }
  Tensor t = makeTensor(DType::Int64, {n});
  int64_t* p = mutableData<int64_t>(t);
  for (size_t i = 0; i < idx.size(); ++i)
    p[i] = idx[i] >= 0 ? (labels.ints.empty() ? idx[i] : labels.ints.at(static_cast<size_t>(idx[i]))) : -1 - idx[i];
  return t;
}

/// Writes element `src` of `from` into element `dst` of `to` (same dtype; any element size).
void copyElement(const TensorData& from, size_t src, Tensor& to, size_t dst) {
  if (to.dtype() == DType::String) {
    to.strings[dst] = from.strings[src];
    return;
  }
  size_t es = static_cast<size_t>(dtypeBits(to.dtype()) / 8);
  std::memcpy(to.raw.mutableData() + dst * es, from.raw.data() + src * es, es);
}

// ---------------------------------------------------------------------------------------------
// Simple element-wise and reshaping ops.

void arrayFeatureExtractor(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> idx = inputInts(ctx, 1);
  if (x.dims.empty()) ctx.fail("X must have at least one dimension");
  int64_t last = x.dims.back();
  for (int64_t i : idx)
    if (i < 0 || i >= last) ctx.fail(fmt::format("index {} is out of range for a last dimension of {}", i, last));
  std::vector<int64_t> dims = x.dims;
  // onnxruntime turns a 1-D input into one row ([1, K]); onnx.reference does the same.
  if (dims.size() == 1) dims.insert(dims.begin(), 1);
  dims.back() = static_cast<int64_t>(idx.size());
  Tensor out = makeTensor(x.dtype(), dims);
  int64_t rows = last == 0 ? 0 : numel(x) / last;  // last == 0 admits no index: empty output
  for (int64_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < idx.size(); ++k)
      copyElement(x, static_cast<size_t>(r * last + idx[k]), out, static_cast<size_t>(r) * idx.size() + k);
  ctx.setOutput(0, std::move(out));
}

void binarizer(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  double th = ctx.attrFloat("threshold", 0.0f);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor out = makeTensor(x.dtype(), x.dims);
    const T* px = data<T>(x);
    T* po = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) {
      // "Values greater than this are mapped to 1, others to 0": NaN gives 0.
      bool one = static_cast<double>(px[i]) > th;
      if constexpr (isFloatLike<T>) po[i] = T(one ? 1.0f : 0.0f);
      else po[i] = static_cast<T>(one ? 1 : 0);
    }
    ctx.setOutput(0, std::move(out));
  });
}

/// Keys and values of a map input, values as one tensor per entry.
struct MapView {
  const TensorData* keys = nullptr;
  std::vector<Tensor> owned;  // scalar copies when the map holds its values as one tensor
  std::vector<const TensorData*> values;
  DType valueType = DType::Float;
  double valueAsDouble(size_t i) const { return values[i]->elementAsDouble(0); }
};

MapView readMap(const KernelContext& ctx, size_t i) {
  const RtValue* v = ctx.input(i);
  if (!v || v->kind != RtValue::Kind::Map || !v->mapKeys) ctx.fail(fmt::format("input {} must be a map", i));
  MapView m;
  m.keys = v->mapKeys.get();
  size_t n = static_cast<size_t>(numel(*m.keys));
  if (v->mapValues) {
    // Values held as one tensor: view each element through a scalar copy.
    if (static_cast<size_t>(numel(*v->mapValues)) != n) ctx.fail("map has different numbers of keys and values");
    m.owned.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      m.owned.push_back(makeTensor(v->mapValues->dtype(), {}));
      copyElement(*v->mapValues, k, m.owned.back(), 0);
    }
    for (const TensorData& s : m.owned) m.values.push_back(&s);
    m.valueType = v->mapValues->dtype();
  } else {
    if (v->elements.size() != n) ctx.fail("map has different numbers of keys and values");
    for (const RtValue& e : v->elements) {
      if (!e.isTensor() || numel(*e.tensor) != 1) ctx.fail("map values must be scalar tensors");
      m.values.push_back(e.tensor.get());
    }
    if (!m.values.empty()) m.valueType = m.values[0]->dtype();
    else if (v->elemTypeHint) m.valueType = static_cast<DType>(v->elemTypeHint);
  }
  return m;
}

void castMap(KernelContext& ctx) {
  MapView m = readMap(ctx, 0);
  if (m.keys->dtype() != DType::Int64) ctx.fail("CastMap needs int64 keys");
  std::string castTo = ctx.attrString("cast_to", "TO_FLOAT");
  std::string form = ctx.attrString("map_form", "DENSE");
  int64_t maxMap = ctx.attrInt("max_map", 1);
  DType outType = castTo == "TO_FLOAT" ? DType::Float : castTo == "TO_INT64" ? DType::Int64 : castTo == "TO_STRING" ? DType::String : DType::Undefined;
  if (outType == DType::Undefined) ctx.fail(fmt::format("unknown cast_to '{}'", castTo));
  if (form != "DENSE" && form != "SPARSE") ctx.fail(fmt::format("unknown map_form '{}'", form));
  const int64_t* keys = data<int64_t>(*m.keys);
  std::vector<size_t> order(m.values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  bool sparse = form == "SPARSE";
  int64_t n = sparse ? maxMap : static_cast<int64_t>(order.size());
  // onnxruntime's shape: one row.
  Tensor out = makeTensor(outType, {1, n});
  bool strValues = m.valueType == DType::String;
  for (size_t j = 0; j < order.size(); ++j) {
    size_t k = order[j];
    int64_t pos = sparse ? keys[k] : static_cast<int64_t>(j);
    if (pos < 0 || pos >= n) ctx.fail(fmt::format("key {} is out of range for max_map {}", keys[k], maxMap));
    const TensorData& v = *m.values[k];
    if (outType == DType::String) {
      out.strings[pos] = strValues ? v.strings[0] : fmt::format("{}", v.elementAsDouble(0));
    } else if (outType == DType::Float) {
      try {
        mutableData<float>(out)[pos] = strValues ? std::stof(v.strings[0]) : static_cast<float>(v.elementAsDouble(0));
      } catch (const std::exception&) {
        ctx.fail(fmt::format("map value '{}' is not a number", v.strings[0]));
      }
    } else {
      try {
        mutableData<int64_t>(out)[pos] = strValues ? std::stoll(v.strings[0]) : static_cast<int64_t>(v.elementAsDouble(0));
      } catch (const std::exception&) {
        ctx.fail(fmt::format("map value '{}' is not an integer", v.strings[0]));
      }
    }
  }
  ctx.setOutput(0, std::move(out));
}

void categoryMapper(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> ints = ctx.attrInts("cats_int64s");
  std::vector<std::string> strs = ctx.attrStrings("cats_strings");
  if (ints.size() != strs.size()) ctx.fail("cats_int64s and cats_strings must have the same length");
  if (x.dtype() == DType::String) {
    std::map<std::string, int64_t> m;
    for (size_t i = 0; i < strs.size(); ++i) m.emplace(strs[i], ints[i]);
    int64_t def = ctx.attrInt("default_int64", -1);
    Tensor out = makeTensor(DType::Int64, x.dims);
    int64_t* p = mutableData<int64_t>(out);
    for (size_t i = 0; i < x.strings.size(); ++i) {
      auto it = m.find(x.strings[i]);
      p[i] = it == m.end() ? def : it->second;
    }
    return ctx.setOutput(0, std::move(out));
  }
  if (x.dtype() != DType::Int64) ctx.fail("CategoryMapper takes string or int64 input");
  std::map<int64_t, std::string> m;
  for (size_t i = 0; i < ints.size(); ++i) m.emplace(ints[i], strs[i]);
  std::string def = ctx.attrString("default_string", "_Unused");
  Tensor out = makeTensor(DType::String, x.dims);
  const int64_t* px = data<int64_t>(x);
  for (size_t i = 0; i < out.strings.size(); ++i) {
    auto it = m.find(px[i]);
    out.strings[i] = it == m.end() ? def : it->second;
  }
  ctx.setOutput(0, std::move(out));
}

void dictVectorizer(KernelContext& ctx) {
  MapView m = readMap(ctx, 0);
  std::vector<int64_t> intVocab = ctx.attrInts("int64_vocabulary");
  std::vector<std::string> strVocab = ctx.attrStrings("string_vocabulary");
  bool strKeys = m.keys->dtype() == DType::String;
  size_t vocab = strKeys ? strVocab.size() : intVocab.size();
  DType vt = m.valueType;
  if (m.values.empty() && ctx.wantsOutput(0)) {
    const TypeInfo& t = ctx.node().outputs()[0]->type();
    if (t.isTensor() && t.elemType) vt = t.dtype();
  }
  // One row, as onnxruntime and the ONNX-ML converters shape it ([1, vocabulary size]).
  Tensor out = makeTensor(vt, {1, static_cast<int64_t>(vocab)});
  // A key may appear more than once in a vocabulary; every position gets the value.
  for (size_t k = 0; k < m.values.size(); ++k) {
    for (size_t j = 0; j < vocab; ++j) {
      bool hit = strKeys ? m.keys->strings[k] == strVocab[j] : data<int64_t>(*m.keys)[k] == intVocab[j];
      if (hit) copyElement(*m.values[k], 0, out, j);
    }
  }
  ctx.setOutput(0, std::move(out));
}

void featureVectorizer(KernelContext& ctx) {
  std::vector<int64_t> dimsAttr = ctx.attrInts("inputdimensions");
  int64_t rows = -1;
  std::vector<int64_t> widths;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    auto [r, c] = rowsCols(ctx.tensor(i));
    if (rows >= 0 && r != rows) ctx.fail("all inputs must have the same number of rows");
    rows = r;
    widths.push_back(i < dimsAttr.size() ? dimsAttr[i] : c);
  }
  if (rows < 0) rows = 1;
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  Tensor out = makeTensor(DType::Float, {rows, total});
  float* po = mutableData<float>(out);
  int64_t off = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const TensorData& t = ctx.tensor(i);
    auto [r, c] = rowsCols(t);
    std::vector<double> v = toDoubles(ctx, t);
    // Inputs wider than their declared dimension are cut, narrower ones padded with zeros.
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t j = 0; j < std::min(c, widths[i]); ++j) po[row * total + off + j] = static_cast<float>(v[row * c + j]);
    off += widths[i];
  }
  ctx.setOutput(0, std::move(out));
}

void imputer(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<float> fVals = ctx.attrFloats("imputed_value_floats");
  std::vector<int64_t> iVals = ctx.attrInts("imputed_value_int64s");
  int64_t f = x.dims.empty() ? 1 : x.dims.back();
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>)) {
      ctx.fail("Imputer takes float, double, int32 or int64");
    } else {
      Tensor out = makeTensor(x.dtype(), x.dims);
      const T* px = data<T>(x);
      T* po = mutableData<T>(out);
      int64_t n = numel(x);
      if constexpr (std::is_floating_point_v<T>) {
        if (fVals.empty()) ctx.fail("imputed_value_floats must be set for float input");
        if (fVals.size() != 1 && static_cast<int64_t>(fVals.size()) != f) ctx.fail("imputed_value_floats must have 1 or F values");
        float rep = ctx.attrFloat("replaced_value_float", 0.0f);
        for (int64_t i = 0; i < n; ++i) {
          T v = px[i];
          bool hit = std::isnan(rep) ? std::isnan(v) : v == static_cast<T>(rep);
          po[i] = hit ? static_cast<T>(fVals[fVals.size() == 1 ? 0 : static_cast<size_t>(i % f)]) : v;
        }
      } else {
        if (iVals.empty()) ctx.fail("imputed_value_int64s must be set for integer input");
        if (iVals.size() != 1 && static_cast<int64_t>(iVals.size()) != f) ctx.fail("imputed_value_int64s must have 1 or F values");
        int64_t rep = ctx.attrInt("replaced_value_int64", 0);
        for (int64_t i = 0; i < n; ++i)
          po[i] = static_cast<int64_t>(px[i]) == rep ? static_cast<T>(iVals[iVals.size() == 1 ? 0 : static_cast<size_t>(i % f)]) : px[i];
      }
      ctx.setOutput(0, std::move(out));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// LabelEncoder.

void labelEncoder1(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<std::string> classes = ctx.attrStrings("classes_strings");
  if (x.dtype() == DType::String) {
    std::map<std::string, int64_t> m;
    for (size_t i = 0; i < classes.size(); ++i) m.emplace(classes[i], static_cast<int64_t>(i));
    int64_t def = ctx.attrInt("default_int64", -1);
    Tensor out = makeTensor(DType::Int64, x.dims);
    for (size_t i = 0; i < x.strings.size(); ++i) {
      auto it = m.find(x.strings[i]);
      mutableData<int64_t>(out)[i] = it == m.end() ? def : it->second;
    }
    return ctx.setOutput(0, std::move(out));
  }
  if (x.dtype() != DType::Int64) ctx.fail("LabelEncoder-1 takes string or int64 input");
  std::string def = ctx.attrString("default_string", "_Unused");
  Tensor out = makeTensor(DType::String, x.dims);
  const int64_t* px = data<int64_t>(x);
  for (size_t i = 0; i < out.strings.size(); ++i)
    out.strings[i] = px[i] >= 0 && px[i] < static_cast<int64_t>(classes.size()) ? classes[static_cast<size_t>(px[i])] : def;
  ctx.setOutput(0, std::move(out));
}

/// Keys of a LabelEncoder: strings, integers or floating point numbers; NaN matches NaN.
struct KeyIndex {
  std::map<std::string, size_t> strings;
  std::map<int64_t, size_t> ints;
  std::map<double, size_t> reals;
  std::optional<size_t> nan;

  // Later keys overwrite earlier ones ("If a key is repeated, the last key takes precedence").
  void addReal(double d, size_t i) {
    if (std::isnan(d)) nan = i;
    else reals[d] = i;
  }
  std::optional<size_t> findReal(double d) const {
    if (std::isnan(d)) return nan;
    auto it = reals.find(d);
    return it == reals.end() ? std::nullopt : std::optional<size_t>(it->second);
  }
};

void labelEncoder2(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  // Keys.
  KeyIndex keys;
  size_t nKeys = 0;
  DType keyType = DType::Undefined;
  const Attribute* kt = ctx.attr("keys_tensor");
  if (kt && kt->t) {
    const TensorData& t = *kt->t;
    keyType = t.dtype();
    nKeys = static_cast<size_t>(numel(t));
    for (size_t i = 0; i < nKeys; ++i) {
      if (keyType == DType::String) keys.strings[t.strings[i]] = i;
      else if (dtypeIsFloat(keyType)) keys.addReal(t.elementAsDouble(i), i);
      else keys.ints[t.elementAsInt(i)] = i;
    }
  } else if (ctx.hasAttr("keys_strings")) {
    keyType = DType::String;
    auto v = ctx.attrStrings("keys_strings");
    nKeys = v.size();
    for (size_t i = 0; i < v.size(); ++i) keys.strings[v[i]] = i;
  } else if (ctx.hasAttr("keys_int64s")) {
    keyType = DType::Int64;
    auto v = ctx.attrInts("keys_int64s");
    nKeys = v.size();
    for (size_t i = 0; i < v.size(); ++i) keys.ints[v[i]] = i;
  } else if (ctx.hasAttr("keys_floats")) {
    keyType = DType::Float;
    auto v = ctx.attrFloats("keys_floats");
    nKeys = v.size();
    for (size_t i = 0; i < v.size(); ++i) keys.addReal(v[i], i);
  } else {
    ctx.fail("LabelEncoder needs one of keys_tensor, keys_strings, keys_int64s, keys_floats");
  }
  // Values and the default, as 1-D / one-element tensors of the output type.
  Tensor values, def;
  const Attribute* vt = ctx.attr("values_tensor");
  const Attribute* dt = ctx.attr("default_tensor");
  if (vt && vt->t) {
    values = *vt->t;
    DType d = values.dtype();
    if (dt && dt->t) {
      if (dt->t->dtype() != d || numel(*dt->t) < 1) ctx.fail("default_tensor must be one element of the values type");
      def = makeTensor(d, {});
      copyElement(*dt->t, 0, def, 0);
    } else {
      def = makeTensor(d, {});
      if (d == DType::String) def.strings[0] = "_Unused";
      else if (dtypeIsFloat(d)) dispatchFloat(ctx, d, [&](auto tag) { mutableData<decltype(tag)>(def)[0] = decltype(tag)(-0.0f); });
      else dispatchNumeric(ctx, d, [&](auto tag) { mutableData<decltype(tag)>(def)[0] = static_cast<decltype(tag)>(-1); });
    }
  } else if (ctx.hasAttr("values_strings")) {
    auto v = ctx.attrStrings("values_strings");
    values = makeTensor(DType::String, {static_cast<int64_t>(v.size())});
    values.strings = v;
    def = makeTensor(DType::String, {});
    def.strings[0] = ctx.attrString("default_string", "_Unused");
  } else if (ctx.hasAttr("values_int64s")) {
    auto v = ctx.attrInts("values_int64s");
    values = Tensor::fromInt64s("", {static_cast<int64_t>(v.size())}, v);
    def = Tensor::fromInt64s("", {}, {ctx.attrInt("default_int64", -1)});
  } else if (ctx.hasAttr("values_floats")) {
    auto v = ctx.attrFloats("values_floats");
    values = Tensor::fromFloats("", {static_cast<int64_t>(v.size())}, v);
    def = Tensor::fromFloats("", {}, {ctx.attrFloat("default_float", -0.0f)});
  } else {
    ctx.fail("LabelEncoder needs one of values_tensor, values_strings, values_int64s, values_floats");
  }
  if (static_cast<size_t>(numel(values)) != nKeys) ctx.fail("keys and values must have the same length");
  // Lookup.
  bool xStr = x.dtype() == DType::String, kStr = keyType == DType::String;
  if (xStr != kStr || (!xStr && dtypeIsFloat(x.dtype()) != dtypeIsFloat(keyType)))
    ctx.fail(fmt::format("input type {} does not match the keys' type {}", dtypeName(x.dtype()), dtypeName(keyType)));
  Tensor out = makeTensor(values.dtype(), x.dims);
  for (size_t i = 0, n = static_cast<size_t>(numel(x)); i < n; ++i) {
    std::optional<size_t> hit;
    if (xStr) {
      auto it = keys.strings.find(x.strings[i]);
      if (it != keys.strings.end()) hit = it->second;
    } else if (dtypeIsFloat(keyType)) {
      hit = keys.findReal(x.elementAsDouble(i));
    } else {
      auto it = keys.ints.find(x.elementAsInt(i));
      if (it != keys.ints.end()) hit = it->second;
    }
    if (hit) copyElement(values, *hit, out, i);
    else copyElement(def, 0, out, i);
  }
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Linear models, normalisation, encoding, scaling.

void linearClassifier(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  std::vector<float> coef = ctx.attrFloats("coefficients");
  std::vector<float> icpt = ctx.attrFloats("intercepts");
  ClassLabels labels = readLabels(ctx, "classlabels_ints", "classlabels_strings");
  PostTransform pt = parsePostTransform(ctx, ctx.attrString("post_transform", "NONE"));
  if (c == 0 || coef.size() % static_cast<size_t>(c) != 0) ctx.fail("coefficients must hold E x C values");
  int64_t e = static_cast<int64_t>(coef.size()) / c;
  if (!icpt.empty() && static_cast<int64_t>(icpt.size()) != e) ctx.fail("intercepts must have one value per class");
  // One coefficient row with two labels is a binary model: scores [-s, s].
  bool binary = e == 1 && labels.size() == 2;
  int64_t cols = binary ? 2 : e;
  std::vector<double> scores;
  std::vector<int64_t> idx;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> row(static_cast<size_t>(e));
    for (int64_t k = 0; k < e; ++k) {
      double s = icpt.empty() ? 0.0 : icpt[k];
      for (int64_t j = 0; j < c; ++j) s += xv[r * c + j] * coef[k * c + j];
      row[k] = s;
    }
    if (binary) row = {-row[0], row[0]};
    applyPostTransform(row, pt);
    if (cols > 1) {
      idx.push_back(argMax(row));
    } else {
      double th = pt == PostTransform::None ? 0.0 : 0.5;
      bool pos = row[0] >= th;
      // A single score: the first label when positive, else 0 (or the empty string).
      if (labels.size() > 0) idx.push_back(pos ? 0 : -1);
      else idx.push_back(pos ? -2 : -1);
    }
    scores.insert(scores.end(), row.begin(), row.end());
  }
  if (labels.useStrings) {
    Tensor t = makeTensor(DType::String, {n});
    for (int64_t r = 0; r < n; ++r) t.strings[r] = idx[r] >= 0 ? labels.strings[idx[r]] : "";
    ctx.setOutput(0, std::move(t));
  } else {
    ctx.setOutput(0, labelTensor(labels, idx));
  }
  ctx.setOutput(1, floatMatrix(n, cols, scores));
}

void linearRegressor(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  std::vector<float> coef = ctx.attrFloats("coefficients");
  std::vector<float> icpt = ctx.attrFloats("intercepts");
  int64_t targets = ctx.attrInt("targets", 1);
  PostTransform pt = parsePostTransform(ctx, ctx.attrString("post_transform", "NONE"));
  if (targets <= 0 || static_cast<int64_t>(coef.size()) != targets * c) ctx.fail("coefficients must hold targets x C values");
  if (!icpt.empty() && static_cast<int64_t>(icpt.size()) != targets) ctx.fail("intercepts must have one value per target");
  std::vector<double> out;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> row(static_cast<size_t>(targets));
    for (int64_t t = 0; t < targets; ++t) {
      double s = icpt.empty() ? 0.0 : icpt[t];
      for (int64_t j = 0; j < c; ++j) s += xv[r * c + j] * coef[t * c + j];
      row[t] = s;
    }
    applyPostTransform(row, pt);
    out.insert(out.end(), row.begin(), row.end());
  }
  ctx.setOutput(0, floatMatrix(n, targets, out));
}

void normalizer(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::string norm = ctx.attrString("norm", "MAX");
  if (norm != "MAX" && norm != "L1" && norm != "L2") ctx.fail(fmt::format("unknown norm '{}', expected MAX, L1 or L2", norm));
  std::vector<double> v = toDoubles(ctx, x);
  int64_t c = x.dims.empty() ? 1 : x.dims.back();
  Tensor out = makeTensor(DType::Float, x.dims);
  float* po = mutableData<float>(out);
  for (int64_t r = 0; c > 0 && r < numel(x) / c; ++r) {
    double* row = v.data() + r * c;
    // MAX divides by the largest value (the spec's max(X), as onnxruntime), L1 by the sum of
    // absolute values, L2 by the Euclidean norm; a zero divisor leaves the row unchanged.
    double d = 0;
    if (norm == "MAX") d = *std::max_element(row, row + c);
    else if (norm == "L1")
      for (int64_t j = 0; j < c; ++j) d += std::fabs(row[j]);
    else {
      for (int64_t j = 0; j < c; ++j) d += row[j] * row[j];
      d = std::sqrt(d);
    }
    for (int64_t j = 0; j < c; ++j) po[r * c + j] = static_cast<float>(d == 0 ? row[j] : row[j] / d);
  }
  ctx.setOutput(0, std::move(out));
}

void oneHotEncoder(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> ci = ctx.attrInts("cats_int64s");
  std::vector<std::string> cs = ctx.attrStrings("cats_strings");
  bool zeros = ctx.attrInt("zeros", 1) != 0;
  bool str = x.dtype() == DType::String;
  if (str && cs.empty()) ctx.fail("string input needs cats_strings");
  if (!str && ci.empty()) ctx.fail("numeric input needs cats_int64s");
  std::map<std::string, int64_t> sm;
  std::map<int64_t, int64_t> im;
  for (size_t i = cs.size(); i-- > 0;) sm[cs[i]] = static_cast<int64_t>(i);  // first occurrence wins
  for (size_t i = ci.size(); i-- > 0;) im[ci[i]] = static_cast<int64_t>(i);
  int64_t k = static_cast<int64_t>(str ? cs.size() : ci.size());
  std::vector<int64_t> dims = x.dims;
  dims.push_back(k);
  Tensor out = makeTensor(DType::Float, dims);
  float* po = mutableData<float>(out);
  for (int64_t i = 0, n = numel(x); i < n; ++i) {
    int64_t j = -1;
    if (str) {
      auto it = sm.find(x.strings[i]);
      if (it != sm.end()) j = it->second;
    } else {
      // Float inputs are cast to integers (truncation) before the lookup.
      double d = x.elementAsDouble(static_cast<size_t>(i));
      if (!std::isnan(d)) {
        auto it = im.find(x.dtype() == DType::Int64 ? x.elementAsInt(static_cast<size_t>(i)) : static_cast<int64_t>(d));
        if (it != im.end()) j = it->second;
      }
    }
    if (j >= 0) po[i * k + j] = 1.0f;
    else if (!zeros) ctx.fail(fmt::format("element {} has no category and zeros is 0", i));
  }
  ctx.setOutput(0, std::move(out));
}

void scaler(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<float> scale = ctx.attrFloats("scale");
  std::vector<float> offset = ctx.attrFloats("offset");
  int64_t f = x.dims.empty() ? 1 : x.dims.back();
  auto check = [&](const std::vector<float>& v, const char* name) {
    if (!v.empty() && v.size() != 1 && static_cast<int64_t>(v.size()) != f)
      ctx.fail(fmt::format("{} must have 1 or F ({}) values, got {}", name, f, v.size()));
  };
  check(scale, "scale");
  check(offset, "offset");
  auto at = [&](const std::vector<float>& v, int64_t i, double def) -> double {
    if (v.empty()) return def;
    return v.size() == 1 ? v[0] : v[static_cast<size_t>(i % f)];
  };
  std::vector<double> xv = toDoubles(ctx, x);
  Tensor out = makeTensor(DType::Float, x.dims);
  float* po = mutableData<float>(out);
  for (size_t i = 0; i < xv.size(); ++i)
    po[i] = static_cast<float>((xv[i] - at(offset, static_cast<int64_t>(i), 0.0)) * at(scale, static_cast<int64_t>(i), 1.0));
  ctx.setOutput(0, std::move(out));
}

void zipMap(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::vector<int64_t> ki = ctx.attrInts("classlabels_int64s");
  std::vector<std::string> ks = ctx.attrStrings("classlabels_strings");
  bool str = !ks.empty();
  if (str == !ki.empty()) ctx.fail("exactly one of classlabels_strings and classlabels_int64s must be set");
  auto [n, c] = rowsCols(x);
  int64_t k = static_cast<int64_t>(str ? ks.size() : ki.size());
  if (c != k) ctx.fail(fmt::format("X has {} columns but there are {} labels", c, k));
  if (x.dtype() != DType::Float) ctx.fail("ZipMap takes float input");
  Tensor keys;
  if (str) {
    keys = makeTensor(DType::String, {k});
    keys.strings = ks;
  } else {
    keys = Tensor::fromInt64s("", {k}, ki);
  }
  auto sharedKeys = std::make_shared<const RtTensor>(std::move(keys));
  const float* px = data<float>(x);
  std::vector<RtValue> maps;
  for (int64_t r = 0; r < n; ++r) {
    RtValue m;
    m.kind = RtValue::Kind::Map;
    m.mapKeys = sharedKeys;
    for (int64_t j = 0; j < c; ++j) m.elements.push_back(RtValue::ofTensor(Tensor::fromFloats("", {}, {px[r * c + j]})));
    maps.push_back(std::move(m));
  }
  RtValue seq = RtValue::sequence(std::move(maps));
  ctx.setOutput(0, std::move(seq));
}

// ---------------------------------------------------------------------------------------------
// Support vector machines.

struct SvmKernel {
  std::string type = "LINEAR";
  double gamma = 0, coef0 = 0;
  int64_t degree = 0;

  double operator()(const double* a, const double* b, int64_t n) const {
    if (type == "RBF") {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
      return std::exp(-gamma * s);
    }
    double d = 0;
    for (int64_t i = 0; i < n; ++i) d += a[i] * b[i];
    if (type == "POLY") return std::pow(d * gamma + coef0, static_cast<double>(degree));
    if (type == "SIGMOID") return std::tanh(d * gamma + coef0);
    return d;
  }
};

SvmKernel readSvmKernel(const KernelContext& ctx) {
  SvmKernel k;
  k.type = ctx.attrString("kernel_type", "LINEAR");
  if (k.type != "LINEAR" && k.type != "POLY" && k.type != "RBF" && k.type != "SIGMOID")
    ctx.fail(fmt::format("unknown kernel_type '{}'", k.type));
  std::vector<float> p = ctx.attrFloats("kernel_params");
  if (p.size() >= 3) {
    k.gamma = p[0];
    k.coef0 = p[1];
    k.degree = static_cast<int64_t>(p[2]);
  }
  return k;
}

void svmRegressor(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  SvmKernel kern = readSvmKernel(ctx);
  std::vector<float> coefF = ctx.attrFloats("coefficients"), svF = ctx.attrFloats("support_vectors"), rho = ctx.attrFloats("rho");
  std::vector<double> coef(coefF.begin(), coefF.end()), sv(svF.begin(), svF.end());
  int64_t nSupports = ctx.attrInt("n_supports", 0);
  bool oneClass = ctx.attrInt("one_class", 0) != 0;
  PostTransform pt = parsePostTransform(ctx, ctx.attrString("post_transform", "NONE"));
  if (rho.empty()) ctx.fail("rho must be set");
  if (nSupports > 0) {
    if (static_cast<int64_t>(sv.size()) != nSupports * c || static_cast<int64_t>(coef.size()) < nSupports)
      ctx.fail("support_vectors must hold n_supports x C values and coefficients n_supports values");
  } else if (static_cast<int64_t>(coef.size()) != c) {
    ctx.fail("a linear SVM needs C coefficients");
  }
  std::vector<double> out;
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = xv.data() + r * c;
    double s = 0;
    if (nSupports > 0)
      for (int64_t j = 0; j < nSupports; ++j) s += coef[j] * kern(xr, sv.data() + j * c, c);
    else
      s = SvmKernel{}(xr, coef.data(), c);  // linear model: the kernel type does not apply
    s += rho[0];
    std::vector<double> row{oneClass ? (s > 0 ? 1.0 : -1.0) : s};
    applyPostTransform(row, pt);
    out.push_back(row[0]);
  }
  ctx.setOutput(0, floatMatrix(n, 1, out));
}

/// Pairwise coupling of one-vs-one probabilities into class probabilities (Wu, Lin and Weng,
/// as libsvm and onnxruntime do it).
std::vector<double> multiclassProbability(int64_t k, const std::vector<double>& r) {
  auto R = [&](int64_t i, int64_t j) { return r[i * k + j]; };
  std::vector<double> q(k * k), qp(k), p(k, 1.0 / k);
  for (int64_t t = 0; t < k; ++t) {
    q[t * k + t] = 0;
    for (int64_t j = 0; j < t; ++j) {
      q[t * k + t] += R(j, t) * R(j, t);
      q[t * k + j] = q[j * k + t];
    }
    for (int64_t j = t + 1; j < k; ++j) {
      q[t * k + t] += R(j, t) * R(j, t);
      q[t * k + j] = -R(j, t) * R(t, j);
    }
  }
  double eps = 0.005 / k;
  for (int64_t iter = 0, maxIter = std::max<int64_t>(100, k); iter < maxIter; ++iter) {
    double pqp = 0;
    for (int64_t t = 0; t < k; ++t) {
      qp[t] = 0;
      for (int64_t j = 0; j < k; ++j) qp[t] += q[t * k + j] * p[j];
      pqp += p[t] * qp[t];
    }
    double maxErr = 0;
    for (int64_t t = 0; t < k; ++t) maxErr = std::max(maxErr, std::fabs(qp[t] - pqp));
    if (maxErr < eps) break;
    for (int64_t t = 0; t < k; ++t) {
      double diff = (-qp[t] + pqp) / q[t * k + t];
      p[t] += diff;
      pqp = (pqp + diff * (diff * q[t * k + t] + 2 * qp[t])) / (1 + diff) / (1 + diff);
      for (int64_t j = 0; j < k; ++j) {
        qp[j] = (qp[j] + diff * q[t * k + j]) / (1 + diff);
        p[j] /= 1 + diff;
      }
    }
  }
  return p;
}

void svmClassifier(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  SvmKernel kern = readSvmKernel(ctx);
  ClassLabels labels = readLabels(ctx, "classlabels_ints", "classlabels_strings");
  std::vector<float> coefF = ctx.attrFloats("coefficients"), svF = ctx.attrFloats("support_vectors");
  std::vector<double> coef(coefF.begin(), coefF.end()), sv(svF.begin(), svF.end());
  std::vector<float> rho = ctx.attrFloats("rho"), probA = ctx.attrFloats("prob_a"), probB = ctx.attrFloats("prob_b");
  std::vector<int64_t> perClass = ctx.attrInts("vectors_per_class");
  PostTransform pt = parsePostTransform(ctx, ctx.attrString("post_transform", "NONE"));
  int64_t classes = std::max<int64_t>(static_cast<int64_t>(labels.size()), 1);
  int64_t vectors = 0;
  std::vector<int64_t> start;
  for (int64_t v : perClass) {
    start.push_back(vectors);
    vectors += v;
  }
  bool svc = vectors > 0;
  if (rho.empty()) ctx.fail("rho must be set");
  if (svc) {
    if (static_cast<int64_t>(perClass.size()) != classes) ctx.fail("vectors_per_class must have one entry per class");
    if (static_cast<int64_t>(sv.size()) != vectors * c) ctx.fail("support_vectors must hold (sum of vectors_per_class) x C values");
    if (static_cast<int64_t>(coef.size()) != (classes - 1) * vectors) ctx.fail("coefficients must hold (classes - 1) x vectors values");
    if (static_cast<int64_t>(rho.size()) < classes * (classes - 1) / 2) ctx.fail("rho must have one value per pair of classes");
  }
  // A linear SVM has one coefficient row per class, or one row for a binary model.
  int64_t linearRows = c > 0 ? static_cast<int64_t>(coef.size()) / c : 0;
  if (!svc && (linearRows * c != static_cast<int64_t>(coef.size()) || (linearRows != classes && linearRows != 1)))
    ctx.fail("a linear SVM needs classes x C (or C) coefficients");
  bool allPositive = coef.empty() || *std::min_element(coef.begin(), coef.end()) >= 0;
  bool proba = svc && !probA.empty();
  if (proba && (probA.size() != probB.size() || static_cast<int64_t>(probA.size()) < classes * (classes - 1) / 2))
    ctx.fail("prob_a and prob_b must have one value per pair of classes");
  std::vector<double> allScores;
  std::vector<int64_t> idx;
  int64_t cols = -1;
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = xv.data() + r * c;
    std::vector<double> scores, votes;
    if (!svc) {
      for (int64_t j = 0; j < linearRows; ++j) scores.push_back(rho[0] + SvmKernel{}(xr, coef.data() + j * c, c));
    } else {
      std::vector<double> kv(static_cast<size_t>(vectors));
      for (int64_t j = 0; j < vectors; ++j) kv[j] = kern(xr, sv.data() + j * c, c);
      votes.assign(static_cast<size_t>(classes), 0.0);
      int64_t evals = 0;
      for (int64_t i = 0; i < classes; ++i) {
        for (int64_t j = i + 1; j < classes; ++j) {
          double s1 = 0, s2 = 0;
          for (int64_t m = 0; m < perClass[i]; ++m) s1 += coef[(j - 1) * vectors + start[i] + m] * kv[start[i] + m];
          for (int64_t m = 0; m < perClass[j]; ++m) s2 += coef[i * vectors + start[j] + m] * kv[start[j] + m];
          double s = rho[evals] + s1 + s2;
          scores.push_back(s);
          votes[s > 0 ? i : j] += 1;
          ++evals;
        }
      }
    }
    if (proba) {
      std::vector<double> pr(static_cast<size_t>(classes * classes), 0.0);
      int64_t index = 0;
      for (int64_t i = 0; i < classes; ++i)
        for (int64_t j = i + 1; j < classes; ++j, ++index) {
          double v = 1.0 - sigmoid(scores[index] * probA[index] + probB[index]);
          v = std::min(std::max(v, 1e-7), 1 - 1e-7);
          pr[i * classes + j] = v;
          pr[j * classes + i] = 1 - v;
        }
      scores = multiclassProbability(classes, pr);
    }
    const std::vector<double>& decide = votes.empty() ? scores : votes;
    int64_t maxClass = argMax(decide);
    double maxWeight = decide.empty() ? 0 : decide[maxClass];
    int addSecond = -1;
    int64_t label;
    if (rho.size() == 1) {
      // A single decision function: two labels pick by the winning score; otherwise the raw
      // 1 / 0 is the label.
      if (labels.size() == 2) {
        addSecond = 2;
        label = !proba && allPositive && maxWeight >= 0.5 ? 1 : maxClass;
      } else {
        label = maxWeight > 0 ? -2 : -1;
      }
    } else {
      label = maxClass;
    }
    idx.push_back(label);
    // Scores: one score gets its complement column as onnx.reference's write_scores does.
    std::vector<double> out = scores;
    if (scores.size() >= 2) {
      applyPostTransform(out, pt);
    } else if (scores.size() == 1) {
      double s = scores[0];
      if (pt == PostTransform::Probit) out = {probit(s)};
      else if (addSecond == 0 || addSecond == 1) out = {1 - s, s};
      else if (addSecond == 2 || addSecond == 3) {
        out = {-s, s};
        if (pt != PostTransform::None) applyPostTransform(out, pt);
      }
    }
    if (cols < 0) cols = static_cast<int64_t>(out.size());
    allScores.insert(allScores.end(), out.begin(), out.end());
  }
  ctx.setOutput(0, labelTensor(labels, idx));
  ctx.setOutput(1, floatMatrix(n, std::max<int64_t>(cols, 0), allScores));
}

// ---------------------------------------------------------------------------------------------
// Tree ensembles.

enum class NodeMode { Leq, Lt, Gte, Gt, Eq, Neq, Member, Leaf };

/// One tree node in index form: children are node indices, or leaf indices when *Leaf is set.
struct TreeNode {
  NodeMode mode = NodeMode::Leaf;
  int64_t feature = 0;
  double split = 0;
  std::set<double> members;
  bool missingTrue = false;
  int64_t trueChild = -1, falseChild = -1;
  bool trueLeaf = false, falseLeaf = false;
};

bool nodeTest(const TreeNode& nd, double v) {
  // NaN follows the missing-value branch when asked to, else the comparison (false, or true for NEQ).
  if (std::isnan(v) && nd.missingTrue) return true;
  switch (nd.mode) {
    case NodeMode::Leq: return v <= nd.split;
    case NodeMode::Lt: return v < nd.split;
    case NodeMode::Gte: return v >= nd.split;
    case NodeMode::Gt: return v > nd.split;
    case NodeMode::Eq: return v == nd.split;
    case NodeMode::Neq: return v != nd.split;
    case NodeMode::Member: return nd.members.count(v) > 0;
    case NodeMode::Leaf: return false;
  }
  return false;
}

NodeMode parseMode(const KernelContext& ctx, const std::string& s) {
  if (s == "BRANCH_LEQ") return NodeMode::Leq;
  if (s == "BRANCH_LT") return NodeMode::Lt;
  if (s == "BRANCH_GTE") return NodeMode::Gte;
  if (s == "BRANCH_GT") return NodeMode::Gt;
  if (s == "BRANCH_EQ") return NodeMode::Eq;
  if (s == "BRANCH_NEQ") return NodeMode::Neq;
  if (s == "LEAF") return NodeMode::Leaf;
  ctx.fail(fmt::format("unknown node mode '{}'", s));
}

/// The legacy (TreeEnsembleRegressor/Classifier) encoding: nodes addressed by (tree id, node id),
/// leaves are nodes of mode LEAF, and weights attach to leaves by (tree id, node id).
struct LegacyForest {
  std::vector<TreeNode> nodes;
  std::vector<int64_t> roots;                               // node index of each tree's root
  std::vector<std::vector<std::pair<int64_t, double>>> leafWeights;  // per node: (target, weight)

  int64_t findLeaf(const KernelContext& ctx, int64_t root, const double* x, int64_t nFeatures) const {
    int64_t i = root;
    for (size_t steps = 0; nodes[i].mode != NodeMode::Leaf; ++steps) {
      if (steps > nodes.size()) ctx.fail("tree has a cycle");
      const TreeNode& nd = nodes[i];
      if (nd.feature < 0 || nd.feature >= nFeatures) ctx.fail(fmt::format("feature id {} is out of range", nd.feature));
      i = nodeTest(nd, x[nd.feature]) ? nd.trueChild : nd.falseChild;
    }
    return i;
  }
};

LegacyForest readLegacyForest(const KernelContext& ctx, const char* prefix) {
  std::vector<int64_t> treeIds = ctx.attrInts("nodes_treeids"), nodeIds = ctx.attrInts("nodes_nodeids");
  std::vector<int64_t> feats = ctx.attrInts("nodes_featureids"), trues = ctx.attrInts("nodes_truenodeids"),
                       falses = ctx.attrInts("nodes_falsenodeids"), missing = ctx.attrInts("nodes_missing_value_tracks_true");
  std::vector<std::string> modes = ctx.attrStrings("nodes_modes");
  std::vector<double> values = attrDoubles(ctx, "nodes_values");
  size_t n = treeIds.size();
  if (nodeIds.size() != n || feats.size() != n || modes.size() != n || trues.size() != n || falses.size() != n ||
      (!values.empty() && values.size() != n) || (!missing.empty() && missing.size() != n))
    ctx.fail("the nodes_* attributes must all have the same length");
  LegacyForest f;
  std::map<std::pair<int64_t, int64_t>, int64_t> index;
  std::map<int64_t, int64_t> rootOf;
  for (size_t i = 0; i < n; ++i) {
    index[{treeIds[i], nodeIds[i]}] = static_cast<int64_t>(i);
    if (!rootOf.count(treeIds[i])) rootOf[treeIds[i]] = static_cast<int64_t>(i);
  }
  f.nodes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TreeNode& nd = f.nodes[i];
    nd.mode = parseMode(ctx, modes[i]);
    nd.feature = feats[i];
    nd.split = values.empty() ? 0 : values[i];
    nd.missingTrue = !missing.empty() && missing[i] != 0;
    if (nd.mode == NodeMode::Leaf) continue;
    auto child = [&](int64_t id) {
      auto it = index.find({treeIds[i], id});
      if (it == index.end()) ctx.fail(fmt::format("tree {} has no node {}", treeIds[i], id));
      return it->second;
    };
    nd.trueChild = child(trues[i]);
    nd.falseChild = child(falses[i]);
  }
  for (auto& [t, r] : rootOf) f.roots.push_back(r);
  std::string p(prefix);
  std::vector<int64_t> wTree = ctx.attrInts(p + "_treeids"), wNode = ctx.attrInts(p + "_nodeids"), wId = ctx.attrInts(p + "_ids");
  std::vector<double> w = attrDoubles(ctx, p + "_weights");
  if (wNode.size() != wTree.size() || wId.size() != wTree.size() || w.size() != wTree.size())
    ctx.fail(fmt::format("the {}_* attributes must all have the same length", p));
  f.leafWeights.resize(n);
  for (size_t i = 0; i < wTree.size(); ++i) {
    auto it = index.find({wTree[i], wNode[i]});
    if (it == index.end()) ctx.fail(fmt::format("weight {} refers to a missing node ({}, {})", i, wTree[i], wNode[i]));
    f.leafWeights[it->second].push_back({wId[i], w[i]});
  }
  return f;
}

enum class Aggregate { Average, Sum, Min, Max };

/// Per-target accumulation over trees; targets that no leaf reached stay 0 for MIN/MAX (as in
/// onnxruntime) rather than +-FLT_MAX.
/// Sums rounded to float after every step when `single` (float models, as onnxruntime and
/// onnx.reference accumulate), so that near-ties resolve the same way.
struct Accumulator {
  Aggregate agg;
  bool single;
  std::vector<double> v;
  std::vector<bool> seen;
  Accumulator(Aggregate a, int64_t n, bool singlePrecision)
      : agg(a), single(singlePrecision), v(static_cast<size_t>(n), 0.0), seen(static_cast<size_t>(n), false) {}
  double round(double x) const { return single ? static_cast<double>(static_cast<float>(x)) : x; }
  void add(const KernelContext& ctx, int64_t t, double w) {
    if (t < 0 || t >= static_cast<int64_t>(v.size())) ctx.fail(fmt::format("target id {} is out of range", t));
    if (agg == Aggregate::Min) v[t] = seen[t] ? std::min(v[t], w) : w;
    else if (agg == Aggregate::Max) v[t] = seen[t] ? std::max(v[t], w) : w;
    else v[t] = round(v[t] + w);
    seen[t] = true;
  }
  void finish(size_t trees) {
    if (agg == Aggregate::Average && trees > 0)
      for (double& x : v) x = round(x / static_cast<double>(trees));
  }
};

/// Whether a legacy tree model computes in float: float/int input and no *_as_tensor attributes.
bool singlePrecisionTrees(const KernelContext& ctx, const TensorData& x, const char* weights) {
  return x.dtype() != DType::Double && !ctx.hasAttr("nodes_values_as_tensor") &&
         !ctx.hasAttr(std::string(weights) + "_weights_as_tensor") && !ctx.hasAttr("base_values_as_tensor");
}

Aggregate parseAggregate(const KernelContext& ctx, const std::string& s) {
  if (s == "SUM") return Aggregate::Sum;
  if (s == "AVERAGE") return Aggregate::Average;
  if (s == "MIN") return Aggregate::Min;
  if (s == "MAX") return Aggregate::Max;
  ctx.fail(fmt::format("unknown aggregate_function '{}'", s));
}

void treeEnsembleRegressor(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  LegacyForest f = readLegacyForest(ctx, "target");
  int64_t targets = ctx.attrInt("n_targets", 1);
  Aggregate agg = parseAggregate(ctx, ctx.attrString("aggregate_function", "SUM"));
  PostTransform pt = parsePostTransform(ctx, ctx.attrString("post_transform", "NONE"));
  std::vector<double> base = attrDoubles(ctx, "base_values");
  if (!base.empty() && static_cast<int64_t>(base.size()) != targets) ctx.fail("base_values must have n_targets values");
  bool single = singlePrecisionTrees(ctx, x, "target");
  std::vector<double> out;
  for (int64_t r = 0; r < n; ++r) {
    Accumulator acc(agg, targets, single);
    for (int64_t root : f.roots)
      for (auto [t, w] : f.leafWeights[f.findLeaf(ctx, root, xv.data() + r * c, c)]) acc.add(ctx, t, w);
    acc.finish(f.roots.size());
    for (size_t t = 0; t < base.size(); ++t) acc.v[t] = acc.round(acc.v[t] + base[t]);
    applyPostTransform(acc.v, pt);
    out.insert(out.end(), acc.v.begin(), acc.v.end());
  }
  ctx.setOutput(0, floatMatrix(n, targets, out));
}

void treeEnsembleClassifier(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  LegacyForest f = readLegacyForest(ctx, "class");
  ClassLabels labels = readLabels(ctx, "classlabels_int64s", "classlabels_strings");
  int64_t classes = static_cast<int64_t>(labels.size());
  if (classes == 0) ctx.fail("one of classlabels_int64s and classlabels_strings must be set");
  PostTransform pt = parsePostTransform(ctx, ctx.attrString("post_transform", "NONE"));
  std::vector<double> base = attrDoubles(ctx, "base_values");
  if (!base.empty() && static_cast<int64_t>(base.size()) != classes) ctx.fail("base_values must have one value per class");
  std::set<int64_t> ids;
  for (const auto& lw : f.leafWeights)
    for (auto [t, w] : lw) ids.insert(t);
  // Every vote for the same class: a binary model scoring the positive class (onnx.reference).
  bool binary = ids.size() == 1;
  int64_t cols = binary && classes == 1 ? 2 : classes;
  bool single = singlePrecisionTrees(ctx, x, "class");
  auto round = [&](double v) { return single ? static_cast<double>(static_cast<float>(v)) : v; };
  std::vector<double> scores;
  std::vector<int64_t> idx;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> row(static_cast<size_t>(classes), 0.0);
    for (size_t k = 0; k < base.size(); ++k) row[k] = base[k];
    for (int64_t root : f.roots)
      for (auto [t, w] : f.leafWeights[f.findLeaf(ctx, root, xv.data() + r * c, c)]) {
        if (t < 0 || t >= classes) ctx.fail(fmt::format("class id {} is out of range", t));
        row[t] = round(row[t] + w);
      }
    if (binary) {
      if (classes == 1) row = {0.0, row[0]};
      else row[1] = row[0];
      row[0] = pt == PostTransform::None || pt == PostTransform::Probit ? round(1 - row[1]) : -row[1];
    }
    applyPostTransform(row, pt);
    int64_t best = argMax(row);
    if (classes == 1) {
      if (labels.useStrings || labels.ints[0] != 1) ctx.fail("a single class label is only supported as the integer 1");
      idx.push_back(best == 1 ? -2 : -1);
    } else {
      idx.push_back(best);
    }
    scores.insert(scores.end(), row.begin(), row.end());
  }
  ctx.setOutput(0, labelTensor(labels, idx));
  ctx.setOutput(1, floatMatrix(n, cols, scores));
}

/// TreeEnsemble-5: interior nodes and leaves in separate tables.
void treeEnsemble(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  auto [n, c] = rowsCols(x);
  std::vector<double> xv = toDoubles(ctx, x);
  std::vector<int64_t> feats = ctx.attrInts("nodes_featureids"), trues = ctx.attrInts("nodes_truenodeids"),
                       falses = ctx.attrInts("nodes_falsenodeids"), trueLeafs = ctx.attrInts("nodes_trueleafs"),
                       falseLeafs = ctx.attrInts("nodes_falseleafs"), missing = ctx.attrInts("nodes_missing_value_tracks_true"),
                       roots = ctx.attrInts("tree_roots"), leafTargets = ctx.attrInts("leaf_targetids");
  std::vector<double> splits = tensorAttrDoubles(ctx, "nodes_splits"), modesD = tensorAttrDoubles(ctx, "nodes_modes"),
                      leafW = tensorAttrDoubles(ctx, "leaf_weights"), members = tensorAttrDoubles(ctx, "membership_values");
  int64_t targets = ctx.attrInt("n_targets", 1);
  int64_t aggI = ctx.attrInt("aggregate_function", 1), ptI = ctx.attrInt("post_transform", 0);
  if (aggI < 0 || aggI > 3) ctx.fail(fmt::format("aggregate_function {} is not 0..3", aggI));
  if (ptI < 0 || ptI > 4) ctx.fail(fmt::format("post_transform {} is not 0..4", ptI));
  Aggregate agg = static_cast<Aggregate>(aggI);  // AVERAGE, SUM, MIN, MAX
  static const PostTransform kPt[] = {PostTransform::None, PostTransform::Softmax, PostTransform::Logistic,
                                      PostTransform::SoftmaxZero, PostTransform::Probit};
  PostTransform pt = kPt[ptI];
  size_t nn = feats.size();
  if (splits.size() != nn || modesD.size() != nn || trues.size() != nn || falses.size() != nn || trueLeafs.size() != nn ||
      falseLeafs.size() != nn || (!missing.empty() && missing.size() != nn))
    ctx.fail("the nodes_* attributes must all have the same length");
  if (leafW.size() != leafTargets.size()) ctx.fail("leaf_weights and leaf_targetids must have the same length");
  std::vector<TreeNode> nodes(nn);
  size_t memberPos = 0;
  for (size_t i = 0; i < nn; ++i) {
    TreeNode& nd = nodes[i];
    int64_t m = static_cast<int64_t>(modesD[i]);
    if (m < 0 || m > 6) ctx.fail(fmt::format("node {} has mode {}, expected 0..6", i, m));
    nd.mode = static_cast<NodeMode>(m);
    nd.feature = feats[i];
    nd.split = splits[i];
    nd.missingTrue = !missing.empty() && missing[i] != 0;
    nd.trueChild = trues[i];
    nd.falseChild = falses[i];
    nd.trueLeaf = trueLeafs[i] != 0;
    nd.falseLeaf = falseLeafs[i] != 0;
    if (nd.mode == NodeMode::Member) {
      // Sets in node order, each ended by a NaN.
      bool closed = false;
      while (memberPos < members.size()) {
        double v = members[memberPos++];
        if (std::isnan(v)) {
          closed = true;
          break;
        }
        nd.members.insert(v);
      }
      if (!closed && nd.members.empty()) ctx.fail("membership_values has no set for a BRANCH_MEMBER node");
    }
    int64_t lim = static_cast<int64_t>(nd.trueLeaf ? leafW.size() : nn);
    int64_t limF = static_cast<int64_t>(nd.falseLeaf ? leafW.size() : nn);
    if (nd.trueChild < 0 || nd.trueChild >= lim || nd.falseChild < 0 || nd.falseChild >= limF)
      ctx.fail(fmt::format("node {} has a child out of range", i));
  }
  for (int64_t root : roots)
    if (root < 0 || root >= static_cast<int64_t>(nn)) ctx.fail(fmt::format("tree root {} is out of range", root));
  DType outType = x.dtype();
  if (!dtypeIsFloat(outType)) outType = DType::Float;
  Tensor out = makeTensor(outType, {n, targets});
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = xv.data() + r * c;
    Accumulator acc(agg, targets, x.dtype() != DType::Double);
    for (int64_t root : roots) {
      const TreeNode& rn = nodes[root];
      int64_t leaf;
      if (rn.trueLeaf && rn.falseLeaf && rn.trueChild == rn.falseChild) {
        leaf = rn.trueChild;  // a tree that is a single leaf
      } else {
        int64_t i = root;
        for (size_t steps = 0;; ++steps) {
          if (steps > nn) ctx.fail("tree has a cycle");
          const TreeNode& nd = nodes[i];
          if (nd.feature < 0 || nd.feature >= c) ctx.fail(fmt::format("feature id {} is out of range", nd.feature));
          bool t = nodeTest(nd, xr[nd.feature]);
          if (t ? nd.trueLeaf : nd.falseLeaf) {
            leaf = t ? nd.trueChild : nd.falseChild;
            break;
          }
          i = t ? nd.trueChild : nd.falseChild;
        }
      }
      acc.add(ctx, leafTargets[leaf], leafW[leaf]);
    }
    acc.finish(roots.size());
    applyPostTransform(acc.v, pt);
    dispatchFloat(ctx, outType, [&](auto tag) {
      using T = decltype(tag);
      for (int64_t t = 0; t < targets; ++t) mutableData<T>(out)[r * targets + t] = T(acc.v[t]);
    });
  }
  ctx.setOutput(0, std::move(out));
}

}  // namespace

void registerMlOps() {
  addRef(kMl, "ArrayFeatureExtractor", 1, "ref.ml.array_feature_extractor", arrayFeatureExtractor);
  addRef(kMl, "Binarizer", 1, "ref.ml.binarizer", binarizer);
  addRef(kMl, "CastMap", 1, "ref.ml.cast_map", castMap);
  addRef(kMl, "CategoryMapper", 1, "ref.ml.category_mapper", categoryMapper);
  addRef(kMl, "DictVectorizer", 1, "ref.ml.dict_vectorizer", dictVectorizer);
  addRef(kMl, "FeatureVectorizer", 1, "ref.ml.feature_vectorizer", featureVectorizer);
  addRef(kMl, "Imputer", 1, "ref.ml.imputer", imputer);
  addRef(kMl, "LabelEncoder", 1, "ref.ml.label_encoder.v1", labelEncoder1);
  // 2 and 4 differ only in which keys/values attributes exist (4 adds *_tensor and more types).
  addRef(kMl, "LabelEncoder", 2, "ref.ml.label_encoder", labelEncoder2);
  addRef(kMl, "LinearClassifier", 1, "ref.ml.linear_classifier", linearClassifier);
  addRef(kMl, "LinearRegressor", 1, "ref.ml.linear_regressor", linearRegressor);
  addRef(kMl, "Normalizer", 1, "ref.ml.normalizer", normalizer);
  addRef(kMl, "OneHotEncoder", 1, "ref.ml.one_hot_encoder", oneHotEncoder);
  addRef(kMl, "Scaler", 1, "ref.ml.scaler", scaler);
  addRef(kMl, "SVMClassifier", 1, "ref.ml.svm_classifier", svmClassifier);
  addRef(kMl, "SVMRegressor", 1, "ref.ml.svm_regressor", svmRegressor);
  addRef(kMl, "TreeEnsemble", 5, "ref.ml.tree_ensemble", treeEnsemble);
  // Versions 3 and 5 add the *_as_tensor (double) attributes, which attrDoubles reads.
  addRef(kMl, "TreeEnsembleClassifier", 1, "ref.ml.tree_ensemble_classifier", treeEnsembleClassifier);
  addRef(kMl, "TreeEnsembleRegressor", 1, "ref.ml.tree_ensemble_regressor", treeEnsembleRegressor);
  addRef(kMl, "ZipMap", 1, "ref.ml.zip_map", zipMap);
  registerStringRandomSignalOps();
}

}  // namespace onnxtool::ref
