// One conversation with a model: a per-layer KV cache (kvevict HostKVCache: per-head segments,
// original positions), prefill in chunks, decode, sampling, and the eviction wired in.
//
// Prefill eviction (SPEC section 5) is one-shot per layer: every layer first attends over the
// full prompt (so later layers' hidden states come from full attention, as kvpress does), then
// each layer is scored with its own post-RoPE window queries and compacted. Because the prefill
// does not depend on the method, it can be captured once as a PrefillSnapshot and evicted many
// times (Session::from_snapshot), which is what evaluation sweeps do:
//
//   auto snap = Session::prefill_snapshot(model, context_ids, {.keep_queries = 64});
//   for (auto& cfg : configs) {
//     Session s = Session::from_snapshot(model, snap, cfg);   // copy + evict
//     s.append(question_ids);                                  // query-agnostic
//     auto out = s.generate(max_new, sampler);
//   }
//
// Sliding-window layers (gemma3) keep only their window (lossless: no later query can see
// older keys) and are never evicted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/cache.h"
#include "kvevict/dtype.h"
#include "kvevict/model/evict_config.h"
#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
#include "kvevict/model/sampler.h"
#include "kvevict/tensor.h"

namespace kvevict {

struct SessionOptions {
  DType kv_dtype = DType::kF32;  // f32 or f16 cache on the CPU
  int64_t chunk = 256;           // prefill tokens per forward pass (bounds activation memory)
  ProgressFn progress;
  void validate() const;
};

class Session final : public InferenceSession {
 public:
  explicit Session(std::shared_ptr<const Model> model, SessionOptions opt = {});

  // Runs the prompt through the model with full caches and no eviction.
  static PrefillSnapshot prefill_snapshot(const std::shared_ptr<const Model>& model,
                                          const std::vector<int32_t>& tokens,
                                          const PrefillOptions& popt = {},
                                          const SessionOptions& opt = {});
  // A session over a copy of the snapshot's caches, evicted with `evict.prefill` (if enabled);
  // `evict.decode` then applies to later decode steps.
  static Session from_snapshot(const std::shared_ptr<const Model>& model,
                               const PrefillSnapshot& snapshot, const EvictConfig& evict,
                               const SessionOptions& opt = {});

  // Prefill + one-shot eviction on a fresh session. Throws if the session already holds tokens
  // or the prompt exceeds the context length.
  void prefill(const std::vector<int32_t>& tokens,
               const EvictConfig& evict = EvictConfig::none()) override;
  // Feeds more tokens after the current ones (a question after a compressed context), in chunks,
  // without eviction; positions continue at the original length. logits() then holds the last.
  void append(const std::vector<int32_t>& tokens) override;
  // One token (positions continue); runs decode-time eviction if configured.
  void decode(int32_t token) override;
  double nll(int32_t target) override;
  // Samples up to max_new tokens starting from the current logits. `is_stop` ends generation
  // (the stop token is returned but not fed); on_token sees every token as it is produced.
  GenerateResult generate(int max_new, Sampler& sampler,
                          const std::function<bool(int32_t)>& is_stop = nullptr,
                          const std::function<void(int32_t)>& on_token = nullptr) override;

  const std::vector<float>& logits() override { return logits_; }
  const std::vector<float>& logits() const { return logits_; }
  int64_t position() const override { return position_; }  // the next token's position
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const Model& model() const { return *model_; }
  const EvictConfig& evict_config() const { return evict_; }
  // Bytes allocated for K and V (capacity, not just rows in use), per layer and in total.
  int64_t kv_bytes(int layer) const;
  int64_t kv_bytes_total() const override;
  int64_t kv_rows(int layer) const override;  // rows in use summed over heads
  std::vector<int32_t> kept_positions(int layer, int kv_head) const override;
  const HostKVCache& cache(int layer) const { return caches_[layer]; }
  const SessionStats& stats() const override { return stats_; }

  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session() override;

 private:
  struct DecodeState;
  void init_caches();
  void setup_decode();
  void evict_prefill(const PrefillEviction& ev, const std::vector<HostTensor>& queries);
  void forward_tokens(const std::vector<int32_t>& tokens, int64_t keep_queries,
                      std::vector<HostTensor>* queries, bool progress);

  std::shared_ptr<const Model> model_;
  SessionOptions opt_;
  EvictConfig evict_;
  std::vector<HostKVCache> caches_;  // [n_layers]
  std::vector<int32_t> tokens_;      // every token fed so far
  int64_t position_ = 0;
  std::vector<float> logits_;  // [V] after the last token fed
  SessionStats stats_;
  std::unique_ptr<DecodeState> decode_;
};

}  // namespace kvevict
