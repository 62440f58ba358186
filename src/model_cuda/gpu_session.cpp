// GpuSession: prefill, one-shot prefill eviction, batched decode and greedy sampling on the GPU
// (STYLE.md layer 3: checks, owns every buffer, calls the launchers of src/model_cuda and
// src/cuda).
//
// Cache layout of one layer: K, V [rows, d] bf16 and pos [rows] i32, split into segments
// s = sequence * Hkv + g of capacity cap[s] starting at off[s] (off[S] = rows); seg_len[s] rows of
// a segment are in use. Before eviction sequence 0's segments all have capacity n + decode_room,
// so row = position and the window kernel can treat the layer as [Hkv, n, d] with a head stride;
// eviction allocates a new, smaller layer (per-head lengths may differ) and frees the old one.
// Sliding-window layers (gemma3) hold every prompt row during the prefill (the window kernel
// masks by the window) and are then cut to a ring of their last `window` rows, as the CPU
// session's trim_sliding: decode writes position p to row p % window of its segment, so the ring
// always holds exactly the keys the next query may see. Eviction skips them.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cuda/launchers.h"
#include "cuda/window_plan.h"
#include "kvevict/backend.h"
#include "kvevict/cuda/score.h"
#include "kvevict/cuda/select.h"
#include "kvevict/decode_evict.h"
#include "kvevict/evict.h"
#include "kvevict/model/gpu_runtime.h"
#include "kvevict/select.h"
#include "model_cuda/device_memory.h"
#include "model_cuda/gpu_model_impl.h"
#include "model_cuda/launchers.h"

