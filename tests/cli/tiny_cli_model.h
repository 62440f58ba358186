// A tiny model the CLI can run in milliseconds: tests/model/tiny_model.h's random weights (one
// architecture, D = 24, 3 layers) plus a SentencePiece byte vocabulary (<unk> <s> </s> and the
// 256 byte tokens, plus a few pieces), so every command that needs a tokenizer runs on it. The
// vocabulary is added through the GGUF mutator's typed editing (tests/io/gguf_mutator.h).
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf_mutator.h"
#include "model/tiny_model.h"

namespace kvevict::testing {

struct TinyCliModel {
  std::unique_ptr<TempFile> file;
  std::string path() const { return file->path(); }
};

// The GGUF of a tiny model with a vocabulary, before it is written (tests edit it further).
inline GgufDoc tiny_cli_doc(const std::string& arch = "llama", int ctx = 256) {
  const SpmVocabulary v = spm_byte_vocabulary({{"\xE2\x96\x81the", -1.0f},
                                               {"\xE2\x96\x81"
                                                "a",
                                                -1.0f},
                                               {"e", -1.0f}});
  TinySpec spec;
  spec.arch = arch;
  spec.V = static_cast<int>(v.tokens.size());
  spec.ctx = ctx;
  spec.sliding_window = 8;
  const TinyModel m = make_tiny_model(spec, "tiny_cli_base_" + arch);
  std::ifstream in(m.file->path(), std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                   std::istreambuf_iterator<char>()};
  GgufDoc d = *GgufDoc::parse(bytes.data(), bytes.size());
  d.set_string("tokenizer.ggml.model", "llama");
  d.set_string_array("tokenizer.ggml.tokens", v.tokens);
  d.set_array<float>("tokenizer.ggml.scores", GgufType::kF32, v.scores);
  d.set_array<int32_t>("tokenizer.ggml.token_type", GgufType::kI32, v.types);
  d.set<uint32_t>("tokenizer.ggml.bos_token_id", GgufType::kU32, 1);
  d.set<uint32_t>("tokenizer.ggml.eos_token_id", GgufType::kU32, 2);
  d.set<uint32_t>("tokenizer.ggml.unknown_token_id", GgufType::kU32, 0);
  return d;
}

inline TinyCliModel write_tiny_cli_model(const GgufDoc& d, const std::string& stem) {
  TinyCliModel m;
  m.file = std::make_unique<TempFile>(stem + ".gguf");
  m.file->write(d.serialize());
  return m;
}

}  // namespace kvevict::testing
