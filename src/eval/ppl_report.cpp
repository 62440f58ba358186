#include "eval/ppl_report.h"

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include "eval/results_format.h"

namespace kvevict::eval {

using nlohmann::json;

namespace {

std::string interval_text(const BootstrapOptions& b) {
  if (b.resamples == 0) return "none (bootstrap off)";
  std::ostringstream os;
  os << b.level * 100 << "% percentile bootstrap over chunks (paired by chunk for ratios), "
     << b.resamples << " resamples, seed " << b.seed << "; none with one chunk";
  return os.str();
}

std::vector<double> numbers(const JsonReader& r, const char* key) {
  const json& v = r.field(key);
  KVEVICT_CHECK(v.is_array(), r.where(), ": '", key, "' is ", v.type_name(),
                "; expected an array of numbers");
  std::vector<double> out;
  for (const json& e : v) {
    KVEVICT_CHECK(e.is_number() && std::isfinite(e.get<double>()), r.where(), ": an element of '",
                  key, "' is ", e.dump(), "; expected a finite number");
    out.push_back(e.get<double>());
  }
  return out;
}

double nullable(const JsonReader& r, const char* key) {
  return r.field(key).is_null() ? std::nan("") : r.number(key);
}

PplResult read_result(const json& j, const std::string& where) {
  const JsonReader r(j, where);
  PplResult x;
  x.method = r.str("method");
  x.budget = r.str("budget");
  x.decode_score = r.str("decode_score");
  x.policy = r.str("policy");
  x.chunks = r.integer("chunks");
  x.chunk_tokens = r.integer("chunk_tokens");
  x.evaluated_tokens = r.integer("evaluated_tokens");
  x.nll = r.number("nll");
  x.ppl = r.number("ppl");
  x.chunk_nll = numbers(r, "chunk_nll");
  KVEVICT_CHECK(x.chunks >= 1 && static_cast<int64_t>(x.chunk_nll.size()) == x.chunks, where, ": ",
                x.chunk_nll.size(), " chunk NLLs for 'chunks' ", x.chunks,
                "; expected one a chunk");
  x.ppl_interval = {x.ppl, nullable(r, "ppl_low"), nullable(r, "ppl_high"), x.chunks};
  const json& buckets = r.field("buckets");
  KVEVICT_CHECK(buckets.is_array(), where, ": 'buckets' is ", buckets.type_name(),
                "; expected an array");
  for (size_t i = 0; i < buckets.size(); ++i) {
    const JsonReader b(buckets[i], where + " buckets[" + std::to_string(i) + "]");
    x.buckets.push_back(
        {b.integer("start"), b.integer("end"), b.integer("tokens"), b.number("ppl")});
  }
  return x;
}

}  // namespace

std::string ppl_to_json(const PplRun& run, int indent) {
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
    // Each row also names its model, text, seed and decode settings, so rows read alone (the
    // plot script) still say what they are.
    arr.push_back({{"model", run.meta.model},
                   {"source", run.source},
                   {"seed", run.meta.base_seed},
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
                   {"interval", interval_text(run.meta.bootstrap)},
                   {"chunk_nll", r.chunk_nll},
                   {"paired", vs},
                   {"buckets", buckets}});
  }
  json doc;
  doc["kind"] = "kvevict-results";
  doc["version"] = 2;
  doc["meta"] = meta_to_json(run.meta);
  doc["ppl"] = arr;
  return doc.dump(indent) + "\n";
}

