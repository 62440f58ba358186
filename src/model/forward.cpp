#include "model/forward.h"

#include <cmath>
#include <cstring>

#include "kvevict/error.h"
#include "kvevict/attention.h"
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
        uint16_t* kd = static_cast<uint16_t*>(view.k) + row * d;
        uint16_t* vd = static_cast<uint16_t*>(view.v) + row * d;
        for (int i = 0; i < d; ++i) {
          kd[i] = float_to_half(ks[i]);
          vd[i] = float_to_half(vs[i]);
        }
      } else {
        KVEVICT_CHECK(view.dtype == DType::kBF16, "cache append: dtype ", dtype_name(view.dtype),
                      " is not supported; expected f32, f16 or bf16");
        uint16_t* kd = static_cast<uint16_t*>(view.k) + row * d;
        uint16_t* vd = static_cast<uint16_t*>(view.v) + row * d;
        for (int i = 0; i < d; ++i) {
          kd[i] = float_to_bf16(ks[i]);
          vd[i] = float_to_bf16(vs[i]);
        }
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

  const float* E = w.token_embd.ptr<float>();
  const float embed_mul = c.embed_scale ? std::sqrt(static_cast<float>(D)) : 1.0f;
  for (int64_t t = 0; t < T; ++t) {
    KVEVICT_CHECK(tokens[t] >= 0 && tokens[t] < c.vocab_size, "token id ", tokens[t],
                  " at index ", t, " is out of range; expected 0 .. ", c.vocab_size - 1);
    const float* e = E + static_cast<int64_t>(tokens[t]) * D;
    for (int64_t i = 0; i < D; ++i) x[t * D + i] = e[i] * embed_mul;
  }
  const float* freq_div = w.rope_freqs.nbytes() ? w.rope_freqs.ptr<float>() : nullptr;

  for (int il = 0; il < c.n_layers; ++il) {
    const LayerWeights& L = w.layers[il];
    rms_norm(x.data(), T, D, L.attn_norm.ptr<float>(), c.rms_eps, xn.data());
    linear(xn.data(), T, L.wq, &L.bq, q.data());
    linear(xn.data(), T, L.wk, &L.bk, k.data());
    linear(xn.data(), T, L.wv, &L.bv, v.data());
    if (c.qk_norm) {
      rms_norm(q.data(), T * Hq, d, L.q_norm.ptr<float>(), c.rms_eps, q.data());
      rms_norm(k.data(), T * Hkv, d, L.k_norm.ptr<float>(), c.rms_eps, k.data());
    }
    const bool sliding = c.is_sliding(il);
    const float base = c.layer_rope_base(il);
    const float lin = sliding ? 1.0f : c.rope_linear_scale;
    rope(q.data(), T, Hq, d, pos.data(), base, lin, freq_div, c.rope_style);
    rope(k.data(), T, Hkv, d, pos.data(), base, lin, freq_div, c.rope_style);

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

    linear(attn.data(), T, L.wo, nullptr, o.data());
    if (c.post_norms) rms_norm(o.data(), T, D, L.post_attn_norm.ptr<float>(), c.rms_eps, o.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += o[i];

    rms_norm(x.data(), T, D, L.ffn_norm.ptr<float>(), c.rms_eps, xn.data());
    linear(xn.data(), T, L.w_gate, nullptr, gate.data());
    linear(xn.data(), T, L.w_up, nullptr, up.data());
    gated_activation(gate.data(), up.data(), T * F, c.activation);
    linear(gate.data(), T, L.w_down, nullptr, o.data());
    if (c.post_norms) rms_norm(o.data(), T, D, L.post_ffn_norm.ptr<float>(), c.rms_eps, o.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += o[i];
  }

  if (logits != nullptr) {
    rms_norm(x.data() + (T - 1) * D, 1, D, w.output_norm.ptr<float>(), c.rms_eps, xn.data());
    linear(xn.data(), 1, w.output_matrix(), nullptr, logits);
    if (c.final_logit_softcap > 0) {
      const float cap = c.final_logit_softcap;
      for (int64_t i = 0; i < c.vocab_size; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    }
  }
}

}  // namespace kvevict::model_ops
