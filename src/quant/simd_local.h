// Helpers shared by the SIMD kernel files (kernels_avx2.cpp, kernels_avx512.cpp), included only
// there, after <immintrin.h>, under each file's ISA flags.
//
// Everything here has internal linkage (an unnamed namespace) on purpose: each ISA's file must
// get its own copy compiled for its own target. An ordinary inline function would be one weak
// symbol that the linker picks from any of the files — possibly the AVX-512 one — and then runs
// on every CPU. (`nm --defined-only` of both objects lists no weak code symbols.)
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/gemm.h"
#include "quant/quant.h"

namespace kvevict::quant {
namespace {  // NOLINT(build/namespaces): internal linkage per ISA file, see above

inline float fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The A8 rows of tokens t0 .. t0 + NT - 1 of a GEMM chunk.
template <int NT>
struct PanelTokens {
  const int8_t* qs[NT];
  const float* dx[NT];
  const int16_t* s16[NT];
  PanelTokens(const GemmInput& in, int64_t t0) {
    for (int i = 0; i < NT; ++i) {
      const A8Row a = a8_row(in.act + (t0 + i) * in.row_bytes, in.K);
      qs[i] = a.qs;
      dx[i] = a.d;
      s16[i] = a.s16;
    }
  }
  // Token i's 4 activation bytes at column c, as one int32 to broadcast.
  int32_t a4(int i, int64_t c) const {
    int32_t v;
    std::memcpy(&v, qs[i] + c, 4);
    return v;
  }
  // acc += (group g's integer sums of the 8 rows) * scale * dx + min * dx * sum(a): the panel's
  // x = scale q + min, over the G columns of group g.
  template <int G>
  void add_group(int i, int64_t g, __m256i isum, __m256 sc, __m256 mn, __m256* acc) const {
    const float d = dx[i][g * G / kA8Block];
    const int sa = G == 16 ? s16[i][g] : s16[i][2 * g] + s16[i][2 * g + 1];
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sc, _mm256_set1_ps(d)), *acc);
    *acc = _mm256_fmadd_ps(mn, _mm256_set1_ps(d * static_cast<float>(sa)), *acc);
  }
};

// Row i of the panel's lane i into y[.. rows).
inline void store_panel_rows(float* y, __m256 acc, int rows) {
  if (rows == kPanelRows) {
    _mm256_storeu_ps(y, acc);
    return;
  }
  alignas(32) float tmp[kPanelRows];
  _mm256_store_ps(tmp, acc);
  for (int r = 0; r < rows; ++r) y[r] = tmp[r];
}

}  // namespace
}  // namespace kvevict::quant
