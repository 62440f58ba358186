// One interface for the model runtimes of every device (ARCHITECTURE.md): the commands and the
// evaluation harness code against ModelRuntime and InferenceSession only, so `--device cpu` and
// `--device cuda` run the same code above this line.
//
//   auto rt = ModelRuntime::create(Model::load("smollm2"), {.device = Device::kCuda});
//   auto s = rt->session(prompt.size() + 64);
//   s->prefill(prompt, EvictConfig::make(method_parse("dropkv"), Budget{0.1}));
//   GenerateResult out = s->generate(64, sampler, is_stop);
//
// Both runtimes evict through the library's pipeline (LayerEvictor after each layer's prefill
// attention, DecodeEvictor while decoding) over their device's Backend; the CPU runtime holds
// HostKVCache layers, the GPU runtime device layers with device segment tables.
//
// Evaluation sweeps prefill a prompt once (prefill_snapshot) and evict the snapshot once per
// setting; answer_batch() decodes every setting's answer: the GPU runtime as one batch (each row
// its own compacted cache), the CPU runtime one setting after another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/cache.h"
#include "kvevict/model/evict_config.h"
#include "kvevict/model/model.h"
#include "kvevict/model/sampler.h"
#include "kvevict/tensor.h"

namespace kvevict {

// Called after every prefill chunk with the tokens done so far and the total.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct PrefillOptions {
  int64_t keep_queries = 0;  // window queries to keep per layer; -1 = all prompt queries (h2o)
};

// A snapshot in host memory: everything a prefill leaves behind that eviction needs,
// independent of the eviction method (the CPU runtime's snapshot; Snapshot::to_host of any).
struct PrefillSnapshot {
  std::vector<int32_t> tokens;      // [n] the prompt
  std::vector<HostKVCache> caches;  // [n_layers] full caches (sliding layers: their window)
  std::vector<HostTensor> queries;  // [n_layers] each [Hq, m, d] f32: the last m prompt queries
                                    // after RoPE (m = min(keep_queries, n)); empty if m = 0
  std::vector<float> logits;        // [V] at the last prompt token
  double seconds = 0;               // prefill wall time
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_queries() const;
  int64_t kv_bytes() const;
};

// Where a batch's prefill eviction went (the GPU runtime's answer_batch / from_snapshot): the
// counts always; the device seconds of each phase only with KVEVICT_EVICT_PROFILE=1 (a CUDA
// event at every phase boundary, which itself costs a little), else 0. For the sweep's cost table.
struct EvictCost {
  int64_t score_passes = 0;     // layer score passes (settings that share a score share one)
  int64_t selections = 0;       // layer selections (one per evicted setting and layer)
  double score_seconds = 0;     // the score passes
  double select_seconds = 0;    // the selections
  double compact_seconds = 0;   // each evicted layer: its allocation, segment table and gather
  double copy_seconds = 0;      // layers copied whole (sliding rings, the full cache's rows)
  double assemble_seconds = 0;  // the synchronization and the batch's layers from the rows
};

// What a session did, on either device (GPU times are device times from CUDA events).
struct SessionStats {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0;  // tokens processed one at a time (decode + append of 1)
  double decode_seconds = 0;
  int64_t append_tokens = 0;  // tokens appended after the prefill (questions)
  double append_seconds = 0;
  double evict_seconds = 0;
  std::vector<int64_t> kv_bytes_before;  // [n_layers] K/V bytes allocated before prefill eviction
  std::vector<int64_t> kv_bytes_after;   // [n_layers] ... after it
  int64_t decode_evictions = 0;          // decode steps of a layer that evicted rows
  EvictCost evict_cost;                  // the GPU's split of evict_seconds
  std::string warning;                   // the first selection warning (budget below protected)
  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;
  std::string describe() const;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, the stop token included if one was hit
  bool stopped = false;         // a stop token ended generation (else max_new ran out)
};

