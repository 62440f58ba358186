#include "eval/perplexity.h"

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
               const ProgressFn& progress) {
  KVEVICT_CHECK(!chunks.empty(), "no perplexity chunks; expected at least one");
  KVEVICT_CHECK(!methods.empty(), "no methods for perplexity; expected at least one");
  PplRun run;
  run.model = model.name();
  run.decode = decode;
  Progress pr;
  pr.total = static_cast<int64_t>(chunks.size() * methods.size());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& m : methods) {
    PplAccumulator acc(bucket_tokens);
    for (size_t c = 0; c < chunks.size(); ++c) {
      const TokenSpan& span = chunks[c];
      KVEVICT_CHECK(
          span.begin >= 0 && span.end <= static_cast<int64_t>(tokens.size()) && span.size() >= 2,
          "chunk [", span.begin, ", ", span.end, ") is outside the ", tokens.size(),
          " tokens or shorter than 2; expected spans from ppl_chunks()");
      const std::vector<int32_t> chunk(tokens.begin() + span.begin, tokens.begin() + span.end);
      const std::vector<double> nlls = model.token_nlls(chunk, m, decode);
      KVEVICT_CHECK(static_cast<int64_t>(nlls.size()) == span.size() - 1, "the model returned ",
                    nlls.size(), " NLLs for a chunk of ", span.size(), " tokens; expected ",
                    span.size() - 1);
      acc.add_chunk(nlls);
      ++pr.done;
      pr.elapsed_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      pr.eta_s =
          pr.elapsed_s / static_cast<double>(pr.done) * static_cast<double>(pr.total - pr.done);
      pr.current = "ppl chunk " + std::to_string(c) + " " + m.label();
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
    run.results.push_back(r);
  }
  return run;
}

std::string ppl_to_json(const PplRun& run, int indent) {
  using nlohmann::json;
  json arr = json::array();
  for (const auto& r : run.results) {
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
                   {"buckets", buckets}});
  }
  return arr.dump(indent) + "\n";
}

std::string ppl_to_markdown(const PplRun& run) {
  std::ostringstream md;
  md << "# Perplexity with decode-time eviction\n\n";
  md << "- model: " << run.model << "\n- text: " << run.source << "\n- seed: " << run.seed
     << "\n- decode eviction: slack " << run.decode.slack << ", recent " << run.decode.recent
     << ", sink " << run.decode.sink << "\n- query mode: query-agnostic (decode-time)\n\n";
  md << "| method | budget | decode score | policy | chunk tokens | chunks | tokens | ppl |\n";
  md << "|---|---|---|---|---|---|---|---|\n";
  char buf[64];
  for (const auto& r : run.results) {
    std::snprintf(buf, sizeof(buf), "%.3f", r.ppl);
    md << "| " << r.method << " | " << r.budget << " | " << r.decode_score << " | " << r.policy
       << " | " << r.chunk_tokens << " | " << r.chunks << " | " << r.evaluated_tokens << " | "
       << buf << " |\n";
  }
  return md.str();
}

}  // namespace kvevict::eval
