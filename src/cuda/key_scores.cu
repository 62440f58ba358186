// Scores that read only the keys (knorm, keydiff), and the small follow-up kernels of the window
// scores: 1-D pooling along tokens and tova's mean over all heads of the layer.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

// One warp per key row; lanes read 16-byte chunks. Returns the sum of squares in A (float, or
// double for the rows float cannot hold) on every lane.
template <class A, class T>
__device__ __forceinline__ A row_sum_sq(const T* row, int d, int lane) {
  A acc = 0;
  for (int c = lane; c < d / 8; c += 32) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c * 8);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const A x = ElemTraits<T>::to_float(e[i]);
      acc += x * x;
    }
  }
  return warp_sum(acc);
}

// knorm and keydiff sum a key's squares in float, which holds the sums of ordinary keys to float's
// rounding. A sum above FLT_MAX (keys from |k| ~ 1.8e19: inf) or below 2^-100 (keys from |k| ~
// 1e-15, whose squares lose bits in float's subnormals from 2^-126 or underflow to 0) is redone
// in double, as the cpu backend sums every row (cpu_score.cpp), so that such keys score like
// they do there: knorm's -||k|| (a norm that still passes FLT_MAX becomes -inf there and here,
// and the backends refuse it: check_scores_finite, the cuda backend's status word) and keydiff's
// cosine (always in range). NaN (a NaN key) is redone too and stays NaN.
__device__ __forceinline__ bool sum_sq_fits_float(float ss) {
  return ss >= 0x1p-100f && ss <= FLT_MAX;
}

// knorm, any head dim (d % 8 == 0): one warp a key row (the fallback of the kernel below).
template <class T>
__global__ void knorm_kernel(const T* k, int64_t head_stride, int64_t row_stride, int hkv,
                             int64_t n, int d, float* scores) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= hkv * n) return;
  const int64_t h = warp / n, j = warp % n;
  const T* row = k + h * head_stride + j * row_stride;
  const float ss = row_sum_sq<float>(row, d, lane);  // the same value on every lane: warp-uniform
  float norm = sqrtf(ss);
  if (!sum_sq_fits_float(ss)) norm = static_cast<float>(sqrt(row_sum_sq<double>(row, d, lane)));
  if (lane == 0) scores[warp] = -norm;
}

