// cpu::score: the float fast path, organized like the GPU algorithm.
//   1. forward: flash-style online softmax over K/V tiles for the window rows of each KV head
//      (all G * w rows share every tile), split over tokens in FIXED chunks of kForwardChunk, then
//      a split-K merge of the (max, sum, output) partials in chunk order;
//   2. score: a streaming pass over tokens recomputing z, p = exp(z - LSE) and the terms of
//      score_terms.h from the norm identity, summing over rows per token;
//   (for dropkv / obcache_k / obcache_vk the forward keeps each row's top key apart from the
//   others' accumulator, and the pass gives the top key the leave-one-out term: score_terms.h
//   top_term, accuracy argument in cpu_passes.h / score_terms.h)
//   3. pooling / derived scores as small follow-ups.
// h2o-style aggregation runs the same two passes over query blocks (LSE of every query, then
// column sums); nothing n x n or w x n x d is ever stored.
// Work is split into items that do not depend on the thread count and every sum has a fixed
// order, so the output is bitwise identical for any number of threads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "kvevict/error.h"
#include "kvevict/score.h"
#include "score/cpu_passes.h"
#include "score/pooling.h"
#include "score/score_terms.h"

namespace kvevict::cpu {
namespace {

using score_detail::kTile;
using score_detail::RowBlock;
using score_detail::RowStats;
using score_detail::TileScratch;

// Tokens per forward split. The partials cost chunks * rows * (d + 2) floats per KV head; at
// 32768 that is < 1% of the w x n logits a materializing implementation keeps (d = 128), while
// n >= 64K still splits for parallelism within one head (MQA).
constexpr int64_t kForwardChunk = 32768;
// Tokens per score-pass work item: enough to amortize reloading the rows' queries (rows * d).
constexpr int64_t kScoreChunk = 2048;
// h2o: query rows per work item of the all-queries passes.
constexpr int64_t kQueryBlock = 64;
// Upper bound on worker scratch slots, whatever num_threads() says.
constexpr int kMaxSlots = 256;
constexpr size_t kAlign = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool is_query_free(Method m) {
  return m == Method::kKNorm || m == Method::kKeyDiff || m == Method::kRandom ||
         m == Method::kStreamingLLM;
}

// Everything the sizes depend on, computed the same way by score_workspace_bytes and score.
struct Plan {
  int64_t n = 0, d = 0, hkv = 0, hq = 0, group = 1, m = 0;
  bool query_free = false;
  bool all_queries = false;
  bool needs_output = false;  // the term needs the attention output a
  int64_t used = 0;           // query rows per head the aggregation reads
  int64_t rows = 0;           // rows per work item: group * used (window), kQueryBlock (h2o)
  int64_t chunks = 0;         // forward splits per KV head (window)
  int64_t wo_rows = 0;

