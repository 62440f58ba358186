// The dense building blocks of the forward pass, on f32 host rows (internal to src/model).
#pragma once

#include <cstdint>

#include <vector>

#include "kvevict/model/config.h"
#include "kvevict/model/weights.h"
#include "kvevict/tensor.h"

namespace kvevict::model_ops {

// One output of a projection group: y[t * ldy + r] = W[r, :] . x[t, :] (+ bias[r]).
struct Projection {
  const WeightMatrix* w = nullptr;
  const HostTensor* bias = nullptr;  // [rows] or empty
  float* y = nullptr;                // [T, ldy]
  int64_t ldy = 0;
};
// Every projection of a group reads the same x [T, K]: fused Q/K/V, fused gate/up. Block-typed
// (GGUF) weights run on src/quant: x quantized once, one parallel region for the whole group.
// A group of f32 matrices (WeightFormat::kF32, random weights) runs on linear() (OpenBLAS).
void project(const float* x, int64_t T, const Projection* group, int n);

// y[T, out] = x[T, in] W[out, in]^T (+ bias[out]); sgemm with OpenBLAS, else a threaded loop.
void linear(const float* x, int64_t T, const HostTensor& w, const HostTensor* bias, float* y);
// out[T, n] = x / rms(x) * w, row by row; the sum of squares accumulates in double (as ggml).
// out may alias x.
void rms_norm(const float* x, int64_t T, int64_t n, const float* w, float eps, float* out);
// cos / sin of theta_i = pos / linear_scale * base^(-2i/d) / freq_div[i] (freq_div may be
// null) for T positions: computed once per chunk and rope parameters, shared by every layer and
// by Q and K (the former per-call pow / cos / sin ran 2 x n_layers times per token).
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;  // [T, d / 2]
  RopeTable(const int32_t* pos, int64_t T, int d, float base, float linear_scale,
            const float* freq_div);
};
// Rotates `heads` heads of d dims for each of T tokens; x is [T, heads, d] (in place).
void rope(float* x, int64_t T, int heads, int d, const RopeTable& table, RopeStyle style);
void rope(float* x, int64_t T, int heads, int d, const int32_t* pos, float base, float linear_scale,
          const float* freq_div, RopeStyle style);
// gate[i] = act(gate[i]) * up[i] for n elements.
void gated_activation(float* gate, const float* up, int64_t n, FfnActivation act);
float dot(const float* a, const float* b, int64_t n);

}  // namespace kvevict::model_ops
