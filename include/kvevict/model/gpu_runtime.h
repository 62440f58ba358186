// The model runtime on the GPU (issue 4, CUDA half): llama / qwen2 / gemma3 decoders in bf16 with
// cuBLAS
// projections (bf16 in, f32 accumulation), a causal flash-style prefill attention (the mma.sync
// split-K window kernel of src/cuda, run with the whole chunk as its window), a decode attention
// over the per-head variable-length compacted cache, sampling on the GPU (argmax, or Sampler's
// temperature / top-k / top-p rule), and one-shot
// prefill eviction per layer (SPEC section 5) with the CUDA score / select kernels (uniform
// policy) or the CPU LayerEvictor on downloaded K/V for the other methods and policies.
//
// No CUDA header is needed to include this file. Without a CUDA build every entry point throws
// a kvevict::Error that says so; gpu_available() is false. Decode-time eviction (SPEC section 5)
// scores every step on the GPU and evicts over-long heads.
//
// Batches: a session holds `batch` sequences. prefill() fills sequence 0; replicate_sequence()
// copies its (evicted) cache to the other rows, so decode throughput can be measured at the
// largest batch that fits (every row then holds the same cache, which costs the same memory and
// attention work as distinct prompts of the same length would).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/model/model.h"
#include "kvevict/model/sampler.h"
#include "kvevict/model/session.h"

namespace kvevict::gpu {

// True when this build has the CUDA model runtime and a device is present (never throws).
bool gpu_available();
// Throws naming the reason (no CUDA build, no device, unsupported architecture or head dim) when
// `config` cannot run on the GPU.
void check_supported(const ModelConfig& config);

// Weights in device memory: bf16 matrices (q/k/v fused into one [(Hq + 2 Hkv) d, D] matrix, gate
// and up into one [2F, D]), f32 norms and biases.
class GpuModel {
 public:
  // Uploads a loaded model (GGUF or Model::random), rounding every matrix to bf16.
  static std::shared_ptr<const GpuModel> upload(const Model& model);
  // The weights Model::random(config, seed) would make (same values, rounded to bf16), generated
  // on the device (a real-shape 8B model needs no 32 GB of host memory). Throws naming the
  // preset and the bytes needed when the device lacks the memory.
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

struct GpuSessionOptions {
  int batch = 1;                 // sequences decoded together
  int64_t max_prompt = 0;        // longest prompt prefilled into sequence 0 (sizes the full cache)
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
  // false: always the second kernel (session 3's path, kept for comparisons).
  bool scores_in_attention = true;
  int scores_in_attention_min_segments = 0;
  void validate() const;
};

// Device seconds of the parts of a run (CUDA events on the session's stream).
struct GpuStats {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;  // forward passes of the prompt (no eviction)
  double evict_seconds = 0;    // scores + selection + compaction of every layer
  int64_t decode_steps = 0;    // batched steps (each makes `batch` tokens)
  double decode_seconds = 0;
  int64_t kv_bytes_before = 0;   // device K/V bytes of sequence 0 before prefill eviction
  int64_t kv_bytes_after = 0;    // ... after it
  std::string evict_path;        // "gpu" (CUDA scores + radix select) or "cpu-plan" (fallback)
  int64_t decode_evictions = 0;  // decode steps of a layer that evicted rows
  std::string warning;
};

class GpuSession {
 public:
  GpuSession(std::shared_ptr<const GpuModel> model, GpuSessionOptions opt);
  ~GpuSession();
  GpuSession(GpuSession&&) noexcept;
  GpuSession& operator=(GpuSession&&) noexcept;

  // Prefill of sequence 0 in chunks, then one-shot eviction per layer when evict.prefill is
  // enabled. evict.decode (SPEC section 5) then runs after every decode() step: the step scores
  // accumulate on the GPU; over-long heads are cut with select_head on the host and compacted on
  // the GPU.
  void prefill(const std::vector<int32_t>& tokens, const EvictConfig& evict = EvictConfig::none());
  // More tokens for every sequence of the batch after the prefill (the question of query-agnostic
  // mode); runs them one position at a time over the (compacted) cache.
  void append(const std::vector<int32_t>& tokens);
  // Copies sequence 0's cache and position into sequences 1 .. batch-1.
  void replicate_sequence();
  // One batched step: tokens[batch] at the current positions. Logits stay on the device.
  void decode(const std::vector<int32_t>& tokens);
  // Greedy argmax of every row's current logits, on the GPU: [batch] token ids.
  std::vector<int32_t> argmax();
  // Every row's next token by Sampler's rule (SamplerOptions; temperature 0 = argmax), on the GPU,
  // with the given uniform draws uniforms[batch] in [0, 1): the token Sampler::sample would return
  // for the same logits when its generator drew uniforms[r].
  std::vector<int32_t> sample(const SamplerOptions& opt, const std::vector<double>& uniforms);
  // `steps` greedy steps entirely on the device (argmax feeds the next step); returns the last
  // tokens. For throughput runs: one host sync at the end.
  std::vector<int32_t> decode_greedy(int steps);
  // Logits [V] of one sequence (downloaded).
  std::vector<float> logits(int sequence = 0) const;
  // Sequence 0: samples up to max_new tokens on the GPU, like Session::generate. The draws come
  // from a std::mt19937_64 seeded with sampler.options().seed at this call, one
  // uniform_real_distribution<double>(0, 1) draw per sampled token (none when greedy): the draws a
  // fresh Sampler with these options makes. `sampler` itself is only read (its state is not
  // advanced).
  GenerateResult generate(int max_new, Sampler& sampler,
                          const std::function<bool(int32_t)>& is_stop = nullptr,
                          const std::function<void(int32_t)>& on_token = nullptr);

  int64_t position() const;               // next position of sequence 0
  int64_t kv_rows(int layer) const;       // rows in use of sequence 0, summed over heads
  int64_t kv_bytes_total() const;         // device K/V bytes allocated (all sequences, capacity)
  int64_t kv_bytes_per_sequence() const;  // ... of one sequence
  const GpuStats& stats() const;
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

// Device memory free and total, in bytes.
void device_memory(int64_t* free_bytes, int64_t* total_bytes);

}  // namespace kvevict::gpu
