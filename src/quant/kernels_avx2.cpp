// AVX2 + FMA + F16C kernels (this file alone is compiled for that target: cmake/QuantIsa.cmake;
// the dispatcher calls it only on CPUs that report all three).
//
// Integer products use vpmaddubsw (unsigned weight byte x signed activation byte, adjacent pairs
// summed to int16) then vpmaddwd against ones (or the Q6_K scales) to int32. The unsigned weight
// codes (Q4: <= 15, Q5: <= 31, Q6: <= 63) keep every int16 pair below 2 * 63 * 127 = 16002, far
// from saturation; the signed Q8_0 weights go through the usual sign transfer |w| x sign(a, w).
#include "quant/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <algorithm>

#include "quant/blocks.h"
#include "quant/gemm.h"
#include "quant/simd_local.h"

namespace kvevict::quant {
namespace {

using namespace blocks;

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 32 unsigned weight codes x 32 signed activations -> 8 int32 partial sums, as f32.
inline __m256 dot_u8s8(__m256i w, __m256i a) {
  const __m256i p16 = _mm256_maddubs_epi16(w, a);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// 16 bytes of nibbles -> 32 codes: elements 0..15 are the low nibbles, 16..31 the high ones.
inline __m256i nibbles32(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit j of the 32-bit word at p -> byte j = 0x10 (set) or 0 (clear).
inline __m256i fifth_bits32(const uint8_t* p) {
  const uint32_t x = u32_at(p);
  const __m256i shuf =
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  // Every bit but bit (j % 8) of byte j set: the byte is all ones iff that bit was set.
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  bytes = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
  return _mm256_and_si256(bytes, _mm256_set1_epi8(0x10));
}

inline __m256i load_act(const A8Row& a, int64_t block) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + block * kQK));
}
inline int a8_sum32(const A8Row& a, int64_t b) {
  return a.s16[2 * b] + a.s16[2 * b + 1];
}

void quantize_a8(const float* x, int64_t n, uint8_t* dst) {
  const A8Row r = a8_row(dst, n);
  int8_t* qs = const_cast<int8_t*>(r.qs);
  float* d = const_cast<float*>(r.d);
  int16_t* s16 = const_cast<int16_t*>(r.s16);
  const __m256i abs_bits = _mm256_set1_epi32(0x7fffffff);
  for (int64_t b = 0; b < n / kA8Block; ++b) {
    const float* xb = x + b * kA8Block;
    __m256 v[4];
    // The absmax on the bits of |x| (quant.h kA8NonFiniteBits): a NaN or Inf cannot drop out.
    __m256i amax = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_epi32(amax, _mm256_and_si256(_mm256_castps_si256(v[i]), abs_bits));
    }
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(amax), _mm256_extracti128_si256(amax, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    if (static_cast<uint32_t>(_mm_cvtsi128_si32(m)) >= kA8NonFiniteBits) {
      a8_nonfinite_block(d, qs, s16, b);
      continue;
    }
    const float db = _mm_cvtss_f32(_mm_castsi128_ps(m)) / 127.0f;
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    const __m256 vid = _mm256_set1_ps(id);
    const __m256 lim = _mm256_set1_ps(127.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      __m256 s = _mm256_mul_ps(v[i], vid);
      s = _mm256_max_ps(_mm256_min_ps(s, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
      q[i] = _mm256_cvtps_epi32(s);  // round to nearest even (MXCSR default), as nearbyint
    }
    s16[2 * b] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
    s16[2 * b + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    // int32 -> int8 in order: the packs interleave 128-bit lanes, the permute undoes it.
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * kA8Block), p);
  }
}

// Legacy 32-element blocks: acc += (dw dx) * (codes . a); the offset / min term is one scalar
// multiply-add a block, outside the vector pipes. Two accumulators hide the FMA latency.
template <class Codes, class Extra>
inline float dot_legacy(const uint8_t* w, int bytes, const A8Row& a, int64_t n, Codes codes,
                        Extra extra) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float accx = 0.0f;
  const int64_t nb = n / kQK;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* b0 = w + b * bytes;
    const uint8_t* b1 = b0 + bytes;
    const float s0 = fp16(b0) * a.d[b], s1 = fp16(b1) * a.d[b + 1];
    acc0 = _mm256_fmadd_ps(dot_u8s8(codes(b0), load_act(a, b)), _mm256_set1_ps(s0), acc0);
    acc1 = _mm256_fmadd_ps(dot_u8s8(codes(b1), load_act(a, b + 1)), _mm256_set1_ps(s1), acc1);
    accx += extra(b0, b, s0) + extra(b1, b + 1, s1);
  }
  for (; b < nb; ++b) {
    const uint8_t* b0 = w + b * bytes;
    const float s0 = fp16(b0) * a.d[b];
    acc0 = _mm256_fmadd_ps(dot_u8s8(codes(b0), load_act(a, b)), _mm256_set1_ps(s0), acc0);
    accx += extra(b0, b, s0);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + accx;
}

float dot_q4_0(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q4_0::kBytes, a, n, [](const uint8_t* blk) { return nibbles32(blk + Q4_0::kQs); },
      [&](const uint8_t*, int64_t b, float s) { return -8.0f * s * a8_sum32(a, b); });
}

