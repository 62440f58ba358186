// The evaluation harness's model side (EvalModel, PplModel) on top of a ModelRuntime, so `eval`,
// `ppl` and `demo` run the same code on either device: one prefill snapshot per sample and mode,
// then every method evicts a copy of it; the answers are decoded by answer_batch (on the GPU as
// one batch, each row its own compacted cache).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "eval/perplexity.h"
#include "eval/runner.h"
#include "kvevict/model/runtime.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval {

// The decode-time eviction of SPEC section 5 for an evaluation method (DecodeEviction::make with
// the method's budget as a token count per head); "full" evicts nothing.
DecodeEviction decode_eviction_for(const MethodConfig& method, const DecodeEvictionOptions& decode);

class SessionModel : public EvalModel, public PplModel {
 public:
  // `methods` are the configs the run will evaluate: the prefill keeps as many window queries as
  // the largest of them needs (all prompt queries when an h2o-aggregated method is present).
  // `name` names the model in reports.
  SessionModel(std::shared_ptr<const ModelRuntime> runtime, std::unique_ptr<Tokenizer> tokenizer,
               const std::vector<MethodConfig>& methods, std::string name);

  std::string name() const override { return name_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  const ModelRuntime& runtime() const { return *runtime_; }
  std::unique_ptr<PrefillState> prefill(const std::vector<int32_t>& context_tokens,
                                        const std::vector<int32_t>& question_tokens,
                                        QueryMode mode) override;
  Generation answer(PrefillState& state, const MethodConfig& method,
                    const std::vector<int32_t>& question_tokens, QueryMode mode,
                    int max_new_tokens) override;
  std::vector<Generation> answer_all(PrefillState& state, const std::vector<MethodConfig>& methods,
                                     const std::vector<int32_t>& question_tokens, QueryMode mode,
                                     int max_new_tokens, int question_window) override;
  std::vector<std::vector<double>> token_nlls(const std::vector<std::vector<int32_t>>& texts,
                                              const MethodConfig& method,
                                              const DecodeEvictionOptions& decode) override;
  // The GPU decodes kGpuPplRows chunks as one batch (a row each); the CPU one at a time.
  int texts_per_call() const override;
  static constexpr int kGpuPplRows = 32;

 private:
  std::shared_ptr<const ModelRuntime> runtime_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string name_;
  int64_t max_window_ = 0;
  bool need_all_queries_ = false;
};

}  // namespace kvevict::eval
