#include "kvevict/eval/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "kvevict/error.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval {

const char* query_mode_name(QueryMode m) {
  return m == QueryMode::kAgnostic ? "query-agnostic" : "query-aware";
}

QueryMode query_mode_parse(const std::string& s) {
  if (s == "query-aware" || s == "aware") return QueryMode::kAware;
  if (s == "query-agnostic" || s == "agnostic") return QueryMode::kAgnostic;
  KVEVICT_FAIL("query mode '", s, "' is unknown; expected aware (or query-aware) or agnostic (or ",
               "query-agnostic)");
}

MethodConfig MethodConfig::make(const std::string& name, const Budget& budget, int window,
                                const std::string& pooling) {
  MethodConfig m;
  m.name = name;
  if (m.is_full()) {
    m.budget = Budget{1.0};
    return m;
  }
  m.spec = method_parse(name);
  m.budget = budget;
  if (window > 0) m.spec.score.window = window;
  if (!pooling.empty()) m.spec.score.pooling = Pooling::parse(pooling);
  m.spec.score.validate();
  return m;
}

EvictConfig MethodConfig::evict_config(int question) const {
  EvictConfig cfg;
  if (!is_full()) cfg.prefill = PrefillEviction::make(spec, budget, question);
  return cfg;
}

int MethodConfig::window_for(int question) const {
  return is_full() ? 0 : observation_window(evict_config(question).prefill.score);
}

std::vector<Generation> EvalModel::answer_all(PrefillState& state,
                                              const std::vector<MethodConfig>& methods,
                                              const std::vector<int32_t>& question_tokens,
                                              QueryMode mode, int max_new_tokens,
                                              int question_window) {
  std::vector<Generation> out;
  out.reserve(methods.size());
  for (MethodConfig m : methods) {
    if (!m.is_full() && question_window > 0)
      m.spec.score = m.evict_config(question_window).prefill.score;
    out.push_back(answer(state, m, question_tokens, mode, max_new_tokens));
  }
  return out;
}

std::string MethodConfig::label() const {
  return is_full() ? name : name + "@" + budget.str();
}

std::vector<MethodConfig> expand_methods(const std::vector<std::string>& methods,
                                         const std::vector<Budget>& budgets, int window,
                                         const std::string& pooling) {
  KVEVICT_CHECK(!methods.empty(), "no methods to evaluate; expected at least one (or 'full')");
  std::vector<MethodConfig> out;
  for (const auto& name : methods) {
    if (name == "full") {
      out.push_back(MethodConfig::make(name, Budget{1.0}));
      continue;
    }
    KVEVICT_CHECK(!budgets.empty(), "method '", name, "' needs a budget; expected at least one");
    for (const auto& b : budgets) out.push_back(MethodConfig::make(name, b, window, pooling));
  }
  return out;
}

std::string format_progress(const Progress& p) {
  auto hms = [](double s) {
    const auto t = static_cast<int64_t>(std::llround(std::max(0.0, s)));
    char buf[32];
    if (t >= 3600)
      std::snprintf(buf, sizeof(buf), "%lldh%02lldm%02llds", static_cast<long long>(t / 3600),
                    static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
    else
      std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(t / 60),
                    static_cast<long long>(t % 60));
    return std::string(buf);
  };
  const double pct =
      p.total > 0 ? 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total) : 0.0;
  char head[96];
  std::snprintf(head, sizeof(head), "%lld/%lld (%.0f%%)", static_cast<long long>(p.done),
                static_cast<long long>(p.total), pct);
  return std::string(head) + " elapsed " + hms(p.elapsed_s) + " eta " + hms(p.eta_s) + " " +
         p.current;
}

namespace {

std::string sample_name(const Sample& s, int64_t index) {
  return s.origin.empty() ? "sample " + s.task + " #" + std::to_string(index) : s.origin;
}

}  // namespace

