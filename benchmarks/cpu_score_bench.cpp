// CPU token scoring: cpu::score (streaming) vs ref::score (double) vs a straightforward float
// implementation that materializes the [Hq, w, n] logits (written here, as the peer).
//
//   cpu_score_bench [--n 4096,32768,131072] [--w 8,32] [--method dropkv] [--dtype f32|bf16]
//                   [--reps 3] [--ref-max-n 32768] [--threads 0] [--json]
//
// Shapes: Hq 32, Hkv 8, d 128 (Llama-3.1-8B). Reports the median time of --reps runs (the
// reference runs once), the scratch each needs, GB/s = (K + V bytes, read once) / time, and
// GFLOP/s from the nominal count 6 Hq w n d (Q K^T, P V and <a, v>, causal mask ignored) so the
// three columns compare like-for-like. The fast path is also checked against the materializing
// version (max relative difference), so the benchmark cannot silently time wrong code.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "kvevict/dtype.h"
#include "kvevict/score.h"
#include "score/score_terms.h"

namespace {

using namespace kvevict;

constexpr int64_t kHq = 32, kHkv = 8, kD = 128;

struct Args {
  std::vector<int64_t> ns{4096, 32768, 131072};
  std::vector<int64_t> ws{8, 32};
  Method method = Method::kDropKV;
  DType dtype = DType::kF32;
  int reps = 3;
  int64_t ref_max_n = 32768;
  int threads = 0;
  bool json = false;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + k);
      return argv[++i];
    };
    if (k == "--help" || k == "-h") {
      std::printf(
          "cpu_score_bench: times cpu::score (streaming float) against ref::score (double) and a\n"
          "materializing float peer at the Llama-3.1-8B layer shape (Hq 32, Hkv 8, d 128).\n\n"
          "  --n LIST         context lengths (default 4096,32768,131072)\n"
          "  --w LIST         window sizes (default 8,32)\n"
          "  --method NAME    score method (default dropkv)\n"
          "  --dtype f32|bf16 K/V/Q dtype (default f32)\n"
          "  --reps N         timed repetitions, median reported (default 3)\n"
          "  --ref-max-n N    largest n the double reference runs at (default 32768; 0 = never)\n"
          "  --threads N      worker threads (default 0 = all cores)\n"
          "  --json           one JSON object per line instead of the table\n");
      std::exit(0);
    }
    if (k == "--n")
      a.ns = parse_list(next());
    else if (k == "--w")
      a.ws = parse_list(next());
    else if (k == "--method")
      a.method = method_from_name(next());
    else if (k == "--dtype")
      a.dtype = dtype_parse(next());
    else if (k == "--reps")
      a.reps = std::stoi(next());
    else if (k == "--ref-max-n")
      a.ref_max_n = std::stoll(next());
    else if (k == "--threads")
      a.threads = std::stoi(next());
    else if (k == "--json")
      a.json = true;
    else
      throw std::runtime_error("unknown flag " + k);
  }
  return a;
}

// Owning storage of one tensor in f32 or bf16.
struct Buffer {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  DType dtype;
  Buffer(size_t count, DType t, uint64_t seed, float stddev) : dtype(t) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, stddev);
    if (t == DType::kBF16) {
      bf16.resize(count);
      for (auto& x : bf16) x = float_to_bf16(dist(rng));
    } else {
      f32.resize(count);
      for (auto& x : f32) x = dist(rng);
    }
  }
  void* data() { return dtype == DType::kBF16 ? static_cast<void*>(bf16.data()) : f32.data(); }
  float at(size_t i) const { return dtype == DType::kBF16 ? bf16_to_float(bf16[i]) : f32[i]; }
};

