// Byte layouts of the ggml weight blocks the kernels read (ggml-common.h; the io/ dequantizers in
// src/io/gguf_dequantize.cpp are the ground truth the tests hold these kernels to).
#pragma once

#include <cstdint>
#include <cstring>

#include "kvevict/dtype.h"

namespace kvevict::quant::blocks {

constexpr int kQK = 32;    // elements of a legacy block
constexpr int kQKK = 256;  // elements of a K-quant super-block

// Byte offsets inside each block.
struct Q4_0 { static constexpr int kBytes = 18, kD = 0, kQs = 2; };
struct Q4_1 { static constexpr int kBytes = 20, kD = 0, kM = 2, kQs = 4; };
struct Q5_0 { static constexpr int kBytes = 22, kD = 0, kQh = 2, kQs = 6; };
struct Q5_1 { static constexpr int kBytes = 24, kD = 0, kM = 2, kQh = 4, kQs = 8; };
struct Q8_0 { static constexpr int kBytes = 34, kD = 0, kQs = 2; };
struct Q4_K { static constexpr int kBytes = 144, kD = 0, kDmin = 2, kScales = 4, kQs = 16; };
struct Q5_K {
  static constexpr int kBytes = 176, kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48;
};
struct Q6_K { static constexpr int kBytes = 210, kQl = 0, kQh = 128, kScales = 192, kD = 208; };

inline float fp16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The eight 6-bit (scale, min) pairs of a Q4_K / Q5_K super-block (12 bytes): pairs 0..3 in the
// low 6 bits of bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 take their low 4 bits from bytes
// 8..11 and their top 2 bits from the spare high bits of bytes 0..7.
inline void unpack_scales_k4(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace kvevict::quant::blocks
