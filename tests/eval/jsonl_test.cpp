// The JSONL reader accepts the SPEC format and rejects malformed rows naming line, field and type.
#include "eval/jsonl.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

const char* kGood = R"({"context": "ctx one", "question": "q1?", "answer_prefix": " A:",)"
                    R"( "answers": ["x", "y"], "max_new_tokens": 32, "task": "qa_1", "extra": 5})";

std::string error_of(const std::string& text) {
  std::istringstream in(text);
  try {
    read_jsonl_samples(in, "set.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& msg, const std::vector<std::string>& parts) {
  ASSERT_FALSE(msg.empty()) << "expected the reader to throw";
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(Jsonl, ReadsRowsAndSkipsBlankLines) {
  std::istringstream in(std::string(kGood) + "\n\n   \n" + kGood + "\r\n");
  auto samples = read_jsonl_samples(in, "set.jsonl");
  ASSERT_EQ(samples.size(), 2u);
  const Sample& s = samples[0];
  EXPECT_EQ(s.context, "ctx one");
  EXPECT_EQ(s.question, "q1?");
  EXPECT_EQ(s.answer_prefix, " A:");
  EXPECT_EQ(s.answers, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(s.max_new_tokens, 32);
  EXPECT_EQ(s.task, "qa_1");
  EXPECT_TRUE(s.input.empty());
}

TEST(Jsonl, RoundTripsThroughTheWriter) {
  Sample s;
  s.context = "line one\nline \"two\" \xc3\xa9";
  s.question = "What?";
  s.answer_prefix = " Answer:";
  s.answers = {"a", "b c"};
  s.max_new_tokens = 7;
  s.task = "niah_single_2";
  std::istringstream in(sample_to_jsonl(s) + "\n");
  auto back = read_jsonl_samples(in, "mem");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].context, s.context);
  EXPECT_EQ(back[0].question, s.question);
  EXPECT_EQ(back[0].answer_prefix, s.answer_prefix);
  EXPECT_EQ(back[0].answers, s.answers);
  EXPECT_EQ(back[0].max_new_tokens, 7);
  EXPECT_EQ(back[0].task, s.task);
}

TEST(Jsonl, WritesAFileTheReaderReadsBack) {
  std::vector<Sample> set(3);
  for (int i = 0; i < 3; ++i) {
    set[i].context = "c" + std::to_string(i);
    set[i].question = "q";
    set[i].answers = {"a" + std::to_string(i)};
    set[i].max_new_tokens = 5 + i;
    set[i].task = "vt";
  }
  const std::string path = ::testing::TempDir() + "kvevict_jsonl_roundtrip.jsonl";
  write_jsonl_samples(path, set);
  auto back = read_jsonl_samples(path);
  ASSERT_EQ(back.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].context, set[i].context);
    EXPECT_EQ(back[i].answers, set[i].answers);
    EXPECT_EQ(back[i].max_new_tokens, 5 + i);
  }
  std::remove(path.c_str());
  EXPECT_THROW(write_jsonl_samples("/nonexistent/dir/x.jsonl", set), Error);
}

TEST(Jsonl, RejectsInvalidJsonWithLineNumber) {
  expect_contains(error_of(std::string(kGood) + "\n{\"context\": \n"),
                  {"set.jsonl line 2", "not valid JSON"});
}

TEST(Jsonl, RejectsNonObjectRows) {
  expect_contains(error_of("[1, 2]\n"), {"line 1", "array", "expected a JSON object"});
}

TEST(Jsonl, RejectsMissingFieldNamingIt) {
  expect_contains(
      error_of(R"({"context": "c", "question": "q", "answers": ["a"], "max_new_tokens": 3,)"
               R"( "task": "t"})"),
      {"line 1", "'answer_prefix'", "missing", "expected a string"});
}

TEST(Jsonl, RejectsWrongTypesNamingFieldAndExpectedType) {
  expect_contains(
      error_of(R"({"context": 5, "question": "q", "answer_prefix": "", "answers": ["a"],)"
               R"( "max_new_tokens": 3, "task": "t"})"),
      {"'context'", "is integer", "expected a string"});
  expect_contains(
      error_of(R"({"context": "c", "question": "q", "answer_prefix": "", "answers": "a",)"
               R"( "max_new_tokens": 3, "task": "t"})"),
      {"'answers'", "is string", "expected an array of strings"});
  expect_contains(error_of(R"({"context": "c", "question": "q", "answer_prefix": "",)"
                           R"( "answers": ["a", 3], "max_new_tokens": 3, "task": "t"})"),
                  {"'answers' element 1", "integer", "expected a string"});
  expect_contains(
      error_of(R"({"context": "c", "question": "q", "answer_prefix": "", "answers": [],)"
               R"( "max_new_tokens": 3, "task": "t"})"),
      {"'answers'", "empty", "at least one"});
  expect_contains(
      error_of(R"({"context": "c", "question": "q", "answer_prefix": "", "answers": ["a"],)"
               R"( "max_new_tokens": 2.5, "task": "t"})"),
      {"'max_new_tokens'", "is number", "positive integer"});
  expect_contains(
      error_of(R"({"context": "c", "question": "q", "answer_prefix": "", "answers": ["a"],)"
               R"( "max_new_tokens": 0, "task": "t"})"),
      {"'max_new_tokens' is 0", "positive integer"});
  expect_contains(
      error_of(R"({"context": "c", "question": "q", "answer_prefix": "", "answers": ["a"],)"
               R"( "max_new_tokens": 3, "task": null})"),
      {"'task'", "null", "expected a string"});
}

TEST(Jsonl, MissingFileIsNamed) {
  try {
    read_jsonl_samples(std::string("/nonexistent/dir/set.jsonl"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/set.jsonl"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvevict::eval
