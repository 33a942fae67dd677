// gemm.cpp: the blocked SGEMM driver of gemm.h (packing, cache blocks, epilogue, threads) and
// the portable path's row kernels.
#include "exec/cpu/gemm.h"

#include <cstdlib>
#include <array>
#include <cstring>
#include <new>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace onnxtool::cpu {

GemmMicroKernelInfo gemmMicroKernelRowsPortable(int) { return gemmMicroKernelPortable(); }

/// Four rows of row-major A (row stride lda) from column k0, kc columns, into a k-major panel of
/// mr rows at d (rows ii0..ii0 + 3 of it), times alpha: 4 x 4 SSE transposes (the x86-64
/// baseline), the k tail scalar.
void packRows4(const float* s, int64_t lda, float alpha, int64_t kc, int mr, float* d) {
  int64_t kk = 0;
#if defined(__SSE2__)
  const __m128 va = _mm_set1_ps(alpha);
  for (; kk + 4 <= kc; kk += 4) {
    __m128 r0 = _mm_loadu_ps(s + kk), r1 = _mm_loadu_ps(s + lda + kk), r2 = _mm_loadu_ps(s + 2 * lda + kk),
           r3 = _mm_loadu_ps(s + 3 * lda + kk);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    if (alpha != 1.f) {
      r0 = _mm_mul_ps(r0, va), r1 = _mm_mul_ps(r1, va), r2 = _mm_mul_ps(r2, va), r3 = _mm_mul_ps(r3, va);
    }
    _mm_storeu_ps(d + kk * mr, r0);
    _mm_storeu_ps(d + (kk + 1) * mr, r1);
    _mm_storeu_ps(d + (kk + 2) * mr, r2);
    _mm_storeu_ps(d + (kk + 3) * mr, r3);
  }
#endif
  for (; kk < kc; ++kk)
    for (int ii = 0; ii < 4; ++ii) {
      float v;
      std::memcpy(&v, s + ii * lda + kk, sizeof v);  // s: any address
      d[kk * mr + ii] = alpha * v;
    }
}

namespace {

int64_t roundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t ceilDiv(int64_t v, int64_t m) { return (v + m - 1) / m; }

/// Packs op(B)[k0 .. k0 + kc, j0 .. j0 + nc] into panels of nr columns, k-major, one panel
/// after the other (kc * nr floats each), columns past nc zero.
void packBBlock(const float* b, int64_t ldb, bool transB, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float* dst) {
  const int64_t panels = ceilDiv(nc, nr);
  for (int64_t jp = 0; jp < panels; ++jp) {
    float* d = dst + jp * kc * nr;
    const int64_t j = j0 + jp * nr, cols = std::min<int64_t>(nr, nc - jp * nr);
    if (!transB) {
      const float* s = b + k0 * ldb + j;
      if (cols == nr && nr == 32)  // whole panels of the AVX-512 and AVX2 kernels: copies of a constant size
        for (int64_t kk = 0; kk < kc; ++kk, s += ldb, d += nr) std::memcpy(d, s, 32 * sizeof(float));
      else if (cols == nr && nr == 16)
        for (int64_t kk = 0; kk < kc; ++kk, s += ldb, d += nr) std::memcpy(d, s, 16 * sizeof(float));
      else
        for (int64_t kk = 0; kk < kc; ++kk, s += ldb, d += nr) {
          std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float));
          std::fill(d + cols, d + nr, 0.f);
        }
    } else {  // B is [n, k]: column j of op(B) is row j of B
      if (cols < nr)
        for (int64_t kk = 0; kk < kc; ++kk) std::fill(d + kk * nr + cols, d + kk * nr + nr, 0.f);
      int64_t jj = 0;
#if defined(__SSE2__)
      // Four rows of B at a time, 4 x 4 transposes (a scalar column walk made packing ResNet-50's
      // conv weights a quarter of its plan's build time).
      for (; jj + 4 <= cols; jj += 4) {
        const float* s = b + (j + jj) * ldb + k0;
        int64_t kk = 0;
        for (; kk + 4 <= kc; kk += 4) {
          __m128 r0 = _mm_loadu_ps(s + kk), r1 = _mm_loadu_ps(s + ldb + kk), r2 = _mm_loadu_ps(s + 2 * ldb + kk),
                 r3 = _mm_loadu_ps(s + 3 * ldb + kk);
          _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
          _mm_storeu_ps(d + kk * nr + jj, r0);
          _mm_storeu_ps(d + (kk + 1) * nr + jj, r1);
          _mm_storeu_ps(d + (kk + 2) * nr + jj, r2);
          _mm_storeu_ps(d + (kk + 3) * nr + jj, r3);
        }
        for (; kk < kc; ++kk)
          for (int64_t i = 0; i < 4; ++i) std::memcpy(d + kk * nr + jj + i, s + i * ldb + kk, sizeof(float));
      }
#endif
      for (; jj < cols; ++jj) {
        const float* s = b + (j + jj) * ldb + k0;
        for (int64_t kk = 0; kk < kc; ++kk) std::memcpy(d + kk * nr + jj, s + kk, sizeof(float));  // s: any address
      }
    }
  }
}


