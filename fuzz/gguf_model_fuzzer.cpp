// Structure-aware fuzzing of the model loader (issue 13). Random byte flips (gguf_fuzzer) test
// the container parser but almost never produce a file whose metadata VALUES are wrong while it
// still parses, so they never reached the semantic checks. Here libFuzzer's mutations are
// replaced by tests/io/gguf_mutator.h, which parses the input GGUF and edits one to three typed
// fields at a time (a hyper-parameter set to NaN, a negative, zero, a huge value or the wrong
// type; a key removed or duplicated; a tensor's offset, shape, type or name changed), with a
// byte-level mutation now and then. Seeds: the tiny llama / qwen2 / gemma3 models of
// tools/fuzz/make_seeds.py (gguf_model/). Every input goes through Model::load and the oracle of
// tests/reliability/model_file_oracle.h: loads sound (config valid, tensors disjoint and inside
// the file, a finite forward from sane weights) or throws kvevict::Error. Anything else --
// a crash, a sanitizer report, a non-kvevict exception, an oracle violation -- is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "fuzz_file.h"
#include "io/gguf_mutator.h"
#include "reliability/model_file_oracle.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937_64 rng(seed);
  auto doc = kvevict::testing::GgufDoc::parse(data, size);
  if (!doc || rng() % 16 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) kvevict::testing::mutate(*doc, rng);
  const std::vector<uint8_t> out = doc->serialize();
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  const kvevict::testing::OracleResult r = kvevict::testing::check_model_file(file.path());
  if (!r.violation.empty()) {
    std::fprintf(stderr, "gguf_model_fuzzer: oracle violation: %s\n", r.violation.c_str());
    std::abort();
  }
  return 0;
}
