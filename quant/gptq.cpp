// gptq.cpp: GPTQ weight rounding for static quantization (see gptq.h). The second moments and the
// factorizations run on OpenBLAS (dsyrk, dgemm) and its LAPACK (dpotrf, dpotri), in double.
#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include <cblas.h>
#include <fmt/format.h>

#include "lib/tensor.h"
#include "quant/static_qdq.h"

extern "C" {
// LAPACK (Fortran interface, column-major), from OpenBLAS.
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
}

namespace onnxtool {

namespace {

/// One layer: its weight as rows (output channels) x columns (the inputs one output reads), in
/// groups (Conv groups; one for MatMul/Gemm), and the H of each group.
struct Layer {
  const Node* node = nullptr;
  const Tensor* w = nullptr;
  int64_t axis = 0;
  std::string input;
  bool conv = false;
  int64_t rows = 0, groups = 1, rowsPerGroup = 0, cols = 0;  ///< cols: per group
  // Conv geometry (spatial rank 1 or 2; rank 1 as height 1).
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::vector<int64_t> pads;  ///< begin h, begin w, end h, end w (explicit or NOTSET)
  std::string autoPad = "NOTSET";
  std::vector<double> h;      ///< groups x cols x cols, upper triangle (row-major) accumulated
  double count = 0;           ///< input vectors seen
  bool bad = false;
  std::string why;
};

/// Element (r, c) of the weight as a row/column matrix (group g's rows are g*rowsPerGroup...).
int64_t weightIndex(const Layer& l, int64_t r, int64_t c) {
  if (l.conv) return r * l.cols + c;                        // [M, C/g, kh, kw]
  if (l.axis == 0) return r * l.cols + c;                   // Gemm transB: [N, K]
  return c * l.rows + r;                                    // [K, N]
}

/// Adds the input patches of one Conv input [N, C, H, W] (or [N, C, W]) to the layer's H.
void accumulateConv(Layer& l, const TensorData& t) {
  const auto& d = t.dims;
  if (d.size() != 4 && d.size() != 3) {
    l.bad = true, l.why = "input rank";
    return;
  }
  const int64_t n = d[0], c = d[1], ih = d.size() == 4 ? d[2] : 1, iw = d.back();
  const int64_t cg = c / l.groups;
  if (cg * l.kh * l.kw != l.cols || cg * l.groups != c) {
    l.bad = true, l.why = "input channels do not match the weight";
    return;
  }
  int64_t pt = 0, pl = 0, oh, ow;
  auto outSize = [&](int64_t in, int64_t k, int64_t s, int64_t dil, int64_t pb, int64_t pe) {
    return (in + pb + pe - ((k - 1) * dil + 1)) / s + 1;
  };
  if (l.autoPad == "SAME_UPPER" || l.autoPad == "SAME_LOWER") {
    oh = (ih + l.sh - 1) / l.sh;
    ow = (iw + l.sw - 1) / l.sw;
    const int64_t th = std::max<int64_t>(0, (oh - 1) * l.sh + (l.kh - 1) * l.dh + 1 - ih);
    const int64_t tw = std::max<int64_t>(0, (ow - 1) * l.sw + (l.kw - 1) * l.dw + 1 - iw);
    pt = l.autoPad == "SAME_UPPER" ? th / 2 : th - th / 2;
    pl = l.autoPad == "SAME_UPPER" ? tw / 2 : tw - tw / 2;
  } else if (l.autoPad == "VALID") {
    oh = outSize(ih, l.kh, l.sh, l.dh, 0, 0);
    ow = outSize(iw, l.kw, l.sw, l.dw, 0, 0);
  } else {
    pt = l.pads[0], pl = l.pads[1];
    oh = outSize(ih, l.kh, l.sh, l.dh, l.pads[0], l.pads[2]);
    ow = outSize(iw, l.kw, l.sw, l.dw, l.pads[1], l.pads[3]);
  }
  if (oh <= 0 || ow <= 0) return;
  const float* x = reinterpret_cast<const float*>(t.raw.data());
  const int64_t k = l.cols, pix = oh * ow;
  // Patches transposed, [k][pixels of the block] (one row per weight column, so each row is
  // filled by strided runs of an input row), in blocks of whole output rows of at most ~16 MiB.
  const int64_t blockOy = std::clamp<int64_t>((int64_t{2} << 20) / std::max<int64_t>(k * ow, 1), 1, oh);
  const int64_t ld = blockOy * ow;
  std::vector<double> p(static_cast<size_t>(k * ld));
  for (int64_t img = 0; img < n; ++img)
    for (int64_t g = 0; g < l.groups; ++g) {
      double* hg = l.h.data() + g * k * k;
      for (int64_t oy0 = 0; oy0 < oh; oy0 += blockOy) {
        const int64_t rowsOy = std::min(blockOy, oh - oy0), cols = rowsOy * ow;
        for (int64_t ci = 0; ci < cg; ++ci) {
          const float* plane = x + ((img * c) + g * cg + ci) * ih * iw;
          for (int64_t i = 0; i < l.kh; ++i)
            for (int64_t j = 0; j < l.kw; ++j) {
              double* pr = p.data() + ((ci * l.kh + i) * l.kw + j) * ld;
              // Output columns whose tap lands inside the row: [lo, hi).
              const int64_t off = j * l.dw - pl;
              const int64_t lo = std::min(ow, off >= 0 ? 0 : (-off + l.sw - 1) / l.sw);
              const int64_t hi = std::clamp<int64_t>(iw - off <= 0 ? 0 : (iw - off - 1) / l.sw + 1, lo, ow);
              for (int64_t r = 0; r < rowsOy; ++r) {
                double* dst = pr + r * ow;
                const int64_t y = (oy0 + r) * l.sh - pt + i * l.dh;
                if (y < 0 || y >= ih) {
                  std::fill(dst, dst + ow, 0.0);
                  continue;
                }
                const float* src = plane + y * iw + off;
                std::fill(dst, dst + lo, 0.0);
                for (int64_t ox = lo; ox < hi; ++ox) {
                  const float v = src[ox * l.sw];
                  dst[ox] = std::isfinite(v) ? v : 0.0;
                }
                std::fill(dst + hi, dst + ow, 0.0);
              }
            }
        }
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, static_cast<int>(k), static_cast<int>(cols), 1.0, p.data(),
                    static_cast<int>(ld), 1.0, hg, static_cast<int>(k));
      }
    }
  l.count += static_cast<double>(n * pix);
}

/// Adds the rows of a MatMul/Gemm input [..., K] to the layer's H.
void accumulateRows(Layer& l, const TensorData& t) {
  if (t.dims.empty() || t.dims.back() != l.cols) {
    l.bad = true, l.why = "input's last axis does not match the weight";
    return;
  }
  const int64_t k = l.cols, total = t.numElements().value_or(0) / std::max<int64_t>(k, 1);
  const float* x = reinterpret_cast<const float*>(t.raw.data());
  const int64_t blockRows = std::clamp<int64_t>((int64_t{2} << 20) / std::max<int64_t>(k, 1), 16, std::max<int64_t>(total, 16));
  std::vector<double> p(static_cast<size_t>(blockRows * k));
  for (int64_t r0 = 0; r0 < total; r0 += blockRows) {
    const int64_t rowsHere = std::min(blockRows, total - r0);
    for (int64_t i = 0; i < rowsHere * k; ++i) {
      float v = x[r0 * k + i];
      p[static_cast<size_t>(i)] = std::isfinite(v) ? v : 0.0;
    }
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(k), static_cast<int>(rowsHere), 1.0, p.data(),
                static_cast<int>(k), 1.0, l.h.data(), static_cast<int>(k));
  }
  l.count += static_cast<double>(total);
}

