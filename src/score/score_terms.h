// Per-(query, token) score terms of SPEC section 2, shared by every backend: the double reference,
// the CPU float path, decode-time step scoring and the CUDA kernels. Keeping the formulas in one
// place is what makes the backends comparable term by term.
//
// Inputs of one (query t, token j) pair:
//   z   scaled logit q_t . k_j * scale
//   lse log-sum-exp of the logits of query t over its visible keys
//   a2  ||a_t||^2, a_t = sum_j p_j v_j the attention output of query t
//   v2  ||v_j||^2
//   av  <a_t, v_j>
// ||a - v||^2 is expanded as a2 + v2 - 2 av (clamped at 0, rounding can make it slightly negative),
// so no [w, n, d] difference tensor ever exists (SPEC section 2, dropkv row).
//
// The row's top key (issue 13, SPEC section 2). For every key but the one with the largest logit,
// p <= 1/2, so 1 - p >= 1/2 and the forms above lose at most a factor 2 to the rounding of a. The
// top key can hold p -> 1; there a = p v_j + (1 - p) a_{-j} with a_{-j} the attention output
// WITHOUT key j, so a - v_j = (1 - p)(a_{-j} - v_j) and
//   dropkv     (p / (1 - p))^2 ||a - v_j||^2 = p^2 ||a_{-j} - v_j||^2      (-> ||a_{-j} - v_j||^2)
//   obcache_k  (p z)^2 ||v_j - a||^2          = (p z (1 - p))^2 ||v_j - a_{-j}||^2
//   obcache_vk cross term 2 p^2 z <v_j, v_j - a> = 2 p^2 z (1 - p) <v_j, v_j - a_{-j}>
// Computed from a_{-j} accumulated APART from key j and 1 - p = rho / (1 + rho) with
// rho = sum_{i != j} exp(z_i - z_j) (no 1 - exp(.) anywhere), these forms have no cancellation and
// no 1 / (1 - p) amplification, for any p (TopKey, top_term). A row that sees a single key has no
// a_{-j}: the output without it is taken as 0 (what an empty softmax row of flash attention gives),
// so its dropkv term is ||v_j||^2, the change removing it makes.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/nan_max.h"  // nan_max, KVEVICT_HD
#include "kvevict/method.h"

