// The eviction methods of SPEC section 2 and the options that configure scoring and selection.
// Every run reports its settings through describe(), so results can be compared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict {

// What is computed per (query, token) pair, before aggregation over queries.
enum class Method : uint8_t {
  kDropKV,        // sum_t (p/(1-p))^2 ||a - v||^2
  kObcacheV,      // sum_t p^2 ||v||^2
  kObcacheK,      // sum_t (p z)^2 ||v - a||^2
  kObcacheVK,     // obcache_v + obcache_k + 2 sum_t p^2 z (||v||^2 - <v, a>)
  kSnapKV,        // sum_t p (window aggregation, pooled)
  kH2O,           // sum_t p over all prompt queries
  kTOVA,          // p of the last query, averaged over all heads of the layer
  kKNorm,         // -||k||
  kKeyDiff,       // -cos(k, mean normalized key)
  kVATP,          // snapkv * ||v||_1
  kCriticalKV,    // two stages: snapkv, then (snapkv + 1e-4) * ||W_o v||_1
  kStreamingLLM,  // sinks + most recent; the score is the position
  kRandom,        // uniform, seeded
};

// Which queries a query-dependent score sums over (SPEC section 2, "aggregation").
enum class Aggregate : uint8_t {
  kWindow,      // snapkv-style: the last `window` queries, optional pooling
  kAllQueries,  // h2o-style: every prompt query (column sums of the causal attention matrix)
  kLastQuery,   // tova-style: the last query only, averaged over ALL heads of the layer
};

enum class PoolKind : uint8_t { kNone, kMax, kAvg };

// 1-D pooling along tokens with stride 1 and "same" padding (kernel/2 each side). Max pads with
// -inf; avg divides by the kernel size (zeros padded, PyTorch's count_include_pad default, as
// SnapKV and kvpress use). Applied to the per-KV-head score, after the group average.
struct Pooling {
  PoolKind kind = PoolKind::kNone;
  int kernel = 1;                              // odd, >= 1
  static Pooling parse(const std::string& s);  // "none", "max:7", "avg:5"
  std::string str() const;
};

enum class Policy : uint8_t {
  kUniform,  // every KV head keeps the same number of tokens
  kAdaKV,    // per-head budgets from the layer's flattened top scores (Feng et al.)
};

// A budget as SPEC section 1 defines it: value <= 1 is the kept fraction, value > 1 a token count.
struct Budget {
  double value = 1.0;
  // "0.1", "10%", "2048". Throws on 0, negative, NaN or a non-integer count.
  static Budget parse(const std::string& s);
  // kvpress spelling: compression_ratio r keeps the fraction 1 - r (0 <= r < 1).
  static Budget from_compression_ratio(double r);
  bool is_fraction() const { return value <= 1.0; }
  // Tokens kept out of n for one-shot eviction; a count above n, or a fraction that keeps 0 of
  // n >= 1 tokens, is an error naming both.
  int64_t keep_count(int64_t n) const;
  std::string str() const;
};

struct ScoreOptions {
  Method method = Method::kDropKV;
  Aggregate aggregate = Aggregate::kWindow;
  // Observation window: the number of last prompt queries kWindow sums over, and the number of
  // last tokens selection protects.
  int window = 8;
  Pooling pooling;
  bool h2o_normalize = false;        // divide column sums by the number of queries that see j
  double one_minus_p_floor = 1e-12;  // clamp of 1 - p (dropkv)
  double criticalkv_eps = 1e-4;      // (snapkv + eps) * ||W_o v||_1
  uint64_t seed = 0;                 // random
  float scale = 0.0f;                // logit scale; 0 means 1/sqrt(d)

  // The SPEC defaults for a method: dropkv w=8; snapkv/vatp/criticalkv w=32 max:7;
  // obcache_* w=16 max:7; h2o all queries; tova last query; others no queries.
  static ScoreOptions defaults(Method m);
  // True when the score needs query vectors (not knorm, keydiff, random, streamingllm).
  bool needs_queries() const;
  // How many trailing queries the score reads: window, 1 (tova), or n (h2o), 0 if none.
  int64_t queries_needed(int64_t n) const;
  void validate() const;         // throws naming the bad option
  std::string describe() const;  // one-line, e.g. "dropkv aggregate=window w=8 pool=none"
};

// The trailing tokens a score's selection protects (SelectOptions::window): its observation
// window for windowed scores, none for the others (h2o / tova protect nothing beyond sinks;
// SPEC section 3).
int observation_window(const ScoreOptions& score);

struct SelectOptions {
  Policy policy = Policy::kUniform;
  Budget budget;
  double alpha = 0.2;  // adakv: B_h = f_h (1 - alpha) + alpha B
  int sink = 0;        // first tokens always kept
  int window = 0;      // last tokens always kept (normally ScoreOptions::window)
  void validate() const;
  std::string describe() const;
};

// Method names as users type them; "adadropkv" and "adakv" set the adakv policy as well.
struct MethodSpec {
  ScoreOptions score;
  Policy policy = Policy::kUniform;
  int sink = 0;  // streamingllm defaults to 4
  // The window is score.window in both query modes; otherwise a query-aware prompt's question is
  // the window (PrefillEviction::make). True for the measured defaults below.
  bool pin_window = false;
};

// kvevict's defaults where they were chosen by measurement (docs/RESULTS.md, "Defaults chosen by
// measurement"): DropKV's window {8, 16, 32} x pooling {none, max:7, max:11, avg:7} ablation on
// DEV seeds of the RULER tasks picked w = 32 (pinned in both modes) and max-pooling 11 for dropkv
// and obcache_vk; adadropkv is dropkv's score under the adakv policy and takes it too.
// "METHOD:spec" keeps SPEC section 2's defaults.
constexpr int kMeasuredWindow = 32;
constexpr int kMeasuredPoolKernel = 11;
bool has_measured_default(Method m);  // dropkv, obcache_vk

// Parses "dropkv", "adadropkv", "obcache_vk", "snapkv", "adakv" (= snapkv scores + adakv policy),
// "h2o", "tova", "knorm", "keydiff", "vatp", "criticalkv", "streamingllm", "random", each
// optionally followed by ":spec" (SPEC section 2's defaults instead of the measured ones; the
// same for methods without measured defaults). Throws naming the bad value and the valid ones.
MethodSpec method_parse(const std::string& name);
Method method_from_name(const std::string& name);  // plain method names only
const char* method_name(Method m);
const std::vector<std::string>& method_names();   // everything method_parse accepts
Aggregate aggregate_parse(const std::string& s);  // "snapkv"|"window", "h2o"|"all", "tova"|"last"
const char* aggregate_name(Aggregate a);
Policy policy_parse(const std::string& s);
const char* policy_name(Policy p);

}  // namespace kvevict
