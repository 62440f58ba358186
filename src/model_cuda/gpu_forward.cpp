// GpuForward (gpu_forward.h): prefill passes and batched decode steps (STYLE.md layer 3 for the
// model kernels: checks, buffers, then the launchers of src/model_cuda and src/cuda).
#include "model_cuda/gpu_forward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "cuda/check.h"
#include "cuda/launchers.h"
#include "cuda/model_launchers.h"
#include "cuda/window_plan.h"

namespace kvevict::gpu {

using cuda::DeviceBuffer;

GpuForward::GpuForward(const GpuModel::Impl& model, cudaStream_t stream)
    // KVEVICT_DECODE_FUSED and KVEVICT_GEMV_ROUTE: which decode steps are fused and which of
    // their projections take the small-batch GEMV (fused_step_policy.h: the defaults and why);
    // read first, so a refused value throws before anything is allocated.
    : w_(model),
      stream_(stream),
      fused_mode_(fused_step_from_env()),
      gemv_route_(gemv_route_from_env()),
      gemv_preload_(gemv_preload_from_env()),
      gemv_folds_(gemv_folds_from_env()) {
  KVEVICT_CUBLAS_CHECK(cublasCreate(&blas_));
  KVEVICT_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  blas_ws_ = DeviceBuffer(32 << 20, "cuBLAS workspace");
  KVEVICT_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_ws_.get(), blas_ws_.bytes()));
  sm_count_ = cuda::detail::current_sm_count();
  KVEVICT_CUDA_CHECK(cudaEventCreateWithFlags(&pos_staged_, cudaEventDisableTiming));
  KVEVICT_CUDA_CHECK(cudaEventRecord(pos_staged_, stream_));
  // KVEVICT_DECODE_GRAPH=0: every decode step launches eagerly (the fallback, and the A/B).
  const char* e = std::getenv("KVEVICT_DECODE_GRAPH");
  graph_on_ = !(e != nullptr && e[0] == '0');
}

GpuForward::~GpuForward() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (blas_) cublasDestroy(blas_);
  if (pos_pinned_) cudaFreeHost(pos_pinned_);
  if (pos_staged_) cudaEventDestroy(pos_staged_);
}

// Activation buffers for passes of up to T tokens (they only grow).
void GpuForward::ensure_batch(int T) {
  if (T <= t_max_) return;
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const ModelConfig& m = c();
  const int64_t D = m.n_embd, F = m.ffn_dim, d = m.head_dim, Hq = m.n_heads;
  const int64_t W = int64_t{m.n_heads + 2 * m.n_kv_heads} * d;
  x_ = DeviceBuffer(T * D * 4, "activations x");
  xn_ = DeviceBuffer(T * D * 2, "activations xn");
  qkv_ = DeviceBuffer(T * W * 2, "activations qkv");
  qh_ = DeviceBuffer(T * Hq * d * 2, "queries");
  attn_ = DeviceBuffer(T * Hq * d * 2, "attention output");
  if (m.post_norms) o_f_ = DeviceBuffer(T * D * 4, "projection output f32");
  gu_ = DeviceBuffer(T * 2 * F * 2, "gate/up activations");
  hbuf_ = DeviceBuffer(T * F * 2, "ffn activations");
  tokens_ = DeviceBuffer(T * 4, "tokens");
  pos_ = DeviceBuffer(T * 4, "positions");
  if (pos_pinned_) KVEVICT_CUDA_CHECK(cudaFreeHost(pos_pinned_));
  KVEVICT_CUDA_CHECK(cudaMallocHost(&pos_pinned_, static_cast<size_t>(T) * 4));
  t_max_ = T;
}

float GpuForward::embed_mul() const {
  // gemma3 scales the embeddings by sqrt(D) (forward.cpp).
  return c().embed_scale ? std::sqrt(static_cast<float>(c().n_embd)) : 1.0f;
}