float dot_q4_1(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q4_1::kBytes, a, n, [](const uint8_t* blk) { return nibbles32(blk + Q4_1::kQs); },
      [&](const uint8_t* blk, int64_t b, float) {
        return fp16(blk + Q4_1::kM) * a.d[b] * static_cast<float>(a8_sum32(a, b));
      });
}

float dot_q5_0(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q5_0::kBytes, a, n,
      [](const uint8_t* blk) {
        return _mm256_or_si256(nibbles32(blk + Q5_0::kQs), fifth_bits32(blk + Q5_0::kQh));
      },
      [&](const uint8_t*, int64_t b, float s) { return -16.0f * s * a8_sum32(a, b); });
}

float dot_q5_1(const uint8_t* w, const A8Row& a, int64_t n) {
  return dot_legacy(
      w, Q5_1::kBytes, a, n,
      [](const uint8_t* blk) {
        return _mm256_or_si256(nibbles32(blk + Q5_1::kQs), fifth_bits32(blk + Q5_1::kQh));
      },
      [&](const uint8_t* blk, int64_t b, float) {
        return fp16(blk + Q5_1::kM) * a.d[b] * static_cast<float>(a8_sum32(a, b));
      });
}

float dot_q8_0(const uint8_t* w, const A8Row& a, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK;
  auto one = [&](int64_t b) {
    const uint8_t* blk = w + b * Q8_0::kBytes;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q8_0::kQs));
    const __m256i x = load_act(a, b);
    const __m256 p = dot_u8s8(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
    return std::make_pair(p, _mm256_set1_ps(fp16(blk) * a.d[b]));
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const auto [p0, s0] = one(b);
    const auto [p1, s1] = one(b + 1);
    acc0 = _mm256_fmadd_ps(p0, s0, acc0);
    acc1 = _mm256_fmadd_ps(p1, s1, acc1);
  }
  for (; b < nb; ++b) {
    const auto [p0, s0] = one(b);
    acc0 = _mm256_fmadd_ps(p0, s0, acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Codes of the 64-element chunk c of a Q4_K / Q5_K super-block: `lo` is sub-block 2c (low
// nibbles), `hi` sub-block 2c + 1 (high nibbles); Q5_K adds bit 2c / 2c + 1 of qh[l] as bit 4.
template <bool kFive>
inline void qk45_chunk(const uint8_t* blk, int c, __m256i hb, __m256i* lo, __m256i* hi) {
  constexpr int kQs = kFive ? Q5_K::kQs : Q4_K::kQs;
  const __m256i lo4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * c));
  *lo = _mm256_and_si256(q, lo4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
  if (kFive) {
    *lo = _mm256_or_si256(
        *lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4));
    *hi = _mm256_or_si256(
        *hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4));
  }
}

// The 4 x 32 codes (0..63) of one 128-element half of a Q6_K super-block: element l + 32 k of
// the half is q[k] byte l.
inline void q6k_half(const uint8_t* blk, int half, __m256i q[4]) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
  const uint8_t* ql = blk + Q6_K::kQl + 64 * half;
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i h =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q6_K::kQh + 32 * half));
  q[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_and_si256(_mm256_slli_epi16(h, 4), hi2));
  q[1] = _mm256_or_si256(_mm256_and_si256(l1, lo4), _mm256_and_si256(_mm256_slli_epi16(h, 2), hi2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4), _mm256_and_si256(h, hi2));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                         _mm256_and_si256(_mm256_srli_epi16(h, 2), hi2));
}

template <bool kFive>
float dot_qk45(const uint8_t* w, const A8Row& a, int64_t n) {
  constexpr int kBytes = kFive ? Q5_K::kBytes : Q4_K::kBytes;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float accm = 0.0f;
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * kBytes;
    const float d = fp16(blk + Q4_K::kD), dmin = fp16(blk + Q4_K::kDmin);
    uint8_t sc[8], mn[8];
    unpack_scales_k4(blk + Q4_K::kScales, sc, mn);
    __m256i hb = _mm256_setzero_si256();
    if (kFive) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q5_K::kQh));
    const int64_t ab0 = sb * 8;
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      qk45_chunk<kFive>(blk, c, hb, &lo, &hi);
      const int j = 2 * c;
      acc0 = _mm256_fmadd_ps(dot_u8s8(lo, load_act(a, ab0 + j)),
                             _mm256_set1_ps(d * sc[j] * a.d[ab0 + j]), acc0);
      acc1 = _mm256_fmadd_ps(dot_u8s8(hi, load_act(a, ab0 + j + 1)),
                             _mm256_set1_ps(d * sc[j + 1] * a.d[ab0 + j + 1]), acc1);
    }
    for (int j = 0; j < 8; ++j)
      accm += dmin * mn[j] * a.d[ab0 + j] * static_cast<float>(a8_sum32(a, ab0 + j));
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - accm;
}

