// Every CUDA score against the double reference on bf16-rounded random inputs, and the top-k
// sets they induce.
#include "kvevict/cuda/score.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "cuda/cuda_testing.h"
#include "cuda/kernel_variants.h"
#include "kvevict/score.h"
#include "score/peaked_problem.h"
#include "score/score_terms.h"
#include "support/testing.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int hq, hkv, d;
  int64_t n;
};

// Top-k index set of one head of a score array (ties toward the lower position).
std::set<int64_t> top_set(const double* s, int64_t n, int64_t k) {
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  return {idx.begin(), idx.begin() + k};
}

// A key that takes probability p_target of one window row: k_j = c q_t with c solved from the
// row's log-sum-exp over its other visible keys (double, on the host).
struct DominantKey {
  int q_head, t;  // the window row
  int64_t j;      // the key, visible to that row
  double p_target;
};

void plant_dominant_keys(const std::vector<DominantKey>& plants, int hq, int hkv, int m, int w,
                         int64_t n, int d, float scale, const std::vector<float>& q,
                         std::vector<float>& k, DType dtype) {
  const int group = hq / hkv;
  for (const DominantKey& dk : plants) {
    const float* qr = q.data() + (static_cast<size_t>(dk.q_head) * m + (m - w + dk.t)) * d;
    const int hk = dk.q_head / group;
    const int64_t last = n - w + dk.t;
    double mx = -1e300;
    std::vector<double> z(last + 1);
    for (int64_t i = 0; i <= last; ++i) {
      double acc = 0;
      for (int c = 0; c < d; ++c)
        acc += double(qr[c]) * k[(static_cast<size_t>(hk) * n + i) * d + c];
      z[i] = i == dk.j ? -1e300 : acc * scale;
      mx = std::max(mx, z[i]);
    }
    double sum = 0;
    for (int64_t i = 0; i <= last; ++i) sum += i == dk.j ? 0.0 : std::exp(z[i] - mx);
    const double lse_rest = mx + std::log(sum);
    double q2 = 0;
    for (int c = 0; c < d; ++c) q2 += double(qr[c]) * qr[c];
    const double c = (lse_rest + std::log(dk.p_target / (1 - dk.p_target))) / (q2 * scale);
    for (int e = 0; e < d; ++e)
      k[(static_cast<size_t>(hk) * n + dk.j) * d + e] = static_cast<float>(c * qr[e]);
  }
  k = testing::round_to(std::move(k), dtype);
}

// The scores of p on the device into ds ([Hkv][n], poisoned first, its sentinels checked), read
// back.
std::vector<float> scores_on_device(const ScoreProblem& p, const ScoreOptions& opt,
                                    DeviceBuffer<float>& ds) {
  ds.poison();
  ScoreOutput out;
  out.scores = TensorView(ds.data(), DType::kF32, {p.k.shape[0], p.k.shape[1]}, Device::kCuda);
  const size_t ws_bytes = score_workspace_bytes(p, opt);
  DeviceBuffer<char> ws(ws_bytes);
  score(p, opt, out, {ws.data(), ws_bytes});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(ds.sentinels_intact()) << "write outside the scores";
  return ds.download();
}

