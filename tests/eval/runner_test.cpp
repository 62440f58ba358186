// The runner prefills each sample once per mode, answers with every method from that prefill, and
// aggregates scores into the tables the reports print.
#include "eval/runner.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "eval/eval_fixtures.h"
#include "eval/report.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

struct FakeState : PrefillState {
  std::vector<int32_t> tokens;  // [context (+ question when query-aware)] what was prefilled
  QueryMode mode;
  int answers_given = 0;
};

// Answers deterministically by method so the expected scores are known: "full" recalls every
// answer, "snapkv" the first half of them, anything else none. It checks the contract: the state
// it gets back is the one prefill() made for this sample and mode.
class FakeModel : public EvalModel {
 public:
  std::string name() const override { return "fake-model"; }
  const Tokenizer& tokenizer() const override { return tok_; }
  std::unique_ptr<PrefillState> prefill(const std::vector<int32_t>& context,
                                        const std::vector<int32_t>& question,
                                        QueryMode mode) override {
    ++prefills;
    auto st = std::make_unique<FakeState>();
    st->tokens = context;
    if (mode == QueryMode::kAware)
      st->tokens.insert(st->tokens.end(), question.begin(), question.end());
    st->mode = mode;
    EXPECT_EQ(context.at(0), tok_.bos_id());
    return st;
  }
  Generation answer(PrefillState& state, const MethodConfig& m,
                    const std::vector<int32_t>& question, QueryMode mode,
                    int max_new_tokens) override {
    auto& st = static_cast<FakeState&>(state);
    EXPECT_EQ(st.mode, mode);
    EXPECT_GT(max_new_tokens, 0);
    last_max_new_tokens = max_new_tokens;
    EXPECT_FALSE(question.empty());
    ++st.answers_given;
    max_answers_per_prefill = std::max(max_answers_per_prefill, st.answers_given);
    Generation g;
    const auto& answers = current_answers;
    size_t keep = m.is_full() ? answers.size() : m.name == "snapkv" ? answers.size() / 2 : 0;
    g.text = "  ";
    for (size_t i = 0; i < keep; ++i) g.text += answers[i] + ", ";
    g.kept_tokens = static_cast<int64_t>(st.tokens.size());
    g.generated_tokens = m.is_full() ? 3 : 5;
    return g;
  }
  testing::WhitespaceTokenizer tok_;
  int prefills = 0;
  int max_answers_per_prefill = 0;
  int last_max_new_tokens = 0;
  std::vector<std::string> current_answers;
};

Sample sample(const std::string& task, std::vector<std::string> answers, int64_t length) {
  Sample s;
  s.task = task;
  s.context = "some context words here\n";
  s.question = "What is it?";
  s.answer_prefix = " Answer:";
  s.answers = std::move(answers);
  s.max_new_tokens = 8;
  s.target_length = length;
  format_prompt(s, PromptStyle::kRaw, nullptr);
  return s;
}

