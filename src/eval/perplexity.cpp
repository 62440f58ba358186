#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvevict/error.h"
#include "kvevict/model/evict_config.h"

namespace kvevict::eval {

std::vector<int32_t> prose_tokens(const std::string& text, const Tokenizer& tokenizer,
                                  int64_t max_tokens) {
  KVEVICT_CHECK(max_tokens > 0, "token count ", max_tokens, " is invalid; expected > 0");
  // Prose runs 4-5 bytes a token for English BPE; start at 8 and double until enough.
  size_t bytes = static_cast<size_t>(max_tokens) * 8;
  for (;;) {
    size_t cut = text.size();
    if (bytes < text.size()) {
      cut = text.rfind(' ', bytes);
      if (cut == std::string::npos || cut == 0) cut = bytes;
    }
    std::vector<int32_t> ids = tokenizer.encode(text.substr(0, cut), true);
    if (static_cast<int64_t>(ids.size()) >= max_tokens || cut == text.size()) {
      if (static_cast<int64_t>(ids.size()) > max_tokens)
        ids.resize(static_cast<size_t>(max_tokens));
      return ids;
    }
    bytes *= 2;
  }
}

std::vector<TokenSpan> ppl_chunks(int64_t n_tokens, int64_t chunk_tokens, int64_t max_chunks) {
  KVEVICT_CHECK(chunk_tokens >= 2, "perplexity chunk length ", chunk_tokens,
                " is too small; expected at least 2 tokens");
  KVEVICT_CHECK(max_chunks >= 0, "max chunks ", max_chunks, " is negative; expected >= 0");
  KVEVICT_CHECK(n_tokens >= chunk_tokens, "the text has ", n_tokens,
                " tokens, fewer than one chunk of ", chunk_tokens,
                "; expected a longer text or a shorter chunk");
  std::vector<TokenSpan> out;
  for (int64_t b = 0; b + chunk_tokens <= n_tokens; b += chunk_tokens) {
    if (max_chunks > 0 && static_cast<int64_t>(out.size()) == max_chunks) break;
    out.push_back({b, b + chunk_tokens});
  }
  return out;
}

PplAccumulator::PplAccumulator(int64_t bucket_tokens) : bucket_tokens_(bucket_tokens) {
  KVEVICT_CHECK(bucket_tokens > 0, "ppl bucket size ", bucket_tokens, " is invalid; expected > 0");
}

void PplAccumulator::add(int64_t position, double nll) {
  KVEVICT_CHECK(position >= 1, "ppl position ", position,
                " is invalid; expected >= 1 (token 0 has no prediction)");
  KVEVICT_CHECK(std::isfinite(nll) && nll >= 0.0, "NLL ", nll, " at position ", position,
                " is invalid; expected a finite value >= 0");
  const auto b = static_cast<size_t>(position / bucket_tokens_);
  if (bucket_sums_.size() <= b) bucket_sums_.resize(b + 1, {0.0, 0});
  bucket_sums_[b].first += nll;
  bucket_sums_[b].second += 1;
  sum_ += nll;
  count_ += 1;
}

void PplAccumulator::add_chunk(const std::vector<double>& nlls) {
  for (size_t i = 0; i < nlls.size(); ++i) add(static_cast<int64_t>(i) + 1, nlls[i]);
}

double PplAccumulator::mean_nll() const {
  KVEVICT_CHECK(count_ > 0, "no tokens were scored; expected at least one NLL before ppl()");
  return sum_ / static_cast<double>(count_);
}

std::vector<PplAccumulator::Bucket> PplAccumulator::buckets() const {
  std::vector<Bucket> out;
  for (size_t b = 0; b < bucket_sums_.size(); ++b) {
    if (bucket_sums_[b].second == 0) continue;
    const auto start = static_cast<int64_t>(b) * bucket_tokens_;
    out.push_back({start, start + bucket_tokens_, bucket_sums_[b].second,
                   std::exp(bucket_sums_[b].first / static_cast<double>(bucket_sums_[b].second))});
  }
  return out;
}

PplRun run_ppl(PplModel& model, const std::vector<int32_t>& tokens,
               const std::vector<TokenSpan>& chunks, const std::vector<MethodConfig>& methods,
               const DecodeEvictionOptions& decode, int64_t bucket_tokens,
               const ProgressFn& progress, const BootstrapOptions& bootstrap) {
  bootstrap.validate();
  KVEVICT_CHECK(!chunks.empty(), "no perplexity chunks; expected at least one");
  KVEVICT_CHECK(!methods.empty(), "no methods for perplexity; expected at least one");
  PplRun run;
  run.model = model.name();
  run.decode = decode;
  run.bootstrap = bootstrap;
  Progress pr;
  pr.total = static_cast<int64_t>(chunks.size() * methods.size());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& m : methods) {
    PplAccumulator acc(bucket_tokens);
    std::vector<double> chunk_nll;
    const size_t group = static_cast<size_t>(std::max(1, model.texts_per_call()));
    for (size_t c0 = 0; c0 < chunks.size(); c0 += group) {
      std::vector<std::vector<int32_t>> texts;
      for (size_t c = c0; c < std::min(chunks.size(), c0 + group); ++c) {
        const TokenSpan& span = chunks[c];
        KVEVICT_CHECK(
            span.begin >= 0 && span.end <= static_cast<int64_t>(tokens.size()) && span.size() >= 2,
            "chunk [", span.begin, ", ", span.end, ") is outside the ", tokens.size(),
            " tokens or shorter than 2; expected spans from ppl_chunks()");
        texts.emplace_back(tokens.begin() + span.begin, tokens.begin() + span.end);
      }
      const std::vector<std::vector<double>> nlls = model.token_nlls(texts, m, decode);
      KVEVICT_CHECK(nlls.size() == texts.size(), "the model returned NLLs of ", nlls.size(),
                    " chunks for ", texts.size(), "; expected one list a chunk");
      for (size_t t = 0; t < texts.size(); ++t) {
        KVEVICT_CHECK(nlls[t].size() + 1 == texts[t].size(), "the model returned ", nlls[t].size(),
                      " NLLs for a chunk of ", texts[t].size(), " tokens; expected ",
                      texts[t].size() - 1);
        acc.add_chunk(nlls[t]);
        double sum = 0;
        for (double x : nlls[t]) sum += x;
        chunk_nll.push_back(sum / static_cast<double>(nlls[t].size()));
      }
      pr.done += static_cast<int64_t>(texts.size());
      pr.elapsed_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      pr.eta_s =
          pr.elapsed_s / static_cast<double>(pr.done) * static_cast<double>(pr.total - pr.done);
      pr.current = "ppl chunk " + std::to_string(c0 + texts.size() - 1) + " " + m.label();
      if (progress) progress(pr);
    }
    PplResult r;
    r.method = m.name;
    r.budget = m.budget.str();
    // streamingllm keeps its sinks and the most recent rows: no score decides its cut.
    r.decode_score = m.is_full() ? "none"
                     : m.spec.score.method == Method::kStreamingLLM
                         ? "recent"
                         : decode_score_name(DecodeEviction::score_of(m.spec));
    r.policy = m.policy();
    r.chunks = static_cast<int64_t>(chunks.size());
    r.chunk_tokens = chunks.front().size();
    r.evaluated_tokens = acc.count();
    r.nll = acc.mean_nll();
    r.ppl = acc.ppl();
    r.buckets = acc.buckets();
    r.chunk_nll = chunk_nll;
    if (chunk_nll.size() >= 2 && bootstrap.resamples > 0) {
      const Interval nll = bootstrap_mean(chunk_nll, bootstrap, stream_key("ppl " + m.label()));
      r.ppl_interval = {std::exp(nll.estimate), std::exp(nll.low), std::exp(nll.high), nll.n};
    } else {
      r.ppl_interval.estimate = r.ppl;
      r.ppl_interval.n = static_cast<int64_t>(chunk_nll.size());
    }
    run.results.push_back(r);
  }
  return run;
}

