// Perplexity pieces: chunking, the NLL accumulator against hand-computed values, and the run loop.
#include "eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "eval/eval_fixtures.h"
#include "eval/ppl_report.h"
#include "eval/report.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

TEST(PplChunks, NonOverlappingFullChunks) {
  auto c = ppl_chunks(1003, 250);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].begin, 0);
  EXPECT_EQ(c[3].begin, 750);
  EXPECT_EQ(c[3].end, 1000);
  EXPECT_EQ(ppl_chunks(1003, 250, 2).size(), 2u);
  try {
    ppl_chunks(100, 250);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("250"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ppl_chunks(100, 1), Error);
}

TEST(ProseTokens, TakesTheFirstTokensOfTheText) {
  testing::WhitespaceTokenizer tok;
  const std::string prose = testing::test_corpus().prose_text();
  const auto all = tok.encode(prose, true);
  ASSERT_GT(all.size(), 20000u);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}, static_cast<int64_t>(all.size()) - 3}) {
    const auto got = prose_tokens(prose, tok, n);
    ASSERT_EQ(static_cast<int64_t>(got.size()), n);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin())) << n;
  }
  // More than the text has: all of it.
  EXPECT_EQ(prose_tokens(prose, tok, static_cast<int64_t>(all.size()) + 5).size(), all.size());
  EXPECT_THROW(prose_tokens(prose, tok, 0), Error);
}

TEST(PplAccumulator, MatchesHandComputedPerplexity) {
  PplAccumulator acc(3);
  const std::vector<double> nll = {0.5, 1.0, 2.0, 0.25, 3.0};  // positions 1..5
  acc.add_chunk(nll);
  double mean = (0.5 + 1.0 + 2.0 + 0.25 + 3.0) / 5.0;
  EXPECT_NEAR(acc.mean_nll(), mean, 1e-12);
  EXPECT_NEAR(acc.ppl(), std::exp(mean), 1e-12);
  auto b = acc.buckets();  // positions [0,3): 1,2 ; [3,6): 3,4,5
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].count, 2);
  EXPECT_NEAR(b[0].ppl, std::exp((0.5 + 1.0) / 2.0), 1e-12);
  EXPECT_EQ(b[1].count, 3);
  EXPECT_NEAR(b[1].ppl, std::exp((2.0 + 0.25 + 3.0) / 3.0), 1e-12);
  EXPECT_THROW(acc.add(0, 1.0), Error);
  EXPECT_THROW(acc.add(1, std::nan("")), Error);
  PplAccumulator empty;
  EXPECT_THROW(empty.mean_nll(), Error);
}

// NLL = budget-dependent constant so the expected ppl per method is known.
class FakePplModel : public PplModel {
 public:
  std::string name() const override { return "fake"; }
  std::vector<std::vector<double>> token_nlls(const std::vector<std::vector<int32_t>>& texts,
                                              const MethodConfig& m,
                                              const DecodeEvictionOptions& d) override {
    EXPECT_EQ(d.recent, 7);
    EXPECT_LE(static_cast<int>(texts.size()), per_call);
    const double nll = m.is_full() ? 1.0 : 1.0 + 1.0 / m.budget.value;
    std::vector<std::vector<double>> out;
    out.reserve(texts.size());
    for (const auto& t : texts) out.emplace_back(t.size() - 1, nll);
    return out;
  }
  int texts_per_call() const override { return per_call; }
  int per_call = 1;
};

TEST(PplRun, EveryMethodOnTheSameChunks) {
  FakePplModel model;
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 97);
  auto chunks = ppl_chunks(1000, 301);
  DecodeEvictionOptions d;
  d.recent = 7;
  auto methods = expand_methods({"full", "h2o"}, {Budget{64}, Budget{128}});
  int calls = 0;
  PplRun run = run_ppl(model, tokens, chunks, methods, d, 100,
                       [&](const Progress& p) { calls = static_cast<int>(p.done); });
  EXPECT_EQ(calls, 9);
  ASSERT_EQ(run.results.size(), 3u);
  EXPECT_NEAR(run.results[0].ppl, std::exp(1.0), 1e-12);
  EXPECT_NEAR(run.results[1].ppl, std::exp(1.0 + 1.0 / 64), 1e-12);
  EXPECT_EQ(run.results[1].budget, "64");
  EXPECT_EQ(run.results[2].evaluated_tokens, 3 * 300);
  EXPECT_EQ(run.results[2].buckets.size(), 4u);  // positions 1..300 in buckets of 100
  const auto doc = nlohmann::json::parse(ppl_to_json(run));
  EXPECT_EQ(doc.at("version"), 2);
  EXPECT_EQ(doc.at("meta").at("model"), "fake");
  ASSERT_EQ(doc.at("ppl").size(), 3u);
  EXPECT_EQ(doc.at("ppl")[2].at("method"), "h2o");
  EXPECT_EQ(doc.at("ppl")[2].at("recent"), 7);
  const std::string md = ppl_to_markdown(run);
  EXPECT_NE(md.find("| h2o | 128 |"), std::string::npos) << md;
  EXPECT_NE(md.find("recent 7"), std::string::npos) << md;
}

