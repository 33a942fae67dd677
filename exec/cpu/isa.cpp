// isa.cpp: cpuid-based ISA detection (see isa.h).
#include "exec/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <unistd.h>

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
