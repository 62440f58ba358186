// The CPU float path of attention over a (compacted) cache: online softmax over key tiles
// (FlashAttention's recurrence on the CPU).
//
// One work item = one KV head x one tile of queries, with all G query heads of the group as rows,
// so a key tile is converted once and used by the whole group (decode with m = 1 has G rows per
// item). Logits are `omp simd` dot products along d, the P.V update runs along d, and softmax uses
// a vectorizable exp. Each query's arithmetic depends only on its own item (never on the thread
// that runs it), so results are identical for any thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/nan_max.h"
#include "core/parallel.h"
#include "core/parallel_if_large.h"
#include "kvevict/attention.h"
#include "kvevict/error.h"

namespace kvevict::cpu {
namespace {

constexpr int kKeyTile = 64;   // keys per tile: a [d, 64] f32 tile of keys is 32 KiB at d=128
constexpr int kMaxRows = 256;  // G x query-tile rows of one item
constexpr int kMaxQueryTile = 16;
constexpr int64_t kMaxChunks = 64;  // workspace slices; items are dealt round-robin to chunks
// Split-K (flash-decoding): when (KV head x query tile) items are too few to feed the threads
// (decode: Hkv items), each head's keys are cut into `splits` ranges of >= kSplitKeys rows whose
// partial softmax states merge afterwards. The split depends only on the shapes, never on the
// thread count, so results stay identical for any number of threads.
// One query tile (decode) splits every 256 keys: Gemma 3's decode has one KV head and 512-row
// sliding layers, so at 1024 every layer's attention ran on one thread (at 256 a 2-thread decode
// is 0.88x the wall time, a 1-thread one ~1.04x: the merge; docs/RESULTS.md 2026-12-03). Several
// query tiles (prefill chunks) keep 1024: more splits there only grow the partial buffers.
constexpr int64_t kSplitBelowItems = 64;
constexpr int64_t kSplitKeys = 1024;
constexpr int64_t kSplitKeysOneTile = 256;
constexpr int64_t kMaxSplits = 64;

struct Plan {
  int hq, hkv, group, d;
  int64_t m;
  int query_tile;   // queries per item
  int64_t q_tiles;  // per KV head
  int64_t splits;   // key ranges per (KV head, query tile)
  int64_t items, chunks;
  int rows() const { return group * query_tile; }
  // Keys per split of a head of `len` rows, a multiple of the key tile.
  int64_t split_keys(int64_t len) const {
    const int64_t per = (len + splits - 1) / splits;
    return std::max<int64_t>(kKeyTile, (per + kKeyTile - 1) / kKeyTile * kKeyTile);
  }
};

Plan make_plan(const AttentionProblem& pb) {
  Plan p;
  p.hq = pb.num_q_heads();
  p.hkv = pb.cache.num_kv_heads;
  p.group = p.hq / p.hkv;
  p.d = pb.cache.head_dim;
  p.m = pb.num_queries();
  p.query_tile = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({kMaxQueryTile, p.m, std::max(1, kMaxRows / p.group)})));
  p.q_tiles = (p.m + p.query_tile - 1) / p.query_tile;
  p.splits = 1;
  if (p.hkv * p.q_tiles < kSplitBelowItems) {
    int64_t longest = 0;
    for (int h = 0; h < p.hkv; ++h) longest = std::max(longest, pb.cache.lens[h]);
    const int64_t keys = p.q_tiles == 1 ? kSplitKeysOneTile : kSplitKeys;
    p.splits = std::clamp<int64_t>(longest / keys, 1, kMaxSplits);
  }
  p.items = p.hkv * p.q_tiles * p.splits;
  p.chunks = std::min(p.items, kMaxChunks);
  return p;
}

// Per-chunk scratch: sizes in floats.
struct Scratch {
  float* kt;   // [Tk, d] key tile converted to f32 (16-bit caches only)
  float* vt;   // [Tk, d] value tile converted to f32
  float* s;    // [rows, Tk] logits, then probabilities
  float* acc;  // [rows, d] unnormalized output
  float* q;    // [rows, d] queries times the logit scale
  float* mx;   // [rows] running max
  float* sum;  // [rows] running sum of exp
};

