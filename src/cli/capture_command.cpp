// kvevict capture: one layer's real attention inputs, for `kvevict score` and `kvevict analyze`.
// Prefills a prompt (Austen prose of --length tokens, or -p/-f) on the CPU runtime and writes,
// into --dir:
//   q.npy  [Hq, m, d]   f32, the last m = --queries queries of the layer, after RoPE
//   k.npy  [Hkv, n, d]  the layer's keys after RoPE (in --kv-dtype; f32 by default)
//   v.npy  [Hkv, n, d]  its values
//   wo.npy [D, Hq*d]    f32, the layer's output projection (criticalkv's --wo)
// exactly the shapes score/analyze read, so `kvevict score --q DIR/q.npy --k DIR/k.npy
// --v DIR/v.npy` scores real attention. The four files are written all or none.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/json_out.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/output_args.h"
#include "cli/progress.h"
#include "cli/prompt_args.h"
#include "kvevict/error.h"
#include "kvevict/io/atomic_file.h"
#include "kvevict/io/npy.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct CaptureArgs {
  ModelArgs model;
  PromptArgs prompt;
  int layer = 0;
  int64_t queries = 32;
  std::string dir;
  bool json = false;
};

std::string global_layers(const ModelConfig& mc) {
  std::string out;
  for (int l = 0; l < mc.n_layers; ++l)
    if (!mc.is_sliding(l)) out += (out.empty() ? "" : ", ") + std::to_string(l);
  return out;
}

int run_capture(const CaptureArgs& a) {
  check_output_dir(a.dir, "--dir");
  const std::string dir = a.dir;
  const auto path = [&dir](const char* name) {
    return (std::filesystem::path(dir) / name).string();
  };
  const std::string q_path = path("q.npy"), k_path = path("k.npy"), v_path = path("v.npy"),
                    wo_path = path("wo.npy");
  ModelInfo info = a.model.inspect();
  const ModelConfig& mc = info.config;
  KVEVICT_CHECK(a.layer < mc.n_layers, "--layer ", a.layer, " is out of range; ", mc.name,
                " has layers 0..", mc.n_layers - 1);
  KVEVICT_CHECK(!mc.is_sliding(a.layer), "--layer ", a.layer, " of ", mc.name,
                " is a sliding-window layer (its cache holds only the last ", mc.sliding_window,
                " tokens and is never evicted); expected a global layer: ", global_layers(mc));
  const std::vector<int32_t> tokens = prompt_or_prose_tokens(info, a.prompt);
  const auto n = static_cast<int64_t>(tokens.size());
  KVEVICT_CHECK(a.queries <= n, "--queries ", a.queries, " exceeds the prompt's ", n,
                " tokens; expected at most ", n, " (0 = all of them)");
  const std::string model_file = a.model.file();
  if (std::filesystem::is_directory(dir))
    check_output_args({{q_path, "--dir"}, {k_path, "--dir"}, {v_path, "--dir"}, {wo_path, "--dir"}},
                      {{model_file, "-m"}, {a.prompt.file, "-f"}});

  const auto model = a.model.load();
  ProgressBar bar("prefill", n, !a.json);
  const auto rt = a.model.runtime(model, [&bar](int64_t done, int64_t) { bar.update(done); });
  PrefillOptions popt;
  popt.keep_queries = a.queries == 0 ? -1 : a.queries;
  // The prefill runs on --device; the files are written from host memory.
  const PrefillSnapshot snap = rt->prefill_snapshot(tokens, popt)->to_host();
  bar.finish();

  const KVLayerView cache = snap.caches[a.layer].view();
  const TensorView q = snap.queries[a.layer].view(), k = cache.uniform_k(), v = cache.uniform_v();
  const TensorView wo = model->weights().layers[a.layer].wo.view();
  std::error_code ec;
  const bool created = std::filesystem::create_directories(dir, ec);
  KVEVICT_CHECK(!ec, "--dir: cannot create ", dir, " (", ec.message(), ")");
  try {
    io::StagedFiles files;
    npy::stage(files, q_path, "--dir " + q_path, q);
    npy::stage(files, k_path, "--dir " + k_path, k);
    npy::stage(files, v_path, "--dir " + v_path, v);
    npy::stage(files, wo_path, "--dir " + wo_path, wo);
    files.commit();
  } catch (...) {
    if (created) std::filesystem::remove(dir, ec);  // leave nothing behind, not even the directory
    throw;
  }

  nlohmann::json j;
  j["model"] = model->path();
  j["layer"] = a.layer;
  j["prompt_tokens"] = n;
  j["files"] = {
      {"q", {{"path", q_path}, {"shape", q.shape_str()}, {"dtype", dtype_name(q.dtype)}}},
      {"k", {{"path", k_path}, {"shape", k.shape_str()}, {"dtype", dtype_name(k.dtype)}}},
      {"v", {{"path", v_path}, {"shape", v.shape_str()}, {"dtype", dtype_name(v.dtype)}}},
      {"wo", {{"path", wo_path}, {"shape", wo.shape_str()}, {"dtype", dtype_name(wo.dtype)}}}};
  if (a.json) {
    print_json(j);
    return 0;
  }
  std::printf("%s layer %d, %lld-token prompt:\n", model->path().c_str(), a.layer,
              static_cast<long long>(n));
  for (const char* key : {"q", "k", "v", "wo"})
    std::printf("  %-3s %s %s %s\n", key, j["files"][key]["path"].get<std::string>().c_str(),
                j["files"][key]["shape"].get<std::string>().c_str(),
                j["files"][key]["dtype"].get<std::string>().c_str());
  std::printf("next: kvevict score --q %s --k %s --v %s --budget 0.1\n", q_path.c_str(),
              k_path.c_str(), v_path.c_str());
  return 0;
}

}  // namespace

Runner add_capture_command(CLI::App& app) {
  auto a = std::make_shared<CaptureArgs>();
  auto* cmd = app.add_subcommand(
      "capture",
      "Write one layer's q, k, v and W_o from a model's prefill (.npy, for score/analyze)");
  a->model.add_to(*cmd);
  a->prompt.add_to(*cmd, "the prompt", /*with_prose=*/true);
  add_integer(*cmd, "--layer", a->layer, 0, 1 << 24, "Layer to capture (a global layer)")
      ->required();
  add_integer(*cmd, "--queries", a->queries, int64_t{0}, kMaxTokens,
              "Last prompt queries to keep (0 = all: what h2o aggregation needs)")
      ->capture_default_str();
  cmd->add_option("--dir", a->dir, "Directory for q.npy, k.npy, v.npy, wo.npy (created)")
      ->required();
  cmd->add_flag("--json", a->json, "Print the files written as JSON");
  return [a] { return run_capture(*a); };
}

}  // namespace kvevict::cli