struct RuntimeOptions {
  Device device = Device::kCpu;
  DType kv_dtype = DType::kF32;  // CPU cache dtype (f32, f16, bf16); the GPU caches are bf16
  int64_t prefill_chunk = 0;     // tokens per forward pass of a prefill; 0 = the device's default
                                 // (CPU 256, GPU 4096)
  ProgressFn progress;           // after every prefill chunk (CPU)
  // Decode steps round alike at every batch size (GPU: no fused step for batch 1 alone, see
  // src/model_cuda/fused_step_policy.h), so a sequence's tokens never depend on what else decodes
  // beside it. Evaluation sets it: a setting scores the same in a sweep of one or of a hundred.
  bool batch_invariant_decode = false;
  void validate() const;
};

// The state one prompt's prefill leaves before any eviction, on the runtime's device.
class Snapshot {
 public:
  virtual ~Snapshot() = default;
  virtual int64_t num_tokens() const = 0;
  virtual double seconds() const = 0;    // prefill wall time (GPU: device time)
  virtual int64_t kv_bytes() const = 0;  // K/V bytes of the full caches
  // The snapshot in host memory (caches converted to f32, the kept queries, the last logits):
  // what diagnostics read.
  virtual PrefillSnapshot to_host() const = 0;
};

// One sequence on a runtime.
class InferenceSession {
 public:
  virtual ~InferenceSession() = default;
  // Prefill + one-shot eviction per layer; evict.decode then applies to every decode() step.
  // Throws if the session already holds tokens or the prompt exceeds its room.
  virtual void prefill(const std::vector<int32_t>& tokens, const EvictConfig& evict) = 0;
  // More tokens after the current ones (the question of query-agnostic mode), no eviction.
  virtual void append(const std::vector<int32_t>& tokens) = 0;
  // One token; decode-time eviction when configured.
  virtual void decode(int32_t token) = 0;
  // Logits [V] after the last token fed (the GPU runtime downloads them).
  virtual const std::vector<float>& logits() = 0;
  // -log softmax(logits)[target] of the last logits, in double.
  virtual double nll(int32_t target) = 0;
  // Samples up to max_new tokens from the current logits, as Session::generate.
  virtual GenerateResult generate(int max_new, Sampler& sampler,
                                  const std::function<bool(int32_t)>& is_stop = nullptr,
                                  const std::function<void(int32_t)>& on_token = nullptr) = 0;
  virtual int64_t position() const = 0;
  virtual int64_t kv_rows(int layer) const = 0;  // rows in use summed over heads
  // The original positions a layer's KV head holds, ascending (for tests and diagnostics; the
  // GPU runtime downloads them).
  virtual std::vector<int32_t> kept_positions(int layer, int kv_head) const = 0;
  virtual int64_t kv_bytes_total() const = 0;  // K/V bytes allocated (capacity)
  virtual const SessionStats& stats() const = 0;
};

// One setting's answer from answer_batch().
struct BatchAnswer {
  GenerateResult result;
  // After eviction and the appended tokens, before the answer is decoded:
  int64_t kept_rows_per_head = 0;  // mean over the evicted (full-attention) layers
  int64_t kv_bytes = 0;            // K/V bytes of the rows this setting's cache holds
  // Seconds (GPU: device time from CUDA events): this row's eviction, the snapshot copy included
  // (the GPU evicts every row in one timed pass and reports each row an equal share); the question
  // append and the decode loop of the batch this row was decoded in, which rows_in_batch rows
  // share (the CPU runtime decodes one row at a time: 1). For the cost tables of sweeps.
  double evict_seconds = 0;
  double append_seconds = 0;
  double decode_seconds = 0;
  int64_t decode_steps = 0;  // the batch's decode steps
  int rows_in_batch = 1;
  EvictCost batch_evict;  // the whole batch's eviction by phase (GPU; every row the same)
};

