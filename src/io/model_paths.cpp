#include "io/model_paths.h"

#include <sys/stat.h>

#include <cstdlib>

namespace kvevict::io {

std::string model_dir(const std::string& source_dir) {
  const char* env = std::getenv("KVEVICT_MODEL_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return source_dir + "/models";
}

std::string model_path(const std::string& source_dir, const std::string& file) {
  return model_dir(source_dir) + "/" + file;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

}  // namespace kvevict::io
