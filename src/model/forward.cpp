#include "model/forward.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "kvevict/attention.h"
#include "kvevict/error.h"
#include "model/ops.h"

namespace kvevict::model_ops {

void cache_append_rows(KVLayerView view, const float* k, const float* v, const int32_t* pos,
                       int64_t T) {
  const int Hkv = view.num_kv_heads, d = view.head_dim;
  for (int g = 0; g < Hkv; ++g) {
    const int64_t start = view.offsets[g] + view.lens[g];
    KVEVICT_CHECK(start + T <= view.offsets[g + 1], "cache append: head ", g, " holds ",
                  view.lens[g], " rows of ", view.offsets[g + 1] - view.offsets[g],
                  "; no room for ", T, " more");
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = start + t;
      const float* ks = k + (t * Hkv + g) * d;
      const float* vs = v + (t * Hkv + g) * d;
      if (view.dtype == DType::kF32) {
        std::memcpy(static_cast<float*>(view.k) + row * d, ks, d * sizeof(float));
        std::memcpy(static_cast<float*>(view.v) + row * d, vs, d * sizeof(float));
      } else if (view.dtype == DType::kF16) {
        float_to_half_n(ks, static_cast<uint16_t*>(view.k) + row * d, d);
        float_to_half_n(vs, static_cast<uint16_t*>(view.v) + row * d, d);
      } else {
        KVEVICT_CHECK(view.dtype == DType::kBF16, "cache append: dtype ", dtype_name(view.dtype),
                      " is not supported; expected f32, f16 or bf16");
        float_to_bf16_n(ks, static_cast<uint16_t*>(view.k) + row * d, d);
        float_to_bf16_n(vs, static_cast<uint16_t*>(view.v) + row * d, d);
      }
      view.pos[row] = pos[t];
      if (view.score_acc != nullptr) view.score_acc[row] = 0.0f;
    }
    view.lens[g] += T;
  }
}

