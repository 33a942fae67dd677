// dwconv_int8_avx512.cpp: the AVX-512 path of dwconv_int8.h (16 float lanes), compiled with this
// path's target flags (CMakeLists.txt) and chosen at run time by dwint8::planeFor().
#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as maybe-uninitialized (a false
// positive of the header's masked-conversion builtins).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define ONNXTOOL_DW_WIDTH 16
#define ONNXTOOL_DW_FN planeAvx512
#define ONNXTOOL_DW_PREPARE prepareAvx512
#include "exec/cpu/dwconv_int8_impl.inc"
#endif
