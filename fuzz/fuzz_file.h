// The readers take paths (GGUF is memory-mapped), so fuzz inputs go through an in-memory file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvevict::fuzz {

// Holds `data` in an anonymous in-memory file; path() names it (/proc/self/fd/N).
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size, const char* suffix = "");
  ~MemFile();
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace kvevict::fuzz
