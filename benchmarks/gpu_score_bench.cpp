// GPU scoring benchmark (SPEC section 8): one layer of Llama-3.1-8B (Hq 32, Hkv 8, d 128) and
// Qwen2.5-7B (28/4/128) shapes, bf16, random inputs. Times dropkv and obcache_vk forward + score,
// the forward alone, and select + compaction at a 5% budget, each as the median of many reps with
// L2 flushed before every rep (a 256 MiB memset outside the timed events). Reports the floor: one
// read of K and V at the device-to-device copy bandwidth measured in the same run.
//
// Usage: gpu_score_bench [--quick] [--json FILE] [--profile]  (--profile: Llama dropkv w = 8
// and 32 at n = 128K, 3 reps, for ncu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_random.h"
#include "cuda/kernel_variants.h"
#include "kvevict/cuda/compact.h"
#include "kvevict/cuda/score.h"
#include "kvevict/cuda/select.h"
#include "kvevict/dtype.h"
#include "kvevict/error.h"
#include "kvevict/method.h"

namespace {

using namespace kvevict;

#define BENCH_CUDA(call)                                                       \
  do {                                                                         \
    const cudaError_t e_ = (call);                                             \
    if (e_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d %s failed: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(e_));                                    \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
  }
};

void* flush_buf = nullptr;
constexpr size_t kFlushBytes = 256ull << 20;

