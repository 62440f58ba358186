// The window forward (a, LSE) against the double reference on bf16/f16-rounded random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/kernel_variants.h"
#include "cuda/launchers.h"
#include "cuda/window_plan.h"
#include "kvevict/cuda/score.h"
#include "kvevict/score.h"
#include "score/peaked_problem.h"
#include "support/testing.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

// Restores the window kernels' variant switches (kernel_variants.h) when a test leaves, also on
// an ASSERT's early return.
struct VariantSwitches {
  ~VariantSwitches() {
    set_window_wgmma(true);
    set_window_tma(true);
    set_window_tma_wide(true);
    set_window_wide_loop(1);
  }
};

struct Case {
  int hq, hkv, d, m, w;
  int64_t n;
  DType dtype;
  uint64_t seed;
};

// Random q [hq, m, d] (normal, sd 2: a peaked softmax, the interesting regime for p near 1) and
// k, v [hkv, n, d] (sd 1), rounded to dtype, on the host (f32) and on the device (16-bit).
struct RandomQkv {
  std::vector<float> q, k, v;
  DeviceBuffer<uint16_t> dq, dk, dv;
  RandomQkv(int hq, int hkv, int d, int m, int64_t n, DType dtype, uint64_t seed)
      : q(random(static_cast<size_t>(hq) * m * d, seed, 2.0f, dtype)),
        k(random(static_cast<size_t>(hkv) * n * d, seed + 1, 1.0f, dtype)),
        v(random(static_cast<size_t>(hkv) * n * d, seed + 2, 1.0f, dtype)),
        dq(q.size()),
        dk(k.size()),
        dv(v.size()) {
    if (!ok()) return;
    dq.upload(testing::encode16(q, dtype));
    dk.upload(testing::encode16(k, dtype));
    dv.upload(testing::encode16(v, dtype));
  }
  bool ok() const { return dq.ok() && dk.ok() && dv.ok(); }

 private:
  static std::vector<float> random(size_t count, uint64_t seed, float sd, DType dtype) {
    return testing::round_to(kvevict::testing::normal_floats(count, seed, sd), dtype);
  }
};

void run_case(const Case& c, bool with_out) {
  SCOPED_TRACE(::testing::Message()
               << "Hq " << c.hq << " Hkv " << c.hkv << " d " << c.d << " n " << c.n << " w " << c.w
               << " " << dtype_name(c.dtype) << (with_out ? "" : " lse-only"));
  RandomQkv in(c.hq, c.hkv, c.d, c.m, c.n, c.dtype, c.seed);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  ScoreProblem host;
  host.q = TensorView(in.q.data(), DType::kF32, {c.hq, c.m, c.d});
  host.k = TensorView(in.k.data(), DType::kF32, {c.hkv, c.n, c.d});
  host.v = TensorView(in.v.data(), DType::kF32, {c.hkv, c.n, c.d});
  std::vector<double> all_a, all_lse;  // every one of the m rows of q
  ref::window_forward(host, scale, all_a, all_lse);
  std::vector<double> ref_a, ref_lse;  // the last w rows: the window
  for (int h = 0; h < c.hq; ++h)
    for (int t = 0; t < c.w; ++t) {
      const int64_t r = static_cast<int64_t>(h) * c.m + (c.m - c.w + t);
      ref_lse.push_back(all_lse[r]);
      ref_a.insert(ref_a.end(), all_a.begin() + r * c.d, all_a.begin() + (r + 1) * c.d);
    }

  DeviceBuffer<float> dout(static_cast<size_t>(c.hq) * c.w * c.d),
      dlse(static_cast<size_t>(c.hq) * c.w);
  const size_t ws_bytes = window_forward_workspace_bytes(c.hq, c.hkv, c.n, c.w, c.d);
  DeviceBuffer<char> ws(ws_bytes);
  ASSERT_TRUE(in.ok() && dout.ok() && dlse.ok() && ws.ok());
  dout.poison();
  dlse.poison();
  TensorView tq(in.dq.data(), c.dtype, {c.hq, c.m, c.d}, Device::kCuda);
  TensorView tk(in.dk.data(), c.dtype, {c.hkv, c.n, c.d}, Device::kCuda);
  TensorView tv(in.dv.data(), c.dtype, {c.hkv, c.n, c.d}, Device::kCuda);
  TensorView tout = with_out ? TensorView(dout.data(), DType::kF32, {c.hq, c.w, c.d}, Device::kCuda)
                             : TensorView();
  TensorView tlse(dlse.data(), DType::kF32, {c.hq, c.w}, Device::kCuda);
  window_forward(tq, tk, tv, c.w, scale, tout, tlse, {ws.data(), ws_bytes});
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());

  EXPECT_TRUE(kvevict::testing::all_close(dlse.download(), ref_lse, 1e-4, 1e-5, "lse"));
  if (with_out) {
    // P is rounded to the input dtype before P V (as FlashAttention does): a few 1e-3 relative.
    const double tol = c.dtype == DType::kBF16 ? 1.5e-2 : 3e-3;
    EXPECT_TRUE(kvevict::testing::all_close(dout.download(), ref_a, tol * 0.5, tol, "a"));
  }
  EXPECT_TRUE(dout.sentinels_intact() && dlse.sentinels_intact()) << "write outside the outputs";
}

