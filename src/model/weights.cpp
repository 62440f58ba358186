#include "kvevict/model/weights.h"

#include <cmath>
#include <mutex>
#include <string>

#include "core/parallel.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The tensor `name` after checking its shape and type; nullptr when optional and absent.
const gguf::TensorInfo* find_checked(const gguf::File& f, const std::string& name,
                                     const std::vector<int64_t>& expected, bool optional) {
  const gguf::TensorInfo* info = f.find(name);
  if (info == nullptr) {
    KVEVICT_CHECK(optional, f.path(), ": missing tensor ", name, " of shape ", shape_text(expected),
                  "; expected it for this architecture");
    return nullptr;
  }
  KVEVICT_CHECK(info->shape == expected, f.path(), ": tensor ", name, " has shape ",
                shape_text(info->shape), "; expected ", shape_text(expected), " from the metadata");
  KVEVICT_CHECK(gguf::ggml_type_supported(static_cast<uint32_t>(info->type)), f.path(), ": tensor ",
                name, " has unsupported type ",
                gguf::ggml_type_name(static_cast<uint32_t>(info->type)));
  return info;
}

// A vector (norm, bias, frequencies): always f32.
HostTensor load(const gguf::File& f, const std::string& name, std::vector<int64_t> expected,
                bool optional = false) {
  const gguf::TensorInfo* info = find_checked(f, name, expected, optional);
  return info == nullptr ? HostTensor() : gguf::dequantize(*info);
}

