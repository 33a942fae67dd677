// strings_random_signal.cpp: reference kernels of the ai.onnx string ops (StringConcat,
// StringNormalizer, StringSplit, RegexFullMatch, TfIdfVectorizer), random ops (RandomNormal,
// RandomUniform and their *Like forms, Bernoulli, Multinomial) and signal ops (DFT, STFT, the
// window functions, MelWeightMatrix). Registered from registerMlOps() (ml.cpp).
//
// Signal ops compute in double with a direct O(N^2) DFT: slow for long signals, but exact enough
// to serve as the oracle for faster kernels.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------------------------------------
// Strings.

void stringConcat(KernelContext& ctx) {
  const TensorData& a = ctx.tensor(0);
  const TensorData& b = ctx.tensor(1);
  if (a.dtype() != DType::String || b.dtype() != DType::String) ctx.fail("StringConcat takes string tensors");
  std::vector<int64_t> dims = broadcastShapes(ctx, {a.dims, b.dims});
  Tensor out = makeTensor(DType::String, dims);
  Broadcaster ba(dims, a.dims), bb(dims, b.dims);
  for (int64_t i = 0, n = numel(dims); i < n; ++i) out.strings[i] = a.strings[ba.offset(i)] + b.strings[bb.offset(i)];
  ctx.setOutput(0, std::move(out));
}

