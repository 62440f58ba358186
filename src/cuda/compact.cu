// Compaction of a layer's cache (SPEC section 4): gathers the kept rows of K, V and their
// positions into a new, smaller buffer. One launcher serves the uniform [Hkv, n_keep, d] layout and
// the flattened varlen layout (offsets per head).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

__device__ __forceinline__ int head_of_row(const int64_t* offsets, int num_heads, int64_t r) {
  int lo = 0, hi = num_heads - 1;  // last h with offsets[h] <= r
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// One thread per 16-byte chunk of an output row (K and V), plus the position.
__global__ void compact_kernel(const char* k, const char* v, int64_t head_stride_b,
                               int64_t row_stride_b, int chunks, const int32_t* pos,
                               int64_t pos_head_stride, const int32_t* kept,
                               const int64_t* offsets, int64_t uniform_len, int num_heads,
                               int64_t rows, int64_t n, char* out_k, char* out_v,
                               int32_t* out_pos) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * chunks) return;
  const int64_t r = idx / chunks;
  const int c = static_cast<int>(idx % chunks);
  const int h = offsets ? head_of_row(offsets, num_heads, r) : static_cast<int>(r / uniform_len);
  int64_t j = kept[r];
  if (j < 0 || j >= n) j = 0;  // a bad index (a caller bug) reads row 0 rather than faulting
  const int64_t src = h * head_stride_b + j * row_stride_b + c * 16;
  const int64_t dst = r * static_cast<int64_t>(chunks) * 16 + c * 16;
  *reinterpret_cast<uint4*>(out_k + dst) = *reinterpret_cast<const uint4*>(k + src);
  *reinterpret_cast<uint4*>(out_v + dst) = *reinterpret_cast<const uint4*>(v + src);
  if (c == 0 && out_pos != nullptr)
    out_pos[r] = pos ? pos[h * pos_head_stride + j] : static_cast<int32_t>(j);
}

}  // namespace

cudaError_t launch_compact(const void* k, const void* v, int64_t head_stride, int64_t row_stride,
                           int elem_bytes, int d, const int32_t* pos, int64_t pos_head_stride,
                           const int32_t* kept, const int64_t* offsets, int64_t uniform_len,
                           int num_heads, int64_t rows, int64_t n, void* out_k, void* out_v,
                           int32_t* out_pos, cudaStream_t stream) {
  if ((static_cast<int64_t>(d) * elem_bytes) % 16 != 0 || (offsets == nullptr && uniform_len <= 0 && rows > 0))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int chunks = d * elem_bytes / 16;
  const int64_t threads = rows * chunks;
  compact_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
      static_cast<const char*>(k), static_cast<const char*>(v), head_stride * elem_bytes,
      row_stride * elem_bytes, chunks, pos, pos_head_stride, kept, offsets, uniform_len,
      num_heads, rows, n, static_cast<char*>(out_k), static_cast<char*>(out_v), out_pos);
  return cudaGetLastError();
}

}  // namespace kvevict::cuda::detail
