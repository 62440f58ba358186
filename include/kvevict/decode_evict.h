// Decode-time dynamic eviction (SPEC section 5, OBCache / H2O style), host caches.
//
// Every decode step appends the new k, v (cache_append), runs attention over the cache, then:
//   accumulate(): the step's score of every row (w = 1, averaged over the G query heads of the
//                 group) is added to cache.score_acc (tova: replaces it);
//   evict():      a head whose length exceeds budget + slack is cut down to `budget` rows by
//                 in-place compaction, never touching the `sink` first or `recent` last rows.
// The cache needs score_acc and per-head capacity >= budget + slack + 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvevict/backend.h"
#include "kvevict/cache.h"
#include "kvevict/decode_score.h"
#include "kvevict/tensor.h"

namespace kvevict {

struct DecodeEvictOptions {
  DecodeScore score = DecodeScore::kAttentionSum;
  int64_t budget = 0;    // N tokens kept per head after an eviction (> 0)
  int64_t slack = 0;     // evict when a head's length > N + slack; 0 = every step
  int recent = 32;       // last rows never evicted
  int sink = 0;          // first rows never evicted
  float scale = 0.0f;    // logit scale; 0 = 1/sqrt(d)
  float softcap = 0.0f;  // the model's logit softcap, so p matches the attention that gave lse
  double one_minus_p_floor = 1e-12;
  void validate() const;
  std::string describe() const;
  int64_t capacity_per_head() const { return budget + slack + 1; }
};

struct DecodeStep {
  TensorView q;    // [Hq, d] the step's query after RoPE (f32)
  TensorView a;    // [Hq, d] its attention output over the current cache (f32)
  TensorView lse;  // [Hq] f32 its log-sum-exp over the current cache
};

// The rules live here once, for every device: which heads are over budget and how many rows they
// keep (evict), and what a step adds to the accumulators (accumulate on host caches; the GPU
// runtime computes the same step score inside its decode attention, from options().score). The
// cut itself runs on a Backend (Backend::cut_segments): in place on the host, on the GPU with
// the rows selected by a radix select of the accumulators. A cache view's "heads" may be the
// segments of a whole batch (sequence-major), so one call cuts every sequence.
class DecodeEvictor {
 public:
  // `backend` runs the cuts (nullptr: a host backend owned by the evictor); it must outlive the
  // evictor and live where the caches handed to evict() live.
  explicit DecodeEvictor(DecodeEvictOptions opt, Backend* backend = nullptr);
  ~DecodeEvictor();
  DecodeEvictor(DecodeEvictor&&) noexcept;
  DecodeEvictor& operator=(DecodeEvictor&&) noexcept;
  const DecodeEvictOptions& options() const { return opt_; }
  // tova replaces the accumulator with the step's score; every other score adds to it.
  bool replaces() const { return opt_.score == DecodeScore::kTOVA; }

  // Adds (tova: writes) the step's per-row score to cache.score_acc over every head's rows.
  // Host caches.
  void accumulate(const KVLayerView& cache, const DecodeStep& step) const;
  // The heads longer than budget + slack (read from the cache's host table) and the cut that
  // brings them back to the budget; empty heads when nothing is over.
  SegmentCut plan(const KVLayerView& cache) const;
  // Cuts over-long heads down to the budget in place on the backend; returns the rows evicted.
  int64_t evict(const KVLayerView& cache) const;
  // accumulate() then evict().
  int64_t step(const KVLayerView& cache, const DecodeStep& step) const;

  // The per-row step score of one KV head, written to out[len_h] (for tests and diagnostics).
  void step_scores(const KVLayerView& cache, const DecodeStep& step, int kv_head, float* out) const;

 private:
  DecodeEvictOptions opt_;
  std::unique_ptr<Backend> owned_;
  Backend* backend_ = nullptr;
};

}  // namespace kvevict
