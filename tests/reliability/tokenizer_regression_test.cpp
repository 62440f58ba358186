// Inputs the fuzzers found that broke a tokenizer round trip, kept as regression tests.
// Skips a tokenizer whose GGUF file is absent (scripts/fetch_models.sh fetches both).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tokenizer.h"

namespace kvevict {
namespace {

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += d[c >> 4];
      out += d[c & 15];
    }
  }
  return out;
}

// `texts` must decode back to themselves minus every byte listed in `dropped`.
void expect_round_trips(const char* file, const std::vector<std::string>& texts,
                        const std::string& dropped = "") {
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
  if (!io::file_exists(path)) GTEST_SKIP() << path << " absent; run scripts/fetch_models.sh";
  const auto gguf = gguf::File::open(path);
  const auto tok = Tokenizer::from_gguf(*gguf);
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok->encode(text, false);
    std::string pieces;
    for (int32_t id : ids) pieces += std::to_string(id) + ":'" + hex(tok->token_text(id)) + "' ";
    std::string expected;
    for (char c : text) {
      if (dropped.find(c) == std::string::npos) expected.push_back(c);
    }
    EXPECT_EQ(hex(tok->decode(ids)), hex(expected)) << file << " ids " << pieces;
  }
}

// tokenizer_fuzzer report 79818374 (minimized): control bytes next to special-token-like text.
// Not a tokenizer bug: SmolLM2's vocabulary has no token for the byte 0x14, and the byte-level
// BPE encoder drops such bytes (as Hugging Face tokenizers does, see bpe_tokenizer.cpp). The
// fuzzer's round-trip oracle now excludes unrepresentable bytes; this pins down the behaviour:
// exactly 0x14 disappears for SmolLM2, nothing for Gemma 3 (byte fallback covers every byte).
const std::vector<std::string> kCases = {
    std::string("d,f f(x):m_start\x14<start_of_Aurn>model\x01\0\0\0\0\0\0\0t\n", 47),
    std::string("a\0b", 3),
    "a\x01"
    "b",
    "a\x14"
    "b",
    // report c1a7f6fc: U+9F1FA (valid, unassigned) starts with 0xF2, another byte SmolLM2 lacks.
    "flags \xf2\x9f\x87\xba\xf0\x9f\x87\xb8",
};

TEST(TokenizerRegression, SmolLM2DropsOnlyUnrepresentableBytes) {
  expect_round_trips(io::kSmolLM2File, kCases, "\x14\xf2");
}
TEST(TokenizerRegression, Gemma3RoundTrips) {
  expect_round_trips(io::kGemma3File, kCases);
}

// tokenizer_fuzzer report ae658b19: U+2581 in the input. SentencePiece stores spaces as U+2581,
// so Gemma 3 decodes a literal U+2581 as a space (llama.cpp does the same); byte-level BPE keeps
// it.
TEST(TokenizerRegression, SpaceMarkInInput) {
  const std::string text = "a\xe2\x96\x81<bos>b \xe2\x96\x81";
  for (const char* file : {io::kSmolLM2File, io::kGemma3File}) {
    const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
    if (!io::file_exists(path)) GTEST_SKIP() << path << " absent; run scripts/fetch_models.sh";
    const auto gguf = gguf::File::open(path);
    const auto tok = Tokenizer::from_gguf(*gguf);
    const bool spm = std::string(file) == io::kGemma3File;
    const std::string expected = spm ? "a <bos>b  " : text;
    EXPECT_EQ(hex(tok->decode(tok->encode(text, false))), hex(expected)) << file;
  }
}

}  // namespace
}  // namespace kvevict
