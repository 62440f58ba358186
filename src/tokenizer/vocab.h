// What both tokenizer families read from GGUF metadata: the vocabulary with its scores and token
// types, the special ids, and the whole-string matching of special tokens. Internal.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvevict/tokenizer.h"

namespace kvevict::tokenizer {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A run of the input: either raw text to tokenize, or one special token matched whole.
struct Fragment {
  int32_t token;  // -1 for raw text
  size_t offset, len;
};

// Longest-match search of the special strings (control and user-defined tokens) in a byte trie.
class SpecialMatcher {
 public:
  void add(const std::string& text, int32_t id);
  // Splits text into raw runs and special tokens, taking the longest special at the leftmost
  // position where one starts.
  std::vector<Fragment> partition(const std::string& text) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> child node
    int32_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
};

struct Vocab {
  std::string model;                               // tokenizer.ggml.model
  std::string arch;                                // general.architecture
  std::vector<std::string> tokens;                 // [vocab] token texts as stored
  std::vector<float> scores;                       // [vocab] (empty when absent)
  std::vector<int32_t> types;                      // [vocab] TokenType
  std::unordered_map<std::string, int32_t> index;  // text -> id
  int32_t bos = -1, eos = -1, unk = -1, eot = -1;
  bool add_bos = false;
  bool add_space_prefix = false;
  std::string pre;                         // tokenizer.ggml.pre (byte-level models)
  std::vector<std::string> merges;         // tokenizer.ggml.merges, rank order (byte-level models)
  std::string chat_template;               // tokenizer.chat_template, may be empty
  std::vector<int32_t> end_of_generation;  // sorted ids that end a generated turn
  SpecialMatcher specials;

  int32_t find(const std::string& text) const {
    auto it = index.find(text);
    return it == index.end() ? -1 : it->second;
  }
};

Vocab load_vocab(const gguf::File& file);

// Shared implementation of the parts of Tokenizer that only need the vocabulary.
class VocabTokenizer : public Tokenizer {
 public:
  explicit VocabTokenizer(Vocab vocab);
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const override { return vocab_.bos; }
  int32_t eos_id() const override { return vocab_.eos; }
  bool is_end_of_generation(int32_t id) const override;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;

 protected:
  void check_id(int32_t id) const;
  Vocab vocab_;
};

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab);

// Chat prompt for the model family the vocabulary/template describe (chat_template.cpp).
std::string render_chat(const Vocab& vocab, const std::vector<ChatMessage>& messages);

}  // namespace kvevict::tokenizer
