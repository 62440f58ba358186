// Whole-file writes that never leave a partial file behind.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace kvevict::io {

// One contiguous run of bytes to write.
struct ByteSpan {
  const void* data;
  size_t size;
};

// Writes `parts` in order to "<path>.tmp.<pid>" and renames it over `path` only when every byte is
// on disk, so readers see the old file or the whole new one. On failure the temporary is removed
// and the call throws "<label>: write failed (<reason>); nothing was written".
void write_file_atomically(const std::string& path, const std::string& label,
                           std::initializer_list<ByteSpan> parts);

}  // namespace kvevict::io