// Y[T, out] (+)= X[T, in] W[out, in]^T: bf16 inputs, f32 accumulation; Y bf16 or f32 (f32 with
// beta = 1 adds into the residual stream).
void GpuForward::gemm(const bf16* x, int64_t T, const bf16* w, int64_t out, int64_t in, void* y,
                      bool y_f32, float beta) {
  const float alpha = 1.0f;
  KVEVICT_CUBLAS_CHECK(
      cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(T),
                   static_cast<int>(in), &alpha, w, CUDA_R_16BF, static_cast<int>(in), x,
                   CUDA_R_16BF, static_cast<int>(in), &beta, y, y_f32 ? CUDA_R_32F : CUDA_R_16BF,
                   static_cast<int>(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The small-batch GEMV of decode_gemv.cu for y = x W^T (x RMS-normed first when a.norm_w is set)
// where it covers the pass; false: the caller runs the cuBLAS path.
bool GpuForward::try_gemv(const detail::GemvArgs& a) {
  if (!fused_now_) return false;
  detail::GemvArgs routed = a;
  routed.preload = gemv_preload_;  // before gemv_takes: the folds need the preloaded kernel
  if (!gemv_takes(gemv_route_, &routed)) return false;
  KVEVICT_CUDA_CHECK(detail::launch_gemv(routed, stream_));
  return true;
}

// try_gemv for a GEMV that norms x (a.x = x_): a pending post-norm add rides along where the launch
// can take it, else it runs first as its own kernel. On return nothing is pending; false: no GEMV
// ran (the caller's path reads x).
// Only launches of about one wave fold (at most 32 weight rows an SM: 4 blocks of 4 warps, a row
// pair each): every block re-reads the post row and counts itself on one counter. The logits'
// 262,144 rows are 32,768 blocks; folded there, those same-address arrivals cost 0.18 ms a token
// and Gemma 3's step lost 21% (H100, docs/GPU_NOTES.md 2026-12-07 (g)). Its q|k|v (192 blocks) and
// gate|up (512) are a wave.
bool GpuForward::try_normed_gemv(const detail::GemvArgs& a) {
  const int64_t rows = a.out == detail::GemvOut::kGated ? 2LL * a.N : a.N;
  if (pending_post_ != nullptr && rows <= 32LL * sm_count_) {
    detail::GemvArgs f = a;
    f.post_in = o_f_.as<float>();
    f.post_w = pending_post_;
    f.x_out = x_.as<float>();
    // kRopeAppend counts its blocks already; the others take the counter it uses (B = 1).
    if (f.arrivals == nullptr)
      f.arrivals = step_counters_.as<uint32_t>() + static_cast<int64_t>(c().n_kv_heads);
    if (try_gemv(f)) {
      pending_post_ = nullptr;
      return true;
    }
  }
  flush_post();
  return try_gemv(a);
}

// Whether a post-norm add of a T-row pass may wait for the next GEMV that norms x: only with the
// folds on and where that GEMV can take it (the fused step's batch-1 kernel with its weights
// preloaded, rows of at most a tile). Elsewhere, the L2 path's preload = false included, the add
// runs at once, as it always did.
bool GpuForward::post_can_wait(int64_t T) const {
  return gemv_folds_ && fused_now_ && gemv_preload_ && T == 1 && c().n_embd <= detail::kGemvTileK;
}

// The pending post-norm add (if any) as its own kernel, before anything else reads x.
void GpuForward::flush_post() {
  if (pending_post_ == nullptr) return;
  const ModelConfig& m = c();
  KVEVICT_CUDA_CHECK(detail::launch_rms_norm_add(o_f_.as<float>(), 1, static_cast<int>(m.n_embd),
                                                 pending_post_, m.rms_eps, x_.as<float>(),
                                                 stream_));
  pending_post_ = nullptr;
}

// The GEMV arguments of y = rms_norm(x) W^T over the T rows of x (row stride D), W [n_out, D].
detail::GemvArgs GpuForward::normed_gemv(const float* x, const float* norm, const bf16* w,
                                         int64_t n_out, int64_t T, detail::GemvOut out) const {
  detail::GemvArgs a;
  a.x = x;
  a.norm_w = norm;
  a.eps = c().rms_eps;
  a.w = w;
  a.B = static_cast<int>(T);
  a.N = static_cast<int>(n_out);
  a.K = static_cast<int>(c().n_embd);
  a.out = out;
  return a;
}

// xn[T, D] = rms_norm(x) with `norm`, then y[T, out] = xn W^T (bf16).
void GpuForward::norm_and_project(const float* norm, const bf16* w, int64_t out, void* y,
                                  int64_t T) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd;
  detail::GemvArgs a = normed_gemv(x_.as<float>(), norm, w, out, T, detail::GemvOut::kBf16);
  a.y = y;
  if (try_normed_gemv(a)) return;
  KVEVICT_CUDA_CHECK(detail::launch_rms_norm(x_.as<float>(), D, static_cast<int>(T),
                                             static_cast<int>(D), norm, m.rms_eps, xn_.as<bf16>(),
                                             stream_));
  gemm(xn_.as<bf16>(), T, w, out, D, y, false, 0.0f);
}

void GpuForward::ffn_and_residual(const GpuModel::Impl::Layer& L, int64_t T) {
  const ModelConfig& m = c();
  const int64_t F = m.ffn_dim;
  const bool gelu = m.activation == FfnActivation::kGeluTanh;
  // Norm, gate|up and the activation in one launch, else the norm and gate|up, then the
  // activation.
  detail::GemvArgs a =
      normed_gemv(x_.as<float>(), L.ffn_norm, L.w_gu, F, T, detail::GemvOut::kGated);
  a.gelu_tanh = gelu;
  a.y = hbuf_.get();
  if (!try_normed_gemv(a)) {
    norm_and_project(L.ffn_norm, L.w_gu, 2 * F, gu_.get(), T);
    KVEVICT_CUDA_CHECK(detail::launch_gated_act(
        gu_.as<bf16>(), static_cast<int>(T), static_cast<int>(F), gelu, hbuf_.as<bf16>(), stream_));
  }
  project_into_residual(hbuf_.as<bf16>(), T, L.w_down, F, L.post_ffn_norm);
}

// x[T, D] += in[T, in_dim] w^T, or (gemma3) x += rms_norm(in w^T) * post_norm, where the fused
// step may leave that add to the next GEMV that norms x (pending_post_).
void GpuForward::project_into_residual(const bf16* in, int64_t T, const bf16* wt, int64_t in_dim,
                                       const float* post_norm) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd;
  flush_post();  // the projection reads x or overwrites o_f_
  detail::GemvArgs a;
  a.x = in;
  a.w = wt;
  a.B = static_cast<int>(T);
  a.N = static_cast<int>(D);
  a.K = static_cast<int>(in_dim);
  a.out = post_norm == nullptr ? detail::GemvOut::kF32Add : detail::GemvOut::kF32;
  a.y = post_norm == nullptr ? x_.get() : o_f_.get();
  if (!try_gemv(a)) gemm(in, T, wt, D, in_dim, a.y, true, post_norm == nullptr ? 1.0f : 0.0f);
  if (post_norm == nullptr) return;
  if (post_can_wait(T)) {
    pending_post_ = post_norm;
    return;
  }
  KVEVICT_CUDA_CHECK(detail::launch_rms_norm_add(o_f_.as<float>(), static_cast<int>(T),
                                                 static_cast<int>(D), post_norm, m.rms_eps,
                                                 x_.as<float>(), stream_));
}

// Logits of `rows` rows of x taken every `stride` rows starting at row (stride - 1) (the last
// token of a prefill chunk: rows = 1, stride = T; decode: rows = batch, stride = 1).
void GpuForward::final_logits(int64_t rows, int64_t stride, float* logits) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd;
  flush_post();  // never into the logits' launch (try_normed_gemv: far more than a wave)
  const float* x_last = x_.as<float>() + (stride - 1) * D;
  detail::GemvArgs a =
      normed_gemv(x_last, w_.output_norm, w_.output, m.vocab_size, rows, detail::GemvOut::kF32);
  a.y = logits;
  if (!((rows == 1 || stride == 1) && try_gemv(a))) {
    KVEVICT_CUDA_CHECK(detail::launch_rms_norm(x_last, stride * D, static_cast<int>(rows),
                                               static_cast<int>(D), w_.output_norm, m.rms_eps,
                                               xn_.as<bf16>(), stream_));
    gemm(xn_.as<bf16>(), rows, w_.output, m.vocab_size, D, logits, true, 0.0f);
  }
  if (m.final_logit_softcap > 0)
    KVEVICT_CUDA_CHECK(
        detail::launch_softcap(logits, rows * m.vocab_size, m.final_logit_softcap, stream_));
}

