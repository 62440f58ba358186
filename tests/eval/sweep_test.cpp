// The whole sweep machinery on a tiny model (tests/model/tiny_model.h, llama and qwen2; gemma3's
// tiny model answers the same whatever the cache holds, so it could not show a difference):
// one prefill per sample and mode, every setting evicted from its snapshot and answered together
// (answer_batch) must give the answers, kept sizes and scores of each setting run alone from a
// prefill of its own with that eviction (the path of `kvevict generate`). On the CPU runtime this
// checks the snapshot + per-setting eviction; on a CUDA build with a GPU the same test checks the
// batched decode (every setting one row of one batch).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "eval/eval_fixtures.h"
#include "eval/metrics.h"
#include "eval/report.h"
#include "eval/rng.h"
#include "eval/runner.h"
#include "eval/session_model.h"
#include "eval/summary.h"
#include "kvevict/model/runtime.h"
#include "kvevict/model/sampler.h"
#include "kvevict/tokenizer.h"
#include "model/tiny_model.h"

namespace kvevict::eval {
namespace {

constexpr int64_t kVocab = 301;

// The fixtures' whitespace tokenizer over the tiny vocabulary, whose decode names every id
// ("w17"), so two different answers have different text (an empty decode would make every
// comparison below pass).
class IdTokenizer : public testing::WhitespaceTokenizer {
 public:
  IdTokenizer() : WhitespaceTokenizer(static_cast<int32_t>(kVocab)) {}
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += " w" + std::to_string(id);
    return out;
  }
  std::string token_text(int32_t id) const override { return "w" + std::to_string(id); }
};

// tests/model/tiny_model.h's GGUF (weights of stddev 0.3, so attention moves the answers; the
// shrunk presets' 0.02 leave the residual stream, hence every answer, to the token embedding).
// nullptr where the device cannot run models here (the test then skips).
std::shared_ptr<const ModelRuntime> tiny_runtime(const std::string& arch, Device device) {
  if (!runtime_available(device)) return nullptr;
  kvevict::testing::TinySpec spec;
  spec.arch = arch;
  spec.D = 32;
  spec.layers = 4;
  spec.Hq = 4;
  spec.Hkv = 2;
  spec.d = device == Device::kCuda ? 64 : 16;  // the CUDA kernels take head dims 64, 128, 256
  spec.F = 48;
  spec.V = static_cast<int>(kVocab);
  spec.ctx = 512;
  const auto tiny = kvevict::testing::make_tiny_model(spec, "tiny_sweep_" + arch);
  RuntimeOptions ropt;
  ropt.device = device;
  // As kvevict eval runs: the sweep decodes its settings as one batch and a setting alone at batch
  // 1, which the GPU runtime would otherwise fuse (other bf16 rounding, fused_step_policy.h).
  ropt.batch_invariant_decode = true;
  return ModelRuntime::create(Model::load(tiny.file->path()), ropt);
}

// A sample of ~`words` context words; the answer is a word of the context, so the full cache
// can score and a score is not always 0.
Sample tiny_sample(const std::string& task, uint64_t seed, int words) {
  Rng rng(seed);
  Sample s;
  s.task = task;
  s.seed = seed;
  s.target_length = 128;
  std::string needle;
  for (int i = 0; i < words; ++i) {
    const std::string w = "x" + std::to_string(rng.uniform(400));
    if (i == words / 3) needle = w;
    s.context += w + (i % 12 == 11 ? "\n" : " ");
  }
  s.question = "What is the word at the third ?";
  s.answer_prefix = " It is";
  s.answers = {IdTokenizer().decode(IdTokenizer().encode(needle, false)).substr(1)};
  s.max_new_tokens = 6;
  format_prompt(s, PromptStyle::kRaw, nullptr);
  return s;
}

const std::vector<std::string> kSettings = {"full",
                                            "dropkv",
                                            "snapkv",
                                            "snapkv:kvpress",
                                            "h2o",
                                            "h2o:norm",
                                            "tova",
                                            "tova:keep_last",
                                            "adakv",
                                            "adadropkv",
                                            "obcache_vk",
                                            "obcache_k:h2o",
                                            "obcache_v:tova",
                                            "dropkv:w=4:pool=max:3",
                                            "streamingllm",
                                            "knorm"};

class Sweep : public ::testing::TestWithParam<std::tuple<std::string, Device>> {};

TEST_P(Sweep, OneBatchPerPrefillEqualsEachSettingAlone) {
  const auto& [preset, device] = GetParam();
  const auto rt = tiny_runtime(preset, device);
  if (!rt) GTEST_SKIP() << "no runtime for this device in this build or on this machine";
  const IdTokenizer tok;

  std::vector<Sample> samples;
  for (uint64_t i = 0; i < 3; ++i) samples.push_back(tiny_sample("niah_single_1", 100 + i, 90));
  samples.push_back(tiny_sample("vt", 200, 70));
  RunOptions opt;
  opt.methods = expand_methods(kSettings, {Budget{0.3}, Budget{0.6}});
  opt.modes = {QueryMode::kAware, QueryMode::kAgnostic};
  opt.bootstrap.resamples = 50;
  SessionModel model(rt, std::make_unique<IdTokenizer>(), opt.methods, "tiny-" + preset);
  const EvalResults res = run_eval(model, samples, opt);
  const size_t settings = opt.methods.size();
  ASSERT_EQ(res.records.size(), samples.size() * 2 * settings);
  ASSERT_EQ(res.batches.size(), samples.size() * 2);  // one prefill per sample and mode

  // Each setting alone: its own prefill with the eviction, the question, greedy decode.
  size_t k = 0, evicted_differs = 0, empty_answers = 0;
  for (const Sample& s : samples) {
    const auto ctx = tok.encode(s.input_context(), true);
    const auto q = tok.encode(s.input_question(), false);
    for (QueryMode mode : opt.modes) {
      const bool aware = mode == QueryMode::kAware;
      std::vector<int32_t> prompt = ctx;
      if (aware) prompt.insert(prompt.end(), q.begin(), q.end());
      std::set<std::string> answers;
      for (const MethodConfig& m : opt.methods) {
        const SampleRecord& r = res.records.at(k++);
        ASSERT_EQ(r.method, m.name);
        ASSERT_EQ(r.mode, mode);
        auto session = rt->session(static_cast<int64_t>(prompt.size() + q.size()) + 16);
        session->prefill(prompt, m.evict_config(aware ? static_cast<int>(q.size()) : 0));
        if (!aware) session->append(q);
        const int64_t kept = kept_rows_per_head(*session, rt->config());
        Sampler greedy;
        GenerateResult g = session->generate(
            s.max_new_tokens, greedy, [&](int32_t id) { return tok.is_end_of_generation(id); });
        if (g.stopped) g.tokens.pop_back();
        const std::string alone = postprocess_prediction(tok.decode(g.tokens));
        EXPECT_EQ(r.prediction, alone)
            << m.label() << " " << query_mode_name(mode) << " seed " << s.seed;
        EXPECT_EQ(r.kept_tokens, kept) << m.label();
        EXPECT_EQ(r.score, score_prediction(metric_for_task(s.task), alone, s.answers));
        empty_answers += r.prediction.empty();
        answers.insert(r.prediction);
        if (!m.is_full() && kept < static_cast<int64_t>(prompt.size())) ++evicted_differs;
      }
      // Eviction must change some answers, or equal answers would prove nothing.
      EXPECT_GE(answers.size(), 2u) << "seed " << s.seed << " " << query_mode_name(mode);
    }
  }
  EXPECT_GT(evicted_differs, 0u);
  // An empty answer (the end token first) is a real outcome of a heavy eviction (5 of 256 on the
  // CUDA runtime), but answers mostly empty would make the equalities above prove little.
  EXPECT_LE(empty_answers * 20, res.records.size()) << empty_answers << " empty answers";

  // The batched run and the one-at-a-time run of the harness agree record by record.
  RunOptions alone = opt;
  alone.one_at_a_time = true;
  const EvalResults res1 = run_eval(model, samples, alone);
  ASSERT_EQ(res1.records.size(), res.records.size());
  for (size_t i = 0; i < res.records.size(); ++i) {
    EXPECT_EQ(res1.records[i].prediction, res.records[i].prediction) << res.records[i].method;
    EXPECT_EQ(res1.records[i].kept_tokens, res.records[i].kept_tokens) << res.records[i].method;
  }

  // The tables: every setting a cell with an interval containing its score; a cost row per
  // (length, mode) plus the whole run; the runtime reported its eviction and decode times.
  const auto rows = res.aggregate();
  EXPECT_EQ(rows.size(), 2 * settings * 3);  // 2 modes x settings x (2 tasks + average)
  for (const auto& a : rows) {
    ASSERT_TRUE(std::isfinite(a.ci_low) && std::isfinite(a.ci_high)) << a.method;
    EXPECT_LE(a.ci_low, a.score + 1e-9);
    EXPECT_GE(a.ci_high, a.score - 1e-9);
  }
  const auto cost = cost_summary(res);
  ASSERT_EQ(cost.size(), 3u);
  for (const auto& c : cost) {
    EXPECT_EQ(c.settings, static_cast<double>(settings));
    EXPECT_GE(c.evict_s_per_setting, 0.0);
    EXPECT_GT(c.decode_s_per_batch, 0.0);
    EXPECT_GT(c.batches_per_sample, 0.0);
  }
  const auto doc = nlohmann::json::parse(results_to_json(res));
  EXPECT_EQ(doc.at("version"), 2);
  EXPECT_EQ(doc.at("records").size(), res.records.size());
  for (const auto& a : doc.at("aggregate")) EXPECT_TRUE(a.at("window").is_number_integer());
}

TEST_P(Sweep, KvpressVariantsChangeTheKeptSet) {
  const auto& [preset, device] = GetParam();
  const auto rt = tiny_runtime(preset, device);
  if (!rt) GTEST_SKIP() << "no runtime for this device in this build or on this machine";
  const IdTokenizer tok;
  const Sample s = tiny_sample("niah_single_1", 7, 120);
  const auto prompt = tok.encode(s.input_context(), true);
  const auto snap = rt->prefill_snapshot(prompt, PrefillOptions{-1});
  const int layer = rt->config().n_layers - 1;
  const int32_t last = static_cast<int32_t>(prompt.size()) - 1;
  auto kept = [&](const std::string& name) {
    auto sess = rt->from_snapshot(*snap, MethodConfig::make(name, Budget{0.2}).evict_config(0), 4);
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(rt->config().n_kv_heads));
    for (size_t h = 0; h < out.size(); ++h)
      out[h] = sess->kept_positions(layer, static_cast<int>(h));
    return out;
  };
  // TOVA keeping the last token: every head holds the last prompt position.
  for (const auto& head : kept("tova:keep_last")) {
    ASSERT_FALSE(head.empty());
    EXPECT_EQ(head.back(), last);
  }
  // Normalised h2o scores differently (early tokens are seen by more queries).
  EXPECT_NE(kept("h2o"), kept("h2o:norm"));
  // kvpress's snapkv protects a 64-token window: the last 64 positions are kept.
  for (const auto& head : kept("snapkv:kvpress")) {
    std::set<int32_t> k(head.begin(), head.end());
    for (int32_t p = last - 63; p <= last; ++p) EXPECT_TRUE(k.count(p)) << p;
  }
}

INSTANTIATE_TEST_SUITE_P(, Sweep,
                         ::testing::Combine(::testing::Values("llama", "qwen2"),
                                            ::testing::Values(Device::kCpu, Device::kCuda)),
                         [](const auto& info) {
                           std::string n =
                               std::get<0>(info.param) +
                               (std::get<1>(info.param) == Device::kCpu ? "_cpu" : "_cuda");
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace kvevict::eval
