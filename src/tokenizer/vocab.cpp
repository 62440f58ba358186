#include "tokenizer/vocab.h"

#include <algorithm>

#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict::tokenizer {

void SpecialMatcher::add(const std::string& text, int32_t id) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char c : text) {
    int32_t child = -1;
    for (const auto& [b, n] : nodes_[node].next)
      if (b == c) child = n;
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(c, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  if (nodes_[node].token < 0) nodes_[node].token = id;  // the first id of a duplicated text wins
}

std::vector<Fragment> SpecialMatcher::partition(const std::string& text) const {
  std::vector<Fragment> out;
  size_t raw_start = 0, i = 0;
  while (i < text.size()) {
    int32_t node = 0, best_token = -1;
    size_t best_len = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto c = static_cast<unsigned char>(text[j]);
      int32_t child = -1;
      for (const auto& [b, n] : nodes_[node].next)
        if (b == c) child = n;
      if (child < 0) break;
      node = child;
      if (nodes_[node].token >= 0) best_token = nodes_[node].token, best_len = j + 1 - i;
    }
    if (best_token < 0) {
      ++i;
      continue;
    }
    if (i > raw_start) out.push_back({-1, raw_start, i - raw_start});
    out.push_back({best_token, i, best_len});
    i += best_len;
    raw_start = i;
  }
  if (text.size() > raw_start) out.push_back({-1, raw_start, text.size() - raw_start});
  return out;
}

Vocab load_vocab(const gguf::File& f) {
  Vocab v;
  v.model = f.get_string("tokenizer.ggml.model", "");
  v.arch = f.get_string("general.architecture", "");
  const std::string kTokens = "tokenizer.ggml.tokens";
  const auto& toks = f.get(kTokens).as_array(kTokens);
  KVEVICT_CHECK(!toks.empty(), "gguf ", f.path(), ": ", kTokens,
                " is empty; expected a vocabulary");
  v.tokens.reserve(toks.size());
  for (const auto& t : toks) v.tokens.push_back(t.as_string(kTokens));
  const size_t n = v.tokens.size();
  if (f.has("tokenizer.ggml.scores")) {
    const auto& sc = f.get("tokenizer.ggml.scores").as_array("tokenizer.ggml.scores");
    KVEVICT_CHECK(sc.size() == n, "gguf ", f.path(), ": tokenizer.ggml.scores has ", sc.size(),
                  " entries; expected one per token (", n, ")");
    for (const auto& s : sc)
      v.scores.push_back(static_cast<float>(s.as_float("tokenizer.ggml.scores")));
  }
  v.types.assign(n, kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    const auto& ty = f.get("tokenizer.ggml.token_type").as_array("tokenizer.ggml.token_type");
    KVEVICT_CHECK(ty.size() == n, "gguf ", f.path(), ": tokenizer.ggml.token_type has ", ty.size(),
                  " entries; expected one per token (", n, ")");
    for (size_t i = 0; i < n; ++i)
      v.types[i] = static_cast<int32_t>(ty[i].as_int("tokenizer.ggml.token_type"));
  }
  v.index.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) v.index.emplace(v.tokens[i], static_cast<int32_t>(i));

  auto id_key = [&](const char* key) -> int32_t {
    const int64_t id = f.get_int(key, -1);
    KVEVICT_CHECK(id >= -1 && id < static_cast<int64_t>(n), "gguf ", f.path(), ": ", key, " = ", id,
                  " is outside the vocabulary of ", n, " tokens");
    return static_cast<int32_t>(id);
  };
  v.bos = id_key("tokenizer.ggml.bos_token_id");
  v.eos = id_key("tokenizer.ggml.eos_token_id");
  v.unk = id_key("tokenizer.ggml.unknown_token_id");
  v.eot = id_key("tokenizer.ggml.eot_token_id");
  // llama.cpp's defaults when the keys are absent: sentencepiece vocabularies add BOS and a
  // leading space, byte-level ones do neither.
  const bool spm = v.model == "llama";
  v.add_bos = f.has("tokenizer.ggml.add_bos_token")
                  ? f.get("tokenizer.ggml.add_bos_token").as_bool("tokenizer.ggml.add_bos_token")
                  : spm;
  v.add_space_prefix =
      f.has("tokenizer.ggml.add_space_prefix")
          ? f.get("tokenizer.ggml.add_space_prefix").as_bool("tokenizer.ggml.add_space_prefix")
          : spm;
  v.chat_template = f.get_string("tokenizer.chat_template", "");
  v.pre = f.get_string("tokenizer.ggml.pre", "default");
  if (f.has("tokenizer.ggml.merges")) {
    const auto& m = f.get("tokenizer.ggml.merges").as_array("tokenizer.ggml.merges");
    v.merges.reserve(m.size());
    for (const auto& e : m) v.merges.push_back(e.as_string("tokenizer.ggml.merges"));
  }

  for (size_t i = 0; i < n; ++i)
    if (v.types[i] == kControl || v.types[i] == kUserDefined)
      v.specials.add(v.tokens[i], static_cast<int32_t>(i));

  for (int32_t id : {v.eos, v.eot})
    if (id >= 0) v.end_of_generation.push_back(id);
  for (const char* t : {"<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>"}) {
    const int32_t id = v.find(t);
    if (id >= 0 && v.types[id] == kControl) v.end_of_generation.push_back(id);
  }
  std::sort(v.end_of_generation.begin(), v.end_of_generation.end());
  v.end_of_generation.erase(std::unique(v.end_of_generation.begin(), v.end_of_generation.end()),
                            v.end_of_generation.end());
  return v;
}

VocabTokenizer::VocabTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

void VocabTokenizer::check_id(int32_t id) const {
  KVEVICT_CHECK(id >= 0 && id < vocab_size(), "token id ", id,
                " is outside the vocabulary; expected 0..", vocab_size() - 1);
}

bool VocabTokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(vocab_.end_of_generation.begin(), vocab_.end_of_generation.end(), id);
}

std::string VocabTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages) const {
  return render_chat(vocab_, messages);
}

std::string VocabTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_text(id);
  return out;
}

}  // namespace kvevict::tokenizer

namespace kvevict {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  tokenizer::Vocab v = tokenizer::load_vocab(file);
  if (v.model == "llama") return tokenizer::make_spm_tokenizer(std::move(v));
  if (v.model == "gpt2") {
    KVEVICT_CHECK(!v.merges.empty(), "gguf ", file.path(),
                  ": byte-level tokenizer without tokenizer.ggml.merges; expected its merge list");
    return tokenizer::make_bpe_tokenizer(std::move(v));
  }
  KVEVICT_FAIL(
      "gguf ", file.path(), ": tokenizer.ggml.model = '", v.model,
      "' is not supported; expected 'llama' (sentencepiece BPE) or 'gpt2' (byte-level BPE)");
}

}  // namespace kvevict
