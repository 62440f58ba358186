// Fuzzes both real tokenizers (byte-level BPE: SmolLM2; SentencePiece: Gemma 3), built once from
// the GGUF files in the model dir. Any byte string must encode to ids in [0, vocab) (or throw
// kvevict::Error) and decode without crashing; valid UTF-8 must round-trip exactly through
// decode(encode(s)), less the bytes the vocabulary has no token for and with SentencePiece's
// space mark U+2581 read as a space. Without the models every input is a no-op (one note at
// start-up).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tokenizer.h"

namespace {

struct Loaded {
  std::unique_ptr<kvevict::gguf::File> file;  // kept open: a tokenizer may view its metadata
  std::unique_ptr<kvevict::Tokenizer> tok;
  // Bytes the vocabulary cannot represent (SmolLM2 has no token for e.g. 0x14 or 0xF2): the BPE
  // encoder drops them, as Hugging Face tokenizers does, so they are removed from the expectation.
  bool dropped[256] = {};
  // SentencePiece writes spaces as U+2581 and so decodes a literal U+2581 in the input as a space.
  bool mark_is_space = false;
};

constexpr const char* kSpaceMark = "\xe2\x96\x81";  // U+2581

std::vector<Loaded>& tokenizers() {
  static std::vector<Loaded> all;
  return all;
}

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): only such text is
// expected to round-trip; invalid bytes may be replaced or split differently.
bool valid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* name : {kvevict::io::kSmolLM2File, kvevict::io::kGemma3File}) {
    const std::string path = kvevict::io::model_path(KVEVICT_SOURCE_DIR, name);
    if (!kvevict::io::file_exists(path)) {
      std::fprintf(stderr, "tokenizer_fuzzer: %s absent (run scripts/fetch_models.sh); skipped\n",
                   path.c_str());
      continue;
    }
    Loaded l;
    l.file = kvevict::gguf::File::open(path);
    l.tok = kvevict::Tokenizer::from_gguf(*l.file);
    for (int b = 0; b < 256; ++b) {
      const std::string one(1, static_cast<char>(b));
      l.dropped[b] = l.tok->decode(l.tok->encode(one, false)).empty();
    }
    l.mark_is_space = l.tok->decode(l.tok->encode(kSpaceMark, false)) == " ";
    tokenizers().push_back(std::move(l));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool utf8 = valid_utf8(data, size);
  for (const Loaded& l : tokenizers()) {
    std::vector<int32_t> ids;
    try {
      ids = l.tok->encode(text, false);
    } catch (const kvevict::Error&) {
      continue;
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= l.tok->vocab_size()) std::abort();
      (void)l.tok->token_text(id);
    }
    const std::string back = l.tok->decode(ids);
    std::string expected;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<uint8_t>(text[i]);
      if (l.mark_is_space && text.compare(i, 3, kSpaceMark) == 0) {
        expected.push_back(' ');
        i += 2;
      } else if (!l.dropped[b]) {
        expected.push_back(text[i]);
      }
    }
    if (utf8 && back != expected) {
      std::fprintf(stderr, "round trip changed %zu bytes into %zu bytes\n", text.size(),
                   back.size());
      std::abort();
    }
  }
  return 0;
}
