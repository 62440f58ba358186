#include "model/cache_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/parallel.h"
#include "model/ops.h"

namespace kvevict::model_ops {

namespace {

// A [n, d] f32 view of rows [off, off + n) of k or v; converts f16 into `buf`.
const float* rows_f32(const void* base, DType dt, int64_t off, int64_t n, int d,
                      std::vector<float>& buf) {
  if (dt == DType::kF32) return static_cast<const float*>(base) + off * d;
  buf.resize(static_cast<size_t>(n) * d);
  const uint16_t* src = static_cast<const uint16_t*>(base) + off * d;
  if (dt == DType::kF16) {
    for (int64_t i = 0; i < n * d; ++i) buf[i] = half_to_float(src[i]);
  } else {
    for (int64_t i = 0; i < n * d; ++i) buf[i] = bf16_to_float(src[i]);
  }
  return buf.data();
}

}  // namespace

void cache_attention(const float* q, const int32_t* q_pos, int64_t T, int num_q_heads,
                     const KVLayerView& cache, float scale, int sliding_window, float* out,
                     float* lse) {
  const int Hkv = cache.num_kv_heads, d = cache.head_dim;
  KVEVICT_CHECK(Hkv > 0 && num_q_heads % Hkv == 0, "cache attention: Hq = ", num_q_heads,
                " is not a multiple of the cache's Hkv = ", Hkv);
  KVEVICT_CHECK(cache.dtype == DType::kF32 || cache.dtype == DType::kF16 ||
                    cache.dtype == DType::kBF16,
                "cache attention: cache dtype ", dtype_name(cache.dtype),
                " is not supported; expected f32, f16 or bf16");
  const int G = num_q_heads / Hkv;
  constexpr int64_t kTile = 16;
  const int64_t tiles = (T + kTile - 1) / kTile;
  parallel_for(int64_t{num_q_heads} * tiles, [&](int64_t task) {
    const int h = static_cast<int>(task / tiles);
    const int64_t t0 = (task % tiles) * kTile, t1 = std::min(T, t0 + kTile);
    const int g = h / G;
    const int64_t off = cache.offsets[g], n = cache.lens[g];
    std::vector<float> kbuf, vbuf, s(static_cast<size_t>(n)), acc(d);
    const float* K = rows_f32(cache.k, cache.dtype, off, n, d, kbuf);
    const float* V = rows_f32(cache.v, cache.dtype, off, n, d, vbuf);
    const int32_t* P = cache.pos + off;
    for (int64_t t = t0; t < t1; ++t) {
      const float* qv = q + (static_cast<int64_t>(h) * T + t) * d;
      const int64_t qp = q_pos[t];
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        const bool visible = P[j] <= qp && (sliding_window <= 0 || qp - P[j] < sliding_window);
        s[j] = visible ? dot(qv, K + j * d, d) * scale : -std::numeric_limits<float>::infinity();
        mx = std::max(mx, s[j]);
      }
      float* o = out + (t * num_q_heads + h) * d;
      if (!(mx > -std::numeric_limits<float>::infinity())) {
        // No visible key (cannot happen for a query that sees itself); output zeros.
        for (int i = 0; i < d; ++i) o[i] = 0.0f;
        if (lse != nullptr) lse[h * T + t] = -std::numeric_limits<float>::infinity();
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (s[j] == -std::numeric_limits<float>::infinity()) continue;
        const float p = std::exp(s[j] - mx);
        sum += p;
        const float* vr = V + j * d;
        for (int i = 0; i < d; ++i) acc[i] += p * vr[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int i = 0; i < d; ++i) o[i] = acc[i] * inv;
      if (lse != nullptr) lse[h * T + t] = mx + static_cast<float>(std::log(sum));
    }
  });
}

}  // namespace kvevict::model_ops
