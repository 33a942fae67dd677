// vec_avx512.cpp: the avx512 path of vec.h (16 float lanes, AVX-512F/BW/VL/DQ), compiled with this
// path's target flags (CMakeLists.txt) and chosen at run time by vecKernels().
#if defined(__x86_64__) || defined(__i386__)
#define ONNXTOOL_VEC_WIDTH 16
#define ONNXTOOL_VEC_TABLE vecKernelsAvx512
#define ONNXTOOL_VEC_ISA_NAME "avx512"
#include "exec/cpu/vec_impl.inc"
#endif