// Median milliseconds of `reps` runs of f, L2 flushed before each.
template <class F>
double median_ms(int reps, F&& f) {
  static Timer t;
  for (int i = 0; i < 3; ++i) f();  // warm-up: module load, first-touch
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaMemsetAsync(flush_buf, i & 0xff, kFlushBytes));
    BENCH_CUDA(cudaEventRecord(t.a));
    f();
    BENCH_CUDA(cudaEventRecord(t.b));
    BENCH_CUDA(cudaEventSynchronize(t.b));
    float x = 0;
    BENCH_CUDA(cudaEventElapsedTime(&x, t.a, t.b));
    ms.push_back(x);
  }
  BENCH_CUDA(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Random bf16 on the host (a cheap xorshift; normal-ish via the sum of two uniforms), uploaded.
void fill_random_bf16(uint16_t* dev, size_t count, uint64_t seed, float scale) {
  std::vector<uint16_t> host(std::min<size_t>(count, 1u << 26));
  kvevict::bench::Xorshift rng(seed);
  for (size_t done = 0; done < count;) {
    const size_t chunk = std::min(host.size(), count - done);
    for (size_t i = 0; i < chunk; ++i) {
      const uint64_t x = rng.next();
      const float u1 = static_cast<float>(x & 0xffffff) / 16777216.0f;
      const float u2 = static_cast<float>((x >> 24) & 0xffffff) / 16777216.0f;
      host[i] = float_to_bf16((u1 + u2 - 1.0f) * 2.45f * scale);
    }
    BENCH_CUDA(cudaMemcpy(dev + done, host.data(), chunk * 2, cudaMemcpyHostToDevice));
    done += chunk;
  }
}

struct Result {
  std::string name;
  double ms = 0, floor_ms = 0;
  size_t scratch = 0;
  double target_ms = 0;  // 0 = none
};
std::vector<Result> results;
double copy_gbps = 0;  // bytes read + written per second / 1e9
// The targets are the H200's (issue tables); on another card they are printed, not judged.
bool judge_targets = true;

void report(const Result& r) {
  results.push_back(r);
  char verdict[96] = "";
  if (r.target_ms > 0 && judge_targets)
    std::snprintf(verdict, sizeof(verdict), "%s",
                  r.ms <= r.target_ms ? "  (target met)" : "  (TARGET MISSED)");
  else if (r.target_ms > 0)
    std::snprintf(verdict, sizeof(verdict), "  (H200 target %.2f ms: not judged here)",
                  r.target_ms);
  std::printf("%-48s %9.4f ms  floor %8.4f ms  x%5.2f  scratch %8.2f MiB%s\n", r.name.c_str(), r.ms,
              r.floor_ms, r.floor_ms > 0 ? r.ms / r.floor_ms : 0.0, r.scratch / 1048576.0, verdict);
  std::fflush(stdout);
}

struct Layer {
  int hq, hkv, d = 128;
  int64_t n;
  uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
  float* scores = nullptr;
  void alloc(int max_w, uint64_t seed) {
    BENCH_CUDA(cudaMalloc(&q, sizeof(uint16_t) * hq * max_w * d));
    BENCH_CUDA(cudaMalloc(&k, sizeof(uint16_t) * hkv * n * d));
    BENCH_CUDA(cudaMalloc(&v, sizeof(uint16_t) * hkv * n * d));
    BENCH_CUDA(cudaMalloc(&scores, sizeof(float) * hkv * n));
    fill_random_bf16(q, static_cast<size_t>(hq) * max_w * d, seed, 2.0f);
    fill_random_bf16(k, static_cast<size_t>(hkv) * n * d, seed + 1, 1.0f);
    fill_random_bf16(v, static_cast<size_t>(hkv) * n * d, seed + 2, 1.0f);
  }
  void release() {
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(scores);
  }
  double kv_bytes() const { return 2.0 * hkv * n * d * 2; }
  // An attention sink, as real models have one: every query's dimension 0 is 4 and key 0's is
  // 45.25 in every KV head, so key 0's logit stands ~16 nats above the others' (~2 nats std):
  // it holds p ~ 0.9 of every window row at n = 128K, the case the forward's top key is for.
  void add_sink(int max_w) {
    const uint16_t q0 = float_to_bf16(4.0f), k0 = float_to_bf16(45.25f);
    for (int64_t r = 0; r < static_cast<int64_t>(hq) * max_w; ++r)
      BENCH_CUDA(cudaMemcpy(q + r * d, &q0, 2, cudaMemcpyHostToDevice));
    for (int64_t h = 0; h < hkv; ++h)
      BENCH_CUDA(cudaMemcpy(k + h * n * d, &k0, 2, cudaMemcpyHostToDevice));
  }
};

void* ws_buf = nullptr;
size_t ws_cap = 0;
Workspace workspace(size_t bytes) {
  if (bytes > ws_cap) {
    if (ws_buf) BENCH_CUDA(cudaFree(ws_buf));
    BENCH_CUDA(cudaMalloc(&ws_buf, bytes));
    ws_cap = bytes;
  }
  return {ws_buf, bytes};
}

// --methods: the rows to time (method names and "forward"); empty times every row.
std::vector<std::string> only_rows;
bool row_wanted(const std::string& name) {
  return only_rows.empty() ||
         std::find(only_rows.begin(), only_rows.end(), name) != only_rows.end();
}

// pool_default: the method's SPEC pooling, else none; `pooling` (when given) overrides both.
void bench_score(Layer& L, const char* model, Method m, int w, bool pool_default, int reps,
                 double target, const char* variant = "", const Pooling* pooling = nullptr) {
  if (!row_wanted(method_name(m))) return;
  ScoreOptions opt = ScoreOptions::defaults(m);
  opt.window = w;
  if (!pool_default) opt.pooling = Pooling{};
  if (pooling != nullptr) opt.pooling = *pooling;
  ScoreProblem p;
  p.q = TensorView(L.q, DType::kBF16, {L.hq, w, L.d}, Device::kCuda);
  p.k = TensorView(L.k, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  p.v = TensorView(L.v, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  ScoreOutput out;
  out.scores = TensorView(L.scores, DType::kF32, {L.hkv, L.n}, Device::kCuda);
  const size_t bytes = cuda::score_workspace_bytes(p, opt);
  const Workspace ws = workspace(bytes);
  Result r;
  char name[160];
  const std::string pool_name = pooling != nullptr ? " " + pooling->str()
                                : pool_default && opt.pooling.kind != PoolKind::kNone
                                    ? std::string(" pool")
                                    : std::string();
  std::snprintf(name, sizeof(name), "%s %s w=%d%s n=%lldK%s", model, method_name(m), w,
                pool_name.c_str(), static_cast<long long>(L.n / 1024), variant);
  r.name = name;
  r.ms = median_ms(reps, [&] { cuda::score(p, opt, out, ws); });
  r.floor_ms = L.kv_bytes() / (copy_gbps * 1e9) * 1e3;
  r.scratch = bytes;
  r.target_ms = target;
  report(r);
}

void bench_forward(Layer& L, const char* model, int w, int reps, const char* variant = "") {
  if (!row_wanted("forward")) return;
  TensorView q(L.q, DType::kBF16, {L.hq, w, L.d}, Device::kCuda);
  TensorView k(L.k, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  TensorView v(L.v, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  float *out = nullptr, *lse = nullptr;
  BENCH_CUDA(cudaMalloc(&out, sizeof(float) * L.hq * w * L.d));
  BENCH_CUDA(cudaMalloc(&lse, sizeof(float) * L.hq * w));
  TensorView tout(out, DType::kF32, {L.hq, w, L.d}, Device::kCuda);
  TensorView tlse(lse, DType::kF32, {L.hq, w}, Device::kCuda);
  const size_t bytes = cuda::window_forward_workspace_bytes(L.hq, L.hkv, L.n, w, L.d);
  const Workspace ws = workspace(bytes);
  Result r;
  char name[160];
  std::snprintf(name, sizeof(name), "%s forward only w=%d n=%lldK%s", model, w,
                static_cast<long long>(L.n / 1024), variant);
  r.name = name;
  r.ms = median_ms(reps, [&] { cuda::window_forward(q, k, v, w, 0.0883883f, tout, tlse, ws); });
  r.floor_ms = L.kv_bytes() / (copy_gbps * 1e9) * 1e3;
  r.scratch = bytes;
  report(r);
  cudaFree(out);
  cudaFree(lse);
}

void bench_select_compact(Layer& L, const char* model, double budget, int reps) {
  const int64_t keep = static_cast<int64_t>(std::floor(budget * L.n));
  int32_t *kept = nullptr, *pos = nullptr;
  uint16_t *ok = nullptr, *ov = nullptr;
  BENCH_CUDA(cudaMalloc(&kept, sizeof(int32_t) * L.hkv * keep));
  BENCH_CUDA(cudaMalloc(&pos, sizeof(int32_t) * L.hkv * keep));
  BENCH_CUDA(cudaMalloc(&ok, sizeof(uint16_t) * L.hkv * keep * L.d));
  BENCH_CUDA(cudaMalloc(&ov, sizeof(uint16_t) * L.hkv * keep * L.d));
  TensorView s(L.scores, DType::kF32, {L.hkv, L.n}, Device::kCuda);
  TensorView tk(L.k, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  TensorView tv(L.v, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  TensorView tkept(kept, DType::kI32, {L.hkv, keep}, Device::kCuda);
  TensorView tok(ok, DType::kBF16, {L.hkv, keep, L.d}, Device::kCuda);
  TensorView tov(ov, DType::kBF16, {L.hkv, keep, L.d}, Device::kCuda);
  TensorView tpos(pos, DType::kI32, {L.hkv, keep}, Device::kCuda);
  Result r;
  char name[160];
  std::snprintf(name, sizeof(name), "%s select+compact %.0f%% n=%lldK", model, budget * 100,
                static_cast<long long>(L.n / 1024));
  r.name = name;
  const size_t sel_bytes = cuda::select_uniform_workspace_bytes(L.hkv, L.n);
  const Workspace ws = workspace(sel_bytes);
  r.ms = median_ms(reps, [&] {
    cuda::select_uniform(s, keep, 0, 8, tkept, ws);
    cuda::compact_uniform(tk, tv, TensorView(), tkept, tok, tov, tpos);
  });
  // Floor: read the scores once, read and write the kept rows.
  r.floor_ms = (4.0 * L.hkv * L.n + 2.0 * 2.0 * L.hkv * keep * L.d * 2) / (copy_gbps * 1e9) * 1e3;
  r.target_ms = budget == 0.05 && L.n == 131072 ? 0.05 : 0;
  r.scratch = sel_bytes;
  report(r);
  std::snprintf(name, sizeof(name), "%s   select only %.0f%% n=%lldK", model, budget * 100,
                static_cast<long long>(L.n / 1024));
  r.name = name;
  r.ms = median_ms(reps, [&] { cuda::select_uniform(s, keep, 0, 8, tkept, ws); });
  r.floor_ms = 4.0 * L.hkv * L.n / (copy_gbps * 1e9) * 1e3;
  r.target_ms = 0;
  report(r);
  // A/B: the six-launch radix select (v5) in the same run.
  cuda::set_select_single_launch(false);
  std::snprintf(name, sizeof(name), "%s   select only, 6 launches %.0f%% n=%lldK", model,
                budget * 100, static_cast<long long>(L.n / 1024));
  r.name = name;
  r.ms = median_ms(reps, [&] { cuda::select_uniform(s, keep, 0, 8, tkept, ws); });
  report(r);
  std::snprintf(name, sizeof(name), "%s select+compact, 6 launches %.0f%% n=%lldK", model,
                budget * 100, static_cast<long long>(L.n / 1024));
  r.name = name;
  r.ms = median_ms(reps, [&] {
    cuda::select_uniform(s, keep, 0, 8, tkept, ws);
    cuda::compact_uniform(tk, tv, TensorView(), tkept, tok, tov, tpos);
  });
  report(r);
  cuda::set_select_single_launch(true);
  {  // adakv (layer histogram + per-head budgets) and criticalkv-style two stages, same budget
    int64_t* off = nullptr;
    BENCH_CUDA(cudaMalloc(&off, sizeof(int64_t) * (L.hkv + 1)));
    const TensorView tflat(kept, DType::kI32, {L.hkv * keep}, Device::kCuda);
    const TensorView toff(off, DType::kI64, {L.hkv + 1}, Device::kCuda);
    const size_t bytes = cuda::select_workspace_bytes(L.hkv, L.n, keep, true);
    const Workspace gws = workspace(bytes);
    std::snprintf(name, sizeof(name), "%s   select adakv %.0f%% n=%lldK", model, budget * 100,
                  static_cast<long long>(L.n / 1024));
    r.name = name;
    r.scratch = cuda::select_workspace_bytes(L.hkv, L.n, keep, false);
    r.ms = median_ms(reps, [&] {
      cuda::select(s, TensorView(), keep, 0, 8, Policy::kAdaKV, 0.2, tflat, toff, gws);
    });
    report(r);
    cuda::set_select_single_launch(false);
    std::snprintf(name, sizeof(name), "%s   select adakv, multi-launch %.0f%% n=%lldK", model,
                  budget * 100, static_cast<long long>(L.n / 1024));
    r.name = name;
    r.ms = median_ms(reps, [&] {
      cuda::select(s, TensorView(), keep, 0, 8, Policy::kAdaKV, 0.2, tflat, toff, gws);
    });
    report(r);
    cuda::set_select_single_launch(true);
    std::snprintf(name, sizeof(name), "%s   select two-stage (criticalkv) %.0f%% n=%lldK", model,
                  budget * 100, static_cast<long long>(L.n / 1024));
    r.name = name;
    r.scratch = bytes;
    r.ms = median_ms(
        reps, [&] { cuda::select(s, s, keep, 0, 8, Policy::kUniform, 0.2, tflat, toff, gws); });
    report(r);
    cudaFree(off);
  }
  cudaFree(kept);
  cudaFree(pos);
  cudaFree(ok);
  cudaFree(ov);
}

// h2o over the whole prompt (all n queries): the causal LSE pass, then the key-stationary column
// sums. Work is Hq n^2 d (QK twice, causal halves); no floor is reported (compute-bound).
void bench_h2o(const char* model, int hq, int hkv, int64_t n, int reps) {
  Layer L{hq, hkv, 128, n};
  L.alloc(static_cast<int>(n), 4321 + n);
  ScoreOptions opt = ScoreOptions::defaults(Method::kH2O);
  ScoreProblem p;
  p.q = TensorView(L.q, DType::kBF16, {L.hq, n, L.d}, Device::kCuda);
  p.k = TensorView(L.k, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  p.v = TensorView(L.v, DType::kBF16, {L.hkv, L.n, L.d}, Device::kCuda);
  ScoreOutput out;
  out.scores = TensorView(L.scores, DType::kF32, {L.hkv, L.n}, Device::kCuda);
  const size_t bytes = cuda::score_workspace_bytes(p, opt);
  const Workspace ws = workspace(bytes);
  Result r;
  char name[160];
  std::snprintf(name, sizeof(name), "%s h2o all queries n=%lldK", model,
                static_cast<long long>(n / 1024));
  r.name = name;
  r.ms = median_ms(reps, [&] { cuda::score(p, opt, out, ws); });
  r.scratch = bytes;
  report(r);
  const double flop = 2.0 * 2.0 * hq * (double(n) * n / 2) * L.d;  // QK in both passes
  std::printf("    (%.1f TFLOP/s counting QK of both causal passes)\n",
              flop / (r.ms * 1e-3) / 1e12);
  L.release();
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  bool profile = false;      // one shape, few reps: for running under ncu
  bool top_ab = false;       // issue 13: where the top keys cost time (set_window_top_keys)
  bool select_only = false;  // the radix select alone, up to the multi-launch sizes
  bool small_n = false;      // where scoring time goes at n = 4K and 32K (issues 15, 16)
  int profile_reps = 3;
  int top_mode = 0;            // --profile under another top-key mode (kernel_variants.h)
  int profile_window = 0;      // --profile of dropkv and its forward at this window alone
  int row_blocks = 0;          // --profile under set_window_forward_row_blocks
  bool split_overlap = false;  // --profile under set_window_split_overlap
  int64_t profile_n = 131072;  // --profile's n
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!std::strcmp(argv[i], "--profile")) {
      profile = true;
    } else if (!std::strcmp(argv[i], "--top-ab")) {
      top_ab = true;
    } else if (!std::strcmp(argv[i], "--select")) {
      select_only = true;
    } else if (!std::strcmp(argv[i], "--small-n")) {
      small_n = true;
    } else if (!std::strcmp(argv[i], "--top-mode") && i + 1 < argc) {
      top_mode = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--window") && i + 1 < argc) {
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      profile_window = *end == '\0' && value >= 1 && value <= 1024 ? static_cast<int>(value) : 0;
      if (profile_window == 0) {
        std::fprintf(
            stderr, "gpu_score_bench: --window %s is invalid; expected an integer from 1 to 1024\n",
            argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--row-blocks") && i + 1 < argc) {
      row_blocks = std::strcmp(argv[++i], "0") == 0 ? 0 : std::strcmp(argv[i], "64") == 0 ? 64 : -1;
      if (row_blocks < 0) {
        std::fprintf(stderr, "gpu_score_bench: --row-blocks %s is invalid; expected 0 or 64\n",
                     argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--overlap")) {
      split_overlap = true;
    } else if (!std::strcmp(argv[i], "--methods") && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string name; std::getline(list, name, ',');) {
        try {
          if (name != "forward") method_from_name(name);
        } catch (const Error& e) {
          std::fprintf(stderr, "gpu_score_bench: --methods: %s (or 'forward')\n", e.what());
          return 2;
        }
        only_rows.push_back(name);
      }
      if (only_rows.empty()) {
        std::fprintf(stderr,
                     "gpu_score_bench: --methods '%s' names no row; expected method "
                     "names or 'forward', comma-separated\n",
                     argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--n") && i + 1 < argc) {
      profile_n = std::atoll(argv[++i]);
      if (profile_n < 64 || profile_n > (int64_t{1} << 24)) {
        std::fprintf(stderr, "gpu_score_bench: --n %s is out of range; expected 64 to 16777216\n",
                     argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      profile_reps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf(
          "gpu_score_bench: times the CUDA scoring kernels on one Llama-3.1-8B (32/8/128) and one\n"
          "Qwen2.5-7B (28/4/128) layer, bf16, against the one-read floor of K and V.\n\n"
          "  --quick      fewer sizes (n = 4K and 128K)\n"
          "  --json FILE  also write every number as JSON\n"
          "  --profile    Llama at n = 128K only: dropkv w = 8 and 32, obcache_vk w = 16, the\n"
          "               forward alone at w = 8 and 32, snapkv w = 32 + pool, dropkv and snapkv\n"
          "               w = 32 on the row-major wgmma pass; 3 reps (for ncu)\n"
          "  --top-ab     Llama at n = 128K: dropkv w = 8 and 32, obcache_vk w = 16 + pool under\n"
          "               top-key modes 0 (default), 1 (pass given no records), 2 (plain forward,\n"
          "               v9's kernels), 5 rounds interleaved, --reps N each (default 30); on the\n"
          "               random layer, then with an attention sink (key 0 holds p ~ 0.9 of\n"
          "               every row); dropkv w = 32 also with 64-row forward blocks (two, one a\n"
          "               SM) and the overlapped split loop (set_window_split_overlap)\n"
          "  --select     Llama only: select + compaction at 5%% (single and multi launch, adakv,\n"
          "               two stages) on dropkv scores at n = 4K, 32K, 128K and 1M (1M takes the\n"
          "               multi-launch path either way)\n"
          "  --reps N     repetitions of --profile (default 3)\n"
          "  --top-mode M --profile under top-key mode M (set_window_top_keys)\n"
          "  --n N        --profile at n = N keys instead of 128K\n"
          "  --row-blocks R  --profile with the forward's blocks of R rows (64; 0: the plan's)\n"
          "  --overlap    --profile with the overlapped split loop (set_window_split_overlap)\n"
          "  --methods M,...  time only these rows (method names, 'forward'); e.g. knorm,keydiff\n"
          "  --window W   --profile of dropkv and its forward alone at window W (so that ncu's\n"
          "               per-kernel times belong to one window)\n"
          "  --small-n    Llama at n = 4K to 128K, 3 rounds interleaved: dropkv w = 8 (the whole\n"
          "               score) on the mma.sync and the key-major pass and as chosen, its\n"
          "               forward + merge alone, obcache_vk w = 16 + pool, dropkv under top mode\n"
          "               2, knorm (one small launch: the floor a launch costs), snapkv w = 64\n"
          "               avg:5 (kvpress's SnapKVPress settings)\n");
      return 0;
    } else {
      std::fprintf(stderr, "gpu_score_bench: unknown option '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  try {
    if (!cuda::device_available()) {
      std::printf("no CUDA device\n");
      return 0;
    }
    const cuda::DeviceInfo info = cuda::device_info();
    std::printf("device: %s, %d SMs, L2 %d MiB, wgmma kernels %s\n", info.name, info.sm_count,
                info.l2_bytes >> 20, cuda::window_wgmma_available() ? "yes" : "no (mma.sync)");
    judge_targets = std::strstr(info.name, "H200") != nullptr;
    BENCH_CUDA(cudaMalloc(&flush_buf, kFlushBytes));

    {  // copy bandwidth: 1 GiB device-to-device, counting bytes read + written
      const size_t bytes = 1ull << 30;
      void *a = nullptr, *b = nullptr;
      BENCH_CUDA(cudaMalloc(&a, bytes));
      BENCH_CUDA(cudaMalloc(&b, bytes));
      BENCH_CUDA(cudaMemset(a, 1, bytes));
      const double ms = median_ms(
          20, [&] { BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
      copy_gbps = 2.0 * bytes / (ms * 1e-3) / 1e9;
      std::printf("d2d copy 1 GiB: %.4f ms, %.0f GB/s (read + write)\n", ms, copy_gbps);
      cudaFree(a);
      cudaFree(b);
    }

    if (top_ab) {  // kernel_variants.h set_window_top_keys: modes 1, 2 are timing references
      Layer L{32, 8, 128, 131072};
      L.alloc(32, 99);
      const int reps = profile_reps > 3 ? profile_reps : 30;
      const char* label[2][3] = {
          {" (top mode 0)", " (top mode 1)", " (top mode 2)"},
          {" (sink, top mode 0)", " (sink, top mode 1)", " (sink, top mode 2)"}};
      for (int data = 0; data < 2; ++data) {
        if (data == 1) L.add_sink(32);
        for (int round = 0; round < 5; ++round)
          for (int mode = 0; mode < 3; ++mode) {
            cuda::set_window_top_keys(mode);
            const char* lab = label[data][mode];
            bench_score(L, "llama3.1-8b", Method::kDropKV, 8, false, reps, 0, lab);
            bench_score(L, "llama3.1-8b", Method::kDropKV, 32, false, reps, 0, lab);
            bench_score(L, "llama3.1-8b", Method::kObcacheVK, 16, true, reps, 0, lab);
            if (mode == 1) continue;
            // w = 32's forward as 64-row one-warpgroup blocks (two, one a SM) and in the
            // overlapped split loop (128-row blocks, 64-row blocks).
            struct Variant {
              int row_blocks, blocks_per_sm;
              bool overlap;
              const char* label;
            };
            for (const Variant& v :
                 {Variant{64, 2, false, ", 64-row blocks"},
                  Variant{64, 1, false, ", 64-row blocks x1"}, Variant{0, 0, true, ", overlapped"},
                  Variant{64, 2, true, ", 64-row blocks overlapped"}}) {
              cuda::set_window_forward_row_blocks(v.row_blocks);
              cuda::set_window_forward_blocks_per_sm(v.blocks_per_sm);
              cuda::set_window_split_overlap(v.overlap);
              const std::string lab_v = std::string(lab).insert(std::strlen(lab) - 1, v.label);
              bench_score(L, "llama3.1-8b", Method::kDropKV, 32, false, reps, 0, lab_v.c_str());
            }
            cuda::set_window_split_overlap(false);
            cuda::set_window_forward_row_blocks(0);
            cuda::set_window_forward_blocks_per_sm(0);
          }
      }
      cuda::set_window_top_keys(0);
      L.release();
      return 0;
    }
    if (small_n) {  // score - forward = the pass; knorm = what one launch costs at this n
      for (const int64_t n : {4096, 8192, 16384, 32768, 131072}) {
        Layer L{32, 8, 128, n};
        L.alloc(32, 1234 + n);
        for (int round = 0; round < 3; ++round) {
          // w = 8's 32 rows on the mma.sync and on the key-major pass (padded to 64 rows):
          // kernel_variants.h set_window_keymajor_small_rows 0 and 2, alternating which goes first.
          for (int k = 0; k < 2; ++k) {
            const bool keymajor = (k + round) % 2 == 1;
            cuda::set_window_keymajor_small_rows(keymajor ? 2 : 0);
            bench_score(L, "llama3.1-8b", Method::kDropKV, 8, false, 100, 0,
                        keymajor ? " (key-major pass)" : " (mma.sync pass)");
          }
          cuda::set_window_keymajor_small_rows(1);
          bench_score(L, "llama3.1-8b", Method::kDropKV, 8, false, 100, 0);
          bench_forward(L, "llama3.1-8b", 8, 100);
          bench_score(L, "llama3.1-8b", Method::kObcacheVK, 16, true, 100, 0);
          cuda::set_window_top_keys(2);
          bench_score(L, "llama3.1-8b", Method::kDropKV, 8, false, 100, 0, " (top mode 2)");
          cuda::set_window_top_keys(0);
          bench_score(L, "llama3.1-8b", Method::kKNorm, 8, false, 100, 0);
          bench_score(L, "llama3.1-8b", Method::kKeyDiff, 8, false, 100, 0);  // two key passes
          // kvpress's SnapKVPress settings (window 64, average pool 5): issue 15's side by side.
          const Pooling avg5{PoolKind::kAvg, 5};
          bench_score(L, "llama3.1-8b", Method::kSnapKV, 64, false, 100, 0, "", &avg5);
        }
        L.release();
      }
      return 0;
    }
    if (select_only) {
      for (const int64_t n : {4096, 32768, 131072, 1048576}) {
        Layer L{32, 8, 128, n};
        L.alloc(32, 1234 + n);
        bench_score(L, "llama3.1-8b", Method::kDropKV, 8, false, 5, 0);  // leaves dropkv scores
        bench_select_compact(L, "llama3.1-8b", 0.05, 50);
        L.release();
      }
      return 0;
    }
    if (profile) {
      Layer L{32, 8, 128, profile_n};
      L.alloc(32, 99);
      cuda::set_window_top_keys(top_mode);
      cuda::set_window_forward_row_blocks(row_blocks);
      cuda::set_window_split_overlap(split_overlap);
      if (profile_window > 0) {
        bench_score(L, "llama3.1-8b", Method::kDropKV, profile_window, false, profile_reps, 0);
        bench_forward(L, "llama3.1-8b", profile_window, profile_reps);
        L.release();
        return 0;
      }
      bench_score(L, "llama3.1-8b", Method::kDropKV, 8, false, profile_reps, 0);
      bench_score(L, "llama3.1-8b", Method::kDropKV, 32, false, profile_reps, 0);
      bench_score(L, "llama3.1-8b", Method::kObcacheVK, 16, true, profile_reps, 0);
      bench_forward(L, "llama3.1-8b", 8, profile_reps);
      bench_forward(L, "llama3.1-8b", 32, profile_reps);
      bench_score(L, "llama3.1-8b", Method::kSnapKV, 32, true, profile_reps, 0);
      cuda::set_window_keymajor(false);
      bench_score(L, "llama3.1-8b", Method::kDropKV, 32, false, profile_reps, 0,
                  " (row-major wgmma)");
      bench_score(L, "llama3.1-8b", Method::kSnapKV, 32, true, profile_reps, 0,
                  " (row-major wgmma)");
      cuda::set_window_keymajor(true);
      L.release();
      return 0;
    }
    bench_h2o("llama3.1-8b", 32, 8, 4096, 20);
    bench_h2o("llama3.1-8b", 32, 8, 32768, 5);
    const std::vector<int64_t> ns = quick ? std::vector<int64_t>{4096, 131072}
                                          : std::vector<int64_t>{4096, 32768, 131072, 524288};
    struct Model {
      const char* name;
      int hq, hkv;
    };
    const Model models[] = {{"llama3.1-8b", 32, 8}, {"qwen2.5-7b", 28, 4}};
    for (const Model& md : models) {
      for (int64_t n : ns) {
        Layer L{md.hq, md.hkv, 128, n};
        L.alloc(32, 1234 + n);
        const int reps = n >= 524288 ? 20 : 50;
        const bool llama = md.hq == 32;
        bench_score(L, md.name, Method::kDropKV, 8, false, reps, llama && n == 131072 ? 0.30 : 0);
        bench_score(L, md.name, Method::kDropKV, 32, false, reps, llama && n == 131072 ? 0.40 : 0);
        bench_score(L, md.name, Method::kObcacheVK, 16, true, reps,
                    llama && n == 131072 ? 0.35 : 0);
        if (n == 131072) {
          bench_forward(L, md.name, 8, reps);
          bench_forward(L, md.name, 32, reps);
          bench_score(L, md.name, Method::kSnapKV, 32, true, reps, 0);
          bench_score(L, md.name, Method::kDropKV, 8, false, reps, 0);  // leaves dropkv scores
          bench_select_compact(L, md.name, 0.05, reps);
          if (cuda::window_wgmma_available()) {  // A/B: the other pass kernels in the same run
            cuda::set_window_keymajor(false);
            bench_score(L, md.name, Method::kDropKV, 32, false, reps, 0, " (row-major wgmma)");
            bench_score(L, md.name, Method::kSnapKV, 32, true, reps, 0, " (row-major wgmma)");
            cuda::set_window_keymajor(true);
            cuda::set_window_wgmma(false);
            const char* v = " (mma.sync)";
            bench_score(L, md.name, Method::kDropKV, 32, false, reps, 0, v);
            bench_score(L, md.name, Method::kObcacheVK, 16, true, reps, 0, v);
            bench_forward(L, md.name, 32, reps, v);
            bench_score(L, md.name, Method::kSnapKV, 32, true, reps, 0, v);
            cuda::set_window_wgmma(true);
          }
        }
        L.release();
      }
    }
    if (!json.empty()) {
      FILE* f = std::fopen(json.c_str(), "w");
      if (f) {
        std::fprintf(f, "{\"device\": \"%s\", \"copy_gbps\": %.1f, \"results\": [\n", info.name,
                     copy_gbps);
        for (size_t i = 0; i < results.size(); ++i)
          std::fprintf(
              f,
              "  {\"name\": \"%s\", \"ms\": %.5f, \"floor_ms\": %.5f, \"scratch_bytes\": %zu}%s\n",
              results[i].name.c_str(), results[i].ms, results[i].floor_ms, results[i].scratch,
              i + 1 < results.size() ? "," : "");
        std::fprintf(f, "]}\n");
        std::fclose(f);
      }
    }
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
