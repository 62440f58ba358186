// The same LayerEvictor pipeline (score -> select -> compact -> attention after eviction) through
// the cpu and the cuda backends, for every method name the CLI accepts. Scores agree within the
// bf16/f32 tolerance; kept sets agree except near-ties (tokens whose CPU score sits at the head's
// kept threshold); GPU selection on the CPU's scores is bitwise the CPU selection; GPU compaction
// copies exactly the rows the CPU compaction copies; attention over the GPU-compacted cache
// matches the double reference over the CPU-compacted one.
#include "kvevict/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <utility>

#include "cuda/cuda_testing.h"
#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/cuda/backend.h"
#include "kvevict/evict.h"
#include "support/backend_cases.h"
#include "support/testing.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int hq, hkv, d;
  int64_t n;
};

struct Case {
  const char* method;
  Shape sh;
  double budget;
  uint64_t seed;
};

void run(const Case& c) {
  const Shape& sh = c.sh;
  SCOPED_TRACE(::testing::Message() << c.method << " Hq " << sh.hq << " Hkv " << sh.hkv << " d "
                                    << sh.d << " n " << sh.n << " budget " << c.budget);
  const MethodSpec spec = method_parse(c.method);
  const ScoreOptions so = spec.score;
  SelectOptions sel;
  sel.policy = spec.policy;
  sel.budget.value = c.budget;
  sel.sink = spec.sink;
  sel.window = so.window;
  const int64_t m = sh.n;  // every query row: enough for h2o (all queries) and the windows
  const DType bf = DType::kBF16;
  const size_t nq = static_cast<size_t>(sh.hq) * m * sh.d,
               nk = static_cast<size_t>(sh.hkv) * sh.n * sh.d;
  const int64_t out_dim = 96;  // D of the output projection (criticalkv)
  const size_t nwo = static_cast<size_t>(out_dim) * sh.hq * sh.d;
  auto q = testing::round_to(kvevict::testing::normal_floats(nq, c.seed, 2.0f), bf);
  auto k = testing::round_to(kvevict::testing::normal_floats(nk, c.seed + 1, 1.0f), bf);
  auto v = testing::round_to(kvevict::testing::normal_floats(nk, c.seed + 2, 1.0f), bf);
  auto wo = testing::round_to(kvevict::testing::normal_floats(nwo, c.seed + 3, 0.1f), bf);

  // --- CPU pipeline on host f32 tensors holding the bf16 values.
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  ScoreProblem hp;
  hp.q = TensorView(q.data(), DType::kF32, {sh.hq, m, sh.d});
  hp.k = TensorView(k.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
  hp.v = TensorView(v.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
  hp.wo = TensorView(wo.data(), DType::kF32, {out_dim, sh.hq * sh.d});
  LayerEvictor cpu_ev(*cpu, so, sel);
  const Selection cs = cpu_ev.plan(hp);
  const TensorView cpu_sv = cpu_ev.last_scores();
  const std::vector<float> cpu_scores(cpu_sv.ptr<float>(), cpu_sv.ptr<float>() + sh.hkv * sh.n);

  // --- CUDA pipeline on device bf16 tensors.
  std::unique_ptr<Backend> gpu = make_cuda_backend();
  DeviceBuffer<uint16_t> dq(nq), dk(nk), dv(nk), dwo(nwo);
  dq.upload(testing::encode16(q, bf));
  dk.upload(testing::encode16(k, bf));
  dv.upload(testing::encode16(v, bf));
  dwo.upload(testing::encode16(wo, bf));
  ScoreProblem dp;
  dp.q = TensorView(dq.data(), bf, {sh.hq, m, sh.d}, Device::kCuda);
  dp.k = TensorView(dk.data(), bf, {sh.hkv, sh.n, sh.d}, Device::kCuda);
  dp.v = TensorView(dv.data(), bf, {sh.hkv, sh.n, sh.d}, Device::kCuda);
  dp.wo = TensorView(dwo.data(), bf, {out_dim, sh.hq * sh.d}, Device::kCuda);
  LayerEvictor gpu_ev(*gpu, so, sel);
  const Selection gs = gpu_ev.plan(dp);
  std::vector<float> gpu_scores(cpu_scores.size());
  KVEVICT_ASSERT_CUDA(cudaMemcpy(gpu_scores.data(), gpu_ev.last_scores().data,
                                 sizeof(float) * gpu_scores.size(), cudaMemcpyDeviceToHost));

  // Scores: query-free scores are the same function on both; the rest within bf16 tolerance.
  const bool exact = so.method == Method::kRandom || so.method == Method::kStreamingLLM;
  std::vector<double> ref(cpu_scores.begin(), cpu_scores.end());
  double max_ref = 0;
  for (double x : ref) max_ref = std::max(max_ref, std::abs(x));
  if (exact)
    EXPECT_EQ(gpu_scores, cpu_scores) << "query-free scores differ";
  else
    EXPECT_TRUE(
        kvevict::testing::all_close(gpu_scores, ref, 2e-3 * max_ref + 1e-30, 3e-2, "scores"));

  // Kept sets: equal except near-ties at the CPU's per-head threshold.
  EXPECT_EQ(cs.warning.empty(), gs.warning.empty())
      << "cpu: '" << cs.warning << "' gpu: '" << gs.warning << "'";
  int64_t differ = 0, kept = 0;
  for (int h = 0; h < sh.hkv; ++h) {
    const std::set<int32_t> a(cs.head(h), cs.head(h) + cs.count(h));
    const std::set<int32_t> b(gs.head(h), gs.head(h) + gs.count(h));
    kept += cs.count(h);
    float thr = INFINITY;  // lowest CPU score the CPU keeps among free tokens of this head
    for (int32_t j : a)
      if (j >= sel.sink && j < sh.n - sel.window) thr = std::min(thr, cpu_scores[h * sh.n + j]);
    // adakv: a near-tie at the LAYER threshold can move one unit of budget between heads; such
    // a head keeps (or drops) its next token, which need not be near its own threshold.
    int64_t far = 0;
    const int64_t budget_shift = std::abs(cs.count(h) - gs.count(h));
    for (int32_t j = 0; j < sh.n; ++j) {
      if (a.count(j) == b.count(j)) continue;
      ++differ;
      const float s = cpu_scores[h * sh.n + j];
      if (std::abs(s - thr) > 3e-2 * std::abs(thr) + 2e-3 * max_ref && far++ >= budget_shift)
        ADD_FAILURE() << "head " << h << " token " << j << " (cpu score " << s << ", threshold "
                      << thr << ") kept by " << (a.count(j) ? "cpu" : "gpu")
                      << " only: not a near-tie";
    }
    EXPECT_LE(budget_shift, 2) << "head " << h << " budgets differ by more than a near-tie";
  }
  EXPECT_LE(differ, std::max<int64_t>(2, kept / 50)) << "too many near-tie swaps";

  // GPU selection of the CPU's own scores: bitwise the CPU selection.
  DeviceBuffer<float> dsc(cpu_scores.size());
  dsc.upload(cpu_scores);
  const Selection gs_on_cpu = gpu->select(
      TensorView(dsc.data(), DType::kF32, {sh.hkv, sh.n}, Device::kCuda), TensorView(), sel);
  if (so.method != Method::kCriticalKV) {  // criticalkv's stage 1 reads aux (tested below)
    EXPECT_EQ(gs_on_cpu.offsets, cs.offsets);
    EXPECT_EQ(gs_on_cpu.index, cs.index);
  }

  // Compaction of the full cache with the CPU's selection, 3 slack rows per head.
  const int64_t slack = 3;
  HostKVCache host_full = HostKVCache::from_dense(hp.k, hp.v, bf);
  HostKVCache host_out = cache_allocate_for(host_full.view(), cs, slack);
  cpu->compact(host_full.view(), cs, host_out.view());
  std::vector<int64_t> in_off(sh.hkv + 1), in_lens(sh.hkv, sh.n);
  for (int h = 0; h <= sh.hkv; ++h) in_off[h] = h * sh.n;
  std::vector<int32_t> pos(static_cast<size_t>(sh.hkv) * sh.n);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i % sh.n);
  DeviceBuffer<int32_t> dpos(pos.size());
  dpos.upload(pos);
  KVLayerView din;
  din.dtype = bf;
  din.device = Device::kCuda;
  din.num_kv_heads = sh.hkv;
  din.head_dim = sh.d;
  din.k = dk.data();
  din.v = dv.data();
  din.pos = dpos.data();
  din.offsets = in_off.data();
  din.lens = in_lens.data();
  const std::vector<int64_t> out_off = cache_plan_offsets(cs, slack);
  std::vector<int64_t> out_lens(sh.hkv, 0);
  const int64_t rows = out_off.back();
  DeviceBuffer<uint16_t> ok_(rows * sh.d), ov_(rows * sh.d);
  DeviceBuffer<int32_t> opos(rows);
  ok_.poison();
  ov_.poison();
  opos.poison();
  KVLayerView dout = din;
  dout.k = ok_.data();
  dout.v = ov_.data();
  dout.pos = opos.data();
  dout.offsets = out_off.data();
  dout.lens = out_lens.data();
  gpu->compact(din, cs, dout);
  const KVLayerView hv = host_out.view();
  const auto gk = ok_.download(), gv = ov_.download();
  const auto gpos = opos.download();
  int64_t bad = 0;
  for (int h = 0; h < sh.hkv; ++h) {
    EXPECT_EQ(out_lens[h], hv.lens[h]);
    for (int64_t r = out_off[h]; r < out_off[h] + cs.count(h); ++r) {
      bad += gpos[r] != hv.pos[r];
      bad += std::memcmp(gk.data() + r * sh.d, static_cast<const uint16_t*>(hv.k) + r * sh.d,
                         2 * sh.d) != 0;
      bad += std::memcmp(gv.data() + r * sh.d, static_cast<const uint16_t*>(hv.v) + r * sh.d,
                         2 * sh.d) != 0;
    }
  }
  EXPECT_EQ(bad, 0) << "compacted rows differ from the CPU compaction";
  EXPECT_TRUE(ok_.sentinels_intact() && ov_.sentinels_intact() && opos.sentinels_intact());

  // The same pipeline with the selection left on the device and the caches' segment tables on
  // the device (what the GPU runtime runs): plan -> plan_segments -> compact queue on the stream
  // with no host round trip, and write what the host-resident GPU selection's compaction writes.
  {
    const Selection dsel = gpu_ev.plan(dp, Residency::kDevice);
    ASSERT_TRUE(dsel.on_device());
    EXPECT_EQ(dsel.total(), gs.total());
    DeviceBuffer<int64_t> in_doff(sh.hkv + 1), out_doff(sh.hkv + 1);
    DeviceBuffer<int32_t> in_dlen(sh.hkv), out_dlen(sh.hkv);
    in_doff.upload(in_off);
    in_dlen.upload(std::vector<int32_t>(sh.hkv, static_cast<int32_t>(sh.n)));
    const int64_t drows = dsel.total() + sh.hkv * slack;
    DeviceBuffer<uint16_t> dk2(drows * sh.d), dv2(drows * sh.d);
    DeviceBuffer<int32_t> dpos2(drows);
    dk2.poison();
    dv2.poison();
    dpos2.poison();
    KVLayerView din2 = din;
    din2.device_offsets = in_doff.data();
    din2.device_lens = in_dlen.data();
    KVLayerView dout2;
    dout2.dtype = bf;
    dout2.device = Device::kCuda;
    dout2.num_kv_heads = sh.hkv;
    dout2.head_dim = sh.d;
    dout2.k = dk2.data();
    dout2.v = dv2.data();
    dout2.pos = dpos2.data();
    dout2.device_offsets = out_doff.data();
    dout2.device_lens = out_dlen.data();
    dout2.rows = drows;  // host table unknown until synchronized (adakv counts)
    gpu->plan_segments(dsel, slack, dout2);
    gpu->compact(din2, dsel, dout2);
    gpu->synchronize();
    // Expected: the host-resident GPU selection gs compacted on the host.
    HostKVCache want = cache_allocate_for(host_full.view(), gs, slack);
    cpu->compact(host_full.view(), gs, want.view());
    const KVLayerView wv = want.view();
    const auto got_off = out_doff.download();
    const auto got_len = out_dlen.download();
    const auto k2 = dk2.download(), v2 = dv2.download();
    const auto p2 = dpos2.download();
    int64_t bad2 = 0;
    for (int h = 0; h < sh.hkv; ++h) {
      EXPECT_EQ(got_off[h], wv.offsets[h]) << "head " << h;
      EXPECT_EQ(got_len[h], wv.lens[h]) << "head " << h;
      for (int64_t i = 0; i < wv.lens[h]; ++i) {
        const int64_t r = wv.offsets[h] + i;
        bad2 += p2[r] != wv.pos[r];
        bad2 += std::memcmp(k2.data() + r * sh.d, static_cast<const uint16_t*>(wv.k) + r * sh.d,
                            2 * sh.d) != 0;
        bad2 += std::memcmp(v2.data() + r * sh.d, static_cast<const uint16_t*>(wv.v) + r * sh.d,
                            2 * sh.d) != 0;
      }
    }
    EXPECT_EQ(got_off[sh.hkv], wv.offsets[sh.hkv]);
    EXPECT_EQ(bad2, 0) << "the device-resident pipeline wrote other rows";
    EXPECT_TRUE(dk2.sentinels_intact() && dv2.sentinels_intact() && dpos2.sentinels_intact());
  }

  // Attention after eviction: 3 new queries after the prompt, over the compacted caches.
  const int64_t mq = 3;
  auto q2 =
      kvevict::testing::normal_floats(static_cast<size_t>(sh.hq) * mq * sh.d, c.seed + 9, 2.0f);
  std::vector<int32_t> q_pos(mq);
  for (int64_t t = 0; t < mq; ++t) q_pos[t] = static_cast<int32_t>(sh.n + t);
  AttentionProblem hap;
  hap.q = TensorView(q2.data(), DType::kF32, {sh.hq, mq, sh.d});
  hap.q_pos = q_pos.data();
  hap.cache = host_out.view();
  std::vector<double> ref_out, ref_lse;
  ref::attention(hap, ref_out, &ref_lse);
  DeviceBuffer<float> dq2(q2.size()), dao(q2.size()), dlse(static_cast<size_t>(sh.hq) * mq);
  dq2.upload(q2);
  AttentionProblem dap = hap;
  dap.q = TensorView(dq2.data(), DType::kF32, {sh.hq, mq, sh.d}, Device::kCuda);
  dap.cache = dout;
  const size_t aws = gpu->attention_workspace_bytes(dap);
  auto abuf = gpu->allocate(aws);
  gpu->attention(
      dap,
      AttentionOutput{TensorView(dao.data(), DType::kF32, {sh.hq, mq, sh.d}, Device::kCuda),
                      TensorView(dlse.data(), DType::kF32, {sh.hq, mq}, Device::kCuda)},
      Workspace{abuf.get(), aws});
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(kvevict::testing::all_close(dao.download(), ref_out, 1e-4, 1e-3, "attention out"));
  {
    // A head that kept nothing has lse = -inf on both sides; compare the finite ones.
    const std::vector<float> got_lse = dlse.download();
    std::vector<float> g_fin;
    std::vector<double> r_fin;
    for (size_t i = 0; i < got_lse.size(); ++i) {
      if (std::isinf(ref_lse[i])) {
        EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse[" << i << "]";
      } else {
        g_fin.push_back(got_lse[i]);
        r_fin.push_back(ref_lse[i]);
      }
    }
    EXPECT_TRUE(kvevict::testing::all_close(g_fin, r_fin, 1e-4, 1e-4, "attention lse"));
  }
  EXPECT_TRUE(dao.sentinels_intact() && dlse.sentinels_intact());
}

TEST(CudaBackend, PipelineMatchesCpuBackend) {
  KVEVICT_REQUIRE_GPU();
  // The table every backend runs (tests/support/backend_cases.h), with its larger shapes.
  for (const auto& c : kvevict::testing::evictor_cases(/*big=*/true))
    run({c.method.c_str(), {c.shape.hq, c.shape.hkv, c.shape.d, c.shape.n}, c.budget, c.seed});
}

TEST(CudaBackend, CriticalKVTwoStageSelectionMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  // The two-stage rule on identical scores/aux through both backends' select().
  const int hkv = 3;
  const int64_t n = 2001;
  auto s = kvevict::testing::normal_floats(hkv * n, 77, 1.0f);
  auto aux = kvevict::testing::normal_floats(hkv * n, 78, 1.0f);
  SelectOptions sel;
  sel.budget.value = 0.1;
  sel.window = 32;
  std::unique_ptr<Backend> cpu = make_cpu_backend(), gpu = make_cuda_backend();
  const Selection want = cpu->select(TensorView(s.data(), DType::kF32, {hkv, n}),
                                     TensorView(aux.data(), DType::kF32, {hkv, n}), sel);
  DeviceBuffer<float> ds(s.size()), da(aux.size());
  ds.upload(s);
  da.upload(aux);
  for (Policy p : {Policy::kUniform, Policy::kAdaKV}) {
    sel.policy = p;
    const Selection w2 = cpu->select(TensorView(s.data(), DType::kF32, {hkv, n}),
                                     TensorView(aux.data(), DType::kF32, {hkv, n}), sel);
    const Selection got =
        gpu->select(TensorView(ds.data(), DType::kF32, {hkv, n}, Device::kCuda),
                    TensorView(da.data(), DType::kF32, {hkv, n}, Device::kCuda), sel);
    EXPECT_EQ(got.offsets, w2.offsets) << policy_name(p);
    EXPECT_EQ(got.index, w2.index) << policy_name(p);
  }
  (void)want;
}

TEST(CudaBackend, BudgetOfNoTokenIsRefusedLikeOnTheCpu) {
  KVEVICT_REQUIRE_GPU();
  // floor(0.01 * 17) = 0 tokens: SPEC section 1 makes that an error on both backends (a head
  // with no rows would make attention over the layer return zeros).
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::unique_ptr<Backend> gpu = make_cuda_backend();
  std::vector<float> host(2 * 17, 1.0f);
  DeviceBuffer<float> ds(host.size());
  ds.upload(host);
  SelectOptions sel;
  sel.budget.value = 0.01;
  for (Backend* be : {cpu.get(), gpu.get()}) {
    const TensorView sc = be == cpu.get()
                              ? TensorView(host.data(), DType::kF32, {2, 17})
                              : TensorView(ds.data(), DType::kF32, {2, 17}, Device::kCuda);
    try {
      be->select(sc, TensorView(), sel);
      ADD_FAILURE() << be->name() << ": a budget of no token was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("keeps 0 of 17 tokens"), std::string::npos)
          << be->name() << ": " << e.what();
    }
  }
}

// Keys in bf16 whose rows alternate scales 1, 2^66 and 2^-84 (exact in bf16): the float sums of
// squares of the scaled rows pass FLT_MAX or fall under float's normal range, so the cuda knorm
// and keydiff redo them in double; every row must score as on the cpu backend (double sums), the
// ordinary rows beside them too. d = 96 takes the one-warp-a-row kernels, 64 and 128 the
// row-group ones.
std::vector<float> keys_of_three_scales(const Shape& sh, uint64_t seed) {
  auto k = testing::round_to(
      kvevict::testing::normal_floats(static_cast<size_t>(sh.hkv) * sh.n * sh.d, seed, 1.0f),
      DType::kBF16);
  for (size_t i = 0; i < k.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i / sh.d) % sh.n;
    k[i] = std::ldexp(k[i], row % 3 == 0 ? 0 : row % 3 == 1 ? 66 : -84);
  }
  return k;
}