TEST(Runner, PrefillsOncePerSampleAndModeAndScoresEveryMethod) {
  FakeModel model;
  std::vector<Sample> samples = {sample("niah_multivalue", {"a1", "b2", "c3", "d4"}, 4096),
                                 sample("niah_multivalue", {"e5", "f6"}, 4096),
                                 sample("vt", {"x", "y"}, 4096)};
  RunOptions opt;
  opt.methods = expand_methods({"full", "snapkv", "knorm"}, {Budget{0.5}, Budget{0.25}});
  ASSERT_EQ(opt.methods.size(), 5u);  // full once + 2 x 2
  opt.modes = {QueryMode::kAware, QueryMode::kAgnostic};
  opt.base_seed = 99;
  std::vector<Progress> seen;
  // The fake needs the answers of the sample being answered; the runner goes in sample order.
  size_t answer_calls = 0;
  auto progress = [&](const Progress& p) {
    seen.push_back(p);
    ++answer_calls;
    const size_t per_sample = opt.methods.size() * opt.modes.size();
    if (answer_calls % per_sample == 0 && answer_calls / per_sample < samples.size())
      model.current_answers = samples[answer_calls / per_sample].answers;
  };
  model.current_answers = samples[0].answers;
  EvalResults res = run_eval(model, samples, opt, progress);

  EXPECT_EQ(model.prefills, 3 * 2) << "one prefill per sample and mode";
  EXPECT_EQ(model.max_answers_per_prefill, 5) << "every method answers from the same prefill";
  ASSERT_EQ(res.records.size(), 3u * 2u * 5u);
  ASSERT_EQ(seen.size(), res.records.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].done, static_cast<int64_t>(i + 1));
    EXPECT_EQ(seen[i].total, 30);
    EXPECT_GE(seen[i].eta_s, 0.0);
  }
  EXPECT_EQ(seen.back().eta_s, 0.0);
  EXPECT_NE(format_progress(seen[4]).find("5/30 (17%)"), std::string::npos)
      << format_progress(seen[4]);

  // Expected scores: full 100; snapkv keeps half the answers -> 50; knorm 0.
  std::map<std::string, double> by_method;
  for (const auto& a : res.aggregate())
    if (a.task == "niah_multivalue" && a.mode == QueryMode::kAware &&
        (a.budget == "0.5" || a.method == "full"))
      by_method[a.method] = a.score;
  EXPECT_DOUBLE_EQ(by_method["full"], 100.0);
  EXPECT_DOUBLE_EQ(by_method["snapkv"], 50.0);
  EXPECT_DOUBLE_EQ(by_method["knorm"], 0.0);

  // Records carry the settings the tables must name.
  const SampleRecord& r = res.records[1];
  EXPECT_EQ(r.method, "snapkv");
  EXPECT_EQ(r.budget, "0.5");
  // Query-aware: the window is the question (SPEC 5); query-agnostic keeps snapkv's 32.
  EXPECT_EQ(r.window, r.question_tokens);
  EXPECT_GT(r.question_tokens, 1);
  EXPECT_EQ(res.records[6].method, "snapkv");
  EXPECT_EQ(res.records[6].mode, QueryMode::kAgnostic);
  EXPECT_EQ(res.records[6].window, 32);
  EXPECT_EQ(r.pooling, "max:7");
  EXPECT_EQ(r.policy, "uniform");
  EXPECT_EQ(r.sample_index, 0);
  EXPECT_EQ(res.records[10].sample_index, 1) << "second niah_multivalue sample";
  EXPECT_EQ(res.records[20].sample_index, 0) << "first vt sample";
  // Query-agnostic prefills only the context; query-aware context + question.
  EXPECT_EQ(res.records[0].kept_tokens,
            res.records[0].context_tokens + res.records[0].question_tokens);
  EXPECT_EQ(res.records[5].mode, QueryMode::kAgnostic);
  EXPECT_EQ(res.records[5].kept_tokens, res.records[5].context_tokens);
}

// kvevict eval --first-sample K: generated samples carry their index in the split, records keep
// it, and runs over disjoint ranges merge into what one run over them all reports.
TEST(Runner, SamplesFromAnOffsetKeepTheirIndexAndMergeWithTheRest) {
  FakeModel model;
  model.current_answers = {"x", "y"};
  std::vector<Sample> all;
  for (int i = 0; i < 4; ++i) {
    all.push_back(sample("vt", {"x", "y"}, 4096));
    all.back().index = i;
    all.back().seed = 100 + i;
  }
  RunOptions opt;
  opt.methods = expand_methods({"full", "snapkv"}, {Budget{0.5}});
  opt.modes = {QueryMode::kAware};
  opt.base_seed = 99;
  const EvalResults whole = run_eval(model, all, opt);
  const EvalResults first = run_eval(model, {all[0], all[1]}, opt);
  const EvalResults second = run_eval(model, {all[2], all[3]}, opt);
  ASSERT_EQ(second.records.size(), 4u);
  EXPECT_EQ(second.records[0].sample_index, 2);
  EXPECT_EQ(second.records[3].sample_index, 3);
  const EvalResults merged = merge_results({first, second}, {"first.json", "second.json"});
  const auto json_of = [](const EvalResults& r) {
    return nlohmann::json::parse(results_to_json(r));
  };
  EXPECT_EQ(json_of(merged)["aggregate"], json_of(whole)["aggregate"]);
  EXPECT_EQ(json_of(merged)["records"].size(), json_of(whole)["records"].size());
  EXPECT_THROW(merge_results({first, first}, {"first.json", "again.json"}), Error);
}

