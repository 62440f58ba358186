// AVX-512 (F, BW, VL, DQ) + VNNI kernels. This file alone is compiled for that target
// (cmake/QuantIsa.cmake); the dispatcher calls it only on CPUs whose cpuid reports all five and
// whose OS saves the ZMM state (XGETBV: src/quant/dispatch.cpp).
//
// Integer products use vpdpbusd (VNNI): 4 adjacent products of an unsigned weight code and a
// signed activation byte, summed straight into an int32 lane. Unlike AVX2's vpmaddubsw there is
// no int16 intermediate, so nothing can saturate, and one instruction does what vpmaddubsw +
// vpmaddwd did. A 512-bit vector holds 64 codes: two legacy blocks (two 16-byte nibble loads) or
// one 64-element chunk of a K-quant super-block, against one 64-byte activation load (blocks b,
// b + 1 lie side by side in the A8 row). The signed Q8_0 weights take |w| x (a negated where
// w < 0), exact (vpabsb of -128 is 128 as an unsigned byte). Integer sums are exact, so these
// kernels differ from the scalar ones only in the order of their f32 additions.
//
// F16 / BF16 weights are widened exactly to f32 and multiplied with the f32 activations
// (vcvtph2ps; bf16 is a 16-bit shift). vdpbf16ps is NOT used: it would round every activation to
// bf16 (8 significant bits, a relative error up to 2^-9 each), far outside the 1e-5 bound the
// tests hold every kernel to.
//
// The GEMM micro-kernel keeps the AVX2 panel layout ([K / 4][8 rows][4] codes): 8 rows x 4
// columns is one 256-bit vpdpbusd against a broadcast of 4 activation bytes, so it runs on ymm
// registers (AVX512VL) with 8 tokens at a time (32 vector registers). Panel packing reuses the
// AVX2 decoders (every CPU that passes this table's check runs AVX2).
#include "quant/quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)
// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves (__m512 __Y =
// __Y), which -Wall reports at every inlined use; GCC 13 fixed the headers. Not our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/gemm.h"
#include "quant/simd_local.h"

namespace kvevict::quant {
namespace {

using namespace blocks;

// 64 unsigned codes x 64 signed activations -> 16 int32 lanes (0..7: the first 32 elements,
// 8..15: the next 32), as f32 (exact: |lane| <= 4 * 255 * 128).
inline __m512 dot64(__m512i w, __m512i a) {
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, a));
}

// Lanes 0..7 = s0, 8..15 = s1.
inline __m512 two_scales(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

// Activation blocks b, b + 1 (64 bytes); or block b alone with the upper 32 bytes zero.
inline __m512i act2(const A8Row& a, int64_t b) {
  return _mm512_loadu_si512(a.qs + b * kQK);
}
inline __m512i act1(const A8Row& a, int64_t b) {
  return _mm512_zextsi256_si512(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + b * kQK)));
}
inline int a8_sum32(const A8Row& a, int64_t b) {
  return a.s16[2 * b] + a.s16[2 * b + 1];
}

// Two legacy blocks' 16 nibble bytes -> 64 codes in element order: [p0 low nibbles, p0 high
// nibbles, p1 low, p1 high] (elements 0..15 of a block are the low nibbles, 16..31 the high).
inline __m512i nibbles64(const uint8_t* p0, const uint8_t* p1) {
  const __m256i raw = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)), 1);
  const __m512i both =
      _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1);
  const __m512i ordered = _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm512_and_si512(ordered, _mm512_set1_epi8(0x0F));
}

