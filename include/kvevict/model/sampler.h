// Next-token sampling: greedy, or temperature + top-k + top-p with a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kvevict {

struct SamplerOptions {
  float temperature = 0.0f;  // 0 = greedy (argmax, ties toward the lower id)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off; keeps the smallest set with mass >= top_p
  uint64_t seed = 0;
  void validate() const;
  std::string describe() const;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions opt = {});
  int32_t sample(const std::vector<float>& logits);
  const SamplerOptions& options() const { return opt_; }

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
  std::vector<int32_t> ids_;   // scratch [V]
  std::vector<double> probs_;  // scratch [V]
};

int32_t argmax(const std::vector<float>& logits);
// -log softmax(logits)[target] in double (logsumexp - logit): a token's negative log-likelihood.
double logits_nll(const std::vector<float>& logits, int32_t target);

}  // namespace kvevict