WorkspaceSizer& size_chunk(WorkspaceSizer& s, const Plan& p) {
  const size_t r = p.rows();
  return s.add<float>(static_cast<size_t>(p.d) * kKeyTile)
      .add<float>(static_cast<size_t>(kKeyTile) * p.d)
      .add<float>(r * kKeyTile)
      .add<float>(r * p.d)
      .add<float>(r * p.d)
      .add<float>(r)
      .add<float>(r);
}

Scratch carve_chunk(WorkspaceCarver& c, const Plan& p) {
  const size_t r = p.rows();
  Scratch s;
  s.kt = c.take<float>(static_cast<size_t>(p.d) * kKeyTile);
  s.vt = c.take<float>(static_cast<size_t>(kKeyTile) * p.d);
  s.s = c.take<float>(r * kKeyTile);
  s.acc = c.take<float>(r * p.d);
  s.q = c.take<float>(r * p.d);
  s.mx = c.take<float>(r);
  s.sum = c.take<float>(r);
  return s;
}

// Converts `count` contiguous f16 / bf16 / f32 elements to f32.
void to_f32(const void* src, DType t, int64_t count, float* dst) {
  if (t == DType::kBF16) {
    bf16_to_float_n(static_cast<const uint16_t*>(src), dst, count);
  } else if (t == DType::kF16) {
    half_to_float_n(static_cast<const uint16_t*>(src), dst, count);  // F16C, 8 a step
  } else {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
  }
}

