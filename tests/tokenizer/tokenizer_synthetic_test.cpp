// Tokenizers built from tiny hand-made GGUF vocabularies, so the algorithms' rules are checked
// without the real models: score order and leftmost ties (sentencepiece), rank order (byte-level
// BPE), byte fallback, whole-string special tokens, the space prefix, chat family detection and
// bad metadata.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tokenizer.h"

namespace kvevict {
namespace {

using testing::GgufWriter;
using testing::TempFile;

constexpr const char* kSp = "\xE2\x96\x81";  // "▁"

struct Built {
  std::unique_ptr<TempFile> file;
  std::unique_ptr<gguf::File> gguf;
  std::unique_ptr<Tokenizer> tok;
};

Built build(const GgufWriter& w, const std::string& stem) {
  Built b;
  b.file = std::make_unique<TempFile>(stem);
  b.file->write(w.build());
  b.gguf = gguf::File::open(b.file->path());
  b.tok = Tokenizer::from_gguf(*b.gguf);
  return b;
}

// A sentencepiece vocabulary: ids 0..2 control, 3..258 byte tokens, then pieces with scores.
GgufWriter spm_writer(const std::vector<std::pair<std::string, float>>& pieces, bool space_prefix,
                      const std::vector<std::string>& user_defined = {}) {
  auto [tokens, scores, types] = testing::spm_byte_vocabulary(pieces);
  for (const auto& t : user_defined) {
    tokens.push_back(t);
    scores.push_back(0);
    types.push_back(4);
  }
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_space_prefix", space_prefix);
  return w;
}

constexpr int kFirstPiece = 3 + 256;

TEST(TokenizerSynthetic, SentencePieceMergesByScoreThenLeftmost) {
  // "abc": pairs "ab" (score -1) and "bc" (score -2) compete; "ab" wins, then "abc" is absent,
  // so the result is [ab, c]. With "bc" scored higher the result flips to [a, bc].
  for (bool bc_wins : {false, true}) {
    GgufWriter w = spm_writer({{"a", -10},
                               {"b", -10},
                               {"c", -10},
                               {"ab", bc_wins ? -2.f : -1.f},
                               {"bc", bc_wins ? -1.f : -2.f}},
                              false);
    Built b = build(w, "spm_score");
    const int a = kFirstPiece, c = a + 2, ab = a + 3, bc = a + 4;  // b is a + 1
    EXPECT_EQ(b.tok->encode("abc", false),
              bc_wins ? (std::vector<int32_t>{a, bc}) : (std::vector<int32_t>{ab, c}));
  }
  // Equal scores: the leftmost pair merges first ("aaa" -> [aa, a]).
  Built t = build(spm_writer({{"a", -5}, {"aa", -1}}, false), "spm_tie");
  EXPECT_EQ(t.tok->encode("aaa", false), (std::vector<int32_t>{kFirstPiece + 1, kFirstPiece}));
}

TEST(TokenizerSynthetic, SentencePieceSpacesBytesAndSpecials) {
  GgufWriter w =
      spm_writer({{"h", -3}, {"i", -3}, {"hi", -1}, {kSp, -4}, {std::string(kSp) + "hi", -0.5f}},
                 /*space_prefix=*/true, {"<tag>"});
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  Built b = build(w, "spm_misc");
  const int h = kFirstPiece, hi = kFirstPiece + 2, sp = kFirstPiece + 3, sphi = kFirstPiece + 4;
  const int tag = kFirstPiece + 5;
  // The space prefix turns "hi" into "▁hi"; after a special token it is added again.
  EXPECT_EQ(b.tok->encode("hi", false), (std::vector<int32_t>{sphi}));
  EXPECT_EQ(b.tok->encode("hi", true), (std::vector<int32_t>{1, sphi}));
  EXPECT_EQ(b.tok->encode("hi<tag>hi", false), (std::vector<int32_t>{sphi, tag, sphi}));
  // "é" has no piece: its two UTF-8 bytes become <0xC3> <0xA9>.
  EXPECT_EQ(b.tok->encode("h\xC3\xA9", false), (std::vector<int32_t>{sp, h, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(b.tok->decode(b.tok->encode("hi h\xC3\xA9 hi", false)), "hi h\xC3\xA9 hi");
  EXPECT_EQ(b.tok->decode({1, sphi}), "<s>hi");  // BOS text is kept, the prefix space is not
  (void)hi;
}

// A byte-level vocabulary: the 256 byte characters, then merged tokens, with ranked merges.
GgufWriter bpe_writer(const std::vector<std::string>& merges, const std::string& pre,
                      const std::vector<std::string>& extra) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  // GPT-2's map: printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    tokens.push_back(s);
    types.push_back(1);
  }
  for (const auto& t : extra) {
    tokens.push_back(t);
    types.push_back(t[0] == '<' ? 3 : 1);
  }
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", 0);
  w.add_u32("tokenizer.ggml.eos_token_id", 0);
  return w;
}

TEST(TokenizerSynthetic, ByteLevelMergesByRank) {
  // Ranks: "b c" before "a b", so "abc" -> [a, bc]; the reverse order gives [ab, c].
  for (bool bc_first : {true, false}) {
    std::vector<std::string> merges = {"a b", "b c"};
    if (bc_first) std::swap(merges[0], merges[1]);
    Built b = build(bpe_writer(merges, "gpt2", {"ab", "bc", "<|end|>"}), "bpe_rank");
    const int ab = 256, bc = 257;
    EXPECT_EQ(b.tok->encode("abc", false),
              bc_first ? (std::vector<int32_t>{'a', bc}) : (std::vector<int32_t>{ab, 'c'}));
    // Pre-tokenization keeps merges inside pieces: " abc" is one piece starting with "Ġ".
    const auto ids = b.tok->encode("abc abc<|end|>", false);
    EXPECT_EQ(ids.back(), 258);
    EXPECT_EQ(b.tok->decode(ids), "abc abc<|end|>");
    EXPECT_TRUE(b.tok->is_end_of_generation(258));
  }
}

TEST(TokenizerSynthetic, ByteLevelPreTokenizerBlocksMerges) {
  // The smollm split isolates digits, so the merge "1 2" can never apply; gpt2 lets it.
  const std::vector<std::string> merges = {"1 2"};
  Built g = build(bpe_writer(merges, "gpt2", {"12"}), "bpe_gpt2");
  Built s = build(bpe_writer(merges, "smollm", {"12"}), "bpe_smollm");
  EXPECT_EQ(g.tok->encode("12", false), (std::vector<int32_t>{256}));
  EXPECT_EQ(s.tok->encode("12", false), (std::vector<int32_t>{'1', '2'}));
}

TEST(TokenizerSynthetic, ChatFamiliesFromTemplateOrVocabulary) {
  GgufWriter w = bpe_writer({"a b"}, "gpt2", {"ab", "<|im_start|>", "<|im_end|>"});
  w.add_string("tokenizer.chat_template",
               "{{ '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}{{ '<|im_start|>' + m }}");
  Built b = build(w, "chat_chatml");
  EXPECT_EQ(b.tok->apply_chat_template({{"user", "hi"}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(b.tok->apply_chat_template({{"system", "S"}, {"user", "hi"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  Built g = build(bpe_writer({"a b"}, "gpt2", {"<start_of_turn>", "<end_of_turn>"}), "chat_gemma");
  EXPECT_EQ(g.tok->apply_chat_template(
                {{"system", "S"}, {"user", " hi \n"}, {"assistant", "yo"}, {"user", "q"}}),
            "<start_of_turn>user\nS\n\nhi<end_of_turn>\n<start_of_turn>model\nyo<end_of_turn>\n"
            "<start_of_turn>user\nq<end_of_turn>\n<start_of_turn>model\n");
  Built none = build(bpe_writer({"a b"}, "gpt2", {"ab"}), "chat_none");
  EXPECT_THROW(none.tok->apply_chat_template({{"user", "hi"}}), Error);
}

TEST(TokenizerSynthetic, BadMetadataThrows) {
  GgufWriter w = bpe_writer({"a b"}, "tekken", {"ab"});
  TempFile f("tok_bad_pre");
  f.write(w.build());
  auto g = gguf::File::open(f.path());
  EXPECT_THROW(Tokenizer::from_gguf(*g), Error);

  GgufWriter u;
  u.add_string("tokenizer.ggml.model", "bert");
  u.add_string_array("tokenizer.ggml.tokens", {"a"});
  TempFile f2("tok_bad_model");
  f2.write(u.build());
  auto g2 = gguf::File::open(f2.path());
  try {
    Tokenizer::from_gguf(*g2);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bert'"), std::string::npos) << e.what();
  }

  GgufWriter s = spm_writer({{"a", -1}}, false);
  s.add_u32("tokenizer.ggml.eot_token_id", 100000);
  TempFile f3("tok_bad_id");
  f3.write(s.build());
  auto g3 = gguf::File::open(f3.path());
  EXPECT_THROW(Tokenizer::from_gguf(*g3), Error);
}

}  // namespace
}  // namespace kvevict
