// Options shared by the commands that run a model (generate, demo, eval, ppl).
#pragma once

#include <memory>
#include <string>

#include "kvevict/model/model.h"
#include "kvevict/tokenizer.h"

namespace CLI {
class App;
}

namespace kvevict::cli {

struct ModelArgs {
  std::string model = "smollm2";
  std::string device = "cpu";
  std::string kv_dtype = "f32";
  int threads = 0;
  void add_to(CLI::App& cmd);
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
