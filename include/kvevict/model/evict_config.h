// What a session evicts and when (SPEC section 5), and the one mapping from a method as users
// name it to that configuration: every command, the evaluation harness and the benchmarks build
// their EvictConfig here, so the observation window and the decode budget are derived once.
#pragma once

#include <cstdint>
#include <string>

#include "kvevict/decode_evict.h"
#include "kvevict/method.h"

namespace kvevict {

// One-shot prefill eviction (SPEC sections 2-5): every full-attention layer is scored with its
// own window queries after its prefill attention and compacted.
struct PrefillEviction {
  bool enabled = false;
  ScoreOptions score;    // method, aggregate, window, pooling
  SelectOptions select;  // policy, budget, sink; select.window = observation_window(score)
  // A method (MethodSpec) at `budget`. question > 0: query-aware mode, the last `question`
  // prompt tokens are the question and, for windowed scores whose window is not pinned
  // (MethodSpec::pin_window), the observation window (h2o's all queries and tova's last query
  // keep their own).
  static PrefillEviction make(const MethodSpec& spec, const Budget& budget, int question = 0);
  // make(method_parse(method), budget).
  static PrefillEviction from_method(const std::string& method, const Budget& budget);
  // Sets the observation window of a windowed score (score and selection together).
  void set_window(int window);
  std::string describe() const;
};

// How decode-time eviction runs, apart from the method and the budget.
struct DecodeEvictionOptions {
  int64_t slack = 0;  // rows over budget before a cut (0 = every step)
  int recent = 32;    // last rows never evicted
  int sink = 0;       // first rows never evicted (streamingllm: its own 4)
};

// Decode-time dynamic eviction (SPEC section 5): budget N tokens per head, evict down to N when a
// head exceeds N + slack, never the last `recent` rows or the sinks. Runs on every decode() step;
// tokens fed with append() are not scored. options.scale / softcap are filled from the model.
struct DecodeEviction {
  bool enabled = false;
  DecodeEvictOptions options;
  // The decode-time form of a method: dropkv / obcache_* add their w = 1 step score, h2o, snapkv
  // and adakv add attention, tova replaces it, streamingllm keeps its sinks and the most recent.
  // Other methods have no decode-time form: throws naming them.
  static DecodeEviction make(const MethodSpec& spec, int64_t budget_tokens,
                             const DecodeEvictionOptions& opt = {});
  // The step score of that form (streamingllm: attention sum, though its protected rows mean the
  // score never decides); throws as make() does for methods without a decode-time form.
  static DecodeScore score_of(const MethodSpec& spec);
  std::string describe() const;
};

struct EvictConfig {
  PrefillEviction prefill;
  DecodeEviction decode;
  static EvictConfig none() { return {}; }
  std::string describe() const;
};

}  // namespace kvevict
