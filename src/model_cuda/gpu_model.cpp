// GpuModel: weights in device memory (bf16 matrices, f32 norms), uploaded from a loaded Model or
// generated on the device with Model::random's counter-based values.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "cuda/model_launchers.h"
#include "kvevict/dtype.h"
#include "model_cuda/gpu_model_impl.h"

namespace kvevict::gpu {

namespace {

using bf16 = __nv_bfloat16;
using detail::DeviceBuffer;

uint64_t mix(uint64_t x) {  // splitmix64, as src/model/weights.cpp
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Sizes of one model's device tensors, in elements.
struct Shapes {
  int64_t D, V, F, qkv_rows, q_rows, kv_rows, o_cols;
  explicit Shapes(const ModelConfig& c)
      : D(c.n_embd),
        V(c.vocab_size),
        F(c.ffn_dim),
        qkv_rows(int64_t{c.n_heads + 2 * c.n_kv_heads} * c.head_dim),
        q_rows(int64_t{c.n_heads} * c.head_dim),
        kv_rows(int64_t{c.n_kv_heads} * c.head_dim),
        o_cols(int64_t{c.n_heads} * c.head_dim) {}
};

// Allocates every tensor of the model and points the Impl's fields at them.
void allocate(GpuModel::Impl& m) {
  const ModelConfig& c = m.config;
  const Shapes s(c);
  auto take = [&m](size_t bytes, const char* what) {
    m.owned.emplace_back(bytes, what);
    m.bytes += static_cast<int64_t>(bytes);
    return m.owned.back().get();
  };
  m.token_embd = static_cast<bf16*>(take(s.V * s.D * 2, "token embeddings"));
  m.output_norm = static_cast<float*>(take(s.D * 4, "output norm"));
  m.output = c.tied_embeddings ? m.token_embd : static_cast<bf16*>(take(s.V * s.D * 2, "output"));
  m.inv_freq = static_cast<double*>(take(c.head_dim / 2 * sizeof(double), "rope table"));
  m.inv_freq_sliding =
      static_cast<double*>(take(c.head_dim / 2 * sizeof(double), "sliding rope table"));
  m.layers.resize(c.n_layers);
  for (auto& L : m.layers) {
    L.attn_norm = static_cast<float*>(take(s.D * 4, "attn norm"));
    L.wqkv = static_cast<bf16*>(take(s.qkv_rows * s.D * 2, "q/k/v weights"));
    if (c.qkv_bias) L.bqkv = static_cast<float*>(take(s.qkv_rows * 4, "q/k/v bias"));
    L.wo = static_cast<bf16*>(take(s.D * s.o_cols * 2, "output projection"));
    L.ffn_norm = static_cast<float*>(take(s.D * 4, "ffn norm"));
    L.w_gu = static_cast<bf16*>(take(2 * s.F * s.D * 2, "gate/up weights"));
    L.w_down = static_cast<bf16*>(take(s.D * s.F * 2, "down weights"));
    if (c.qk_norm) {
      L.q_norm = static_cast<float*>(take(c.head_dim * 4, "q norm"));
      L.k_norm = static_cast<float*>(take(c.head_dim * 4, "k norm"));
    }
    if (c.post_norms) {
      L.post_attn_norm = static_cast<float*>(take(s.D * 4, "post-attention norm"));
      L.post_ffn_norm = static_cast<float*>(take(s.D * 4, "post-FFN norm"));
    }
  }
}

// The angle per position of each rotated pair, as ops.cpp rope(): global layers use rope_base and
// the linear scale, sliding-window layers rope_base_sliding and none (forward.cpp).
void upload_rope(GpuModel::Impl& m, const float* freq_div) {
  const ModelConfig& c = m.config;
  const int half = c.head_dim / 2;
  auto table = [&](double* dst, float base, float linear_scale) {
    std::vector<double> inv(half);
    for (int i = 0; i < half; ++i) {
      inv[i] = std::pow(static_cast<double>(base), -2.0 * i / c.head_dim) / linear_scale;
      if (freq_div != nullptr) inv[i] /= freq_div[i];
    }
    KVEVICT_CUDA_CHECK(cudaMemcpy(dst, inv.data(), half * sizeof(double), cudaMemcpyHostToDevice));
  };
  table(m.inv_freq, c.rope_base, c.rope_linear_scale);
  table(m.inv_freq_sliding, c.rope_base_sliding, 1.0f);
}

void upload_bf16(bf16* dst, const HostTensor& t) {
  const int64_t n = t.numel();
  std::vector<uint16_t> h(static_cast<size_t>(n));
  const float* src = t.ptr<float>();
  constexpr int64_t kChunk = 1 << 16;
  parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) h[i] = float_to_bf16(src[i]);
  });
  KVEVICT_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
}

