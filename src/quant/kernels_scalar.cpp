// The portable kernels: plain loops over the integer sums of src/quant/quant.h. They are the
// reference every SIMD table is tested against (tests/quant/), and the fallback on CPUs without
// AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/gemm.h"
#include "quant/quant.h"

namespace kvevict::quant {
namespace {

using namespace blocks;

void quantize_a8(const float* x, int64_t n, uint8_t* dst) {
  const A8Row r = a8_row(dst, n);
  int8_t* qs = const_cast<int8_t*>(r.qs);
  float* d = const_cast<float*>(r.d);
  int16_t* s16 = const_cast<int16_t*>(r.s16);
  for (int64_t b = 0; b < n / kA8Block; ++b) {
    const float* xb = x + b * kA8Block;
    // The absmax on the bits of |x| (quant.h kA8NonFiniteBits): a NaN or Inf cannot drop out.
    uint32_t amax_bits = 0;
    for (int i = 0; i < kA8Block; ++i) {
      uint32_t u;
      std::memcpy(&u, xb + i, 4);
      amax_bits = std::max(amax_bits, u & 0x7fffffffu);
    }
    if (amax_bits >= kA8NonFiniteBits) {
      a8_nonfinite_block(d, qs, s16, b);
      continue;
    }
    float amax;
    std::memcpy(&amax, &amax_bits, 4);
    const float db = amax / 127.0f;
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    for (int h = 0; h < 2; ++h) {
      int sum = 0;
      for (int i = h * kA8Half; i < (h + 1) * kA8Half; ++i) {
        // nearbyint rounds to nearest even, as the SIMD conversions do.
        const int q = static_cast<int>(std::nearbyint(std::clamp(xb[i] * id, -127.0f, 127.0f)));
        qs[b * kA8Block + i] = static_cast<int8_t>(q);
        sum += q;
      }
      s16[2 * b + h] = static_cast<int16_t>(sum);
    }
  }
}

inline int a8_sum32(const A8Row& a, int64_t b) {
  return a.s16[2 * b] + a.s16[2 * b + 1];
}

// sum_j codes[j] a[j] over the 32 elements of activation block b, h = 0 / 1 for one half of 16.
inline int idot(const uint8_t* codes, const A8Row& a, int64_t b, int from = 0, int to = 32) {
  int s = 0;
  for (int j = from; j < to; ++j) s += codes[j] * a.qs[b * kQK + j];
  return s;
}

// Q4_0 / Q5_0: d (q - offset); Q4_1 / Q5_1: d q + m.
template <GgmlType kType>
float dot_legacy(const uint8_t* w, const A8Row& a, int64_t n) {
  constexpr bool kMin = kType == GgmlType::kQ4_1 || kType == GgmlType::kQ5_1;
  constexpr int kOffset = kType == GgmlType::kQ4_0 ? 8 : kType == GgmlType::kQ5_0 ? 16 : 0;
  constexpr int kBytes = kType == GgmlType::kQ4_0   ? Q4_0::kBytes
                         : kType == GgmlType::kQ4_1 ? Q4_1::kBytes
                         : kType == GgmlType::kQ5_0 ? Q5_0::kBytes
                                                    : Q5_1::kBytes;
  float acc = 0.0f, accm = 0.0f;
  uint8_t c[32];
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * kBytes;
    codes32(kType, w, b, c);
    const int s = idot(c, a, b) - kOffset * a8_sum32(a, b);
    acc += fp16_at(blk) * a.d[b] * static_cast<float>(s);
    if (kMin) accm += fp16_at(blk + 2) * a.d[b] * static_cast<float>(a8_sum32(a, b));
  }
  return acc + accm;
}

float dot_q8_0(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * Q8_0::kBytes;
    const auto* qs = reinterpret_cast<const int8_t*>(blk + Q8_0::kQs);
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += qs[j] * a.qs[b * kQK + j];
    acc += fp16_at(blk + Q8_0::kD) * a.d[b] * static_cast<float>(s);
  }
  return acc;
}