/// Decodes UTF-8 into code points; invalid bytes pass through as themselves (U+0080..U+00FF
/// would be wrong for them, so they are marked with the 0x80000000 bit and re-emitted raw).
std::vector<uint32_t> decodeUtf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out.push_back(0x80000000u | c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string encodeUtf8(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t cp : cps) {
    if (cp & 0x80000000u) s += static_cast<char>(cp & 0xff);
    else if (cp < 0x80) s += static_cast<char>(cp);
    else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return s;
}

/// Simple (one-to-one) case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic:
/// locale-independent so that results do not depend on the machine (the `locale` attribute is
/// accepted and ignored). Characters outside these blocks are left alone.
uint32_t toUpperCp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f) {
    bool oddUpper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (oddUpper) return (c % 2 == 0) ? c - 1 : c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

uint32_t toLowerCp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f) {
    bool oddUpper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (oddUpper) return (c % 2 == 1) ? c + 1 : c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

std::string changeCase(const std::string& s, bool upper) {
  std::vector<uint32_t> cps = decodeUtf8(s);
  for (uint32_t& c : cps)
    if (!(c & 0x80000000u)) c = upper ? toUpperCp(c) : toLowerCp(c);
  return encodeUtf8(cps);
}

void stringNormalizer(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dtype() != DType::String) ctx.fail("StringNormalizer takes a string tensor");
  bool twoDim = x.dims.size() == 2;
  if (!(x.dims.size() == 1 || (twoDim && x.dims[0] == 1)))
    ctx.fail("StringNormalizer takes a [C] or [1, C] tensor");
  std::string action = ctx.attrString("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    ctx.fail(fmt::format("unknown case_change_action '{}', expected LOWER, UPPER or NONE", action));
  bool caseSensitive = ctx.attrInt("is_case_sensitive", 0) != 0;
  std::set<std::string> stops;
  for (const std::string& w : ctx.attrStrings("stopwords")) stops.insert(caseSensitive ? w : changeCase(w, false));
  // Stop words remove whole elements (the spec's wording, and onnxruntime's behaviour).
  std::vector<std::string> kept;
  for (const std::string& s : x.strings) {
    if (!stops.empty() && stops.count(caseSensitive ? s : changeCase(s, false))) continue;
    kept.push_back(action == "NONE" ? s : changeCase(s, action == "UPPER"));
  }
  if (kept.empty()) kept.push_back("");
  int64_t c = static_cast<int64_t>(kept.size());
  Tensor out = makeTensor(DType::String, twoDim ? std::vector<int64_t>{1, c} : std::vector<int64_t>{c});
  out.strings = std::move(kept);
  ctx.setOutput(0, std::move(out));
}

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/// Python's str.split(delimiter, maxsplit) (maxsplit < 0: unlimited); an empty delimiter splits
/// on runs of whitespace and drops leading and trailing whitespace (str.split(None, ...)).
std::vector<std::string> splitString(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> out;
  if (delim.empty()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && isSpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        // The remainder keeps its trailing whitespace, as Python's does.
        out.push_back(s.substr(i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !isSpace(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t start = 0;
  while (true) {
    size_t p = (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) ? std::string::npos : s.find(delim, start);
    if (p == std::string::npos) {
      out.push_back(s.substr(start));
      break;
    }
    out.push_back(s.substr(start, p - start));
    start = p + delim.size();
  }
  return out;
}

void stringSplit(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dtype() != DType::String) ctx.fail("StringSplit takes a string tensor");
  std::string delim = ctx.attrString("delimiter", "");
  int64_t maxsplit = ctx.hasAttr("maxsplit") ? ctx.attrInt("maxsplit", -1) : -1;
  std::vector<std::vector<std::string>> parts;
  size_t width = 0;
  for (const std::string& s : x.strings) {
    parts.push_back(splitString(s, delim, maxsplit));
    width = std::max(width, parts.back().size());
  }
  std::vector<int64_t> dims = x.dims;
  dims.push_back(static_cast<int64_t>(width));
  Tensor y = makeTensor(DType::String, dims);
  Tensor z = makeTensor(DType::Int64, x.dims);
  for (size_t i = 0; i < parts.size(); ++i) {
    for (size_t k = 0; k < parts[i].size(); ++k) y.strings[i * width + k] = std::move(parts[i][k]);
    mutableData<int64_t>(z)[i] = static_cast<int64_t>(parts[i].size());
  }
  ctx.setOutput(0, std::move(y));
  ctx.setOutput(1, std::move(z));
}

/// Rewrites the RE2 spellings that ECMAScript lacks: a leading (?i) becomes the icase flag,
/// (?P<name>...) and (?<name>...) become plain groups, \A and \z become ^ and $. What remains
/// different: RE2 rejects backreferences and lookaround (ECMAScript accepts them), RE2 matches
/// UTF-8 code points where std::regex matches bytes (`.` and classes see a multi-byte character
/// as several), and RE2's \pN / \p{Greek} Unicode classes and (?s)/(?m) flags are not supported.
std::regex compileRe2(const KernelContext& ctx, std::string pattern) {
  auto flags = std::regex::ECMAScript;
  if (pattern.rfind("(?i)", 0) == 0) {
    flags |= std::regex::icase;
    pattern.erase(0, 4);
  }
  std::string p;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char ch = pattern[i];
    if (ch == '\\' && i + 1 < pattern.size()) {
      char nx = pattern[i + 1];
      if (nx == 'A') p += '^';
      else if (nx == 'z') p += '$';
      else if (nx == 'p' || nx == 'P') ctx.fail("RegexFullMatch: Unicode classes (\\p) are not supported");
      else {
        p += ch;
        p += nx;
      }
      ++i;
      continue;
    }
    if (ch == '(' && pattern.compare(i, 3, "(?P") == 0 && i + 3 < pattern.size() && pattern[i + 3] == '<') {
      size_t close = pattern.find('>', i);
      if (close == std::string::npos) ctx.fail("RegexFullMatch: unterminated group name");
      p += '(';
      i = close;
      continue;
    }
    if (ch == '(' && pattern.compare(i, 3, "(?<") == 0 && i + 3 < pattern.size() && pattern[i + 3] != '=' && pattern[i + 3] != '!') {
      size_t close = pattern.find('>', i);
      if (close == std::string::npos) ctx.fail("RegexFullMatch: unterminated group name");
      p += '(';
      i = close;
      continue;
    }
    p += ch;
  }
  try {
    return std::regex(p, flags);
  } catch (const std::regex_error& e) {
    ctx.fail(fmt::format("invalid pattern '{}': {}", pattern, e.what()));
  }
}

void regexFullMatch(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dtype() != DType::String) ctx.fail("RegexFullMatch takes a string tensor");
  std::regex re = compileRe2(ctx, ctx.attrString("pattern", ""));
  Tensor out = makeTensor(DType::Bool, x.dims);
  bool* po = mutableData<bool>(out);
  for (size_t i = 0; i < x.strings.size(); ++i) po[i] = std::regex_match(x.strings[i], re);
  ctx.setOutput(0, std::move(out));
}

/// An n-gram item: a string or an integer (pool_strings / pool_int64s).
using Gram = std::vector<std::string>;

void tfIdfVectorizer(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  std::string mode = ctx.attrString("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") ctx.fail(fmt::format("unknown mode '{}', expected TF, IDF or TFIDF", mode));
  int64_t minN = ctx.attrInt("min_gram_length", 1), maxN = ctx.attrInt("max_gram_length", 1);
  int64_t maxSkip = ctx.attrInt("max_skip_count", 0);
  std::vector<int64_t> counts = ctx.attrInts("ngram_counts"), indexes = ctx.attrInts("ngram_indexes");
  std::vector<int64_t> poolI = ctx.attrInts("pool_int64s");
  std::vector<std::string> poolS = ctx.attrStrings("pool_strings");
  std::vector<float> weights = ctx.attrFloats("weights");
  bool strPool = !poolS.empty();
  if (strPool != (x.dtype() == DType::String)) ctx.fail("pool_strings needs string input, pool_int64s integer input");
  if (minN < 1 || maxN < minN) ctx.fail("need 1 <= min_gram_length <= max_gram_length");
  if (maxSkip < 0) ctx.fail("max_skip_count must not be negative");
  if (indexes.empty()) ctx.fail("ngram_indexes must not be empty");
  // Items as strings so that one table serves both pools (integers in decimal).
  auto item = [&](size_t i) { return strPool ? x.strings[i] : std::to_string(x.elementAsInt(i)); };
  std::vector<std::string> pool;
  if (strPool) pool = poolS;
  else
    for (int64_t v : poolI) pool.push_back(std::to_string(v));
  // Pool n-grams: group g (ngram_counts[g] .. next start) holds (g+1)-grams; n-gram number i
  // (counting across groups) maps to output coordinate ngram_indexes[i].
  std::map<Gram, size_t> grams;
  size_t gramNo = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    size_t n = g + 1;
    size_t begin = static_cast<size_t>(counts[g]);
    size_t end = g + 1 < counts.size() ? static_cast<size_t>(counts[g + 1]) : pool.size();
    if (begin > end || end > pool.size()) ctx.fail("ngram_counts is inconsistent with the pool");
    for (size_t s = begin; s + n <= end; s += n, ++gramNo)
      if (static_cast<int64_t>(n) >= minN && static_cast<int64_t>(n) <= maxN) grams[Gram(pool.begin() + s, pool.begin() + s + n)] = gramNo;
  }
  if (gramNo > indexes.size()) ctx.fail("ngram_indexes has fewer entries than the pool has n-grams");
  int64_t outSize = *std::max_element(indexes.begin(), indexes.end()) + 1;
  int64_t rows, cols;
  std::vector<int64_t> outDims;
  if (x.dims.size() <= 1) {
    rows = 1;
    cols = x.dims.empty() ? 1 : x.dims[0];
    outDims = {outSize};
  } else if (x.dims.size() == 2) {
    rows = x.dims[0];
    cols = x.dims[1];
    outDims = {rows, outSize};
  } else {
    ctx.fail("TfIdfVectorizer takes a [C] or [N, C] input");
  }
  std::vector<double> freq(static_cast<size_t>(rows * outSize), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t skip = 0; skip <= maxSkip; ++skip) {
      for (int64_t start = 0; start < cols; ++start) {
        for (int64_t n = minN; n <= maxN; ++n) {
          // Unigrams have no gaps: count them once, not once per skip distance.
          if (n == 1 && skip > 0) continue;
          if (start + (n - 1) * (skip + 1) >= cols) break;
          Gram g;
          for (int64_t k = 0; k < n; ++k) g.push_back(item(static_cast<size_t>(r * cols + start + k * (skip + 1))));
          auto it = grams.find(g);
          if (it != grams.end()) freq[r * outSize + indexes[it->second]] += 1;
        }
      }
    }
  }
  // Weights belong to pool n-grams; the n-gram i's weight scales output coordinate ngram_indexes[i].
  std::vector<double> w(static_cast<size_t>(outSize), 1.0);
  if (!weights.empty())
    for (size_t i = 0; i < std::min(weights.size(), indexes.size()); ++i) w[indexes[i]] = weights[i];
  Tensor out = makeTensor(DType::Float, outDims);
  float* po = mutableData<float>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < outSize; ++j) {
      double f = freq[r * outSize + j];
      double v = mode == "TF" ? f : mode == "IDF" ? (f > 0 ? w[j] : 0.0) : f * w[j];
      po[r * outSize + j] = static_cast<float>(v);
    }
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Random numbers.