std::vector<TokenizedSample> tokenize_samples(const Tokenizer& tok,
                                              const std::vector<Sample>& samples,
                                              const RunOptions& opt) {
  std::vector<TokenizedSample> out(samples.size());
  std::map<std::pair<std::string, int64_t>, int64_t> group_count;  // (task, length) -> samples seen
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    TokenizedSample& t = out[i];
    t.index = group_count[{s.task, s.target_length}]++;
    const std::string name = sample_name(s, t.index);
    KVEVICT_CHECK(!s.input.empty(), name,
                  " has no prompt; expected format_prompt() to have filled Sample::input");
    KVEVICT_CHECK(s.input_context_end <= s.input.size(), name, " splits its prompt at byte ",
                  s.input_context_end, " of ", s.input.size(), "; expected a split inside it");
    t.context = tok.encode(s.input_context(), opt.add_bos);
    t.question = tok.encode(s.input_question(), false);
    const auto ctx = static_cast<int64_t>(t.context.size());
    const auto q = static_cast<int64_t>(t.question.size());
    const int max_new = opt.max_new_tokens_cap > 0
                            ? std::min(s.max_new_tokens, opt.max_new_tokens_cap)
                            : s.max_new_tokens;
    KVEVICT_CHECK(opt.context_length <= 0 || ctx + q + max_new <= opt.context_length, name, ": ",
                  ctx + q, " prompt tokens + ", max_new, " answer tokens exceed the ",
                  opt.context_length, "-token context of the model; expected a shorter sample");
    for (const MethodConfig& m : opt.methods) {
      if (m.is_full() || m.budget.is_fraction()) continue;
      for (QueryMode mode : opt.modes) {
        const int64_t n = mode == QueryMode::kAware ? ctx + q : ctx;
        KVEVICT_CHECK(m.budget.value <= static_cast<double>(n), "budget ", m.budget.str(), " of ",
                      m.name, " keeps more tokens than the ", n, " that ", name, " prefills (",
                      query_mode_name(mode), "); expected a token count <= ", n,
                      " or a fraction");
      }
    }
  }
  return out;
}

EvalResults run_eval(EvalModel& model, const std::vector<Sample>& samples, const RunOptions& opt,
                     const ProgressFn& progress) {
  // Every sample is tokenized and checked before the first prefill, so a sample that cannot run
  // (longer than the context, shorter than a token budget) fails in seconds, not after hours.
  return run_eval(model, samples, tokenize_samples(model.tokenizer(), samples, opt), opt, progress);
}

