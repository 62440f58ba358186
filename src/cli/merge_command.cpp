// kvevict merge: several `kvevict eval --out` results files of one protocol (e.g. one run per task,
// run side by side on one GPU) as one results file, with every cell, interval and paired
// comparison recomputed over the merged samples, exactly as one run of them all would report;
// likewise several `kvevict ppl --out` files (e.g. one run per method and budget) as one, paired
// against streamingllm by chunk across the files.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_args.h"
#include "eval/ppl_report.h"
#include "eval/report.h"
#include "io/input_file.h"

namespace kvevict::cli {
namespace {

// A results file holds one record per (sample, setting): 100 samples of 11 tasks at 120 settings
// are ~130K records, about 120 MiB. Four times that bounds what one merge reads.
constexpr uint64_t kMaxResultsBytes = uint64_t{512} << 20;

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string out, markdown;
  bool json = false;
};

int run_merge_command(const MergeArgs& a) {
  KVEVICT_CHECK(a.inputs.size() >= 2, "merge: ", a.inputs.size(),
                " results file given; expected at least 2");
  KVEVICT_CHECK(!a.out.empty() || !a.markdown.empty() || a.json,
                "merge: nothing to write; give --out, --markdown or --json");
  std::vector<InputArg> inputs;
  for (const std::string& in : a.inputs) inputs.push_back({in, "results file"});
  check_output_args({{a.out, "--out"}, {a.markdown, "--markdown"}}, inputs);
  // The first file says what is merged: sweeps (kvevict eval) or perplexity runs (kvevict ppl).
  const std::string first = io::read_text_input(a.inputs[0], "results file", kMaxResultsBytes);
  auto text_of = [&](size_t i) {
    return i == 0 ? first : io::read_text_input(a.inputs[i], "results file", kMaxResultsBytes);
  };
  if (eval::results_kind(first, a.inputs[0]) == eval::ResultsKind::kPpl) {
    std::vector<eval::PplRun> runs;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      runs.push_back(eval::ppl_from_json(text_of(i), a.inputs[i]));
    const eval::PplRun merged = eval::merge_ppl(runs, a.inputs);
    write_report(a.out, a.markdown, eval::ppl_to_json(merged), eval::ppl_to_markdown(merged),
                 a.json);
    return 0;
  }
  std::vector<eval::EvalResults> runs;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    runs.push_back(eval::results_from_json(text_of(i), a.inputs[i]));
  const eval::EvalResults merged = eval::merge_results(runs, a.inputs);
  write_report(a.out, a.markdown, eval::results_to_json(merged), eval::results_to_markdown(merged),
               a.json);
  return 0;
}

}  // namespace

Runner add_merge_command(CLI::App& app) {
  auto a = std::make_shared<MergeArgs>();
  auto* cmd = app.add_subcommand(
      "merge", "Merge results files of one protocol (e.g. one eval run per task) into one");
  cmd->add_option("inputs", a->inputs,
                  "Results files (kvevict eval --out, or kvevict ppl --out), at least 2")
      ->required()
      ->expected(2, 1 << 20);
  cmd->add_option("--out", a->out, "Write the merged results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the merged markdown tables here");
  cmd->add_flag("--json", a->json, "Print the merged results JSON instead of the tables");
  cmd->footer(
      "The runs must share the model file (sha256), kvevict commit, prompt style, split, device,\n"
      "base seed, bootstrap and --compare; their samples must be disjoint (each (task, length,\n"
      "mode, sample, setting) once). Cells, 95% intervals and paired comparisons are recomputed\n"
      "over all samples, so the merge reports what one run of them all would.\n"
      "ppl files must share the model file, commit, device, seed, bootstrap, text, decode\n"
      "settings and chunks; each (method, budget) once; pairs against streamingllm are\n"
      "recomputed by chunk across the files.");
  return [a] { return run_merge_command(*a); };
}

}  // namespace kvevict::cli