/// The generator an op draws from: its own, seeded from the `seed` attribute (deterministic for a
/// given seed), else the executor's.
class RandomSource {
 public:
  explicit RandomSource(KernelContext& ctx) : shared_(&ctx.rng()) {
    if (const Attribute* a = ctx.attr("seed")) {
      uint32_t bits;
      float f = a->f;
      std::memcpy(&bits, &f, 4);
      own_.seed(0x9e3779b97f4a7c15ull ^ bits);
      shared_ = &own_;
    }
  }
  /// Uniform in [0, 1) with 53 random bits (implementation-independent, unlike std::*_distribution).
  double uniform() { return static_cast<double>((*shared_)() >> 11) * 0x1.0p-53; }
  /// Standard normal by Box-Muller.
  double normal() {
    if (haveSpare_) {
      haveSpare_ = false;
      return spare_;
    }
    double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    double u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * kPi * u2);
    haveSpare_ = true;
    return r * std::cos(2 * kPi * u2);
  }

 private:
  std::mt19937_64 own_;
  std::mt19937_64* shared_;
  bool haveSpare_ = false;
  double spare_ = 0;
};

/// Fills a tensor of `dtype` (a float type) with gen().
template <typename Gen>
Tensor randomTensor(const KernelContext& ctx, DType dtype, const std::vector<int64_t>& dims, Gen&& gen) {
  Tensor out = makeTensor(dtype, dims);
  dispatchFloat(ctx, dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = mutableData<T>(out);
    for (int64_t i = 0, n = numel(dims); i < n; ++i) p[i] = T(gen());
  });
  return out;
}

