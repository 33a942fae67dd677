// gemm_bench_eigen_avx2.cpp: Eigen's SGEMM for the avx2 path (see gemm_bench_eigen.inc).
#define ONNXTOOL_EIGEN_FN eigenGemmAvx2
#include "gemm_bench_eigen.inc"
