// Theory diagnostics of DropKV section 4 (SPEC section 6): single query, single head.
//
// For one query with softmax weights p over n tokens, output a = sum_j p_j v_j, and a candidate
// pool L of tokens, evicting a set J changes the output by
//   F(J) = || sum_{i in J} p_i (a - v_i) || / (1 - P_J),   P_J = sum_{i in J} p_i.
// We compare the exact optimum J* (|J| = k, J in L) with the proxy J^ (the k tokens of L with the
// smallest p/(1-p) ||a - v||, DropKV's per-token score) and report the cone constant and the
// theorem's factor. Uses only double math; no dependency on the model runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvevict/tensor.h"

namespace kvevict::diag {

// One query, one head, restricted to a candidate pool of L tokens.
struct PoolProblem {
  int head_dim = 0;       // d
  std::vector<double> p;  // [L] softmax weights of the pool tokens (over all n tokens)
  std::vector<double> a;  // [d] attention output over all n tokens
  std::vector<double> v;  // [L, d] values of the pool tokens
  int size() const { return static_cast<int>(p.size()); }
};

// The enumeration limit of exact_optimum: C(24, 12) = 2.7e6 fits, and so does C(64, 5) = 7.6e6.
constexpr double kMaxSubsets = 1e7;
// C(L, k) as a double (exact up to 2^53).
double subset_count(int L, int k);

// F(J) for pool indices J (distinct, in [0, L)). J empty gives 0.
double objective(const PoolProblem& pp, const std::vector<int>& J);

struct SubsetValue {
  std::vector<int> set;  // ascending pool indices
  double value = 0.0;    // F(set)
};
// Exact argmin of F over all k-subsets of the pool by enumeration (Gray-free revolving combos);
// Any L <= 64 whose C(L, k) <= kMaxSubsets (all of L <= 24 for k <= 12; L = 64 for k <= 5); throws
// naming L, k and the count otherwise. Ties: the lexicographically first subset.
SubsetValue exact_optimum(const PoolProblem& pp, int k);
// The proxy: k pool tokens with the smallest p/(1-p) ||a - v|| (ties toward the lower index).
SubsetValue proxy_set(const PoolProblem& pp, int k);
// c* = min over i != j of cos(a - v_i, a - v_j); 1 when L < 2.
double cone_constant(const PoolProblem& pp);
// eps = max_i p_i over the pool.
double small_weight_eps(const PoolProblem& pp);
// 1 / (c* (1 - eps)(1 - k eps)) when c* > 0 and k eps < 1, else NaN (not applicable).
double theorem_factor(double c_star, double eps, int k);

enum class PoolChoice : uint8_t {
  kLowestProxy,  // the L tokens with the smallest proxy value (default: where eviction happens)
  kRandom,       // L tokens drawn uniformly without replacement (seeded)
};

struct DiagnosticsOptions {
  int pool_size = 16;  // L (<= 24)
  int k = 4;           // evicted set size, 1 <= k <= L
  PoolChoice pool = PoolChoice::kLowestProxy;
  uint64_t seed = 0;    // kRandom
  int num_queries = 1;  // the last `num_queries` queries of q are analysed, each on its own
  float scale = 0.0f;   // 0 = 1/sqrt(d)
  void validate() const;
};

struct DiagnosticsRow {
  int q_head = 0, kv_head = 0;
  int64_t query = 0;                              // position of the query (it sees keys 0..query)
  double f_opt = 0, f_proxy = 0, ratio = 0;       // ratio = F(J^)/F(J*) (1 when both are 0)
  double c_star = 0, eps = 0, factor = 0;         // factor NaN when the theorem does not apply
  std::vector<int64_t> opt_tokens, proxy_tokens;  // token positions
};

struct DiagnosticsReport {
  DiagnosticsOptions options;
  std::vector<DiagnosticsRow> rows;
  // Over rows: median and p95 of the ratio; median factor over rows where it applies.
  double ratio_median = 0, ratio_p95 = 0, factor_median = 0, c_star_median = 0;
  int factor_applicable = 0;
  std::string to_json() const;   // {"options":{...},"summary":{...},"rows":[...]}
  std::string to_table() const;  // one line per row + a summary line
};

// Runs the diagnostics for every query head (and its KV head) over real tensors:
// q [Hq, m, d] (the last m queries, at positions n-m..n-1), k, v [Hkv, n, d]; causal.
DiagnosticsReport run_diagnostics(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const DiagnosticsOptions& opt);

}  // namespace kvevict::diag
