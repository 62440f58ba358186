// The summaries of a run: the accuracy cells with their intervals (EvalResults::aggregate), the
// paired comparisons (EvalResults::compare) and the cost table (cost_summary).
#include "eval/summary.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "eval/stats.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

// Everything that names a setting's row in a table (one row per distinct value).
using SettingKey = std::tuple<std::string, int64_t, int, std::string, std::string, int, bool,
                              std::string, std::string, std::string, bool, bool>;

SettingKey setting_key(const SampleRecord& r) {
  return {r.split,
          r.target_length,
          static_cast<int>(r.mode),
          r.method,
          r.budget,
          r.window_is_question ? 0 : r.window,
          r.window_is_question,
          r.pooling,
          r.policy,
          r.aggregate,
          r.normalize,
          r.keep_last};
}

std::string cell_name(const SettingKey& k, const std::string& task) {
  return std::get<0>(k) + "|" + std::to_string(std::get<1>(k)) + "|" +
         query_mode_name(static_cast<QueryMode>(std::get<2>(k))) + "|" + std::get<3>(k) + "@" +
         std::get<4>(k) + "|" + task;
}

std::string pair_name(const ComparisonRow& c) {
  return c.split + "|" + std::to_string(c.target_length) + "|" + query_mode_name(c.mode) + "|" +
         c.a + " vs " + c.b + "@" + c.budget + "|" + c.task;
}

}  // namespace

std::vector<AggregateRow> EvalResults::aggregate() const {
  const BootstrapOptions& bs = meta.bootstrap;
  bs.validate();
  std::map<SettingKey, std::map<std::string, std::vector<double>>> scores;
  for (const auto& r : records) scores[setting_key(r)][r.task].push_back(r.score);
  std::vector<AggregateRow> rows;
  for (const auto& [key, tasks] : scores) {
    AggregateRow base;
    std::tie(base.split, base.target_length, std::ignore, base.method, base.budget, base.window,
             base.window_is_question, base.pooling, base.policy, base.aggregate, base.normalize,
             base.keep_last) = key;
    base.mode = static_cast<QueryMode>(std::get<2>(key));
    // Each task's bootstrap distribution is drawn once: its own interval, and (averaged over the
    // tasks, element by element) the stratified distribution of the average row.
    std::vector<double> average_dist(static_cast<size_t>(bs.resamples), 0.0);
    double mean_sum = 0.0;
    int64_t total = 0;
    for (const auto& [task, values] : tasks) {
      AggregateRow row = base;
      row.task = task;
      row.samples = static_cast<int64_t>(values.size());
      double sum = 0.0;
      for (double v : values) sum += v;
      row.score = sum / static_cast<double>(values.size());
      std::vector<double> dist =
          bootstrap_means(values, bs.resamples, bs.seed, stream_key(cell_name(key, task)));
      for (size_t i = 0; i < dist.size(); ++i) average_dist[i] += dist[i];
      const Interval iv = percentile_interval(row.score, dist, bs.level, row.samples);
      row.ci_low = iv.low;
      row.ci_high = iv.high;
      mean_sum += row.score;
      total += row.samples;
      rows.push_back(row);
    }
    AggregateRow avg = base;
    avg.task = "average";
    avg.samples = total;
    const auto n_tasks = static_cast<double>(tasks.size());
    avg.score = mean_sum / n_tasks;
    for (double& x : average_dist) x /= n_tasks;
    const Interval iv = percentile_interval(avg.score, average_dist, bs.level, total);
    avg.ci_low = iv.low;
    avg.ci_high = iv.high;
    rows.push_back(avg);
  }
  return rows;
}

