// Random ScoreProblems for the score tests: owns the buffers, stores them as f32, bf16 or f16, and
// can lay K/V out token-major ([n, Hkv, d] memory viewed as [Hkv, n, d]) to exercise strides.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/dtype.h"
#include "kvevict/score.h"
#include "support/testing.h"

namespace kvevict::testing {

struct Shape {
  int64_t hkv = 1, group = 1, m = 1, n = 1, d = 8;
  int64_t wo_rows = 0;  // > 0 builds wo [wo_rows, Hq * d]
};

inline Shape make_shape(int64_t hkv, int64_t group, int64_t m, int64_t n, int64_t d,
                        int64_t wo_rows = 0) {
  Shape s;
  s.hkv = hkv;
  s.group = group;
  s.m = m;
  s.n = n;
  s.d = d;
  s.wo_rows = wo_rows;
  return s;
}

class ProblemBuilder {
 public:
  // Values are Normal(0, 1) rounded through `dtype`; q is scaled by `q_scale` so logits are
  // peaked enough to make p far from uniform.
  ProblemBuilder(const Shape& s, uint64_t seed, DType dtype = DType::kF32, float q_scale = 1.5f,
                 bool token_major_kv = false)
      : shape_(s), dtype_(dtype) {
    const int64_t hq = s.hkv * s.group;
    q_ = make(normal_floats(hq * s.m * s.d, seed, q_scale));
    k_ = make(normal_floats(s.hkv * s.n * s.d, seed + 1));
    v_ = make(normal_floats(s.hkv * s.n * s.d, seed + 2));
    if (s.wo_rows > 0) wo_ = make(normal_floats(s.wo_rows * hq * s.d, seed + 3, 0.1f));
    problem_.q = TensorView::contiguous(q_.data(), dtype, {hq, s.m, s.d});
    problem_.k = kv_view(k_.data(), token_major_kv);
    problem_.v = kv_view(v_.data(), token_major_kv);
    if (s.wo_rows > 0)
      problem_.wo = TensorView::contiguous(wo_.data(), dtype, {s.wo_rows, hq * s.d});
  }
  ScoreProblem& problem() { return problem_; }
  // Writes x into element flat index i of q / k / v storage (for NaN tests).
  void poke(std::vector<uint8_t>& buf, int64_t i, float x) {
    if (dtype_ == DType::kF32) {
      reinterpret_cast<float*>(buf.data())[i] = x;
    } else if (dtype_ == DType::kBF16) {
      reinterpret_cast<uint16_t*>(buf.data())[i] = float_to_bf16(x);
    } else {
      reinterpret_cast<uint16_t*>(buf.data())[i] = float_to_half(x);
    }
  }
  std::vector<uint8_t>& q_storage() { return q_; }
  std::vector<uint8_t>& k_storage() { return k_; }
  std::vector<uint8_t>& v_storage() { return v_; }

 private:
  std::vector<uint8_t> make(const std::vector<float>& x) {
    std::vector<uint8_t> out(x.size() * dtype_size(dtype_));
    for (size_t i = 0; i < x.size(); ++i) {
      if (dtype_ == DType::kF32) {
        reinterpret_cast<float*>(out.data())[i] = x[i];
      } else if (dtype_ == DType::kBF16) {
        reinterpret_cast<uint16_t*>(out.data())[i] = float_to_bf16(x[i]);
      } else {
        reinterpret_cast<uint16_t*>(out.data())[i] = float_to_half(x[i]);
      }
    }
    return out;
  }
  TensorView kv_view(void* data, bool token_major) {
    if (!token_major) return TensorView::contiguous(data, dtype_, {shape_.hkv, shape_.n, shape_.d});
    // Memory [n, Hkv, d], viewed as [Hkv, n, d].
    TensorView t = TensorView::contiguous(data, dtype_, {shape_.hkv, shape_.n, shape_.d});
    t.stride[0] = shape_.d;
    t.stride[1] = shape_.hkv * shape_.d;
    t.stride[2] = 1;
    return t;
  }

  Shape shape_;
  DType dtype_;
  std::vector<uint8_t> q_, k_, v_, wo_;
  ScoreProblem problem_;
};

}  // namespace kvevict::testing