namespace kvevict::gpu {

using detail::DeviceBuffer;
using bf16 = __nv_bfloat16;

namespace {

// Y[T, out] (+)= X[T, in] W[out, in]^T: bf16 inputs, f32 accumulation; Y bf16 or f32 (f32 with
// beta = 1 adds into the residual stream).
void gemm(cublasHandle_t h, const bf16* x, int64_t T, const bf16* w, int64_t out, int64_t in,
          void* y, bool y_f32, float beta) {
  const float alpha = 1.0f;
  KVEVICT_CUBLAS_CHECK(
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(T),
                   static_cast<int>(in), &alpha, w, CUDA_R_16BF, static_cast<int>(in), x,
                   CUDA_R_16BF, static_cast<int>(in), &beta, y, y_f32 ? CUDA_R_32F : CUDA_R_16BF,
                   static_cast<int>(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

struct LayerCache {
  DeviceBuffer k, v, pos;      // [rows, d] bf16, [rows, d] bf16, [rows] i32
  DeviceBuffer acc;            // [rows] f32 decode-eviction accumulators
  DeviceBuffer off, len;       // [S + 1] i64, [S] i32 (device)
  std::vector<int64_t> off_h;  // [S + 1] host copy
  std::vector<int32_t> len_h;  // [S] host mirror of len
  int64_t ring = 0;            // sliding-window layer after the prefill: ring of this many rows
  int64_t rows() const { return off_h.empty() ? 0 : off_h.back(); }
  int64_t cap(int s) const { return off_h[s + 1] - off_h[s]; }
};

// Allocates a layer whose segments have capacities cap[S]; lengths start at `len`.
// The small uploads are ordered on `stream` (a plain cudaMemcpy runs on the legacy stream, which
// a non-blocking stream does not wait for).
LayerCache make_layer(const std::vector<int64_t>& cap, const std::vector<int32_t>& len, int d,
                      cudaStream_t stream) {
  LayerCache L;
  const size_t S = cap.size();
  L.off_h.assign(S + 1, 0);
  for (size_t s = 0; s < S; ++s) L.off_h[s + 1] = L.off_h[s] + cap[s];
  L.len_h = len;
  const int64_t rows = std::max<int64_t>(L.off_h.back(), 1);
  L.k = DeviceBuffer(rows * d * 2, "KV cache keys");
  L.v = DeviceBuffer(rows * d * 2, "KV cache values");
  L.pos = DeviceBuffer(rows * 4, "KV cache positions");
  L.acc = DeviceBuffer(rows * 4, "KV score accumulators");
  KVEVICT_GPU_CHECK(cudaMemsetAsync(L.acc.get(), 0, rows * 4, stream));
  L.off = DeviceBuffer((S + 1) * 8, "KV segment offsets");
  L.len = DeviceBuffer(S * 4, "KV segment lengths");
  KVEVICT_GPU_CHECK(
      cudaMemcpyAsync(L.off.get(), L.off_h.data(), (S + 1) * 8, cudaMemcpyHostToDevice, stream));
  KVEVICT_GPU_CHECK(
      cudaMemcpyAsync(L.len.get(), L.len_h.data(), S * 4, cudaMemcpyHostToDevice, stream));
  return L;
}

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t s) : s_(s) {
    KVEVICT_GPU_CHECK(cudaEventCreate(&a_));
    KVEVICT_GPU_CHECK(cudaEventCreate(&b_));
    KVEVICT_GPU_CHECK(cudaEventRecord(a_, s_));
  }
  double seconds() {
    KVEVICT_GPU_CHECK(cudaEventRecord(b_, s_));
    KVEVICT_GPU_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    KVEVICT_GPU_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms / 1e3;
  }
  ~EventTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// Sampler's rule on R rows of device logits [R, V]: argmax at temperature 0, else the sort-and-
// scan kernel of sampling.cu with the draws uniforms[R] (uploaded through u_dev). ids_dev [R].
void sample_on_device(const float* logits, int R, int64_t V, const SamplerOptions& opt,
                      const std::vector<double>& uniforms, int32_t* ids_dev, DeviceBuffer& scratch,
                      DeviceBuffer& u_dev, cudaStream_t stream) {
  opt.validate();
  if (opt.temperature == 0.0f) {
    KVEVICT_GPU_CHECK(detail::launch_argmax(logits, R, V, ids_dev, stream));
    return;
  }
  KVEVICT_CHECK(static_cast<int>(uniforms.size()) == R, "sampling ", R, " rows needs ", R,
                " uniform draws; got ", uniforms.size());
  for (double u : uniforms)
    KVEVICT_CHECK(u >= 0.0 && u < 1.0, "uniform draw ", u, " is out of range; expected [0, 1)");
  const size_t need = detail::sample_scratch_bytes(R, V);
  if (scratch.bytes() < need || u_dev.bytes() < R * sizeof(double)) {
    KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
    scratch.ensure(need, "sampling scratch");
    u_dev.ensure(R * sizeof(double), "sampling draws");
  }
  // Pageable source: the copy completes before the call returns, so `uniforms` may go away.
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(u_dev.get(), uniforms.data(), R * sizeof(double),
                                    cudaMemcpyHostToDevice, stream));
  detail::SampleArgs sa;
  sa.logits = logits;
  sa.uniforms = u_dev.as<double>();
  sa.R = R;
  sa.V = V;
  sa.temperature = opt.temperature;
  sa.top_k = opt.top_k;
  sa.top_p = opt.top_p;
  KVEVICT_GPU_CHECK(detail::launch_sample(sa, ids_dev, scratch.get(), scratch.bytes(), stream));
}

}  // namespace

std::vector<int32_t> sample_logits(const std::vector<float>& logits, int rows,
                                   const SamplerOptions& opt, const std::vector<double>& uniforms) {
  KVEVICT_CHECK(rows >= 1 && !logits.empty() && logits.size() % rows == 0,
                "sample_logits: ", logits.size(), " logits do not split into ", rows, " rows");
  const int64_t V = static_cast<int64_t>(logits.size()) / rows;
  DeviceBuffer d_logits(logits.size() * 4, "logits"), ids(rows * 4, "sampled ids"), scratch, u;
  KVEVICT_GPU_CHECK(
      cudaMemcpy(d_logits.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
  sample_on_device(d_logits.as<float>(), rows, V, opt, uniforms, ids.as<int32_t>(), scratch, u,
                   nullptr);
  std::vector<int32_t> out(rows);
  KVEVICT_GPU_CHECK(cudaMemcpy(out.data(), ids.get(), rows * 4, cudaMemcpyDeviceToHost));
  return out;
}

void GpuSessionOptions::validate() const {
  KVEVICT_CHECK(batch >= 1, "batch ", batch, " is invalid; expected >= 1");
  KVEVICT_CHECK(max_prompt >= 1, "max_prompt ", max_prompt, " is invalid; expected >= 1");
  KVEVICT_CHECK(decode_room >= 0, "decode_room ", decode_room, " is invalid; expected >= 0");
  KVEVICT_CHECK(prefill_chunk >= 1, "prefill chunk ", prefill_chunk, " is invalid; expected >= 1");
  KVEVICT_CHECK(scores_in_attention_min_segments >= 0, "scores_in_attention_min_segments ",
                scores_in_attention_min_segments, " is invalid; expected >= 0 (0 = the SM count)");
}

struct GpuSession::Impl {
  std::shared_ptr<const GpuModel> model;
  const GpuModel::Impl* w = nullptr;
  GpuSessionOptions opt;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  int sm_count = 132;
  int64_t t_max = 0;  // activation rows: max(prefill chunk, batch)

  std::vector<LayerCache> layers;
  std::vector<int64_t> positions;  // [batch] next position of each sequence
  bool decode_evict = false;       // decode-time eviction (SPEC section 5) after each step
  bool appending = false;          // append(): tokens are not scored (as Session::append)
  DecodeEvictOptions dopt;
  bool replicated = false;  // replicate_sequence() filled sequences 1 .. batch-1
  GpuStats stats;

  // Activations. T = tokens of one pass (a prefill chunk or one per sequence).
  DeviceBuffer x;        // [T, D] f32 residual stream
  DeviceBuffer xn;       // [T, D] bf16 normed
  DeviceBuffer qkv;      // [T, (Hq + 2 Hkv) d] bf16
  DeviceBuffer qh;       // [Hq, T, d] (prefill) or [T, Hq, d] (decode) bf16 queries after RoPE
  DeviceBuffer attn_f;   // [Hq, T, d] f32 window-kernel output (prefill)
  DeviceBuffer lse;      // [Hq, T] f32
  DeviceBuffer attn;     // [T, Hq d] bf16
  DeviceBuffer o_f;      // [T, D] f32 projection output before gemma3's post-norms
  DeviceBuffer gu;       // [T, 2F] bf16
  DeviceBuffer hbuf;     // [T, F] bf16
  DeviceBuffer logits;   // [batch, V] f32
  DeviceBuffer tokens;   // [T] i32
  DeviceBuffer pos;      // [T] i32
  DeviceBuffer ids;      // [batch] i32
  DeviceBuffer scratch;  // attention split partials (grow-only)
  DeviceBuffer sample_scratch, draws;  // sampling sort buffers, uniform draws [batch] f64
  DeviceBuffer zbuf;              // [rows, G] f32 step logits of the layer being scored (grow-only)
  DeviceBuffer step_counters;     // [B Hkv] u32 arrival counters of the fused step scores (zeroed)
  DeviceBuffer blas_ws;           // cuBLAS workspace
  int32_t* pos_pinned = nullptr;  // [batch] pinned staging of decode positions
  int32_t* tok_pinned = nullptr;  // [batch] pinned staging of decode tokens
  cudaEvent_t pos_staged = nullptr;  // recorded after the last staged upload

  const ModelConfig& c() const { return w->config; }
  // gemma3 scales the embeddings by sqrt(D) (forward.cpp).
  float embed_mul() const {
    return c().embed_scale ? std::sqrt(static_cast<float>(c().n_embd)) : 1.0f;
  }

  void forward_prefill_chunk(const int32_t* tok, int64_t T, int64_t p0, int64_t need,
                             int64_t n_total, std::vector<DeviceBuffer>* qcap, bool want_logits);
  void decode_step(const int32_t* tokens_dev, bool score);
  void evict_decode();
  void evict_prefill(const PrefillEviction& ev, int64_t n, int64_t need,
                     std::vector<DeviceBuffer>& qcap);
  void ffn_and_residual(const GpuModel::Impl::Layer& L, int64_t T);
  void project_into_residual(const bf16* in, int64_t T, const bf16* w, int64_t in_dim,
                             const float* post_norm);
  detail::RopeAppendArgs rope_args(const GpuModel::Impl::Layer& L, LayerCache& C, int il,
                                   int rows);
  void trim_sliding(int64_t n);
  void final_logits(int64_t rows, int64_t row_stride_tokens);
};

GpuSession::GpuSession(std::shared_ptr<const GpuModel> model, GpuSessionOptions opt)
    : impl_(std::make_unique<Impl>()) {
  KVEVICT_CHECK(model != nullptr, "GPU session needs a model; got null");
  opt.validate();
  Impl& s = *impl_;
  s.model = std::move(model);
  s.w = &s.model->impl();
  s.opt = opt;
  const ModelConfig& c = s.c();
  KVEVICT_CHECK(opt.max_prompt + opt.decode_room <= c.context_length, "max prompt ", opt.max_prompt,
                " + decode room ", opt.decode_room, " exceeds the context length ",
                c.context_length, " of ", c.name);
  KVEVICT_GPU_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  KVEVICT_CUBLAS_CHECK(cublasCreate(&s.blas));
  KVEVICT_CUBLAS_CHECK(cublasSetStream(s.blas, s.stream));
  s.blas_ws = DeviceBuffer(32 << 20, "cuBLAS workspace");
  KVEVICT_CUBLAS_CHECK(cublasSetWorkspace(s.blas, s.blas_ws.get(), s.blas_ws.bytes()));
  s.sm_count = cuda::detail::current_sm_count();
  const int64_t T = std::max<int64_t>(std::min(opt.prefill_chunk, opt.max_prompt), opt.batch);
  s.t_max = T;
  const int64_t D = c.n_embd, F = c.ffn_dim, d = c.head_dim, Hq = c.n_heads;
  const int64_t W = int64_t{c.n_heads + 2 * c.n_kv_heads} * d;
  s.x = DeviceBuffer(T * D * 4, "activations x");
  s.xn = DeviceBuffer(T * D * 2, "activations xn");
  s.qkv = DeviceBuffer(T * W * 2, "activations qkv");
  s.qh = DeviceBuffer(T * Hq * d * 2, "queries");
  s.attn_f = DeviceBuffer(T * Hq * d * 4, "attention output f32");
  s.lse = DeviceBuffer(T * Hq * 4, "attention lse");
  s.attn = DeviceBuffer(T * Hq * d * 2, "attention output");
  if (c.post_norms) s.o_f = DeviceBuffer(T * D * 4, "projection output f32");
  s.gu = DeviceBuffer(T * 2 * F * 2, "gate/up activations");
  s.hbuf = DeviceBuffer(T * F * 2, "ffn activations");
  s.logits = DeviceBuffer(opt.batch * c.vocab_size * 4, "logits");
  s.tokens = DeviceBuffer(T * 4, "tokens");
  s.pos = DeviceBuffer(T * 4, "positions");
  s.ids = DeviceBuffer(opt.batch * 4, "sampled ids");
  s.positions.assign(opt.batch, 0);
  s.layers.resize(c.n_layers);
  KVEVICT_GPU_CHECK(cudaMallocHost(&s.pos_pinned, opt.batch * 4));
  KVEVICT_GPU_CHECK(cudaMallocHost(&s.tok_pinned, opt.batch * 4));
  KVEVICT_GPU_CHECK(cudaEventCreateWithFlags(&s.pos_staged, cudaEventDisableTiming));
  KVEVICT_GPU_CHECK(cudaEventRecord(s.pos_staged, s.stream));
}

GpuSession::~GpuSession() {
  if (impl_) {
    if (impl_->stream) cudaStreamSynchronize(impl_->stream);
    if (impl_->blas) cublasDestroy(impl_->blas);
    impl_->layers.clear();
    if (impl_->pos_pinned) cudaFreeHost(impl_->pos_pinned);
    if (impl_->tok_pinned) cudaFreeHost(impl_->tok_pinned);
    if (impl_->pos_staged) cudaEventDestroy(impl_->pos_staged);
    if (impl_->stream) cudaStreamDestroy(impl_->stream);
  }
}
GpuSession::GpuSession(GpuSession&&) noexcept = default;
GpuSession& GpuSession::operator=(GpuSession&&) noexcept = default;

void GpuSession::Impl::ffn_and_residual(const GpuModel::Impl::Layer& L, int64_t T) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd, F = m.ffn_dim;
  KVEVICT_GPU_CHECK(detail::launch_rms_norm(x.as<float>(), D, static_cast<int>(T),
                                            static_cast<int>(D), L.ffn_norm, m.rms_eps,
                                            xn.as<bf16>(), stream));
  gemm(blas, xn.as<bf16>(), T, L.w_gu, 2 * F, D, gu.get(), false, 0.0f);
  KVEVICT_GPU_CHECK(
      detail::launch_gated_act(gu.as<bf16>(), static_cast<int>(T), static_cast<int>(F),
                               m.activation == FfnActivation::kGeluTanh, hbuf.as<bf16>(), stream));
  project_into_residual(hbuf.as<bf16>(), T, L.w_down, F, L.post_ffn_norm);
}

// x[T, D] += in[T, in_dim] w^T, or (gemma3) x += rms_norm(in w^T) * post_norm.
void GpuSession::Impl::project_into_residual(const bf16* in, int64_t T, const bf16* wt,
                                             int64_t in_dim, const float* post_norm) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd;
  if (post_norm == nullptr) {
    gemm(blas, in, T, wt, D, in_dim, x.get(), true, 1.0f);
    return;
  }
  gemm(blas, in, T, wt, D, in_dim, o_f.get(), true, 0.0f);
  KVEVICT_GPU_CHECK(detail::launch_rms_norm_add(o_f.as<float>(), static_cast<int>(T),
                                                static_cast<int>(D), post_norm, m.rms_eps,
                                                x.as<float>(), stream));
}

// RoPE + append arguments shared by prefill and decode: this layer's angle table, bias, gemma3's
// q/k norms, the qkv rows in `qkv` with positions in `pos`, queries out to `qh`, and the layer's
// cache C. Callers set the layout (head_major, decode, seq/first, ring).
detail::RopeAppendArgs GpuSession::Impl::rope_args(const GpuModel::Impl::Layer& L, LayerCache& C,
                                                   int il, int rows) {
  const ModelConfig& m = c();
  detail::RopeAppendArgs ra;
  ra.qkv = qkv.as<bf16>();
  ra.pos = pos.as<int32_t>();
  ra.T = rows;
  ra.q_out = qh.as<bf16>();
  ra.k_cache = C.k.as<bf16>();
  ra.v_cache = C.v.as<bf16>();
  ra.pos_cache = C.pos.as<int32_t>();
  ra.acc_cache = C.acc.as<float>();
  ra.seg_off = C.off.as<int64_t>();
  ra.seg_len = C.len.as<int32_t>();
  ra.bias = L.bqkv;
  ra.inv_freq = m.is_sliding(il) ? w->inv_freq_sliding : w->inv_freq;
  ra.Hq = m.n_heads;
  ra.Hkv = m.n_kv_heads;
  ra.d = m.head_dim;
  ra.neox = m.rope_style == RopeStyle::kNeox;
  ra.q_norm = L.q_norm;
  ra.k_norm = L.k_norm;
  ra.norm_eps = m.rms_eps;
  return ra;
}

// Logits of `rows` rows of x taken every `stride` rows starting at row (stride - 1) (the last
// token of a prefill chunk: rows = 1, stride = T; decode: rows = batch, stride = 1).
void GpuSession::Impl::final_logits(int64_t rows, int64_t stride) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd;
  KVEVICT_GPU_CHECK(detail::launch_rms_norm(x.as<float>() + (stride - 1) * D, stride * D,
                                            static_cast<int>(rows), static_cast<int>(D),
                                            w->output_norm, m.rms_eps, xn.as<bf16>(), stream));
  gemm(blas, xn.as<bf16>(), rows, w->output, m.vocab_size, D, logits.get(), true, 0.0f);
  if (m.final_logit_softcap > 0)
    KVEVICT_GPU_CHECK(detail::launch_softcap(logits.as<float>(), rows * m.vocab_size,
                                             m.final_logit_softcap, stream));
}

void GpuSession::Impl::forward_prefill_chunk(const int32_t* tok, int64_t T, int64_t p0,
                                             int64_t need, int64_t n_total,
                                             std::vector<DeviceBuffer>* qcap, bool want_logits) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd, d = m.head_dim, Hq = m.n_heads, Hkv = m.n_kv_heads;
  const int64_t W = (Hq + 2 * Hkv) * d;
  std::vector<int32_t> pos_h(T);
  for (int64_t t = 0; t < T; ++t) pos_h[t] = static_cast<int32_t>(p0 + t);
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(tokens.get(), tok, T * 4, cudaMemcpyHostToDevice, stream));
  KVEVICT_GPU_CHECK(
      cudaMemcpyAsync(pos.get(), pos_h.data(), T * 4, cudaMemcpyHostToDevice, stream));
  KVEVICT_GPU_CHECK(detail::launch_embed(w->token_embd, tokens.as<int32_t>(), static_cast<int>(T),
                                         static_cast<int>(D), embed_mul(), x.as<float>(), stream));
  // Query rows of this chunk that eviction needs: positions [n_total - need, n_total).
  const int64_t cap_lo = std::max(p0, n_total - need), cap_hi = p0 + T;
  for (int il = 0; il < m.n_layers; ++il) {
    const GpuModel::Impl::Layer& L = w->layers[il];
    LayerCache& C = layers[il];
    KVEVICT_GPU_CHECK(detail::launch_rms_norm(x.as<float>(), D, static_cast<int>(T),
                                              static_cast<int>(D), L.attn_norm, m.rms_eps,
                                              xn.as<bf16>(), stream));
    gemm(blas, xn.as<bf16>(), T, L.wqkv, W, D, qkv.get(), false, 0.0f);
    detail::RopeAppendArgs ra = rope_args(L, C, il, static_cast<int>(T));
    ra.head_major = true;
    ra.decode = false;
    ra.seq = 0;
    ra.first = p0;
    KVEVICT_GPU_CHECK(detail::launch_rope_append(ra, stream));
    if (qcap != nullptr && cap_hi > cap_lo) {
      // [Hq, T, d] rows cap_lo - p0 .. -> capture [Hq, need, d] rows cap_lo - (n_total - need) ..
      const size_t row_bytes = d * 2;
      KVEVICT_GPU_CHECK(cudaMemcpy2DAsync((*qcap)[il].as<bf16>() + (cap_lo - (n_total - need)) * d,
                                          need * row_bytes, qh.as<bf16>() + (cap_lo - p0) * d,
                                          T * row_bytes, (cap_hi - cap_lo) * row_bytes, Hq,
                                          cudaMemcpyDeviceToDevice, stream));
    }
    // Causal attention of the chunk's T queries over keys 0 .. p0 + T - 1: the window kernel with
    // the whole chunk as its window (query t at position n - w + t).
    cuda::detail::WindowArgs wa;
    wa.elem = cuda::detail::Elem::kBF16;
    wa.q = qh.get();
    wa.q_head_stride = T * d;
    wa.q_row_stride = d;
    wa.q_rows = static_cast<int>(T);
    wa.k = C.k.as<bf16>() + C.off_h[0] * d;
    wa.v = C.v.as<bf16>() + C.off_h[0] * d;
    wa.kv_head_stride = C.cap(0) * d;
    wa.kv_row_stride = d;
    wa.num_q_heads = static_cast<int>(Hq);
    wa.num_kv_heads = static_cast<int>(Hkv);
    wa.w = static_cast<int>(T);
    wa.head_dim = static_cast<int>(d);
    wa.n = p0 + T;
    wa.scale = m.logit_scale();
    wa.sliding_window = m.is_sliding(il) ? m.sliding_window : 0;
    const size_t need_scratch = cuda::detail::window_forward_scratch_bytes(wa, true, sm_count);
    if (scratch.bytes() < need_scratch) {
      KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
      scratch.ensure(need_scratch, "attention scratch");
    }
    KVEVICT_GPU_CHECK(cuda::detail::launch_window_forward(
        wa, attn_f.as<float>(), lse.as<float>(), scratch.get(), scratch.bytes(), sm_count, stream));
    KVEVICT_GPU_CHECK(detail::launch_heads_to_rows(attn_f.as<float>(), static_cast<int>(Hq),
                                                   static_cast<int>(T), static_cast<int>(d),
                                                   attn.as<bf16>(), stream));
    project_into_residual(attn.as<bf16>(), T, L.wo, Hq * d, L.post_attn_norm);
    ffn_and_residual(L, T);
  }
  if (want_logits) final_logits(1, T);
}

