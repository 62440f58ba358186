// Decode-time eviction on the GPU (DecodeEvictor over the cuda backend, Backend::cut_segments)
// against the host DecodeEvictor: every step appends a row to every head, adds the same score to
// the rows of the same position on both sides, then both evict. The kept positions of every head
// must be equal after every step, and every kept row must carry its own K, V and accumulator.
// The GPU cut does not keep rows in order, so rows are matched by position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "cuda/cuda_testing.h"
#include "kvevict/backend.h"
#include "kvevict/cache.h"
#include "kvevict/cuda/backend.h"
#include "kvevict/decode_evict.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

struct CutCase {
  int heads;          // segments (a batch's rows x KV heads)
  int d;              // head dim (bf16 rows of 2d bytes)
  int64_t first_len;  // initial length of head 0; head h starts with first_len + 7 h rows
  int64_t budget;
  int64_t slack;
  int sink, recent;
  int steps;
  int levels;  // distinct score increments (few levels: many ties)
  uint64_t seed;
};

// A deterministic increment for (step, head, position): the same on both sides.
float increment(uint64_t seed, int step, int h, int32_t pos, int levels) {
  uint64_t x = seed ^ (static_cast<uint64_t>(step) << 40) ^ (static_cast<uint64_t>(h) << 32) ^
               static_cast<uint32_t>(pos);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<float>(x % static_cast<uint64_t>(levels)) * 0.25f;
}