// Weight matrices may be GGUF blocks in the host mapping: dequantized, then rounded to bf16.
void upload_bf16(bf16* dst, const WeightMatrix& w) {
  upload_bf16(dst, w.to_f32());
}

void upload_f32(float* dst, const HostTensor& t) {
  KVEVICT_CUDA_CHECK(cudaMemcpy(dst, t.ptr<float>(), t.numel() * 4, cudaMemcpyHostToDevice));
}

}  // namespace

bool gpu_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

void check_supported(const ModelConfig& c) {
  KVEVICT_CHECK(gpu_available(), "--device cuda: no CUDA device is present; expected a GPU");
  KVEVICT_CHECK(c.arch == Arch::kLlama || c.arch == Arch::kQwen2 || c.arch == Arch::kGemma3,
                "architecture ", arch_name(c.arch), " of ", c.name,
                " is not supported on the GPU runtime; expected llama, qwen2 or gemma3 (use "
                "--device cpu)");
  KVEVICT_CHECK(c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256, "head dim ", c.head_dim,
                " of ", c.name, " is not supported on the GPU; expected 64, 128 or 256");
  KVEVICT_CHECK(c.sliding_window >= 0, "sliding window ", c.sliding_window, " of ", c.name,
                " is invalid; expected >= 0");
  KVEVICT_CHECK(c.n_kv_heads <= 64 && c.n_heads / c.n_kv_heads <= 8, "GQA group ",
                c.n_heads / c.n_kv_heads, " or ", c.n_kv_heads,
                " KV heads is not supported on the GPU; expected a group <= 8 and <= 64 KV heads");
}

void device_memory(int64_t* free_bytes, int64_t* total_bytes) {
  size_t f = 0, t = 0;
  KVEVICT_CUDA_CHECK(cudaMemGetInfo(&f, &t));
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
}

GpuModel::GpuModel() : impl_(std::make_unique<Impl>()) {}
GpuModel::~GpuModel() = default;
const ModelConfig& GpuModel::config() const {
  return impl_->config;
}
int64_t GpuModel::weight_bytes() const {
  return impl_->bytes;
}

std::shared_ptr<const GpuModel> GpuModel::upload(const Model& model) {
  const ModelConfig& c = model.config();
  check_supported(c);
  std::shared_ptr<GpuModel> g(new GpuModel());
  Impl& m = *g->impl_;
  m.config = c;
  allocate(m);
  const ModelWeights& w = model.weights();
  const Shapes s(c);
  upload_bf16(m.token_embd, w.token_embd);
  upload_f32(m.output_norm, w.output_norm);
  if (!c.tied_embeddings) upload_bf16(m.output, w.output);
  upload_rope(m, w.rope_freqs.nbytes() ? w.rope_freqs.ptr<float>() : nullptr);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    Impl::Layer& G = m.layers[l];
    upload_f32(G.attn_norm, L.attn_norm);
    upload_bf16(G.wqkv, L.wq);
    upload_bf16(G.wqkv + s.q_rows * s.D, L.wk);
    upload_bf16(G.wqkv + (s.q_rows + s.kv_rows) * s.D, L.wv);
    if (c.qkv_bias) {
      upload_f32(G.bqkv, L.bq);
      upload_f32(G.bqkv + s.q_rows, L.bk);
      upload_f32(G.bqkv + s.q_rows + s.kv_rows, L.bv);
    }
    upload_bf16(G.wo, L.wo);
    upload_f32(G.ffn_norm, L.ffn_norm);
    upload_bf16(G.w_gu, L.w_gate);
    upload_bf16(G.w_gu + s.F * s.D, L.w_up);
    upload_bf16(G.w_down, L.w_down);
    if (c.qk_norm) {
      upload_f32(G.q_norm, L.q_norm);
      upload_f32(G.k_norm, L.k_norm);
    }
    if (c.post_norms) {
      upload_f32(G.post_attn_norm, L.post_attn_norm);
      upload_f32(G.post_ffn_norm, L.post_ffn_norm);
    }
  }
  KVEVICT_CUDA_CHECK(cudaDeviceSynchronize());
  return g;
}

