// isa.h: which x86 vector ISA the cpu executor may use on this machine, by cpuid at run time
// (never the build machine's flags). ONNXTOOL_ISA=avx2|portable caps it lower so each path can
// be tested on a machine that has a higher one.
#pragma once

#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace onnxtool::cpu {

enum class Isa { Portable, Avx2, Avx512 };

/// The best ISA this CPU supports: Avx512 (F, BW, VL, DQ), Avx2 (AVX2 + FMA), else Portable.
Isa detectedIsa();
/// detectedIsa() capped by ONNXTOOL_ISA (an unknown value is ignored with a warning once).
Isa activeIsa();
std::string_view isaName(Isa isa);
/// Whether this core runs 512-bit FMAs at half the rate of its 512-bit shuffles (Zen 4: one
/// 512-bit FMA a cycle, on both 256-bit halves of its units; Intel's AVX-512 cores and Zen 5 issue
/// two): work in shuffles (transposes) is then half as dear against FMAs. By cpuid (vendor, family).
bool avx512HalfRate();
/// This core's L2 data cache in bytes (sysconf; 1 MiB where it says nothing): 2 MiB on Sapphire
/// Rapids, 1 MiB on Zen 4, 512 KiB on Zen 3. Blocking that must stay in L2 sizes by it.
long l2CacheBytes();

/// While alive, this thread's SSE/AVX arithmetic flushes denormal results to zero and reads
/// denormal inputs as zero (MXCSR FTZ and DAZ); the previous mode is restored at the end. x86
/// takes a microcode assist of about 100 cycles for each denormal result otherwise: Softmax rows
/// with masked (very negative) scores produced one per masked position, 5.7x slower a row.
/// For kernels whose results below FLT_MIN (1.2e-38) carry no information.
class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#else
  FlushDenormals() = default;
#endif
 public:
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
};

}  // namespace onnxtool::cpu
