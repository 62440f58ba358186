// A NaN or an Inf in one element of q, k or v (one head) on the CUDA scoring path (issue 13).
// The CPU backends refuse such inputs (ScoreProblem::validate names the tensor); the CUDA backend
// does not scan its inputs (that would be one more pass over K and V), so its kernels must carry
// the value into the scores: the NaN check on the scores (kvevict.score(check_finite=True), a
// device select's status word) then sees it, and a caller who leaves the check to itself gets NaN,
// never a finite, wrong score. Checked for every score kind that reads q, k or v, on each forward
// and pass kernel (wgmma, key-major, mma.sync; one and several row blocks):
//   - the other KV head (tova: none, its score is a mean over all heads) equals the double
//     reference of the clean inputs;
//   - NaN: every score that reads the element is NaN: all keys of the poisoned KV head where the
//     element enters the logits or a (a NaN row has no softmax), the poisoned key alone where only
//     that key's value or key row enters (obcache_v, vatp: ||v||; knorm: ||k||), and the scores
//     that do not read it equal the clean reference;
//   - +Inf: where it enters the logits (q, k) the same scores are NaN (a +inf logit leaves no
//     softmax: the forward writes the row as NaN; the poisoned dimension of the head's queries is
//     made positive, so the Inf in k gives every row +inf, not -inf, which is p = 0); in v, the
//     key's own score is not finite (kKey), and the head holds a score that is not (kAll).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/kernel_variants.h"
#include "kvevict/cuda/score.h"
#include "kvevict/score.h"
#include "support/testing.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

enum class Input { kQ, kK, kV };
const char* input_name(Input t) {
  return t == Input::kQ ? "q" : t == Input::kK ? "k" : "v";
}

// Which scores of the poisoned KV head read the element.
enum class Reads { kNone, kKey, kAll };

Reads reads(Method m, Input t) {
  const bool logits = m == Method::kDropKV || m == Method::kObcacheV || m == Method::kObcacheK ||
                      m == Method::kObcacheVK || m == Method::kSnapKV || m == Method::kH2O ||
                      m == Method::kTOVA || m == Method::kVATP;
  switch (t) {
    case Input::kQ: return logits ? Reads::kAll : Reads::kNone;
    case Input::kK:
      if (m == Method::kKNorm) return Reads::kKey;
      return logits || m == Method::kKeyDiff ? Reads::kAll : Reads::kNone;
    case Input::kV:
      if (m == Method::kDropKV || m == Method::kObcacheK || m == Method::kObcacheVK)
        return Reads::kAll;  // through a
      return m == Method::kObcacheV || m == Method::kVATP ? Reads::kKey : Reads::kNone;
  }
  return Reads::kNone;
}

struct Poison {
  Input tensor;
  float value;
};

constexpr int kHq = 8, kHkv = 2, kD = 128;
constexpr int kPoisonKvHead = 1;
constexpr int64_t kPoisonKey = 5;
constexpr int kPoisonDim = 3;