void forward_chunk(const Model& model, const int32_t* tokens, int64_t T, int64_t pos0,
                   std::vector<HostKVCache>& caches, const QueryCapture* capture, float* logits,
                   const AttentionHook* hook) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const int64_t D = c.n_embd, F = c.ffn_dim;
  const int Hq = c.n_heads, Hkv = c.n_kv_heads, d = c.head_dim;
  KVEVICT_CHECK(static_cast<int>(caches.size()) == c.n_layers, "forward: ", caches.size(),
                " layer caches; expected ", c.n_layers);

  std::vector<float> x(T * D), xn(T * D), q(T * Hq * d), qh(T * Hq * d), k(T * Hkv * d),
      v(T * Hkv * d), attn(T * Hq * d), attn_heads(T * Hq * d), o(T * D), gate(T * F), up(T * F),
      lse(hook != nullptr ? T * Hq : 0);
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(pos0 + t);

  const float embed_mul = c.embed_scale ? std::sqrt(static_cast<float>(D)) : 1.0f;
  for (int64_t t = 0; t < T; ++t) {
    KVEVICT_CHECK(tokens[t] >= 0 && tokens[t] < c.vocab_size, "token id ", tokens[t], " at index ",
                  t, " is out of range; expected 0 .. ", c.vocab_size - 1);
    float* xt = x.data() + t * D;
    w.token_embd.row_f32(tokens[t], xt);
    for (int64_t i = 0; i < D; ++i) xt[i] *= embed_mul;
  }
  const float* freq_div = w.rope_freqs.nbytes() ? w.rope_freqs.ptr<float>() : nullptr;
  // One cos / sin table per distinct rope (sliding and global layers differ on gemma3).
  const RopeTable rope_global(pos.data(), T, d, c.rope_base, c.rope_linear_scale, freq_div);
  std::unique_ptr<RopeTable> rope_sliding;
  for (int il = 0; il < c.n_layers && !rope_sliding; ++il)
    if (c.is_sliding(il))
      rope_sliding =
          std::make_unique<RopeTable>(pos.data(), T, d, c.layer_rope_base(il), 1.0f, freq_div);

  for (int il = 0; il < c.n_layers; ++il) {
    const LayerWeights& L = w.layers[il];
    rms_norm(x.data(), T, D, L.attn_norm.ptr<float>(), c.rms_eps, xn.data());
    const Projection qkv[3] = {{&L.wq, &L.bq, q.data(), Hq * d},
                               {&L.wk, &L.bk, k.data(), Hkv * d},
                               {&L.wv, &L.bv, v.data(), Hkv * d}};
    project(xn.data(), T, qkv, 3);
    if (c.qk_norm) {
      rms_norm(q.data(), T * Hq, d, L.q_norm.ptr<float>(), c.rms_eps, q.data());
      rms_norm(k.data(), T * Hkv, d, L.k_norm.ptr<float>(), c.rms_eps, k.data());
    }
    const bool sliding = c.is_sliding(il);
    const RopeTable& rt = sliding ? *rope_sliding : rope_global;
    rope(q.data(), T, Hq, d, rt, c.rope_style);
    rope(k.data(), T, Hkv, d, rt, c.rope_style);

    // [T, Hq, d] -> [Hq, T, d]: the per-head layout of attention and of the score problem.
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < Hq; ++h)
        std::memcpy(&qh[(h * T + t) * d], &q[(t * Hq + h) * d], d * sizeof(float));
    if (capture != nullptr && capture->m > 0) {
      float* dst = (*capture->queries)[il].ptr<float>();
      for (int64_t t = 0; t < T; ++t) {
        const int64_t r = pos0 + t - capture->from_pos;
        if (r < 0 || r >= capture->m) continue;
        for (int h = 0; h < Hq; ++h)
          std::memcpy(dst + (h * capture->m + r) * d, &qh[(h * T + t) * d], d * sizeof(float));
      }
    }

    KVLayerView view = caches[il].view();
    cache_append_rows(view, k.data(), v.data(), pos.data(), T);
    // kvevict's cpu::attention: causal by original position, so it serves prefill chunks,
    // decode and questions appended after eviction alike.
    AttentionProblem ap;
    ap.q = TensorView(qh.data(), DType::kF32, {Hq, T, d});
    ap.q_pos = pos.data();
    ap.cache = view;
    ap.scale = c.logit_scale();
    ap.sliding_window = sliding ? c.sliding_window : 0;
    AttentionOutput ao;
    ao.out = TensorView(attn_heads.data(), DType::kF32, {Hq, T, d});
    if (hook != nullptr) ao.lse = TensorView(lse.data(), DType::kF32, {Hq, T});
    cpu::attention(ap, ao);
    // [Hq, T, d] -> [T, Hq, d]: the output projection reads token rows.
    for (int h = 0; h < Hq; ++h)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(&attn[(t * Hq + h) * d], &attn_heads[(h * T + t) * d], d * sizeof(float));
    if (hook != nullptr) (*hook)(il, view, qh.data(), attn.data(), lse.data());

    const Projection out_proj{&L.wo, nullptr, o.data(), D};
    project(attn.data(), T, &out_proj, 1);
    if (c.post_norms) rms_norm(o.data(), T, D, L.post_attn_norm.ptr<float>(), c.rms_eps, o.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += o[i];

    rms_norm(x.data(), T, D, L.ffn_norm.ptr<float>(), c.rms_eps, xn.data());
    const Projection gate_up[2] = {{&L.w_gate, nullptr, gate.data(), F},
                                   {&L.w_up, nullptr, up.data(), F}};
    project(xn.data(), T, gate_up, 2);
    gated_activation(gate.data(), up.data(), T * F, c.activation);
    const Projection down{&L.w_down, nullptr, o.data(), D};
    project(gate.data(), T, &down, 1);
    if (c.post_norms) rms_norm(o.data(), T, D, L.post_ffn_norm.ptr<float>(), c.rms_eps, o.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += o[i];
  }

  if (logits != nullptr) {
    rms_norm(x.data() + (T - 1) * D, 1, D, w.output_norm.ptr<float>(), c.rms_eps, xn.data());
    const Projection head{&w.output_matrix(), nullptr, logits, c.vocab_size};
    project(xn.data(), 1, &head, 1);
    if (c.final_logit_softcap > 0) {
      const float cap = c.final_logit_softcap;
      for (int64_t i = 0; i < c.vocab_size; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    }
  }
}

}  // namespace kvevict::model_ops
