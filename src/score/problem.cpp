// ScoreProblem checks shared by every backend: one place that says what a valid input is.
#include <cmath>

#include "kvevict/error.h"
#include "kvevict/score.h"

namespace kvevict {
namespace {

bool is_float_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}

void check_float(const TensorView& t, const char* what) {
  KVEVICT_CHECK(is_float_type(t.dtype), what, " has dtype ", dtype_name(t.dtype),
                "; expected f32, f16, bf16 or f64");
}

}  // namespace

void check_scores_finite(const ScoreOutput& out, const ScoreOptions& opt) {
  for (const TensorView* t : {&out.scores, &out.aux}) {
    if (t->empty()) continue;
    for (int64_t h = 0; h < t->shape[0]; ++h) {
      const float* row = t->ptr<float>() + h * t->stride[0];
      for (int64_t j = 0; j < t->shape[1]; ++j)
        KVEVICT_CHECK(std::isfinite(row[j * t->stride[1]]), method_name(opt.method),
                      t == &out.aux ? " aux score" : " score", " of head ", h, " row ", j, " is ",
                      row[j * t->stride[1]],
                      " from finite q, k, v: it overflows float32 (magnitude above 3.4e38); "
                      "expected inputs whose scores fit float32 (scale them down)");
    }
  }
}

float ScoreProblem::logit_scale(const ScoreOptions& opt) const {
  if (scale != 0.0f) return scale;
  if (opt.scale != 0.0f) return opt.scale;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim())));
}

void ScoreProblem::validate(const ScoreOptions& opt, bool check_values) const {
  // Enum values from a cast or a corrupt config: reject before anything switches on them.
  KVEVICT_CHECK(static_cast<int>(opt.method) <= static_cast<int>(Method::kRandom), "method code ",
                static_cast<int>(opt.method), " is unknown; expected one of ",
                static_cast<int>(Method::kRandom) + 1, " methods of method.h");
  KVEVICT_CHECK(opt.aggregate == Aggregate::kWindow || opt.aggregate == Aggregate::kAllQueries ||
                    opt.aggregate == Aggregate::kLastQuery,
                "aggregation code ", static_cast<int>(opt.aggregate),
                " is unknown; expected window, all queries or last query");
  KVEVICT_CHECK(opt.pooling.kind == PoolKind::kNone || opt.pooling.kind == PoolKind::kMax ||
                    opt.pooling.kind == PoolKind::kAvg,
                "pooling code ", static_cast<int>(opt.pooling.kind),
                " is unknown; expected none, max or avg");
  opt.validate();
  KVEVICT_CHECK(!k.empty(), "k is empty; expected [Hkv, n, d] keys");
  KVEVICT_CHECK(!v.empty(), "v is empty; expected [Hkv, n, d] values");
  check_shape(k, "k", {-1, -1, -1});
  check_shape(v, "v", {k.shape[0], k.shape[1], k.shape[2]});
  check_float(k, "k");
  check_float(v, "v");
  // Before the checks below read the sizes and before head_dim() / num_kv_heads() narrow them.
  check_indexable(k, "k");
  check_indexable(v, "v");
  check_indexable(q, "q");
  check_indexable(wo, "wo");
  KVEVICT_CHECK(k.shape[0] >= 1, "k has ", k.shape[0], " KV heads; expected at least 1");
  KVEVICT_CHECK(k.shape[1] >= 1, "k has ", k.shape[1], " tokens; expected at least 1");
  KVEVICT_CHECK(k.shape[2] >= 1, "k has head dim ", k.shape[2], "; expected at least 1");
  KVEVICT_CHECK(k.device == v.device, "k and v live on different devices");
  KVEVICT_CHECK(std::isfinite(scale) && scale >= 0, "problem scale ", scale,
                " is invalid; expected a finite value >= 0 (0 = use the options' scale)");
  const int64_t n = num_tokens();
  const int64_t d = head_dim();
  const int64_t hkv = num_kv_heads();

  if (!opt.needs_queries()) {
    KVEVICT_CHECK(opt.pooling.kind == PoolKind::kNone, "pooling ", opt.pooling.str(),
                  " was requested for the query-free method ", method_name(opt.method),
                  "; expected none (pooling smooths attention scores)");
    KVEVICT_CHECK(opt.aggregate == Aggregate::kWindow, "the ", aggregate_name(opt.aggregate),
                  " aggregation was requested for the query-free method ", method_name(opt.method),
                  "; expected none (it reads no queries to aggregate)");
  } else {
    KVEVICT_CHECK(!q.empty(), "method ", method_name(opt.method), " needs queries but q is empty;",
                  " expected [Hq, m, d] with m >= ", opt.queries_needed(n));
    KVEVICT_CHECK(q.ndim == 3, "q has shape ", q.shape_str(), "; expected [Hq, m, d]");
    check_float(q, "q");
    KVEVICT_CHECK(q.device == k.device, "q and k live on different devices");
    KVEVICT_CHECK(q.shape[2] == d, "q has head dim ", q.shape[2], " but k has head dim ", d,
                  "; expected them equal");
    const int64_t hq = q.shape[0];
    KVEVICT_CHECK(hq >= 1 && hq % hkv == 0, "q has ", hq, " heads, not a multiple of the ", hkv,
                  " KV heads; expected Hq = G * Hkv");
    const int64_t m = q.shape[1];
    const int64_t need = opt.queries_needed(n);
    KVEVICT_CHECK(m >= need, "q holds ", m, " queries but ", method_name(opt.method), " with ",
                  aggregate_name(opt.aggregate), " aggregation needs ", need, " (n = ", n,
                  "); expected at least ", need,
                  opt.aggregate == Aggregate::kWindow
                      ? " (the window: set it to the queries you have, e.g. --window / window=)"
                      : "");
    KVEVICT_CHECK(m <= n, "q holds ", m, " queries but the layer has only ", n,
                  " tokens; expected the queries of the last m <= n prompt tokens");
    if (opt.method == Method::kCriticalKV) {
      KVEVICT_CHECK(!wo.empty(), "criticalkv needs the output projection wo [D, Hq*d]; got none");
      KVEVICT_CHECK(wo.ndim == 2 && wo.shape[1] == hq * d && wo.shape[0] >= 1, "wo has shape ",
                    wo.shape_str(), "; expected [D, ", hq * d, "] (Hq * d columns)");
      check_float(wo, "wo");
      KVEVICT_CHECK(wo.device == k.device, "wo and k live on different devices");
    }
  }

  if (check_values) {
    check_finite(k, "k");
    check_finite(v, "v");
    if (opt.needs_queries()) check_finite(q, "q");
    if (opt.method == Method::kCriticalKV) check_finite(wo, "wo");
  }
}

}  // namespace kvevict
