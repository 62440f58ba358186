// CPU timings of selection, compaction and attention over a cache at model shapes
// (Llama-3.1-8B: Hq 32, Hkv 8, d 128). Run: build/cpu/benchmarks/cpu_select_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/select.h"

namespace kvevict {
namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128;

std::vector<float> random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

void BM_Select(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Policy policy = state.range(1) ? Policy::kAdaKV : Policy::kUniform;
  std::vector<float> scores = random_vec(kHkv * n, 1);
  std::vector<int64_t> starts, lens;
  const SelectProblem pb = SelectProblem::dense(TensorView(scores.data(), DType::kF32, {kHkv, n}),
                                                TensorView(), starts, lens);
  SelectOptions opt;
  opt.policy = policy;
  opt.budget.value = 0.1;
  opt.window = 8;
  for (auto _ : state) benchmark::DoNotOptimize(select(pb, opt));
  state.SetItemsProcessed(state.iterations() * kHkv * n);
  state.SetLabel(policy_name(policy));
}
BENCHMARK(BM_Select)->Args({32768, 0})->Args({32768, 1})->Unit(benchmark::kMillisecond);

void BM_Compact(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> k = random_vec(kHkv * n * kD, 2);
  const HostKVCache full =
      HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {kHkv, n, kD}),
                              TensorView(k.data(), DType::kF32, {kHkv, n, kD}), DType::kBF16);
  std::vector<float> scores = random_vec(kHkv * n, 3);
  std::vector<int64_t> starts, lens;
  SelectOptions opt;
  opt.budget.value = 0.1;
  const Selection sel =
      select(SelectProblem::dense(TensorView(scores.data(), DType::kF32, {kHkv, n}), TensorView(),
                                  starts, lens),
             opt);
  HostKVCache out = cache_allocate_for(full.view(), sel);
  for (auto _ : state) cache_compact(full.view(), sel, out.view());
  state.SetBytesProcessed(state.iterations() * 2 * sel.total() * kD * 2);
}
BENCHMARK(BM_Compact)->Arg(32768)->Unit(benchmark::kMillisecond);

// Decode (m = 1) or a prefill chunk (m queries at the end) over a bf16 cache of n rows.
void BM_Attention(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1);
  std::vector<float> k = random_vec(kHkv * n * kD, 4), q = random_vec(kHq * m * kD, 5);
  const HostKVCache cache =
      HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {kHkv, n, kD}),
                              TensorView(k.data(), DType::kF32, {kHkv, n, kD}), DType::kBF16);
  std::vector<int32_t> qpos(m);
  for (int64_t t = 0; t < m; ++t) qpos[t] = static_cast<int32_t>(n - m + t);
  AttentionProblem pb;
  pb.q = TensorView(q.data(), DType::kF32, {kHq, m, kD});
  pb.q_pos = qpos.data();
  pb.cache = cache.view();
  std::vector<float> out(kHq * m * kD), lse(kHq * m);
  std::vector<uint8_t> ws(cpu::attention_workspace_bytes(pb));
  const AttentionOutput o{TensorView(out.data(), DType::kF32, {kHq, m, kD}),
                          TensorView(lse.data(), DType::kF32, {kHq, m})};
  for (auto _ : state) cpu::attention(pb, o, Workspace{ws.data(), ws.size()});
  // Bytes of K and V read (once per KV head per query tile; the floor for decode).
  state.SetBytesProcessed(state.iterations() * 2 * kHkv * n * kD * 2);
  // Causal FLOPs: 4 d per (query head, visible key).
  double flops = 0;
  for (int64_t t = 0; t < m; ++t) flops += 4.0 * kD * kHq * static_cast<double>(n - m + t + 1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Attention)
    ->Args({4096, 1})
    ->Args({32768, 1})
    ->Args({4096, 256})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvevict

// KVEVICT_THREADS=N pins the thread count (0 or unset = every hardware thread).
int main(int argc, char** argv) {
  if (const char* t = std::getenv("KVEVICT_THREADS")) kvevict::set_num_threads(std::atoi(t));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("threads=%d\n", kvevict::num_threads());
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
