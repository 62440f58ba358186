// Small model configs of the GPU runtime's tests (random weights): llama / qwen2 shapes and a
// gemma3 with every feature switched on.
#pragma once

#include "kvevict/model/model.h"

namespace kvevict::testing {

inline ModelConfig tiny_config(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.name = arch == Arch::kLlama ? "tiny-llama" : "tiny-qwen2";
  c.vocab_size = 517;
  c.context_length = 4096;
  c.n_embd = 256;
  c.n_layers = 3;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = arch == Arch::kLlama ? 64 : 128;
  c.value_dim = c.head_dim;
  c.ffn_dim = 384;
  c.rope_base = 10000.0f;
  c.rope_base_sliding = c.rope_base;
  if (arch == Arch::kQwen2) {
    c.rope_style = RopeStyle::kNeox;
    c.qkv_bias = true;
    c.tied_embeddings = false;
  }
  return c;
}

// A small gemma3 with every feature switched to a value that shows a mistake: an odd window (37)
// shorter than a prefill chunk, local layers 0, 1, 3 and a global layer 2 with RoPE scaling (the
// local layers use their own base and none), two KV heads, a non-default logit scale, and final
// soft-capping.
inline ModelConfig tiny_gemma() {
  ModelConfig c;
  c.arch = Arch::kGemma3;
  c.name = "tiny-gemma3";
  c.vocab_size = 613;
  c.context_length = 4096;
  c.n_embd = 192;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = c.value_dim = 256;
  c.ffn_dim = 320;
  c.rms_eps = 1e-6f;
  c.rope_style = RopeStyle::kNeox;
  c.rope_base = 1000000.0f;
  c.rope_base_sliding = 10000.0f;
  c.rope_linear_scale = 2.0f;
  c.qk_norm = c.post_norms = c.embed_scale = true;
  c.activation = FfnActivation::kGeluTanh;
  c.sliding_window = 37;
  c.layer_sliding = {1, 1, 0, 1};
  c.attn_scale = 0.07f;
  c.final_logit_softcap = 30.0f;
  return c;
}

}  // namespace kvevict::testing
