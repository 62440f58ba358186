// DeviceBuffer (device_buffer.h).
#include "cuda/device_buffer.h"

#include "kvevict/error.h"

namespace kvevict::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what, cudaStream_t stream, bool ordered)
    : stream_(stream), ordered_(ordered) {
  ensure(bytes, what);
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) {
    if (ordered_)
      cudaFreeAsync(ptr_, stream_);
    else
      cudaFree(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::ensure(size_t bytes, const char* what) {
  if (bytes <= bytes_ && ptr_ != nullptr) return;
  reset();
  if (bytes == 0) return;
  const cudaError_t err =
      ordered_ ? cudaMallocAsync(&ptr_, bytes, stream_) : cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the allocation error
    ptr_ = nullptr;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    KVEVICT_FAIL("out of device memory: ", what, " needs ", bytes, " bytes (",
                 static_cast<double>(bytes) / (1 << 30), " GiB); ",
                 static_cast<double>(free_b) / (1 << 30), " GiB free of ",
                 static_cast<double>(total_b) / (1 << 30), " GiB");
  }
  bytes_ = bytes;
}

}  // namespace kvevict::cuda
