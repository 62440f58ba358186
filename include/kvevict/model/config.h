// The shape and conventions of a decoder-only transformer, read from GGUF metadata (archs llama,
// qwen2, gemma3) or taken from a named preset of a real model (for random-weight speed runs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict {

namespace gguf {
class File;
}

enum class Arch : uint8_t { kLlama, kQwen2, kGemma3 };
const char* arch_name(Arch a);

// How RoPE pairs the dimensions of a head. GGUF's llama conversion permutes the Q/K rows so
// that llama.cpp rotates adjacent pairs (2i, 2i+1) ("normal"); qwen2 and gemma3 keep the
// Hugging Face layout and rotate (i, i + d/2) ("neox").
enum class RopeStyle : uint8_t { kNormal, kNeox };

enum class FfnActivation : uint8_t { kSilu, kGeluTanh };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string name;  // general.name or the preset name
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // the longest prompt + generation the model accepts
  int n_embd = 0;              // D
  int n_layers = 0;
  int n_heads = 0;     // Hq
  int n_kv_heads = 0;  // Hkv
  int head_dim = 0;    // d of queries and keys
  int value_dim = 0;   // d of values (equal to head_dim for every supported arch)
  int ffn_dim = 0;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kNormal;
  float rope_base = 10000.0f;          // global-attention layers
  float rope_base_sliding = 10000.0f;  // sliding-window layers (gemma3: 10000)
  float rope_linear_scale = 1.0f;  // positions are divided by this on global layers (gemma3 >= 4b)
  int sliding_window = 0;          // 0 = no sliding-window layers
  std::vector<uint8_t> layer_sliding;  // [n_layers] 1 = sliding-window layer
  bool qkv_bias = false;               // qwen2
  bool qk_norm = false;                // gemma3: RMSNorm of every q/k head before RoPE
  bool post_norms = false;             // gemma3: RMSNorm of the attention and FFN outputs
  bool embed_scale = false;            // gemma3: embeddings times sqrt(D)
  float attn_scale = 0.0f;             // logit scale; 0 = 1/sqrt(head_dim)
  float final_logit_softcap = 0.0f;    // 0 = off; else logits = c * tanh(logits / c)
  FfnActivation activation = FfnActivation::kSilu;
  bool tied_embeddings = true;  // output projection = token embedding

  // Reads {arch}.* keys; throws naming an unsupported architecture or a missing/bad key.
  static ModelConfig from_gguf(const gguf::File& file);
  // "llama-3.1-8b", "qwen2.5-7b", "smollm2-135m", "gemma3-270m" (real shapes, for random weights).
  static ModelConfig preset(const std::string& name);
  static const std::vector<std::string>& preset_names();

  bool is_sliding(int layer) const { return !layer_sliding.empty() && layer_sliding[layer] != 0; }
  float layer_rope_base(int layer) const {
    return is_sliding(layer) ? rope_base_sliding : rope_base;
  }
  float logit_scale() const;  // attn_scale or 1/sqrt(head_dim)
  int64_t num_params() const;
  void validate() const;  // throws naming the inconsistent field
  std::string describe() const;
};

}  // namespace kvevict
