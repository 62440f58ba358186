// Temperature / top-k / top-p sampling on the GPU with the rules of kvevict::Sampler
// (src/model/sampler.cpp), so that the same logits and the same uniform draw give the same token:
//
//   1. Every row's ids are ordered by logit, high to low, ties toward the lower id: one device-wide
//      radix sort of 64-bit keys (row in the high 32 bits, the inverted order-preserving bits of
//      the logit in the low 32; the sort is stable, so equal logits keep ascending ids).
//   2. One block per row walks the sorted prefix: p_i = exp((l_i - l_0) / T) in double over the
//      first keep = top_k (or V) entries, total mass Z; with top_p < 1 the prefix is cut at the
//      first i whose cumulative mass / Z >= top_p and Z becomes the cut prefix's mass; the token is
//      the first i whose cumulative mass exceeds u Z (u in [0, 1) given per row), else the last
//      kept.
//
// The cumulative sums are block-wide scans over tiles of the sorted row (Sampler sums one by one:
// the two differ by rounding only, which matters when u Z falls within ~1e-16 Z of a boundary).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/model_launchers.h"

namespace kvevict::gpu::detail {
namespace {

constexpr int kScanThreads = 512;

// Order-preserving bits of a float (larger float -> larger unsigned), then inverted so that an
// ascending sort puts the largest logit first.
__device__ __forceinline__ uint32_t descending_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ordered;
}

__global__ void make_keys_kernel(const float* logits, int R, int64_t V, uint64_t* keys,
                                 int32_t* ids) {
  const int64_t n = static_cast<int64_t>(R) * V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t row = static_cast<uint64_t>(i / V);
    keys[i] = (row << 32) | descending_bits(logits[i]);
    ids[i] = static_cast<int32_t>(i % V);
  }
}

// Block-wide inclusive scan of one double per thread; returns this thread's inclusive prefix and
// the tile total through *total.
__device__ double block_inclusive_scan(double x, double* total, double* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    double w = lane < kScanThreads / 32 ? warp_sums[lane] : 0.0;
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < kScanThreads / 32) warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  if (warp > 0) x += warp_sums[warp - 1];
  *total = warp_sums[kScanThreads / 32 - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return x;
}

// The first index i < count of the sorted row whose cumulative mass (over indices <= i) passes
// `target` (>= when inclusive_ge, else >), or count when none does; *mass_out = mass up to and
// including that index (the whole prefix's mass when none).
__device__ int64_t find_cumulative(const int32_t* ids, const float* row_logits, int64_t count,
                                   double mx, double temperature, double target, bool inclusive_ge,
                                   double* mass_out, double* warp_sums, int64_t* hit_s,
                                   double* hit_mass_s) {
  double carry = 0.0;
  if (threadIdx.x == 0) *hit_s = count;
  __syncthreads();
  for (int64_t base = 0; base < count; base += kScanThreads) {
    const int64_t i = base + threadIdx.x;
    // As Sampler: exp((logit - max) / T) in double (a division, not a product with 1 / T).
    const double p =
        i < count ? exp((static_cast<double>(row_logits[ids[i]]) - mx) / temperature) : 0.0;
    double tile_total = 0.0;
    const double cum = carry + block_inclusive_scan(p, &tile_total, warp_sums);
    const bool pass = i < count && (inclusive_ge ? cum >= target : cum > target);
    // The lowest passing index of the tile (atomicMin on a 64-bit index).
    if (pass)
      atomicMin(reinterpret_cast<unsigned long long*>(hit_s), static_cast<unsigned long long>(i));
    __syncthreads();
    const int64_t hit = *hit_s;
    if (hit < count) {
      if (i == hit) *hit_mass_s = cum;
      __syncthreads();
      *mass_out = *hit_mass_s;
      return hit;
    }
    carry += tile_total;
  }
  *mass_out = carry;
  return count;
}