namespace {
nlohmann::json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nullptr;
}

std::string interval_text(const BootstrapOptions& b) {
  if (b.resamples == 0) return "none (bootstrap off)";
  std::ostringstream os;
  os << b.level * 100 << "% percentile bootstrap over chunks (paired by chunk for ratios), "
     << b.resamples << " resamples, seed " << b.seed << "; none with one chunk";
  return os.str();
}
}  // namespace

std::vector<PplPaired> ppl_paired(const PplRun& run, const std::string& baseline) {
  std::vector<PplPaired> out;
  for (const PplResult& a : run.results) {
    if (a.method == baseline || a.method == "full") continue;
    for (const PplResult& b : run.results) {
      if (b.method != baseline || b.budget != a.budget ||
          b.chunk_nll.size() != a.chunk_nll.size() || a.chunk_nll.size() < 2)
        continue;
      std::vector<std::vector<std::pair<double, double>>> pairs(1);
      for (size_t c = 0; c < a.chunk_nll.size(); ++c)
        pairs[0].emplace_back(a.chunk_nll[c], b.chunk_nll[c]);
      PplPaired p;
      p.method = a.method;
      p.baseline = baseline;
      p.budget = a.budget;
      const PairedDifference d = paired_difference(
          pairs, run.bootstrap, stream_key("ppl paired " + a.method + " " + a.budget));
      p.ratio = {std::exp(d.diff.estimate), std::exp(d.diff.low), std::exp(d.diff.high), d.diff.n};
      p.chunks_better = d.b_better;  // the method's NLL below the baseline's: a lower ppl
      p.chunks_equal = d.equal;
      p.chunks_worse = d.a_better;
      out.push_back(p);
    }
  }
  return out;
}

