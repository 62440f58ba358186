// Output options (--out, --keep, --markdown, --plots, capture's --dir) checked before any work:
// every path must pass the output-path policy of kvevict/io/atomic_file.h (a regular file or a
// new file in an existing, writable directory; never a device, directory, FIFO or socket), and
// no two options may name one file. A bad output path then costs milliseconds, not a prefill.
#pragma once

#include <initializer_list>
#include <string>

namespace kvevict::cli {

struct OutputArg {
  const std::string& path;  // empty = the option was not given
  const char* flag;
};

void check_output_args(std::initializer_list<OutputArg> outputs);

// A command's report: the JSON to `out` (--out) and the markdown to `markdown` (--markdown), both
// or neither (an empty path skips that file), then one of them on stdout (print_json: the JSON).
void write_report(const std::string& out, const std::string& markdown, const std::string& json,
                  const std::string& md, bool print_json);

// A directory to write several files into (--plots, capture --dir): an existing directory, or
// a new one whose parent exists; throws naming the flag and what is in the way.
void check_output_dir(const std::string& dir, const char* flag);

}  // namespace kvevict::cli
