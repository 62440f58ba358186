// The portable kernels: plain loops over the integer sums of src/quant/quant.h. They are the
// reference every SIMD table is tested against (tests/quant/), and the fallback on CPUs without
// AVX2.
#include <algorithm>
#include <cmath>

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
    float amax = 0.0f;
    for (int i = 0; i < kA8Block; ++i) amax = std::max(amax, std::fabs(xb[i]));
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

inline int a8_sum32(const A8Row& a, int64_t b) { return a.s16[2 * b] + a.s16[2 * b + 1]; }

// sum_j q[j] a[j] over 32 elements whose weights come from `q_of(j)`.
template <class QOf>
inline int idot32(const int8_t* a, QOf q_of) {
  int s = 0;
  for (int j = 0; j < 32; ++j) s += q_of(j) * a[j];
  return s;
}

float dot_q4_0(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * Q4_0::kBytes;
    const uint8_t* qs = blk + Q4_0::kQs;
    const int s = idot32(a.qs + b * kQK, [&](int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; });
    acc += fp16_at(blk + Q4_0::kD) * a.d[b] * static_cast<float>(s - 8 * a8_sum32(a, b));
  }
  return acc;
}

float dot_q4_1(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f, accm = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * Q4_1::kBytes;
    const uint8_t* qs = blk + Q4_1::kQs;
    const int s = idot32(a.qs + b * kQK, [&](int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; });
    acc += fp16_at(blk + Q4_1::kD) * a.d[b] * static_cast<float>(s);
    accm += fp16_at(blk + Q4_1::kM) * a.d[b] * static_cast<float>(a8_sum32(a, b));
  }
  return acc + accm;
}

// Element j of a Q5 block: its nibble and the 5th bit from bit j of qh.
inline int q5_at(const uint8_t* qs, uint32_t qh, int j) {
  const int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
  return nib | static_cast<int>(((qh >> j) & 1u) << 4);
}

float dot_q5_0(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * Q5_0::kBytes;
    const uint32_t qh = u32_at(blk + Q5_0::kQh);
    const uint8_t* qs = blk + Q5_0::kQs;
    const int s = idot32(a.qs + b * kQK, [&](int j) { return q5_at(qs, qh, j); });
    acc += fp16_at(blk + Q5_0::kD) * a.d[b] * static_cast<float>(s - 16 * a8_sum32(a, b));
  }
  return acc;
}

float dot_q5_1(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f, accm = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * Q5_1::kBytes;
    const uint32_t qh = u32_at(blk + Q5_1::kQh);
    const uint8_t* qs = blk + Q5_1::kQs;
    const int s = idot32(a.qs + b * kQK, [&](int j) { return q5_at(qs, qh, j); });
    acc += fp16_at(blk + Q5_1::kD) * a.d[b] * static_cast<float>(s);
    accm += fp16_at(blk + Q5_1::kM) * a.d[b] * static_cast<float>(a8_sum32(a, b));
  }
  return acc + accm;
}

float dot_q8_0(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* blk = w + b * Q8_0::kBytes;
    const auto* qs = reinterpret_cast<const int8_t*>(blk + Q8_0::kQs);
    const int s = idot32(a.qs + b * kQK, [&](int j) { return static_cast<int>(qs[j]); });
    acc += fp16_at(blk + Q8_0::kD) * a.d[b] * static_cast<float>(s);
  }
  return acc;
}

// Q4_K and Q5_K: sub-block j (32 elements) of a super-block takes the low nibbles of bytes
// 32 (j / 2) .. + 31 when j is even, their high nibbles when odd (and bit j of qh[l] for Q5_K).
template <bool kFive>
float dot_qk45(const uint8_t* w, const A8Row& a, int64_t n) {
  constexpr int kBytes = kFive ? Q5_K::kBytes : Q4_K::kBytes;
  constexpr int kQs = kFive ? Q5_K::kQs : Q4_K::kQs;
  float acc = 0.0f, accm = 0.0f;
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * kBytes;
    const float d = fp16_at(blk + Q4_K::kD), dmin = fp16_at(blk + Q4_K::kDmin);
    uint8_t sc[8], mn[8];
    unpack_scales_k4(blk + Q4_K::kScales, sc, mn);
    const uint8_t* qh = blk + Q5_K::kQh;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = blk + kQs + 32 * (j / 2);
      const int shift = (j & 1) * 4;
      const int64_t ab = sb * 8 + j;  // activation block
      const int s = idot32(a.qs + ab * kQK, [&](int l) {
        int v = (q[l] >> shift) & 15;
        if (kFive) v |= ((qh[l] >> j) & 1) << 4;
        return v;
      });
      acc += d * sc[j] * a.d[ab] * static_cast<float>(s);
      accm += dmin * mn[j] * a.d[ab] * static_cast<float>(a8_sum32(a, ab));
    }
  }
  return acc - accm;
}

// Q6_K: two halves of 128; element l + 32 k of a half (k = 0..3) takes 4 low bits from ql (byte l
// for k = 0, 2; l + 32 for k = 1, 3; high nibbles for k >= 2) and 2 high bits from qh[l] bits
// 2k..2k+1, with one int8 scale per 16 elements.
float dot_q6_k(const uint8_t* w, const A8Row& a, int64_t n) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * Q6_K::kBytes;
    const float d = fp16_at(blk + Q6_K::kD);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + Q6_K::kScales);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = blk + Q6_K::kQl + 64 * half;
      const uint8_t* qh = blk + Q6_K::kQh + 32 * half;
      for (int k = 0; k < 4; ++k) {
        const int64_t ab = sb * 8 + half * 4 + k;
        const int8_t* ax = a.qs + ab * kQK;
        int total = 0;
        for (int h16 = 0; h16 < 2; ++h16) {
          int s = 0;
          for (int l = 16 * h16; l < 16 * h16 + 16; ++l) {
            const int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
            const int q = lo | (((qh[l] >> (2 * k)) & 3) << 4);
            s += q * ax[l];
          }
          total += sc[8 * half + 2 * k + h16] * (s - 32 * a.s16[2 * ab + h16]);
        }
        acc += d * a.d[ab] * static_cast<float>(total);
      }
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
  k.dot_a8[type_index(GgmlType::kQ4_0)] = dot_q4_0;
  k.dot_a8[type_index(GgmlType::kQ4_1)] = dot_q4_1;
  k.dot_a8[type_index(GgmlType::kQ5_0)] = dot_q5_0;
  k.dot_a8[type_index(GgmlType::kQ5_1)] = dot_q5_1;
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