// A model that takes several chunks a call (the GPU's batch) gets each chunk once, in groups of at
// most texts_per_call, and the run's numbers do not depend on the grouping.
TEST(PplRun, ChunksGoInGroupsOfTextsPerCall) {
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 97);
  const auto chunks = ppl_chunks(1000, 301);  // 3 chunks
  DecodeEvictionOptions d;
  d.recent = 7;
  const auto methods = expand_methods({"full", "h2o"}, {Budget{64}});
  std::vector<int64_t> done;
  FakePplModel one, two;
  two.per_call = 2;
  const PplRun a = run_ppl(one, tokens, chunks, methods, d, 100);
  const PplRun b = run_ppl(two, tokens, chunks, methods, d, 100,
                           [&](const Progress& p) { done.push_back(p.done); });
  EXPECT_EQ(done, (std::vector<int64_t>{2, 3, 5, 6}));  // 2 + 1 chunks a method
  ASSERT_EQ(a.results.size(), b.results.size());
  for (size_t i = 0; i < a.results.size(); ++i) {
    EXPECT_EQ(a.results[i].evaluated_tokens, b.results[i].evaluated_tokens);
    EXPECT_DOUBLE_EQ(a.results[i].ppl, b.results[i].ppl);
  }
}

// Chunk-level statistics: each chunk's mean NLL in order, ppl's bootstrap interval over chunks
// (around the estimate; none with a single chunk), and the paired ratio against streamingllm at
// the same budget (a constant per-chunk NLL gap gives exactly its exp, every chunk better).
class ChunkVaryingModel : public PplModel {
 public:
  std::string name() const override { return "varying"; }
  std::vector<std::vector<double>> token_nlls(const std::vector<std::vector<int32_t>>& texts,
                                              const MethodConfig& m,
                                              const DecodeEvictionOptions&) override {
    std::vector<std::vector<double>> out;
    out.reserve(texts.size());
    for (const auto& t : texts) {
      const double base = m.is_full() ? 1.0 : m.name == "streamingllm" ? 1.2 : 1.1;
      out.emplace_back(t.size() - 1, base + 0.05 * (t[0] % 7));
    }
    return out;
  }
};

TEST(PplRun, ChunkIntervalsAndPairedRatios) {
  std::vector<int32_t> tokens(1200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 97);
  ChunkVaryingModel model;
  const auto methods = expand_methods({"full", "h2o", "streamingllm"}, {Budget{64}});
  const PplRun run = run_ppl(model, tokens, ppl_chunks(1200, 100), methods, {}, 100);
  ASSERT_EQ(run.results.size(), 3u);
  const PplResult& h2o = run.results[1];
  ASSERT_EQ(h2o.chunk_nll.size(), 12u);
  EXPECT_NEAR(h2o.chunk_nll[1], 1.1 + 0.05 * (100 % 97 % 7), 1e-12);  // chunk 1 starts at token 100
  ASSERT_TRUE(h2o.ppl_interval.has_interval());
  EXPECT_LT(h2o.ppl_interval.low, h2o.ppl);
  EXPECT_GT(h2o.ppl_interval.high, h2o.ppl);
  const auto paired = ppl_paired(run);
  ASSERT_EQ(paired.size(), 1u);  // h2o vs streamingllm (full has no budget pair)
  EXPECT_EQ(paired[0].method, "h2o");
  EXPECT_NEAR(paired[0].ratio.estimate, std::exp(-0.1), 1e-12);
  EXPECT_NEAR(paired[0].ratio.low, std::exp(-0.1), 1e-12);
  EXPECT_EQ(paired[0].chunks_better, 12);
  const auto doc = nlohmann::json::parse(ppl_to_json(run)).at("ppl");
  EXPECT_EQ(doc[1].at("chunk_nll").size(), 12u);
  EXPECT_NEAR(doc[1].at("paired").at("ppl_ratio").get<double>(), std::exp(-0.1), 1e-12);
  EXPECT_TRUE(doc[0].at("paired").is_null());
  EXPECT_NE(ppl_to_markdown(run).find("| h2o | 64 | 0.9048 |"), std::string::npos)
      << ppl_to_markdown(run);
  // One chunk: no interval, no pairing.
  const PplRun one = run_ppl(model, tokens, ppl_chunks(1200, 100, 1), methods, {}, 100);
  EXPECT_FALSE(one.results[1].ppl_interval.has_interval());
  EXPECT_TRUE(ppl_paired(one).empty());
}

