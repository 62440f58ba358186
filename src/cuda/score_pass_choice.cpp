// Which scoring pass runs a layer (launchers.h launch_score_pass): the key-major wgmma pass
// (score_pass_keymajor.cu), the row-major wgmma pass (score_pass_wgmma.cu) or the mma.sync pass
// (score_pass.cu), with the split plan each wants. The candidates are kernels; the choice is here,
// in none of them.
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/kernel_variants.h"
#include "cuda/launchers.h"
#include "cuda/window_params.cuh"
#include "cuda/window_plan.h"
#include "kvevict/error.h"

namespace kvevict::cuda::detail {
namespace {

constexpr int kPassBlocksPerSm = 2;
// At most 64 rows a block: 128-row blocks (w = 32, G = 4) held 170 registers and 143 KB of shared
// memory, one block of 8 warps per SM, and the pass ran at 0.93 ms, latency-bound (ncu, v2). Two
// 64-row blocks per SM re-read K/V for the second row block, mostly from L2 (they run together).
constexpr int kPassSlabCap = 4;
// Up to 32 rows a KV head on the key-major pass (padded to 64 rows) from this many keys on
// (set_window_keymajor_small_rows mode 1): at 128K it beat the mma.sync pass by 3.4% and 5.3% in
// two runs, at 32K by -0.7% and 2.2%, and lost by 0.7-5.7% at 4K-16K (H100, 2026-12-06 (h)).
constexpr int64_t kKeyMajorSmallRowsMinKeys = 65536;
std::atomic<int> g_keymajor_small_rows{1};  // set_window_keymajor_small_rows

// Several row blocks add into the same keys: zero the scores first.
cudaError_t zero_if_accumulating(const PassParams& p, cudaStream_t stream) {
  if (!p.accumulate) return cudaSuccess;
  return cudaMemsetAsync(
      p.scores, 0, sizeof(float) * static_cast<size_t>(p.s.win.num_kv_heads) * p.s.win.n, stream);
}

}  // namespace

PassParams pass_params(const ScorePassArgs& sa, int group, const WindowPlan& plan, float* scores) {
  PassParams p;
  p.s = sa;
  p.group = group;
  p.rows = plan.rows;
  p.row_blocks = plan.row_blocks;
  p.keys_per_chunk = plan.keys_per_split;
  p.accumulate = plan.row_blocks > 1;
  p.scores = scores;
  return p;
}

cudaError_t launch_score_pass(const ScorePassArgs& sa, float* scores, int sm_count,
                              cudaStream_t stream) {
  const WindowArgs& a = sa.win;
  if (a.num_kv_heads <= 0 || a.num_q_heads % a.num_kv_heads != 0 || a.w <= 0 || a.w > a.n ||
      a.q_rows < a.w || sa.lse == nullptr || a.v == nullptr)
    return cudaErrorInvalidValue;
  const bool needs_out = pair_term_needs_out(sa.term);
  if (needs_out && sa.out == nullptr) return cudaErrorInvalidValue;
  if (sa.v_l1 != nullptr && sa.term != PairTerm::kProb) return cudaErrorInvalidValue;
  const int group = a.num_q_heads / a.num_kv_heads;
  WindowPlan plan = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count,
                                     kPassBlocksPerSm, kPassSlabCap);
  // Blocks of 33-128 rows run a wgmma pass (sm_90a builds). bf16 inputs take the key-major pass
  // (score_pass_keymajor.cu) for every term but obcache_vk (and vatp's ||v||_1): one block of 64 or
  // 128 rows per SM. The rest take the row-major wgmma pass, 64 or 128 rows a block: one block of
  // two warpgroups per SM, or two blocks of one. Measured at 128K (H200, session 4): w = 32 in one
  // 128-row block 0.506 ms against 0.550 in two 64-row blocks; w = 8 (32 rows padded to 64) 0.320
  // against the mma.sync pass's 0.282, so fewer than 33 rows stay on mma.sync, except on the
  // key-major pass (padded to 64 rows) in long layers: 0.3853 against 0.4068 ms at 128K (H100,
  // 2026-12-06 (h), kernel_variants.h set_window_keymajor_small_rows).
  enum class Pass { kMmaSync, kRowMajor, kKeyMajor } pass = Pass::kMmaSync;
  const int small_rows = g_keymajor_small_rows.load(std::memory_order_relaxed);
  if (window_wgmma_enabled() && plan.rows <= 32 && keymajor_pass_supported(sa, 64) &&
      (small_rows == 2 || (small_rows == 1 && a.n >= kKeyMajorSmallRowsMinKeys))) {
    plan = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count, 1, 8);
    plan.slabs = 4;  // 64-row blocks, padding rows included
    plan.row_blocks = 1;
    pass = Pass::kKeyMajor;
  } else if (window_wgmma_enabled() && plan.rows > 32) {
    WindowPlan wp = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count, 1, 8);
    if (keymajor_pass_supported(sa, 16 * wp.slabs)) {
      plan = wp;
      pass = Pass::kKeyMajor;
    } else {
      if (16 * wp.slabs <= 64) {
        wp = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count, 2, 8);
        wp.slabs = 4;
        wp.row_blocks = 1;
      }
      if (wgmma_pass_supported(sa, 16 * wp.slabs)) {
        plan = wp;
        pass = Pass::kRowMajor;
      }
    }
  }
  const PassParams p = pass_params(sa, group, plan, scores);
  const cudaError_t err = zero_if_accumulating(p, stream);
  if (err != cudaSuccess) return err;
  if (pass == Pass::kKeyMajor) return launch_pass_keymajor(p, 16 * plan.slabs, plan.splits, stream);
  if (pass == Pass::kRowMajor) return launch_pass_wgmma(p, 16 * plan.slabs, plan.splits, stream);
  return launch_pass_mma(p, plan.slabs, plan.splits, stream);
}

}  // namespace kvevict::cuda::detail

namespace kvevict::cuda {
void set_window_keymajor_small_rows(int mode) {
  KVEVICT_CHECK(mode >= 0 && mode <= 2, "key-major small-rows mode ", mode,
                " is invalid; expected 0, 1 or 2");
  detail::g_keymajor_small_rows.store(mode);
}
}  // namespace kvevict::cuda
