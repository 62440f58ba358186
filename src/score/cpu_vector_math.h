// exp and expm1 in plain float arithmetic, so gcc vectorizes the loops that call them (libm's
// expf is an opaque call that keeps a loop scalar, and it would cost more than the d-long dot
// products around it). Accuracy: about 2 ulp over the range the scores use, x <= ~0.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvevict::score_detail {

// e^x for float x; 0 for x below -87 (including -inf, which marks masked logits); x is clamped at
// 88 (the scores only evaluate x = z - max <= 0 or z - lse <= ~0).
inline float exp_poly(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f;
  const float kLn2Lo = -2.12194440e-4f;
  const bool underflow = x < -87.0f;
  // Clamped so the exponent below stays in [1, 254]; written so NaN lands on -87 too (it must not
  // reach an out-of-range float -> int cast) and is given back as NaN at the end (a select, so the
  // loop still vectorizes): e^NaN = NaN, not e^-87, or a NaN logit would weigh as a finite key.
  const float xc = (x > -87.0f) ? ((x < 88.0f) ? x : 88.0f) : -87.0f;
  // x = k ln2 + r, |r| <= ln2 / 2; e^x = 2^k e^r.
  // Round to nearest by the 1.5 * 2^23 trick (plain adds, so the loop vectorizes; no -ffast-math
  // is on to fold it away).
  const float kRound = 12582912.0f;
  const float kf = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - kf * kLn2Hi) - kf * kLn2Lo;
  // Minimax polynomial for e^r on [-ln2/2, ln2/2] (Cephes expf coefficients).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(kf) + 127) << 23;
  const float scale = __builtin_bit_cast(float, bits);
  return underflow ? 0.0f : (x == x ? p * scale : x);
}

// e^x - 1, exact to a few ulp near 0 (where exp_poly(x) - 1 would cancel): dropkv needs
// 1 - p = -expm1(z - lse) for p close to 1 (SPEC section 2).
inline float expm1_poly(float x) {
  // Taylor series to x^8 / 8! for |x| < 0.25: truncation error < 0.25^9 / 9! < 1e-11, far below
  // float rounding; outside, exp(x) - 1 loses nothing relevant.
  const float series =
      x * (1.0f +
           x * (0.5f +
                x * (1.6666667e-1f +
                     x * (4.1666668e-2f +
                          x * (8.3333338e-3f +
                               x * (1.3888889e-3f + x * (1.9841270e-4f + x * 2.4801587e-5f)))))));
  const float ax = x < 0 ? -x : x;
  return ax < 0.25f ? series : exp_poly(x) - 1.0f;
}

}  // namespace kvevict::score_detail
