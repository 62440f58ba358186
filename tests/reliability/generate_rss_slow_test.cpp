// Leak / growth check: many short generate-style calls in one process (SmolLM2, 8 prompt tokens,
// prefill eviction to half, decode-time eviction, 2 new tokens) must not grow the resident set
// after a warm-up. Every call builds a fresh Session, so a leaked cache, workspace or scratch
// buffer shows up as steady growth. Uses random weights of SmolLM2's shapes when the checkpoint
// is absent. Label `slow` (minutes on 2 cores);
// KVEVICT_RSS_ITERS overrides the 1000 calls for a quick local run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/method.h"
#include "kvevict/model/config.h"
#include "kvevict/model/model.h"
#include "kvevict/model/sampler.h"
#include "model/session.h"

namespace kvevict {
namespace {

// Resident pages * page size, from /proc/self/statm (second field).
int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (got != 2) return -1;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int iterations() {
  const char* env = std::getenv("KVEVICT_RSS_ITERS");
  return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 1000;
}

// One generate-style call: fresh session, 8-token prefill with eviction, 2 decoded tokens.
std::vector<int32_t> generate_once(const std::shared_ptr<const Model>& model,
                                   const std::vector<int32_t>& prompt, const EvictConfig& cfg) {
  Session session(model);
  session.prefill(prompt, cfg);
  Sampler greedy;
  GenerateResult out = session.generate(2, greedy);
  return out.tokens;
}

TEST(GenerateRss, RepeatedCallsDoNotGrowResidentSet) {
  ASSERT_GT(resident_bytes(), 0) << "cannot read /proc/self/statm";
  // The real checkpoint when fetched; otherwise random weights of the same shapes, which allocate
  // exactly the same caches and scratch (the token ids below fit either vocabulary).
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, io::kSmolLM2File);
  const bool real = io::file_exists(path);
  const auto model =
      real ? Model::load(path) : Model::random(ModelConfig::preset("smollm2-135m"), 20261129);
  std::printf("model: %s\n", real ? path.c_str() : "random weights, smollm2-135m shapes");

  EvictConfig cfg;
  cfg.prefill = PrefillEviction::from_method("dropkv", Budget{0.5});
  cfg.prefill.set_window(4);
  cfg.decode.enabled = true;
  cfg.decode.options.budget = 4;
  cfg.decode.options.slack = 0;  // evict on every decode step
  cfg.decode.options.recent = 1;
  // Arbitrary ids well inside the vocabulary; the content does not matter for memory.
  const std::vector<int32_t> prompt = {1, 504, 2806, 314, 253, 1234, 42, 9000};

  const int n = iterations();
  const int warmup = std::max(1, n / 20);
  const std::vector<int32_t> first = generate_once(model, prompt, cfg);
  ASSERT_EQ(first.size(), 2u);
  for (int i = 1; i < warmup; ++i) generate_once(model, prompt, cfg);
  const int64_t after_warmup = resident_bytes();
  int64_t peak = after_warmup;
  for (int i = warmup; i < n; ++i) {
    const std::vector<int32_t> out = generate_once(model, prompt, cfg);
    // Greedy decoding of the same prompt is deterministic: a difference means state leaked
    // between sessions (or memory was corrupted), not just grew.
    ASSERT_EQ(out, first) << "call " << i << " generated different tokens";
    peak = std::max(peak, resident_bytes());
  }
  const int64_t growth = peak - after_warmup;
  // 8 MiB: allocator noise (arena trimming, page-cache of the mapping) stays well below it;
  // a leaked 8-token cache of all 30 layers (~0.4 MB per call) crosses it within ~20 calls.
  constexpr int64_t kBound = 8ll << 20;
  std::printf("rss after %d warm-up calls: %.1f MiB; peak over %d more: %.1f MiB (+%.2f MiB)\n",
              warmup, after_warmup / 1048576.0, n - warmup, peak / 1048576.0, growth / 1048576.0);
  EXPECT_LE(growth, kBound) << "resident set grew by " << growth << " bytes over " << n - warmup
                            << " calls after warm-up; expected <= " << kBound;
}

}  // namespace
}  // namespace kvevict
