// The evaluation sweep's inner loop and its cost table (issue 20: "a sweep that costs about one
// prefill a sample"), on a real GGUF checkpoint, on either device:
//   per sample and query mode: one prefill (prefill_snapshot), then every method x budget setting
//   (plus the full cache) evicted from the snapshot and answered as one batch (answer_batch), the
//   same calls `kvevict eval` makes.
// Prints, per variant: prefill s (device time and wall), eviction s per setting and per batch,
// append and decode s per batch, answer_batch's wall, and the projected minutes of a sweep of
// --project-tasks x --project-samples x --project-modes prefills at these settings. Variants:
//   shared    the default (KVEVICT_SHARED_SCORES unset): settings that differ only in selection
//             share each layer's score pass; rows are gathered straight into the batch
//   separate  --compare: KVEVICT_SHARED_SCORES=0, every setting scored and copied on its own
//             (the path before issue 20's change); its answers must equal the shared ones
//   profiled  --profile: KVEVICT_EVICT_PROFILE=1 (GPU), the eviction split into score / select /
//             compact / copy / assemble by CUDA events at every phase boundary (those events cost
//             a little themselves, so its total is above the shared run's)
// The prompt is synthetic text of --tokens tokens (key-value sentences) with a question; answers
// are decoded for exactly --max-new steps (no stop token ends a row early): the decode cost is the
// most a batch of those settings pays. On the CPU the runtime answers one setting at a time (no
// sharing, no breakdown): use a short prompt and few settings there.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/error.h"
#include "kvevict/model/evict_config.h"
#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
#include "kvevict/tokenizer.h"

namespace {

using namespace kvevict;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model = "models/" + std::string(io::kGemma3File);
  std::string device = "cuda";
  int64_t tokens = 8192;
  int samples = 3;
  std::vector<std::string> methods = {
      "dropkv", "adadropkv", "obcache_v", "obcache_k", "obcache_vk", "snapkv", "adakv",       "h2o",
      "tova",   "knorm",     "keydiff",   "vatp",      "criticalkv", "random", "streamingllm"};
  std::vector<double> budgets = {0.05, 0.1, 0.2, 0.3};
  int max_new = 32;
  bool compare = false;
  bool profile = false;
  int project_tasks = 11, project_samples = 100, project_modes = 2;
  std::string json;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int to_int(const std::string& flag, const std::string& v, int lo) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KVEVICT_CHECK(used == v.size() && x >= lo, flag, " ", v,
                " is invalid; expected an integer >= ", lo);
  return x;
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
          "sweep_cost_bench: the eval sweep's inner loop (one prefill, every setting evicted\n"
          "from its snapshot, all answered as one batch) and its cost table.\n\n"
          "  --model FILE          GGUF checkpoint (default models/%s)\n"
          "  --device D            cuda (default) or cpu\n"
          "  --tokens N            prompt tokens, question included (default 8192)\n"
          "  --samples N           samples (prompts); each runs both query modes (default 3)\n"
          "  --methods LIST        methods (default the 15 of issue 20's sweep)\n"
          "  --budgets LIST        budgets (default 0.05,0.1,0.2,0.3)\n"
          "  --max-new N           decode steps per batch (default 32)\n"
          "  --compare             also run every setting on its own (KVEVICT_SHARED_SCORES=0)\n"
          "                        and check both give the same answers\n"
          "  --profile             also run with KVEVICT_EVICT_PROFILE=1: eviction by phase\n"
          "  --project T,S,M       tasks, samples a task, modes of the projection "
          "(default 11,100,2)\n"
          "  --json FILE           write every number as JSON\n",
          io::kGemma3File);
      std::exit(0);
    }
    if (k == "--model") {
      a.model = v();
    } else if (k == "--device") {
      a.device = v();
      KVEVICT_CHECK(a.device == "cpu" || a.device == "cuda", "--device ", a.device,
                    " is invalid; expected cpu or cuda");
    } else if (k == "--tokens") {
      a.tokens = to_int(k, v(), 64);
    } else if (k == "--samples") {
      a.samples = to_int(k, v(), 1);
    } else if (k == "--methods") {
      a.methods = split(v());
    } else if (k == "--budgets") {
      a.budgets.clear();
      for (const std::string& b : split(v())) a.budgets.push_back(Budget::parse(b).value);
    } else if (k == "--max-new") {
      a.max_new = to_int(k, v(), 1);
    } else if (k == "--compare") {
      a.compare = true;
    } else if (k == "--profile") {
      a.profile = true;
    } else if (k == "--project") {
      const auto p = split(v());
      KVEVICT_CHECK(p.size() == 3, "--project needs tasks,samples,modes; got ", p.size(),
                    " values");
      a.project_tasks = to_int(k, p[0], 1);
      a.project_samples = to_int(k, p[1], 1);
      a.project_modes = to_int(k, p[2], 1);
    } else if (k == "--json") {
      a.json = v();
    } else {
      KVEVICT_FAIL("unknown option ", k, "; see --help");
    }
  }
  KVEVICT_CHECK(!a.methods.empty() && !a.budgets.empty(), "--methods and --budgets need values");
  return a;
}

