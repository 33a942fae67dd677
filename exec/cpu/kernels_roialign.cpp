// kernels_roialign.cpp: RoiAlign on float feature maps (opsets 10 and 16: both coordinate
// transformation modes, avg and max pooling). Detectors run it on a number of boxes known only
// at run time (the cpu executor makes the kernel for each count it meets). Per roi and output
// bin, each bilinear sample is located once (positions and weights in double, as the reference
// kernel computes them, exec/ref/image.cpp) into a table in the workspace, then every channel
// plane is pooled through the table (one plane stays in L1 while its bins are computed). A roi
// with more samples than the table holds (an adaptive sampling ratio on a huge box) is pooled
// bin by bin, each sample applied to every channel at once. Rois split over the pool. Accumulation is in float (the reference's is in double: results agree to
// a few ulps of the sums).
// When the samples outnumber the map's pixels (many rois, or few pixels: the usual case), each
// image is first copied channels-last into the workspace; then every sample is four rows of C
// contiguous floats scaled and added to the bin's C accumulators, vectorised (AVX-512, AVX2, or
// the compiler's on the portable path) instead of a scalar load per channel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/cpu/isa.h"
#include "exec/cpu/kernels.h"
#include "lib/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace onnxtool::cpu {

namespace {

/// acc[c] (+)= the bilinear sample of four channels-last rows (C floats each) with weights w:
/// avg: acc += w0 r0 + w1 r1 + w2 r2 + w3 r3; max: v = max of the four weighted values (the
/// reference's std::max order), acc = first ? v : max(acc, v).
void sampleRowsPortable(const float* const r[4], const float* w, float* acc, int64_t C, bool max, bool first) {
  if (!max) {
    for (int64_t c = 0; c < C; ++c) acc[c] += w[0] * r[0][c] + w[1] * r[1][c] + w[2] * r[2][c] + w[3] * r[3][c];
    return;
  }
  for (int64_t c = 0; c < C; ++c) {
    float v = std::max(std::max(w[0] * r[0][c], w[1] * r[1][c]), std::max(w[2] * r[2][c], w[3] * r[3][c]));
    acc[c] = first ? v : std::max(acc[c], v);
  }
}

#if defined(__x86_64__)
// std::max(a, b) is (a < b ? b : a): maxps(b, a) returns its second operand for NaN and for
// equal zeros, as std::max returns a.
/// maxps through its zero-masked form (GCC 12 warns on the plain form's undefined passthrough).
__attribute__((target("avx512f"))) inline __m512 max512(__m512 a, __m512 b) { return _mm512_maskz_max_ps(0xffff, a, b); }

__attribute__((target("avx512f"))) void sampleRowsAvx512(const float* const r[4], const float* w, float* acc, int64_t C, bool max,
                                                         bool first) {
  const __m512 w0 = _mm512_set1_ps(w[0]), w1 = _mm512_set1_ps(w[1]), w2 = _mm512_set1_ps(w[2]), w3 = _mm512_set1_ps(w[3]);
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 k = C - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (C - c)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(k, r[0] + c), b = _mm512_maskz_loadu_ps(k, r[1] + c);
    const __m512 d = _mm512_maskz_loadu_ps(k, r[2] + c), e = _mm512_maskz_loadu_ps(k, r[3] + c);
    if (!max) {
      __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(w0, a), _mm512_mul_ps(w1, b)), _mm512_mul_ps(w2, d)),
                               _mm512_mul_ps(w3, e));
      _mm512_mask_storeu_ps(acc + c, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, acc + c), s));
    } else {
      __m512 v = max512(max512(_mm512_mul_ps(w3, e), _mm512_mul_ps(w2, d)),
                               max512(_mm512_mul_ps(w1, b), _mm512_mul_ps(w0, a)));
      if (!first) v = max512(v, _mm512_maskz_loadu_ps(k, acc + c));
      _mm512_mask_storeu_ps(acc + c, k, v);
    }
  }
}

