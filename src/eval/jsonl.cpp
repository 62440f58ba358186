#include "kvevict/eval/jsonl.h"

#include <fstream>
#include <nlohmann/json.hpp>

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

}  // namespace

std::vector<Sample> read_jsonl_samples(std::istream& in, const std::string& source) {
  std::vector<Sample> out;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = source + " line " + std::to_string(line_no);
    json row;
    try {
      row = json::parse(line);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
      KVEVICT_FAIL(where, ": not valid JSON (", e.what(), "); expected one JSON object a line");
    }
    KVEVICT_CHECK(row.is_object(), where, ": the row is ", type_name(row),
                  "; expected a JSON object");
    Sample s;
    s.context = string_field(row, "context", where);
    s.question = string_field(row, "question", where);
    s.answer_prefix = string_field(row, "answer_prefix", where);
    s.task = string_field(row, "task", where);
    const json& answers = field(row, "answers", where, "an array of strings");
    KVEVICT_CHECK(answers.is_array(), where, ": field 'answers' is ", type_name(answers),
                  "; expected an array of strings");
    KVEVICT_CHECK(!answers.empty(), where, ": field 'answers' is an empty array",
                  "; expected at least one string");
    for (size_t i = 0; i < answers.size(); ++i) {
      KVEVICT_CHECK(answers[i].is_string(), where, ": field 'answers' element ", i, " is ",
                    type_name(answers[i]), "; expected a string");
      s.answers.push_back(answers[i].get<std::string>());
    }
    const json& mnt = field(row, "max_new_tokens", where, "a positive integer");
    KVEVICT_CHECK(mnt.is_number_integer(), where, ": field 'max_new_tokens' is ", type_name(mnt),
                  "; expected a positive integer");
    const int64_t n = mnt.get<int64_t>();
    KVEVICT_CHECK(n > 0 && n <= (1 << 20), where, ": field 'max_new_tokens' is ", n,
                  "; expected a positive integer up to 1048576");
    s.max_new_tokens = static_cast<int>(n);
    out.push_back(std::move(s));
  }
  KVEVICT_CHECK(!out.empty(), source, " holds no samples; expected one JSON object a line");
  return out;
}

std::vector<Sample> read_jsonl_samples(const std::string& path) {
  std::ifstream in(path);
  KVEVICT_CHECK(in.good(), "dataset file '", path, "' cannot be opened; expected a JSONL file");
  return read_jsonl_samples(in, path);
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
