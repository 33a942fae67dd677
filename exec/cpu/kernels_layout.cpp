// kernels_layout.cpp: Transpose as a strided copy (rows over the pool), Gather (embedding lookup) as row copies,
// Slice as a strided copy of contiguous blocks, Concat and Split as block copies along the axis, and ReduceMean over trailing axes (the LayerNorm statistics of exported transformers).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>

#include "exec/cpu/conv_microkernels.h"
#include "exec/cpu/kernels.h"
#include "lib/error.h"

namespace onnxtool::cpu {

namespace {

/// out[i0..ir] = in[...] with the input's strides permuted; the innermost output dim runs as a
/// loop with one fixed input stride. Any element type (copied by size).
class TransposeKernel : public CpuKernel {
 public:
  TransposeKernel(std::vector<int64_t> outDims, std::vector<int64_t> inStrides, size_t elem)
      : outDims_(std::move(outDims)), inStrides_(std::move(inStrides)), elem_(elem) {
    total_ = 1;
    for (int64_t d : outDims_) total_ *= d;
  }
  void compute(const CpuComputeArgs& args) const override {
    if (total_ == 0) return;
    switch (elem_) {
      case 4: run<uint32_t>(args); break;
      case 8: run<uint64_t>(args); break;
      case 2: run<uint16_t>(args); break;
      default: run<uint8_t>(args); break;
    }
  }

 private:
  template <typename E>
  void run(const CpuComputeArgs& args) const {
    const E* x = static_cast<const E*>(args.inputs[0]);
    E* y = static_cast<E*>(args.outputs[0]);
    size_t r = outDims_.size();
    if (r == 0) {
      y[0] = x[0];
      return;
    }
    int64_t inner = outDims_[r - 1], s = inStrides_[r - 1];
    if (r > 16) return runSerial<E>(x, y);
    // Output rows split over the pool; each chunk starts its odometer at its first row.
    parallelFor(args.pool, total_ / inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
      int64_t idx[16] = {}, rem = b, off = 0;
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rem % outDims_[d];
        rem /= outDims_[d];
        off += idx[d] * inStrides_[d];
      }
      for (int64_t o = b; o < e; ++o) {
        E* yo = y + o * inner;
        if (s == 1) std::memcpy(yo, x + off, static_cast<size_t>(inner) * sizeof(E));
        else
          for (int64_t i = 0; i < inner; ++i) yo[i] = x[off + i * s];
        for (size_t d = r - 1; d-- > 0;) {
          off += inStrides_[d];
          if (++idx[d] < outDims_[d]) break;
          off -= idx[d] * inStrides_[d];
          idx[d] = 0;
        }
      }
    });
  }
  template <typename E>
  void runSerial(const E* x, E* y) const {
    size_t r = outDims_.size();
    int64_t inner = outDims_[r - 1], s = inStrides_[r - 1];
    std::vector<int64_t> idx(r, 0);
    for (int64_t o = 0; o < total_ / inner; ++o) {
      int64_t off = 0;
      for (size_t d = 0; d + 1 < r; ++d) off += idx[d] * inStrides_[d];
      E* yo = y + o * inner;
      for (int64_t i = 0; i < inner; ++i) yo[i] = x[off + i * s];
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < outDims_[d]) break;
        idx[d] = 0;
      }
    }
  }
  std::vector<int64_t> outDims_, inStrides_;
  size_t elem_;
  int64_t total_ = 0;
};