__attribute__((target("avx2,fma"))) void sampleRowsAvx2(const float* const r[4], const float* w, float* acc, int64_t C, bool max,
                                                        bool first) {
  const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]), w2 = _mm256_set1_ps(w[2]), w3 = _mm256_set1_ps(w[3]);
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    const __m256 a = _mm256_loadu_ps(r[0] + c), b = _mm256_loadu_ps(r[1] + c);
    const __m256 d = _mm256_loadu_ps(r[2] + c), e = _mm256_loadu_ps(r[3] + c);
    if (!max) {
      __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(w0, a), _mm256_mul_ps(w1, b)), _mm256_mul_ps(w2, d)),
                               _mm256_mul_ps(w3, e));
      _mm256_storeu_ps(acc + c, _mm256_add_ps(_mm256_loadu_ps(acc + c), s));
    } else {
      __m256 v = _mm256_max_ps(_mm256_max_ps(_mm256_mul_ps(w3, e), _mm256_mul_ps(w2, d)),
                               _mm256_max_ps(_mm256_mul_ps(w1, b), _mm256_mul_ps(w0, a)));
      if (!first) v = _mm256_max_ps(v, _mm256_loadu_ps(acc + c));
      _mm256_storeu_ps(acc + c, v);
    }
  }
  if (c < C) {
    const float* t[4] = {r[0] + c, r[1] + c, r[2] + c, r[3] + c};
    sampleRowsPortable(t, w, acc + c, C - c, max, first);
  }
}
#endif

using SampleRows = void (*)(const float* const r[4], const float* w, float* acc, int64_t C, bool max, bool first);

SampleRows sampleRowsFor(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return sampleRowsAvx512;
  if (isa == Isa::Avx2) return sampleRowsAvx2;
#endif
  (void)isa;
  return sampleRowsPortable;
}

class RoiAlignKernel : public CpuKernel {
 public:
  RoiAlignKernel(const Node& node, int64_t n, int64_t c, int64_t h, int64_t w, int64_t rois, int64_t oh, int64_t ow, int64_t ratio,
                 double scale, bool halfPixel, bool max, int threads)
      : node_(node), N_(n), C_(c), H_(h), W_(w), R_(rois), oh_(oh), ow_(ow), ratio_(ratio), scale_(scale), halfPixel_(halfPixel),
        max_(max), parts_(std::max<int64_t>(1, std::min<int64_t>(threads, rois))), threads_(std::max(threads, 1)),
        sampleRows_(sampleRowsFor(activeIsa())) {
    // Channels-last pays when the rows read outnumber the pixels copied (samples per bin
    // guessed at 4 for an adaptive ratio, the usual one on detectors' maps); one channel has
    // nothing to vectorise.
    const int64_t per = ratio_ > 0 ? ratio_ * ratio_ : 4;
    channelsLast_ = C_ > 1 && R_ * oh_ * ow_ * per * 4 >= 2 * H_ * W_;
  }

