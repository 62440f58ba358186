#include "kvevict/model/weights.h"

#include <cmath>
#include <string>

#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/parallel.h"

namespace kvevict {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

HostTensor load(const gguf::File& f, const std::string& name, std::vector<int64_t> expected,
                bool optional = false) {
  const gguf::TensorInfo* info = f.find(name);
  if (info == nullptr) {
    KVEVICT_CHECK(optional, f.path(), ": missing tensor ", name, " of shape ",
                  shape_text(expected), "; expected it for this architecture");
    return {};
  }
  KVEVICT_CHECK(info->shape == expected, f.path(), ": tensor ", name, " has shape ",
                shape_text(info->shape), "; expected ", shape_text(expected),
                " from the metadata");
  KVEVICT_CHECK(gguf::ggml_type_supported(static_cast<uint32_t>(info->type)), f.path(),
                ": tensor ", name, " has unsupported type ",
                gguf::ggml_type_name(static_cast<uint32_t>(info->type)));
  return gguf::dequantize(*info);
}

// splitmix64: a counter-based generator, so every element's value depends only on (seed, index)
// and the fill is identical for any thread count.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

HostTensor random_tensor(std::vector<int64_t> shape, uint64_t seed, float stddev) {
  HostTensor t(DType::kF32, std::move(shape));
  float* p = t.ptr<float>();
  const int64_t n = t.numel();
  const float a = stddev * std::sqrt(3.0f);  // uniform(-a, a) has this stddev
  constexpr int64_t kChunk = 1 << 16;
  parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      const double u = static_cast<double>(mix(seed ^ mix(static_cast<uint64_t>(i))) >> 11) *
                       (1.0 / 9007199254740992.0);
      p[i] = static_cast<float>((2.0 * u - 1.0) * a);
    }
  });
  return t;
}

HostTensor ones(int64_t n) {
  HostTensor t(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = 1.0f;
  return t;
}

}  // namespace

int64_t ModelWeights::bytes() const {
  int64_t b = token_embd.nbytes() + output_norm.nbytes() + output.nbytes() + rope_freqs.nbytes();
  for (const auto& l : layers) {
    for (const HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                                &l.q_norm, &l.k_norm, &l.post_attn_norm, &l.ffn_norm, &l.w_gate,
                                &l.w_up, &l.w_down, &l.post_ffn_norm})
      b += static_cast<int64_t>(t->nbytes());
  }
  return b;
}

ModelWeights ModelWeights::from_gguf(const gguf::File& f, const ModelConfig& c) {
  const int64_t D = c.n_embd, V = c.vocab_size, F = c.ffn_dim;
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t k_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t v_dim = int64_t{c.n_kv_heads} * c.value_dim;
  const int64_t o_dim = int64_t{c.n_heads} * c.value_dim;
  ModelWeights w;
  w.token_embd = load(f, "token_embd.weight", {V, D});
  w.output_norm = load(f, "output_norm.weight", {D});
  if (!c.tied_embeddings) w.output = load(f, "output.weight", {V, D});
  w.rope_freqs = load(f, "rope_freqs.weight", {c.head_dim / 2}, /*optional=*/true);
  w.layers.resize(c.n_layers);
  parallel_for(c.n_layers, [&](int64_t il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w.layers[il];
    l.attn_norm = load(f, b + "attn_norm.weight", {D});
    l.wq = load(f, b + "attn_q.weight", {q_dim, D});
    l.wk = load(f, b + "attn_k.weight", {k_dim, D});
    l.wv = load(f, b + "attn_v.weight", {v_dim, D});
    l.wo = load(f, b + "attn_output.weight", {D, o_dim});
    if (c.qkv_bias) {
      l.bq = load(f, b + "attn_q.bias", {q_dim});
      l.bk = load(f, b + "attn_k.bias", {k_dim});
      l.bv = load(f, b + "attn_v.bias", {v_dim});
    }
    if (c.qk_norm) {
      l.q_norm = load(f, b + "attn_q_norm.weight", {c.head_dim});
      l.k_norm = load(f, b + "attn_k_norm.weight", {c.head_dim});
    }
    l.ffn_norm = load(f, b + "ffn_norm.weight", {D});
    if (c.post_norms) {
      l.post_attn_norm = load(f, b + "post_attention_norm.weight", {D});
      l.post_ffn_norm = load(f, b + "post_ffw_norm.weight", {D});
    }
    l.w_gate = load(f, b + "ffn_gate.weight", {F, D});
    l.w_up = load(f, b + "ffn_up.weight", {F, D});
    l.w_down = load(f, b + "ffn_down.weight", {D, F});
  });
  return w;
}

ModelWeights ModelWeights::random(const ModelConfig& c, uint64_t seed) {
  c.validate();
  const int64_t D = c.n_embd, V = c.vocab_size, F = c.ffn_dim;
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t k_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t v_dim = int64_t{c.n_kv_heads} * c.value_dim;
  const int64_t o_dim = int64_t{c.n_heads} * c.value_dim;
  constexpr float kStd = 0.02f;
  uint64_t s = mix(seed);
  auto next = [&s]() { return s = mix(s); };
  ModelWeights w;
  w.token_embd = random_tensor({V, D}, next(), 1.0f);  // embeddings of unit scale
  w.output_norm = ones(D);
  if (!c.tied_embeddings) w.output = random_tensor({V, D}, next(), kStd);
  w.layers.resize(c.n_layers);
  for (auto& l : w.layers) {
    l.attn_norm = ones(D);
    l.wq = random_tensor({q_dim, D}, next(), kStd);
    l.wk = random_tensor({k_dim, D}, next(), kStd);
    l.wv = random_tensor({v_dim, D}, next(), kStd);
    l.wo = random_tensor({D, o_dim}, next(), kStd);
    if (c.qkv_bias) {
      l.bq = random_tensor({q_dim}, next(), kStd);
      l.bk = random_tensor({k_dim}, next(), kStd);
      l.bv = random_tensor({v_dim}, next(), kStd);
    }
    if (c.qk_norm) {
      l.q_norm = ones(c.head_dim);
      l.k_norm = ones(c.head_dim);
    }
    l.ffn_norm = ones(D);
    if (c.post_norms) {
      l.post_attn_norm = ones(D);
      l.post_ffn_norm = ones(D);
    }
    l.w_gate = random_tensor({F, D}, next(), kStd);
    l.w_up = random_tensor({F, D}, next(), kStd);
    l.w_down = random_tensor({D, F}, next(), kStd);
  }
  return w;
}

}  // namespace kvevict