// Q5_0 / Q5_1: bit j of a block's 32-bit qh is bit 4 of element j.
inline __m512i fifth_bits64(const uint8_t* qh0, const uint8_t* qh1) {
  const __mmask64 m =
      static_cast<__mmask64>(u32_at(qh0)) | (static_cast<__mmask64>(u32_at(qh1)) << 32);
  return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

void quantize_a8(const float* x, int64_t n, uint8_t* dst) {
  const A8Row r = a8_row(dst, n);
  int8_t* qs = const_cast<int8_t*>(r.qs);
  float* d = const_cast<float*>(r.d);
  int16_t* s16 = const_cast<int16_t*>(r.s16);
  const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
  for (int64_t b = 0; b < n / kA8Block; ++b) {
    const float* xb = x + b * kA8Block;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    // The absmax on the bits of |x| (quant.h kA8NonFiniteBits): a NaN or Inf cannot drop out.
    const __m512i abs_bits = _mm512_set1_epi32(0x7fffffff);
    const uint32_t amax_bits = static_cast<uint32_t>(_mm512_reduce_max_epi32(
        _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(v0), abs_bits),
                         _mm512_and_si512(_mm512_castps_si512(v1), abs_bits))));
    if (amax_bits >= kA8NonFiniteBits) {
      a8_nonfinite_block(d, qs, s16, b);
      continue;
    }
    float amax;
    std::memcpy(&amax, &amax_bits, 4);
    // The scalar kernel's arithmetic, operation for operation: the same d, q and sums.
    const float db = amax / 127.0f;
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    const __m512 vid = _mm512_set1_ps(id);
    // Round to nearest even (MXCSR default), as nearbyint.
    const __m512i q0 =
        _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v0, vid), lim), nlim));
    const __m512i q1 =
        _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v1, vid), lim), nlim));
    s16[2 * b] = static_cast<int16_t>(_mm512_reduce_add_epi32(q0));
    s16[2 * b + 1] = static_cast<int16_t>(_mm512_reduce_add_epi32(q1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * kA8Block), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * kA8Block + 16), _mm512_cvtsepi32_epi8(q1));
  }
}

// Legacy 32-element blocks, two a vector: acc += [s_b x8, s_b+1 x8] * (codes . a); the offset /
// min term is one scalar multiply-add a block. An odd last block runs alone: its codes twice,
// the upper activations and scale zero.
template <class Codes, class Extra>
inline float dot_legacy(const uint8_t* w, int bytes, const A8Row& a, int64_t n, Codes codes,
                        Extra extra) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  float accx = 0.0f;
  auto pair = [&](int64_t b, __m512 acc) {
    const uint8_t* b0 = w + b * bytes;
    const uint8_t* b1 = b0 + bytes;
    const float s0 = fp16(b0) * a.d[b], s1 = fp16(b1) * a.d[b + 1];
    accx += extra(b0, b, s0) + extra(b1, b + 1, s1);
    return _mm512_fmadd_ps(dot64(codes(b0, b1), act2(a, b)), two_scales(s0, s1), acc);
  };
  const int64_t nb = n / kQK;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {  // two accumulators (named, so they stay in registers)
    acc0 = pair(b, acc0);
    acc1 = pair(b + 2, acc1);
  }
  if (b + 2 <= nb) {
    acc0 = pair(b, acc0);
    b += 2;
  }
  if (b < nb) {
    const uint8_t* b0 = w + b * bytes;
    const float s0 = fp16(b0) * a.d[b];
    acc1 = _mm512_fmadd_ps(dot64(codes(b0, b0), act1(a, b)), two_scales(s0, 0.0f), acc1);
    accx += extra(b0, b, s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + accx;
}

float dot_q4_0(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q4_0::kBytes, a, n,
      [](const uint8_t* b0, const uint8_t* b1) {
        return nibbles64(b0 + Q4_0::kQs, b1 + Q4_0::kQs);
      },
      [&](const uint8_t*, int64_t b, float s) { return -8.0f * s * a8_sum32(a, b); });
}

float dot_q4_1(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q4_1::kBytes, a, n,
      [](const uint8_t* b0, const uint8_t* b1) {
        return nibbles64(b0 + Q4_1::kQs, b1 + Q4_1::kQs);
      },
      [&](const uint8_t* blk, int64_t b, float) {
        return fp16(blk + Q4_1::kM) * a.d[b] * static_cast<float>(a8_sum32(a, b));
      });
}

float dot_q5_0(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q5_0::kBytes, a, n,
      [](const uint8_t* b0, const uint8_t* b1) {
        return _mm512_or_si512(nibbles64(b0 + Q5_0::kQs, b1 + Q5_0::kQs),
                               fifth_bits64(b0 + Q5_0::kQh, b1 + Q5_0::kQh));
      },
      [&](const uint8_t*, int64_t b, float s) { return -16.0f * s * a8_sum32(a, b); });
}

