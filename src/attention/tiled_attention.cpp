// The CPU float path of attention over a (compacted) cache: online softmax over key tiles
// (FlashAttention's recurrence on the CPU).
//
// One work item = one KV head x one tile of queries, with all G query heads of the group as rows,
// so a key tile is converted / transposed once and used by the whole group (decode with m = 1 has
// G rows per item). Keys are transposed into [d, Tk] so the logit loop runs along keys and the
// P.V loop along d: both inner loops vectorize without reassociating a reduction. Each query's
// arithmetic depends only on its own item, so results are identical for any thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kvevict/attention.h"
#include "kvevict/error.h"
#include "kvevict/parallel.h"

namespace kvevict::cpu {
namespace {

constexpr int kKeyTile = 64;     // keys per tile: a [d, 64] f32 tile of keys is 32 KiB at d=128
constexpr int kMaxRows = 256;    // G x query-tile rows of one item
constexpr int kMaxQueryTile = 16;
constexpr int64_t kMaxChunks = 64;  // workspace slices; items are dealt round-robin to chunks

struct Plan {
  int hq, hkv, group, d;
  int64_t m;
  int query_tile;   // queries per item
  int64_t q_tiles;  // per KV head
  int64_t items, chunks;
  int rows() const { return group * query_tile; }
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
  p.items = p.hkv * p.q_tiles;
  p.chunks = std::min(p.items, kMaxChunks);
  return p;
}

// Per-chunk scratch: sizes in floats.
struct Scratch {
  float* kt;   // [d, Tk] transposed key tile
  float* vt;   // [Tk, d] value tile in f32
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

// Loads rows [j0, j0 + tk) of a [*, d] f32/f16/bf16 row block as f32.
template <class Store>
void load_rows(const void* base, DType t, int64_t j0, int tk, int d, Store store) {
  for (int j = 0; j < tk; ++j) {
    const int64_t r = (j0 + j) * d;
    switch (t) {
      case DType::kF32: {
        const float* src = static_cast<const float*>(base) + r;
        for (int i = 0; i < d; ++i) store(j, i, src[i]);
        break;
      }
      case DType::kF16: {
        const uint16_t* src = static_cast<const uint16_t*>(base) + r;
        for (int i = 0; i < d; ++i) store(j, i, half_to_float(src[i]));
        break;
      }
      default: {
        const uint16_t* src = static_cast<const uint16_t*>(base) + r;
        for (int i = 0; i < d; ++i) store(j, i, bf16_to_float(src[i]));
        break;
      }
    }
  }
}

void run_item(const AttentionProblem& pb, const AttentionOutput& out, const Plan& p, int64_t item,
              const Scratch& s) {
  const KVLayerView& c = pb.cache;
  const int kvh = static_cast<int>(item / p.q_tiles);
  const int64_t q0 = (item % p.q_tiles) * p.query_tile;
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

  const int64_t len = c.lens[kvh];
  const int64_t base = c.offsets[kvh];
  const int32_t* pos = c.pos + base;
  const size_t esz = dtype_size(c.dtype);
  const void* kb = static_cast<const char*>(c.k) + base * d * esz;
  const void* vb = static_cast<const char*>(c.v) + base * d * esz;
  const int window = pb.sliding_window;
  const float cap = pb.softcap;

  for (int64_t j0 = 0; j0 < len; j0 += kKeyTile) {
    const int tk = static_cast<int>(std::min<int64_t>(kKeyTile, len - j0));
    int32_t pmin = std::numeric_limits<int32_t>::max(), pmax = std::numeric_limits<int32_t>::min();
    for (int j = 0; j < tk; ++j) {
      pmin = std::min(pmin, pos[j0 + j]);
      pmax = std::max(pmax, pos[j0 + j]);
    }
    if (pmin > qmax) continue;                           // every key is in every query's future
    if (window > 0 && qmin - pmax >= window) continue;   // every key slid out of every window
    float* kt = s.kt;
    load_rows(kb, c.dtype, j0, tk, d, [kt](int j, int i, float x) { kt[i * kKeyTile + j] = x; });
    float* vt = s.vt;
    load_rows(vb, c.dtype, j0, tk, d, [vt, d](int j, int i, float x) { vt[j * d + i] = x; });

    for (int r = 0; r < rows; ++r) {
      const int t = r % tq;
      const int64_t qp = pb.q_pos[q0 + t];
      float* sr = s.s + static_cast<size_t>(r) * kKeyTile;
      const float* qr = s.q + static_cast<size_t>(r) * d;
      for (int j = 0; j < tk; ++j) sr[j] = 0.0f;
      for (int i = 0; i < d; ++i) {
        const float qi = qr[i];
        const float* ki = kt + i * kKeyTile;
        for (int j = 0; j < tk; ++j) sr[j] += qi * ki[j];
      }
      if (cap > 0)
        for (int j = 0; j < tk; ++j) sr[j] = cap * std::tanh(sr[j] / cap);
      float tile_max = neg_inf;
      for (int j = 0; j < tk; ++j) {
        const int64_t kp = pos[j0 + j];
        const bool vis = kp <= qp && (window == 0 || qp - kp < window);
        if (!vis) sr[j] = neg_inf;
        tile_max = std::max(tile_max, sr[j]);
      }
      if (tile_max == neg_inf) continue;  // this row sees nothing in this tile
      const float new_max = std::max(s.mx[r], tile_max);
      const float correction = std::exp(s.mx[r] - new_max);  // exp(-inf) = 0 on the first tile
      s.mx[r] = new_max;
      float tile_sum = 0.0f;
      for (int j = 0; j < tk; ++j) {
        sr[j] = std::exp(sr[j] - new_max);
        tile_sum += sr[j];
      }
      s.sum[r] = s.sum[r] * correction + tile_sum;
      float* ar = s.acc + static_cast<size_t>(r) * d;
      if (correction != 1.0f)
        for (int i = 0; i < d; ++i) ar[i] *= correction;
      for (int j = 0; j < tk; ++j) {
        const float pj = sr[j];
        if (pj == 0.0f) continue;
        const float* vj = vt + static_cast<size_t>(j) * d;
        for (int i = 0; i < d; ++i) ar[i] += pj * vj[i];
      }
    }
  }

  for (int r = 0; r < rows; ++r) {
    const int g = r / tq, t = r % tq;
    const int h = kvh * p.group + g;
    const float inv = s.sum[r] > 0 ? 1.0f / s.sum[r] : 0.0f;
    const float* ar = s.acc + static_cast<size_t>(r) * d;
    float* o = out.out.ptr<float>() + out.out.offset(h, q0 + t);
    const int64_t os = out.out.stride[2];
    for (int i = 0; i < d; ++i) o[i * os] = ar[i] * inv;
    if (!out.lse.empty())
      out.lse.ptr<float>()[out.lse.offset(h, q0 + t)] =
          s.sum[r] > 0 ? s.mx[r] + std::log(s.sum[r]) : neg_inf;
  }
}

}  // namespace

size_t attention_workspace_bytes(const AttentionProblem& pb) {
  pb.validate();
  const Plan p = make_plan(pb);
  WorkspaceSizer s;
  for (int64_t c = 0; c < p.chunks; ++c) size_chunk(s, p);
  return s.bytes();
}

void attention(const AttentionProblem& pb, const AttentionOutput& out, Workspace ws) {
  pb.validate();
  KVEVICT_CHECK(pb.cache.device == Device::kCpu, "cpu::attention got a device cache");
  const Plan p = make_plan(pb);
  check_shape(out.out, "attention out", {p.hq, p.m, p.d});
  KVEVICT_CHECK(out.out.dtype == DType::kF32, "attention out dtype ", dtype_name(out.out.dtype),
                " is not supported; expected f32");
  if (!out.lse.empty()) {
    check_shape(out.lse, "attention lse", {p.hq, p.m});
    KVEVICT_CHECK(out.lse.dtype == DType::kF32, "attention lse dtype ",
                  dtype_name(out.lse.dtype), " is not supported; expected f32");
  }
  if (p.items == 0) return;
  WorkspaceCarver carver(ws);
  std::vector<Scratch> scratch;
  scratch.reserve(p.chunks);
  for (int64_t c = 0; c < p.chunks; ++c) scratch.push_back(carve_chunk(carver, p));
  parallel_for(p.chunks, [&](int64_t c) {
    for (int64_t item = c; item < p.items; item += p.chunks) run_item(pb, out, p, item, scratch[c]);
  });
}

void attention(const AttentionProblem& pb, const AttentionOutput& out) {
  std::vector<uint8_t> ws(attention_workspace_bytes(pb) + 256);
  attention(pb, out, Workspace{ws.data(), ws.size()});
}

}  // namespace kvevict::cpu
