// Options shared by the commands that run a model (generate, demo, eval, ppl, analyze -m,
// capture).
#pragma once

#include <memory>
#include <string>

#include "kvevict/io/gguf.h"
#include "kvevict/model/config.h"
#include "kvevict/model/model.h"
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
  ModelInfo inspect(bool allow_cuda = false) const;
  // Checks --device, sets the thread count, loads the model (on the host; generate uploads it
  // to the GPU). Commands without a GPU path pass allow_cuda = false and refuse --device cuda;
  // with allow_cuda, --device cuda is refused when this build or machine has no GPU runtime.
  std::shared_ptr<const Model> load(bool allow_cuda = false) const;
  // The --device checks of load() alone (for --dummy models, which load nothing).
  void check_device(bool allow_cuda) const;
  bool cuda() const { return device == "cuda"; }
};

// The model's tokenizer; throws when the model has no GGUF file (random weights).
std::unique_ptr<Tokenizer> load_tokenizer(const Model& model);

// The repository root compiled in, for resolving "models/" and "data/corpus" when run from
// elsewhere.
std::string source_dir();

}  // namespace kvevict::cli
