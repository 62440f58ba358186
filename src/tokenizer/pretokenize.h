// Pre-tokenizer splits of byte-level BPE models, written out by hand (no std::regex: it is slow
// and has no \p{L}/\p{N}). Each function reproduces one regex's leftmost-first matching:
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm: \p{N} isolated first (each digit its own piece), then gpt2 on the rest
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 with \p{N} (single digits) instead of \p{N}{1,3}
// Letters and numbers are the Unicode general categories L* and N* (unicode_table.cpp);
// whitespace is the White_Space property. Bytes that are not valid UTF-8 count as "other".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kvevict::tokenizer {

enum class PreTokenizer { kGpt2, kSmolLM, kLlama3, kQwen2 };

// Maps tokenizer.ggml.pre to a splitter; throws naming an unsupported value.
PreTokenizer pretokenizer_from_name(const std::string& pre);

struct Piece {
  size_t offset, len;  // bytes of the text
};
// Splits `text` into pieces that cover it exactly, in order.
std::vector<Piece> pretokenize(const std::string& text, PreTokenizer kind);

}  // namespace kvevict::tokenizer