float dot_q5_1(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q5_1::kBytes, a, n,
      [](const uint8_t* b0, const uint8_t* b1) {
        return _mm512_or_si512(nibbles64(b0 + Q5_1::kQs, b1 + Q5_1::kQs),
                               fifth_bits64(b0 + Q5_1::kQh, b1 + Q5_1::kQh));
      },
      [&](const uint8_t* blk, int64_t b, float) {
        return fp16(blk + Q5_1::kM) * a.d[b] * static_cast<float>(a8_sum32(a, b));
      });
}

// Q8_0: signed weights; |w| (unsigned) x (a negated where w < 0) = w a, lane by lane.
inline __m512 dot64_signed(__m512i w, __m512i a) {
  const __m512i as = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
  return dot64(_mm512_abs_epi8(w), as);
}

float dot_q8_0(const uint8_t* w, const A8Row& a, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  auto q32 = [](const uint8_t* blk) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q8_0::kQs));
  };
  auto pair = [&](int64_t b, __m512 acc) {
    const uint8_t* b0 = w + b * Q8_0::kBytes;
    const uint8_t* b1 = b0 + Q8_0::kBytes;
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q32(b0)), q32(b1), 1);
    return _mm512_fmadd_ps(dot64_signed(q, act2(a, b)),
                           two_scales(fp16(b0) * a.d[b], fp16(b1) * a.d[b + 1]), acc);
  };
  const int64_t nb = n / kQK;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    acc0 = pair(b, acc0);
    acc1 = pair(b + 2, acc1);
  }
  if (b + 2 <= nb) {
    acc0 = pair(b, acc0);
    b += 2;
  }
  if (b < nb) {
    const uint8_t* b0 = w + b * Q8_0::kBytes;
    acc1 = _mm512_fmadd_ps(dot64_signed(_mm512_zextsi256_si512(q32(b0)), act1(a, b)),
                           two_scales(fp16(b0) * a.d[b], 0.0f), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// The 8 per-sub-block values v[j] of a super-block as lanes [v[2c] x8, v[2c + 1] x8] of chunk c.
inline __m512 chunk_pair(__m256 v, int c) {
  const __m512i idx =
      _mm512_add_epi32(_mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1),
                       _mm512_set1_epi32(2 * c));
  return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}

inline __m256 u8x8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Q4_K / Q5_K: chunk c (64 elements) of a super-block is 32 bytes of qs: sub-block 2c in the low
// nibbles, 2c + 1 in the high ones, one vector of 64 codes in element order. Q5_K's bit 4 of
// element l of sub-block j is bit j of qh[l].
template <bool kFive>
float dot_qk45(const uint8_t* w, const A8Row& a, int64_t n) {
  constexpr int kBytes = kFive ? Q5_K::kBytes : Q4_K::kBytes;
  constexpr int kQs = kFive ? Q5_K::kQs : Q4_K::kQs;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m256 accm = _mm256_setzero_ps();
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * kBytes;
    const float d = fp16(blk + Q4_K::kD), dmin = fp16(blk + Q4_K::kDmin);
    uint8_t sc[8], mn[8];
    unpack_scales_k4(blk + Q4_K::kScales, sc, mn);
    const int64_t ab0 = sb * 8;
    const __m256 dx = _mm256_loadu_ps(a.d + ab0);
    const __m256 scale = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), u8x8_to_ps(sc)), dx);
    // Mins: dmin m_j dx_j sum_j, the sums of 32 from the two sums of 16.
    const __m256i sum32 =
        _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.s16 + 2 * ab0)),
                          _mm256_set1_epi16(1));
    accm = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), u8x8_to_ps(mn)), dx),
                           _mm256_cvtepi32_ps(sum32), accm);
    __m256i hb = _mm256_setzero_si256();
    if (kFive) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q5_K::kQh));
    auto chunk = [&](int c, __m512 acc) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * c));
      __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, lo4)),
                                         _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4), 1);
      if (kFive) {
        const __mmask64 m =
            static_cast<__mmask64>(_mm256_test_epi8_mask(hb, _mm256_set1_epi8(1 << (2 * c)))) |
            (static_cast<__mmask64>(_mm256_test_epi8_mask(hb, _mm256_set1_epi8(1 << (2 * c + 1))))
             << 32);
        codes = _mm512_or_si512(codes, _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10)));
      }
      const __m512i x = _mm512_loadu_si512(a.qs + sb * kQKK + 64 * c);
      return _mm512_fmadd_ps(dot64(codes, x), chunk_pair(scale, c), acc);
    };
    // Named accumulators (an array indexed at run time would live on the stack).
    acc0 = chunk(0, acc0);
    acc1 = chunk(1, acc1);
    acc0 = chunk(2, acc0);
    acc1 = chunk(3, acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - hsum(accm);
}