std::vector<ComparisonRow> EvalResults::compare() const {
  const BootstrapOptions& bs = meta.bootstrap;
  bs.validate();
  // (split, length, mode, budget, method) -> task -> (sample index, seed) -> score.
  using Group = std::tuple<std::string, int64_t, int, std::string>;
  using SampleKey = std::pair<int64_t, uint64_t>;
  std::map<Group, std::map<std::string, std::map<std::string, std::map<SampleKey, double>>>> by;
  for (const auto& r : records)
    by[Group{r.split, r.target_length, static_cast<int>(r.mode),
             r.method == "full" ? "" : r.budget}][r.method][r.task]
      [SampleKey{r.sample_index, r.seed}] = r.score;
  std::vector<ComparisonRow> out;
  for (const auto& [a, b] : meta.comparisons) {
    for (const auto& [group, methods] : by) {
      if (std::get<3>(group).empty()) continue;  // the full cache's own group
      auto ia = methods.find(a);
      if (ia == methods.end()) continue;
      // The full cache has no budget: it pairs with every budget of the other setting.
      const Group bgroup =
          b == "full" ? Group{std::get<0>(group), std::get<1>(group), std::get<2>(group), ""}
                      : group;
      auto gb = by.find(bgroup);
      if (gb == by.end()) continue;
      auto ib = gb->second.find(b);
      if (ib == gb->second.end()) continue;
      ComparisonRow base;
      std::tie(base.split, base.target_length, std::ignore, base.budget) = group;
      base.mode = static_cast<QueryMode>(std::get<2>(group));
      base.a = a;
      base.b = b;
      std::vector<std::vector<std::pair<double, double>>> all;
      for (const auto& [task, a_scores] : ia->second) {
        auto tb = ib->second.find(task);
        if (tb == ib->second.end()) continue;
        std::vector<std::pair<double, double>> pairs;
        for (const auto& [sample, score] : a_scores) {
          auto sb = tb->second.find(sample);
          if (sb != tb->second.end()) pairs.emplace_back(score, sb->second);
        }
        if (pairs.empty()) continue;
        ComparisonRow row = base;
        row.task = task;
        row.result = paired_difference({pairs}, bs, stream_key(pair_name(row)));
        out.push_back(row);
        all.push_back(std::move(pairs));
      }
      if (all.empty()) continue;
      ComparisonRow avg = base;
      avg.task = "average";
      avg.result = paired_difference(all, bs, stream_key(pair_name(avg)));
      out.push_back(avg);
    }
  }
  return out;
}

void EvalResults::append(const EvalResults& other) {
  records.insert(records.end(), other.records.begin(), other.records.end());
  batches.insert(batches.end(), other.batches.begin(), other.batches.end());
  ablation.insert(ablation.end(), other.ablation.begin(), other.ablation.end());
}

std::vector<CostRow> cost_summary(const EvalResults& r) {
  struct Sum {
    int64_t samples = 0;
    double tokens = 0, settings = 0, prefill = 0, answer = 0;
    bool reported = true;
    double evict = 0, decode = 0, append = 0, steps = 0, batches = 0;
  };
  std::map<std::tuple<std::string, int64_t, std::string>, Sum> groups;
  for (const BatchRecord& b : r.batches) {
    for (auto key :
         {std::make_tuple(b.split, b.target_length, std::string(query_mode_name(b.mode))),
          std::make_tuple(std::string("all"), int64_t{-1}, std::string("all"))}) {
      Sum& s = groups[key];
      ++s.samples;
      s.tokens += static_cast<double>(b.prefill_tokens);
      s.settings += static_cast<double>(b.settings);
      s.prefill += b.prefill_seconds;
      s.answer += b.answer_seconds;
      if (b.evict_seconds < 0 || b.decode_seconds < 0) s.reported = false;
      s.evict += b.evict_seconds;
      s.decode += b.decode_seconds;
      s.append += b.append_seconds;
      s.steps += static_cast<double>(b.decode_steps);
      s.batches += static_cast<double>(b.batches);
    }
  }
  std::vector<CostRow> out;
  for (const auto& [key, s] : groups) {
    CostRow c;
    std::tie(c.split, c.target_length, c.mode) = key;
    if (c.target_length < 0) c.split = "all";
    const auto n = static_cast<double>(s.samples);
    c.samples = s.samples;
    c.prefill_tokens = s.tokens / n;
    c.settings = s.settings / n;
    c.prefill_s = s.prefill / n;
    c.answer_s_per_sample = s.answer / n;
    c.total_s = s.prefill + s.answer;
    if (s.reported && s.settings > 0 && s.batches > 0) {
      c.evict_s_per_setting = s.evict / s.settings;
      c.decode_s_per_batch = s.decode / s.batches;
      c.append_s_per_batch = s.append / s.batches;
      c.decode_steps_per_batch = s.steps / s.batches;
      c.batches_per_sample = s.batches / n;
    }
    out.push_back(c);
  }
  // The whole run last.
  std::stable_partition(out.begin(), out.end(),
                        [](const CostRow& c) { return c.target_length >= 0; });
  return out;
}

}  // namespace kvevict::eval
