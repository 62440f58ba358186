// Issue 13: DropKV / OBCache scores when one key takes (almost) all of a query's probability.
// The double reference against brute-force removal perturbations, and the CPU float path against
// the reference, for logit gaps of 0 .. 1000 nats between each row's top key and its best other
// key, top-key probabilities 1 - 1e-k (k = 1 .. 12), and queries scaled by 1e30.
//
// Tolerance of the float path (stated, not tuned): the logits are formed in float from q * scale,
// so z carries a relative rounding of ~2^-23 (two roundings); p_j moves by that times |z|, and a
// term (p^2, (p z)^2, p^2 z) by up to four times it: rtol = 1e-5 + 4 * 2^-23 * max|z|. With
// q = 1e30 every probability is exactly 0 or 1 in float as in double (the logits sit ~1e29 apart),
// so only the value arithmetic remains: rtol = 1e-5. Scores below 1e-6 of the head's largest are
// float noise (p^2 underflows below ~1e-38): atol = 1e-6 * max.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/score.h"
#include "score/peaked_problem.h"
#include "support/testing.h"

namespace kvevict {
namespace {

using testing::PeakedProblem;
using testing::PeakedSpec;

std::vector<PeakedSpec> issue_cases() {
  std::vector<PeakedSpec> cases;
  uint64_t seed = 1300;
  for (double gap : {0.0, 10.0, 30.0, 100.0, 1000.0}) {
    PeakedSpec s;
    s.gap = gap;
    s.seed = ++seed;
    cases.push_back(s);
  }
  for (int k = 1; k <= 12; ++k) {
    PeakedSpec s;
    s.p_top = 1 - std::pow(10.0, -k);
    s.seed = ++seed;
    cases.push_back(s);
  }
  for (double gap : {0.0, 30.0}) {
    PeakedSpec s;
    s.gap = gap;
    s.q_scale = 1e30;
    s.seed = ++seed;
    cases.push_back(s);
  }
  return cases;
}

double max_abs_logit(const PeakedProblem& pp) {
  double zmax = 0;
  const PeakedSpec& s = pp.spec;
  for (int h = 0; h < s.hkv * s.group; ++h)
    for (int t = 0; t < s.w; ++t) {
      const int c = (h % s.group) * s.w + t;
      for (int64_t j = 0; j < s.n; ++j)
        zmax = std::max(zmax, std::abs(static_cast<double>(pp.q[(h * s.w + t) * s.d + c]) *
                                       pp.k[((h / s.group) * s.n + j) * s.d + c] * pp.scale));
    }
  return zmax;
}

double float_rtol(const PeakedProblem& pp) {
  if (pp.spec.q_scale > 1e6) return 1e-5;
  return 1e-5 + 4 * std::ldexp(1.0, -23) * max_abs_logit(pp);
}

ScoreOptions window_options(Method m, int w) {
  ScoreOptions o = ScoreOptions::defaults(m);
  o.window = w;
  o.pooling = Pooling{};
  return o;
}

std::vector<float> cpu_scores(const ScoreProblem& p, const ScoreOptions& opt) {
  const int64_t hkv = p.num_kv_heads(), n = p.num_tokens();
  std::vector<float> out(static_cast<size_t>(hkv * n), -1.0f);
  ScoreOutput so;
  so.scores = TensorView(out.data(), DType::kF32, {hkv, n});
  std::vector<uint8_t> ws(cpu::score_workspace_bytes(p, opt));
  cpu::score(p, opt, so, Workspace{ws.data(), ws.size()});
  return out;
}

TEST(LeaveOneOut, ReferenceDropKVIsTheBruteForceRemovalPerturbation) {
  for (const PeakedSpec& spec : issue_cases()) {
    SCOPED_TRACE(spec.str());
    PeakedProblem pp(spec);
    const std::vector<double> want = pp.removal_perturbation();
    const ref::Scores got = ref::score(pp.host_view(), window_options(Method::kDropKV, spec.w));
    double top = 0;
    for (double x : want) top = std::max(top, x);
    ASSERT_GT(top, 0.0);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got.scores[i], want[i], 1e-9 * top + 1e-9 * want[i]) << "token " << i;
  }
}

TEST(LeaveOneOut, DominantKeyKeepsTheLargestScore) {
  // The issue's case: with q = 1e30 every dropkv score was exactly 0 and the key holding the
  // attention went first. Its removal changes the output the most, so at a budget of one token
  // it must be the one kept, on the reference and on the float path.
  for (const PeakedSpec& base : issue_cases()) {
    PeakedSpec spec = base;
    spec.group = 1;
    spec.w = 1;  // one row a KV head: its top key is the dominant key
    SCOPED_TRACE(spec.str());
    PeakedProblem pp(spec);
    const std::vector<double> pert = pp.removal_perturbation();
    const ScoreProblem p = pp.host_view();
    const ScoreOptions opt = window_options(Method::kDropKV, 1);
    const std::vector<double> ref = ref::score(p, opt).scores;
    const std::vector<float> got = cpu_scores(p, opt);
    for (int g = 0; g < spec.hkv; ++g) {
      const int64_t n = spec.n, dominant = pp.top[g];
      const auto [best, clear] = testing::clear_max(pert.data() + g * n, n, 1e-3);
      if (best != dominant || !clear) continue;  // gap 0: the top may not be the largest change
      EXPECT_GT(ref[g * n + dominant], 0.0) << "head " << g;
      EXPECT_EQ(testing::kept_mask(ref.data() + g * n, n, 1)[dominant], true) << "ref head " << g;
      EXPECT_EQ(testing::kept_mask(got.data() + g * n, n, 1)[dominant], true)
          << "cpu head " << g << ": dominant score " << got[g * n + dominant];
    }
  }
}

TEST(LeaveOneOut, CpuFloatMatchesReferenceAndKeepsItsTokens) {
  for (const PeakedSpec& base : issue_cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      PeakedSpec spec = base;
      spec.dtype = dtype;
      PeakedProblem pp(spec);
      const ScoreProblem p = pp.host_view();
      const double rtol = float_rtol(pp);
      for (Method m : {Method::kDropKV, Method::kObcacheK, Method::kObcacheVK}) {
        SCOPED_TRACE(spec.str() + " " + method_name(m));
        const ScoreOptions opt = window_options(m, spec.w);
        const std::vector<double> ref = ref::score(p, opt).scores;
        double largest = 0;
        for (double x : ref) largest = std::max(largest, std::abs(x));
        if (largest > std::numeric_limits<float>::max()) {
          // obcache_k / obcache_vk grow as z^2: a key sharing a query's attention at q = 1e30
          // scores ~1e60, past float's range: the float path refuses the layer, naming the
          // overflow (check_scores_finite), instead of scoring it +inf.
          try {
            cpu_scores(p, opt);
            ADD_FAILURE() << "scores past float's range did not raise";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("overflows float32"), std::string::npos)
                << e.what();
          }
          continue;
        }
        const std::vector<float> got = cpu_scores(p, opt);
        for (int g = 0; g < spec.hkv; ++g) {
          const int64_t n = spec.n;
          const double* r = ref.data() + g * n;
          const float* s = got.data() + g * n;
          double top = 0;
          for (int64_t j = 0; j < n; ++j) top = std::max(top, std::abs(r[j]));
          const double atol = 1e-6 * top + 1e-30;
          EXPECT_TRUE(testing::all_close(s, r, n, atol, rtol, "scores head " + std::to_string(g)));
          for (int64_t keep : {int64_t{1}, int64_t{4}, n / 4, n / 2})
            EXPECT_TRUE(testing::kept_sets_agree(s, r, n, keep, atol, rtol,
                                                 "keep " + std::to_string(keep)));
        }
      }
    }
  }
}

