// Streaming scoring pass (SPEC section 2): with a and LSE of the window known, one more pass over
// K and V computes every per-(query, token) term and sums it over the window queries of the
// group, without materializing p, z or any [w, n, d] tensor.
//
// Grid: (KV head, row block, key chunk); the warp layout is the forward's (window_traits.cuh).
// Per key tile, each warp recomputes its slab's logits z = q.k * scale (tensor cores), and, for
// the terms that need the attention output, <a_t, v_j> as a second small matrix product with a
// rounded to the input dtype; ||a||^2 is taken from the same rounded a, so a2 + v2 - 2 av is the
// exact squared distance from v_j to the stored a (up to float accumulation). Rounding a adds an
// error of the order the forward's 16-bit P already put in a (2^-9 relative for bf16), while a
// hi + lo split of a would double this pass's matrix work (docs/GPU_NOTES.md).
// p = exp2(z log2 e - LSE log2 e), one MUFU op. Every term is split as u + ||v_j||^2 w
// (TermTraits), so ||v_j||^2 (on the tensor cores, once per key) enters after the row sums.
// dropkv's r = p / (1 - p) is p + p^2 + p^3 when a warp vote finds every p of the tile <= 2^-8,
// else exact with 1 - p = -expm1 where p is large (SPEC: p near 1 must stay exact). u and w are
// summed over the thread's two rows, the warp's 16 rows (recursive halving) and the block's
// slabs (shared memory), then written once per key. Tiles run backwards through each chunk
// (the forward's last tiles may still be in L2), three cp.async stages deep where two blocks
// fit, one barrier per tile. Blocks of 33-128 rows run the wgmma version (score_pass_wgmma.cu)
// where the build has it.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/launchers.h"
#include "cuda/mma_tile.cuh"
#include "cuda/pass_terms.cuh"
#include "cuda/score_pass_block.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_plan.h"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {
namespace {

template <class Tr, PairTerm kTerm>
__global__ void __launch_bounds__(Tr::kThreads, pass_min_blocks<Tr>())
    score_pass_kernel(PassParams p) {
  // One wave: the pooling kernel that may follow can be scheduled as this grid drains.
  launch_dependents();
  extern __shared__ __align__(16) unsigned char smem[];
  score_pass_block<Tr, kTerm>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
}

template <class Tr>
cudaError_t dispatch_term(const PassParams& p, int chunks, cudaStream_t stream) {
  return with_pair_term(p.s.term, [&](auto term) {
    constexpr PairTerm kTerm = decltype(term)::value;
    return launch_pass_kernel(score_pass_kernel<Tr, kTerm>, pass_smem_bytes<Tr, kTerm>(),
                              Tr::kThreads, p, chunks, stream);
  });
}

}  // namespace

cudaError_t launch_pass_mma(const PassParams& p, int slabs, int chunks, cudaStream_t stream) {
  return with_elem(p.s.win.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return with_int<64, 128, 256>(p.s.win.head_dim, [&](auto d) {
      constexpr int D = decltype(d)::value;
      return with_int<1, 2, 4>(slabs, [&](auto sl) -> cudaError_t {
        constexpr int S = decltype(sl)::value;
        if constexpr (S <= max_slabs(D)) {
          return dispatch_term<WindowTraits<T, D, S>>(p, chunks, stream);
        } else {
          return cudaErrorInvalidValue;
        }
      });
    });
  });
}

}  // namespace kvevict::cuda::detail