DType randomDtype(const KernelContext& ctx, DType def) {
  return ctx.hasAttr("dtype") ? static_cast<DType>(ctx.attrInt("dtype", 1)) : def;
}

void randomNormal(KernelContext& ctx) {
  RandomSource rs(ctx);
  double mean = ctx.attrFloat("mean", 0.0f), scale = ctx.attrFloat("scale", 1.0f);
  bool like = ctx.numInputs() > 0;
  std::vector<int64_t> dims = like ? ctx.tensor(0).dims : ctx.attrInts("shape");
  DType dt = randomDtype(ctx, like ? ctx.tensor(0).dtype() : DType::Float);
  ctx.setOutput(0, randomTensor(ctx, dt, dims, [&] { return mean + scale * rs.normal(); }));
}

void randomUniform(KernelContext& ctx) {
  RandomSource rs(ctx);
  double low = ctx.attrFloat("low", 0.0f), high = ctx.attrFloat("high", 1.0f);
  bool like = ctx.numInputs() > 0;
  std::vector<int64_t> dims = like ? ctx.tensor(0).dims : ctx.attrInts("shape");
  DType dt = randomDtype(ctx, like ? ctx.tensor(0).dtype() : DType::Float);
  ctx.setOutput(0, randomTensor(ctx, dt, dims, [&] { return low + (high - low) * rs.uniform(); }));
}

