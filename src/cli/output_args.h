// Output options (--out, --keep, --markdown, --plots, capture's --dir) checked before any work:
// every path must pass the output-path policy of kvevict/io/atomic_file.h (a regular file or a
// new file in an existing, writable directory; never a device, directory, FIFO or socket), and
// no two options may name one file. A bad output path then costs milliseconds, not a prefill.
#pragma once

#include <string>
#include <vector>

namespace kvevict::cli {

struct OutputArg {
  const std::string& path;  // empty = the option was not given
  const char* flag;
};
// An input the command reads (a tensor, dataset, model or results file), by the same shape.
using InputArg = OutputArg;

// Every output passes the policy, no two outputs name one file, and no output is one of the
// `inputs` (the same file by device and inode: a path, ./path, a hard or symbolic link):
// `score --out k.npy --k k.npy` replaced the keys with the scores, `eval --out data.jsonl`
// the dataset, `merge a.json b.json --out a.json` a run. Inputs that do not exist are skipped
// (their readers say so).
void check_output_args(const std::vector<OutputArg>& outputs,
                       const std::vector<InputArg>& inputs = {});

// A command's report: the JSON to `out` (--out) and the markdown to `markdown` (--markdown), both
// or neither (an empty path skips that file), then one of them on stdout (print_json: the JSON).
void write_report(const std::string& out, const std::string& markdown, const std::string& json,
                  const std::string& md, bool print_json);

// A directory to write several files into (--plots, capture --dir): an existing directory, or
// a new one whose parent exists; throws naming the flag and what is in the way.
void check_output_dir(const std::string& dir, const char* flag);

}  // namespace kvevict::cli
