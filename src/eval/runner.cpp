#include "eval/runner.h"

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

// The cost of one answer_all call from what the runtime reported for each setting: a batch's
// append and decode are shared by its rows_in_batch settings, so each row adds its share.
BatchRecord batch_record(const Sample& s, int64_t index, QueryMode mode, const RunOptions& opt,
                         const std::vector<Generation>& answers, double prefill_seconds,
                         double answer_seconds) {
  BatchRecord b;
  b.split = opt.split;
  b.task = s.task;
  b.target_length = s.target_length;
  b.sample_index = index;
  b.mode = mode;
  b.settings = static_cast<int64_t>(answers.size());
  b.prefill_seconds = prefill_seconds;
  b.answer_seconds = answer_seconds;
  bool reported = !answers.empty();
  double evict = 0, append = 0, decode = 0, steps = 0, batches = 0;
  for (const Generation& g : answers) {
    reported =
        reported && g.evict_seconds >= 0 && g.batch_decode_seconds >= 0 && g.rows_in_batch >= 1;
    if (!reported) break;
    const double share = 1.0 / static_cast<double>(g.rows_in_batch);
    evict += g.evict_seconds;
    append += std::max(0.0, g.batch_append_seconds) * share;
    decode += g.batch_decode_seconds * share;
    steps += static_cast<double>(std::max<int64_t>(0, g.batch_decode_steps)) * share;
    batches += share;
  }
  if (reported) {
    b.evict_seconds = evict;
    b.append_seconds = append;
    b.decode_seconds = decode;
    b.decode_steps = std::llround(steps);
    b.batches = std::llround(batches);
  }
  return b;
}

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
    // Generated samples keep their index in the split (a run from --first-sample K starts at K);
    // external data counts its rows per (task, length).
    const int64_t counted = group_count[{s.task, s.target_length}]++;
    t.index = s.index >= 0 ? s.index : counted;
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
                      query_mode_name(mode), "); expected a token count <= ", n, " or a fraction");
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
  res.meta.split = opt.split;
  res.meta.bootstrap = opt.bootstrap;

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
      std::vector<Generation> answers;
      if (opt.one_at_a_time) {
        for (const MethodConfig& m : opt.methods) {
          std::vector<Generation> one =
              model.answer_all(*state, {m}, question_ids, mode, max_new, question_window);
          KVEVICT_CHECK(one.size() == 1, "the model returned ", one.size(),
                        " answers for one method");
          answers.push_back(std::move(one[0]));
        }
      } else {
        answers =
            model.answer_all(*state, opt.methods, question_ids, mode, max_new, question_window);
      }
      const auto t1 = std::chrono::steady_clock::now();
      KVEVICT_CHECK(answers.size() == opt.methods.size(), "the model returned ", answers.size(),
                    " answers for ", opt.methods.size(), " methods");
      // Settings answered together share the time: each record carries its share.
      const double answer_seconds =
          std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(opt.methods.size());
      res.batches.push_back(batch_record(s, index, mode, opt, answers, prefill_seconds,
                                         std::chrono::duration<double>(t1 - t0).count()));
      res.batches.back().prefill_tokens = static_cast<int64_t>(
          context_ids.size() + (mode == QueryMode::kAware ? question_ids.size() : 0));
      for (size_t mi = 0; mi < opt.methods.size(); ++mi) {
        const MethodConfig& m = opt.methods[mi];
        const Generation& g = answers[mi];
        SampleRecord r;
        r.split = opt.split;
        r.task = s.task;
        r.target_length = s.target_length;
        r.sample_index = index;
        r.seed = s.seed;
        r.context_tokens = static_cast<int64_t>(context_ids.size());
        r.question_tokens = static_cast<int64_t>(question_ids.size());
        r.mode = mode;
        r.method = m.name;
        r.budget = m.budget.str();
        r.window = m.window_for(question_window);
        r.window_is_question = m.window_is_question(question_window);
        r.pooling = m.pooling();
        r.policy = m.policy();
        r.aggregate = m.aggregate();
        r.normalize = m.normalize();
        r.keep_last = m.keep_last;
        r.prediction = postprocess_prediction(g.text);
        r.answers = s.answers;
        r.metric = metric;
        r.score = score_prediction(metric, r.prediction, s.answers);
        r.kept_tokens = g.kept_tokens;
        r.generated_tokens = g.generated_tokens;
        r.answer_seconds = answer_seconds;
        r.prefill_seconds = prefill_seconds;
        r.evict_seconds = g.evict_seconds;
        res.records.push_back(std::move(r));

        // One report per answer (the settings of a batch finish together).
        ++pr.done;
        pr.current =
            s.task + " #" + std::to_string(index) + " " + query_mode_name(mode) + " " + m.label();
        pr.elapsed_s = std::chrono::duration<double>(t1 - start).count();
        pr.eta_s =
            pr.elapsed_s / static_cast<double>(pr.done) * static_cast<double>(pr.total - pr.done);
        if (progress) progress(pr);
      }
    }
  }
  return res;
}

}  // namespace kvevict::eval
