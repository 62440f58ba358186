// Compaction of a layer's cache into a new, smaller allocation whose segments keep spare rows for
// decoding (src/cuda/compact.cu writes the kept rows back to back, without room to append).
// One 16-byte chunk per thread; grid (chunks of the longest segment, segments).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model_cuda/launchers.h"

namespace kvevict::gpu::detail {
namespace {

__global__ void kv_gather_kernel(const bf16* k, const bf16* v, const int32_t* pos,
                                 const int64_t* in_off, const int32_t* kept,
                                 const int64_t* kept_off, int64_t max_count, int chunks_per_row,
                                 int d, const int64_t* out_off, bf16* out_k, bf16* out_v,
                                 int32_t* out_pos, const float* acc, float* out_acc) {
  const int s = blockIdx.y;
  const int64_t count = kept_off[s + 1] - kept_off[s];
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = idx / chunks_per_row;
  const int ch = static_cast<int>(idx % chunks_per_row);
  if (i >= count || i >= max_count) return;
  const int64_t src = in_off[s] + kept[kept_off[s] + i];
  const int64_t dst = out_off[s] + i;
  reinterpret_cast<uint4*>(out_k + dst * d)[ch] = reinterpret_cast<const uint4*>(k + src * d)[ch];
  reinterpret_cast<uint4*>(out_v + dst * d)[ch] = reinterpret_cast<const uint4*>(v + src * d)[ch];
  if (ch == 0) {
    out_pos[dst] = pos[src];
    if (out_acc != nullptr) out_acc[dst] = acc[src];
  }
}

}  // namespace

cudaError_t launch_kv_gather(const bf16* k, const bf16* v, const int32_t* pos,
                             const int64_t* in_off, const int32_t* kept, const int64_t* kept_off,
                             int S, int64_t max_count, int d, const int64_t* out_off, bf16* out_k,
                             bf16* out_v, int32_t* out_pos, const float* acc, float* out_acc,
                             cudaStream_t stream) {
  if ((acc == nullptr) != (out_acc == nullptr)) return cudaErrorInvalidValue;
  if (d * 2 % 16 != 0 || S <= 0) return cudaErrorInvalidValue;
  if (max_count <= 0) return cudaSuccess;
  const int cpr = d * 2 / 16;
  const int64_t work = max_count * cpr;
  const dim3 grid(static_cast<unsigned>((work + 255) / 256), static_cast<unsigned>(S));
  kv_gather_kernel<<<grid, 256, 0, stream>>>(k, v, pos, in_off, kept, kept_off, max_count, cpr, d,
                                             out_off, out_k, out_v, out_pos, acc, out_acc);
  return cudaGetLastError();
}

}  // namespace kvevict::gpu::detail
