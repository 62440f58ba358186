#include "cli/tensor_args.h"

#include "kvevict/error.h"
#include "kvevict/io/npy.h"
#include "kvevict/io/safetensors.h"

namespace kvevict::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

HostTensor load_tensor_arg(const std::string& spec, const char* what, bool bf16) {
  KVEVICT_CHECK(!spec.empty(), what, " is empty; expected a .npy or .safetensors path");
  try {
    const auto st = spec.find(".safetensors");
    if (st != std::string::npos) {
      const auto end = st + std::string(".safetensors").size();
      const std::string path = spec.substr(0, end);
      if (end == spec.size()) return safetensors::load_only_tensor(path);
      KVEVICT_CHECK(spec[end] == ':', what, " '", spec,
                    "' is not 'file.safetensors' or 'file.safetensors:tensor_name'");
      return safetensors::load_tensor(path, spec.substr(end + 1));
    }
    KVEVICT_CHECK(ends_with(spec, ".npy"), what, " '", spec,
                  "' has an unknown extension; expected .npy or .safetensors[:name]");
    return npy::load(spec, bf16);
  } catch (const Error& e) {
    KVEVICT_FAIL(what, ": ", e.what());
  }
}

}  // namespace kvevict::cli