/// Packs alpha * op(A)[i0 .. i0 + mc, k0 .. k0 + kc] into panels of mr rows, k-major, rows past
/// mc zero.
void packABlock(const float* a, int64_t lda, bool transA, float alpha, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr,
                float* dst) {
  const int64_t panels = ceilDiv(mc, mr);
  for (int64_t ip = 0; ip < panels; ++ip) {
    float* d = dst + ip * kc * mr;
    const int64_t i = i0 + ip * mr, rows = std::min<int64_t>(mr, mc - ip * mr);
    if (!transA) {
      if (rows < mr)
        for (int64_t kk = 0; kk < kc; ++kk) std::fill(d + kk * mr + rows, d + kk * mr + mr, 0.f);
      int64_t ii = 0;
      for (; ii + 4 <= rows; ii += 4) packRows4(a + (i + ii) * lda + k0, lda, alpha, kc, mr, d + ii);
      for (; ii < rows; ++ii) {
        const float* s = a + (i + ii) * lda + k0;
        for (int64_t kk = 0; kk < kc; ++kk) d[kk * mr + ii] = alpha * s[kk];
      }
    } else {  // A is [k, m]: row i of op(A) is column i of A
      const float* s = a + k0 * lda + i;
      for (int64_t kk = 0; kk < kc; ++kk, s += lda, d += mr) {
        if (alpha == 1.f) std::memcpy(d, s, static_cast<size_t>(rows) * sizeof(float));
        else
          for (int64_t ii = 0; ii < rows; ++ii) d[ii] = alpha * s[ii];
        if (rows < mr) std::fill(d + rows, d + mr, 0.f);
      }
    }
  }
}

/// The kernel of `rows` rows (fewer than cfg.mk's) for a partial last panel: same NR, its own
/// row count (at least `rows`).
const GemmMicroKernelInfo& tailKernel(const GemmConfig& cfg, int rows) {
  static const auto table = [] {
    std::array<std::array<GemmMicroKernelInfo, 15>, 3> t{};
    for (int r = 1; r <= 14; ++r) {
      t[0][static_cast<size_t>(r)] = gemmMicroKernelRowsPortable(r);
      t[1][static_cast<size_t>(r)] = gemmMicroKernelRowsAvx2(std::min(r, 6));
      t[2][static_cast<size_t>(r)] = gemmMicroKernelRowsAvx512(r);
    }
    return t;
  }();
  const size_t path = cfg.isa == Isa::Avx512 ? 2 : cfg.isa == Isa::Avx2 ? 1 : 0;
  const GemmMicroKernelInfo& k = table[path][static_cast<size_t>(std::clamp(rows, 1, 14))];
  return k.nr == cfg.mk.nr && k.mr >= rows && k.mr <= cfg.mk.mr ? k : cfg.mk;
}