/// Transpose moving a last axis of 3 floats in front of the axes before it, whose elements are
/// contiguous (NHWC -> NCHW of an RGB image: [N, H, W, 3] -> [N, 3, H, W], tf2onnx's first node):
/// each outer block of P pixels x 3 deinterleaved by RowOps::deinterleave3 (AVX-512) instead of
/// three strided gathers over the same input.
class TransposeC3Kernel : public CpuKernel {
 public:
  TransposeC3Kernel(std::vector<int64_t> outerDims, std::vector<int64_t> outerStrides, int64_t pixels)
      : outerDims_(std::move(outerDims)), outerStrides_(std::move(outerStrides)), pixels_(pixels) {}
  std::string variant() const override { return ".c3"; }
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    int64_t outer = 1;
    for (int64_t d : outerDims_) outer *= d;
    if (outer == 0 || pixels_ == 0) return;
    const RowOps& ops = activeRowOps();
    // Work items: (outer block, slice of 4096 pixels), a multiple of 16 each but the last.
    constexpr int64_t kSlice = 4096;
    const int64_t slices = (pixels_ + kSlice - 1) / kSlice;
    parallelFor(args.pool, outer * slices, std::max<int64_t>(1, 8192 / kSlice), [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / slices, p0 = it % slices * kSlice, n = std::min(kSlice, pixels_ - p0);
        int64_t rem = o, off = 0;
        for (size_t d = outerDims_.size(); d-- > 0;) {
          off += rem % outerDims_[d] * outerStrides_[d];
          rem /= outerDims_[d];
        }
        float* yo = y + o * 3 * pixels_ + p0;
        ops.deinterleave3(x + off + 3 * p0, n, yo, yo + pixels_, yo + 2 * pixels_);
      }
    });
  }

 private:
  std::vector<int64_t> outerDims_, outerStrides_;
  int64_t pixels_;
};

class ReduceMeanKernel : public CpuKernel {
 public:
  ReduceMeanKernel(int64_t outer, int64_t n) : outer_(outer), n_(n) {}
  void compute(const CpuComputeArgs& args) const override {
    const float* x = static_cast<const float*>(args.inputs[0]);
    float* y = static_cast<float*>(args.outputs[0]);
    for (int64_t o = 0; o < outer_; ++o) {
      float acc = 0.f;
      const float* xr = x + o * n_;
      for (int64_t i = 0; i < n_; ++i) acc += xr[i];
      y[o] = acc / static_cast<float>(n_);
    }
  }

 private:
  int64_t outer_, n_;
};

/// Gather: for each outer index and each index, one memcpy of `inner` elements of any size.
/// An index out of [-dim, dim) fails like the reference kernel (before anything is written).
class GatherKernel : public CpuKernel {
 public:
  GatherKernel(const Node& node, int64_t outer, int64_t dim, int64_t inner, int64_t count, size_t elem, bool idx64)
      : node_(node), outer_(outer), dim_(dim), rowBytes_(static_cast<size_t>(inner) * elem), count_(count), idx64_(idx64) {}
  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const uint8_t*>(args.inputs[0]);
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    auto index = [&](int64_t j) -> int64_t {
      int64_t i = idx64_ ? static_cast<const int64_t*>(args.inputs[1])[j] : static_cast<const int32_t*>(args.inputs[1])[j];
      if (i < -dim_ || i >= dim_)
        fail(ErrorKind::InvalidInput, "node '{}' ({}): Gather index {} is out of range, expected [{}, {})", node_.displayName(),
             node_.opType, i, -dim_, dim_);
      return i < 0 ? i + dim_ : i;
    };
    for (int64_t j = 0; j < count_; ++j) index(j);  // validate first
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t j = 0; j < count_; ++j)
        std::memcpy(y + static_cast<size_t>(o * count_ + j) * rowBytes_,
                    x + static_cast<size_t>(o * dim_ + index(j)) * rowBytes_, rowBytes_);
  }
  bool readsInputUnaligned(size_t i) const override { return i == 0; }  // rows copied by memcpy

 private:
  const Node& node_;
  int64_t outer_, dim_;
  size_t rowBytes_;
  int64_t count_;
  bool idx64_;
};

