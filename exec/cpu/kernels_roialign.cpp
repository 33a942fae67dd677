// kernels_roialign.cpp: RoiAlign on float feature maps (opsets 10 and 16: both coordinate
// transformation modes, avg and max pooling). Detectors run it on a number of boxes known only
// at run time (the cpu executor makes the kernel for each count it meets). Per roi and output
// bin, each bilinear sample is located once (positions and weights in double, as the reference
// kernel computes them, exec/ref/image.cpp) into a table in the workspace, then every channel
// plane is pooled through the table (one plane stays in L1 while its bins are computed). A roi
// with more samples than the table holds (an adaptive sampling ratio on a huge box) is pooled
// bin by bin, each sample applied to every channel at once. Rois split over the pool. Accumulation is in float (the reference's is in double: results agree to
// a few ulps of the sums).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "exec/cpu/kernels.h"
#include "lib/error.h"

namespace onnxtool::cpu {

namespace {

class RoiAlignKernel : public CpuKernel {
 public:
  RoiAlignKernel(const Node& node, int64_t n, int64_t c, int64_t h, int64_t w, int64_t rois, int64_t oh, int64_t ow, int64_t ratio,
                 double scale, bool halfPixel, bool max, int threads)
      : node_(node), N_(n), C_(c), H_(h), W_(w), R_(rois), oh_(oh), ow_(ow), ratio_(ratio), scale_(scale), halfPixel_(halfPixel),
        max_(max), parts_(std::max<int64_t>(1, std::min<int64_t>(threads, rois))) {}

  /// Samples of one roi located at once (the bilinear table); 32 bytes each.
  static constexpr int64_t kTable = 4096;
  size_t workspaceBytes() const override { return static_cast<size_t>(parts_ * partFloats()) * sizeof(float); }

  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    const float* rois = static_cast<const float*>(args.inputs[1]);
    const int64_t* batch = static_cast<const int64_t*>(args.inputs[2]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t r = 0; r < R_; ++r)  // checked before any thread starts: compute throws only here
      if (batch[r] < 0 || batch[r] >= N_)
        fail(ErrorKind::InvalidInput, "node '{}' (RoiAlign): batch index {} is out of range", node_.displayName(), batch[r]);
    float* ws = static_cast<float*>(args.workspace);
    parallelFor(args.pool, parts_, 1, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        float* acc = ws + part * partFloats();
        for (int64_t r = R_ * part / parts_; r < R_ * (part + 1) / parts_; ++r) roi(x, rois + r * 4, batch[r], y + r * C_ * oh_ * ow_, acc);
      }
    });
  }

 private:
  static int64_t roundUp(int64_t n) { return (n + 15) / 16 * 16; }
  /// Floats of one part's workspace: the channels' accumulators, then the table (positions as
  /// int32, then weights).
  int64_t partFloats() const { return roundUp(C_) + kTable * 8; }

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
