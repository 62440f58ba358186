// ggml block formats and their dequantization to float.
// Layouts follow ggml's definitions (ggml-common.h / ggml-quants.c); each block starts with its
// fp16 scale(s) unless noted. QK = elements per block:
//   Q4_0 (32):  d, qs[16]            x = (nibble - 8) * d; low nibbles are elements 0..15
//   Q4_1 (32):  d, m, qs[16]         x = nibble * d + m
//   Q5_0 (32):  d, qh[4], qs[16]     5th bit of element j in bit j of qh; x = (q - 16) * d
//   Q5_1 (32):  d, m, qh[4], qs[16]  x = q * d + m
//   Q8_0 (32):  d, qs[32] int8       x = q * d
//   Q4_K (256): d, dmin, scales[12] (eight 6-bit scale/min pairs), qs[128]
//   Q5_K (256): d, dmin, scales[12], qh[32], qs[128]
//   Q6_K (256): ql[128], qh[64], scales[16] int8, d (the scale comes last in this one)
#include <cstring>

#include "kvevict/dtype.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tensor.h"

namespace kvevict::gguf {
namespace {

constexpr int kQK = 32;    // elements of a legacy block
constexpr int kQKK = 256;  // elements of a K-quant super-block

inline float fp16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = fp16_at(b), m = fp16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5: qh holds the high bit of element j at bit j (elements 0..31).
void dequant_q5(const uint8_t* qh_bytes, const uint8_t* qs, float d, float m, int offset,
                float* y) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    const int hi0 = ((qh >> j) & 1u) << 4;
    const int hi1 = ((qh >> (j + kQK / 2)) & 1u) << 4;
    y[j] = static_cast<float>(((qs[j] & 0x0F) | hi0) - offset) * d + m;
    y[j + kQK / 2] = static_cast<float>(((qs[j] >> 4) | hi1) - offset) * d + m;
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = fp16_at(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// The 12 scale bytes of Q4_K/Q5_K pack eight (scale, min) pairs of 6 bits: pairs 0..3 sit in
// the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 take their low 4 bits from
// bytes 8..11 and their top 2 bits from the spare high bits of bytes 0..7.
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = fp16_at(b), dmin = fp16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  // Each 64-element chunk uses 32 bytes: low nibbles are its first 32 elements, high the next.
  for (int chunk = 0, is = 0; chunk < kQKK; chunk += 64, is += 2, q += 32) {
    int sc, mn;
    scale_min_k4(is, scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    scale_min_k4(is + 1, scales, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) y[chunk + l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[chunk + 32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = fp16_at(b), dmin = fp16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  // Like Q4_K; the 5th bit of element l of sub-block s comes from bit s of qh[l].
  uint8_t u1 = 1, u2 = 2;
  for (int chunk = 0, is = 0; chunk < kQKK; chunk += 64, is += 2, ql += 32) {
    int sc, mn;
    scale_min_k4(is, scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    scale_min_k4(is + 1, scales, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l)
      y[chunk + l] = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      y[chunk + 32 + l] = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = fp16_at(b + 208);
  // Two halves of 128 elements; in each, element l + 32k takes 4 low bits from ql and 2 high
  // bits from qh[l] bits 2k..2k+1, with one int8 scale per 16 elements.
  for (int half = 0; half < kQKK; half += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[half + l] = d * static_cast<float>(sc[is + 0] * q1);
      y[half + l + 32] = d * static_cast<float>(sc[is + 2] * q2);
      y[half + l + 64] = d * static_cast<float>(sc[is + 4] * q3);
      y[half + l + 96] = d * static_cast<float>(sc[is + 6] * q4);
    }
  }
}

}  // namespace

const char* ggml_type_name(uint32_t type) {
  switch (type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 30: return "BF16";
    default: return "unsupported";
  }
}

bool ggml_type_supported(uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 6:
    case 7:
    case 8:
    case 12:
    case 13:
    case 14:
    case 30: return true;
    default: return false;
  }
}

int64_t ggml_block_elems(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16: return 1;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: return kQK;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return kQKK;
  }
  KVEVICT_FAIL("ggml type ", static_cast<uint32_t>(t), " is not supported");
}

int64_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return 2 + 16;
    case GgmlType::kQ4_1: return 4 + 16;
    case GgmlType::kQ5_0: return 2 + 4 + 16;
    case GgmlType::kQ5_1: return 4 + 4 + 16;
    case GgmlType::kQ8_0: return 2 + 32;
    case GgmlType::kQ4_K: return 4 + 12 + 128;
    case GgmlType::kQ5_K: return 4 + 12 + 32 + 128;
    case GgmlType::kQ6_K: return 128 + 64 + 16 + 2;
  }
  KVEVICT_FAIL("ggml type ", static_cast<uint32_t>(t), " is not supported");
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const int64_t be = ggml_block_elems(t);
  KVEVICT_CHECK(n >= 0 && n % be == 0, "row of ", n, " elements of ",
                ggml_type_name(static_cast<uint32_t>(t)),
                "; expected a multiple of the block size ", be);
  return n / be * ggml_block_bytes(t);
}

namespace {

// `count` elements of `type` as whole blocks: {elements per block, bytes per block, blocks};
// throws naming `what` when count is not a multiple of the block size.
struct Blocks {
  int64_t be, bb, blocks;
};
Blocks whole_blocks(GgmlType type, int64_t count, const char* what) {
  const int64_t be = ggml_block_elems(type);
  KVEVICT_CHECK(count >= 0 && count % be == 0, what, " of ", count, " elements of ",
                ggml_type_name(static_cast<uint32_t>(type)),
                "; expected a multiple of the block size ", be);
  return {be, ggml_block_bytes(type), count / be};
}

}  // namespace

void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t count) {
  const auto [be, bb, blocks] = whole_blocks(type, count, "dequantize");
  switch (type) {
    case GgmlType::kF32:
      if (count > 0) std::memcpy(dst, src, static_cast<size_t>(count) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < count; ++i) dst[i] = fp16_at(src + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_float(h);
      }
      return;
    case GgmlType::kQ4_0:
      for (int64_t i = 0; i < blocks; ++i) dequant_q4_0(src + i * bb, dst + i * be);
      return;
    case GgmlType::kQ4_1:
      for (int64_t i = 0; i < blocks; ++i) dequant_q4_1(src + i * bb, dst + i * be);
      return;
    case GgmlType::kQ5_0:
      for (int64_t i = 0; i < blocks; ++i) {
        const uint8_t* b = src + i * bb;
        dequant_q5(b + 2, b + 6, fp16_at(b), 0.0f, 16, dst + i * be);
      }
      return;
    case GgmlType::kQ5_1:
      for (int64_t i = 0; i < blocks; ++i) {
        const uint8_t* b = src + i * bb;
        dequant_q5(b + 4, b + 8, fp16_at(b), fp16_at(b + 2), 0, dst + i * be);
      }
      return;
    case GgmlType::kQ8_0:
      for (int64_t i = 0; i < blocks; ++i) dequant_q8_0(src + i * bb, dst + i * be);
      return;
    case GgmlType::kQ4_K:
      for (int64_t i = 0; i < blocks; ++i) dequant_q4_k(src + i * bb, dst + i * be);
      return;
    case GgmlType::kQ5_K:
      for (int64_t i = 0; i < blocks; ++i) dequant_q5_k(src + i * bb, dst + i * be);
      return;
    case GgmlType::kQ6_K:
      for (int64_t i = 0; i < blocks; ++i) dequant_q6_k(src + i * bb, dst + i * be);
      return;
  }
  KVEVICT_FAIL("dequantize: ggml type ", static_cast<uint32_t>(type), " is not supported");
}

namespace {

// Bit patterns with every exponent bit set: an infinity or a NaN.
inline bool half_bits_finite(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7C00u) != 0x7C00u;
}

inline bool elements_finite(const uint8_t* src, int64_t count, int bytes) {
  // Branch-free over the elements (the scan reads every weight byte of a model once at load).
  uint32_t bad = 0;
  if (bytes == 4) {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t u;
      std::memcpy(&u, src + 4 * i, 4);
      bad |= static_cast<uint32_t>((u & 0x7F800000u) == 0x7F800000u);
    }
  } else {
    const uint16_t mask = bytes == 2 ? 0x7C00u : 0x7F80u;  // f16 : bf16 (bytes == -2)
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      bad |= static_cast<uint32_t>((h & mask) == mask);
    }
  }
  return bad == 0;
}

}  // namespace

bool values_finite(GgmlType type, const uint8_t* src, int64_t count) {
  const auto [be, bb, blocks] = whole_blocks(type, count, "finiteness check");
  (void)be;
  // Byte offsets of a block's f16 scales (d, and m / dmin where the type has one).
  int first = 0, second = -1;
  switch (type) {
    case GgmlType::kF32: return elements_finite(src, count, 4);
    case GgmlType::kF16: return elements_finite(src, count, 2);
    case GgmlType::kBF16: return elements_finite(src, count, -2);
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0: break;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: second = 2; break;
    case GgmlType::kQ6_K: first = 208; break;
  }
  bool ok = true;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * bb;
    ok &= half_bits_finite(b + first) && (second < 0 || half_bits_finite(b + second));
  }
  return ok;
}

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  dequantize(type, src, dst, n);
}

HostTensor dequantize(const TensorInfo& info) {
  HostTensor out(DType::kF32, info.shape);
  dequantize(info.type, info.data, out.ptr<float>(), info.numel());
  return out;
}

}  // namespace kvevict::gguf
