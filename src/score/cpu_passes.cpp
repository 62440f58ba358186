// The streaming passes of the CPU score path (see cpu_passes.h). Inner loops run over contiguous
// float arrays of compile-time length kTile so gcc vectorizes them (-O3 -march=native).
#include "score/cpu_passes.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvevict/dtype.h"
#include "score/cpu_vector_math.h"
#include "score/score_terms.h"

namespace kvevict::score_detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <class Src>
inline float to_float(Src x);
template <>
inline float to_float<float>(float x) {
  return x;
}
template <>
inline float to_float<double>(double x) {
  return static_cast<float>(x);
}

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
template <>
inline float to_float<Bf16>(Bf16 x) {
  return bf16_to_float(x.bits);
}
template <>
inline float to_float<F16>(F16 x) {
  return half_to_float(x.bits);
}

// True for NaN and +-Inf: all exponent bits set. An integer test, so the OR-reduction over a row
// vectorizes (a float sum of x * 0 would not, without -ffast-math).
inline uint32_t non_finite_bit(float x) {
  return (__builtin_bit_cast(uint32_t, x) & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
}

// One row of d elements with element stride `step` into dst[c * dst_step], times `scale`.
// Returns nonzero when a value is NaN or Inf.
template <class Src>
inline uint32_t convert_row(const Src* row, int64_t step, int64_t d, float scale, float* dst,
                            int64_t dst_step) {
  uint32_t bad = 0;
  if (step == 1 && dst_step == 1) {
    for (int64_t c = 0; c < d; ++c) {
      const float x = to_float(row[c]);
      bad |= non_finite_bit(x);
      dst[c] = x * scale;
    }
  } else {
    for (int64_t c = 0; c < d; ++c) {
      const float x = to_float(row[c * step]);
      bad |= non_finite_bit(x);
      dst[c * dst_step] = x * scale;
    }
  }
  return bad;
}

template <class Src>
bool load_tile_typed(const TensorView& t, int64_t head, int64_t j0, int64_t count, bool transposed,
                     float* dst) {
  const int64_t d = t.shape[2];
  const Src* base = static_cast<const Src*>(t.data) + head * t.stride[0];
  uint32_t bad = 0;
  for (int64_t jj = 0; jj < count; ++jj) {
    const Src* row = base + (j0 + jj) * t.stride[1];
    if (transposed)
      bad |= convert_row(row, t.stride[2], d, 1.0f, dst + jj, kTile);
    else
      bad |= convert_row(row, t.stride[2], d, 1.0f, dst + jj * d, 1);
  }
  for (int64_t jj = count; jj < kTile; ++jj) {
    if (transposed)
      for (int64_t c = 0; c < d; ++c) dst[c * kTile + jj] = 0.0f;
    else
      std::fill(dst + jj * d, dst + (jj + 1) * d, 0.0f);
  }
  return bad == 0;
}

template <class Src>
bool load_rows_typed(const TensorView& t, int64_t head, int64_t row0, int64_t count, float scale,
                     float* dst) {
  const int64_t d = t.shape[2];
  const Src* base = static_cast<const Src*>(t.data) + head * t.stride[0];
  uint32_t bad = 0;
  for (int64_t i = 0; i < count; ++i)
    bad |= convert_row(base + (row0 + i) * t.stride[1], t.stride[2], d, scale, dst + i * d, 1);
  return bad == 0;
}

// out[r, :] = sum_c term(x[r, c], yt[c, :]) for the rows of a block x [rows, d] against one tile
// yt [d, kTile]. Four rows at a time share each load of a tile column (a 4 x kTile register tile:
// 16 AVX2 / 8 AVX-512 accumulators).
template <typename Term>
inline void block_reduce(const float* x, int64_t rows, int64_t d, const float* yt, float* out,
                         Term term) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* x0 = x + r * d;
    float acc0[kTile] = {}, acc1[kTile] = {}, acc2[kTile] = {}, acc3[kTile] = {};
    for (int64_t c = 0; c < d; ++c) {
      const float* yc = yt + c * kTile;
      const float s0 = x0[c], s1 = x0[d + c], s2 = x0[2 * d + c], s3 = x0[3 * d + c];
      for (int jj = 0; jj < kTile; ++jj) {
        acc0[jj] += term(s0, yc[jj]);
        acc1[jj] += term(s1, yc[jj]);
        acc2[jj] += term(s2, yc[jj]);
        acc3[jj] += term(s3, yc[jj]);
      }
    }
    std::copy(acc0, acc0 + kTile, out + r * kTile);
    std::copy(acc1, acc1 + kTile, out + (r + 1) * kTile);
    std::copy(acc2, acc2 + kTile, out + (r + 2) * kTile);
    std::copy(acc3, acc3 + kTile, out + (r + 3) * kTile);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * d;
    float acc[kTile] = {};
    for (int64_t c = 0; c < d; ++c) {
      const float* yc = yt + c * kTile;
      for (int jj = 0; jj < kTile; ++jj) acc[jj] += term(xr[c], yc[jj]);
    }
    std::copy(acc, acc + kTile, out + r * kTile);
  }
}

