#include "cli/corpus_arg.h"

#include <cstdlib>
#include <filesystem>

#include "cli/model_args.h"

namespace kvevict::cli {

std::string corpus_dir() {
  if (const char* env = std::getenv("KVEVICT_CORPUS_DIR"); env && *env) return env;
  if (std::filesystem::is_directory("data/corpus/austen")) return "data/corpus";
  return source_dir() + "/data/corpus";
}

}  // namespace kvevict::cli
