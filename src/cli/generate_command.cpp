// kvevict generate: runs a GGUF model on a prompt with an evicted, compacted KV cache and prints
// the continuation and a stats block (prompt tokens, kept tokens per layer, KV bytes before and
// after, prefill and decode tokens/s).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <limits>
#include <optional>
#include <random>

#include "cli/commands.h"
#include "cli/json_out.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/progress.h"
#include "cli/prompt_args.h"
#include "eval/session_model.h"
#include "kvevict/error.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  PromptArgs prompt;
  std::string question;
  bool chat = false;
  int max_new = 64;
  std::string method = "full";
  std::string budget = "0.1";
  std::string policy;
  std::optional<int> window;
  std::string pool;
  bool query_aware = false;
  int64_t decode_budget = 0;
  int decode_slack = 0;
  int decode_recent = 32;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool json = false;
  bool quiet = false;
  const CLI::Option *budget_opt = nullptr, *window_opt = nullptr, *pool_opt = nullptr,
                    *policy_opt = nullptr;  // to tell a given option from its default
  std::string dummy;            // a ModelConfig preset: random weights, random prompt ids
  int64_t prompt_tokens = 512;  // prompt length with --dummy
};

// The sampler the flags ask for (greedy by default).
SamplerOptions sampler_options(const GenerateArgs& a) {
  SamplerOptions so;
  so.temperature = a.temperature;
  so.top_k = a.top_k;
  so.top_p = a.top_p;
  so.seed = a.seed;
  return so;
}

// Streams one generated token to stdout: its text, or its id when there is no tokenizer (--dummy).
void print_token(const Tokenizer* tok, int32_t id) {
  if (tok != nullptr) {
    std::fputs(tok->token_text(id).c_str(), stdout);
  } else {
    std::printf("%d ", id);
  }
  std::fflush(stdout);
}

// The prefill eviction the flags ask for; a token budget is checked against the n tokens it is
// taken from (`of` names them).
eval::MethodConfig method_config(const GenerateArgs& a, int64_t n, const std::string& of) {
  if (a.method == "full") {
    // Options that would be ignored are errors; --budget 1 (keep everything) agrees with full.
    const bool keeps_all = a.budget_opt == nullptr || a.budget_opt->count() == 0 ||
                           parse_budget(a.budget, "--budget", n, of).value == 1.0;
    KVEVICT_CHECK(keeps_all, "--budget ", a.budget,
                  " has no effect with --method full (no eviction); expected a --method");
    for (const CLI::Option* o : {a.window_opt, a.pool_opt, a.policy_opt})
      KVEVICT_CHECK(o == nullptr || o->count() == 0, o->get_name(),
                    " has no effect with --method full (no eviction); expected a --method");
    return eval::MethodConfig::make("full", Budget{});
  }
  eval::MethodConfig m = eval::MethodConfig::make(
      a.method, parse_budget(a.budget, "--budget", n, of), a.window.value_or(0), a.pool);
  if (!a.policy.empty()) m.spec.policy = policy_parse(a.policy);
  return m;
}

// Decode-time eviction (--decode-budget), scored like the prefill method.
DecodeEviction decode_config(const GenerateArgs& a, const eval::MethodConfig& method) {
  if (a.decode_budget == 0) return {};
  KVEVICT_CHECK(!method.is_full(), "--decode-budget needs a --method to score with");
  KVEVICT_CHECK(a.decode_budget > 1, "--decode-budget ", a.decode_budget, " must be > 1 tokens");
  DecodeEvictionOptions d;
  d.slack = a.decode_slack;
  d.recent = a.decode_recent;
  return DecodeEviction::make(method.spec, a.decode_budget, d);
}

// The eviction the flags ask for (the library's one mapping, PrefillEviction::make) on a prompt
// whose prefill holds `prefilled` tokens (`of` names them, for a token budget's message):
// query-aware mode makes the question the observation window of an unpinned windowed score;
// --decode-budget adds decode-time eviction.
EvictConfig evict_config(const GenerateArgs& a, eval::QueryMode mode, int64_t question_tokens,
                         int64_t prefilled, const std::string& of) {
  const eval::MethodConfig method = method_config(a, prefilled, of);
  const bool aware = mode == eval::QueryMode::kAware;
  EvictConfig cfg = method.evict_config(aware ? static_cast<int>(question_tokens) : 0);
  cfg.decode = decode_config(a, method);
  return cfg;
}

