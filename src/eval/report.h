// Results files of `kvevict eval` and `kvevict ppl`: one JSON document that tools/plot_results.py
// reads, and markdown tables for humans. Every table names the model, length, budget, method,
// window, pooling, query mode and seeds (SPEC section 7); docs/EVAL.md is the protocol.
//
// JSON layout, version 2 (every section optional for the plot script; one type per field: a
// number that is unknown is null, never a string):
//   {"kind": "kvevict-results", "version": 2,
//    "meta": {"model", "prompt_style", "base_seed", "split", "notes": [..], "kvevict_version",
//             "git_commit", "git_modified", "command_line", "date_utc", "device", "model_path",
//             "model_sha256", "options": {every option of the command}, "bootstrap": {"resamples",
//             "seed", "level", "method"}, "comparisons": [[a, b], ..]},
//    "records":   [{split, task, target_length, sample_index, seed, context_tokens,
//                   question_tokens, mode, method, budget, window, window_is_question, pooling,
//                   policy, aggregate, normalize, keep_last, prediction, answers, metric, score,
//                   kept_tokens, generated_tokens, answer_seconds, prefill_seconds,
//                   evict_seconds}],
//    "aggregate": [{split, task, target_length, mode, method, budget, window, window_is_question,
//                   pooling, policy, aggregate, normalize, keep_last, samples, score, ci_low,
//                   ci_high}],
//    "comparisons": [{split, task, target_length, mode, budget, a, b, samples, a_score,
//                   a_ci_low, a_ci_high, b_score, b_ci_low, b_ci_high, diff, diff_ci_low,
//                   diff_ci_high, a_better, equal, b_better}],
//    "cost":      [{split, target_length, mode, samples, prefill_tokens, settings, prefill_s,
//                   evict_s_per_setting, decode_s_per_batch, append_s_per_batch,
//                   decode_steps_per_batch, batches_per_sample, answer_s_per_sample, total_s}],
//    "batches":   [{split, task, target_length, sample_index, mode, prefill_tokens, settings,
//                   prefill_seconds, answer_seconds, evict_seconds, append_seconds,
//                   decode_seconds, decode_steps, batches}],
//    "ablation":  [{method, chosen, dev_score, default_setting, default_dev_score, cells}],
//    "ppl":       [{model, source, seed, method, budget, decode_score, policy, slack, recent, sink,
//                   chunks, chunk_tokens, evaluated_tokens, nll, ppl, ppl_low, ppl_high,
//                   interval, chunk_nll: [..], paired: {baseline, ppl_ratio, low, high,
//                   chunks_better, chunks_equal, chunks_worse} or null,
//                   buckets: [{start, end, tokens, ppl}]}]   (kvevict ppl: meta + ppl only,
//                   eval/ppl_report.h)
//    "diagnostics": {"cone": [{"layer": int, "c_star": [float, ...]}], ...}}
// Version 1 files (before issue 20) had "window" as a string ("question" or a count) in
// "aggregate" and no intervals; the plot script reads both.
#pragma once

#include <string>

#include "eval/runner.h"

namespace kvevict::eval {

std::string results_to_json(const EvalResults& r, int indent = 1);
// Markdown: a header with model, prompt style and seeds, then one table per (length, mode) with a
// row per method setting and a column per task plus the average.
std::string results_to_markdown(const EvalResults& r);

// A results file (results_to_json's text, version 2) read back: meta, records and batches, every
// field checked (throws naming `label`, the record and the field). Ablation runs are refused.
EvalResults results_from_json(const std::string& text, const std::string& label);
// What a results file holds: the records of a sweep (kvevict eval) or perplexity rows (kvevict
// ppl). Parses the text; throws naming `label` when it is neither.
enum class ResultsKind { kEval, kPpl };
ResultsKind results_kind(const std::string& text, const std::string& label);
// Several runs as one (`kvevict merge`): records and batches appended, meta from the first plus a
// note per run. Throws unless every run has the same model file, commit, prompt style, split,
// device, base seed, bootstrap and comparisons, and no sample of a setting appears twice.
EvalResults merge_results(const std::vector<EvalResults>& runs,
                          const std::vector<std::string>& labels);

// Writes text to path all or nothing, never over a non-regular file (io::write_file_atomically);
// throws naming `label` (e.g. "--out"; default: the quoted path) on failure.
void write_text_file(const std::string& path, const std::string& text,
                     const std::string& label = "");

}  // namespace kvevict::eval
