// kernels_nms.cpp: NonMaxSuppression on float boxes. Per (batch, class): the candidates above
// the score threshold are sorted once (score descending, equal scores by box index, NaN scores
// last: the reference kernel's order), their canonical corners and areas gathered into SoA
// arrays in that order; then the first live candidate is selected and every later live
// candidate it suppresses drops out in one vector pass (vec.h nmsSuppress, per ISA; IoU is symmetric, so this is the
// reference's "each candidate against every box kept before it", with every suppressed box gone
// from later passes). Boxes whose x ranges cannot overlap are split into groups first, NMS runs
// per group (see select). Stops at max_output_boxes_per_class. The IoU test is computed with the
// reference kernel's operations in its order (exec/ref/image.cpp `suppresses`), so the selection
// is the same bit for bit, NaN and Inf corners included. The output's length is known only when
// the kernel has run: it is allocated through CpuComputeArgs::alloc (OutputReuse::Dynamic).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "exec/cpu/kernels.h"

namespace onnxtool::cpu {

namespace {

/// The sort key of a candidate: score order (higher first, -0 == +0, NaN after every number)
/// in the high half, the box index in the low half (equal scores: lower index first), so that
/// sorting the keys ascending gives the reference kernel's order.
inline uint64_t candidateKey(float score, uint32_t index) {
  uint32_t u;
  if (score != score) {
    u = 0xffffffffu;  // NaN: after -inf, whose key is 0xff800000
  } else {
    if (score == 0) score = 0;  // -0 ranks with +0
    std::memcpy(&u, &score, 4);
    uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    u = ~ascending;
  }
  return (static_cast<uint64_t>(u) << 32) | index;
}

/// The scratch arrays of one (batch, class), carved from the workspace.
struct NmsScratch {
  uint64_t* cand;  // candidateKey, sorted: the box index in the low half
  float *x0, *y0, *x1, *y1, *area;    // canonical corners and areas, in score order (rank)
  float *gx0, *gy0, *gx1, *gy1, *garea;  // the same grouped by cluster, rank order within each
  int32_t *grank, *cluster, *order, *start;
  uint8_t *drop, *keep;
};

class NmsKernel : public CpuKernel {
 public:
  NmsKernel(int64_t batches, int64_t classes, int64_t boxes, bool centerPoint, bool hasMax, bool hasIou, bool hasScore)
      : B_(batches), K_(classes), N_(boxes), center_(centerPoint), hasMax_(hasMax), hasIou_(hasIou), hasScore_(hasScore) {}

  static constexpr size_t kRegions = 20;
  size_t workspaceBytes() const override {
    // per (batch, class): candidates (score + index), two SoA copies of 5 floats, 4 int32
    // arrays (+1 for cluster starts), 2 masks; for the output: the selected box indices of
    // every (batch, class) and their counts; each region 64-byte aligned
    size_t n = static_cast<size_t>(N_), bk = static_cast<size_t>(B_ * K_);
    return n * (8 + 10 * 4 + 4 * 4 + 2) + 4 + bk * n * 4 + bk * 8 + kRegions * 64;
  }

  void compute(const CpuComputeArgs& args) const override {
    const float* boxes = static_cast<const float*>(args.inputs[0]);
    const float* scores = static_cast<const float*>(args.inputs[1]);
    int64_t maxOut = 0;
    if (hasMax_) maxOut = std::max<int64_t>(0, *static_cast<const int64_t*>(args.inputs[2]));
    float iou = hasIou_ ? *static_cast<const float*>(args.inputs[3]) : 0.f;
    float scoreThr = hasScore_ ? *static_cast<const float*>(args.inputs[4]) : 0.f;
    const size_t n = static_cast<size_t>(N_);
    uint8_t* ws = static_cast<uint8_t*>(args.workspace);
    auto carve = [&](size_t bytes) {
      uint8_t* p = ws;
      ws += (bytes + 63) / 64 * 64;
      return p;
    };
    auto floats = [&] { return reinterpret_cast<float*>(carve(n * 4)); };
    auto ints = [&](size_t extra = 0) { return reinterpret_cast<int32_t*>(carve((n + extra) * 4)); };
    NmsScratch w;
    w.cand = reinterpret_cast<uint64_t*>(carve(n * sizeof(uint64_t)));
    w.x0 = floats(), w.y0 = floats(), w.x1 = floats(), w.y1 = floats(), w.area = floats();
    w.gx0 = floats(), w.gy0 = floats(), w.gx1 = floats(), w.gy1 = floats(), w.garea = floats();
    w.grank = ints(), w.cluster = ints(), w.order = ints(), w.start = ints(1);
    w.drop = carve(n), w.keep = carve(n);
    int32_t* selected = reinterpret_cast<int32_t*>(carve(static_cast<size_t>(B_ * K_) * n * 4));
    int64_t* counts = reinterpret_cast<int64_t*>(carve(static_cast<size_t>(B_ * K_) * 8));
    int64_t total = 0;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t k = 0; k < K_; ++k) {
        const float* sc = scores + (b * K_ + k) * N_;
        const float* bx = boxes + b * N_ * 4;
        int32_t* sel = selected + (b * K_ + k) * N_;
        int64_t nsel = maxOut > 0 ? select(bx, sc, iou, scoreThr, maxOut, w, sel) : 0;
        counts[b * K_ + k] = nsel;
        total += nsel;
      }
    const int64_t dims[2] = {total, 3};
    int64_t* out = static_cast<int64_t*>(args.alloc->allocate(0, DType::Int64, dims));
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t k = 0; k < K_; ++k) {
        const int32_t* sel = selected + (b * K_ + k) * N_;
        for (int64_t s = 0; s < counts[b * K_ + k]; ++s) {
          out[0] = b;
          out[1] = k;
          out[2] = sel[s];
          out += 3;
        }
      }
  }

