// The evaluation harness's model side (EvalModel, PplModel) on top of the kvevict runtime: one
// prefill snapshot per sample and mode, then a copy evicted per method.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvevict/eval/perplexity.h"
#include "kvevict/eval/runner.h"
#include "kvevict/model/model.h"
#include "kvevict/model/session.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval {

// The decode-time eviction of SPEC section 5 for an evaluation method: dropkv/obcache_* add their
// w = 1 step score, h2o/snapkv/adakv add attention, tova replaces it, streamingllm keeps its 4
// sinks and the most recent. Other methods have no decode-time form: throws naming them.
DecodeEviction decode_eviction_for(const MethodConfig& method, const DecodeEvictionOptions& decode);

class SessionModel : public EvalModel, public PplModel {
 public:
  // `methods` are the configs the run will evaluate: the prefill keeps as many window queries as
  // the largest of them needs (all prompt queries when an h2o-aggregated method is present).
  SessionModel(std::shared_ptr<const Model> model, std::unique_ptr<Tokenizer> tokenizer,
               const std::vector<MethodConfig>& methods, SessionOptions options = {});

  std::string name() const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::unique_ptr<PrefillState> prefill(const std::vector<int32_t>& context_tokens,
                                        const std::vector<int32_t>& question_tokens,
                                        QueryMode mode) override;
  Generation answer(PrefillState& state, const MethodConfig& method,
                    const std::vector<int32_t>& question_tokens, QueryMode mode,
                    int max_new_tokens) override;
  std::vector<double> token_nlls(const std::vector<int32_t>& tokens, const MethodConfig& method,
                                 const DecodeEvictionOptions& decode) override;

  // The prefill eviction of a method; in query-aware mode the window is the question's tokens.
  static EvictConfig prefill_eviction_for(const MethodConfig& method, QueryMode mode,
                                          int64_t question_tokens);

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  SessionOptions options_;
  int64_t max_window_ = 0;
  bool need_all_queries_ = false;
};

}  // namespace kvevict::eval