/// Slice: output dims (outer to inner) with the input byte stride of each, from a base byte
/// offset; the innermost contiguous run (step-1 axes whose inner axes are whole) is one block of
/// `block_` bytes, copied by memcpy; a one-element block steps through the innermost dim with a
/// typed strided loop instead. Output rows (all dims but the last) split over the pool.
class SliceKernel : public CpuKernel {
 public:
  SliceKernel(std::vector<int64_t> dims, std::vector<int64_t> strides, int64_t base, size_t block, size_t elem)
      : dims_(std::move(dims)), strides_(std::move(strides)), base_(base), block_(block), elem_(elem) {}
  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const uint8_t*>(args.inputs[0]) + base_;
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    if (block_ == 0) return;
    if (dims_.empty()) {
      std::memcpy(y, x, block_);
      return;
    }
    if (block_ == elem_) {
      switch (elem_) {
        case 4: return run<uint32_t>(args, x, y);
        case 8: return run<uint64_t>(args, x, y);
        case 2: return run<uint16_t>(args, x, y);
        case 1: return run<uint8_t>(args, x, y);
        default: break;
      }
    }
    run<void>(args, x, y);
  }
  std::string variant() const override { return block_ == elem_ ? ".strided" : ".blocks"; }

 private:
  /// E void: every innermost index is a memcpy of block_ bytes; else one element of type E.
  template <typename E>
  void run(const CpuComputeArgs& args, const uint8_t* x, uint8_t* y) const {
    const size_t r = dims_.size();
    const int64_t inner = dims_[r - 1], s = strides_[r - 1];
    const size_t rowBytes = static_cast<size_t>(inner) * block_;
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < r; ++d) rows *= dims_[d];
    int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(65536 / std::max<size_t>(rowBytes, 1)));
    parallelFor(args.pool, rows, grain, [&](int64_t b, int64_t e) {
      std::vector<int64_t> idx(r, 0);  // small: one per chunk, not per element
      int64_t rem = b, off = 0;
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rem % dims_[d];
        rem /= dims_[d];
        off += idx[d] * strides_[d];
      }
      for (int64_t o = b; o < e; ++o) {
        uint8_t* yo = y + static_cast<size_t>(o) * rowBytes;
        const uint8_t* xo = x + off;
        if constexpr (std::is_void_v<E>) {
          if (s == static_cast<int64_t>(block_)) std::memcpy(yo, xo, rowBytes);
          else
            for (int64_t i = 0; i < inner; ++i) std::memcpy(yo + static_cast<size_t>(i) * block_, xo + i * s, block_);
        } else {
          E* ye = reinterpret_cast<E*>(yo);
          for (int64_t i = 0; i < inner; ++i) std::memcpy(ye + i, xo + i * s, sizeof(E));
        }
        for (size_t d = r - 1; d-- > 0;) {
          off += strides_[d];
          if (++idx[d] < dims_[d]) break;
          off -= idx[d] * strides_[d];
          idx[d] = 0;
        }
      }
    });
  }
  std::vector<int64_t> dims_, strides_;
  int64_t base_;
  size_t block_, elem_;
};