void GpuSession::Impl::decode_step(const int32_t* tokens_dev, bool score) {
  KVEVICT_CHECK(opt.batch == 1 || replicated, "decoding a batch of ", opt.batch,
                " needs replicate_sequence() after the prefill of sequence 0");
  score = score && decode_evict;
  const ModelConfig& m = c();
  const int B = opt.batch;
  const int64_t D = m.n_embd, d = m.head_dim, Hq = m.n_heads, Hkv = m.n_kv_heads;
  const int64_t W = (Hq + 2 * Hkv) * d;
  // Positions go up through a pinned staging buffer: a copy from pageable memory would make the
  // host wait for the stream, and the launches of a step would no longer overlap the last one.
  KVEVICT_GPU_CHECK(cudaEventSynchronize(pos_staged));  // the previous step's copy has run
  for (int b = 0; b < B; ++b) {
    KVEVICT_CHECK(positions[b] + 1 <= m.context_length, "decoding position ", positions[b],
                  " exceeds the context length ", m.context_length, " of ", m.name);
    pos_pinned[b] = static_cast<int32_t>(positions[b]);
  }
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(pos.get(), pos_pinned, B * 4, cudaMemcpyHostToDevice, stream));
  KVEVICT_GPU_CHECK(cudaEventRecord(pos_staged, stream));
  KVEVICT_GPU_CHECK(detail::launch_embed(w->token_embd, tokens_dev, B, static_cast<int>(D),
                                         embed_mul(), x.as<float>(), stream));
  for (int il = 0; il < m.n_layers; ++il) {
    const GpuModel::Impl::Layer& L = w->layers[il];
    LayerCache& C = layers[il];
    int64_t max_len = 0;
    for (size_t s = 0; s < C.len_h.size(); ++s) {
      // A full ring (capacity = window) overwrites its oldest row; anything else must have room.
      const bool wraps = C.ring > 0 && C.cap(static_cast<int>(s)) == C.ring;
      KVEVICT_CHECK(wraps || C.len_h[s] + 1 <= C.cap(static_cast<int>(s)), "layer ", il,
                    " segment ", s, " is full (", C.len_h[s], " rows); raise decode_room (now ",
                    opt.decode_room, ")");
      C.len_h[s] = static_cast<int32_t>(std::min<int64_t>(
          C.len_h[s] + 1, C.ring > 0 ? C.ring : std::numeric_limits<int32_t>::max()));
      max_len = std::max<int64_t>(max_len, C.len_h[s]);
    }
    const bool score_layer = score && !m.is_sliding(il);  // sliding layers keep their window
    KVEVICT_GPU_CHECK(detail::launch_rms_norm(x.as<float>(), D, B, static_cast<int>(D), L.attn_norm,
                                              m.rms_eps, xn.as<bf16>(), stream));
    gemm(blas, xn.as<bf16>(), B, L.wqkv, W, D, qkv.get(), false, 0.0f);
    detail::RopeAppendArgs ra = rope_args(L, C, il, B);
    ra.head_major = false;
    ra.decode = true;
    ra.ring = C.ring;
    KVEVICT_GPU_CHECK(detail::launch_rope_append(ra, stream));
    detail::DecodeAttentionArgs da;
    da.q = qh.as<bf16>();
    da.k = C.k.as<bf16>();
    da.v = C.v.as<bf16>();
    da.seg_off = C.off.as<int64_t>();
    da.seg_len = C.len.as<int32_t>();
    da.B = B;
    da.Hq = static_cast<int>(Hq);
    da.Hkv = static_cast<int>(Hkv);
    da.d = static_cast<int>(d);
    da.max_len = max_len;
    da.scale = m.logit_scale();
    const bool fused = score_layer && opt.fused_decode_scores;
    if (fused) {
      const size_t zb = static_cast<size_t>(std::max<int64_t>(C.rows(), 1)) * (Hq / Hkv) * 4;
      if (zbuf.bytes() < zb) {
        KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
        zbuf.ensure(zb, "decode step logits");
      }
      da.z_out = zbuf.as<float>();
    }
    const size_t need =
        detail::decode_attention_scratch_bytes(B, da.Hq, da.Hkv, da.d, max_len, sm_count);
    if (scratch.bytes() < need) {
      KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
      scratch.ensure(need, "decode attention scratch");
    }
    int kind = 0;
    bool replace = false;
    if (score_layer) {
      switch (dopt.score) {
        case DecodeScore::kAttentionSum:
          kind = 0;
          break;
        case DecodeScore::kTOVA:
          kind = 0;
          replace = true;
          break;
        case DecodeScore::kDropKV:
          kind = 1;
          break;
        case DecodeScore::kObcacheV:
          kind = 2;
          break;
        case DecodeScore::kObcacheK:
          kind = 3;
          break;
        case DecodeScore::kObcacheVK:
          kind = 4;
          break;
      }
    }
    // DecodeEvictor::accumulate: this step's w = 1 score of every row (the new one included),
    // inside the attention launch when that kernel covers the shape and the batch has segments
    // for every SM, else a second kernel.
    const int min_segments =
        opt.scores_in_attention_min_segments > 0 ? opt.scores_in_attention_min_segments : sm_count;
    const bool in_attention = fused && opt.scores_in_attention &&
                              detail::decode_step_scores_fusable(da.d, da.Hq / da.Hkv) &&
                              B * da.Hkv >= min_segments;
    detail::DecodeStepScoreArgs fs;
    if (in_attention) {
      const size_t cb = static_cast<size_t>(B) * Hkv * 4;
      if (step_counters.bytes() < cb) {
        KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
        step_counters.ensure(cb, "decode step-score counters");
        KVEVICT_GPU_CHECK(cudaMemsetAsync(step_counters.get(), 0, step_counters.bytes(), stream));
      }
      fs.acc = C.acc.as<float>();
      fs.counters = step_counters.as<uint32_t>();
      fs.kind = kind;
      fs.replace = replace;
      fs.one_minus_p_floor = static_cast<float>(dopt.one_minus_p_floor);
    }
    // The separate score kernel reads a (f32) and lse from global memory; the fused one keeps
    // them in shared memory.
    const bool export_a = score_layer && !in_attention;
    KVEVICT_GPU_CHECK(detail::launch_decode_attention(
        da, attn.as<bf16>(), export_a ? lse.as<float>() : nullptr,
        export_a ? attn_f.as<float>() : nullptr, scratch.get(), scratch.bytes(), sm_count, stream,
        in_attention ? &fs : nullptr));
    if (score_layer && !in_attention) {
      detail::DecodeScoreArgs sa;
      sa.q = qh.as<bf16>();
      sa.out = attn_f.as<float>();
      sa.lse = lse.as<float>();
      sa.k = C.k.as<bf16>();
      sa.v = C.v.as<bf16>();
      sa.seg_off = C.off.as<int64_t>();
      sa.seg_len = C.len.as<int32_t>();
      sa.acc = C.acc.as<float>();
      sa.z = fused ? zbuf.as<float>() : nullptr;
      sa.B = B;
      sa.Hq = static_cast<int>(Hq);
      sa.Hkv = static_cast<int>(Hkv);
      sa.d = static_cast<int>(d);
      sa.scale = dopt.scale;
      sa.one_minus_p_floor = static_cast<float>(dopt.one_minus_p_floor);
      sa.kind = kind;
      sa.replace = replace;
      KVEVICT_GPU_CHECK(detail::launch_decode_scores(sa, max_len, stream));
    }
    project_into_residual(attn.as<bf16>(), B, L.wo, Hq * d, L.post_attn_norm);
    ffn_and_residual(L, B);
  }
  final_logits(B, 1);
  for (int b = 0; b < B; ++b) positions[b] += 1;
  if (score) evict_decode();
}

