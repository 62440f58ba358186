// Eviction on the real SmolLM2 checkpoint (skipped when absent): budget 100% reproduces the
// no-eviction run bitwise (logits and greedy text), and a 50% budget really halves the K/V
// bytes of every layer; query-agnostic use (compress the context, then append the question).
#include <gtest/gtest.h>

#include "io/model_paths.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tokenizer.h"
#include "model/session.h"

namespace kvevict {
namespace {

const char* kContext =
    "The lighthouse keeper, Mara, kept a logbook of every ship that passed the northern cape. "
    "In March she recorded the Aurora, a cargo vessel carrying copper, and in April the "
    "Meridian, a fishing trawler with a crew of nine.";
const char* kQuestion = " Question: which ship carried copper? Answer:";

class RealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = io::model_path(KVEVICT_SOURCE_DIR, io::kSmolLM2File);
    if (!io::file_exists(path)) return;
    model_ = Model::load(path);
    tok_ = Tokenizer::from_gguf(*model_->file());
  }
  static void TearDownTestSuite() {
    tok_.reset();
    model_.reset();
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "SmolLM2 is absent; run scripts/fetch_models.sh";
  }
  static std::shared_ptr<const Model> model_;
  static std::unique_ptr<Tokenizer> tok_;
};
std::shared_ptr<const Model> RealModel::model_;
std::unique_ptr<Tokenizer> RealModel::tok_;

TEST_F(RealModel, FullBudgetIsBitwiseTheNoEvictionRun) {
  const auto prompt = tok_->encode(std::string(kContext) + kQuestion, true);
  Session plain(model_), full(model_);
  plain.prefill(prompt);
  EvictConfig cfg;
  cfg.prefill = PrefillEviction::from_method("dropkv", Budget{1.0});
  full.prefill(prompt, cfg);
  EXPECT_EQ(plain.logits(), full.logits());
  EXPECT_EQ(plain.kv_bytes_total(), full.kv_bytes_total());
  Sampler a, b;
  const auto ga = plain.generate(8, a), gb = full.generate(8, b);
  EXPECT_EQ(ga.tokens, gb.tokens);
  EXPECT_EQ(plain.logits(), full.logits());
  std::cout << "[real] greedy: " << tok_->decode(ga.tokens) << "\n";
}

TEST_F(RealModel, HalfBudgetHalvesEveryLayerAndStillAnswers) {
  const auto context = tok_->encode(kContext, true);
  const auto question = tok_->encode(kQuestion, false);
  const int64_t n = static_cast<int64_t>(context.size());
  PrefillOptions popt;
  popt.keep_queries = 16;
  const PrefillSnapshot snap = Session::prefill_snapshot(model_, context, popt);
  EvictConfig cfg;
  cfg.prefill = PrefillEviction::from_method("snapkv", Budget{0.5});
  cfg.prefill.set_window(16);
  Session s = Session::from_snapshot(model_, snap, cfg);  // query-agnostic: context only
  const auto& st = s.stats();
  for (int l = 0; l < model_->config().n_layers; ++l) {
    // floor(0.5 n) of n rows per head, compacted: bytes scale exactly with the kept rows.
    EXPECT_EQ(st.kv_bytes_after[l] * n, st.kv_bytes_before[l] * (n / 2)) << "layer " << l;
  }
  const int64_t evicted_bytes = s.kv_bytes_total();
  EXPECT_LT(evicted_bytes, snap.kv_bytes() * 51 / 100);
  s.append(question);
  Sampler g;
  const auto out = s.generate(6, g, [&](int32_t t) { return tok_->is_end_of_generation(t); });
  ASSERT_FALSE(out.tokens.empty());
  std::cout << "[real] 50% snapkv, KV " << snap.kv_bytes() << " -> " << evicted_bytes
            << " bytes; answer: " << tok_->decode(out.tokens) << "\n";
}

}  // namespace
}  // namespace kvevict