std::vector<Poison> poisons() {
  std::vector<Poison> out;
  for (Input t : {Input::kQ, Input::kK, Input::kV})
    for (float x :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
      out.push_back({t, x});
  return out;
}

// Scores the clean inputs on the host (double reference, once) and each poisoned copy on the
// device, and checks the contract above.
void run(ScoreOptions opt, int64_t n, DType dtype, uint64_t seed,
         const std::vector<Poison>& cases = poisons()) {
  const int w = static_cast<int>(opt.queries_needed(n));
  const int m = std::max(w, 1);
  SCOPED_TRACE(::testing::Message() << opt.describe() << " n " << n << " " << dtype_name(dtype));
  const size_t nq = static_cast<size_t>(kHq) * m * kD, nk = static_cast<size_t>(kHkv) * n * kD;
  auto q = testing::round_to(kvevict::testing::normal_floats(nq, seed, 2.0f), dtype);
  auto k0 = testing::round_to(kvevict::testing::normal_floats(nk, seed + 1, 1.0f), dtype);
  auto v0 = testing::round_to(kvevict::testing::normal_floats(nk, seed + 2, 1.0f), dtype);
  const int group = kHq / kHkv;
  for (int hh = 0; hh < group; ++hh)
    for (int t = 0; t < m; ++t) {
      float& x = q[(static_cast<size_t>(kPoisonKvHead * group + hh) * m + t) * kD + kPoisonDim];
      x = std::abs(x) + 0.5f;  // > 0 (rounded to the dtype again below)
    }
  auto q0 = testing::round_to(std::move(q), dtype);  // (TensorView takes void*)
  ScoreProblem host;
  host.q = TensorView(q0.data(), DType::kF32, {kHq, m, kD});
  host.k = TensorView(k0.data(), DType::kF32, {kHkv, n, kD});
  host.v = TensorView(v0.data(), DType::kF32, {kHkv, n, kD});
  const std::vector<double> ref = ref::score(host, opt).scores;  // clean inputs
  double max_ref = 0;
  for (double x : ref) max_ref = std::max(max_ref, std::abs(x));
  const double atol = 1e-3 * max_ref + 1e-30, rtol = dtype == DType::kBF16 ? 3e-2 : 1e-2;

  DeviceBuffer<uint16_t> dq(nq), dk(nk), dv(nk);
  DeviceBuffer<float> ds(static_cast<size_t>(kHkv) * n);
  ScoreProblem p;
  p.q = TensorView(dq.data(), dtype, {kHq, m, kD}, Device::kCuda);
  p.k = TensorView(dk.data(), dtype, {kHkv, n, kD}, Device::kCuda);
  p.v = TensorView(dv.data(), dtype, {kHkv, n, kD}, Device::kCuda);
  ScoreOutput out;
  out.scores = TensorView(ds.data(), DType::kF32, {kHkv, n}, Device::kCuda);
  const size_t ws_bytes = score_workspace_bytes(p, opt);
  DeviceBuffer<char> ws(ws_bytes);

  // The element: query head 4 G + 1's last query row (every aggregation reads it), or key row
  // kPoisonKey of KV head kPoisonKvHead (every window row sees it).
  const size_t kv_at = (static_cast<size_t>(kPoisonKvHead) * n + kPoisonKey) * kD + kPoisonDim;
  const size_t q_at =
      (static_cast<size_t>(kPoisonKvHead * group + 1) * m + (m - 1)) * kD + kPoisonDim;
  for (const Poison& poison : cases) {
    SCOPED_TRACE(::testing::Message() << input_name(poison.tensor) << " = " << poison.value);
    std::vector<float> q = q0, k = k0, v = v0;
    (poison.tensor == Input::kQ   ? q[q_at]
     : poison.tensor == Input::kK ? k[kv_at]
                                  : v[kv_at]) = poison.value;
    dq.upload(testing::encode16(q, dtype));
    dk.upload(testing::encode16(k, dtype));
    dv.upload(testing::encode16(v, dtype));
    ds.upload(std::vector<float>(ds.size(), 1234.5f));  // finite: a score not written shows
    score(p, opt, out, {ws.data(), ws_bytes});
    KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = ds.download();
    EXPECT_TRUE(ds.sentinels_intact()) << "write outside the scores";

    const Reads r = reads(opt.method, poison.tensor);
    const bool nan = std::isnan(poison.value);
    // Keys of the poisoned head that read the element (pooling spreads a key's score over its
    // window of neighbours).
    const int64_t radius = opt.pooling.kind == PoolKind::kNone ? 0 : opt.pooling.kernel / 2;
    auto reads_key = [&](int64_t j) {
      return r == Reads::kAll || (r == Reads::kKey && std::abs(j - kPoisonKey) <= radius);
    };
    const bool want_nan = nan || (poison.tensor != Input::kV && r == Reads::kAll);
    for (int h = 0; h < kHkv; ++h) {
      const bool poisoned =
          h == kPoisonKvHead || (opt.method == Method::kTOVA && r != Reads::kNone);
      int64_t not_finite = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float g = got[h * n + j];
        const double e = ref[h * n + j];
        not_finite += !std::isfinite(g);
        if (poisoned && reads_key(j)) {
          if (want_nan) {
            ASSERT_TRUE(std::isnan(g)) << "head " << h << " key " << j << ": " << g;
          } else if (r == Reads::kKey) {
            ASSERT_FALSE(std::isfinite(g)) << "head " << h << " key " << j << ": " << g;
          }
        } else {
          ASSERT_TRUE(std::isfinite(g) && std::abs(g - e) <= atol + rtol * std::abs(e))
              << "head " << h << " key " << j << ": got " << g << ", clean reference " << e;
        }
      }
      if (poisoned && r == Reads::kAll && !want_nan)
        EXPECT_GT(not_finite, 0) << "head " << h << ": every score finite";
    }
  }
}

