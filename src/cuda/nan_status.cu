// The cuda backend's device status word: a device-resident selection cannot throw when its
// scores hold a NaN, so the NaN positions found by launch_find_nan fold into one word that
// Backend::synchronize() reads (cuda_backend.cpp).
#include <cuda_runtime.h>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

__global__ void fold_min_kernel(const unsigned long long* x, int count,
                                unsigned long long* status) {
  unsigned long long m = ~0ull;
  for (int i = 0; i < count; ++i) m = x[i] < m ? x[i] : m;
  if (m != ~0ull) atomicMin(status, m);
}

}  // namespace

cudaError_t launch_min_u64(const unsigned long long* x, int count, unsigned long long* status,
                           cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  fold_min_kernel<<<1, 1, 0, stream>>>(x, count, status);
  return cudaGetLastError();
}

}  // namespace kvevict::cuda::detail
