// The measured accuracy `kvevict demo` prints beside its answers, and its default budget: a
// table derived from committed `kvevict eval` results by tools/demo_table.py (docs/EVAL.md,
// "The demo from the data"). Each row names the results file, commit, date and device it comes
// from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvevict::cli {

// One measured cell: the mean score of `samples` samples with its 95% bootstrap interval.
struct MeasuredCell {
  double score = 0;
  std::optional<double> ci_low, ci_high;
  int64_t samples = 0;
  std::string source;        // "FILE (commit C, DATE, DEVICE)"
  std::string text() const;  // "25.0 [0.0, 62.5] over 8 samples"
  nlohmann::json to_json() const;
};

// The table's rule for a setting's default budget on one (model, task, length, mode): the
// smallest measured budget at which it scores within 10 points of the full cache of the same run.
struct BudgetRule {
  bool full_measured = false;         // the table has the full cache here
  std::optional<std::string> budget;  // the budget the rule picks (none: no budget qualifies)
  double full = 0, score = 0;
  int64_t full_samples = 0, samples = 0;
  std::string source;
};

class DemoTable {
 public:
  // Reads a table; throws kvevict::Error naming the file and what is wrong with it.
  static DemoTable load(const std::string& path);
  // `path` when given (it must exist); else $KVEVICT_DEMO_TABLE; else demo_table.json next to
  // the kvevict binary or in its ../share/kvevict/; else docs/results/demo_table.json of the
  // source tree. nullopt when none exists; `searched` then lists the places looked at.
  static std::optional<DemoTable> find(const std::string& path, std::string* searched);

  const std::string& path() const { return path_; }
  const std::string& rule() const { return rule_; }
  std::optional<MeasuredCell> cell(const std::string& model, const std::string& task,
                                   int64_t length, const std::string& mode,
                                   const std::string& setting, const std::string& budget) const;
  BudgetRule budget_rule(const std::string& model, const std::string& task, int64_t length,
                         const std::string& mode, const std::string& setting) const;
  // The lengths at which the table measured this setting (for "not measured at 3000 tokens").
  std::vector<int64_t> lengths(const std::string& model, const std::string& task,
                               const std::string& mode, const std::string& setting) const;

 private:
  std::string path_, rule_;
  nlohmann::json doc_;
  std::vector<std::string> sources_;
};

}  // namespace kvevict::cli