// Q4_K / Q5_K: sub-block j (32 elements) is (d sc_j) q - (dmin m_j).
template <bool kFive>
float dot_qk45(const uint8_t* w, const A8Row& a, int64_t n) {
  constexpr GgmlType kType = kFive ? GgmlType::kQ5_K : GgmlType::kQ4_K;
  constexpr int kBytes = kFive ? Q5_K::kBytes : Q4_K::kBytes;
  float acc = 0.0f, accm = 0.0f;
  uint8_t c[32];
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * kBytes;
    const float d = fp16_at(blk + Q4_K::kD), dmin = fp16_at(blk + Q4_K::kDmin);
    uint8_t sc[8], mn[8];
    unpack_scales_k4(blk + Q4_K::kScales, sc, mn);
    for (int j = 0; j < 8; ++j) {
      const int64_t ab = sb * 8 + j;  // activation block
      codes32(kType, w, ab, c);
      acc += d * sc[j] * a.d[ab] * static_cast<float>(idot(c, a, ab));
      accm += dmin * mn[j] * a.d[ab] * static_cast<float>(a8_sum32(a, ab));
    }
  }
  return acc - accm;
}

// Q6_K: d sc (q - 32) with one int8 scale per 16 elements.
float dot_q6_k(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f;
  uint8_t c[32];
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * Q6_K::kBytes;
    const float d = fp16_at(blk + Q6_K::kD);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + Q6_K::kScales);
    for (int g = 0; g < 8; ++g) {  // 32-element groups of the super-block
      const int64_t ab = sb * 8 + g;
      codes32(GgmlType::kQ6_K, w, ab, c);
      int total = 0;
      for (int h = 0; h < 2; ++h)
        total += sc[2 * g + h] * (idot(c, a, ab, 16 * h, 16 * h + 16) - 32 * a.s16[2 * ab + h]);
      acc += d * a.d[ab] * static_cast<float>(total);
    }
  }
  return acc;
}

// Eight independent lanes, as model_ops::dot, so the compiler may vectorize the f32 products.
template <class Load>
float dot_float(const uint8_t* w, const float* x, int64_t n, Load load) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += load(w, i + j) * x[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += load(w, i) * x[i];
  return s;
}

float dot_f32(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(w, x, n, [](const uint8_t* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  });
}
float dot_f16(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(w, x, n, [](const uint8_t* p, int64_t i) { return fp16_at(p + 2 * i); });
}
float dot_bf16(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(w, x, n, [](const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return bf16_to_float(h);
  });
}

Kernels make_table() {
  Kernels k;
  k.isa = Isa::kScalar;
  k.quantize_a8 = quantize_a8;
  k.dot_f32[type_index(GgmlType::kF32)] = dot_f32;
  k.dot_f32[type_index(GgmlType::kF16)] = dot_f16;
  k.dot_f32[type_index(GgmlType::kBF16)] = dot_bf16;
  k.dot_a8[type_index(GgmlType::kQ4_0)] = dot_legacy<GgmlType::kQ4_0>;
  k.dot_a8[type_index(GgmlType::kQ4_1)] = dot_legacy<GgmlType::kQ4_1>;
  k.dot_a8[type_index(GgmlType::kQ5_0)] = dot_legacy<GgmlType::kQ5_0>;
  k.dot_a8[type_index(GgmlType::kQ5_1)] = dot_legacy<GgmlType::kQ5_1>;
  k.dot_a8[type_index(GgmlType::kQ8_0)] = dot_q8_0;
  k.dot_a8[type_index(GgmlType::kQ4_K)] = dot_qk45<false>;
  k.dot_a8[type_index(GgmlType::kQ5_K)] = dot_qk45<true>;
  k.dot_a8[type_index(GgmlType::kQ6_K)] = dot_q6_k;
  k.gemm_panel = gemm_panel_scalar;
  return k;
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k = make_table();
  return k;
}

}  // namespace kvevict::quant
