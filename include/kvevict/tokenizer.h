// Tokenizers built from GGUF metadata: SentencePiece-style ("llama" model: Gemma 3, Llama 2) and
// byte-level BPE ("gpt2" model: SmolLM2, Llama 3, Qwen2) with the pre-tokenizer splits of the
// supported models, plus the chat templates of the supported models.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvevict {

namespace gguf {
class File;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text -> ids. add_bos prepends BOS when the model's metadata asks for it. Control and
  // user-defined tokens written in the text ("<|im_end|>", "<start_of_turn>") are matched whole
  // first, as llama.cpp does with parse_special. Thread-safe (no mutable state).
  virtual std::vector<int32_t> encode(const std::string& text, bool add_bos) const = 0;
  // Ids -> text; control tokens render as their text, so decode(encode(s, false)) == s.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The text of one token as it would appear in a streamed decode (bytes, may be partial UTF-8).
  virtual std::string token_text(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual bool is_end_of_generation(int32_t id) const = 0;  // eos, <end_of_turn>, <|im_end|>, ...
  // The prompt for a conversation in the model's chat template, ending with the assistant turn
  // opened (add_generation_prompt). Never contains BOS: encode(prompt, true) adds it. Throws for
  // an unsupported template family or a bad role/turn order.
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages) const = 0;

  // Builds the tokenizer a GGUF file describes; throws naming an unsupported tokenizer model.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
};

}  // namespace kvevict
