// Options shared by the commands that run a model (generate, demo, eval, ppl).
#pragma once

#include <memory>
#include <string>

#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
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
  // Checks --device, sets the thread count, loads the model on the host (its tokenizer and, on
  // the CPU, its weights). --device cuda is refused when this build or machine has no GPU runtime.
  std::shared_ptr<const Model> load() const;
  // The --device checks of load() alone (for --dummy models, which load nothing).
  void check_device() const;
  // The runtime every model command runs on: the model on --device (uploaded to the GPU for
  // cuda), with --kv-dtype for the CPU cache; `progress` follows the CPU prefill.
  std::shared_ptr<const ModelRuntime> runtime(std::shared_ptr<const Model> model,
                                              ProgressFn progress = nullptr) const;
  RuntimeOptions runtime_options(ProgressFn progress = nullptr) const;
  bool cuda() const { return device == "cuda"; }
};

// The model's tokenizer; throws when the model has no GGUF file (random weights).
std::unique_ptr<Tokenizer> load_tokenizer(const Model& model);

// The repository root compiled in, for resolving "models/" and "data/corpus" when run from
// elsewhere.
std::string source_dir();

}  // namespace kvevict::cli
