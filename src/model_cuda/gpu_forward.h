// The decoder's forward pass on the GPU (internal to the GPU runtime): llama / qwen2 / gemma3 in
// bf16 with cuBLAS projections (bf16 in, f32 accumulation; fused decode steps take the GEMV of
// src/cuda/decode_gemv.cu for small matrices, norm and activation fused: fused_step_policy.h),
// fused q/k/v and gate/up weights, RoPE + cache append in one kernel, a causal flash-style prefill
// attention (the window kernel of src/cuda with the whole chunk as its window) and a tensor-core
// decode attention over the per-head variable-length compacted cache. It owns the activations
// (scratch of one pass, grown as passes need) and the cuBLAS handle, and runs on its context's
// stream; one GpuForward serves every session of a runtime, one pass at a time. The caches and
// logits it writes belong to the caller.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/model_launchers.h"
#include "kvevict/decode_evict.h"
#include "model_cuda/decode_graph.h"
#include "model_cuda/fused_step_policy.h"
#include "model_cuda/gpu_model_impl.h"
#include "model_cuda/layer_cache.h"

namespace kvevict::gpu {

// The decode-time step score (SPEC section 5) the decode attention computes for every cached row
// of the full-attention layers and adds to (tova: writes into) their accumulators.
struct StepScoring {
  DecodeScore score = DecodeScore::kAttentionSum;
  bool replace = false;  // tova
  double one_minus_p_floor = 1e-12;
  bool fused = true;         // logits exported by the attention (no second read of K)
  bool in_attention = true;  // scores inside the attention launch where it covers the shape
  int in_attention_min_segments = 0;  // 0 = the SM count
};

class GpuForward {
 public:
  GpuForward(const GpuModel::Impl& model, cudaStream_t stream);
  ~GpuForward();
  GpuForward(const GpuForward&) = delete;
  GpuForward& operator=(const GpuForward&) = delete;

  // One prefill pass: tokens[T] (host) of the batch row `seq` at positions p0 .. p0 + T - 1,
  // appended to segments seq * Hkv .. of every layer (full layout: row = position). Query rows of
  // positions [n_total - need, n_total) are copied into qcap[l] ([Hq, need, d] bf16) when qcap is
  // given. logits non-null: [V] f32 of the last token.
  void prefill_chunk(const int32_t* tokens, int64_t T, int64_t p0, int seq,
                     std::vector<LayerCache>& layers, int64_t need, int64_t n_total,
                     std::vector<cuda::DeviceBuffer>* qcap, float* logits);
  // One decode step of every batch row: tokens_dev[B] at positions[B]; each row's token is
  // appended to its segments (host mirrors advance with the device lengths). argmax_first: the
  // step first writes tokens_dev = the argmax of every row's logits (greedy decoding on the
  // device). scoring non-null: the step scores of the full-attention layers.
  // logits: [B, V] f32, every row's next-token logits.
  // The launches run as a CUDA graph (decode_graph.h) replayed while batch, buffers, caches'
  // layout and scoring stay the same, recorded again when they change; KVEVICT_DECODE_GRAPH=0 or
  // set_decode_graph(false) launches them eagerly. Both give the same results bit for bit.
  void decode_step(int32_t* tokens_dev, bool argmax_first, const std::vector<int64_t>& positions,
                   std::vector<LayerCache>& layers, const StepScoring* scoring, float* logits);
  void set_decode_graph(bool on) { graph_on_ = on; }
  bool decode_graph() const { return graph_on_; }
  // The fused decode step (fused_step_policy.h; KVEVICT_DECODE_FUSED and KVEVICT_GEMV_ROUTE set
  // both at construction): the projections of a fused step go through decode_gemv.cu where the
  // route takes them (norm, activation, RoPE + append fused) and the decode attention merges its
  // splits inside its own launch. Default: steps of one sequence, matrices of up to 8 MiB.
  void set_decode_fused(FusedStep mode) { fused_mode_ = mode; }
  FusedStep decode_fused() const { return fused_mode_; }
  // The fused step's batch-1 GEMVs load their weights into registers before their dependency
  // waits (GemvArgs::preload; KVEVICT_GEMV_PRELOAD at construction, default on).
  void set_gemv_preload(bool on) { gemv_preload_ = on; }
  bool gemv_preload() const { return gemv_preload_; }
  // gemma3's folds in the fused step's preloaded batch-1 GEMVs (fused_step_policy.h;
  // KVEVICT_GEMV_FOLDS at construction, default off).
  void set_gemv_folds(bool on) { gemv_folds_ = on; }
  bool gemv_folds() const { return gemv_folds_; }
  const DecodeGraphStats& decode_graph_stats() const { return graph_.stats(); }
  cublasHandle_t blas() const { return blas_; }
  int sm_count() const { return sm_count_; }