class ModelRuntime {
 public:
  virtual ~ModelRuntime() = default;
  // A loaded model on opt.device: the CPU runtime runs it as is, the GPU runtime uploads it
  // (bf16). Throws naming the reason when the device cannot run it (no CUDA build or device,
  // an unsupported architecture or head dim).
  static std::shared_ptr<const ModelRuntime> create(std::shared_ptr<const Model> model,
                                                    const RuntimeOptions& opt);
  // Random weights of a config (Model::random's values), generated where they run: a real-shape
  // 8B model on the GPU needs no host copy.
  static std::shared_ptr<const ModelRuntime> random(const ModelConfig& config, uint64_t seed,
                                                    const RuntimeOptions& opt);

  virtual Device device() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual std::string describe() const = 0;  // device and precision in one line

  // A fresh session with room for `max_tokens` tokens (prompt + everything appended/decoded).
  // The GPU session allocates that room up front; the CPU session grows as needed.
  virtual std::unique_ptr<InferenceSession> session(int64_t max_tokens) const = 0;
  // The prompt's prefill without eviction; keeps the last popt.keep_queries queries per layer.
  virtual std::shared_ptr<const Snapshot> prefill_snapshot(const std::vector<int32_t>& tokens,
                                                           const PrefillOptions& popt) const = 0;
  // A session over a copy of the snapshot evicted with `evict`, with room for `room` more tokens.
  virtual std::unique_ptr<InferenceSession> from_snapshot(const Snapshot& snapshot,
                                                          const EvictConfig& evict,
                                                          int64_t room) const = 0;
  // Every config's greedy answer from the snapshot: evict (a row each), append `append` to every
  // row, decode up to max_new tokens (a row ends at its first stop token, which is returned).
  // Configs with decode-time eviction must all use the same one. The result of a row equals
  // from_snapshot(config) + append + generate(max_new, greedy).
  virtual std::vector<BatchAnswer> answer_batch(const Snapshot& snapshot,
                                                const std::vector<EvictConfig>& configs,
                                                const std::vector<int32_t>& append, int max_new,
                                                const std::function<bool(int32_t)>& is_stop) const;
  // Teacher-forced NLLs (perplexity): each text is fed one token at a time from an empty cache
  // (its first token prefilled) with `evict`'s decode-time eviction, and out[t][i] is the NLL
  // (natural log) of texts[t][i + 1] given texts[t][0 .. i]: texts[t].size() - 1 values. Every
  // text must hold at least 2 tokens. The GPU runtime decodes the texts as one batch (a row
  // each, all of one length); the CPU runtime one after another. A row equals a session of its
  // own up to the batch's rounding (batched projections round by the batch's shape). Checks the
  // inputs here (no prefill eviction, >= 2 tokens a text), then runs the runtime's way.
  std::vector<std::vector<double>> token_nlls(const std::vector<std::vector<int32_t>>& texts,
                                              const EvictConfig& evict) const;
  // The same, one text at a time through session(): the CPU runtime's way, and on the GPU the
  // reference its batch is compared with.
  std::vector<std::vector<double>> token_nlls_one_at_a_time(
      const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) const;

 protected:
  // token_nlls after its checks; the default is token_nlls_one_at_a_time.
  virtual std::vector<std::vector<double>> checked_token_nlls(
      const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) const;
};

// Whether `device` can run models in this build and on this machine; `why` says what is missing.
bool runtime_available(Device device, std::string* why = nullptr);

// Mean kept rows per KV head over the layers prefill eviction compacts (all full-attention
// layers; sliding-window layers keep their window). rows_of_layer(l): the rows layer l holds
// (summed over its KV heads), for one session or one row of a batch.
int64_t kept_rows_per_head(const ModelConfig& config,
                           const std::function<int64_t(int layer)>& rows_of_layer);
int64_t kept_rows_per_head(const InferenceSession& session, const ModelConfig& config);

}  // namespace kvevict
