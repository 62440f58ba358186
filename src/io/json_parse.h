// JSON from files a user hands kvevict (safetensors headers, JSONL datasets, results files, the
// demo's results table), parsed with two limits nlohmann::json does not have:
//   - nesting depth: nlohmann parses deep input iteratively, but dump() and the recursive walks
//     of a document are recursive, so a header of 200000 '[' crashed kvevict (stack overflow)
//     when an error message printed the entry; no file kvevict reads nests deeper than a few
//     levels;
//   - duplicate keys: nlohmann keeps the last of {"answers": ["a"], "answers": ["b"]} without a
//     word, so a row or a tensor entry meant something other than what half of it says.
// Either is a kvevict::Error naming `what` (the file and line) and the offending key or depth.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "kvevict/error.h"

namespace kvevict::io {

// Deeper than any JSON kvevict writes or reads (results files nest 4 levels), far below what
// overflows the stack.
constexpr int kMaxJsonDepth = 64;

// Parses `text`; throws kvevict::Error "<what>: ..." for invalid JSON (nlohmann's message),
// nesting deeper than kMaxJsonDepth, or a key repeated within one object.
inline nlohmann::json parse_json(const std::string& text, const std::string& what) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object
  std::string error;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (!error.empty()) return false;
    switch (event) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          error = "key '" + parsed.get<std::string>() +
                  "' appears twice in one object; expected each key once";
        break;
      default: break;
    }
    if (error.empty() && depth > kMaxJsonDepth)
      error = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
              " levels; expected a flat document";
    return error.empty();
  };
  json doc;
  try {
    doc = json::parse(text, check);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    if (error.empty()) KVEVICT_FAIL(what, ": not valid JSON (", e.what(), ")");
  }
  KVEVICT_CHECK(error.empty(), what, ": ", error);
  return doc;
}

}  // namespace kvevict::io
