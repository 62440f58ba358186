// One launch for the window scoring of a small layer (issue 16's "scoring at small n"): the
// mma.sync forward, the split merge and the scoring pass of window_forward.cu and score_pass.cu run
// as one kernel, whose thread-block clusters hold the key splits of one KV head.
//
// Grid: (KV head, 1, split), cluster (1, 1, splits): a block runs the forward over its split and
// writes its partial, the cluster barrier orders those writes before the merge, the cluster's
// warps merge the head's rows (a, lse and the top-key records, window_merge_row), a second barrier
// orders them before the pass, and the block scores the keys of its own split (score_pass_block).
// The three bodies are the separate kernels' own (window_forward_block.cuh, score_pass_block.cuh);
// the keys split differently (16 splits at most, one block per SM), so the scores agree with the
// three launches to float rounding, not bit for bit (tests check both against the reference).
//
// What it was to save at n = 4K (Llama-3.1-8B layer, dropkv w = 8, H100, ncu 2026-12-06 (e)): two
// of the three launches with their ramps and tails (forward 13.1 us, merge 10.8 us, pass 15.8 us),
// and the pass's second read of K and V, from L2. Measured (H100, 2026-12-06 (f), gpu_score_bench
// --small-n): 1.35-1.65x SLOWER than the three launches at 4K-32K, the gap growing with n, so the
// kernel is off by default (kernel_variants.h set_window_score_fused; docs/GPU_NOTES.md says why
// and what to try). One block per SM, at most 16 splits a head.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/launchers.h"
#include "cuda/pass_terms.cuh"
#include "cuda/score_pass_block.cuh"
#include "cuda/window_forward_block.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_plan.h"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {
namespace {

// 0 off (the default: measured slower), 1 auto (K and V within half the L2), 2 wherever the plan
// fits (tests, A/B).
std::atomic<int> g_fused_mode{0};

// Clusters of up to 16 blocks (non-portable; 8 where the device schedules no 16).
constexpr int kMaxClusterSplits = 16;

template <class Tr, PairTerm kTerm>
constexpr size_t fused_smem_bytes() {
  constexpr size_t fwd = forward_smem_bytes<Tr, TermTraits<kTerm>::kNeedsOut>();
  constexpr size_t pass = pass_smem_bytes<Tr, kTerm>();
  return fwd > pass ? fwd : pass;
}

template <class Tr, PairTerm kTerm>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    window_score_fused_kernel(ForwardParams fp, PassParams pp, float* out, float* lse) {
  using T = typename Tr::T;
  static_assert(fused_smem_bytes<Tr, kTerm>() <= 227 * 1024, "shared memory budget");
  // One wave of clusters: a kernel launched behind this one (pooling) may be scheduled as it
  // drains.
  launch_dependents();
  extern __shared__ __align__(16) unsigned char smem[];
  const int hk = blockIdx.x, split = blockIdx.z;
  window_forward_block<Tr, TermTraits<kTerm>::kNeedsOut, kHasTopTerm<kTerm>>(fp, hk, 0, split,
                                                                             smem);
  cluster_barrier();  // every split's partial of this head is written
  const int warp = threadIdx.x >> 5;
  for (int r = split * Tr::kWarps + warp; r < fp.rows; r += fp.splits * Tr::kWarps)
    window_merge_row<T>(fp, Tr::kRows, out, lse, hk * fp.rows + r);
  cluster_barrier();  // a, lse and the top records of every row are written
  score_pass_block<Tr, kTerm>(pp, hk, 0, split, smem);
}

// How many clusters of 16 and of 8 blocks of this kernel the current device keeps active at once
// (0: none fits), cached per device. The caller takes 16-block clusters only where all of a
// layer's KV heads get one at once: a cluster left for a second wave would double the time.
struct ClusterRoom {
  int of16 = 0, of8 = 0;
};
template <class Tr, PairTerm kTerm>
ClusterRoom cluster_room() {
  static std::mutex mu;
  static ClusterRoom cached[64];
  static bool known[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return {};
  std::lock_guard<std::mutex> lock(mu);
  if (known[dev]) return cached[dev];
  auto kernel = window_score_fused_kernel<Tr, kTerm>;
  constexpr size_t smem = fused_smem_bytes<Tr, kTerm>();
  ClusterRoom room;
  if (set_kernel_smem(kernel, smem) == cudaSuccess &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
          cudaSuccess) {
    for (const int c : {kMaxClusterSplits, 8}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1, 1, c);
      cfg.blockDim = dim3(Tr::kThreads);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 1;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = c;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) clusters = 0;
      (c == 8 ? room.of8 : room.of16) = clusters;
    }
  }
  (void)cudaGetLastError();  // a refused attribute or query leaves no error behind
  cached[dev] = room;
  known[dev] = true;
  return room;
}

