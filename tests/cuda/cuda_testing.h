// Helpers of the GPU tests: device buffers framed by sentinels, 16-bit uploads and a skip when no
// GPU is present. The references are the project's double ones (kvevict::ref in score.h,
// select.h).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/launchers.h"
#include "kvevict/cuda/score.h"
#include "kvevict/dtype.h"
#include "kvevict/method.h"
#include "kvevict/tensor.h"

#define KVEVICT_REQUIRE_GPU()                                                   \
  do {                                                                          \
    if (!::kvevict::cuda::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define KVEVICT_ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace kvevict::cuda::testing {

// count elements of T on the device with `pad` sentinel bytes (0xA5) on both sides.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count, size_t pad_bytes = 256) : count_(count), pad_(pad_bytes) {
    const size_t bytes = count * sizeof(T) + 2 * pad_;
    if (cudaMalloc(&raw_, bytes) != cudaSuccess) raw_ = nullptr;
    if (raw_) cudaMemset(raw_, 0xA5, bytes);
  }
  ~DeviceBuffer() {
    if (raw_) cudaFree(raw_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool ok() const { return raw_ != nullptr; }
  T* data() { return reinterpret_cast<T*>(static_cast<char*>(raw_) + pad_); }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    cudaMemcpy(data(), host.data(), std::min(host.size(), count_) * sizeof(T),
               cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    cudaMemcpy(host.data(), static_cast<const char*>(raw_) + pad_, count_ * sizeof(T),
               cudaMemcpyDeviceToHost);
    return host;
  }
  // Fills the payload with a poison pattern, so unwritten outputs show.
  void poison() { cudaMemset(data(), 0xFF, count_ * sizeof(T)); }
  bool sentinels_intact() const {
    std::vector<unsigned char> pads(2 * pad_);
    cudaMemcpy(pads.data(), raw_, pad_, cudaMemcpyDeviceToHost);
    cudaMemcpy(pads.data() + pad_, static_cast<const char*>(raw_) + pad_ + count_ * sizeof(T), pad_,
               cudaMemcpyDeviceToHost);
    return std::all_of(pads.begin(), pads.end(), [](unsigned char c) { return c == 0xA5; });
  }

 private:
  void* raw_ = nullptr;
  size_t count_, pad_;
};

// Host floats (already rounded to `dtype`) -> 16-bit device encoding.
inline std::vector<uint16_t> encode16(const std::vector<float>& x, DType dtype) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = dtype == DType::kBF16 ? float_to_bf16(x[i]) : float_to_half(x[i]);
  return out;
}
inline std::vector<float> round_to(std::vector<float> x, DType dtype) {
  for (auto& e : x) e = dtype == DType::kBF16 ? round_bf16(e) : round_half(e);
  return x;
}

// The window arguments of contiguous device tensors: q [hq, w, d] (the window is every row), k / v
// [hkv, n, d], in dtype (bf16 or f16).
inline detail::WindowArgs contiguous_window_args(DType dtype, const void* q, const void* k,
                                                 const void* v, int hq, int hkv, int d, int w,
                                                 int64_t n, float scale,
                                                 int64_t sliding_window = 0) {
  detail::WindowArgs a;
  a.elem = dtype == DType::kBF16 ? detail::Elem::kBF16 : detail::Elem::kF16;
  a.q = q;
  a.q_head_stride = static_cast<int64_t>(w) * d;
  a.q_row_stride = d;
  a.q_rows = w;
  a.k = k;
  a.v = v;
  a.kv_head_stride = n * d;
  a.kv_row_stride = d;
  a.num_q_heads = hq;
  a.num_kv_heads = hkv;
  a.w = w;
  a.head_dim = d;
  a.n = n;
  a.scale = scale;
  a.sliding_window = sliding_window;
  return a;
}

}  // namespace kvevict::cuda::testing