// Synthetic text of `n` tokens exactly: key-value sentences (seeded), then the question.
std::vector<int32_t> prompt_tokens(const Tokenizer& tok, int64_t n, uint64_t seed,
                                   std::vector<int32_t>* question) {
  std::mt19937_64 rng(seed);  // raw draws: the same on every standard library
  *question = tok.encode(" What is the value of key 17? The value of key 17 is", false);
  const int64_t q = static_cast<int64_t>(question->size());
  KVEVICT_CHECK(n > q + 8, "--tokens ", n, " leaves no room for a context beside the ", q,
                "-token question");
  std::vector<int32_t> out = tok.encode("", true);
  while (static_cast<int64_t>(out.size()) < n - q) {
    std::ostringstream s;
    s << " The value of key " << rng() % 1000 << " is " << rng() % 100000 << ".";
    const auto ids = tok.encode(s.str(), false);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  out.resize(static_cast<size_t>(n - q));
  return out;
}

struct Totals {
  std::string variant;
  int batches = 0;
  int64_t settings = 0;  // rows over all batches
  double evict = 0, append = 0, decode = 0, wall = 0;
  int64_t decode_steps = 0;
  EvictCost cost;           // summed over batches
  int answers_differ = -1;  // rows whose tokens differ from the shared run's (-1: not compared)
};

void add(Totals& t, const std::vector<BatchAnswer>& answers, double wall) {
  ++t.batches;
  t.settings += static_cast<int64_t>(answers.size());
  for (const BatchAnswer& a : answers) t.evict += a.evict_seconds;
  const BatchAnswer& a = answers[0];
  // A batch's rows share its append and decode (rows_in_batch > 1); rows decoded one at a time
  // (the CPU runtime) each report their own, summed.
  const size_t own = a.rows_in_batch > 1 ? 1 : answers.size();
  for (size_t r = 0; r < own; ++r) {
    t.append += answers[r].append_seconds;
    t.decode += answers[r].decode_seconds;
    t.decode_steps += answers[r].decode_steps;
  }
  t.wall += wall;
  const EvictCost& c = a.batch_evict;
  t.cost.score_passes += c.score_passes;
  t.cost.selections += c.selections;
  t.cost.score_seconds += c.score_seconds;
  t.cost.select_seconds += c.select_seconds;
  t.cost.compact_seconds += c.compact_seconds;
  t.cost.copy_seconds += c.copy_seconds;
  t.cost.assemble_seconds += c.assemble_seconds;
}

void set_env(const char* name, const char* value) {
  if (value == nullptr)
    unsetenv(name);
  else
    setenv(name, value, 1);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    KVEVICT_CHECK(io::file_exists(a.model), "model file ", a.model, " does not exist");
    auto model = Model::load(a.model);
    auto tok = Tokenizer::from_gguf(*model->file());
    RuntimeOptions ro;
    ro.device = a.device == "cuda" ? Device::kCuda : Device::kCpu;
    ro.batch_invariant_decode = true;  // as kvevict eval runs
    const auto rt = ModelRuntime::create(model, ro);
    std::printf("sweep_cost_bench: %s on %s\n", a.model.c_str(), rt->describe().c_str());

    std::vector<std::string> variants = {"shared"};
    if (a.compare) variants.emplace_back("separate");
    if (a.profile) variants.emplace_back("profiled");
    std::vector<Totals> totals(variants.size());
    for (size_t v = 0; v < variants.size(); ++v) totals[v].variant = variants[v];
    if (a.compare) totals[1].answers_differ = 0;
    double prefill_dev = 0, prefill_wall = 0;
    int prefills = 0;
    nlohmann::json batches = nlohmann::json::array();

    for (int si = 0; si < a.samples; ++si) {
      std::vector<int32_t> question;
      const std::vector<int32_t> context = prompt_tokens(*tok, a.tokens, 1000 + si, &question);
      for (const bool aware : {true, false}) {
        std::vector<int32_t> prompt = context;
        if (aware) prompt.insert(prompt.end(), question.begin(), question.end());
        const int q = aware ? static_cast<int>(question.size()) : 0;
        std::vector<EvictConfig> configs(1);  // the full cache first
        for (const std::string& m : a.methods)
          for (double b : a.budgets)
            configs.push_back({PrefillEviction::make(method_parse(m), Budget{b}, q), {}});
        PrefillOptions popt;
        for (const EvictConfig& c : configs)
          if (c.prefill.enabled)
            popt.keep_queries = std::max<int64_t>(
                popt.keep_queries,
                c.prefill.score.queries_needed(static_cast<int64_t>(prompt.size())));
        const auto p0 = Clock::now();
        const auto snap = rt->prefill_snapshot(prompt, popt);
        prefill_wall += std::chrono::duration<double>(Clock::now() - p0).count();
        prefill_dev += snap->seconds();
        ++prefills;
        const std::vector<int32_t> none;
        std::vector<std::vector<int32_t>> shared_tokens;
        for (size_t v = 0; v < variants.size(); ++v) {
          set_env("KVEVICT_SHARED_SCORES", variants[v] == "separate" ? "0" : nullptr);
          set_env("KVEVICT_EVICT_PROFILE", variants[v] == "profiled" ? "1" : nullptr);
          const auto t0 = Clock::now();
          const auto answers =
              rt->answer_batch(*snap, configs, aware ? none : question, a.max_new, nullptr);
          const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
          add(totals[v], answers, wall);
          for (size_t r = 0; r < answers.size(); ++r) {
            if (v == 0)
              shared_tokens.push_back(answers[r].result.tokens);
            else if (totals[v].answers_differ >= 0 && answers[r].result.tokens != shared_tokens[r])
              ++totals[v].answers_differ;
          }
          batches.push_back({{"sample", si},
                             {"mode", aware ? "aware" : "agnostic"},
                             {"variant", variants[v]},
                             {"rows", answers.size()},
                             {"prefill_s", snap->seconds()},
                             {"evict_s", answers[0].evict_seconds * answers[0].rows_in_batch},
                             {"decode_s", answers[0].decode_seconds},
                             {"wall_s", wall}});
        }
        set_env("KVEVICT_SHARED_SCORES", nullptr);
        set_env("KVEVICT_EVICT_PROFILE", nullptr);
      }
    }

    const double P = prefills;
    const int64_t rows = totals[0].settings / std::max(totals[0].batches, 1);
    std::printf(
        "\n%d prompts x 2 modes at %lld tokens, %lld settings a batch (%zu methods x %zu "
        "budgets + full), %d decode steps\n",
        a.samples, static_cast<long long>(a.tokens), static_cast<long long>(rows), a.methods.size(),
        a.budgets.size(), a.max_new);
    std::printf("prefill: %.4f s device, %.4f s wall a prompt\n\n", prefill_dev / P,
                prefill_wall / P);
    std::printf(
        "| variant | evict ms/setting | evict s/batch | append s/batch | decode s/batch "
        "| answer_batch wall s | score passes/batch | answers differ | projected min |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    const double runs = static_cast<double>(a.project_tasks) * a.project_samples * a.project_modes;
    nlohmann::json out;
    out["model"] = a.model;
    out["device"] = rt->describe();
    out["tokens"] = a.tokens;
    out["samples"] = a.samples;
    out["settings_per_batch"] = rows;
    out["max_new"] = a.max_new;
    out["prefill_device_s"] = prefill_dev / P;
    out["prefill_wall_s"] = prefill_wall / P;
    out["batches"] = batches;
    for (const Totals& t : totals) {
      const double nb = std::max(t.batches, 1);
      // One prefill plus one answer_batch per (sample, mode), on the wall clock.
      const double per_run = prefill_wall / P + t.wall / nb;
      const double minutes = runs * per_run / 60.0;
      // The CPU runtime reports no counts: "-".
      const std::string passes =
          t.cost.selections == 0 ? "-" : std::to_string(std::lround(t.cost.score_passes / nb));
      std::printf("| %s | %.3f | %.4f | %.4f | %.4f | %.4f | %s | %s | %.1f |\n", t.variant.c_str(),
                  1e3 * t.evict / std::max<int64_t>(t.settings, 1), t.evict / nb, t.append / nb,
                  t.decode / nb, t.wall / nb, passes.c_str(),
                  t.answers_differ < 0 ? "-" : std::to_string(t.answers_differ).c_str(), minutes);
      out["variants"][t.variant] = {
          {"evict_s_per_setting", t.evict / std::max<int64_t>(t.settings, 1)},
          {"evict_s_per_batch", t.evict / nb},
          {"append_s_per_batch", t.append / nb},
          {"decode_s_per_batch", t.decode / nb},
          {"decode_steps_per_batch", t.decode_steps / nb},
          {"wall_s_per_batch", t.wall / nb},
          {"score_passes_per_batch", t.cost.score_passes / nb},
          {"selections_per_batch", t.cost.selections / nb},
          {"answers_differ", t.answers_differ},
          {"projected_minutes", minutes}};
    }
    std::printf(
        "\nprojected min: %d tasks x %d samples x %d modes x (prefill wall + answer_batch "
        "wall), this machine; target <= 10 on the H200\n",
        a.project_tasks, a.project_samples, a.project_modes);
    for (const Totals& t : totals) {
      if (t.variant != "profiled") continue;
      const double nb = std::max(t.batches, 1);
      const double s = static_cast<double>(std::max<int64_t>(t.settings, 1));
      const EvictCost& c = t.cost;
      std::printf(
          "\neviction by phase (profiled; device ms per batch / per setting):\n"
          "| score | select | compact | copy | assemble | sum | score passes | "
          "selections |\n|---|---|---|---|---|---|---|---|\n");
      const double sum = c.score_seconds + c.select_seconds + c.compact_seconds + c.copy_seconds +
                         c.assemble_seconds;
      std::printf(
          "| %.2f / %.3f | %.2f / %.3f | %.2f / %.3f | %.2f / %.3f | %.2f / %.3f | "
          "%.2f / %.3f | %.0f | %.0f |\n",
          1e3 * c.score_seconds / nb, 1e3 * c.score_seconds / s, 1e3 * c.select_seconds / nb,
          1e3 * c.select_seconds / s, 1e3 * c.compact_seconds / nb, 1e3 * c.compact_seconds / s,
          1e3 * c.copy_seconds / nb, 1e3 * c.copy_seconds / s, 1e3 * c.assemble_seconds / nb,
          1e3 * c.assemble_seconds / s, 1e3 * sum / nb, 1e3 * sum / s, c.score_passes / nb,
          c.selections / nb);
      out["profile_ms_per_batch"] = {{"score", 1e3 * c.score_seconds / nb},
                                     {"select", 1e3 * c.select_seconds / nb},
                                     {"compact", 1e3 * c.compact_seconds / nb},
                                     {"copy", 1e3 * c.copy_seconds / nb},
                                     {"assemble", 1e3 * c.assemble_seconds / nb}};
    }
    if (!a.json.empty()) {
      std::ofstream f(a.json);
      KVEVICT_CHECK(f.good(), "cannot write ", a.json);
      f << out.dump(2) << "\n";
    }
    for (const Totals& t : totals)
      if (t.answers_differ > 0) {
        std::fprintf(stderr, "error: %d rows answer differently with shared scores\n",
                     t.answers_differ);
        return 1;
      }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