std::shared_ptr<const GpuModel> GpuModel::random(const ModelConfig& config, uint64_t seed) {
  config.validate();
  check_supported(config);
  std::shared_ptr<GpuModel> g(new GpuModel());
  Impl& m = *g->impl_;
  m.config = config;
  const ModelConfig& c = m.config;
  {
    // Say which preset did not fit, not only the tensor.
    const int64_t need = Shapes(c).V * Shapes(c).D * 2 * (c.tied_embeddings ? 1 : 2) +
                         c.n_layers *
                             (Shapes(c).qkv_rows * Shapes(c).D + Shapes(c).D * Shapes(c).o_cols +
                              3 * Shapes(c).F * Shapes(c).D) *
                             2;
    int64_t free_b = 0, total_b = 0;
    device_memory(&free_b, &total_b);
    KVEVICT_CHECK(need < free_b, "random weights of ", c.name, " need ", need, " bytes (",
                  static_cast<double>(need) / (1 << 30), " GiB) of device memory; ",
                  static_cast<double>(free_b) / (1 << 30), " GiB are free");
  }
  allocate(m);
  const Shapes s(c);
  constexpr float kStd = 0.02f;
  uint64_t st = mix(seed);
  auto next = [&st]() { return st = mix(st); };
  auto rnd = [](bf16* dst, int64_t n, uint64_t sd, float stddev) {
    KVEVICT_CUDA_CHECK(detail::launch_random_uniform(sd, stddev, n, dst, nullptr, nullptr));
  };
  auto rnd_f32 = [](float* dst, int64_t n, uint64_t sd, float stddev) {
    KVEVICT_CUDA_CHECK(detail::launch_random_uniform(sd, stddev, n, nullptr, dst, nullptr));
  };
  auto ones = [](float* dst, int64_t n) {
    KVEVICT_CUDA_CHECK(detail::launch_fill(dst, n, 1.0f, nullptr));
  };
  // The same draw order as ModelWeights::random (src/model/weights.cpp).
  rnd(m.token_embd, s.V * s.D, next(), 1.0f);
  ones(m.output_norm, s.D);
  if (!c.tied_embeddings) rnd(m.output, s.V * s.D, next(), kStd);
  upload_rope(m, nullptr);
  for (auto& L : m.layers) {
    ones(L.attn_norm, s.D);
    rnd(L.wqkv, s.q_rows * s.D, next(), kStd);
    rnd(L.wqkv + s.q_rows * s.D, s.kv_rows * s.D, next(), kStd);
    rnd(L.wqkv + (s.q_rows + s.kv_rows) * s.D, s.kv_rows * s.D, next(), kStd);
    rnd(L.wo, s.D * s.o_cols, next(), kStd);
    if (c.qkv_bias) {
      rnd_f32(L.bqkv, s.q_rows, next(), kStd);
      rnd_f32(L.bqkv + s.q_rows, s.kv_rows, next(), kStd);
      rnd_f32(L.bqkv + s.q_rows + s.kv_rows, s.kv_rows, next(), kStd);
    }
    if (c.qk_norm) {
      ones(L.q_norm, c.head_dim);
      ones(L.k_norm, c.head_dim);
    }
    ones(L.ffn_norm, s.D);
    if (c.post_norms) {
      ones(L.post_attn_norm, s.D);
      ones(L.post_ffn_norm, s.D);
    }
    rnd(L.w_gu, s.F * s.D, next(), kStd);
    rnd(L.w_gu + s.F * s.D, s.F * s.D, next(), kStd);
    rnd(L.w_down, s.D * s.F, next(), kStd);
  }
  KVEVICT_CUDA_CHECK(cudaDeviceSynchronize());
  return g;
}

}  // namespace kvevict::gpu
