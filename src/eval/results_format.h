// What every kvevict results file shares (eval, ppl, analyze -m; docs/EVAL.md "Results files"):
// the "meta" section that makes a file describe itself (provenance, options, bootstrap) written
// and read back, its markdown header lines, the rule for which runs may be merged, typed field
// access that names the file, the place and the field on any mismatch, and unknown numbers as
// null. report.cpp, results_read.cpp, ppl_report.cpp and `kvevict analyze -m` use it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "eval/runner.h"
#include "kvevict/error.h"

namespace kvevict::eval {

// A number that is unknown or not finite (an interval of one sample) as null, never a string.
nlohmann::json finite_or_null(double x);

// A results file's text as a JSON document whose "kind" is "kvevict-results"; throws naming
// `label` when it is not valid JSON or not a kvevict results file.
nlohmann::json parse_results_json(const std::string& text, const std::string& label);

// The "meta" object of a results file, and read back from a document's "meta" (every field
// checked; throws naming `label` and the field).
nlohmann::json meta_to_json(const RunMeta& meta);
RunMeta meta_from_json(const nlohmann::json& doc, const std::string& label);

// The header lines every markdown report starts with: model, model file and sha256, device,
// kvevict version and commit, date, command line (the ones that are known).
void write_meta_markdown(std::ostream& md, const RunMeta& meta);

// Two runs' numbers can be merged only when they come from the same model file, build, device,
// base seed and bootstrap; throws naming both files and the field that differs.
void check_mergeable(const RunMeta& first, const std::string& first_label, const RunMeta& other,
                     const std::string& other_label);

// Typed access to an object's fields that names the file, the place and the field on any
// mismatch ("results.json records[3]: 'score' is string; expected a number").
class JsonReader {
 public:
  JsonReader(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
    KVEVICT_CHECK(obj_.is_object(), where_, " is ", obj_.type_name(), "; expected an object");
  }
  const nlohmann::json& field(const char* key) const {
    auto it = obj_.find(key);
    KVEVICT_CHECK(it != obj_.end(), where_, ": field '", key, "' is missing");
    return *it;
  }
  std::string str(const char* key) const {
    const nlohmann::json& v = field(key);
    KVEVICT_CHECK(v.is_string(), where_, ": '", key, "' is ", v.type_name(), "; expected a string");
    return v.get<std::string>();
  }
  bool boolean(const char* key) const {
    const nlohmann::json& v = field(key);
    KVEVICT_CHECK(v.is_boolean(), where_, ": '", key, "' is ", v.type_name(),
                  "; expected true or false");
    return v.get<bool>();
  }
  int64_t integer(const char* key) const {
    const nlohmann::json& v = field(key);
    KVEVICT_CHECK(v.is_number_integer(), where_, ": '", key, "' is ", v.dump(),
                  "; expected an integer");
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const char* key) const {
    const nlohmann::json& v = field(key);
    KVEVICT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                  where_, ": '", key, "' is ", v.dump(), "; expected a non-negative integer");
    return v.get<uint64_t>();
  }
  double number(const char* key) const {
    const nlohmann::json& v = field(key);
    KVEVICT_CHECK(v.is_number(), where_, ": '", key, "' is ", v.type_name(), "; expected a number");
    return v.get<double>();
  }
  // A number written as null when it was not reported (results_to_json's `reported`): -1.
  double reported(const char* key) const { return field(key).is_null() ? -1.0 : number(key); }
  int64_t reported_integer(const char* key) const {
    return field(key).is_null() ? -1 : integer(key);
  }
  std::vector<std::string> strings(const char* key) const {
    const nlohmann::json& v = field(key);
    KVEVICT_CHECK(v.is_array(), where_, ": '", key, "' is ", v.type_name(),
                  "; expected an array of strings");
    std::vector<std::string> out;
    for (const nlohmann::json& e : v) {
      KVEVICT_CHECK(e.is_string(), where_, ": an element of '", key, "' is ", e.type_name(),
                    "; expected a string");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace kvevict::eval
