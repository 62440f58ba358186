#include "cli/prompt_args.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/corpus_arg.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "eval/corpus.h"
#include "eval/sample.h"
#include "io/input_file.h"
#include "kvevict/error.h"
#include "tokenizer/unicode.h"

namespace kvevict::cli {

void check_utf8(const std::string& text, const std::string& what) {
  for (const auto& c : tokenizer::utf8_decode(text)) {
    if (c.cp != tokenizer::kInvalidCodepoint) continue;
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x",
                  static_cast<unsigned>(static_cast<uint8_t>(text[c.offset])));
    KVEVICT_FAIL(what, ": byte ", byte, " at offset ", c.offset,
                 " is not valid UTF-8; expected UTF-8 text (convert it first, e.g. with iconv)");
  }
}

void PromptArgs::add_to(CLI::App& cmd, const std::string& what, bool with_prose) {
  p = cmd.add_option("-p,--prompt", text, what + " text");
  f = cmd.add_option("-f,--file", file, "Read " + what + " from a file")->excludes(p);
  if (with_prose)
    length_opt = add_integer(cmd, "--length", length, int64_t{2}, kMaxTokens,
                             "Without -p/-f: the prompt is this many tokens of Austen's prose (at "
                             "most the model's context)")
                     ->capture_default_str();
}

bool PromptArgs::given() const {
  return p->count() > 0 || f->count() > 0;
}

std::string PromptArgs::read(uint64_t max_bytes) const {
  KVEVICT_CHECK(given(), "no prompt; give -p TEXT or -f FILE");
  std::string prompt;
  if (p->count() > 0) {
    KVEVICT_CHECK(!text.empty(), "-p: the prompt is empty; expected some text");
    KVEVICT_CHECK(text.size() <= max_bytes, "-p: the prompt is ", text.size(),
                  " bytes, more than any prompt that fits the model (", max_bytes, " bytes)");
    prompt = text;
  } else {
    prompt = io::read_text_input(file, "-f", max_bytes);
    KVEVICT_CHECK(!prompt.empty(), "-f ", file, ": the prompt file is empty; expected some text");
  }
  check_utf8(prompt, p->count() > 0 ? "-p" : "-f " + file);
  return prompt;
}

std::vector<int32_t> prompt_or_prose_tokens(const ModelInfo& model, const PromptArgs& prompt) {
  const int64_t length = prompt.length;
  const int64_t ctx = model.config.context_length;
  std::vector<int32_t> tokens;
  if (prompt.given()) {
    tokens =
        model.tokenizer->encode(prompt.read(eval::max_text_bytes(*model.tokenizer, ctx)), true);
    KVEVICT_CHECK(static_cast<int64_t>(tokens.size()) <= ctx, "the prompt has ", tokens.size(),
                  " tokens, more than ", model.context_text());
    return tokens;
  }
  KVEVICT_CHECK(length >= 2 && length <= ctx, "--length ", length, " is out of range; expected 2..",
                ctx, " (", model.context_text(), ")");
  const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
  // About 4 characters a token; take 8 a token, then cut to the length.
  tokens =
      model.tokenizer->encode(corpus.prose_text().substr(0, static_cast<size_t>(length) * 8), true);
  if (static_cast<int64_t>(tokens.size()) > length) tokens.resize(static_cast<size_t>(length));
  return tokens;
}

}  // namespace kvevict::cli
