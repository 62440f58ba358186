// Each subcommand registers itself on the CLI11 app and returns the function that runs it.
// A subcommand reports bad input by throwing kvevict::Error; main() prints it and exits with 2.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace kvevict::cli {

using Runner = std::function<int()>;

Runner add_score_command(CLI::App& app);
Runner add_analyze_command(CLI::App& app);
Runner add_generate_command(CLI::App& app);
Runner add_demo_command(CLI::App& app);
Runner add_eval_command(CLI::App& app);
Runner add_ppl_command(CLI::App& app);
Runner add_capture_command(CLI::App& app);
Runner add_merge_command(CLI::App& app);

}  // namespace kvevict::cli