TEST(LeaveOneOut, TopKeysAcrossForwardChunks) {
  // 70001 tokens: three forward chunks of the CPU path, each with its own running top that the
  // merge must resolve (the rows' planted tops sit at the sink and at random positions).
  for (double gap : {0.0, 100.0}) {
    PeakedSpec spec;
    spec.hkv = 1;
    spec.group = 2;
    spec.w = 2;
    spec.d = 16;
    spec.n = 70001;
    spec.gap = gap;
    spec.seed = 1399;
    SCOPED_TRACE(spec.str());
    PeakedProblem pp(spec);
    const ScoreProblem p = pp.host_view();
    const double rtol = float_rtol(pp);
    for (Method m : {Method::kDropKV, Method::kObcacheVK}) {
      const ScoreOptions opt = window_options(m, spec.w);
      const std::vector<double> ref = ref::score(p, opt).scores;
      const std::vector<float> got = cpu_scores(p, opt);
      double top = 0;
      for (double x : ref) top = std::max(top, std::abs(x));
      EXPECT_TRUE(testing::all_close(got, ref, 1e-6 * top, rtol, method_name(m)));
      EXPECT_TRUE(testing::kept_sets_agree(got.data(), ref.data(), spec.n, 100, 1e-6 * top, rtol,
                                           method_name(m)));
    }
  }
}

TEST(LeaveOneOut, SingleVisibleKeyScoresItsValueNorm) {
  // n = w = 1: the only key's removal leaves an empty softmax, output 0: dropkv = ||v||^2.
  PeakedSpec spec;
  spec.hkv = 1;
  spec.group = 1;
  spec.w = 1;
  spec.n = 1;
  spec.d = 8;
  PeakedProblem pp(spec);
  double v2 = 0;
  for (float x : pp.v) v2 += static_cast<double>(x) * x;
  const ScoreProblem p = pp.host_view();
  const ScoreOptions opt = window_options(Method::kDropKV, 1);
  EXPECT_NEAR(ref::score(p, opt).scores[0], v2, 1e-12 * v2);
  EXPECT_NEAR(cpu_scores(p, opt)[0], v2, 1e-6 * v2);
  EXPECT_NEAR(pp.removal_perturbation()[0], v2, 1e-12 * v2);
}

}  // namespace
}  // namespace kvevict
