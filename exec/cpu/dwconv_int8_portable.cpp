// dwconv_int8_portable.cpp: the portable path of dwconv_int8.h (4 float lanes, the build's
// baseline), compiled with the build's own flags, plus the run-time choice of the path.
#include <algorithm>
#define ONNXTOOL_DW_WIDTH 4
#define ONNXTOOL_DW_FN planePortable
#define ONNXTOOL_DW_SCRATCH scratchPortable
#include "exec/cpu/dwconv_int8_impl.inc"

namespace onnxtool::cpu::dwint8 {

size_t scratchFloats(const Plane& p, Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::Avx512) return scratchAvx512(p);
  if (isa == Isa::Avx2) return scratchAvx2(p);
#endif
  (void)isa;
  return scratchPortable(p);
}

void planeFor(Isa isa, const Plane& p, const Channel& c, float* scratch) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::Avx512) return planeAvx512(p, c, scratch);
  if (isa == Isa::Avx2) return planeAvx2(p, c, scratch);
#endif
  planePortable(p, c, scratch);
}

}  // namespace onnxtool::cpu::dwint8
