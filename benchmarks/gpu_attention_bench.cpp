// The prefill attention alone (issue 16): one layer of a model's causal prefill attention as
// GpuForward::prefill_chunk runs it (src/model_cuda/gpu_forward.cpp): the prompt in chunks of
// --chunk tokens, each chunk's queries over every key so far, through launch_window_attention_rows
// with the whole chunk as its window (bf16 q / k / v, bf16 [T, Hq d] rows out, no lse: the o
// projection's input), on the Llama-3.1-8B layer shape (32
// query heads, 8 KV heads, head dim 128) or Gemma 3 270M's (4 / 1 / 256). Prints milliseconds for
// the whole prompt's attention of one layer and its causal TFLOP/s (4 d FLOPs a head and visible
// query-key pair: d multiply-adds of QK^T and d of PV), as tools/peers/sdpa_prefill.py counts
// PyTorch SDPA's on the same shapes (issue 16 asks for >= SDPA's, beside it). Every forward loop
// is timed, interleaved: cp.async loads, TMA, wide TMA and its FA3 loops (kernel_variants.h), one
// run of each a round and the order rotated each round: the card's clocks drift with its
// temperature, and with a fixed order the later variants ran slower (three names for the same
// d = 256 kernel measured 575 / 562 / 518 TFLOP/s at 32K in that order, H100, 2026-12-06 (g)).
// Head dim 256 has one wide loop: its FA3 loop rows are not timed.
//
// Usage: gpu_attention_bench [--shape llama|gemma3] [--lengths 4096,32768,131072] [--chunk 4096]
//                            [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_errors.h"
#include "bench_random.h"
#include "cuda/check.h"
#include "cuda/kernel_variants.h"
#include "cuda/launchers.h"
#include "cuda/window_plan.h"

namespace {

namespace cd = kvevict::cuda::detail;

struct Shape {
  const char* name;
  int hq, hkv, d;
};

struct Args {
  Shape shape{"llama-3.1-8b", 32, 8, 128};
  std::vector<int64_t> lengths = {4096, 32768, 131072};
  int64_t chunk = 4096;
  int reps = 10;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "gpu_attention_bench: %s (try --help)\n", what.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(s + " needs a value");
      return argv[++i];
    };
    if (s == "--shape") {
      const std::string v = value();
      if (v == "llama")
        a.shape = {"llama-3.1-8b", 32, 8, 128};
      else if (v == "gemma3")
        a.shape = {"gemma3-270m", 4, 1, 256};
      else
        usage_error("--shape " + v + ": expected llama or gemma3");
    } else if (s == "--lengths") {
      a.lengths.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) {
        const int64_t n = std::atoll(item.c_str());
        if (n < 1 || n > (int64_t{1} << 20)) usage_error("--lengths " + item + ": expected 1..1M");
        a.lengths.push_back(n);
      }
    } else if (s == "--chunk") {
      a.chunk = std::atoll(value().c_str());
      if (a.chunk < 1 || a.chunk > 65536) usage_error("--chunk: expected 1..65536");
    } else if (s == "--reps") {
      a.reps = std::atoi(value().c_str());
      if (a.reps < 1) usage_error("--reps: expected >= 1");
    } else if (s == "--help" || s == "-h") {
      std::printf(
          "gpu_attention_bench: one layer's causal prefill attention, chunk by chunk as the GPU\n"
          "runtime runs it, in ms and TFLOP/s.\n\n"
          "  --shape S     llama (32 / 8 / 128, default) or gemma3 (4 / 1 / 256)\n"
          "  --lengths L   comma-separated prompt lengths (default 4096,32768,131072)\n"
          "  --chunk N     prefill chunk (default 4096, the runtime's)\n"
          "  --reps N      rounds: one timed run of each variant a round, order rotated, median\n"
          "                taken (default 10)\n");
      std::exit(0);
    } else {
      usage_error("unknown option " + s);
    }
  }
  return a;
}

