// End-to-end GPU runtime benchmark (SPEC section 8, "End to end"): a random-weight model of a real
// shape (default Llama-3.1-8B, bf16) on one GPU.
//   1. Prefill time at each --lengths value with and without one-shot eviction, and the time to
//      first token (prefill + last-token logits + argmax).
//   2. Decode throughput at the largest batch that fits one KV memory pool, for the full cache and
//      for each --budgets value of --method (the same pool for all: SPEC's "same memory").
//      With --decode-score S, the evicted caches also run decode-time eviction (SPEC section 5):
//      every step scores with S, heads over budget + --decode-slack rows are cut back to the
//      prefill budget's row count. The batch rows hold --distinct different prompts (each its own
//      prefill and eviction), repeated over the batch.
//   2b. With --decode-score: the cost of a step that cuts every head (slack 0) against a step that
//      scores but cuts nothing, at the same batch (target: <= 1.3x).
//   3. Batch 1 (latency) for each cache, beside the bandwidth floor: the bytes of weights and KV a
//      step reads over the measured device copy bandwidth.
//   --decode-ab: only decode, at --prompt-tokens of context for each --batches value, with the
//      decode step eager and as a replayed CUDA graph (same prompts, same session shape), both as
//      decode_greedy (a device loop) and as answer_batch's loop (argmax to the host, decode the
//      ids: a synchronization every step); says whether both produced the same tokens. --model FILE
//      runs a real GGUF checkpoint instead of random weights of the preset.
// Prints a table; --json FILE writes every number. Device times come from CUDA events; TTFT is
// host wall time around the whole call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/kernel_variants.h"
#include "kvevict/cuda/score.h"
#include "kvevict/decode_evict.h"
#include "kvevict/error.h"
#include "kvevict/model/model.h"
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_runtime.h"