// One row block of at most 64 rows (4 slabs of 16), one block per SM, at most max_splits splits a
// head (a cluster's blocks); false where the kernels are not built (head dim 256) or the rows need
// several row blocks.
bool fused_plan(const WindowArgs& a, int sm_count, int max_splits, WindowPlan* plan) {
  if (a.num_kv_heads <= 0 || a.num_q_heads % a.num_kv_heads != 0) return false;
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  const int group = a.num_q_heads / a.num_kv_heads;
  *plan = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count, 1, 4, max_splits);
  return plan->row_blocks == 1;
}

// Auto: the pass re-reads K and V right after the forward; within half the L2 they are still
// there, and the launches saved are a large part of the time.
bool fused_wanted(const WindowArgs& a) {
  const int mode = g_fused_mode.load(std::memory_order_relaxed);
  if (mode == 0) return false;
  if (mode == 2) return true;
  const double kv_bytes = 2.0 * a.num_kv_heads * static_cast<double>(a.n) * a.head_dim * 2;
  const int l2 = current_l2_bytes();
  return l2 > 0 && kv_bytes <= 0.5 * l2;
}

template <class Tr, PairTerm kTerm>
cudaError_t launch_fused_config(const WindowArgs& a, WindowPlan plan, const ScorePassArgs& sa,
                                float* out, float* lse, TopRow* top, void* scratch, float* scores,
                                int sm_count, cudaStream_t stream) {
  if (kHasTopTerm<kTerm> && top == nullptr) return cudaErrorNotSupported;
  const ClusterRoom room = cluster_room<Tr, kTerm>();
  const int cap = room.of16 >= a.num_kv_heads ? kMaxClusterSplits : room.of8 > 0 ? 8 : 0;
  if (cap == 0) return cudaErrorNotSupported;
  if (plan.splits > cap) fused_plan(a, sm_count, cap, &plan);  // same rows: only the splits move
  // The attributes belong to the current device's context: set them at every launch, as the other
  // launchers do.
  auto kernel = window_score_fused_kernel<Tr, kTerm>;
  constexpr size_t smem = fused_smem_bytes<Tr, kTerm>();
  cudaError_t err = set_kernel_smem(kernel, smem);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return err;
  constexpr bool kWithV = TermTraits<kTerm>::kNeedsOut;
  ForwardParams fp = forward_params(a, plan, kWithV, scratch);
  fp.top = top;
  const PassParams pp = pass_params(sa, fp.group, plan, scores);

  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(a.num_kv_heads, 1, plan.splits);
  cfg.blockDim = dim3(Tr::kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = plan.splits;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // A cluster launch the device refuses after all falls back to the three launches, its error
  // cleared so that they do not report it as their own.
  if (cudaLaunchKernelEx(&cfg, kernel, fp, pp, out, lse) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaErrorNotSupported;
  }
  return cudaSuccess;
}

}  // namespace

size_t window_score_fused_scratch_bytes(const WindowArgs& a, bool with_out, int sm_count) {
  WindowPlan plan;
  if (!fused_plan(a, sm_count, kMaxClusterSplits, &plan)) return 0;
  return forward_partials_bytes(a, plan, with_out);
}

cudaError_t launch_window_score_fused(const ScorePassArgs& sa, float* out, float* lse, TopRow* top,
                                      void* scratch, size_t scratch_bytes, float* scores,
                                      int sm_count, cudaStream_t stream) {
  const WindowArgs& a = sa.win;
  WindowPlan plan;
  if (!fused_wanted(a) || !fused_plan(a, sm_count, kMaxClusterSplits, &plan) ||
      !wgmma_kernels_available())
    return cudaErrorNotSupported;
  const bool needs_out = pair_term_needs_out(sa.term);
  if (needs_out && out == nullptr) return cudaErrorInvalidValue;
  if (scratch_bytes < forward_partials_bytes(a, plan, needs_out)) return cudaErrorInvalidValue;
  return with_elem(a.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return with_int<64, 128>(a.head_dim, [&](auto d) {
      constexpr int D = decltype(d)::value;
      return with_int<1, 2, 4>(plan.slabs, [&](auto sl) {
        using Tr = WindowTraits<T, D, decltype(sl)::value>;
        return with_pair_term(sa.term, [&](auto term) {
          return launch_fused_config<Tr, decltype(term)::value>(a, plan, sa, out, lse, top, scratch,
                                                                scores, sm_count, stream);
        });
      });
    });
  });
}

}  // namespace kvevict::cuda::detail

namespace kvevict::cuda {
int window_score_fused_active_clusters(int cluster_blocks) {
  using Tr = detail::WindowTraits<__nv_bfloat16, 128, 2>;
  const detail::ClusterRoom room = detail::cluster_room<Tr, detail::PairTerm::kDropKV>();
  return cluster_blocks == 16 ? room.of16 : cluster_blocks == 8 ? room.of8 : 0;
}
void set_window_score_fused(int mode) {
  detail::g_fused_mode.store(mode < 0 ? 0 : mode > 2 ? 2 : mode);
}
}  // namespace kvevict::cuda
