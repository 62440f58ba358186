// The GPU runtime's view of the one device allocation and check macro of src/cuda.
#pragma once

#include <cublas_v2.h>

#include "cuda/check.h"
#include "cuda/device_buffer.h"

namespace kvevict::gpu::detail {
using cuda::DeviceBuffer;
}  // namespace kvevict::gpu::detail