/// Rows [m0, m1) x columns [n0, n1) of batch `bi` (m0 a multiple of MR, n0 of NR), with the
/// thread's workspace `ws` (gemmWorkspaceFloats floats).
void gemmBlock(const GemmConfig& cfg, const GemmProblem& p, int64_t bi, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* ws) {
  const int mr = cfg.mk.mr, nr = cfg.mk.nr;
  const float* a = p.a + (p.aOffsets ? p.aOffsets[bi] : 0);
  const float* b = p.packedB || p.packedB4 ? nullptr : p.b + (p.bOffsets ? p.bOffsets[bi] : 0);
  float* c = p.c + bi * p.cStride;
  const int64_t kc = p.packedB ? p.packedB->kc() : p.packedB4 ? p.packedB4->kc() : gemmKc(p.k, cfg.kcMax);
  const int64_t kBlocks = p.k == 0 ? 1 : ceilDiv(p.k, kc);
  const int64_t mcMax = std::max<int64_t>(mr, cfg.mc / mr * mr);
  int64_t ncMax = p.packedB ? roundUp(n1 - n0, nr) : std::max<int64_t>(nr, cfg.nc / nr * nr);
  const bool directA = cfg.mk.stridedA && !p.transA && p.alpha == 1.f;
  // A prepacked B read by several row blocks: each row block re-reads the kc x nc block, which
  // must then stay in L2: an eighth of it where the kernel reads A in place (on Zen 4's 1 MiB
  // L2, MiniLM's 1024 x 384 x 1536 FFN's 192 x 1536 block (1.2 MB) came from L3 for each of its
  // 8 row blocks: its MatMuls 97-99 -> 103-104 GFLOP/s at 1 thread with 128 KiB blocks, 100-102
  // with 256 KiB). Where A is packed (AVX2), once per column block, the block is all of L2: an
  // eighth of Zen 2's 512 KiB made 64-column blocks, A packed again for every 64 columns
  // (BERT-base at batch 8, M = 1024, 1 thread: 71-79 GFLOP/s, OpenBLAS 93-96; with L2-sized
  // blocks 88-90).
  if (p.packedB && m1 - m0 > mcMax)
    ncMax = std::min(ncMax, std::max<int64_t>(nr, l2CacheBytes() / (directA ? 8 : 1) /
                                                      (static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(kc, 1)) / nr * nr));
  float* packedA = ws;
  float* packedBlock = ws + std::min(mcMax, roundUp(p.m, mr)) * std::max<int64_t>(kc, 1);  // gemmWorkspaceFloats' layout
  const GemmEpilogue& ep = p.ep;
  const bool postAct = ep.act != VecUnary::Count;
  const VecKernels& vk = vecKernelsFor(cfg.isa);
  TileEpilogue te;
  te.clamp = ep.clamp;
  te.lo = ep.lo;
  te.hi = ep.hi;
  te.ldr = ep.ldr;
  // A 4-bit B read by one block of rows (a GEMV, a short M) is dequantized a panel at a time
  // right before the kernel reads it (hot in L1); taller products dequantize the whole kc x nc
  // block once for all their row blocks.
  const bool b4PerPanel = p.packedB4 && m1 - m0 <= mcMax;
  for (int64_t jc = n0; jc < n1; jc += ncMax) {
    const int64_t nc = std::min(ncMax, n1 - jc), nPanels = ceilDiv(nc, nr);
    for (int64_t pb = 0; pb < kBlocks; ++pb) {
      const int64_t k0 = pb * kc, kcb = std::min(kc, p.k - k0);
      const float* bp;
      if (p.packedB) {
        bp = p.packedB->panel(pb, jc / nr);
      } else if (b4PerPanel) {
        bp = packedBlock;  // filled panel by panel below
      } else if (p.packedB4) {
        p.packedB4->unpack(pb, jc, nc, packedBlock);
        bp = packedBlock;
      } else {
        packBBlock(b, p.ldb, p.transB, k0, kcb, jc, nc, nr, packedBlock);
        bp = packedBlock;
      }
      te.accumulate = pb > 0 || ep.accumulateC;
      te.last = pb == kBlocks - 1;
      for (int64_t ic = m0; ic < m1; ic += mcMax) {
        const int64_t mc = std::min(mcMax, m1 - ic), mPanels = ceilDiv(mc, mr);
        // A row-major and unscaled, a kernel that reads it in place: the full panels straight
        // from A (packing them cost ~10% of ConvNeXt's MatMuls, whose N of 96-768 uses each
        // packed row only 3-24 times), only a partial last panel packed.
        // A partial last panel on the kernel of its row count (49 rows: 6 x 8 + 1 GEMV row, not
        // 7 x 8 with 7 rows of zeros), packed with that kernel's row count.
        const int64_t fullPanels = mc / mr, tailRows = mc - fullPanels * mr;
        const GemmMicroKernelInfo& tailMk = tailRows ? tailKernel(cfg, static_cast<int>(tailRows)) : cfg.mk;
        if (!directA) packABlock(a, p.lda, p.transA, p.alpha, ic, fullPanels * mr, k0, kcb, mr, packedA);
        if (tailRows) packABlock(a, p.lda, p.transA, p.alpha, ic + fullPanels * mr, tailRows, k0, kcb, tailMk.mr, packedA + fullPanels * kcb * mr);
        for (int64_t jp = 0; jp < nPanels; ++jp) {
          const int64_t j = jc + jp * nr;
          const int cols = static_cast<int>(std::min<int64_t>(nr, n1 - j));
          te.colBias = ep.colBias ? ep.colBias + j : nullptr;
          const float* bPanel = bp + jp * kcb * nr;
          if (b4PerPanel) {
            p.packedB4->unpack(pb, j, nr, packedBlock);
            bPanel = packedBlock;
          }
          // The next B panel, fetched towards L2 in slices while this one computes: a prepacked
          // weight is read once per run, from L3 or memory, and the hardware prefetchers stop
          // at page boundaries.
          const float* next = mr == 1 || b4PerPanel ? nullptr  // the GEMV kernels prefetch B themselves
                              : jp + 1 < nPanels ? bPanel + kcb * nr
                              : p.packedB && pb + 1 < kBlocks && ic + mcMax >= m1 ? p.packedB->panel(pb + 1, jc / nr)
                                                                                    : nullptr;
          const int64_t nextFloats = jp + 1 < nPanels || !next ? kcb * nr : std::min(kc, p.k - k0 - kc) * nr;
          const int64_t slice = ceilDiv(ceilDiv(nextFloats, 16), mPanels) * 16;  // floats per kernel call, whole lines
          for (int64_t ip = 0; ip < mPanels; ++ip) {
            const int64_t i = ic + ip * mr;
            const int rows = static_cast<int>(std::min<int64_t>(mr, m1 - i));
            te.bias = ep.rowBias ? ep.rowBias + i : nullptr;
            te.residual = ep.residual ? ep.residual + i * ep.ldr + j : nullptr;
            if (next)
              for (int64_t f = ip * slice; f < std::min(nextFloats, (ip + 1) * slice); f += 16) __builtin_prefetch(next + f, 0, 2);
            const bool direct = directA && ip < fullPanels;
            te.lda = direct ? p.lda : 0;
            const float* aPanel = direct ? a + i * p.lda + k0 : packedA + ip * kcb * mr;
            (ip < fullPanels ? cfg.mk : tailMk).kernel(kcb, aPanel, bPanel, c + i * p.ldc + j, p.ldc, rows, cols, te);
          }
        }
        if (postAct && te.last)
          for (int64_t i = ic; i < ic + mc; ++i) vk.biasAct(c + i * p.ldc + jc, nullptr, nc, ep.act);
      }
    }
  }
}