/// tr(E H E^T) for E [rows, k] row-major and H symmetric [k, k] (full).
double outputError(const std::vector<double>& e, const std::vector<double>& h, int64_t rows, int64_t k) {
  std::vector<double> eh(static_cast<size_t>(rows * k));
  cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, static_cast<int>(rows), static_cast<int>(k), 1.0, h.data(), static_cast<int>(k),
              e.data(), static_cast<int>(k), 0.0, eh.data(), static_cast<int>(k));
  return std::inner_product(eh.begin(), eh.end(), e.begin(), 0.0);
}

/// GPTQ on one group: w [rows, k] (float values, row-major), h [k, k] (upper triangle filled),
/// each row's scale and zero point, integer limits. Writes the integers into q [rows, k] and
/// returns {gptq error, nearest error}; false when H cannot be factorized.
bool gptqGroup(std::vector<double> w, std::vector<double> h, int64_t rows, int64_t k, const std::vector<double>& scale,
               const std::vector<double>& zero, double qmin, double qmax, const GptqOptions& o, std::vector<double>& q,
               double* errGptq, double* errNearest, int64_t block = 0) {
  // Scale and zero point of (row r, column c): one per row, or per row and block of `block`
  // columns (int4: scale[r * blocks + c / block]).
  const int64_t gs = block > 0 ? block : k, groups = (k + gs - 1) / gs;
  auto quant = [&](double v, int64_t r, int64_t c) {
    const size_t i = static_cast<size_t>(r * groups + c / gs);
    return std::clamp(std::nearbyint(v / scale[i]) + zero[i], qmin, qmax);
  };
  auto deq = [&](double qi, int64_t r, int64_t c) {
    const size_t i = static_cast<size_t>(r * groups + c / gs);
    return (qi - zero[i]) * scale[i];
  };
  // Full symmetric H (from the upper triangle) and the nearest-rounding error as the baseline.
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < i; ++j) h[i * k + j] = h[j * k + i];
  for (double v : h)
    if (!std::isfinite(v)) return false;
  // Dead inputs (always zero on the calibration data): no correlation to spread error through.
  // The diagonal as it was is kept to undo the damping for the error measures at the end (two
  // k x k matrices at most: H and the factor; k = 11008 is 0.97 GB each).
  double meanDiag = 0;
  std::vector<double> diag(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) meanDiag += diag[static_cast<size_t>(i)] = h[i * k + i];
  meanDiag /= static_cast<double>(k);
  if (!(meanDiag > 0)) return false;
  for (int64_t i = 0; i < k; ++i) {
    if (h[i * k + i] == 0) h[i * k + i] = 1;
    h[i * k + i] += o.damp * meanDiag;
  }
  // Column order: by decreasing H_ii.
  std::vector<int64_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.actOrder)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h[a * k + a] > h[b * k + b]; });
  std::vector<double> hp(static_cast<size_t>(k * k)), wp(static_cast<size_t>(rows * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) hp[i * k + j] = h[perm[i] * k + perm[j]];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) wp[r * k + j] = w[r * k + perm[j]];
  // U: the upper Cholesky factor of H^-1 (H^-1 = U^T U). In column-major terms the symmetric
  // matrix is the same array; 'L' there is the upper triangle of our row-major view.
  int n = static_cast<int>(k), info = 0;
  dpotrf_("L", &n, hp.data(), &n, &info);
  if (info != 0) return false;
  dpotri_("L", &n, hp.data(), &n, &info);  // H^-1, lower triangle in column-major = upper row-major
  if (info != 0) return false;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < i; ++j) hp[i * k + j] = hp[j * k + i];  // full H^-1 (row-major)
  dpotrf_("U", &n, hp.data(), &n, &info);  // column-major upper: H^-1 = U^T U, U(i, j) at [j * k + i]
  if (info != 0) return false;
  // U row-major (its upper triangle is all the loop reads): the transpose of the column-major
  // factor, in place.
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j) std::swap(hp[i * k + j], hp[j * k + i]);
  const std::vector<double>& u = hp;
  std::vector<double> qp(static_cast<size_t>(rows * k));
  const int64_t bs = std::max<int64_t>(1, o.block);
  std::vector<double> err(static_cast<size_t>(rows * bs));
  for (int64_t i1 = 0; i1 < k; i1 += bs) {
    const int64_t i2 = std::min(k, i1 + bs), nb = i2 - i1;
    for (int64_t r = 0; r < rows; ++r) {
      double* wr = wp.data() + r * k;
      for (int64_t j = i1; j < i2; ++j) {
        const double qi = quant(wr[j], r, perm[j]);
        qp[r * k + j] = qi;
        const double e = (wr[j] - deq(qi, r, perm[j])) / u[j * k + j];
        const double* uj = u.data() + j * k;
        for (int64_t t = j + 1; t < i2; ++t) wr[t] -= e * uj[t];
        err[r * nb + (j - i1)] = e;
      }
    }
    if (i2 < k)  // the block's pending updates on the columns after it: W[:, i2:] -= Err U[i1:i2, i2:]
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(k - i2), static_cast<int>(nb), -1.0,
                  err.data(), static_cast<int>(nb), u.data() + i1 * k + i2, static_cast<int>(k), 1.0, wp.data() + i2,
                  static_cast<int>(k));
  }
  // Back to the weight's column order; both errors on the undamped H.
  std::vector<double> eG(static_cast<size_t>(rows * k)), eN(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t c = perm[j];
      q[r * k + c] = qp[r * k + j];
      eG[r * k + c] = w[r * k + c] - deq(qp[r * k + j], r, c);
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) eN[r * k + c] = w[r * k + c] - deq(quant(w[r * k + c], r, c), r, c);
  for (int64_t i = 0; i < k; ++i) h[i * k + i] = diag[static_cast<size_t>(i)];  // undamped
  *errGptq = outputError(eG, h, rows, k);
  *errNearest = outputError(eN, h, rows, k);
  return true;
}

}  // namespace

