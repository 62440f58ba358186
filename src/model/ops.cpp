#include "model/ops.h"

#include <cmath>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/parallel.h"

#ifdef KVEVICT_WITH_BLAS
#include <cblas.h>

#include <mutex>
#endif

namespace kvevict::model_ops {

float dot(const float* a, const float* b, int64_t n) {
  // Eight independent lanes let the compiler vectorize without reassociating one sum.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void linear(const float* x, int64_t T, const HostTensor& w, const HostTensor* bias, float* y) {
  KVEVICT_CHECK(w.dtype() == DType::kF32 && w.shape().size() == 2,
                "linear: weight must be a 2-D f32 matrix");
  const int64_t out = w.shape()[0], in = w.shape()[1];
  const float* W = w.ptr<float>();
#ifdef KVEVICT_WITH_BLAS
  // kvevict::parallel_for owns the threads: OpenBLAS's own pool busy-waits between calls and
  // fights the OpenMP pool for the cores, which measured several times slower on a loaded
  // 2-core machine. Fixed row blocks keep results identical for any thread count.
  static std::once_flag single_threaded;
  std::call_once(single_threaded, [] { openblas_set_num_threads(1); });
  // Small products run on one block: an OpenMP region costs more than they do.
  const int64_t kRows = T * out * in < (int64_t{1} << 18) ? out : 128;
  parallel_for((out + kRows - 1) / kRows, [&](int64_t c) {
    const int64_t r0 = c * kRows, rows = std::min(out - r0, kRows);
    if (T == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(in),
                  1.0f, W + r0 * in, static_cast<int>(in), x, 1, 0.0f, y + r0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T),
                  static_cast<int>(rows), static_cast<int>(in), 1.0f, x, static_cast<int>(in),
                  W + r0 * in, static_cast<int>(in), 0.0f, y + r0, static_cast<int>(out));
    }
  });
#else
  constexpr int64_t kRows = 64;
  parallel_for((out + kRows - 1) / kRows, [&](int64_t c) {
    const int64_t r1 = std::min(out, (c + 1) * kRows);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = c * kRows; r < r1; ++r) y[t * out + r] = dot(x + t * in, W + r * in, in);
  });
#endif
  if (bias != nullptr && bias->nbytes() > 0) {
    KVEVICT_CHECK(bias->numel() == out, "linear: bias has ", bias->numel(),
                  " elements; expected ", out);
    const float* b = bias->ptr<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < out; ++r) y[t * out + r] += b[r];
  }
}

void rms_norm(const float* x, int64_t T, int64_t n, const float* w, float eps, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    float* o = out + t * n;
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale * w[i];
  }
}

void rope(float* x, int64_t T, int heads, int d, const int32_t* pos, float base,
          float linear_scale, const float* freq_div, RopeStyle style) {
  const int half = d / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(base), -2.0 * i / d) / linear_scale;
    if (freq_div != nullptr) inv_freq[i] /= freq_div[i];
  }
  std::vector<float> cs(half), sn(half);
  for (int64_t t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos[t]) * inv_freq[i];
      cs[i] = static_cast<float>(std::cos(theta));
      sn[i] = static_cast<float>(std::sin(theta));
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * d;
      for (int i = 0; i < half; ++i) {
        const int a = style == RopeStyle::kNormal ? 2 * i : i;
        const int b = style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

void gated_activation(float* gate, const float* up, int64_t n, FfnActivation act) {
  if (act == FfnActivation::kSilu) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  } else {
    // GELU, tanh approximation (Gemma's gelu_pytorch_tanh).
    constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      gate[i] = 0.5f * g * (1.0f + std::tanh(kC * (g + 0.044715f * g * g * g))) * up[i];
    }
  }
}

}  // namespace kvevict::model_ops