  /// ".avx512", ".center.avx2", ...: the box encoding and the ISA path of the suppression pass
  std::string variant() const override { return std::string(center_ ? ".center." : ".") + vecKernels().isa; }

 private:
  /// Greedy NMS over m boxes in rank order (SoA, destroyed): the first live box is kept, the
  /// live ones after it that it suppresses go; at most maxOut kept, their ranks set in keep[].
  static void greedy(float* x0, float* y0, float* x1, float* y1, float* area, int32_t* rank, size_t m, float iou, int64_t maxOut,
                     uint8_t* drop, uint8_t* keep) {
    const auto suppress = vecKernels().nmsSuppress;
    // drop[] marks boxes suppressed since the last compaction (still in the arrays, skipped when
    // they come up; testing them again is harmless); the arrays are compacted once the marks
    // (counted with repeats, so at worst early) pass a quarter of what is left.
    std::memset(drop, 0, m);
    int64_t nsel = 0, marked = 0;
    size_t head = 0;
    while (head < m && nsel < maxOut) {
      if (drop[head]) {
        ++head;
        continue;
      }
      const float box[5] = {x0[head], y0[head], x1[head], y1[head], area[head]};
      keep[rank[head]] = 1;
      ++nsel;
      ++head;
      if (nsel == maxOut) break;
      marked += suppress(x0 + head, y0 + head, x1 + head, y1 + head, area + head, static_cast<int64_t>(m - head), box, iou,
                         drop + head);
      if (marked * 4 < static_cast<int64_t>(m - head)) continue;
      size_t wr = head;
      for (size_t j = head; j < m; ++j) {
        x0[wr] = x0[j], y0[wr] = y0[j], x1[wr] = x1[j], y1[wr] = y1[j], area[wr] = area[j], rank[wr] = rank[j];
        wr += !drop[j];
      }
      m = wr;
      std::memset(drop + head, 0, m - head);
      marked = 0;
    }
  }