/// Splits `threads` into tm x tn parts over mPanels x nPanels that minimise the tiles of the
/// largest part. Ties: more column parts, so that each thread streams its own part of B; or,
/// with `preferRows` (every part gets whole row blocks of its own), more row parts, so that each
/// thread packs only its own rows of A once per column block (BERT-base at batch 8, M = 1024,
/// 2 threads, Zen 2: the FFN's MatMuls 103-163 -> 164-175 GFLOP/s, OpenBLAS 172-188).
void gridSplit(int64_t mPanels, int64_t nPanels, int threads, bool preferRows, int& tm, int& tn) {
  tm = tn = 1;
  int64_t best = -1;
  for (int c = 1; c <= threads; ++c) {
    if (threads % c) continue;
    const int r = threads / c;
    if (r > mPanels || c > nPanels) continue;
    const int64_t cost = ceilDiv(mPanels, r) * ceilDiv(nPanels, c);
    if (best < 0 || cost < best || (cost == best && !preferRows)) {
      best = cost;
      tm = r;
      tn = c;
    }
  }
}

}  // namespace

GemmConfig gemmConfig(Isa isa, int64_t m) {
  GemmConfig cfg;
  cfg.isa = isa;
  switch (isa) {
    case Isa::Avx512:
      cfg.mk = m <= 4 ? gemmMicroKernelRowsAvx512(static_cast<int>(std::max<int64_t>(m, 1))) : gemmMicroKernelAvx512(m);
      break;
    case Isa::Avx2: cfg.mk = gemmMicroKernelRowsAvx2(static_cast<int>(std::clamp<int64_t>(m, 1, 6))); break;
    case Isa::Portable: cfg.mk = gemmMicroKernelRowsPortable(static_cast<int>(std::clamp<int64_t>(m, 1, 4))); break;
  }
  cfg.kcMax = 256;
  cfg.mc = std::max<int64_t>(cfg.mk.mr, 144 / cfg.mk.mr * cfg.mk.mr);
  cfg.nc = std::max<int64_t>(cfg.mk.nr, 1024 / cfg.mk.nr * cfg.mk.nr);
  return cfg;
}