  explicit Plan(const ScoreProblem& p, const ScoreOptions& opt) {
    n = p.num_tokens();
    d = p.head_dim();
    hkv = p.num_kv_heads();
    query_free = is_query_free(opt.method);
    if (query_free) return;
    hq = p.num_q_heads();
    group = hq / hkv;
    m = p.q.shape[1];
    all_queries = opt.aggregate == Aggregate::kAllQueries;
    needs_output = terms::term_needs_output(opt.method);
    used = opt.queries_needed(n);
    rows = all_queries ? std::min<int64_t>(kQueryBlock, n) : group * used;
    chunks = all_queries ? 0 : ceil_div(n, kForwardChunk);
    if (opt.method == Method::kCriticalKV) wo_rows = p.wo.shape[0];
  }
  size_t slot_floats() const {
    // qs [rows, d], m, s and mt [rows], pos and it [rows] int64, tile scratch, one wo row [d],
    // two value rows [d] (the leave-one-out finish).
    return static_cast<size_t>(rows * d + 7 * rows + 3 * d) + TileScratch::floats(d) +
           17 * 16;  // 16 pieces, each padded to 16 floats
  }
};

// The caller's workspace, carved: shared arrays first, then one scratch slot per worker.
struct Layout {
  // window / last-query aggregation: split-K partials per (KV head, chunk, row). After the merge,
  // chunk 0 holds the final values: part_o = a, part_m = LSE, part_s = ||a||^2.
  float* part_o = nullptr;  // [Hkv, chunks, rows, d] sum exp(z - max) v (only if needs_output)
  float* part_m = nullptr;  // [Hkv, chunks, rows] running max logit
  float* part_s = nullptr;  // [Hkv, chunks, rows] sum exp(z - max)
  // The rows' top keys, kept apart from part_o / part_m / part_s (cpu_passes.h forward_range).
  float* part_mt = nullptr;    // [Hkv, chunks, rows] logit of the chunk's top (-inf: none)
  int64_t* part_it = nullptr;  // [Hkv, chunks, rows] its token (-1: none)
  int64_t* top = nullptr;      // [Hkv, rows] the row's top token (only if needs_output)
  terms::TopKey<float>* top_key = nullptr;  // [Hkv, rows] its leave-one-out quantities
  // all-queries aggregation
  float* lse_all = nullptr;    // [Hq, n] LSE of every query
  float* a_all = nullptr;      // [Hq, n, d] output of every query (only if needs_output)
  float* a2_all = nullptr;     // [Hq, n] ||a||^2 (only if needs_output)
  int64_t* top_all = nullptr;  // [Hq, n] top token of every query (needs_output)
  terms::TopKey<float>* top_key_all = nullptr;  // [Hq, n] its leave-one-out quantities
  float* ring = nullptr;                        // [Hkv, kernel] in-place pooling history
  double* key_mean = nullptr;                   // [Hkv, d] keydiff: mean normalized key
  float* slots = nullptr;                       // [slot_count, slot_floats]
  int slot_count = 0;
};

constexpr int kTopKeyFloats = sizeof(terms::TopKey<float>) / sizeof(float);
constexpr int kFixedArrays = 14;

template <class Sizer>
void describe_fixed(const Plan& plan, const ScoreOptions& opt, Sizer&& add) {
  const int64_t top_rows = plan.needs_output ? 1 : 0;  // top keys only where a is used
  if (!plan.query_free && !plan.all_queries) {
    const int64_t partial_rows = plan.hkv * plan.chunks * plan.rows;
    add(0, plan.needs_output ? partial_rows * plan.d : 0);
    add(1, partial_rows);
    add(2, partial_rows);
    add(8, top_rows * partial_rows);
    add(9, top_rows * 2 * partial_rows);  // int64 as 2 floats
    add(10, top_rows * 2 * plan.hkv * plan.rows);
    add(11, top_rows * kTopKeyFloats * plan.hkv * plan.rows);
  }
  if (!plan.query_free && plan.all_queries) {
    add(3, plan.hq * plan.n);
    add(4, plan.needs_output ? plan.hq * plan.n * plan.d : 0);
    add(5, plan.needs_output ? plan.hq * plan.n : 0);
    add(12, top_rows * 2 * plan.hq * plan.n);
    add(13, top_rows * kTopKeyFloats * plan.hq * plan.n);
  }
  add(6, opt.pooling.kind != PoolKind::kNone ? plan.hkv * opt.pooling.kernel : 0);
  add(7, opt.method == Method::kKeyDiff ? 2 * plan.hkv * plan.d : 0);  // doubles as 2 floats
}

size_t fixed_bytes(const Plan& plan, const ScoreOptions& opt) {
  WorkspaceSizer sizer;
  describe_fixed(plan, opt, [&](int, int64_t count) { sizer.add<float>(count, kAlign); });
  sizer.add<float>(0, kAlign);
  return sizer.bytes();
}

size_t slot_bytes(const Plan& plan) {
  return (plan.slot_floats() * sizeof(float) + kAlign - 1) / kAlign * kAlign;
}

int wanted_slots() {
  return std::clamp(num_threads(), 1, kMaxSlots);
}

Layout carve(const Plan& plan, const ScoreOptions& opt, Workspace ws) {
  const size_t fixed = fixed_bytes(plan, opt);
  const size_t per_slot = slot_bytes(plan);
  KVEVICT_CHECK(ws.bytes >= fixed + per_slot, "workspace of ", ws.bytes,
                " bytes is too small for cpu::score; need at least ", fixed + per_slot,
                " (score_workspace_bytes gives the size)");
  KVEVICT_CHECK(ws.data != nullptr, "workspace of ", ws.bytes,
                " bytes has a null data pointer; expected caller-owned host memory");
  Layout lay;
  WorkspaceCarver carver(ws);
  float* arrays[kFixedArrays] = {};
  describe_fixed(plan, opt, [&](int which, int64_t count) {
    arrays[which] = carver.take<float>(static_cast<size_t>(count), kAlign);
  });
  lay.part_o = arrays[0];
  lay.part_m = arrays[1];
  lay.part_s = arrays[2];
  lay.lse_all = arrays[3];
  lay.a_all = arrays[4];
  lay.a2_all = arrays[5];
  lay.ring = arrays[6];
  lay.key_mean = reinterpret_cast<double*>(arrays[7]);
  lay.part_mt = arrays[8];
  lay.part_it = reinterpret_cast<int64_t*>(arrays[9]);
  lay.top = reinterpret_cast<int64_t*>(arrays[10]);
  lay.top_key = reinterpret_cast<terms::TopKey<float>*>(arrays[11]);
  lay.top_all = reinterpret_cast<int64_t*>(arrays[12]);
  lay.top_key_all = reinterpret_cast<terms::TopKey<float>*>(arrays[13]);
  float* slots_begin = carver.take<float>(0, kAlign);
  const size_t left = ws.bytes - carver.used();
  lay.slot_count = static_cast<int>(std::min<size_t>(wanted_slots(), left / per_slot));
  lay.slots = slots_begin;
  return lay;
}

// One worker's scratch inside a slot.
struct Slot {
  float* qs;      // [rows, d] scaled queries
  float* m;       // [rows] running max (h2o forward)
  float* s;       // [rows] running sum (h2o forward)
  float* mt;      // [rows] top logit (h2o forward)
  int64_t* pos;   // [rows] positions
  int64_t* it;    // [rows] top token (h2o forward)
  float* wo_row;  // [d] one row of W_o^h (criticalkv)
  float* vrow;    // [d] a top key's value row (leave-one-out finish)
  TileScratch tile;
};

Slot slot_at(const Plan& plan, const Layout& lay, int index) {
  float* base = lay.slots + static_cast<size_t>(index) * (slot_bytes(plan) / sizeof(float));
  auto take = [&](size_t count) {
    float* p = base;
    base += (count + 15) / 16 * 16;
    return p;
  };
  Slot s;
  s.qs = take(static_cast<size_t>(plan.rows * plan.d));
  s.m = take(static_cast<size_t>(plan.rows));
  s.s = take(static_cast<size_t>(plan.rows));
  s.mt = take(static_cast<size_t>(plan.rows));
  s.pos = reinterpret_cast<int64_t*>(take(static_cast<size_t>(2 * plan.rows)));
  s.it = reinterpret_cast<int64_t*>(take(static_cast<size_t>(2 * plan.rows)));
  s.wo_row = take(static_cast<size_t>(plan.d));
  s.vrow = take(static_cast<size_t>(plan.d));
  const int64_t d = plan.d;
  s.tile.kt = take(static_cast<size_t>(d * kTile));
  s.tile.vt = take(static_cast<size_t>(d * kTile));
  s.tile.vn = take(static_cast<size_t>(d * kTile));
  s.tile.z = take(static_cast<size_t>(score_detail::kRowBlock) * kTile);
  s.tile.av = take(static_cast<size_t>(score_detail::kRowBlock) * kTile);
  s.tile.v2 = take(kTile);
  s.tile.vrow = take(static_cast<size_t>(d));
  return s;
}

// Runs fn(item, slot) for every item; item i goes to slot i % slots, so no two concurrent items
// share scratch. Which slot runs an item never changes its result.
template <class Fn>
void run_items(int64_t items, int slots, Fn&& fn) {
  const int64_t workers = std::min<int64_t>(slots, items);
  parallel_for(workers, [&](int64_t w) {
    for (int64_t i = w; i < items; i += workers) fn(i, static_cast<int>(w));
  });
}

// Row of `t` ([Hkv, n] f32 output) for KV head g.
float* out_row(const TensorView& t, int64_t g) {
  return t.ptr<float>() + g * t.stride[0];
}

// The per-KV-head rows of an [Hkv, n] f32 output.
struct RowsOf {
  float* base;  // [Hkv, n] with row stride `stride`
  int64_t stride;
  float* operator[](int64_t g) const { return base + g * stride; }
};

// Throws the reference's message for the first non-finite input (found by check_finite).
[[noreturn]] void fail_non_finite(const ScoreProblem& p, const ScoreOptions& opt) {
  if (opt.needs_queries()) check_finite(p.q, "q");
  check_finite(p.k, "k");
  check_finite(p.v, "v");
  if (opt.method == Method::kCriticalKV) check_finite(p.wo, "wo");
  KVEVICT_FAIL("scores overflowed to a non-finite value although every input is finite");
}

// Loads the window rows of KV head g (group heads x `used` last queries) into the slot.
bool load_window_rows(const ScoreProblem& p, const Plan& plan, float scale, int64_t g, Slot& s) {
  bool finite = true;
  for (int64_t hl = 0; hl < plan.group; ++hl) {
    finite &= score_detail::load_rows(p.q, g * plan.group + hl, plan.m - plan.used, plan.used,
                                      scale, s.qs + hl * plan.used * plan.d);
    for (int64_t t = 0; t < plan.used; ++t) s.pos[hl * plan.used + t] = plan.n - plan.used + t;
  }
  return finite;
}

// --- window / last-query aggregation --------------------------------------------------------

void window_scores(const ScoreProblem& p, const ScoreOptions& opt, const Plan& plan,
                   const Layout& lay, const RowsOf& acc_rows, std::atomic<bool>& finite) {
  const float scale = p.logit_scale(opt);
  const int64_t R = plan.rows, d = plan.d, C = plan.chunks;
  // 1. Forward partials per (KV head, chunk).
  run_items(plan.hkv * C, lay.slot_count, [&](int64_t item, int si) {
    const int64_t g = item / C, c = item % C;
    Slot s = slot_at(plan, lay, si);
    bool ok = load_window_rows(p, plan, scale, g, s);
    const bool top = plan.needs_output;  // the top key apart (needs_output terms only)
    float* m = lay.part_m + (g * C + c) * R;
    float* sum = lay.part_s + (g * C + c) * R;
    float* o = top ? lay.part_o + (g * C + c) * R * d : nullptr;
    float* mt = top ? lay.part_mt + (g * C + c) * R : nullptr;
    int64_t* it = top ? lay.part_it + (g * C + c) * R : nullptr;
    std::fill(m, m + R, -std::numeric_limits<float>::infinity());
    std::fill(sum, sum + R, 0.0f);
    if (o) std::fill(o, o + R * d, 0.0f);
    if (top) {
      std::fill(mt, mt + R, -std::numeric_limits<float>::infinity());
      std::fill(it, it + R, int64_t{-1});
    }
    const RowBlock rows{s.qs, s.pos, R};
    ok &= score_detail::forward_range(rows, p.k, p.v, g, c * kForwardChunk,
                                      std::min(plan.n, (c + 1) * kForwardChunk), m, sum, o, mt, it,
                                      s.tile);
    if (!ok) finite = false;
  });
  if (!finite) return;
  // Split-K merge in chunk order; the result lands in chunk 0 (part_o = a, part_m = LSE,
  // part_s = ||a||^2) and, with the top keys, in top / top_key.
  parallel_for(plan.hkv, [&](int64_t g) {
    std::vector<float> vrow(plan.needs_output ? d : 0), vtop(plan.needs_output ? d : 0);
    for (int64_t r = 0; r < R; ++r) {
      const float kNegInf = -std::numeric_limits<float>::infinity();
      auto at = [&](int64_t c) { return (g * C + c) * R + r; };
      float* o0 = plan.needs_output ? lay.part_o + (g * C) * R * d + r * d : nullptr;
      if (!plan.needs_output) {
        float mx = kNegInf;
        for (int64_t c = 0; c < C; ++c) mx = nan_max(mx, lay.part_m[at(c)]);
        float total = 0.0f;
        for (int64_t c = 0; c < C; ++c)  // exp(-inf) = 0 for an empty chunk
          total += std::exp(lay.part_m[at(c)] - mx) * lay.part_s[at(c)];
        lay.part_m[at(0)] = mx + std::log(total);
        lay.part_s[at(0)] = 0.0f;
        continue;
      }
      // The row's top: the first chunk's top among the largest (the first key of equal ones).
      // Every other chunk's top joins the others, whose max is m2.
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (lay.part_mt[at(c)] > lay.part_mt[at(best)]) best = c;
      float m2 = kNegInf;
      for (int64_t c = 0; c < C; ++c) {
        m2 = nan_max(m2, lay.part_m[at(c)]);
        if (c != best) m2 = nan_max(m2, lay.part_mt[at(c)]);
      }
      float l = 0.0f;
      if (m2 > kNegInf) {
        const float w0 = std::exp(lay.part_m[at(0)] - m2);  // 0 for an empty chunk
        l = w0 * lay.part_s[at(0)];
        for (int64_t e = 0; e < d; ++e) o0[e] *= w0;
        for (int64_t c = 1; c < C; ++c) {
          const float w = std::exp(lay.part_m[at(c)] - m2);
          l += w * lay.part_s[at(c)];
          const float* oc = lay.part_o + (g * C + c) * R * d + r * d;
          for (int64_t e = 0; e < d; ++e) o0[e] += w * oc[e];
        }
        for (int64_t c = 0; c < C; ++c) {
          if (c == best || lay.part_it[at(c)] < 0) continue;
          const float w = std::exp(lay.part_mt[at(c)] - m2);
          if (!score_detail::load_rows(p.v, g, lay.part_it[at(c)], 1, 1.0f, vrow.data()))
            finite = false;
          l += w;
          for (int64_t e = 0; e < d; ++e) o0[e] += w * vrow[e];
        }
      }
      const int64_t top_token = lay.part_it[at(best)];
      if (!score_detail::load_rows(p.v, g, top_token, 1, 1.0f, vtop.data())) finite = false;
      float a2 = 0.0f;
      lay.part_m[at(0)] = score_detail::finish_row(m2, l, o0, lay.part_mt[at(best)], vtop.data(), d,
                                                   o0, &a2, lay.top_key + g * R + r);
      lay.part_s[at(0)] = a2;
      lay.top[g * R + r] = top_token;
    }
  });
  // 2. Score pass per (KV head, token chunk).
  const int64_t sc = ceil_div(plan.n, kScoreChunk);
  const float floor = static_cast<float>(opt.one_minus_p_floor);
  run_items(plan.hkv * sc, lay.slot_count, [&](int64_t item, int si) {
    const int64_t g = item / sc, c = item % sc;
    Slot s = slot_at(plan, lay, si);
    load_window_rows(p, plan, scale, g, s);
    const RowBlock rows{s.qs, s.pos, R};
    RowStats stats;
    stats.lse = lay.part_m + (g * C) * R;
    stats.a2 = lay.part_s + (g * C) * R;
    stats.a = plan.needs_output ? lay.part_o + (g * C) * R * d : nullptr;
    stats.top = plan.needs_output ? lay.top + g * R : nullptr;
    stats.top_key = plan.needs_output ? lay.top_key + g * R : nullptr;
    const int64_t t0 = c * kScoreChunk, t1 = std::min(plan.n, t0 + kScoreChunk);
    float* acc = acc_rows[g] + t0;
    std::fill(acc, acc + (t1 - t0), 0.0f);
    if (!score_detail::score_range(opt.method, rows, stats, p.k, p.v, g, t0, t1, floor, acc,
                                   s.tile))
      finite = false;
    if (opt.aggregate == Aggregate::kWindow)
      for (int64_t j = 0; j < t1 - t0; ++j) acc[j] /= static_cast<float>(plan.group);
  });
  if (opt.aggregate == Aggregate::kLastQuery) {
    // One score for the layer: the mean over all Hq heads, summed in KV-head order.
    run_items(ceil_div(plan.n, kScoreChunk), lay.slot_count, [&](int64_t c, int) {
      const int64_t t0 = c * kScoreChunk, t1 = std::min(plan.n, t0 + kScoreChunk);
      for (int64_t j = t0; j < t1; ++j) {
        float total = 0.0f;
        for (int64_t g = 0; g < plan.hkv; ++g) total += acc_rows[g][j];
        total /= static_cast<float>(plan.hq);
        for (int64_t g = 0; g < plan.hkv; ++g) acc_rows[g][j] = total;
      }
    });
  }
}

// --- all-queries aggregation (h2o) ----------------------------------------------------------

void all_query_scores(const ScoreProblem& p, const ScoreOptions& opt, const Plan& plan,
                      const Layout& lay, const RowsOf& acc_rows, std::atomic<bool>& finite) {
  const float scale = p.logit_scale(opt);
  const int64_t n = plan.n, d = plan.d, QB = plan.rows;
  const int64_t blocks = ceil_div(n, QB);
  auto load_block = [&](int64_t h, int64_t b, Slot& s) {
    const int64_t i0 = b * QB, count = std::min(QB, n - i0);
    // m = n here: query row i sits at position i.
    const bool ok = score_detail::load_rows(p.q, h, i0, count, scale, s.qs);
    for (int64_t i = 0; i < count; ++i) s.pos[i] = i0 + i;
    return std::make_pair(RowBlock{s.qs, s.pos, count}, ok);
  };
  // 1. LSE (and output) of every query: a causal flash forward per (query head, block).
  run_items(plan.hq * blocks, lay.slot_count, [&](int64_t item, int si) {
    const int64_t h = item / blocks, b = item % blocks;
    Slot s = slot_at(plan, lay, si);
    auto [rows, ok] = load_block(h, b, s);
    const int64_t i0 = b * QB;
    std::fill(s.m, s.m + rows.count, -std::numeric_limits<float>::infinity());
    std::fill(s.s, s.s + rows.count, 0.0f);
    float* o = plan.needs_output ? lay.a_all + (h * n + i0) * d : nullptr;
    if (o) {
      std::fill(o, o + rows.count * d, 0.0f);
      std::fill(s.mt, s.mt + rows.count, -std::numeric_limits<float>::infinity());
      std::fill(s.it, s.it + rows.count, int64_t{-1});
    }
    ok &= score_detail::forward_range(rows, p.k, p.v, h / plan.group, 0, i0 + rows.count, s.m, s.s,
                                      o, o ? s.mt : nullptr, o ? s.it : nullptr, s.tile);
    for (int64_t i = 0; i < rows.count; ++i) {
      if (!o) {
        lay.lse_all[h * n + i0 + i] = s.m[i] + std::log(s.s[i]);
        continue;
      }
      ok &= score_detail::load_rows(p.v, h / plan.group, s.it[i], 1, 1.0f, s.vrow);
      lay.lse_all[h * n + i0 + i] =
          score_detail::finish_row(s.m[i], s.s[i], o + i * d, s.mt[i], s.vrow, d, o + i * d,
                                   &lay.a2_all[h * n + i0 + i], &lay.top_key_all[h * n + i0 + i]);
      lay.top_all[h * n + i0 + i] = s.it[i];
    }
    if (!ok) finite = false;
  });
  if (!finite) return;
  // 2. Column sums per (KV head, token chunk) over every query that sees the chunk.
  const int64_t sc = ceil_div(n, kScoreChunk);
  const float floor = static_cast<float>(opt.one_minus_p_floor);
  run_items(plan.hkv * sc, lay.slot_count, [&](int64_t item, int si) {
    const int64_t g = item / sc, c = item % sc;
    Slot s = slot_at(plan, lay, si);
    const int64_t t0 = c * kScoreChunk, t1 = std::min(n, t0 + kScoreChunk);
    float* acc = acc_rows[g] + t0;
    std::fill(acc, acc + (t1 - t0), 0.0f);
    for (int64_t hl = 0; hl < plan.group; ++hl) {
      const int64_t h = g * plan.group + hl;
      for (int64_t b = t0 / QB; b < blocks; ++b) {
        auto [rows, ok] = load_block(h, b, s);
        RowStats stats;
        stats.lse = lay.lse_all + h * n + b * QB;
        if (plan.needs_output) {
          stats.a = lay.a_all + (h * n + b * QB) * d;
          stats.a2 = lay.a2_all + h * n + b * QB;
          stats.top = lay.top_all + h * n + b * QB;
          stats.top_key = lay.top_key_all + h * n + b * QB;
        }
        score_detail::score_range(opt.method, rows, stats, p.k, p.v, g, t0, t1, floor, acc, s.tile);
      }
    }
    for (int64_t j = t0; j < t1; ++j) {
      float x = acc[j - t0] / static_cast<float>(plan.group);
      if (opt.h2o_normalize) x /= static_cast<float>(n - j);  // queries j..n-1 see token j
      acc[j - t0] = x;
    }
  });
}

// --- follow-ups: vatp, criticalkv, query-free scores -----------------------------------------

// scores[g, j] *= ||v_j||_1 (vatp).
void apply_value_l1(const ScoreProblem& p, const Plan& plan, const Layout& lay,
                    const TensorView& scores, std::atomic<bool>& finite) {
  const int64_t sc = ceil_div(plan.n, kTile * 64);
  run_items(plan.hkv * sc, lay.slot_count, [&](int64_t item, int si) {
    const int64_t g = item / sc, c = item % sc;
    Slot s = slot_at(plan, lay, si);
    float* out = out_row(scores, g);
    const int64_t t0 = c * kTile * 64, t1 = std::min(plan.n, t0 + kTile * 64);
    for (int64_t j0 = t0; j0 < t1; j0 += kTile) {
      const int64_t count = std::min<int64_t>(kTile, t1 - j0);
      if (!score_detail::load_tile(p.v, g, j0, count, true, s.tile.vt)) finite = false;
      float l1[kTile] = {};
      for (int64_t e = 0; e < plan.d; ++e)
        for (int jj = 0; jj < kTile; ++jj) l1[jj] += std::abs(s.tile.vt[e * kTile + jj]);
      for (int64_t jj = 0; jj < count; ++jj) out[j0 + jj] *= l1[jj];
    }
  });
}

// scores[g, j] = (aux[g, j] + eps) * mean_{h in group} ||W_o^h v_j||_1 (criticalkv stage 2).
void apply_output_projection(const ScoreProblem& p, const ScoreOptions& opt, const Plan& plan,
                             const Layout& lay, const ScoreOutput& out, std::atomic<bool>& finite) {
  const int64_t chunk = kTile * 8;
  const int64_t sc = ceil_div(plan.n, chunk);
  const int64_t d = plan.d;
  run_items(plan.hkv * sc, lay.slot_count, [&](int64_t item, int si) {
    const int64_t g = item / sc, c = item % sc;
    Slot s = slot_at(plan, lay, si);
    const float* aux = out_row(out.aux, g);
    float* dst = out_row(out.scores, g);
    const int64_t t0 = c * chunk, t1 = std::min(plan.n, t0 + chunk);
    bool ok = true;
    for (int64_t j0 = t0; j0 < t1; j0 += kTile) {
      const int64_t count = std::min<int64_t>(kTile, t1 - j0);
      ok &= score_detail::load_tile(p.v, g, j0, count, true, s.tile.vt);
      float proj[kTile] = {};
      for (int64_t hl = 0; hl < plan.group; ++hl) {
        const int64_t h = g * plan.group + hl;
        // W_o^h as a [1, D, d] view: columns h*d .. h*d+d-1 of wo.
        TensorView wh = p.wo;
        wh.data = static_cast<char*>(p.wo.data) +
                  h * d * p.wo.stride[1] * static_cast<int64_t>(dtype_size(p.wo.dtype));
        wh.ndim = 3;
        wh.shape = {1, plan.wo_rows, d, 0};
        wh.stride = {0, p.wo.stride[0], p.wo.stride[1], 0};
        for (int64_t o = 0; o < plan.wo_rows; ++o) {
          ok &= score_detail::load_rows(wh, 0, o, 1, 1.0f, s.wo_row);
          float y[kTile] = {};
          for (int64_t e = 0; e < d; ++e) {
            const float w = s.wo_row[e];
            for (int jj = 0; jj < kTile; ++jj) y[jj] += w * s.tile.vt[e * kTile + jj];
          }
          for (int jj = 0; jj < kTile; ++jj) proj[jj] += std::abs(y[jj]);
        }
      }
      const float eps = static_cast<float>(opt.criticalkv_eps);
      for (int64_t jj = 0; jj < count; ++jj)
        dst[j0 + jj] = (aux[j0 + jj] + eps) * (proj[jj] / static_cast<float>(plan.group));
    }
    if (!ok) finite = false;
  });
}

// Reads every K and V value once to reject NaN/Inf like the reference's validate() does, for the
// methods whose passes do not read them all.
void scan_inputs(const ScoreProblem& p, const Plan& plan, const Layout& lay, bool keys, bool values,
                 std::atomic<bool>& finite) {
  const int64_t chunk = kTile * 64;
  const int64_t sc = ceil_div(plan.n, chunk);
  run_items(plan.hkv * sc, lay.slot_count, [&](int64_t item, int si) {
    const int64_t g = item / sc, c = item % sc;
    Slot s = slot_at(plan, lay, si);
    const int64_t t0 = c * chunk, t1 = std::min(plan.n, t0 + chunk);
    bool ok = true;
    for (int64_t j0 = t0; j0 < t1; j0 += kTile) {
      const int64_t count = std::min<int64_t>(kTile, t1 - j0);
      if (keys) ok &= score_detail::load_tile(p.k, g, j0, count, false, s.tile.vn);
      if (values) ok &= score_detail::load_tile(p.v, g, j0, count, false, s.tile.vn);
    }
    if (!ok) finite = false;
  });
}

void query_free_scores(const ScoreProblem& p, const ScoreOptions& opt, const Plan& plan,
                       const Layout& lay, const TensorView& scores, std::atomic<bool>& finite) {
  const int64_t n = plan.n, d = plan.d;
  scan_inputs(p, plan, lay, opt.method != Method::kKNorm && opt.method != Method::kKeyDiff, true,
              finite);
  switch (opt.method) {
    case Method::kStreamingLLM:
      parallel_for(plan.hkv, [&](int64_t g) {
        float* out = out_row(scores, g);
        for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(j);
      });
      return;
    case Method::kRandom:
      parallel_for(plan.hkv, [&](int64_t g) {
        float* out = out_row(scores, g);
        for (int64_t j = 0; j < n; ++j) out[j] = terms::random_uniform<float>(opt.seed, g, j);
      });
      return;
    case Method::kKNorm: {
      const int64_t sc = ceil_div(n, kScoreChunk);
      run_items(plan.hkv * sc, lay.slot_count, [&](int64_t item, int si) {
        const int64_t g = item / sc, c = item % sc;
        Slot s = slot_at(plan, lay, si);
        float* out = out_row(scores, g);
        const int64_t t0 = c * kScoreChunk, t1 = std::min(n, t0 + kScoreChunk);
        for (int64_t j0 = t0; j0 < t1; j0 += kTile) {
          const int64_t count = std::min<int64_t>(kTile, t1 - j0);
          if (!score_detail::load_tile(p.k, g, j0, count, true, s.tile.kt)) finite = false;
          // Squares in double: a float sum of squares overflows from |k| ~ 1.8e19, far below
          // the norms float32 holds (the reference's order for keys up to 3.4e38 / sqrt(d)).
          double sq[kTile] = {};
          for (int64_t e = 0; e < d; ++e)
            for (int jj = 0; jj < kTile; ++jj) {
              const double x = s.tile.kt[e * kTile + jj];
              sq[jj] += x * x;
            }
          for (int64_t jj = 0; jj < count; ++jj)
            out[j0 + jj] = static_cast<float>(-std::sqrt(sq[jj]));
        }
      });
      return;
    }
    case Method::kKeyDiff:
      // Per KV head: the mean normalized key (double, token order), then each key's cosine.
      run_items(plan.hkv, lay.slot_count, [&](int64_t g, int si) {
        Slot s = slot_at(plan, lay, si);
        double* mean = lay.key_mean + g * d;
        std::fill(mean, mean + d, 0.0);
        bool ok = true;
        for (int64_t j0 = 0; j0 < n; j0 += kTile) {
          const int64_t count = std::min<int64_t>(kTile, n - j0);
          ok &= score_detail::load_tile(p.k, g, j0, count, false, s.tile.vn);
          for (int64_t jj = 0; jj < count; ++jj) {
            const float* row = s.tile.vn + jj * d;
            double sq = 0;
            for (int64_t e = 0; e < d; ++e) sq += static_cast<double>(row[e]) * row[e];
            if (sq == 0) continue;  // a zero key has no direction
            const double inv = 1.0 / (std::sqrt(sq) * static_cast<double>(n));
            for (int64_t e = 0; e < d; ++e) mean[e] += row[e] * inv;
          }
        }
        double mean_norm = 0;
        for (int64_t e = 0; e < d; ++e) mean_norm += mean[e] * mean[e];
        mean_norm = std::sqrt(mean_norm);
        float* out = out_row(scores, g);
        for (int64_t j0 = 0; j0 < n; j0 += kTile) {
          const int64_t count = std::min<int64_t>(kTile, n - j0);
          score_detail::load_tile(p.k, g, j0, count, false, s.tile.vn);
          for (int64_t jj = 0; jj < count; ++jj) {
            const float* row = s.tile.vn + jj * d;
            double sq = 0, dot = 0;
            for (int64_t e = 0; e < d; ++e) {
              sq += static_cast<double>(row[e]) * row[e];
              dot += row[e] * mean[e];
            }
            const double denom = std::sqrt(sq) * mean_norm;
            out[j0 + jj] = denom == 0 ? 0.0f : static_cast<float>(-dot / denom);
          }
        }
        if (!ok) finite = false;
      });
      return;
    default: KVEVICT_FAIL("method ", method_name(opt.method), " is not query-free");
  }
}

void check_output(const TensorView& t, const char* what, int64_t hkv, int64_t n) {
  KVEVICT_CHECK(!t.empty(), what, " is empty; expected an f32 [", hkv, ", ", n, "] buffer");
  check_shape(t, what, {hkv, n});
  KVEVICT_CHECK(t.dtype == DType::kF32, what, " has dtype ", dtype_name(t.dtype), "; expected f32");
  KVEVICT_CHECK(t.device == Device::kCpu, what, " lives on the GPU; expected host memory");
  KVEVICT_CHECK(t.stride[1] == 1, what, " has token stride ", t.stride[1], "; expected 1");
}

}  // namespace

size_t score_workspace_bytes(const ScoreProblem& problem, const ScoreOptions& opt) {
  problem.validate(opt, /*check_values=*/false);
  const Plan plan(problem, opt);
  return fixed_bytes(plan, opt) + static_cast<size_t>(wanted_slots()) * slot_bytes(plan);
}

void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
           Workspace ws) {
  problem.validate(opt, /*check_values=*/false);
  KVEVICT_CHECK(problem.k.device == Device::kCpu && problem.v.device == Device::kCpu &&
                    (problem.q.empty() || problem.q.device == Device::kCpu) &&
                    (problem.wo.empty() || problem.wo.device == Device::kCpu),
                "cpu::score reads host memory; an input lives on the GPU");
  const Plan plan(problem, opt);
  check_output(out.scores, "scores", plan.hkv, plan.n);
  if (opt.method == Method::kCriticalKV) check_output(out.aux, "aux", plan.hkv, plan.n);
  const Layout lay = carve(plan, opt, ws);

  std::atomic<bool> finite{true};
  if (plan.query_free) {
    query_free_scores(problem, opt, plan, lay, out.scores, finite);
    if (!finite) fail_non_finite(problem, opt);
    check_scores_finite(out, opt);
    return;
  }
  // The attention sum lands in aux for criticalkv (its stage-1 score), else in scores.
  const TensorView& sums = opt.method == Method::kCriticalKV ? out.aux : out.scores;
  const RowsOf acc_rows{sums.ptr<float>(), sums.stride[0]};
  const bool reads_values = plan.needs_output || opt.method == Method::kObcacheV ||
                            opt.method == Method::kVATP || opt.method == Method::kCriticalKV;
  if (!reads_values) scan_inputs(problem, plan, lay, false, true, finite);
  if (plan.all_queries)
    all_query_scores(problem, opt, plan, lay, acc_rows, finite);
  else
    window_scores(problem, opt, plan, lay, acc_rows, finite);
  if (!finite) fail_non_finite(problem, opt);

  if (opt.pooling.kind != PoolKind::kNone)
    parallel_for(plan.hkv, [&](int64_t g) {
      score_detail::pool_tokens_inplace(acc_rows[g], plan.n, opt.pooling,
                                        lay.ring + g * opt.pooling.kernel);
    });
  if (opt.method == Method::kVATP) apply_value_l1(problem, plan, lay, out.scores, finite);
  if (opt.method == Method::kCriticalKV)
    apply_output_projection(problem, opt, plan, lay, out, finite);
  if (!finite) fail_non_finite(problem, opt);
  check_scores_finite(out, opt);
}

}  // namespace kvevict::cpu
