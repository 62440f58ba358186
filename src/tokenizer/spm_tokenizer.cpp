// SentencePiece-style BPE driven by token scores ("llama" tokenizer model; Gemma 3, Llama 2).
// Spaces become U+2581 "▁"; the text starts as one symbol per UTF-8 character, and the adjacent
// pair whose concatenation is the highest-scoring vocabulary token merges first (ties: leftmost),
// as in llama.cpp's llm_tokenizer_spm. Characters left without a token fall back to <0xXX> bytes.
#include <cstdio>
#include <queue>

#include "kvevict/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace kvevict::tokenizer {
namespace {

const std::string kSpaceMark = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(Vocab v) : VocabTokenizer(std::move(v)) {
    KVEVICT_CHECK(vocab_.scores.size() == vocab_.tokens.size(),
                  "sentencepiece tokenizer needs tokenizer.ggml.scores; the file has none");
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byte_tokens_[b] = vocab_.find(name);
    }
  }

  std::vector<int32_t> encode(const std::string& text, bool add_bos) const override {
    std::vector<int32_t> out;
    if (add_bos && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    bool prev_special = true;  // llama.cpp adds the space prefix at the start and after specials
    for (const Fragment& f : vocab_.specials.partition(text)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      std::string s;
      if (vocab_.add_space_prefix && prev_special) s = kSpaceMark;
      for (size_t i = f.offset; i < f.offset + f.len; ++i) {
        if (text[i] == ' ') {
          s += kSpaceMark;
        } else {
          s.push_back(text[i]);
        }
      }
      segment(s, out);
      prev_special = false;
    }
    return out;
  }

  std::string token_text(int32_t id) const override {
    check_id(id);
    const std::string& t = vocab_.tokens[id];
    if (vocab_.types[id] == kByte) {
      unsigned v = 0;
      if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%02X>", &v) == 1)
        return std::string(1, static_cast<char>(v));
      return t;
    }
    std::string out;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
        out.push_back(' ');
        i += kSpaceMark.size();
      } else {
        out.push_back(t[i++]);
      }
    }
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (size_t k = 0; k < ids.size(); ++k) {
      std::string piece = token_text(ids[k]);
      // Undo the space prefix encode added at the start of the text.
      const bool first_text = k == 0 || (k == 1 && ids[0] == vocab_.bos);
      if (vocab_.add_space_prefix && first_text && !piece.empty() && piece[0] == ' ' &&
          vocab_.types[ids[k]] == kNormal)
        piece.erase(0, 1);
      out += piece;
    }
    return out;
  }

 private:
  struct Symbol {
    int32_t prev, next;
    uint32_t offset, len;  // bytes of the escaped text; len 0 once merged into its left neighbour
  };
  struct Bigram {
    int32_t left, right;
    float score;
    uint32_t len;  // bytes of the merged text, to detect stale entries
  };
  struct Lower {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  void segment(const std::string& s, std::vector<int32_t>& out) const {
    // One symbol per character; an invalid UTF-8 byte is a symbol of its own (llama.cpp trusts
    // the lead byte's length instead, which lets a stray byte swallow the next "▁").
    std::vector<Symbol> sym;
    for (const Utf8Char& c : utf8_decode(s)) {
      const auto idx = static_cast<int32_t>(sym.size());
      sym.push_back({idx - 1, idx + 1, c.offset, c.len});
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
    std::string buf;
    auto try_pair = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      buf.assign(s, sym[left].offset, sym[left].len + sym[right].len);
      const int32_t id = vocab_.find(buf);
      if (id < 0) return;
      queue.push({left, right, vocab_.scores[id], static_cast<uint32_t>(buf.size())});
    };
    for (size_t i = 1; i < sym.size(); ++i)
      try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_pair(l.prev, b.left);
      try_pair(b.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
      buf.assign(s, sym[i].offset, sym[i].len);
      const int32_t id = vocab_.find(buf);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (unsigned char c : buf) {
        const int32_t bt = byte_tokens_[c] >= 0 ? byte_tokens_[c] : vocab_.unk;
        KVEVICT_CHECK(bt >= 0, "sentencepiece vocabulary has neither <0x", static_cast<int>(c),
                      "> nor an unknown token for a byte of the input");
        out.push_back(bt);
      }
    }
  }

  int32_t byte_tokens_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab) {
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace kvevict::tokenizer
