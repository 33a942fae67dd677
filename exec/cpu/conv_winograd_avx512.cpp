// conv_winograd_avx512.cpp: the avx512 path of conv_winograd.h (16 float lanes, AVX-512F/BW/VL/DQ;
// a 16 x 16 GEMM tile: 16 zmm accumulators, one load of the transformed input and 16 broadcasts
// of the weights per step), compiled with this path's target flags (CMakeLists.txt) and chosen
// at run time by winogradOps().
#if defined(__x86_64__) || defined(__i386__)
#define ONNXTOOL_WINO_WIDTH 16
#define ONNXTOOL_WINO_MR 16
#define ONNXTOOL_WINO_NV 1
#define ONNXTOOL_WINO_TABLE winogradOpsAvx512
#define ONNXTOOL_WINO_ISA Isa::Avx512
#include "exec/cpu/conv_winograd_impl.inc"
#endif
