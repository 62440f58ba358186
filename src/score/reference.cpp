// The double-precision ground truth of SPEC section 2. Written for clarity: per query it
// materializes the logits and probabilities over the visible keys, then applies the shared terms of
// score_terms.h. Every fast path is tested against this file.
//
// Accuracy argument (issue 13). For every key but the query's top key (largest logit, lowest index
// on ties) p <= 1/2, and the terms take ||a - v||^2 and <v, v - a> from explicit differences in
// double: relative error ~1e-16 of ||a|| + ||v|| at most doubled by 1 / (1 - p). The top key takes
// the leave-one-out form (score_terms.h top_term): a_{-top} is a softmax over the OTHER keys with
// their own max (so it does not underflow however far the top dominates: a 1000-nat gap or
// q = 1e30), and 1 - p = rho / (1 + rho) with rho = sum_{i != top} exp(z_i - z_top), so no
// quantity cancels as p -> 1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvevict/error.h"
#include "kvevict/score.h"
#include "score/pooling.h"
#include "score/score_terms.h"

namespace kvevict::ref {
namespace {

// Copies head `head` of a [H, n, d] tensor (any float dtype, any strides) into a dense double
// array [n, d].
std::vector<double> load_head(const TensorView& t, int64_t head) {
  const int64_t n = t.shape[1], d = t.shape[2];
  std::vector<double> out(static_cast<size_t>(n * d));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < d; ++c) out[j * d + c] = t.load(head, j, c);
  return out;
}

// Softmax attention of one query over keys 0..visible-1, with the leave-one-out quantities of its
// top key.
struct QueryAttention {
  std::vector<double> z;  // [visible] scaled logits
  std::vector<double> p;  // [visible] probabilities
  std::vector<double> a;  // [d] output sum_j p_j v_j
  double lse = 0;
  int64_t top = 0;  // the key with the largest logit (the first of equal ones)
  terms::TopKey<double> top_key;
};

// Everything is taken relative to the top key (its logit zmax, rho = sum_{j != top}
// exp(z_j - zmax)): p_top = 1 / (1 + rho), p_j = exp(z_j - zmax) p_top, lse = zmax + log1p(rho),
// a = (v_top + rho a_{-top}) p_top, which stays exact where lse itself would round to zmax
// (|z| ~ 1e30).
void attend(const double* q, const double* keys, const double* values, int64_t visible, int64_t d,
            double scale, QueryAttention& out) {
  out.z.assign(static_cast<size_t>(visible), 0.0);
  out.p.assign(static_cast<size_t>(visible), 0.0);
  out.a.assign(static_cast<size_t>(d), 0.0);
  double zmax = -std::numeric_limits<double>::infinity();
  out.top = 0;
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += q[c] * keys[j * d + c];
    out.z[j] = dot * scale;
    if (out.z[j] > zmax) {
      zmax = out.z[j];
      out.top = j;
    }
  }
  // a_{-top}: the softmax over the other keys, shifted by their own max.
  const int64_t top = out.top;
  double m2 = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < visible; ++j)
    if (j != top) m2 = std::max(m2, out.z[j]);
  std::vector<double> a_oth(static_cast<size_t>(d), 0.0);
  double l_oth = 0;
  for (int64_t j = 0; j < visible && m2 > -std::numeric_limits<double>::infinity(); ++j) {
    if (j == top) continue;
    const double w = std::exp(out.z[j] - m2);
    l_oth += w;
    for (int64_t c = 0; c < d; ++c) a_oth[c] += w * values[j * d + c];
  }
  if (l_oth > 0)
    for (int64_t c = 0; c < d; ++c) a_oth[c] /= l_oth;
  const double rho = l_oth > 0 ? l_oth * std::exp(m2 - zmax) : 0.0;
  terms::TopKey<double>& tk = out.top_key;
  terms::top_probs(rho, tk.p, tk.omp);
  tk.z = zmax;
  tk.d2 = tk.vdiff = tk.v2 = 0;
  for (int64_t c = 0; c < d; ++c) {
    const double vt = values[top * d + c], diff = vt - a_oth[c];
    tk.d2 += diff * diff;
    tk.vdiff += vt * diff;
    tk.v2 += vt * vt;
    out.a[c] = (vt + rho * a_oth[c]) * tk.p;
  }
  out.lse = zmax + std::log1p(rho);
  for (int64_t j = 0; j < visible; ++j)
    out.p[j] = j == top ? tk.p : terms::other_prob(std::exp(out.z[j] - zmax), tk.p);
}