TEST(CudaWindowForward, MatchesDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  const Case cases[] = {
      {32, 8, 128, 8, 8, 1000, DType::kBF16, 1},    // Llama-3.1-8B heads, w = 8
      {28, 4, 128, 40, 32, 2049, DType::kBF16, 2},  // Qwen2.5-7B heads, w = 32: two row blocks
      {4, 4, 64, 7, 7, 17, DType::kF16, 3},         // MHA, odd n, d = 64
      {6, 2, 256, 5, 5, 301, DType::kBF16, 4},      // d = 256, G = 3
      {1, 1, 128, 1, 1, 1, DType::kBF16, 5},        // a single token
      {7, 1, 128, 3, 3, 4099, DType::kF16, 6},      // MQA, G = 7
      {8, 2, 128, 17, 17, 17, DType::kBF16, 7},     // window = the whole prompt
      {1, 1, 128, 1, 1, 40000, DType::kBF16, 8},    // 157 splits: the merge's > 128-split path
  };
  for (const Case& c : cases) {
    run_case(c, true);
    run_case(c, false);
  }
}

// Blocks of 64 and 128 rows (w = 16 / 32 at G = 4, d 64 / 128) run the wgmma kernels on sm_90a
// builds; the same cases with them switched off run the mma.sync kernels. Both must match.
TEST(CudaWindowForward, WgmmaAndMmaSyncKernelsMatchDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  const Case cases[] = {
      {32, 8, 128, 32, 32, 3001, DType::kBF16, 21},  // Llama heads, w = 32: 128-row blocks
      {32, 8, 128, 16, 16, 1003, DType::kF16, 22},   // w = 16: 64-row blocks
      {8, 2, 64, 40, 32, 515, DType::kBF16, 23},     // d = 64, m > w
      {28, 4, 128, 32, 32, 33, DType::kF16, 24},     // G = 7: two 128-row blocks, n = w + 1
      {4, 1, 128, 16, 16, 16, DType::kBF16, 25},     // window = the whole prompt
  };
  for (bool wgmma : {true, false}) {
    SCOPED_TRACE(wgmma ? "wgmma enabled" : "mma.sync only");
    set_window_wgmma(wgmma);
    for (const Case& c : cases) {
      run_case(c, true);
      run_case(c, false);
    }
  }
  set_window_wgmma(true);
}

// The wgmma forward against the reference at 1, 2, 3 and many key tiles, partial last tiles, 64-
// and 128-row blocks (64-row blocks at d = 128 hold 3 stages: 1, 2, 3 tiles fill 1 .. all of them),
// d 64 / 128, bf16 / f16, a prefill-shaped window (every row causal).
TEST(CudaWindowForward, WgmmaForwardAtFewAndManyTilesMatchesDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  if (!window_wgmma_available()) GTEST_SKIP() << "no wgmma kernels for this device in this build";
  const Case cases[] = {
      {32, 8, 128, 32, 32, 33, DType::kBF16, 41},    // 1 key tile
      {32, 8, 128, 32, 32, 100, DType::kBF16, 42},   // 2 tiles, the last partial
      {32, 8, 128, 32, 32, 150, DType::kF16, 43},    // 3 tiles
      {32, 8, 128, 32, 32, 3001, DType::kBF16, 44},  // many tiles, splits
      {8, 2, 64, 40, 32, 515, DType::kBF16, 45},     // d = 64, m > w
      {32, 8, 128, 16, 16, 1003, DType::kF16, 46},   // 64-row blocks
      {8, 2, 128, 700, 700, 700, DType::kBF16, 47},  // prefill-shaped: the window is the prompt
      {32, 8, 128, 16, 16, 33, DType::kBF16, 48},    // 64-row blocks, 1 / 2 / 3 tiles
      {32, 8, 128, 16, 16, 100, DType::kF16, 49},   {32, 8, 128, 16, 16, 150, DType::kBF16, 50},
  };
  for (const Case& c : cases) run_case(c, true);
}