void run(const Shape& sh, ScoreOptions opt, DType dtype, uint64_t seed,
         const std::vector<DominantKey>& plants = {}) {
  SCOPED_TRACE(::testing::Message()
               << opt.describe() << " Hq " << sh.hq << " Hkv " << sh.hkv << " d " << sh.d << " n "
               << sh.n << " " << dtype_name(dtype) << " dominant keys " << plants.size());
  const int w = static_cast<int>(opt.queries_needed(sh.n));
  const int m = std::max(w, 1);
  const size_t nq = static_cast<size_t>(sh.hq) * m * sh.d, nk = sh.hkv * sh.n * sh.d;
  auto q = testing::round_to(kvevict::testing::normal_floats(nq, seed, 2.0f), dtype);
  auto k = testing::round_to(kvevict::testing::normal_floats(nk, seed + 1, 1.0f), dtype);
  auto v = testing::round_to(kvevict::testing::normal_floats(nk, seed + 2, 1.0f), dtype);
  if (!plants.empty())
    plant_dominant_keys(plants, sh.hq, sh.hkv, m, w, sh.n, sh.d,
                        1.0f / std::sqrt(static_cast<float>(sh.d)), q, k, dtype);
  ScoreProblem host;
  host.q = TensorView(q.data(), DType::kF32, {sh.hq, m, sh.d});
  host.k = TensorView(k.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
  host.v = TensorView(v.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
  const std::vector<double> ref = ref::score(host, opt).scores;

  DeviceBuffer<uint16_t> dq(nq), dk(nk), dv(nk);
  DeviceBuffer<float> ds(static_cast<size_t>(sh.hkv) * sh.n);
  dq.upload(testing::encode16(q, dtype));
  dk.upload(testing::encode16(k, dtype));
  dv.upload(testing::encode16(v, dtype));
  ScoreProblem p;
  p.q = TensorView(dq.data(), dtype, {sh.hq, m, sh.d}, Device::kCuda);
  p.k = TensorView(dk.data(), dtype, {sh.hkv, sh.n, sh.d}, Device::kCuda);
  p.v = TensorView(dv.data(), dtype, {sh.hkv, sh.n, sh.d}, Device::kCuda);
  const std::vector<float> got = scores_on_device(p, opt, ds);

  double max_ref = 0;
  for (double x : ref) max_ref = std::max(max_ref, std::abs(x));
  // bf16 inputs are exact in the reference; the kernel's error comes from P rounded to 16 bits in
  // the forward's P V (it moves a) and float accumulation: a few 1e-3 relative.
  const double rtol = dtype == DType::kBF16 ? 3e-2 : 1e-2;
  EXPECT_TRUE(kvevict::testing::all_close(got, ref, 1e-3 * max_ref + 1e-30, rtol, "scores"));

  // The 10% kept sets agree (>= 99% overlap; near-ties may swap).
  const int64_t keep = std::max<int64_t>(1, sh.n / 10);
  std::vector<double> gotd(got.begin(), got.end());
  for (int h = 0; h < sh.hkv; ++h) {
    const auto a = top_set(ref.data() + h * sh.n, sh.n, keep);
    const auto b = top_set(gotd.data() + h * sh.n, sh.n, keep);
    int64_t common = 0;
    for (int64_t x : a) common += b.count(x);
    EXPECT_GE(common, keep - std::max<int64_t>(1, keep / 100)) << "head " << h;
  }
}

// Through the three launches (forward, merge, pass) at odd shapes: n not a multiple of any tile,
// groups of 3 to 7, 16-row blocks ({8, 8, 64, 999}), one KV head, head dim 256.
TEST(CudaScore, WindowMethodsMatchDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  const Method methods[] = {Method::kDropKV,    Method::kObcacheV, Method::kObcacheK,
                            Method::kObcacheVK, Method::kSnapKV,   Method::kVATP};
  const Shape shapes[] = {{32, 8, 128, 1003}, {6, 2, 64, 17},     {4, 1, 256, 333},
                          {7, 1, 128, 2500},  {32, 8, 128, 4096}, {8, 8, 64, 999}};
  uint64_t seed = 100;
  for (Method m : methods)
    for (const Shape& sh : shapes) {
      ScoreOptions opt = ScoreOptions::defaults(m);
      opt.pooling = Pooling{};  // raw scores first; pooling has its own test
      run(sh, opt, DType::kBF16, seed++);
    }
}

// Short splits (set_window_min_split_tiles 1 and 2): at n = 4096 over 8 KV heads the pass runs 32
// splits of 2 tiles instead of 16 of 4; one KV head at n = 2500 gives the forward 40 one-tile
// splits, so the merge takes its path for more than 32 splits a row. With the forward at two
// blocks a SM (set_window_forward_blocks_per_sm) its splits shorten too: 32 of 2 tiles at 4096.
TEST(CudaScore, ShortSplitsMatchDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  uint64_t seed = 2600;
  for (const int forward_blocks : {0, 2})
    for (const int tiles : {1, 2}) {
      SCOPED_TRACE("splits of >= " + std::to_string(tiles) + " tiles, forward blocks a SM " +
                   std::to_string(forward_blocks));
      set_window_min_split_tiles(tiles);
      set_window_forward_blocks_per_sm(forward_blocks);
      for (Method m : {Method::kDropKV, Method::kObcacheVK, Method::kSnapKV})
        for (const Shape& sh : {Shape{32, 8, 128, 4096}, Shape{7, 1, 128, 2500}}) {
          ScoreOptions opt = ScoreOptions::defaults(m);
          opt.pooling = Pooling{};
          run(sh, opt, DType::kBF16, seed++);
        }
    }
  set_window_forward_blocks_per_sm(0);
  set_window_min_split_tiles(4);
}

// Every window term through the wgmma kernels (64- and 128-row blocks, sm_90a builds; dropkv and
// obcache_k in bf16 through the key-major pass, then through the row-major one) and, switched off,
// through the mma.sync kernels, on shapes that route to wgmma when it is on.
TEST(CudaScore, WgmmaAndMmaSyncPassesMatchDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  const Method methods[] = {Method::kDropKV, Method::kObcacheV, Method::kObcacheK,
                            Method::kObcacheVK, Method::kSnapKV};
  struct Run {
    Shape sh;
    int window;
    DType dtype;
  };
  const Run runs[] = {{{32, 8, 128, 2001}, 32, DType::kBF16},  // 128-row blocks
                      {{32, 8, 64, 777}, 16, DType::kF16},     // 64-row blocks, d = 64
                      {{28, 4, 128, 161}, 32, DType::kBF16},   // two 128-row blocks, odd n
                      {{12, 3, 64, 1000}, 16, DType::kBF16},   // 64-row blocks, d = 64
                      {{16, 2, 128, 60}, 8, DType::kBF16},     // one tile: a warpgroup idle
                      {{8, 2, 128, 130}, 32, DType::kBF16}};   // a partial third tile
  uint64_t seed = 300;
  enum class Kernels { kKeyMajor, kRowMajor, kMmaSync, kSmallRowsKeyMajor };
  for (Kernels k :
       {Kernels::kKeyMajor, Kernels::kRowMajor, Kernels::kMmaSync, Kernels::kSmallRowsKeyMajor}) {
    SCOPED_TRACE(k == Kernels::kKeyMajor   ? "wgmma, key-major pass"
                 : k == Kernels::kRowMajor ? "wgmma, row-major pass"
                 : k == Kernels::kMmaSync
                     ? "mma.sync only"
                     : "wgmma, key-major pass also for 32 rows (padded to 64)");
    set_window_wgmma(k != Kernels::kMmaSync);
    set_window_keymajor(k == Kernels::kKeyMajor || k == Kernels::kSmallRowsKeyMajor);
    set_window_keymajor_small_rows(k == Kernels::kSmallRowsKeyMajor ? 2 : 0);
    for (Method m : methods)
      for (const Run& r : runs) {
        ScoreOptions opt = ScoreOptions::defaults(m);
        opt.pooling = Pooling{};
        opt.window = r.window;
        run(r.sh, opt, r.dtype, seed++);
      }
  }
  set_window_wgmma(true);
  set_window_keymajor(true);
  set_window_keymajor_small_rows(1);
}

// The split forward in FlashAttention-3's order (set_window_split_overlap) runs every product and
// softmax step of the plain loop in its order, the top step's joins into o after the P V in
// flight: the scores must be the plain loop's bit for bit, and the reference's. 32 rows (w = 8:
// one warpgroup), 64 (w = 16) and 128 (w = 32: two warpgroups, and two one-warpgroup blocks with
// set_window_forward_row_blocks(64)) at G = 4 and 8, d 64 / 128, bf16 / f16, one tile, a partial
// last tile, splits of many tiles, planted dominant keys (strong tops held apart, later joins) and
// every window term with V.
TEST(CudaScore, SplitOverlapScoresAreThePlainLoopsBitForBit) {
  KVEVICT_REQUIRE_GPU();
  struct Run {
    Shape sh;
    int window;
    DType dtype;
    int row_blocks;  // set_window_forward_row_blocks
  };
  const Run runs[] = {
      {{32, 8, 128, 4096}, 8, DType::kBF16, 0},  {{32, 8, 128, 1003}, 16, DType::kBF16, 0},
      {{32, 8, 128, 4096}, 32, DType::kBF16, 0}, {{32, 8, 128, 4096}, 32, DType::kBF16, 64},
      {{16, 2, 128, 60}, 8, DType::kBF16, 0},    {{8, 2, 128, 130}, 32, DType::kF16, 0},
      {{12, 3, 64, 1000}, 16, DType::kBF16, 0},  {{16, 2, 64, 777}, 32, DType::kF16, 0},
      {{8, 1, 128, 30011}, 32, DType::kBF16, 0}};
  const Method methods[] = {Method::kDropKV, Method::kObcacheV, Method::kObcacheK,
                            Method::kObcacheVK};
  uint64_t seed = 2700;
  // Under compute-sanitizer (KVEVICT_SANITIZER) the shapes up to 4K keys.
  const bool sanitizer = std::getenv("KVEVICT_SANITIZER") != nullptr;
  for (const Run& r : runs)
    for (Method m : methods) {
      if (sanitizer && r.sh.n > 4096) continue;
      ScoreOptions opt = ScoreOptions::defaults(m);
      opt.pooling = Pooling{};
      opt.window = r.window;
      const Shape& sh = r.sh;
      SCOPED_TRACE(::testing::Message()
                   << opt.describe() << " Hq " << sh.hq << " Hkv " << sh.hkv << " d " << sh.d
                   << " n " << sh.n << " row blocks " << r.row_blocks);
      const int w = r.window;
      const size_t nq = static_cast<size_t>(sh.hq) * w * sh.d, nk = sh.hkv * sh.n * sh.d;
      ++seed;
      auto q = testing::round_to(kvevict::testing::normal_floats(nq, seed, 2.0f), r.dtype);
      auto k = testing::round_to(kvevict::testing::normal_floats(nk, seed + 1, 1.0f), r.dtype);
      auto v = testing::round_to(kvevict::testing::normal_floats(nk, seed + 2, 1.0f), r.dtype);
      // Rows whose top key holds most of their probability (strong tops, stashes, joins).
      std::vector<DominantKey> plants;
      for (int h = 0; h < sh.hq; h += 3)
        plants.push_back({h, (h * 5) % w, (sh.n * (h + 1)) / (sh.hq + 1) % (sh.n - w), 0.7});
      plant_dominant_keys(plants, sh.hq, sh.hkv, w, w, sh.n, sh.d,
                          1.0f / std::sqrt(static_cast<float>(sh.d)), q, k, r.dtype);
      DeviceBuffer<uint16_t> dq(nq), dk(nk), dv(nk);
      DeviceBuffer<float> ds(static_cast<size_t>(sh.hkv) * sh.n);
      dq.upload(testing::encode16(q, r.dtype));
      dk.upload(testing::encode16(k, r.dtype));
      dv.upload(testing::encode16(v, r.dtype));
      ScoreProblem p;
      p.q = TensorView(dq.data(), r.dtype, {sh.hq, w, sh.d}, Device::kCuda);
      p.k = TensorView(dk.data(), r.dtype, {sh.hkv, sh.n, sh.d}, Device::kCuda);
      p.v = TensorView(dv.data(), r.dtype, {sh.hkv, sh.n, sh.d}, Device::kCuda);
      set_window_forward_row_blocks(r.row_blocks);
      std::vector<float> got[2];
      for (int overlap : {0, 1}) {
        set_window_split_overlap(overlap == 1);
        got[overlap] = scores_on_device(p, opt, ds);
      }
      set_window_split_overlap(false);
      set_window_forward_row_blocks(0);
      ASSERT_EQ(got[0].size(), got[1].size());
      EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)))
          << "the overlapped split forward changed the scores";
      ScoreProblem host;
      host.q = TensorView(q.data(), DType::kF32, {sh.hq, w, sh.d});
      host.k = TensorView(k.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
      host.v = TensorView(v.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
      const std::vector<double> ref = ref::score(host, opt).scores;
      double max_ref = 0;
      for (double x : ref) max_ref = std::max(max_ref, std::abs(x));
      const double rtol = r.dtype == DType::kBF16 ? 3e-2 : 1e-2;
      EXPECT_TRUE(kvevict::testing::all_close(got[1], ref, 1e-3 * max_ref + 1e-30, rtol, "scores"));
    }
}

TEST(CudaScore, DominantKeysTakeTheExactPath) {
  KVEVICT_REQUIRE_GPU();
  // Keys holding 0.05 .. 0.9 of a row's probability: the pass's division-free form (p <= 2^-8)
  // must hand these tiles to the exact one (1 - p by expm1 above p = 0.7), and the obcache terms'
  // expanded sums must still match where one key dominates. (Closer to 1, the forward's 16-bit P
  // moves a by 2^-9 p, which is 2^-9 p / (1 - p) of ||a - v_j||: bf16 stops at 0.75 here.)
  const Shape sh{8, 2, 128, 3001};
  const std::vector<DominantKey> plants = {{0, 7, 100, 0.6},
                                           {1, 3, 1500, 0.72},
                                           {5, 0, 2990, 0.75},
                                           {6, 5, 2995, 0.3},
                                           {2, 6, 64, 0.05}};
  uint64_t seed = 200;
  for (Method m : {Method::kDropKV, Method::kObcacheK, Method::kObcacheVK, Method::kSnapKV}) {
    ScoreOptions opt = ScoreOptions::defaults(m);
    opt.window = 8;
    opt.pooling = Pooling{};
    run(sh, opt, DType::kBF16, seed++, plants);
  }
  ScoreOptions opt = ScoreOptions::defaults(Method::kDropKV);
  opt.window = 32;  // two row blocks (accumulated), a dominant key in each
  run({28, 4, 128, 2049}, opt, DType::kF16, seed++,
      {{0, 31, 2000, 0.9}, {27, 2, 10, 0.72}, {13, 20, 1024, 0.8}});
  // The same in bf16 through the key-major pass (one 128-row block a KV head); bf16 stops at 0.75
  // as above.
  for (Method m : {Method::kDropKV, Method::kObcacheK}) {
    ScoreOptions o = ScoreOptions::defaults(m);
    o.window = 32;
    o.pooling = Pooling{};
    run({8, 2, 128, 3001}, o, DType::kBF16, seed++,
        {{0, 31, 2900, 0.75}, {5, 2, 10, 0.72}, {3, 20, 1024, 0.6}, {6, 0, 2969, 0.3}});
  }
}

// Issue 13 on the GPU: every window row's planted top key dominates by 0 .. 1000 nats, holds
// p = 1 - 1e-k (k = 1 .. 12), or the queries are scaled by 1e30 (then with a 30-nat gap: exact
// ties at |z| ~ 1e30 are below float's resolution of the logits), through the three scoring passes
// (key-major, row-major wgmma, mma.sync) and both forwards. The top keys
// (the sink and random positions) sit in different key splits, so the forward's merge resolves them
// across splits. Tolerance as the other bf16 tests: 3e-2 relative + 1e-3 of the head's largest
// score (the forward's 16-bit P and partials, a rounded to bf16 in the pass); the kept sets must
// agree wherever the reference clears the cut by more than that, and under dropkv the dominant key
// must be kept at a budget of one token.
// A bf16 problem of 2 KV heads x 4 query heads, d = 128, whose rows' top keys stand `gap` nats
// above the others (or hold p_top); the others' logits have std `spread` nats.
kvevict::testing::PeakedSpec top_key_spec(int64_t n, double gap, double p_top, double q_scale,
                                          double spread, uint64_t seed) {
  kvevict::testing::PeakedSpec s;
  s.hkv = 2;
  s.group = 4;
  s.d = 128;
  s.n = n;
  s.gap = gap;
  s.p_top = p_top;
  s.q_scale = q_scale;
  s.spread = spread;
  s.dtype = DType::kBF16;
  s.seed = seed;
  return s;
}

// Scores of every spec (at each window of `windows`) for `methods` through the three scoring passes
// and both forwards under the shipped top-key step (kernel_variants.h mode 0), against the double
// reference: the tolerance, kept-set and dominant-key checks described above.
void expect_top_keys_match_reference(const std::vector<kvevict::testing::PeakedSpec>& specs,
                                     std::initializer_list<int> windows,
                                     std::initializer_list<Method> methods) {
  enum class Kernels { kKeyMajor, kRowMajor, kMmaSync, kSmallRowsKeyMajor };
  for (int w : windows) {
    for (kvevict::testing::PeakedSpec spec : specs) {
      spec.w = w;
      kvevict::testing::PeakedProblem pp(spec);
      const ScoreProblem host = pp.host_view();
      const int hq = spec.hkv * spec.group;
      const int64_t n = spec.n;
      DeviceBuffer<uint16_t> dq(pp.q.size()), dk(pp.k.size()), dv(pp.v.size());
      DeviceBuffer<float> ds(static_cast<size_t>(spec.hkv) * n);
      dq.upload(testing::encode16(pp.q, DType::kBF16));
      dk.upload(testing::encode16(pp.k, DType::kBF16));
      dv.upload(testing::encode16(pp.v, DType::kBF16));
      ScoreProblem p;
      p.q = TensorView(dq.data(), DType::kBF16, {hq, w, spec.d}, Device::kCuda);
      p.k = TensorView(dk.data(), DType::kBF16, {spec.hkv, n, spec.d}, Device::kCuda);
      p.v = TensorView(dv.data(), DType::kBF16, {spec.hkv, n, spec.d}, Device::kCuda);
      p.scale = pp.scale;
      for (Method m : methods) {
        ScoreOptions opt = ScoreOptions::defaults(m);
        opt.window = w;
        opt.pooling = Pooling{};
        const std::vector<double> ref = ref::score(host, opt).scores;
        for (Kernels kern : {Kernels::kKeyMajor, Kernels::kRowMajor, Kernels::kMmaSync,
                             Kernels::kSmallRowsKeyMajor}) {
          SCOPED_TRACE(spec.str() + " " + method_name(m) +
                       (kern == Kernels::kKeyMajor   ? ", key-major pass"
                        : kern == Kernels::kRowMajor ? ", row-major wgmma pass"
                        : kern == Kernels::kMmaSync
                            ? ", mma.sync kernels"
                            : ", key-major pass also for 32 rows (padded to 64)"));
          set_window_wgmma(kern != Kernels::kMmaSync);
          set_window_keymajor(kern == Kernels::kKeyMajor || kern == Kernels::kSmallRowsKeyMajor);
          set_window_keymajor_small_rows(kern == Kernels::kSmallRowsKeyMajor ? 2 : 0);
          ds.poison();
          ScoreOutput out;
          out.scores = TensorView(ds.data(), DType::kF32, {spec.hkv, n}, Device::kCuda);
          const size_t ws_bytes = score_workspace_bytes(p, opt);
          DeviceBuffer<char> ws(ws_bytes);
          score(p, opt, out, {ws.data(), ws_bytes});
          KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
          const std::vector<float> got = ds.download();
          EXPECT_TRUE(ds.sentinels_intact());
          for (int g = 0; g < spec.hkv; ++g) {
            const double* r = ref.data() + g * n;
            const float* s = got.data() + g * n;
            double top = 0;
            for (int64_t j = 0; j < n; ++j) top = std::max(top, std::abs(r[j]));
            const double atol = 1e-3 * top + 1e-30, rtol = 3e-2;
            EXPECT_TRUE(kvevict::testing::all_close(s, r, n, atol, rtol,
                                                    "scores head " + std::to_string(g)));
            for (int64_t keep : {int64_t{1}, int64_t{8}, n / 10})
              EXPECT_TRUE(kvevict::testing::kept_sets_agree(s, r, n, keep, atol, rtol,
                                                            "keep " + std::to_string(keep)));
            if (m == Method::kDropKV) {
              // The key holding the most attention of the head's rows (the sink, planted as
              // the top of half of them) has the largest removal change whenever it dominates.
              const auto [best, clear] = kvevict::testing::clear_max(r, n, 0.1);
              if (clear)
                EXPECT_TRUE(kvevict::testing::kept_mask(s, n, 1)[best])
                    << "head " << g << ": key " << best << " (ref " << r[best] << ") scored "
                    << s[best];
            }
          }
        }
      }
    }
  }
  set_window_wgmma(true);
  set_window_keymajor(true);
  set_window_keymajor_small_rows(1);
}

TEST(CudaScore, TopKeysTakeTheLeaveOneOutForm) {
  KVEVICT_REQUIRE_GPU();
  std::vector<kvevict::testing::PeakedSpec> specs;
  uint64_t seed = 1600;
  auto add = [&](double gap, double p_top, double q_scale) {
    specs.push_back(top_key_spec(1501, gap, p_top, q_scale, 1.0, ++seed));
  };
  // Under compute-sanitizer (KVEVICT_SANITIZER) the three extremes only.
  const bool sanitizer = std::getenv("KVEVICT_SANITIZER") != nullptr;
  for (double gap : {0.0, 10.0, 30.0, 100.0, 1000.0})
    if (!sanitizer || gap == 1000.0) add(gap, 0, 1);
  for (int k = 1; k <= 12; ++k)
    if (!sanitizer || k == 12) add(0, 1 - std::pow(10.0, -k), 1);
  add(30, 0, 1e30);
  // 32 rows (wgmma forward, mma.sync pass) and 128 (wgmma both).
  expect_top_keys_match_reference(specs, {8, 32},
                                  {Method::kDropKV, Method::kObcacheK, Method::kObcacheVK});
}

// w = 32's 128 rows a KV head as two 64-row one-warpgroup forward blocks
// (set_window_forward_row_blocks), two and one a SM (the merge takes 64-row partials), and the
// split forward in the overlapped order (set_window_split_overlap) on both block shapes, against
// the reference at the extremes of the top keys.
TEST(CudaScore, TopKeysIn64RowBlocksAndTheOverlappedSplitLoop) {
  KVEVICT_REQUIRE_GPU();
  std::vector<kvevict::testing::PeakedSpec> specs;
  uint64_t seed = 1650;
  // Under compute-sanitizer (KVEVICT_SANITIZER) the 1000-nat gap alone.
  const bool sanitizer = std::getenv("KVEVICT_SANITIZER") != nullptr;
  for (const auto& [gap, p_top] :
       std::vector<std::pair<double, double>>{{0.0, 0}, {30.0, 0}, {1000.0, 0}, {0, 1 - 1e-6}})
    if (!sanitizer || gap == 1000.0)
      specs.push_back(top_key_spec(1501, gap, p_top, 1.0, 1.0, ++seed));
  if (!sanitizer) specs.push_back(top_key_spec(30011, 100, 0, 1.0, 2.0, ++seed));
  struct Config {
    int row_blocks, blocks_per_sm;
    bool overlap;
  };
  for (const Config& c :
       {Config{64, 0, false}, Config{64, 1, false}, Config{0, 0, true}, Config{64, 0, true}}) {
    SCOPED_TRACE(::testing::Message() << "row blocks " << c.row_blocks << ", blocks a SM "
                                      << c.blocks_per_sm << ", overlapped loop " << c.overlap);
    set_window_forward_row_blocks(c.row_blocks);
    set_window_forward_blocks_per_sm(c.blocks_per_sm);
    set_window_split_overlap(c.overlap);
    expect_top_keys_match_reference(specs, {32},
                                    {Method::kDropKV, Method::kObcacheK, Method::kObcacheVK});
  }
  set_window_split_overlap(false);
  set_window_forward_blocks_per_sm(0);
  set_window_forward_row_blocks(0);
}

// Long splits: 8 tiles a split (n = 30,011 over 59 splits), the other keys' logits 2 nats apart
// (as the benchmark's), and half of the rows' top keys deep inside a split, so that records,
// strong tops held apart, tops replaced by stronger ones (the former top added back from its
// stash) and joins happen after many tiles, not only in a split's first ones (the test above has
// 4-tile splits).
TEST(CudaScore, TopKeysDeepInLongSplits) {
  KVEVICT_REQUIRE_GPU();
  std::vector<kvevict::testing::PeakedSpec> specs;
  uint64_t seed = 1700;
  const bool sanitizer = std::getenv("KVEVICT_SANITIZER") != nullptr;
  for (const auto& [gap, p_top] : std::vector<std::pair<double, double>>{
           {0.5, 0}, {10, 0}, {100, 0}, {0, 0.6}, {0, 1 - 1e-9}}) {
    if (sanitizer && gap != 100) continue;
    specs.push_back(top_key_spec(30011, gap, p_top, 1.0, 2.0, ++seed));
  }
  expect_top_keys_match_reference(specs, {8, 32}, {Method::kDropKV, Method::kObcacheVK});
}

TEST(CudaScore, PoolingWindowsAndHalf) {
  KVEVICT_REQUIRE_GPU();
  ScoreOptions opt = ScoreOptions::defaults(Method::kObcacheVK);  // w = 16, max:7
  run({8, 2, 128, 777}, opt, DType::kBF16, 7);
  opt = ScoreOptions::defaults(Method::kSnapKV);
  opt.pooling = Pooling{PoolKind::kAvg, 5};
  run({8, 2, 128, 501}, opt, DType::kF16, 8);
  opt = ScoreOptions::defaults(Method::kDropKV);
  opt.window = 32;
  run({28, 4, 128, 1201}, opt, DType::kF16, 9);
  opt.window = 1;
  run({4, 2, 64, 1}, opt, DType::kBF16, 10);
}

TEST(CudaScore, AllQueriesAndLastQueryAggregations) {
  KVEVICT_REQUIRE_GPU();
  ScoreOptions h2o = ScoreOptions::defaults(Method::kH2O);
  run({4, 2, 64, 150}, h2o, DType::kBF16, 11);
  h2o.h2o_normalize = true;
  run({4, 2, 64, 150}, h2o, DType::kBF16, 12);
  run({8, 2, 128, 999}, ScoreOptions::defaults(Method::kTOVA), DType::kBF16, 13);
  ScoreOptions obk = ScoreOptions::defaults(Method::kObcacheK);
  obk.aggregate = Aggregate::kLastQuery;
  obk.window = 0;
  obk.pooling = Pooling{};
  run({8, 4, 128, 300}, obk, DType::kBF16, 14);
}

TEST(CudaScore, H2OColumnSumsAtOddSizes) {
  KVEVICT_REQUIRE_GPU();
  ScoreOptions h2o = ScoreOptions::defaults(Method::kH2O);
  run({8, 2, 128, 1}, h2o, DType::kBF16, 40);
  run({8, 2, 128, 17}, h2o, DType::kBF16, 41);
  run({8, 2, 128, 1001}, h2o, DType::kBF16, 42);
  run({4, 1, 64, 2049}, h2o, DType::kF16, 43);
  run({4, 2, 256, 333}, h2o, DType::kBF16, 44);
  h2o.h2o_normalize = true;
  run({6, 3, 128, 1001}, h2o, DType::kBF16, 45);
  h2o.pooling = Pooling{PoolKind::kMax, 5};
  run({4, 2, 64, 129}, h2o, DType::kBF16, 46);
}

TEST(CudaScore, VATPWithAllQueriesKeepsTheWindowPass) {
  KVEVICT_REQUIRE_GPU();
  // vatp multiplies by ||v||_1, a side output of the window pass; the h2o column-sum kernel does
  // not write it, so vatp over all queries must not take that path.
  ScoreOptions vatp = ScoreOptions::defaults(Method::kVATP);
  vatp.aggregate = Aggregate::kAllQueries;
  vatp.window = 0;
  run({4, 2, 64, 201}, vatp, DType::kBF16, 47);
}

TEST(CudaScore, H2OIsBitwiseReproducible) {
  KVEVICT_REQUIRE_GPU();
  // Key-stationary sums in a fixed order: two runs give the same bits (no float atomics).
  const int hq = 8, hkv = 2, d = 128;
  const int64_t n = 3001;
  auto q = testing::round_to(kvevict::testing::normal_floats(size_t(hq) * n * d, 90, 2.0f),
                             DType::kBF16);
  auto k = testing::round_to(kvevict::testing::normal_floats(size_t(hkv) * n * d, 91, 1.0f),
                             DType::kBF16);
  DeviceBuffer<uint16_t> dq(q.size()), dk(k.size());
  dq.upload(testing::encode16(q, DType::kBF16));
  dk.upload(testing::encode16(k, DType::kBF16));
  ScoreProblem p;
  p.q = TensorView(dq.data(), DType::kBF16, {hq, n, d}, Device::kCuda);
  p.k = TensorView(dk.data(), DType::kBF16, {hkv, n, d}, Device::kCuda);
  p.v = p.k;
  const ScoreOptions opt = ScoreOptions::defaults(Method::kH2O);
  const size_t ws_bytes = score_workspace_bytes(p, opt);
  DeviceBuffer<char> ws(ws_bytes);
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    DeviceBuffer<float> ds(size_t(hkv) * n);
    ScoreOutput out;
    out.scores = TensorView(ds.data(), DType::kF32, {hkv, n}, Device::kCuda);
    score(p, opt, out, {ws.data(), ws_bytes});
    KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = ds.download();
    if (rep == 0)
      first = got;
    else
      EXPECT_TRUE(got == first) << "run " << rep << " differs";
  }
}

