// The seam between the device-neutral runtime (ModelRuntime::create) and the GPU runtime of
// src/model_cuda: a table of entry points, present when this build has the CUDA runtime and a
// device can run it.
#pragma once

#include <memory>
#include <string>

#include "kvevict/model/runtime.h"

namespace kvevict::detail {

struct GpuRuntimeEntry {
  std::shared_ptr<const ModelRuntime> (*create)(std::shared_ptr<const Model> model,
                                                const RuntimeOptions& opt) = nullptr;
  std::shared_ptr<const ModelRuntime> (*random)(const ModelConfig& config, uint64_t seed,
                                                const RuntimeOptions& opt) = nullptr;
};

// The GPU runtime's entry points, or nullptr with `why` saying what is missing (no CUDA build,
// no device).
const GpuRuntimeEntry* gpu_runtime_entry(std::string* why);

}  // namespace kvevict::detail