void bernoulli(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  RandomSource rs(ctx);
  DType dt = randomDtype(ctx, x.dtype());
  Tensor out = makeTensor(dt, x.dims);
  dispatchNumeric(ctx, dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = mutableData<T>(out);
    for (int64_t i = 0, n = numel(x); i < n; ++i) {
      double prob = x.elementAsDouble(static_cast<size_t>(i));
      if (!(prob >= 0 && prob <= 1)) ctx.fail(fmt::format("probability {} is not in [0, 1]", prob));
      bool one = rs.uniform() < prob;
      if constexpr (isFloatLike<T>) p[i] = T(one ? 1.0f : 0.0f);
      else p[i] = static_cast<T>(one ? 1 : 0);
    }
  });
  ctx.setOutput(0, std::move(out));
}

void multinomial(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() != 2) ctx.fail("Multinomial takes a [batch_size, class_size] input");
  RandomSource rs(ctx);
  int64_t samples = ctx.attrInt("sample_size", 1);
  DType dt = static_cast<DType>(ctx.attrInt("dtype", static_cast<int64_t>(DType::Int32)));
  if (dt != DType::Int32 && dt != DType::Int64) ctx.fail("Multinomial's dtype must be int32 or int64");
  int64_t batch = x.dims[0], classes = x.dims[1];
  Tensor out = makeTensor(dt, {batch, samples});
  for (int64_t b = 0; b < batch; ++b) {
    // Inputs are unnormalised log-probabilities.
    std::vector<double> cdf(static_cast<size_t>(classes));
    double m = -INFINITY;
    for (int64_t k = 0; k < classes; ++k) m = std::max(m, x.elementAsDouble(static_cast<size_t>(b * classes + k)));
    double total = 0;
    for (int64_t k = 0; k < classes; ++k) cdf[k] = total += std::exp(x.elementAsDouble(static_cast<size_t>(b * classes + k)) - m);
    for (int64_t s = 0; s < samples; ++s) {
      double u = rs.uniform() * total;
      int64_t k = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      k = std::min(k, classes - 1);
      if (dt == DType::Int32) mutableData<int32_t>(out)[b * samples + s] = static_cast<int32_t>(k);
      else mutableData<int64_t>(out)[b * samples + s] = k;
    }
  }
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Signal processing.

using Cplx = std::complex<double>;

/// Direct DFT of `in` (length n, zero-extended or cut to `len`), `outLen` bins; sign -1 forward,
/// +1 inverse (unscaled). (k * t) mod len indexes a twiddle table so large k*t stay exact.
std::vector<Cplx> dft(const std::vector<Cplx>& in, int64_t len, int64_t outLen, int sign) {
  std::vector<Cplx> tw(static_cast<size_t>(len));
  for (int64_t m = 0; m < len; ++m) {
    double a = 2 * kPi * static_cast<double>(m) / static_cast<double>(len);
    tw[m] = Cplx(std::cos(a), sign * std::sin(a));
  }
  int64_t n = std::min<int64_t>(len, static_cast<int64_t>(in.size()));
  std::vector<Cplx> out(static_cast<size_t>(outLen));
  for (int64_t k = 0; k < outLen; ++k) {
    Cplx s = 0;
    for (int64_t t = 0; t < n; ++t) s += in[t] * tw[(k * t) % len];
    out[k] = s;
  }
  return out;
}

/// Writes a double into element i of a float-typed tensor.
void storeFloat(const KernelContext& ctx, Tensor& t, size_t i, double v) {
  dispatchFloat(ctx, t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    mutableData<T>(t)[i] = T(v);
  });
}

