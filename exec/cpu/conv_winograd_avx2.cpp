// conv_winograd_avx2.cpp: the avx2 path of conv_winograd.h (8 float lanes, AVX2 + FMA; a 6 x 16
// GEMM tile in 12 ymm accumulators), compiled with this path's target flags (CMakeLists.txt) and
// chosen at run time by winogradOps().
#if defined(__x86_64__) || defined(__i386__)
#define ONNXTOOL_WINO_WIDTH 8
#define ONNXTOOL_WINO_MR 6
#define ONNXTOOL_WINO_NV 2
#define ONNXTOOL_WINO_TABLE winogradOpsAvx2
#define ONNXTOOL_WINO_ISA Isa::Avx2
#include "exec/cpu/conv_winograd_impl.inc"
#endif
