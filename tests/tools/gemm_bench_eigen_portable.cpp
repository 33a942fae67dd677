// gemm_bench_eigen_portable.cpp: Eigen's SGEMM compiled for the portable path, linked into
// gemm_bench_portable only (see gemm_bench_eigen.inc).
#define ONNXTOOL_EIGEN_PATH "portable"
#include "gemm_bench_eigen.inc"