void dftImpl(KernelContext& ctx, int64_t axis) {
  const TensorData& x = ctx.tensor(0);
  int64_t rank = static_cast<int64_t>(x.dims.size());
  if (rank < 2) ctx.fail("DFT input needs a signal axis and a trailing [1] or [2] axis");
  int64_t comps = x.dims.back();
  if (comps != 1 && comps != 2) ctx.fail("the last dimension must be 1 (real) or 2 (complex)");
  if (axis < -rank || axis >= rank) ctx.fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  if (axis < 0) axis += rank;
  if (axis == rank - 1) ctx.fail("axis must not be the last (real/imaginary) dimension");
  bool inverse = ctx.attrInt("inverse", 0) != 0, onesided = ctx.attrInt("onesided", 0) != 0;
  int64_t inLen = x.dims[axis];
  int64_t len = inverse && onesided ? 2 * (inLen - 1) : inLen;
  if (ctx.hasInput(1)) len = static_cast<int64_t>(inputScalar(ctx, 1));
  if (len < 1) ctx.fail(fmt::format("dft_length {} must be positive", len));
  int64_t outLen = !inverse && onesided ? len / 2 + 1 : len;
  std::vector<int64_t> dims = x.dims;
  dims[axis] = outLen;
  dims.back() = inverse && onesided ? 1 : 2;
  Tensor out = makeTensor(x.dtype(), dims);
  dispatchFloat(ctx, x.dtype(), [](auto) {});
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dims[i];
  for (int64_t i = axis + 1; i < rank - 1; ++i) inner *= x.dims[i];
  int64_t outComps = dims.back();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      std::vector<Cplx> sig(static_cast<size_t>(inLen));
      for (int64_t t = 0; t < inLen; ++t) {
        size_t base = static_cast<size_t>(((o * inLen + t) * inner + in) * comps);
        sig[t] = Cplx(x.elementAsDouble(base), comps == 2 ? x.elementAsDouble(base + 1) : 0.0);
      }
      std::vector<Cplx> res;
      if (!inverse) {
        res = dft(sig, len, outLen, -1);
      } else {
        if (onesided) {
          // IRFFT: extend the half spectrum by Hermitian symmetry, keep the real part.
          std::vector<Cplx> full(static_cast<size_t>(len));
          auto at = [&](int64_t k) { return k < inLen ? sig[k] : Cplx(0); };
          for (int64_t k = 0; k < len; ++k) full[k] = k <= len / 2 ? at(k) : std::conj(at(len - k));
          sig = std::move(full);
        }
        res = dft(sig, len, outLen, +1);
        for (Cplx& v : res) v /= static_cast<double>(len);
      }
      for (int64_t k = 0; k < outLen; ++k) {
        size_t base = static_cast<size_t>(((o * outLen + k) * inner + in) * outComps);
        storeFloat(ctx, out, base, res[k].real());
        if (outComps == 2) storeFloat(ctx, out, base + 1, res[k].imag());
      }
    }
  }
  ctx.setOutput(0, std::move(out));
}

void dft17(KernelContext& ctx) { dftImpl(ctx, ctx.attrInt("axis", 1)); }

void dft20(KernelContext& ctx) {
  int64_t axis = ctx.hasInput(2) ? static_cast<int64_t>(inputScalar(ctx, 2)) : -2;
  dftImpl(ctx, axis);
}

