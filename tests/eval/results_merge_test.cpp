// Results files read back (results_from_json) and runs merged (merge_results, `kvevict merge`):
// a run cut into one run per task and merged again reports the same cells, intervals and paired
// comparisons as the whole run; incompatible or overlapping runs and damaged files are refused
// with a message naming the file, the place and the value.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "eval/report.h"
#include "eval/rng.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

// Three tasks x 12 samples x two modes x {full, dropkv, snapkv at 0.1}, seeded 0/100/partial
// scores; batches one per (sample, mode).
EvalResults synthetic_run() {
  EvalResults r;
  r.meta.model = "fake";
  r.meta.prompt_style = "chat";
  r.meta.split = "test";
  r.meta.git_commit = "abc123";
  r.meta.device = "cpu";
  r.meta.model_sha256 = "00ff";
  r.meta.command_line = "kvevict eval --tasks all";
  r.meta.options_json = R"({"samples": 12, "tasks": "all"})";
  r.meta.bootstrap.resamples = 500;
  r.meta.comparisons = {{"dropkv", "snapkv"}, {"dropkv", "full"}};
  Rng rng(7);
  for (const char* task : {"niah_single_1", "vt", "qa_1"}) {
    for (int64_t i = 0; i < 12; ++i) {
      for (QueryMode mode : {QueryMode::kAware, QueryMode::kAgnostic}) {
        BatchRecord b;
        b.split = "test";
        b.task = task;
        b.target_length = 2048;
        b.sample_index = i;
        b.mode = mode;
        b.prefill_tokens = 2000 + i;
        b.settings = 3;
        b.prefill_seconds = 0.01 * (i + 1);
        b.answer_seconds = 0.02;
        b.evict_seconds = 0.003;
        b.append_seconds = mode == QueryMode::kAgnostic ? 0.001 : 0.0;
        b.decode_seconds = 0.004;
        b.decode_steps = 17;
        b.batches = 1;
        r.batches.push_back(b);
        for (const char* method : {"full", "dropkv", "snapkv"}) {
          SampleRecord x;
          x.split = "test";
          x.task = task;
          x.target_length = 2048;
          x.sample_index = i;
          x.seed = 1000 + static_cast<uint64_t>(i);
          x.context_tokens = 1990;
          x.question_tokens = 10;
          x.mode = mode;
          x.method = method;
          x.budget = std::string(method) == "full" ? "1" : "0.1";
          x.window = 8;
          x.pooling = "none";
          x.policy = std::string(method) == "full" ? "none" : "uniform";
          x.aggregate = "snapkv";
          x.prediction = "answer \"quoted\"\n";
          x.answers = {"a1", "a2"};
          x.metric =
              std::string(task) == "qa_1" ? Metric::kStringMatchPart : Metric::kStringMatchAll;
          x.score = static_cast<double>(rng.uniform(3)) * 50.0;
          x.kept_tokens = 200;
          x.generated_tokens = 5;
          x.answer_seconds = 0.001;
          x.prefill_seconds = b.prefill_seconds;
          x.evict_seconds = 0.001;
          r.records.push_back(x);
        }
      }
    }
  }
  return r;
}

EvalResults only_task(const EvalResults& all, const std::string& task) {
  EvalResults r;
  r.meta = all.meta;
  for (const auto& x : all.records)
    if (x.task == task) r.records.push_back(x);
  for (const auto& b : all.batches)
    if (b.task == task) r.batches.push_back(b);
  return r;
}

// fn must throw kvevict::Error with every word in its message.
void expect_throw_contains(const std::function<void()>& fn, const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one with: " << words.front();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << w << " not in: " << msg;
  }
}

nlohmann::json section(const EvalResults& r, const char* key) {
  return nlohmann::json::parse(results_to_json(r))[key];
}

TEST(ResultsRead, RoundTripsEveryField) {
  const EvalResults r = synthetic_run();
  const std::string text = results_to_json(r);
  EXPECT_EQ(results_to_json(results_from_json(text, "run.json")), text);
}

