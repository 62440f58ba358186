#include "kvevict/model/config.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kGemma3: return "gemma3";
  }
  return "?";
}

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;      // any one dimension, and Hq * d
constexpr int64_t kMaxContext = int64_t{1} << 24;  // 16M tokens; the longest real context is 10M

int64_t need_int(const gguf::File& f, const std::string& key) {
  KVEVICT_CHECK(f.has(key), f.path(), ": missing metadata key ", key,
                "; expected it for this architecture");
  return f.get(key).as_int(key);
}

int checked_dim(int64_t v, const std::string& key) {
  KVEVICT_CHECK(v > 0 && v <= (int64_t{1} << 24), "metadata ", key, " = ", v,
                " is out of range; expected 1 .. 2^24");
  return static_cast<int>(v);
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture", "");
  ModelConfig c;
  if (arch == "llama") {
    c.arch = Arch::kLlama;
  } else if (arch == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (arch == "gemma3") {
    c.arch = Arch::kGemma3;
  } else {
    KVEVICT_FAIL(f.path(), ": unsupported architecture '", arch,
                 "'; expected one of llama, qwen2, gemma3");
  }
  const std::string p = arch + ".";
  c.name = f.get_string("general.name", arch);
  c.context_length = need_int(f, p + "context_length");
  KVEVICT_CHECK(c.context_length > 0, "metadata ", p, "context_length = ", c.context_length,
                "; expected > 0");
  c.n_embd = checked_dim(need_int(f, p + "embedding_length"), p + "embedding_length");
  c.n_layers = checked_dim(need_int(f, p + "block_count"), p + "block_count");
  c.ffn_dim = checked_dim(need_int(f, p + "feed_forward_length"), p + "feed_forward_length");
  c.n_heads = checked_dim(need_int(f, p + "attention.head_count"), p + "attention.head_count");
  c.n_kv_heads = checked_dim(f.get_int(p + "attention.head_count_kv", c.n_heads),
                             p + "attention.head_count_kv");
  KVEVICT_CHECK(f.has(p + "attention.key_length") || c.n_embd % c.n_heads == 0, f.path(), ": ", p,
                "embedding_length = ", c.n_embd, " is not a multiple of ", p,
                "attention.head_count = ", c.n_heads, " and ", p,
                "attention.key_length is absent; expected one of them to give the head dim");
  c.head_dim = checked_dim(f.get_int(p + "attention.key_length", c.n_embd / c.n_heads),
                           p + "attention.key_length");
  c.value_dim = checked_dim(f.get_int(p + "attention.value_length", c.head_dim),
                            p + "attention.value_length");
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = static_cast<float>(f.get_float(p + "rope.freq_base", 10000.0));
  c.rope_base_sliding = c.rope_base;
  const int64_t rope_dims = f.get_int(p + "rope.dimension_count", c.head_dim);
  KVEVICT_CHECK(rope_dims == c.head_dim, f.path(), ": ", p, "rope.dimension_count = ", rope_dims,
                " (partial RoPE) is not supported; expected the head dim ", c.head_dim);
  const std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_linear_scale = static_cast<float>(f.get_float(p + "rope.scaling.factor", 1.0));
  } else {
    KVEVICT_CHECK(scaling == "none" || scaling == "", f.path(), ": rope scaling '", scaling,
                  "' is not supported; expected none or linear");
  }
  const auto* embd = f.find("token_embd.weight");
  KVEVICT_CHECK(embd != nullptr, f.path(), ": missing tensor token_embd.weight");
  KVEVICT_CHECK(embd->shape.size() == 2, f.path(), ": token_embd.weight has ", embd->shape.size(),
                " dims; expected 2");
  c.vocab_size = embd->shape[0];
  c.tied_embeddings = f.find("output.weight") == nullptr;
  // Token ids index token_embd's rows: a vocabulary larger than the table would read past it.
  const int64_t meta_vocab = f.get_int(p + "vocab_size", c.vocab_size);
  KVEVICT_CHECK(meta_vocab == c.vocab_size, f.path(), ": ", p, "vocab_size = ", meta_vocab,
                " but token_embd.weight has ", c.vocab_size, " rows; expected them equal");
  if (f.has("tokenizer.ggml.tokens")) {
    const auto n_tokens = static_cast<int64_t>(
        f.get("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens").size());
    KVEVICT_CHECK(n_tokens <= c.vocab_size, f.path(), ": tokenizer.ggml.tokens lists ", n_tokens,
                  " tokens but token_embd.weight has only ", c.vocab_size,
                  " rows; expected at most one token per row");
  }

  switch (c.arch) {
    case Arch::kLlama:
      // convert_hf_to_gguf permutes Q/K rows for llama so that adjacent pairs rotate.
      c.rope_style = RopeStyle::kNormal;
      break;
    case Arch::kQwen2:
      c.rope_style = RopeStyle::kNeox;
      c.qkv_bias = true;
      break;
    case Arch::kGemma3: {
      c.rope_style = RopeStyle::kNeox;
      c.qk_norm = true;
      c.post_norms = true;
      c.embed_scale = true;
      c.activation = FfnActivation::kGeluTanh;
      // Local layers use RoPE base 10000 and no scaling; llama.cpp hard-codes both for gemma3.
      c.rope_base_sliding = 10000.0f;
      const int64_t window = f.get_int(p + "attention.sliding_window", 0);
      KVEVICT_CHECK(window >= 0 && window <= kMaxContext, f.path(), ": ", p,
                    "attention.sliding_window = ", window, "; expected 0 .. 2^24 (0 = none)");
      c.sliding_window = static_cast<int>(window);
      // Every 6th layer is global (llama.cpp's swa pattern for gemma3: il % 6 < 5 is local).
      const int64_t pattern = f.get_int(p + "attention.sliding_window_pattern", 6);
      KVEVICT_CHECK(pattern >= 1 && pattern <= kMaxDim, f.path(), ": ", p,
                    "attention.sliding_window_pattern = ", pattern, "; expected 1 .. 2^24");
      c.layer_sliding.assign(c.n_layers, 0);
      if (c.sliding_window > 0) {
        for (int l = 0; l < c.n_layers; ++l) c.layer_sliding[l] = (l % pattern) < pattern - 1;
      }
      // llama.cpp: 1/sqrt(head_dim) except the 27B (query_pre_attn_scalar = D / Hq).
      c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      c.final_logit_softcap = static_cast<float>(f.get_float(p + "final_logit_softcapping", 0.0));
      break;
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    KVEVICT_FAIL(f.path(), ": ", e.what());
  }
  return c;
}

const std::vector<std::string>& ModelConfig::preset_names() {
  static const std::vector<std::string> names = {"llama-3.1-8b", "qwen2.5-7b", "smollm2-135m",
                                                 "gemma3-270m"};
  return names;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  ModelConfig c;
  c.name = name;
  if (name == "llama-3.1-8b") {
    c.arch = Arch::kLlama;
    c.vocab_size = 128256;
    c.context_length = 131072;
    c.n_embd = 4096;
    c.n_layers = 32;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 128;
    c.ffn_dim = 14336;
    c.rms_eps = 1e-5f;
    c.rope_base = 500000.0f;
    c.tied_embeddings = false;
  } else if (name == "qwen2.5-7b") {
    c.arch = Arch::kQwen2;
    c.vocab_size = 152064;
    c.context_length = 32768;
    c.n_embd = 3584;
    c.n_layers = 28;
    c.n_heads = 28;
    c.n_kv_heads = 4;
    c.head_dim = 128;
    c.ffn_dim = 18944;
    c.rms_eps = 1e-6f;
    c.rope_base = 1000000.0f;
    c.rope_style = RopeStyle::kNeox;
    c.qkv_bias = true;
    c.tied_embeddings = false;
  } else if (name == "smollm2-135m") {
    c.arch = Arch::kLlama;
    c.vocab_size = 49152;
    c.context_length = 8192;
    c.n_embd = 576;
    c.n_layers = 30;
    c.n_heads = 9;
    c.n_kv_heads = 3;
    c.head_dim = 64;
    c.ffn_dim = 1536;
    c.rms_eps = 1e-5f;
    c.rope_base = 100000.0f;
  } else if (name == "gemma3-270m") {
    // Gemma 3 270M as its GGUF (gemma-3-270m-q4_k_m.gguf) reads through from_gguf.
    c.arch = Arch::kGemma3;
    c.vocab_size = 262144;
    c.context_length = 32768;
    c.n_embd = 640;
    c.n_layers = 18;
    c.n_heads = 4;
    c.n_kv_heads = 1;
    c.head_dim = 256;
    c.ffn_dim = 2048;
    c.rms_eps = 1e-6f;
    c.rope_base = 1000000.0f;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = true;
    c.post_norms = true;
    c.embed_scale = true;
    c.activation = FfnActivation::kGeluTanh;
    c.sliding_window = 512;
    c.layer_sliding.assign(c.n_layers, 0);
    for (int l = 0; l < c.n_layers; ++l) c.layer_sliding[l] = (l % 6) < 5;  // every 6th is global
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  } else {
    std::string all;
    for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
    KVEVICT_FAIL("unknown model preset '", name, "'; expected one of ", all);
  }
  c.rope_base_sliding = c.arch == Arch::kGemma3 ? 10000.0f : c.rope_base;
  c.value_dim = c.head_dim;
  c.validate();
  return c;
}

float ModelConfig::logit_scale() const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int64_t ModelConfig::num_params() const {
  const int64_t D = n_embd, d = head_dim, dv = value_dim;
  int64_t per_layer = D * (n_heads * d) + 2 * D * (n_kv_heads * d) - D * n_kv_heads * (d - dv) +
                      D * n_heads * dv + 3 * D * ffn_dim + 2 * D;
  if (qkv_bias) per_layer += n_heads * d + n_kv_heads * (d + dv);
  if (qk_norm) per_layer += 2 * d;
  if (post_norms) per_layer += 2 * D;
  return per_layer * n_layers + vocab_size * D * (tied_embeddings ? 1 : 2) + D;
}

void ModelConfig::validate() const {
  // Every hyper-parameter the runtime reads, with the GGUF key it comes from, so that a corrupt
  // or hostile file fails here instead of loading and printing garbage (issue 13: rope.freq_base
  // NaN and a negative layer_norm_rms_epsilon loaded).
  const std::string a = std::string(arch_name(arch)) + ".";
  KVEVICT_CHECK(vocab_size > 0 && vocab_size <= std::numeric_limits<int32_t>::max(),
                "model config: vocab_size (rows of token_embd.weight) = ", vocab_size,
                "; expected 1 .. 2^31-1 (token ids are int32)");
  KVEVICT_CHECK(context_length > 0 && context_length <= kMaxContext,
                "model config: context length (GGUF ", a, "context_length) = ", context_length,
                "; expected 1 .. 2^24");
  KVEVICT_CHECK(
      n_embd > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && ffn_dim > 0,
      "model config: every dimension must be positive; got D=", n_embd, " layers=", n_layers,
      " Hq=", n_heads, " Hkv=", n_kv_heads, " d=", head_dim, " F=", ffn_dim);
  KVEVICT_CHECK(n_embd <= kMaxDim && n_layers <= kMaxDim && ffn_dim <= kMaxDim &&
                    head_dim <= kMaxDim && value_dim <= kMaxDim,
                "model config: a dimension exceeds 2^24; got D=", n_embd, " layers=", n_layers,
                " d=", head_dim, " dv=", value_dim, " F=", ffn_dim);
  KVEVICT_CHECK(n_heads <= kMaxDim && int64_t{n_heads} * head_dim <= kMaxDim,
                "model config: ", n_heads, " query heads (GGUF ", a,
                "attention.head_count) of dim ", head_dim, " make ", int64_t{n_heads} * head_dim,
                " query rows; expected at most 2^24");
  KVEVICT_CHECK(n_heads % n_kv_heads == 0, "model config: Hq = ", n_heads, " (GGUF ", a,
                "attention.head_count) is not a multiple of Hkv = ", n_kv_heads, " (", a,
                "attention.head_count_kv)");
  KVEVICT_CHECK(head_dim % 2 == 0, "model config: head dim ", head_dim, " is odd; RoPE needs even");
  KVEVICT_CHECK(value_dim == head_dim, "model config: value dim ", value_dim,
                " differs from the key dim ", head_dim, "; expected equal");
  KVEVICT_CHECK(layer_sliding.empty() || static_cast<int>(layer_sliding.size()) == n_layers,
                "model config: layer_sliding has ", layer_sliding.size(), " entries; expected ",
                n_layers);
  KVEVICT_CHECK(
      std::isfinite(rms_eps) && rms_eps > 0 && rms_eps < 1, "model config: RMSNorm epsilon (GGUF ",
      a, "attention.layer_norm_rms_epsilon) = ", rms_eps, "; expected a finite value in (0, 1)");
  KVEVICT_CHECK(std::isfinite(rope_base) && rope_base > 0, "model config: RoPE base (GGUF ", a,
                "rope.freq_base) = ", rope_base, "; expected a finite value > 0");
  KVEVICT_CHECK(std::isfinite(rope_base_sliding) && rope_base_sliding > 0,
                "model config: sliding-layer RoPE base = ", rope_base_sliding,
                "; expected a finite value > 0");
  KVEVICT_CHECK(std::isfinite(rope_linear_scale) && rope_linear_scale > 0,
                "model config: rope scale (GGUF ", a, "rope.scaling.factor) = ", rope_linear_scale,
                "; expected a finite value > 0");
  KVEVICT_CHECK(std::isfinite(attn_scale) && attn_scale >= 0, "model config: attention scale ",
                attn_scale, "; expected a finite value >= 0 (0 = 1/sqrt(head dim))");
  KVEVICT_CHECK(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0,
                "model config: final logit softcap (GGUF ", a,
                "final_logit_softcapping) = ", final_logit_softcap,
                "; expected a finite value >= 0 (0 = off)");
  bool any_sliding = false;
  for (uint8_t s : layer_sliding) any_sliding = any_sliding || s != 0;
  KVEVICT_CHECK(sliding_window >= 0 && (!any_sliding || sliding_window > 0),
                "model config: sliding window (GGUF ", a,
                "attention.sliding_window) = ", sliding_window,
                "; expected >= 1 where layers slide, 0 = none");
}

std::string ModelConfig::describe() const {
  std::ostringstream os;
  os << name << " (" << arch_name(arch) << "): layers=" << n_layers << " D=" << n_embd
     << " Hq=" << n_heads << " Hkv=" << n_kv_heads << " d=" << head_dim << " F=" << ffn_dim
     << " V=" << vocab_size << " ctx=" << context_length << " rope_base=" << rope_base;
  if (sliding_window > 0) os << " sliding_window=" << sliding_window;
  return os.str();
}

}  // namespace kvevict
