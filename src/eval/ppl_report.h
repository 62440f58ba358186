// The results file of `kvevict ppl` (results JSON version 2, report.h: "meta" + "ppl"), read
// back, merged (`kvevict merge`: one run per method or budget, run side by side on one GPU, as
// one file), and its markdown tables. Paired comparisons are computed from the per-chunk NLLs
// when a file is written, so a merged file reports what one run of every setting would.
#pragma once

#include <string>
#include <vector>

#include "eval/perplexity.h"

namespace kvevict::eval {

std::string ppl_to_json(const PplRun& run, int indent = 1);
// A markdown report: the provenance header, a row per (method, budget) with its interval, and
// every method paired by chunk against streamingllm at the same budget.
std::string ppl_to_markdown(const PplRun& run);

// ppl_to_json's text read back, every field checked (throws naming `label`, the row and field).
// Version-1 files (before provenance was recorded) are read with an empty provenance and the
// default bootstrap, which their rows' interval text must name.
PplRun ppl_from_json(const std::string& text, const std::string& label);

// Several runs as one: results appended in order, meta from the first plus a note per run.
// Throws unless every run has the same model file, build, device, seed, bootstrap, text, decode
// eviction settings, chunk length and chunk count, and no (method, budget) appears twice.
PplRun merge_ppl(const std::vector<PplRun>& runs, const std::vector<std::string>& labels);

}  // namespace kvevict::eval