// z[r, :] = q_r . K_tile; kt is [d, kTile].
inline void block_logits(const float* q, int64_t rows, int64_t d, const float* kt, float* z) {
  block_reduce(q, rows, d, kt, z, [](float x, float k) { return x * k; });
}

// d2[r, :] = ||a_r - v_token||^2 from explicit differences (dropkv: see score_terms.h for why
// not the norm identity); vt is [d, kTile]. Nothing beyond the [kRowBlock, kTile] block is stored.
inline void block_dist2(const float* a, int64_t rows, int64_t d, const float* vt, float* d2) {
  block_reduce(a, rows, d, vt, d2, [](float x, float v) {
    const float e = v - x;
    return e * e;
  });
}

// o[r, :] = correction[r] * o[r, :] + sum_jj p[r, jj] v[jj, :] for a block of rows; p is
// [rows, kTile] (zeros where masked), vn [kTile, d]. Columns go in slices of kCols so that four
// rows' slices stay in registers while the tile's value rows stream past.
inline void block_accumulate_output(const float* p, const float* correction, int64_t rows,
                                    int64_t d, const float* vn, float* o) {
  constexpr int64_t kCols = 32;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    for (int64_t c0 = 0; c0 < d; c0 += kCols) {
      const int64_t cols = std::min(kCols, d - c0);
      if (cols == kCols) {
        float acc0[kCols], acc1[kCols], acc2[kCols], acc3[kCols];
        float* o0 = o + r * d + c0;
        for (int64_t c = 0; c < kCols; ++c) {
          acc0[c] = o0[c] * correction[r];
          acc1[c] = o0[d + c] * correction[r + 1];
          acc2[c] = o0[2 * d + c] * correction[r + 2];
          acc3[c] = o0[3 * d + c] * correction[r + 3];
        }
        for (int jj = 0; jj < kTile; ++jj) {
          const float* vj = vn + jj * d + c0;
          const float p0 = p[r * kTile + jj], p1 = p[(r + 1) * kTile + jj];
          const float p2 = p[(r + 2) * kTile + jj], p3 = p[(r + 3) * kTile + jj];
          for (int64_t c = 0; c < kCols; ++c) {
            acc0[c] += p0 * vj[c];
            acc1[c] += p1 * vj[c];
            acc2[c] += p2 * vj[c];
            acc3[c] += p3 * vj[c];
          }
        }
        std::copy(acc0, acc0 + kCols, o0);
        std::copy(acc1, acc1 + kCols, o0 + d);
        std::copy(acc2, acc2 + kCols, o0 + 2 * d);
        std::copy(acc3, acc3 + kCols, o0 + 3 * d);
      } else {
        for (int64_t i = r; i < r + 4; ++i) {
          float* oi = o + i * d + c0;
          for (int64_t c = 0; c < cols; ++c) oi[c] *= correction[i];
          for (int jj = 0; jj < kTile; ++jj) {
            const float pj = p[i * kTile + jj];
            const float* vj = vn + jj * d + c0;
            for (int64_t c = 0; c < cols; ++c) oi[c] += pj * vj[c];
          }
        }
      }
    }
  }
  for (; r < rows; ++r) {
    float* orow = o + r * d;
    for (int64_t c = 0; c < d; ++c) orow[c] *= correction[r];
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = p[r * kTile + jj];
      const float* vj = vn + jj * d;
      for (int64_t c = 0; c < d; ++c) orow[c] += pj * vj[c];
    }
  }
}

