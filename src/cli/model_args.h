// Options shared by the commands that run a model (generate, demo, eval, ppl, analyze -m,
// capture).
#pragma once

#include <memory>
#include <string>

#include "kvevict/io/gguf.h"
#include "kvevict/model/config.h"
#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
#include "kvevict/tokenizer.h"

namespace CLI {
class App;
}

namespace kvevict::cli {

// What the model's GGUF metadata says, read without its weights: the file (mapped, validated),
// the config and the tokenizer. Milliseconds, where loading the weights takes seconds, so every
// check that needs only the context length or the tokenizer (prompt sizes, budgets against the
// prompt, dataset rows) runs on this before load().
struct ModelInfo {
  std::unique_ptr<gguf::File> file;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  // "the 8192-token context of SmolLM2 ..." for messages.
  std::string context_text() const;
};

struct ModelArgs {
  std::string model = "smollm2";
  std::string device = "cpu";
  std::string kv_dtype = "f32";
  int threads = 0;
  void add_to(CLI::App& cmd);
  // Checks --device, then reads the model's metadata and tokenizer (no weights).
  ModelInfo inspect() const;
  // Checks --device, sets the thread count, loads the model on the host (its tokenizer and, on
  // the CPU, its weights).
  std::shared_ptr<const Model> load() const;
  // The --device checks of inspect() and load() alone (for --dummy models, which load nothing):
  // a known name, and for cuda a GPU runtime this build and machine can run, so that a missing
  // GPU is said before any work.
  void check_device() const;
  // The runtime every model command runs on: the model on --device (uploaded to the GPU for
  // cuda), with --kv-dtype for the CPU cache; `progress` follows the CPU prefill.
  std::shared_ptr<const ModelRuntime> runtime(std::shared_ptr<const Model> model,
                                              ProgressFn progress = nullptr) const;
  RuntimeOptions runtime_options(ProgressFn progress = nullptr) const;
  bool cuda() const { return device == "cuda"; }
  // The GGUF file -m names (a known name resolved), or "" when it names none: an input that no
  // output may replace (check_output_args).
  std::string file() const;
};

// Decode-time eviction keeps `budget` rows a head and cuts a head past budget + slack; a head
// never holds more than the context, so budget + slack beyond it would never evict, and the
// rows it reserved (budget + slack + 1 a head, every layer) exhausted memory: 16777216 was
// killed by the kernel after a minute. Throws naming both options and the context.
void check_decode_rows(int64_t budget, int64_t slack, const char* budget_flag,
                       const char* slack_flag, const ModelInfo& model);

// The model's tokenizer; throws when the model has no GGUF file (random weights).
std::unique_ptr<Tokenizer> load_tokenizer(const Model& model);

// The repository root compiled in, for resolving "models/" and "data/corpus" when run from
// elsewhere.
std::string source_dir();

}  // namespace kvevict::cli