void stft(KernelContext& ctx) {
  const TensorData& x = ctx.tensor(0);
  if (x.dims.size() != 3 || (x.dims[2] != 1 && x.dims[2] != 2))
    ctx.fail("STFT signal must be [batch, signal_length, 1] or [batch, signal_length, 2]");
  int64_t batch = x.dims[0], sigLen = x.dims[1], comps = x.dims[2];
  int64_t step = static_cast<int64_t>(inputScalar(ctx, 1));
  bool haveWindow = ctx.hasInput(2);
  std::vector<double> window;
  if (haveWindow) {
    const TensorData& w = ctx.tensor(2);
    if (w.dims.size() != 1) ctx.fail("window must be 1-D");
    for (int64_t i = 0; i < w.dims[0]; ++i) window.push_back(w.elementAsDouble(static_cast<size_t>(i)));
  }
  int64_t frameLen = ctx.hasInput(3) ? static_cast<int64_t>(inputScalar(ctx, 3))
                                     : haveWindow ? static_cast<int64_t>(window.size()) : sigLen;
  if (haveWindow && static_cast<int64_t>(window.size()) != frameLen) ctx.fail("window length must equal frame_length");
  if (!haveWindow) window.assign(static_cast<size_t>(std::max<int64_t>(frameLen, 0)), 1.0);
  if (step < 1) ctx.fail("frame_step must be positive");
  if (frameLen < 1 || frameLen > sigLen) ctx.fail(fmt::format("frame_length {} must be in [1, {}]", frameLen, sigLen));
  bool onesided = ctx.attrInt("onesided", 1) != 0;
  int64_t frames = (sigLen - frameLen) / step + 1;
  int64_t bins = onesided ? frameLen / 2 + 1 : frameLen;
  Tensor out = makeTensor(x.dtype(), {batch, frames, bins, 2});
  dispatchFloat(ctx, x.dtype(), [](auto) {});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<Cplx> frame(static_cast<size_t>(frameLen));
      for (int64_t t = 0; t < frameLen; ++t) {
        size_t base = static_cast<size_t>((b * sigLen + f * step + t) * comps);
        frame[t] = Cplx(x.elementAsDouble(base), comps == 2 ? x.elementAsDouble(base + 1) : 0.0) * window[t];
      }
      std::vector<Cplx> res = dft(frame, frameLen, bins, -1);
      for (int64_t k = 0; k < bins; ++k) {
        size_t base = static_cast<size_t>(((b * frames + f) * bins + k) * 2);
        storeFloat(ctx, out, base, res[k].real());
        storeFloat(ctx, out, base + 1, res[k].imag());
      }
    }
  ctx.setOutput(0, std::move(out));
}

/// Casts doubles into a tensor of any numeric `dtype` (integers truncate, as numpy's astype).
Tensor castDoubles(const KernelContext& ctx, DType dtype, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor out = makeTensor(dtype, std::move(dims));
  dispatchNumeric(ctx, dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("output_datatype bool is not allowed");
    } else {
      T* p = mutableData<T>(out);
      for (size_t i = 0; i < v.size(); ++i) {
        if constexpr (isFloatLike<T>) p[i] = T(v[i]);
        else p[i] = static_cast<T>(v[i]);
      }
    }
  });
  return out;
}

enum class WindowKind { Hann, Hamming, Blackman };

template <WindowKind K>
void window(KernelContext& ctx) {
  int64_t size = static_cast<int64_t>(inputScalar(ctx, 0));
  if (size < 0) ctx.fail(fmt::format("size {} must not be negative", size));
  bool periodic = ctx.attrInt("periodic", 1) != 0;
  DType dt = static_cast<DType>(ctx.attrInt("output_datatype", 1));
  double n1 = static_cast<double>(periodic ? size : size - 1);
  std::vector<double> v(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    // A symmetric window of one point is 1 (torch/scipy), not 0/0.
    double a = n1 == 0 ? 0.0 : 2 * kPi * static_cast<double>(i) / n1;
    if constexpr (K == WindowKind::Hann) v[i] = 0.5 - 0.5 * std::cos(a);
    else if constexpr (K == WindowKind::Hamming) v[i] = 25.0 / 46.0 - (1 - 25.0 / 46.0) * std::cos(a);
    else v[i] = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
    if (n1 == 0) v[i] = 1.0;
  }
  ctx.setOutput(0, castDoubles(ctx, dt, {size}, v));
}

