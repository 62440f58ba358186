// The CPU runtime behind ModelRuntime (runtime.h): Session over host caches.
#pragma once

#include <memory>

#include "kvevict/model/runtime.h"

namespace kvevict::detail {

std::shared_ptr<const ModelRuntime> make_cpu_runtime(std::shared_ptr<const Model> model,
                                                     const RuntimeOptions& opt);

}  // namespace kvevict::detail
