// The window x pooling ablation of issue 20 (docs/EVAL.md, "Defaults chosen by measurement"):
// each ablated method is evaluated on the DEV split at every grid setting (windows pinned, so both
// query modes use them), the setting with the best DEV accuracy is chosen, and the reported
// numbers of the chosen setting (beside the method's current default) come from the TEST split.
// The library's defaults are not changed here: that is a decision on the GPU numbers.
#pragma once

#include <string>
#include <vector>

#include "eval/runner.h"

namespace kvevict::eval {

struct AblationOptions {
  std::vector<std::string> methods = {"dropkv", "obcache_vk"};
  std::vector<int> windows = {8, 16, 32};
  std::vector<std::string> poolings = {"none", "max:7", "max:11", "avg:7"};
  void validate() const;  // throws naming a method without a window, a bad window or pooling
};

// The grid of one method, windows outer, poolings inner: "dropkv:w=8:pool=none", ...
std::vector<std::string> ablation_grid(const std::string& method, const AblationOptions& opt);

// Per ablated method, the grid setting whose DEV "average" rows have the highest mean over every
// (length, mode, budget) cell the DEV run holds; ties go to the earlier grid setting (smaller
// window, then the pooling order given). Throws when a grid setting is missing from `dev` or its
// cells differ from the others'.
std::vector<AblationChoice> choose_ablation(const EvalResults& dev, const AblationOptions& opt);

// The settings the DEV run evaluates at `budgets`: the full cache (when `with_full`), every grid
// setting and every ablated method as named (its current default).
std::vector<MethodConfig> ablation_dev_methods(const AblationOptions& opt,
                                               const std::vector<Budget>& budgets, bool with_full);
// Every setting an ablation may evaluate (DEV's and any TEST choice, beside `test_methods`): what
// a model must be prepared for before the first prefill (SessionModel's kept queries).
std::vector<MethodConfig> ablation_all_methods(const AblationOptions& opt,
                                               const std::vector<Budget>& budgets,
                                               const std::vector<MethodConfig>& test_methods);

// The whole ablation: DEV with ablation_dev_methods, the choice, then TEST with
// base.methods + each ablated method's default + its chosen setting (each once). The result is
// the TEST run with the DEV records and batches appended (split "dev"), the choices in
// `ablation`, and "chosen vs default" pairs added to meta.comparisons. `dev` and `test` must be
// disjoint samples (split.h); base.split is ignored.
EvalResults run_ablation(EvalModel& model, const std::vector<Sample>& dev,
                         const std::vector<Sample>& test, const RunOptions& base,
                         const AblationOptions& opt, const std::vector<Budget>& budgets,
                         const ProgressFn& progress = nullptr);

}  // namespace kvevict::eval
