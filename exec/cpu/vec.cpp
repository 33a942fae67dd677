// vec.cpp: picks the vec.h table of the active ISA path.
#include "exec/cpu/vec.h"

namespace onnxtool::cpu {

const VecKernels& vecKernelsPortable();
#if defined(__x86_64__) || defined(__i386__)
const VecKernels& vecKernelsAvx2();
const VecKernels& vecKernelsAvx512();
#endif

const VecKernels& vecKernelsFor(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::Avx512) return vecKernelsAvx512();
  if (isa == Isa::Avx2) return vecKernelsAvx2();
#endif
  (void)isa;
  return vecKernelsPortable();
}

const VecKernels& vecKernels() {
  static const VecKernels& table = vecKernelsFor(activeIsa());
  return table;
}

}  // namespace onnxtool::cpu
