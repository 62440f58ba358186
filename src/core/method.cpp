#include "kvevict/method.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/number_parse.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

struct NamedMethod {
  const char* name;
  Method method;
};
constexpr NamedMethod kMethods[] = {
    {"dropkv", Method::kDropKV},
    {"obcache_v", Method::kObcacheV},
    {"obcache_k", Method::kObcacheK},
    {"obcache_vk", Method::kObcacheVK},
    {"snapkv", Method::kSnapKV},
    {"h2o", Method::kH2O},
    {"tova", Method::kTOVA},
    {"knorm", Method::kKNorm},
    {"keydiff", Method::kKeyDiff},
    {"vatp", Method::kVATP},
    {"criticalkv", Method::kCriticalKV},
    {"streamingllm", Method::kStreamingLLM},
    {"random", Method::kRandom},
};

std::string join_names() {
  std::string s;
  for (const auto& n : method_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool is_query_free(Method m) {
  return m == Method::kKNorm || m == Method::kKeyDiff || m == Method::kRandom ||
         m == Method::kStreamingLLM;
}

// Parses a whole string as a decimal number (strict: no hex, inf, nan or whitespace).
double parse_double(const std::string& s, const char* what) {
  return parse_decimal(s, what);
}

// Token counts above 2^53 are not exact in a double and no cache holds that many tokens.
constexpr double kMaxTokenCount = 9007199254740992.0;

}  // namespace

const char* method_name(Method m) {
  for (const auto& nm : kMethods)
    if (nm.method == m) return nm.name;
  return "?";
}

const std::vector<std::string>& method_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& nm : kMethods) v.emplace_back(nm.name);
    v.emplace_back("adadropkv");
    v.emplace_back("adakv");
    return v;
  }();
  return names;
}

Method method_from_name(const std::string& name) {
  for (const auto& nm : kMethods)
    if (name == nm.name) return nm.method;
  KVEVICT_FAIL("unknown method '", name, "'; expected one of ", join_names());
}

bool has_measured_default(Method m) {
  return m == Method::kDropKV || m == Method::kObcacheVK;
}

MethodSpec method_parse(const std::string& name) {
  const std::string suffix = ":spec";
  const bool spec_defaults = name.size() > suffix.size() &&
                             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string base = spec_defaults ? name.substr(0, name.size() - suffix.size()) : name;
  MethodSpec spec;
  if (base == "adadropkv") {
    spec.score = ScoreOptions::defaults(Method::kDropKV);
    spec.policy = Policy::kAdaKV;
  } else if (base == "adakv") {
    spec.score = ScoreOptions::defaults(Method::kSnapKV);
    spec.policy = Policy::kAdaKV;
  } else {
    spec.score = ScoreOptions::defaults(method_from_name(base));
    if (spec.score.method == Method::kStreamingLLM) spec.sink = 4;
  }
  if (!spec_defaults && has_measured_default(spec.score.method)) {
    spec.score.window = kMeasuredWindow;
    spec.score.pooling = Pooling{PoolKind::kMax, kMeasuredPoolKernel};
    spec.pin_window = true;
  }
  return spec;
}

Aggregate aggregate_parse(const std::string& s) {
  if (s == "snapkv" || s == "window") return Aggregate::kWindow;
  if (s == "h2o" || s == "all") return Aggregate::kAllQueries;
  if (s == "tova" || s == "last") return Aggregate::kLastQuery;
  KVEVICT_FAIL("unknown aggregation '", s, "'; expected snapkv (window), h2o (all) or tova (last)");
}

const char* aggregate_name(Aggregate a) {
  switch (a) {
    case Aggregate::kWindow: return "snapkv";
    case Aggregate::kAllQueries: return "h2o";
    case Aggregate::kLastQuery: return "tova";
  }
  return "?";
}

Policy policy_parse(const std::string& s) {
  if (s == "uniform") return Policy::kUniform;
  if (s == "adakv") return Policy::kAdaKV;
  KVEVICT_FAIL("unknown policy '", s, "'; expected uniform or adakv");
}

const char* policy_name(Policy p) {
  return p == Policy::kAdaKV ? "adakv" : "uniform";
}