void melWeightMatrix(KernelContext& ctx) {
  int64_t mels = static_cast<int64_t>(inputScalar(ctx, 0));
  int64_t dftLen = static_cast<int64_t>(inputScalar(ctx, 1));
  int64_t rate = static_cast<int64_t>(inputScalar(ctx, 2));
  double lower = inputScalar(ctx, 3), upper = inputScalar(ctx, 4);
  DType dt = static_cast<DType>(ctx.attrInt("output_datatype", 1));
  if (mels < 1 || dftLen < 1 || rate < 1) ctx.fail("num_mel_bins, dft_length and sample_rate must be positive");
  bool dbl = ctx.tensor(3).dtype() == DType::Double;
  // The mel edges are computed in the edges' precision (float unless double), the rest in
  // double, matching the numpy formulation the spec's reference uses; bin edges are floored.
  auto mel = [&](double hz) -> double {
    if (dbl) return 2595.0 * std::log1p(hz / 700.0) / std::log(10.0);
    float t = std::log1p(static_cast<float>(hz) / 700.0f);
    return static_cast<float>(2595.0f * t) / static_cast<float>(std::log(10.0));
  };
  double lowMel = mel(lower), highMel = mel(upper);
  double step = dbl ? (highMel - lowMel) / static_cast<double>(mels + 2)
                    : static_cast<float>(static_cast<float>(highMel - lowMel) / static_cast<float>(mels + 2));
  std::vector<int64_t> bins(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    double m = static_cast<double>(i) * step + lowMel;
    double hz = 700.0 * std::expm1(m / 2595.0 * std::log(10.0));
    bins[i] = static_cast<int64_t>(std::floor(static_cast<double>(dftLen + 1) * hz / static_cast<double>(rate)));
  }
  int64_t specBins = dftLen / 2 + 1;
  std::vector<double> w(static_cast<size_t>(specBins * mels), 0.0);
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j < 0 || j >= specBins) ctx.fail("mel filter edge is beyond the spectrogram bins (upper_edge_hertz too high)");
    w[j * mels + i] = v;
  };
  for (int64_t i = 0; i < mels; ++i) {
    int64_t lo = bins[i], center = bins[i + 1], hi = bins[i + 2];
    if (center == lo) set(center, i, 1.0);
    else
      for (int64_t j = lo; j <= center; ++j) set(j, i, static_cast<double>(j - lo) / static_cast<double>(center - lo));
    if (hi > center)
      for (int64_t j = center; j < hi; ++j) set(j, i, static_cast<double>(hi - j) / static_cast<double>(hi - center));
  }
  ctx.setOutput(0, castDoubles(ctx, dt, {specBins, mels}, w));
}

}  // namespace

void registerStringRandomSignalOps() {
  addRef("", "StringConcat", 20, "ref.string_concat", stringConcat);
  addRef("", "StringNormalizer", 10, "ref.string_normalizer", stringNormalizer);
  addRef("", "StringSplit", 20, "ref.string_split", stringSplit);
  addRef("", "RegexFullMatch", 20, "ref.regex_full_match", regexFullMatch);
  addRef("", "TfIdfVectorizer", 9, "ref.tfidf_vectorizer", tfIdfVectorizer);
  // Versions 15/22 and 7/22 differ only in allowed types (22 adds bfloat16).
  addRef("", "RandomNormal", 1, "ref.random_normal", randomNormal);
  addRef("", "RandomNormalLike", 1, "ref.random_normal_like", randomNormal);
  addRef("", "RandomUniform", 1, "ref.random_uniform", randomUniform);
  addRef("", "RandomUniformLike", 1, "ref.random_uniform_like", randomUniform);
  addRef("", "Bernoulli", 15, "ref.bernoulli", bernoulli);
  addRef("", "Multinomial", 7, "ref.multinomial", multinomial);
  addRef("", "DFT", 17, "ref.dft.v17", dft17);
  addRef("", "DFT", 20, "ref.dft", dft20);
  addRef("", "STFT", 17, "ref.stft", stft);
  addRef("", "HannWindow", 17, "ref.hann_window", window<WindowKind::Hann>);
  addRef("", "HammingWindow", 17, "ref.hamming_window", window<WindowKind::Hamming>);
  addRef("", "BlackmanWindow", 17, "ref.blackman_window", window<WindowKind::Blackman>);
  addRef("", "MelWeightMatrix", 17, "ref.mel_weight_matrix", melWeightMatrix);
}

}  // namespace onnxtool::ref
