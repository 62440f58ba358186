// The device weights of a GpuModel (internal to src/model_cuda).
#pragma once

#include <cuda_bf16.h>

#include <vector>

#include "model_cuda/device_memory.h"
#include "model_cuda/gpu_runtime.h"

namespace kvevict::gpu {

struct GpuModel::Impl {
  using bf16 = __nv_bfloat16;
  struct Layer {
    float* attn_norm = nullptr;  // [D]
    bf16* wqkv = nullptr;        // [(Hq + 2 Hkv) d, D] rows of wq, then wk, then wv
    float* bqkv = nullptr;       // [(Hq + 2 Hkv) d] qwen2 biases, else null
    bf16* wo = nullptr;          // [D, Hq d]
    float* ffn_norm = nullptr;   // [D]
    bf16* w_gu = nullptr;        // [2F, D] rows of w_gate, then w_up
    bf16* w_down = nullptr;      // [D, F]
    // gemma3 (null otherwise): per-head q / k norms [d], post-attention / post-FFN norms [D].
    float* q_norm = nullptr;
    float* k_norm = nullptr;
    float* post_attn_norm = nullptr;
    float* post_ffn_norm = nullptr;
  };
  ModelConfig config;
  bf16* token_embd = nullptr;          // [V, D]
  float* output_norm = nullptr;        // [D]
  bf16* output = nullptr;              // [V, D] (token_embd when tied)
  double* inv_freq = nullptr;          // [d / 2] RoPE angle per position (base, scale, rope_freqs)
  double* inv_freq_sliding = nullptr;  // [d / 2] of sliding-window layers (their base, no scale)
  std::vector<Layer> layers;
  std::vector<detail::DeviceBuffer> owned;
  int64_t bytes = 0;
};

}  // namespace kvevict::gpu
