// CPU timings of the quantized runtime's kernels at the embedded models' shapes, one thread:
//  - BM_Project: y[T, rows] = x[T, K] W^T on GGUF blocks through the GEMM panels ("gemm"), the
//    row-by-row dot kernels ("rows"), and OpenBLAS sgemm on the dequantized f32 copy ("sgemm",
//    the former runtime) — where the GEMM threshold and "OpenBLAS only where it still wins" come
//    from;
//  - BM_Gemv: decode-sized products over a matrix larger than the L3, in GB/s of weight bytes;
//  - BM_DecodeAttention: one decode step of attention over an f32 / f16 / bf16 cache.
// Run: build/cpu/benchmarks/cpu_quant_bench (a quiet machine; --benchmark_repetitions=5).
// KVEVICT_QUANT_ISA=scalar|avx2|avx512 picks the kernel table (default: the CPU's best), and
// KVEVICT_BENCH_THREADS=N runs the quantized products on N threads (default 1); the label names
// both (tools/cpu_isa_check.sh runs the grid).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/dtype.h"
#include "kvevict/io/gguf.h"
#include "model/ops.h"
#include "quant/matmul.h"

namespace kvevict {
namespace {

using gguf::GgmlType;

// Random code bytes with finite, realistic scales (every block type keeps its fp16 d first,
// except Q6_K which keeps it last).
std::vector<uint8_t> random_blocks(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint8_t> w(static_cast<size_t>(rows * gguf::ggml_row_bytes(t, cols)));
  std::mt19937_64 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bb = gguf::ggml_block_bytes(t), be = gguf::ggml_block_elems(t);
  const uint16_t d = float_to_half(0.01f);
  for (int64_t i = 0; i < rows * cols / be; ++i) {
    uint8_t* p = w.data() + i * bb;
    if (t == GgmlType::kQ6_K) {
      std::memcpy(p + 208, &d, 2);
    } else {
      std::memcpy(p, &d, 2);
      if (t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1 || t == GgmlType::kQ4_K ||
          t == GgmlType::kQ5_K)
        std::memcpy(p + 2, &d, 2);
    }
  }
  return w;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

int bench_threads() {
  const char* env = std::getenv("KVEVICT_BENCH_THREADS");
  const int n = env != nullptr ? std::atoi(env) : 1;
  return n > 0 ? n : 1;
}

std::string isa_label() {
  return std::string(" ") + quant::isa_name(quant::kernels().isa) + " x" +
         std::to_string(bench_threads());
}

// Args: type code, rows, K, T, mode (0 gemm, 1 rows, 2 sgemm).
void BM_Project(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t rows = state.range(1), K = state.range(2), T = state.range(3);
  const int mode = static_cast<int>(state.range(4));
  set_num_threads(bench_threads());
  const std::vector<uint8_t> w = random_blocks(type, rows, K, 1);
  const quant::MatrixView mv{type, rows, K, gguf::ggml_row_bytes(type, K), w.data()};
  const std::vector<float> x = random_floats(T * K, 2);
  std::vector<float> y(T * rows);
  quant::Kernels k = quant::kernels();
  if (mode == 1) k.gemm_panel = nullptr;  // row by row
  HostTensor wf;
  if (mode == 2) {
    wf = HostTensor(DType::kF32, {rows, K});
    gguf::dequantize(type, w.data(), wf.ptr<float>(), rows * K);
  }
  for (auto _ : state) {
    if (mode == 2) {
      model_ops::linear(x.data(), T, wf, nullptr, y.data());
    } else {
      const quant::MatmulTarget tg{mv, y.data(), rows};
      quant::matmul(x.data(), T, K, &tg, 1, k);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * T * rows * K);  // multiply-adds
  state.SetLabel(std::string(gguf::ggml_type_name(static_cast<uint32_t>(type))) + " " +
                 (mode == 0   ? "gemm"
                  : mode == 1 ? "rows"
                              : "sgemm(f32)") +
                 isa_label());
  set_num_threads(0);
}

void project_args(benchmark::internal::Benchmark* b) {
  // SmolLM2 Q4_1 576 x 576 (attention) and Gemma 3 Q5_0 2048 x 640 (gate / up).
  for (auto [type, rows, K] : {std::tuple<int, int, int>{3, 576, 576}, {6, 2048, 640}})
    for (int T : {1, 2, 4, 8, 64, 256})
      for (int mode : {0, 1, 2}) b->Args({type, rows, K, T, mode});
}
BENCHMARK(BM_Project)->Apply(project_args)->Unit(benchmark::kMicrosecond);

// Decode: one token over a 64 MiB-class matrix (beyond the L3), GB/s of weight bytes read.
void BM_Gemv(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t rows = state.range(1), K = state.range(2);
  set_num_threads(bench_threads());
  const std::vector<uint8_t> w = random_blocks(type, rows, K, 3);
  const quant::MatrixView mv{type, rows, K, gguf::ggml_row_bytes(type, K), w.data()};
  const std::vector<float> x = random_floats(K, 4);
  std::vector<float> y(rows);
  for (auto _ : state) {
    quant::matvec(x.data(), mv, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.SetLabel(gguf::ggml_type_name(static_cast<uint32_t>(type)) + isa_label());
  set_num_threads(0);
}
BENCHMARK(BM_Gemv)
    ->Args({3, 131072, 576})  // Q4_1: 45 MiB
    ->Args({8, 65536, 640})   // Q8_0: 42 MiB (Gemma's head is 262144 x 640)
    ->Args({6, 65536, 1024})  // Q5_0: 44 MiB
    ->Unit(benchmark::kMillisecond);

// One decode query (SmolLM2: Hq 9, Hkv 3, d 64) over n cached rows.
void BM_DecodeAttention(benchmark::State& state) {
  const int64_t n = state.range(0);
  const DType dt = state.range(1) == 0   ? DType::kF32
                   : state.range(1) == 1 ? DType::kF16
                                         : DType::kBF16;
  constexpr int kHq = 9, kHkv = 3, kD = 64;
  set_num_threads(1);
  const std::vector<float> kv = random_floats(kHkv * n * kD, 5);
  const HostKVCache cache = HostKVCache::from_dense(
      TensorView(const_cast<float*>(kv.data()), DType::kF32, {kHkv, n, kD}),
      TensorView(const_cast<float*>(kv.data()), DType::kF32, {kHkv, n, kD}), dt);
  std::vector<float> q = random_floats(kHq * kD, 6), out(kHq * kD);
  const int32_t qpos = static_cast<int32_t>(n);
  AttentionProblem pb;
  pb.q = TensorView(q.data(), DType::kF32, {kHq, 1, kD});
  pb.q_pos = &qpos;
  pb.cache = cache.view();
  AttentionOutput ao;
  ao.out = TensorView(out.data(), DType::kF32, {kHq, 1, kD});
  std::vector<uint8_t> ws(cpu::attention_workspace_bytes(pb) + 256);
  for (auto _ : state) {
    cpu::attention(pb, ao, Workspace{ws.data(), ws.size()});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kHkv * n * kD *
                          static_cast<int64_t>(dtype_size(dt)));
  state.SetLabel(dtype_name(dt));
  set_num_threads(0);
}
BENCHMARK(BM_DecodeAttention)->ArgsProduct({{4096}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvevict

BENCHMARK_MAIN();
