// vec_portable.cpp: the portable path of vec.h (4 float lanes, the build's baseline), compiled with this
// path's target flags (CMakeLists.txt) and chosen at run time by vecKernels().
#define ONNXTOOL_VEC_WIDTH 4
#define ONNXTOOL_VEC_TABLE vecKernelsPortable
#define ONNXTOOL_VEC_ISA_NAME "portable"
#include "exec/cpu/vec_impl.inc"