/// Concat (split_ false) or Split (true): for each of `outer` rows, part i is `parts_[i]`
/// contiguous bytes of the joined tensor's row of `row_` bytes.
class AxisCopyKernel : public CpuKernel {
 public:
  AxisCopyKernel(bool split, int64_t outer, std::vector<size_t> parts)
      : split_(split), outer_(outer), parts_(std::move(parts)) {
    for (size_t p : parts_) row_ += p;
  }
  void compute(const CpuComputeArgs& args) const override {
    if (row_ == 0) return;
    const int threads = args.pool ? args.pool->threads() : 1;
    if (outer_ < 2 * threads && static_cast<size_t>(outer_) * row_ >= 2 * kChunk) {
      // Few rows (a channel concat of one image: DenseNet's dense blocks): the bytes in chunks
      // of 64 KiB over the threads, not one row (megabytes) per thread.
      const int64_t per = static_cast<int64_t>((row_ + kChunk - 1) / kChunk), chunks = outer_ * per;
      parallelFor(args.pool, chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const size_t o = static_cast<size_t>(c / per), lo = static_cast<size_t>(c % per) * kChunk, hi = std::min(row_, lo + kChunk);
          size_t off = 0;  // the parts overlapping [lo, hi) of row o
          for (size_t i = 0; i < parts_.size() && off < hi; off += parts_[i], ++i) {
            const size_t n = parts_[i], a = std::max(lo, off), z = std::min(hi, off + n);
            if (a >= z) continue;
            uint8_t* whole = static_cast<uint8_t*>(split_ ? const_cast<void*>(args.inputs[0]) : args.outputs[0]) + o * row_ + a;
            uint8_t* part = static_cast<uint8_t*>(split_ ? args.outputs[i] : const_cast<void*>(args.inputs[i])) + o * n + (a - off);
            if (split_) std::memcpy(part, whole, z - a);
            else std::memcpy(whole, part, z - a);
          }
        }
      });
      return;
    }
    int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(65536 / row_));
    parallelFor(args.pool, outer_, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        size_t off = static_cast<size_t>(o) * row_;
        for (size_t i = 0; i < parts_.size(); ++i) {
          size_t n = parts_[i], at = static_cast<size_t>(o) * n;
          if (n == 0) continue;
          if (split_) std::memcpy(static_cast<uint8_t*>(args.outputs[i]) + at, static_cast<const uint8_t*>(args.inputs[0]) + off, n);
          else std::memcpy(static_cast<uint8_t*>(args.outputs[0]) + off, static_cast<const uint8_t*>(args.inputs[i]) + at, n);
          off += n;
        }
      }
    });
  }

 private:
  static constexpr size_t kChunk = 65536;
  bool split_;
  int64_t outer_;
  std::vector<size_t> parts_;
  size_t row_ = 0;
};

/// Rows before `axis` and the byte parts of each piece along it, when every piece has the
/// joined shape but for `axis` and the pieces' lengths along it sum to the joined one; else
/// false (the reference kernel reports the mismatch).
bool axisParts(const std::vector<const StaticTensorType*>& pieces, const StaticTensorType& whole, int64_t axis,
               int64_t& outer, std::vector<size_t>& parts) {
  int64_t r = static_cast<int64_t>(whole.dims.size());
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r || pieces.empty()) return false;
  size_t a = static_cast<size_t>(axis);
  outer = 1;
  int64_t inner = 1, sum = 0;
  for (size_t i = 0; i < whole.dims.size(); ++i) {
    if (i < a) outer *= whole.dims[i];
    if (i > a) inner *= whole.dims[i];
  }
  size_t elem = static_cast<size_t>(dtypeBits(whole.dtype) / 8);
  parts.clear();
  for (const StaticTensorType* p : pieces) {
    if (!p || p->dtype != whole.dtype || p->dims.size() != whole.dims.size()) return false;
    for (size_t i = 0; i < whole.dims.size(); ++i)
      if (i != a && p->dims[i] != whole.dims[i]) return false;
    sum += p->dims[a];
    parts.push_back(static_cast<size_t>(p->dims[a] * inner) * elem);
  }
  return sum == whole.dims[a];
}

bool hasRefAttrs(const Node& n) {
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return true;
  return false;
}

}  // namespace

