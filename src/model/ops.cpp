#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kvevict/error.h"
#include "kvevict/model/model.h"
#include "quant/matmul.h"
#include "score/cpu_vector_math.h"

#ifdef KVEVICT_WITH_BLAS
#include <cblas.h>

#include <mutex>
#endif

namespace kvevict {

std::string blas_description() {
#ifdef KVEVICT_WITH_BLAS
  return std::string("OpenBLAS ") + openblas_get_corename();
#else
  return "none (built-in loops)";
#endif
}

}  // namespace kvevict

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
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(in), 1.0f,
                  W + r0 * in, static_cast<int>(in), x, 1, 0.0f, y + r0, 1);
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
    KVEVICT_CHECK(bias->numel() == out, "linear: bias has ", bias->numel(), " elements; expected ",
                  out);
    const float* b = bias->ptr<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < out; ++r) y[t * out + r] += b[r];
  }
}

void project(const float* x, int64_t T, const Projection* group, int n) {
  bool all_f32 = true;
  for (int i = 0; i < n; ++i) all_f32 = all_f32 && group[i].w->f32() != nullptr;
  if (all_f32) {
    // OpenBLAS sgemm still wins on f32 weights (no int8 path for them): the former runtime.
    for (int i = 0; i < n; ++i) {
      const Projection& p = group[i];
      const int64_t rows = p.w->rows();
      if (p.ldy == rows) {
        linear(x, T, *p.w->f32(), p.bias, p.y);
      } else {
        std::vector<float> tmp(T * rows);
        linear(x, T, *p.w->f32(), p.bias, tmp.data());
        for (int64_t t = 0; t < T; ++t)
          std::copy(tmp.begin() + t * rows, tmp.begin() + (t + 1) * rows, p.y + t * p.ldy);
      }
    }
    return;
  }
  std::vector<quant::MatmulTarget> targets(n);
  const int64_t K = group[0].w->cols();
  for (int i = 0; i < n; ++i) {
    const WeightMatrix& w = *group[i].w;
    targets[i].w = quant::MatrixView{w.type(), w.rows(), w.cols(), w.row_bytes(), w.data()};
    targets[i].y = group[i].y;
    targets[i].ldy = group[i].ldy;
  }
  quant::matmul(x, T, K, targets.data(), n);
  for (int i = 0; i < n; ++i) {
    const Projection& p = group[i];
    if (p.bias == nullptr || p.bias->nbytes() == 0) continue;
    const int64_t rows = p.w->rows();
    KVEVICT_CHECK(p.bias->numel() == rows, "projection: bias has ", p.bias->numel(),
                  " elements; expected ", rows);
    const float* b = p.bias->ptr<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) p.y[t * p.ldy + r] += b[r];
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

RopeTable::RopeTable(const int32_t* pos, int64_t T, int d, float base, float linear_scale,
                     const float* freq_div)
    : half(d / 2), cos(static_cast<size_t>(T) * (d / 2)), sin(static_cast<size_t>(T) * (d / 2)) {
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(base), -2.0 * i / d) / linear_scale;
    if (freq_div != nullptr) inv_freq[i] /= freq_div[i];
  }
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos[t]) * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(theta));
      sin[t * half + i] = static_cast<float>(std::sin(theta));
    }
}

void rope(float* x, int64_t T, int heads, int d, const RopeTable& table, RopeStyle style) {
  const int half = d / 2;
  KVEVICT_CHECK(table.half == half, "rope: table of ", table.half, " frequencies; expected ", half);
  for (int64_t t = 0; t < T; ++t) {
    const float* cs = table.cos.data() + t * half;
    const float* sn = table.sin.data() + t * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * d;
      if (style == RopeStyle::kNeox) {
        float* v1 = v + half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v1[i];
          v[i] = x0 * cs[i] - x1 * sn[i];
          v1[i] = x0 * sn[i] + x1 * cs[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * cs[i] - x1 * sn[i];
          v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  }
}

void rope(float* x, int64_t T, int heads, int d, const int32_t* pos, float base, float linear_scale,
          const float* freq_div, RopeStyle style) {
  rope(x, T, heads, d, RopeTable(pos, T, d, base, linear_scale, freq_div), style);
}

// exp_poly is plain float arithmetic, so these loops vectorize (std::exp and std::tanh keep them
// scalar without -ffast-math at ~20 ns an element: Gemma's GELU ran 37K of them a token).
void gated_activation(float* gate, const float* up, int64_t n, FfnActivation act) {
  if (act == FfnActivation::kSilu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + score_detail::exp_poly(-g)) * up[i];
    }
  } else {
    // GELU, tanh approximation (Gemma's gelu_pytorch_tanh): 0.5 g (1 + tanh(u)) = g / (1 + e^-2u).
    constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      const float u = kC * (g + 0.044715f * g * g * g);
      gate[i] = g / (1.0f + score_detail::exp_poly(-2.0f * u)) * up[i];
    }
  }
}

}  // namespace kvevict::model_ops
