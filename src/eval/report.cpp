#include "kvevict/eval/report.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "kvevict/error.h"

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
                       {"answer_seconds", x.answer_seconds}});
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
  return md.str();
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  KVEVICT_CHECK(out.good(), "cannot open '", path, "' for writing; expected a writable path");
  out << text;
  out.flush();
  KVEVICT_CHECK(out.good(), "writing '", path, "' failed after ", text.size(), " bytes");
}

}  // namespace kvevict::eval