  /// Samples of one roi located at once (the bilinear table); 32 bytes each.
  static constexpr int64_t kTable = 4096;
  size_t workspaceBytes() const override {
    return static_cast<size_t>(parts_ * partFloats() + (channelsLast_ ? N_ * C_ * H_ * W_ : 0)) * sizeof(float);
  }
  std::string variant() const override { return channelsLast_ ? ".nhwc" : ""; }

  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* rois = static_cast<const float*>(args.inputs[1]);
    const int64_t* batch = static_cast<const int64_t*>(args.inputs[2]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t r = 0; r < R_; ++r)  // checked before any thread starts: compute throws only here
      if (batch[r] < 0 || batch[r] >= N_)
        fail(ErrorKind::InvalidInput, "node '{}' (RoiAlign): batch index {} is out of range", node_.displayName(), batch[r]);
    float* ws = static_cast<float*>(args.workspace);
    float* nhwc = ws + parts_ * partFloats();
    const int64_t hw = H_ * W_;
    if (channelsLast_) {  // the images some roi reads, channels-last: [n][pixel][c]
      std::vector<char> used(static_cast<size_t>(N_), 0);
      for (int64_t r = 0; r < R_; ++r) used[static_cast<size_t>(batch[r])] = 1;
      const int64_t blocks = (hw + 63) / 64;
      parallelFor(args.pool, N_ * blocks, 4, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t n = t / blocks, p0 = (t % blocks) * 64, p1 = std::min(hw, p0 + 64);
          if (!used[static_cast<size_t>(n)]) continue;
          const float* src = x + n * C_ * hw;
          float* dst = nhwc + n * C_ * hw;
          for (int64_t c = 0; c < C_; ++c)
            for (int64_t p = p0; p < p1; ++p) dst[p * C_ + c] = src[c * hw + p];
        }
      });
    }
    parallelFor(args.pool, parts_, 1, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        float* acc = ws + part * partFloats();
        for (int64_t r = R_ * part / parts_; r < R_ * (part + 1) / parts_; ++r)
          roi(channelsLast_ ? nhwc : x, rois + r * 4, batch[r], y + r * C_ * oh_ * ow_, acc);
      }
    });
  }

 private:
  static int64_t roundUp(int64_t n) { return (n + 15) / 16 * 16; }
  /// Floats of one part's workspace: the channels' accumulators, then the table (positions as
  /// int32, then weights).
  int64_t partFloats() const { return threadSliceFloats(roundUp(C_) + kTable * 8); }  // a page apart

  /// One roi: y[c, ph, pw] for every channel.
  void roi(const float* x, const float* box, int64_t b, float* y, float* acc) const {
    const double off = halfPixel_ ? 0.5 : 0.0;
    const double sw = box[0] * scale_ - off, sh = box[1] * scale_ - off;
    double roiW = box[2] * scale_ - off - sw, roiH = box[3] * scale_ - off - sh;
    if (!halfPixel_) {  // malformed rois are forced to 1x1
      roiW = std::max(roiW, 1.0);
      roiH = std::max(roiH, 1.0);
    }
    const double binH = roiH / static_cast<double>(oh_), binW = roiW / static_cast<double>(ow_);
    const int64_t gridH = ratio_ > 0 ? ratio_ : static_cast<int64_t>(std::ceil(roiH / static_cast<double>(oh_)));
    const int64_t gridW = ratio_ > 0 ? ratio_ : static_cast<int64_t>(std::ceil(roiW / static_cast<double>(ow_)));
    const float inv = 1.0f / static_cast<float>(std::max<int64_t>(gridH * gridW, 1));
    const int64_t hw = H_ * W_, q = oh_ * ow_;
    const float* img = x + b * C_ * hw;
    const int64_t per = gridH * gridW;
    if (channelsLast_) {  // img is [pixel][c]: each sample is four rows of C floats
      for (int64_t ph = 0; ph < oh_; ++ph)
        for (int64_t pw = 0; pw < ow_; ++pw) {
          bool first = true;
          if (!max_) std::fill(acc, acc + C_, 0.f);
          for (int64_t iy = 0; iy < gridH; ++iy) {
            const double yy = sh + static_cast<double>(ph) * binH + (static_cast<double>(iy) + 0.5) * binH / static_cast<double>(gridH);
            for (int64_t ix = 0; ix < gridW; ++ix) {
              const double xx = sw + static_cast<double>(pw) * binW + (static_cast<double>(ix) + 0.5) * binW / static_cast<double>(gridW);
              int64_t p[4] = {0, 0, 0, 0};
              float w[4] = {0, 0, 0, 0};
              sample(yy, xx, p, w);
              const float* rows[4] = {img + p[0] * C_, img + p[1] * C_, img + p[2] * C_, img + p[3] * C_};
              sampleRows_(rows, w, acc, C_, max_, first);
              first = false;
            }
          }
          float* out = y + ph * ow_ + pw;
          if (max_ && first) {
            for (int64_t c = 0; c < C_; ++c) out[c * q] = 0.f;  // no sample
          } else {
            const float k = max_ ? 1.f : inv;
            for (int64_t c = 0; c < C_; ++c) out[c * q] = acc[c] * k;
          }
        }
      return;
    }
    if (q * per <= kTable) {
      int32_t* pos = reinterpret_cast<int32_t*>(acc + roundUp(C_));
      float* wt = acc + roundUp(C_) + kTable * 4;
      int64_t t = 0;
      for (int64_t ph = 0; ph < oh_; ++ph)
        for (int64_t pw = 0; pw < ow_; ++pw)
          for (int64_t iy = 0; iy < gridH; ++iy) {
            const double yy = sh + static_cast<double>(ph) * binH + (static_cast<double>(iy) + 0.5) * binH / static_cast<double>(gridH);
            for (int64_t ix = 0; ix < gridW; ++ix, ++t) {
              const double xx = sw + static_cast<double>(pw) * binW + (static_cast<double>(ix) + 0.5) * binW / static_cast<double>(gridW);
              int64_t p[4] = {0, 0, 0, 0};
              std::fill(wt + t * 4, wt + t * 4 + 4, 0.f);
              sample(yy, xx, p, wt + t * 4);
              for (int j = 0; j < 4; ++j) pos[t * 4 + j] = static_cast<int32_t>(p[j]);
            }
          }
      for (int64_t c = 0; c < C_; ++c) {
        const float* m = img + c * hw;
        float* out = y + c * q;
        const int32_t* pp = pos;
        const float* ww = wt;
        for (int64_t bin = 0; bin < q; ++bin) {
          if (max_) {
            float a = 0.f;
            for (int64_t k = 0; k < per; ++k, pp += 4, ww += 4) {
              float v = std::max(std::max(ww[0] * m[pp[0]], ww[1] * m[pp[1]]), std::max(ww[2] * m[pp[2]], ww[3] * m[pp[3]]));
              a = k == 0 ? v : std::max(a, v);
            }
            out[bin] = a;
          } else {
            float a = 0.f;
            for (int64_t k = 0; k < per; ++k, pp += 4, ww += 4) a += ww[0] * m[pp[0]] + ww[1] * m[pp[1]] + ww[2] * m[pp[2]] + ww[3] * m[pp[3]];
            out[bin] = a * inv;
          }
        }
      }
      return;
    }
    for (int64_t ph = 0; ph < oh_; ++ph)
      for (int64_t pw = 0; pw < ow_; ++pw) {
        bool first = true;
        if (!max_) std::fill(acc, acc + C_, 0.f);
        for (int64_t iy = 0; iy < gridH; ++iy) {
          const double yy = sh + static_cast<double>(ph) * binH + (static_cast<double>(iy) + 0.5) * binH / static_cast<double>(gridH);
          for (int64_t ix = 0; ix < gridW; ++ix) {
            const double xx = sw + static_cast<double>(pw) * binW + (static_cast<double>(ix) + 0.5) * binW / static_cast<double>(gridW);
            int64_t p[4] = {0, 0, 0, 0};
            float w[4] = {0, 0, 0, 0};
            sample(yy, xx, p, w);
            if (max_) {
              // the max of the weighted corner values, as the ONNX reference and ONNX Runtime do
              for (int64_t c = 0; c < C_; ++c) {
                const float* m = img + c * hw;
                float v = std::max(std::max(w[0] * m[p[0]], w[1] * m[p[1]]), std::max(w[2] * m[p[2]], w[3] * m[p[3]]));
                acc[c] = first ? v : std::max(acc[c], v);
              }
              first = false;
            } else {
              for (int64_t c = 0; c < C_; ++c) {
                const float* m = img + c * hw;
                acc[c] += w[0] * m[p[0]] + w[1] * m[p[1]] + w[2] * m[p[2]] + w[3] * m[p[3]];
              }
            }
          }
        }
        float* out = y + ph * ow_ + pw;
        if (max_ && first) {
          for (int64_t c = 0; c < C_; ++c) out[c * q] = 0.f;  // no sample
        } else {
          const float k = max_ ? 1.f : inv;
          for (int64_t c = 0; c < C_; ++c) out[c * q] = acc[c] * k;
        }
      }
  }

  /// The bilinear sample at (y, x): four positions and weights (all zero outside the map: w
  /// and p must come zeroed).
  void sample(double y, double x, int64_t* p, float* w) const {
    const double H = static_cast<double>(H_), W = static_cast<double>(W_);
    if (y < -1.0 || y > H || x < -1.0 || x > W) return;
    y = std::max(y, 0.0);
    x = std::max(x, 0.0);
    int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
    if (y0 >= H_ - 1) {
      y0 = y1 = H_ - 1;
      y = static_cast<double>(y0);
    } else {
      y1 = y0 + 1;
    }
    if (x0 >= W_ - 1) {
      x0 = x1 = W_ - 1;
      x = static_cast<double>(x0);
    } else {
      x1 = x0 + 1;
    }
    const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly, hx = 1 - lx;
    p[0] = y0 * W_ + x0;
    p[1] = y0 * W_ + x1;
    p[2] = y1 * W_ + x0;
    p[3] = y1 * W_ + x1;
    w[0] = static_cast<float>(hy * hx);
    w[1] = static_cast<float>(hy * lx);
    w[2] = static_cast<float>(ly * hx);
    w[3] = static_cast<float>(ly * lx);
  }

  const Node& node_;
  int64_t N_, C_, H_, W_, R_, oh_, ow_, ratio_;
  double scale_;
  bool halfPixel_, max_;
  int64_t parts_;
  int threads_;
  SampleRows sampleRows_;
  bool channelsLast_ = false;  ///< images copied channels-last into the workspace first
};

}  // namespace

