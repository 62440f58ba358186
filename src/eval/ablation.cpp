#include "eval/ablation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

// The mean over (length, mode, budget) cells of a setting's DEV average rows.
struct DevScore {
  double score = 0;
  std::set<std::tuple<int64_t, int, std::string>> cells;
};

std::map<std::string, DevScore> dev_scores(const std::vector<AggregateRow>& rows) {
  std::map<std::string, DevScore> out;
  for (const auto& r : rows) {
    if (r.task != "average" || r.split != "dev") continue;
    DevScore& d = out[r.method];
    d.score += r.score;
    d.cells.insert({r.target_length, static_cast<int>(r.mode), r.budget});
  }
  for (auto& [name, d] : out) {
    const auto n = static_cast<double>(d.cells.size());
    d.score /= n;
  }
  return out;
}

}  // namespace

void AblationOptions::validate() const {
  KVEVICT_CHECK(!methods.empty(), "an ablation needs at least one method");
  KVEVICT_CHECK(!windows.empty() && !poolings.empty(),
                "an ablation needs at least one window and one pooling");
  for (int w : windows) KVEVICT_CHECK(w >= 1, "ablation window ", w, " is invalid; expected >= 1");
  for (const auto& m : methods) {
    KVEVICT_CHECK(m != "full", "the full cache has no window to ablate");
    // Every grid setting must parse: a method without a window fails here, naming itself.
    for (const auto& s : ablation_grid(m, *this)) MethodConfig::make(s, Budget{0.5});
  }
}

std::vector<std::string> ablation_grid(const std::string& method, const AblationOptions& opt) {
  std::vector<std::string> out;
  for (int w : opt.windows)
    for (const auto& p : opt.poolings)
      out.push_back(method + ":w=" + std::to_string(w) + ":pool=" + p);
  return out;
}

std::vector<AblationChoice> choose_ablation(const EvalResults& dev, const AblationOptions& opt) {
  const std::map<std::string, DevScore> scores = dev_scores(dev.aggregate());
  std::vector<AblationChoice> out;
  for (const auto& method : opt.methods) {
    AblationChoice c;
    c.method = method;
    const DevScore* best = nullptr;
    const DevScore* first = nullptr;
    for (const auto& setting : ablation_grid(method, opt)) {
      auto it = scores.find(setting);
      KVEVICT_CHECK(it != scores.end(), "the DEV run has no results for ", setting,
                    "; expected every grid setting of the ablation");
      if (first == nullptr) first = &it->second;
      KVEVICT_CHECK(it->second.cells == first->cells, "the DEV run evaluated ", setting,
                    " on other (length, mode, budget) cells than ", ablation_grid(method, opt)[0]);
      if (best == nullptr || it->second.score > best->score) {
        best = &it->second;
        c.chosen = setting;
      }
    }
    c.dev_score = best->score;
    c.cells = static_cast<int64_t>(best->cells.size());
    c.default_setting = method;
    auto d = scores.find(method);
    c.default_dev_score =
        d != scores.end() ? d->second.score : std::numeric_limits<double>::quiet_NaN();
    out.push_back(c);
  }
  return out;
}

namespace {

void add_unique(std::vector<MethodConfig>& out, const MethodConfig& m) {
  for (const auto& x : out)
    if (x.label() == m.label()) return;
  out.push_back(m);
}

}  // namespace

std::vector<MethodConfig> ablation_dev_methods(const AblationOptions& opt,
                                               const std::vector<Budget>& budgets, bool with_full) {
  opt.validate();
  KVEVICT_CHECK(!budgets.empty(), "an ablation needs at least one budget");
  std::vector<MethodConfig> out;
  if (with_full) out.push_back(MethodConfig::make("full", Budget{1.0}));
  for (const auto& m : opt.methods) {
    for (const auto& s : ablation_grid(m, opt))
      for (const auto& b : budgets) add_unique(out, MethodConfig::make(s, b));
    for (const auto& b : budgets) add_unique(out, MethodConfig::make(m, b));
  }
  return out;
}

std::vector<MethodConfig> ablation_all_methods(const AblationOptions& opt,
                                               const std::vector<Budget>& budgets,
                                               const std::vector<MethodConfig>& test_methods) {
  std::vector<MethodConfig> out = test_methods;
  for (const auto& m : ablation_dev_methods(opt, budgets, false)) add_unique(out, m);
  return out;
}

EvalResults run_ablation(EvalModel& model, const std::vector<Sample>& dev,
                         const std::vector<Sample>& test, const RunOptions& base,
                         const AblationOptions& opt, const std::vector<Budget>& budgets,
                         const ProgressFn& progress) {
  for (const auto& d : dev)
    for (const auto& t : test)
      KVEVICT_CHECK(d.task != t.task || d.seed != t.seed, "sample seed ", d.seed, " of task ",
                    d.task, " is in both DEV and TEST; expected disjoint splits (split.h)");
  const bool with_full = std::any_of(base.methods.begin(), base.methods.end(),
                                     [](const MethodConfig& m) { return m.is_full(); });
  RunOptions dev_opt = base;
  dev_opt.split = "dev";
  dev_opt.methods = ablation_dev_methods(opt, budgets, with_full);
  // One progress count over both runs: TEST's size is known before DEV (a choice per method).
  const auto modes = static_cast<int64_t>(base.modes.size());
  const int64_t dev_total = static_cast<int64_t>(dev.size() * dev_opt.methods.size()) * modes;
  std::vector<MethodConfig> test_methods = base.methods;
  for (const auto& m : opt.methods)
    for (const auto& b : budgets) add_unique(test_methods, MethodConfig::make(m, b));
  const int64_t test_settings =
      static_cast<int64_t>(test_methods.size() + opt.methods.size() * budgets.size());
  const int64_t total = dev_total + static_cast<int64_t>(test.size()) * test_settings * modes;
  auto phase = [&](int64_t offset) -> ProgressFn {
    if (!progress) return nullptr;
    return [&progress, offset, total](const Progress& p) {
      Progress q = p;
      q.done += offset;
      q.total = std::max(total, q.done);
      q.eta_s = q.elapsed_s / static_cast<double>(p.done) * static_cast<double>(p.total - p.done);
      progress(q);
    };
  };
  const EvalResults dev_res = run_eval(model, dev, dev_opt, phase(0));
  const std::vector<AblationChoice> choices = choose_ablation(dev_res, opt);

  RunOptions test_opt = base;
  test_opt.split = "test";
  test_opt.methods = test_methods;
  for (const auto& c : choices)
    for (const auto& b : budgets) add_unique(test_opt.methods, MethodConfig::make(c.chosen, b));
  EvalResults res = run_eval(model, test, test_opt, phase(dev_total));
  res.append(dev_res);
  res.ablation = choices;
  for (const auto& c : choices) res.meta.comparisons.emplace_back(c.chosen, c.default_setting);
  return res;
}

}  // namespace kvevict::eval