// A prefill-shaped case of the attention rows: q [hq, w, d] is the window (every row), k / v
// [hkv, n, d], a sliding window of `sliding` keys (0: none).
struct RowsCase {
  int hq, hkv, d, w;
  int64_t n, sliding;
  DType dtype;
  uint64_t seed;
};

// launch_window_attention_rows (the model's prefill attention) writes launch_window_forward's
// outputs rounded to the input dtype, as [w, Hq, d] rows, and the same lse, bit for bit: with one
// key split (sm_count 1: the wgmma forward writes the rows itself, cp.async and TMA loads), with
// many (sm_count 1000: the merge writes them), on the mma.sync kernels (d = 256, or wgmma off), a
// chunk after earlier tokens, a sliding window, with and without lse.
TEST(CudaWindowForward, AttentionRowsEqualTheForwardsOutputsInTheInputDtype) {
  KVEVICT_REQUIRE_GPU();
  const RowsCase cases[] = {
      {32, 8, 128, 300, 300, 0, DType::kBF16, 61},   // a whole prompt, Llama heads
      {8, 2, 64, 200, 500, 0, DType::kF16, 62},      // a chunk after 300 earlier tokens
      {4, 1, 256, 100, 100, 0, DType::kBF16, 63},    // d = 256: mma.sync kernels
      {28, 4, 128, 77, 1000, 64, DType::kBF16, 64},  // a sliding window, G = 7
      {8, 2, 128, 16, 16, 0, DType::kF16, 65},       // 64-row wgmma blocks, one tile
      {8, 2, 128, 12, 500, 0, DType::kBF16, 66},     // 48 rows in a 64-row block (padding rows)
  };
  const VariantSwitches restore;
  set_window_tma_wide(false);  // another summation order (WideTmaRowsMatch... checks it)
  for (const RowsCase& c : cases) {
    RandomQkv in(c.hq, c.hkv, c.d, c.w, c.n, c.dtype, c.seed);
    const size_t nq = in.q.size();
    DeviceBuffer<uint16_t> rows(nq);
    DeviceBuffer<float> out(nq), lse(static_cast<size_t>(c.hq) * c.w),
        rows_lse(static_cast<size_t>(c.hq) * c.w);
    ASSERT_TRUE(in.ok() && rows.ok() && out.ok() && lse.ok() && rows_lse.ok());
    const detail::WindowArgs a = testing::contiguous_window_args(
        c.dtype, in.dq.data(), in.dk.data(), in.dv.data(), c.hq, c.hkv, c.d, c.w, c.n,
        1.0f / std::sqrt(static_cast<float>(c.d)), c.sliding);
    for (bool wgmma : {true, false})
      for (bool tma : {false, true})
        for (int sms : {1, 1000}) {
          if (tma && (!wgmma || sms != 1)) continue;  // TMA: the wgmma direct rows only
          SCOPED_TRACE(::testing::Message() << "Hq " << c.hq << " d " << c.d << " w " << c.w
                                            << " n " << c.n << (wgmma ? " wgmma" : " mma.sync")
                                            << (tma ? " tma" : "") << " sm_count " << sms);
          set_window_wgmma(wgmma);
          set_window_tma(tma);
          const size_t ws_bytes = detail::window_forward_scratch_bytes(a, true, sms);
          DeviceBuffer<char> ws(ws_bytes);
          ASSERT_TRUE(ws.ok());
          out.poison();
          lse.poison();
          ASSERT_EQ(detail::launch_window_forward(a, out.data(), lse.data(), ws.data(), ws_bytes,
                                                  sms, nullptr),
                    cudaSuccess);
          KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
          const std::vector<float> ref_out = out.download(), ref_lse = lse.download();
          // The reference rows: out [Hq, w, d] f32 rounded to the input dtype, as [w, Hq, d].
          std::vector<float> ref_rows(nq);
          for (int h = 0; h < c.hq; ++h)
            for (int t = 0; t < c.w; ++t)
              for (int j = 0; j < c.d; ++j)
                ref_rows[(static_cast<size_t>(t) * c.hq + h) * c.d + j] =
                    ref_out[(static_cast<size_t>(h) * c.w + t) * c.d + j];
          const std::vector<uint16_t> want = testing::encode16(ref_rows, c.dtype);
          for (bool with_lse : {true, false}) {
            SCOPED_TRACE(with_lse ? "with lse" : "without lse");
            rows.poison();
            rows_lse.poison();
            const std::vector<float> lse_poison = rows_lse.download();
            ASSERT_EQ(detail::launch_window_attention_rows(a, rows.data(),
                                                           with_lse ? rows_lse.data() : nullptr,
                                                           ws.data(), ws_bytes, sms, nullptr),
                      cudaSuccess);
            KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
            const std::vector<uint16_t> got = rows.download();
            size_t differ = 0, first = 0;
            for (size_t i = 0; i < want.size(); ++i)
              if (want[i] != got[i] && differ++ == 0) first = i;
            EXPECT_EQ(differ, 0u) << "rows differ, first at " << first << " (" << got[first]
                                  << " vs " << want[first] << ")";
            const std::vector<float> got_lse = rows_lse.download();
            const std::vector<float>& lse_want = with_lse ? ref_lse : lse_poison;
            EXPECT_EQ(std::memcmp(got_lse.data(), lse_want.data(), lse_want.size() * sizeof(float)),
                      0)
                << (with_lse ? "lse differs" : "lse written though not asked for");
            EXPECT_TRUE(rows.sentinels_intact() && rows_lse.sentinels_intact());
          }
        }
  }
}