EvalResults run_eval(EvalModel& model, const std::vector<Sample>& samples,
                     const std::vector<TokenizedSample>& prompts, const RunOptions& opt,
                     const ProgressFn& progress) {
  KVEVICT_CHECK(prompts.size() == samples.size(), "got ", prompts.size(), " tokenized prompts for ",
                samples.size(), " samples; expected tokenize_samples() of the same samples");
  KVEVICT_CHECK(!opt.methods.empty(), "no methods to evaluate; expected at least one");
  KVEVICT_CHECK(!opt.modes.empty(), "no query modes; expected query-aware and/or query-agnostic");
  EvalResults res;
  res.meta.model = model.name();
  res.meta.prompt_style = opt.prompt_style;
  res.meta.base_seed = opt.base_seed;

  Progress pr;
  pr.total = static_cast<int64_t>(samples.size() * opt.modes.size() * opt.methods.size());
  const auto start = std::chrono::steady_clock::now();

  for (size_t si = 0; si < samples.size(); ++si) {
    const Sample& s = samples[si];
    const int64_t index = prompts[si].index;
    const std::vector<int32_t>& context_ids = prompts[si].context;
    const std::vector<int32_t>& question_ids = prompts[si].question;
    const Metric metric = metric_for_task(s.task);
    for (QueryMode mode : opt.modes) {
      const auto p0 = std::chrono::steady_clock::now();
      std::unique_ptr<PrefillState> state = model.prefill(context_ids, question_ids, mode);
      const double prefill_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
      KVEVICT_CHECK(state != nullptr, "the model returned no prefill state for task '", s.task,
                    "'; expected EvalModel::prefill to return one");
      // SPEC section 5: in query-aware mode the question is the observation window of
      // windowed scores (RunOptions::question_window); PrefillEviction::make decides which.
      const int question_window = mode == QueryMode::kAware && opt.question_window
                                      ? static_cast<int>(question_ids.size())
                                      : 0;
      const int max_new = opt.max_new_tokens_cap > 0
                              ? std::min(s.max_new_tokens, opt.max_new_tokens_cap)
                              : s.max_new_tokens;
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<Generation> answers =
          model.answer_all(*state, opt.methods, question_ids, mode, max_new, question_window);
      const auto t1 = std::chrono::steady_clock::now();
      KVEVICT_CHECK(answers.size() == opt.methods.size(), "the model returned ", answers.size(),
                    " answers for ", opt.methods.size(), " methods");
      // Settings answered together share the time: each record carries its share.
      const double answer_seconds = std::chrono::duration<double>(t1 - t0).count() /
                                    static_cast<double>(opt.methods.size());
      for (size_t mi = 0; mi < opt.methods.size(); ++mi) {
        const MethodConfig& m = opt.methods[mi];
        const Generation& g = answers[mi];
        const int window = m.window_for(question_window);
        const bool window_is_question =
            question_window > 0 && !m.is_full() && window == question_window &&
            m.spec.score.aggregate == Aggregate::kWindow && m.spec.score.needs_queries();
        SampleRecord r;
        r.task = s.task;
        r.target_length = s.target_length;
        r.sample_index = index;
        r.seed = s.seed;
        r.context_tokens = static_cast<int64_t>(context_ids.size());
        r.question_tokens = static_cast<int64_t>(question_ids.size());
        r.mode = mode;
        r.method = m.name;
        r.budget = m.budget.str();
        r.window = window;
        r.window_is_question = window_is_question;
        r.pooling = m.pooling();
        r.policy = m.policy();
        r.prediction = postprocess_prediction(g.text);
        r.answers = s.answers;
        r.metric = metric;
        r.score = score_prediction(metric, r.prediction, s.answers);
        r.kept_tokens = g.kept_tokens;
        r.generated_tokens = g.generated_tokens;
        r.answer_seconds = answer_seconds;
        r.prefill_seconds = prefill_seconds;
        res.records.push_back(std::move(r));

        // One report per answer (the settings of a batch finish together).
        ++pr.done;
        pr.current = s.task + " #" + std::to_string(index) + " " + query_mode_name(mode) + " " +
                     m.label();
        pr.elapsed_s = std::chrono::duration<double>(t1 - start).count();
        pr.eta_s =
            pr.elapsed_s / static_cast<double>(pr.done) * static_cast<double>(pr.total - pr.done);
        if (progress) progress(pr);
      }
    }
  }
  return res;
}

std::vector<AggregateRow> EvalResults::aggregate() const {
  // Key: setting (length, mode, method, budget, window, pooling, policy) then task.
  using Setting =
      std::tuple<int64_t, int, std::string, std::string, std::string, std::string, std::string>;
  std::map<Setting, std::map<std::string, std::pair<double, int64_t>>> sums;
  for (const auto& r : records) {
    const std::string window =
        r.window_is_question ? std::string("question") : std::to_string(r.window);
    auto& cell = sums[Setting{r.target_length, static_cast<int>(r.mode), r.method, r.budget, window,
                              r.pooling, r.policy}][r.task];
    cell.first += r.score;
    cell.second += 1;
  }
  std::vector<AggregateRow> rows;
  for (const auto& [setting, tasks] : sums) {
    AggregateRow base;
    base.target_length = std::get<0>(setting);
    base.mode = static_cast<QueryMode>(std::get<1>(setting));
    base.method = std::get<2>(setting);
    base.budget = std::get<3>(setting);
    base.window = std::get<4>(setting);
    base.pooling = std::get<5>(setting);
    base.policy = std::get<6>(setting);
    double task_mean_sum = 0.0;
    int64_t total = 0;
    for (const auto& [task, sum] : tasks) {
      AggregateRow row = base;
      row.task = task;
      row.samples = sum.second;
      row.score = sum.first / static_cast<double>(sum.second);
      task_mean_sum += row.score;
      total += sum.second;
      rows.push_back(row);
    }
    AggregateRow avg = base;
    avg.task = "average";
    avg.samples = total;
    avg.score = task_mean_sum / static_cast<double>(tasks.size());
    rows.push_back(avg);
  }
  return rows;
}

}  // namespace kvevict::eval
