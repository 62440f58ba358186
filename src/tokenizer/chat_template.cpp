// Chat prompts of the supported model families, written by hand rather than by a Jinja engine.
// The family comes from tokenizer.chat_template when present, else from the vocabulary:
//   chatml (SmolLM2, Qwen2): <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
//       plus the template's default system turn when the conversation has none (SmolLM2's
//       "You are a helpful AI assistant named SmolLM, ..." is read from the template text).
//   gemma (Gemma 3): <start_of_turn>user\n{system\n\n}content<end_of_turn>\n ...
//       <start_of_turn>model\n; "assistant" is spelled "model", contents are trimmed, the
//       system message is folded into the first user turn, turns must alternate user/model.
//   llama3: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> ... then the
//       assistant header.
// The prompt never contains BOS: encode(prompt, /*add_bos=*/true) adds it when the model wants it.
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "tokenizer/vocab.h"

namespace kvevict::tokenizer {
namespace {

enum class ChatFamily { kChatML, kGemma, kLlama3 };

ChatFamily detect_family(const Vocab& v) {
  const std::string& t = v.chat_template;
  if (t.find("<|im_start|>") != std::string::npos) return ChatFamily::kChatML;
  if (t.find("<start_of_turn>") != std::string::npos) return ChatFamily::kGemma;
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatFamily::kLlama3;
  if (t.empty()) {
    if (v.find("<start_of_turn>") >= 0) return ChatFamily::kGemma;
    if (v.find("<|im_start|>") >= 0) return ChatFamily::kChatML;
    if (v.find("<|start_header_id|>") >= 0) return ChatFamily::kLlama3;
  }
  KVEVICT_FAIL("chat template of this ", v.arch,
               " model is not one of the supported families "
               "(chatml, gemma, llama3); template starts with '",
               t.substr(0, 80), "'");
}

// The literal system turn a ChatML template inserts when the conversation has none: the text
// between "<|im_start|>system\n" and "<|im_end|>" in a template string literal, if any.
std::string default_system_prompt(const std::string& tmpl) {
  const std::string head = "<|im_start|>system";
  for (size_t at = tmpl.find(head); at != std::string::npos; at = tmpl.find(head, at + 1)) {
    size_t p = at + head.size();
    if (tmpl.compare(p, 2, "\\n") == 0) {
      p += 2;
    } else if (p < tmpl.size() && tmpl[p] == '\n') {
      p += 1;
    } else {
      continue;
    }
    const size_t end = tmpl.find("<|im_end|>", p);
    if (end == std::string::npos) continue;
    const std::string text = tmpl.substr(p, end - p);
    // Only a pure literal counts (not "' + messages[0]['content'] + '").
    if (text.find_first_of("'\"{}") == std::string::npos) return text;
  }
  return "";
}

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

void check_role(const ChatMessage& m, size_t i) {
  KVEVICT_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", "chat message ", i,
                " has role '", m.role, "'; expected system, user or assistant");
}

std::string render_chatml(const Vocab& v, const std::vector<ChatMessage>& messages) {
  std::string out;
  if (messages.empty() || messages[0].role != "system") {
    const std::string sys = default_system_prompt(v.chat_template);
    if (!sys.empty()) out += "<|im_start|>system\n" + sys + "<|im_end|>\n";
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    check_role(messages[i], i);
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  return out + "<|im_start|>assistant\n";
}

std::string render_gemma(const std::vector<ChatMessage>& messages) {
  std::string prefix;
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    prefix = messages[0].content + "\n\n";
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m, i);
    const bool want_user = (i - first) % 2 == 0;
    KVEVICT_CHECK((m.role == "user") == want_user && m.role != "system", "gemma chat message ", i,
                  " has role '", m.role,
                  "'; expected turns alternating user/assistant, starting "
                  "with user (after an optional first system message)");
    out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n";
    if (i == first) out += prefix;
    out += trim(m.content) + "<end_of_turn>\n";
  }
  return out + "<start_of_turn>model\n";
}

std::string render_llama3(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    check_role(messages[i], i);
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
           trim(messages[i].content) + "<|eot_id|>";
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

}  // namespace

std::string render_chat(const Vocab& vocab, const std::vector<ChatMessage>& messages) {
  switch (detect_family(vocab)) {
    case ChatFamily::kChatML: return render_chatml(vocab, messages);
    case ChatFamily::kGemma: return render_gemma(messages);
    case ChatFamily::kLlama3: return render_llama3(messages);
  }
  return "";
}

}  // namespace kvevict::tokenizer
