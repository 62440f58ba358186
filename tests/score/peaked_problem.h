// Score problems whose every window row has a planted top key (issue 13): the row's logits are set
// directly, so the gap between the top key and the row's best other key (0 .. 1000 nats), the top
// key's probability (1 - 1e-k) or the query scale (1e30) are exact inputs of the test. Shared by
// the CPU (tests/score) and the CUDA (tests/cuda) numerics tests, with
//   - brute-force removal perturbations: dropkv's score of token j is sum_t ||a_t - a_{-j,t}||^2
//     (SPEC section 2, the output without token j), computed here by rerunning each softmax
//     without j in long double, independent of score_terms.h;
//   - the kept-set check: every token whose reference score clears the selection cut by more than
//     the tolerance must land on the same side of the cut.
//
// Construction: row c = (query head h of KV head g, window position t) is c = (h - g G) w + t, and
// its query is q_scale e_c (d >= G w), so its logit of key j is q_scale * scale * k_j[c]: the
// key's coordinate c is set to the planted logit / scale. Other coordinates are random.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvevict/dtype.h"
#include "kvevict/score.h"

namespace kvevict::testing {

struct PeakedSpec {
  int hkv = 2, group = 2, w = 8, d = 64;
  int64_t n = 67;
  double gap = 0;             // nats between each row's top key and its best other key
  double p_top = 0;           // > 0: plant the top key's probability instead of a gap
  double q_scale = 1;         // multiplies every query: 1e30 is the saturated case
  double spread = 1;          // std of the other keys' logits (nats)
  DType dtype = DType::kF32;  // q, k, v are rounded through it (the reference reads the same)
  uint64_t seed = 1;
  std::string str() const {
    std::ostringstream os;
    os << "Hkv " << hkv << " G " << group << " w " << w << " n " << n << " d " << d << " gap "
       << gap << " p_top " << p_top << " q_scale " << q_scale << " " << dtype_name(dtype);
    return os.str();
  }
};

inline float round_through(float x, DType t) {
  if (t == DType::kBF16) return round_bf16(x);
  if (t == DType::kF16) return round_half(x);
  return x;
}

struct PeakedProblem {
  PeakedSpec spec;
  float scale = 0;
  std::vector<float> q, k, v;  // [Hq, w, d], [Hkv, n, d], [Hkv, n, d], rounded to spec.dtype
  std::vector<int64_t> top;    // [Hq * w] the planted top key of every row

  explicit PeakedProblem(const PeakedSpec& s) : spec(s) {
    const int G = s.group, w = s.w, d = s.d, hq = s.hkv * G;
    const int64_t n = s.n;
    scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::mt19937_64 rng(s.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    q.assign(static_cast<size_t>(hq) * w * d, 0.0f);
    k.resize(static_cast<size_t>(s.hkv) * n * d);
    v.resize(k.size());
    for (auto& x : k) x = static_cast<float>(normal(rng));
    for (auto& x : v) x = static_cast<float>(normal(rng));
    top.assign(static_cast<size_t>(hq) * w, 0);
    for (int h = 0; h < hq; ++h) {
      const int g = h / G;
      for (int t = 0; t < w; ++t) {
        const int c = (h - g * G) * w + t;
        q[(static_cast<size_t>(h) * w + t) * d + c] = static_cast<float>(s.q_scale);
        const int64_t pos = n - w + t;  // sees keys 0 .. pos
        std::vector<double> z(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) z[j] = s.spread * normal(rng);
        // Half the rows share the first key as their top (an attention sink), the others pick
        // one of their visible keys.
        const int64_t jt = (t % 2 == 0) ? 0 : static_cast<int64_t>(rng() % (pos + 1));
        top[static_cast<size_t>(h) * w + t] = jt;
        double best = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= pos; ++j)
          if (j != jt) best = std::max(best, z[j]);
        for (int64_t j = 0; j <= pos; ++j)
          if (j != jt) sum += std::exp(z[j] - best);
        if (pos == 0) {
          z[jt] = 0;
        } else if (s.p_top > 0) {
          // p_top = 1 / (1 + rho), rho = sum_{j != top} exp(z_j - z_top).
          z[jt] = best + std::log(sum) + std::log(s.p_top / (1 - s.p_top));
        } else {
          z[jt] = best + s.gap;
        }
        for (int64_t j = 0; j < n; ++j)
          k[(static_cast<size_t>(g) * n + j) * d + c] = static_cast<float>(z[j] / scale);
      }
    }
    for (auto* t : {&q, &k, &v})
      for (auto& x : *t) x = round_through(x, s.dtype);
  }

  // f32 host views of the rounded inputs (what the reference reads).
  ScoreProblem host_view() {
    const int hq = spec.hkv * spec.group;
    ScoreProblem p;
    p.q = TensorView(q.data(), DType::kF32, {hq, spec.w, spec.d});
    p.k = TensorView(k.data(), DType::kF32, {spec.hkv, spec.n, spec.d});
    p.v = TensorView(v.data(), DType::kF32, {spec.hkv, spec.n, spec.d});
    p.scale = scale;
    return p;
  }