const Method kMethods[] = {
    Method::kDropKV, Method::kObcacheV, Method::kObcacheK, Method::kObcacheVK, Method::kSnapKV,
    Method::kVATP,   Method::kH2O,      Method::kTOVA,     Method::kKNorm,     Method::kKeyDiff};

// Raw scores (no pooling) of every kind at the default window, each poison.
TEST(CudaNanScores, EveryKindCarriesANaNOrInfIntoItsScores) {
  KVEVICT_REQUIRE_GPU();
  for (Method method : kMethods) {
    ScoreOptions opt = ScoreOptions::defaults(method);
    if (opt.needs_queries() && opt.aggregate == Aggregate::kWindow) opt.pooling = Pooling{};
    run(opt, 700, DType::kBF16, 11);
  }
}

// The window scores on each forward / pass kernel: wgmma with the key-major pass, wgmma with the
// row-major pass, mma.sync everywhere; w = 1, 8 (32 rows: one block), 32 (128 rows) and 64 (two
// row blocks, accumulated), several key splits (n = 3000), and f16.
TEST(CudaNanScores, EveryWindowKernelCarriesIt) {
  KVEVICT_REQUIRE_GPU();
  struct Variant {
    bool wgmma, keymajor;
  };
  for (Variant var : {Variant{true, true}, Variant{true, false}, Variant{false, false}}) {
    if (var.wgmma && !window_wgmma_available()) continue;
    set_window_wgmma(var.wgmma);
    set_window_keymajor(var.keymajor);
    SCOPED_TRACE(::testing::Message() << "wgmma " << var.wgmma << " keymajor " << var.keymajor);
    for (Method method : {Method::kDropKV, Method::kObcacheVK, Method::kSnapKV})
      for (int w : {1, 8, 32, 64}) {
        ScoreOptions opt = ScoreOptions::defaults(method);
        opt.window = w;
        opt.pooling = Pooling{};
        run(opt, 3000, DType::kBF16, 21 + w);
      }
    ScoreOptions opt = ScoreOptions::defaults(Method::kDropKV);
    opt.pooling = Pooling{};
    run(opt, 700, DType::kF16, 5);
  }
  set_window_wgmma(true);
  set_window_keymajor(true);
}

// Pooling keeps the NaN of the key it spreads (max: fmaxf dropped it) over its window.
TEST(CudaNanScores, PoolingKeepsTheNaN) {
  KVEVICT_REQUIRE_GPU();
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    ScoreOptions opt = ScoreOptions::defaults(Method::kObcacheV);
    opt.pooling = Pooling{kind, 7};
    run(opt, 700, DType::kBF16, 3, {{Input::kV, std::numeric_limits<float>::quiet_NaN()}});
    opt = ScoreOptions::defaults(Method::kSnapKV);
    opt.pooling = Pooling{kind, 5};
    run(opt, 700, DType::kBF16, 4, {{Input::kK, std::numeric_limits<float>::quiet_NaN()}});
  }
}

}  // namespace
}  // namespace kvevict::cuda
