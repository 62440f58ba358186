// One-shot prefill eviction wired into the runtime (SPEC section 5), on tiny random models:
// budget 100% changes nothing, memory really shrinks, the forward after eviction equals a
// reference forward with the evicted keys masked out (original positions kept), snapshots equal
// direct prefill, and every method runs.
#include <gtest/gtest.h>

#include <set>

#include "kvevict/error.h"
#include "model/session.h"
#include "model/tiny_model.h"

namespace kvevict {
namespace {

using testing::TinySpec;
using testing::tokens_for;

EvictConfig prefill_config(const std::string& method, double budget) {
  EvictConfig c;
  c.prefill = PrefillEviction::from_method(method, Budget{budget});
  return c;
}

struct Tiny {
  testing::TinyModel tiny;
  std::shared_ptr<const Model> model;
  explicit Tiny(const std::string& arch, const std::string& stem) {
    TinySpec spec;
    spec.arch = arch;
    tiny = testing::make_tiny_model(spec, stem);
    model = Model::load(tiny.file->path());
  }
};

TEST(PrefillEviction, FullBudgetReproducesNoEvictionBitwise) {
  Tiny t("gemma3", "evict_full");
  const auto prompt = tokens_for(19, 50, 1), question = tokens_for(3, 50, 2);
  PrefillOptions popt;
  popt.keep_queries = 8;
  const PrefillSnapshot snap = Session::prefill_snapshot(t.model, prompt, popt);
  Session plain = Session::from_snapshot(t.model, snap, EvictConfig::none());
  Session full = Session::from_snapshot(t.model, snap, prefill_config("dropkv:spec", 1.0));
  EXPECT_EQ(plain.kv_bytes_total(), full.kv_bytes_total());
  plain.append(question);
  full.append(question);
  EXPECT_EQ(plain.logits(), full.logits());
  Sampler a, b;
  const auto ga = plain.generate(6, a), gb = full.generate(6, b);
  EXPECT_EQ(ga.tokens, gb.tokens);
  EXPECT_EQ(plain.logits(), full.logits());
}

TEST(PrefillEviction, MemoryShrinksToTheBudgetPerEvictedLayer) {
  for (const char* arch : {"llama", "gemma3"}) {
    Tiny t(arch, std::string("evict_mem_") + arch);
    Session s(t.model);
    EvictConfig cfg = prefill_config("snapkv", 0.5);
    cfg.prefill.set_window(4);  // the default w = 32 would protect the whole 20-token prompt
    s.prefill(tokens_for(20, 50, 3), cfg);
    const auto& st = s.stats();
    ASSERT_EQ(st.kv_bytes_before.size(), 3u);
    for (int l = 0; l < 3; ++l) {
      if (t.model->config().is_sliding(l)) {
        EXPECT_EQ(st.kv_bytes_after[l], st.kv_bytes_before[l]) << arch << " layer " << l;
        continue;
      }
      // floor(0.5 * 20) = 10 of 20 rows per head, compacted (not masked): exactly half the bytes.
      EXPECT_EQ(st.kv_bytes_after[l] * 2, st.kv_bytes_before[l]) << arch << " layer " << l;
      EXPECT_EQ(s.kv_bytes(l), st.kv_bytes_after[l]);
      EXPECT_EQ(s.kv_rows(l), 10 * 2);
    }
  }
}

// After eviction the appended question and decode steps must see exactly the kept rows of every
// layer and head at their original positions; the prompt itself was processed with full
// attention. The double reference applies that visibility rule to a from-scratch forward.
TEST(PrefillEviction, ForwardAfterEvictionEqualsMaskedReference) {
  for (const char* arch : {"llama", "qwen2", "gemma3"}) {
    for (const char* method : {"dropkv", "adakv", "knorm"}) {
      Tiny t(arch, std::string("evict_mask_") + arch);
      const int n = 15;
      auto toks = tokens_for(n, 50, 4);
      Session s(t.model);
      EvictConfig cfg = prefill_config(method, 0.6);
      cfg.prefill.set_window(3);
      s.prefill(toks, cfg);
      const int layers = t.model->config().n_layers, Hkv = t.model->config().n_kv_heads;
      std::vector<std::vector<std::set<int>>> kept(layers, std::vector<std::set<int>>(Hkv));
      for (int l = 0; l < layers; ++l) {
        const KVLayerView v = s.cache(l).view();
        for (int h = 0; h < Hkv; ++h)
          for (int64_t r = 0; r < v.lens[h]; ++r) kept[l][h].insert(v.pos[v.offsets[h] + r]);
        if (!t.model->config().is_sliding(l)) {
          int64_t rows = 0;
          for (int h = 0; h < Hkv; ++h) rows += v.lens[h];
          EXPECT_EQ(rows, Hkv * 9) << arch << " " << method << " layer " << l;  // floor(0.6*15)
        }
      }
      auto visible = [&](int l, int g, int qp, int kp) {
        if (qp < n || kp >= n) return true;
        if (t.model->config().is_sliding(l)) return true;  // never evicted
        return kept[l][g].count(kp) != 0;
      };
      const auto question = tokens_for(3, 50, 5);
      s.append(question);
      toks.insert(toks.end(), question.begin(), question.end());
      auto ref = testing::tiny_reference_logits(t.tiny, toks, visible);
      EXPECT_TRUE(testing::all_close(s.logits(), ref, 2e-4, 1e-4,
                                     std::string(arch) + " " + method + " after question"));
      s.decode(9);
      toks.push_back(9);
      ref = testing::tiny_reference_logits(t.tiny, toks, visible);
      EXPECT_TRUE(testing::all_close(s.logits(), ref, 2e-4, 1e-4,
                                     std::string(arch) + " " + method + " decode"));
    }
  }
}

TEST(PrefillEviction, SnapshotEqualsDirectPrefillQueryAware) {
  Tiny t("llama", "evict_snap");
  const auto toks = tokens_for(21, 50, 6);
  EvictConfig cfg = prefill_config("adadropkv", 0.4);
  cfg.prefill.set_window(5);  // the last 5 prompt tokens play the question
  Session direct(t.model);
  direct.prefill(toks, cfg);
  PrefillOptions popt;
  popt.keep_queries = 12;  // more than needed: the evictor must use the last 5
  const auto snap = Session::prefill_snapshot(t.model, toks, popt);
  EXPECT_EQ(snap.num_queries(), 12);
  Session via = Session::from_snapshot(t.model, snap, cfg);
  EXPECT_EQ(direct.kv_bytes_total(), via.kv_bytes_total());
  for (int l = 0; l < t.model->config().n_layers; ++l) {
    const KVLayerView a = direct.cache(l).view(), b = via.cache(l).view();
    for (int h = 0; h < a.num_kv_heads; ++h) {
      ASSERT_EQ(a.lens[h], b.lens[h]) << "layer " << l << " head " << h;
      for (int64_t r = 0; r < a.lens[h]; ++r)
        EXPECT_EQ(a.pos[a.offsets[h] + r], b.pos[b.offsets[h] + r]);
    }
  }
  direct.decode(3);
  via.decode(3);
  EXPECT_EQ(direct.logits(), via.logits());
}

TEST(PrefillEviction, HalfPrecisionCachesEvictToo) {
  Tiny t("llama", "evict_f16");
  for (DType dt : {DType::kF16, DType::kBF16}) {
    SessionOptions opt;
    opt.kv_dtype = dt;
    Session s(t.model, opt);
    EvictConfig cfg = prefill_config("dropkv", 0.5);
    cfg.prefill.set_window(4);
    s.prefill(tokens_for(20, 50, 9), cfg);
    for (int l = 0; l < 3; ++l) {
      EXPECT_EQ(s.kv_rows(l), 2 * 10) << dtype_name(dt);
      EXPECT_EQ(s.stats().kv_bytes_after[l] * 2, s.stats().kv_bytes_before[l]) << dtype_name(dt);
    }
    s.decode(1);
    for (float x : s.logits()) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(PrefillEviction, SnapshotWithTooFewQueriesIsAnError) {
  Tiny t("llama", "evict_few");
  PrefillOptions popt;
  popt.keep_queries = 2;
  const auto snap = Session::prefill_snapshot(t.model, tokens_for(12, 50, 7), popt);
  try {
    Session::from_snapshot(t.model, snap, prefill_config("dropkv:spec", 0.5));  // needs w = 8
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keep_queries"), std::string::npos) << e.what();
  }
}

TEST(PrefillEviction, EveryMethodRunsAndShrinksMemory) {
  Tiny t("qwen2", "evict_all");
  PrefillOptions popt;
  popt.keep_queries = -1;  // all prompt queries: h2o needs them
  const int n = 40;
  const auto snap = Session::prefill_snapshot(t.model, tokens_for(n, 50, 8), popt);
  for (const std::string& m : method_names()) {
    EvictConfig cfg = prefill_config(m, 0.5);
    cfg.prefill.set_window(4);  // below the budget, so every method really selects
    Session s = Session::from_snapshot(t.model, snap, cfg);
    EXPECT_TRUE(s.stats().warning.empty()) << m << ": " << s.stats().warning;
    for (int l = 0; l < 3; ++l) EXPECT_EQ(s.kv_rows(l), 2 * 20) << m << " layer " << l;
    EXPECT_LT(s.kv_bytes_total(), snap.kv_bytes()) << m;
    s.append({1, 2});
    for (float x : s.logits()) ASSERT_TRUE(std::isfinite(x)) << m;
  }
}

}  // namespace
}  // namespace kvevict