PplRun ppl_from_json(const std::string& text, const std::string& label) {
  const json doc = parse_results_json(text, label);
  const json version = doc.value("version", json());
  KVEVICT_CHECK(version == 1 || version == 2, label, ": results version ", version.dump(),
                "; this kvevict reads ppl files of version 1 and 2");
  auto rows = doc.find("ppl");
  KVEVICT_CHECK(rows != doc.end() && rows->is_array() && !rows->empty(), label,
                ": 'ppl' is missing, empty or not an array; expected a kvevict ppl results file");
  PplRun run;
  if (version == 2) {
    run.meta = meta_from_json(doc, label);
  } else {
    // Version 1 (kvevict ppl before 2026-12-03): no meta, so no provenance; its intervals were
    // drawn with the default bootstrap, which each row's "interval" text must confirm.
    const JsonReader r0((*rows)[0], label + " ppl[0]");
    run.meta.model = r0.str("model");
    run.meta.base_seed = r0.unsigned_integer("seed");
    run.meta.notes.push_back(label + ": a version-1 file (no provenance recorded)");
  }
  for (size_t i = 0; i < rows->size(); ++i) {
    const std::string where = label + " ppl[" + std::to_string(i) + "]";
    const JsonReader r((*rows)[i], where);
    KVEVICT_CHECK(r.str("interval") == interval_text(run.meta.bootstrap), where, ": interval '",
                  r.str("interval"), "' is not the file's bootstrap ('",
                  interval_text(run.meta.bootstrap), "'); expected one bootstrap a file");
    KVEVICT_CHECK(r.str("model") == run.meta.model, where, ": model '", r.str("model"),
                  "' is not the file's '", run.meta.model, "'; expected one model a file");
    const std::string source = r.str("source");
    const DecodeEvictionOptions d{r.integer("slack"), static_cast<int>(r.integer("recent")),
                                  static_cast<int>(r.integer("sink"))};
    if (i == 0) {
      run.source = source;
      run.decode = d;
    }
    KVEVICT_CHECK(source == run.source && d.slack == run.decode.slack &&
                      d.recent == run.decode.recent && d.sink == run.decode.sink &&
                      r.unsigned_integer("seed") == run.meta.base_seed,
                  where,
                  ": its text, seed or decode settings differ from the file's first row; "
                  "expected one protocol a file");
    run.results.push_back(read_result((*rows)[i], where));
  }
  return run;
}

PplRun merge_ppl(const std::vector<PplRun>& runs, const std::vector<std::string>& labels) {
  KVEVICT_CHECK(runs.size() == labels.size() && runs.size() >= 2, "merge: ", runs.size(),
                " results files; expected at least 2");
  const PplRun& first = runs[0];
  const PplResult& shape = first.results.at(0);
  PplRun merged;
  merged.meta = first.meta;
  merged.source = first.source;
  merged.decode = first.decode;
  merged.meta.notes.push_back("merged from " + std::to_string(runs.size()) + " runs:");
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PplRun& run = runs[i];
    check_mergeable(first.meta, labels[0], run.meta, labels[i]);
    KVEVICT_CHECK(
        run.source == first.source && run.decode.slack == first.decode.slack &&
            run.decode.recent == first.decode.recent && run.decode.sink == first.decode.sink,
        "merge: ", labels[i], " reads '", run.source, "' with slack ", run.decode.slack,
        ", recent ", run.decode.recent, ", sink ", run.decode.sink, " but ", labels[0], " reads '",
        first.source, "' with slack ", first.decode.slack, ", recent ", first.decode.recent,
        ", sink ", first.decode.sink, "; expected one text and one decode-eviction setting");
    for (const PplResult& r : run.results) {
      KVEVICT_CHECK(r.chunks == shape.chunks && r.chunk_tokens == shape.chunk_tokens,
                    "merge: ", labels[i], " has ", r.chunks, " chunks of ", r.chunk_tokens,
                    " tokens for ", r.method, " at ", r.budget, " but ", labels[0], " has ",
                    shape.chunks, " of ", shape.chunk_tokens,
                    "; expected the same chunks (their NLLs pair up)");
      KVEVICT_CHECK(seen.emplace(r.method, r.budget).second, "merge: ", labels[i], " repeats ",
                    r.method, " at budget ", r.budget,
                    " of an earlier file; expected disjoint runs");
      merged.results.push_back(r);
    }
    merged.meta.notes.push_back(
        "  " + labels[i] + ": " +
        (run.meta.command_line.empty() ? "(command not recorded)" : run.meta.command_line));
  }
  return merged;
}

std::string ppl_to_markdown(const PplRun& run) {
  std::ostringstream md;
  md << "# Perplexity with decode-time eviction\n\n";
  write_meta_markdown(md, run.meta);
  md << "- text: " << run.source << "\n- seed: " << run.meta.base_seed
     << "\n- decode eviction: slack " << run.decode.slack << ", recent " << run.decode.recent
     << ", sink " << run.decode.sink << "\n- query mode: query-agnostic (decode-time)\n";
  md << "- intervals: " << interval_text(run.meta.bootstrap) << "\n";
  for (const auto& n : run.meta.notes) md << "- " << n << "\n";
  md << "\n";
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
