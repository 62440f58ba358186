// The decode step's projections at small batch (issue 16): the small-batch GEMV of
// src/cuda/decode_gemv.cu against cuBLAS's GemmEx (the call GpuForward::gemm makes: W [N, K] bf16
// read with OP_T, f32 accumulation), on the projection shapes of SmolLM2-135M, Gemma 3 270M and
// Llama-3.1-8B at batches 1, 2, 4 and 8.
//
// What a decode step sees: every projection reads a weight matrix that is not in L2 (the layers
// before it evicted it) right after another kernel. So each timed sequence runs one projection over
// rotating copies of its weights (at least 192 MiB of them, > 3x the H100's and H200's 50 MiB L2),
// captured once as a CUDA graph and replayed; the time per call is the replay's over the copies.
// Reports microseconds per call, the weight bytes over that time, and its share of the device-to-
// device copy bandwidth measured in the same run (read + write: the bandwidth floor's convention
// of gpu_e2e_bench). Ours runs the unnormed bf16 -> bf16 variant (as cuBLAS does: no fused norm),
// and the normed one beside it (the fused step's q|k|v and gate|up launches); from batch 2, where
// ours runs on the tensor cores, also the CUDA-core kernel (GemvArgs::cuda_cores: "cores us").
//
// --sync-cost measures instead what one grid-wide dependency costs: a kernel boundary, a
// programmatic dependent launch's, or a barrier inside one cooperative launch (what a persistent
// decode step would pay between its phases).
//
// Usage: gpu_gemv_bench [--model smollm2|gemma3|llama|all] [--batches 1,2,4,8] [--replays N]
//                       [--sync-cost]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_errors.h"
#include "bench_random.h"
#include "cuda/check.h"
#include "cuda/model_launchers.h"

namespace {

using kvevict::gpu::detail::GemvArgs;
using kvevict::gpu::detail::GemvOut;
using kvevict::gpu::detail::kGemvMaxBatch;

// One projection of a model's decode step: y[B, N] = x[B, K] W^T.
struct Shape {
  const char* model;
  const char* name;
  int N, K;
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"smollm2", "q|k|v", 960, 576},    {"smollm2", "o", 576, 576},
      {"smollm2", "gate|up", 3072, 576}, {"smollm2", "down", 576, 1536},
      {"smollm2", "logits", 49152, 576}, {"gemma3", "q|k|v", 1536, 640},
      {"gemma3", "o", 640, 1024},        {"gemma3", "gate|up", 4096, 640},
      {"gemma3", "down", 640, 2048},     {"gemma3", "logits", 262144, 640},
      {"llama", "q|k|v", 6144, 4096},    {"llama", "o", 4096, 4096},
      {"llama", "gate|up", 28672, 4096}, {"llama", "down", 4096, 14336},
      {"llama", "logits", 128256, 4096},
  };
  return s;
}

struct Args {
  std::string model = "all";
  std::vector<int> batches = {1, 2, 4, 8};
  int replays = 20;
  bool sync_cost = false;  // --sync-cost: only the grid-dependency costs
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_gemv_bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--model") {
      a.model = value();
      if (a.model != "all" && a.model != "smollm2" && a.model != "gemma3" && a.model != "llama") {
        std::fprintf(stderr, "gpu_gemv_bench: --model %s: expected smollm2, gemma3, llama or all\n",
                     a.model.c_str());
        std::exit(2);
      }
    } else if (s == "--batches") {
      a.batches.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) {
        const int b = std::atoi(item.c_str());
        if (b < 1 || b > kGemvMaxBatch) {
          std::fprintf(stderr, "gpu_gemv_bench: --batches %s: expected 1..%d\n", item.c_str(),
                       kGemvMaxBatch);
          std::exit(2);
        }
        a.batches.push_back(b);
      }
    } else if (s == "--replays") {
      a.replays = std::atoi(value().c_str());
      if (a.replays < 1) {
        std::fprintf(stderr, "gpu_gemv_bench: --replays %s: expected >= 1\n", argv[i]);
        std::exit(2);
      }
    } else if (s == "--sync-cost") {
      a.sync_cost = true;
    } else if (s == "--help" || s == "-h") {
      std::printf(
          "gpu_gemv_bench: the decode step's small-batch GEMV against cuBLAS on model shapes.\n\n"
          "  --model M      smollm2, gemma3, llama or all (default all)\n"
          "  --batches L    comma-separated batches, 1..%d (default 1,2,4,8)\n"
          "  --replays N    graph replays a measurement, median taken (default 20)\n"
          "  --sync-cost    only what one grid-wide dependency costs: an empty kernel, an empty\n"
          "                 programmatic dependent, a cooperative groups grid.sync and a\n"
          "                 counter barrier, at 1-4 blocks an SM\n",
          kGemvMaxBatch);
      std::exit(0);
    } else {
      std::fprintf(stderr, "gpu_gemv_bench: unknown option %s (try --help)\n", s.c_str());
      std::exit(2);
    }
  }
  return a;
}

