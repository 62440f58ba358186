// The CPU backend: the multithreaded float paths behind the Backend interface.
#include "evict/host_backend.h"
#include "kvevict/backend.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

class CpuBackend final : public detail::HostBackend {
 public:
  const char* name() const override { return "cpu"; }

  size_t score_workspace_bytes(const ScoreProblem& problem,
                               const ScoreOptions& opt) const override {
    return cpu::score_workspace_bytes(problem, opt);
  }
  void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
             Workspace ws) override {
    cpu::score(problem, opt, out, ws);
  }

  Selection select(const TensorView& scores, const TensorView& aux, const SelectOptions& opt,
                   Residency) override {
    std::vector<int64_t> starts, lens;
    return kvevict::select(SelectProblem::dense(scores, aux, starts, lens), opt);
  }

  size_t attention_workspace_bytes(const AttentionProblem& problem) const override {
    return cpu::attention_workspace_bytes(problem);
  }
  void attention(const AttentionProblem& problem, const AttentionOutput& output,
                 Workspace ws) override {
    cpu::attention(problem, output, ws);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace kvevict