std::vector<double> load_query(const TensorView& q, int64_t head, int64_t row) {
  const int64_t d = q.shape[2];
  std::vector<double> out(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) out[c] = q.load(head, row, c);
  return out;
}

void check_host(const ScoreProblem& problem) {
  KVEVICT_CHECK(problem.k.device == Device::kCpu,
                "the reference scores read host memory; k lives on the GPU");
}

}  // namespace

void window_forward(const ScoreProblem& problem, float scale, std::vector<double>& a,
                    std::vector<double>& lse) {
  check_host(problem);
  KVEVICT_CHECK(!problem.q.empty() && problem.q.ndim == 3,
                "window_forward needs q [Hq, m, d]; got ", problem.q.shape_str());
  const int64_t hq = problem.q.shape[0], m = problem.q.shape[1];
  const int64_t n = problem.num_tokens(), d = problem.head_dim();
  const int64_t hkv = problem.num_kv_heads();
  KVEVICT_CHECK(problem.q.shape[2] == d && hq % hkv == 0 && m <= n, "window_forward got q ",
                problem.q.shape_str(), " for k ", problem.k.shape_str(),
                "; expected [G*Hkv, m <= n, d]");
  const int64_t group = hq / hkv;
  a.assign(static_cast<size_t>(hq * m * d), 0.0);
  lse.assign(static_cast<size_t>(hq * m), 0.0);
  QueryAttention att;
  for (int64_t g = 0; g < hkv; ++g) {
    const std::vector<double> keys = load_head(problem.k, g);
    const std::vector<double> values = load_head(problem.v, g);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t r = 0; r < m; ++r) {
        const std::vector<double> qrow = load_query(problem.q, h, r);
        attend(qrow.data(), keys.data(), values.data(), n - m + r + 1, d, scale, att);
        std::copy(att.a.begin(), att.a.end(), a.begin() + (h * m + r) * d);
        lse[h * m + r] = att.lse;
      }
    }
  }
}

