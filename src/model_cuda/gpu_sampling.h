// Sampling on the GPU with Sampler's rule (internal to the GPU runtime).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/device_buffer.h"
#include "kvevict/model/sampler.h"

namespace kvevict::gpu {

// Sampler's rule on R rows of device logits [R, V]: argmax at temperature 0, else the sort-and-
// scan kernel of sampling.cu with the draws uniforms[R] (uploaded through u_dev). ids_dev [R].
// scratch and u_dev grow as needed.
void sample_on_device(const float* logits, int R, int64_t V, const SamplerOptions& opt,
                      const std::vector<double>& uniforms, int32_t* ids_dev,
                      cuda::DeviceBuffer& scratch, cuda::DeviceBuffer& u_dev, cudaStream_t stream);

}  // namespace kvevict::gpu