// The peer: materializes the logits of every window query over every token, [Hq, w, n] floats,
// then softmax, a = P V and the dropkv term per token, parallel over query heads. K and V are
// converted to float per head (counted in its scratch when the input is bf16).
struct Materialized {
  size_t scratch_bytes(int64_t n, int64_t w, DType t) const {
    size_t bytes = static_cast<size_t>(kHq * w * n) * 4           // logits / probabilities
                   + static_cast<size_t>(kHq * w * (kD + 2)) * 4  // a, lse, ||a||^2
                   + static_cast<size_t>(kHq * n) * 4;  // per-head sums before the average
    if (t == DType::kBF16) bytes += static_cast<size_t>(2 * kHkv * n * kD) * 4;
    return bytes;
  }
  void run(const ScoreProblem& p, int64_t w, std::vector<float>& logits,
           std::vector<float>& head_sum, std::vector<float>& kv32, float* out) const {
    const int64_t n = p.num_tokens();
    const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
    const int64_t group = kHq / kHkv;
    const bool convert = p.k.dtype != DType::kF32;
    if (convert) {
      parallel_for(kHkv, [&](int64_t g) {
        for (int64_t j = 0; j < n; ++j)
          for (int64_t c = 0; c < kD; ++c) {
            kv32[(g * n + j) * kD + c] = static_cast<float>(p.k.load(g, j, c));
            kv32[((kHkv + g) * n + j) * kD + c] = static_cast<float>(p.v.load(g, j, c));
          }
      });
    }
    parallel_for(kHq, [&](int64_t h) {
      const int64_t g = h / group;
      const float* K = convert ? kv32.data() + g * n * kD : p.k.ptr<float>() + g * n * kD;
      const float* V = convert ? kv32.data() + (kHkv + g) * n * kD : p.v.ptr<float>() + g * n * kD;
      float* hs = head_sum.data() + h * n;
      std::fill(hs, hs + n, 0.0f);
      std::vector<float> q(kD), a(kD);
      for (int64_t t = 0; t < w; ++t) {
        const int64_t m = p.q.shape[1];
        for (int64_t c = 0; c < kD; ++c)
          q[c] = static_cast<float>(p.q.load(h, m - w + t, c)) * scale;
        float* z = logits.data() + (h * w + t) * n;
        const int64_t visible = n - w + t + 1;
        float zmax = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t c = 0; c < kD; ++c) s += q[c] * K[j * kD + c];
          z[j] = s;
          zmax = std::max(zmax, s);
        }
        float sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += std::exp(z[j] - zmax);
        const float lse = zmax + std::log(sum);
        std::fill(a.begin(), a.end(), 0.0f);
        for (int64_t j = 0; j < visible; ++j) {
          const float pj = std::exp(z[j] - lse);
          for (int64_t c = 0; c < kD; ++c) a[c] += pj * V[j * kD + c];
        }
        float a2 = 0;
#pragma omp simd reduction(+ : a2)
        for (int64_t c = 0; c < kD; ++c) a2 += a[c] * a[c];
        for (int64_t j = 0; j < visible; ++j) {
          float v2 = 0, av = 0;
#pragma omp simd reduction(+ : v2, av)
          for (int64_t c = 0; c < kD; ++c) {
            v2 += V[j * kD + c] * V[j * kD + c];
            av += a[c] * V[j * kD + c];
          }
          hs[j] += terms::pair_term<float>(Method::kDropKV, z[j], lse, a2, v2, av, 1e-12f);
        }
      }
    });
    for (int64_t g = 0; g < kHkv; ++g)
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t hl = 0; hl < group; ++hl) s += head_sum[(g * group + hl) * n + j];
        out[g * n + j] = s / group;
      }
  }
};

double process_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

struct Timing {
  double ms = 0;      // median wall time
  double cpu_ms = 0;  // process CPU time of that run (all threads): the work, even on a busy host
};

template <class Fn>
Timing median_ms(int reps, Fn&& fn) {
  std::vector<Timing> runs;
  for (int r = 0; r < reps; ++r) {
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    runs.push_back(
        {std::chrono::duration<double, std::milli>(t1 - t0).count(), process_cpu_ms() - c0});
  }
  std::sort(runs.begin(), runs.end(), [](const Timing& a, const Timing& b) { return a.ms < b.ms; });
  return runs[runs.size() / 2];
}