float dot_q6_k(const uint8_t* w, const A8Row& a, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float accm = 0.0f;
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const uint8_t* blk = w + sb * Q6_K::kBytes;
    const float d = fp16(blk + Q6_K::kD);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + Q6_K::kScales);
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      q6k_half(blk, half, q);
      const int8_t* s = sc + 8 * half;
      for (int k = 0; k < 4; ++k) {
        const int64_t ab = sb * 8 + half * 4 + k;
        // int16 lanes 0..7 hold elements 0..15 (scale s[2k]), lanes 8..15 elements 16..31.
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(s[2 * k + 1]), _mm_set1_epi16(s[2 * k]));
        const __m256i p16 = _mm256_maddubs_epi16(q[k], load_act(a, ab));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, scale));
        const float da = d * a.d[ab];
        if (k & 1)
          acc1 = _mm256_fmadd_ps(p, _mm256_set1_ps(da), acc1);
        else
          acc0 = _mm256_fmadd_ps(p, _mm256_set1_ps(da), acc0);
        accm += 32.0f * da *
                static_cast<float>(s[2 * k] * a.s16[2 * ab] + s[2 * k + 1] * a.s16[2 * ab + 1]);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - accm;
}

template <class Load8>
inline float dot_float(const uint8_t* w, const float* x, int64_t n, int esz, Load8 load8,
                       float (*load1)(const uint8_t*)) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u)
      acc[u] =
          _mm256_fmadd_ps(load8(w + (i + 8 * u) * esz), _mm256_loadu_ps(x + i + 8 * u), acc[u]);
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(load8(w + i * esz), _mm256_loadu_ps(x + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += load1(w + i * esz) * x[i];
  return s;
}

float load1_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
float load1_f16(const uint8_t* p) {
  return fp16(p);
}
float load1_bf16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_float(h);
}

float dot_f32(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(
      w, x, n, 4,
      [](const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); },
      load1_f32);
}
float dot_f16(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(
      w, x, n, 2,
      [](const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      },
      load1_f16);
}
float dot_bf16(const uint8_t* w, const float* x, int64_t n) {
  return dot_float(
      w, x, n, 2,
      [](const uint8_t* p) {
        const __m256i u =
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
      },
      load1_bf16);
}

// The GEMM micro-kernel over NT tokens: lane i of every vector is panel row i. A group of G
// columns is G / 4 steps; each step loads the 32 code bytes of 4 columns x 8 rows once and
// multiplies them with every token's 4 activation bytes broadcast (vpmaddubsw), CHAIN steps
// summing in int16 before one vpmaddwd widens them (the bound is in panel_layout).
template <int NT, int G, int CHAIN>
void panel_tokens(const PanelView& p, const GemmInput& in, int64_t t0, float* y, int64_t ldy,
                  int rows) {
  const PanelTokens<NT> tok(in, t0);
  __m256 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t groups = p.K / G;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* cg = p.codes + g * G * kPanelRows;
    __m256i isum[NT];
    for (int i = 0; i < NT; ++i) isum[i] = _mm256_setzero_si256();
    for (int c0 = 0; c0 < G / 4; c0 += CHAIN) {
      __m256i s16v[NT];
      for (int i = 0; i < NT; ++i) s16v[i] = _mm256_setzero_si256();
      for (int s = c0; s < c0 + CHAIN; ++s) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cg + s * 32));
        for (int i = 0; i < NT; ++i) {
          s16v[i] = _mm256_add_epi16(
              s16v[i], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(tok.a4(i, g * G + 4 * s))));
        }
      }
      for (int i = 0; i < NT; ++i)
        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16v[i], ones));
    }
    const __m256 sc = _mm256_loadu_ps(p.scale + g * kPanelRows);
    const __m256 mn = _mm256_loadu_ps(p.min + g * kPanelRows);
    for (int i = 0; i < NT; ++i) tok.template add_group<G>(i, g, isum[i], sc, mn, &acc[i]);
  }
  for (int i = 0; i < NT; ++i) store_panel_rows(y + (t0 + i) * ldy, acc[i], rows);
}

