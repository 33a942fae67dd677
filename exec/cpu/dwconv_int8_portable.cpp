// dwconv_int8_portable.cpp: the portable path of dwconv_int8.h (4 float lanes, the build's
// baseline), compiled with the build's own flags, plus the run-time choice of the path.
#include <algorithm>
#define ONNXTOOL_DW_WIDTH 4
#define ONNXTOOL_DW_FN planePortable
#define ONNXTOOL_DW_PREPARE preparePortable
#include "exec/cpu/dwconv_int8_impl.inc"

namespace onnxtool::cpu::dwint8 {

Prepared prepare(Isa isa, const Plane& p) {
  Prepared pre;
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::Avx512) {
    pre.isa = isa;
    prepareAvx512(p, pre);
    return pre;
  }
  if (isa == Isa::Avx2) {
    pre.isa = isa;
    prepareAvx2(p, pre);
    return pre;
  }
#endif
  preparePortable(p, pre);
  return pre;
}

void planeFor(const Prepared& pre, const Plane& p, const Channel& c, float* scratch) {
#if defined(__x86_64__) || defined(__i386__)
  if (pre.isa == Isa::Avx512) return planeAvx512(pre, p, c, scratch);
  if (pre.isa == Isa::Avx2) return planeAvx2(pre, p, c, scratch);
#endif
  planePortable(pre, p, c, scratch);
}

}  // namespace onnxtool::cpu::dwint8
