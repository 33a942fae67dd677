// vec_avx2.cpp: the avx2 path of vec.h (8 float lanes, AVX2 + FMA), compiled with this
// path's target flags (CMakeLists.txt) and chosen at run time by vecKernels().
#if defined(__x86_64__) || defined(__i386__)
#define ONNXTOOL_VEC_WIDTH 8
#define ONNXTOOL_VEC_TABLE vecKernelsAvx2
#define ONNXTOOL_VEC_ISA_NAME "avx2"
#include "exec/cpu/vec_impl.inc"
#endif