// Q6_K: d sc_g (q - 32), one int8 scale per 16 elements. A 128-element half of a super-block is
// 64 bytes of ql (one load: elements 0..31 low nibbles of bytes 0..31, 32..63 of bytes 32..63,
// 64..127 the high nibbles) and 32 bytes of qh (2 bits of element l + 32 k at bits 2k, 2k + 1 of
// qh[l]). A vector of 64 codes covers 4 scale groups, each int32 lane 4 elements of one group.
float dot_q6_k(const uint8_t* w, const A8Row& a, int64_t n) {
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 accm = _mm512_setzero_ps();
  const __m512i lo4 = _mm512_set1_epi8(0x0F), hi2 = _mm512_set1_epi8(0x30);
  // Per-256-bit-half shift counts of the qh bits into bits 4..5: elements 0..31 (k = 0) << 4,
  // 32..63 (k = 1) << 2; 64..95 (k = 2) as they are, 96..127 (k = 3) >> 2.
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  // Lane i of the 4 groups at group g0: group g0 + i / 4.
  const __m512i group_of_lane =
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
  const __m512i pair_of_group = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * Q6_K::kBytes;
    const __m512 d = _mm512_set1_ps(fp16(blk + Q6_K::kD));
    // Per group g (16 elements): d sc_g dx_{g / 2}; the offset term 32 d sc_g dx s16_g.
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + Q6_K::kScales))));
    const __m512 dx =
        _mm512_permutexvar_ps(pair_of_group, _mm512_castps256_ps512(_mm256_loadu_ps(a.d + sb * 8)));
    const __m512 gscale = _mm512_mul_ps(_mm512_mul_ps(d, sc), dx);
    const __m512 s16 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.s16 + sb * 16))));
    accm = _mm512_fmadd_ps(gscale, s16, accm);
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(blk + Q6_K::kQl + 64 * half);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q6_K::kQh + 32 * half)));
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, lo4),
                                          _mm512_and_si512(_mm512_sllv_epi16(qh, shl), hi2));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4),
                                          _mm512_and_si512(_mm512_srlv_epi16(qh, shr), hi2));
      const int8_t* x = a.qs + sb * kQKK + 128 * half;
      const __m512i g0 = _mm512_add_epi32(group_of_lane, _mm512_set1_epi32(8 * half));
      const __m512i g1 = _mm512_add_epi32(g0, _mm512_set1_epi32(4));
      acc[0] = _mm512_fmadd_ps(dot64(q01, _mm512_loadu_si512(x)), _mm512_permutexvar_ps(g0, gscale),
                               acc[0]);
      acc[1] = _mm512_fmadd_ps(dot64(q23, _mm512_loadu_si512(x + 64)),
                               _mm512_permutexvar_ps(g1, gscale), acc[1]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) - 32.0f * _mm512_reduce_add_ps(accm);
}

// Float weights: 16 a vector, four accumulators, the tail under a mask (masked lanes neither
// load nor fault).
template <class Load16>
inline float dot_float(const uint8_t* w, const float* x, int64_t n, int esz, Load16 load) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  const __mmask16 all = 0xFFFF;
  auto fma = [&](int64_t i, __m512 acc) {
    return _mm512_fmadd_ps(load(w + i * esz, all), _mm512_loadu_ps(x + i), acc);
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = fma(i, acc0);
    acc1 = fma(i + 16, acc1);
    acc2 = fma(i + 32, acc2);
    acc3 = fma(i + 48, acc3);
  }
  for (; i + 16 <= n; i += 16) acc0 = fma(i, acc0);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc1 = _mm512_fmadd_ps(load(w + i * esz, m), _mm512_maskz_loadu_ps(m, x + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

float dot_f32(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(w, x, n, 4,
                   [](const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); });
}
float dot_f16(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(w, x, n, 2, [](const uint8_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  });
}
float dot_bf16(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(w, x, n, 2, [](const uint8_t* p, __mmask16 m) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));  // bf16 -> f32 is exact
  });
}

