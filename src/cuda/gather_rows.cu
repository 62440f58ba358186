// The one compaction kernel (SPEC section 4): a row gather from any source layout into any
// destination layout (uniform, packed varlen with slack, the segment cache of the model runtime,
// pages). One thread copies one 16-byte chunk of a kept row's K and V; the chunk-0 thread also
// moves pos and score_acc. See GatherArgs (launchers.h) for the maps.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

__device__ __forceinline__ int head_of_row(const int64_t* offsets, int num_heads, int64_t r) {
  int lo = 0, hi = num_heads - 1;  // last h with offsets[h] <= r
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void gather_rows_kernel(GatherArgs a, int chunks) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.rows * chunks) return;
  const int64_t r = idx / chunks;
  const int c = static_cast<int>(idx % chunks);
  int h;
  int64_t head_start;
  if (a.kept_offsets != nullptr) {
    if (r >= a.kept_offsets[a.num_heads]) return;
    h = head_of_row(a.kept_offsets, a.num_heads, r);
    head_start = a.kept_offsets[h];
  } else {
    h = static_cast<int>(r / a.uniform_keep);
    head_start = h * a.uniform_keep;
  }
  const int64_t slot = r - head_start;
  int64_t j = a.kept[r];
  if (a.src_limit > 0 && (j < 0 || j >= a.src_limit)) j = 0;
  const int64_t src = (a.src_base ? a.src_base[h] : 0) + j;
  int64_t dst;
  if (a.page_table != nullptr) {
    const int64_t page = a.page_table[static_cast<int64_t>(h) * a.max_pages + slot / a.page_size];
    dst = page * a.page_size + slot % a.page_size;
  } else if (a.dst_base != nullptr) {
    dst = a.dst_base[h] + slot;
  } else {
    dst = head_start + h * a.dst_slack + slot;
  }
  if (dst < 0 || dst >= a.dst_rows) return;  // a bad map entry (a caller bug): no write
  const int64_t from = h * a.head_stride_b + src * a.row_stride_b + c * 16;
  const int64_t to = dst * a.row_bytes + c * 16;
  *reinterpret_cast<uint4*>(a.out_k + to) = *reinterpret_cast<const uint4*>(a.k + from);
  *reinterpret_cast<uint4*>(a.out_v + to) = *reinterpret_cast<const uint4*>(a.v + from);
  if (c == 0) {
    const int64_t pi = h * a.pos_head_stride + src;
    if (a.out_pos != nullptr) a.out_pos[dst] = a.pos ? a.pos[pi] : static_cast<int32_t>(j);
    if (a.out_acc != nullptr && a.acc != nullptr) a.out_acc[dst] = a.acc[pi];
  }
}

__global__ void packed_segments_kernel(const int64_t* kept_offsets, int num_heads, int64_t slack,
                                       int64_t* out_off, int32_t* out_len) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h > num_heads) return;
  out_off[h] = kept_offsets[h] + h * slack;
  if (h < num_heads) out_len[h] = static_cast<int32_t>(kept_offsets[h + 1] - kept_offsets[h]);
}

}  // namespace

cudaError_t launch_gather_rows(const GatherArgs& a, cudaStream_t stream) {
  if (a.row_bytes <= 0 || a.row_bytes % 16 != 0 || a.num_heads <= 0 || a.rows < 0 ||
      (a.page_table != nullptr && (a.page_size <= 0 || a.max_pages <= 0)) ||
      (a.kept_offsets == nullptr && a.uniform_keep <= 0 && a.rows > 0) ||
      (a.page_table == nullptr && a.dst_base == nullptr && a.dst_slack < 0) || a.dst_rows < 0)
    return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  const int chunks = a.row_bytes / 16;
  const int64_t threads = a.rows * chunks;
  gather_rows_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(a, chunks);
  return cudaGetLastError();
}

cudaError_t launch_packed_segments(const int64_t* kept_offsets, int num_heads, int64_t slack,
                                   int64_t* out_off, int32_t* out_len, cudaStream_t stream) {
  if (num_heads <= 0 || slack < 0) return cudaErrorInvalidValue;
  packed_segments_kernel<<<(num_heads + 256) / 256, 256, 0, stream>>>(kept_offsets, num_heads,
                                                                      slack, out_off, out_len);
  return cudaGetLastError();
}

}  // namespace kvevict::cuda::detail
