// gemm_bench_eigen_portable.cpp: Eigen's SGEMM for the portable path (see gemm_bench_eigen.inc).
#define ONNXTOOL_EIGEN_FN eigenGemmPortable
#include "gemm_bench_eigen.inc"
