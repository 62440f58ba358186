// Results files of `kvevict eval` and `kvevict ppl`: one JSON document that tools/plot_results.py
// reads, and markdown tables for humans. Every table names the model, length, budget, method,
// window, pooling, query mode and seeds (SPEC section 7).
//
// JSON layout (every section optional for the plot script):
//   {"kind": "kvevict-results", "version": 1,
//    "meta": {"model", "prompt_style", "base_seed", "notes": [..]},
//    "records":   [{task, target_length, sample_index, seed, context_tokens, question_tokens,
//                   mode, method, budget, window, pooling, policy, prediction, answers, metric,
//                   score, kept_tokens, answer_seconds}],
//    "aggregate": [{task, target_length, mode, method, budget, window, pooling, policy,
//                   samples, score}],
//    "ppl":       [{method, budget, window, pooling, policy, context_tokens, chunk_tokens,
//                   evaluated_tokens, nll, ppl, seed, source, buckets: [{start, end, ppl}]}],
//    "diagnostics": {"cone": [{"layer": int, "c_star": [float, ...]}], ...}}
#pragma once

#include <string>

#include "kvevict/eval/runner.h"

namespace kvevict::eval {

std::string results_to_json(const EvalResults& r, int indent = 1);
// Markdown: a header with model, prompt style and seeds, then one table per (length, mode) with a
// row per method setting and a column per task plus the average.
std::string results_to_markdown(const EvalResults& r);

// Writes text to path all or nothing, never over a non-regular file (io::write_file_atomically);
// throws naming `label` (e.g. "--out"; default: the quoted path) on failure.
void write_text_file(const std::string& path, const std::string& text,
                     const std::string& label = "");

}  // namespace kvevict::eval
