// Token scores (SPEC section 2): higher = keep. One layer, one batch row.
//
// Queries are the last m prompt tokens: query t (0-based) sits at position n - m + t and sees keys
// 0 .. n - m + t (causal). Per query head h, the KV head is h / G with G = Hq / Hkv (GQA; MHA is
// G = 1, MQA Hkv = 1). Every score is computed per query head and averaged over the G heads of its
// group; pooling (if any) then runs along tokens on the per-KV-head score.
//
// Aggregations (ScoreOptions::aggregate) of the per-(query, token) terms of score_terms.h:
//   kWindow      sum over the last min(window, n) rows of q.
//   kAllQueries  sum over all n prompt queries (q must hold m = n rows); with h2o_normalize the sum
//                of token j is divided by the number of those queries that see j (n - j).
//   kLastQuery   the last row of q only, averaged over ALL Hq heads of the layer; the same score is
//                written to every KV head (one selection shared by the layer).
// Pooling applies to every query-dependent score, whatever the aggregation, after the head
// average (describe() always reports it); a query-free method with pooling is an error.
// Derived scores use the pooled attention sum S (the "snapkv score"):
//   vatp        S_j * ||v_j||_1
//   criticalkv  scores = (S_j + criticalkv_eps) * mean_{h in group} ||W_o^h v_j||_1, aux = S_j
// Query-free scores: knorm -||k_j||; keydiff -cos(k_j, mean_i k_i / ||k_i||) (0 for a zero key);
// streamingllm the position j (recency); random terms::random_uniform(seed, kv head, j).
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/method.h"
#include "kvevict/tensor.h"
#include "kvevict/workspace.h"

namespace kvevict {

struct ScoreProblem {
  TensorView q;   // [Hq, m, d] the last m prompt queries after RoPE; m >= queries_needed(n)
  TensorView k;   // [Hkv, n, d] keys after RoPE at positions 0..n-1 (a full layer)
  TensorView v;   // [Hkv, n, d] values
  TensorView wo;  // [D, Hq * d] output projection, row-major like o_proj.weight (criticalkv only)
  float scale = 0.0f;  // logit scale; 0 = 1/sqrt(d) (overrides ScoreOptions::scale when nonzero)

  int num_q_heads() const { return q.empty() ? 0 : static_cast<int>(q.shape[0]); }
  int num_kv_heads() const { return static_cast<int>(k.shape[0]); }
  int64_t num_tokens() const { return k.shape[1]; }
  int head_dim() const { return static_cast<int>(k.shape[2]); }
  // Throws naming the bad tensor when shapes disagree, Hq is not a multiple of Hkv, q has fewer
  // than the needed queries (or more queries than tokens), wo is missing for criticalkv, a dtype
  // is not a float type, or (check_values) a host input holds NaN/Inf. Also validates `opt`.
  // Fast paths pass check_values = false and detect non-finite inputs while they stream them.
  void validate(const ScoreOptions& opt, bool check_values = true) const;
  // problem.scale if nonzero, else opt.scale if nonzero, else 1/sqrt(d).
  float logit_scale(const ScoreOptions& opt) const;
};

struct ScoreOutput {
  TensorView scores;  // [Hkv, n] f32, higher = keep
  TensorView aux;     // [Hkv, n] f32: criticalkv's stage-1 (snapkv) score; empty otherwise
};

// Every host scoring path calls this on what it wrote (host f32 outputs), after validate() or
// the streaming scan refused non-finite inputs: a score that is still inf or NaN comes from
// finite inputs whose score does not fit float32 (logits past 3.4e38, a squared distance or a
// norm past it). Such scores would select by ties (inf) or be refused later without a cause
// (NaN), so this throws naming the head, row, value, method and the overflow.
void check_scores_finite(const ScoreOutput& out, const ScoreOptions& opt);

namespace ref {
// The double-precision ground truth, written for clarity, not speed (materializes p per query;
// ||a - v||^2 and <v, v - a> from explicit differences; the top key in the leave-one-out form).
// Host inputs only.
struct Scores {
  int num_kv_heads = 0;
  int64_t n = 0;
  std::vector<double> scores;  // [Hkv, n]
  std::vector<double> aux;     // [Hkv, n] criticalkv stage-1 score, else empty
};
Scores score(const ScoreProblem& problem, const ScoreOptions& opt);

// The window forward in double: outputs a [Hq, m, d] and lse [Hq, m] of the m queries in q.
void window_forward(const ScoreProblem& problem, float scale, std::vector<double>& a,
                    std::vector<double>& lse);
}  // namespace ref

namespace cpu {
// The fast float path: a flash-style pass over K/V tiles with online softmax giving a and LSE,
// then a streaming scoring pass; never w x n x d or n x n. Multithreaded (parallel.h) with a
// fixed work split (forward chunks of 32768 tokens merged split-K in chunk order, score chunks of
// 2048 tokens), so results are bitwise identical for any thread count.
//
// Inputs: f32, f16, bf16 or f64 host tensors, any strides; outputs f32 [Hkv, n] with unit token
// stride (row stride free); `aux` is needed for criticalkv only. Scratch comes from `ws`, sized by
// score_workspace_bytes (which depends on num_threads() at the time: a smaller thread count later
// is fine, a larger one runs with fewer scratch slots). Scratch per KV head is O(n / 32768 * G*w*d)
// for the window and last-query aggregations; the all-queries aggregation keeps the LSE of every
// query [Hq, n], plus a [Hq, n, d] for dropkv / obcache_k / obcache_vk (every token's score needs
// the output of every later query).
//
// Numerics: float accumulation; dropkv's ||a - v||^2 is summed from explicit differences on the
// fly (score_terms.h *_dist). Each query's top key (largest logit) is kept apart from the
// forward's accumulator and takes the leave-one-out term (score_terms.h top_term: a_{-top} with
// its own max, 1 - p = rho / (1 + rho)), and the other keys' p is taken relative to it, so no
// score cancels or underflows as p -> 1 (issue 13). NaN/Inf in k, v, the used rows of q, or wo
// throws the reference's message (detected while streaming).
size_t score_workspace_bytes(const ScoreProblem& problem, const ScoreOptions& opt);
void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
           Workspace ws);
}  // namespace cpu

}  // namespace kvevict