namespace {

using namespace kvevict;

struct Args {
  std::string preset = "llama-3.1-8b";
  int layers = 0;  // 0 = the preset's
  std::vector<int64_t> lengths = {32768, 131072};
  int64_t pair_max = 32768;  // lengths up to this get a separate no-eviction prefill
  std::string method = "dropkv";
  double prefill_budget = 0.1;
  std::vector<double> budgets = {0.05, 0.1};
  int64_t decode_context = 32768;
  int decode_steps = 32;
  int max_batch = 4096;
  double reserve_gib = 6.0;  // left free for activations, scratch and cuBLAS
  int64_t chunk = 4096;
  bool b1 = true;            // also decode one sequence (latency) for each cache
  std::string decode_score;  // empty = no decode-time eviction
  int64_t decode_slack = 16;
  bool fused_scores = true;         // --unfused-scores: the step scores re-read K and V
  bool scores_in_attention = true;  // --separate-scores: a second kernel after the attention
  int fuse_min_segments = 0;        // --fuse-min-segments N (0: the SM count; 1: always fuse)
  int distinct = 8;                 // distinct prompts in a decode batch
  std::string json;
  std::string model_file;  // --model: a GGUF checkpoint instead of random weights
  bool decode_ab = false;  // --decode-ab: only the graph / eager decode comparison
  std::vector<int64_t> batches = {1, 15, 64};
  int64_t prompt_tokens = 256;
  std::string forward_loop = "wide-overlap";  // --forward-loop: the prefill attention's wgmma loop
  bool prefill_only = false;                  // --prefill-only: no decode runs
};

std::vector<int64_t> parse_ints(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}
std::vector<double> parse_doubles(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stod(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto v = [&]() -> std::string {
      KVEVICT_CHECK(i + 1 < argc, k, " needs a value");
      return argv[++i];
    };
    if (k == "--help" || k == "-h") {
      std::printf(
          "gpu_e2e_bench: end-to-end GPU runtime benchmark on random weights of a real shape.\n\n"
          "  --preset NAME          llama-3.1-8b (default), qwen2.5-7b, smollm2-135m, gemma3-270m\n"
          "  --layers N             keep only the first N layers (default 0 = all)\n"
          "  --lengths LIST         prefill lengths, with eviction (default 32768,131072)\n"
          "  --pair-max N           lengths up to N also run without eviction (default 32768)\n"
          "  --method M             eviction method (default dropkv)\n"
          "  --prefill-budget B     prefill eviction budget (default 0.1)\n"
          "  --budgets LIST         decode-throughput budgets (default 0.05,0.1)\n"
          "  --decode-context N     context of the decode throughput runs (default 32768)\n"
          "  --decode-steps N       timed decode steps (default 32)\n"
          "  --max-batch N          cap on the decode batch (default 4096)\n"
          "  --reserve-gib G        GPU memory left out of the KV pool (default 6)\n"
          "  --chunk N              prefill chunk size (default 4096)\n"
          "  --no-b1                skip the batch-1 decode run\n"
          "  --decode-score S       also run decode-time eviction with score S\n"
          "  --decode-slack N       rows over budget before a decode-time cut (default 16)\n"
          "  --distinct N           distinct prompts in a decode batch (default 8)\n"
          "  --unfused-scores       decode scores recompute q.k instead of reading exported "
          "logits\n"
          "  --separate-scores      decode scores in a kernel after the attention, not inside it\n"
          "  --fuse-min-segments N  fuse the scores into the attention from N KV-head segments\n"
          "                         (B x Hkv; default 0 = the SM count, 1 = always)\n"
          "  --json FILE            write every number as JSON\n"
          "  --model FILE           a GGUF checkpoint instead of random weights of the preset\n"
          "  --decode-ab            only decode: eager vs CUDA-graph steps at each --batches "
          "value\n"
          "  --batches LIST         batches of --decode-ab (default 1,15,64)\n"
          "  --prompt-tokens N      context of --decode-ab (default 256)\n"
          "  --forward-loop L       the prefill attention's wgmma loop: plain (cp.async),\n"
          "                         tma, tma-wide (the wide plain loop), wide-overlap\n"
          "                         (default) or wide-pingpong (kernel_variants.h)\n"
          "  --prefill-only         the prefills alone, no decode runs\n");
      std::exit(0);
    }
    if (k == "--preset")
      a.preset = v();
    else if (k == "--layers")
      a.layers = std::stoi(v());
    else if (k == "--lengths")
      a.lengths = parse_ints(v());
    else if (k == "--pair-max")
      a.pair_max = std::stoll(v());
    else if (k == "--method")
      a.method = v();
    else if (k == "--prefill-budget")
      a.prefill_budget = std::stod(v());
    else if (k == "--budgets")
      a.budgets = parse_doubles(v());
    else if (k == "--decode-context")
      a.decode_context = std::stoll(v());
    else if (k == "--decode-steps")
      a.decode_steps = std::stoi(v());
    else if (k == "--max-batch")
      a.max_batch = std::stoi(v());
    else if (k == "--reserve-gib")
      a.reserve_gib = std::stod(v());
    else if (k == "--chunk")
      a.chunk = std::stoll(v());
    else if (k == "--json")
      a.json = v();
    else if (k == "--no-b1")
      a.b1 = false;
    else if (k == "--decode-score")
      a.decode_score = v();
    else if (k == "--decode-slack")
      a.decode_slack = std::stoll(v());
    else if (k == "--unfused-scores")
      a.fused_scores = false;
    else if (k == "--separate-scores")
      a.scores_in_attention = false;
    else if (k == "--fuse-min-segments")
      a.fuse_min_segments = std::stoi(v());
    else if (k == "--distinct")
      a.distinct = std::stoi(v());
    else if (k == "--model")
      a.model_file = v();
    else if (k == "--decode-ab")
      a.decode_ab = true;
    else if (k == "--batches")
      a.batches = parse_ints(v());
    else if (k == "--prompt-tokens")
      a.prompt_tokens = std::stoll(v());
    else if (k == "--prefill-only")
      a.prefill_only = true;
    else if (k == "--forward-loop") {
      a.forward_loop = v();
      KVEVICT_CHECK(a.forward_loop == "plain" || a.forward_loop == "tma" ||
                        a.forward_loop == "tma-wide" || a.forward_loop == "wide-overlap" ||
                        a.forward_loop == "wide-pingpong",
                    "--forward-loop '", a.forward_loop,
                    "': expected plain, tma, tma-wide, wide-overlap or wide-pingpong");
    } else
      KVEVICT_FAIL("unknown option '", k, "'");
  }
  return a;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

// Every number as JSON into `path` (empty: not written).
void write_json(const std::string& path, const nlohmann::json& out) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << out.dump(2) << "\n";
}

double gib(double b) {
  return b / (1024.0 * 1024.0 * 1024.0);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Device-to-device copy bandwidth (bytes read + written per second) over a 1 GiB buffer: the
// bandwidth the decode floor divides by.
double copy_bandwidth() {
  const size_t n = size_t{1} << 30;
  cuda::DeviceBuffer a(n, "bandwidth source"), b(n, "bandwidth target");
  cudaEvent_t e0, e1;
  KVEVICT_CUDA_CHECK(cudaEventCreate(&e0));
  KVEVICT_CUDA_CHECK(cudaEventCreate(&e1));
  KVEVICT_CUDA_CHECK(cudaMemcpy(b.get(), a.get(), n, cudaMemcpyDeviceToDevice));  // warm-up
  const int reps = 10;
  KVEVICT_CUDA_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i)
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice));
  KVEVICT_CUDA_CHECK(cudaEventRecord(e1));
  KVEVICT_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * n * reps / (ms / 1e3);
}