int64_t gemmKc(int64_t k, int64_t kcMax) {
  if (k <= 0) return 0;
  const int64_t blocks = ceilDiv(k, std::max<int64_t>(kcMax, 1));
  return ceilDiv(k, blocks);
}

PackedB::PackedB(const float* b, int64_t ldb, bool transB, int64_t k, int64_t n, int nr, int64_t kcMax)
    : nr_(nr), k_(k), n_(n), kc_(gemmKc(k, kcMax)), panels_(ceilDiv(n, nr)) {
  size_ = std::max<int64_t>(1, k * panels_ * nr);
  data_.resize(static_cast<size_t>(size_));  // every element is written below
  const int64_t kBlocks = k == 0 ? 0 : ceilDiv(k, kc_);
  for (int64_t pb = 0; pb < kBlocks; ++pb) {
    const int64_t k0 = pb * kc_;
    packBBlock(b, ldb, transB, k0, std::min(kc_, k - k0), 0, n, nr, data_.data() + k0 * panels_ * nr);
  }
}

namespace {

void packedB4RowsPortable(const uint8_t* codes, int64_t rows, int nr, const float* zero, const float* scale, float* dst) {
  const int half = nr / 2;
  for (int64_t r = 0; r < rows; ++r, codes += half, dst += nr)
    for (int c = 0; c < half; ++c) {
      const unsigned byte = codes[c];
      dst[c] = (static_cast<float>(byte & 15u) - zero[c]) * scale[c];
      dst[c + half] = (static_cast<float>(byte >> 4) - zero[c + half]) * scale[c + half];
    }
}

}  // namespace

PackedB4::PackedB4(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t k, int64_t n, int64_t block,
                   int nr, int64_t kcMax, Isa isa)
    : nr_(nr), k_(k), n_(n), block_(block), panels_(ceilDiv(n, nr)) {
  kc_ = std::min(block * std::max<int64_t>(1, kcMax / block), std::max<int64_t>(block, roundUp(k, block)));
  rows_ = isa == Isa::Avx512 ? packedB4RowsAvx512(nr) : isa == Isa::Avx2 ? packedB4RowsAvx2(nr) : nullptr;
  if (!rows_) rows_ = packedB4RowsPortable;
  const int64_t blocks = ceilDiv(k, block), blob = block / 2, zpRow = (blocks + 1) / 2, half = nr / 2, cols = panels_ * nr;
  // The scales and zero points, per block along K and padded column (zeros past n).
  scale_.assign(static_cast<size_t>(blocks * cols), 0.f);
  zero_.assign(static_cast<size_t>(blocks * cols), 0.f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t q = 0; q < blocks; ++q) {
      float sc;
      std::memcpy(&sc, scales + j * blocks + q, sizeof sc);
      scale_[static_cast<size_t>(q * cols + j)] = sc;
      unsigned z = 8;
      if (zeros) z = (zeros[j * zpRow + q / 2] >> ((q & 1) * 4)) & 15u;
      zero_[static_cast<size_t>(q * cols + j)] = static_cast<float>(z);
    }
  // The codes, panel by panel: byte c of a row holds column c (low nibble) and c + nr / 2. A K
  // block holds whole quantization blocks (kc_ is a multiple of `block`); columns past n read
  // zeros. Each quantization block of the panel's columns is read as nr streams at once.
  codes_.resize(static_cast<size_t>(std::max<int64_t>(1, k * panels_ * half)));
  const std::vector<uint8_t> none(static_cast<size_t>(blob), 0);
  std::vector<const uint8_t*> col(static_cast<size_t>(nr));
  for (int64_t k0 = 0; k0 < k; k0 += kc_) {
    const int64_t kcb = std::min(kc_, k - k0);
    uint8_t* base = codes_.data() + k0 * panels_ * half;
    for (int64_t jp = 0; jp < panels_; ++jp)
      for (int64_t r0 = 0; r0 < kcb; r0 += block) {
        const int64_t q = (k0 + r0) / block, rows = std::min(block, kcb - r0);
        for (int64_t c = 0; c < nr; ++c) {
          const int64_t j = jp * nr + c;
          col[static_cast<size_t>(c)] = j < n ? codes + (j * blocks + q) * blob : none.data();
        }
        for (int64_t r = 0; r < rows; ++r) {
          uint8_t* row = base + (jp * kcb + r0 + r) * half;
          const int sh = static_cast<int>(r & 1) * 4;
          for (int64_t c = 0; c < half; ++c)
            row[c] = static_cast<uint8_t>(((col[static_cast<size_t>(c)][r >> 1] >> sh) & 15u) |
                                          (((col[static_cast<size_t>(c + half)][r >> 1] >> sh) & 15u) << 4));
        }
      }
  }
}