namespace {

// RoPE + append arguments shared by prefill and decode: this layer's angle table, bias, gemma3's
// q/k norms, the qkv rows with positions in `pos`, queries out to `q_out`, and the layer's cache.
// Callers set the layout (head_major, decode, seq/first, ring).
detail::RopeAppendArgs rope_args(const GpuModel::Impl& w, const GpuModel::Impl::Layer& L,
                                 LayerCache& C, int il, int rows, const void* qkv,
                                 const int32_t* pos, void* q_out) {
  const ModelConfig& m = w.config;
  detail::RopeAppendArgs ra;
  ra.qkv = static_cast<const __nv_bfloat16*>(qkv);
  ra.pos = pos;
  ra.T = rows;
  ra.q_out = static_cast<__nv_bfloat16*>(q_out);
  ra.k_cache = C.k.as<__nv_bfloat16>();
  ra.v_cache = C.v.as<__nv_bfloat16>();
  ra.pos_cache = C.pos.as<int32_t>();
  ra.acc_cache = C.acc.as<float>();
  ra.seg_off = C.off.as<int64_t>();
  ra.seg_len = C.len.as<int32_t>();
  ra.bias = L.bqkv;
  ra.inv_freq = m.is_sliding(il) ? w.inv_freq_sliding : w.inv_freq;
  ra.Hq = m.n_heads;
  ra.Hkv = m.n_kv_heads;
  ra.d = m.head_dim;
  ra.neox = m.rope_style == RopeStyle::kNeox;
  ra.q_norm = L.q_norm;
  ra.k_norm = L.k_norm;
  ra.norm_eps = m.rms_eps;
  return ra;
}

}  // namespace