// DecodeEvictor::evict on the GPU cache: segments longer than budget + slack are cut to budget
// rows (select_head on the downloaded accumulators: the first `sink` and last `recent` rows are
// protected, ties toward the lower position), compacted into a new layer whose segments hold
// max(rows + 1, budget + slack + 1) rows.
void GpuSession::Impl::evict_decode() {
  const ModelConfig& m = c();
  const int d = m.head_dim;
  const int64_t limit = dopt.budget + dopt.slack;
  std::vector<LayerCache> retired;
  std::vector<DeviceBuffer> kept_bufs, off_bufs;
  for (int l = 0; l < m.n_layers; ++l) {
    if (m.is_sliding(l)) continue;  // sliding layers keep their window (Session::decode)
    LayerCache& C = layers[l];
    const int S = static_cast<int>(C.len_h.size());
    bool any = false;
    for (int sg = 0; sg < S; ++sg) any = any || C.len_h[sg] > limit;
    if (!any) continue;
    std::vector<float> acc_h(C.rows());
    KVEVICT_GPU_CHECK(cudaMemcpyAsync(acc_h.data(), C.acc.get(), acc_h.size() * 4,
                                      cudaMemcpyDeviceToHost, stream));
    KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
    // The previous layer's gather has run: free its old cache now, so that at most one layer
    // exists twice (a large batch has no room for a second copy of every layer).
    retired.clear();
    std::vector<int32_t> kept;
    std::vector<int64_t> kept_off(S + 1, 0), cap(S);
    std::vector<int32_t> len(S);
    std::vector<int32_t> head;
    int64_t max_count = 0;
    for (int sg = 0; sg < S; ++sg) {
      const int64_t n = C.len_h[sg];
      head.clear();
      if (n > limit) {
        select_head(acc_h.data() + C.off_h[sg], nullptr, n, dopt.budget, dopt.sink, dopt.recent,
                    head);
      } else {
        for (int64_t j = 0; j < n; ++j) head.push_back(static_cast<int32_t>(j));
      }
      kept.insert(kept.end(), head.begin(), head.end());
      kept_off[sg + 1] = kept_off[sg] + static_cast<int64_t>(head.size());
      len[sg] = static_cast<int32_t>(head.size());
      cap[sg] = std::max<int64_t>(static_cast<int64_t>(head.size()) + 1, dopt.capacity_per_head());
      max_count = std::max<int64_t>(max_count, static_cast<int64_t>(head.size()));
    }
    ++stats.decode_evictions;
    kept_bufs.emplace_back(std::max<size_t>(kept.size(), 1) * 4, "decode kept indices");
    off_bufs.emplace_back((S + 1) * 8, "decode kept offsets");
    KVEVICT_GPU_CHECK(cudaMemcpyAsync(kept_bufs.back().get(), kept.data(), kept.size() * 4,
                                      cudaMemcpyHostToDevice, stream));
    KVEVICT_GPU_CHECK(cudaMemcpyAsync(off_bufs.back().get(), kept_off.data(), (S + 1) * 8,
                                      cudaMemcpyHostToDevice, stream));
    LayerCache out = make_layer(cap, len, d, stream);
    KVEVICT_GPU_CHECK(detail::launch_kv_gather(
        C.k.as<bf16>(), C.v.as<bf16>(), C.pos.as<int32_t>(), C.off.as<int64_t>(),
        kept_bufs.back().as<int32_t>(), off_bufs.back().as<int64_t>(), S, max_count, d,
        out.off.as<int64_t>(), out.k.as<bf16>(), out.v.as<bf16>(), out.pos.as<int32_t>(),
        C.acc.as<float>(), out.acc.as<float>(), stream));
    retired.push_back(std::move(C));
    C = std::move(out);
  }
  if (!retired.empty()) KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
}

