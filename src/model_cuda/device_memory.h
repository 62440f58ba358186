// Owned device allocations and CUDA / cuBLAS error checks of the GPU model runtime (internal).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kvevict/error.h"

#define KVEVICT_GPU_CHECK(call)                                        \
  do {                                                                 \
    const cudaError_t kvevict_err_ = (call);                           \
    KVEVICT_CHECK(kvevict_err_ == cudaSuccess, "CUDA call ", #call,    \
                  " failed: ", cudaGetErrorString(kvevict_err_), " (", \
                  static_cast<int>(kvevict_err_), ")");                \
  } while (0)

#define KVEVICT_CUBLAS_CHECK(call)                                             \
  do {                                                                         \
    const cublasStatus_t kvevict_st_ = (call);                                 \
    KVEVICT_CHECK(kvevict_st_ == CUBLAS_STATUS_SUCCESS, "cuBLAS call ", #call, \
                  " failed: ", cublasGetStatusString(kvevict_st_), " (",       \
                  static_cast<int>(kvevict_st_), ")");                         \
  } while (0)

namespace kvevict::gpu::detail {

// One cudaMalloc'd buffer; move-only; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Throws naming `what`, the bytes asked for and the bytes free when the device lacks them.
  DeviceBuffer(size_t bytes, const char* what);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(ptr_, o.ptr_);
      std::swap(bytes_, o.bytes_);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset();
  // Grows (never shrinks) to at least `bytes`; contents are not kept.
  void ensure(size_t bytes, const char* what);
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvevict::gpu::detail