void GpuForward::prefill_chunk(const int32_t* tok, int64_t T, int64_t p0, int seq,
                               std::vector<LayerCache>& layers, int64_t need, int64_t n_total,
                               std::vector<DeviceBuffer>* qcap, float* logits) {
  const ModelConfig& m = c();
  KVEVICT_CHECK(T >= 1 && T <= std::numeric_limits<int>::max(), "prefill chunk of ", T,
                " tokens is invalid");
  ensure_batch(static_cast<int>(T));
  const int64_t D = m.n_embd, d = m.head_dim, Hq = m.n_heads, Hkv = m.n_kv_heads;
  const int64_t W = (Hq + 2 * Hkv) * d;
  std::vector<int32_t> pos_h(T);
  for (int64_t t = 0; t < T; ++t) pos_h[t] = static_cast<int32_t>(p0 + t);
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(tokens_.get(), tok, T * 4, cudaMemcpyHostToDevice, stream_));
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(pos_.get(), pos_h.data(), T * 4, cudaMemcpyHostToDevice, stream_));
  KVEVICT_CUDA_CHECK(detail::launch_embed(w_.token_embd, tokens_.as<int32_t>(), static_cast<int>(T),
                                          static_cast<int>(D), embed_mul(), x_.as<float>(),
                                          stream_));
  // Query rows of this chunk that eviction needs: positions [n_total - need, n_total).
  const int64_t cap_lo = std::max(p0, n_total - need), cap_hi = p0 + T;
  const int s0 = seq * static_cast<int>(Hkv);
  for (int il = 0; il < m.n_layers; ++il) {
    const GpuModel::Impl::Layer& L = w_.layers[il];
    LayerCache& C = layers[il];
    norm_and_project(L.attn_norm, L.wqkv, W, qkv_.get(), T);
    detail::RopeAppendArgs ra =
        rope_args(w_, L, C, il, static_cast<int>(T), qkv_.get(), pos_.as<int32_t>(), qh_.get());
    ra.head_major = true;
    ra.decode = false;
    ra.seq = seq;
    ra.first = p0;
    KVEVICT_CUDA_CHECK(detail::launch_rope_append(ra, stream_));
    if (qcap != nullptr && cap_hi > cap_lo) {
      // [Hq, T, d] rows cap_lo - p0 .. -> capture [Hq, need, d] rows cap_lo - (n_total - need) ..
      const size_t row_bytes = d * 2;
      KVEVICT_CUDA_CHECK(cudaMemcpy2DAsync((*qcap)[il].as<bf16>() + (cap_lo - (n_total - need)) * d,
                                           need * row_bytes, qh_.as<bf16>() + (cap_lo - p0) * d,
                                           T * row_bytes, (cap_hi - cap_lo) * row_bytes, Hq,
                                           cudaMemcpyDeviceToDevice, stream_));
    }
    // Causal attention of the chunk's T queries over keys 0 .. p0 + T - 1: the window kernel with
    // the whole chunk as its window (query t at position n - w + t). Prefill segments have
    // row = position and equal spacing, so the layer reads as [Hkv, n, d] with a head stride.
    cuda::detail::WindowArgs wa;
    wa.elem = cuda::detail::Elem::kBF16;
    wa.q = qh_.get();
    wa.q_head_stride = T * d;
    wa.q_row_stride = d;
    wa.q_rows = static_cast<int>(T);
    wa.k = C.k.as<bf16>() + C.off_h[s0] * d;
    wa.v = C.v.as<bf16>() + C.off_h[s0] * d;
    wa.kv_head_stride = C.cap(s0) * d;
    wa.kv_row_stride = d;
    wa.num_q_heads = static_cast<int>(Hq);
    wa.num_kv_heads = static_cast<int>(Hkv);
    wa.w = static_cast<int>(T);
    wa.head_dim = static_cast<int>(d);
    wa.n = p0 + T;
    wa.scale = m.logit_scale();
    wa.sliding_window = m.is_sliding(il) ? m.sliding_window : 0;
    const size_t need_scratch = cuda::detail::window_forward_scratch_bytes(wa, true, sm_count_);
    if (scratch_.bytes() < need_scratch) {
      KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      scratch_.ensure(need_scratch, "attention scratch");
    }
    // The outputs as [T, Hq d] bf16 rows, the o projection's input (no lse: nothing reads it).
    KVEVICT_CUDA_CHECK(cuda::detail::launch_window_attention_rows(
        wa, attn_.get(), nullptr, scratch_.get(), scratch_.bytes(), sm_count_, stream_));
    project_into_residual(attn_.as<bf16>(), T, L.wo, Hq * d, L.post_attn_norm);
    ffn_and_residual(L, T);
  }
  if (logits != nullptr) final_logits(1, T, logits);
}

