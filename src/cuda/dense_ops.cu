// The element-wise and row-wise kernels of the decoder (everything but the GEMMs and attention):
// embedding gather, RMSNorm (and gemma3's post-norm + residual add), RoPE + cache append (with
// gemma3's per-head q/k norm and the ring rows of sliding-window layers), the gated FFN
// activations (SwiGLU, GELU-tanh), logit soft-capping, layout changes, argmax, and the
// counter-based random fill that reproduces Model::random on the device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/model_launchers.h"
#include "cuda/rope_append.cuh"
#include "cuda/row_norm.cuh"

namespace kvevict::gpu::detail {
namespace {

using cuda::detail::grid_dependency_wait;
using cuda::detail::launch_dependents;
using cuda::detail::launch_pdl;
using cuda::detail::warp_sum;

template <int kThreads>
__device__ float block_sum(float x, float* red) {
  x = warp_sum(x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = x;
  __syncthreads();
  float s = 0.f;
  if (threadIdx.x < 32) {
    s = warp_sum(threadIdx.x < kThreads / 32 ? red[threadIdx.x] : 0.f);
    if (threadIdx.x == 0) red[0] = s;
  }
  __syncthreads();
  s = red[0];
  __syncthreads();
  return s;
}

__global__ void embed_kernel(const bf16* embd, const int32_t* tokens, int D, float mul, float* x) {
  const int t = blockIdx.x;
  const bf16* e = embd + static_cast<int64_t>(tokens[t]) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    x[static_cast<int64_t>(t) * D + i] = __bfloat162float(e[i]) * mul;
}

// 1 / sqrt(mean(row^2) + eps) of one row of D floats, for every thread of the block (row_norm.cuh
// spells its roundings out: the GEMV's post-norm fold repeats them).
__device__ __forceinline__ float row_inv_rms(const float* row, int D, float eps, float* red) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < D; i += kRowThreads) ss = add_square(ss, row[i]);
  ss = block_sum<kRowThreads>(ss, red);
  return inv_rms_of(ss, D, eps);
}

// The row kernels and rope_append_kernel are launched as programmatic dependents (launch_pdl) and
// let the next kernel start at once: in the decode step a GEMV after them loads its weights while
// they run. They wait for the previous kernel before reading what it wrote.
__global__ void __launch_bounds__(kRowThreads)
    rms_norm_kernel(const float* x, int64_t x_stride, int D, const float* w, float eps, bf16* out) {
  __shared__ float red[32];
  launch_dependents();
  grid_dependency_wait();
  const int t = blockIdx.x;
  const float* xr = x + t * x_stride;
  const float scale = row_inv_rms(xr, D, eps, red);
  for (int i = threadIdx.x; i < D; i += kRowThreads)
    out[static_cast<int64_t>(t) * D + i] = __float2bfloat16_rn(xr[i] * scale * w[i]);
}

__global__ void __launch_bounds__(kRowThreads)
    rms_norm_add_kernel(const float* o, int D, const float* w, float eps, float* x) {
  __shared__ float red[32];
  launch_dependents();
  grid_dependency_wait();
  const int64_t t = blockIdx.x;
  const float* orow = o + t * D;
  const float scale = row_inv_rms(orow, D, eps, red);
  for (int i = threadIdx.x; i < D; i += kRowThreads)
    x[t * D + i] = post_norm_add(x[t * D + i], orow[i], scale, w[i]);
}

// One block per token. The angles are formed in double: at position 131071 a float angle would
// be off by up to ~0.008 rad (the CPU path forms them in double too, ops.cpp rope()).
__global__ void __launch_bounds__(1024) rope_append_kernel(RopeAppendArgs a) {
  extern __shared__ float cs[];  // [d/2] cos, then [d/2] sin, then [Hq + Hkv] q/k norm scales
  __shared__ int64_t row_base[64];
  const int t = blockIdx.x, half = a.d / 2;
  const int Hq = a.Hq, Hkv = a.Hkv, d = a.d;
  launch_dependents();
  // The angles before the wait: the positions are copied in before the step's first kernel.
  const int32_t p = a.pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 r = rope_cos_sin(p, a.inv_freq[i]);
    cs[i] = r.x;
    cs[half + i] = r.y;
  }
  grid_dependency_wait();  // the projection, the segment lengths
  for (int g = threadIdx.x; g < Hkv; g += blockDim.x) {
    const int seg = (a.decode ? t : a.seq) * Hkv + g;
    row_base[g] = a.decode ? decode_append_row(a, seg, p) : a.seg_off[seg] + a.first + t;
  }
  const int64_t width = static_cast<int64_t>(Hq + 2 * Hkv) * d;
  const bf16* src = a.qkv + t * width;
  auto load = [&](int col) { return rope_value(src[col], a.bias, col); };
  // gemma3's q/k norm: one warp per head forms 1 / rms of the head (as rms_norm over d).
  float* head_scale = cs + a.d;
  const bool qk_norm = a.q_norm != nullptr;
  if (qk_norm) {
    const int lane = threadIdx.x & 31;
    for (int h = threadIdx.x >> 5; h < Hq + Hkv; h += blockDim.x >> 5) {
      float ss = 0.f;
      for (int i = lane; i < d; i += 32) ss = add_square(ss, load(h * d + i));
      ss = warp_sum(ss);
      if (lane == 0) head_scale[h] = inv_rms_of(ss, d, a.norm_eps);
    }
  }
  __syncthreads();
  // q and k: one thread per rotated pair.
  for (int idx = threadIdx.x; idx < (Hq + Hkv) * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    int ia, ib;
    rope_pair_cols(a.neox, half, i, &ia, &ib);
    const int col = h * d;
    float x0 = load(col + ia), x1 = load(col + ib);
    if (qk_norm) {
      const float* nw = h < Hq ? a.q_norm : a.k_norm;
      x0 = head_normed(x0, head_scale[h], nw[ia]);
      x1 = head_normed(x1, head_scale[h], nw[ib]);
    }
    const float2 r = rope_rotated(x0, x1, make_float2(cs[i], cs[half + i]));
    const bf16 r0 = __float2bfloat16_rn(r.x);
    const bf16 r1 = __float2bfloat16_rn(r.y);
    if (h < Hq) {
      bf16* dst = a.head_major ? a.q_out + (static_cast<int64_t>(h) * a.T + t) * d
                               : a.q_out + (static_cast<int64_t>(t) * Hq + h) * d;
      dst[ia] = r0;
      dst[ib] = r1;
    } else {
      bf16* dst = a.k_cache + row_base[h - Hq] * d;
      dst[ia] = r0;
      dst[ib] = r1;
    }
  }
  for (int idx = threadIdx.x; idx < Hkv * d; idx += blockDim.x) {
    const int g = idx / d, i = idx % d;
    a.v_cache[row_base[g] * d + i] = __float2bfloat16_rn(load((Hq + Hkv) * d + idx));
  }
  for (int g = threadIdx.x; g < Hkv; g += blockDim.x) {
    a.pos_cache[row_base[g]] = p;
    if (a.acc_cache != nullptr) a.acc_cache[row_base[g]] = 0.0f;  // as cache_append_rows
  }
  if (a.decode) {
    __syncthreads();  // every thread has used row_base before the lengths move
    for (int g = threadIdx.x; g < Hkv; g += blockDim.x) {
      int32_t& len = a.seg_len[t * Hkv + g];
      len = appended_length(len, a.ring);
    }
  }
}

