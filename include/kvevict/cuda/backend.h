// The CUDA backend behind the Backend interface (kvevict/backend.h): scores, selection,
// compaction and attention on the current CUDA device, so callers (LayerEvictor) use the GPU
// exactly like the CPU backend. Every view handed to it lives in device memory (Device::kCuda);
// allocate() returns device memory. select() returns the host Selection the interface defines
// (the kept indices are computed on the GPU, then copied back); compact() takes KVLayerViews whose
// k/v/pos/score_acc are device pointers and whose offsets/lens are host arrays (as the
// interface's views are).
#pragma once

#include <memory>

#include "kvevict/backend.h"

namespace kvevict {

// Throws when the build has CUDA but no device is present (cuda::device_available()).
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace kvevict
