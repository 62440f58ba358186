// UTF-8 decoding and the few Unicode properties the pre-tokenizers need (letters \p{L},
// numbers \p{N}, whitespace \s). Internal to src/tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::tokenizer {

struct CodepointRange {
  uint32_t first, last;  // inclusive
};
extern const CodepointRange kLetterRanges[];
extern const int kLetterRangeCount;
extern const CodepointRange kNumberRanges[];
extern const int kNumberRangeCount;

// Marks a byte that does not start a valid UTF-8 sequence; it decodes to itself as one unit of
// category "other", so the byte survives tokenization unchanged.
constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;

// One decoded character: its code point and where its bytes are in the text.
struct Utf8Char {
  uint32_t cp;
  uint32_t offset;  // byte offset in the text
  uint32_t len;     // 1..4 bytes
};

// Decodes `text` leniently: an invalid or truncated sequence yields one kInvalidCodepoint per
// byte instead of failing (arbitrary bytes must still tokenize, via byte fallback).
std::vector<Utf8Char> utf8_decode(const std::string& text);
// Length of the UTF-8 sequence starting at byte `c` (1 for invalid lead bytes).
int utf8_len(uint8_t c);
void utf8_append(std::string& out, uint32_t cp);

bool is_letter(uint32_t cp);  // general category L*
bool is_number(uint32_t cp);  // general category N*
bool is_whitespace(
    uint32_t cp);  // the White_Space property (what \s matches in the models' regexes)

// GPT-2's reversible byte -> printable code point map ("Ġ" is the space byte 0x20).
uint32_t byte_to_codepoint(uint8_t b);
// The inverse; returns -1 for code points that are not in the map.
int codepoint_to_byte(uint32_t cp);

}  // namespace kvevict::tokenizer
