// A loaded model: config + f32 weights (+ the GGUF file it came from, for the tokenizer).
#pragma once

#include <memory>
#include <string>

#include "kvevict/model/config.h"
#include "kvevict/model/weights.h"

namespace kvevict {

namespace gguf {
class File;
}
class Tokenizer;

// "smollm2" -> <model dir>/SmolLM2-135M-Instruct.Q4_1.gguf, "gemma3-270m" (or "gemma3") ->
// <model dir>/gemma-3-270m-q4_k_m.gguf, anything else is taken as a path. The model dir follows
// io::model_dir: $KVEVICT_MODEL_DIR when set, else <source_dir>/models.
std::string resolve_model_path(const std::string& name_or_path, const std::string& source_dir = ".");

class Model {
 public:
  // Opens a GGUF file (a name resolve_model_path knows, or a path) and dequantizes its weights.
  static std::shared_ptr<const Model> load(const std::string& name_or_path,
                                           const std::string& source_dir = ".");
  // Random weights of a config (seeded); has no GGUF file and no tokenizer.
  static std::shared_ptr<const Model> random(const ModelConfig& config, uint64_t seed);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // The GGUF file the model came from (metadata, tokenizer); nullptr for random weights.
  const gguf::File* file() const { return file_.get(); }
  const std::string& path() const { return path_; }
  double load_seconds() const { return load_seconds_; }

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

 private:
  Model() = default;
  ModelConfig config_;
  ModelWeights weights_;
  std::shared_ptr<const gguf::File> file_;
  std::string path_;
  double load_seconds_ = 0;
};

}  // namespace kvevict
