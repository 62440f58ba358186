// Attention in double, one query at a time with two passes: the test oracle.
#include <cmath>
#include <limits>

#include "core/nan_max.h"
#include "kvevict/attention.h"
#include "kvevict/error.h"

namespace kvevict::ref {

void attention(const AttentionProblem& pb, std::vector<double>& out, std::vector<double>* lse) {
  pb.validate();
  KVEVICT_CHECK(pb.cache.device == Device::kCpu, "ref::attention needs a host cache");
  const KVLayerView& c = pb.cache;
  const int hq = pb.num_q_heads(), d = c.head_dim;
  const int64_t m = pb.num_queries();
  const int group = hq / c.num_kv_heads;
  const double scale = pb.logit_scale();
  out.assign(static_cast<size_t>(hq) * m * d, 0.0);
  if (lse) lse->assign(static_cast<size_t>(hq) * m, -std::numeric_limits<double>::infinity());
  for (int h = 0; h < hq; ++h) {
    const int kvh = h / group;
    const TensorView kh = c.head_k(kvh), vh = c.head_v(kvh);
    const int64_t len = c.lens[kvh];
    const int32_t* pos = c.pos + c.offsets[kvh];
    for (int64_t t = 0; t < m; ++t) {
      const int64_t qp = pb.q_pos[t];
      std::vector<double> z(len);
      std::vector<char> vis(len, 0);
      double zmax = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        vis[j] = pos[j] <= qp && (pb.sliding_window == 0 || qp - pos[j] < pb.sliding_window);
        if (!vis[j]) continue;
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += pb.q.load(h, t, i) * kh.load(j, i);
        z[j] = dot * scale;
        if (pb.softcap > 0) z[j] = pb.softcap * std::tanh(z[j] / pb.softcap);
        // nan_max: a NaN logit, or a +inf one (exp(inf - inf)), makes the row NaN, as in every
        // fast path.
        zmax = nan_max(zmax, z[j]);
      }
      if (zmax == -std::numeric_limits<double>::infinity()) continue;  // sees no key: zeros, -inf
      double sum = 0;
      double* o = out.data() + (static_cast<size_t>(h) * m + t) * d;
      for (int64_t j = 0; j < len; ++j) {
        if (!vis[j]) continue;
        const double e = std::exp(z[j] - zmax);
        sum += e;
        for (int i = 0; i < d; ++i) o[i] += e * vh.load(j, i);
      }
      for (int i = 0; i < d; ++i) o[i] /= sum;  // sum >= 1: the max's own term
      if (lse) (*lse)[static_cast<size_t>(h) * m + t] = zmax + std::log(sum);
    }
  }
}

}  // namespace kvevict::ref