// act(g) * u of one feature, rounded to bf16 (ops.cpp gated_activation's formulas).
template <bool kGeluTanh>
__device__ __forceinline__ bf16 gated_value(bf16 g_in, bf16 u_in) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  const float g = __bfloat162float(g_in), u = __bfloat162float(u_in);
  const float act = kGeluTanh ? 0.5f * g * (1.0f + tanhf(kC * (g + 0.044715f * g * g * g)))
                              : g / (1.0f + __expf(-g));
  return __float2bfloat16_rn(act * u);
}

// h[t, f] = act(gu[t, f]) * gu[t, F + f], one feature a thread (any F).
template <bool kGeluTanh>
__global__ void gated_act_kernel(const bf16* gu, int64_t T, int F, bf16* h) {
  const int64_t n = T * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / F, f = i % F;
    h[i] = gated_value<kGeluTanh>(gu[t * 2 * F + f], gu[t * 2 * F + F + f]);
  }
}

// The same with 8 features a thread (F % 8 == 0): one 16-byte load of the gate half, one of the
// up half and one 16-byte store, and one index division a chunk instead of a 64-bit division and
// two 2-byte loads a feature. Each feature's value is formed as above: the same bits.
template <bool kGeluTanh>
__global__ void gated_act8_kernel(const bf16* gu, int64_t T, int F, bf16* h) {
  const int chunks = F / 8;
  const int64_t n = T * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // (a 32-bit division where the index fits: every prefill chunk of the supported models)
    const int64_t t =
        n <= INT32_MAX ? static_cast<uint32_t>(i) / static_cast<uint32_t>(chunks) : i / chunks;
    const int f = static_cast<int>(i - t * chunks) * 8;
    const bf16* row = gu + t * 2 * F;
    const uint4 graw = *reinterpret_cast<const uint4*>(row + f);
    const uint4 uraw = *reinterpret_cast<const uint4*>(row + F + f);
    const bf16* g = reinterpret_cast<const bf16*>(&graw);
    const bf16* u = reinterpret_cast<const bf16*>(&uraw);
    uint4 out;
    bf16* o = reinterpret_cast<bf16*>(&out);
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = gated_value<kGeluTanh>(g[k], u[k]);
    *reinterpret_cast<uint4*>(h + t * F + f) = out;
  }
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* logits, int64_t V, int32_t* ids) {
  __shared__ float best_v[32];
  __shared__ int32_t best_i[32];
  const float* row = logits + blockIdx.x * V;
  float bv = -INFINITY;
  int32_t bi = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < V; i += kArgmaxThreads) {
    const float x = row[i];
    if (x > bv) {  // strided scan: the first hit of a thread is its lowest id
      bv = x;
      bi = static_cast<int32_t>(i);
    }
  }
  auto better = [](float v1, int32_t i1, float v0, int32_t i0) {
    return v1 > v0 || (v1 == v0 && i1 < i0);
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) best_v[warp] = bv, best_i[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bv = best_v[lane];
    bi = best_i[lane];
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) ids[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
  }
}

