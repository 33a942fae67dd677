// dwconv_int8_avx2.cpp: the AVX2 path of dwconv_int8.h (8 float lanes), compiled with this
// path's target flags (CMakeLists.txt) and chosen at run time by dwint8::planeFor().
#if defined(__x86_64__) || defined(__i386__)
#define ONNXTOOL_DW_WIDTH 8
#define ONNXTOOL_DW_FN planeAvx2
#define ONNXTOOL_DW_PREPARE prepareAvx2
#include "exec/cpu/dwconv_int8_impl.inc"
#endif
