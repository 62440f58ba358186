// The max of two floating-point values that is NaN when either is: std::max(a, NaN), fmaxf and
// `a > b ? a : b` return the other operand, so a NaN logit or score dropped out of a running max
// or a clamp and left finite, wrong results (issue 13). Host and device (the score terms run in
// CUDA kernels too; the kernels' own maxima use the one-instruction form in cuda/common.cuh).
#pragma once

#include <cmath>

// Functions compiled for the host and, under nvcc, for the device as well.
#if defined(__CUDACC__)
#define KVEVICT_HD __host__ __device__
#else
#define KVEVICT_HD
#endif

namespace kvevict {

template <class T>
KVEVICT_HD inline T nan_max(T a, T b) {
  return a > b || std::isnan(a) ? a : b;
}

}  // namespace kvevict