template <int G, int CHAIN>
void panel_all(const PanelView& p, const GemmInput& in, float* y, int64_t ldy, int rows) {
  constexpr int kTokens = 4;
  int64_t t = 0;
  for (; t + kTokens <= in.T; t += kTokens) panel_tokens<kTokens, G, CHAIN>(p, in, t, y, ldy, rows);
  switch (in.T - t) {
    case 3: panel_tokens<3, G, CHAIN>(p, in, t, y, ldy, rows); break;
    case 2: panel_tokens<2, G, CHAIN>(p, in, t, y, ldy, rows); break;
    case 1: panel_tokens<1, G, CHAIN>(p, in, t, y, ldy, rows); break;
    default: break;
  }
}

void gemm_panel(const PanelView& p, const GemmInput& in, float* y, int64_t ldy, int rows) {
  const PanelLayout l = p.layout;
  if (l.group == 32 && l.chain == 8) return panel_all<32, 8>(p, in, y, ldy, rows);
  if (l.group == 32 && l.chain == 4) return panel_all<32, 4>(p, in, y, ldy, rows);
  if (l.group == 16 && l.chain == 2) return panel_all<16, 2>(p, in, y, ldy, rows);
  gemm_panel_scalar(p, in, y, ldy, rows);  // a layout without an instantiation
}

// Panel packing: the same code decoders as the dot kernels, stored instead of multiplied.
template <int kBytes, int kQs, int kQh>
void pack_legacy(const uint8_t* w, int64_t K, uint8_t* codes) {
  for (int64_t b = 0; b < K / kQK; ++b) {
    const uint8_t* blk = w + b * kBytes;
    __m256i q = nibbles32(blk + kQs);
    if constexpr (kQh >= 0) q = _mm256_or_si256(q, fifth_bits32(blk + kQh));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + b * kQK), q);
  }
}

template <bool kFive>
void pack_qk45(const uint8_t* w, int64_t K, uint8_t* codes) {
  constexpr int kBytes = kFive ? Q5_K::kBytes : Q4_K::kBytes;
  for (int64_t sb = 0; sb < K / kQKK; ++sb) {
    const uint8_t* blk = w + sb * kBytes;
    __m256i hb = _mm256_setzero_si256();
    if (kFive) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q5_K::kQh));
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      qk45_chunk<kFive>(blk, c, hb, &lo, &hi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + sb * kQKK + 64 * c), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + sb * kQKK + 64 * c + 32), hi);
    }
  }
}

void pack_q6_k(const uint8_t* w, int64_t K, uint8_t* codes) {
  for (int64_t sb = 0; sb < K / kQKK; ++sb) {
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      q6k_half(w + sb * Q6_K::kBytes, half, q);
      for (int k = 0; k < 4; ++k)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + sb * kQKK + 128 * half + 32 * k),
                            q[k]);
    }
  }
}

// 8 rows x 32 columns -> 8 vectors of (4 columns x 8 rows): an 8 x 8 transpose of 32-bit words.
void interleave8(const uint8_t* const rows[8], int64_t K, uint8_t* codes) {
  for (int64_t c = 0; c + 32 <= K; c += 32) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(rows[i] + c));
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    const __m256 o[8] = {
        _mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
        _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
        _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
        _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
    for (int k = 0; k < 8; ++k)
      _mm256_storeu_ps(reinterpret_cast<float*>(codes + (c / 4 + k) * 32), o[k]);
  }
  for (int64_t c4 = (K / 32) * 8; c4 < K / 4; ++c4)
    for (int i = 0; i < 8; ++i) std::memcpy(codes + c4 * 32 + i * 4, rows[i] + c4 * 4, 4);
}

Kernels make_table() {
  Kernels k;
  k.isa = Isa::kAvx2;
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
  k.pack_codes[type_index(GgmlType::kQ4_0)] = pack_legacy<Q4_0::kBytes, Q4_0::kQs, -1>;
  k.pack_codes[type_index(GgmlType::kQ4_1)] = pack_legacy<Q4_1::kBytes, Q4_1::kQs, -1>;
  k.pack_codes[type_index(GgmlType::kQ5_0)] = pack_legacy<Q5_0::kBytes, Q5_0::kQs, Q5_0::kQh>;
  k.pack_codes[type_index(GgmlType::kQ5_1)] = pack_legacy<Q5_1::kBytes, Q5_1::kQs, Q5_1::kQh>;
  k.pack_codes[type_index(GgmlType::kQ4_K)] = pack_qk45<false>;
  k.pack_codes[type_index(GgmlType::kQ5_K)] = pack_qk45<true>;
  k.pack_codes[type_index(GgmlType::kQ6_K)] = pack_q6_k;
  k.interleave8 = interleave8;
  return k;
}

}  // namespace

const Kernels* avx2_kernels() {
  static const Kernels k = make_table();
  return &k;
}

}  // namespace kvevict::quant

#else

namespace kvevict::quant {
const Kernels* avx2_kernels() {
  return nullptr;
}
}  // namespace kvevict::quant

#endif
