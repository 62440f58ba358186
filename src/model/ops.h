// The dense building blocks of the forward pass, on f32 host rows (internal to src/model).
#pragma once

#include <cstdint>

#include "kvevict/model/config.h"
#include "kvevict/tensor.h"

namespace kvevict::model_ops {

// y[T, out] = x[T, in] W[out, in]^T (+ bias[out]); sgemm with OpenBLAS, else a threaded loop.
void linear(const float* x, int64_t T, const HostTensor& w, const HostTensor* bias, float* y);
// out[T, n] = x / rms(x) * w, row by row; the sum of squares accumulates in double (as ggml).
// out may alias x.
void rms_norm(const float* x, int64_t T, int64_t n, const float* w, float eps, float* out);
// Rotates `heads` heads of d dims for each of T tokens; x is [T, heads, d] (in place).
// theta_i = pos / linear_scale * base^(-2i/d) / freq_div[i] (freq_div may be null).
void rope(float* x, int64_t T, int heads, int d, const int32_t* pos, float base,
          float linear_scale, const float* freq_div, RopeStyle style);
// gate[i] = act(gate[i]) * up[i] for n elements.
void gated_activation(float* gate, const float* up, int64_t n, FfnActivation act);
float dot(const float* a, const float* b, int64_t n);

}  // namespace kvevict::model_ops
