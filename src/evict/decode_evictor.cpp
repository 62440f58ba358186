// Decode-time dynamic eviction (SPEC section 5): a running per-row score and in-place eviction
// of heads that outgrow budget + slack.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/parallel.h"
#include "core/parallel_if_large.h"
#include "kvevict/backend.h"
#include "kvevict/decode_evict.h"
#include "kvevict/error.h"
#include "kvevict/select.h"
#include "score/score_terms.h"

namespace kvevict {
namespace {

// Rows a head may be given at most (budget + slack): far beyond any context, and small enough
// that capacity_per_head() cannot overflow.
constexpr int64_t kMaxRowsPerHead = int64_t{1} << 40;

struct NamedScore {
  const char* name;
  DecodeScore score;
};
constexpr NamedScore kScores[] = {
    {"h2o", DecodeScore::kAttentionSum},   {"tova", DecodeScore::kTOVA},
    {"dropkv", DecodeScore::kDropKV},      {"obcache_v", DecodeScore::kObcacheV},
    {"obcache_k", DecodeScore::kObcacheK}, {"obcache_vk", DecodeScore::kObcacheVK},
};

float load_f(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
}

}  // namespace

DecodeScore decode_score_parse(const std::string& s) {
  for (const auto& ns : kScores)
    if (s == ns.name) return ns.score;
  if (s == "attention_sum" || s == "attention-sum") return DecodeScore::kAttentionSum;
  KVEVICT_FAIL("unknown decode score '", s,
               "'; expected h2o (attention-sum), tova, dropkv, obcache_v, obcache_k or obcache_vk");
}

const char* decode_score_name(DecodeScore s) {
  for (const auto& ns : kScores)
    if (s == ns.score) return ns.name;
  return "?";
}

void DecodeEvictOptions::validate() const {
  KVEVICT_CHECK(budget > 0, "decode budget ", budget, " is invalid; expected > 0 tokens per head");
  KVEVICT_CHECK(slack >= 0, "decode slack ", slack, " is negative; expected >= 0");
  // capacity_per_head() = budget + slack + 1 must not overflow (a cache of that many rows a head
  // could not be allocated anyway).
  KVEVICT_CHECK(budget <= kMaxRowsPerHead && slack <= kMaxRowsPerHead - budget, "decode budget ",
                budget, " + slack ", slack, " is more than ", kMaxRowsPerHead,
                " rows a head; expected a budget + slack a cache can hold");
  KVEVICT_CHECK(recent >= 0 && sink >= 0, "recent ", recent, " / sink ", sink,
                " is negative; expected >= 0");
  KVEVICT_CHECK(budget >= static_cast<int64_t>(recent) + sink, "decode budget ", budget,
                " is below the ", recent + sink, " protected rows (recent ", recent, " + sink ",
                sink, "); expected budget >= recent + sink");
  KVEVICT_CHECK(std::isfinite(scale) && scale >= 0, "scale ", scale,
                " is invalid; expected a finite value >= 0 (0 = 1/sqrt(d))");
  KVEVICT_CHECK(std::isfinite(softcap) && softcap >= 0, "softcap ", softcap,
                " is invalid; expected >= 0 (0 = off)");
  KVEVICT_CHECK(one_minus_p_floor > 0 && one_minus_p_floor < 1, "1-p floor ", one_minus_p_floor,
                " is out of range; expected (0, 1)");
}

std::string DecodeEvictOptions::describe() const {
  std::ostringstream os;
  os << "decode score=" << decode_score_name(score) << " budget=" << budget << " slack=" << slack
     << " recent=" << recent << " sink=" << sink;
  return os.str();
}

DecodeEvictor::DecodeEvictor(DecodeEvictOptions opt, Backend* backend) : opt_(opt) {
  opt_.validate();
  if (backend == nullptr) {
    owned_ = make_cpu_backend();
    backend = owned_.get();
  }
  backend_ = backend;
}
DecodeEvictor::~DecodeEvictor() = default;
DecodeEvictor::DecodeEvictor(DecodeEvictor&&) noexcept = default;
DecodeEvictor& DecodeEvictor::operator=(DecodeEvictor&&) noexcept = default;

// Per head: the logits of every row, the top row (largest logit, the first of equal ones) and
// rho = sum_{j != top} exp(z_j - z_top), all in double; p_j = exp(z_j - z_top) / (1 + rho)
// relative to the top (score_terms.h other_prob). Rows other than the top (p <= 1/2) take the
// step's a in the norm-identity terms; the top row takes the leave-one-out form
// (score_terms.h top_term, issue 13) when it holds p >= 1/2, with a_{-top} accumulated here over
// the other rows (their own max, so no underflow however far the top dominates): the identity
// would divide the rounding of a - v_top by (1 - p)^2.
void DecodeEvictor::step_scores(const KVLayerView& cache, const DecodeStep& step, int kv_head,
                                float* out) const {
  const int d = cache.head_dim;
  const int hq = static_cast<int>(step.q.shape[0]);
  const int group = hq / cache.num_kv_heads;
  const int64_t len = cache.lens[kv_head];
  if (len == 0) return;  // no row to score (and no top row to read)
  const int64_t base = cache.offsets[kv_head];
  const float scale = opt_.scale != 0.0f ? opt_.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const bool uses_a = opt_.score == DecodeScore::kDropKV || opt_.score == DecodeScore::kObcacheK ||
                      opt_.score == DecodeScore::kObcacheVK;
  const Method method = opt_.score == DecodeScore::kDropKV      ? Method::kDropKV
                        : opt_.score == DecodeScore::kObcacheV  ? Method::kObcacheV
                        : opt_.score == DecodeScore::kObcacheK  ? Method::kObcacheK
                        : opt_.score == DecodeScore::kObcacheVK ? Method::kObcacheVK
                                                                : Method::kH2O;
  std::vector<double> acc(len, 0.0), z(len);
  std::vector<double> a_oth(d);
  for (int g = 0; g < group; ++g) {
    const int h = kv_head * group + g;
    const float* q = step.q.ptr<float>() + step.q.offset(h);
    const float* a = step.a.ptr<float>() + step.a.offset(h);
    int64_t top = 0;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t row = (base + j) * d;
      float dot = 0.0f;
      for (int i = 0; i < d; ++i) dot += q[i] * load_f(cache.k, cache.dtype, row + i);
      z[j] = static_cast<double>(dot) * scale;
      if (opt_.softcap > 0) z[j] = opt_.softcap * std::tanh(z[j] / opt_.softcap);
      if (z[j] > z[top]) top = j;
    }
    double m2 = -INFINITY, l_oth = 0;
    for (int64_t j = 0; j < len; ++j)
      if (j != top) m2 = std::max(m2, z[j]);
    for (int64_t j = 0; j < len && m2 > -INFINITY; ++j)
      if (j != top) l_oth += std::exp(z[j] - m2);
    const double rho = l_oth > 0 ? l_oth * std::exp(m2 - z[top]) : 0.0;
    // The step's lse is not needed for p (recomputed above in double, which stays right where a
    // float lse rounds); it is the caller's word for the attention that produced `a`, so a
    // different one means a, q, the cache, scale or softcap disagree and the scores would be
    // wrong. Float attention over the same rows agrees to ~1e-6 relative; 1e-3 leaves room for
    // any summation order.
    const double lse_here = z[top] + std::log1p(rho);
    const double lse_given = step.lse.ptr<float>()[step.lse.offset(h)];
    KVEVICT_CHECK(std::abs(lse_given - lse_here) <= 1e-3 * (1 + std::abs(lse_here)), "step lse[", h,
                  "] is ", lse_given, " but q and the cache give ", lse_here, " (scale ", scale,
                  ", softcap ", opt_.softcap,
                  "); expected the log-sum-exp of the attention that produced a over this cache");
    terms::TopKey<double> tk;
    terms::top_probs(rho, tk.p, tk.omp);
    tk.z = z[top];
    const bool leave_one_out = uses_a && rho <= 1.0;  // p_top >= 1/2
    if (leave_one_out) {
      std::fill(a_oth.begin(), a_oth.end(), 0.0);
      for (int64_t j = 0; j < len && l_oth > 0; ++j) {
        if (j == top) continue;
        const double w = std::exp(z[j] - m2) / l_oth;
        for (int i = 0; i < d; ++i)
          a_oth[i] += w * load_f(cache.v, cache.dtype, (base + j) * d + i);
      }
      for (int i = 0; i < d; ++i) {
        const double vt = load_f(cache.v, cache.dtype, (base + top) * d + i), diff = vt - a_oth[i];
        tk.d2 += diff * diff;
        tk.vdiff += vt * diff;
        tk.v2 += vt * vt;
      }
    }
    double a2 = 0;
    for (int i = 0; i < d; ++i) a2 += static_cast<double>(a[i]) * a[i];
    for (int64_t j = 0; j < len; ++j) {
      if (j == top && leave_one_out) {
        acc[j] += terms::top_term(method, tk);
        continue;
      }
      const int64_t row = (base + j) * d;
      double v2 = 0, av = 0;
      if (opt_.score != DecodeScore::kAttentionSum && opt_.score != DecodeScore::kTOVA) {
        for (int i = 0; i < d; ++i) {
          const double vi = load_f(cache.v, cache.dtype, row + i);
          v2 += vi * vi;
          av += a[i] * vi;
        }
      }
      const double p = j == top ? tk.p : terms::other_prob(std::exp(z[j] - z[top]), tk.p);
      double s = 0;
      switch (opt_.score) {
        case DecodeScore::kAttentionSum:
        case DecodeScore::kTOVA: s = terms::attention_term(p); break;
        case DecodeScore::kDropKV:
          s = terms::dropkv_term(p, j == top ? tk.omp : 1.0 - p, a2, v2, av);
          break;
        case DecodeScore::kObcacheV: s = terms::obcache_v_term(p, v2); break;
        case DecodeScore::kObcacheK: s = terms::obcache_k_term(p, z[j], a2, v2, av); break;
        case DecodeScore::kObcacheVK: s = terms::obcache_vk_term(p, z[j], a2, v2, av); break;
      }
      acc[j] += s;
    }
  }
  for (int64_t j = 0; j < len; ++j) out[j] = static_cast<float>(acc[j] / group);
}

