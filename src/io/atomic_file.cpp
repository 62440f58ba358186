#include "kvevict/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/input_file.h"
#include "kvevict/error.h"

namespace kvevict::io {
namespace {

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

[[noreturn]] void refuse_kind(const std::string& label, const std::string& path, const char* kind,
                              const char* how = "") {
  KVEVICT_FAIL(label, ": ", path, " is ", how, "a ", kind,
               "; expected a regular file or a new file's path (kvevict never replaces a "
               "directory, device, FIFO or socket with its output)");
}

void check_directory(const std::string& label, const std::string& path, const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int e = errno;
    KVEVICT_CHECK(e != ENOENT && e != ENOTDIR, label, ": directory ", dir, " of ", path,
                  " does not exist; expected an existing directory (create it first)");
    KVEVICT_FAIL(label, ": cannot use directory ", dir, " of ", path, " (", std::strerror(e), ")");
  }
  KVEVICT_CHECK(S_ISDIR(st.st_mode), label, ": ", dir, " (the directory part of ", path, ") is a ",
                file_type_name(st.st_mode), "; expected a directory");
  KVEVICT_CHECK(::access(dir.c_str(), W_OK) == 0, label, ": directory ", dir, " of ", path,
                " is not writable (", std::strerror(errno), ")");
}

// Writes every part to fd; false with errno set on failure (EINTR and short writes retried).
bool write_all(int fd, std::initializer_list<ByteSpan> parts) {
  for (const ByteSpan& p : parts) {
    const auto* b = static_cast<const char*>(p.data);
    size_t left = p.size;
    while (left > 0) {
      const ssize_t w = ::write(fd, b, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = EIO;
        return false;
      }
      b += w;
      left -= static_cast<size_t>(w);
    }
  }
  return true;
}

std::string identity(const std::string& target) {
  std::error_code ec;
  const auto p = std::filesystem::weakly_canonical(target, ec);
  return ec ? target : p.string();
}

}  // namespace

std::string check_output_path(const std::string& path, const std::string& label) {
  KVEVICT_CHECK(!path.empty(), label, ": the output path is empty; expected a file name");
  // Many tools read "-" as standard output; writing a file named "-" would surprise the caller.
  KVEVICT_CHECK(path != "-", label,
                " -: standard output is not an output file here; expected a file path (--json "
                "prints to standard output)");
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0) {
    const int e = errno;
    KVEVICT_CHECK(e == ENOENT || e == ENOTDIR, label, ": cannot use ", path, " (", std::strerror(e),
                  "); expected a writable file path");
    check_directory(label, path, parent_dir(path));
    return path;
  }
  std::string target = path;
  struct stat st = lst;
  if (S_ISLNK(lst.st_mode)) {
    KVEVICT_CHECK(::stat(path.c_str(), &st) == 0, label, ": ", path,
                  " is a symbolic link to a missing file (", std::strerror(errno),
                  "); expected a regular file or a new file's path");
    if (!S_ISREG(st.st_mode)) refuse_kind(label, path, file_type_name(st.st_mode), "a link to ");
    char resolved[PATH_MAX];
    KVEVICT_CHECK(::realpath(path.c_str(), resolved) != nullptr, label, ": cannot resolve ", path,
                  " (", std::strerror(errno), ")");
    target = resolved;
  } else if (!S_ISREG(st.st_mode)) {
    refuse_kind(label, path, file_type_name(st.st_mode));
  }
  // A read-only file is not replaced either: renaming over it needs only the directory's write
  // permission, so without this check the atomic writer would replace a file its owner (or
  // anyone, for mode 0444 even as root) marked unwritable.
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  KVEVICT_CHECK((st.st_mode & 0222) != 0 && ::access(target.c_str(), W_OK) == 0, label, ": ", path,
                " is a read-only file (mode ", mode,
                "); expected a writable file or a new file's "
                "path (kvevict does not replace a file marked unwritable)");
  check_directory(label, path, parent_dir(target));
  return target;
}

StagedFiles::~StagedFiles() {
  for (const Entry& e : entries_)
    if (!e.temp.empty()) ::unlink(e.temp.c_str());
}

void StagedFiles::add(const std::string& path, const std::string& label,
                      std::initializer_list<ByteSpan> parts) {
  KVEVICT_CHECK(!committed_, label, ": the set of outputs was already committed");
  Entry e;
  e.path = path;
  e.label = label;
  e.target = check_output_path(path, label);
  const std::string id = identity(e.target);
  for (const Entry& other : entries_)
    KVEVICT_CHECK(identity(other.target) != id, label, ": ", path, " is also the file of ",
                  other.label, "; expected a different file for each output");
  // The mode of the file being replaced, else the default 0666 & ~umask (applied by open()).
  struct stat old {};
  const bool replacing = ::stat(e.target.c_str(), &old) == 0;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    e.temp = e.target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(attempt);
    fd = ::open(e.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  KVEVICT_CHECK(fd >= 0, label, ": cannot create ", e.temp, " (", std::strerror(errno),
                "); expected a writable path");
  int err = 0;
  if (replacing && ::fchmod(fd, old.st_mode & 07777) != 0) err = errno;
  if (err == 0 && !write_all(fd, parts)) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;  // NFS and quotas report late
  if (err != 0) {
    ::unlink(e.temp.c_str());
    KVEVICT_FAIL(label, ": write failed (", std::strerror(err), "); nothing was written");
  }
  entries_.push_back(std::move(e));
}

const std::string& StagedFiles::staged_path(const std::string& path) const {
  for (const Entry& e : entries_)
    if (e.path == path) return e.temp;
  KVEVICT_FAIL("no staged output for ", path);
}

void StagedFiles::commit() {
  KVEVICT_CHECK(!committed_, "the set of outputs was already committed");
  for (Entry& e : entries_) {
    // The path may have changed since add(): never rename over a non-regular file.
    struct stat st {};
    if (::lstat(e.target.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      refuse_kind(e.label, e.target, file_type_name(st.st_mode));
    if (::rename(e.temp.c_str(), e.target.c_str()) != 0)
      KVEVICT_FAIL(e.label, ": cannot move the finished file into place at ", e.target, " (",
                   std::strerror(errno), ")");
    e.temp.clear();
  }
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::string& label,
                           std::initializer_list<ByteSpan> parts) {
  StagedFiles files;
  files.add(path, label, parts);
  files.commit();
}

}  // namespace kvevict::io
