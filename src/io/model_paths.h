// Where the embedded default checkpoints live (scripts/fetch_models.sh puts them there).
// The directory is $KVEVICT_MODEL_DIR when set, else <source_dir>/models.
#pragma once

#include <string>

namespace kvevict::io {

constexpr const char* kSmolLM2File = "SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGemma3File = "gemma-3-270m-q4_k_m.gguf";

// $KVEVICT_MODEL_DIR if set and non-empty, else source_dir + "/models".
std::string model_dir(const std::string& source_dir);
// model_dir(source_dir) + "/" + file.
std::string model_path(const std::string& source_dir, const std::string& file);
// True when `path` names an existing regular, non-empty file.
bool file_exists(const std::string& path);

}  // namespace kvevict::io
