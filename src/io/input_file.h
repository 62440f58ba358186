// What an input path must be before a reader opens it. std::ifstream opens a directory without
// complaint (and then reports its size as 9223372036854775807 bytes), and open() on a FIFO blocks
// until a writer appears; so every reader checks the path first and says what it found.
#pragma once

#include <cstdint>
#include <string>

namespace kvevict::io {

// The size of the regular file at `path`; throws "<label> <path>: is a directory; expected a
// file", "... does not exist", "... is a FIFO", etc. Binary formats (GGUF, .npy, .safetensors)
// are sized and mapped, so they must be regular files.
uint64_t check_input_file(const std::string& path, const std::string& label);

// A whole text input of at most max_bytes (a prompt file, a dataset): a regular file is sized
// first, so one that is too large is refused before a byte is read; a FIFO or character device
// (/dev/stdin, a pipe) is read up to max_bytes + 1 bytes, so /dev/zero can neither hang nor
// exhaust memory. Throws "<label> <path>: ... bytes exceeds the limit of <max_bytes> bytes". A
// named FIFO waits at most 10 s for a writer to open it: one that nobody opens is refused by
// name ("no process opened it for writing within 10 s") instead of blocking forever.
std::string read_text_input(const std::string& path, const std::string& label, uint64_t max_bytes);

// "regular file", "directory", "character device", "block device", "FIFO", "socket",
// "symbolic link" or "special file", for a stat() st_mode.
const char* file_type_name(unsigned mode);

}  // namespace kvevict::io
