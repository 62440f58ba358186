// Byte-level BPE ("gpt2" tokenizer model; SmolLM2, Llama 3, Qwen2). Text is split by the model's
// pre-tokenizer; each piece's bytes map to GPT-2's printable characters (one symbol per byte),
// then the adjacent pair with the lowest merge rank merges first (ties: leftmost), as in
// llama.cpp's llm_tokenizer_bpe. Merges are keyed by the ids of the two parts, so a merge
// lookup is one hash of a 64-bit key.
#include <queue>
#include <unordered_map>

#include "kvevict/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace kvevict::tokenizer {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class BpeTokenizer final : public VocabTokenizer {
 public:
  BpeTokenizer(Vocab v, const std::vector<std::string>& merges, PreTokenizer pre)
      : VocabTokenizer(std::move(v)), pre_(pre) {
    for (int b = 0; b < 256; ++b) {
      std::string s;
      utf8_append(s, byte_to_codepoint(static_cast<uint8_t>(b)));
      byte_tokens_[b] = vocab_.find(s);
    }
    merges_.reserve(merges.size() * 2);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t sp = m.find(' ', 1);
      KVEVICT_CHECK(sp != std::string::npos, "tokenizer.ggml.merges[", rank, "] = '", m,
                    "' has no space; expected 'left right'");
      const int32_t a = vocab_.find(m.substr(0, sp));
      const int32_t b = vocab_.find(m.substr(sp + 1));
      const int32_t ab = vocab_.find(m.substr(0, sp) + m.substr(sp + 1));
      if (a < 0 || b < 0 || ab < 0) continue;  // a merge whose tokens are absent can never apply
      merges_.emplace(pair_key(a, b), Merge{static_cast<int32_t>(rank), ab});  // first rank wins
    }
  }

  std::vector<int32_t> encode(const std::string& text, bool add_bos) const override {
    std::vector<int32_t> out;
    if (add_bos && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    for (const Fragment& f : vocab_.specials.partition(text)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      const std::string frag = text.substr(f.offset, f.len);
      for (const Piece& p : pretokenize(frag, pre_)) merge_word(frag.data() + p.offset, p.len, out);
    }
    return out;
  }

  std::string token_text(int32_t id) const override {
    check_id(id);
    const std::string& t = vocab_.tokens[id];
    if (vocab_.types[id] == kControl || vocab_.types[id] == kUserDefined) return t;
    // Undo the byte -> printable character map; characters outside it pass through as UTF-8.
    std::string out;
    for (const Utf8Char& c : utf8_decode(t)) {
      const int b = c.cp == kInvalidCodepoint ? -1 : codepoint_to_byte(c.cp);
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out.append(t, c.offset, c.len);
      }
    }
    return out;
  }

 private:
  struct Merge {
    int32_t rank, id;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, id;
  };
  struct Later {  // priority_queue top = lowest rank, then leftmost
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };
  struct Symbol {
    int32_t id, prev, next;
  };

  void merge_word(const char* bytes, size_t n, std::vector<int32_t>& out) const {
    // A byte whose character is missing from the vocabulary (SmolLM2 lacks e.g. 0xF5..0xFF,
    // which never occur in valid UTF-8) is dropped, as Hugging Face tokenizers does without an
    // unknown token; llama.cpp would throw here.
    std::vector<Symbol> sym;
    sym.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = byte_tokens_[static_cast<uint8_t>(bytes[i])];
      if (id < 0) continue;
      const auto k = static_cast<int32_t>(sym.size());
      sym.push_back({id, k - 1, k + 1});
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    n = sym.size();
    std::priority_queue<Candidate, std::vector<Candidate>, Later> queue;
    auto try_pair = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      auto it = merges_.find(pair_key(sym[l].id, sym[r].id));
      if (it != merges_.end())
        queue.push({it->second.rank, l, r, sym[l].id, sym[r].id, it->second.id});
    };
    for (size_t i = 1; i < n; ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& l = sym[c.left];
      Symbol& r = sym[c.right];
      // Stale when either side merged since it was queued (merged-away symbols get id -1).
      if (l.id != c.left_id || r.id != c.right_id || l.next != c.right) continue;
      l.id = c.id;
      r.id = -1;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_pair(l.prev, c.left);
      try_pair(c.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
  }

  PreTokenizer pre_;
  int32_t byte_tokens_[256];
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab) {
  const PreTokenizer pre = pretokenizer_from_name(vocab.pre);
  std::vector<std::string> merges = std::move(vocab.merges);
  return std::make_unique<BpeTokenizer>(std::move(vocab), merges, pre);
}

}  // namespace kvevict::tokenizer
