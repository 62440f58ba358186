// The GPU model runtime (internal; library users reach it through kvevict::ModelRuntime with
// Device::kCuda): GpuModel (weights on the device), GpuContext (the stream and the cuda Backend
// every session and snapshot of a runtime share), GpuSnapshot and GpuSession.
//
// GpuSession is InferenceSession for batch 1 and a batch of rows beyond it: each row its own
// prompt or its own eviction of a snapshot, its own length, decoded together. Its prefill
// eviction is LayerEvictor over the cuda backend with device-resident selections (score ->
// select -> compact per layer with no host round trip; one synchronization after the last
// layer), its decode-time eviction DecodeEvictor over the same backend (the over-budget cut
// selected on the GPU, every row and head in one launch per layer).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "kvevict/backend.h"
#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
#include "kvevict/model/sampler.h"
#include "model_cuda/layer_cache.h"

namespace kvevict::gpu {

class GpuForward;  // gpu_forward.h

// True when this build has the CUDA model runtime and a device is present (never throws).
bool gpu_available();
// Throws naming the reason (no device, unsupported architecture or head dim) when `config`
// cannot run on the GPU.
void check_supported(const ModelConfig& config);
// Device memory free and total, in bytes.
void device_memory(int64_t* free_bytes, int64_t* total_bytes);

// Weights in device memory: bf16 matrices (q/k/v fused into one [(Hq + 2 Hkv) d, D] matrix, gate
// and up into one [2F, D]), f32 norms and biases.
class GpuModel {
 public:
  // Uploads a loaded model (GGUF or Model::random), rounding every matrix to bf16.
  static std::shared_ptr<const GpuModel> upload(const Model& model);
  // The weights Model::random(config, seed) would make (same values, rounded to bf16), generated
  // on the device. Throws naming the preset and the bytes needed when the device lacks them.
  static std::shared_ptr<const GpuModel> random(const ModelConfig& config, uint64_t seed);

  const ModelConfig& config() const;
  int64_t weight_bytes() const;  // device bytes of the weights
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  GpuModel();
  std::unique_ptr<Impl> impl_;
};

// What a runtime's sessions and snapshots share: the model, one stream (sessions of a runtime
// run one after another) and the cuda Backend on it. Device buffers are freed in stream order,
// so the context outlives every cache made on it.
class GpuContext {
 public:
  explicit GpuContext(std::shared_ptr<const GpuModel> model);
  ~GpuContext();
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;
  const GpuModel& model() const { return *model_; }
  const std::shared_ptr<const GpuModel>& model_ptr() const { return model_; }
  cudaStream_t stream() const { return stream_; }
  Backend& backend() const { return *backend_; }
  // The forward pass (activations, cuBLAS) every session of the context shares, one pass at a
  // time (sessions of a runtime run one after another).
  GpuForward& forward() const { return *forward_; }

 private:
  std::shared_ptr<const GpuModel> model_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<GpuForward> forward_;
};

struct GpuSessionOptions {
  int batch = 1;                 // rows decoded together
  int64_t max_prompt = 0;        // longest prompt a row is prefilled with
  int64_t decode_room = 256;     // rows per head reserved for tokens after the prefill
  int64_t prefill_chunk = 4096;  // tokens per forward pass of the prefill
  // Decode-time eviction: the decode attention exports every row's logits and the step scores
  // read them (no second read of K; none of K or V for h2o / tova). false: the scores recompute
  // q.k from K (the earlier path, kept for comparisons).
  bool fused_decode_scores = true;
  // With fused_decode_scores: the step scores run inside the decode attention launch (the last
  // split block of each KV head's segment merges and scores it) where that kernel covers the
  // shape (head dim 64 / 128 / 256, GQA group <= 16) and the batch has at least
  // scores_in_attention_min_segments KV-head segments (B x Hkv; 0 = the GPU's SM count: with
  // fewer segments than SMs the last block's scoring of each segment is a tail with most SMs idle,
  // which the separate kernel, a block per 32 rows, does not have; 1 = always).
  bool scores_in_attention = true;
  int scores_in_attention_min_segments = 0;
  void validate() const;
};

// One prompt's prefill without eviction, on the device: full caches (sliding layers: their
// rings), the last m queries of every layer, the last logits.
class GpuSnapshot final : public Snapshot {
 public:
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens.size()); }
  double seconds() const override { return prefill_seconds; }
  int64_t kv_bytes() const override;
  PrefillSnapshot to_host() const override;

  std::shared_ptr<GpuContext> context;
  std::vector<int32_t> tokens;
  std::vector<LayerCache> layers;           // [n_layers] Hkv segments each
  std::vector<cuda::DeviceBuffer> queries;  // [n_layers] [Hq, m, d] bf16 (empty when m = 0)
  int64_t num_queries = 0;                  // m
  cuda::DeviceBuffer logits;                // [V] f32 at the last prompt token
  double prefill_seconds = 0;
  ~GpuSnapshot() override;
};