std::unique_ptr<CpuKernel> createSlice(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  if (hasRefAttrs(n)) return nullptr;
  std::vector<int64_t> starts, ends, axes, steps;
  if (info.sinceVersion < 10) {
    starts = n.attrInts("starts");
    ends = n.attrInts("ends");
    axes = n.attrInts("axes");
  } else {
    auto constInts = [&](size_t i, std::vector<int64_t>& v) {
      if (!info.hasInput(i)) return true;
      if (i >= info.constants.size() || !info.constants[i]) return false;
      v = info.constants[i]->toInt64s();
      return true;
    };
    if (!info.hasInput(1) || !info.hasInput(2)) return nullptr;
    if (!constInts(1, starts) || !constInts(2, ends) || !constInts(3, axes) || !constInts(4, steps)) return nullptr;
  }
  const auto& x = info.in(0).dims;
  const int64_t r = static_cast<int64_t>(x.size());
  if (ends.size() != starts.size()) return nullptr;
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) return nullptr;
  // Per axis: first index, step and count (the reference's clamping; errors left to it).
  std::vector<int64_t> first(x.size(), 0), step(x.size(), 1), count = x;
  std::vector<bool> seen(x.size(), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || seen[static_cast<size_t>(a)] || steps[i] == 0) return nullptr;
    size_t ua = static_cast<size_t>(a);
    seen[ua] = true;
    int64_t dim = x[ua], st = steps[i];
    auto adjust = [dim](int64_t v) { return v < 0 ? (v < -dim ? -dim - 1 : v) + dim : v; };
    int64_t s = adjust(starts[i]), e = adjust(ends[i]), c = 0;
    if (dim > 0) {
      // |step| as unsigned: INT64_MIN has no positive int64.
      uint64_t mag = st > 0 ? static_cast<uint64_t>(st) : 0 - static_cast<uint64_t>(st);
      if (st > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        if (e > s) c = static_cast<int64_t>(static_cast<uint64_t>(e - s - 1) / mag) + 1;
      } else {
        s = std::clamp<int64_t>(s, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        if (s > e) c = static_cast<int64_t>(static_cast<uint64_t>(s - e - 1) / mag) + 1;
      }
    }
    first[ua] = c > 0 ? s : 0;
    step[ua] = c > 1 ? st : 1;  // one element: its step never applies
    count[ua] = c;
  }
  if (count != info.out(0).dims || info.out(0).dtype != info.in(0).dtype) return nullptr;
  const size_t elem = static_cast<size_t>(dtypeBits(info.in(0).dtype) / 8);
  std::vector<int64_t> stride(x.size(), 1);
  for (size_t i = x.size(); i-- > 1;) stride[i - 1] = stride[i] * x[i];
  int64_t total = 1, base = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    total *= count[i];
    base += first[i] * stride[i];
  }
  if (total == 0) return std::make_unique<SliceKernel>(std::vector<int64_t>{}, std::vector<int64_t>{}, 0, 0, elem);
  // Dims of one element drop out; the innermost ones that step contiguously merge into the block.
  std::vector<int64_t> dims, strides;
  for (size_t i = 0; i < x.size(); ++i)
    if (count[i] != 1) {
      dims.push_back(count[i]);
      strides.push_back(step[i] * stride[i]);
    }
  int64_t block = 1;
  while (!dims.empty() && strides.back() == block) {
    block *= dims.back();
    dims.pop_back();
    strides.pop_back();
  }
  for (int64_t& s : strides) s *= static_cast<int64_t>(elem);
  return std::make_unique<SliceKernel>(std::move(dims), std::move(strides), base * static_cast<int64_t>(elem),
                                       static_cast<size_t>(block) * elem, elem);
}

namespace {

/// Pad (constant, reflect, edge, wrap) with non-negative pads known at prepare: each output row
/// (all dims but the last) maps to an input row per the mode (constant: a row of the value when
/// it falls outside), whose elements are copied in one piece with the last axis's borders filled
/// around them. Rows split over the pool; any fixed-size element type.
class PadKernel : public CpuKernel {
 public:
  enum class Mode { Constant, Reflect, Edge, Wrap };
  PadKernel(std::vector<int64_t> in, std::vector<int64_t> begin, std::vector<int64_t> out, Mode mode, size_t elem,
            std::vector<uint8_t> value)
      : in_(std::move(in)), begin_(std::move(begin)), out_(std::move(out)), mode_(mode), elem_(elem), value_(std::move(value)) {}

