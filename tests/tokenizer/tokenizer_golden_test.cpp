// Tokenizers of the two embedded checkpoints against reference ids from Hugging Face tokenizers
// (tools/golden/tokenizer_golden.py -> tests/data/tokenizer/<model>.json): exact encode, decode
// round trip, BOS handling, chat prompts and their ids, end-of-generation ids.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tokenizer.h"

namespace kvevict {
namespace {

using nlohmann::json;

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
  json golden;
};

// Opens the model and its golden file; an empty result means the model is absent (skip).
Loaded load(const char* model_file, const char* golden_name) {
  Loaded l;
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, model_file);
  if (!io::file_exists(path)) return l;
  l.file = gguf::File::open(path);
  l.tok = Tokenizer::from_gguf(*l.file);
  std::ifstream in(std::string(KVEVICT_SOURCE_DIR) + "/tests/data/tokenizer/" + golden_name);
  EXPECT_TRUE(in.good()) << "missing golden file " << golden_name;
  l.golden = json::parse(in);
  return l;
}

#define LOAD_OR_SKIP(var, file, golden)                                                       \
  Loaded var = load(file, golden);                                                            \
  if (!var.tok)                                                                               \
    GTEST_SKIP() << "model " << file << " not found in " << io::model_dir(KVEVICT_SOURCE_DIR) \
                 << "; run scripts/fetch_models.sh (or set KVEVICT_MODEL_DIR)";

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Index of the first difference, to make a mismatch readable.
size_t first_diff(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

void check_cases(const Loaded& l) {
  int n = 0;
  for (const auto& c : l.golden["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = l.tok->encode(text, false);
    if (got != want) {
      const size_t d = first_diff(got, want);
      ADD_FAILURE() << "encode mismatch for " << json(text).dump() << "\n  got  " << ids_str(got)
                    << "\n  want " << ids_str(want) << "\n  first difference at " << d;
    }
    EXPECT_EQ(l.tok->decode(got), text) << "decode(encode(s)) != s for " << json(text).dump();
    ++n;
  }
  EXPECT_GE(n, 30);
}

void check_chats(const Loaded& l) {
  for (const auto& c : l.golden["chats"]) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
    const std::string prompt = l.tok->apply_chat_template(msgs);
    EXPECT_EQ(prompt, c["prompt"].get<std::string>());
    EXPECT_EQ(ids_str(l.tok->encode(prompt, false)), ids_str(c["ids"].get<std::vector<int32_t>>()))
        << json(prompt).dump();
  }
}

TEST(TokenizerGolden, SmolLM2) {
  LOAD_OR_SKIP(l, io::kSmolLM2File, "smollm2.json");
  EXPECT_EQ(l.tok->vocab_size(), 49152);
  EXPECT_EQ(l.tok->bos_id(), 1);
  EXPECT_EQ(l.tok->eos_id(), 2);
  check_cases(l);
  check_chats(l);
  // add_bos_token is false in this file: encode adds nothing.
  EXPECT_EQ(l.tok->encode("Hello", true), l.tok->encode("Hello", false));
  EXPECT_TRUE(l.tok->is_end_of_generation(2));  // <|im_end|>
  EXPECT_TRUE(l.tok->is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(l.tok->is_end_of_generation(1));
  EXPECT_EQ(l.tok->token_text(1), "<|im_start|>");
  EXPECT_EQ(l.tok->token_text(l.tok->encode(" world", false)[0]), " world");
}

TEST(TokenizerGolden, Gemma3) {
  LOAD_OR_SKIP(l, io::kGemma3File, "gemma3.json");
  EXPECT_EQ(l.tok->vocab_size(), 262144);
  EXPECT_EQ(l.tok->bos_id(), 2);
  EXPECT_EQ(l.tok->eos_id(), 1);
  check_cases(l);
  check_chats(l);
  std::vector<int32_t> with_bos = l.tok->encode("Hello", true);
  std::vector<int32_t> plain = l.tok->encode("Hello", false);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 2);
  EXPECT_TRUE(l.tok->is_end_of_generation(1));    // <eos>
  EXPECT_TRUE(l.tok->is_end_of_generation(106));  // <end_of_turn>
  EXPECT_FALSE(l.tok->is_end_of_generation(105));
  EXPECT_EQ(l.tok->token_text(106), "<end_of_turn>");
}

TEST(TokenizerGolden, ByteFallbackRoundTripsArbitraryBytes) {
  LOAD_OR_SKIP(g, io::kGemma3File, "gemma3.json");
  LOAD_OR_SKIP(s, io::kSmolLM2File, "smollm2.json");
  // Invalid UTF-8 and control bytes must survive encode/decode in both tokenizer families.
  const std::string bytes = "ok \xff\xfe\x80 \x01\x02 \xe2\x82 end\xf0\x9f";
  for (const Tokenizer* t : {g.tok.get(), s.tok.get()}) {
    const auto ids = t->encode(bytes, false);
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < t->vocab_size()) << id;
    if (t == g.tok.get()) {
      EXPECT_EQ(t->decode(ids), bytes);  // sentencepiece: <0xXX> tokens for every byte
    } else {
      // SmolLM2's byte alphabet lacks 0xFE and 0xFF (never valid UTF-8): they are dropped.
      EXPECT_EQ(t->decode(ids), "ok \x80 \x01\x02 \xe2\x82 end\xf0\x9f");
    }
  }
}

// Random text drawn from many scripts and symbols must decode back exactly (valid UTF-8 from
// planes both vocabularies cover).
TEST(TokenizerGolden, RandomUnicodeRoundTrips) {
  LOAD_OR_SKIP(g, io::kGemma3File, "gemma3.json");
  LOAD_OR_SKIP(s, io::kSmolLM2File, "smollm2.json");
  std::mt19937 rng(99);
  const uint32_t ranges[][2] = {{0x20, 0x7E},     {0x9, 0xD},        {0xA0, 0x24F},
                                {0x370, 0x4FF},   {0x600, 0x6FF},    {0x900, 0x97F},
                                {0x3040, 0x30FF}, {0x4E00, 0x9FFF},  {0xAC00, 0xD7A3},
                                {0x2000, 0x206F}, {0x1F300, 0x1F64F}};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < len; ++i) {
      const auto& r = ranges[rng() % (sizeof(ranges) / sizeof(ranges[0]))];
      const uint32_t cp = r[0] + rng() % (r[1] - r[0] + 1);
      if (cp < 0x80) {
        text.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        text += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      } else if (cp < 0x10000) {
        text += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                 static_cast<char>(0x80 | (cp & 0x3F))};
      } else {
        text +=
            {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
             static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
    for (const Tokenizer* t : {g.tok.get(), s.tok.get()})
      ASSERT_EQ(t->decode(t->encode(text, false)), text) << json(text).dump();
  }
}

TEST(TokenizerGolden, BadIdsAndRolesThrow) {
  LOAD_OR_SKIP(l, io::kGemma3File, "gemma3.json");
  EXPECT_THROW(l.tok->decode({5, 262144}), Error);
  EXPECT_THROW(l.tok->token_text(-1), Error);
  EXPECT_THROW(l.tok->apply_chat_template({{"robot", "hi"}}), Error);
  // Gemma turns must alternate user/assistant.
  EXPECT_THROW(l.tok->apply_chat_template({{"user", "a"}, {"user", "b"}}), Error);
}

}  // namespace
}  // namespace kvevict