class GpuSession final : public InferenceSession {
 public:
  GpuSession(std::shared_ptr<GpuContext> context, GpuSessionOptions opt);
  // A session with a context of its own.
  GpuSession(std::shared_ptr<const GpuModel> model, GpuSessionOptions opt);
  ~GpuSession() override;
  GpuSession(GpuSession&&) noexcept;
  GpuSession& operator=(GpuSession&&) noexcept;

  // InferenceSession. prefill fills row 0 (replicate_sequence() copies it to the other rows);
  // append feeds every row the same tokens; decode / generate / logits / nll need batch 1;
  // position and kv_rows are row 0's.
  void prefill(const std::vector<int32_t>& tokens,
               const EvictConfig& evict = EvictConfig::none()) override;
  void append(const std::vector<int32_t>& tokens) override;
  void decode(int32_t token) override;
  const std::vector<float>& logits() override;
  double nll(int32_t target) override;
  GenerateResult generate(int max_new, Sampler& sampler,
                          const std::function<bool(int32_t)>& is_stop = nullptr,
                          const std::function<void(int32_t)>& on_token = nullptr) override;
  int64_t position() const override;
  int64_t kv_rows(int layer) const override;
  std::vector<int32_t> kept_positions(int layer, int kv_head) const override;  // row 0
  int64_t kv_bytes_total() const override;  // every row, capacity
  const SessionStats& stats() const override;

  // The prompt's prefill without eviction as a snapshot; the session's own rows are untouched.
  std::unique_ptr<GpuSnapshot> prefill_snapshot(const std::vector<int32_t>& tokens,
                                                const PrefillOptions& popt);
  // Row r = a copy of the snapshot evicted with configs[r] (configs.size() = batch), with room
  // for decode_room more tokens; all rows then decode together. Decode-time eviction, if any,
  // must be the same for every config.
  void load_rows(const GpuSnapshot& snapshot, const std::vector<EvictConfig>& configs);
  // Distinct prompts into one batch: each prompt is prefilled and evicted with `evict` into its
  // own row cache (its own length, its own eviction), then row r of the batch is prompt
  // r % prompts.size() (fewer prompts than rows repeat, for throughput runs at a large batch).
  void prefill_rows(const std::vector<std::vector<int32_t>>& prompts, const EvictConfig& evict);
  // Copies row 0's cache and position into rows 1 .. batch-1 (throughput runs).
  void replicate_sequence();
  // One batched step: tokens[batch] at every row's position. Logits stay on the device.
  void decode(const std::vector<int32_t>& tokens);
  // Greedy argmax of every row's current logits, on the GPU: [batch] token ids.
  std::vector<int32_t> argmax();
  // Every row's next token by Sampler's rule, on the GPU, with the draws uniforms[batch] in [0, 1):
  // the token Sampler::sample would return for the same logits when its generator drew uniforms[r].
  std::vector<int32_t> sample(const SamplerOptions& opt, const std::vector<double>& uniforms);
  // `steps` greedy steps entirely on the device (argmax feeds the next step); returns the last
  // tokens. For throughput runs: one host sync at the end.
  std::vector<int32_t> decode_greedy(int steps);
  // Teacher-forced NLLs of equal-length texts, a row each (texts.size() = batch): prefill_rows
  // of their first tokens with `evict`, then each step feeds every row its next token;
  // out[r][i] = NLL of texts[r][i + 1] (ModelRuntime::token_nlls). The NLLs are computed on the
  // device and download once at the end.
  std::vector<std::vector<double>> token_nlls(const std::vector<std::vector<int32_t>>& texts,
                                              const EvictConfig& evict);
  std::vector<float> logits(int row);     // [V] of one row (downloaded)
  int64_t kv_bytes_per_sequence() const;  // row 0
  int64_t position(int row) const;
  int64_t kv_rows(int layer, int row) const;
  int batch() const;
  const GpuModel& model() const;
  void synchronize() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Sampler's rule on host logits [rows, V] on the GPU (uploads, samples, downloads): one token per
// row for the draws uniforms[rows]. For tests and tools; sessions sample their device logits.
std::vector<int32_t> sample_logits(const std::vector<float>& logits, int rows,
                                   const SamplerOptions& opt, const std::vector<double>& uniforms);

}  // namespace kvevict::gpu
