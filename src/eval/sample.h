// One evaluation example, whether generated (RULER-style tasks) or read from a JSONL file, and the
// prompt it becomes. The prompt is split in two at the end of the context so that both protocols
// of SPEC section 7 see the same tokens: query-aware prefills context + question together,
// query-agnostic compresses the context first and appends the question after.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict {
class Tokenizer;
}

namespace kvevict::eval {

// Where a needle (or a variable assignment) went, for checks and depth analyses.
struct NeedlePlacement {
  std::string text;    // the inserted sentence
  size_t offset = 0;   // byte offset of the sentence in Sample::context
  double depth = 0.0;  // requested depth in percent of the haystack (0 = start, 100 = end)
};

struct Sample {
  std::string task;                  // "niah_single_1", ..., or the JSONL row's task
  std::string context;               // instructions + haystack: the part eviction may compress
  std::string question;              // the query, placed right after the context
  std::string answer_prefix;         // begins the model's answer (RULER's answer_prefix)
  std::vector<std::string> answers;  // every string the metric looks for
  int max_new_tokens = 0;            // greedy decode length (RULER's tokens_to_generate)
  std::string input;                 // the full prompt: chat-formatted (or raw) + answer_prefix
  size_t input_context_end = 0;      // bytes of `input` that belong to the context part
  uint64_t seed = 0;                 // regenerates this sample (0 for external data)
  std::string origin;                // external data: "file.jsonl line 3"; empty when generated

  // Filled by the generators; empty or zero for external data.
  int64_t target_length = 0;    // the length the sample was sized to, in tokens
  int64_t index = -1;           // its index in its split (eval/split.h), -1 for external data
  int64_t length = 0;           // tokens of the sized quantity (see GenerateOptions)
  int64_t haystack_amount = 0;  // haystack units used (words, sentences, repeats, list words)
  std::vector<NeedlePlacement> needles;

  std::string input_context() const { return input.substr(0, input_context_end); }
  std::string input_question() const { return input.substr(input_context_end); }
};

// How context + question become the prompt.
enum class PromptStyle : uint8_t {
  kRaw,   // context + question + answer_prefix (base models; RULER without a model template)
  kChat,  // the tokenizer's chat template around one user turn (context + question), then the
          // answer prefix after the opened assistant turn (RULER's chat-model layout)
};
PromptStyle prompt_style_parse(const std::string& s);  // "raw" | "chat"
const char* prompt_style_name(PromptStyle s);

// Fills sample.input and sample.input_context_end from context, question and answer_prefix.
// kChat needs a tokenizer (throws otherwise, or when the template does not contain the user text
// verbatim, since then the context/question split point is unknown).
void format_prompt(Sample& sample, PromptStyle style, const Tokenizer* tokenizer);

// The most bytes of text that can tokenize to `tokens` tokens or fewer: `tokens` x the longest
// token's text, since no token covers more input than its own text. A prompt longer than this
// cannot fit a context of `tokens`, so it can be refused by its size, before tokenizing. (Text
// made of bytes the vocabulary has no token for, which byte-level BPE drops, could tokenize
// shorter; such text is refused too, with a message saying why.)
uint64_t max_text_bytes(const Tokenizer& tokenizer, int64_t tokens);

}  // namespace kvevict::eval