// The decode step in two parts: the host side (checks, host lengths, buffer sizes, the split plan,
// the positions' upload) and the launches (enqueue_decode), which run eagerly or as a replayed
// CUDA graph (decode_graph.h). Every value the launches bake in goes into the graph's key.
void GpuForward::decode_step(int32_t* tokens_dev, bool argmax_first,
                             const std::vector<int64_t>& positions, std::vector<LayerCache>& layers,
                             const StepScoring* scoring, float* logits) {
  const ModelConfig& m = c();
  const int B = static_cast<int>(positions.size());
  KVEVICT_CHECK(B >= 1, "a decode step of no rows; expected at least one");
  KVEVICT_CHECK(static_cast<int>(layers.size()) == m.n_layers, "decode step over ", layers.size(),
                " layers; the model has ", m.n_layers);
  ensure_batch(B);
  const int64_t d = m.head_dim, Hq = m.n_heads, Hkv = m.n_kv_heads;
  const bool fused = step_is_fused(fused_mode_, B);
  for (int b = 0; b < B; ++b)
    KVEVICT_CHECK(positions[b] + 1 <= m.context_length, "decoding position ", positions[b],
                  " exceeds the context length ", m.context_length, " of ", m.name);
  // Checks of every layer before any host length moves.
  for (int il = 0; il < m.n_layers; ++il) {
    const LayerCache& C = layers[il];
    KVEVICT_CHECK(C.host_valid && C.segments == B * Hkv, "layer ", il, " holds ", C.segments,
                  " segments; a decode step of ", B, " rows needs ", B * Hkv,
                  " with a synchronized table");
    for (int s = 0; s < C.segments; ++s) {
      // A full ring (capacity = window) overwrites its oldest row; anything else must have room.
      const bool wraps = C.ring > 0 && C.cap(s) == C.ring;
      KVEVICT_CHECK(wraps || C.len_h[s] + 1 <= C.cap(s), "layer ", il, " segment ", s, " is full (",
                    C.len_h[s],
                    " rows); the session's room for decoded tokens is "
                    "spent");
    }
  }
  // Host lengths advance as the device's will; the split plan of each layer comes from its
  // largest segment CAPACITY (fixed while the layout is), so it holds across steps and the graph
  // of one step replays for the next.
  plans_.assign(m.n_layers, DecodeLayerPlan{});
  size_t need_scratch = 0, need_z = 0, need_counters = 0;
  for (int il = 0; il < m.n_layers; ++il) {
    LayerCache& C = layers[il];
    DecodeLayerPlan& P = plans_[il];
    for (int s = 0; s < C.segments; ++s) {
      C.len_h[s] = std::min<int64_t>(C.len_h[s] + 1,
                                     C.ring > 0 ? C.ring : std::numeric_limits<int32_t>::max());
      P.plan_len = std::max<int64_t>(P.plan_len, C.cap(s));
    }
    P.score = scoring != nullptr && !m.is_sliding(il);  // sliding: their window
    P.fused = P.score && scoring->fused;
    // DecodeEvictor::accumulate: this step's w = 1 score of every row (the new one included),
    // inside the attention launch when that kernel covers the shape and the batch has segments
    // for every SM, else a second kernel.
    const int min_segments = P.score && scoring->in_attention_min_segments > 0
                                 ? scoring->in_attention_min_segments
                                 : sm_count_;
    P.in_attention =
        P.fused && scoring->in_attention &&
        detail::decode_step_scores_fusable(static_cast<int>(d), static_cast<int>(Hq / Hkv)) &&
        B * Hkv >= min_segments;
    need_scratch = std::max(need_scratch, detail::decode_attention_scratch_bytes(
                                              B, static_cast<int>(Hq), static_cast<int>(Hkv),
                                              static_cast<int>(d), P.plan_len, sm_count_));
    if (P.fused)
      need_z = std::max(need_z, static_cast<size_t>(std::max<int64_t>(C.rows, 1)) * (Hq / Hkv) * 4);
    // The fused step's in-launch merges use B Hkv counters, its q|k|v append one more (also the
    // post-norm fold's) and the q / k head norms Hq + Hkv.
    if (P.in_attention || fused)
      need_counters = (static_cast<size_t>(B) * Hkv + (fused ? 1 + Hq + Hkv : 0)) * 4;
  }
  // The step's attention outputs a and lse in f32 (the decode scores read them).
  const size_t need_a = static_cast<size_t>(B) * Hq * d * 4,
               need_lse = static_cast<size_t>(B) * Hq * 4;
  if (scratch_.bytes() < need_scratch || zbuf_.bytes() < need_z ||
      step_counters_.bytes() < need_counters || attn_f_.bytes() < need_a ||
      lse_.bytes() < need_lse) {
    KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (attn_f_.bytes() < need_a) attn_f_.ensure(need_a, "decode attention outputs f32");
    if (lse_.bytes() < need_lse) lse_.ensure(need_lse, "decode attention lse");
    if (scratch_.bytes() < need_scratch) scratch_.ensure(need_scratch, "decode attention scratch");
    if (zbuf_.bytes() < need_z) zbuf_.ensure(need_z, "decode step logits");
    if (step_counters_.bytes() < need_counters) {
      step_counters_.ensure(need_counters, "decode step-score counters");
      KVEVICT_CUDA_CHECK(cudaMemsetAsync(step_counters_.get(), 0, step_counters_.bytes(), stream_));
    }
  }
  // Positions go up through a pinned staging buffer, outside the graph: a copy from pageable
  // memory would make the host wait for the stream, and the launches of a step would no longer
  // overlap the last one.
  KVEVICT_CUDA_CHECK(cudaEventSynchronize(pos_staged_));  // the previous step's copy has run
  for (int b = 0; b < B; ++b) pos_pinned_[b] = static_cast<int32_t>(positions[b]);
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(pos_.get(), pos_pinned_, B * 4, cudaMemcpyHostToDevice, stream_));
  KVEVICT_CUDA_CHECK(cudaEventRecord(pos_staged_, stream_));
  auto enqueue = [&] { enqueue_decode(tokens_dev, argmax_first, B, layers, scoring, logits); };
  if (!graph_on_) {
    enqueue();
    return;
  }
  // The key: every value a launch of enqueue_decode depends on besides the device memory the
  // kernels read (tokens, positions, segment tables, caches, weights).
  std::vector<int64_t>& key = key_;
  key.clear();
  auto ptr = [&](const void* p) {
    key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)));
  };
  key.push_back(B);
  key.push_back(argmax_first);
  key.push_back(fused);
  key.push_back(static_cast<int64_t>(gemv_route_));
  key.push_back(gemv_preload_);
  key.push_back(gemv_folds_);
  ptr(tokens_dev);
  ptr(logits);
  key.push_back(scoring != nullptr);
  if (scoring != nullptr) {
    key.push_back(static_cast<int64_t>(scoring->score));
    key.push_back(scoring->replace);
    int64_t floor_bits = 0;
    std::memcpy(&floor_bits, &scoring->one_minus_p_floor, sizeof(double));
    key.push_back(floor_bits);
  }
  for (const DeviceBuffer* b : {&x_, &xn_, &qkv_, &qh_, &attn_f_, &lse_, &attn_, &o_f_, &gu_,
                                &hbuf_, &pos_, &scratch_, &zbuf_, &step_counters_})
    ptr(b->get());
  key.push_back(static_cast<int64_t>(scratch_.bytes()));
  for (int il = 0; il < m.n_layers; ++il) {
    const LayerCache& C = layers[il];
    const DecodeLayerPlan& P = plans_[il];
    for (const DeviceBuffer* b : {&C.k, &C.v, &C.pos, &C.acc, &C.off, &C.len}) ptr(b->get());
    key.push_back(C.ring);
    key.push_back(P.plan_len);
    key.push_back(P.score | P.fused << 1 | P.in_attention << 2);
  }
  graph_.run(key, stream_, enqueue);
}