// The key rows of one head (blockIdx.y; key j of it) in groups of D / 8 lanes, one 16-byte chunk a
// lane (head dims 64 / 128 / 256), so a warp holds 256 / D rows at once and every lane is busy;
// each warp takes kKeyRowSteps such groups with all of their loads issued first: kKeyRowSteps x
// 16 bytes in flight a lane, where one warp a row had 16 bytes on half of its lanes (knorm: 1.4
// TB/s at 32K on an H100). The head is the grid's y, so no lane divides by n. f(j, chunk, x) gets
// each lane's 8 elements as floats (j may be >= n: zeros, not to be stored); sums over a row then
// take row_lanes_sum, whose xor 4, 2, 1 (8, 16 at larger D) give the bits of warp_sum over one
// warp a row (its extra steps only added zeros).
constexpr int kKeyRowSteps = 4;
template <int D>
constexpr int kKeyRowsPerWarp = 32 / (D / 8) * kKeyRowSteps;
template <class T, int D, class F>
__device__ __forceinline__ void for_key_row_groups(const T* k, int64_t head_stride,
                                                   int64_t row_stride, int64_t n, F&& f) {
  constexpr int kLanes = D / 8, kRowsPerStep = 32 / kLanes;
  const int lane = threadIdx.x & 31, chunk = lane % kLanes;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t first = warp * kKeyRowsPerWarp<D> + lane / kLanes;
  const T* head = k + blockIdx.y * head_stride + chunk * 8;
  uint4 raw[kKeyRowSteps] = {};  // rows past the end stay zero (f must not store them)
#pragma unroll
  for (int u = 0; u < kKeyRowSteps; ++u) {
    const int64_t j = first + u * kRowsPerStep;
    if (j < n) raw[u] = __ldcs(reinterpret_cast<const uint4*>(head + j * row_stride));
  }
#pragma unroll
  for (int u = 0; u < kKeyRowSteps; ++u) {
    const T* e = reinterpret_cast<const T*>(&raw[u]);
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = ElemTraits<T>::to_float(e[i]);
    f(first + u * kRowsPerStep, chunk, x);
  }
}
template <int D, class V>
__device__ __forceinline__ V row_lanes_sum(V v) {
#pragma unroll
  for (int o = D / 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T, int D>
__global__ void knorm_rows_kernel(const T* k, int64_t head_stride, int64_t row_stride, int64_t n,
                                  float* scores) {
  float* out = scores + blockIdx.y * n;
  for_key_row_groups<T, D>(k, head_stride, row_stride, n,
                           [&](int64_t j, int chunk, const float(&x)[8]) {
                             float ss = 0.f;
#pragma unroll
                             for (int i = 0; i < 8; ++i) ss += x[i] * x[i];
                             ss = row_lanes_sum<D>(ss);
                             float norm = sqrtf(ss);
                             // Rare: a row of the warp left float's range; the whole warp takes the
                             // double sum (its shuffles need every lane), and only the rows that
                             // left keep it. Rows past n hold zeros, which also take this branch,
                             // at most once a head.
                             const bool redo = !sum_sq_fits_float(ss);
                             if (__any_sync(0xffffffffu, redo)) {
                               double sd = 0.0;
#pragma unroll
                               for (int i = 0; i < 8; ++i) sd += static_cast<double>(x[i]) * x[i];
                               sd = row_lanes_sum<D>(sd);
                               if (redo) norm = static_cast<float>(sqrt(sd));
                             }
                             if (chunk == 0 && j < n) out[j] = -norm;
                           });
}

// keydiff pass 1: sums[h, :] += k_j / ||k_j|| over a block's rows (float atomics; the direction
// is all that matters, and its rounding is far below bf16 input precision).
template <class T>
__global__ void keydiff_mean_kernel(const T* k, int64_t head_stride, int64_t row_stride, int64_t n,
                                    int d, int rows_per_block, float* sums) {
  extern __shared__ float acc_s[];  // [d]
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int c = threadIdx.x; c < d; c += blockDim.x) acc_s[c] = 0.f;
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t end = min(n, begin + rows_per_block);
  float local[8] = {};  // lane's 8 columns per 256-column stripe, d <= 256
  for (int64_t j = begin + warp; j < end; j += warps) {
    const T* row = k + h * head_stride + j * row_stride;
    const float ss = row_sum_sq<float>(row, d, lane);  // warp-uniform
    // A row whose float sum leaves the normal range (sum_sq_fits_float) is normalized in
    // double, so huge and tiny keys count in the mean like the others (the cpu backend's double
    // mean); a zero row adds nothing.
    const bool in_float = sum_sq_fits_float(ss);
    const double sd = in_float ? 0.0 : row_sum_sq<double>(row, d, lane);  // warp-uniform
    if (lane < d / 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + lane * 8);
      const T* e = reinterpret_cast<const T*>(&raw);
      if (in_float) {
        const float inv = rsqrtf(ss);
#pragma unroll
        for (int i = 0; i < 8; ++i) local[i] += ElemTraits<T>::to_float(e[i]) * inv;
      } else {
        const double inv = sd > 0.0 ? 1.0 / sqrt(sd) : 0.0;
#pragma unroll
        for (int i = 0; i < 8; ++i)
          local[i] += static_cast<float>(static_cast<double>(ElemTraits<T>::to_float(e[i])) * inv);
      }
    }
  }
  if (lane < d / 8)
#pragma unroll
    for (int i = 0; i < 8; ++i) atomicAdd(&acc_s[lane * 8 + i], local[i]);
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) atomicAdd(&sums[h * d + c], acc_s[c]);
}

