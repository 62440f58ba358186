#include "kvevict/model/model.h"

#include <chrono>
#include <cstdlib>

#include "io/model_paths.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict {

std::string resolve_model_path(const std::string& name_or_path, const std::string& source_dir) {
  KVEVICT_CHECK(!name_or_path.empty(), "empty model name; expected smollm2, gemma3-270m or a path");
  if (name_or_path == "smollm2") return io::model_path(source_dir, io::kSmolLM2File);
  if (name_or_path == "gemma3-270m" || name_or_path == "gemma3")
    return io::model_path(source_dir, io::kGemma3File);
  return name_or_path;
}

Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& name_or_path,
                                         const std::string& source_dir) {
  const char* env = std::getenv("KVEVICT_WEIGHTS");
  WeightFormat f = WeightFormat::kNative;
  if (env != nullptr && *env != '\0') {
    try {
      f = weight_format_parse(env);
    } catch (const Error& e) {  // say where the value came from: no option of the command set it
      KVEVICT_FAIL("environment variable KVEVICT_WEIGHTS: ", e.what());
    }
  }
  return load(name_or_path, source_dir, f);
}

std::shared_ptr<const Model> Model::load(const std::string& name_or_path,
                                         const std::string& source_dir, WeightFormat format) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> m(new Model());
  m->path_ = resolve_model_path(name_or_path, source_dir);
  m->file_ = gguf::File::open(m->path_);
  m->config_ = ModelConfig::from_gguf(*m->file_);
  m->file_->check_finite_values();  // a NaN or infinite weight is refused, not run (issue 13)
  m->weights_ = ModelWeights::from_gguf(*m->file_, m->config_, format);
  m->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::shared_ptr<const Model> Model::random(const ModelConfig& config, uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> m(new Model());
  m->config_ = config;
  m->config_.validate();
  m->weights_ = ModelWeights::random(m->config_, seed);
  m->path_ = "random:" + config.name;
  m->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace kvevict