struct Row {
  std::string impl;
  int64_t n, w;
  Timing t;
  size_t scratch;
  double max_rel_diff = -1;  // vs the materializing peer (fast path only)
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_score_bench: %s\n", e.what());
    return 2;
  }
  if (args.threads > 0) set_num_threads(args.threads);
  std::vector<Row> rows;
  const char* cpu_name = "unknown CPU";
  std::string model;
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "model name", 10) == 0) {
        model = std::strchr(line, ':') + 2;
        model.erase(model.find_last_not_of("\n") + 1);
        break;
      }
    std::fclose(f);
    if (!model.empty()) cpu_name = model.c_str();
  }
  if (!args.json)
    std::printf("# %s, %d threads, Hq %lld Hkv %lld d %lld, %s, %s\n", cpu_name, num_threads(),
                (long long)kHq, (long long)kHkv, (long long)kD, method_name(args.method),
                dtype_name(args.dtype));
  for (int64_t n : args.ns) {
    Buffer k(static_cast<size_t>(kHkv * n * kD), args.dtype, 1, 1.0f);
    Buffer v(static_cast<size_t>(kHkv * n * kD), args.dtype, 2, 1.0f);
    for (int64_t w : args.ws) {
      Buffer q(static_cast<size_t>(kHq * w * kD), args.dtype, 3, 1.5f);
      ScoreProblem p;
      p.q = TensorView(q.data(), args.dtype, {kHq, w, kD});
      p.k = TensorView(k.data(), args.dtype, {kHkv, n, kD});
      p.v = TensorView(v.data(), args.dtype, {kHkv, n, kD});
      ScoreOptions opt = ScoreOptions::defaults(args.method);
      opt.window = static_cast<int>(w);
      opt.pooling = Pooling{};

      // Fast path.
      std::vector<float> fast(static_cast<size_t>(kHkv * n));
      const size_t ws_bytes = cpu::score_workspace_bytes(p, opt);
      std::vector<uint8_t> ws(ws_bytes);
      ScoreOutput out;
      out.scores = TensorView(fast.data(), DType::kF32, {kHkv, n});
      cpu::score(p, opt, out, Workspace{ws.data(), ws_bytes});  // warm-up
      const Timing fast_ms = median_ms(args.reps, [&] {
        cpu::score(p, opt, out, Workspace{ws.data(), ws_bytes});
      });

      // Materializing peer (dropkv only: it is written for that term).
      if (args.method == Method::kDropKV) {
        Materialized mat;
        std::vector<float> logits(static_cast<size_t>(kHq * w * n));
        std::vector<float> head_sum(static_cast<size_t>(kHq * n));
        std::vector<float> kv32(args.dtype == DType::kF32 ? 0
                                                          : static_cast<size_t>(2 * kHkv * n * kD));
        std::vector<float> slow(static_cast<size_t>(kHkv * n));
        mat.run(p, w, logits, head_sum, kv32, slow.data());  // warm-up
        const Timing mat_ms =
            median_ms(args.reps, [&] { mat.run(p, w, logits, head_sum, kv32, slow.data()); });
        double top = 0, worst = 0;
        for (float x : slow) top = std::max(top, static_cast<double>(std::abs(x)));
        for (size_t i = 0; i < slow.size(); ++i)
          worst = std::max(worst, std::abs(static_cast<double>(fast[i]) - slow[i]) / top);
        rows.push_back({"materialized", n, w, mat_ms, mat.scratch_bytes(n, w, args.dtype)});
        rows.push_back({"cpu", n, w, fast_ms, ws_bytes, worst});
      } else {
        rows.push_back({"cpu", n, w, fast_ms, ws_bytes});
      }

      if (n <= args.ref_max_n) {
        // The reference's own allocations: K and V of a head in double, z and p of a query, and
        // the [Hq, n] / [Hkv, n] accumulators (computed, not measured).
        const size_t ref_bytes =
            static_cast<size_t>(2 * n * kD + 2 * n + kHq * n + 3 * kHkv * n) * 8;
        const Timing ref_ms = median_ms(1, [&] { ref::score(p, opt); });
        rows.push_back({"reference", n, w, ref_ms, ref_bytes});
      }
      if (!args.json) {
        for (const Row& r : rows) {
          if (r.n != n || r.w != w) continue;
          const double kv_bytes = 2.0 * kHkv * n * kD * dtype_size(args.dtype);
          const double flops = 6.0 * kHq * w * n * kD;
          std::printf(
              "%-13s n=%-7lld w=%-3lld %10.2f ms (cpu %10.2f ms)  scratch %12zu B  "
              "%7.2f GB/s  %7.2f GFLOP/s",
              r.impl.c_str(), (long long)n, (long long)w, r.t.ms, r.t.cpu_ms, r.scratch,
              kv_bytes / r.t.ms / 1e6, flops / r.t.ms / 1e6);
          if (r.max_rel_diff >= 0)
            std::printf("  max|cpu-materialized|/max = %.2e", r.max_rel_diff);
          std::printf("\n");
        }
        std::fflush(stdout);
      }
    }
  }
  if (args.json) {
    std::printf(
        "{\"cpu\": \"%s\", \"threads\": %d, \"hq\": %lld, \"hkv\": %lld, \"d\": %lld, "
        "\"method\": \"%s\", \"dtype\": \"%s\", \"results\": [",
        cpu_name, num_threads(), (long long)kHq, (long long)kHkv, (long long)kD,
        method_name(args.method), dtype_name(args.dtype));
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double kv_bytes = 2.0 * kHkv * r.n * kD * dtype_size(args.dtype);
      const double flops = 6.0 * kHq * r.w * r.n * kD;
      std::printf(
          "%s\n  {\"impl\": \"%s\", \"n\": %lld, \"w\": %lld, \"ms\": %.3f, "
          "\"cpu_ms\": %.3f, \"scratch_bytes\": %zu, \"gbps\": %.3f, \"gflops\": %.3f, "
          "\"max_rel_diff\": %.3e}",
          i ? "," : "", r.impl.c_str(), (long long)r.n, (long long)r.w, r.t.ms, r.t.cpu_ms,
          r.scratch, kv_bytes / r.t.ms / 1e6, flops / r.t.ms / 1e6, r.max_rel_diff);
    }
    std::printf("\n]}\n");
  }
  return 0;
}