namespace kvevict {

// The clamp of 1 - p that SPEC section 2 prescribes for dropkv (ScoreOptions::one_minus_p_floor).
constexpr double kOneMinusPFloor = 1e-12;

namespace terms {

// Overloads so the templates below pick expf/expm1f for float (device-friendly) and the double
// versions for the reference.
KVEVICT_HD inline float exp_of(float x) {
  return expf(x);
}
KVEVICT_HD inline double exp_of(double x) {
  return exp(x);
}
KVEVICT_HD inline float expm1_of(float x) {
  return expm1f(x);
}
KVEVICT_HD inline double expm1_of(double x) {
  return expm1(x);
}
KVEVICT_HD inline float log1p_of(float x) {
  return log1pf(x);
}
KVEVICT_HD inline double log1p_of(double x) {
  return log1p(x);
}

// p = softmax probability of the token for this query.
template <class T>
KVEVICT_HD inline T prob(T z, T lse) {
  return exp_of(z - lse);
}

// 1 - p computed as -expm1(z - lse): exact when p is close to 1, where 1 - exp(.) would cancel
// to 0 and make dropkv's p / (1 - p) blow up. Clamped at `floor` (SPEC: 1e-12).
template <class T>
KVEVICT_HD inline T one_minus_prob(T z, T lse, T floor) {
  return nan_max(-expm1_of(z - lse), floor);
}

// ||a - v||^2 from the norm identity, clamped at 0.
template <class T>
KVEVICT_HD inline T dist2(T a2, T v2, T av) {
  return nan_max(a2 + v2 - T(2) * av, T(0));
}

// The terms come in two spellings. The *_dist forms take ||a - v||^2 (`dist2`) and
// <v, v - a> (`vdiff`) directly: a backend computes them on the fly from the d-long difference
// (still no [w, n, d] tensor), which is exact where the norm identity cancels. The identity forms
// take (a2, v2, av). Both are the forms for keys other than the row's top key (p <= 1/2, where
// 1 / (1 - p)^2 <= 4); the top key takes top_term.

// dropkv: (p / (1 - p))^2 ||a - v||^2.
template <class T>
KVEVICT_HD inline T dropkv_term_dist(T p, T one_minus_p, T dist2) {
  const T r = p / one_minus_p;
  return r * r * dist2;
}
template <class T>
KVEVICT_HD inline T dropkv_term(T p, T one_minus_p, T a2, T v2, T av) {
  return dropkv_term_dist(p, one_minus_p, dist2(a2, v2, av));
}

// obcache_v: p^2 ||v||^2.
template <class T>
KVEVICT_HD inline T obcache_v_term(T p, T v2) {
  return p * p * v2;
}

// obcache_k: (p z)^2 ||v - a||^2.
template <class T>
KVEVICT_HD inline T obcache_k_term_dist(T p, T z, T dist2) {
  const T pz = p * z;
  return pz * pz * dist2;
}
template <class T>
KVEVICT_HD inline T obcache_k_term(T p, T z, T a2, T v2, T av) {
  return obcache_k_term_dist(p, z, dist2(a2, v2, av));
}

// obcache_vk: obcache_v + obcache_k + 2 p^2 z (||v||^2 - <v, a>).
template <class T>
KVEVICT_HD inline T obcache_vk_term_dist(T p, T z, T v2, T dist2, T vdiff) {
  return obcache_v_term(p, v2) + obcache_k_term_dist(p, z, dist2) + T(2) * p * p * z * vdiff;
}
template <class T>
KVEVICT_HD inline T obcache_vk_term(T p, T z, T a2, T v2, T av) {
  return obcache_vk_term_dist(p, z, v2, dist2(a2, v2, av), v2 - av);
}

// snapkv, h2o, tova (and the snapkv part of vatp, criticalkv): the attention probability itself.
template <class T>
KVEVICT_HD inline T attention_term(T p) {
  return p;
}

// The leave-one-out quantities of a row's top key j (see the header comment).
template <class T>
struct TopKey {
  T p = 0;      // p_j = 1 / (1 + rho)
  T omp = 0;    // 1 - p_j = rho / (1 + rho)
  T z = 0;      // z_j
  T d2 = 0;     // ||v_j - a_{-j}||^2
  T vdiff = 0;  // <v_j, v_j - a_{-j}>
  T v2 = 0;     // ||v_j||^2
};

// The probability of a key other than the row's top from e = exp(z - z_top) <= 1: p = e p_top.
// Taken relative to the top's logit rather than as exp(z - lse), it stays right where lse = z_top +
// log1p(rho) rounds to z_top (|z| ~ 1e30 with a tie: exp(z - lse) would give 1 instead of 1/2).
// Its 1 - p >= 1/2 is then exact as 1 - p.
template <class T>
KVEVICT_HD inline T other_prob(T e, T p_top) {
  return e * p_top;
}

// The per-pair term of method m for a key other than the row's top (p <= 1/2), from ||a - v||^2
// and <v, v - a> (the *_dist forms).
template <class T>
KVEVICT_HD inline T other_term_dist(Method m, T p, T z, T v2, T dist2, T vdiff) {
  switch (m) {
    case Method::kDropKV: return dropkv_term_dist(p, T(1) - p, dist2);
    case Method::kObcacheV: return obcache_v_term(p, v2);
    case Method::kObcacheK: return obcache_k_term_dist(p, z, dist2);
    case Method::kObcacheVK: return obcache_vk_term_dist(p, z, v2, dist2, vdiff);
    case Method::kSnapKV:
    case Method::kH2O:
    case Method::kTOVA:
    case Method::kVATP:
    case Method::kCriticalKV: return attention_term(p);
    default: return T(0);
  }
}

// p and 1 - p of the top key from rho = sum_{i != j} exp(z_i - z_j) >= 0.
template <class T>
KVEVICT_HD inline void top_probs(T rho, T& p, T& omp) {
  p = T(1) / (T(1) + rho);
  omp = rho * p;
}

// The per-pair term of method m for the row's top key, in the leave-one-out form. The products are
// ordered so that a huge logit (z ~ 1e30 with 1 - p = 0) gives 0, never inf * 0.
template <class T>
KVEVICT_HD inline T top_term(Method m, const TopKey<T>& t) {
  const T p2 = t.p * t.p;
  const T zo = t.z * t.omp;  // z (1 - p)
  switch (m) {
    case Method::kDropKV: return p2 * t.d2;
    case Method::kObcacheV: return p2 * t.v2;
    case Method::kObcacheK: {
      const T k = t.p * zo;
      return k * k * t.d2;
    }
    case Method::kObcacheVK: {
      const T k = t.p * zo;
      return p2 * t.v2 + k * k * t.d2 + T(2) * p2 * zo * t.vdiff;
    }
    case Method::kSnapKV:
    case Method::kH2O:
    case Method::kTOVA:
    case Method::kVATP:
    case Method::kCriticalKV: return t.p;
    default: return T(0);
  }
}

// True for the methods whose per-pair term needs a (a2, av); the others need only z and lse
// (and v2 for obcache_v), which lets fast paths skip the forward pass's output.
KVEVICT_HD inline bool term_needs_output(Method m) {
  return m == Method::kDropKV || m == Method::kObcacheK || m == Method::kObcacheVK;
}
// True for the methods whose score is a sum of per-(query, token) terms.
KVEVICT_HD inline bool has_pair_term(Method m) {
  return m == Method::kDropKV || m == Method::kObcacheV || m == Method::kObcacheK ||
         m == Method::kObcacheVK || m == Method::kSnapKV || m == Method::kH2O ||
         m == Method::kTOVA || m == Method::kVATP || m == Method::kCriticalKV;
}

// The per-pair term of method m (0 for methods without one). One switch, so a kernel templated on
// the method folds it away; fast CPU loops call the specific functions above instead.
template <class T>
KVEVICT_HD inline T pair_term(Method m, T z, T lse, T a2, T v2, T av, T floor) {
  const T p = prob(z, lse);
  switch (m) {
    case Method::kDropKV: return dropkv_term(p, one_minus_prob(z, lse, floor), a2, v2, av);
    case Method::kObcacheV: return obcache_v_term(p, v2);
    case Method::kObcacheK: return obcache_k_term(p, z, a2, v2, av);
    case Method::kObcacheVK: return obcache_vk_term(p, z, a2, v2, av);
    case Method::kSnapKV:
    case Method::kH2O:
    case Method::kTOVA:
    case Method::kVATP:
    case Method::kCriticalKV: return attention_term(p);
    default: return T(0);
  }
}

// pair_term from ||a - v||^2 and <v, v - a> computed directly (the reference does this).
template <class T>
KVEVICT_HD inline T pair_term_dist(Method m, T z, T lse, T v2, T dist2, T vdiff, T floor) {
  const T p = prob(z, lse);
  switch (m) {
    case Method::kDropKV: return dropkv_term_dist(p, one_minus_prob(z, lse, floor), dist2);
    case Method::kObcacheV: return obcache_v_term(p, v2);
    case Method::kObcacheK: return obcache_k_term_dist(p, z, dist2);
    case Method::kObcacheVK: return obcache_vk_term_dist(p, z, v2, dist2, vdiff);
    case Method::kSnapKV:
    case Method::kH2O:
    case Method::kTOVA:
    case Method::kVATP:
    case Method::kCriticalKV: return attention_term(p);
    default: return T(0);
  }
}

// Online-softmax bookkeeping: merges two (running max m, running sum s = sum exp(z - m)) pairs.
// lse = m + log(s). Used by the flash-style forward and its split-K merge.
template <class T>
KVEVICT_HD inline T lse_merge(T lse_a, T lse_b) {
  // log(exp(a) + exp(b)) = max + log1p(exp(min - max)); -inf on both sides stays -inf.
  const T hi = nan_max(lse_a, lse_b);
  const T lo = lse_a > lse_b ? lse_b : lse_a;
  if (!(hi > -INFINITY)) return hi;
  return hi + log1p_of(exp_of(lo - hi));
}

// splitmix64 (Steele, Lea, Flood 2014): a counter-based generator, so every backend computes the
// same random score for (seed, head, token) without shared state or ordering.
KVEVICT_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 random bits, so the value is exact in float and in double and every
// backend (reference, CPU, CUDA) writes bit-identical random scores.
template <class T>
KVEVICT_HD inline T random_uniform(uint64_t seed, uint64_t head, uint64_t token) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ head) ^ token);
  return static_cast<T>(static_cast<uint32_t>(h >> 40)) * static_cast<T>(1.0 / 16777216.0);
}

}  // namespace terms
}  // namespace kvevict