void print_warning(const std::string& warning) {
  if (!warning.empty()) std::fprintf(stderr, "kvevict: warning: %s\n", warning.c_str());
}

// One generation on either device: prefill (+ eviction), the question after eviction in
// query-agnostic mode, sampling, then one stats block / JSON object. `tok` is null with --dummy
// (token ids are printed).
int run_session(const GenerateArgs& a, const ModelRuntime& rt, const std::string& model_name,
                const Tokenizer* tok, const std::vector<int32_t>& context,
                const std::vector<int32_t>& question, eval::QueryMode mode, const EvictConfig& cfg,
                ProgressBar* bar) {
  const bool aware = mode == eval::QueryMode::kAware;
  std::vector<int32_t> prompt = context;
  if (aware) prompt.insert(prompt.end(), question.begin(), question.end());
  const int64_t max_tokens = static_cast<int64_t>(context.size() + question.size()) + a.max_new + 1;
  auto session = rt.session(max_tokens);
  session->prefill(prompt, cfg);
  if (bar) bar->finish();
  if (!aware && !question.empty()) session->append(question);

  Sampler sampler(sampler_options(a));
  const bool stream = !a.json;
  if (stream && !a.quiet) std::fprintf(stderr, "---\n");
  auto is_stop = [&](int32_t id) { return tok != nullptr && tok->is_end_of_generation(id); };
  GenerateResult out = session->generate(a.max_new, sampler, is_stop, [&](int32_t id) {
    if (stream && !is_stop(id)) print_token(tok, id);
  });
  std::vector<int32_t> text_ids = out.tokens;
  if (out.stopped && !text_ids.empty()) text_ids.pop_back();

  const SessionStats& st = session->stats();
  int64_t before = 0, after = 0;
  for (auto b : st.kv_bytes_before) before += b;
  for (auto b : st.kv_bytes_after) after += b;
  const ModelConfig& mc = rt.config();
  std::vector<int64_t> kept;
  kept.reserve(mc.n_layers);
  for (int l = 0; l < mc.n_layers; ++l) kept.push_back(session->kv_rows(l) / mc.n_kv_heads);
  nlohmann::json j;
  j["model"] = model_name;
  j["device"] = rt.device() == Device::kCuda ? "cuda" : "cpu";
  j["runtime"] = rt.describe();
  j["prompt_tokens"] = static_cast<int64_t>(context.size() + question.size());
  j["question_tokens"] = static_cast<int64_t>(question.size());
  j["mode"] = eval::query_mode_name(mode);
  j["eviction"] = cfg.describe();
  if (tok != nullptr) j["text"] = tok->decode(text_ids);
  j["tokens"] = text_ids;
  j["generated_tokens"] = static_cast<int64_t>(out.tokens.size());
  j["kept_tokens_per_head_per_layer"] = kept;
  j["kv_bytes_before"] = before;
  j["kv_bytes_after"] = after;
  j["kv_bytes_now"] = session->kv_bytes_total();
  j["prefill_seconds"] = st.prefill_seconds;
  j["evict_seconds"] = st.evict_seconds;
  j["prefill_tokens_per_s"] = st.prefill_tokens_per_s();
  j["decode_tokens_per_s"] = st.decode_tokens_per_s();
  j["decode_evictions"] = st.decode_evictions;
  if (!st.warning.empty()) j["warning"] = st.warning;
  if (a.json) {
    print_json(j);
    print_warning(st.warning);
    return 0;
  }
  std::printf("\n");
  std::fflush(stdout);  // the text ends before the stats block on stderr
  // A warning is never quiet noise: a budget below the protected tokens changes what runs.
  if (a.quiet) {
    print_warning(st.warning);
    return 0;
  }
  std::fprintf(stderr, "---\nmodel          %s\nruntime        %s\n", model_name.c_str(),
               rt.describe().c_str());
  std::fprintf(stderr, "prompt         %lld tokens (%s%s)\n",
               static_cast<long long>(j["prompt_tokens"]), eval::query_mode_name(mode),
               question.empty() ? ", no question" : "");
  std::fprintf(stderr, "eviction       %s\n", cfg.describe().c_str());
  std::string kept_s;
  for (size_t l = 0; l < kept.size(); ++l) kept_s += (l ? " " : "") + std::to_string(kept[l]);
  std::fprintf(stderr, "kept/head      %s (per layer)\n", kept_s.c_str());
  std::fprintf(stderr, "KV bytes       %s -> %s after prefill eviction (%.1f%% saved); now %s\n",
               human_bytes(static_cast<double>(before)).c_str(),
               human_bytes(static_cast<double>(after)).c_str(),
               before > 0 ? 100.0 * (1.0 - static_cast<double>(after) / before) : 0.0,
               human_bytes(static_cast<double>(session->kv_bytes_total())).c_str());
  std::fprintf(stderr,
               "prefill        %.1f tokens/s (%.3f s, eviction %.3f s)\ndecode         %.1f "
               "tokens/s (%lld tokens)\n",
               st.prefill_tokens_per_s(), st.prefill_seconds, st.evict_seconds,
               st.decode_tokens_per_s(), static_cast<long long>(out.tokens.size()));
  if (!st.warning.empty()) std::fprintf(stderr, "warning        %s\n", st.warning.c_str());
  return 0;
}

