// The hand-written pre-tokenizer splits against the regexes they implement, as matched by
// Python's `regex` module (tools/golden/tokenizer_pretokenize_golden.py).
#include "tokenizer/pretokenize.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "tokenizer/unicode.h"

namespace kvevict::tokenizer {
namespace {

using nlohmann::json;

std::vector<std::string> pieces(const std::string& text, PreTokenizer kind) {
  std::vector<std::string> out;
  size_t covered = 0;
  for (const Piece& p : pretokenize(text, kind)) {
    EXPECT_EQ(p.offset, covered) << "pieces must tile the text";
    EXPECT_GT(p.len, 0u);
    covered = p.offset + p.len;
    out.push_back(text.substr(p.offset, p.len));
  }
  EXPECT_EQ(covered, text.size());
  return out;
}

TEST(Pretokenize, MatchesPythonRegexForEverySplitter) {
  std::ifstream in(std::string(KVEVICT_SOURCE_DIR) + "/tests/data/tokenizer/pretokenize.json");
  ASSERT_TRUE(in.good());
  const json g = json::parse(in);
  const std::pair<const char*, PreTokenizer> kinds[] = {{"gpt2", PreTokenizer::kGpt2},
                                                        {"smollm", PreTokenizer::kSmolLM},
                                                        {"llama3", PreTokenizer::kLlama3},
                                                        {"qwen2", PreTokenizer::kQwen2}};
  int checked = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    for (const auto& [name, kind] : kinds) {
      const auto want = c[name].get<std::vector<std::string>>();
      EXPECT_EQ(json(pieces(text, kind)).dump(), json(want).dump())
          << name << " split of " << json(text).dump();
      ++checked;
    }
  }
  EXPECT_GE(checked, 200);
}

TEST(Pretokenize, NamesMapToSplitters) {
  EXPECT_EQ(pretokenizer_from_name("smollm"), PreTokenizer::kSmolLM);
  EXPECT_EQ(pretokenizer_from_name("llama-bpe"), PreTokenizer::kLlama3);
  EXPECT_EQ(pretokenizer_from_name("qwen2"), PreTokenizer::kQwen2);
  EXPECT_EQ(pretokenizer_from_name("default"), PreTokenizer::kGpt2);
  try {
    pretokenizer_from_name("tekken");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tekken'"), std::string::npos) << e.what();
  }
}

TEST(Pretokenize, InvalidUtf8StaysCovered) {
  const std::string text = "ab\xff\xfe cd\xe2\x82";
  EXPECT_EQ(pieces(text, PreTokenizer::kGpt2),
            (std::vector<std::string>{"ab", "\xff\xfe", " cd", "\xe2\x82"}));
}

TEST(Unicode, CategoriesAndByteMap) {
  EXPECT_TRUE(is_letter(U'é'));
  EXPECT_TRUE(is_letter(0x65E5));    // 日
  EXPECT_FALSE(is_letter(0x1F600));  // 😀
  EXPECT_TRUE(is_number(0xB2));      // ²
  EXPECT_TRUE(is_number(0x663));     // Arabic-Indic three
  EXPECT_FALSE(is_number('a'));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0x200B));  // zero width space is not White_Space
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
}

}  // namespace
}  // namespace kvevict::tokenizer