GptqReport roundWeightsGptq(const Model& model, const std::vector<std::map<std::string, RtValue>>& samples,
                            const QuantScheme& scheme, int64_t minElements, PresetWeights& out, const GptqOptions& options) {
  GptqReport report;
  if (!model.graph || samples.empty()) return report;
  std::vector<Layer> layers;
  std::set<std::string> seenWeights;
  for (const auto& nn : model.graph->nodes()) {
    const Node& n = *nn;
    int64_t axis = 0;
    const Tensor* w = staticQuantWeight(n, &axis);
    if (!w || !exclusionReason(n, scheme).empty() || w->numElements().value_or(0) < minElements) continue;
    if (!seenWeights.insert(n.input(1)->name()).second) continue;  // a weight shared by several nodes: nearest
    Layer l;
    l.node = &n;
    l.w = w;
    l.axis = axis;
    l.input = n.input(0)->name();
    l.conv = n.opType == "Conv";
    if (l.conv) {
      const auto& d = w->dims;
      if (d.size() != 3 && d.size() != 4) {
        report.skipped.push_back(fmt::format("node '{}' (Conv): only 1-D and 2-D convolutions", n.displayName()));
        continue;
      }
      l.rows = d[0];
      l.groups = n.attrInt("group", 1);
      if (l.groups <= 0 || l.rows % l.groups) continue;
      l.rowsPerGroup = l.rows / l.groups;
      l.cols = 1;
      for (size_t i = 1; i < d.size(); ++i) l.cols *= d[i];
      const bool two = d.size() == 4;
      l.kh = two ? d[2] : 1;
      l.kw = d.back();
      auto s = n.attrInts("strides"), dil = n.attrInts("dilations"), p = n.attrInts("pads");
      const size_t sr = two ? 2 : 1;
      if ((!s.empty() && s.size() != sr) || (!dil.empty() && dil.size() != sr) || (!p.empty() && p.size() != 2 * sr)) continue;
      if (two) {
        if (!s.empty()) l.sh = s[0], l.sw = s[1];
        if (!dil.empty()) l.dh = dil[0], l.dw = dil[1];
        l.pads = p.empty() ? std::vector<int64_t>{0, 0, 0, 0} : p;
      } else {
        if (!s.empty()) l.sw = s[0];
        if (!dil.empty()) l.dw = dil[0];
        l.pads = p.empty() ? std::vector<int64_t>{0, 0, 0, 0} : std::vector<int64_t>{0, p[0], 0, p[1]};
      }
      l.autoPad = n.attrString("auto_pad", "NOTSET");
      if (l.sh <= 0 || l.sw <= 0 || l.dh <= 0 || l.dw <= 0) continue;
    } else {
      l.rows = w->dims[static_cast<size_t>(axis)];
      l.cols = w->dims[static_cast<size_t>(1 - axis)];
      l.rowsPerGroup = l.rows;
    }
    if (l.rows <= 0 || l.cols <= 0) continue;
    layers.push_back(std::move(l));
  }
  // Passes over the samples, each accumulating the H of as many layers as fit in memory.
  double ratioSum = 0;
  for (size_t b = 0; b < layers.size();) {
    size_t e = b;
    uint64_t bytes = 0;
    while (e < layers.size()) {
      const Layer& l = layers[e];
      uint64_t need = static_cast<uint64_t>(l.groups) * static_cast<uint64_t>(l.cols * l.cols) * 8;
      if (e > b && bytes + need > options.memoryBytes) break;
      bytes += need;
      ++e;
    }
    std::map<std::string, std::vector<Layer*>> byInput;
    std::vector<std::string> names;
    for (size_t i = b; i < e; ++i) {
      Layer& l = layers[i];
      l.h.assign(static_cast<size_t>(l.groups * l.cols * l.cols), 0.0);
      if (byInput[l.input].empty()) names.push_back(l.input);
      byInput[l.input].push_back(&l);
    }
    observeValues(model, names, samples, [&](const std::string& name, const TensorData& t) {
      if (t.dtype() != DType::Float) return;
      for (Layer* l : byInput[name])
        if (!l->bad) l->conv ? accumulateConv(*l, t) : accumulateRows(*l, t);
    });
    report.passes++;
    for (size_t i = b; i < e; ++i) {
      Layer& l = layers[i];
      const std::string what = fmt::format("node '{}' ({})", l.node->displayName(), l.node->opType);
      if (l.bad || !(l.count > 0)) {
        report.skipped.push_back(fmt::format("{}: {}", what, l.bad ? l.why : "calibration saw no input"));
        l.h = {};
        continue;
      }
      // Fewer input vectors than twice the inputs a row reads: H is (nearly) rank-deficient, and
      // errors pushed into directions the samples never took would land on other inputs
      // unchecked (a classifier's Gemm on 120 images: 120 vectors of 1280).
      if (l.count < options.minVectorsPerInput * static_cast<double>(l.cols)) {
        report.skipped.push_back(fmt::format("{}: {} calibration input vectors for {} inputs per output (nearest rounding)", what,
                                             static_cast<int64_t>(l.count), l.cols));
        l.h = {};
        continue;
      }
      QuantizedWeight qw = quantizeWeight(*l.w, l.axis, scheme, scheme.weightType);
      const auto [qmin, qmax] = weightLimits(scheme, scheme.weightType);
      const bool u8 = qw.q.dtype() == DType::UInt8;
      const auto* zd = reinterpret_cast<const uint8_t*>(qw.zero.raw.data());
      const int64_t count = l.w->numElements().value_or(0);
      std::vector<float> wf(static_cast<size_t>(count));
      std::memcpy(wf.data(), l.w->raw.data(), wf.size() * 4);
      bool finite = std::all_of(wf.begin(), wf.end(), [](float v) { return std::isfinite(v); });
      if (!finite) {
        report.skipped.push_back(fmt::format("{}: the weight is not finite", what));
        l.h = {};
        continue;
      }
      std::string qraw(reinterpret_cast<const char*>(qw.q.raw.data()), qw.q.raw.size());
      double gSum = 0, nSum = 0;
      int64_t failedGroups = 0;
      const int64_t rg = l.rowsPerGroup, k = l.cols;
      for (int64_t g = 0; g < l.groups; ++g) {
        std::vector<double> w(static_cast<size_t>(rg * k)), scale(static_cast<size_t>(rg)), zero(static_cast<size_t>(rg));
        for (int64_t r = 0; r < rg; ++r) {
          const int64_t row = g * rg + r;
          const size_t ch = qw.axis >= 0 ? static_cast<size_t>(row) : 0;
          scale[static_cast<size_t>(r)] = qw.scales[ch];
          zero[static_cast<size_t>(r)] = u8 ? static_cast<double>(zd[ch]) : static_cast<double>(static_cast<int8_t>(zd[ch]));
          for (int64_t c = 0; c < k; ++c) w[static_cast<size_t>(r * k + c)] = wf[static_cast<size_t>(weightIndex(l, row, c))];
        }
        std::vector<double> hg(l.h.begin() + g * k * k, l.h.begin() + (g + 1) * k * k);
        for (double& v : hg) v /= l.count;
        std::vector<double> q(static_cast<size_t>(rg * k));
        double eg = 0, en = 0;
        if (!gptqGroup(w, std::move(hg), rg, k, scale, zero, static_cast<double>(qmin), static_cast<double>(qmax), options, q, &eg, &en)) {
          // This group's inputs were all zero on the calibration data (a dead channel of a
          // depthwise convolution), or H did not factorize: its rows keep nearest rounding.
          failedGroups++;
          continue;
        }
        gSum += eg;
        nSum += en;
        for (int64_t r = 0; r < rg; ++r)
          for (int64_t c = 0; c < k; ++c) {
            const auto v = static_cast<int64_t>(q[static_cast<size_t>(r * k + c)]);
            qraw[static_cast<size_t>(weightIndex(l, g * rg + r, c))] =
                static_cast<char>(u8 ? static_cast<uint8_t>(v) : static_cast<uint8_t>(static_cast<int8_t>(v)));
          }
      }
      l.h = {};
      if (failedGroups == l.groups) {
        report.skipped.push_back(fmt::format("{}: the inputs' second-moment matrix is not positive definite", what));
        continue;
      }
      if (!(gSum < nSum)) {  // nearest rounding is as good here: keep it
        report.keptNearest++;
        ratioSum += 1;
        report.layers++;
        continue;
      }
      ratioSum += gSum / nSum;
      qw.q.setRaw(Buffer::fromString(std::move(qraw)));
      out[l.node->input(1)->name()] = std::move(qw);
      report.layers++;
    }
    b = e;
  }
  if (report.layers) report.meanErrorRatio = ratioSum / static_cast<double>(report.layers);
  return report;
}

