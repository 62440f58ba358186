// What the reports print beside the accuracy cells: the cost of the run (per prefill, per
// eviction, per decode batch) from its BatchRecords. The cells themselves and the paired
// comparisons are EvalResults::aggregate() / compare() (runner.h), implemented with them in
// summary.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/runner.h"

namespace kvevict::eval {

// The cost of one (split, length, mode) group of a run, or of the whole run (length -1, mode
// empty). Seconds the runtime did not report are -1.
struct CostRow {
  std::string split;
  int64_t target_length = 0;        // -1: every group
  std::string mode;                 // query_mode_name, or "all"
  int64_t samples = 0;              // prefills (one per sample and mode)
  double prefill_tokens = 0;        // mean tokens prefilled
  double settings = 0;              // mean answers per prefill
  double prefill_s = 0;             // mean wall seconds of a prefill
  double evict_s_per_setting = -1;  // mean eviction of one setting (runtime-reported)
  double decode_s_per_batch = -1;   // mean decode loop of one batch (runtime-reported)
  double append_s_per_batch = -1;   // mean question append of one batch (query-agnostic)
  double decode_steps_per_batch = -1;
  double batches_per_sample = -1;  // decode batches per prefill (GPU 1; CPU one per setting)
  double answer_s_per_sample = 0;  // wall seconds of every answer of a prefill
  double total_s = 0;              // wall seconds of the group: prefills + answers
};

std::vector<CostRow> cost_summary(const EvalResults& r);

}  // namespace kvevict::eval