  // dropkv's score by brute force: per KV head g and token j, the mean over the group's query
  // heads of sum_t ||a_t - a_{-j,t}||^2, each softmax without j rerun from scratch (long double;
  // the output without the only visible key is 0). [Hkv, n]
  std::vector<double> removal_perturbation() const {
    using LD = long double;
    const int G = spec.group, w = spec.w, d = spec.d, hq = spec.hkv * G;
    const int64_t n = spec.n;
    std::vector<double> out(static_cast<size_t>(spec.hkv) * n, 0.0);
    std::vector<LD> z(static_cast<size_t>(n)), a(d), b(d);
    auto softmax_out = [&](int64_t visible, int64_t skip, int g, std::vector<LD>& o) {
      LD m = -INFINITY;
      for (int64_t j = 0; j < visible; ++j)
        if (j != skip) m = std::max(m, z[j]);
      std::fill(o.begin(), o.end(), 0.0L);
      if (m == -INFINITY) return;
      LD sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        if (j == skip) continue;
        const LD e = std::exp(z[j] - m);
        sum += e;
        for (int c = 0; c < d; ++c) o[c] += e * v[(static_cast<size_t>(g) * n + j) * d + c];
      }
      for (int c = 0; c < d; ++c) o[c] /= sum;
    };
    for (int h = 0; h < hq; ++h) {
      const int g = h / G;
      for (int t = 0; t < w; ++t) {
        const int64_t visible = n - w + t + 1;
        for (int64_t j = 0; j < visible; ++j) {
          LD dot = 0;
          for (int c = 0; c < d; ++c)
            dot += static_cast<LD>(q[(static_cast<size_t>(h) * w + t) * d + c]) *
                   k[(static_cast<size_t>(g) * n + j) * d + c];
          z[j] = dot * static_cast<LD>(scale);
        }
        softmax_out(visible, -1, g, a);
        for (int64_t j = 0; j < visible; ++j) {
          softmax_out(visible, j, g, b);
          LD e = 0;
          for (int c = 0; c < d; ++c) e += (a[c] - b[c]) * (a[c] - b[c]);
          out[static_cast<size_t>(g) * n + j] += static_cast<double>(e / G);
        }
      }
    }
    return out;
  }
};

// The kept set of one head's scores: the `keep` largest, ties toward the lower position (the
// library's rule, SPEC section 3).
template <class T>
std::vector<bool> kept_mask(const T* s, int64_t n, int64_t keep) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  std::vector<bool> kept(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < keep; ++i) kept[idx[i]] = true;
  return kept;
}

// One head: `got` keeps the same tokens as `ref` wherever the reference's score clears the cut by
// more than the tolerance. With c_in / c_out the reference's last kept / first evicted score and
// tol(x) = atol + rtol |x|: token j must be kept if ref_j > c_out + tol(ref_j) + tol(c_out), and
// evicted if ref_j < c_in - tol(ref_j) - tol(c_in). (Any got within tol of ref then orders them
// so; when c_in - c_out exceeds both tolerances, the kept sets are equal.)
inline ::testing::AssertionResult kept_sets_agree(const float* got, const double* ref, int64_t n,
                                                  int64_t keep, double atol, double rtol,
                                                  const std::string& what) {
  if (keep <= 0 || keep >= n) return ::testing::AssertionSuccess();
  std::vector<double> sorted(ref, ref + n);
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double c_in = sorted[keep - 1], c_out = sorted[keep];
  auto tol = [&](double x) { return atol + rtol * std::abs(x); };
  const std::vector<bool> kept = kept_mask(got, n, keep);
  int64_t bad = 0, forced = 0;
  std::ostringstream first;
  for (int64_t j = 0; j < n; ++j) {
    const bool must_keep = ref[j] > c_out + tol(ref[j]) + tol(c_out);
    const bool must_drop = ref[j] < c_in - tol(ref[j]) - tol(c_in);
    forced += must_keep || must_drop;
    if ((must_keep && !kept[j]) || (must_drop && kept[j])) {
      if (bad < 6)
        first << "\n  token " << j << ": ref " << ref[j] << " got " << got[j]
              << (must_keep ? " evicted" : " kept") << " (cut " << c_in << " / " << c_out << ")";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << forced
         << " tokens clear of the cut landed on the wrong side" << first.str();
}

// The token with the largest value of one head, and whether it beats every other by more than
// the relative margin `rel` (so that its place as the largest is not a near tie).
template <class T>
std::pair<int64_t, bool> clear_max(const T* s, int64_t n, double rel) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (s[j] > s[best]) best = j;
  double second = -INFINITY;
  for (int64_t j = 0; j < n; ++j)
    if (j != best) second = std::max(second, static_cast<double>(s[j]));
  return {best,
          static_cast<double>(s[best]) - second > rel * std::abs(static_cast<double>(s[best]))};
}

}  // namespace kvevict::testing
