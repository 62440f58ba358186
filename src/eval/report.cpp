#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "eval/results_format.h"
#include "eval/summary.h"
#include "kvevict/error.h"
#include "kvevict/io/atomic_file.h"

namespace kvevict::eval {

using nlohmann::json;

std::string results_to_json(const EvalResults& r, int indent) {
  json doc;
  doc["kind"] = "kvevict-results";
  doc["version"] = 2;
  doc["meta"] = meta_to_json(r.meta);
  json records = json::array();
  for (const auto& x : r.records) {
    records.push_back({{"split", x.split},
                       {"task", x.task},
                       {"target_length", x.target_length},
                       {"sample_index", x.sample_index},
                       {"seed", x.seed},
                       {"context_tokens", x.context_tokens},
                       {"question_tokens", x.question_tokens},
                       {"mode", query_mode_name(x.mode)},
                       {"method", x.method},
                       {"budget", x.budget},
                       {"window", x.window},
                       {"window_is_question", x.window_is_question},
                       {"pooling", x.pooling},
                       {"policy", x.policy},
                       {"aggregate", x.aggregate},
                       {"normalize", x.normalize},
                       {"keep_last", x.keep_last},
                       {"prediction", x.prediction},
                       {"answers", x.answers},
                       {"metric", metric_name(x.metric)},
                       {"score", x.score},
                       {"kept_tokens", x.kept_tokens},
                       {"generated_tokens", x.generated_tokens},
                       {"answer_seconds", x.answer_seconds},
                       {"prefill_seconds", x.prefill_seconds},
                       {"evict_seconds", x.evict_seconds}});
  }
  doc["records"] = records;
  json agg = json::array();
  for (const auto& a : r.aggregate()) {
    agg.push_back({{"split", a.split},
                   {"task", a.task},
                   {"target_length", a.target_length},
                   {"mode", query_mode_name(a.mode)},
                   {"method", a.method},
                   {"budget", a.budget},
                   {"window", a.window},
                   {"window_is_question", a.window_is_question},
                   {"pooling", a.pooling},
                   {"policy", a.policy},
                   {"aggregate", a.aggregate},
                   {"normalize", a.normalize},
                   {"keep_last", a.keep_last},
                   {"samples", a.samples},
                   {"score", a.score},
                   {"ci_low", finite_or_null(a.ci_low)},
                   {"ci_high", finite_or_null(a.ci_high)}});
  }
  doc["aggregate"] = agg;
  json cmp = json::array();
  for (const auto& c : r.compare()) {
    const PairedDifference& d = c.result;
    cmp.push_back({{"split", c.split},
                   {"task", c.task},
                   {"target_length", c.target_length},
                   {"mode", query_mode_name(c.mode)},
                   {"budget", c.budget},
                   {"a", c.a},
                   {"b", c.b},
                   {"samples", d.diff.n},
                   {"a_score", d.a.estimate},
                   {"a_ci_low", finite_or_null(d.a.low)},
                   {"a_ci_high", finite_or_null(d.a.high)},
                   {"b_score", d.b.estimate},
                   {"b_ci_low", finite_or_null(d.b.low)},
                   {"b_ci_high", finite_or_null(d.b.high)},
                   {"diff", d.diff.estimate},
                   {"diff_ci_low", finite_or_null(d.diff.low)},
                   {"diff_ci_high", finite_or_null(d.diff.high)},
                   {"a_better", d.a_better},
                   {"equal", d.equal},
                   {"b_better", d.b_better}});
  }
  doc["comparisons"] = cmp;
  json cost = json::array();
  for (const auto& c : cost_summary(r)) {
    auto reported = [](double x) { return x >= 0 ? json(x) : json(nullptr); };
    cost.push_back({{"split", c.split},
                    {"target_length", c.target_length},
                    {"mode", c.mode},
                    {"samples", c.samples},
                    {"prefill_tokens", c.prefill_tokens},
                    {"settings", c.settings},
                    {"prefill_s", c.prefill_s},
                    {"evict_s_per_setting", reported(c.evict_s_per_setting)},
                    {"decode_s_per_batch", reported(c.decode_s_per_batch)},
                    {"append_s_per_batch", reported(c.append_s_per_batch)},
                    {"decode_steps_per_batch", reported(c.decode_steps_per_batch)},
                    {"batches_per_sample", reported(c.batches_per_sample)},
                    {"answer_s_per_sample", c.answer_s_per_sample},
                    {"total_s", c.total_s}});
  }
  doc["cost"] = cost;
  json batches = json::array();
  for (const auto& b : r.batches) {
    auto reported = [](double x) { return x >= 0 ? json(x) : json(nullptr); };
    batches.push_back({{"split", b.split},
                       {"task", b.task},
                       {"target_length", b.target_length},
                       {"sample_index", b.sample_index},
                       {"mode", query_mode_name(b.mode)},
                       {"prefill_tokens", b.prefill_tokens},
                       {"settings", b.settings},
                       {"prefill_seconds", b.prefill_seconds},
                       {"answer_seconds", b.answer_seconds},
                       {"evict_seconds", reported(b.evict_seconds)},
                       {"append_seconds", reported(b.append_seconds)},
                       {"decode_seconds", reported(b.decode_seconds)},
                       {"decode_steps", b.decode_steps >= 0 ? json(b.decode_steps) : json(nullptr)},
                       {"batches", b.batches}});
  }
  doc["batches"] = batches;
  json abl = json::array();
  for (const auto& c : r.ablation)
    abl.push_back({{"method", c.method},
                   {"chosen", c.chosen},
                   {"dev_score", c.dev_score},
                   {"default_setting", c.default_setting},
                   {"default_dev_score", finite_or_null(c.default_dev_score)},
                   {"cells", c.cells}});
  doc["ablation"] = abl;
  return doc.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

// A table cell from a name a dataset chose (its task): a '|' would split the cell and a line
// break end the row, so the table would have columns that are not there.
std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, x);
  return buf;
}

