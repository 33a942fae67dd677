// gemm_bench_eigen_avx2.cpp: Eigen's SGEMM compiled for the avx2 path, linked into
// gemm_bench_avx2 only (see gemm_bench_eigen.inc).
#define ONNXTOOL_EIGEN_PATH "avx2"
#include "gemm_bench_eigen.inc"