  void compute(const CpuComputeArgs& args) const override {
    const auto* x = static_cast<const uint8_t*>(args.inputs[0]);
    auto* y = static_cast<uint8_t*>(args.outputs[0]);
    const size_t r = out_.size();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < r; ++d) rows *= out_[d];
    const int64_t outW = r ? out_[r - 1] : 1, inW = r ? in_[r - 1] : 1;
    const size_t rowBytes = static_cast<size_t>(outW) * elem_;
    if (rows == 0 || rowBytes == 0) return;
    if (r == 0) {
      std::memcpy(y, x, elem_);
      return;
    }
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(65536 / rowBytes));
    parallelFor(args.pool, rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        uint8_t* yo = y + static_cast<size_t>(o) * rowBytes;
        // the input row of output row o, or -1 (constant padding)
        int64_t rem = o, inRow = 0, mul = 1;
        bool outside = false;
        for (size_t d = r - 1; d-- > 0;) {
          const int64_t c = map(rem % out_[d] - begin_[d], in_[d]);
          rem /= out_[d];
          if (c < 0) outside = true;
          inRow += c * mul;
          mul *= in_[d];
        }
        if (outside || inW == 0) {
          fill(yo, outW);
          continue;
        }
        const uint8_t* xr = x + static_cast<size_t>(inRow * inW) * elem_;
        const int64_t lo = begin_[r - 1], hi = outW - lo - inW;  // border widths (hi >= 0: pads are non-negative)
        std::memcpy(yo + static_cast<size_t>(lo) * elem_, xr, static_cast<size_t>(inW) * elem_);
        if (mode_ == Mode::Constant) {
          fill(yo, lo);
          fill(yo + static_cast<size_t>(lo + inW) * elem_, hi);
        } else {
          for (int64_t i = 0; i < lo; ++i) std::memcpy(yo + static_cast<size_t>(i) * elem_, xr + static_cast<size_t>(map(i - lo, inW)) * elem_, elem_);
          for (int64_t i = lo + inW; i < outW; ++i)
            std::memcpy(yo + static_cast<size_t>(i) * elem_, xr + static_cast<size_t>(map(i - lo, inW)) * elem_, elem_);
        }
      }
    });
  }
  std::string variant() const override {
    return mode_ == Mode::Constant ? ".constant" : mode_ == Mode::Reflect ? ".reflect" : mode_ == Mode::Edge ? ".edge" : ".wrap";
  }

 private:
  /// Input index of output coordinate c (relative to the input's start) along a dim of n, or -1.
  int64_t map(int64_t c, int64_t n) const {
    if (c >= 0 && c < n) return c;
    switch (mode_) {
      case Mode::Constant: return -1;
      case Mode::Edge: return c < 0 ? 0 : n - 1;
      case Mode::Wrap: return ((c % n) + n) % n;
      case Mode::Reflect: {  // pads < n checked at prepare: one reflection
        if (n == 1) return 0;
        return c < 0 ? -c : 2 * (n - 1) - c;
      }
    }
    return -1;
  }
  void fill(uint8_t* dst, int64_t count) const {
    if (count <= 0) return;
    if (std::all_of(value_.begin(), value_.end(), [](uint8_t v) { return v == 0; })) {
      std::memset(dst, 0, static_cast<size_t>(count) * elem_);
      return;
    }
    for (int64_t i = 0; i < count; ++i) std::memcpy(dst + static_cast<size_t>(i) * elem_, value_.data(), elem_);
  }

  std::vector<int64_t> in_, begin_, out_;
  Mode mode_;
  size_t elem_;
  std::vector<uint8_t> value_;
};

}  // namespace