// Visible tokens of the tile for a row at `pos`: tokens j0 .. min(pos, t1 - 1).
inline int visible_in_tile(int64_t pos, int64_t j0, int64_t t1) {
  const int64_t last = std::min(pos, t1 - 1);
  return static_cast<int>(std::clamp<int64_t>(last - j0 + 1, 0, kTile));
}

// The per-(row, token) term for one row of a block, accumulated into acc[0 .. kTile), except at
// column `skip` (the row's top key, whose term the caller adds in the leave-one-out form; -1:
// none). For dropkv `av` holds ||a - v||^2 (block_dist2), for the obcache terms <a, v>. The
// terms that have the row's top key (top non-null) take p relative to it (terms::other_prob), so
// p <= 1/2 and 1 - p needs no expm1; the others take p = exp(z - lse).
template <Method M>
inline void add_terms(const float* z, const float* av, const float* v2, float lse, float a2,
                      const terms::TopKey<float>* top, int visible, int skip, float floor,
                      float* acc) {
  constexpr bool kTop = M == Method::kDropKV || M == Method::kObcacheK || M == Method::kObcacheVK;
  const float ztop = kTop ? top->z : 0.0f, ptop = kTop ? top->p : 0.0f;
  for (int jj = 0; jj < kTile; ++jj) {
    float p;
    if constexpr (kTop)
      p = terms::other_prob(exp_poly(z[jj] - ztop), ptop);
    else
      p = exp_poly(z[jj] - lse);
    float t;
    if constexpr (M == Method::kDropKV) {
      t = terms::dropkv_term_dist(p, std::max(1.0f - p, floor), av[jj]);
    } else if constexpr (M == Method::kObcacheV) {
      t = terms::obcache_v_term(p, v2[jj]);
    } else if constexpr (M == Method::kObcacheK) {
      t = terms::obcache_k_term(p, z[jj], a2, v2[jj], av[jj]);
    } else if constexpr (M == Method::kObcacheVK) {
      t = terms::obcache_vk_term(p, z[jj], a2, v2[jj], av[jj]);
    } else {
      t = terms::attention_term(p);
    }
    acc[jj] += jj < visible && jj != skip ? t : 0.0f;
  }
}

template <Method M>
bool score_range_typed(const RowBlock& rows, const RowStats& stats, const TensorView& k,
                       const TensorView& v, int64_t head, int64_t t0, int64_t t1, float floor,
                       float* out, TileScratch& ws) {
  constexpr bool kNeedsOutput =
      M == Method::kDropKV || M == Method::kObcacheK || M == Method::kObcacheVK;
  constexpr bool kNeedsValues = kNeedsOutput || M == Method::kObcacheV;
  const int64_t d = k.shape[2];
  bool finite = true;
  int64_t max_pos = 0;
  for (int64_t r = 0; r < rows.count; ++r) max_pos = std::max(max_pos, rows.pos[r]);
  for (int64_t j0 = t0; j0 < t1 && j0 <= max_pos; j0 += kTile) {
    const int64_t count = std::min<int64_t>(kTile, t1 - j0);
    finite &= load_tile(k, head, j0, count, true, ws.kt);
    if (kNeedsValues) {
      finite &= load_tile(v, head, j0, count, true, ws.vt);
      std::fill(ws.v2, ws.v2 + kTile, 0.0f);
      for (int64_t c = 0; c < d; ++c) {
        const float* vc = ws.vt + c * kTile;
        for (int jj = 0; jj < kTile; ++jj) ws.v2[jj] += vc[jj] * vc[jj];
      }
    }
    float acc[kTile] = {};
    for (int64_t rb = 0; rb < rows.count; rb += kRowBlock) {
      const int64_t nr = std::min<int64_t>(kRowBlock, rows.count - rb);
      block_logits(rows.q + rb * d, nr, d, ws.kt, ws.z);
      if (M == Method::kDropKV)
        block_dist2(stats.a + rb * d, nr, d, ws.vt, ws.av);
      else if (kNeedsOutput)
        block_logits(stats.a + rb * d, nr, d, ws.vt, ws.av);
      for (int64_t r = 0; r < nr; ++r) {
        const int visible = visible_in_tile(rows.pos[rb + r], j0, t1);
        if (visible == 0) continue;
        // The row's top key takes the leave-one-out term (score_terms.h): its first form would
        // divide the rounding of a - v by (1 - p)^2.
        int skip = -1;
        if constexpr (kNeedsOutput) {
          const int64_t top = stats.top[rb + r] - j0;
          if (top >= 0 && top < visible) skip = static_cast<int>(top);
        }
        add_terms<M>(ws.z + r * kTile, ws.av + r * kTile, ws.v2, stats.lse[rb + r],
                     kNeedsOutput ? stats.a2[rb + r] : 0.0f,
                     kNeedsOutput ? &stats.top_key[rb + r] : nullptr, visible, skip, floor, acc);
        if (skip >= 0) acc[skip] += terms::top_term(M, stats.top_key[rb + r]);
      }
    }
    for (int64_t jj = 0; jj < count; ++jj) out[j0 - t0 + jj] += acc[jj];
  }
  return finite;
}

}  // namespace