// --dummy PRESET: random weights of a real model's shape and a random prompt of
// --prompt-tokens ids (no tokenizer); prints token ids. For speed runs.
int run_generate_dummy(const GenerateArgs& a) {
  KVEVICT_CHECK(!a.prompt.given() && a.question.empty(),
                "--dummy takes no -p/-f/--question: the prompt is --prompt-tokens random ids");
  sampler_options(a).validate();
  const ModelConfig mc = ModelConfig::preset(a.dummy);
  KVEVICT_CHECK(a.prompt_tokens + a.max_new <= mc.context_length, "--prompt-tokens ",
                a.prompt_tokens, " + -n ", a.max_new, " exceeds the context length ",
                mc.context_length, " of ", a.dummy);
  a.model.check_device();
  // Flags checked before the weights are made.
  const EvictConfig cfg =
      evict_config(a, eval::QueryMode::kAgnostic, 0, a.prompt_tokens,
                   "the " + std::to_string(a.prompt_tokens) + " tokens of --prompt-tokens");
  std::vector<int32_t> prompt(a.prompt_tokens);
  std::mt19937_64 rng(a.seed);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(mc.vocab_size));
  // The random weights are made where they run (on the GPU an 8B shape needs no host copy).
  const auto rt = ModelRuntime::random(mc, a.seed, a.model.runtime_options());
  return run_session(a, *rt, "random:" + a.dummy, nullptr, prompt, {}, eval::QueryMode::kAgnostic,
                     cfg, nullptr);
}

// Every check that needs no model, before it is read (issue 13: the sampler, the budget and the
// decode options were checked only after the load and the prefill).
void check_generate_args(const GenerateArgs& a) {
  sampler_options(a).validate();
  KVEVICT_CHECK(!a.query_aware || !a.question.empty(),
                "--query-aware needs --question (the question is the observation window)");
  decode_config(a, method_config(a, kMaxTokens, kMaxTokensText));
  check_utf8(a.question, "--question");
}

