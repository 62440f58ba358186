// The CUDA backend behind the Backend interface (kvevict/backend.h): scores, selection,
// compaction, the decode-time cut and attention on the current CUDA device, so callers
// (LayerEvictor, DecodeEvictor) use the GPU exactly like the CPU backend. Every view handed to it
// lives in device memory (Device::kCuda); allocate() returns stream-ordered device memory. Work is
// queued on `stream` (a cudaStream_t; nullptr = the legacy default stream) and does not wait
// unless a result must reach the host: select(..., Residency::kDevice) leaves the kept indices on
// the device, and caches may carry device segment tables (KVLayerView::device_offsets), so a
// layer's score -> select -> compact runs with no host round trip. The stream must outlive every
// buffer the backend hands out.
#pragma once

#include <memory>

#include "kvevict/backend.h"
#include "kvevict/cuda/score.h"

namespace kvevict {

// Throws when the build has CUDA but no device is present (cuda::device_available()).
std::unique_ptr<Backend> make_cuda_backend(cuda::Stream stream = nullptr);

}  // namespace kvevict