// keydiff pass 2: -cos(k_j, mean); the mean's 1/n cancels in the cosine.
__device__ __forceinline__ float keydiff_score(float kk, float km, float mm) {
  const float den = sqrtf(kk) * sqrtf(mm);
  return den == 0.f ? 0.f : -km / den;  // NaN (a NaN key or mean) stays NaN
}
// The same from a key's ||k||^2 and k . mean summed in double: the rows whose float ||k||^2 left
// the normal range (sum_sq_fits_float), whose float cosine would be 0 or -0 (a key of ~1e20
// or ~1e-26 has a direction like any other). |k . mean| <= ||k|| n stays in float's range once
// ||k||^2 does, so the common rows need no double term.
__device__ __forceinline__ float keydiff_score(double kk, double km, float mm) {
  const double den = sqrt(kk) * sqrt(static_cast<double>(mm));
  return den == 0.0 ? 0.f : static_cast<float>(-km / den);
}
template <class T>
__global__ void keydiff_score_kernel(const T* k, int64_t head_stride, int64_t row_stride, int hkv,
                                     int64_t n, int d, const float* sums, float* scores) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= hkv * n) return;
  const int64_t h = warp / n, j = warp % n;
  const T* row = k + h * head_stride + j * row_stride;
  const float* m = sums + h * d;
  float kk = 0.f, km = 0.f, mm = 0.f;
  for (int c = lane; c < d / 8; c += 32) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c * 8);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float x = ElemTraits<T>::to_float(e[i]), y = m[c * 8 + i];
      kk += x * x;
      km += x * y;
      mm += y * y;
    }
  }
  kk = warp_sum(kk);
  km = warp_sum(km);
  mm = warp_sum(mm);
  float score = keydiff_score(kk, km, mm);
  if (!sum_sq_fits_float(kk)) {  // warp-uniform
    double kd = 0.0, md = 0.0;
    for (int c = lane; c < d / 8; c += 32) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + c * 8);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const double x = ElemTraits<T>::to_float(e[i]);
        kd += x * x;
        md += x * m[c * 8 + i];
      }
    }
    score = keydiff_score(warp_sum(kd), warp_sum(md), mm);
  }
  if (lane == 0) scores[warp] = score;
}
// The same at head dims 64 / 128 / 256 in row groups (for_key_row_groups).
template <class T, int D>
__global__ void keydiff_score_rows_kernel(const T* k, int64_t head_stride, int64_t row_stride,
                                          int64_t n, const float* sums, float* scores) {
  const float* m = sums + blockIdx.y * D;
  float* out = scores + blockIdx.y * n;
  for_key_row_groups<T, D>(k, head_stride, row_stride, n,
                           [&](int64_t j, int chunk, const float(&x)[8]) {
                             float kk = 0.f, km = 0.f, mm = 0.f;
#pragma unroll
                             for (int i = 0; i < 8; ++i) {
                               const float y = m[chunk * 8 + i];
                               kk += x[i] * x[i];
                               km += x[i] * y;
                               mm += y * y;
                             }
                             kk = row_lanes_sum<D>(kk);
                             km = row_lanes_sum<D>(km);
                             mm = row_lanes_sum<D>(mm);
                             float score = keydiff_score(kk, km, mm);
                             // Rare: as knorm_rows_kernel, the whole warp takes the double sums
                             // when one of its rows left float's range.
                             const bool redo = !sum_sq_fits_float(kk);
                             if (__any_sync(0xffffffffu, redo)) {
                               double kd = 0.0, md = 0.0;
#pragma unroll
                               for (int i = 0; i < 8; ++i) {
                                 kd += static_cast<double>(x[i]) * x[i];
                                 md += static_cast<double>(x[i]) * m[chunk * 8 + i];
                               }
                               kd = row_lanes_sum<D>(kd);
                               md = row_lanes_sum<D>(md);
                               if (redo) score = keydiff_score(kd, md, mm);
                             }
                             if (chunk == 0 && j < n) out[j] = score;
                           });
}

__global__ void pool_kernel(const float* in, float* out, int rows, int64_t n, int kernel,
                            bool is_max, const float* mul) {
  grid_dependency_wait();  // launched as a dependent of the scoring pass that wrote `in`
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  const int64_t h = i / n, j = i % n;
  const float* r = in + h * n;
  const int half = kernel / 2;
  float acc = is_max ? -INFINITY : 0.f;
  for (int o = -half; o <= half; ++o) {
    const int64_t x = j + o;
    if (x < 0 || x >= n) continue;  // max pads -inf, avg pads zeros (counted in the divisor)
    acc = is_max ? nan_max(acc, r[x]) : acc + r[x];  // a NaN score stays in its window
  }
  const float pooled = is_max ? acc : acc / static_cast<float>(kernel);
  out[i] = mul ? pooled * mul[i] : pooled;
}

