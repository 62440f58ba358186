#include "cli/output_args.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "io/input_file.h"
#include "kvevict/error.h"
#include "kvevict/io/atomic_file.h"

namespace kvevict::cli {

void check_output_args(const std::vector<OutputArg>& outputs, const std::vector<InputArg>& inputs) {
  std::vector<std::pair<std::string, const char*>> seen;  // resolved target, flag
  for (const OutputArg& o : outputs) {
    if (o.path.empty()) continue;
    const std::string target = io::check_output_path(o.path, o.flag);
    std::error_code ec;
    const std::string id = std::filesystem::weakly_canonical(target, ec).string();
    for (const auto& [other, flag] : seen)
      KVEVICT_CHECK(other != id, o.flag, " ", o.path, " is the same file as ", flag,
                    "; expected a different file for each output");
    seen.emplace_back(id, o.flag);
    struct stat out {};
    if (::stat(target.c_str(), &out) != 0) continue;  // a new file: it cannot be an input
    for (const InputArg& in : inputs) {
      struct stat st {};
      if (in.path.empty() || ::stat(in.path.c_str(), &st) != 0) continue;
      KVEVICT_CHECK(st.st_dev != out.st_dev || st.st_ino != out.st_ino, o.flag, " ", o.path,
                    " is the same file as the input ", in.flag, " ", in.path,
                    "; expected an output that is not one of the command's inputs");
    }
  }
}

void check_output_dir(const std::string& dir, const char* flag) {
  KVEVICT_CHECK(!dir.empty(), flag, ": the directory is empty; expected a directory path");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    KVEVICT_CHECK(S_ISDIR(st.st_mode), flag, ": ", dir, " is a ", io::file_type_name(st.st_mode),
                  "; expected a directory (or a new one's path)");
    KVEVICT_CHECK(::access(dir.c_str(), W_OK) == 0, flag, ": directory ", dir, " is not writable (",
                  std::strerror(errno), ")");
    return;
  }
  // A new directory: its parent must exist (the same rule as for a new file).
  io::check_output_path(dir, flag);
}

void write_report(const std::string& out, const std::string& markdown, const std::string& json,
                  const std::string& md, bool print_json) {
  io::StagedFiles files;  // both files or neither
  if (!out.empty()) files.add(out, "--out", {{json.data(), json.size()}});
  if (!markdown.empty()) files.add(markdown, "--markdown", {{md.data(), md.size()}});
  files.commit();
  std::printf("%s\n", print_json ? json.c_str() : md.c_str());
}

}  // namespace kvevict::cli