TEST(Runner, AverageRowIsTheMeanOverTasks) {
  EvalResults res;
  auto rec = [](const std::string& task, double score) {
    SampleRecord r;
    r.task = task;
    r.target_length = 4096;
    r.method = "dropkv";
    r.budget = "0.25";
    r.window = 8;
    r.pooling = "none";
    r.policy = "uniform";
    r.score = score;
    return r;
  };
  // Task a: mean 50 over 2 samples; task b: 100 over 1 -> average 75 (unweighted by samples).
  res.records = {rec("a", 100.0), rec("a", 0.0), rec("b", 100.0)};
  auto rows = res.aggregate();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].task, "a");
  EXPECT_DOUBLE_EQ(rows[0].score, 50.0);
  EXPECT_EQ(rows[0].samples, 2);
  EXPECT_EQ(rows[2].task, "average");
  EXPECT_DOUBLE_EQ(rows[2].score, 75.0);
  EXPECT_EQ(rows[2].samples, 3);
}

TEST(Runner, ReportsNameEverySetting) {
  FakeModel model;
  model.current_answers = {"q"};
  std::vector<Sample> samples = {sample("niah_single_1", {"q"}, 8192)};
  RunOptions opt;
  opt.methods = expand_methods({"full", "dropkv"}, {Budget{0.1}}, 16, "avg:5");
  opt.modes = {QueryMode::kAgnostic};
  opt.base_seed = 1234;
  opt.prompt_style = "chat";
  EvalResults res = run_eval(model, samples, opt);
  const std::string md = results_to_markdown(res);
  for (const char* part : {"fake-model", "base seed 1234", "chat", "length 8192", "query-agnostic",
                           "| dropkv | 0.1 | 16 | avg:5 | uniform |",
                           "| full | 1 | 0 | none | none |", "niah_single_1", "average"})
    EXPECT_NE(md.find(part), std::string::npos) << "'" << part << "' missing from:\n" << md;
  const auto doc = nlohmann::json::parse(results_to_json(res));
  EXPECT_EQ(doc.at("kind"), "kvevict-results");
  EXPECT_EQ(doc.at("meta").at("model"), "fake-model");
  EXPECT_EQ(doc.at("meta").at("base_seed"), 1234);
  ASSERT_EQ(doc.at("records").size(), 2u);
  EXPECT_EQ(doc.at("records")[1].at("window"), 16);
  EXPECT_EQ(doc.at("records")[1].at("mode"), "query-agnostic");
  EXPECT_EQ(doc.at("records")[0].at("score"), 100.0);
  EXPECT_EQ(doc.at("aggregate").size(), 4u);  // 2 settings x (task + average)
}

TEST(Runner, CapsAnswersAndReportsWhatTheRunCost) {
  FakeModel model;
  model.current_answers = {"q"};
  std::vector<Sample> samples = {sample("niah_single_1", {"q"}, 4096),
                                 sample("niah_single_1", {"q"}, 4096)};
  RunOptions opt;
  opt.methods = expand_methods({"full", "dropkv", "snapkv"}, {Budget{0.1}});
  run_eval(model, samples, opt);
  EXPECT_EQ(model.last_max_new_tokens, 8);  // the sample's own limit
  opt.max_new_tokens_cap = 3;
  EvalResults res = run_eval(model, samples, opt);
  EXPECT_EQ(model.last_max_new_tokens, 3);
  opt.max_new_tokens_cap = 100;  // a cap above the limit changes nothing
  run_eval(model, samples, opt);
  EXPECT_EQ(model.last_max_new_tokens, 8);

  const auto doc = nlohmann::json::parse(results_to_json(res));
  ASSERT_EQ(doc.at("records").size(), 6u);
  for (const auto& r : doc.at("records")) {
    EXPECT_GE(r.at("prefill_seconds").get<double>(), 0.0);
    EXPECT_GE(r.at("answer_seconds").get<double>(), 0.0);
    EXPECT_EQ(r.at("generated_tokens"), r.at("method") == "full" ? 3 : 5);
  }
  // Two samples, three settings each; the fake model reports no runtime costs: "-".
  const std::string md = results_to_markdown(res);
  EXPECT_NE(md.find("## cost"), std::string::npos) << md;
  EXPECT_NE(md.find("| 4096 | query-aware | 2 | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | 3 | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | 3 | - | - | - | - | - | "), std::string::npos) << md;
}

