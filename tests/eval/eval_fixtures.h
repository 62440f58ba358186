// Test doubles for the eval tests: a whitespace tokenizer and a small synthetic corpus written to a
// temporary directory, so the tests need neither a model nor data/corpus.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "eval/corpus.h"
#include "eval/rng.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval::testing {

// One token per whitespace-separated piece; BOS is id 1. Ids are a hash of the piece into
// [3, vocab) so decode is not needed by the harness (it only counts and splits tokens).
class WhitespaceTokenizer : public Tokenizer {
 public:
  explicit WhitespaceTokenizer(int32_t vocab = 50003) : vocab_(vocab) {}
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(1);
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      if (i == text.size()) break;
      uint32_t h = 2166136261u;
      while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i])))
        h = (h ^ static_cast<unsigned char>(text[i++])) * 16777619u;
      ids.push_back(static_cast<int32_t>(3 + h % static_cast<uint32_t>(vocab_ - 3)));
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>&) const override { return {}; }
  std::string token_text(int32_t) const override { return {}; }
  int32_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  bool is_end_of_generation(int32_t id) const override { return id == 2; }
  std::string apply_chat_template(const std::vector<ChatMessage>& messages) const override {
    std::string out;
    for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
    return out + "<|assistant|>\n";
  }

 private:
  int32_t vocab_;
};

inline std::string make_word(Rng& rng, int syllables) {
  static const char* kCons = "bcdfghklmnprstvz";
  static const char* kVow = "aeiou";
  std::string w;
  for (int s = 0; s < syllables; ++s) {
    w.push_back(kCons[rng.uniform(16)]);
    w.push_back(kVow[rng.uniform(5)]);
  }
  return w;
}

// A temporary corpus directory in the layout of scripts/prepare_corpus.sh: six "novels" of
// seeded prose (with honorifics, quotes and italics markers, as Austen's text has) and three word
// lists of distinct synthetic lowercase words.
class TempCorpus {
 public:
  explicit TempCorpus(int words_per_novel = 4000, int words_per_list = 500) {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("kvevict_eval_corpus_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_ / "austen");
    Rng rng(2024);
    for (const auto& name : austen_novel_names()) {
      std::ofstream out(dir_ / "austen" / (name + ".txt"));
      out << "TITLE OF " << name << "\n\nBy A. Writer\n\n\nCHAPTER I\n\n";
      int written = 0, in_sentence = 0, in_line = 0;
      while (written < words_per_novel) {
        std::string w = make_word(rng, 1 + static_cast<int>(rng.uniform(3)));
        if (in_sentence == 0) {
          w[0] = static_cast<char>(w[0] - 'a' + 'A');
          if (rng.uniform(7) == 0) w.insert(0, "Mr. ");
          if (rng.uniform(11) == 0) w.insert(0, "\"");
        }
        if (rng.uniform(13) == 0) w.insert(0, "_").append("_");
        out << w;
        ++written;
        ++in_sentence;
        if (in_sentence >= 4 + static_cast<int>(rng.uniform(12))) {
          out << (rng.uniform(5) == 0 ? "!" : ".");
          in_sentence = 0;
        }
        if (++in_line >= 11) {
          out << (rng.uniform(6) == 0 ? "\n\n" : "\n");
          in_line = 0;
        } else {
          out << ' ';
        }
      }
      out << ".\n";
    }
    const char* lists[] = {"words_noun.txt", "words_adj.txt", "words_verb.txt", "words_all.txt"};
    std::vector<std::string> seen;
    for (int l = 0; l < 4; ++l) {
      std::ofstream out(dir_ / lists[l]);
      int n = 0;
      while (n < words_per_list) {
        std::string w = make_word(rng, 2 + static_cast<int>(rng.uniform(2)));
        if (std::find(seen.begin(), seen.end(), w) != seen.end()) continue;
        seen.push_back(w);
        out << w << "\n";
        ++n;
      }
      // words_all.txt is a superset of the three lists, as prepare_corpus.sh writes it.
      if (l == 3)
        for (size_t i = 0; i + static_cast<size_t>(words_per_list) < seen.size(); ++i)
          out << seen[i] << "\n";
    }
  }
  ~TempCorpus() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path dir_;
};

// The corpus a test suite shares (built once; a few ms).
inline const Corpus& test_corpus() {
  static TempCorpus dir;
  static Corpus c = Corpus::load(dir.dir());
  return c;
}

}  // namespace kvevict::eval::testing
