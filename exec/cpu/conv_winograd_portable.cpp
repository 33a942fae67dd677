// conv_winograd_portable.cpp: the portable path of conv_winograd.h (4 float lanes, the build's
// baseline; a 4 x 8 GEMM tile), compiled with the build's own flags, plus the run-time choice of
// the path (winogradOps()).
#define ONNXTOOL_WINO_WIDTH 4
#define ONNXTOOL_WINO_MR 4
#define ONNXTOOL_WINO_NV 2
#define ONNXTOOL_WINO_TABLE winogradOpsPortable
#define ONNXTOOL_WINO_ISA Isa::Portable
#include "exec/cpu/conv_winograd_impl.inc"

namespace onnxtool::cpu {

const WinogradOps& winogradOpsFor(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == Isa::Avx512) return winogradOpsAvx512();
  if (isa == Isa::Avx2) return winogradOpsAvx2();
#endif
  (void)isa;
  return winogradOpsPortable();
}

const WinogradOps& winogradOps() {
  static const WinogradOps& table = winogradOpsFor(activeIsa());
  return table;
}

}  // namespace onnxtool::cpu