void run(const CutCase& c) {
  SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " budget " << c.budget << " slack "
                                    << c.slack << " sink " << c.sink << " recent " << c.recent);
  DecodeEvictOptions opt;
  opt.budget = c.budget;
  opt.slack = c.slack;
  opt.sink = c.sink;
  opt.recent = c.recent;
  const int S = c.heads, d = c.d;
  std::vector<int64_t> cap(S), len0(S);
  for (int h = 0; h < S; ++h) {
    len0[h] = c.first_len + 7 * h;
    cap[h] = std::max<int64_t>(len0[h], c.budget + c.slack) + 1;
  }
  // Host cache, rows in position order (positions 0 .. len - 1).
  HostKVCache host(DType::kBF16, S, d, cap, /*with_score_acc=*/true);
  KVLayerView hv = host.view();
  std::mt19937_64 rng(c.seed);
  auto fill_row = [&](int64_t row) {
    auto* k = static_cast<uint16_t*>(hv.k) + row * d;
    auto* v = static_cast<uint16_t*>(hv.v) + row * d;
    for (int i = 0; i < d; ++i) {
      k[i] = static_cast<uint16_t>(rng());
      v[i] = static_cast<uint16_t>(rng());
    }
  };
  for (int h = 0; h < S; ++h) {
    for (int64_t j = 0; j < len0[h]; ++j) {
      fill_row(hv.offsets[h] + j);
      hv.pos[hv.offsets[h] + j] = static_cast<int32_t>(j);
      hv.score_acc[hv.offsets[h] + j] = 0.0f;
    }
    hv.lens[h] = len0[h];
  }
  // The same rows on the device, with device segment tables.
  const int64_t rows = hv.capacity_rows();
  DeviceBuffer<uint16_t> dk(rows * d), dv(rows * d);
  DeviceBuffer<int32_t> dpos(rows), dlen(S);
  DeviceBuffer<float> dacc(rows);
  DeviceBuffer<int64_t> doff(S + 1);
  auto upload_all = [&] {
    std::vector<uint16_t> kb(static_cast<uint16_t*>(hv.k), static_cast<uint16_t*>(hv.k) + rows * d);
    std::vector<uint16_t> vb(static_cast<uint16_t*>(hv.v), static_cast<uint16_t*>(hv.v) + rows * d);
    dk.upload(kb);
    dv.upload(vb);
    dpos.upload(std::vector<int32_t>(hv.pos, hv.pos + rows));
    dacc.upload(std::vector<float>(hv.score_acc, hv.score_acc + rows));
  };
  upload_all();
  std::vector<int64_t> off_h(hv.offsets, hv.offsets + S + 1), len_h(hv.lens, hv.lens + S);
  doff.upload(off_h);
  std::vector<int32_t> len32(len_h.begin(), len_h.end());
  dlen.upload(len32);
  KVLayerView gv;
  gv.dtype = DType::kBF16;
  gv.device = Device::kCuda;
  gv.num_kv_heads = S;
  gv.head_dim = d;
  gv.k = dk.data();
  gv.v = dv.data();
  gv.pos = dpos.data();
  gv.score_acc = dacc.data();
  gv.offsets = off_h.data();
  gv.lens = len_h.data();
  gv.device_offsets = doff.data();
  gv.device_lens = dlen.data();

  std::unique_ptr<Backend> gpu = make_cuda_backend();
  DecodeEvictor host_ev(opt), gpu_ev(opt, gpu.get());
  int64_t cuts = 0;
  for (int step = 0; step < c.steps; ++step) {
    const int32_t p = static_cast<int32_t>(c.first_len + 7 * S + step);  // a position above all
    // Append one row to every head: host in order, device at the same slot (after its rows).
    std::vector<uint16_t> kr(static_cast<size_t>(d)), vr(static_cast<size_t>(d));
    std::vector<int64_t> new_rows(S);
    for (int h = 0; h < S; ++h) {
      ASSERT_LT(hv.lens[h], hv.offsets[h + 1] - hv.offsets[h]) << "host segment full";
      const int64_t r = hv.offsets[h] + hv.lens[h];
      fill_row(r);
      hv.pos[r] = p;
      hv.score_acc[r] = 0.0f;
      hv.lens[h] += 1;
      ASSERT_EQ(len_h[h] + 1, hv.lens[h]);
      new_rows[h] = off_h[h] + len_h[h];  // the device's next free slot
      len_h[h] += 1;
    }
    // Device: the new rows' contents (same bytes as the host's), pos, acc = 0, then lengths.
    for (int h = 0; h < S; ++h) {
      const int64_t hr = hv.offsets[h] + hv.lens[h] - 1, gr = new_rows[h];
      KVEVICT_ASSERT_CUDA(cudaMemcpy(dk.data() + gr * d, static_cast<uint16_t*>(hv.k) + hr * d,
                                     2 * d, cudaMemcpyHostToDevice));
      KVEVICT_ASSERT_CUDA(cudaMemcpy(dv.data() + gr * d, static_cast<uint16_t*>(hv.v) + hr * d,
                                     2 * d, cudaMemcpyHostToDevice));
      KVEVICT_ASSERT_CUDA(cudaMemcpy(dpos.data() + gr, &p, 4, cudaMemcpyHostToDevice));
      const float zero = 0.0f;
      KVEVICT_ASSERT_CUDA(cudaMemcpy(dacc.data() + gr, &zero, 4, cudaMemcpyHostToDevice));
    }
    len32.assign(len_h.begin(), len_h.end());
    dlen.upload(len32);
    // The step's scores, by position: added on the host rows and on the device rows.
    for (int h = 0; h < S; ++h)
      for (int64_t j = 0; j < hv.lens[h]; ++j) {
        const int64_t r = hv.offsets[h] + j;
        hv.score_acc[r] += increment(c.seed, step, h, hv.pos[r], c.levels);
      }
    std::vector<int32_t> gpos = dpos.download();
    std::vector<float> gacc = dacc.download();
    for (int h = 0; h < S; ++h)
      for (int64_t j = 0; j < len_h[h]; ++j) {
        const int64_t r = off_h[h] + j;
        gacc[r] += increment(c.seed, step, h, gpos[r], c.levels);
      }
    dacc.upload(gacc);
    // Both evict.
    const int64_t he = host_ev.evict(hv);
    const int64_t ge = gpu_ev.evict(gv);
    gpu->synchronize();
    ASSERT_EQ(ge, he) << "step " << step;
    cuts += he > 0;
    // Compare kept positions and their rows.
    const auto gk = dk.download(), gvv = dv.download();
    gpos = dpos.download();
    gacc = dacc.download();
    const std::vector<int32_t> glen = dlen.download();
    for (int h = 0; h < S; ++h) {
      ASSERT_EQ(glen[h], hv.lens[h]) << "step " << step << " head " << h;
      ASSERT_EQ(len_h[h], hv.lens[h]);
      std::map<int32_t, int64_t> g_rows;  // position -> device row
      for (int64_t j = 0; j < glen[h]; ++j) g_rows[gpos[off_h[h] + j]] = off_h[h] + j;
      ASSERT_EQ(static_cast<int64_t>(g_rows.size()), glen[h]) << "duplicate positions";
      for (int64_t j = 0; j < hv.lens[h]; ++j) {
        const int64_t hr = hv.offsets[h] + j;
        const auto it = g_rows.find(hv.pos[hr]);
        ASSERT_NE(it, g_rows.end()) << "step " << step << " head " << h << ": position "
                                    << hv.pos[hr] << " kept by the host only";
        const int64_t gr = it->second;
        ASSERT_EQ(std::memcmp(gk.data() + gr * d, static_cast<uint16_t*>(hv.k) + hr * d, 2 * d), 0)
            << "keys of position " << hv.pos[hr];
        ASSERT_EQ(std::memcmp(gvv.data() + gr * d, static_cast<uint16_t*>(hv.v) + hr * d, 2 * d), 0)
            << "values of position " << hv.pos[hr];
        ASSERT_EQ(gacc[gr], hv.score_acc[hr]) << "accumulator of position " << hv.pos[hr];
      }
    }
  }
  EXPECT_GT(cuts, 0) << "no step cut anything: the case tests nothing";
  if (c.slack == 0) EXPECT_EQ(cuts, c.steps) << "slack 0 must cut every step";
  EXPECT_TRUE(dk.sentinels_intact() && dv.sentinels_intact() && dpos.sentinels_intact() &&
              dacc.sentinels_intact());
}