// The GEMM micro-kernel over NT tokens: lane i of every ymm vector is panel row i. Each 4-column
// step loads the 32 code bytes of 4 columns x 8 rows once and adds their products with every
// token's 4 activation bytes (broadcast) into that token's int32 lanes (vpdpbusd: no int16 stage,
// so no chain limit); a group's sum is scaled once, as in the AVX2 kernel.
template <int NT, int G>
void panel_tokens(const PanelView& p, const GemmInput& in, int64_t t0, float* y, int64_t ldy,
                  int rows) {
  // The loops over tokens and steps are unrolled so that acc / isum stay in registers (16 of
  // the 32 at NT = 8); GCC 12 left them in memory otherwise.
  const PanelTokens<NT> tok(in, t0);
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  const int64_t groups = p.K / G;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* cg = p.codes + g * G * kPanelRows;
    __m256i isum[NT];
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) isum[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < G / 4; ++s) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cg + s * 32));
#pragma GCC unroll 8
      for (int i = 0; i < NT; ++i)
        isum[i] = _mm256_dpbusd_epi32(isum[i], wv, _mm256_set1_epi32(tok.a4(i, g * G + 4 * s)));
    }
    const __m256 sc = _mm256_loadu_ps(p.scale + g * kPanelRows);
    const __m256 mn = _mm256_loadu_ps(p.min + g * kPanelRows);
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) tok.template add_group<G>(i, g, isum[i], sc, mn, &acc[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) store_panel_rows(y + (t0 + i) * ldy, acc[i], rows);
}

template <int G>
void panel_all(const PanelView& p, const GemmInput& in, float* y, int64_t ldy, int rows) {
  constexpr int kTokens = 8;
  int64_t t = 0;
  for (; t + kTokens <= in.T; t += kTokens) panel_tokens<kTokens, G>(p, in, t, y, ldy, rows);
  switch (in.T - t) {
    case 7: panel_tokens<7, G>(p, in, t, y, ldy, rows); break;
    case 6: panel_tokens<6, G>(p, in, t, y, ldy, rows); break;
    case 5: panel_tokens<5, G>(p, in, t, y, ldy, rows); break;
    case 4: panel_tokens<4, G>(p, in, t, y, ldy, rows); break;
    case 3: panel_tokens<3, G>(p, in, t, y, ldy, rows); break;
    case 2: panel_tokens<2, G>(p, in, t, y, ldy, rows); break;
    case 1: panel_tokens<1, G>(p, in, t, y, ldy, rows); break;
    default: break;
  }
}

void gemm_panel(const PanelView& p, const GemmInput& in, float* y, int64_t ldy, int rows) {
  if (p.layout.group == 32) return panel_all<32>(p, in, y, ldy, rows);
  if (p.layout.group == 16) return panel_all<16>(p, in, y, ldy, rows);
  gemm_panel_scalar(p, in, y, ldy, rows);  // a layout without an instantiation
}

Kernels make_table() {
  Kernels k;
  k.isa = Isa::kAvx512;
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
  k.gemm_panel = gemm_panel;
  // Panel packing runs once per panel and chunk: the AVX2 decoders serve (the dispatcher only
  // hands this table out where AVX2 runs too).
  if (const Kernels* avx2 = avx2_kernels()) {
    for (int i = 0; i < kNumTypes; ++i) k.pack_codes[i] = avx2->pack_codes[i];
    k.interleave8 = avx2->interleave8;
  }
  return k;
}

}  // namespace

bool avx512_compiled() {
  return true;
}

const Kernels* avx512_kernels() {
  static const Kernels k = make_table();
  return &k;
}

}  // namespace kvevict::quant

#else

namespace kvevict::quant {
bool avx512_compiled() {
  return false;
}
const Kernels* avx512_kernels() {
  return nullptr;
}
}  // namespace kvevict::quant

#endif