bool load_tile(const TensorView& t, int64_t head, int64_t j0, int64_t count, bool transposed,
               float* dst) {
  switch (t.dtype) {
    case DType::kF32: return load_tile_typed<float>(t, head, j0, count, transposed, dst);
    case DType::kF64: return load_tile_typed<double>(t, head, j0, count, transposed, dst);
    case DType::kBF16: return load_tile_typed<Bf16>(t, head, j0, count, transposed, dst);
    case DType::kF16: return load_tile_typed<F16>(t, head, j0, count, transposed, dst);
    default: KVEVICT_FAIL("tile of dtype ", dtype_name(t.dtype), "; expected a float type");
  }
}

bool load_rows(const TensorView& t, int64_t head, int64_t row0, int64_t count, float scale,
               float* dst) {
  switch (t.dtype) {
    case DType::kF32: return load_rows_typed<float>(t, head, row0, count, scale, dst);
    case DType::kF64: return load_rows_typed<double>(t, head, row0, count, scale, dst);
    case DType::kBF16: return load_rows_typed<Bf16>(t, head, row0, count, scale, dst);
    case DType::kF16: return load_rows_typed<F16>(t, head, row0, count, scale, dst);
    default: KVEVICT_FAIL("rows of dtype ", dtype_name(t.dtype), "; expected a float type");
  }
}

void add_key(float z, const float* vrow, int64_t d, float& m, float& s, float* o) {
  const float m_new = nan_max(m, z);
  const float corr = m == kNegInf ? 0.0f : std::exp(m - m_new);
  const float w = std::exp(z - m_new);
  s = s * corr + w;
  m = m_new;
  if (o != nullptr)
    for (int64_t c = 0; c < d; ++c) o[c] = o[c] * corr + w * vrow[c];
}

float finish_row(float m2, float l, float* o_oth, float mt, const float* v_top, int64_t d,
                 float* a_out, float* a2, terms::TopKey<float>* top) {
  // rho = sum_{i != top} exp(z_i - z_top) = l exp(m2 - mt) <= l: exact to float rounding, and 0
  // (p = 1) where the others sit more than ~87 nats below the top.
  const float rho = l == 0.0f ? 0.0f : l * std::exp(m2 - mt);
  const float inv_l = l == 0.0f ? 0.0f : 1.0f / l;
  terms::TopKey<float> tk;
  terms::top_probs(rho, tk.p, tk.omp);
  tk.z = mt;
  float sq = 0.0f;
  for (int64_t c = 0; c < d; ++c) {
    const float a_oth = o_oth[c] * inv_l, vt = v_top[c];
    const float diff = vt - a_oth;
    tk.d2 += diff * diff;
    tk.vdiff += vt * diff;
    tk.v2 += vt * vt;
    const float a = (vt + rho * a_oth) * tk.p;  // p = 1 / (1 + rho)
    a_out[c] = a;
    sq += a * a;
  }
  *a2 = sq;
  if (top != nullptr) *top = tk;
  return mt + std::log1p(rho);
}