__global__ void head_mean_kernel(const float* in, float* out, int rows, int64_t n, float scale) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float acc = 0.f;
  for (int h = 0; h < rows; ++h) acc += in[h * n + j];
  acc *= scale;
  for (int h = 0; h < rows; ++h) out[h * n + j] = acc;
}

int blocks_for(int64_t threads, int per_block) {
  return static_cast<int>((threads + per_block - 1) / per_block);
}
// The grid of a row-group kernel (for_key_row_groups): n keys a head, one head a grid row.
template <int D>
dim3 key_row_grid(int64_t n, int num_kv_heads) {
  const int64_t warps = (n + kKeyRowsPerWarp<D> - 1) / kKeyRowsPerWarp<D>;
  return dim3(blocks_for(warps * 32, 256), num_kv_heads);
}
bool key_rows_fit(int d) {
  return d == 64 || d == 128 || d == 256;
}

}  // namespace

cudaError_t launch_pool(const float* in, float* out, int rows, int64_t n, int kernel, bool is_max,
                        const float* mul, cudaStream_t stream) {
  if (kernel < 1 || kernel % 2 == 0 || in == out) return cudaErrorInvalidValue;
  if (rows * n == 0) return cudaSuccess;
  return launch_pdl(pool_kernel, dim3(blocks_for(rows * n, 256)), dim3(256), 0, stream, in, out,
                    rows, n, kernel, is_max, mul);
}

cudaError_t launch_head_mean(const float* in, float* out, int rows, int64_t n, float scale,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  head_mean_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, out, rows, n, scale);
  return cudaGetLastError();
}

cudaError_t launch_knorm(Elem elem, const void* k, int64_t head_stride, int64_t row_stride,
                         int num_kv_heads, int64_t n, int d, float* scores, cudaStream_t stream) {
  if (d % 8 != 0) return cudaErrorInvalidValue;
  const int64_t rows = static_cast<int64_t>(num_kv_heads) * n;
  if (rows == 0) return cudaSuccess;
  return with_elem(elem, [&](auto t) {
    using T = typename decltype(t)::type;
    const T* kt = static_cast<const T*>(k);
    if (key_rows_fit(d)) {
      return with_int<64, 128, 256>(d, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        knorm_rows_kernel<T, D><<<key_row_grid<D>(n, num_kv_heads), 256, 0, stream>>>(
            kt, head_stride, row_stride, n, scores);
        return cudaGetLastError();
      });
    }
    knorm_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(kt, head_stride, row_stride,
                                                                 num_kv_heads, n, d, scores);
    return cudaGetLastError();
  });
}

size_t keydiff_scratch_bytes(int num_kv_heads, int d) {
  return sizeof(float) * static_cast<size_t>(num_kv_heads) * d;
}

cudaError_t launch_keydiff(Elem elem, const void* k, int64_t head_stride, int64_t row_stride,
                           int num_kv_heads, int64_t n, int d, float* scores, void* scratch,
                           cudaStream_t stream) {
  if (d % 8 != 0 || d > 256) return cudaErrorInvalidValue;
  const int64_t rows = static_cast<int64_t>(num_kv_heads) * n;
  if (rows == 0) return cudaSuccess;
  float* sums = static_cast<float*>(scratch);
  cudaError_t err = cudaMemsetAsync(sums, 0, keydiff_scratch_bytes(num_kv_heads, d), stream);
  if (err != cudaSuccess) return err;
  constexpr int kRowsPerBlock = 1024;
  const dim3 grid(static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock), num_kv_heads);
  return with_elem(elem, [&](auto t) {
    using T = typename decltype(t)::type;
    const T* kt = static_cast<const T*>(k);
    keydiff_mean_kernel<<<grid, 256, d * sizeof(float), stream>>>(kt, head_stride, row_stride, n, d,
                                                                  kRowsPerBlock, sums);
    if (key_rows_fit(d)) {
      return with_int<64, 128, 256>(d, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        keydiff_score_rows_kernel<T, D><<<key_row_grid<D>(n, num_kv_heads), 256, 0, stream>>>(
            kt, head_stride, row_stride, n, sums, scores);
        return cudaGetLastError();
      });
    }
    keydiff_score_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(
        kt, head_stride, row_stride, num_kv_heads, n, d, sums, scores);
    return cudaGetLastError();
  });
}

}  // namespace kvevict::cuda::detail