WeightMatrix load_matrix(const gguf::File& f, const std::string& name,
                         std::vector<int64_t> expected, WeightFormat format) {
  const gguf::TensorInfo* info = find_checked(f, name, expected, false);
  if (format == WeightFormat::kF32) return WeightMatrix(gguf::dequantize(*info));
  return WeightMatrix::view_of(*info);
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

const char* weight_format_name(WeightFormat f) {
  return f == WeightFormat::kF32 ? "f32" : "native";
}

WeightFormat weight_format_parse(const std::string& s) {
  if (s == "native" || s == "gguf" || s == "quantized") return WeightFormat::kNative;
  if (s == "f32") return WeightFormat::kF32;
  KVEVICT_FAIL("weight format '", s, "' is unknown; expected native or f32");
}

struct WeightMatrix::Lazy {
  std::once_flag once;
  HostTensor f32;
};

WeightMatrix WeightMatrix::view_of(const gguf::TensorInfo& t) {
  KVEVICT_CHECK(t.shape.size() == 2, "tensor ", t.name, " has ", t.shape.size(),
                " dims; expected a 2-D weight matrix");
  WeightMatrix w;
  w.type_ = t.type;
  w.rows_ = t.shape[0];
  w.cols_ = t.shape[1];
  w.mapped_ = t.data;
  w.lazy_ = std::make_shared<Lazy>();
  return w;
}

WeightMatrix::WeightMatrix(HostTensor f32) : owned_(std::move(f32)) {
  KVEVICT_CHECK(owned_.dtype() == DType::kF32 && owned_.shape().size() == 2,
                "weight matrix: expected a 2-D f32 tensor");
  rows_ = owned_.shape()[0];
  cols_ = owned_.shape()[1];
}

int64_t WeightMatrix::row_bytes() const {
  return gguf::ggml_row_bytes(type_, cols_);
}

const uint8_t* WeightMatrix::data() const {
  return mapped_ != nullptr ? mapped_ : static_cast<const uint8_t*>(owned_.data());
}

void WeightMatrix::row_f32(int64_t r, float* dst) const {
  KVEVICT_CHECK(r >= 0 && r < rows_, "weight row ", r, " is out of range; expected 0 .. ",
                rows_ - 1);
  gguf::dequantize_row(type_, data() + r * row_bytes(), dst, cols_);
}

HostTensor WeightMatrix::to_f32() const {
  if (f32() != nullptr) return *f32();
  HostTensor t(DType::kF32, {rows_, cols_});
  float* p = t.ptr<float>();
  parallel_for((rows_ + 255) / 256, [&](int64_t c) {
    for (int64_t r = c * 256; r < std::min(rows_, (c + 1) * 256); ++r) row_f32(r, p + r * cols_);
  });
  return t;
}

TensorView WeightMatrix::view() const {
  if (empty()) return {};
  if (f32() != nullptr) return f32()->view();
  std::call_once(lazy_->once, [&] { lazy_->f32 = to_f32(); });
  return lazy_->f32.view();
}

namespace {

WeightMatrix random_matrix(std::vector<int64_t> shape, uint64_t seed, float stddev) {
  return WeightMatrix(random_tensor(std::move(shape), seed, stddev));
}

}  // namespace

int64_t ModelWeights::bytes() const {
  int64_t b = token_embd.nbytes() + output_norm.nbytes() + output.nbytes() + rope_freqs.nbytes();
  for (const auto& l : layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      b += m->nbytes();
    for (const HostTensor* t : {&l.attn_norm, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                                &l.post_attn_norm, &l.ffn_norm, &l.post_ffn_norm})
      b += static_cast<int64_t>(t->nbytes());
  }
  return b;
}

ModelWeights ModelWeights::from_gguf(const gguf::File& f, const ModelConfig& c,
                                     WeightFormat format) {
  const int64_t D = c.n_embd, V = c.vocab_size, F = c.ffn_dim;
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t k_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t v_dim = int64_t{c.n_kv_heads} * c.value_dim;
  const int64_t o_dim = int64_t{c.n_heads} * c.value_dim;
  ModelWeights w;
  w.format = format;
  w.token_embd = load_matrix(f, "token_embd.weight", {V, D}, format);
  w.output_norm = load(f, "output_norm.weight", {D});
  if (!c.tied_embeddings) w.output = load_matrix(f, "output.weight", {V, D}, format);
  w.rope_freqs = load(f, "rope_freqs.weight", {c.head_dim / 2}, /*optional=*/true);
  w.layers.resize(c.n_layers);
  parallel_for(c.n_layers, [&](int64_t il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w.layers[il];
    l.attn_norm = load(f, b + "attn_norm.weight", {D});
    l.wq = load_matrix(f, b + "attn_q.weight", {q_dim, D}, format);
    l.wk = load_matrix(f, b + "attn_k.weight", {k_dim, D}, format);
    l.wv = load_matrix(f, b + "attn_v.weight", {v_dim, D}, format);
    l.wo = load_matrix(f, b + "attn_output.weight", {D, o_dim}, format);
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
    l.w_gate = load_matrix(f, b + "ffn_gate.weight", {F, D}, format);
    l.w_up = load_matrix(f, b + "ffn_up.weight", {F, D}, format);
    l.w_down = load_matrix(f, b + "ffn_down.weight", {D, F}, format);
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
  w.format = WeightFormat::kF32;
  w.token_embd = random_matrix({V, D}, next(), 1.0f);  // embeddings of unit scale
  w.output_norm = ones(D);
  if (!c.tied_embeddings) w.output = random_matrix({V, D}, next(), kStd);
  w.layers.resize(c.n_layers);
  for (auto& l : w.layers) {
    l.attn_norm = ones(D);
    l.wq = random_matrix({q_dim, D}, next(), kStd);
    l.wk = random_matrix({k_dim, D}, next(), kStd);
    l.wv = random_matrix({v_dim, D}, next(), kStd);
    l.wo = random_matrix({D, o_dim}, next(), kStd);
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
    l.w_gate = random_matrix({F, D}, next(), kStd);
    l.w_up = random_matrix({F, D}, next(), kStd);
    l.w_down = random_matrix({D, F}, next(), kStd);
  }
  return w;
}

}  // namespace kvevict
