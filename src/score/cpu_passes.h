// The two streaming passes of the CPU score path, over one KV head and one token range:
//   forward_range  flash-style online softmax: running (max, sum, unnormalized output) per row,
//                  with the row's top key (largest logit) kept APART from that accumulator
//   score_range    recomputes the logits, p from the LSE, and sums the per-(row, token) terms of
//                  score_terms.h over rows into a per-token accumulator; the row's top key takes
//                  the leave-one-out term (score_terms.h top_term)
// Rows are query rows of ONE KV head (any mix of its group's heads and positions), already
// converted to float and multiplied by the logit scale. K/V tiles of kTile tokens are converted to
// float once per tile and shared by all rows, so K and V stream once per (KV head, pass).
#pragma once

#include <cstdint>

#include "kvevict/method.h"
#include "kvevict/tensor.h"
#include "score/score_terms.h"

namespace kvevict::score_detail {

constexpr int kTile = 32;      // tokens per K/V tile (kTile * d floats stay in L1 for d <= 128)
constexpr int kRowBlock = 16;  // rows whose logits are kept at once ([kRowBlock, kTile] block)

// Scratch of one worker, carved from the caller's workspace.
struct TileScratch {
  float* kt =
      nullptr;  // [d, kTile] keys of the tile, transposed (dot products vectorize over tokens)
  float* vt = nullptr;    // [d, kTile] values of the tile, transposed (score pass)
  float* vn = nullptr;    // [kTile, d] values of the tile, row-major (forward pass: o += p v)
  float* z = nullptr;     // [kRowBlock, kTile] logits, then probabilities
  float* av = nullptr;    // [kRowBlock, kTile] <a_row, v_token> (dropkv: ||a_row - v_token||^2)
  float* v2 = nullptr;    // [kTile] ||v_token||^2
  float* vrow = nullptr;  // [d] one value row (a former top key joining the others)
  static size_t floats(int64_t d) { return 3 * d * kTile + 2 * kRowBlock * kTile + kTile + d; }
};

struct RowBlock {
  const float* q = nullptr;      // [count, d] queries times the logit scale
  const int64_t* pos = nullptr;  // [count] position of each row: it sees tokens 0..pos
  int64_t count = 0;
};

// Converts tokens [j0, j0 + count) of KV head `head` of t ([H, n, d], f32/f16/bf16/f64, any
// strides) to float: transposed into dst [d, kTile] when `transposed`, else row-major [kTile, d].
// Tokens count..kTile-1 are zero-filled. Returns false when a loaded value is NaN or Inf.
bool load_tile(const TensorView& t, int64_t head, int64_t j0, int64_t count, bool transposed,
               float* dst);

// Converts rows of a [H, m, d] tensor to float times `scale`: dst[i] = scale * src[head, row0+i].
// Returns false when a value is NaN or Inf.
bool load_rows(const TensorView& t, int64_t head, int64_t row0, int64_t count, float scale,
               float* dst);

// Online softmax of the rows over tokens [t0, t1) (masked by each row's position). m, s, o are the
// running state: m [count] max logit (-inf when nothing seen yet), s [count] sum of exp(z - m),
// o [count, d] sum of exp(z - m) v. They are updated in place, so a caller can chain ranges.
// With mt / it (the row's top key: its logit, -inf for none, and its token index, -1), the top
// key is NOT in (m, s, o): they hold the other keys, shifted by the others' own max, so they do
// not underflow however far the top dominates. When a later key takes the top, the former top is
// ADDED to the others (its value row re-read from v): nothing is ever subtracted. Ties keep the
// first key. mt / it null: every key is in (m, s, o) (o may then be null too).
// Returns false when a K/V value is not finite.
bool forward_range(const RowBlock& rows, const TensorView& k, const TensorView& v, int64_t head,
                   int64_t t0, int64_t t1, float* m, float* s, float* o, float* mt, int64_t* it,
                   TileScratch& ws);

// Adds one key (logit z, value row vrow [d]) to an online-softmax state (m, s, o [d]).
void add_key(float z, const float* vrow, int64_t d, float& m, float& s, float* o);

// The row's attention output and its top key's leave-one-out quantities, from the others'
// unnormalized state (m2, l, o_oth [d]; l = 0: no other key) and the top key (logit mt, value row
// v_top [d]): a = (v_top + rho a_{-top}) / (1 + rho) into a_out [d] (may alias o_oth), with
// rho = l exp(m2 - mt); returns lse = mt + log1p(rho) and ||a||^2 in a2.
float finish_row(float m2, float l, float* o_oth, float mt, const float* v_top, int64_t d,
                 float* a_out, float* a2, terms::TopKey<float>* top);

// Per-row inputs of the score pass, from the forward pass.
struct RowStats {
  const float* a = nullptr;      // [count, d] attention output of each row (only for methods whose
                                 // term needs it: dropkv, obcache_k, obcache_vk)
  const float* lse = nullptr;    // [count] log-sum-exp of each row's logits (scaled)
  const float* a2 = nullptr;     // [count] ||a||^2
  const int64_t* top = nullptr;  // [count] the row's top key (with a)
  const terms::TopKey<float>* top_key = nullptr;  // [count] its leave-one-out quantities
};

// Adds to acc[j - t0] (j in [t0, t1)) the sum over the rows that see token j of the term of
// `method` (score_terms.h); each row's top key (stats.top) takes top_term. Rows are summed in
// order, so the result does not depend on how the caller splits tokens among threads. `floor`
// clamps 1 - p (dropkv; it never binds below the top key, where p <= 1/2).
bool score_range(Method method, const RowBlock& rows, const RowStats& stats, const TensorView& k,
                 const TensorView& v, int64_t head, int64_t t0, int64_t t1, float floor, float* acc,
                 TileScratch& ws);

}  // namespace kvevict::score_detail