// Session::trim_sliding on the GPU, right after the prefill: every sliding-window layer keeps its
// last min(n, window) rows in a ring of min(window, n + decode_room) rows per segment, position p
// at row p % window (a capacity below the window never wraps: p < n + decode_room). The prefill
// layout has row = position, so the gather reads row q for ring slot q % window.
void GpuSession::Impl::trim_sliding(int64_t n) {
  const ModelConfig& m = c();
  if (m.sliding_window <= 0) return;
  const int Hkv = m.n_kv_heads, d = m.head_dim, B = opt.batch;
  const int64_t W = m.sliding_window;
  const int64_t cap_ring = std::min(W, n + opt.decode_room);
  const int64_t keep = std::min(n, W);
  // The same ring order for every head: slot i holds the kept position congruent to i mod W.
  std::vector<int32_t> kept_h(static_cast<size_t>(Hkv) * keep);
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t q = n <= W ? i : n - W + ((i - (n - W)) % W + W) % W;
    for (int g = 0; g < Hkv; ++g) kept_h[g * keep + i] = static_cast<int32_t>(q);
  }
  std::vector<int64_t> kept_off_h(Hkv + 1);
  for (int g = 0; g <= Hkv; ++g) kept_off_h[g] = g * keep;
  DeviceBuffer kept(kept_h.size() * 4, "ring kept rows"), kept_off((Hkv + 1) * 8, "ring offsets");
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(kept.get(), kept_h.data(), kept_h.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(kept_off.get(), kept_off_h.data(), (Hkv + 1) * 8,
                                    cudaMemcpyHostToDevice, stream));
  std::vector<LayerCache> retired;
  for (int l = 0; l < m.n_layers; ++l) {
    if (!m.is_sliding(l)) continue;
    LayerCache& C = layers[l];
    std::vector<int64_t> cap(static_cast<size_t>(B) * Hkv, 0);
    std::vector<int32_t> len(cap.size(), 0);
    for (int g = 0; g < Hkv; ++g) {
      cap[g] = cap_ring;
      len[g] = static_cast<int32_t>(keep);
    }
    LayerCache out = make_layer(cap, len, d, stream);
    out.ring = W;
    KVEVICT_GPU_CHECK(detail::launch_kv_gather(
        C.k.as<bf16>(), C.v.as<bf16>(), C.pos.as<int32_t>(), C.off.as<int64_t>(),
        kept.as<int32_t>(), kept_off.as<int64_t>(), Hkv, keep, d, out.off.as<int64_t>(),
        out.k.as<bf16>(), out.v.as<bf16>(), out.pos.as<int32_t>(), nullptr, nullptr, stream));
    retired.push_back(std::move(C));
    C = std::move(out);
  }
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));  // the gathers have read the old layers
}