std::unique_ptr<CpuKernel> createPad(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  if (hasRefAttrs(n)) return nullptr;
  const DType dt = info.in(0).dtype;
  const int bits = dtypeBits(dt);
  if (bits < 8 || bits % 8 || dt == DType::String || info.out(0).dtype != dt) return nullptr;
  const size_t elem = static_cast<size_t>(bits / 8);
  const auto& x = info.in(0).dims;
  const int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> pads, axes;
  std::vector<uint8_t> value(elem, 0);
  if (info.sinceVersion < 11) {
    pads = n.attrInts("pads");
    const float v = n.attrFloat("value", 0.f);
    if (dt != DType::Float) return nullptr;
    std::memcpy(value.data(), &v, sizeof v);
  } else {
    auto constant = [&](size_t i) { return i < info.constants.size() ? info.constants[i] : nullptr; };
    if (!info.hasInput(1) || !constant(1)) return nullptr;
    pads = constant(1)->toInt64s();
    if (info.hasInput(2)) {
      const TensorData* cv = constant(2);
      if (!cv || cv->dtype() != dt || cv->raw.size() < elem) return nullptr;
      std::memcpy(value.data(), cv->raw.data(), elem);
    }
    if (info.hasInput(3)) {
      if (!constant(3)) return nullptr;
      axes = constant(3)->toInt64s();
    }
  }
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  if (pads.size() != 2 * axes.size()) return nullptr;
  std::vector<int64_t> begin(x.size(), 0), end(x.size(), 0);
  std::vector<bool> seen(x.size(), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || seen[static_cast<size_t>(a)]) return nullptr;
    seen[static_cast<size_t>(a)] = true;
    begin[static_cast<size_t>(a)] = pads[i];
    end[static_cast<size_t>(a)] = pads[i + axes.size()];
  }
  const std::string mode = n.attrString("mode", "constant");
  PadKernel::Mode m;
  if (mode == "constant") m = PadKernel::Mode::Constant;
  else if (mode == "reflect") m = PadKernel::Mode::Reflect;
  else if (mode == "edge") m = PadKernel::Mode::Edge;
  else if (mode == "wrap") m = PadKernel::Mode::Wrap;
  else return nullptr;
  std::vector<int64_t> out(x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    if (begin[d] < 0 || end[d] < 0) return nullptr;  // cropping: the reference kernel
    // reflect needs pads below the dim; edge and wrap a non-empty dim (the reference says why not)
    if (m != PadKernel::Mode::Constant && (begin[d] || end[d]) && (x[d] == 0 || (m == PadKernel::Mode::Reflect && (begin[d] >= x[d] || end[d] >= x[d]))))
      return nullptr;
    out[d] = x[d] + begin[d] + end[d];
  }
  if (out != info.out(0).dims) return nullptr;
  return std::make_unique<PadKernel>(x, std::move(begin), std::move(out), m, elem, std::move(value));
}

std::unique_ptr<CpuKernel> createConcat(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  if (hasRefAttrs(n) || !n.attr("axis")) return nullptr;
  int64_t outer = 0;
  std::vector<size_t> parts;
  if (!axisParts(info.inputs, info.out(0), n.attrInt("axis", 0), outer, parts)) return nullptr;
  return std::make_unique<AxisCopyKernel>(false, outer, std::move(parts));
}

std::unique_ptr<CpuKernel> createSplit(const CpuNodeInfo& info) {
  // The parts come from the plan's output types (shape inference applied `split` or
  // num_outputs); a constant split input must agree with them.
  const Node& n = *info.node;
  if (hasRefAttrs(n)) return nullptr;
  if (info.hasInput(1) && (info.constants.size() < 2 || !info.constants[1])) return nullptr;
  int64_t axis = n.attrInt("axis", 0), outer = 0;
  std::vector<size_t> parts;
  if (!axisParts(info.outputs, info.in(0), axis, outer, parts)) return nullptr;
  if (info.hasInput(1)) {
    std::vector<int64_t> sizes = info.constants[1]->toInt64s();
    int64_t r = static_cast<int64_t>(info.in(0).dims.size()), a = axis < 0 ? axis + r : axis;
    if (sizes.size() != info.outputs.size()) return nullptr;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] != info.out(i).dims[static_cast<size_t>(a)]) return nullptr;
  }
  return std::make_unique<AxisCopyKernel>(true, outer, std::move(parts));
}

