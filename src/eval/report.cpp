#include "kvevict/eval/report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "kvevict/error.h"
#include "kvevict/io/atomic_file.h"

namespace kvevict::eval {

using nlohmann::json;

std::string results_to_json(const EvalResults& r, int indent) {
  json doc;
  doc["kind"] = "kvevict-results";
  doc["version"] = 1;
  doc["meta"] = {{"model", r.meta.model},
                 {"prompt_style", r.meta.prompt_style},
                 {"base_seed", r.meta.base_seed},
                 {"notes", r.meta.notes}};
  json records = json::array();
  for (const auto& x : r.records) {
    records.push_back({{"task", x.task},
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
                       {"prediction", x.prediction},
                       {"answers", x.answers},
                       {"metric", metric_name(x.metric)},
                       {"score", x.score},
                       {"kept_tokens", x.kept_tokens},
                       {"generated_tokens", x.generated_tokens},
                       {"answer_seconds", x.answer_seconds},
                       {"prefill_seconds", x.prefill_seconds}});
  }
  doc["records"] = records;
  json agg = json::array();
  for (const auto& a : r.aggregate()) {
    agg.push_back({{"task", a.task},
                   {"target_length", a.target_length},
                   {"mode", query_mode_name(a.mode)},
                   {"method", a.method},
                   {"budget", a.budget},
                   {"window", a.window},
                   {"pooling", a.pooling},
                   {"policy", a.policy},
                   {"samples", a.samples},
                   {"score", a.score}});
  }
  doc["aggregate"] = agg;
  return doc.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

// What the run cost: per (length, mode), the mean prefill per sample (paid once, shared by every
// method) and the mean eviction + answer time per method setting, so the cost of a sweep with M
// settings is about prefill + M x answer per sample.
std::string cost_markdown(const EvalResults& r) {
  struct Cost {
    std::set<std::pair<std::string, int64_t>> samples;  // (task, index): prefill counted once
    double prefill = 0, answer = 0;
    int64_t answers = 0, tokens = 0;
  };
  std::map<std::pair<int64_t, int>, Cost> by_group;
  for (const SampleRecord& x : r.records) {
    Cost& c = by_group[{x.target_length, static_cast<int>(x.mode)}];
    if (c.samples.insert({x.task, x.sample_index}).second) c.prefill += x.prefill_seconds;
    c.answer += x.answer_seconds;
    c.tokens += std::max<int64_t>(x.generated_tokens, 0);
    ++c.answers;
  }
  if (by_group.empty()) return "";
  std::ostringstream md;
  md << "\n## cost (CPU seconds of wall time on the machine that ran it)\n\n"
     << "| length | mode | samples | prefill s / sample | answers / sample | answer s (eviction + "
        "decode) | tokens / answer | s / sample |\n|---|---|---|---|---|---|---|---|\n";
  char buf[256];
  for (const auto& [key, c] : by_group) {
    const double n = static_cast<double>(c.samples.size());
    const double per_sample = (c.prefill + c.answer) / n;
    std::snprintf(buf, sizeof(buf), "| %s | %s | %zu | %.2f | %.0f | %.3f | %.1f | %.1f |\n",
                  key.first > 0 ? std::to_string(key.first).c_str() : "-",
                  query_mode_name(static_cast<QueryMode>(key.second)), c.samples.size(),
                  c.prefill / n, static_cast<double>(c.answers) / n,
                  c.answer / static_cast<double>(c.answers),
                  static_cast<double>(c.tokens) / static_cast<double>(c.answers), per_sample);
    md << buf;
  }
  return md.str();
}

}  // namespace

std::string results_to_markdown(const EvalResults& r) {
  const auto rows = r.aggregate();
  std::ostringstream md;
  md << "# Evaluation results\n\n";
  md << "- model: " << (r.meta.model.empty() ? "(unnamed)" : r.meta.model) << "\n";
  md << "- prompt style: " << (r.meta.prompt_style.empty() ? "raw" : r.meta.prompt_style) << "\n";
  md << "- seeds: base seed " << r.meta.base_seed
     << " (sample i of task t uses sample_seed(base, t, i)); greedy decoding\n";
  md << "- metric: RULER string_match_all (qa: string_match_part), x100, mean over samples\n";
  for (const auto& n : r.meta.notes) md << "- " << n << "\n";

  // One table per (length, mode); columns: setting, then tasks, then average.
  std::map<std::pair<int64_t, int>, std::vector<const AggregateRow*>> tables;
  for (const auto& a : rows) tables[{a.target_length, static_cast<int>(a.mode)}].push_back(&a);
  for (const auto& [key, list] : tables) {
    std::set<std::string> task_set;
    for (const auto* a : list)
      if (a->task != "average") task_set.insert(a->task);
    md << "\n## length " << (key.first > 0 ? std::to_string(key.first) : std::string("external"))
       << ", " << query_mode_name(static_cast<QueryMode>(key.second)) << "\n\n";
    md << "| method | budget | window | pooling | policy | mode | length |";
    for (const auto& t : task_set) md << " " << t << " |";
    md << " average | n |\n|---|---|---|---|---|---|---|";
    for (size_t i = 0; i < task_set.size(); ++i) md << "---|";
    md << "---|---|\n";
    using Setting = std::tuple<std::string, std::string, std::string, std::string, std::string>;
    std::map<Setting, std::map<std::string, const AggregateRow*>> by_setting;
    for (const auto* a : list)
      by_setting[Setting{a->method, a->budget, a->window, a->pooling, a->policy}][a->task] = a;
    for (const auto& [s, cells] : by_setting) {
      md << "| " << std::get<0>(s) << " | " << std::get<1>(s) << " | " << std::get<2>(s) << " | "
         << std::get<3>(s) << " | " << std::get<4>(s) << " | "
         << query_mode_name(static_cast<QueryMode>(key.second)) << " | "
         << (key.first > 0 ? std::to_string(key.first) : std::string("-")) << " |";
      char buf[32];
      for (const auto& t : task_set) {
        auto it = cells.find(t);
        if (it == cells.end()) {
          md << " - |";
        } else {
          std::snprintf(buf, sizeof(buf), " %.1f |", it->second->score);
          md << buf;
        }
      }
      const AggregateRow* avg = cells.at("average");
      std::snprintf(buf, sizeof(buf), " %.1f | %lld |", avg->score,
                    static_cast<long long>(avg->samples));
      md << buf << "\n";
    }
  }
  md << cost_markdown(r);
  return md.str();
}

void write_text_file(const std::string& path, const std::string& text, const std::string& label) {
  io::write_file_atomically(path, label.empty() ? "'" + path + "'" : label,
                            {{text.data(), text.size()}});
}

}  // namespace kvevict::eval
