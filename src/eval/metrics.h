// RULER's metrics (scripts/eval/synthetic/constants.py): case-insensitive substring matching of
// every reference answer in the model's prediction, on a 0..100 scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::eval {

enum class Metric : uint8_t {
  kStringMatchAll,   // mean over answers of [answer in prediction] x 100 (niah, vt, cwe, fwe)
  kStringMatchPart,  // max over answers of [answer in prediction] x 100 (qa)
};
const char* metric_name(Metric m);  // "string_match_all" | "string_match_part"
Metric metric_parse(const std::string& s);
// RULER's choice per task: qa* -> string_match_part, everything else string_match_all.
Metric metric_for_task(const std::string& task);

// RULER's postprocessing of a prediction: control characters become newlines, then the result is
// trimmed of whitespace.
std::string postprocess_prediction(const std::string& prediction);

// Per-sample scores in [0, 100]. Matching is ASCII case-insensitive (Python's str.lower() on the
// ASCII text of these tasks). An empty answer list is an error (the score would be undefined).
double string_match_all(const std::string& prediction, const std::vector<std::string>& answers);
double string_match_part(const std::string& prediction, const std::vector<std::string>& answers);
double score_prediction(Metric m, const std::string& prediction,
                        const std::vector<std::string>& answers);

// Mean over samples, as RULER reports a task (predictions[i] scored against answers[i]).
double corpus_score(Metric m, const std::vector<std::string>& predictions,
                    const std::vector<std::vector<std::string>>& answers);

}  // namespace kvevict::eval
