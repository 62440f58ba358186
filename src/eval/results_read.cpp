// Results JSON (version 2, report.cpp's results_to_json) read back into EvalResults, and several
// runs merged into one (`kvevict merge`): the cells, intervals and paired comparisons of the
// merged run are recomputed by EvalResults::aggregate() / compare(), the same code as one run's.
#include <nlohmann/json.hpp>

#include <set>
#include <tuple>

#include "eval/metrics.h"
#include "eval/report.h"
#include "eval/results_format.h"
#include "kvevict/error.h"

namespace kvevict::eval {

using nlohmann::json;

namespace {

// An enum field through its parser; the parser's message is prefixed with where it was read.
template <typename Parse>
auto parse_named(const JsonReader& r, const char* key, Parse parse) {
  const std::string text = r.str(key);
  try {
    return parse(text);
  } catch (const Error& e) {
    KVEVICT_FAIL(r.where(), ": '", key, "': ", e.what());
  }
}

const json& array_field(const json& doc, const char* key, const std::string& label) {
  auto it = doc.find(key);
  KVEVICT_CHECK(it != doc.end() && it->is_array(), label, ": '", key,
                "' is missing or not an array; expected a kvevict ",
                "results file (kvevict eval --out)");
  return *it;
}

SampleRecord read_record(const json& j, const std::string& where) {
  const JsonReader r(j, where);
  SampleRecord x;
  x.split = r.str("split");
  x.task = r.str("task");
  x.target_length = r.integer("target_length");
  x.sample_index = r.integer("sample_index");
  x.seed = r.unsigned_integer("seed");
  x.context_tokens = r.integer("context_tokens");
  x.question_tokens = r.integer("question_tokens");
  x.mode = parse_named(r, "mode", query_mode_parse);
  x.method = r.str("method");
  x.budget = r.str("budget");
  x.window = static_cast<int>(r.integer("window"));
  x.window_is_question = r.boolean("window_is_question");
  x.pooling = r.str("pooling");
  x.policy = r.str("policy");
  x.aggregate = r.str("aggregate");
  x.normalize = r.boolean("normalize");
  x.keep_last = r.boolean("keep_last");
  x.prediction = r.str("prediction");
  x.answers = r.strings("answers");
  x.metric = parse_named(r, "metric", metric_parse);
  x.score = r.number("score");
  KVEVICT_CHECK(x.score >= 0 && x.score <= 100, where, ": 'score' is ", x.score,
                "; expected 0..100");
  x.kept_tokens = r.integer("kept_tokens");
  x.generated_tokens = r.integer("generated_tokens");
  x.answer_seconds = r.number("answer_seconds");
  x.prefill_seconds = r.number("prefill_seconds");
  x.evict_seconds = r.number("evict_seconds");
  return x;
}

BatchRecord read_batch(const json& j, const std::string& where) {
  const JsonReader r(j, where);
  BatchRecord b;
  b.split = r.str("split");
  b.task = r.str("task");
  b.target_length = r.integer("target_length");
  b.sample_index = r.integer("sample_index");
  b.mode = parse_named(r, "mode", query_mode_parse);
  b.prefill_tokens = r.integer("prefill_tokens");
  b.settings = r.integer("settings");
  b.prefill_seconds = r.number("prefill_seconds");
  b.answer_seconds = r.number("answer_seconds");
  b.evict_seconds = r.reported("evict_seconds");
  b.append_seconds = r.reported("append_seconds");
  b.decode_seconds = r.reported("decode_seconds");
  b.decode_steps = r.reported_integer("decode_steps");
  b.batches = r.integer("batches");
  return b;
}

}  // namespace

EvalResults results_from_json(const std::string& text, const std::string& label) {
  const json doc = parse_results_json(text, label);
  const json version = doc.value("version", json());
  KVEVICT_CHECK(version == 2, label, ": results version ", version.dump(),
                "; this kvevict reads version 2");
  EvalResults r;
  r.meta = meta_from_json(doc, label);
  const json& records = array_field(doc, "records", label);
  r.records.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    r.records.push_back(read_record(records[i], label + " records[" + std::to_string(i) + "]"));
  const json& batches = array_field(doc, "batches", label);
  for (size_t i = 0; i < batches.size(); ++i)
    r.batches.push_back(read_batch(batches[i], label + " batches[" + std::to_string(i) + "]"));
  const json& ablation = array_field(doc, "ablation", label);
  KVEVICT_CHECK(ablation.empty(), label, ": an ablation run (", ablation.size(),
                " choices); only sweeps can be read back and merged");
  return r;
}

ResultsKind results_kind(const std::string& text, const std::string& label) {
  const json doc = parse_results_json(text, label);
  if (doc.contains("records")) return ResultsKind::kEval;
  if (doc.contains("ppl")) return ResultsKind::kPpl;
  KVEVICT_FAIL(label, ": a results file with neither 'records' (kvevict eval) nor 'ppl' (kvevict ",
               "ppl); expected one of those to merge");
}

EvalResults merge_results(const std::vector<EvalResults>& runs,
                          const std::vector<std::string>& labels) {
  KVEVICT_CHECK(runs.size() == labels.size() && runs.size() >= 2, "merge: ", runs.size(),
                " results files; expected at least 2");
  const RunMeta& first = runs[0].meta;
  // What makes two runs' numbers comparable: the same model file, build, prompts, split,
  // bootstrap and comparisons. What may differ: the tasks, lengths, samples and methods run.
  auto same = [&](const char* what, const std::string& a, const std::string& b, size_t i) {
    KVEVICT_CHECK(a == b, "merge: ", labels[i], " has ", what, " '", b, "' but ", labels[0],
                  " has '", a, "'; expected runs of one model, build and protocol");
  };
  std::set<std::tuple<std::string, std::string, int64_t, int, int64_t, std::string, std::string>>
      seen;
  EvalResults merged;
  merged.meta = first;
  merged.meta.notes.push_back("merged from " + std::to_string(runs.size()) + " runs:");
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMeta& m = runs[i].meta;
    check_mergeable(first, labels[0], m, labels[i]);
    same("prompt_style", first.prompt_style, m.prompt_style, i);
    same("split", first.split, m.split, i);
    KVEVICT_CHECK(m.comparisons == first.comparisons, "merge: ", labels[i],
                  " compares other settings than ", labels[0],
                  "; expected the same --compare in every run");
    for (const SampleRecord& x : runs[i].records) {
      const auto key = std::make_tuple(x.split, x.task, x.target_length, static_cast<int>(x.mode),
                                       x.sample_index, x.method, x.budget);
      KVEVICT_CHECK(seen.insert(key).second, "merge: ", labels[i], " repeats sample ", x.task, " #",
                    x.sample_index, " at ", x.target_length, " tokens (", query_mode_name(x.mode),
                    ", ", x.method, " at ", x.budget,
                    ") of an earlier file; expected disjoint runs");
    }
    merged.append(runs[i]);
    merged.meta.notes.push_back("  " + labels[i] + ": " + m.command_line);
  }
  return merged;
}

}  // namespace kvevict::eval
