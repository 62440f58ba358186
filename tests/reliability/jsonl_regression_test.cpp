// Inputs the fuzzers found that broke the JSONL dataset reader, kept as regression tests.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "eval/jsonl.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

// Reads `text` and returns the kvevict::Error message; fails the test if it parses or if
// anything other than kvevict::Error escapes (which would end the CLI with an uncaught exception).
std::string reader_error(const std::string& text) {
  std::istringstream in(text);
  try {
    read_jsonl_samples(in, "fuzz.jsonl");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a non-kvevict exception escaped: " << e.what();
    return "";
  }
  ADD_FAILURE() << "'" << text << "' parsed; expected an error";
  return "";
}

// jsonl_fuzzer crash c61a3010: a number beyond double range makes nlohmann::json throw
// out_of_range (not parse_error), which the reader did not catch.
TEST(JsonlRegression, NumberOutOfRangeIsAnError) {
  for (const std::string text : {"28e8490\n", "{\"max_new_tokens\": 1e999}\n", "-1e400"}) {
    const std::string msg = reader_error(text);
    EXPECT_NE(msg.find("fuzz.jsonl line 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvevict::eval