bool forward_range(const RowBlock& rows, const TensorView& k, const TensorView& v, int64_t head,
                   int64_t t0, int64_t t1, float* m, float* s, float* o, float* mt, int64_t* it,
                   TileScratch& ws) {
  const int64_t d = k.shape[2];
  const bool with_output = o != nullptr;
  const bool track_top = mt != nullptr;
  bool finite = true;
  int64_t max_pos = 0;
  for (int64_t r = 0; r < rows.count; ++r) max_pos = std::max(max_pos, rows.pos[r]);
  for (int64_t j0 = t0; j0 < t1 && j0 <= max_pos; j0 += kTile) {
    const int64_t count = std::min<int64_t>(kTile, t1 - j0);
    finite &= load_tile(k, head, j0, count, true, ws.kt);
    if (with_output) finite &= load_tile(v, head, j0, count, false, ws.vn);
    for (int64_t rb = 0; rb < rows.count; rb += kRowBlock) {
      const int64_t nr = std::min<int64_t>(kRowBlock, rows.count - rb);
      block_logits(rows.q + rb * d, nr, d, ws.kt, ws.z);
      float correction[kRowBlock];
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t row = rb + r;
        const int visible = visible_in_tile(rows.pos[row], j0, t1);
        float* z = ws.z + r * kTile;
        if (visible == 0) {
          // Nothing visible: the state stays as it is (p = 0, correction 1).
          std::fill(z, z + kTile, 0.0f);
          correction[r] = 1.0f;
          continue;
        }
        for (int jj = 0; jj < kTile; ++jj) z[jj] = jj < visible ? z[jj] : kNegInf;
        // The tile's first maximum takes the row's top when it beats the current one; the former
        // top then joins the others (weight exp(z_old - m_new), its value row re-read below).
        bool add_old = false;
        float old_z = kNegInf;
        int64_t old_idx = -1;
        if (track_top) {
          int arg = 0;
          for (int jj = 1; jj < visible; ++jj)
            if (z[jj] > z[arg]) arg = jj;
          if (z[arg] > mt[row]) {
            add_old = it[row] >= 0;
            old_z = mt[row];
            old_idx = it[row];
            mt[row] = z[arg];
            it[row] = j0 + arg;
            z[arg] = kNegInf;
          }
        }
        float tile_max = add_old ? old_z : kNegInf;
        for (int jj = 0; jj < kTile; ++jj) tile_max = nan_max(tile_max, z[jj]);
        const float m_new = nan_max(m[row], tile_max);
        if (m_new == kNegInf) {
          // Nothing but the top seen yet: the others' state stays empty.
          std::fill(z, z + kTile, 0.0f);
          correction[r] = 1.0f;
          continue;
        }
        const float corr = exp_poly(m[row] - m_new);  // 0 when m was -inf
        float sum = 0.0f;
        for (int jj = 0; jj < kTile; ++jj) {
          z[jj] = exp_poly(z[jj] - m_new);
          sum += z[jj];
        }
        correction[r] = corr;
        if (add_old) {
          const float w_old = std::exp(old_z - m_new);
          sum += w_old;
          if (with_output) {
            finite &= load_rows(v, head, old_idx, 1, 1.0f, ws.vrow);
            float* orow = o + row * d;
            for (int64_t c = 0; c < d; ++c) orow[c] = orow[c] * corr + w_old * ws.vrow[c];
            correction[r] = 1.0f;  // applied here
          }
        }
        s[row] = s[row] * corr + sum;
        m[row] = m_new;
      }
      if (with_output) block_accumulate_output(ws.z, correction, nr, d, ws.vn, o + rb * d);
    }
  }
  return finite;
}

bool score_range(Method method, const RowBlock& rows, const RowStats& stats, const TensorView& k,
                 const TensorView& v, int64_t head, int64_t t0, int64_t t1, float floor, float* acc,
                 TileScratch& ws) {
  switch (method) {
    case Method::kDropKV:
      return score_range_typed<Method::kDropKV>(rows, stats, k, v, head, t0, t1, floor, acc, ws);
    case Method::kObcacheV:
      return score_range_typed<Method::kObcacheV>(rows, stats, k, v, head, t0, t1, floor, acc, ws);
    case Method::kObcacheK:
      return score_range_typed<Method::kObcacheK>(rows, stats, k, v, head, t0, t1, floor, acc, ws);
    case Method::kObcacheVK:
      return score_range_typed<Method::kObcacheVK>(rows, stats, k, v, head, t0, t1, floor, acc, ws);
    case Method::kSnapKV:
    case Method::kH2O:
    case Method::kTOVA:
    case Method::kVATP:
    case Method::kCriticalKV:
      return score_range_typed<Method::kSnapKV>(rows, stats, k, v, head, t0, t1, floor, acc, ws);
    default: KVEVICT_FAIL("method ", method_name(method), " has no per-(query, token) term");
  }
}

}  // namespace kvevict::score_detail
