#include "fuzz_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

namespace kvevict::fuzz {

MemFile::MemFile(const uint8_t* data, size_t size, const char* suffix) {
  fd_ = memfd_create("kvevict_fuzz", 0);
  if (fd_ < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t w = write(fd_, data + done, size - done);
    if (w <= 0) std::abort();
    done += static_cast<size_t>(w);
  }
  path_ = "/proc/self/fd/" + std::to_string(fd_);
  (void)suffix;
}

MemFile::~MemFile() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace kvevict::fuzz
