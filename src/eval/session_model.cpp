#include "eval/session_model.h"

#include <algorithm>

#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

struct SnapshotState : PrefillState {
  std::shared_ptr<const Snapshot> snapshot;
};

Generation to_generation(const BatchAnswer& a, const Tokenizer& tok) {
  std::vector<int32_t> text_ids = a.result.tokens;
  if (a.result.stopped && !text_ids.empty()) text_ids.pop_back();
  Generation g;
  g.text = tok.decode(text_ids);
  g.kept_tokens = a.kept_rows_per_head;
  g.generated_tokens = static_cast<int64_t>(a.result.tokens.size());
  g.kv_bytes = a.kv_bytes;
  g.evict_seconds = a.evict_seconds;
  g.batch_append_seconds = a.append_seconds;
  g.batch_decode_seconds = a.decode_seconds;
  g.batch_decode_steps = a.decode_steps;
  g.rows_in_batch = a.rows_in_batch;
  return g;
}

}  // namespace

DecodeEviction decode_eviction_for(const MethodConfig& method,
                                   const DecodeEvictionOptions& decode) {
  if (method.is_full()) return {};
  KVEVICT_CHECK(!method.budget.is_fraction(), "decode-time eviction of ", method.name,
                " needs a token budget per head (> 1); got ", method.budget.str());
  return DecodeEviction::make(method.spec, static_cast<int64_t>(method.budget.value), decode);
}

SessionModel::SessionModel(std::shared_ptr<const ModelRuntime> runtime,
                           std::unique_ptr<Tokenizer> tokenizer,
                           const std::vector<MethodConfig>& methods, std::string name)
    : runtime_(std::move(runtime)), tokenizer_(std::move(tokenizer)), name_(std::move(name)) {
  KVEVICT_CHECK(runtime_ && tokenizer_, "SessionModel needs a runtime and its tokenizer");
  for (const auto& m : methods) {
    if (m.is_full()) continue;
    const auto& s = m.spec.score;
    if (!s.needs_queries()) continue;
    if (s.aggregate == Aggregate::kAllQueries) need_all_queries_ = true;
    max_window_ =
        std::max<int64_t>(max_window_, s.aggregate == Aggregate::kLastQuery ? 1 : s.window);
  }
}

std::unique_ptr<PrefillState> SessionModel::prefill(const std::vector<int32_t>& context_tokens,
                                                    const std::vector<int32_t>& question_tokens,
                                                    QueryMode mode) {
  auto state = std::make_unique<SnapshotState>();
  std::vector<int32_t> tokens = context_tokens;
  int64_t window = max_window_;
  if (mode == QueryMode::kAware) {
    tokens.insert(tokens.end(), question_tokens.begin(), question_tokens.end());
    window = std::max<int64_t>(window, static_cast<int64_t>(question_tokens.size()));
  }
  PrefillOptions popt;
  popt.keep_queries = need_all_queries_ ? -1 : window;
  state->snapshot = runtime_->prefill_snapshot(tokens, popt);
  return state;
}

std::vector<Generation> SessionModel::answer_all(PrefillState& state,
                                                 const std::vector<MethodConfig>& methods,
                                                 const std::vector<int32_t>& question_tokens,
                                                 QueryMode mode, int max_new_tokens,
                                                 int question_window) {
  auto& st = dynamic_cast<SnapshotState&>(state);
  std::vector<EvictConfig> configs;
  configs.reserve(methods.size());
  for (const auto& m : methods) configs.push_back(m.evict_config(question_window));
  const Tokenizer& tok = *tokenizer_;
  const std::vector<int32_t> none;
  const auto answers = runtime_->answer_batch(
      *st.snapshot, configs, mode == QueryMode::kAgnostic ? question_tokens : none, max_new_tokens,
      [&tok](int32_t id) { return tok.is_end_of_generation(id); });
  std::vector<Generation> out;
  out.reserve(answers.size());
  for (const auto& a : answers) out.push_back(to_generation(a, tok));
  return out;
}

Generation SessionModel::answer(PrefillState& state, const MethodConfig& method,
                                const std::vector<int32_t>& question_tokens, QueryMode mode,
                                int max_new_tokens) {
  const int question = mode == QueryMode::kAware ? static_cast<int>(question_tokens.size()) : 0;
  return answer_all(state, {method}, question_tokens, mode, max_new_tokens, question)[0];
}

std::vector<std::vector<double>> SessionModel::token_nlls(
    const std::vector<std::vector<int32_t>>& texts, const MethodConfig& method,
    const DecodeEvictionOptions& decode) {
  EvictConfig cfg;
  cfg.decode = decode_eviction_for(method, decode);
  return runtime_->token_nlls(texts, cfg);
}

int SessionModel::texts_per_call() const {
  return runtime_->device() == Device::kCuda ? kGpuPplRows : 1;
}

}  // namespace kvevict::eval
