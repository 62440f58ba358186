#include "kvevict/io/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kvevict/error.h"

namespace kvevict::io {

void write_file_atomically(const std::string& path, const std::string& label,
                           std::initializer_list<ByteSpan> parts) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  KVEVICT_CHECK(f != nullptr, label, ": cannot create ", tmp, " (", std::strerror(errno),
                "); expected a writable path");
  bool ok = true;
  for (const ByteSpan& p : parts)
    ok = ok && (p.size == 0 || std::fwrite(p.data, 1, p.size, f) == p.size);
  ok = (std::fflush(f) == 0) && ok;
  const int write_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : write_errno;
    std::remove(tmp.c_str());
    KVEVICT_FAIL(label, ": write failed (", std::strerror(e), "); nothing was written");
  }
}

}  // namespace kvevict::io
