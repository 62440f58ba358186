// The reference backend: the double-precision ground truth of every op behind the Backend
// interface (results rounded to f32 on output), for tests and small checks.
#include <algorithm>
#include <vector>

#include "evict/host_backend.h"
#include "kvevict/backend.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

void check_host_f32(const TensorView& t, const char* what) {
  KVEVICT_CHECK(t.device == Device::kCpu && t.dtype == DType::kF32 && t.is_contiguous(), what,
                " must be contiguous host f32; got ", dtype_name(t.dtype), " ", t.shape_str());
}

class ReferenceBackend final : public detail::HostBackend {
 public:
  const char* name() const override { return "reference"; }

  size_t score_workspace_bytes(const ScoreProblem&, const ScoreOptions&) const override {
    return 0;
  }
  void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
             Workspace) override {
    const ref::Scores s = ref::score(problem, opt);
    check_shape(out.scores, "scores", {s.num_kv_heads, s.n});
    check_host_f32(out.scores, "scores");
    std::transform(s.scores.begin(), s.scores.end(), out.scores.ptr<float>(),
                   [](double x) { return static_cast<float>(x); });
    if (!s.aux.empty()) {
      KVEVICT_CHECK(!out.aux.empty(), "method ", method_name(opt.method),
                    " produces aux scores; expected an aux output [Hkv, n]");
      check_shape(out.aux, "aux scores", {s.num_kv_heads, s.n});
      check_host_f32(out.aux, "aux scores");
      std::transform(s.aux.begin(), s.aux.end(), out.aux.ptr<float>(),
                     [](double x) { return static_cast<float>(x); });
    }
    check_scores_finite(out, opt);
  }

  Selection select(const TensorView& scores, const TensorView& aux, const SelectOptions& opt,
                   Residency) override {
    std::vector<int64_t> starts, lens;
    return ref::select(SelectProblem::dense(scores, aux, starts, lens), opt);
  }

  size_t attention_workspace_bytes(const AttentionProblem&) const override { return 0; }
  void attention(const AttentionProblem& problem, const AttentionOutput& output,
                 Workspace) override {
    problem.validate();
    output.validate_host(problem);  // before the double pass, not after it
    std::vector<double> out, lse;
    ref::attention(problem, out, output.lse.empty() ? nullptr : &lse);
    const int hq = problem.num_q_heads(), d = problem.cache.head_dim;
    const int64_t m = problem.num_queries();
    for (int h = 0; h < hq; ++h)
      for (int64_t t = 0; t < m; ++t) {
        for (int i = 0; i < d; ++i)
          output.out.ptr<float>()[output.out.offset(h, t, i)] =
              static_cast<float>(out[(h * m + t) * d + i]);
        if (!output.lse.empty())
          output.lse.ptr<float>()[output.lse.offset(h, t)] = static_cast<float>(lse[h * m + t]);
      }
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace kvevict
