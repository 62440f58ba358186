// The oracle of the structure-aware GGUF fuzzing (tests/io/gguf_mutator.h): a model file either
// fails to load with kvevict::Error, or it loads and nothing about it is garbage:
//   - the config passes ModelConfig::validate() (every hyper-parameter the runtime reads is in
//     range and finite);
//   - every tensor's bytes lie inside the data section and no two tensors share a byte;
//   - the tokenizer, when the file has one that builds, has no more tokens than the embedding
//     has rows, and encodes text to ids inside the vocabulary;
//   - a short prefill and a decode step run, and produce V logits that are all finite whenever
//     the weights themselves are finite and of a sane size (|w| <= 1e4: a mutated tensor type
//     reinterprets bytes, which may decode to 1e38; that is the file's data, not its metadata).
// Header-only (the fuzz target includes it too); returns "" or what was violated.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/model/model.h"
#include "kvevict/tokenizer.h"
#include "model/session.h"

namespace kvevict::testing {

struct OracleResult {
  bool loaded = false;
  std::string error;      // the kvevict::Error message when not loaded
  std::string violation;  // non-empty: a loaded model broke an invariant (a finding)
};

// The file's tensors, dequantized, are finite and |w| <= 1e4 (read from the GGUF itself, so the
// check does not depend on how the runtime stores its weights).
inline bool weights_sane(const gguf::File& f) {
  for (const auto& info : f.tensors()) {
    const HostTensor t = gguf::dequantize(info);
    const float* p = t.ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(p[i]) || std::fabs(p[i]) > 1e4f) return false;
  }
  return true;
}

inline OracleResult check_model_file(const std::string& path) {
  OracleResult r;
  std::shared_ptr<const Model> model;
  try {
    model = Model::load(path);
  } catch (const Error& e) {
    r.error = e.what();
    return r;
  }
  r.loaded = true;
  const ModelConfig& c = model->config();
  try {
    c.validate();
  } catch (const Error& e) {
    r.violation = std::string("loaded a config that fails validate(): ") + e.what();
    return r;
  }
  const gguf::File& f = *model->file();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) in the data section
  for (const auto& t : f.tensors()) {
    if (t.offset + t.nbytes < t.offset) return r.violation = "tensor " + t.name + " overflows", r;
    ranges.emplace_back(t.offset, t.offset + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return r.violation = "two tensors share bytes of the data section", r;

  try {
    const auto tok = Tokenizer::from_gguf(f);
    if (tok->vocab_size() > c.vocab_size)
      return r.violation = "tokenizer has " + std::to_string(tok->vocab_size()) + " tokens for " +
                           std::to_string(c.vocab_size) + " embedding rows",
             r;
    for (int32_t id : tok->encode("Hello, world! 123", true))
      if (id < 0 || id >= c.vocab_size) return r.violation = "token id out of range", r;
  } catch (const Error&) {
    // No usable tokenizer: the commands refuse the model; the runtime itself still works.
  }

  try {
    const int64_t n = std::min<int64_t>(3, c.context_length);
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < n; ++i)
      prompt.push_back(static_cast<int32_t>((7 * i + 1) % c.vocab_size));
    Session s(model);
    s.prefill(prompt);
    std::vector<float> logits = s.logits();
    if (c.context_length > n) {
      s.decode(prompt.back());
      logits = s.logits();
    }
    if (static_cast<int64_t>(logits.size()) != c.vocab_size)
      return r.violation = "logits of size " + std::to_string(logits.size()), r;
    if (weights_sane(f))
      for (float x : logits)
        if (!std::isfinite(x)) return r.violation = "non-finite logits from finite weights", r;
  } catch (const Error& e) {
    return r.violation = std::string("a loaded model failed its first forward: ") + e.what(), r;
  }
  return r;
}

}  // namespace kvevict::testing