// A run written, read back and written again gives the same text; runs of one method each,
// merged, give the file of one run of them all (the pairs against streamingllm recomputed
// across the files); runs of other protocols are refused, naming the field.
TEST(PplReport, MergedRunsEqualOneRunOfThemAll) {
  std::vector<int32_t> tokens(1200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 97);
  ChunkVaryingModel model;
  auto run_of = [&](const std::vector<std::string>& names, int64_t n_chunks = 0) {
    PplRun r = run_ppl(model, tokens, ppl_chunks(1200, 100, n_chunks),
                       expand_methods(names, {Budget{64}}), {}, 100);
    r.source = "test prose";
    r.meta.model_sha256 = "abc";
    r.meta.git_commit = "c0ffee";
    r.meta.command_line = "kvevict ppl --methods " + names[0];
    return r;
  };
  const PplRun all = run_of({"full", "h2o", "streamingllm"});
  const std::string text = ppl_to_json(all);
  EXPECT_EQ(ppl_to_json(ppl_from_json(text, "all.json")), text);

  const std::vector<PplRun> parts = {run_of({"full"}), run_of({"h2o"}), run_of({"streamingllm"})};
  const PplRun merged = merge_ppl(parts, {"a.json", "b.json", "c.json"});
  ASSERT_EQ(merged.results.size(), 3u);
  auto rows = [](const std::string& t) { return nlohmann::json::parse(t).at("ppl"); };
  EXPECT_EQ(rows(ppl_to_json(merged)), rows(text));
  EXPECT_NE(ppl_to_markdown(merged).find("| h2o | 64 | 0.9048 |"), std::string::npos);
  EXPECT_NE(ppl_to_markdown(merged).find("merged from 3 runs"), std::string::npos);

  auto refused = [&](PplRun other, const std::string& needle) {
    try {
      merge_ppl({parts[0], other}, {"a.json", "b.json"});
      ADD_FAILURE() << "merged runs that differ in " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(parts[0], "repeats full at budget");
  PplRun other_model = parts[1];
  other_model.meta.model_sha256 = "def";
  refused(other_model, "model_sha256 'def'");
  PplRun other_decode = parts[1];
  other_decode.decode.recent = 5;
  refused(other_decode, "recent 5");
  refused(run_of({"h2o"}, 6), "6 chunks of 100 tokens");
}

// Broken ppl files name the file, the row and the field.
TEST(PplReport, BrokenFilesAreRefusedByName) {
  std::vector<int32_t> tokens(600);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 97);
  ChunkVaryingModel model;
  const PplRun run =
      run_ppl(model, tokens, ppl_chunks(600, 100), expand_methods({"h2o"}, {Budget{64}}), {}, 100);
  auto doc = nlohmann::json::parse(ppl_to_json(run));
  auto refused = [](const nlohmann::json& d, const std::string& needle) {
    try {
      ppl_from_json(d.dump(), "p.json");
      ADD_FAILURE() << "read a file with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto d = doc;
  d["ppl"][0]["chunk_nll"].push_back(1.0);
  refused(d, "p.json ppl[0]: 7 chunk NLLs for 'chunks' 6");
  d = doc;
  d["ppl"][0]["ppl"] = "12";
  refused(d, "p.json ppl[0]: 'ppl' is string");
  d = doc;
  d["version"] = 3;
  refused(d, "results version 3");
  // Version 1 (no meta): read with no provenance and the default bootstrap its rows name.
  d = doc;
  d["version"] = 1;
  d.erase("meta");
  const PplRun v1 = ppl_from_json(d.dump(), "v1.json");
  EXPECT_EQ(v1.meta.model, "varying");
  EXPECT_TRUE(v1.meta.git_commit.empty());
  EXPECT_EQ(v1.results.at(0).chunk_nll, run.results.at(0).chunk_nll);
  d["ppl"][0]["interval"] = "90% percentile bootstrap";
  refused(d, "is not the file's bootstrap");
  d = doc;
  d.erase("ppl");
  refused(d, "'ppl' is missing");
  EXPECT_THROW(results_kind("{\"kind\": \"kvevict-results\", \"version\": 2}", "x.json"), Error);
  EXPECT_EQ(results_kind(doc.dump(), "p.json"), ResultsKind::kPpl);
}

}  // namespace
}  // namespace kvevict::eval
