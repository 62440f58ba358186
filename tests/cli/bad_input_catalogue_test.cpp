// The bad-input catalogue (issue "Reliability"): every model subcommand fed broken model files,
// huge declared sizes, out-of-range budgets, unknown names, over-long prompts and broken JSONL.
// Each case must exit with code 2, print an error naming the problem, and leave no output file.
// The model-file cases need no real checkpoint; the parameter cases run on SmolLM2 when
// scripts/fetch_models.sh has fetched it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "kvevict/io/model_paths.h"
#include "support/cli_runner.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

struct Case {
  std::vector<std::string> args;
  std::string needle;  // must appear in stderr
};

// Runs each case with `--out <dir>/out.json` appended where the command writes a results file,
// and checks exit code 2, the message, and that no file (complete or partial) was left behind.
void expect_all_rejected(const std::vector<Case>& cases, const TempDir& dir) {
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    const std::string& cmd = args.front();
    const std::string out = dir.file("out.json");
    const bool writes = cmd == "eval" || cmd == "ppl" || cmd == "analyze";
    if (writes) args.insert(args.end(), {"--out", out});
    std::string shown;
    for (const auto& a : args) shown += (a.size() > 60 ? a.substr(0, 60) + "..." : a) + " ";
    const auto r = run_cli(KVEVICT_CLI_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << shown << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos)
        << shown << "\nexpected '" << c.needle << "' in stderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << shown;
    if (writes) EXPECT_FALSE(std::filesystem::exists(out)) << shown << " left " << out;
    std::filesystem::remove(out);
  }
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A well-formed GGUF that declares a model kvevict does not run.
std::vector<uint8_t> unsupported_architecture_gguf() {
  testing::GgufWriter w;
  w.add_string("general.architecture", "mamba");
  w.add_u32("mamba.block_count", 1);
  return w.build();
}

// Model files that must be rejected, each with the text its error must contain.
std::vector<std::pair<std::string, std::string>> broken_model_files(const TempDir& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  write_file(dir.file("empty.gguf"), {});
  files.emplace_back(dir.file("empty.gguf"), "empty.gguf");
  write_text(dir.file("junk.gguf"), "GGUF but not really a gguf file");
  files.emplace_back(dir.file("junk.gguf"), "junk.gguf");

  testing::GgufWriter::Layout layout;
  testing::GgufWriter good;
  good.add_string("general.architecture", "llama");
  good.add_u32("llama.block_count", 1);
  good.add_tensor("token_embd.weight", {4, 2}, /*F32*/ 0,
                  std::vector<uint8_t>(32, 0));
  const std::vector<uint8_t> bytes = good.build(3, 32, &layout);

  auto huge_tensors = bytes;  // a header that claims 2^60 tensors
  testing::GgufWriter::patch<uint64_t>(huge_tensors, layout.tensor_count_at, uint64_t{1} << 60);
  write_file(dir.file("huge_tensors.gguf"), huge_tensors);
  files.emplace_back(dir.file("huge_tensors.gguf"), "tensor count 1152921504606846976");

  testing::GgufWriter huge_string;  // a metadata string that claims 2^40 bytes
  std::vector<uint8_t> value;
  testing::GgufWriter::put<uint64_t>(value, uint64_t{1} << 40);
  value.insert(value.end(), 16, 'a');
  huge_string.add_raw("general.architecture", testing::GgufWriter::kString, value);
  write_file(dir.file("huge_string.gguf"), huge_string.build());
  files.emplace_back(dir.file("huge_string.gguf"), "1099511627776");

  write_file(dir.file("truncated.gguf"),
             std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  files.emplace_back(dir.file("truncated.gguf"), "truncated.gguf");

  write_file(dir.file("mamba.gguf"), unsupported_architecture_gguf());
  files.emplace_back(dir.file("mamba.gguf"), "mamba");
  return files;
}

TEST(BadInputCatalogue, BrokenModelFilesInEveryModelCommand) {
  TempDir dir;
  std::vector<Case> cases;
  for (const auto& [path, needle] : broken_model_files(dir)) {
    cases.push_back({{"generate", "-m", path, "-p", "hi", "-n", "1"}, needle});
    cases.push_back({{"demo", "-m", path, "--length", "64"}, needle});
    cases.push_back({{"eval", "-m", path, "--samples", "1"}, needle});
    cases.push_back({{"ppl", "-m", path}, needle});
    cases.push_back({{"analyze", "-m", path}, needle});
  }
  cases.push_back({{"generate", "-m", dir.file("missing.gguf"), "-p", "hi"}, "missing.gguf"});
  cases.push_back({{"generate", "-m", "llama-9000", "-p", "hi"}, "llama-9000"});
  expect_all_rejected(cases, dir);
}

class BadInputWithModel : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = io::model_path(KVEVICT_SOURCE_DIR, io::kSmolLM2File);
    if (!io::file_exists(model_)) GTEST_SKIP() << "run scripts/fetch_models.sh first";
  }
  std::string model_;
};

