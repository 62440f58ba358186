// External evaluation sets as JSONL, one sample a line (SPEC section 7):
//   {"context": str, "question": str, "answer_prefix": str, "answers": [str, ...],
//    "max_new_tokens": int, "task": str}
// Parsing is strict: every field above must be present with that type, answers non-empty and
// max_new_tokens positive; errors name the file, line, field and expected type. Other fields are
// ignored (datasets often carry ids or lengths). Blank lines are skipped.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "kvevict/eval/sample.h"

namespace kvevict::eval {

// Samples in file order; `input` is left empty (format_prompt fills it for the model at hand).
std::vector<Sample> read_jsonl_samples(std::istream& in, const std::string& source_name);
std::vector<Sample> read_jsonl_samples(const std::string& path);

// One line of JSON for a sample, in the same format (round-trips through the reader). Generated
// RULER sets can be saved with it and fed to other tools.
std::string sample_to_jsonl(const Sample& s);
// Writes samples one a line (e.g. a generated RULER set, to rerun or share); throws naming the
// path.
void write_jsonl_samples(const std::string& path, const std::vector<Sample>& samples);

}  // namespace kvevict::eval
