// A loaded model: config + weights (in their GGUF types, viewed in the file's mapping, or f32)
// + the GGUF file it came from (kept open: it holds the mapped weights and the tokenizer).
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
std::string resolve_model_path(const std::string& name_or_path,
                               const std::string& source_dir = ".");

// The BLAS the projections run on, e.g. "OpenBLAS SkylakeX" or "none (built-in loops)".
// OpenBLAS picks its kernels when it loads; on CPUs it does not recognize it falls back to
// "Prescott" (SSE3) kernels, measured 4x slower for sgemm here (13 vs 54 GFLOP/s on one core of
// this AVX-512 Xeon). Callers may warn and suggest OPENBLAS_CORETYPE=SkylakeX (or Haswell).
std::string blas_description();

class Model {
 public:
  // Opens a GGUF file (a name resolve_model_path knows, or a path). kNative keeps its weights in
  // their block types (quantized kernels); kF32 dequantizes them (OpenBLAS sgemm, the former
  // runtime). $KVEVICT_WEIGHTS=f32 overrides the default kNative for every load without `format`.
  static std::shared_ptr<const Model> load(const std::string& name_or_path,
                                           const std::string& source_dir = ".");
  static std::shared_ptr<const Model> load(const std::string& name_or_path,
                                           const std::string& source_dir, WeightFormat format);
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
