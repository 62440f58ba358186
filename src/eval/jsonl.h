// External evaluation sets as JSONL, one sample a line (SPEC section 7):
//   {"context": str, "question": str, "answer_prefix": str, "answers": [str, ...],
//    "max_new_tokens": int, "task": str}
// Parsing is strict: every field above must be present with that type, answers a non-empty list
// of non-empty strings (an empty answer is found in every prediction: every method would score
// 100) and max_new_tokens positive; errors name the file, line, field and expected type. Other
// fields are ignored (datasets often carry ids or lengths). Blank lines are skipped.
//
// Size limit: a reader given max_text_bytes > 0 refuses a row whose prompt text (context +
// question + answer_prefix) is longer, and refuses a line longer than the most JSON that text
// can take (6 bytes per byte, "\u0041" for "A", plus 64 KiB for keys and answers) before
// parsing it, reading on only to measure it. So a 100 MB context line is refused in the time it
// takes to read it once, never tokenized (issue 13: it was, for minutes and 5.6 GB).
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "eval/sample.h"

namespace kvevict::eval {

// What limits a row: at most max_text_bytes of prompt text (0 = no limit), because of `why`
// (e.g. "the 8192-token context of SmolLM2 at <= 16 bytes a token"), which the error repeats.
struct JsonlLimits {
  uint64_t max_text_bytes = 0;
  std::string why;
};

// Samples in file order, each with `origin` = "<source> line N"; `input` is left empty
// (format_prompt fills it for the model at hand).
std::vector<Sample> read_jsonl_samples(std::istream& in, const std::string& source_name,
                                       const JsonlLimits& limits = {});
std::vector<Sample> read_jsonl_samples(const std::string& path, const JsonlLimits& limits = {});

// One line of JSON for a sample, in the same format (round-trips through the reader). Generated
// RULER sets can be saved with it and fed to other tools.
std::string sample_to_jsonl(const Sample& s);
// Writes samples one a line (e.g. a generated RULER set, to rerun or share); throws naming the
// path.
void write_jsonl_samples(const std::string& path, const std::vector<Sample>& samples);

}  // namespace kvevict::eval