// "62.0 [51.0, 73.0]", or "62.0" without an interval.
std::string cell(double score, double lo, double hi, const char* f = "%.1f") {
  std::string s = fmt(f, score);
  if (std::isfinite(lo) && std::isfinite(hi)) s += " [" + fmt(f, lo) + ", " + fmt(f, hi) + "]";
  return s;
}

std::string length_name(int64_t length) {
  return length > 0 ? std::to_string(length) : std::string("-");
}

// What the run cost (cost_summary): per (split, length, mode) the prefill per sample (paid once,
// shared by every setting), the eviction per setting and the decode per batch as the runtime
// reports them (GPU: device times), and the wall time per sample.
std::string cost_markdown(const EvalResults& r) {
  const std::vector<CostRow> rows = cost_summary(r);
  if (rows.empty()) return "";
  std::ostringstream md;
  md << "\n## cost\n\n"
     << "Wall seconds of the machine that ran it ("
     << (r.meta.device.empty() ? "device unknown" : r.meta.device)
     << "); eviction, append and decode as the runtime reports them (GPU: CUDA-event device "
        "times). A prefill is shared by every setting of its sample and mode; on the GPU all "
        "settings of a prefill decode as one batch, on the CPU one after another.\n\n"
     << "| split | length | mode | samples | prefill tokens | prefill s / sample | settings / "
        "sample | eviction s / setting | decode s / batch | append s / batch | steps / batch | "
        "batches / sample | answer s / sample | total s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto opt = [](double x, const char* f) { return x >= 0 ? fmt(f, x) : std::string("-"); };
  for (const CostRow& c : rows) {
    md << "| " << c.split << " | " << (c.target_length < 0 ? "all" : length_name(c.target_length))
       << " | " << c.mode << " | " << c.samples << " | " << fmt("%.0f", c.prefill_tokens) << " | "
       << fmt("%.3f", c.prefill_s) << " | " << fmt("%.0f", c.settings) << " | "
       << opt(c.evict_s_per_setting, "%.4f") << " | " << opt(c.decode_s_per_batch, "%.3f") << " | "
       << opt(c.append_s_per_batch, "%.4f") << " | " << opt(c.decode_steps_per_batch, "%.1f")
       << " | " << opt(c.batches_per_sample, "%.1f") << " | " << fmt("%.3f", c.answer_s_per_sample)
       << " | " << fmt("%.1f", c.total_s) << " |\n";
  }
  return md.str();
}

std::string comparisons_markdown(const EvalResults& r) {
  const std::vector<ComparisonRow> rows = r.compare();
  if (rows.empty()) return "";
  std::ostringstream md;
  md << "\n## paired comparisons (same samples, equal budget)\n\n"
     << "A - B of the task average, with its interval from resampling the samples' paired "
        "differences within each task ("
     << r.meta.bootstrap.describe() << "); per-task rows are in the JSON.\n\n"
     << "| split | length | mode | budget | A | B | A score | B score | A - B | A better / "
        "equal / B better | n |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& c : rows) {
    if (c.task != "average") continue;
    const PairedDifference& d = c.result;
    md << "| " << c.split << " | " << length_name(c.target_length) << " | "
       << query_mode_name(c.mode) << " | " << c.budget << " | " << c.a << " | " << c.b << " | "
       << cell(d.a.estimate, d.a.low, d.a.high) << " | " << cell(d.b.estimate, d.b.low, d.b.high)
       << " | " << cell(d.diff.estimate, d.diff.low, d.diff.high, "%+.1f") << " | " << d.a_better
       << " / " << d.equal << " / " << d.b_better << " | " << d.diff.n << " |\n";
  }
  return md.str();
}

