// kernels_int8_gemm.cpp: the int8 GEMM driver (path choice, packing, threads) and its portable
// path (see qgemm.h). The AVX2 and AVX-512 VNNI paths are in kernels_int8_avx2.cpp and
// kernels_int8_avx512.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "exec/cpu/qgemm.h"

namespace onnxtool::cpu::qgemm {

Path pathFor(Isa isa) {
  if (isa == Isa::Avx512) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni")) return Path::Avx512Vnni;
#endif
    return Path::Avx2;  // AVX-512 without VNNI: the AVX2 path is exact and fast enough
  }
  return isa == Isa::Avx2 ? Path::Avx2 : Path::Portable;
}

const char* pathName(Path p) {
  switch (p) {
    case Path::Avx512Vnni: return "vnni";
    case Path::Avx2: return "avx2";
    case Path::Portable: return "portable";
  }
  return "portable";
}

namespace {

int64_t kGroup(Path p) { return p == Path::Avx512Vnni ? 4 : p == Path::Avx2 ? 2 : 1; }
int64_t roundUp(int64_t x, int64_t g) { return (x + g - 1) / g * g; }

}  // namespace

PackedB packB(Path path, const int8_t* b, int64_t k, int64_t n) {
  PackedB p;
  p.path = path;
  p.k = k;
  p.n = n;
  p.kp = roundUp(k, kGroup(path));
  p.panelWidth = path == Path::Avx2 ? 16 : 32;
  p.panels = (n + p.panelWidth - 1) / p.panelWidth;
  p.colSum.assign(static_cast<size_t>(n), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) p.colSum[static_cast<size_t>(j)] += b[kk * n + j];
  auto at = [&](int64_t kk, int64_t j) -> int8_t { return kk < k && j < n ? b[kk * n + j] : 0; };
  const int64_t w = p.panelWidth;
  switch (path) {
    case Path::Avx512Vnni:
      p.s8.resize(static_cast<size_t>(p.panels * p.kp * w));
      for (int64_t pn = 0; pn < p.panels; ++pn)
        for (int64_t g = 0; g < p.kp / 4; ++g)
          for (int64_t c = 0; c < w; ++c)
            for (int64_t q = 0; q < 4; ++q)
              p.s8[static_cast<size_t>(((pn * (p.kp / 4) + g) * w + c) * 4 + q)] = at(g * 4 + q, pn * w + c);
      break;
    case Path::Avx2:
      p.s16.resize(static_cast<size_t>(p.panels * p.kp * w));
      for (int64_t pn = 0; pn < p.panels; ++pn)
        for (int64_t g = 0; g < p.kp / 2; ++g)
          for (int64_t c = 0; c < w; ++c)
            for (int64_t q = 0; q < 2; ++q)
              p.s16[static_cast<size_t>(((pn * (p.kp / 2) + g) * w + c) * 2 + q)] = at(g * 2 + q, pn * w + c);
      break;
    case Path::Portable:
      p.t8.resize(static_cast<size_t>(n * k));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t kk = 0; kk < k; ++kk) p.t8[static_cast<size_t>(j * k + kk)] = b[kk * n + j];
      break;
  }
  return p;
}

size_t packedABytes(Path path, int64_t m, int64_t k) {
  int64_t kp = roundUp(k, kGroup(path));
  return static_cast<size_t>(m * kp) * (path == Path::Avx2 ? 2 : 1);
}

void packA(Path path, const uint8_t* a, int64_t m, int64_t k, int64_t lda, void* dst, int32_t* rowSum) {
  int64_t kp = roundUp(k, kGroup(path));
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* row = a + i * lda;
    int32_t s = 0;
    for (int64_t kk = 0; kk < k; ++kk) s += row[kk];
    rowSum[i] = s;
    if (path == Path::Avx2) {
      int16_t* d = static_cast<int16_t*>(dst) + i * kp;
      for (int64_t kk = 0; kk < k; ++kk) d[kk] = row[kk];
      for (int64_t kk = k; kk < kp; ++kk) d[kk] = 0;
    } else if (kp > 0) {  // k == 0 (an empty operand): no bytes, and `row` may be null
      uint8_t* d = static_cast<uint8_t*>(dst) + i * kp;
      if (k > 0) std::memcpy(d, row, static_cast<size_t>(k));
      std::memset(d + k, 0, static_cast<size_t>(kp - k));
    }
  }
}

