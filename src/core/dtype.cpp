#include "kvevict/dtype.h"

#include <cmath>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kvevict/error.h"

namespace kvevict {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  KVEVICT_FAIL("unknown dtype code ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

DType dtype_parse(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::kF32;
  if (s == "f64" || s == "float64" || s == "double") return DType::kF64;
  if (s == "f16" || s == "float16" || s == "half") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "i32" || s == "int32") return DType::kI32;
  if (s == "i64" || s == "int64") return DType::kI64;
  if (s == "u8" || s == "uint8") return DType::kU8;
  KVEVICT_FAIL("unknown dtype '", s, "'; expected one of f32, f64, f16, bf16, i32, i64, u8");
}

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVEVICT_X86_TARGETS 1
// These four are compiled for F16C / AVX2 by attribute and run only when the CPU has them.
__attribute__((target("avx2,f16c"))) void half_to_float_f16c(const uint16_t* s, float* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = half_to_float(s[i]);
}
__attribute__((target("avx2,f16c"))) void float_to_half_f16c(const float* s, uint16_t* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = float_to_half(s[i]);
}
__attribute__((target("avx2"))) void bf16_to_float_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_slli_epi32(u, 16));
  }
  for (; i < n; ++i) d[i] = bf16_to_float(s[i]);
}
__attribute__((target("avx2"))) void float_to_bf16_avx2(const float* s, uint16_t* d, int64_t n) {
  // Round to nearest even on the bits; NaN keeps its top bits and gets the quiet bit.
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x400000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    const __m256i r =
        _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    // 8 x u32 (values < 2^16) -> 8 x u16, in order.
    const __m256i packed = _mm256_packus_epi32(r, r);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_castsi256_si128(ordered));
  }
  for (; i < n; ++i) d[i] = float_to_bf16(s[i]);
}

bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}
#endif

}  // namespace

void half_to_float_n(const uint16_t* src, float* dst, int64_t n) {
#ifdef KVEVICT_X86_TARGETS
  if (has_f16c()) return half_to_float_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void float_to_half_n(const float* src, uint16_t* dst, int64_t n) {
#ifdef KVEVICT_X86_TARGETS
  if (has_f16c()) return float_to_half_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void bf16_to_float_n(const uint16_t* src, float* dst, int64_t n) {
#ifdef KVEVICT_X86_TARGETS
  if (has_f16c()) return bf16_to_float_avx2(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void float_to_bf16_n(const float* src, uint16_t* dst, int64_t n) {
#ifdef KVEVICT_X86_TARGETS
  if (has_f16c()) return float_to_bf16_avx2(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace kvevict
