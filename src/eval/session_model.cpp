#include "kvevict/eval/session_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

struct SessionPrefill : PrefillState {
  PrefillSnapshot snapshot;
  int64_t question_tokens = 0;
};

// Mean rows per KV head over the layers that prefill eviction compacted (or all layers).
int64_t kept_rows_per_head(const Session& s) {
  const auto& cfg = s.model().config();
  int64_t rows = 0, layers = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (cfg.is_sliding(l)) continue;
    rows += s.kv_rows(l);
    ++layers;
  }
  return layers == 0 ? 0 : rows / (layers * cfg.n_kv_heads);
}

}  // namespace

DecodeEviction decode_eviction_for(const MethodConfig& method, const DecodeEvictionOptions& decode) {
  DecodeEviction ev;
  if (method.is_full()) return ev;
  KVEVICT_CHECK(!method.budget.is_fraction(), "decode-time eviction of ", method.name,
                " needs a token budget per head (> 1); got ", method.budget.str());
  ev.enabled = true;
  auto& o = ev.options;
  o.budget = static_cast<int64_t>(method.budget.value);
  o.slack = decode.slack;
  o.recent = decode.recent;
  o.sink = decode.sink;
  switch (method.spec.score.method) {
    case Method::kDropKV: o.score = DecodeScore::kDropKV; break;
    case Method::kObcacheV: o.score = DecodeScore::kObcacheV; break;
    case Method::kObcacheK: o.score = DecodeScore::kObcacheK; break;
    case Method::kObcacheVK: o.score = DecodeScore::kObcacheVK; break;
    case Method::kH2O:
    case Method::kSnapKV: o.score = DecodeScore::kAttentionSum; break;
    case Method::kTOVA: o.score = DecodeScore::kTOVA; break;
    case Method::kStreamingLLM:
      // Sinks + the most recent: every kept row is protected, so the score never decides.
      o.score = DecodeScore::kAttentionSum;
      o.sink = method.spec.sink;
      KVEVICT_CHECK(o.budget > o.sink, "streamingllm decode budget ", o.budget,
                    " must exceed its ", o.sink, " sink tokens");
      o.recent = static_cast<int>(o.budget - o.sink);
      break;
    default:
      KVEVICT_FAIL("method ", method.name, " has no decode-time form; expected one of dropkv, ",
                   "obcache_v, obcache_k, obcache_vk, h2o, snapkv, tova, streamingllm");
  }
  o.validate();
  return ev;
}

SessionModel::SessionModel(std::shared_ptr<const Model> model, std::unique_ptr<Tokenizer> tokenizer,
                           const std::vector<MethodConfig>& methods, SessionOptions options)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), options_(std::move(options)) {
  KVEVICT_CHECK(model_ && tokenizer_, "SessionModel needs a model and its tokenizer");
  for (const auto& m : methods) {
    if (m.is_full()) continue;
    const auto& s = m.spec.score;
    if (!s.needs_queries()) continue;
    if (s.aggregate == Aggregate::kAllQueries) need_all_queries_ = true;
    max_window_ = std::max<int64_t>(max_window_, s.aggregate == Aggregate::kLastQuery ? 1 : s.window);
  }
}

std::string SessionModel::name() const {
  const auto& path = model_->path();
  return path.empty() ? model_->config().name : std::filesystem::path(path).stem().string();
}

EvictConfig SessionModel::prefill_eviction_for(const MethodConfig& method, QueryMode mode,
                                               int64_t question_tokens) {
  EvictConfig cfg;
  if (method.is_full()) return cfg;
  cfg.prefill.enabled = true;
  cfg.prefill.score = method.spec.score;
  cfg.prefill.select.policy = method.spec.policy;
  cfg.prefill.select.budget = method.budget;
  cfg.prefill.select.sink = method.spec.sink;
  cfg.prefill.select.window = method.spec.score.window;
  // Query-aware: the question ends the prompt and is the observation window (SPEC section 5).
  if (mode == QueryMode::kAware && method.spec.score.aggregate == Aggregate::kWindow)
    cfg.prefill.set_window(static_cast<int>(question_tokens));
  return cfg;
}

std::unique_ptr<PrefillState> SessionModel::prefill(const std::vector<int32_t>& context_tokens,
                                                    const std::vector<int32_t>& question_tokens,
                                                    QueryMode mode) {
  auto state = std::make_unique<SessionPrefill>();
  std::vector<int32_t> tokens = context_tokens;
  state->question_tokens = static_cast<int64_t>(question_tokens.size());
  int64_t window = max_window_;
  if (mode == QueryMode::kAware) {
    tokens.insert(tokens.end(), question_tokens.begin(), question_tokens.end());
    window = std::max<int64_t>(window, state->question_tokens);
  }
  PrefillOptions popt;
  popt.keep_queries = need_all_queries_ ? -1 : window;
  state->snapshot = Session::prefill_snapshot(model_, tokens, popt, options_);
  return state;
}

Generation SessionModel::answer(PrefillState& state, const MethodConfig& method,
                                const std::vector<int32_t>& question_tokens, QueryMode mode,
                                int max_new_tokens) {
  auto& st = dynamic_cast<SessionPrefill&>(state);
  const EvictConfig cfg = prefill_eviction_for(method, mode, st.question_tokens);
  Session session = Session::from_snapshot(model_, st.snapshot, cfg, options_);
  if (mode == QueryMode::kAgnostic && !question_tokens.empty()) session.append(question_tokens);
  Sampler greedy;
  const Tokenizer& tok = *tokenizer_;
  GenerateResult out = session.generate(
      max_new_tokens, greedy, [&tok](int32_t id) { return tok.is_end_of_generation(id); });
  std::vector<int32_t> text_ids = out.tokens;
  if (out.stopped && !text_ids.empty()) text_ids.pop_back();
  Generation g;
  g.text = tok.decode(text_ids);
  g.kept_tokens = kept_rows_per_head(session);
  g.generated_tokens = static_cast<int64_t>(out.tokens.size());
  g.kv_bytes = session.kv_bytes_total();
  return g;
}

std::vector<double> SessionModel::token_nlls(const std::vector<int32_t>& tokens,
                                             const MethodConfig& method,
                                             const DecodeEvictionOptions& decode) {
  KVEVICT_CHECK(tokens.size() >= 2, "perplexity needs at least 2 tokens; got ", tokens.size());
  EvictConfig cfg;
  cfg.decode = decode_eviction_for(method, decode);
  Session session(model_, options_);
  session.prefill({tokens[0]}, cfg);
  std::vector<double> nlls;
  nlls.reserve(tokens.size() - 1);
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::vector<float>& logits = session.logits();
    // NLL = logsumexp(logits) - logits[target], accumulated in double.
    double mx = -INFINITY;
    for (float x : logits) mx = std::max(mx, static_cast<double>(x));
    double sum = 0;
    for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
    nlls.push_back(mx + std::log(sum) - logits[static_cast<size_t>(tokens[i + 1])]);
    if (i + 2 < tokens.size()) session.decode(tokens[i + 1]);
  }
  return nlls;
}

}  // namespace kvevict::eval