void PackedB4::unpack(int64_t p, int64_t j0, int64_t nc, float* dst) const {
  const int64_t k0 = p * kc_, kcb = std::min(kc_, k_ - k0), half = nr_ / 2, cols = panels_ * nr_;
  const uint8_t* base = codes_.data() + k0 * panels_ * half;
  const int64_t first = j0 / nr_, last = std::min(panels_, ceilDiv(j0 + nc, nr_));
  for (int64_t jp = first; jp < last; ++jp) {
    const uint8_t* src = base + jp * kcb * half;
    float* d = dst + (jp - first) * kcb * nr_;
    for (int64_t r = 0; r < kcb;) {
      const int64_t kk = k0 + r, q = kk / block_, rows = std::min(kcb - r, (q + 1) * block_ - kk);
      const size_t at = static_cast<size_t>(q * cols + jp * nr_);
      rows_(src + r * half, rows, nr_, zero_.data() + at, scale_.data() + at, d + r * nr_);
      r += rows;
    }
  }
}

size_t gemmWorkspaceFloats(const GemmConfig& cfg, const GemmProblem& p) {
  const int64_t kc = std::max<int64_t>(1, p.packedB ? p.packedB->kc() : p.packedB4 ? p.packedB4->kc() : gemmKc(p.k, cfg.kcMax));
  // No bigger than the product: a row block holds at most M rows (rounded to panels), a column
  // block at most N columns (a LeNet's [1, 784] x [784, 10] Gemm took 0.9 MB, populated by the
  // first run, for 6 x 256 floats of packed A).
  const int64_t mcMax = std::min(std::max<int64_t>(cfg.mk.mr, cfg.mc / cfg.mk.mr * cfg.mk.mr), roundUp(p.m, cfg.mk.mr));
  const int64_t ncMax = std::min(std::max<int64_t>(cfg.mk.nr, cfg.nc / cfg.mk.nr * cfg.mk.nr), roundUp(p.n, cfg.mk.nr));
  int64_t floats = mcMax * kc + (p.packedB ? 0 : kc * ncMax);
  return static_cast<size_t>(threadSliceFloats(floats));  // each thread's slice 64-byte aligned, a page from the next
}

namespace {

/// Columns [j0, j1) of batch bi of a one-row product with an unpacked op(B) = B^T (B row-major
/// [n, k], row j at b + j * ldb): each a dot product of A's row with B's row j (vec.h dotRows,
/// B read where it lies), then the epilogue in GemmEpilogue's order.
void gemvTransB(const VecKernels& vk, const GemmProblem& p, int64_t bi, int64_t j0, int64_t j1) {
  const float* a = p.a + (p.aOffsets ? p.aOffsets[bi] : 0);
  const float* b = p.b + (p.bOffsets ? p.bOffsets[bi] : 0);
  float* c = p.c + bi * p.cStride;
  constexpr int64_t kChunk = 256;
  float dots[kChunk];
  for (int64_t j = j0; j < j1; j += kChunk) {
    const int64_t cnt = std::min(kChunk, j1 - j);
    vk.dotRows(a, b + j * p.ldb, p.ldb, p.k, cnt, dots);
    const GemmEpilogue& ep = p.ep;
    for (int64_t t = 0; t < cnt; ++t) {
      float v = p.alpha * dots[t];
      if (ep.accumulateC) v += c[j + t];
      if (ep.rowBias) v += ep.rowBias[0];
      if (ep.colBias) v += ep.colBias[j + t];
      if (ep.residual) v += ep.residual[j + t];
      if (ep.clamp) v = v < ep.lo ? ep.lo : v > ep.hi ? ep.hi : v;  // NaN stays NaN (as the tile kernels)
      c[j + t] = v;
    }
    if (ep.act != VecUnary::Count) vk.unary[static_cast<int>(ep.act)](c + j, c + j, cnt);
  }
}

}  // namespace

