// Byte layouts of the ggml weight blocks the kernels read (ggml-common.h; the io/ dequantizers in
// src/io/gguf_dequantize.cpp are the ground truth the tests hold these kernels to).
#pragma once

#include <cstdint>
#include <cstring>

#include "kvevict/dtype.h"
#include "kvevict/io/gguf.h"

namespace kvevict::quant::blocks {

constexpr int kQK = 32;    // elements of a legacy block
constexpr int kQKK = 256;  // elements of a K-quant super-block

// Byte offsets inside each block.
struct Q4_0 {
  static constexpr int kBytes = 18, kD = 0, kQs = 2;
};
struct Q4_1 {
  static constexpr int kBytes = 20, kD = 0, kM = 2, kQs = 4;
};
struct Q5_0 {
  static constexpr int kBytes = 22, kD = 0, kQh = 2, kQs = 6;
};
struct Q5_1 {
  static constexpr int kBytes = 24, kD = 0, kM = 2, kQh = 4, kQs = 8;
};
struct Q8_0 {
  static constexpr int kBytes = 34, kD = 0, kQs = 2;
};
struct Q4_K {
  static constexpr int kBytes = 144, kD = 0, kDmin = 2, kScales = 4, kQs = 16;
};
struct Q5_K {
  static constexpr int kBytes = 176, kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48;
};
struct Q6_K {
  static constexpr int kBytes = 210, kQl = 0, kQh = 128, kScales = 192, kD = 208;
};

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

// The unsigned codes q of the 32 elements [32 s, 32 s + 32) of a row of block type t (every type
// but Q8_0, whose codes are signed): Q4 0..15, Q5 0..31, Q6_K 0..63. The scalar kernels and the
// portable panel packer read codes through this one decoder.
inline void codes32(gguf::GgmlType t, const uint8_t* row, int64_t s, uint8_t out[32]) {
  using gguf::GgmlType;
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const uint8_t* qs = row + s * (t == GgmlType::kQ4_0 ? Q4_0::kBytes : Q4_1::kBytes) +
                          (t == GgmlType::kQ4_0 ? Q4_0::kQs : Q4_1::kQs);
      for (int j = 0; j < 16; ++j) {
        out[j] = qs[j] & 15;
        out[j + 16] = qs[j] >> 4;
      }
      return;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool q50 = t == GgmlType::kQ5_0;
      const uint8_t* blk = row + s * (q50 ? Q5_0::kBytes : Q5_1::kBytes);
      const uint32_t qh = u32_at(blk + (q50 ? Q5_0::kQh : Q5_1::kQh));
      const uint8_t* qs = blk + (q50 ? Q5_0::kQs : Q5_1::kQs);
      for (int j = 0; j < 16; ++j) {
        out[j] = static_cast<uint8_t>((qs[j] & 15) | (((qh >> j) & 1) << 4));
        out[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // Sub-block j of a super-block: the low nibbles of bytes 32 (j / 2) .. + 31 for even j,
      // the high ones for odd j; Q5_K's 5th bit is bit j of qh[l].
      const bool five = t == GgmlType::kQ5_K;
      const uint8_t* blk = row + (s / 8) * (five ? Q5_K::kBytes : Q4_K::kBytes);
      const int j = static_cast<int>(s % 8);
      const uint8_t* q = blk + (five ? Q5_K::kQs : Q4_K::kQs) + 32 * (j / 2);
      const uint8_t* qh = blk + Q5_K::kQh;
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> (4 * (j & 1))) & 15;
        if (five) v |= ((qh[l] >> j) & 1) << 4;
        out[l] = static_cast<uint8_t>(v);
      }
      return;
    }
    case GgmlType::kQ6_K: {
      // Two halves of 128; element l + 32 k of a half (k = 0..3) takes 4 low bits from ql (byte
      // l for k = 0, 2; l + 32 for k = 1, 3; high nibbles for k >= 2) and 2 high bits from qh[l]
      // bits 2k..2k+1.
      const uint8_t* blk = row + (s / 8) * Q6_K::kBytes;
      const int half = static_cast<int>(s % 8) / 4, k = static_cast<int>(s % 4);
      const uint8_t* ql = blk + Q6_K::kQl + 64 * half;
      const uint8_t* qh = blk + Q6_K::kQh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        const int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
        out[l] = static_cast<uint8_t>(lo | (((qh[l] >> (2 * k)) & 3) << 4));
      }
      return;
    }
    default: return;  // F32 / F16 / BF16 / Q8_0 have no unsigned codes
  }
}

}  // namespace kvevict::quant::blocks