// Median microseconds per call of `calls` calls of f(i), captured as one graph and replayed.
template <class F>
double us_per_call(cudaStream_t stream, int calls, int replays, F&& f) {
  for (int i = 0; i < calls; ++i) f(i);  // warm-up outside the graph (module load, cuBLAS plan)
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  KVEVICT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) f(i);
  KVEVICT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  KVEVICT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  KVEVICT_CUDA_CHECK(cudaEventCreate(&a));
  KVEVICT_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int r = 0; r < replays + 2; ++r) {
    KVEVICT_CUDA_CHECK(cudaEventRecord(a, stream));
    KVEVICT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    KVEVICT_CUDA_CHECK(cudaEventRecord(b, stream));
    KVEVICT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 2) us.push_back(1e3 * ms / calls);  // the first two replays warm the graph
  }
  KVEVICT_CUDA_CHECK(cudaEventDestroy(a));
  KVEVICT_CUDA_CHECK(cudaEventDestroy(b));
  KVEVICT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KVEVICT_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double copy_gbps(cudaStream_t stream) {
  const size_t bytes = 1ull << 30;
  void *src = nullptr, *dst = nullptr;
  KVEVICT_CUDA_CHECK(cudaMalloc(&src, bytes));
  KVEVICT_CUDA_CHECK(cudaMalloc(&dst, bytes));
  KVEVICT_CUDA_CHECK(cudaMemset(src, 1, bytes));
  const double us = us_per_call(stream, 4, 10, [&](int) {
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  KVEVICT_CUDA_CHECK(cudaFree(src));
  KVEVICT_CUDA_CHECK(cudaFree(dst));
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9;
}

// --sync-cost: microseconds per grid-wide dependency (median of the replays), 150 of them a replay
// (a SmolLM2 decode step's count): empty kernels in a graph (plain and programmatic dependents)
// and barriers in one cooperative launch, each at 1-4 blocks of 128 threads an SM.
int sync_cost(const Args& args, const cudaDeviceProp& prop, cudaStream_t stream) {
  using kvevict::gpu::detail::launch_sync_cost;
  using kvevict::gpu::detail::SyncKind;
  constexpr int kDeps = 150;
  unsigned* state = nullptr;
  KVEVICT_CUDA_CHECK(cudaMalloc(&state, 2 * sizeof(unsigned)));
  KVEVICT_CUDA_CHECK(cudaMemset(state, 0, 2 * sizeof(unsigned)));
  struct Kind {
    SyncKind kind;
    const char* name;
  };
  std::printf("%-40s %8s %12s\n", "dependency (150 a replay, empty)", "blocks", "us each");
  for (const Kind& k : {Kind{SyncKind::kKernel, "kernel boundary in a graph"},
                        Kind{SyncKind::kPdlKernel, "programmatic dependent kernel"},
                        Kind{SyncKind::kGroupsBarrier, "cooperative groups grid.sync"},
                        Kind{SyncKind::kCounterBarrier, "counter barrier, polling with sleeps"}}) {
    for (int per_sm = 1; per_sm <= 4; ++per_sm) {
      const int blocks = per_sm * prop.multiProcessorCount;
      const double us = us_per_call(stream, 1, args.replays, [&](int) {
        KVEVICT_CUDA_CHECK(launch_sync_cost(k.kind, kDeps, blocks, state, stream));
      });
      std::printf("%-40s %8d %12.3f\n", k.name, blocks, us / kDeps);
    }
  }
  KVEVICT_CUDA_CHECK(cudaFree(state));
  return 0;
}

int run(const Args& args) {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "gpu_gemv_bench: no CUDA device\n");
    return 2;
  }
  cudaStream_t stream;
  KVEVICT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (args.sync_cost) {
    const int rc = sync_cost(args, prop, stream);
    KVEVICT_CUDA_CHECK(cudaStreamDestroy(stream));
    return rc;
  }
  cublasHandle_t blas;
  KVEVICT_CUBLAS_CHECK(cublasCreate(&blas));
  KVEVICT_CUBLAS_CHECK(cublasSetStream(blas, stream));
  void* blas_ws = nullptr;  // as GpuForward: an explicit workspace, so the calls capture in graphs
  const size_t blas_ws_bytes = 32u << 20;
  KVEVICT_CUDA_CHECK(cudaMalloc(&blas_ws, blas_ws_bytes));
  KVEVICT_CUBLAS_CHECK(cublasSetWorkspace(blas, blas_ws, blas_ws_bytes));
  const double bw = copy_gbps(stream);
  std::printf("device: %s, %d SMs, L2 %d MiB; d2d copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, bw);
  std::printf("%-8s %-8s %6s %6s %2s | %9s %7s %6s | %9s %7s %6s | %9s %6s | %7s | %8s\n", "model",
              "proj", "N", "K", "B", "ours us", "GB/s", "%copy", "cuBLAS us", "GB/s", "%copy",
              "+norm us", "%copy", "cuBLAS/ours", "cores us");

  constexpr size_t kRotateBytes = 192ull << 20;
  for (const Shape& s : shapes()) {
    if (args.model != "all" && args.model != s.model) continue;
    const size_t w_elems = static_cast<size_t>(s.N) * s.K;
    const size_t w_bytes = w_elems * sizeof(__nv_bfloat16);
    const int copies =
        static_cast<int>(std::max<size_t>(2, (kRotateBytes + w_bytes - 1) / w_bytes));
    __nv_bfloat16* w = nullptr;
    KVEVICT_CUDA_CHECK(cudaMalloc(&w, copies * w_bytes));
    kvevict::bench::fill_uniform_bf16(w, w_elems, 7, 0x1p-5f);
    for (int c = 1; c < copies; ++c)
      KVEVICT_CUDA_CHECK(cudaMemcpy(w + c * w_elems, w, w_bytes, cudaMemcpyDeviceToDevice));
    __nv_bfloat16 *x = nullptr, *y = nullptr;
    float *xf = nullptr, *norm = nullptr;
    KVEVICT_CUDA_CHECK(
        cudaMalloc(&x, static_cast<size_t>(kGemvMaxBatch) * s.K * sizeof(__nv_bfloat16)));
    KVEVICT_CUDA_CHECK(cudaMalloc(&xf, static_cast<size_t>(kGemvMaxBatch) * s.K * sizeof(float)));
    KVEVICT_CUDA_CHECK(cudaMalloc(&norm, static_cast<size_t>(s.K) * sizeof(float)));
    KVEVICT_CUDA_CHECK(
        cudaMalloc(&y, static_cast<size_t>(kGemvMaxBatch) * s.N * sizeof(__nv_bfloat16)));
    kvevict::bench::fill_uniform_bf16(x, static_cast<size_t>(kGemvMaxBatch) * s.K, 11, 0x1p-5f);
    KVEVICT_CUDA_CHECK(cudaMemset(xf, 0, static_cast<size_t>(kGemvMaxBatch) * s.K * sizeof(float)));
    KVEVICT_CUDA_CHECK(cudaMemset(norm, 0, static_cast<size_t>(s.K) * sizeof(float)));
    for (int B : args.batches) {
      GemvArgs g;
      g.x = x;
      g.w = w;
      g.B = B;
      g.N = s.N;
      g.K = s.K;
      g.out = GemvOut::kBf16;
      g.y = y;
      auto ours = [&](int i) {
        GemvArgs gi = g;
        gi.w = w + (i % copies) * w_elems;
        KVEVICT_CUDA_CHECK(kvevict::gpu::detail::launch_gemv(gi, stream));
      };
      GemvArgs gn = g;
      gn.x = xf;
      gn.norm_w = norm;
      gn.eps = 1e-6f;
      auto ours_normed = [&](int i) {
        GemvArgs gi = gn;
        gi.w = w + (i % copies) * w_elems;
        KVEVICT_CUDA_CHECK(kvevict::gpu::detail::launch_gemv(gi, stream));
      };
      const float alpha = 1.0f, beta = 0.0f;
      auto blas_call = [&](int i) {
        KVEVICT_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, B, s.K, &alpha,
                                          w + (i % copies) * w_elems, CUDA_R_16BF, s.K, x,
                                          CUDA_R_16BF, s.K, &beta, y, CUDA_R_16BF, s.N,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      const int calls = copies;
      const double t_ours = us_per_call(stream, calls, args.replays, ours);
      const double t_blas = us_per_call(stream, calls, args.replays, blas_call);
      const double t_norm = us_per_call(stream, calls, args.replays, ours_normed);
      // From batch 2 launch_gemv takes the tensor cores; the CUDA-core kernel beside it.
      double t_cores = 0;
      if (B > 1) {
        auto cores = [&](int i) {
          GemvArgs gi = g;
          gi.w = w + (i % copies) * w_elems;
          gi.cuda_cores = true;
          KVEVICT_CUDA_CHECK(kvevict::gpu::detail::launch_gemv(gi, stream));
        };
        t_cores = us_per_call(stream, calls, args.replays, cores);
      }
      auto gbps = [&](double us) { return static_cast<double>(w_bytes) / (us * 1e-6) / 1e9; };
      std::printf(
          "%-8s %-8s %6d %6d %2d | %9.2f %7.0f %5.1f%% | %9.2f %7.0f %5.1f%% | %9.2f %5.1f%% | "
          "%7.2f | %8.2f\n",
          s.model, s.name, s.N, s.K, B, t_ours, gbps(t_ours), 100.0 * gbps(t_ours) / bw, t_blas,
          gbps(t_blas), 100.0 * gbps(t_blas) / bw, t_norm, 100.0 * gbps(t_norm) / bw,
          t_blas / t_ours, t_cores);
      std::fflush(stdout);
    }
    KVEVICT_CUDA_CHECK(cudaFree(w));
    KVEVICT_CUDA_CHECK(cudaFree(x));
    KVEVICT_CUDA_CHECK(cudaFree(xf));
    KVEVICT_CUDA_CHECK(cudaFree(norm));
    KVEVICT_CUDA_CHECK(cudaFree(y));
  }
  KVEVICT_CUBLAS_CHECK(cublasDestroy(blas));
  KVEVICT_CUDA_CHECK(cudaFree(blas_ws));
  KVEVICT_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  return kvevict::bench::run_reporting_errors("gpu_gemv_bench", [&] { return run(args); });
}