Pooling Pooling::parse(const std::string& s) {
  Pooling p;
  KVEVICT_CHECK(!s.empty(), "empty pooling; expected none, max:K or avg:K with K odd");
  if (s == "none") return p;
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  KVEVICT_CHECK(kind == "max" || kind == "avg", "unknown pooling '", s,
                "'; expected none, max:K or avg:K with K odd");
  p.kind = kind == "max" ? PoolKind::kMax : PoolKind::kAvg;
  KVEVICT_CHECK(colon != std::string::npos, "pooling '", s, "' lacks a kernel size; expected ",
                kind, ":K with K odd, e.g. ", kind, ":7");
  const double k = parse_double(s.substr(colon + 1), "pooling kernel");
  KVEVICT_CHECK(k >= 1 && k <= 1025 && std::floor(k) == k && static_cast<int>(k) % 2 == 1,
                "pooling '", s, "': kernel ", s.substr(colon + 1),
                " is invalid; expected an odd integer in [1, 1025]");
  p.kernel = static_cast<int>(k);
  if (p.kernel == 1) p.kind = PoolKind::kNone;
  return p;
}

std::string Pooling::str() const {
  if (kind == PoolKind::kNone) return "none";
  return std::string(kind == PoolKind::kMax ? "max:" : "avg:") + std::to_string(kernel);
}

Budget Budget::parse(const std::string& s) {
  KVEVICT_CHECK(!s.empty(),
                "empty budget; expected a fraction in (0, 1], a percentage like 10%, "
                "or a token count > 1");
  Budget b;
  if (s.back() == '%') {
    b.value = parse_double(s.substr(0, s.size() - 1), "budget") / 100.0;
    KVEVICT_CHECK(b.value > 0 && b.value <= 1.0, "budget ", s, " is out of range; expected a ",
                  "percentage in (0%, 100%]");
    return b;
  }
  b.value = parse_double(s, "budget");
  KVEVICT_CHECK(std::isfinite(b.value) && b.value > 0, "budget ", s,
                " is out of range; expected a fraction in (0, 1] or a token count > 1");
  KVEVICT_CHECK(b.value <= 1.0 || std::floor(b.value) == b.value, "budget ", s,
                " is neither a fraction <= 1 nor a whole token count");
  KVEVICT_CHECK(b.value <= kMaxTokenCount, "budget ", s,
                " is a token count above 2^53; expected at most the tokens in the cache");
  return b;
}

Budget Budget::from_compression_ratio(double r) {
  KVEVICT_CHECK(std::isfinite(r) && r >= 0.0 && r < 1.0, "compression ratio ", r,
                " is out of range; expected 0 <= r < 1 (the fraction evicted)");
  Budget b;
  b.value = 1.0 - r;
  return b;
}

int64_t Budget::keep_count(int64_t n) const {
  KVEVICT_CHECK(std::isfinite(value) && value > 0, "budget ", value,
                " is out of range; expected a fraction in (0, 1] or a token count > 1");
  if (is_fraction()) {
    // SPEC section 1: n_keep = floor(B * n), and a budget of 0 is an error. A fraction that
    // floors to 0 of a non-empty head is that error too: a head with no rows makes attention
    // over the layer return zeros (an empty head, n = 0, keeps its 0 rows).
    const auto keep = static_cast<int64_t>(std::floor(value * static_cast<double>(n) + 1e-9));
    KVEVICT_CHECK(keep >= 1 || n == 0, "budget ", str(), " keeps 0 of ", n,
                  " tokens (floor(budget * n)); expected a budget that keeps at least 1 (a "
                  "fraction >= 1/",
                  n, " or a token count)");
    return keep;
  }
  // Compared as doubles: casting a count beyond int64 first would be undefined.
  KVEVICT_CHECK(value <= static_cast<double>(n), "budget of ", str(), " tokens exceeds the ", n,
                " tokens in the cache; expected at most ", n);
  return static_cast<int64_t>(value);
}

std::string Budget::str() const {
  std::ostringstream os;
  if (is_fraction() || !(value <= kMaxTokenCount))
    os << value;
  else
    os << static_cast<int64_t>(value);
  return os.str();
}

