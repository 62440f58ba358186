#include "tokenizer/pretokenize.h"

#include "kvevict/error.h"
#include "tokenizer/unicode.h"

namespace kvevict::tokenizer {
namespace {

bool is_other(uint32_t cp) {
  return !is_whitespace(cp) && !is_letter(cp) && !is_number(cp);
}
bool is_newline(uint32_t cp) {
  return cp == '\r' || cp == '\n';
}
uint32_t ascii_lower(uint32_t cp) {
  return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
}

class Splitter {
 public:
  Splitter(const std::vector<Utf8Char>& ch, std::vector<Piece>& out) : ch_(ch), out_(out) {}

  // Length (1..3 chars) of a contraction 's 't 're 've 'm 'll 'd at pos, or 0.
  size_t contraction(size_t pos, size_t end, bool ignore_case) const {
    if (ch_[pos].cp != '\'' || pos + 1 >= end) return 0;
    auto low = [&](size_t i) { return ignore_case ? ascii_lower(ch_[i].cp) : ch_[i].cp; };
    const uint32_t c1 = low(pos + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= end) return 0;
    const uint32_t c2 = low(pos + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at pos (a whitespace char): the whole run when it ends the text or is one char;
  // otherwise all but its last char, which then prefixes the next piece.
  size_t whitespace_run(size_t pos, size_t end) const {
    size_t q = pos;
    while (q < end && is_whitespace(ch_[q].cp)) ++q;
    if (q < end && q - pos > 1) --q;
    return q;
  }

  void split_gpt2(size_t begin, size_t end) {
    size_t pos = begin;
    while (pos < end) {
      const size_t start = pos;
      const uint32_t c = ch_[pos].cp;
      if (size_t n = contraction(pos, end, false)) {
        emit(start, pos + n);
        pos += n;
        continue;
      }
      const size_t p = (c == ' ' && pos + 1 < end) ? pos + 1 : pos;  // the optional leading space
      const uint32_t e = ch_[p].cp;
      if (is_letter(e)) {
        pos = p;
        while (pos < end && is_letter(ch_[pos].cp)) ++pos;
      } else if (is_number(e)) {
        pos = p;
        while (pos < end && is_number(ch_[pos].cp)) ++pos;
      } else if (is_other(e)) {
        pos = p;
        while (pos < end && is_other(ch_[pos].cp)) ++pos;
      } else {
        pos = whitespace_run(pos, end);
      }
      emit(start, pos);
    }
  }

  void split_llama3(size_t begin, size_t end, size_t max_digits) {
    size_t pos = begin;
    while (pos < end) {
      const size_t start = pos;
      const uint32_t c = ch_[pos].cp;
      if (size_t n = contraction(pos, end, true)) {
        pos += n;
      } else if (is_letter(c) ||
                 (!is_newline(c) && !is_number(c) && pos + 1 < end && is_letter(ch_[pos + 1].cp))) {
        // [^\r\n\p{L}\p{N}]?\p{L}+ : one optional non-newline, non-alphanumeric prefix.
        ++pos;
        while (pos < end && is_letter(ch_[pos].cp)) ++pos;
      } else if (is_number(c)) {
        const size_t stop = pos + max_digits;
        while (pos < end && pos < stop && is_number(ch_[pos].cp)) ++pos;
      } else {
        const size_t p = (c == ' ' && pos + 1 < end) ? pos + 1 : pos;
        if (is_other(ch_[p].cp)) {  //  ?[^\s\p{L}\p{N}]+[\r\n]*
          pos = p;
          while (pos < end && is_other(ch_[pos].cp)) ++pos;
          while (pos < end && is_newline(ch_[pos].cp)) ++pos;
        } else {
          // \s*[\r\n]+ : a whitespace run containing a newline ends after its last newline.
          size_t q = pos, after_newline = 0;
          while (q < end && is_whitespace(ch_[q].cp)) {
            if (is_newline(ch_[q].cp)) after_newline = q + 1;
            ++q;
          }
          pos = after_newline != 0 ? after_newline : whitespace_run(pos, end);
        }
      }
      emit(start, pos);
    }
  }

  void emit(size_t first_char, size_t end_char) {
    const size_t off = ch_[first_char].offset;
    const Utf8Char& last = ch_[end_char - 1];
    out_.push_back({off, last.offset + last.len - off});
  }

 private:
  const std::vector<Utf8Char>& ch_;
  std::vector<Piece>& out_;
};

}  // namespace

PreTokenizer pretokenizer_from_name(const std::string& pre) {
  if (pre == "gpt2" || pre == "default" || pre.empty()) return PreTokenizer::kGpt2;
  if (pre == "smollm" || pre == "starcoder" || pre == "refact") return PreTokenizer::kSmolLM;
  if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") return PreTokenizer::kLlama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  KVEVICT_FAIL("tokenizer.ggml.pre = '", pre,
               "' is not supported; expected one of gpt2, default, smollm, starcoder, refact, "
               "llama3, llama-bpe, qwen2, deepseek-r1-qwen");
}

std::vector<Piece> pretokenize(const std::string& text, PreTokenizer kind) {
  const std::vector<Utf8Char> ch = utf8_decode(text);
  std::vector<Piece> out;
  Splitter s(ch, out);
  switch (kind) {
    case PreTokenizer::kGpt2: s.split_gpt2(0, ch.size()); break;
    case PreTokenizer::kSmolLM: {
      // Every number character is its own piece; the text between goes through gpt2.
      size_t seg = 0;
      for (size_t i = 0; i < ch.size(); ++i) {
        if (!is_number(ch[i].cp)) continue;
        s.split_gpt2(seg, i);
        s.emit(i, i + 1);
        seg = i + 1;
      }
      s.split_gpt2(seg, ch.size());
      break;
    }
    case PreTokenizer::kLlama3: s.split_llama3(0, ch.size(), 3); break;
    case PreTokenizer::kQwen2: s.split_llama3(0, ch.size(), 1); break;
  }
  return out;
}

}  // namespace kvevict::tokenizer