GptqReport roundWeightsGptq(const Model& model, const std::vector<std::map<std::string, RtValue>>& samples,
                            std::vector<GptqWeight>& weights, const GptqOptions& options) {
  GptqReport report;
  if (!model.graph || samples.empty() || weights.empty()) return report;
  std::vector<Layer> layers(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    Layer& l = layers[i];
    l.node = weights[i].node;
    l.input = weights[i].node->input(0)->name();
    l.rows = l.rowsPerGroup = weights[i].rows;
    l.cols = weights[i].cols;
  }
  double ratioSum = 0;
  for (size_t b = 0; b < layers.size();) {
    size_t e = b;
    uint64_t bytes = 0;
    while (e < layers.size()) {
      uint64_t need = static_cast<uint64_t>(layers[e].cols * layers[e].cols) * 8;
      if (e > b && bytes + need > options.memoryBytes) break;
      bytes += need;
      ++e;
    }
    std::map<std::string, std::vector<Layer*>> byInput;
    std::vector<std::string> names;
    for (size_t i = b; i < e; ++i) {
      layers[i].h.assign(static_cast<size_t>(layers[i].cols * layers[i].cols), 0.0);
      if (byInput[layers[i].input].empty()) names.push_back(layers[i].input);
      byInput[layers[i].input].push_back(&layers[i]);
    }
    observeValues(model, names, samples, [&](const std::string& name, const TensorData& t) {
      if (t.dtype() != DType::Float) return;
      for (Layer* l : byInput[name])
        if (!l->bad) accumulateRows(*l, t);
    });
    report.passes++;
    for (size_t i = b; i < e; ++i) {
      Layer& l = layers[i];
      GptqWeight& gw = weights[i];
      const std::string what = fmt::format("node '{}' ({})", l.node->displayName(), l.node->opType);
      if (l.bad || l.count < options.minVectorsPerInput * static_cast<double>(l.cols)) {
        report.skipped.push_back(fmt::format("{}: {}", what, l.bad ? l.why : fmt::format("{} calibration input vectors for {} inputs per output (nearest rounding)",
                                                                                         static_cast<int64_t>(l.count), l.cols)));
        l.h = {};
        continue;
      }
      for (double& v : l.h) v /= l.count;
      std::vector<double> q(static_cast<size_t>(gw.rows * gw.cols));
      double eg = 0, en = 0;
      const bool ok = gptqGroup(gw.w, std::move(l.h), gw.rows, gw.cols, gw.scale, gw.zero, gw.qmin, gw.qmax, options, q, &eg, &en,
                                gw.block);
      l.h = {};
      if (!ok) {
        report.skipped.push_back(fmt::format("{}: the inputs' second-moment matrix is not positive definite", what));
        continue;
      }
      report.layers++;
      if (!(eg < en)) {
        report.keptNearest++;
        ratioSum += 1;
        continue;
      }
      ratioSum += eg / en;
      gw.q = std::move(q);
    }
    b = e;
  }
  if (report.layers) report.meanErrorRatio = ratioSum / static_cast<double>(report.layers);
  return report;
}

}  // namespace onnxtool