Scores score(const ScoreProblem& problem, const ScoreOptions& opt) {
  problem.validate(opt);
  check_host(problem);
  const int64_t n = problem.num_tokens(), d = problem.head_dim();
  const int64_t hkv = problem.num_kv_heads();
  Scores out;
  out.num_kv_heads = static_cast<int>(hkv);
  out.n = n;
  out.scores.assign(static_cast<size_t>(hkv * n), 0.0);
  double* scores = out.scores.data();

  // Query-free scores.
  switch (opt.method) {
    case Method::kStreamingLLM:
      for (int64_t g = 0; g < hkv; ++g)
        for (int64_t j = 0; j < n; ++j) scores[g * n + j] = static_cast<double>(j);
      return out;
    case Method::kRandom:
      for (int64_t g = 0; g < hkv; ++g)
        for (int64_t j = 0; j < n; ++j)
          scores[g * n + j] = terms::random_uniform<double>(opt.seed, g, j);
      return out;
    case Method::kKNorm:
      for (int64_t g = 0; g < hkv; ++g) {
        const std::vector<double> keys = load_head(problem.k, g);
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c) s += keys[j * d + c] * keys[j * d + c];
          scores[g * n + j] = -std::sqrt(s);
        }
      }
      return out;
    case Method::kKeyDiff:
      for (int64_t g = 0; g < hkv; ++g) {
        const std::vector<double> keys = load_head(problem.k, g);
        std::vector<double> norm(static_cast<size_t>(n)), mean(static_cast<size_t>(d), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c) s += keys[j * d + c] * keys[j * d + c];
          norm[j] = std::sqrt(s);
          // A zero key has no direction; it adds nothing to the mean direction.
          if (norm[j] != 0)  // NaN: a NaN key poisons the mean, as on the GPU
            for (int64_t c = 0; c < d; ++c) mean[c] += keys[j * d + c] / norm[j] / n;
        }
        double mean_norm = 0;
        for (int64_t c = 0; c < d; ++c) mean_norm += mean[c] * mean[c];
        mean_norm = std::sqrt(mean_norm);
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += keys[j * d + c] * mean[c];
          const double denom = norm[j] * mean_norm;
          scores[g * n + j] = denom == 0 ? 0.0 : -dot / denom;
        }
      }
      return out;
    default: break;
  }

  // Query-dependent scores: sum the per-(query, token) terms.
  const TensorView& q = problem.q;
  const int64_t hq = q.shape[0], m = q.shape[1];
  const int64_t group = hq / hkv;
  const int64_t used = opt.queries_needed(n);  // the last `used` rows of q
  const double scale = problem.logit_scale(opt);
  const Method term_method = opt.method;

  // acc[h][j]: sum over this head's used queries of the term of token j.
  std::vector<double> acc(static_cast<size_t>(hq * n), 0.0);
  QueryAttention att;
  for (int64_t g = 0; g < hkv; ++g) {
    const std::vector<double> keys = load_head(problem.k, g);
    const std::vector<double> values = load_head(problem.v, g);
    std::vector<double> v2(static_cast<size_t>(n), 0.0);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < d; ++c) v2[j] += values[j * d + c] * values[j * d + c];
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t r = m - used; r < m; ++r) {
        const int64_t visible = n - m + r + 1;
        const std::vector<double> qrow = load_query(q, h, r);
        attend(qrow.data(), keys.data(), values.data(), visible, d, scale, att);
        for (int64_t j = 0; j < visible; ++j) {
          if (j == att.top) {
            acc[h * n + j] += terms::top_term(term_method, att.top_key);
            continue;
          }
          // ||a - v||^2 and <v, v - a> from explicit differences, p_j <= 1/2 relative to the top.
          double dist2 = 0, vdiff = 0;
          for (int64_t c = 0; c < d; ++c) {
            const double diff = values[j * d + c] - att.a[c];
            dist2 += diff * diff;
            vdiff += values[j * d + c] * diff;
          }
          acc[h * n + j] +=
              terms::other_term_dist(term_method, att.p[j], att.z[j], v2[j], dist2, vdiff);
        }
      }
    }
  }

  // Head average: over the group, or over the whole layer for the last-query aggregation.
  std::vector<double> per_kv(static_cast<size_t>(hkv * n), 0.0);
  if (opt.aggregate == Aggregate::kLastQuery) {
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t j = 0; j < n; ++j) per_kv[j] += acc[h * n + j] / hq;
    for (int64_t g = 1; g < hkv; ++g)
      std::copy(per_kv.begin(), per_kv.begin() + n, per_kv.begin() + g * n);
  } else {
    for (int64_t g = 0; g < hkv; ++g)
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t j = 0; j < n; ++j) per_kv[g * n + j] += acc[h * n + j] / group;
  }
  if (opt.aggregate == Aggregate::kAllQueries && opt.h2o_normalize) {
    // Query row r (position n - m + r) sees token j when j <= n - m + r; among the used rows
    // r in [m - used, m) that is min(used, n - j) of them.
    for (int64_t g = 0; g < hkv; ++g)
      for (int64_t j = 0; j < n; ++j)
        per_kv[g * n + j] /= static_cast<double>(std::min<int64_t>(used, n - j));
  }

  std::vector<double> pooled(static_cast<size_t>(hkv * n));
  for (int64_t g = 0; g < hkv; ++g)
    score_detail::pool_tokens(per_kv.data() + g * n, pooled.data() + g * n, n, opt.pooling);

  if (opt.method == Method::kVATP) {
    for (int64_t g = 0; g < hkv; ++g) {
      const std::vector<double> values = load_head(problem.v, g);
      for (int64_t j = 0; j < n; ++j) {
        double l1 = 0;
        for (int64_t c = 0; c < d; ++c) l1 += std::abs(values[j * d + c]);
        scores[g * n + j] = pooled[g * n + j] * l1;
      }
    }
  } else if (opt.method == Method::kCriticalKV) {
    out.aux = pooled;
    const TensorView& wo = problem.wo;
    const int64_t rows = wo.shape[0];
    for (int64_t g = 0; g < hkv; ++g) {
      const std::vector<double> values = load_head(problem.v, g);
      for (int64_t j = 0; j < n; ++j) {
        // mean over the group of ||W_o^h v_j||_1, W_o^h = columns h*d .. h*d+d-1 of wo.
        double proj = 0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t o = 0; o < rows; ++o) {
            double s = 0;
            for (int64_t c = 0; c < d; ++c) s += wo.load(o, h * d + c) * values[j * d + c];
            proj += std::abs(s);
          }
        }
        proj /= group;
        scores[g * n + j] = (pooled[g * n + j] + opt.criticalkv_eps) * proj;
      }
    }
  } else {
    out.scores = pooled;
  }
  return out;
}

}  // namespace kvevict::ref