bool minMax(Path path, const float* x, int64_t n, float& mn, float& mx) {
  if (path == Path::Avx512Vnni) return minMaxAvx512(x, n, mn, mx);
  if (path == Path::Avx2) return minMaxAvx2(x, n, mn, mx);
  mn = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return false;
    mx = std::max(mx, x[i]);
    mn = std::min(mn, x[i]);
  }
  return true;
}

void quantizeA(Path path, const float* x, int64_t m, int64_t k, float scale, float zero, void* dst, int32_t* rowSum,
               bool nanToZeroPoint) {
  int64_t kp = roundUp(k, kGroup(path));
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    if (path == Path::Avx512Vnni) {
      uint8_t* d = static_cast<uint8_t*>(dst) + i * kp;
      quantizeRowAvx512(row, k, scale, zero, d, rowSum[i], nanToZeroPoint);
      std::memset(d + k, 0, static_cast<size_t>(kp - k));
    } else if (path == Path::Avx2) {
      int16_t* d = static_cast<int16_t*>(dst) + i * kp;
      quantizeRowAvx2(row, k, scale, zero, d, rowSum[i], nanToZeroPoint);
      for (int64_t kk = k; kk < kp; ++kk) d[kk] = 0;
    } else {
      uint8_t* d = static_cast<uint8_t*>(dst) + i * kp;
      int64_t s = 0;  // a whole image may be one row: no int32 overflow
      for (int64_t kk = 0; kk < k; ++kk) {
        float r = std::nearbyint(row[kk] / scale);
        if (nanToZeroPoint && std::isnan(r)) r = 0;
        float q = r + zero;
        uint8_t v = std::isnan(q) ? 0 : static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
        d[kk] = v;
        s += v;
      }
      rowSum[i] = static_cast<int32_t>(s);
    }
  }
}

void gemmPortable(const PackedB& b, const void* aPacked, int64_t m, const Epilogue& e, int64_t p0, int64_t p1) {
  const uint8_t* a = static_cast<const uint8_t*>(aPacked);
  const int64_t k = b.k;
  int64_t n0 = p0 * b.panelWidth, n1 = std::min(b.n, p1 * b.panelWidth);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* row = a + i * k;
    for (int64_t j = n0; j < n1; ++j) {
      const int8_t* col = b.t8.data() + j * k;
      int32_t acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += static_cast<int32_t>(row[kk]) * col[kk];
      const int32_t aZero = e.aZeroRow ? e.aZeroRow[i] : e.aZero;
      acc -= aZero * b.colSum[static_cast<size_t>(j)];
      if (e.bZero) acc += -e.bZero[j] * e.rowSumA[i] + static_cast<int32_t>(k) * aZero * e.bZero[j];
      if (e.c32) {
        e.c32[i * e.ldc + j] = acc;
      } else {
        float y = static_cast<float>(acc) * e.colScale[j];
        if (e.rowScale) y = y * e.rowScale[i];
        if (e.bias) y = y + e.bias[j];
        if (e.clamp) y = std::min(std::max(y, e.lo), e.hi);
        e.cf[i * e.ldc + j] = y;
      }
    }
  }
}

void parallelPanels(int64_t panels, int64_t work, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  // A pool dispatch costs about a microsecond: chunks of ~64K multiply-adds (tens of
  // microseconds) pay for it.
  constexpr int64_t kChunkWork = int64_t{1} << 16;
  int64_t grain = panels > 0 ? std::max<int64_t>(1, panels * kChunkWork / std::max<int64_t>(work, 1)) : 1;
  parallelFor(pool, panels, grain, [&](int64_t p0, int64_t p1) { fn(p0, p1); });
}

void gemm(const PackedB& b, const void* a, int64_t m, const Epilogue& e, ThreadPool* pool) {
  if (m == 0 || b.n == 0) return;
  parallelPanels(b.panels, m * b.n * b.k, pool, [&](int64_t p0, int64_t p1) {
    switch (b.path) {
      case Path::Avx512Vnni: gemmAvx512Vnni(b, a, m, e, p0, p1); break;
      case Path::Avx2: gemmAvx2(b, a, m, e, p0, p1); break;
      case Path::Portable: gemmPortable(b, a, m, e, p0, p1); break;
    }
  });
}

}  // namespace onnxtool::cpu::qgemm
