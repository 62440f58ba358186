// Tiny random-weight GGUF models of each supported architecture, written with the test GGUF
// writer, and an independent double-precision forward pass over the same raw weights: a naive
// full recompute per call (no cache, materialized causal attention), used as the reference for
// the runtime's cached, chunked, evicted forward.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "support/testing.h"

namespace kvevict::testing {

struct TinySpec {
  std::string arch = "llama";  // llama | qwen2 | gemma3
  int D = 24, layers = 3, Hq = 4, Hkv = 2, d = 8, F = 20, V = 50, ctx = 64;
  int sliding_window = 4;  // gemma3 only
  int pattern = 2;         // gemma3: layer l slides iff l % pattern < pattern - 1
  bool tied = true;
  uint64_t seed = 7;
  std::string skip_tensor;  // leave this tensor out of the file (error tests)
};

struct TinyModel {
  TinySpec spec;
  std::map<std::string, std::vector<float>> w;  // raw weights by GGUF name, row-major
  std::unique_ptr<TempFile> file;
  bool sliding(int l) const {
    return spec.arch == "gemma3" && spec.sliding_window > 0 && l % spec.pattern < spec.pattern - 1;
  }
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline TinyModel make_tiny_model(const TinySpec& s, const std::string& stem) {
  TinyModel m;
  m.spec = s;
  GgufWriter g;
  const std::string a = s.arch;
  g.add_string("general.architecture", a);
  g.add_string("general.name", "tiny-" + a);
  g.add_u32(a + ".context_length", s.ctx);
  g.add_u32(a + ".embedding_length", s.D);
  g.add_u32(a + ".block_count", s.layers);
  g.add_u32(a + ".feed_forward_length", s.F);
  g.add_u32(a + ".attention.head_count", s.Hq);
  g.add_u32(a + ".attention.head_count_kv", s.Hkv);
  g.add_u32(a + ".attention.key_length", s.d);
  g.add_u32(a + ".attention.value_length", s.d);
  g.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.add_f32(a + ".rope.freq_base", a == "gemma3" ? 1000000.0f : 10000.0f);
  if (a == "gemma3") {
    g.add_u32(a + ".attention.sliding_window", s.sliding_window);
    g.add_u32(a + ".attention.sliding_window_pattern", s.pattern);
  }
  uint64_t seed = s.seed;
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, float stddev, float mean) {
    std::vector<float> v = normal_floats(static_cast<size_t>(rows * cols), ++seed, stddev);
    for (float& x : v) x += mean;
    if (name == s.skip_tensor) return;
    if (cols == 1) {
      g.add_tensor(name, {static_cast<uint64_t>(rows)}, 0, f32_bytes(v));
    } else {
      g.add_tensor(name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, 0,
                   f32_bytes(v));
    }
    m.w[name] = std::move(v);
  };
  add("token_embd.weight", s.V, s.D, 1.0f, 0.0f);
  add("output_norm.weight", s.D, 1, 0.1f, 1.0f);
  if (!s.tied) add("output.weight", s.V, s.D, 0.3f, 0.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", s.D, 1, 0.1f, 1.0f);
    add(b + "attn_q.weight", s.Hq * s.d, s.D, 0.3f, 0.0f);
    add(b + "attn_k.weight", s.Hkv * s.d, s.D, 0.3f, 0.0f);
    add(b + "attn_v.weight", s.Hkv * s.d, s.D, 0.3f, 0.0f);
    add(b + "attn_output.weight", s.D, s.Hq * s.d, 0.3f, 0.0f);
    if (a == "qwen2") {
      add(b + "attn_q.bias", s.Hq * s.d, 1, 0.3f, 0.0f);
      add(b + "attn_k.bias", s.Hkv * s.d, 1, 0.3f, 0.0f);
      add(b + "attn_v.bias", s.Hkv * s.d, 1, 0.3f, 0.0f);
    }
    if (a == "gemma3") {
      add(b + "attn_q_norm.weight", s.d, 1, 0.1f, 1.0f);
      add(b + "attn_k_norm.weight", s.d, 1, 0.1f, 1.0f);
      add(b + "post_attention_norm.weight", s.D, 1, 0.1f, 1.0f);
      add(b + "post_ffw_norm.weight", s.D, 1, 0.1f, 1.0f);
    }
    add(b + "ffn_norm.weight", s.D, 1, 0.1f, 1.0f);
    add(b + "ffn_gate.weight", s.F, s.D, 0.3f, 0.0f);
    add(b + "ffn_up.weight", s.F, s.D, 0.3f, 0.0f);
    add(b + "ffn_down.weight", s.D, s.F, 0.3f, 0.0f);
  }
  m.file = std::make_unique<TempFile>(stem);
  m.file->write(g.build());
  return m;
}

// Extra visibility rule for the reference: visible(layer, kv_head, q_pos, k_pos).
using Visibility = std::function<bool(int, int, int, int)>;

// Logits [V] of the last token, computed from scratch in double.
inline std::vector<double> tiny_reference_logits(const TinyModel& m,
                                                 const std::vector<int32_t>& tokens,
                                                 const Visibility& visible = nullptr) {
  const TinySpec& s = m.spec;
  const int n = static_cast<int>(tokens.size());
  const bool gemma = s.arch == "gemma3", qwen = s.arch == "qwen2";
  const int G = s.Hq / s.Hkv;
  auto W = [&](const std::string& name) -> const std::vector<float>& { return m.w.at(name); };
  auto matvec = [](const std::vector<float>& w, const std::vector<double>& x, int rows) {
    const int cols = static_cast<int>(x.size());
    std::vector<double> y(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) y[r] += static_cast<double>(w[r * cols + c]) * x[c];
    return y;
  };
  auto rms = [](const std::vector<double>& x, const float* w, int off, int len) {
    std::vector<double> y(len);
    double ss = 0;
    for (int i = 0; i < len; ++i) ss += x[off + i] * x[off + i];
    const double r = 1.0 / std::sqrt(ss / len + 1e-5);
    for (int i = 0; i < len; ++i) y[i] = x[off + i] * r * w[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int heads, int pos, double base) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < s.d / 2; ++i) {
        const double th = pos * std::pow(base, -2.0 * i / s.d);
        // llama GGUF: adjacent pairs; qwen2/gemma3: halves.
        const int a = s.arch == "llama" ? h * s.d + 2 * i : h * s.d + i;
        const int b = s.arch == "llama" ? a + 1 : a + s.d / 2;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * std::cos(th) - x1 * std::sin(th);
        v[b] = x0 * std::sin(th) + x1 * std::cos(th);
      }
    }
  };
  std::vector<std::vector<double>> x(n, std::vector<double>(s.D));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < s.D; ++i)
      x[t][i] =
          W("token_embd.weight")[tokens[t] * s.D + i] * (gemma ? std::sqrt(double(s.D)) : 1.0);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool slide = m.sliding(l);
    const double base = gemma ? (slide ? 10000.0 : 1000000.0) : 10000.0;
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      const auto h = rms(x[t], W(b + "attn_norm.weight").data(), 0, s.D);
      q[t] = matvec(W(b + "attn_q.weight"), h, s.Hq * s.d);
      k[t] = matvec(W(b + "attn_k.weight"), h, s.Hkv * s.d);
      v[t] = matvec(W(b + "attn_v.weight"), h, s.Hkv * s.d);
      if (qwen) {
        for (int i = 0; i < s.Hq * s.d; ++i) q[t][i] += W(b + "attn_q.bias")[i];
        for (int i = 0; i < s.Hkv * s.d; ++i) k[t][i] += W(b + "attn_k.bias")[i];
        for (int i = 0; i < s.Hkv * s.d; ++i) v[t][i] += W(b + "attn_v.bias")[i];
      }
      if (gemma) {
        for (int hh = 0; hh < s.Hq; ++hh) {
          const auto y = rms(q[t], W(b + "attn_q_norm.weight").data(), hh * s.d, s.d);
          std::copy(y.begin(), y.end(), q[t].begin() + hh * s.d);
        }
        for (int hh = 0; hh < s.Hkv; ++hh) {
          const auto y = rms(k[t], W(b + "attn_k_norm.weight").data(), hh * s.d, s.d);
          std::copy(y.begin(), y.end(), k[t].begin() + hh * s.d);
        }
      }
      rope(q[t], s.Hq, t, base);
      rope(k[t], s.Hkv, t, base);
    }
    const double scale = 1.0 / std::sqrt(double(s.d));
    for (int t = 0; t < n; ++t) {
      std::vector<double> att(s.Hq * s.d, 0.0);
      for (int hh = 0; hh < s.Hq; ++hh) {
        const int g = hh / G;
        std::vector<double> z(t + 1, -INFINITY);
        double mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          if (slide && t - j >= s.sliding_window) continue;
          if (visible && !visible(l, g, t, j)) continue;
          double dot = 0;
          for (int i = 0; i < s.d; ++i) dot += q[t][hh * s.d + i] * k[j][g * s.d + i];
          z[j] = dot * scale;
          mx = std::max(mx, z[j]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += std::isinf(z[j]) ? 0.0 : std::exp(z[j] - mx);
        for (int j = 0; j <= t; ++j) {
          if (std::isinf(z[j])) continue;
          const double p = std::exp(z[j] - mx) / sum;
          for (int i = 0; i < s.d; ++i) att[hh * s.d + i] += p * v[j][g * s.d + i];
        }
      }
      auto o = matvec(W(b + "attn_output.weight"), att, s.D);
      if (gemma) o = rms(o, W(b + "post_attention_norm.weight").data(), 0, s.D);
      for (int i = 0; i < s.D; ++i) x[t][i] += o[i];
      const auto h = rms(x[t], W(b + "ffn_norm.weight").data(), 0, s.D);
      auto gt = matvec(W(b + "ffn_gate.weight"), h, s.F);
      const auto up = matvec(W(b + "ffn_up.weight"), h, s.F);
      for (int i = 0; i < s.F; ++i) {
        const double a = gt[i];
        const double act =
            gemma ? 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)))
                  : a / (1 + std::exp(-a));
        gt[i] = act * up[i];
      }
      auto y = matvec(W(b + "ffn_down.weight"), gt, s.D);
      if (gemma) y = rms(y, W(b + "post_ffw_norm.weight").data(), 0, s.D);
      for (int i = 0; i < s.D; ++i) x[t][i] += y[i];
    }
  }
  const auto h = rms(x[n - 1], W("output_norm.weight").data(), 0, s.D);
  return matvec(W(s.tied ? "token_embd.weight" : "output.weight"), h, s.V);
}

// n pseudo-random token ids in [0, V) from a seeded LCG (the same on every platform).
inline std::vector<int32_t> tokens_for(int n, int V, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t[i] = static_cast<int32_t>((s >> 33) % V);
  }
  return t;
}

}  // namespace kvevict::testing
