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
#include "kvevict/decode_evict.h"
#include "kvevict/dtype.h"
#include "kvevict/method.h"
#include "kvevict/model/model.h"
#include "kvevict/model/sampler.h"
#include "kvevict/tensor.h"

namespace kvevict {

// Called after every prefill chunk with the tokens done so far and the total.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct SessionOptions {
  DType kv_dtype = DType::kF32;  // f32 or f16 cache on the CPU
  int64_t chunk = 256;           // prefill tokens per forward pass (bounds activation memory)
  ProgressFn progress;
  void validate() const;
};

// One-shot prefill eviction (SPEC sections 2-5).
struct PrefillEviction {
  bool enabled = false;
  ScoreOptions score;    // method, aggregate, window, pooling
  SelectOptions select;  // policy, budget, sink; select.window is set from score.window
  // A method name as method_parse() reads it ("dropkv", "adakv", "snapkv", ...) with its SPEC
  // defaults, and a budget.
  static PrefillEviction from_method(const std::string& method, const Budget& budget);
  // Query-aware mode: the question ends the prompt and the observation window is its tokens.
  void set_window(int window);
  std::string describe() const;
};

// Decode-time dynamic eviction (SPEC section 5): budget N tokens per head, evict down to N when
// a head exceeds N + slack, never the last `recent` rows or the sinks. Runs on every decode()
// step (one token at a time); tokens fed with append() are not scored. The per-row accumulators
// start at 0 when decoding starts. options.scale / softcap are filled from the model.
struct DecodeEviction {
  bool enabled = false;
  DecodeEvictOptions options;
  std::string describe() const;
};

struct EvictConfig {
  PrefillEviction prefill;
  DecodeEviction decode;
  static EvictConfig none() { return {}; }
  std::string describe() const;
};

// Everything a prefill leaves behind that eviction needs; independent of the eviction method.
struct PrefillSnapshot {
  std::vector<int32_t> tokens;       // [n] the prompt
  std::vector<HostKVCache> caches;   // [n_layers] full caches (sliding layers: their window)
  std::vector<HostTensor> queries;   // [n_layers] each [Hq, m, d] f32: the last m prompt queries
                                     // after RoPE (m = min(keep_queries, n)); empty if m = 0
  std::vector<float> logits;         // [V] at the last prompt token
  double seconds = 0;                // prefill wall time
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_queries() const;
  int64_t kv_bytes() const;
};

struct PrefillOptions {
  int64_t keep_queries = 0;  // window queries to keep per layer; -1 = all prompt queries (h2o)
};

struct SessionStats {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0;  // tokens processed one at a time (decode + append of 1)
  double decode_seconds = 0;
  int64_t append_tokens = 0;  // tokens appended after the prefill in chunks (questions)
  double append_seconds = 0;
  double evict_seconds = 0;
  std::vector<int64_t> kv_bytes_before;  // [n_layers] K/V bytes allocated before prefill eviction
  std::vector<int64_t> kv_bytes_after;   // [n_layers] ... after it
  int64_t decode_evictions = 0;          // decode steps of a layer that evicted rows
  std::string warning;                   // the first selection warning (budget below protected)
  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;
  std::string describe() const;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, the stop token included if one was hit
  bool stopped = false;         // a stop token ended generation (else max_new ran out)
};

class Session {
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
  void prefill(const std::vector<int32_t>& tokens, const EvictConfig& evict = EvictConfig::none());
  // Feeds more tokens after the current ones (a question after a compressed context), in chunks,
  // without eviction; positions continue at the original length. Returns the last logits.
  const std::vector<float>& append(const std::vector<int32_t>& tokens);
  // One token (positions continue); runs decode-time eviction if configured. Returns logits.
  const std::vector<float>& decode(int32_t token);
  // Samples up to max_new tokens starting from the current logits. `is_stop` ends generation
  // (the stop token is returned but not fed); on_token sees every token as it is produced.
  GenerateResult generate(int max_new, Sampler& sampler,
                          const std::function<bool(int32_t)>& is_stop = nullptr,
                          const std::function<void(int32_t)>& on_token = nullptr);

  const std::vector<float>& logits() const { return logits_; }
  int64_t position() const { return position_; }  // the next token's position
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const Model& model() const { return *model_; }
  const EvictConfig& evict_config() const { return evict_; }
  // Bytes allocated for K and V (capacity, not just rows in use), per layer and in total.
  int64_t kv_bytes(int layer) const;
  int64_t kv_bytes_total() const;
  int64_t kv_rows(int layer) const;  // rows in use summed over heads
  const HostKVCache& cache(int layer) const { return caches_[layer]; }
  const SessionStats& stats() const { return stats_; }

  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

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
  std::vector<float> logits_;        // [V] after the last token fed
  SessionStats stats_;
  std::unique_ptr<DecodeState> decode_;
};

}  // namespace kvevict