void GpuSession::prefill(const std::vector<int32_t>& tokens, const EvictConfig& evict) {
  Impl& s = *impl_;
  const ModelConfig& c = s.c();
  const int64_t n = static_cast<int64_t>(tokens.size());
  KVEVICT_CHECK(n > 0, "no tokens to prefill; expected at least one");
  KVEVICT_CHECK(s.positions[0] == 0, "prefill on a GPU session that already holds ", s.positions[0],
                " tokens; expected a fresh session");
  KVEVICT_CHECK(n <= s.opt.max_prompt, "prompt of ", n, " tokens exceeds the session's max_prompt ",
                s.opt.max_prompt);
  if (evict.decode.enabled) {
    // As Session::setup_decode: scale from the model; no attention softcap in any supported arch.
    s.dopt = evict.decode.options;
    s.dopt.scale = c.logit_scale();
    s.dopt.softcap = 0.0f;
    s.dopt.validate();
    KVEVICT_CHECK(s.opt.decode_room >= 1, "decode-time eviction needs decode_room >= 1");
  }
  s.decode_evict = evict.decode.enabled;
  for (int64_t i = 0; i < n; ++i)
    KVEVICT_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id ", tokens[i], " at index ",
                  i, " is out of range; expected 0 .. ", c.vocab_size - 1);
  const int Hkv = c.n_kv_heads, d = c.head_dim, B = s.opt.batch;
  // Sequence 0 gets n + decode_room rows per head; the other sequences get theirs in
  // replicate_sequence().
  std::vector<int64_t> cap(static_cast<size_t>(B) * Hkv, 0);
  std::vector<int32_t> len(cap.size(), 0);
  for (int g = 0; g < Hkv; ++g) cap[g] = n + s.opt.decode_room;
  for (auto& L : s.layers) L = LayerCache();  // free first: the new cache may need the room
  for (auto& L : s.layers) L = make_layer(cap, len, d, s.stream);

  int64_t need = 0;
  if (evict.prefill.enabled) {
    evict.prefill.score.validate();
    need = evict.prefill.score.queries_needed(n);
  }
  std::vector<DeviceBuffer> qcap;
  for (int l = 0; l < c.n_layers && need > 0; ++l)
    qcap.emplace_back(static_cast<size_t>(c.n_heads) * need * d * 2, "captured window queries");

  {
    EventTimer timer(s.stream);
    for (int64_t c0 = 0; c0 < n; c0 += s.opt.prefill_chunk) {
      const int64_t T = std::min(s.opt.prefill_chunk, n - c0);
      s.forward_prefill_chunk(tokens.data() + c0, T, c0, need, n, need > 0 ? &qcap : nullptr,
                              c0 + T == n);
    }
    s.stats.prefill_seconds += timer.seconds();
  }
  s.stats.prefill_tokens += n;
  for (auto& L : s.layers) {
    for (int g = 0; g < Hkv; ++g) L.len_h[g] = static_cast<int32_t>(n);
    KVEVICT_GPU_CHECK(cudaMemcpyAsync(L.len.get(), L.len_h.data(), L.len_h.size() * 4,
                                      cudaMemcpyHostToDevice, s.stream));
  }
  s.positions[0] = n;
  s.trim_sliding(n);
  s.stats.kv_bytes_before = kv_bytes_per_sequence();
  s.stats.kv_bytes_after = s.stats.kv_bytes_before;
  if (evict.prefill.enabled) {
    EventTimer timer(s.stream);
    s.evict_prefill(evict.prefill, n, need, qcap);
    s.stats.evict_seconds += timer.seconds();
    s.stats.kv_bytes_after = kv_bytes_per_sequence();
  }
}

