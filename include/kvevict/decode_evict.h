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
#include <string>

#include "kvevict/cache.h"
#include "kvevict/tensor.h"

namespace kvevict {

enum class DecodeScore : uint8_t {
  kAttentionSum,  // h2o: add p
  kTOVA,          // tova: replace by p
  kDropKV,        // add (p/(1-p))^2 ||a - v||^2
  kObcacheV,      // add p^2 ||v||^2
  kObcacheK,      // add (p z)^2 ||v - a||^2
  kObcacheVK,     // add obcache_v + obcache_k + 2 p^2 z (||v||^2 - <v, a>)
};
DecodeScore decode_score_parse(const std::string& s);  // "h2o", "tova", "dropkv", "obcache_vk"...
const char* decode_score_name(DecodeScore s);

struct DecodeEvictOptions {
  DecodeScore score = DecodeScore::kAttentionSum;
  int64_t budget = 0;   // N tokens kept per head after an eviction (> 0)
  int64_t slack = 0;    // evict when a head's length > N + slack; 0 = every step
  int recent = 32;      // last rows never evicted
  int sink = 0;         // first rows never evicted
  float scale = 0.0f;   // logit scale; 0 = 1/sqrt(d)
  float softcap = 0.0f; // the model's logit softcap, so p matches the attention that gave lse
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

class DecodeEvictor {
 public:
  explicit DecodeEvictor(DecodeEvictOptions opt);
  const DecodeEvictOptions& options() const { return opt_; }

  // Adds (tova: writes) the step's per-row score to cache.score_acc over every head's rows.
  void accumulate(const KVLayerView& cache, const DecodeStep& step) const;
  // Evicts over-long heads down to the budget in place; returns the number of rows evicted.
  int64_t evict(const KVLayerView& cache) const;
  // accumulate() then evict().
  int64_t step(const KVLayerView& cache, const DecodeStep& step) const;

  // The per-row step score of one KV head, written to out[len_h] (for tests and diagnostics).
  void step_scores(const KVLayerView& cache, const DecodeStep& step, int kv_head,
                   float* out) const;

 private:
  DecodeEvictOptions opt_;
};

}  // namespace kvevict
