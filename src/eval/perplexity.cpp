#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>

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
  run.meta.model = model.name();
  run.decode = decode;
  run.meta.bootstrap = bootstrap;
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
          pairs, run.meta.bootstrap, stream_key("ppl paired " + a.method + " " + a.budget));
      p.ratio = {std::exp(d.diff.estimate), std::exp(d.diff.low), std::exp(d.diff.high), d.diff.n};
      p.chunks_better = d.b_better;  // the method's NLL below the baseline's: a lower ppl
      p.chunks_equal = d.equal;
      p.chunks_worse = d.a_better;
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace kvevict::eval
