#include <algorithm>

#include "eval/sample.h"
#include "kvevict/error.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval {

PromptStyle prompt_style_parse(const std::string& s) {
  if (s == "raw") return PromptStyle::kRaw;
  if (s == "chat") return PromptStyle::kChat;
  KVEVICT_FAIL("prompt style '", s, "' is unknown; expected 'raw' or 'chat'");
}

const char* prompt_style_name(PromptStyle s) {
  return s == PromptStyle::kChat ? "chat" : "raw";
}

void format_prompt(Sample& sample, PromptStyle style, const Tokenizer* tokenizer) {
  const std::string user = sample.context + sample.question;
  if (style == PromptStyle::kRaw) {
    sample.input = user + sample.answer_prefix;
    sample.input_context_end = sample.context.size();
    return;
  }
  KVEVICT_CHECK(tokenizer != nullptr, "prompt style 'chat' for task '", sample.task,
                "' needs a tokenizer; expected a non-null tokenizer");
  const std::string rendered = tokenizer->apply_chat_template({{"user", user}});
  const size_t at = rendered.find(user);
  KVEVICT_CHECK(at != std::string::npos, "the chat template did not keep the user text of task '",
                sample.task, "' verbatim (", rendered.size(),
                " bytes rendered); expected it to contain the text, so the context can be split "
                "from the question; use prompt style 'raw'");
  sample.input = rendered + sample.answer_prefix;
  sample.input_context_end = at + sample.context.size();
}

uint64_t max_text_bytes(const Tokenizer& tokenizer, int64_t tokens) {
  KVEVICT_CHECK(tokens >= 0, "token count ", tokens, " is negative");
  uint64_t longest = 1;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    longest = std::max<uint64_t>(longest, tokenizer.token_text(id).size());
  return static_cast<uint64_t>(tokens) * longest;
}

}  // namespace kvevict::eval