 private:
  using bf16 = __nv_bfloat16;
  const ModelConfig& c() const { return w_.config; }
  float embed_mul() const;
  void ensure_batch(int T);
  detail::GemvArgs normed_gemv(const float* x, const float* norm, const bf16* w, int64_t n_out,
                               int64_t T, detail::GemvOut out) const;
  bool try_gemv(const detail::GemvArgs& a);
  bool try_normed_gemv(const detail::GemvArgs& a);
  bool post_can_wait(int64_t T) const;
  void flush_post();
  void norm_and_project(const float* norm, const bf16* w, int64_t out, void* y, int64_t T);
  void ffn_and_residual(const GpuModel::Impl::Layer& L, int64_t T);
  void project_into_residual(const bf16* in, int64_t T, const bf16* w, int64_t in_dim,
                             const float* post_norm);
  void final_logits(int64_t rows, int64_t stride, float* logits);
  // The launches of one decode step (capturable: no synchronization, no allocation).
  void enqueue_decode(int32_t* tokens_dev, bool argmax_first, int B,
                      std::vector<LayerCache>& layers, const StepScoring* scoring, float* logits);
  // What the host decides per layer for a decode step.
  struct DecodeLayerPlan {
    int64_t plan_len = 0;  // the split plan's length bound: the largest segment capacity
    bool score = false, fused = false, in_attention = false;
  };
  void gemm(const bf16* x, int64_t T, const bf16* w, int64_t out, int64_t in, void* y, bool y_f32,
            float beta);

  const GpuModel::Impl& w_;
  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  int sm_count_ = 132;
  int64_t t_max_ = 0;  // rows of every activation buffer
  // Activations. T = tokens of one pass (a prefill chunk or one per sequence).
  cuda::DeviceBuffer x_;        // [T, D] f32 residual stream
  cuda::DeviceBuffer xn_;       // [T, D] bf16 normed
  cuda::DeviceBuffer qkv_;      // [T, (Hq + 2 Hkv) d] bf16
  cuda::DeviceBuffer qh_;       // [Hq, T, d] (prefill) or [T, Hq, d] (decode) bf16 queries
  cuda::DeviceBuffer attn_f_;   // [B, Hq, d] f32 decode attention outputs a (grow-only)
  cuda::DeviceBuffer lse_;      // [B, Hq] f32 decode lse (grow-only)
  cuda::DeviceBuffer attn_;     // [T, Hq d] bf16
  cuda::DeviceBuffer o_f_;      // [T, D] f32 projection output before gemma3's post-norms
  cuda::DeviceBuffer gu_;       // [T, 2F] bf16
  cuda::DeviceBuffer hbuf_;     // [T, F] bf16
  cuda::DeviceBuffer tokens_;   // [T] i32
  cuda::DeviceBuffer pos_;      // [T] i32
  cuda::DeviceBuffer scratch_;  // attention split partials (grow-only)
  cuda::DeviceBuffer zbuf_;     // [rows, G] f32 step logits of the layer being scored (grow-only)
  cuda::DeviceBuffer step_counters_;  // [B Hkv] u32 arrival counters (fused step scores, merge)
  cuda::DeviceBuffer blas_ws_;        // cuBLAS workspace
  int32_t* pos_pinned_ = nullptr;     // [t_max] pinned staging of decode positions
  cudaEvent_t pos_staged_ = nullptr;  // recorded after the last staged upload
  bool graph_on_ = true;
  FusedStep fused_mode_ = FusedStep::kBatchOne;  // which decode steps are fused
  GemvRoute gemv_route_ = GemvRoute::kSmall;     // which of their projections the GEMV takes
  bool fused_now_ = false;  // the pass being enqueued is fused (try_gemv reads it)
  // gemma3's post-norm + residual add of the fused step's last o / down projection,
  // x += rms_norm(o_f) w, left to the next GEMV that norms x (GemvArgs::post_in): w [D], or null.
  // Set and cleared while a step is enqueued; nothing is pending between passes.
  const float* pending_post_ = nullptr;
  DecodeGraph graph_;
  std::vector<DecodeLayerPlan> plans_;  // [n_layers] of the step being made
  std::vector<int64_t> key_;            // the step's graph key (kept to reuse its storage)
  bool gemv_preload_ = true;            // GemvArgs::preload of the fused step's GEMVs
  bool gemv_folds_ = false;             // gemma3's post-norm and q / k norm folds
};

}  // namespace kvevict::gpu