void GpuSession::Impl::evict_prefill(const PrefillEviction& ev, int64_t n, int64_t need,
                                     std::vector<DeviceBuffer>& qcap) {
  const ModelConfig& m = c();
  const int Hq = m.n_heads, Hkv = m.n_kv_heads, d = m.head_dim, B = opt.batch;
  SelectOptions sel_opt = ev.select;
  sel_opt.window = ev.score.window;
  // criticalkv's two-stage selection and its W_o projection are planned on the CPU.
  const bool on_gpu = sel_opt.policy == Policy::kUniform && ev.score.method != Method::kCriticalKV &&
                      cuda::score_supported(ev.score.method);
  stats.evict_path = on_gpu ? "gpu" : "cpu-plan";
  std::unique_ptr<Backend> cpu_backend;
  std::unique_ptr<LayerEvictor> cpu_evictor;
  if (!on_gpu) {
    cpu_backend = make_cpu_backend();
    cpu_evictor = std::make_unique<LayerEvictor>(*cpu_backend, ev.score, sel_opt);
  }
  DeviceBuffer scores, ws;
  std::vector<int64_t> kept_off_h(Hkv + 1);
  std::vector<LayerCache> retired;
  // Per layer (the gathers of all layers are in flight together): kept indices and offsets.
  std::vector<DeviceBuffer> kept_all(m.n_layers), kept_off_all(m.n_layers);
  for (int l = 0; l < m.n_layers; ++l) {
    if (m.is_sliding(l)) continue;  // eviction applies to full-attention layers only
    LayerCache& C = layers[l];
    DeviceBuffer& kept = kept_all[l];
    DeviceBuffer& kept_off = kept_off_all[l];
    const int64_t cap0 = C.cap(0);
    TensorView kv_k(C.k.as<bf16>() + C.off_h[0] * d, DType::kBF16, {Hkv, n, d}, Device::kCuda);
    kv_k.stride[0] = cap0 * d;
    TensorView kv_v = kv_k;
    kv_v.data = C.v.as<bf16>() + C.off_h[0] * d;
    std::vector<int64_t> counts(Hkv);
    if (on_gpu) {
      ScoreProblem p;
      if (need > 0) p.q = TensorView(qcap[l].get(), DType::kBF16, {Hq, need, d}, Device::kCuda);
      p.k = kv_k;
      p.v = kv_v;
      p.scale = m.logit_scale();
      int64_t n_keep = ev.select.budget.keep_count(n);
      const int64_t prot = cuda::protected_count(n, sel_opt.sink, sel_opt.window);
      if (n_keep < prot) {
        if (stats.warning.empty())
          stats.warning = "budget of " + std::to_string(n_keep) + " tokens is below the " +
                          std::to_string(prot) + " protected ones; keeping just those";
        n_keep = prot;
      }
      scores.ensure(static_cast<size_t>(Hkv) * n * 4, "eviction scores");
      kept.ensure(static_cast<size_t>(Hkv) * std::max<int64_t>(n_keep, 1) * 4, "kept indices");
      const size_t wsb = std::max(cuda::score_workspace_bytes(p, ev.score),
                                  cuda::select_uniform_workspace_bytes(Hkv, n));
      if (ws.bytes() < wsb) {
        KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
        ws.ensure(wsb, "eviction workspace");
      }
      TensorView sv(scores.get(), DType::kF32, {Hkv, n}, Device::kCuda);
      ScoreOutput so;
      so.scores = sv;
      cuda::score(p, ev.score, so, Workspace{ws.get(), ws.bytes()}, stream);
      TensorView kv_kept(kept.get(), DType::kI32, {Hkv, n_keep}, Device::kCuda);
      cuda::select_uniform(sv, n_keep, sel_opt.sink, sel_opt.window, kv_kept,
                           Workspace{ws.get(), ws.bytes()}, stream);
      for (int g = 0; g <= Hkv; ++g) kept_off_h[g] = g * n_keep;
      for (int g = 0; g < Hkv; ++g) counts[g] = n_keep;
    } else {
      // Fallback: plan on the CPU from downloaded K, V and queries, compact on the GPU.
      KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
      std::vector<uint16_t> hk(static_cast<size_t>(Hkv) * n * d), hv(hk.size());
      KVEVICT_GPU_CHECK(cudaMemcpy2D(hk.data(), n * d * 2, kv_k.data, cap0 * d * 2, n * d * 2, Hkv,
                                     cudaMemcpyDeviceToHost));
      KVEVICT_GPU_CHECK(cudaMemcpy2D(hv.data(), n * d * 2, kv_v.data, cap0 * d * 2, n * d * 2, Hkv,
                                     cudaMemcpyDeviceToHost));
      std::vector<float> hq;
      ScoreProblem p;
      if (need > 0) {
        std::vector<uint16_t> hq16(static_cast<size_t>(Hq) * need * d);
        KVEVICT_GPU_CHECK(
            cudaMemcpy(hq16.data(), qcap[l].get(), hq16.size() * 2, cudaMemcpyDeviceToHost));
        hq.resize(hq16.size());
        for (size_t i = 0; i < hq.size(); ++i) hq[i] = bf16_to_float(hq16[i]);
        p.q = TensorView(hq.data(), DType::kF32, {Hq, need, d});
      }
      p.k = TensorView(hk.data(), DType::kBF16, {Hkv, n, d});
      p.v = TensorView(hv.data(), DType::kBF16, {Hkv, n, d});
      p.scale = m.logit_scale();
      std::vector<uint16_t> hwo;  // [D, Hq d] this layer's bf16 output projection (criticalkv)
      if (ev.score.method == Method::kCriticalKV) {
        const int64_t D = m.n_embd, o_cols = int64_t{Hq} * d;
        hwo.resize(static_cast<size_t>(D * o_cols));
        KVEVICT_GPU_CHECK(cudaMemcpy(hwo.data(), w->layers[l].wo, hwo.size() * 2,
                                     cudaMemcpyDeviceToHost));
        p.wo = TensorView(hwo.data(), DType::kBF16, {D, o_cols});
      }
      const Selection sel = cpu_evictor->plan(p);
      if (!sel.warning.empty() && stats.warning.empty()) stats.warning = sel.warning;
      kept_off_h = sel.offsets;
      for (int g = 0; g < Hkv; ++g) counts[g] = sel.count(g);
      kept.ensure(std::max<size_t>(sel.index.size(), 1) * 4, "kept indices");
      KVEVICT_GPU_CHECK(cudaMemcpyAsync(kept.get(), sel.index.data(), sel.index.size() * 4,
                                        cudaMemcpyHostToDevice, stream));
    }
    kept_off.ensure((Hkv + 1) * 8, "kept offsets");
    KVEVICT_GPU_CHECK(cudaMemcpyAsync(kept_off.get(), kept_off_h.data(), (Hkv + 1) * 8,
                                      cudaMemcpyHostToDevice, stream));
    std::vector<int64_t> cap(static_cast<size_t>(B) * Hkv, 0);
    std::vector<int32_t> len(cap.size(), 0);
    int64_t max_count = 0;
    for (int g = 0; g < Hkv; ++g) {
      cap[g] = counts[g] + opt.decode_room;
      len[g] = static_cast<int32_t>(counts[g]);
      max_count = std::max(max_count, counts[g]);
    }
    LayerCache out = make_layer(cap, len, d, stream);
    KVEVICT_GPU_CHECK(detail::launch_kv_gather(
        C.k.as<bf16>(), C.v.as<bf16>(), C.pos.as<int32_t>(), C.off.as<int64_t>(),
        kept.as<int32_t>(), kept_off.as<int64_t>(), Hkv, max_count, d, out.off.as<int64_t>(),
        out.k.as<bf16>(), out.v.as<bf16>(), out.pos.as<int32_t>(), nullptr, nullptr, stream));
    retired.push_back(std::move(C));  // freed after the last gather (one sync, not one a layer)
    C = std::move(out);
  }
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(stream));
  retired.clear();
}

void GpuSession::append(const std::vector<int32_t>& tokens) {
  Impl& s = *impl_;
  KVEVICT_CHECK(s.positions[0] > 0, "append on an empty GPU session; expected prefill first");
  std::vector<int32_t> row(s.opt.batch);
  for (int32_t t : tokens) {
    KVEVICT_CHECK(t >= 0 && t < s.c().vocab_size, "token id ", t,
                  " is out of range; expected 0 .. ", s.c().vocab_size - 1);
    std::fill(row.begin(), row.end(), t);
    s.appending = true;
    try {
      decode(row);
    } catch (...) {
      s.appending = false;
      throw;
    }
    s.appending = false;
  }
}

void GpuSession::replicate_sequence() {
  Impl& s = *impl_;
  const ModelConfig& c = s.c();
  const int B = s.opt.batch, Hkv = c.n_kv_heads, d = c.head_dim;
  KVEVICT_CHECK(s.positions[0] > 0, "replicate_sequence before prefill; expected prefill first");
  if (B == 1) return;
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(s.stream));
  for (auto& C : s.layers) {
    std::vector<int64_t> cap(static_cast<size_t>(B) * Hkv);
    std::vector<int32_t> len(cap.size());
    for (int b = 0; b < B; ++b)
      for (int g = 0; g < Hkv; ++g) {
        cap[b * Hkv + g] = C.cap(g);
        len[b * Hkv + g] = C.len_h[g];
      }
    const int64_t rows0 = C.off_h[Hkv] - C.off_h[0];
    // Build the batched layer after freeing nothing: both must fit for the copy.
    LayerCache out = make_layer(cap, len, d, s.stream);
    out.ring = C.ring;
    for (int b = 0; b < B; ++b) {
      const int64_t dst = out.off_h[b * Hkv];
      KVEVICT_GPU_CHECK(cudaMemcpyAsync(out.k.as<bf16>() + dst * d, C.k.as<bf16>() + C.off_h[0] * d,
                                        rows0 * d * 2, cudaMemcpyDeviceToDevice, s.stream));
      KVEVICT_GPU_CHECK(cudaMemcpyAsync(out.v.as<bf16>() + dst * d, C.v.as<bf16>() + C.off_h[0] * d,
                                        rows0 * d * 2, cudaMemcpyDeviceToDevice, s.stream));
      KVEVICT_GPU_CHECK(cudaMemcpyAsync(out.pos.as<int32_t>() + dst,
                                        C.pos.as<int32_t>() + C.off_h[0], rows0 * 4,
                                        cudaMemcpyDeviceToDevice, s.stream));
    }
    KVEVICT_GPU_CHECK(cudaStreamSynchronize(s.stream));
    C = std::move(out);
  }
  for (int b = 1; b < B; ++b) s.positions[b] = s.positions[0];
  s.replicated = true;
}