  /// The selected box indices of one (batch, class), in selection order; returns their count.
  int64_t select(const float* bx, const float* sc, float iou, float scoreThr, int64_t maxOut, const NmsScratch& w,
                 int32_t* sel) const {
    size_t m = 0;
    for (int64_t i = 0; i < N_; ++i)
      if (!hasScore_ || sc[i] > scoreThr) w.cand[m++] = candidateKey(sc[i], static_cast<uint32_t>(i));
    std::sort(w.cand, w.cand + m);
    // Canonical corners and areas, as the reference kernel computes them.
    bool finite = true;
    for (size_t j = 0; j < m; ++j) {
      const float* a = bx + static_cast<int64_t>(static_cast<int32_t>(w.cand[j] & 0xffffffffu)) * 4;
      float ax0, ax1, ay0, ay1;
      if (!center_) {
        ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]), ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]);
      } else {
        ax0 = a[0] - a[2] / 2, ax1 = a[0] + a[2] / 2, ay0 = a[1] - a[3] / 2, ay1 = a[1] + a[3] / 2;
      }
      w.x0[j] = ax0, w.x1[j] = ax1, w.y0[j] = ay0, w.y1[j] = ay1;
      w.area[j] = (ax1 - ax0) * (ay1 - ay0);
      finite &= std::isfinite(ax0) & std::isfinite(ax1) & std::isfinite(ay0) & std::isfinite(ay1) & std::isfinite(w.area[j]);
      w.keep[j] = 0;
    }
    // Clusters: with finite corners, two boxes suppress one another only if their x ranges
    // overlap (ix1 > ix0) and both have positive extent and area, so the boxes split into groups
    // of overlapping x ranges (a sweep over x0) that cannot affect one another: NMS runs per
    // group (torchvision's batched NMS shifts every class apart, one group each at least), and
    // the boxes kept are the same as one greedy pass over all. Else one group of everything.
    int32_t nclus = 0;
    if (!finite) {
      for (size_t j = 0; j < m; ++j) w.cluster[j] = 0;
      nclus = m ? 1 : 0;
    } else {
      size_t no = 0;
      for (size_t j = 0; j < m; ++j) {
        if (w.x1[j] > w.x0[j] && w.y1[j] > w.y0[j] && w.area[j] > 0) w.order[no++] = static_cast<int32_t>(j);
        else w.cluster[j] = nclus++;  // can neither suppress nor be suppressed
      }
      std::sort(w.order, w.order + no, [&](int32_t a, int32_t b) { return w.x0[a] < w.x0[b]; });
      float end = 0;
      for (size_t o = 0; o < no; ++o) {
        int32_t j = w.order[o];
        if (o == 0 || w.x0[j] >= end) {
          ++nclus;
          end = w.x1[j];
        }
        w.cluster[j] = nclus - 1;
        end = std::max(end, w.x1[j]);
      }
    }
    // Group by cluster (counting sort; ranks ascending within each), then NMS per group.
    for (int32_t c = 0; c <= nclus; ++c) w.start[c] = 0;
    for (size_t j = 0; j < m; ++j) ++w.start[w.cluster[j] + 1];
    for (int32_t c = 0; c < nclus; ++c) w.start[c + 1] += w.start[c];
    for (size_t j = 0; j < m; ++j) {
      int32_t at = w.start[w.cluster[j]]++;
      w.gx0[at] = w.x0[j], w.gy0[at] = w.y0[j], w.gx1[at] = w.x1[j], w.gy1[at] = w.y1[j], w.garea[at] = w.area[j];
      w.grank[at] = static_cast<int32_t>(j);
    }
    for (int32_t c = nclus; c > 0; --c) w.start[c] = w.start[c - 1];  // back to group starts
    w.start[0] = 0;
    for (int32_t c = 0; c < nclus; ++c) {
      size_t b = static_cast<size_t>(w.start[c]), e = static_cast<size_t>(w.start[c + 1]);
      if (e - b == 1) {
        w.keep[w.grank[b]] = 1;
        continue;
      }
      greedy(w.gx0 + b, w.gy0 + b, w.gx1 + b, w.gy1 + b, w.garea + b, w.grank + b, e - b, iou, maxOut, w.drop + b, w.keep);
    }
    // The kept boxes in score order, the first maxOut of them.
    int64_t nsel = 0;
    for (size_t j = 0; j < m && nsel < maxOut; ++j)
      if (w.keep[j]) sel[nsel++] = static_cast<int32_t>(w.cand[j] & 0xffffffffu);
    return nsel;
  }

  int64_t B_, K_, N_;
  bool center_, hasMax_, hasIou_, hasScore_;
};

}  // namespace

std::unique_ptr<CpuKernel> createNonMaxSuppression(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (!info.hasInput(1)) return nullptr;
  const auto& b = info.in(0).dims;
  const auto& s = info.in(1).dims;
  if (info.in(1).dtype != DType::Float || b.size() != 3 || b[2] != 4 || s.size() != 3 || s[0] != b[0] || s[2] != b[1])
    return nullptr;  // the reference kernel says what is wrong
  if (b[1] >= (int64_t{1} << 31)) return nullptr;
  // The workspace holds every (batch, class)'s selection (4 bytes a box): past 64 MiB (many
  // classes of many boxes) the reference kernel, which holds only what it keeps, runs instead.
  if (b[0] * s[1] > ((int64_t{1} << 24) / std::max<int64_t>(b[1], 1))) return nullptr;
  // The optional scalars, when given, must hold one element of the schema's type (an empty one
  // counts as absent, as on ref).
  auto scalar = [&](size_t i, DType t, bool& has) {
    has = false;
    if (!info.hasInput(i)) return true;
    if (info.in(i).dtype != t) return false;
    int64_t ne = info.in(i).numElements();
    has = ne > 0;
    return ne <= 1;
  };
  bool hasMax, hasIou, hasScore;
  if (!scalar(2, DType::Int64, hasMax) || !scalar(3, DType::Float, hasIou) || !scalar(4, DType::Float, hasScore)) return nullptr;
  bool center = n.attrInt("center_point_box", 0) != 0;  // as on ref: any value but 0
  return std::make_unique<NmsKernel>(b[0], s[1], b[1], center, hasMax, hasIou, hasScore);
}

}  // namespace onnxtool::cpu