std::unique_ptr<CpuKernel> createRoiAlign(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;  // attributes of a calling function: reference kernel
  if (!info.hasInput(1) || !info.hasInput(2)) return nullptr;
  const auto& x = info.in(0).dims;
  const auto& rois = info.in(1);
  const auto& batch = info.in(2);
  if (x.size() != 4 || rois.dtype != DType::Float || batch.dtype != DType::Int64 || batch.dims.size() != 1) return nullptr;
  const int64_t R = batch.dims[0];
  if (rois.dims != std::vector<int64_t>{R, 4}) return nullptr;  // the reference kernel says what is wrong
  const std::string mode = n.attrString("mode", "avg");
  const std::string coord = n.attrString("coordinate_transformation_mode", info.sinceVersion >= 16 ? "half_pixel" : "output_half_pixel");
  if ((mode != "avg" && mode != "max") || (coord != "half_pixel" && coord != "output_half_pixel")) return nullptr;
  const int64_t oh = n.attrInt("output_height", 1), ow = n.attrInt("output_width", 1), ratio = n.attrInt("sampling_ratio", 0);
  if (oh <= 0 || ow <= 0 || ratio < 0 || x[2] <= 0 || x[3] <= 0 || x[2] * x[3] > INT32_MAX) return nullptr;
  if (info.out(0).dims != std::vector<int64_t>{R, x[1], oh, ow}) return nullptr;
  return std::make_unique<RoiAlignKernel>(n, x[0], x[1], x[2], x[3], R, oh, ow, ratio, n.attrFloat("spatial_scale", 1.0f),
                                          coord == "half_pixel", mode == "max", info.threads);
}

}  // namespace onnxtool::cpu