TEST(CudaDecodeCut, EqualsHostEvictorEveryStepFor200Steps) {
  KVEVICT_REQUIRE_GPU();
  // Slack 0: every step cuts every head (one row each); many ties (4 score levels).
  run({7, 64, 60, 40, 0, 2, 8, 200, 4, 11});
  // Slack 5, no sinks, 24 segments (a batch of rows x KV heads); nearly continuous scores.
  run({24, 128, 30, 48, 5, 0, 8, 200, 1 << 20, 12});
  // recent = budget - sink (streamingllm's decode form): the scores never decide.
  run({3, 64, 50, 20, 0, 4, 16, 60, 3, 13});
}

TEST(CudaDecodeCut, SegmentsLongerThanTheStagedRows) {
  KVEVICT_REQUIRE_GPU();
  // Segments above 12288 rows read pos and acc from global memory in every pass.
  run({2, 64, 13000, 12500, 3, 1, 32, 12, 16, 14});
}

TEST(CudaDecodeCut, RejectsBadCuts) {
  KVEVICT_REQUIRE_GPU();
  std::unique_ptr<Backend> gpu = make_cuda_backend();
  DeviceBuffer<uint16_t> k(64 * 8), v(64 * 8);
  DeviceBuffer<int32_t> pos(8), len(1);
  DeviceBuffer<float> acc(8);
  DeviceBuffer<int64_t> off(2);
  std::vector<int64_t> off_h = {0, 8}, len_h = {8};
  off.upload(off_h);
  len.upload(std::vector<int32_t>{8});
  KVLayerView c;
  c.dtype = DType::kBF16;
  c.device = Device::kCuda;
  c.num_kv_heads = 1;
  c.head_dim = 64;
  c.k = k.data();
  c.v = v.data();
  c.pos = pos.data();
  c.score_acc = acc.data();
  c.offsets = off_h.data();
  c.lens = len_h.data();
  c.device_offsets = off.data();
  c.device_lens = len.data();
  SegmentCut cut;
  cut.heads = {0};
  cut.keep = 8;  // not over budget
  EXPECT_THROW(gpu->cut_segments(c, cut), Error);
  cut.heads = {1};  // no such head
  cut.keep = 4;
  EXPECT_THROW(gpu->cut_segments(c, cut), Error);
  c.device_offsets = nullptr;  // no device table
  cut.heads = {0};
  EXPECT_THROW(gpu->cut_segments(c, cut), Error);
}

}  // namespace
}  // namespace kvevict::cuda
