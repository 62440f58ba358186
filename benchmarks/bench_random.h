// Cheap deterministic test data for the GPU benchmarks: an xorshift64 stream on the host, and bf16
// values uniform in [-scale, scale) drawn from it and uploaded (inputs whose values do not matter
// to the timing, only that they are finite and of a realistic magnitude).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/check.h"

namespace kvevict::bench {

struct Xorshift {
  uint64_t x;
  explicit Xorshift(uint64_t seed) : x(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
};

// n bf16 values uniform in [-scale, scale) (24-bit steps) into device memory d.
inline void fill_uniform_bf16(void* d, size_t n, uint64_t seed, float scale) {
  std::vector<__nv_bfloat16> h(n);
  Xorshift rng(seed);
  for (auto& e : h)
    e = __float2bfloat16(static_cast<float>(static_cast<int64_t>(rng.next() >> 40) - (1 << 23)) *
                         0x1p-23f * scale);
  KVEVICT_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
}

}  // namespace kvevict::bench