TEST(Runner, QuestionWindowsOfDifferentLengthsShareOneRow) {
  FakeModel model;
  model.current_answers = {"q"};
  std::vector<Sample> samples = {sample("niah_single_1", {"q"}, 4096),
                                 sample("niah_single_1", {"q"}, 4096)};
  samples[1].question = "A much longer question with more tokens in it?";
  format_prompt(samples[1], PromptStyle::kRaw, nullptr);
  RunOptions opt;
  opt.methods = expand_methods({"dropkv:spec"}, {Budget{0.5}});  // unpinned: the question
  EvalResults res = run_eval(model, samples, opt);
  ASSERT_EQ(res.records.size(), 2u);
  EXPECT_NE(res.records[0].window, res.records[1].window);
  EXPECT_TRUE(res.records[0].window_is_question);
  auto rows = res.aggregate();
  ASSERT_EQ(rows.size(), 2u);    // the task row and the average row
  EXPECT_EQ(rows[0].window, 0);  // the count varies by sample: one row, window 0
  EXPECT_TRUE(rows[0].window_is_question);
  EXPECT_EQ(rows[0].samples, 2);
  EXPECT_NE(results_to_markdown(res).find("| dropkv:spec | 0.5 | question |"), std::string::npos)
      << results_to_markdown(res);
}

TEST(Runner, QuestionWindowCanBeTurnedOff) {
  FakeModel model;
  model.current_answers = {"q"};
  std::vector<Sample> samples = {sample("niah_single_1", {"q"}, 4096)};
  RunOptions opt;
  opt.methods = expand_methods({"dropkv:spec"}, {Budget{0.5}});
  opt.question_window = false;
  EvalResults res = run_eval(model, samples, opt);
  ASSERT_EQ(res.records.size(), 1u);
  EXPECT_EQ(res.records[0].window, 8) << "dropkv's own window";
  opt.question_window = true;
  res = run_eval(model, samples, opt);
  EXPECT_EQ(res.records[0].window, res.records[0].question_tokens);
  // The measured default pins its window: 32 in both modes.
  opt.methods = expand_methods({"dropkv"}, {Budget{0.5}});
  res = run_eval(model, samples, opt);
  EXPECT_EQ(res.records[0].window, kMeasuredWindow);
  EXPECT_FALSE(res.records[0].window_is_question);
  // h2o sums over all queries: no observation window to replace.
  opt.methods = expand_methods({"h2o"}, {Budget{0.5}});
  res = run_eval(model, samples, opt);
  EXPECT_FALSE(res.records[0].window_is_question);
  EXPECT_EQ(res.records[0].window, MethodConfig::make("h2o", Budget{0.5}).window());
}

TEST(Runner, BadInputsAreErrors) {
  FakeModel model;
  RunOptions opt;
  EXPECT_THROW(run_eval(model, {}, opt), Error);  // no methods
  opt.methods = expand_methods({"full"}, {});
  Sample s;
  s.task = "t";
  s.answers = {"a"};
  try {
    run_eval(model, {s}, opt);
    FAIL() << "expected an error for an unformatted sample";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("format_prompt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(expand_methods({"dropkv"}, {}), Error);
  EXPECT_THROW(expand_methods({"nosuchmethod"}, {Budget{0.5}}), Error);
  EXPECT_EQ(query_mode_parse("agnostic"), QueryMode::kAgnostic);
  EXPECT_THROW(query_mode_parse("both"), Error);
}

}  // namespace
}  // namespace kvevict::eval
