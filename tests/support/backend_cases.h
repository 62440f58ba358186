// The one table of LayerEvictor cases every backend runs (ggml test-backend-ops style): each
// method name method_parse accepts (so every policy: uniform, adakv, criticalkv's two stages),
// at odd shapes (MHA, GQA 4 and 7, MQA; n not a multiple of any tile), with a fraction budget, a
// token-count budget and one below the protected tokens. tests/evict/backend_conformance_test.cpp
// runs it on the reference and cpu backends (CI), tests/cuda/backend_test.cpp on cpu and cuda.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kvevict/select.h"

namespace kvevict::testing {

struct EvictorShape {
  int hq, hkv, d;
  int64_t n;
};

struct EvictorCase {
  std::string method;
  EvictorShape shape;
  double budget;
  uint64_t seed;
};

inline const std::vector<std::string>& evictor_methods() {
  static const std::vector<std::string> m = {"dropkv",     "adadropkv",    "obcache_v", "obcache_k",
                                             "obcache_vk", "snapkv",       "adakv",     "vatp",
                                             "criticalkv", "h2o",          "tova",      "knorm",
                                             "keydiff",    "streamingllm", "random"};
  return m;
}

// `big` adds the larger shapes (n ~ 1000) the GPU runs in seconds and the double reference in
// minutes.
inline std::vector<EvictorCase> evictor_cases(bool big) {
  std::vector<EvictorCase> out;
  uint64_t seed = 500;
  std::vector<EvictorShape> shapes = {{4, 4, 64, 17}, {8, 2, 64, 301}, {14, 2, 64, 123}};
  if (big) {
    shapes.push_back({8, 2, 128, 1003});
    shapes.push_back({4, 1, 128, 301});
  }
  for (const auto& m : evictor_methods())
    for (size_t i = 0; i < shapes.size(); ++i) {
      const EvictorShape& s = shapes[i];
      // 17 tokens at 0.3: 5 kept, below dropkv's 8 protected (the warning path); a token count
      // on the MQA shape.
      const double budget = s.hkv == 1 ? 40.0 : (s.n == 123 ? 0.1 : 0.3);
      out.push_back({m, s, budget, seed++});
    }
  return out;
}

// Kept sets of two backends agree except near-ties: a token kept by one side only must sit within
// `rel` (relative) or `abs_tol` of that head's lowest kept free score in `scores` ([Hkv, n], the
// side the threshold is read from), and per-head counts may move by a near-tie at adakv's layer
// threshold (then that head's next token changes side). Returns a failure message or "".
inline std::string kept_sets_differ(const Selection& a, const Selection& b,
                                    const std::vector<float>& scores, int64_t n, int sink,
                                    int window, double rel, double abs_tol) {
  int64_t differ = 0, kept = 0;
  for (int h = 0; h < a.num_kv_heads; ++h) {
    const std::set<int32_t> sa(a.head(h), a.head(h) + a.count(h));
    const std::set<int32_t> sb(b.head(h), b.head(h) + b.count(h));
    kept += a.count(h);
    float thr = 3.4e38f;
    for (int32_t j : sa)
      if (j >= sink && j < n - window && scores[h * n + j] < thr) thr = scores[h * n + j];
    int64_t far = 0;
    const int64_t shift =
        a.count(h) > b.count(h) ? a.count(h) - b.count(h) : b.count(h) - a.count(h);
    if (shift > 2)
      return "head " + std::to_string(h) + " budgets differ by " + std::to_string(shift);
    for (int32_t j = 0; j < n; ++j) {
      if (sa.count(j) == sb.count(j)) continue;
      ++differ;
      const double s = scores[h * n + j];
      const double gap = s > thr ? s - thr : thr - s;
      const double tol = rel * (thr < 0 ? -thr : thr) + abs_tol;
      if (gap > tol && far++ >= shift)
        return "head " + std::to_string(h) + " token " + std::to_string(j) + " (score " +
               std::to_string(s) + ", threshold " + std::to_string(thr) + ") kept by " +
               (sa.count(j) ? "the first" : "the second") + " backend only: not a near-tie";
    }
  }
  if (differ > std::max<int64_t>(2, kept / 50))
    return std::to_string(differ) + " near-tie swaps of " + std::to_string(kept) + " kept rows";
  return "";
}

}  // namespace kvevict::testing