__global__ void __launch_bounds__(kScanThreads)
    sample_rows_kernel(const float* logits, int64_t V, const int32_t* sorted_ids, float temperature,
                       int top_k, float top_p, const double* uniforms, int32_t* out) {
  __shared__ double warp_sums[kScanThreads / 32];
  __shared__ int64_t hit_s;
  __shared__ double hit_mass_s;
  const int r = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(r) * V;
  const int32_t* ids = sorted_ids + static_cast<int64_t>(r) * V;
  const double mx = row[ids[0]];
  const double t = temperature;
  int64_t keep = top_k > 0 && top_k < V ? top_k : V;
  double mass = 0.0;
  // Total mass of the kept prefix (target above any sum: nothing passes).
  find_cumulative(ids, row, keep, mx, t, INFINITY, true, &mass, warp_sums, &hit_s, &hit_mass_s);
  if (top_p < 1.0f) {
    double cut_mass = 0.0;
    const int64_t cut = find_cumulative(ids, row, keep, mx, t, static_cast<double>(top_p) * mass,
                                        true, &cut_mass, warp_sums, &hit_s, &hit_mass_s);
    if (cut < keep) {
      keep = cut + 1;
      mass = cut_mass;
    }
  }
  double unused = 0.0;
  const int64_t pick = find_cumulative(ids, row, keep, mx, t, uniforms[r] * mass, false, &unused,
                                       warp_sums, &hit_s, &hit_mass_s);
  if (threadIdx.x == 0) out[r] = ids[pick < keep ? pick : keep - 1];
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

int key_bits(int R) {
  int b = 32;
  while ((int64_t{1} << (b - 32)) < R) ++b;
  return b;
}

// Scratch layout: keys in / out [R V] u64, ids in / out [R V] i32, then cub's temporary storage.
struct Layout {
  size_t keys = 0, ids = 0, cub = 0, total = 0;
};
Layout layout(int R, int64_t V) {
  Layout l;
  const size_t n = static_cast<size_t>(R) * V;
  l.keys = (n * 8 + 255) / 256 * 256;
  l.ids = (n * 4 + 255) / 256 * 256;
  cub::DeviceRadixSort::SortPairs(
      nullptr, l.cub, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int64_t>(n),
      0, key_bits(R));
  l.total = 2 * l.keys + 2 * l.ids + l.cub;
  return l;
}

}  // namespace

size_t sample_scratch_bytes(int R, int64_t V) {
  return layout(R, V).total;
}

cudaError_t launch_sample(const SampleArgs& a, int32_t* ids, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream) {
  if (a.R <= 0 || a.V <= 0 || a.V > INT32_MAX || !(a.temperature > 0.f) || a.top_k < 0 ||
      !(a.top_p > 0.f && a.top_p <= 1.f))
    return cudaErrorInvalidValue;
  const Layout l = layout(a.R, a.V);
  if (scratch_bytes < l.total) return cudaErrorInvalidValue;
  char* base = static_cast<char*>(scratch);
  uint64_t* keys_in = reinterpret_cast<uint64_t*>(base);
  uint64_t* keys_out = reinterpret_cast<uint64_t*>(base + l.keys);
  int32_t* ids_in = reinterpret_cast<int32_t*>(base + 2 * l.keys);
  int32_t* ids_out = reinterpret_cast<int32_t*>(base + 2 * l.keys + l.ids);
  void* cub_tmp = base + 2 * l.keys + 2 * l.ids;
  const int64_t n = static_cast<int64_t>(a.R) * a.V;
  make_keys_kernel<<<grid_for(n, 256), 256, 0, stream>>>(a.logits, a.R, a.V, keys_in, ids_in);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  size_t cub_bytes = l.cub;
  err = cub::DeviceRadixSort::SortPairs(cub_tmp, cub_bytes, keys_in, keys_out, ids_in, ids_out, n,
                                        0, key_bits(a.R), stream);
  if (err != cudaSuccess) return err;
  sample_rows_kernel<<<a.R, kScanThreads, 0, stream>>>(a.logits, a.V, ids_out, a.temperature,
                                                       a.top_k, a.top_p, a.uniforms, ids);
  return cudaGetLastError();
}

}  // namespace kvevict::gpu::detail
