#include "eval/jsonl.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "io/input_file.h"
#include "io/json_parse.h"
#include "kvevict/error.h"

namespace kvevict::eval {

namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

const json& field(const json& row, const char* name, const std::string& where,
                  const char* expected) {
  auto it = row.find(name);
  KVEVICT_CHECK(it != row.end(), where, ": field '", name, "' is missing; expected ", expected);
  return *it;
}

std::string string_field(const json& row, const char* name, const std::string& where) {
  const json& v = field(row, name, where, "a string");
  KVEVICT_CHECK(v.is_string(), where, ": field '", name, "' is ", type_name(v),
                "; expected a string");
  return v.get<std::string>();
}

// JSON spells any byte in at most 6 ("\u0041"); keys, answers and the rest take the slack.
constexpr uint64_t kJsonBytesPerTextByte = 6;
constexpr uint64_t kJsonSlackBytes = 64 << 10;

// Lines of a stream, read in 64 KiB blocks (a 100 MB line is scanned with memchr, not a byte at
// a time), keeping at most `keep` bytes of each line while measuring its full length.
class LineReader {
 public:
  explicit LineReader(std::istream& in) : in_(in) {}
  // The next line (without '\n') in `line`, cut to `keep` bytes; returns its full length, or -1
  // at the end of the input with nothing read.
  int64_t next(std::string& line, uint64_t keep) {
    line.clear();
    int64_t len = 0;
    bool any = false;
    while (true) {
      if (pos_ == end_ && !refill()) return any ? len : -1;
      any = true;
      const char* start = buf_ + pos_;
      const void* nl = std::memchr(start, '\n', end_ - pos_);
      const size_t n = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : end_ - pos_;
      const uint64_t room = keep > line.size() ? keep - line.size() : 0;
      line.append(start, std::min<uint64_t>(n, room));
      len += static_cast<int64_t>(n);
      pos_ += n;
      if (nl) {
        ++pos_;
        return len;
      }
    }
  }

 private:
  bool refill() {
    in_.read(buf_, sizeof buf_);
    pos_ = 0;
    end_ = static_cast<size_t>(in_.gcount());
    return end_ > 0;
  }
  std::istream& in_;
  char buf_[1 << 16];
  size_t pos_ = 0, end_ = 0;
};

}  // namespace

std::vector<Sample> read_jsonl_samples(std::istream& in, const std::string& source,
                                       const JsonlLimits& limits) {
  const uint64_t max_line = limits.max_text_bytes == 0
                                ? std::numeric_limits<uint64_t>::max()
                                : limits.max_text_bytes * kJsonBytesPerTextByte + kJsonSlackBytes;
  std::vector<Sample> out;
  std::string line;
  int64_t line_no = 0;
  auto reader = std::make_unique<LineReader>(in);
  for (int64_t len; (len = reader->next(line, max_line)) >= 0;) {
    ++line_no;
    const std::string where = source + " line " + std::to_string(line_no);
    KVEVICT_CHECK(static_cast<uint64_t>(len) <= max_line, where, ": the row is ", len,
                  " bytes, more than any prompt that fits can take in JSON (", max_line,
                  " bytes: ", limits.max_text_bytes, " bytes of text, ", limits.why,
                  "); expected a shorter row");
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const json row = io::parse_json(line, where);  // one JSON object a line
    KVEVICT_CHECK(row.is_object(), where, ": the row is ", type_name(row),
                  "; expected a JSON object");
    Sample s;
    s.context = string_field(row, "context", where);
    s.question = string_field(row, "question", where);
    s.answer_prefix = string_field(row, "answer_prefix", where);
    s.task = string_field(row, "task", where);
    // The task names a column of the results tables and a key of merged runs.
    KVEVICT_CHECK(!s.task.empty() && s.task != "average", where, ": field 'task' is '", s.task,
                  "'; expected a task name (not empty, and not 'average': the results name the "
                  "mean over tasks so)");
    const json& answers = field(row, "answers", where, "an array of strings");
    KVEVICT_CHECK(answers.is_array(), where, ": field 'answers' is ", type_name(answers),
                  "; expected an array of strings");
    KVEVICT_CHECK(!answers.empty(), where, ": field 'answers' is an empty array",
                  "; expected at least one string");
    for (size_t i = 0; i < answers.size(); ++i) {
      KVEVICT_CHECK(answers[i].is_string(), where, ": field 'answers' element ", i, " is ",
                    type_name(answers[i]), "; expected a string");
      s.answers.push_back(answers[i].get<std::string>());
      KVEVICT_CHECK(!s.answers.back().empty(), where, ": field 'answers' element ", i,
                    " is the empty string; expected a non-empty answer (an empty one is found in ",
                    "every prediction, so every method would score 100)");
    }
    const json& mnt = field(row, "max_new_tokens", where, "a positive integer");
    KVEVICT_CHECK(mnt.is_number_integer(), where, ": field 'max_new_tokens' is ", type_name(mnt),
                  "; expected a positive integer");
    const int64_t n = mnt.get<int64_t>();
    KVEVICT_CHECK(n > 0 && n <= (1 << 20), where, ": field 'max_new_tokens' is ", n,
                  "; expected a positive integer up to 1048576");
    s.max_new_tokens = static_cast<int>(n);
    const uint64_t text_bytes = s.context.size() + s.question.size() + s.answer_prefix.size();
    KVEVICT_CHECK(limits.max_text_bytes == 0 || text_bytes <= limits.max_text_bytes, where,
                  ": the prompt (context + question + answer_prefix) is ", text_bytes,
                  " bytes; expected at most ", limits.max_text_bytes, " (", limits.why, ")");
    s.origin = where;
    out.push_back(std::move(s));
  }
  KVEVICT_CHECK(!out.empty(), source, " holds no samples; expected one JSON object a line");
  return out;
}

std::vector<Sample> read_jsonl_samples(const std::string& path, const JsonlLimits& limits) {
  io::check_input_file(path, "dataset");  // a directory is refused, not read as an empty file
  std::ifstream in(path, std::ios::binary);
  KVEVICT_CHECK(in.good(), "dataset file '", path, "' cannot be opened; expected a JSONL file");
  return read_jsonl_samples(in, path, limits);
}

std::string sample_to_jsonl(const Sample& s) {
  json row = {{"context", s.context},
              {"question", s.question},
              {"answer_prefix", s.answer_prefix},
              {"answers", s.answers},
              {"max_new_tokens", s.max_new_tokens},
              {"task", s.task}};
  return row.dump(-1, ' ', false, json::error_handler_t::replace);
}

void write_jsonl_samples(const std::string& path, const std::vector<Sample>& samples) {
  std::ofstream out(path, std::ios::binary);
  KVEVICT_CHECK(out.good(), "cannot open '", path, "' for writing; expected a writable path");
  for (const auto& s : samples) out << sample_to_jsonl(s) << '\n';
  out.flush();
  KVEVICT_CHECK(out.good(), "writing ", samples.size(), " samples to '", path, "' failed");
}

}  // namespace kvevict::eval
