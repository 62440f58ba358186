#include "eval/metrics.h"

#include <algorithm>
#include <cctype>

#include "kvevict/error.h"

namespace kvevict::eval {

namespace {

std::string lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void check_answers(const std::vector<std::string>& answers) {
  KVEVICT_CHECK(!answers.empty(), "a sample has ", answers.size(),
                " reference answers; expected at least one");
  for (size_t i = 0; i < answers.size(); ++i)
    KVEVICT_CHECK(!answers[i].empty(), "reference answer ", i,
                  " is the empty string; expected a non-empty answer (an empty one is found in "
                  "every prediction)");
}

}  // namespace

const char* metric_name(Metric m) {
  return m == Metric::kStringMatchPart ? "string_match_part" : "string_match_all";
}

Metric metric_parse(const std::string& s) {
  if (s == "string_match_all") return Metric::kStringMatchAll;
  if (s == "string_match_part") return Metric::kStringMatchPart;
  KVEVICT_FAIL("metric '", s, "' is unknown; expected 'string_match_all' or 'string_match_part'");
}

Metric metric_for_task(const std::string& task) {
  return task.rfind("qa", 0) == 0 ? Metric::kStringMatchPart : Metric::kStringMatchAll;
}

std::string postprocess_prediction(const std::string& prediction) {
  std::string out = prediction;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  const auto not_space = [](char c) { return !std::isspace(static_cast<unsigned char>(c)); };
  out.erase(out.begin(), std::find_if(out.begin(), out.end(), not_space));
  out.erase(std::find_if(out.rbegin(), out.rend(), not_space).base(), out.end());
  return out;
}

double string_match_all(const std::string& prediction, const std::vector<std::string>& answers) {
  check_answers(answers);
  const std::string p = lower(prediction);
  double hits = 0.0;
  for (const auto& a : answers) hits += p.find(lower(a)) != std::string::npos ? 1.0 : 0.0;
  return 100.0 * hits / static_cast<double>(answers.size());
}

double string_match_part(const std::string& prediction, const std::vector<std::string>& answers) {
  check_answers(answers);
  const std::string p = lower(prediction);
  for (const auto& a : answers)
    if (p.find(lower(a)) != std::string::npos) return 100.0;
  return 0.0;
}

double score_prediction(Metric m, const std::string& prediction,
                        const std::vector<std::string>& answers) {
  return m == Metric::kStringMatchPart ? string_match_part(prediction, answers)
                                       : string_match_all(prediction, answers);
}

double corpus_score(Metric m, const std::vector<std::string>& predictions,
                    const std::vector<std::vector<std::string>>& answers) {
  KVEVICT_CHECK(predictions.size() == answers.size(), "got ", predictions.size(),
                " predictions for ", answers.size(), " answer lists; expected one per sample");
  KVEVICT_CHECK(!predictions.empty(), "no predictions to score; expected at least one sample");
  double total = 0.0;
  for (size_t i = 0; i < predictions.size(); ++i)
    total += score_prediction(m, predictions[i], answers[i]);
  return total / static_cast<double>(predictions.size());
}

}  // namespace kvevict::eval
