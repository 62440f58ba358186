// kvevict merge: several `kvevict eval --out` results files of one protocol (e.g. one run per task,
// run side by side on one GPU) as one results file, with every cell, interval and paired
// comparison recomputed over the merged samples, exactly as one run of them all would report.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_args.h"
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
  check_output_args({{a.out, "--out"}, {a.markdown, "--markdown"}});
  std::vector<eval::EvalResults> runs;
  for (const std::string& path : a.inputs)
    runs.push_back(
        eval::results_from_json(io::read_text_input(path, "results file", kMaxResultsBytes), path));
  const eval::EvalResults merged = eval::merge_results(runs, a.inputs);
  const std::string json = eval::results_to_json(merged);
  const std::string md = eval::results_to_markdown(merged);
  write_report(a.out, a.markdown, json, md, a.json);
  return 0;
}

}  // namespace

Runner add_merge_command(CLI::App& app) {
  auto a = std::make_shared<MergeArgs>();
  auto* cmd = app.add_subcommand(
      "merge", "Merge results files of one protocol (e.g. one eval run per task) into one");
  cmd->add_option("inputs", a->inputs, "Results files (kvevict eval --out), at least 2")
      ->required()
      ->expected(2, 1 << 20);
  cmd->add_option("--out", a->out, "Write the merged results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the merged markdown tables here");
  cmd->add_flag("--json", a->json, "Print the merged results JSON instead of the tables");
  cmd->footer(
      "The runs must share the model file (sha256), kvevict commit, prompt style, split, device,\n"
      "base seed, bootstrap and --compare; their samples must be disjoint (each (task, length,\n"
      "mode, sample, setting) once). Cells, 95% intervals and paired comparisons are recomputed\n"
      "over all samples, so the merge reports what one run of them all would.");
  return [a] { return run_merge_command(*a); };
}

}  // namespace kvevict::cli