// The wide TMA forward (set_window_tma_wide: 128-key tiles, loads issued by the warp that frees a
// stage last) sums its online softmax in another order than the 64-key one, so its rows are
// compared with tolerances: against the double reference (cases without a sliding window: the
// reference has none), and against the 64-key TMA rows, lse included; its FlashAttention-3 loops
// (intra-warpgroup overlap, ping-pong) bit for bit against its plain one. Prompts of 128-row blocks
// (the variant's only blocks): whole tiles, a partial last tile, more tiles than the 3 stages (the
// refill path), a chunk after earlier tokens, a sliding window, G = 7, d = 64, f16, and head dim
// 256 (64-key tiles; against the mma.sync kernels' rows, which it replaces for long prefills).
TEST(CudaWindowForward, WideTmaRowsMatchTheReferenceAndThe64KeyRows) {
  KVEVICT_REQUIRE_GPU();
  if (!window_wgmma_available()) GTEST_SKIP() << "no wgmma kernels for this device";
  const RowsCase cases[] = {
      {32, 8, 128, 256, 256, 0, DType::kBF16, 71},    // a whole prompt, Llama heads, 2 tiles
      {8, 2, 128, 200, 1100, 0, DType::kBF16, 72},    // a chunk after 900 tokens: 9 tiles, 3 stages
      {8, 2, 64, 130, 130, 0, DType::kF16, 73},       // d = 64, a partial second tile
      {8, 2, 64, 160, 1000, 0, DType::kBF16, 78},     // d = 64: 8 tiles, refills of 4 stages
      {28, 4, 128, 301, 1000, 97, DType::kBF16, 74},  // a sliding window, G = 7
      {4, 1, 128, 512, 700, 0, DType::kF16, 75},      // 4 row blocks of one head
      {4, 1, 256, 256, 700, 0, DType::kBF16, 76},     // d = 256 (Gemma 3 heads), 2 stages, refills
      {4, 2, 256, 150, 500, 37, DType::kF16, 77},     // d = 256, a sliding window, 3 row blocks
  };
  const VariantSwitches restore;
  for (const RowsCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "Hq " << c.hq << " Hkv " << c.hkv << " d " << c.d << " w " << c.w << " n "
                 << c.n << " sliding " << c.sliding << " " << dtype_name(c.dtype));
    RandomQkv in(c.hq, c.hkv, c.d, c.w, c.n, c.dtype, c.seed);
    const size_t nq = in.q.size(), nl = static_cast<size_t>(c.hq) * c.w;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    const detail::WindowArgs a =
        testing::contiguous_window_args(c.dtype, in.dq.data(), in.dk.data(), in.dv.data(), c.hq,
                                        c.hkv, c.d, c.w, c.n, scale, c.sliding);
    const size_t ws_bytes = detail::window_forward_scratch_bytes(a, true, 1);
    DeviceBuffer<char> ws(ws_bytes);
    DeviceBuffer<uint16_t> rows(nq);
    DeviceBuffer<float> lse(nl);
    ASSERT_TRUE(in.ok() && ws.ok() && rows.ok() && lse.ok());
    // Rows [w, Hq, d] and lse [Hq, w] of one variant, decoded to floats.
    auto run = [&](bool wide, int loop, std::vector<float>* out, std::vector<float>* out_lse) {
      set_window_tma(true);
      set_window_tma_wide(wide);
      set_window_wide_loop(loop);
      rows.poison();
      lse.poison();
      ASSERT_EQ(detail::launch_window_attention_rows(a, rows.data(), lse.data(), ws.data(),
                                                     ws_bytes, 1, nullptr),
                cudaSuccess);
      KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = rows.download();
      out->resize(nq);
      for (size_t i = 0; i < nq; ++i)
        (*out)[i] = c.dtype == DType::kBF16 ? bf16_to_float(got[i]) : half_to_float(got[i]);
      *out_lse = lse.download();
      EXPECT_TRUE(rows.sentinels_intact() && lse.sentinels_intact());
    };
    std::vector<float> wide_rows, wide_lse, narrow_rows, narrow_lse;
    run(true, 0, &wide_rows, &wide_lse);
    run(false, 0, &narrow_rows, &narrow_lse);
    // FlashAttention-3's loops (set_window_wide_loop 1, 2): the plain wide loop's bits.
    for (int loop : {1, 2}) {
      std::vector<float> loop_rows, loop_lse;
      run(true, loop, &loop_rows, &loop_lse);
      EXPECT_EQ(std::memcmp(loop_rows.data(), wide_rows.data(), nq * sizeof(float)), 0)
          << "wide loop " << loop << ": rows differ from the plain wide loop's";
      EXPECT_EQ(std::memcmp(loop_lse.data(), wide_lse.data(), nl * sizeof(float)), 0)
          << "wide loop " << loop << ": lse differs from the plain wide loop's";
    }
    const double tol = c.dtype == DType::kBF16 ? 1.5e-2 : 3e-3;  // as MatchesDoubleReference
    EXPECT_TRUE(kvevict::testing::all_close(
        wide_rows, std::vector<double>(narrow_rows.begin(), narrow_rows.end()), tol * 0.5, tol,
        "wide vs 64-key rows"));
    EXPECT_TRUE(kvevict::testing::all_close(
        wide_lse, std::vector<double>(narrow_lse.begin(), narrow_lse.end()), 1e-4, 1e-5,
        "wide vs 64-key lse"));
    if (c.sliding == 0) {
      ScoreProblem host;
      host.q = TensorView(in.q.data(), DType::kF32, {c.hq, c.w, c.d});
      host.k = TensorView(in.k.data(), DType::kF32, {c.hkv, c.n, c.d});
      host.v = TensorView(in.v.data(), DType::kF32, {c.hkv, c.n, c.d});
      std::vector<double> ref_a, ref_lse;  // a [Hq, w, d], lse [Hq, w]
      ref::window_forward(host, scale, ref_a, ref_lse);
      std::vector<double> ref_rows(nq);  // as [w, Hq, d]
      for (int h = 0; h < c.hq; ++h)
        for (int t = 0; t < c.w; ++t)
          for (int j = 0; j < c.d; ++j)
            ref_rows[(static_cast<size_t>(t) * c.hq + h) * c.d + j] =
                ref_a[(static_cast<size_t>(h) * c.w + t) * c.d + j];
      EXPECT_TRUE(kvevict::testing::all_close(wide_rows, ref_rows, tol * 0.5, tol, "wide rows"));
      EXPECT_TRUE(kvevict::testing::all_close(wide_lse, ref_lse, 1e-4, 1e-5, "wide lse"));
    }
  }
}

