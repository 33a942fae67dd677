// gemm_bench_eigen_avx512.cpp: Eigen's SGEMM compiled for the avx512 path, linked into
// gemm_bench_avx512 only (see gemm_bench_eigen.inc).
#define ONNXTOOL_EIGEN_PATH "avx512"
#include "gemm_bench_eigen.inc"