// One block a row: nll[r] = logsumexp(logits[r, :V]) - logits[r, targets[r]] (logits_nll's value),
// from per-thread online (max, sum) pairs merged by shuffles. Any NaN in the row gives NaN.
__global__ void __launch_bounds__(kArgmaxThreads)
    row_nll_kernel(const float* logits, int64_t V, const int32_t* targets, float* nll) {
  __shared__ float part_m[32], part_s[32];
  __shared__ int part_nan[32];
  const float* row = logits + blockIdx.x * V;
  float m = -INFINITY, sum = 0.f;
  int nan = 0;
  for (int64_t i = threadIdx.x; i < V; i += kArgmaxThreads) {
    const float x = row[i];
    nan |= isnan(x);
    if (x > m) {
      sum = sum * expf(m - x) + 1.f;
      m = x;
    } else if (x != -INFINITY) {  // -inf adds nothing (and -inf - -inf would be NaN)
      sum += expf(x - m);
    }
  }
  auto merge = [](float& m0, float& s0, float m1, float s1) {
    const float mm = fmaxf(m0, m1);
    if (mm == -INFINITY) return;  // both empty
    s0 = s0 * expf(m0 - mm) + s1 * expf(m1 - mm);
    m0 = mm;
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    const float os = __shfl_xor_sync(0xffffffffu, sum, o);
    nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    merge(m, sum, om, os);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) part_m[warp] = m, part_s[warp] = sum, part_nan[warp] = nan;
  __syncthreads();
  if (warp == 0) {
    constexpr int kWarps = kArgmaxThreads / 32;
    m = lane < kWarps ? part_m[lane] : -INFINITY;
    sum = lane < kWarps ? part_s[lane] : 0.f;
    nan = lane < kWarps ? part_nan[lane] : 0;
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, m, o);
      const float os = __shfl_xor_sync(0xffffffffu, sum, o);
      nan |= __shfl_xor_sync(0xffffffffu, nan, o);
      merge(m, sum, om, os);
    }
    if (lane == 0) nll[blockIdx.x] = nan ? NAN : m + logf(sum) - row[targets[blockIdx.x]];
  }
}

