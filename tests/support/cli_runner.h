// Runs the kvevict executable in a test and captures its exit code, stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace kvevict::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `binary args...` (arguments passed without a shell) with stdin closed.
CliResult run_cli(const std::string& binary, const std::vector<std::string>& args);

// A fresh temporary directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvevict::testing