ScoreOptions ScoreOptions::defaults(Method m) {
  ScoreOptions o;
  o.method = m;
  switch (m) {
    case Method::kDropKV: o.window = 8; break;
    case Method::kObcacheV:
    case Method::kObcacheK:
    case Method::kObcacheVK:
      o.window = 16;
      o.pooling = Pooling{PoolKind::kMax, 7};
      break;
    case Method::kSnapKV:
    case Method::kVATP:
    case Method::kCriticalKV:
      o.window = 32;
      o.pooling = Pooling{PoolKind::kMax, 7};
      break;
    case Method::kH2O:
      o.aggregate = Aggregate::kAllQueries;
      o.window = 0;
      break;
    case Method::kTOVA:
      o.aggregate = Aggregate::kLastQuery;
      o.window = 0;
      break;
    case Method::kKNorm:
    case Method::kKeyDiff:
    case Method::kRandom:
    case Method::kStreamingLLM: o.window = 0; break;
  }
  return o;
}

bool ScoreOptions::needs_queries() const {
  return !is_query_free(method);
}

int64_t ScoreOptions::queries_needed(int64_t n) const {
  if (!needs_queries()) return 0;
  switch (aggregate) {
    case Aggregate::kWindow: return window < n ? window : n;
    case Aggregate::kAllQueries: return n;
    case Aggregate::kLastQuery: return n > 0 ? 1 : 0;
  }
  return 0;
}

int observation_window(const ScoreOptions& score) {
  return score.aggregate == Aggregate::kWindow ? score.window : 0;
}

void ScoreOptions::validate() const {
  KVEVICT_CHECK(window >= 0, "window ", window, " is negative; expected >= 0");
  if (needs_queries() && aggregate == Aggregate::kWindow)
    KVEVICT_CHECK(window >= 1, "method ", method_name(method),
                  " with snapkv aggregation needs a window of at least 1 query; got ", window);
  KVEVICT_CHECK(pooling.kernel >= 1 && pooling.kernel % 2 == 1, "pooling kernel ", pooling.kernel,
                " is invalid; expected an odd integer >= 1");
  KVEVICT_CHECK(one_minus_p_floor > 0 && one_minus_p_floor < 1, "1-p floor ", one_minus_p_floor,
                " is out of range; expected (0, 1)");
  KVEVICT_CHECK(std::isfinite(scale) && scale >= 0, "scale ", scale,
                " is invalid; expected a finite value >= 0 (0 = 1/sqrt(d))");
  KVEVICT_CHECK(!h2o_normalize || aggregate == Aggregate::kAllQueries, "h2o normalization ",
                "divides the column sums of the h2o aggregation; method ", method_name(method),
                needs_queries()
                    ? std::string(" has the ") + aggregate_name(aggregate) + " aggregation"
                    : std::string(" reads no queries"),
                "; expected the h2o aggregation or no normalization");
  KVEVICT_CHECK(!(method == Method::kH2O && aggregate != Aggregate::kAllQueries) &&
                    !(method == Method::kTOVA && aggregate != Aggregate::kLastQuery),
                "method ", method_name(method), " fixes its own aggregation; got ",
                aggregate_name(aggregate));
}

std::string ScoreOptions::describe() const {
  std::ostringstream os;
  os << method_name(method);
  if (needs_queries()) {
    os << " aggregate=" << aggregate_name(aggregate);
    if (aggregate == Aggregate::kAllQueries && h2o_normalize) os << " normalize=1";
  }
  os << " window=" << window << " pool=" << pooling.str();
  if (method == Method::kRandom) os << " seed=" << seed;
  return os.str();
}

void SelectOptions::validate() const {
  KVEVICT_CHECK(std::isfinite(alpha) && alpha >= 0 && alpha <= 1, "adakv alpha ", alpha,
                " is out of range; expected 0 <= alpha <= 1");
  KVEVICT_CHECK(sink >= 0, "sink ", sink, " is negative; expected >= 0");
  KVEVICT_CHECK(window >= 0, "window ", window, " is negative; expected >= 0");
  KVEVICT_CHECK(std::isfinite(budget.value) && budget.value > 0, "budget ", budget.value,
                " is out of range; expected a fraction in (0, 1] or a token count > 1");
}

std::string SelectOptions::describe() const {
  std::ostringstream os;
  os << "policy=" << policy_name(policy) << " budget=" << budget.str() << " sink=" << sink
     << " window=" << window;
  if (policy == Policy::kAdaKV) os << " alpha=" << alpha;
  return os.str();
}

}  // namespace kvevict