// Issue 13: rows whose top key dominates by 100 / 1000 nats or whose queries are scaled by 1e30
// (tests/score/peaked_problem.h), through the forward the scores run: the top keys requested
// (detail::launch_window_forward with a TopRow buffer), so the top is kept apart and
// a = (v_top + rho a_{-top}) / (1 + rho), lse = z_top + log1p(rho); and, for 100 / 1000 nats, the
// plain forward cuda::window_forward (the attention outputs without top keys, v9's arithmetic:
// its exponent fma rounds z scale log2 e, so |z| ~ 1e30 is outside it). Both kernels must match
// the reference.
TEST(CudaWindowForward, DominantTopKeys) {
  KVEVICT_REQUIRE_GPU();
  uint64_t seed = 60;
  for (bool wgmma : {true, false}) {
    SCOPED_TRACE(wgmma ? "wgmma enabled" : "mma.sync only");
    set_window_wgmma(wgmma);
    for (int w : {8, 32})
      for (double gap : {100.0, 1000.0, 30.0}) {
        kvevict::testing::PeakedSpec s;
        s.hkv = 2;
        s.group = 4;
        s.w = w;
        s.d = 128;
        s.n = 1501;
        s.gap = gap;
        s.q_scale = gap == 30.0 ? 1e30 : 1;
        s.dtype = DType::kBF16;
        s.seed = ++seed;
        SCOPED_TRACE(s.str());
        kvevict::testing::PeakedProblem pp(s);
        std::vector<double> ref_a, ref_lse;
        ref::window_forward(pp.host_view(), pp.scale, ref_a, ref_lse);
        const int hq = s.hkv * s.group;
        DeviceBuffer<uint16_t> dq(pp.q.size()), dk(pp.k.size()), dv(pp.v.size());
        DeviceBuffer<float> dout(pp.q.size()), dlse(static_cast<size_t>(hq) * w);
        const size_t ws_bytes = window_forward_workspace_bytes(hq, s.hkv, s.n, w, s.d);
        DeviceBuffer<char> ws(ws_bytes);
        dq.upload(testing::encode16(pp.q, DType::kBF16));
        dk.upload(testing::encode16(pp.k, DType::kBF16));
        dv.upload(testing::encode16(pp.v, DType::kBF16));
        for (bool tops : {true, false}) {
          if (!tops && s.q_scale > 1) continue;
          SCOPED_TRACE(tops ? "top keys requested" : "plain forward");
          dout.poison();
          dlse.poison();
          if (tops) {
            const detail::WindowArgs wa = testing::contiguous_window_args(
                DType::kBF16, dq.data(), dk.data(), dv.data(), hq, s.hkv, s.d, w, s.n, pp.scale);
            const int sms = detail::current_sm_count();
            const size_t scratch_bytes = detail::window_forward_scratch_bytes(wa, true, sms);
            DeviceBuffer<char> scratch(scratch_bytes);
            DeviceBuffer<detail::TopRow> top(static_cast<size_t>(hq) * w);
            KVEVICT_ASSERT_CUDA(detail::launch_window_forward(wa, dout.data(), dlse.data(),
                                                              scratch.data(), scratch_bytes, sms,
                                                              nullptr, top.data()));
          } else {
            window_forward(TensorView(dq.data(), DType::kBF16, {hq, w, s.d}, Device::kCuda),
                           TensorView(dk.data(), DType::kBF16, {s.hkv, s.n, s.d}, Device::kCuda),
                           TensorView(dv.data(), DType::kBF16, {s.hkv, s.n, s.d}, Device::kCuda), w,
                           pp.scale,
                           TensorView(dout.data(), DType::kF32, {hq, w, s.d}, Device::kCuda),
                           TensorView(dlse.data(), DType::kF32, {hq, w}, Device::kCuda),
                           {ws.data(), ws_bytes});
          }
          KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
          EXPECT_TRUE(kvevict::testing::all_close(dlse.download(), ref_lse, 1e-4, 1e-5, "lse"));
          EXPECT_TRUE(kvevict::testing::all_close(dout.download(), ref_a, 7.5e-3, 1.5e-2, "a"));
        }
      }
  }
  set_window_wgmma(true);
}

TEST(CudaWindowForward, RejectsBadInputs) {
  KVEVICT_REQUIRE_GPU();
  DeviceBuffer<uint16_t> buf(4 * 16 * 96);
  TensorView q(buf.data(), DType::kBF16, {4, 8, 96}, Device::kCuda);
  TensorView k(buf.data(), DType::kBF16, {2, 16, 96}, Device::kCuda);
  DeviceBuffer<float> lse(32);
  TensorView tlse(lse.data(), DType::kF32, {4, 8}, Device::kCuda);
  EXPECT_THROW(window_forward(q, k, k, 8, 0.1f, TensorView(), tlse, {}), Error);  // d = 96
  TensorView k_host(buf.data(), DType::kBF16, {2, 16, 96});
  EXPECT_THROW(window_forward(q, k_host, k_host, 8, 0.1f, TensorView(), tlse, {}), Error);
}

}  // namespace
}  // namespace kvevict::cuda
