// The device inputs of one decode attention launch (detail::launch_decode_attention), shared by
// the decode tests: bf16 q, k and v uploaded from host floats, the segment table and the exported
// logits, and the launch arguments over them.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/model_launchers.h"

namespace kvevict::gpu::testing {

struct DecodeShape {
  int B = 0, Hq = 0, Hkv = 0, d = 0;
  int64_t max_len = 0;  // longest segment
  float scale = 0.0f;   // 0: 1/sqrt(d)
};

class DecodeInputs {
 public:
  // q [B, Hq, d], k / v [rows, d] (already rounded to bf16), off [B Hkv + 1], len [B Hkv];
  // z_out gets rows x G floats (G = Hq / Hkv).
  DecodeInputs(const DecodeShape& shape, const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v, const std::vector<int64_t>& off,
               const std::vector<int32_t>& len)
      : shape_(shape),
        q_(q.size()),
        k_(k.size()),
        v_(v.size()),
        off_(off.size()),
        len_(len.size()),
        z_(k.size() / static_cast<size_t>(shape.d) * static_cast<size_t>(shape.Hq / shape.Hkv)) {
    q_.upload(cuda::testing::encode16(q, DType::kBF16));
    k_.upload(cuda::testing::encode16(k, DType::kBF16));
    v_.upload(cuda::testing::encode16(v, DType::kBF16));
    off_.upload(off);
    len_.upload(len);
  }
  bool ok() const { return q_.ok() && k_.ok() && v_.ok() && off_.ok() && len_.ok() && z_.ok(); }
  // The launch arguments, z_out included.
  detail::DecodeAttentionArgs args() {
    detail::DecodeAttentionArgs da;
    da.q = reinterpret_cast<const detail::bf16*>(q_.data());
    da.k = reinterpret_cast<const detail::bf16*>(k_.data());
    da.v = reinterpret_cast<const detail::bf16*>(v_.data());
    da.seg_off = off_.data();
    da.seg_len = len_.data();
    da.B = shape_.B;
    da.Hq = shape_.Hq;
    da.Hkv = shape_.Hkv;
    da.d = shape_.d;
    da.max_len = shape_.max_len;
    da.scale =
        shape_.scale != 0.0f ? shape_.scale : 1.0f / std::sqrt(static_cast<float>(shape_.d));
    da.z_out = z_.data();
    return da;
  }
  cuda::testing::DeviceBuffer<uint16_t>& q() { return q_; }
  cuda::testing::DeviceBuffer<uint16_t>& k() { return k_; }
  cuda::testing::DeviceBuffer<uint16_t>& v() { return v_; }
  cuda::testing::DeviceBuffer<int64_t>& off() { return off_; }
  cuda::testing::DeviceBuffer<int32_t>& len() { return len_; }
  cuda::testing::DeviceBuffer<float>& z() { return z_; }  // [rows, G] exported logits

 private:
  DecodeShape shape_;
  cuda::testing::DeviceBuffer<uint16_t> q_, k_, v_;
  cuda::testing::DeviceBuffer<int64_t> off_;
  cuda::testing::DeviceBuffer<int32_t> len_;
  cuda::testing::DeviceBuffer<float> z_;
};

}  // namespace kvevict::gpu::testing
