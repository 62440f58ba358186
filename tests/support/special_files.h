// Special files for the output-path and input-path tests, made inside the test's own temporary
// directory with mknod/mkfifo/bind (never the system's /dev nodes). Character and block devices
// need root with CAP_MKNOD (CI runs as root); a test skips, saying why, where they are refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::testing {

enum class SpecialKind {
  kNullDevice,   // a character device with /dev/null's numbers (1, 3): writes would succeed
  kFullDevice,   // a character device with /dev/full's numbers (1, 7): writes would fail
  kZeroDevice,   // a character device with /dev/zero's numbers (1, 5): endless reads
  kBlockDevice,  // a block device (7, 0), a loop device's numbers; never opened
  kFifo,
  kSocket,
  kDirectory,
  kDanglingLink,  // a symbolic link to a missing file
};
const char* special_kind_name(SpecialKind k);

// Makes `kind` at `path`; false with *why when the system refuses (mknod without the privilege,
// or a file system mounted nodev that refuses device nodes).
bool make_special(const std::string& path, SpecialKind kind, std::string* why);

// What is at a path, without following a final symbolic link, to check it was not touched.
struct FileState {
  bool exists = false;
  uint32_t mode = 0;  // st_mode: type and permissions
  uint64_t rdev = 0, ino = 0, size = 0;
  bool operator==(const FileState& o) const {
    return exists == o.exists && mode == o.mode && rdev == o.rdev && ino == o.ino && size == o.size;
  }
  bool operator!=(const FileState& o) const { return !(*this == o); }
};
FileState file_state(const std::string& path);

// The entries of a directory, sorted (to check that no temporary or partial file was left).
std::vector<std::string> list_dir(const std::string& dir);

}  // namespace kvevict::testing
