// Decode-time step scores (SPEC section 5, DecodeEvictor::accumulate on the GPU): every cached row
// of every segment gets the step's w = 1 score, averaged over the G query heads of its KV head,
// added to (tova: written into) the row's running accumulator. The terms are the shared
// kvevict::terms formulas (score_terms.h), in float.
// One warp per row: lanes split the head dim, shuffles reduce q.k, ||v||^2 and <a, v>. With the
// logits z exported by the decode attention (the default), q.k is not recomputed: the attention
// sum (h2o, tova) reads z and lse alone, the other terms V and a (no K).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kvevict/score_terms.h"
#include "model_cuda/launchers.h"

namespace kvevict::gpu::detail {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__global__ void __launch_bounds__(kWarps * 32) decode_scores_kernel(DecodeScoreArgs a) {
  const int seg = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t len = a.seg_len[seg];
  if (j >= len) return;
  const int G = a.Hq / a.Hkv;
  const int b = seg / a.Hkv, g = seg % a.Hkv;
  const int64_t row = a.seg_off[seg] + j;
  const bf16* k = a.k + row * a.d;
  const bf16* v = a.v + row * a.d;
  const bool need_qk = a.z == nullptr;  // warp-uniform
  const bool need_av = a.kind != 0;     // every term but the attention sum reads a and v
  float v2 = 0.f;
  if (need_av) {
    for (int i = lane; i < a.d; i += 32) {
      const float vi = __bfloat162float(v[i]);
      v2 += vi * vi;
    }
    v2 = warp_sum(v2);
  }
  float acc = 0.f;
  for (int hq = 0; hq < G; ++hq) {
    const int64_t h = static_cast<int64_t>(b) * a.Hq + g * G + hq;
    const bf16* q = a.q + h * a.d;
    const float* out = a.out + h * a.d;
    float dot = 0.f, a2 = 0.f, av = 0.f;
    if (need_qk || need_av) {
      for (int i = lane; i < a.d; i += 32) {
        if (need_qk) dot += __bfloat162float(q[i]) * __bfloat162float(k[i]);
        if (need_av) {
          const float ai = out[i], vi = __bfloat162float(v[i]);
          a2 += ai * ai;
          av += ai * vi;
        }
      }
      dot = warp_sum(dot);
      a2 = warp_sum(a2);
      av = warp_sum(av);
    }
    const float z = need_qk ? dot * a.scale : a.z[row * G + hq];
    const float lse = a.lse[h];
    const float p = terms::prob(z, lse);
    float s = 0.f;
    switch (a.kind) {
      case 0:  // attention sum (h2o), tova
        s = terms::attention_term(p);
        break;
      case 1:  // dropkv
        s = terms::dropkv_term(p, terms::one_minus_prob(z, lse, a.one_minus_p_floor), a2, v2, av);
        break;
      case 2:
        s = terms::obcache_v_term(p, v2);
        break;
      case 3:
        s = terms::obcache_k_term(p, z, a2, v2, av);
        break;
      default:
        s = terms::obcache_vk_term(p, z, a2, v2, av);
        break;
    }
    acc += s;
  }
  if (lane == 0) {
    const float mean = acc / static_cast<float>(G);
    a.acc[row] = a.replace ? mean : a.acc[row] + mean;
  }
}

}  // namespace

cudaError_t launch_decode_scores(const DecodeScoreArgs& a, int64_t max_len, cudaStream_t stream) {
  if (a.B <= 0 || a.Hkv <= 0 || a.Hq % a.Hkv != 0) return cudaErrorInvalidValue;
  if (max_len <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((max_len + kWarps - 1) / kWarps),
                  static_cast<unsigned>(a.B * a.Hkv));
  decode_scores_kernel<<<grid, kWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace kvevict::gpu::detail