// Cephes' expf constants, shared by the scalar and the 8-lane forms: the clamp, log2(e), ln(2) in
// two parts (exact high bits + the rest) and the degree-5 polynomial of e^r on [-ln2/2, ln2/2].
namespace cephes_exp {
constexpr float kMin = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace cephes_exp

// e^x for finite x <= 0 (softmax arguments z - max), relative error ~2e-7: Cephes' expf range
// reduction and polynomial, written branch-free so the loop over a key tile vectorizes (std::exp
// does not without -ffast-math). Below -87 it returns ~1e-38 instead of 0, harmless next to the
// row maximum's 1. A NaN argument (from NaN weights, which the loader does not scan for) comes
// out NaN, and never reaches a float -> int cast of NaN (undefined; found by
// fuzz/gguf_model_fuzzer, issue 13).
inline float exp_nonpositive(float x) {
  using namespace cephes_exp;
  x = x < kMin ? kMin : x;
  const float n_raw = std::floor(x * kLog2e + 0.5f);
  const float n = n_raw == n_raw ? n_raw : 0.0f;  // NaN: y below is NaN, any exponent will do
  const float r = x - n * kLn2Hi - n * kLn2Lo;
  float y = kP0;
  y = y * r + kP1;
  y = y * r + kP2;
  y = y * r + kP3;
  y = y * r + kP4;
  y = y * r + kP5;
  y = y * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// 8-float vectors (GCC / Clang vector extensions): one ymm register under AVX2, two xmm under
// SSE2. The former 16-float type ran through the stack on AVX2 CPUs (the compiler splits a
// 64-byte vector into xmm pieces), which made attention 43% of Gemma 3's prefill (issue 17).
typedef float Vec8 __attribute__((vector_size(32)));
inline Vec8 load8(const float* x) {
  Vec8 v;
  std::memcpy(&v, x, sizeof v);
  return v;
}
inline void store8(float* x, Vec8 v) {
  std::memcpy(x, &v, sizeof v);
}
inline float hsum8(Vec8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}
typedef int32_t Vec8i __attribute__((vector_size(32)));
typedef float Vec4 __attribute__((vector_size(16)));

// The lane sums of four vectors, {hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)} to the bit (the same
// additions in the same order: halves first, then pairs), by a transpose-and-add tree instead of
// four horizontal sums (the decode logits spent about half their instructions in hsum8's shuffles).
inline Vec4 hsum4x8(Vec8 a0, Vec8 a1, Vec8 a2, Vec8 a3) {
  auto halves = [](Vec8 v) -> Vec4 {  // {v0 + v4, v1 + v5, v2 + v6, v3 + v7}
    return __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  };
  const Vec4 h0 = halves(a0), h1 = halves(a1), h2 = halves(a2), h3 = halves(a3);
  // {h0_0 + h0_1, h0_2 + h0_3, h1_0 + h1_1, h1_2 + h1_3}, and the same of h2, h3.
  const Vec4 p01 =
      __builtin_shufflevector(h0, h1, 0, 2, 4, 6) + __builtin_shufflevector(h0, h1, 1, 3, 5, 7);
  const Vec4 p23 =
      __builtin_shufflevector(h2, h3, 0, 2, 4, 6) + __builtin_shufflevector(h2, h3, 1, 3, 5, 7);
  return __builtin_shufflevector(p01, p23, 0, 2, 4, 6) +
         __builtin_shufflevector(p01, p23, 1, 3, 5, 7);
}

// exp_nonpositive on 8 lanes, the same steps (clamp at -87, n = floor(x log2 e + 1/2), Cephes'
// polynomial, 2^n from the exponent bits). Written with vector types because GCC kept the
// `omp simd` loop over exp_nonpositive scalar (its floor and bit cast): that scalar exp was
// most of a decode's attention time (docs/RESULTS.md 2026-12-03 (b)). A NaN lane stays NaN.
inline Vec8 exp_nonpositive8(Vec8 x) {
  using namespace cephes_exp;
  const Vec8 lo = {kMin, kMin, kMin, kMin, kMin, kMin, kMin, kMin};
  x = x < lo ? lo : x;
  const Vec8 t = x * kLog2e + 0.5f;
  const Vec8 zero = {};
  // floor(t) for t in [-126, 1): truncate, then step down where truncation went up. A NaN
  // lane converts 0 instead (no float -> int conversion of NaN); its y below stays NaN.
  const Vec8i ti =
      __builtin_convertvector(t == t ? t : zero, Vec8i);  // NOLINT(misc-redundant-expression)
  const Vec8 tf = __builtin_convertvector(ti, Vec8);
  const Vec8 n = tf > t ? tf - 1.0f : tf;
  const Vec8 r = x - n * kLn2Hi - n * kLn2Lo;
  Vec8 y = r * kP0 + kP1;
  y = y * r + kP2;
  y = y * r + kP3;
  y = y * r + kP4;
  y = y * r + kP5;
  y = y * (r * r) + r + 1.0f;
  const Vec8i bits = (__builtin_convertvector(n, Vec8i) + 127) << 23;
  Vec8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// Logits of up to two query rows against the keys of a tile ([tk, d] f32; d a multiple of 8):
// 2 rows x 4 keys of accumulators share every load of q and k. One row (kTwo false: the odd row
// of a GQA group of 3) compiles without the second row's work.
template <bool kTwo>
void rows_logits_n(const float* q0, const float* q1, const float* kt, int tk, int d, float* out0,
                   float* out1) {
  constexpr bool two = kTwo;
  int j = 0;
  for (; j + 4 <= tk; j += 4) {
    const float* k0 = kt + static_cast<size_t>(j) * d;
    Vec8 a[2][4] = {};
    for (int i = 0; i < d; i += 8) {
      const Vec8 x0 = load8(q0 + i);
      const Vec8 x1 = two ? load8(q1 + i) : x0;
      for (int u = 0; u < 4; ++u) {
        const Vec8 kv = load8(k0 + static_cast<size_t>(u) * d + i);
        a[0][u] += x0 * kv;
        a[1][u] += x1 * kv;
      }
    }
    const Vec4 s0 = hsum4x8(a[0][0], a[0][1], a[0][2], a[0][3]);
    std::memcpy(out0 + j, &s0, sizeof s0);
    if (two) {
      const Vec4 s1 = hsum4x8(a[1][0], a[1][1], a[1][2], a[1][3]);
      std::memcpy(out1 + j, &s1, sizeof s1);
    }
  }
  for (; j < tk; ++j) {
    const float* kj = kt + static_cast<size_t>(j) * d;
    Vec8 a0 = {}, a1 = {};
    for (int i = 0; i < d; i += 8) {
      const Vec8 kv = load8(kj + i);
      a0 += load8(q0 + i) * kv;
      if (two) a1 += load8(q1 + i) * kv;
    }
    out0[j] = hsum8(a0);
    if (two) out1[j] = hsum8(a1);
  }
}

// acc_r[0, d) += sum_j p_r[j] v_j over a tile for up to two rows (d a multiple of 8): blocks of
// 32 elements of both rows (8 registers) stay in registers across the key loop, and each loaded
// value vector feeds both rows. Each element adds the keys in order j = 0, 1, ...
template <bool kTwo>
void rows_pv_n(const float* p0, const float* p1, const float* vt, int tk, int d, float* acc0,
               float* acc1) {
  constexpr bool two = kTwo;
  int i0 = 0;
  for (; i0 + 32 <= d; i0 += 32) {
    Vec8 a[2][4];
    for (int u = 0; u < 4; ++u) {
      a[0][u] = load8(acc0 + i0 + 8 * u);
      a[1][u] = two ? load8(acc1 + i0 + 8 * u) : a[0][u];
    }
    for (int j = 0; j < tk; ++j) {
      const float w0 = p0[j], w1 = two ? p1[j] : 0.0f;
      const float* vj = vt + static_cast<size_t>(j) * d + i0;
      for (int u = 0; u < 4; ++u) {
        const Vec8 vv = load8(vj + 8 * u);
        a[0][u] += w0 * vv;
        a[1][u] += w1 * vv;
      }
    }
    for (int u = 0; u < 4; ++u) {
      store8(acc0 + i0 + 8 * u, a[0][u]);
      if (two) store8(acc1 + i0 + 8 * u, a[1][u]);
    }
  }
  for (; i0 < d; i0 += 8) {
    Vec8 a0 = load8(acc0 + i0), a1 = two ? load8(acc1 + i0) : a0;
    for (int j = 0; j < tk; ++j) {
      const Vec8 vv = load8(vt + static_cast<size_t>(j) * d + i0);
      a0 += p0[j] * vv;
      a1 += (two ? p1[j] : 0.0f) * vv;
    }
    store8(acc0 + i0, a0);
    if (two) store8(acc1 + i0, a1);
  }
}

// Any d: the plain loops (d not a multiple of 8 is rare: every model here has 64 .. 256).
void row_logits_any(const float* q, const float* kt, int tk, int d, float* out) {
  for (int j = 0; j < tk; ++j) {
    float s = 0.0f;
    const float* kj = kt + static_cast<size_t>(j) * d;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; ++i) s += q[i] * kj[i];
    out[j] = s;
  }
}
void row_pv_any(const float* p, const float* vt, int tk, int d, float* acc) {
  for (int j = 0; j < tk; ++j) {
    const float pj = p[j];
    const float* vj = vt + static_cast<size_t>(j) * d;
    for (int i = 0; i < d; ++i) acc[i] += pj * vj[i];
  }
}

// Normalizes one row's softmax state into out (and lse); a row that saw nothing gets zeros / -inf.
// A NaN sum (the row saw a NaN or +inf logit) gives NaN output and lse.
void write_row(const AttentionOutput& out, int h, int64_t t, float mx, float sum, const float* acc,
               int d) {
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  float* o = out.out.ptr<float>() + out.out.offset(h, t);
  const int64_t os = out.out.stride[2];
  for (int i = 0; i < d; ++i) o[i * os] = acc[i] * inv;
  if (!out.lse.empty())
    out.lse.ptr<float>()[out.lse.offset(h, t)] =
        sum == 0.0f ? -std::numeric_limits<float>::infinity() : mx + std::log(sum);
}

// Writes the normalized output of one tile of queries (splits == 1), or its partial softmax state
// (max, sum, unnormalized acc) over one key range into `partial` (splits > 1).
void run_item(const AttentionProblem& pb, const AttentionOutput& out, const Plan& p, int64_t item,
              const Scratch& s, float* partial) {
  const KVLayerView& c = pb.cache;
  const int64_t split = item % p.splits;
  const int64_t tile = item / p.splits;
  const int kvh = static_cast<int>(tile / p.q_tiles);
  const int64_t q0 = (tile % p.q_tiles) * p.query_tile;
  const int tq = static_cast<int>(std::min<int64_t>(p.query_tile, p.m - q0));
  const int rows = p.group * tq;  // row r = g * tq + t
  const int d = p.d;
  const float scale = pb.logit_scale();
  const float neg_inf = -std::numeric_limits<float>::infinity();

  int64_t qmin = std::numeric_limits<int64_t>::max(), qmax = std::numeric_limits<int64_t>::min();
  for (int t = 0; t < tq; ++t) {
    qmin = std::min<int64_t>(qmin, pb.q_pos[q0 + t]);
    qmax = std::max<int64_t>(qmax, pb.q_pos[q0 + t]);
  }
  for (int g = 0; g < p.group; ++g) {
    const int h = kvh * p.group + g;
    for (int t = 0; t < tq; ++t) {
      float* qr = s.q + static_cast<size_t>(g * tq + t) * d;
      if (pb.q.dtype == DType::kF32 && pb.q.stride[2] == 1) {
        const float* src = pb.q.ptr<float>() + pb.q.offset(h, q0 + t);
        for (int i = 0; i < d; ++i) qr[i] = src[i] * scale;
      } else {
        for (int i = 0; i < d; ++i) qr[i] = static_cast<float>(pb.q.load(h, q0 + t, i)) * scale;
      }
    }
  }
  std::fill(s.acc, s.acc + static_cast<size_t>(rows) * d, 0.0f);
  std::fill(s.mx, s.mx + rows, neg_inf);
  std::fill(s.sum, s.sum + rows, 0.0f);

  const int64_t head_len = c.lens[kvh];
  const int64_t per_split = p.split_keys(head_len);
  const int64_t key_begin = std::min(head_len, split * per_split);
  const int64_t len = std::min(head_len, key_begin + per_split);
  const int64_t base = c.offsets[kvh];
  const int32_t* pos = c.pos + base;
  const size_t esz = dtype_size(c.dtype);
  const void* kb = static_cast<const char*>(c.k) + base * d * esz;
  const void* vb = static_cast<const char*>(c.v) + base * d * esz;
  const int window = pb.sliding_window;
  const float cap = pb.softcap;

  for (int64_t j0 = key_begin; j0 < len; j0 += kKeyTile) {
    const int tk = static_cast<int>(std::min<int64_t>(kKeyTile, len - j0));
    int32_t pmin = std::numeric_limits<int32_t>::max(), pmax = std::numeric_limits<int32_t>::min();
    for (int j = 0; j < tk; ++j) {
      pmin = std::min(pmin, pos[j0 + j]);
      pmax = std::max(pmax, pos[j0 + j]);
    }
    if (pmin > qmax) continue;                          // every key is in every query's future
    if (window > 0 && qmin - pmax >= window) continue;  // every key slid out of every window
    // Rows j0 .. j0 + tk of a head are contiguous: f32 caches are read in place, 16-bit ones
    // converted once per tile for all G x Tq rows.
    const float* kt = c.dtype == DType::kF32 ? static_cast<const float*>(kb) + j0 * d : s.kt;
    const float* vt = c.dtype == DType::kF32 ? static_cast<const float*>(vb) + j0 * d : s.vt;
    if (c.dtype != DType::kF32) {
      to_f32(static_cast<const char*>(kb) + j0 * d * esz, c.dtype, tk * d, s.kt);
      to_f32(static_cast<const char*>(vb) + j0 * d * esz, c.dtype, tk * d, s.vt);
    }

    const bool vec = d % 8 == 0;
    auto srow = [&](int r) { return s.s + static_cast<size_t>(r) * kKeyTile; };
    auto qrow = [&](int r) { return s.q + static_cast<size_t>(r) * d; };
    auto arow = [&](int r) { return s.acc + static_cast<size_t>(r) * d; };
    // Logits, two rows at a time.
    for (int r = 0; r < rows; r += 2) {
      const bool two = r + 1 < rows;
      if (vec && two)
        rows_logits_n<true>(qrow(r), qrow(r + 1), kt, tk, d, srow(r), srow(r + 1));
      else if (vec)
        rows_logits_n<false>(qrow(r), nullptr, kt, tk, d, srow(r), nullptr);
      else
        for (int rr = r; rr < r + (two ? 2 : 1); ++rr)
          row_logits_any(qrow(rr), kt, tk, d, srow(rr));
    }
    // Masking and the online softmax, row by row; a row that sees nothing in this tile gets
    // weights 0 and keeps its state.
    for (int r = 0; r < rows; ++r) {
      const int t = r % tq;
      const int64_t qp = pb.q_pos[q0 + t];
      float* sr = srow(r);
      if (cap > 0)
        for (int j = 0; j < tk; ++j) sr[j] = cap * std::tanh(sr[j] / cap);
      // The reductions below are `omp simd` so they vectorize without -ffast-math; the lane
      // order is fixed at compile time, so results stay independent of the thread count.
      // A max reduction drops NaN (its lanes keep the other operand), so visible NaN logits (a NaN
      // in q or k) are counted beside it and turn the tile max into NaN: the row's sum, output and
      // lse then come out NaN, as in the reference, never finite and wrong (issue 13).
      float tile_max = neg_inf;
      int nan_logits = 0;
      const int32_t* kpos = pos + j0;
      const int32_t qp32 = static_cast<int32_t>(qp);
#pragma omp simd reduction(max : tile_max) reduction(+ : nan_logits)
      for (int j = 0; j < tk; ++j) {
        const int32_t kp = kpos[j];
        const bool vis = kp <= qp32 && (window == 0 || qp32 - kp < window);
        sr[j] = vis ? sr[j] : neg_inf;
        tile_max = tile_max > sr[j] ? tile_max : sr[j];
        nan_logits += sr[j] != sr[j];
      }
      if (nan_logits > 0) tile_max = std::numeric_limits<float>::quiet_NaN();
      if (tile_max == neg_inf) {  // this row sees nothing in this tile
        std::fill(sr, sr + tk, 0.0f);
        continue;
      }
      const float new_max = nan_max(s.mx[r], tile_max);
      const float correction = std::exp(s.mx[r] - new_max);  // exp(-inf) = 0 on the first tile
      s.mx[r] = new_max;
      // Masked keys (-inf) must weigh exactly 0.
      Vec8 sum8 = {};
      int j = 0;
      const Vec8 ninf = {neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf};
      const Vec8 zero8 = {};
      for (; j + 8 <= tk; j += 8) {
        const Vec8 z = load8(sr + j);
        const Vec8 e = z == ninf ? zero8 : exp_nonpositive8(z - new_max);
        store8(sr + j, e);
        sum8 += e;
      }
      float tile_sum = hsum8(sum8);
      for (; j < tk; ++j) {
        sr[j] = sr[j] == neg_inf ? 0.0f : exp_nonpositive(sr[j] - new_max);
        tile_sum += sr[j];
      }
      s.sum[r] = s.sum[r] * correction + tile_sum;
      float* ar = arow(r);
      if (correction != 1.0f)
        for (int i = 0; i < d; ++i) ar[i] *= correction;
    }
    // P V, two rows at a time.
    for (int r = 0; r < rows; r += 2) {
      const bool two = r + 1 < rows;
      if (vec && two)
        rows_pv_n<true>(srow(r), srow(r + 1), vt, tk, d, arow(r), arow(r + 1));
      else if (vec)
        rows_pv_n<false>(srow(r), nullptr, vt, tk, d, arow(r), nullptr);
      else
        for (int rr = r; rr < r + (two ? 2 : 1); ++rr) row_pv_any(srow(rr), vt, tk, d, arow(rr));
    }
  }

  if (p.splits > 1) {
    // Partial state of row r: [mx, sum, acc[d]] at (item * rows_max + r) * (d + 2).
    for (int r = 0; r < rows; ++r) {
      float* dst = partial + (static_cast<size_t>(item) * p.rows() + r) * (d + 2);
      dst[0] = s.mx[r];
      dst[1] = s.sum[r];
      std::memcpy(dst + 2, s.acc + static_cast<size_t>(r) * d, sizeof(float) * d);
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const int g = r / tq, t = r % tq;
    write_row(out, kvh * p.group + g, q0 + t, s.mx[r], s.sum[r], s.acc + static_cast<size_t>(r) * d,
              d);
  }
}

// Merges the split partial states of one (KV head, query tile) in split order.
void merge_splits(const AttentionProblem& pb, const AttentionOutput& out, const Plan& p,
                  int64_t tile, float* partial) {
  const int kvh = static_cast<int>(tile / p.q_tiles);
  const int64_t q0 = (tile % p.q_tiles) * p.query_tile;
  const int tq = static_cast<int>(std::min<int64_t>(p.query_tile, p.m - q0));
  const int d = p.d;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  (void)pb;
  for (int r = 0; r < p.group * tq; ++r) {
    float mx = neg_inf;
    for (int64_t sp = 0; sp < p.splits; ++sp)
      mx = nan_max(mx, partial[((tile * p.splits + sp) * p.rows() + r) * (d + 2)]);
    // Accumulate into split 0's slot (scaled first, so nothing is read after being overwritten).
    float* acc = partial + (tile * p.splits * p.rows() + r) * (d + 2) + 2;
    float sum = 0.0f;
    for (int64_t sp = 0; sp < p.splits; ++sp) {
      const float* src = partial + ((tile * p.splits + sp) * p.rows() + r) * (d + 2);
      // A range without a visible key (max -inf) weighs 0; so does everything if no range has one.
      const float w = (mx == neg_inf || src[0] == neg_inf) ? 0.0f : std::exp(src[0] - mx);
      sum += src[1] * w;
      if (sp == 0)
        for (int i = 0; i < d; ++i) acc[i] *= w;
      else
        for (int i = 0; i < d; ++i) acc[i] += src[2 + i] * w;
    }
    const int g = r / tq, t = r % tq;
    write_row(out, kvh * p.group + g, q0 + t, mx, sum, acc, d);
  }
}

}  // namespace

size_t attention_workspace_bytes(const AttentionProblem& pb) {
  pb.validate();
  const Plan p = make_plan(pb);
  WorkspaceSizer s;
  for (int64_t c = 0; c < p.chunks; ++c) size_chunk(s, p);
  if (p.splits > 1) s.add<float>(static_cast<size_t>(p.items) * p.rows() * (p.d + 2));
  return s.bytes();
}

void attention(const AttentionProblem& pb, const AttentionOutput& out, Workspace ws) {
  pb.validate();
  KVEVICT_CHECK(pb.cache.device == Device::kCpu, "cpu::attention got a device cache");
  out.validate_host(pb);
  const Plan p = make_plan(pb);
  if (p.items == 0) return;
  WorkspaceCarver carver(ws);
  std::vector<Scratch> scratch;
  scratch.reserve(p.chunks);
  for (int64_t c = 0; c < p.chunks; ++c) scratch.push_back(carve_chunk(carver, p));
  float* partial = p.splits > 1
                       ? carver.take<float>(static_cast<size_t>(p.items) * p.rows() * (p.d + 2))
                       : nullptr;
  // Work: query rows x visible keys x d, bounded by all rows x all keys.
  const int64_t work = static_cast<int64_t>(p.hq) * p.m * pb.cache.total_len() / p.hkv * p.d;
  detail::parallel_for_if_large(p.chunks, work, [&](int64_t c) {
    for (int64_t item = c; item < p.items; item += p.chunks)
      run_item(pb, out, p, item, scratch[c], partial);
  });
  if (p.splits > 1)
    detail::parallel_for_if_large(p.hkv * p.q_tiles, p.items * p.rows() * p.d,
                                  [&](int64_t tile) { merge_splits(pb, out, p, tile, partial); });
}

void attention(const AttentionProblem& pb, const AttentionOutput& out) {
  // The calling thread's workspace, kept between calls and grown when a call needs more: a fresh
  // zero-filled vector a call was 3.7% of a 2-thread SmolLM2 decode at 4K tokens (up to 64
  // chunks of scratch, zeroed every layer of every token; nothing reads it before writing it).
  thread_local std::unique_ptr<uint8_t[]> buffer;
  thread_local size_t capacity = 0;
  const size_t need = attention_workspace_bytes(pb) + 256;
  if (need > capacity) {
    buffer.reset(new uint8_t[need]);  // default-initialized: not zeroed
    capacity = need;
  }
  attention(pb, out, Workspace{buffer.get(), capacity});
}

}  // namespace kvevict::cpu
