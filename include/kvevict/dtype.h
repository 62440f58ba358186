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

// IEEE binary16 <-> float, round to nearest even.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

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
// Rounds a float through bf16 / f16, as a device would store it (for references and tests).
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
inline float round_half(float f) { return half_to_float(float_to_half(f)); }

}  // namespace kvevict
