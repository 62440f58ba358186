// Element types of tensors and the host conversions between the 16-bit floats and float.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace kvevict {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI32, kI64, kU8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32", "float32", "f16", "float16", "bf16", "bfloat16", ...; throws naming the bad value.
DType dtype_parse(const std::string& s);

// IEEE binary16 <-> float, round to nearest even. Inline and branch-free (the exponent-rebias and
// magic-number method of Maratyszcza's FP16 library), so loops over them vectorize; an out-of-line
// call per element made the f16 KV cache twice as slow as f32 (issue 17).
namespace detail {
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace detail

inline float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // exponent and mantissa, sign shifted out
  // Normal (and inf / NaN): rebias the exponent by 112 through a multiply by 2^-112.
  const float normalized = detail::bits_float((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormal: the mantissa as the low bits of 0.5's float, minus 0.5.
  const float denormalized = detail::bits_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t mag =
      two_w < (1u << 27) ? detail::float_bits(denormalized) : detail::float_bits(normalized);
  return detail::bits_float(sign | mag);
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = detail::float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. rounding up) -> inf
  if (abs < 0x38800000u) {                        // result is subnormal or zero
    // Adding 0.5 aligns the mantissa so that the FPU's own round-to-nearest-even does the work.
    return sign | static_cast<uint16_t>(detail::float_bits(detail::bits_float(abs) + 0.5f) -
                                        detail::float_bits(0.5f));
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}

// bfloat16 <-> float, round to nearest even (NaN stays NaN).
inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// Bulk conversions for caches and tiles: F16C / AVX2 where the CPU has them (chosen at run time,
// so the library needs no -march flag for them), else the scalar functions above. Same results
// as the scalar functions for every input (NaN stays NaN; its payload may differ).
void half_to_float_n(const uint16_t* src, float* dst, int64_t n);
void float_to_half_n(const float* src, uint16_t* dst, int64_t n);
void bf16_to_float_n(const uint16_t* src, float* dst, int64_t n);
void float_to_bf16_n(const float* src, uint16_t* dst, int64_t n);

// Rounds a float through bf16 / f16, as a device would store it (for references and tests).
inline float round_bf16(float f) {
  return bf16_to_float(float_to_bf16(f));
}
inline float round_half(float f) {
  return half_to_float(float_to_half(f));
}

}  // namespace kvevict