// Host keys [Hkv, n, d] (bf16 values) on the device as a key-only problem (v = k).
struct DeviceKeys {
  DeviceBuffer<uint16_t> buf;
  ScoreProblem problem;
  DeviceKeys(const Shape& sh, const std::vector<float>& k) : buf(k.size()) {
    buf.upload(testing::encode16(k, DType::kBF16));
    problem.k = TensorView(buf.data(), DType::kBF16, {sh.hkv, sh.n, sh.d}, Device::kCuda);
    problem.v = problem.k;
  }
};

SelectOptions half_budget() {
  SelectOptions sel;
  sel.budget.value = 0.5;
  return sel;
}

// LayerEvictor(method: a key-only score) on both backends; returns {cpu scores, gpu scores}
// (host copies).
std::pair<std::vector<float>, std::vector<float>> key_scores_on_both(
    const Shape& sh, const std::vector<float>& k, Method method = Method::kKNorm) {
  const SelectOptions sel = half_budget();
  const ScoreOptions so = ScoreOptions::defaults(method);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  ScoreProblem hp;
  hp.k = TensorView(const_cast<float*>(k.data()), DType::kF32, {sh.hkv, sh.n, sh.d});
  hp.v = hp.k;
  LayerEvictor cpu_ev(*cpu, so, sel);
  cpu_ev.plan(hp);
  const float* cs = cpu_ev.last_scores().ptr<float>();
  std::vector<float> cpu_scores(cs, cs + sh.hkv * sh.n);

  std::unique_ptr<Backend> gpu = make_cuda_backend();
  const DeviceKeys dk(sh, k);
  LayerEvictor gpu_ev(*gpu, so, sel);
  gpu_ev.plan(dk.problem);
  std::vector<float> gpu_scores(cpu_scores.size());
  EXPECT_EQ(cudaMemcpy(gpu_scores.data(), gpu_ev.last_scores().data,
                       sizeof(float) * gpu_scores.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return {cpu_scores, gpu_scores};
}

TEST(CudaBackend, KeyScoresOfHugeAndTinyKeysScoreLikeTheCpu) {
  KVEVICT_REQUIRE_GPU();
  for (const Shape sh : {Shape{2, 2, 64, 301}, Shape{2, 2, 96, 77}, Shape{2, 1, 128, 130}}) {
    SCOPED_TRACE(::testing::Message() << "d " << sh.d << " n " << sh.n);
    const std::vector<float> k = keys_of_three_scales(sh, 950);
    const auto [cpu_knorm, gpu_knorm] = key_scores_on_both(sh, k);
    for (size_t i = 0; i < cpu_knorm.size(); ++i) {
      ASSERT_TRUE(std::isfinite(gpu_knorm[i]) && gpu_knorm[i] < 0)
          << "knorm row " << i << ": " << gpu_knorm[i];
      // Float sums of <= 128 squares: within 1e-6 relative of the double sum's norm.
      EXPECT_NEAR(gpu_knorm[i], cpu_knorm[i], 1e-6 * std::abs(cpu_knorm[i])) << "knorm row " << i;
    }
    // keydiff: -cos(k_j, mean of the normalized keys), the scaled rows' directions included (in
    // float they had none: a score of 0 and no share of the mean). The mean sums in float
    // atomics: within 1e-5 of the double cosine.
    const auto [cpu_keydiff, gpu_keydiff] = key_scores_on_both(sh, k, Method::kKeyDiff);
    for (size_t i = 0; i < cpu_keydiff.size(); ++i)
      EXPECT_NEAR(gpu_keydiff[i], cpu_keydiff[i], 1e-5) << "keydiff row " << i;
  }
}

// Keys of ~2^127 (bf16 holds them): ||k|| passes FLT_MAX, so knorm's score is -inf. The cpu
// backend refuses it as it scores; the cuda backend's score() records it and the next host
// selection (LayerEvictor::plan) or synchronize() throws naming the overflow, once.
TEST(CudaBackend, ScoresPastFloat32AreRefused) {
  KVEVICT_REQUIRE_GPU();
  const Shape sh{2, 2, 64, 40};
  std::vector<float> k(static_cast<size_t>(sh.hkv) * sh.n * sh.d, 1.0f);
  for (int e = 0; e < sh.d; ++e) k[(sh.n + 7) * sh.d + e] = std::ldexp(1.0f, 127);  // head 1 row 7
  EXPECT_THROW(key_scores_on_both(sh, k), Error);  // the cpu backend refuses first

  std::unique_ptr<Backend> gpu = make_cuda_backend();
  const DeviceKeys dk(sh, k);
  const ScoreProblem& dp = dk.problem;
  const SelectOptions sel = half_budget();
  const ScoreOptions so = ScoreOptions::defaults(Method::kKNorm);
  const auto expect_refusal = [&](const std::function<void()>& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << ": an infinite score was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("infinite (element 47 of"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find("overflows float32"), std::string::npos) << what << ": " << msg;
    }
  };
  LayerEvictor ev(*gpu, so, sel);
  expect_refusal([&] { ev.plan(dp); }, "host selection");
  gpu->synchronize();  // reported once: the words were reset

  DeviceBuffer<float> scores(k.size() / sh.d);
  const TensorView sv(scores.data(), DType::kF32, {sh.hkv, sh.n}, Device::kCuda);
  auto ws = gpu->allocate(gpu->score_workspace_bytes(dp, so));
  gpu->score(dp, so, ScoreOutput{sv, TensorView()},
             Workspace{ws.get(), gpu->score_workspace_bytes(dp, so)});
  gpu->select(sv, TensorView(), sel, Residency::kDevice);  // device-resident: does not wait
  expect_refusal([&] { gpu->synchronize(); }, "synchronize");
  gpu->synchronize();
}

TEST(CudaBackend, RejectsBadInput) {
  KVEVICT_REQUIRE_GPU();
  std::unique_ptr<Backend> gpu = make_cuda_backend();
  DeviceBuffer<float> ds(2 * 100);
  const TensorView sc(ds.data(), DType::kF32, {2, 100}, Device::kCuda);
  SelectOptions sel;
  sel.budget.value = 101;  // a count above n
  EXPECT_THROW(gpu->select(sc, TensorView(), sel), Error);
  std::vector<float> host(200);
  sel.budget.value = 0.5;
  EXPECT_THROW(gpu->select(TensorView(host.data(), DType::kF32, {2, 100}), TensorView(), sel),
               Error);  // host scores
  // NaN scores are rejected, naming the head and row (kvevict::select does the same).
  std::vector<float> with_nan(200, 1.0f);
  with_nan[137] = std::nanf("");
  ds.upload(with_nan);
  try {
    gpu->select(sc, TensorView(), sel);
    ADD_FAILURE() << "NaN score accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head 1 row 37 is NaN"), std::string::npos) << e.what();
  }
  // A host problem handed to the cuda backend names the device mismatch.
  ScoreProblem p;
  std::vector<float> kv(2 * 100 * 64);
  p.q = TensorView(kv.data(), DType::kF32, {2, 100, 64});
  p.k = p.q;
  p.v = p.q;
  LayerEvictor ev(*gpu, ScoreOptions::defaults(Method::kDropKV), sel);
  EXPECT_THROW(ev.plan(p), Error);
}

}  // namespace
}  // namespace kvevict::cuda
