// The README's library example, complete (README "Library API"; built against an installed
// kvevict by CI, scripts/check_package.sh). One layer of random queries, keys and values is
// scored with adadropkv, selected at a 10% budget and compacted into a smaller f16 cache:
//   evict_layer [cpu|reference]
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kvevict/cache.h"
#include "kvevict/error.h"
#include "kvevict/evict.h"

int main(int argc, char** argv) {
  const std::string backend_name = argc > 1 ? argv[1] : "cpu";
  const int hq = 8, hkv = 2, d = 64;  // GQA: 4 query heads a KV head
  const int64_t n = 1000, w = 32;     // tokens in the cache, window queries kept
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> q(hq * w * d), k(hkv * n * d), v(hkv * n * d);
  for (std::vector<float>* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);

  try {
    auto backend = backend_name == "reference" ? kvevict::make_reference_backend()
                                               : kvevict::make_cpu_backend();
    kvevict::MethodSpec m =
        kvevict::method_parse("adadropkv");  // measured defaults: w 32, max:11, adakv
    kvevict::SelectOptions sel;
    sel.policy = m.policy;
    sel.budget = kvevict::Budget::parse("0.1");
    sel.window = m.score.window;  // the observation window is what selection protects
    kvevict::LayerEvictor ev(*backend, m.score, sel);

    using kvevict::DType;
    using kvevict::TensorView;
    kvevict::ScoreProblem p;
    p.q = TensorView(q.data(), DType::kF32, {hq, w, d});   // [Hq, w, d] last queries after RoPE
    p.k = TensorView(k.data(), DType::kF32, {hkv, n, d});  // [Hkv, n, d] keys after RoPE
    p.v = TensorView(v.data(), DType::kF32, {hkv, n, d});  // [Hkv, n, d] values
    kvevict::Selection kept = ev.plan(p);                  // per-head kept rows, sorted

    // The full cache, and a smaller one sized for the selection (cache_plan_offsets).
    kvevict::HostKVCache full = kvevict::HostKVCache::from_dense(p.k, p.v, DType::kF16);
    kvevict::HostKVCache compacted = kvevict::cache_allocate_for(full.view(), kept);
    ev.apply(full.view(), kept, compacted.view());  // copies K, V, pos: memory shrinks

    std::printf("%s\n", ev.describe().c_str());
    for (int h = 0; h < hkv; ++h)
      std::printf("kv head %d keeps %lld of %lld tokens\n", h,
                  static_cast<long long>(compacted.view().len(h)), static_cast<long long>(n));
    std::printf("KV bytes %lld -> %lld\n", static_cast<long long>(full.kv_bytes()),
                static_cast<long long>(compacted.kv_bytes()));
    return compacted.kv_bytes() < full.kv_bytes() ? 0 : 1;
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "evict_layer: %s\n", e.what());
    return 2;
  }
}
