// isa.cpp: cpuid-based ISA detection (see isa.h).
#include "exec/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <spdlog/spdlog.h>

namespace onnxtool::cpu {

Isa detectedIsa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
  return Isa::Portable;
}

bool avx512HalfRate() {
  static const bool half = [] {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
    if (!amd || !__get_cpuid(1, &a, &b, &c, &d)) return false;
    unsigned family = (a >> 8) & 0xF;
    if (family == 0xF) family += (a >> 20) & 0xFF;
    return family == 0x19;  // Zen 4 (Zen 5, family 0x1A, has full-width 512-bit units)
#else
    return false;
#endif
  }();
  return half;
}

long l2CacheBytes() {
  static const long bytes = [] {
    long b = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
    b = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return b >= (64L << 10) && b <= (64L << 20) ? b : (1L << 20);
  }();
  return bytes;
}

Isa activeIsa() {
  static const Isa isa = [] {
    Isa best = detectedIsa();
    const char* env = std::getenv("ONNXTOOL_ISA");
    if (!env || !*env) return best;
    std::string v = env;
    Isa want;
    if (v == "avx512") want = Isa::Avx512;
    else if (v == "avx2") want = Isa::Avx2;
    else if (v == "portable") want = Isa::Portable;
    else {
      spdlog::warn("ONNXTOOL_ISA={}: not one of avx512, avx2, portable; ignored", v);
      return best;
    }
    return std::min(want, best);  // never above what the CPU has
  }();
  return isa;
}

std::string_view isaName(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Portable: return "portable";
  }
  return "portable";
}

}  // namespace onnxtool::cpu