// splitmix64, as in src/model/weights.cpp: element i of a tensor depends only on (seed, i).
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void random_uniform_kernel(uint64_t seed, float a, int64_t n, bf16* out,
                                      float* out_f32) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double u = static_cast<double>(mix(seed ^ mix(static_cast<uint64_t>(i))) >> 11) *
                     (1.0 / 9007199254740992.0);
    const float v = static_cast<float>((2.0 * u - 1.0) * a);
    if (out_f32 != nullptr) {
      out_f32[i] = v;
    } else {
      out[i] = __float2bfloat16_rn(v);
    }
  }
}

__global__ void fill_kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

}  // namespace

cudaError_t launch_embed(const bf16* embd, const int32_t* tokens, int T, int D, float mul, float* x,
                         cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  embed_kernel<<<T, 256, 0, stream>>>(embd, tokens, D, mul, x);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm(const float* x, int64_t x_stride, int T, int D, const float* w,
                            float eps, bf16* out, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  return launch_pdl(rms_norm_kernel, dim3(T), dim3(kRowThreads), 0, stream, x, x_stride, D, w, eps,
                    out);
}

cudaError_t launch_rms_norm_add(const float* o, int T, int D, const float* w, float eps, float* x,
                                cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  return launch_pdl(rms_norm_add_kernel, dim3(T), dim3(kRowThreads), 0, stream, o, D, w, eps, x);
}

cudaError_t launch_rope_append(const RopeAppendArgs& a, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (a.Hkv > 64 || a.d % 2 != 0 || (a.q_norm == nullptr) != (a.k_norm == nullptr) ||
      (a.ring > 0 && !a.decode))
    return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (a.d + (a.q_norm != nullptr ? a.Hq + a.Hkv : 0));
  // A decode step's few tokens: 1024 threads a token, so the 8B's 2,560 rotated pairs take 3 passes
  // of the block, not 10 dependent ones (11.7 us a layer at batch 1 under ncu, H100). Every value
  // is formed as with 256 threads: the outputs are the same bit for bit.
  return launch_pdl(rope_append_kernel, dim3(a.T), dim3(a.decode ? 1024 : 256), smem, stream, a);
}

cudaError_t launch_gated_act(const bf16* gu, int T, int F, bool gelu_tanh, bf16* h,
                             cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(T) * F;
  const bool vec = F % 8 == 0 && reinterpret_cast<uintptr_t>(gu) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(h) % 16 == 0;
  if (vec) {
    (gelu_tanh ? gated_act8_kernel<true>
               : gated_act8_kernel<false>)<<<grid_for(n / 8, 256), 256, 0, stream>>>(gu, T, F, h);
  } else {
    (gelu_tanh ? gated_act_kernel<true>
               : gated_act_kernel<false>)<<<grid_for(n, 256), 256, 0, stream>>>(gu, T, F, h);
  }
  return cudaGetLastError();
}

cudaError_t launch_softcap(float* logits, int64_t n, float cap, cudaStream_t stream) {
  if (!(cap > 0.f)) return cudaErrorInvalidValue;
  softcap_kernel<<<grid_for(n, 256), 256, 0, stream>>>(logits, n, cap);
  return cudaGetLastError();
}

cudaError_t launch_argmax(const float* logits, int R, int64_t V, int32_t* ids,
                          cudaStream_t stream) {
  if (R <= 0) return cudaSuccess;
  argmax_kernel<<<R, kArgmaxThreads, 0, stream>>>(logits, V, ids);
  return cudaGetLastError();
}

cudaError_t launch_row_nll(const float* logits, int R, int64_t V, const int32_t* targets,
                           float* nll, cudaStream_t stream) {
  if (R <= 0) return cudaSuccess;
  row_nll_kernel<<<R, kArgmaxThreads, 0, stream>>>(logits, V, targets, nll);
  return cudaGetLastError();
}

cudaError_t launch_random_uniform(uint64_t seed, float stddev, int64_t n, bf16* out, float* out_f32,
                                  cudaStream_t stream) {
  const float a = stddev * sqrtf(3.0f);  // uniform(-a, a) has this stddev (as weights.cpp)
  random_uniform_kernel<<<grid_for(n, 256), 256, 0, stream>>>(seed, a, n, out, out_f32);
  return cudaGetLastError();
}

cudaError_t launch_fill(float* out, int64_t n, float value, cudaStream_t stream) {
  fill_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

}  // namespace kvevict::gpu::detail
