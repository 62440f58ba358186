// Whole-file writes that never leave a partial file behind and never replace anything but a
// regular file.
//
// Output-path policy (issue 13). An output path must name a regular file, or nothing yet in an
// existing, writable directory. Anything else there -- a directory, a character or block device
// (/dev/null, /dev/full), a FIFO, a socket, a dangling symbolic link -- is REFUSED with an error
// naming the path and what it is, before a byte is written. Devices are refused, not written in
// place, because:
//   - the writer's guarantee (readers see the old file or the whole new one) needs a temporary
//     file renamed over the path, and a rename over a device node replaces the node itself with
//     a regular file (the destructive write of issue 13: `--out /dev/full` as root turned
//     /dev/full into a file);
//   - writing in place would give up that guarantee, and the one useful device, /dev/null,
//     means "no output", which every command spells by leaving the option out.
// A symbolic link to a regular file is followed: its target is replaced and the link stays.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace kvevict::io {

// One contiguous run of bytes to write.
struct ByteSpan {
  const void* data;
  size_t size;
};

// Checks `path` against the policy above and returns the file that will be replaced or created
// (the path itself, or a symbolic link's target). Throws "<label>: <path> is a <kind>; ..." or
// "<label>: directory <dir> does not exist" otherwise. Commands call it for every output before
// any work, so a bad output path costs milliseconds, not a prefill.
std::string check_output_path(const std::string& path, const std::string& label);

// A set of output files written all or none. add() checks the path, then writes the whole file
// to a fresh temporary next to it ("<path>.tmp.XXXXXX", the mode of the file it replaces, else
// 0666 & ~umask) and fsyncs it; commit() renames every temporary into place, re-checking each
// path just before its rename. An uncommitted set removes its temporaries when destroyed, so a
// failure while staging any file (disk full, a late bad path) leaves every destination as it
// was. Only a rename failing during commit() (after the checks passed, in the same directory)
// can leave the files renamed before it in place; commit() then throws naming the one that failed.
class StagedFiles {
 public:
  StagedFiles() = default;
  ~StagedFiles();
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;

  // Throws "<label>: write failed (<reason>); nothing was written", or when `path` resolves to
  // a file already staged in this set (two options naming one file).
  void add(const std::string& path, const std::string& label,
           std::initializer_list<ByteSpan> parts);
  // The temporary holding `path`'s staged bytes (for a tool that reads them before commit()).
  const std::string& staged_path(const std::string& path) const;
  void commit();

 private:
  struct Entry {
    std::string path, target, temp, label;
  };
  std::vector<Entry> entries_;
  bool committed_ = false;
};

// One file, all or nothing: a StagedFiles of one entry, committed at once.
void write_file_atomically(const std::string& path, const std::string& label,
                           std::initializer_list<ByteSpan> parts);

}  // namespace kvevict::io
