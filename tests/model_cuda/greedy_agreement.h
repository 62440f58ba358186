// Greedy agreement of two runtimes on the same model, the CPU's greedy tokens teacher-forced
// through both (tests of the GPU runtime against the CPU runtime). Free-running text follows the
// first near-tie either way and is only printed; what is asserted is, step by step:
//   - the next-token distributions stay close (mean KL over the steps <= kMaxMeanKl);
//   - the two pick the same greedy token at all but 1 step in 8;
//   - where they part, it is at a near-tie: the two candidates' logits are within kNearTie on BOTH
//     devices. kNearTie = 0.5 nats is four bf16 spacings of a logit of magnitude 16-32 (spacing
//     2^-3): the GPU rounds the final hidden state and the head's weights to bf16, so a gap below
//     that is not resolved by its arithmetic, and a wrong layer, head or position gives gaps of
//     several nats. This rule holds only where both caches hold the same rows (the full cache, or
//     an eviction that reads no data): a score-based eviction may keep different rows where bf16
//     scores tie, and then the logits differ by the rows, not the arithmetic alone
//     (`same_rows = false` asserts the distributions and the share of equal tokens only).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kvevict/model/runtime.h"
#include "kvevict/model/sampler.h"  // argmax: the greedy token, ties toward the lower id

namespace kvevict::testing {

constexpr double kNearTie = 0.5;
constexpr double kMaxMeanKl = 0.02;

// KL(p || q) of the softmax distributions of two logit vectors, in nats.
inline double softmax_kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  auto log_softmax = [](const std::vector<float>& z) {
    const double mx = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (float v : z) sum += std::exp(v - mx);
    std::vector<double> out(z.size());
    for (size_t i = 0; i < z.size(); ++i) out[i] = z[i] - mx - std::log(sum);
    return out;
  };
  const auto lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
}

// `cpu` and `gpu` hold the same prefilled prompt; `cpu_tokens` are the CPU's free-running greedy
// tokens from that state. Feeds them to both and checks the rules above; `label` prefixes the
// printed lines.
inline void expect_greedy_agreement(InferenceSession& cpu, InferenceSession& gpu,
                                    const std::vector<int32_t>& cpu_tokens, bool same_rows,
                                    const char* label) {
  const int steps = static_cast<int>(cpu_tokens.size());
  ASSERT_GT(steps, 0);
  double kl_sum = 0, kl_max = 0;
  int top_equal = 0;
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> lc = cpu.logits(), lg = gpu.logits();
    ASSERT_EQ(argmax(lc), cpu_tokens[t])
        << "the CPU's teacher-forced step " << t << " is not its greedy";
    const double kl = softmax_kl(lc, lg);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    const int32_t cpu_top = cpu_tokens[t], gpu_top = argmax(lg);
    if (gpu_top == cpu_top) {
      ++top_equal;
    } else {
      const double cpu_gap = lc[cpu_top] - lc[gpu_top], gpu_gap = lg[gpu_top] - lg[cpu_top];
      std::printf("%s step %d: cpu %d, gpu %d; logit gaps cpu %.3f, gpu %.3f\n", label, t, cpu_top,
                  gpu_top, cpu_gap, gpu_gap);
      if (same_rows) {
        EXPECT_LT(cpu_gap, kNearTie)
            << label << " step " << t << ": the runtimes part at no near-tie";
        EXPECT_LT(gpu_gap, kNearTie)
            << label << " step " << t << ": the runtimes part at no near-tie";
      }
    }
    cpu.decode(cpu_tokens[t]);
    gpu.decode(cpu_tokens[t]);
  }
  std::printf("%s teacher-forced: mean KL %.2e nats, max %.2e, top token equal at %d of %d\n",
              label, kl_sum / steps, kl_max, top_equal, steps);
  EXPECT_LE(kl_sum / steps, kMaxMeanKl) << label;
  EXPECT_GE(top_equal, steps - steps / 8) << label;
}

}  // namespace kvevict::testing