int run(const Args& args) {
  int dev = 0;
  cudaDeviceProp prop{};
  KVEVICT_CUDA_CHECK(cudaGetDevice(&dev));
  KVEVICT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  const Shape& sh = args.shape;
  const int sms = cd::current_sm_count();
  std::printf("device: %s, %d SMs; shape %s (Hq %d, Hkv %d, d %d), chunk %lld\n", prop.name, sms,
              sh.name, sh.hq, sh.hkv, sh.d, static_cast<long long>(args.chunk));
  std::printf("%-10s %-14s %8s %12s %10s %12s\n", "length", "forward loop", "chunks",
              "ms (1 layer)", "TFLOP/s", "last chunk ms");
  cudaStream_t stream;
  KVEVICT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  KVEVICT_CUDA_CHECK(cudaEventCreate(&e0));
  KVEVICT_CUDA_CHECK(cudaEventCreate(&e1));
  for (const int64_t L : args.lengths) {
    const int64_t C = std::min(args.chunk, L);
    void *q = nullptr, *k = nullptr, *v = nullptr, *scratch = nullptr, *out = nullptr;
    const size_t kv_elems = static_cast<size_t>(sh.hkv) * L * sh.d;
    KVEVICT_CUDA_CHECK(cudaMalloc(&q, static_cast<size_t>(sh.hq) * C * sh.d * 2));
    KVEVICT_CUDA_CHECK(cudaMalloc(&k, kv_elems * 2));
    KVEVICT_CUDA_CHECK(cudaMalloc(&v, kv_elems * 2));
    KVEVICT_CUDA_CHECK(cudaMalloc(&out, static_cast<size_t>(sh.hq) * C * sh.d * 2));
    // Values of a few units, as real logits' inputs.
    kvevict::bench::fill_uniform_bf16(q, static_cast<size_t>(sh.hq) * C * sh.d, 1, 1.0f);
    kvevict::bench::fill_uniform_bf16(k, kv_elems, 2, 1.0f);
    kvevict::bench::fill_uniform_bf16(v, kv_elems, 3, 1.0f);
    // The chunks of the prompt: queries p0 .. p0 + T - 1 over keys 0 .. p0 + T - 1.
    std::vector<cd::WindowArgs> chunks;
    size_t scratch_bytes = 0;
    double flops = 0;
    for (int64_t p0 = 0; p0 < L; p0 += C) {
      const int64_t T = std::min(C, L - p0);
      cd::WindowArgs wa;
      wa.elem = cd::Elem::kBF16;
      wa.q = q;
      wa.q_head_stride = T * sh.d;
      wa.q_row_stride = sh.d;
      wa.q_rows = static_cast<int>(T);
      wa.k = k;
      wa.v = v;
      wa.kv_head_stride = L * sh.d;
      wa.kv_row_stride = sh.d;
      wa.num_q_heads = sh.hq;
      wa.num_kv_heads = sh.hkv;
      wa.w = static_cast<int>(T);
      wa.head_dim = sh.d;
      wa.n = p0 + T;
      wa.scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
      chunks.push_back(wa);
      scratch_bytes = std::max(scratch_bytes, cd::window_forward_scratch_bytes(wa, true, sms));
      const double pairs = static_cast<double>(T) * p0 + 0.5 * static_cast<double>(T) * (T + 1);
      flops += 4.0 * sh.d * sh.hq * pairs;
    }
    KVEVICT_CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
    auto launch = [&](const cd::WindowArgs& wa) {
      KVEVICT_CUDA_CHECK(
          cd::launch_window_attention_rows(wa, out, nullptr, scratch, scratch_bytes, sms, stream));
    };
    // One timed run of body in ms.
    auto timed = [&](auto&& body) {
      KVEVICT_CUDA_CHECK(cudaEventRecord(e0, stream));
      body();
      KVEVICT_CUDA_CHECK(cudaEventRecord(e1, stream));
      KVEVICT_CUDA_CHECK(cudaEventSynchronize(e1));
      float x = 0;
      KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
      return x;
    };
    auto median = [](std::vector<float> v) {
      std::sort(v.begin(), v.end());
      return static_cast<double>(v[v.size() / 2]);
    };
    auto whole = [&] {
      for (const auto& wa : chunks) launch(wa);
    };
    auto last_chunk = [&] { launch(chunks.back()); };
    // The forward's loads (kernel_variants.h): cp.async, TMA (64-key tiles, producer warp), wide
    // TMA (128-key tiles, issued by the consumers; the default) with its plain loop, FA3's
    // intra-warpgroup overlap and FA3's ping-pong (head dim <= 128).
    struct Variant {
      const char* name;
      bool tma, wide;
      int loop;
    };
    const Variant all_variants[] = {{"plain", false, false, 0},
                                    {"tma", true, false, 0},
                                    {"tma-wide", true, true, 0},
                                    {"wide-overlap", true, true, 1},
                                    {"wide-pingpong", true, true, 2}};
    std::vector<Variant> variants;
    for (const Variant& v : all_variants)
      if (v.loop == 0 || sh.d <= 128) variants.push_back(v);
    const int nv = static_cast<int>(variants.size());
    auto use = [&](const Variant& v) {
      kvevict::cuda::set_window_tma(v.tma);
      kvevict::cuda::set_window_tma_wide(v.wide);
      kvevict::cuda::set_window_wide_loop(v.loop);
    };
    for (const Variant& v : variants) {  // warm-up: module load, first touch
      use(v);
      whole();
    }
    std::vector<std::vector<float>> all_ms(nv), last_ms(nv);
    for (int round = 0; round < args.reps; ++round)
      for (int j = 0; j < nv; ++j) {
        const int i = (round + j) % nv;
        use(variants[i]);
        all_ms[i].push_back(timed(whole));
        last_ms[i].push_back(timed(last_chunk));
      }
    kvevict::cuda::set_window_tma(true);  // the defaults
    kvevict::cuda::set_window_tma_wide(true);
    kvevict::cuda::set_window_wide_loop(1);
    for (int i = 0; i < nv; ++i) {
      const double all = median(all_ms[i]);
      std::printf("%-10lld %-14s %8zu %12.3f %10.1f %12.3f\n", static_cast<long long>(L),
                  variants[i].name, chunks.size(), all, flops / (all * 1e-3) / 1e12,
                  median(last_ms[i]));
    }
    std::fflush(stdout);
    for (void* p : {q, k, v, scratch, out}) KVEVICT_CUDA_CHECK(cudaFree(p));
  }
  KVEVICT_CUDA_CHECK(cudaEventDestroy(e0));
  KVEVICT_CUDA_CHECK(cudaEventDestroy(e1));
  KVEVICT_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  return kvevict::bench::run_reporting_errors("gpu_attention_bench", [&] { return run(args); });
}