TEST(ResultsMerge, PerTaskRunsMergeToTheWholeRunsCellsAndComparisons) {
  const EvalResults whole = synthetic_run();
  std::vector<EvalResults> parts;
  std::vector<std::string> labels;
  for (const char* task : {"qa_1", "niah_single_1", "vt"}) {  // not the whole run's order
    parts.push_back(results_from_json(results_to_json(only_task(whole, task)), task));
    labels.push_back(std::string(task) + ".json");
  }
  const EvalResults merged = merge_results(parts, labels);
  EXPECT_EQ(merged.records.size(), whole.records.size());
  EXPECT_EQ(merged.batches.size(), whole.batches.size());
  // Every cell (per task and the average over tasks) with its interval, every paired
  // comparison, and the cost table: as the whole run reports them.
  EXPECT_EQ(section(merged, "aggregate"), section(whole, "aggregate"));
  EXPECT_EQ(section(merged, "comparisons"), section(whole, "comparisons"));
  EXPECT_EQ(section(merged, "cost"), section(whole, "cost"));
  const auto notes = merged.meta.notes;
  ASSERT_EQ(notes.size(), 4u);
  EXPECT_NE(notes[1].find("qa_1.json: kvevict eval --tasks all"), std::string::npos);
}

TEST(ResultsMerge, RefusesRunsOfAnotherModelCommitOrProtocol) {
  const EvalResults whole = synthetic_run();
  const EvalResults a = only_task(whole, "vt");
  auto refused = [&](EvalResults b, const std::vector<std::string>& words) {
    expect_throw_contains([&] { merge_results({a, b}, {"a.json", "b.json"}); }, words);
  };
  EvalResults b = only_task(whole, "qa_1");
  b.meta.model_sha256 = "1234";
  refused(b, {"b.json", "model_sha256", "'1234'", "a.json", "'00ff'"});
  b = only_task(whole, "qa_1");
  b.meta.git_commit = "def456";
  refused(b, {"b.json", "git_commit", "def456"});
  b = only_task(whole, "qa_1");
  b.meta.bootstrap.resamples = 100;
  refused(b, {"bootstrap", "100 resamples"});
  b = only_task(whole, "qa_1");
  b.meta.comparisons.pop_back();
  refused(b, {"b.json", "--compare"});
  refused(only_task(whole, "vt"), {"b.json", "repeats sample vt #0", "earlier file"});
  expect_throw_contains([&] { merge_results({a}, {"a.json"}); }, {"1 results files", "at least 2"});
}

TEST(ResultsRead, DamagedFilesAreNamedWithThePlaceAndTheValue) {
  const std::string good = results_to_json(only_task(synthetic_run(), "vt"));
  auto refused = [](const std::string& text, const std::vector<std::string>& words) {
    expect_throw_contains([&] { results_from_json(text, "r.json"); }, words);
  };
  refused("{", {"r.json", "not valid JSON"});
  refused(R"({"kind": "something"})", {"r.json", "not a kvevict results file"});
  refused(R"({"kind": "kvevict-results", "version": 1})", {"r.json", "version 1", "version 2"});
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json doc = nlohmann::json::parse(good);
    edit(doc);
    return doc.dump();
  };
  refused(edited([](auto& d) { d["records"][3]["score"] = "high"; }),
          {"r.json records[3]", "'score'", "string", "expected a number"});
  refused(edited([](auto& d) { d["records"][2]["score"] = 250; }),
          {"r.json records[2]", "'score' is 250", "0..100"});
  refused(edited([](auto& d) { d["records"][0].erase("task"); }),
          {"r.json records[0]", "'task' is missing"});
  refused(edited([](auto& d) { d["records"][1]["mode"] = "sideways"; }),
          {"r.json records[1]", "'mode'", "sideways"});
  refused(edited([](auto& d) { d["batches"][0]["decode_steps"] = 1.5; }),
          {"r.json batches[0]", "'decode_steps' is 1.5", "integer"});
  refused(edited([](auto& d) { d["meta"]["bootstrap"]["level"] = 2; }), {"level", "2"});
  refused(edited([](auto& d) { d["records"] = 5; }), {"r.json", "'records'", "not an array"});
  refused(edited([](auto& d) {
            d["ablation"] = nlohmann::json::array({{{"method", "x"}}});
          }),
          {"r.json", "ablation run"});
}

}  // namespace
}  // namespace kvevict::eval