TEST_F(BadInputWithModel, BudgetsOutOfRange) {
  TempDir dir;
  std::vector<Case> cases;
  for (const char* b : {"0", "-0.5", "1.5", "nan", "inf", "abc", "1e400"}) {
    const std::string eq = std::string("--budget=") + b;
    cases.push_back({{"generate", "-m", model_, "-p", "hi", "--method", "dropkv", eq}, "budget"});
    cases.push_back({{"demo", "-m", model_, "--length", "512", eq}, "budget"});
    cases.push_back({{"eval", "-m", model_, "--samples", "1", std::string("--budgets=") + b}, "budget"});
  }
  cases.push_back({{"ppl", "-m", model_, "--budgets", "0"}, "budget"});
  cases.push_back({{"ppl", "-m", model_, "--budgets", "-3"}, "budget -3"});
  cases.push_back({{"generate", "-m", model_, "-p", "hi", "--decode-budget", "-1"}, "-1"});
  expect_all_rejected(cases, dir);
}

TEST_F(BadInputWithModel, UnknownNames) {
  TempDir dir;
  expect_all_rejected(
      {
          {{"generate", "-m", model_, "-p", "hi", "--method", "dropkvv"}, "unknown method 'dropkvv'"},
          {{"generate", "-m", model_, "-p", "hi", "--method", "dropkv", "--policy", "fair"}, "fair"},
          {{"generate", "-m", model_, "-p", "hi", "--method", "h2o", "--pool", "max:0"}, "max:0"},
          {{"demo", "-m", model_, "--method", "nope"}, "unknown method 'nope'"},
          {{"demo", "-m", model_, "--task", "niah_single_9"}, "niah_single_9"},
          {{"eval", "-m", model_, "--methods", "full,nope"}, "unknown method 'nope'"},
          {{"eval", "-m", model_, "--tasks", "niah_single_9"}, "niah_single_9"},
          {{"eval", "-m", model_, "--modes", "sideways"}, "sideways"},
          {{"ppl", "-m", model_, "--methods", "nope"}, "unknown method 'nope'"},
          {{"ppl", "-m", model_, "--methods", "knorm"}, "no decode-time form"},
          {{"analyze", "-m", model_, "--pool", "biggest"}, "biggest"},
          {{"generate", "-m", model_, "-p", "hi", "--kv-dtype", "int3"}, "int3"},
      },
      dir);
}

TEST_F(BadInputWithModel, PromptsOverTheContextLength) {
  TempDir dir;
  std::string huge;
  for (int i = 0; i < 9000; ++i) huge += "word ";  // > the 8192-token context
  write_text(dir.file("huge.txt"), huge);
  expect_all_rejected(
      {
          {{"generate", "-m", model_, "-p", huge, "-n", "1"}, "context"},
          {{"generate", "-m", model_, "-f", dir.file("huge.txt"), "-n", "1"}, "context"},
          {{"demo", "-m", model_, "--length", "100000"}, "100000"},
          {{"eval", "-m", model_, "--lengths", "100000"}, "100000"},
          {{"ppl", "-m", model_, "--chunk", "100000"}, "100000"},
          {{"analyze", "-m", model_, "--length", "100000"}, "100000"},
      },
      dir);
}

TEST_F(BadInputWithModel, BrokenJsonlDatasets) {
  TempDir dir;
  const std::string ok_row =
      R"({"context": "c", "question": "q", "answer_prefix": "", "answers": ["a"], )"
      R"("max_new_tokens": 4, "task": "t"})";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"empty.jsonl", ""},
      {"truncated.jsonl", ok_row.substr(0, ok_row.size() / 2)},
      {"no_answers.jsonl", R"({"context": "c", "question": "q", "max_new_tokens": 4})"},
      {"answers_not_list.jsonl",
       R"({"context": "c", "question": "q", "answers": "a", "max_new_tokens": 4})"},
      {"negative_tokens.jsonl",
       R"({"context": "c", "question": "q", "answers": ["a"], "max_new_tokens": -1})"},
      {"nan_tokens.jsonl",
       R"({"context": "c", "question": "q", "answers": ["a"], "max_new_tokens": NaN})"},
      {"second_row_bad.jsonl", ok_row + "\n[1, 2, 3]\n"},
  };
  std::vector<Case> cases;
  for (const auto& [name, text] : files) {
    write_text(dir.file(name), text);
    cases.push_back({{"eval", "-m", model_, "--data", dir.file(name), "--methods", "full"}, name});
  }
  cases.push_back({{"eval", "-m", model_, "--data", dir.file("missing.jsonl")}, "missing.jsonl"});
  expect_all_rejected(cases, dir);
}

}  // namespace
}  // namespace kvevict