std::string ablation_markdown(const EvalResults& r) {
  if (r.ablation.empty()) return "";
  std::ostringstream md;
  md << "\n## ablation (chosen on DEV, reported on TEST)\n\n"
     << "Per method, the window x pooling setting with the best mean DEV task average over every "
        "(length, mode, budget) cell; the TEST tables and the comparisons 'chosen vs default' "
        "report it. The library's defaults are unchanged by this run.\n\n"
     << "| method | chosen on DEV | DEV score | default | default DEV score | cells |\n"
        "|---|---|---|---|---|---|\n";
  for (const auto& c : r.ablation)
    md << "| " << c.method << " | " << c.chosen << " | " << fmt("%.1f", c.dev_score) << " | "
       << c.default_setting << " | "
       << (std::isfinite(c.default_dev_score) ? fmt("%.1f", c.default_dev_score) : "-") << " | "
       << c.cells << " |\n";
  return md.str();
}

}  // namespace

std::string results_to_markdown(const EvalResults& r) {
  const auto rows = r.aggregate();
  const RunMeta& m = r.meta;
  std::ostringstream md;
  md << "# Evaluation results\n\n";
  write_meta_markdown(md, m);
  md << "- prompt style: " << (m.prompt_style.empty() ? "raw" : m.prompt_style) << "\n";
  md << "- seeds: base seed " << m.base_seed << " (sample i of task t uses sample_seed(base, t, i)";
  if (!m.split.empty()) md << "; split " << m.split << ", docs/EVAL.md";
  md << "); greedy decoding\n";
  md << "- metric: RULER string_match_all (qa: string_match_part), x100, mean over samples; "
        "intervals: "
     << m.bootstrap.describe() << "\n";
  for (const auto& n : m.notes) md << "- " << n << "\n";

  // One table per (split, length, mode); columns: setting, then tasks, then average.
  using TableKey = std::tuple<std::string, int64_t, int>;
  std::map<TableKey, std::vector<const AggregateRow*>> tables;
  for (const auto& a : rows)
    tables[{a.split, a.target_length, static_cast<int>(a.mode)}].push_back(&a);
  for (const auto& [key, list] : tables) {
    const auto& [split, length, mode] = key;
    std::set<std::string> task_set;
    for (const auto* a : list)
      if (a->task != "average") task_set.insert(a->task);
    md << "\n## " << (split.empty() ? "" : split + ", ") << "length "
       << (length > 0 ? std::to_string(length) : std::string("external")) << ", "
       << query_mode_name(static_cast<QueryMode>(mode)) << "\n\n";
    md << "| method | budget | window | pooling | policy | aggregate | mode | length |";
    for (const auto& t : task_set) md << " " << markdown_cell(t) << " |";
    md << " average | n |\n|---|---|---|---|---|---|---|---|";
    for (size_t i = 0; i < task_set.size(); ++i) md << "---|";
    md << "---|---|\n";
    using Setting =
        std::tuple<std::string, std::string, int, bool, std::string, std::string, std::string>;
    std::map<Setting, std::map<std::string, const AggregateRow*>> by_setting;
    for (const auto* a : list)
      by_setting[Setting{a->method, a->budget, a->window, a->window_is_question, a->pooling,
                         a->policy, a->aggregate}][a->task] = a;
    for (const auto& [s, cells] : by_setting) {
      md << "| " << std::get<0>(s) << " | " << std::get<1>(s) << " | "
         << (std::get<3>(s) ? std::string("question") : std::to_string(std::get<2>(s))) << " | "
         << std::get<4>(s) << " | " << std::get<5>(s) << " | " << std::get<6>(s) << " | "
         << query_mode_name(static_cast<QueryMode>(mode)) << " | " << length_name(length) << " |";
      for (const auto& t : task_set) {
        auto it = cells.find(t);
        md << " "
           << (it == cells.end()
                   ? std::string("-")
                   : cell(it->second->score, it->second->ci_low, it->second->ci_high, "%.0f"))
           << " |";
      }
      const AggregateRow* avg = cells.at("average");
      md << " " << cell(avg->score, avg->ci_low, avg->ci_high) << " | " << avg->samples << " |\n";
    }
  }
  md << comparisons_markdown(r);
  md << ablation_markdown(r);
  md << cost_markdown(r);
  return md.str();
}

void write_text_file(const std::string& path, const std::string& text, const std::string& label) {
  io::write_file_atomically(path, label.empty() ? "'" + path + "'" : label,
                            {{text.data(), text.size()}});
}

}  // namespace kvevict::eval
