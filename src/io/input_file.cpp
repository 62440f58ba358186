#include "io/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "kvevict/error.h"

namespace kvevict::io {
namespace {

struct stat stat_input(const std::string& path, const std::string& label) {
  KVEVICT_CHECK(!path.empty(), label, ": the path is empty; expected a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    KVEVICT_CHECK(e != ENOENT && e != ENOTDIR, label, " ", path,
                  ": does not exist; expected an existing file");
    KVEVICT_FAIL(label, " ", path, ": cannot open (", std::strerror(e), ")");
  }
  KVEVICT_CHECK(!S_ISDIR(st.st_mode), label, " ", path, ": is a directory; expected a file");
  return st;
}

}  // namespace

const char* file_type_name(unsigned mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symbolic link";
  return "special file";
}

uint64_t check_input_file(const std::string& path, const std::string& label) {
  const struct stat st = stat_input(path, label);
  KVEVICT_CHECK(S_ISREG(st.st_mode), label, " ", path, ": is a ", file_type_name(st.st_mode),
                "; expected a regular file");
  return static_cast<uint64_t>(st.st_size);
}

std::string read_text_input(const std::string& path, const std::string& label, uint64_t max_bytes) {
  const struct stat st = stat_input(path, label);
  const bool regular = S_ISREG(st.st_mode);
  KVEVICT_CHECK(regular || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode), label, " ", path, ": is a ",
                file_type_name(st.st_mode), "; expected a file (or a pipe)");
  if (regular)
    KVEVICT_CHECK(static_cast<uint64_t>(st.st_size) <= max_bytes, label, " ", path, ": its ",
                  st.st_size, " bytes exceed the limit of ", max_bytes, " bytes");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  KVEVICT_CHECK(f != nullptr, label, " ", path, ": cannot open (", std::strerror(errno), ")");
  std::string text;
  char buf[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    text.append(buf, got);
    KVEVICT_CHECK(text.size() <= max_bytes, label, " ", path, ": more than the limit of ",
                  max_bytes, " bytes");
  }
  KVEVICT_CHECK(!std::ferror(f.get()), label, " ", path, ": read failed (", std::strerror(errno),
                ")");
  return text;
}

}  // namespace kvevict::io
