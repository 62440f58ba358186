#include "support/special_files.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvevict::testing {

const char* special_kind_name(SpecialKind k) {
  switch (k) {
    case SpecialKind::kNullDevice: return "character device (1, 3)";
    case SpecialKind::kFullDevice: return "character device (1, 7)";
    case SpecialKind::kZeroDevice: return "character device (1, 5)";
    case SpecialKind::kBlockDevice: return "block device (7, 0)";
    case SpecialKind::kFifo: return "FIFO";
    case SpecialKind::kSocket: return "socket";
    case SpecialKind::kDirectory: return "directory";
    case SpecialKind::kDanglingLink: return "dangling symbolic link";
  }
  return "?";
}

bool make_special(const std::string& path, SpecialKind kind, std::string* why) {
  int rc = 0;
  switch (kind) {
    case SpecialKind::kNullDevice: rc = ::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)); break;
    case SpecialKind::kFullDevice: rc = ::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 7)); break;
    case SpecialKind::kZeroDevice: rc = ::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 5)); break;
    case SpecialKind::kBlockDevice:
      rc = ::mknod(path.c_str(), S_IFBLK | 0600, makedev(7, 0));
      break;
    case SpecialKind::kFifo: rc = ::mkfifo(path.c_str(), 0666); break;
    case SpecialKind::kDirectory: rc = ::mkdir(path.c_str(), 0755); break;
    case SpecialKind::kDanglingLink:
      rc = ::symlink((path + ".missing").c_str(), path.c_str());
      break;
    case SpecialKind::kSocket: {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      if (path.size() >= sizeof addr.sun_path) {
        *why = "socket path too long: " + path;
        return false;
      }
      std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      rc = fd < 0 ? -1 : ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      const int e = errno;
      if (fd >= 0) ::close(fd);
      errno = e;
      break;
    }
  }
  if (rc != 0) {
    *why = std::string("cannot make a ") + special_kind_name(kind) + " at " + path + " (" +
           std::strerror(errno) + "; device nodes need root with CAP_MKNOD)";
    return false;
  }
  return true;
}

FileState file_state(const std::string& path) {
  FileState s;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.mode = st.st_mode;
  s.rdev = st.st_rdev;
  s.ino = st.st_ino;
  s.size = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  return s;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvevict::testing