void GpuForward::enqueue_decode(int32_t* tokens_dev, bool argmax_first, int B,
                                std::vector<LayerCache>& layers, const StepScoring* scoring,
                                float* logits) {
  const ModelConfig& m = c();
  const int64_t D = m.n_embd, d = m.head_dim, Hq = m.n_heads, Hkv = m.n_kv_heads;
  const int64_t W = (Hq + 2 * Hkv) * d;
  fused_now_ = step_is_fused(fused_mode_, B);  // read by try_gemv until the step is enqueued
  pending_post_ = nullptr;                     // (a step that threw midway may have left one)
  if (argmax_first)  // the greedy token of every row's current logits is this step's input
    KVEVICT_CUDA_CHECK(detail::launch_argmax(logits, B, m.vocab_size, tokens_dev, stream_));
  KVEVICT_CUDA_CHECK(detail::launch_embed(w_.token_embd, tokens_dev, B, static_cast<int>(D),
                                          embed_mul(), x_.as<float>(), stream_));
  for (int il = 0; il < m.n_layers; ++il) {
    const GpuModel::Impl::Layer& L = w_.layers[il];
    LayerCache& C = layers[il];
    const DecodeLayerPlan& P = plans_[il];
    detail::RopeAppendArgs ra =
        rope_args(w_, L, C, il, B, qkv_.get(), pos_.as<int32_t>(), qh_.get());
    ra.head_major = false;
    ra.decode = true;
    ra.ring = C.ring;
    // The fused step: norm, q|k|v, RoPE and the append in one launch where it covers the layer
    // (gemma3's per-head q / k norms at batch 1 too, and the previous down projection's post-norm
    // add); the arrival counter follows the attention's B Hkv, the q / k heads' Hq + Hkv after it.
    detail::GemvArgs qa =
        normed_gemv(x_.as<float>(), L.attn_norm, L.wqkv, W, B, detail::GemvOut::kRopeAppend);
    qa.rope = ra;
    if (fused_now_) {
      qa.arrivals = step_counters_.as<uint32_t>() + static_cast<int64_t>(B) * Hkv;
      if (ra.q_norm != nullptr && gemv_folds_) {
        qa.head_arrivals = qa.arrivals + 1;
        qa.y = qkv_.get();  // the projection's values, which each head's last warp reads back
      }
    }
    if (!try_normed_gemv(qa)) {
      norm_and_project(L.attn_norm, L.wqkv, W, qkv_.get(), B);
      KVEVICT_CUDA_CHECK(detail::launch_rope_append(ra, stream_));
    }
    detail::DecodeAttentionArgs da;
    da.q = qh_.as<bf16>();
    da.k = C.k.as<bf16>();
    da.v = C.v.as<bf16>();
    da.seg_off = C.off.as<int64_t>();
    da.seg_len = C.len.as<int32_t>();
    da.B = B;
    da.Hq = static_cast<int>(Hq);
    da.Hkv = static_cast<int>(Hkv);
    da.d = static_cast<int>(d);
    da.max_len = P.plan_len;
    da.scale = m.logit_scale();
    if (P.fused) da.z_out = zbuf_.as<float>();
    // The fused step scores count their own arrivals; otherwise the fused path merges in-launch.
    if (fused_now_ && !P.in_attention) da.merge_counters = step_counters_.as<uint32_t>();
    da.pdl = fused_now_;
    const DecodeScore kind = P.score ? scoring->score : DecodeScore::kAttentionSum;
    const bool replace = P.score && scoring->replace;
    detail::DecodeStepScoreArgs fs;
    if (P.in_attention) {
      fs.acc = C.acc.as<float>();
      fs.counters = step_counters_.as<uint32_t>();
      fs.kind = kind;
      fs.replace = replace;
      fs.one_minus_p_floor = static_cast<float>(scoring->one_minus_p_floor);
    }
    // The separate score kernel reads a (f32) and lse from global memory; the fused one keeps
    // them in shared memory.
    const bool export_a = P.score && !P.in_attention;
    KVEVICT_CUDA_CHECK(detail::launch_decode_attention(
        da, attn_.as<bf16>(), export_a ? lse_.as<float>() : nullptr,
        export_a ? attn_f_.as<float>() : nullptr, scratch_.get(), scratch_.bytes(), sm_count_,
        stream_, P.in_attention ? &fs : nullptr));
    if (export_a) {
      detail::DecodeScoreArgs sa;
      sa.q = qh_.as<bf16>();
      sa.out = attn_f_.as<float>();
      sa.lse = lse_.as<float>();
      sa.k = C.k.as<bf16>();
      sa.v = C.v.as<bf16>();
      sa.seg_off = C.off.as<int64_t>();
      sa.seg_len = C.len.as<int32_t>();
      sa.acc = C.acc.as<float>();
      sa.z = P.fused ? zbuf_.as<float>() : nullptr;
      sa.B = B;
      sa.Hq = static_cast<int>(Hq);
      sa.Hkv = static_cast<int>(Hkv);
      sa.d = static_cast<int>(d);
      sa.scale = m.logit_scale();
      sa.one_minus_p_floor = static_cast<float>(scoring->one_minus_p_floor);
      sa.kind = kind;
      sa.replace = replace;
      KVEVICT_CUDA_CHECK(detail::launch_decode_scores(sa, P.plan_len, stream_));
    }
    project_into_residual(attn_.as<bf16>(), B, L.wo, Hq * d, L.post_attn_norm);
    ffn_and_residual(L, B);
  }
  final_logits(B, 1, logits);  // (no post-norm add left pending)
  fused_now_ = false;          // prefills are never fused
}

}  // namespace kvevict::gpu