void gemm(const GemmConfig& cfg, const GemmProblem& p, ThreadPool* pool, int threads, float* workspace) {
  if (p.m <= 0 || p.n <= 0 || p.batches <= 0) return;
  if (p.m == 1 && p.transB && !p.transA && p.b && !p.packedB && !p.packedB4) {
    // One row against B^T as the caller holds it (a classifier's weights, never packed: see
    // GemmKernel): bound by reading B, split over the threads in blocks of 64 columns.
    const double bFloats = static_cast<double>(p.k) * p.n * (p.bOffsets ? p.batches : 1);
    if (cfg.minFlopsPerThread > 0) threads = static_cast<int>(std::clamp<double>(8.0 * bFloats / cfg.minFlopsPerThread, 1, std::max(threads, 1)));
    if (!pool || p.n < 128) threads = 1;
    const VecKernels& vk = vecKernelsFor(cfg.isa);
    for (int64_t bi = 0; bi < p.batches; ++bi) {
      if (threads == 1) {
        gemvTransB(vk, p, bi, 0, p.n);
        continue;
      }
      const int64_t blocks = ceilDiv(p.n, 64);
      parallelFor(pool, threads, 1, [&](int64_t pb, int64_t pe) {
        for (int64_t part = pb; part < pe; ++part)
          gemvTransB(vk, p, bi, std::min(p.n, blocks * part / threads * 64), std::min(p.n, blocks * (part + 1) / threads * 64));
      });
    }
    return;
  }
  const int64_t perThread = static_cast<int64_t>(gemmWorkspaceFloats(cfg, p));
  const double flops = 2.0 * static_cast<double>(p.batches) * p.m * p.n * std::max<int64_t>(p.k, 1);
  // A product of few rows (a classifier's GEMV) is bound by reading B, not by its FLOPs: count
  // each float of B as 8 FLOPs of work (about this core's peak FLOP/s over its memory bandwidth),
  // so that streaming megabytes of weights splits over the threads.
  const double bFloats = static_cast<double>(p.k) * p.n * (p.bOffsets ? p.batches : 1);
  const double work = std::max(flops, 8.0 * bFloats);
  if (cfg.minFlopsPerThread > 0) threads = static_cast<int>(std::clamp<double>(work / cfg.minFlopsPerThread, 1, std::max(threads, 1)));
  if (!pool) threads = 1;
  const int mr = cfg.mk.mr, nr = cfg.mk.nr;
  if (threads == 1) {
    for (int64_t bi = 0; bi < p.batches; ++bi) gemmBlock(cfg, p, bi, 0, p.m, 0, p.n, workspace);
    return;
  }
  if (p.batches >= threads) {  // whole batches per part
    const int64_t parts = threads;
    parallelFor(pool, parts, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t part = pb; part < pe; ++part)
        for (int64_t bi = p.batches * part / parts; bi < p.batches * (part + 1) / parts; ++bi)
          gemmBlock(cfg, p, bi, 0, p.m, 0, p.n, workspace + part * perThread);
    });
    return;
  }
  const int64_t mPanels = ceilDiv(p.m, mr), nPanels = ceilDiv(p.n, nr);
  int tm, tn;
  // Row parts on ties only where A is packed (each part then packs only its rows); where the
  // kernel reads A in place (AVX-512) the column split stays (not measured otherwise).
  const int64_t mcMax = std::max<int64_t>(mr, cfg.mc / mr * mr);
  const bool packsA = !(cfg.mk.stridedA && !p.transA && p.alpha == 1.f);
  gridSplit(mPanels, nPanels, threads, packsA && p.m >= mcMax * threads, tm, tn);
  const int64_t parts = static_cast<int64_t>(tm) * tn;
  for (int64_t bi = 0; bi < p.batches; ++bi)
    parallelFor(pool, parts, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t part = pb; part < pe; ++part) {
        const int64_t pm = part / tn, pn = part % tn;
        const int64_t m0 = mPanels * pm / tm * mr, m1 = std::min(p.m, mPanels * (pm + 1) / tm * mr);
        const int64_t n0 = nPanels * pn / tn * nr, n1 = std::min(p.n, nPanels * (pn + 1) / tn * nr);
        if (m0 < m1 && n0 < n1) gemmBlock(cfg, p, bi, m0, m1, n0, n1, workspace + part * perThread);
      }
    });
}

}  // namespace onnxtool::cpu
