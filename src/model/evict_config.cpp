// The method -> eviction configuration mapping (evict_config.h), once for every caller.
#include "kvevict/model/evict_config.h"

#include "kvevict/error.h"

namespace kvevict {

PrefillEviction PrefillEviction::make(const MethodSpec& spec, const Budget& budget, int question) {
  KVEVICT_CHECK(question >= 0, "question of ", question, " tokens is invalid; expected >= 0");
  PrefillEviction e;
  e.enabled = true;
  e.score = spec.score;
  e.select.policy = spec.policy;
  e.select.sink = spec.sink;
  e.select.budget = budget;
  // Query-aware: the question ends the prompt and is the observation window (SPEC section 5),
  // unless the method's window is pinned (its measured default, or a user's w=N).
  if (question > 0 && !spec.pin_window && spec.score.aggregate == Aggregate::kWindow &&
      spec.score.needs_queries())
    e.score.window = question;
  e.select.window = observation_window(e.score);
  return e;
}

PrefillEviction PrefillEviction::from_method(const std::string& method, const Budget& budget) {
  return make(method_parse(method), budget);
}

void PrefillEviction::set_window(int window) {
  KVEVICT_CHECK(window >= 1, "observation window ", window, " is invalid; expected >= 1");
  score.window = window;
  select.window = observation_window(score);
}

std::string PrefillEviction::describe() const {
  if (!enabled) return "prefill eviction off";
  return score.describe() + " " + select.describe();
}

DecodeScore DecodeEviction::score_of(const MethodSpec& spec) {
  switch (spec.score.method) {
    case Method::kDropKV: return DecodeScore::kDropKV;
    case Method::kObcacheV: return DecodeScore::kObcacheV;
    case Method::kObcacheK: return DecodeScore::kObcacheK;
    case Method::kObcacheVK: return DecodeScore::kObcacheVK;
    case Method::kH2O:
    case Method::kSnapKV:
    case Method::kStreamingLLM: return DecodeScore::kAttentionSum;
    case Method::kTOVA: return DecodeScore::kTOVA;
    default:
      KVEVICT_FAIL("method ", method_name(spec.score.method),
                   " has no decode-time form; expected one of dropkv, obcache_v, obcache_k, "
                   "obcache_vk, h2o, snapkv, adakv, tova, streamingllm");
  }
}

DecodeEviction DecodeEviction::make(const MethodSpec& spec, int64_t budget_tokens,
                                    const DecodeEvictionOptions& opt) {
  DecodeEviction ev;
  ev.enabled = true;
  auto& o = ev.options;
  o.budget = budget_tokens;
  o.slack = opt.slack;
  o.recent = opt.recent;
  o.sink = opt.sink;
  o.score = score_of(spec);
  if (spec.score.method == Method::kStreamingLLM) {
    // Sinks + the most recent: every kept row is protected, so the score never decides.
    o.sink = spec.sink;
    KVEVICT_CHECK(o.budget > o.sink, "streamingllm decode budget ", o.budget, " must exceed its ",
                  o.sink, " sink tokens");
    o.recent = static_cast<int>(o.budget - o.sink);
  }
  o.validate();
  return ev;
}

std::string DecodeEviction::describe() const {
  return enabled ? options.describe() : std::string("decode eviction off");
}

std::string EvictConfig::describe() const {
  return "prefill: " + prefill.describe() + "; decode: " + decode.describe();
}

}  // namespace kvevict
