// isa.h: which x86 vector ISA the cpu executor may use on this machine, by cpuid at run time
// (never the build machine's flags). ONNXTOOL_ISA=avx2|portable caps it lower so each path can
// be tested on a machine that has a higher one.
#pragma once

#include <string_view>

namespace onnxtool::cpu {

enum class Isa { Portable, Avx2, Avx512 };

/// The best ISA this CPU supports: Avx512 (F, BW, VL, DQ), Avx2 (AVX2 + FMA), else Portable.
Isa detectedIsa();
/// detectedIsa() capped by ONNXTOOL_ISA (an unknown value is ignored with a warning once).
Isa activeIsa();
std::string_view isaName(Isa isa);

}  // namespace onnxtool::cpu
