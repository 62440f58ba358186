// The one owned device allocation of the tree (internal): move-only, freed on destruction. With a
// stream it comes from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync): neither
// allocation nor release waits for the device, and a buffer may be dropped while kernels that read
// it are still queued on that stream. Without one it is a plain cudaMalloc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace kvevict::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Throws naming `what`, the bytes asked for and the bytes free when the device lacks them.
  DeviceBuffer(size_t bytes, const char* what, cudaStream_t stream = nullptr, bool ordered = false);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset();
  // Grows (never shrinks) to at least `bytes`; contents are not kept. A plain buffer's growth
  // frees the old one, which synchronizes the device: callers grow outside hot loops.
  void ensure(size_t bytes, const char* what);
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(stream_, o.stream_);
    std::swap(ordered_, o.ordered_);
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  bool ordered_ = false;  // stream-ordered (cudaMallocAsync on stream_)
};

}  // namespace kvevict::cuda