TEST(CudaScore, QueryFreeScoresAreTheCpuStream) {
  KVEVICT_REQUIRE_GPU();
  // streamingllm (position) and random (splitmix64 counter stream): bitwise the reference.
  for (Method m : {Method::kStreamingLLM, Method::kRandom}) {
    ScoreOptions opt = ScoreOptions::defaults(m);
    opt.seed = 1234567;
    const int hkv = 3;
    const int64_t n = 1000003;
    DeviceBuffer<uint16_t> dk(size_t(hkv) * 8);
    ScoreProblem p;
    p.k = TensorView(dk.data(), DType::kBF16, {hkv, n, 8}, Device::kCuda);
    p.k.stride = {0, 0, 1, 0};  // never read: a zero-stride view stands for the [Hkv, n, d] keys
    p.v = p.k;
    DeviceBuffer<float> ds(size_t(hkv) * n);
    ds.poison();
    ScoreOutput out;
    out.scores = TensorView(ds.data(), DType::kF32, {hkv, n}, Device::kCuda);
    score(p, opt, out, {});
    KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = ds.download();
    int64_t bad = 0;
    for (int h = 0; h < hkv; ++h)
      for (int64_t j = 0; j < n; ++j) {
        const float want = m == Method::kRandom ? terms::random_uniform<float>(opt.seed, h, j)
                                                : static_cast<float>(j);
        bad += got[h * n + j] != want;
      }
    EXPECT_EQ(bad, 0) << method_name(m);
    EXPECT_TRUE(ds.sentinels_intact());
  }
}