int run_generate(const GenerateArgs& a) {
  if (!a.dummy.empty()) return run_generate_dummy(a);
  check_generate_args(a);
  ModelInfo info = a.model.inspect();
  const Tokenizer& tokr = *info.tokenizer;
  const int64_t ctx_len = info.config.context_length;
  const std::string user_text = a.prompt.read(eval::max_text_bytes(tokr, ctx_len));
  // With --chat the context and question form one user turn; the split point is found in the
  // formatted text so query-agnostic mode can append the question after eviction.
  std::string context_text = user_text, question_text;
  if (!a.question.empty()) question_text = "\n" + a.question;
  if (a.chat) {
    const std::string marker = "\x01KVEVICT_SPLIT\x01";
    std::string templ = tokr.apply_chat_template({{"user", user_text + marker + question_text}});
    const auto at = templ.find(marker);
    KVEVICT_CHECK(at != std::string::npos, "the chat template dropped the user text");
    context_text = templ.substr(0, at);
    question_text = templ.substr(at + marker.size());
  }
  const std::vector<int32_t> context = tokr.encode(context_text, true);
  const std::vector<int32_t> question =
      question_text.empty() ? std::vector<int32_t>{} : tokr.encode(question_text, false);
  // Sizes against the model before its weights are read: the prompt and the answer must fit the
  // context, and a token budget the prompt it evicts.
  const auto prompt_n = static_cast<int64_t>(context.size() + question.size());
  KVEVICT_CHECK(prompt_n + a.max_new <= ctx_len, "the prompt's ", prompt_n, " tokens + -n ",
                a.max_new, " exceed ", info.context_text(), "; expected a shorter prompt or -n");
  const int64_t prefilled = a.query_aware ? prompt_n : static_cast<int64_t>(context.size());
  method_config(a, ctx_len, info.context_text());
  check_decode_rows(a.decode_budget, a.decode_slack, "--decode-budget", "--decode-slack", info);
  const auto mode = a.query_aware ? eval::QueryMode::kAware : eval::QueryMode::kAgnostic;
  const EvictConfig cfg =
      evict_config(a, mode, static_cast<int64_t>(question.size()), prefilled,
                   "the " + std::to_string(prefilled) +
                       (a.query_aware || question.empty()
                            ? "-token prompt"
                            : "-token context (the question comes after eviction)"));

  const auto model = a.model.load();
  ProgressBar bar("prefill", prefilled, !a.json && !a.quiet);
  const auto rt = a.model.runtime(model, [&bar](int64_t done, int64_t) { bar.update(done); });
  return run_session(a, *rt, model->path(), info.tokenizer.get(), context, question, mode, cfg,
                     &bar);
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate text with an evicted, compacted KV cache");
  a->model.add_to(*cmd);
  a->prompt.add_to(*cmd, "the prompt (the context)");
  cmd->add_option("--question", a->question, "A question appended after the context");
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template");
  add_integer(*cmd, "-n,--max-new", a->max_new, 0, 1 << 24,
              "Tokens to generate (prompt + n must fit the model's context)")
      ->capture_default_str();
  cmd->add_option("--method", a->method,
                  "Eviction method, or full for none; METHOD[:MOD]... as eval spells settings "
                  "(dropkv:spec: SPEC section 2's defaults; see eval --help)")
      ->capture_default_str();
  a->budget_opt =
      cmd->add_option("--budget", a->budget,
                      "Prefill budget: kept fraction (<= 1) or tokens per head (> 1, at "
                      "most the prompt's tokens)")
          ->capture_default_str();
  a->policy_opt =
      cmd->add_option("--policy", a->policy, "uniform or adakv (default: the method's)");
  a->window_opt = add_window(*cmd, a->window, "Observation window");
  a->pool_opt =
      cmd->add_option("--pool", a->pool, "Pooling: none, max:K, avg:K (default: the method's)");
  cmd->add_flag(
      "--query-aware", a->query_aware,
      "Prefill context + question together; the question is the window of windowed scores "
      "unless it is pinned (dropkv, adadropkv, obcache_vk pin 32; METHOD:w=q uses the question) "
      "(needs --question)");
  add_integer(*cmd, "--decode-budget", a->decode_budget, int64_t{0}, kMaxTokens,
              "Decode-time eviction: keep this many tokens per head while generating (0 = off)");
  add_integer(*cmd, "--decode-slack", a->decode_slack, 0, 1 << 24,
              "Evict when a head exceeds budget + slack")
      ->capture_default_str();
  add_integer(*cmd, "--decode-recent", a->decode_recent, 0, 1 << 24,
              "Last tokens never evicted while decoding")
      ->capture_default_str();
  add_number(*cmd, "--temperature", a->temperature, "Sampling temperature >= 0 (0 = greedy)")
      ->capture_default_str();
  add_integer(*cmd, "--top-k", a->top_k, 0, std::numeric_limits<int>::max(), "0 = off")
      ->capture_default_str();
  add_number(*cmd, "--top-p", a->top_p, "0 < p <= 1 (1 = off)")->capture_default_str();
  add_seed(*cmd, a->seed, "Sampling seed");
  cmd->add_flag("--json", a->json, "Print one JSON object (text + stats) instead of streaming");
  cmd->add_flag("-q,--quiet", a->quiet, "Print only the generated text (and warnings)");
  // --dummy replaces the model and the prompt: -m would be ignored, and --prompt-tokens is
  // read only with it (CLI11 says "excludes" / "requires").
  auto* dummy =
      cmd->add_option("--dummy", a->dummy,
                      "Random weights of a real model's shape (llama-3.1-8b, qwen2.5-7b, "
                      "smollm2-135m, gemma3-270m) and a random prompt (large shapes need the GPU)")
          ->excludes(cmd->get_option("--model"));
  add_integer(*cmd, "--prompt-tokens", a->prompt_tokens, int64_t{1}, kMaxTokens,
              "Prompt length with --dummy")
      ->capture_default_str()
      ->needs(dummy);
  return [a] { return run_generate(*a); };
}

}  // namespace kvevict::cli
