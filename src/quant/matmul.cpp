#include "quant/matmul.h"

#include <algorithm>
#include <vector>

#include "core/parallel_if_large.h"
#include "kvevict/error.h"
#include "quant/gemm.h"

namespace kvevict::quant {
namespace {

// Rows per work item: enough items for two threads to balance on a 576-row matrix, few enough that
// an item's rows (32 x 576 Q4 bytes = 11 KiB) stay in L1 while every token of the chunk uses them.
constexpr int64_t kRowsPerItem = 32;
constexpr int64_t kPrefetchAhead = 4096;

struct Item {
  int target;
  int64_t r0, r1;
};

// Quantized activation rows, reused across calls: the runtime's call sites are on one thread
// (parallel regions run inside matmul), and a fresh buffer of this size per call would be paid
// in page faults.
std::vector<uint8_t>& act_buffer() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

void matmul(const float* x, int64_t T, int64_t K, const MatmulTarget* targets, int n_targets,
            const Kernels& k) {
  if (T <= 0 || n_targets <= 0) return;
  bool need_a8 = false;
  for (int i = 0; i < n_targets; ++i) {
    const MatrixView& w = targets[i].w;
    KVEVICT_CHECK(w.cols == K, "matmul: weight ", i, " has ", w.cols, " columns; expected ", K);
    KVEVICT_CHECK(K % kA8Block == 0 || !takes_a8(w.type), "matmul: row length ", K,
                  " of a block-quantized weight is not a multiple of ", kA8Block);
    need_a8 = need_a8 || takes_a8(w.type);
  }
  const size_t a8_bytes = need_a8 ? a8_row_bytes(K) : 0;
  std::vector<uint8_t>& act = act_buffer();
  if (need_a8) {
    if (act.size() < a8_bytes * T) act.resize(a8_bytes * T);
    detail::parallel_for_if_large(
        T, T * K * 4, [&](int64_t t) { k.quantize_a8(x + t * K, K, act.data() + t * a8_bytes); });
  }

  // GEMM for the targets it serves; the rest (and short T) go row by row.
  std::vector<Item> items;
  std::vector<GemmJob> gemm_jobs;
  for (int i = 0; i < n_targets; ++i) {
    const MatrixView& w = targets[i].w;
    if (T >= kGemmMinTokens && gemm_supports(w.type, k)) {
      plan_gemm(w, i, &gemm_jobs);
      continue;
    }
    for (int64_t r0 = 0; r0 < w.rows; r0 += kRowsPerItem)
      items.push_back({i, r0, std::min(w.rows, r0 + kRowsPerItem)});
  }
  const int64_t n_items = static_cast<int64_t>(items.size());
  const int64_t n_jobs = n_items + static_cast<int64_t>(gemm_jobs.size());
  int64_t work = 0;
  for (int i = 0; i < n_targets; ++i) work += T * targets[i].w.rows * K;
  const GemmInput gin{act.data(), a8_bytes, T, K};
  detail::parallel_for_if_large(n_jobs, work, [&](int64_t j) {
    if (j >= n_items) {
      const GemmJob& g = gemm_jobs[j - n_items];
      const MatmulTarget& tg = targets[g.target];
      run_gemm(tg.w, gin, g, tg.y, tg.ldy, k);
      return;
    }
    const Item& it = items[j];
    const MatmulTarget& tg = targets[it.target];
    const MatrixView& w = tg.w;
    const int ti = type_index(w.type);
    for (int64_t t = 0; t < T; ++t) {
      float* y = tg.y + t * tg.ldy;
      if (takes_a8(w.type)) {
        const A8Row a = a8_row(act.data() + t * a8_bytes, K);
        const DotA8Fn dot = k.dot_a8[ti];
        for (int64_t r = it.r0; r < it.r1; ++r) {
          // Decode streams the weights once from DRAM: software prefetch kPrefetchAhead bytes
          // ahead carries the stream across the 4 KiB page boundaries of the file mapping,
          // where the hardware prefetchers stop. Into L2 (locality 1: prefetcht2), not
          // non-temporal: on an AVX512-BF16 Xeon VM prefetchnta made Gemma 3's one-thread decode
          // 1.5x slower (19.8 vs 31.4 tok/s; docs/RESULTS.md 2026-12-03 (c)).
          if (t == 0) {
            const uint8_t* ahead = w.row(r) + kPrefetchAhead;
            for (int64_t o = 0; o < w.row_bytes; o += 64) __builtin_prefetch(ahead + o, 0, 1);
          }
          y[r] = dot(w.row(r), a, K);
        }
      } else {
        const DotF32Fn dot = k.dot_f32[ti];
        const float* xt = x + t * K;
        for (int64_t r = it.r0; r < it.r1; ++r) y[r] = dot(w.row(r), xt, K);
      }
    }
  });
}

}  // namespace kvevict::quant
