// kvevict: KV-cache eviction for long-context LLM inference.
//   kvevict score | analyze | generate | demo | eval | ppl | capture | merge  (each takes --help)
// Exit codes: 0 success, 1 internal failure, 2 bad input (the message names the bad value).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/numeric_options.h"
#include "kvevict/error.h"
#include "kvevict/version.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvevict: evict KV-cache entries by how much their removal would perturb attention.\n"
      "Methods: DropKV, AdaDropKV, OBCache (v/k/vk), SnapKV, AdaKV, H2O, TOVA, KNorm, KeyDiff, "
      "VATP,\n"
      "CriticalKV, StreamingLLM, random. Run `kvevict <command> --help` for each command."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvevict " KVEVICT_VERSION_STRING);
  std::map<std::string, kvevict::cli::Runner> runners;
  runners["score"] = kvevict::cli::add_score_command(app);
  runners["analyze"] = kvevict::cli::add_analyze_command(app);
  runners["generate"] = kvevict::cli::add_generate_command(app);
  runners["demo"] = kvevict::cli::add_demo_command(app);
  runners["eval"] = kvevict::cli::add_eval_command(app);
  runners["ppl"] = kvevict::cli::add_ppl_command(app);
  runners["capture"] = kvevict::cli::add_capture_command(app);
  runners["merge"] = kvevict::cli::add_merge_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (auto* sub : app.get_subcommands()) {
      kvevict::cli::check_no_empty_values(*sub);
      return runners.at(sub->get_name())();
    }
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "kvevict: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvevict: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
