// Loading tensors named on the command line: "file.npy", "file.safetensors" (its only tensor) or
// "file.safetensors:name".
#pragma once

#include <string>

#include "kvevict/tensor.h"

namespace kvevict::cli {

// Throws naming the argument (`what`, e.g. "--q") and the file when it cannot be read.
HostTensor load_tensor_arg(const std::string& spec, const char* what, bool bf16);

// The file a tensor argument reads: "file.safetensors:name" -> "file.safetensors", else spec.
std::string tensor_file(const std::string& spec);

}  // namespace kvevict::cli