// --decode-ab: decode tokens/s of the eager and the graph-replayed step at each batch, as a device
// loop (decode_greedy) and as answer_batch's host loop; the tokens of both modes compared.
void decode_ab(const Args& a, const std::shared_ptr<const gpu::GpuModel>& model,
               nlohmann::json& out) {
  const ModelConfig& cfg = model->config();
  const int64_t P = a.prompt_tokens, steps = a.decode_steps;
  std::printf("\ndecode A/B at context %lld, %lld steps (eager = KVEVICT_DECODE_GRAPH=0)\n",
              static_cast<long long>(P), static_cast<long long>(steps));
  std::printf("%-6s %-6s %14s %14s %14s %14s %12s\n", "batch", "step", "device ms/step",
              "device tok/s", "host ms/step", "host tok/s", "captures");
  for (int64_t B : a.batches) {
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < std::min<int64_t>(B, std::max(a.distinct, 1)); ++i)
      prompts.push_back(random_prompt(P, cfg.vocab_size, 11 + 977 * i));
    std::vector<int32_t> tokens[2][2];  // [graph][loop] every step's tokens of every row
    double ms[2][2] = {};
    int64_t captures = 0;
    for (int graph = 0; graph < 2; ++graph) {
      auto ctx = std::make_shared<gpu::GpuContext>(model);
      ctx->forward().set_decode_graph(graph == 1);
      gpu::GpuSessionOptions go;
      go.batch = static_cast<int>(B);
      go.max_prompt = P;
      go.decode_room = 2 * steps + 16;
      go.prefill_chunk = a.chunk;
      for (int loop = 0; loop < 2; ++loop) {
        gpu::GpuSession s(ctx, go);
        s.prefill_rows(prompts, EvictConfig::none());
        s.decode_greedy(4);  // warm-up (and the graph's capture)
        s.synchronize();
        const double t0 = now_s();
        if (loop == 0) {
          // decode_greedy returns the last step's tokens (a greedy run that diverged anywhere
          // would differ there too, with high probability); the host loop keeps every step's.
          tokens[graph][0] = s.decode_greedy(static_cast<int>(steps));
        } else {
          for (int64_t i = 0; i < steps; ++i) {
            const std::vector<int32_t> ids = s.argmax();
            tokens[graph][1].insert(tokens[graph][1].end(), ids.begin(), ids.end());
            s.decode(ids);
          }
          s.synchronize();
        }
        ms[graph][loop] = 1e3 * (now_s() - t0) / steps;
      }
      if (graph == 1) captures = ctx->forward().decode_graph_stats().captures;
    }
    for (int graph = 0; graph < 2; ++graph) {
      const char* name = graph ? "graph" : "eager";
      std::printf("%-6lld %-6s %14.3f %14.1f %14.3f %14.1f %12lld\n", static_cast<long long>(B),
                  name, ms[graph][0], 1e3 * B / ms[graph][0], ms[graph][1], 1e3 * B / ms[graph][1],
                  graph ? static_cast<long long>(captures) : 0LL);
      nlohmann::json j;
      j["batch"] = B;
      j["step"] = name;
      j["context"] = P;
      j["steps"] = steps;
      j["device_loop_ms_per_step"] = ms[graph][0];
      j["device_loop_tokens_per_s"] = 1e3 * B / ms[graph][0];
      j["host_loop_ms_per_step"] = ms[graph][1];
      j["host_loop_tokens_per_s"] = 1e3 * B / ms[graph][1];
      if (graph) j["graph_captures"] = captures;
      out["decode_ab"].push_back(j);
    }
    const bool same = tokens[0][0] == tokens[1][0] && tokens[0][1] == tokens[1][1];
    std::printf("%-6lld speedup device %.2fx, host %.2fx; same tokens: %s\n",
                static_cast<long long>(B), ms[0][0] / ms[1][0], ms[0][1] / ms[1][1],
                same ? "yes" : "NO");
    out["decode_ab_same_tokens"].push_back(same);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (!gpu::gpu_available()) {
      std::fprintf(stderr, "gpu_e2e_bench: no CUDA device\n");
      return 2;
    }
    const std::string& loop = a.forward_loop;
    const bool wide = loop == "tma-wide" || loop == "wide-overlap" || loop == "wide-pingpong";
    cuda::set_window_tma(loop == "tma" || wide);
    cuda::set_window_tma_wide(wide);
    cuda::set_window_wide_loop(loop == "wide-overlap" ? 1 : loop == "wide-pingpong" ? 2 : 0);
    ModelConfig cfg = ModelConfig::preset(a.preset);
    std::string simplification;
    if (a.layers > 0 && a.layers < cfg.n_layers) {
      simplification =
          "layers cut from " + std::to_string(cfg.n_layers) + " to " + std::to_string(a.layers);
      cfg.n_layers = a.layers;
      if (!cfg.layer_sliding.empty()) cfg.layer_sliding.resize(a.layers);
    }
    std::shared_ptr<const Model> host_model;
    if (!a.model_file.empty()) {
      host_model = Model::load(a.model_file);
      cfg = host_model->config();
      KVEVICT_CHECK(a.layers == 0, "--layers applies to random weights, not --model");
    }
    const auto info = cuda::device_info();
    int64_t free0 = 0, total = 0;
    gpu::device_memory(&free0, &total);
    std::printf("gpu_e2e_bench: %s, %d SMs, %.1f GiB; model %s (%s)%s%s\n", info.name,
                info.sm_count, gib(total), cfg.describe().c_str(),
                host_model ? a.model_file.c_str() : "random bf16 weights",
                simplification.empty() ? "" : "; ", simplification.c_str());
    const double t_load = now_s();
    auto model = host_model ? gpu::GpuModel::upload(*host_model) : gpu::GpuModel::random(cfg, 1);
    host_model.reset();
    std::printf("weights: %.2f GiB on the device in %.2f s; prefill attention loop: %s\n",
                gib(model->weight_bytes()), now_s() - t_load, a.forward_loop.c_str());
    nlohmann::json out;
    out["forward_loop"] = a.forward_loop;
    out["device"] = info.name;
    out["model"] = cfg.describe();
    out["weights_bytes"] = model->weight_bytes();
    out["simplification"] = simplification;
    out["method"] = a.method;
    out["model_file"] = a.model_file;
    if (a.decode_ab) {
      decode_ab(a, model, out);
      if (!a.json.empty()) {
        std::ofstream f(a.json);
        f << out.dump(2) << "\n";
      }
      return 0;
    }

    {
      // Warm-up: cuBLAS handles and heuristics, kernel loading, first touch of the weights.
      gpu::GpuSessionOptions go;
      go.max_prompt = 4096;
      go.decode_room = 4;
      go.prefill_chunk = a.chunk;
      gpu::GpuSession s(model, go);
      EvictConfig ev;
      ev.prefill = PrefillEviction::from_method(a.method, Budget{a.prefill_budget});
      s.prefill(random_prompt(4096, cfg.vocab_size, 1), ev);
      s.decode_greedy(2);
    }

    // --- 1. prefill with and without eviction, TTFT ----------------------------------------------
    std::printf("\n%-8s %-10s %12s %12s %12s %10s %12s %14s\n", "tokens", "run", "prefill s",
                "evict s", "total s", "overhead", "TTFT s", "KV after");
    for (int64_t L : a.lengths) {
      // The cache keeps 4 rows per head for decoding: a prompt of the full context length is
      // cut by those 4 tokens (131068 for Llama-3.1's 131072), and the JSON says so.
      if (L + 4 > cfg.context_length) L = cfg.context_length - 4;
      const auto prompt = random_prompt(L, cfg.vocab_size, 42 + L);
      double base_prefill = -1;
      auto run = [&](bool evict) {
        gpu::GpuSessionOptions go;
        go.max_prompt = L;
        go.decode_room = 4;
        go.prefill_chunk = a.chunk;
        gpu::GpuSession s(model, go);
        EvictConfig ev;
        if (evict) ev.prefill = PrefillEviction::from_method(a.method, Budget{a.prefill_budget});
        const double t0 = now_s();
        s.prefill(prompt, ev);
        const int32_t first = s.argmax()[0];
        const double ttft = now_s() - t0;
        const auto& st = s.stats();
        const double total_s = st.prefill_seconds + st.evict_seconds;
        if (!evict) base_prefill = st.prefill_seconds;
        const double ref = base_prefill > 0 ? base_prefill : st.prefill_seconds;
        const double overhead = evict ? (total_s - ref) / ref : 0.0;
        const std::string name =
            evict ? a.method + "@" + std::to_string(a.prefill_budget).substr(0, 4)
                  : std::string("full");
        int64_t kv_before = 0, kv_after = 0;
        for (auto b : st.kv_bytes_before) kv_before += b;
        for (auto b : st.kv_bytes_after) kv_after += b;
        std::printf("%-8lld %-10s %12.3f %12.3f %12.3f %9.2f%% %12.3f %11.2f GiB\n",
                    static_cast<long long>(L), name.c_str(), st.prefill_seconds, st.evict_seconds,
                    total_s, 100.0 * overhead, ttft, gib(static_cast<double>(kv_after)));
        std::fflush(stdout);
        nlohmann::json j;
        j["tokens"] = L;
        j["run"] = name;
        j["prefill_s"] = st.prefill_seconds;
        j["evict_s"] = st.evict_seconds;
        j["total_s"] = total_s;
        j["overhead_vs_full_prefill"] = overhead;
        j["overhead_reference"] =
            base_prefill > 0 ? "separate no-eviction prefill" : "same run's prefill part";
        j["ttft_s"] = ttft;
        j["first_token"] = first;
        j["kv_bytes_before"] = kv_before;
        j["kv_bytes_after"] = kv_after;
        out["prefill"].push_back(j);
      };
      if (L <= a.pair_max) run(false);
      run(true);
    }

    if (a.prefill_only) {
      write_json(a.json, out);
      return 0;
    }
    // --- 2. decode throughput at the largest batch of one memory pool ---------------------------
    const int64_t Ld = std::min<int64_t>(a.decode_context, cfg.context_length - a.decode_steps - 8);
    const auto prompt = random_prompt(Ld, cfg.vocab_size, 7);
    std::vector<std::vector<int32_t>> prompts;  // distinct prompts of the batch rows
    for (int i = 0; i < std::max(a.distinct, 1); ++i)
      prompts.push_back(random_prompt(Ld, cfg.vocab_size, 7 + 1000 * i));
    const int64_t room = a.decode_steps + 8;
    int64_t free_now = 0;
    gpu::device_memory(&free_now, &total);
    const double pool = static_cast<double>(free_now) - a.reserve_gib * (1 << 30);
    KVEVICT_CHECK(pool > 0, "no device memory left for KV caches after ", a.reserve_gib,
                  " GiB of reserve");
    // Bytes of one sequence's cache (K and V, bf16, every layer) of `rows` rows per head; a
    // sliding-window layer (gemma3) holds at most its window of rows, whatever the budget.
    auto seq_bytes = [&](int64_t rows) {
      double b = 0;
      for (int l = 0; l < cfg.n_layers; ++l) {
        const int64_t r = cfg.is_sliding(l) ? std::min<int64_t>(rows, cfg.sliding_window) : rows;
        b += static_cast<double>(cfg.n_kv_heads) * r * cfg.head_dim * 2 * 2;
      }
      return b;
    };
    std::printf("\ndecode at context %lld, KV pool %.1f GiB (free after weights minus %.1f GiB)\n",
                static_cast<long long>(Ld), gib(pool), a.reserve_gib);
    std::printf("%-12s %10s %8s %12s %12s %10s\n", "cache", "tok/head", "batch", "step ms",
                "tokens/s", "vs full");
    // Budget b < 1: prefill eviction to b, and with --decode-score decode-time eviction that keeps
    // the same number of rows per head.
    auto evict_for = [&](double b, int64_t n) {
      EvictConfig ev;
      if (b >= 1.0) return ev;
      ev.prefill = PrefillEviction::from_method(a.method, Budget{b});
      if (!a.decode_score.empty()) {
        ev.decode.enabled = true;
        ev.decode.options.score = decode_score_parse(a.decode_score);
        ev.decode.options.budget = Budget{b}.keep_count(n);
        ev.decode.options.slack = a.decode_slack;
      }
      return ev;
    };
    auto cache_name = [&](double b) {
      if (b >= 1.0) return std::string("full");
      std::string n = a.method + "@" + std::to_string(b).substr(0, 4);
      return a.decode_score.empty() ? n : n + "+" + a.decode_score;
    };
    std::vector<double> budgets = {1.0};
    budgets.insert(budgets.end(), a.budgets.begin(), a.budgets.end());
    double full_tps = 0;
    for (double b : budgets) {
      const bool full = b >= 1.0;
      const int64_t kept = full ? Ld : Budget{b}.keep_count(Ld);
      // The batch rows repeat --distinct prompts, each prefilled (its full cache lives until its
      // eviction) and evicted into its own row cache; the batch then concatenates the rows: the
      // pool holds the distinct rows, one full cache and the B rows.
      const int64_t slack = a.decode_score.empty() || full ? 0 : a.decode_slack + 1;
      const double per_seq = seq_bytes(kept + room + slack);
      const double full_seq = seq_bytes(Ld + room);
      const int K = static_cast<int>(prompts.size());
      int64_t B = static_cast<int64_t>((pool - full_seq) / per_seq) - K;
      B = std::min<int64_t>(B, a.max_batch);
      KVEVICT_CHECK(B >= 1, "no room for one sequence of ", gib(per_seq), " GiB");
      gpu::GpuSessionOptions go;
      go.batch = static_cast<int>(B);
      go.max_prompt = Ld;
      go.decode_room = room;
      go.prefill_chunk = a.chunk;
      go.fused_decode_scores = a.fused_scores;
      go.scores_in_attention = a.scores_in_attention;
      go.scores_in_attention_min_segments = a.fuse_min_segments;
      const EvictConfig ev = evict_for(b, Ld);
      const std::vector<std::vector<int32_t>> rows_prompts(
          prompts.begin(), prompts.begin() + std::min<int64_t>(K, B));
      double secs = 0;
      int64_t kv_total = 0, evictions = 0;
      {  // the batch's caches are freed before the cut-cost runs below build theirs
        gpu::GpuSession s(model, go);
        s.prefill_rows(rows_prompts, ev);
        s.decode_greedy(2);  // warm-up (cuBLAS heuristics, first-touch)
        const double before = s.stats().decode_seconds;
        s.decode_greedy(a.decode_steps);
        secs = s.stats().decode_seconds - before;
        kv_total = s.kv_bytes_total();
        evictions = s.stats().decode_evictions;
      }
      const double tps = static_cast<double>(B) * a.decode_steps / secs;
      if (full) full_tps = tps;
      const std::string name = cache_name(b);
      std::printf("%-12s %10lld %8lld %12.3f %12.1f %9.2fx\n", name.c_str(),
                  static_cast<long long>(kept), static_cast<long long>(B),
                  1e3 * secs / a.decode_steps, tps, full_tps > 0 ? tps / full_tps : 0.0);
      std::fflush(stdout);
      nlohmann::json j;
      j["cache"] = name;
      j["context"] = Ld;
      j["kept_per_head"] = kept;
      j["batch"] = B;
      j["steps"] = a.decode_steps;
      j["step_ms"] = 1e3 * secs / a.decode_steps;
      j["tokens_per_s"] = tps;
      j["speedup_vs_full"] = full_tps > 0 ? tps / full_tps : 0.0;
      j["kv_bytes_total"] = kv_total;
      j["batch_capped"] = B == a.max_batch;
      j["decode_evictions"] = evictions;
      j["distinct_prompts"] = std::min<int64_t>(K, B);
      out["decode"].push_back(j);
      if (!a.decode_score.empty() && !full) {
        // 2b. A step that cuts every head (slack 0: every step evicts one row per head) against a
        // step that scores but never cuts (slack beyond the steps), same batch and prompts.
        auto step_ms = [&](int64_t slack) {
          EvictConfig e = ev;
          e.decode.options.slack = slack;
          gpu::GpuSession c(model, go);
          c.prefill_rows(rows_prompts, e);
          c.decode_greedy(2);
          const double t0 = c.stats().decode_seconds;
          c.decode_greedy(a.decode_steps);
          return 1e3 * (c.stats().decode_seconds - t0) / a.decode_steps;
        };
        const double cut = step_ms(0), nocut = step_ms(a.decode_steps + 1000);
        std::printf("%-12s cut every step %.3f ms, no cut %.3f ms: %.2fx (target <= 1.3x)\n",
                    name.c_str(), cut, nocut, cut / nocut);
        std::fflush(stdout);
        out["cut_cost"].push_back({{"cache", name},
                                   {"batch", B},
                                   {"cut_step_ms", cut},
                                   {"no_cut_step_ms", nocut},
                                   {"ratio", cut / nocut}});
      }
    }
    // --- 3. one sequence (B = 1): per-token latency of each cache ------------------------------
    if (a.b1) {
      const double bw = copy_bandwidth();
      out["copy_bandwidth_bytes_per_s"] = bw;
      std::printf(
          "\ndecode B = 1 at context %lld; floor = (weights + KV bytes) / %.2f TB/s "
          "(device copy, read + write)\n%-12s %10s %12s %12s %10s %8s\n",
          static_cast<long long>(Ld), bw / 1e12, "cache", "tok/head", "ms/token", "tokens/s",
          "floor ms", "floor %");
      for (double b : budgets) {
        const bool full = b >= 1.0;
        gpu::GpuSessionOptions go;
        go.max_prompt = Ld;
        go.decode_room = room;
        go.prefill_chunk = a.chunk;
        go.fused_decode_scores = a.fused_scores;
        go.scores_in_attention = a.scores_in_attention;
        go.scores_in_attention_min_segments = a.fuse_min_segments;
        gpu::GpuSession s(model, go);
        const EvictConfig ev = evict_for(b, Ld);
        s.prefill(prompt, ev);
        s.decode_greedy(2);
        const double before = s.stats().decode_seconds;
        s.decode_greedy(a.decode_steps);
        const double secs = s.stats().decode_seconds - before;
        const std::string name = cache_name(b);
        const int64_t kept = full ? Ld : Budget{b}.keep_count(Ld);
        // Bytes a step reads: every weight once and the KV rows in use (capacity is an upper
        // bound; the rows in use are what the attention reads).
        int64_t kv_rows = 0;
        for (int l = 0; l < cfg.n_layers; ++l) kv_rows += s.kv_rows(l);
        const double bytes = static_cast<double>(model->weight_bytes()) +
                             static_cast<double>(kv_rows) * cfg.head_dim * 2 * 2;
        const double floor_ms = 1e3 * bytes / bw, ms_tok = 1e3 * secs / a.decode_steps;
        std::printf("%-12s %10lld %12.3f %12.1f %10.3f %7.1f%%\n", name.c_str(),
                    static_cast<long long>(kept), ms_tok, a.decode_steps / secs, floor_ms,
                    100.0 * floor_ms / ms_tok);
        std::fflush(stdout);
        nlohmann::json j;
        j["cache"] = name;
        j["context"] = Ld;
        j["kept_per_head"] = kept;
        j["ms_per_token"] = 1e3 * secs / a.decode_steps;
        j["tokens_per_s"] = a.decode_steps / secs;
        j["floor_ms"] = floor_ms;
        j["fraction_of_floor"] = floor_ms / ms_tok;
        out["decode_b1"].push_back(j);
      }
    }
    write_json(a.json, out);
    return 0;
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "gpu_e2e_bench: %s\n", e.what());
    return 2;
  }
}
