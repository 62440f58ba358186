#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace kvevict::tokenizer {
namespace {

bool in_ranges(const CodepointRange* ranges, int count, uint32_t cp) {
  const CodepointRange* end = ranges + count;
  const CodepointRange* it = std::upper_bound(
      ranges, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

// GPT-2 maps the printable Latin-1 bytes to themselves and the other 68 bytes to 256 + k, in
// byte order (so the map is a bijection onto printable characters).
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

int utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

std::vector<Utf8Char> utf8_decode(const std::string& text) {
  std::vector<Utf8Char> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    const int len = utf8_len(c);
    uint32_t cp = kInvalidCodepoint;
    if (len == 1) {
      cp = c < 0x80 ? c : kInvalidCodepoint;
    } else if (i + len <= n) {
      cp = c & (0x7F >> len);
      bool ok = true;
      for (int k = 1; k < len; ++k) {
        if ((s[i + k] & 0xC0) != 0x80) ok = false;
        cp = (cp << 6) | (s[i + k] & 0x3F);
      }
      // Overlong encodings, surrogates and values past U+10FFFF are not valid UTF-8.
      static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
      if (!ok || cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        cp = kInvalidCodepoint;
      }
    }
    if (cp == kInvalidCodepoint) {
      out.push_back({kInvalidCodepoint, static_cast<uint32_t>(i), 1});
      i += 1;
    } else {
      out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
      i += static_cast<size_t>(len);
    }
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp != kInvalidCodepoint && in_ranges(kLetterRanges, kLetterRangeCount, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalidCodepoint && in_ranges(kNumberRanges, kNumberRangeCount, cp);
}

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint32_t byte_to_codepoint(uint8_t b) {
  return byte_map().to_cp[b];
}

int codepoint_to_byte(uint32_t cp) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_map().to_cp[b]] = b;
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace kvevict::tokenizer
