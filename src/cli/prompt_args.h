// Prompt text from the command line (-p TEXT, -f FILE, --question): checked before it reaches
// the tokenizer. Invalid UTF-8 is an ERROR, not replaced: the tokenizers would encode the stray
// bytes through byte fallback without a word, and a prompt in another encoding (Latin-1,
// UTF-16) would run as garbage; the error names the option and the first bad byte's offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kvevict::cli {

struct ModelInfo;

// Throws "<what>: byte 0xff at offset 17 is not valid UTF-8; ..." for the first invalid byte
// (strict: no overlong forms, surrogates or code points past U+10FFFF).
void check_utf8(const std::string& text, const std::string& what);

// -p TEXT / -f FILE, at most one of them; with_prose adds --length N, the prompt when neither is
// given (N tokens of Austen's prose).
struct PromptArgs {
  std::string text, file;
  int64_t length = 1024;
  CLI::Option* p = nullptr;
  CLI::Option* f = nullptr;
  CLI::Option* length_opt = nullptr;
  void add_to(CLI::App& cmd, const std::string& what, bool with_prose = false);
  bool given() const;
  // The prompt text: -p told apart from an absent option (`-p ''` is "the prompt is empty"), a
  // file read with io::read_text_input (a directory, /dev/zero or a file over max_bytes is
  // refused before it is read whole), then checked to be non-empty UTF-8.
  std::string read(uint64_t max_bytes) const;
};

// The prompt of analyze -m and capture: -p/-f when given, else the first --length tokens of
// the corpus's Austen prose; checked against the model's context before any prefill.
std::vector<int32_t> prompt_or_prose_tokens(const ModelInfo& model, const PromptArgs& prompt);

}  // namespace kvevict::cli
