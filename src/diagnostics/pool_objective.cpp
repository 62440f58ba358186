// SPEC section 6 on one candidate pool: the objective F, the exact optimum by enumeration, the
// DropKV proxy, the cone constant and the theorem factor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kvevict/diagnostics.h"
#include "kvevict/error.h"

namespace kvevict::diag {
namespace {

void check_pool(const PoolProblem& pp) {
  KVEVICT_CHECK(pp.head_dim > 0, "pool head_dim ", pp.head_dim, " is invalid; expected > 0");
  KVEVICT_CHECK(pp.a.size() == static_cast<size_t>(pp.head_dim), "pool output a has ", pp.a.size(),
                " entries; expected d = ", pp.head_dim);
  KVEVICT_CHECK(pp.v.size() == pp.p.size() * static_cast<size_t>(pp.head_dim), "pool values hold ",
                pp.v.size(), " numbers; expected L * d = ", pp.p.size() * pp.head_dim);
}

void check_k(const PoolProblem& pp, int k) {
  KVEVICT_CHECK(k >= 1 && k <= pp.size(), "evicted set size k = ", k,
                " is out of range; expected 1 <= k <= L = ", pp.size());
}

double norm_of(const double* x, int d) {
  double s = 0;
  for (int i = 0; i < d; ++i) s += x[i] * x[i];
  return std::sqrt(s);
}

// F from the summed vector and mass; evicting all the probability mass is infinitely bad.
double f_value(const double* sum, int d, double mass) {
  return mass >= 1.0 ? std::numeric_limits<double>::infinity() : norm_of(sum, d) / (1.0 - mass);
}

}  // namespace

double subset_count(int L, int k) {
  if (k < 0 || k > L) return 0;
  double c = 1;
  for (int i = 1; i <= k; ++i) c = c * (L - k + i) / i;
  return std::round(c);
}

double objective(const PoolProblem& pp, const std::vector<int>& J) {
  check_pool(pp);
  const int d = pp.head_dim;
  std::vector<double> sum(d, 0.0);
  double mass = 0;
  std::vector<char> seen(pp.size(), 0);
  for (int i : J) {
    KVEVICT_CHECK(i >= 0 && i < pp.size() && !seen[i], "eviction set index ", i,
                  " is out of range or repeated; expected distinct indices in [0, ", pp.size(),
                  ")");
    seen[i] = 1;
    mass += pp.p[i];
    for (int c = 0; c < d; ++c) sum[c] += pp.p[i] * (pp.a[c] - pp.v[i * d + c]);
  }
  return f_value(sum.data(), d, mass);
}

SubsetValue exact_optimum(const PoolProblem& pp, int k) {
  check_pool(pp);
  check_k(pp, k);
  const int L = pp.size(), d = pp.head_dim;
  KVEVICT_CHECK(L <= 64 && subset_count(L, k) <= kMaxSubsets, "exact enumeration of the ",
                subset_count(L, k), " subsets of size ", k, " of a pool of ", L,
                " tokens is too large; expected L <= 64 and at most ", kMaxSubsets, " subsets");
  // w_i = p_i (a - v_i): F(J) = ||sum_J w_i|| / (1 - sum_J p_i).
  std::vector<double> w(static_cast<size_t>(L) * d);
  for (int i = 0; i < L; ++i)
    for (int c = 0; c < d; ++c) w[i * d + c] = pp.p[i] * (pp.a[c] - pp.v[i * d + c]);
  // Depth-first over combinations in lexicographic order with a partial sum per depth, so each
  // visited node costs d operations; strict improvement keeps the lexicographically first optimum.
  std::vector<double> partial(static_cast<size_t>(k + 1) * d, 0.0);
  std::vector<double> mass(k + 1, 0.0);
  std::vector<int> cur(k, 0);
  SubsetValue best;
  best.value = std::numeric_limits<double>::infinity();
  bool found = false;
  // Iterative enumeration: cur[depth] is the index chosen at that depth.
  int depth = 0;
  cur[0] = 0;
  while (depth >= 0) {
    if (cur[depth] > L - (k - depth)) {  // no room left for the remaining picks
      --depth;
      if (depth >= 0) ++cur[depth];
      continue;
    }
    const int i = cur[depth];
    const double* prev = partial.data() + static_cast<size_t>(depth) * d;
    double* next = partial.data() + static_cast<size_t>(depth + 1) * d;
    for (int c = 0; c < d; ++c) next[c] = prev[c] + w[i * d + c];
    mass[depth + 1] = mass[depth] + pp.p[i];
    if (depth + 1 == k) {
      const double f = f_value(next, d, mass[k]);
      if (!found || f < best.value) {
        best.value = f;
        best.set = cur;
        found = true;
      }
      ++cur[depth];
    } else {
      ++depth;
      cur[depth] = cur[depth - 1] + 1;
    }
  }
  return best;
}

SubsetValue proxy_set(const PoolProblem& pp, int k) {
  check_pool(pp);
  check_k(pp, k);
  const int L = pp.size(), d = pp.head_dim;
  std::vector<double> proxy(L);
  for (int i = 0; i < L; ++i) {
    double dist2 = 0;
    for (int c = 0; c < d; ++c) dist2 += (pp.a[c] - pp.v[i * d + c]) * (pp.a[c] - pp.v[i * d + c]);
    proxy[i] = pp.p[i] / std::max(1.0 - pp.p[i], 1e-12) * std::sqrt(dist2);
  }
  std::vector<int> order(L);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return proxy[x] < proxy[y]; });
  SubsetValue s;
  s.set.assign(order.begin(), order.begin() + k);
  std::sort(s.set.begin(), s.set.end());
  s.value = objective(pp, s.set);
  return s;
}

double cone_constant(const PoolProblem& pp) {
  check_pool(pp);
  const int L = pp.size(), d = pp.head_dim;
  std::vector<double> u(static_cast<size_t>(L) * d), nrm(L);
  for (int i = 0; i < L; ++i) {
    for (int c = 0; c < d; ++c) u[i * d + c] = pp.a[c] - pp.v[i * d + c];
    nrm[i] = norm_of(u.data() + static_cast<size_t>(i) * d, d);
  }
  double c_star = 1.0;
  for (int i = 0; i < L; ++i)
    for (int j = i + 1; j < L; ++j) {
      if (nrm[i] == 0 || nrm[j] == 0) continue;  // a == v_i: no direction, no constraint
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += u[i * d + c] * u[j * d + c];
      c_star = std::min(c_star, dot / (nrm[i] * nrm[j]));
    }
  return c_star;
}

double small_weight_eps(const PoolProblem& pp) {
  double e = 0;
  for (double x : pp.p) e = std::max(e, x);
  return e;
}

double theorem_factor(double c_star, double eps, int k) {
  if (!(c_star > 0) || !(k * eps < 1)) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 / (c_star * (1.0 - eps) * (1.0 - k * eps));
}

}  // namespace kvevict::diag
