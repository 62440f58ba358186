// ModelRuntime's device dispatch and what every runtime shares (runtime.h).
#include "kvevict/model/runtime.h"

#include <unistd.h>

#include <chrono>

#include "kvevict/error.h"
#include "model/cpu_runtime.h"
#include "model/gpu_runtime_entry.h"

namespace kvevict {

namespace detail {
// Physical memory of this machine in bytes (0 when unknown).
double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 0.0;
}
}  // namespace detail

void RuntimeOptions::validate() const {
  KVEVICT_CHECK(kv_dtype == DType::kF32 || kv_dtype == DType::kF16 || kv_dtype == DType::kBF16,
                "KV cache dtype ", dtype_name(kv_dtype),
                " is not supported; expected f32, f16 "
                "or bf16");
  KVEVICT_CHECK(prefill_chunk >= 0, "prefill chunk ", prefill_chunk,
                " is invalid; expected >= 1 (or 0 for the device's default)");
}

namespace {
const detail::GpuRuntimeEntry& gpu_entry() {
  std::string why;
  const detail::GpuRuntimeEntry* e = detail::gpu_runtime_entry(&why);
  KVEVICT_CHECK(e != nullptr, "--device cuda: ", why, "; expected --device cpu");
  return *e;
}
}  // namespace

std::shared_ptr<const ModelRuntime> ModelRuntime::create(std::shared_ptr<const Model> model,
                                                         const RuntimeOptions& opt) {
  KVEVICT_CHECK(model != nullptr, "ModelRuntime::create needs a model; got null");
  opt.validate();
  if (opt.device == Device::kCuda) return gpu_entry().create(std::move(model), opt);
  return detail::make_cpu_runtime(std::move(model), opt);
}

std::shared_ptr<const ModelRuntime> ModelRuntime::random(const ModelConfig& config, uint64_t seed,
                                                         const RuntimeOptions& opt) {
  opt.validate();
  if (opt.device == Device::kCuda) return gpu_entry().random(config, seed, opt);
  // Random weights are f32 on the host: refuse a shape that cannot fit before allocating it.
  const double D = config.n_embd, F = config.ffn_dim, d = config.head_dim;
  const double per_layer =
      D * (config.n_heads + 2.0 * config.n_kv_heads) * d + config.n_heads * d * D + 3.0 * D * F;
  const double params =
      static_cast<double>(config.vocab_size) * D * (config.tied_embeddings ? 1.0 : 2.0) +
      config.n_layers * per_layer;
  const double bytes = 4.0 * params, host = detail::host_memory_bytes();
  KVEVICT_CHECK(host <= 0 || bytes < 0.8 * host, "random f32 weights of ", config.name, " need ",
                bytes / 1e9, " GB of host memory; this machine has ", host / 1e9,
                " GB (use --device cuda, which generates them on the GPU)");
  return detail::make_cpu_runtime(Model::random(config, seed), opt);
}

bool runtime_available(Device device, std::string* why) {
  if (device == Device::kCpu) return true;
  return detail::gpu_runtime_entry(why) != nullptr;
}

std::vector<BatchAnswer> ModelRuntime::answer_batch(
    const Snapshot& snapshot, const std::vector<EvictConfig>& configs,
    const std::vector<int32_t>& append, int max_new,
    const std::function<bool(int32_t)>& is_stop) const {
  std::vector<BatchAnswer> out;
  out.reserve(configs.size());
  for (const EvictConfig& cfg : configs) {
    BatchAnswer a;
    const auto t0 = std::chrono::steady_clock::now();
    auto s = from_snapshot(snapshot, cfg, static_cast<int64_t>(append.size()) + max_new + 1);
    a.evict_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!append.empty()) s->append(append);
    // What the row keeps after eviction (and the question), before its answer is decoded.
    a.kept_rows_per_head = kept_rows_per_head(*s, config());
    a.kv_bytes = s->kv_bytes_total();
    Sampler greedy;
    a.result = s->generate(max_new, greedy, is_stop);
    // A batch of one: this row's own append and decode steps.
    a.append_seconds = s->stats().append_seconds;
    a.decode_seconds = s->stats().decode_seconds;
    a.decode_steps = s->stats().decode_tokens;
    out.push_back(std::move(a));
  }
  return out;
}

namespace {

void check_token_nll_inputs(const std::vector<std::vector<int32_t>>& texts,
                            const EvictConfig& evict) {
  KVEVICT_CHECK(!evict.prefill.enabled,
                "token_nlls evicts while decoding only; expected no prefill eviction");
  for (const auto& tokens : texts)
    KVEVICT_CHECK(tokens.size() >= 2, "perplexity needs at least 2 tokens a text; got ",
                  tokens.size());
}

// One session a text: its first token prefilled, then every token predicted and fed.
std::vector<std::vector<double>> nlls_one_by_one(const ModelRuntime& rt,
                                                 const std::vector<std::vector<int32_t>>& texts,
                                                 const EvictConfig& evict) {
  std::vector<std::vector<double>> out;
  out.reserve(texts.size());
  for (const auto& tokens : texts) {
    auto session = rt.session(static_cast<int64_t>(tokens.size()));
    session->prefill({tokens[0]}, evict);
    std::vector<double>& nlls = out.emplace_back();
    nlls.reserve(tokens.size() - 1);
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      nlls.push_back(session->nll(tokens[i + 1]));
      if (i + 2 < tokens.size()) session->decode(tokens[i + 1]);
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<double>> ModelRuntime::token_nlls(
    const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) const {
  check_token_nll_inputs(texts, evict);
  return checked_token_nlls(texts, evict);
}

std::vector<std::vector<double>> ModelRuntime::token_nlls_one_at_a_time(
    const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) const {
  check_token_nll_inputs(texts, evict);
  return nlls_one_by_one(*this, texts, evict);
}

std::vector<std::vector<double>> ModelRuntime::checked_token_nlls(
    const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) const {
  return nlls_one_by_one(*this, texts, evict);
}

int64_t kept_rows_per_head(const ModelConfig& config,
                           const std::function<int64_t(int layer)>& rows_of_layer) {
  int64_t rows = 0, layers = 0;
  for (int l = 0; l < config.n_layers; ++l) {
    if (config.is_sliding(l)) continue;
    rows += rows_of_layer(l);
    ++layers;
  }
  return layers == 0 ? 0 : rows / (layers * config.n_kv_heads);
}

int64_t kept_rows_per_head(const InferenceSession& session, const ModelConfig& config) {
  return kept_rows_per_head(config, [&session](int l) { return session.kv_rows(l); });
}

}  // namespace kvevict