void DecodeEvictor::accumulate(const KVLayerView& c, const DecodeStep& st) const {
  c.validate("decode cache");
  KVEVICT_CHECK(c.device == Device::kCpu, "DecodeEvictor needs a host cache");
  KVEVICT_CHECK(c.score_acc != nullptr,
                "decode cache has no score accumulator; expected a cache "
                "built with score_acc");
  check_shape(st.q, "step q", {-1, c.head_dim});
  const int64_t hq = st.q.shape[0];
  KVEVICT_CHECK(hq > 0 && hq % c.num_kv_heads == 0, "step q has ", hq,
                " heads; expected a positive multiple of ", c.num_kv_heads);
  check_shape(st.a, "step a", {hq, c.head_dim});
  check_shape(st.lse, "step lse", {hq});
  for (const TensorView* t : {&st.q, &st.a, &st.lse})
    KVEVICT_CHECK(t->dtype == DType::kF32 && t->inner_contiguous() && t->device == Device::kCpu,
                  "decode step tensors must be host f32 with contiguous rows");
  // A NaN in q or a reached every accumulator of its KV head (and `z[j] > z[top]` never moved
  // past a NaN logit), so the next cut evicted by NaN.
  check_finite(st.q, "step q");
  check_finite(st.a, "step a");
  check_finite(st.lse, "step lse");
  // Every head's scores first, the accumulators after: a step refused for one head (its lse,
  // step_scores) leaves every accumulator as it was.
  std::vector<float> scores(static_cast<size_t>(c.offsets[c.num_kv_heads]));
  detail::parallel_for_if_large(
      c.num_kv_heads, c.total_len() * c.head_dim * (hq / c.num_kv_heads),
      [&](int64_t h) { step_scores(c, st, static_cast<int>(h), scores.data() + c.offsets[h]); });
  for (int h = 0; h < c.num_kv_heads; ++h) {
    const float* s = scores.data() + c.offsets[h];
    float* acc = c.score_acc + c.offsets[h];
    if (opt_.score == DecodeScore::kTOVA)
      std::copy(s, s + c.lens[h], acc);
    else
      for (int64_t j = 0; j < c.lens[h]; ++j) acc[j] += s[j];
  }
}

SegmentCut DecodeEvictor::plan(const KVLayerView& c) const {
  KVEVICT_CHECK(c.has_host_table(), "decode cache has no host segment table; expected one");
  SegmentCut cut;
  cut.keep = opt_.budget;
  cut.sink = opt_.sink;
  cut.recent = opt_.recent;
  for (int h = 0; h < c.num_kv_heads; ++h)
    if (c.lens[h] > opt_.budget + opt_.slack) cut.heads.push_back(h);
  return cut;
}

int64_t DecodeEvictor::evict(const KVLayerView& c) const {
  c.validate("decode cache");
  KVEVICT_CHECK(c.score_acc != nullptr, "decode cache has no score accumulator");
  KVEVICT_CHECK(c.device == backend_->device(), "decode cache lives on another device than the ",
                backend_->name(), " backend");
  const SegmentCut cut = plan(c);
  if (cut.heads.empty()) return 0;
  int64_t evicted = 0;
  for (int32_t h : cut.heads) evicted += c.lens[h] - cut.keep;
  backend_->cut_segments(c, cut);
  return evicted;
}

int64_t DecodeEvictor::step(const KVLayerView& c, const DecodeStep& st) const {
  accumulate(c, st);
  return evict(c);
}

}  // namespace kvevict
