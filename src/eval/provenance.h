// What makes a results file describe itself (docs/EVAL.md): the kvevict version and git commit
// compiled in at build time, the command line, the date, the model file's SHA-256.
#pragma once

#include <cstdint>
#include <string>

#include "eval/runner.h"

namespace kvevict::eval {

struct BuildInfo {
  std::string version;           // the project version ("0.1.0")
  std::string git_commit;        // the commit the binary was built from, or "unknown" (no git)
  bool git_dirty = false;        // tracked files differed from that commit at build time
  std::string describe() const;  // "kvevict 0.1.0 (commit 1a2b3c..., modified)"
};
const BuildInfo& build_info();

// SHA-256 (FIPS 180-4) of bytes / of a file's contents, as 64 lowercase hex digits. The file is
// read in chunks; an unreadable file throws naming its path.
std::string sha256_hex(const std::string& bytes);
std::string file_sha256(const std::string& path);

// The current time in UTC, ISO 8601 to the second ("2026-12-01T17:49:49Z").
std::string utc_timestamp();

// This process's command line, shell-quoted where a word needs it (Linux: /proc/self/cmdline);
// "" where it cannot be read.
std::string process_command_line();

// Fills meta's provenance fields: build info, command line, date, device (ModelRuntime::
// describe()), and the model path with its SHA-256 (an empty path: a model without a file).
void fill_provenance(RunMeta& meta, const std::string& model_path, const std::string& device);

}  // namespace kvevict::eval