TEST(CudaScore, KeyOnlyScores) {
  KVEVICT_REQUIRE_GPU();
  run({8, 2, 128, 1001}, ScoreOptions::defaults(Method::kKNorm), DType::kBF16, 15);
  // knorm's row-group kernel at each head dim it takes (4 steps of 256 / d rows a warp: n and
  // Hkv n not multiples of a warp's rows), f16, and the one-warp-a-row kernel at d = 96.
  run({4, 4, 64, 1003}, ScoreOptions::defaults(Method::kKNorm), DType::kBF16, 17);
  run({4, 1, 256, 37}, ScoreOptions::defaults(Method::kKNorm), DType::kBF16, 18);
  run({2, 1, 128, 1}, ScoreOptions::defaults(Method::kKNorm), DType::kF16, 19);
  run({6, 3, 128, 2050}, ScoreOptions::defaults(Method::kKNorm), DType::kF16, 20);
  run({4, 2, 96, 301}, ScoreOptions::defaults(Method::kKNorm), DType::kBF16, 21);
  run({8, 3, 64, 4097}, ScoreOptions::defaults(Method::kKeyDiff), DType::kBF16, 16);
  run({4, 2, 128, 1001}, ScoreOptions::defaults(Method::kKeyDiff), DType::kF16, 22);
  run({4, 1, 256, 37}, ScoreOptions::defaults(Method::kKeyDiff), DType::kBF16, 23);
  run({4, 2, 96, 301}, ScoreOptions::defaults(Method::kKeyDiff), DType::kBF16, 24);
}

TEST(CudaScore, RejectsUnsupportedMethodAndHostTensors) {
  KVEVICT_REQUIRE_GPU();
  ScoreProblem p;
  std::vector<uint16_t> host(2 * 8 * 64);
  p.q = TensorView(host.data(), DType::kBF16, {2, 8, 64});
  p.k = TensorView(host.data(), DType::kBF16, {2, 8, 64});
  p.v = p.k;
  ScoreOptions unknown = ScoreOptions::defaults(Method::kDropKV);
  unknown.method = static_cast<Method>(99);  // a corrupt method code
  EXPECT_THROW(score_workspace_bytes(p, unknown), Error);
  std::vector<float> s(16);
  ScoreOutput out;
  out.scores = TensorView(s.data(), DType::kF32, {2, 8});
  EXPECT_THROW(score(p, ScoreOptions::defaults(Method::kDropKV), out, {}), Error);
}

}  // namespace
}  // namespace kvevict::cuda