std::unique_ptr<CpuKernel> createGather(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  if (!info.hasInput(1)) return nullptr;
  DType it = info.in(1).dtype;
  if (it != DType::Int64 && it != DType::Int32) return nullptr;
  const auto& x = info.in(0).dims;
  int64_t r = static_cast<int64_t>(x.size()), axis = n.attrInt("axis", 0);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return nullptr;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) {
    if (i < axis) outer *= x[static_cast<size_t>(i)];
    if (i > axis) inner *= x[static_cast<size_t>(i)];
  }
  size_t elem = static_cast<size_t>(dtypeBits(info.in(0).dtype) / 8);
  return std::make_unique<GatherKernel>(n, outer, x[static_cast<size_t>(axis)], inner, info.in(1).numElements(), elem,
                                        it == DType::Int64);
}

std::unique_ptr<CpuKernel> createTranspose(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  size_t r = x.size();
  std::vector<int64_t> perm = n.attrInts("perm");
  if (perm.empty()) {
    perm.resize(r);
    for (size_t i = 0; i < r; ++i) perm[i] = static_cast<int64_t>(r - 1 - i);
  }
  if (perm.size() != r) return nullptr;
  std::vector<int64_t> strides(r, 1);
  for (size_t i = r; i-- > 1;) strides[i - 1] = strides[i] * x[i];
  std::vector<int64_t> outDims(r), inStrides(r);
  for (size_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(r)) return nullptr;
    outDims[i] = x[static_cast<size_t>(perm[i])];
    inStrides[i] = strides[static_cast<size_t>(perm[i])];
  }
  if (outDims != info.out(0).dims) return nullptr;
  // [..., 3, P] out of a contiguous [P, 3] per outer index (trailing output axes merged while
  // they are contiguous in the input): the deinterleaving kernel.
  if (info.in(0).dtype == DType::Float && activeRowOps().deinterleave3) {
    std::vector<int64_t> d = outDims, st = inStrides;
    while (d.size() >= 2 && st[d.size() - 2] == d.back() * st.back()) {
      d[d.size() - 2] *= d.back();
      st[d.size() - 2] = st.back();
      d.pop_back();
      st.pop_back();
    }
    if (d.size() >= 2 && st.back() == 3 && d[d.size() - 2] == 3 && st[d.size() - 2] == 1 && d.back() > 0) {
      const int64_t pixels = d.back();
      std::vector<int64_t> od(d.begin(), d.end() - 2), os(st.begin(), st.end() - 2);
      return std::make_unique<TransposeC3Kernel>(od, os, pixels);
    }
  }
  return std::make_unique<TransposeKernel>(outDims, inStrides, static_cast<size_t>(dtypeBits(info.in(0).dtype) / 8));
}

std::unique_ptr<CpuKernel> createReduceMean(const CpuNodeInfo& info) {
  const Node& n = *info.node;
  for (const Attribute& a : n.attributes)
    if (!a.refAttrName.empty()) return nullptr;
  const auto& x = info.in(0).dims;
  int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes;
  if (info.sinceVersion >= 18) {
    if (!info.hasInput(1)) return nullptr;  // no axes: all or none (noop_with_empty_axes): reference
    if (!info.constants.at(1)) return nullptr;
    axes = info.constants[1]->toInt64s();
  } else {
    axes = n.attrInts("axes");
  }
  if (axes.empty()) return nullptr;
  for (auto& a : axes) {
    if (a < 0) a += r;
    if (a < 0 || a >= r) return nullptr;
  }
  std::sort(axes.begin(), axes.end());
  // Only trailing axes (a contiguous block at the end): outer rows of n contiguous elements.
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != r - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return nullptr;
  int64_t outer = 1, cnt = 1;
  for (int64_t i = 0; i < r; ++i) (i < axes.front() ? outer : cnt) *= x[static_cast<size_t>(i)];
  if (cnt == 0) return nullptr;  // mean of nothing: the reference kernel's NaN
  return std::make_unique<ReduceMeanKernel>(outer, cnt);
}

}  // namespace onnxtool::cpu