void GpuSession::decode(const std::vector<int32_t>& tokens) {
  Impl& s = *impl_;
  KVEVICT_CHECK(static_cast<int>(tokens.size()) == s.opt.batch, "decode got ", tokens.size(),
                " tokens; expected one per sequence (", s.opt.batch, ")");
  KVEVICT_CHECK(s.positions[0] > 0, "decode on an empty GPU session; expected prefill first");
  for (int32_t t : tokens)
    KVEVICT_CHECK(t >= 0 && t < s.c().vocab_size, "token id ", t,
                  " is out of range; expected 0 .. ", s.c().vocab_size - 1);
  KVEVICT_GPU_CHECK(cudaEventSynchronize(s.pos_staged));  // tok_pinned's last copy has run
  std::copy(tokens.begin(), tokens.end(), s.tok_pinned);
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(s.tokens.get(), s.tok_pinned, tokens.size() * 4,
                                    cudaMemcpyHostToDevice, s.stream));
  EventTimer timer(s.stream);
  s.decode_step(s.tokens.as<int32_t>(), /*score=*/!s.appending);
  s.stats.decode_seconds += timer.seconds();
  s.stats.decode_steps += 1;
}

std::vector<int32_t> GpuSession::argmax() {
  Impl& s = *impl_;
  KVEVICT_GPU_CHECK(detail::launch_argmax(s.logits.as<float>(), s.opt.batch, s.c().vocab_size,
                                          s.ids.as<int32_t>(), s.stream));
  std::vector<int32_t> out(s.opt.batch);
  KVEVICT_GPU_CHECK(
      cudaMemcpyAsync(out.data(), s.ids.get(), out.size() * 4, cudaMemcpyDeviceToHost, s.stream));
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(s.stream));
  return out;
}

std::vector<int32_t> GpuSession::sample(const SamplerOptions& opt,
                                        const std::vector<double>& uniforms) {
  Impl& s = *impl_;
  KVEVICT_CHECK(s.positions[0] > 0, "sample on an empty GPU session; expected prefill first");
  sample_on_device(s.logits.as<float>(), s.opt.batch, s.c().vocab_size, opt, uniforms,
                   s.ids.as<int32_t>(), s.sample_scratch, s.draws, s.stream);
  std::vector<int32_t> out(s.opt.batch);
  KVEVICT_GPU_CHECK(
      cudaMemcpyAsync(out.data(), s.ids.get(), out.size() * 4, cudaMemcpyDeviceToHost, s.stream));
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(s.stream));
  return out;
}

std::vector<int32_t> GpuSession::decode_greedy(int steps) {
  Impl& s = *impl_;
  KVEVICT_CHECK(steps >= 1, "decode_greedy steps ", steps, " is invalid; expected >= 1");
  KVEVICT_CHECK(s.positions[0] > 0, "decode on an empty GPU session; expected prefill first");
  EventTimer timer(s.stream);
  for (int i = 0; i < steps; ++i) {
    KVEVICT_GPU_CHECK(detail::launch_argmax(s.logits.as<float>(), s.opt.batch, s.c().vocab_size,
                                            s.ids.as<int32_t>(), s.stream));
    KVEVICT_GPU_CHECK(cudaMemcpyAsync(s.tokens.get(), s.ids.get(), s.opt.batch * 4,
                                      cudaMemcpyDeviceToDevice, s.stream));
    s.decode_step(s.tokens.as<int32_t>(), /*score=*/true);
  }
  s.stats.decode_seconds += timer.seconds();
  s.stats.decode_steps += steps;
  return argmax();
}

std::vector<float> GpuSession::logits(int sequence) const {
  const Impl& s = *impl_;
  KVEVICT_CHECK(sequence >= 0 && sequence < s.opt.batch, "sequence ", sequence,
                " is out of range; expected 0 .. ", s.opt.batch - 1);
  const int64_t V = s.c().vocab_size;
  std::vector<float> out(V);
  KVEVICT_GPU_CHECK(cudaMemcpyAsync(out.data(), s.logits.as<float>() + sequence * V, V * 4,
                                    cudaMemcpyDeviceToHost, s.stream));
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(s.stream));
  return out;
}

GenerateResult GpuSession::generate(int max_new, Sampler& sampler,
                                    const std::function<bool(int32_t)>& is_stop,
                                    const std::function<void(int32_t)>& on_token) {
  Impl& s = *impl_;
  KVEVICT_CHECK(max_new >= 0, "max_new ", max_new, " is negative; expected >= 0");
  KVEVICT_CHECK(s.opt.batch == 1, "generate runs one sequence; the session has batch ",
                s.opt.batch);
  KVEVICT_CHECK(s.positions[0] > 0, "generate on an empty GPU session; expected prefill first");
  const SamplerOptions& so = sampler.options();
  const bool greedy = so.temperature <= 0.0f;
  std::mt19937_64 rng(so.seed);  // the generator a fresh Sampler(so) draws from
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  GenerateResult r;
  for (int i = 0; i < max_new; ++i) {
    const int32_t tok = greedy ? argmax()[0] : sample(so, {unit(rng)})[0];
    r.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (is_stop && is_stop(tok)) {
      r.stopped = true;
      break;
    }
    if (i + 1 < max_new) decode({tok});
  }
  return r;
}

int64_t GpuSession::position() const {
  return impl_->positions[0];
}

int64_t GpuSession::kv_rows(int layer) const {
  const Impl& s = *impl_;
  KVEVICT_CHECK(layer >= 0 && layer < static_cast<int>(s.layers.size()), "layer ", layer,
                " is out of range; expected 0 .. ", s.layers.size() - 1);
  int64_t r = 0;
  for (int g = 0; g < s.c().n_kv_heads; ++g) r += s.layers[layer].len_h[g];
  return r;
}

int64_t GpuSession::kv_bytes_total() const {
  int64_t rows = 0;
  for (const auto& L : impl_->layers) rows += L.rows();
  return rows * impl_->c().head_dim * 2 * 2;
}

int64_t GpuSession::kv_bytes_per_sequence() const {
  const Impl& s = *impl_;
  int64_t rows = 0;
  for (const auto& L : s.layers)
    if (!L.off_h.empty()) rows += L.off_h[s.c().n_kv_heads] - L.off_h[0];
  return rows * s.c().head_dim * 2 * 2;
}

const GpuStats& GpuSession::stats() const {
  return impl_->stats;
}
const GpuModel& GpuSession::model() const {
  return *impl_->model;
}
void GpuSession::synchronize() const {
  KVEVICT_GPU_CHECK(cudaStreamSynchronize(impl_->stream));
}

}  // namespace kvevict::gpu