std::string ppl_to_json(const PplRun& run, int indent) {
  using nlohmann::json;
  json arr = json::array();
  const std::vector<PplPaired> paired = ppl_paired(run);
  for (const auto& r : run.results) {
    json vs = nullptr;
    for (const PplPaired& p : paired)
      if (p.method == r.method && p.budget == r.budget)
        vs = {{"baseline", p.baseline},
              {"ppl_ratio", p.ratio.estimate},
              {"low", finite_or_null(p.ratio.low)},
              {"high", finite_or_null(p.ratio.high)},
              {"chunks_better", p.chunks_better},
              {"chunks_equal", p.chunks_equal},
              {"chunks_worse", p.chunks_worse}};
    json buckets = json::array();
    for (const auto& b : r.buckets)
      buckets.push_back({{"start", b.start}, {"end", b.end}, {"tokens", b.count}, {"ppl", b.ppl}});
    arr.push_back({{"model", run.model},
                   {"source", run.source},
                   {"seed", run.seed},
                   {"method", r.method},
                   {"budget", r.budget},
                   {"decode_score", r.decode_score},
                   {"policy", r.policy},
                   {"slack", run.decode.slack},
                   {"recent", run.decode.recent},
                   {"sink", run.decode.sink},
                   {"chunks", r.chunks},
                   {"chunk_tokens", r.chunk_tokens},
                   {"evaluated_tokens", r.evaluated_tokens},
                   {"nll", r.nll},
                   {"ppl", r.ppl},
                   {"ppl_low", finite_or_null(r.ppl_interval.low)},
                   {"ppl_high", finite_or_null(r.ppl_interval.high)},
                   {"interval", interval_text(run.bootstrap)},
                   {"chunk_nll", r.chunk_nll},
                   {"paired", vs},
                   {"buckets", buckets}});
  }
  return arr.dump(indent) + "\n";
}

std::string ppl_to_markdown(const PplRun& run) {
  std::ostringstream md;
  md << "# Perplexity with decode-time eviction\n\n";
  md << "- model: " << run.model << "\n- text: " << run.source << "\n- seed: " << run.seed
     << "\n- decode eviction: slack " << run.decode.slack << ", recent " << run.decode.recent
     << ", sink " << run.decode.sink << "\n- query mode: query-agnostic (decode-time)\n";
  md << "- intervals: " << interval_text(run.bootstrap) << "\n\n";
  md << "| method | budget | decode score | policy | chunk tokens | chunks | tokens | ppl | 95% "
        "interval |\n";
  md << "|---|---|---|---|---|---|---|---|---|\n";
  char buf[64], ci[96];
  for (const auto& r : run.results) {
    std::snprintf(buf, sizeof(buf), "%.3f", r.ppl);
    if (r.ppl_interval.has_interval())
      std::snprintf(ci, sizeof(ci), "[%.3f, %.3f]", r.ppl_interval.low, r.ppl_interval.high);
    else
      std::snprintf(ci, sizeof(ci), "-");
    md << "| " << r.method << " | " << r.budget << " | " << r.decode_score << " | " << r.policy
       << " | " << r.chunk_tokens << " | " << r.chunks << " | " << r.evaluated_tokens << " | "
       << buf << " | " << ci << " |\n";
  }
  const std::vector<PplPaired> paired = ppl_paired(run);
  if (!paired.empty()) {
    md << "\nPaired by chunk against " << paired.front().baseline
       << " at the same budget (ppl ratio = exp of the mean per-chunk NLL difference; < 1: "
          "the method predicts better):\n\n";
    md << "| method | budget | ppl ratio | 95% interval | chunks better / equal / worse |\n";
    md << "|---|---|---|---|---|\n";
    for (const PplPaired& p : paired) {
      std::snprintf(buf, sizeof(buf), "%.4f", p.ratio.estimate);
      std::snprintf(ci, sizeof(ci), "[%.4f, %.4f]", p.ratio.low, p.ratio.high);
      md << "| " << p.method << " | " << p.budget << " | " << buf << " | " << ci << " | "
         << p.chunks_better << " / " << p.chunks_equal << " / " << p.chunks_worse << " |\n";
    }
  }
  return md.str();
}

}  // namespace kvevict::eval
