// gemm_bench_eigen_avx512.cpp: Eigen's SGEMM for the avx512 path (see gemm_bench_eigen.inc).
#define ONNXTOOL_EIGEN_FN eigenGemmAvx512
#include "gemm_bench_eigen.inc"
