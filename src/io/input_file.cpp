#include "io/input_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "kvevict/error.h"

namespace kvevict::io {
namespace {

// How long a text input that is a FIFO may wait for its writer to open it.
constexpr int kFifoWriterWaitMs = 10000;

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
  // A FIFO is opened without blocking: open() on a named FIFO waits until a writer opens it,
  // which for a FIFO nobody writes is forever. Then poll() waits a bounded time for a writer (one
  // started beside kvevict, or <(command), opens it within milliseconds) and the reads block
  // again; a FIFO no process opens is refused by name instead of hanging.
  const bool fifo = S_ISFIFO(st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
  KVEVICT_CHECK(fd >= 0, label, " ", path, ": cannot open (", std::strerror(errno), ")");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(::fdopen(fd, "rb"), &std::fclose);
  if (f == nullptr) ::close(fd);
  KVEVICT_CHECK(f != nullptr, label, " ", path, ": cannot open (", std::strerror(errno), ")");
  if (fifo) {
    // Linux reports neither POLLIN nor POLLHUP on a FIFO before its first writer opens it.
    struct pollfd p {};
    p.fd = fd;
    p.events = POLLIN;
    int ready = 0;
    do {
      ready = ::poll(&p, 1, kFifoWriterWaitMs);
    } while (ready < 0 && errno == EINTR);
    KVEVICT_CHECK(ready > 0, label, " ", path, ": is a FIFO that no process opened for writing ",
                  "within ", kFifoWriterWaitMs / 1000,
                  " s; expected a pipe being written (e.g. <(command)) or a regular file");
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  }
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
