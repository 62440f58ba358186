// The decode attention with the step scores fused into its launch (launch_decode_attention with
// DecodeStepScoreArgs), and the separate step-score kernel (launch_decode_scores, with the exported
// logits and without), against a double reference: every score kind, odd segment lengths (1, 17,
// thousands), one and many key splits, GQA groups 1 / 3 / 4 / 8 / 16, head dims 64 / 128 / 256;
// and segments whose planted top row holds p = 1 - 1e-k, a logit gap of 10 .. 1000 nats or a
// query scaled by 1e30 (issue 13): a pair that may hold p >= 1/2 takes the leave-one-out term,
// computed here in double from the segment's logits and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/decode_inputs.h"
#include "cuda/model_launchers.h"
#include "score/score_terms.h"
#include "support/testing.h"

namespace kvevict::gpu {
namespace {

using cuda::testing::DeviceBuffer;
using detail::bf16;

struct Case {
  int B, Hkv, G, d;
  std::vector<int32_t> lens;  // [B Hkv] rows per segment
  uint64_t seed;
  // Planted top rows (issue 13): > 0 plants, in every segment, row `top_row` (clamped to the
  // segment) as each head's top with this logit gap (nats) or, for p_top > 0, probability.
  double gap = 0, p_top = 0, q_scale = 1;
  int top_row = 0;
};

// The test's kind index -> the library's decode score (tova is kAttentionSum with replace).
constexpr DecodeScore kKindScores[] = {DecodeScore::kAttentionSum, DecodeScore::kDropKV,
                                       DecodeScore::kObcacheV, DecodeScore::kObcacheK,
                                       DecodeScore::kObcacheVK};

const char* kind_name(int kind, bool replace) {
  static const char* names[] = {"h2o", "dropkv", "obcache_v", "obcache_k", "obcache_vk"};
  return replace ? "tova" : names[kind];
}

// The double reference of one segment's heads: logits z [len][G], lse [G], outputs a [G][d].
struct SegmentRef {
  std::vector<double> z, lse, a;
};

SegmentRef reference_segment(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, int64_t base, int64_t len, int64_t h0,
                             int G, int d, double scale) {
  SegmentRef r;
  r.z.assign(len * G, 0.0);
  r.lse.assign(G, -INFINITY);
  r.a.assign(static_cast<size_t>(G) * d, 0.0);
  for (int h = 0; h < G; ++h) {
    double m = -INFINITY;
    for (int64_t j = 0; j < len; ++j) {
      double dot = 0;
      for (int i = 0; i < d; ++i)
        dot += static_cast<double>(q[(h0 + h) * d + i]) * k[(base + j) * d + i];
      r.z[j * G + h] = dot * scale;
      m = std::max(m, dot * scale);
    }
    double sum = 0;
    for (int64_t j = 0; j < len; ++j) sum += std::exp(r.z[j * G + h] - m);
    r.lse[h] = m + std::log(sum);
    for (int64_t j = 0; j < len; ++j) {
      const double p = std::exp(r.z[j * G + h] - r.lse[h]);
      for (int i = 0; i < d; ++i) r.a[h * d + i] += p * v[(base + j) * d + i];
    }
  }
  return r;
}

const Method kKindMethods[] = {Method::kH2O, Method::kDropKV, Method::kObcacheV, Method::kObcacheK,
                               Method::kObcacheVK};

// The kernels' test for a pair that may hold p >= 1/2 (decode_step_scores.cuh top_candidate), on
// the kernel's own float z and lse; `near` marks pairs within rounding of the threshold, where the
// host and the device may decide differently.
bool top_candidate_host(float z, float lse, bool* near) {
  const double x = static_cast<double>(z) - lse;
  const double t = -0.6931472 - 1e-6 - 1e-5 * std::abs(static_cast<double>(lse));
  *near = std::abs(x - t) < 1e-4 * (1 + std::abs(static_cast<double>(lse)));
  return x > t;
}

// The leave-one-out term of segment row j for head h in double (score_terms.h top_term), from the
// segment's double logits and its values (rows base .. base + len - 1).
double leave_one_out_ref(int kind, const SegmentRef& r, const std::vector<float>& v, int64_t base,
                         int64_t len, int64_t j, int h, int G, int d) {
  double m2 = -INFINITY, l2 = 0;
  for (int64_t i = 0; i < len; ++i)
    if (i != j) m2 = std::max(m2, r.z[i * G + h]);
  std::vector<double> a(d, 0.0);
  for (int64_t i = 0; i < len && m2 > -INFINITY; ++i) {
    if (i == j) continue;
    const double w = std::exp(r.z[i * G + h] - m2);
    l2 += w;
    for (int c = 0; c < d; ++c) a[c] += w * v[(base + i) * d + c];
  }
  terms::TopKey<double> tk;
  const double rho = l2 > 0 ? l2 * std::exp(m2 - r.z[j * G + h]) : 0.0;
  terms::top_probs(rho, tk.p, tk.omp);
  tk.z = r.z[j * G + h];
  for (int c = 0; c < d; ++c) {
    const double ao = l2 > 0 ? a[c] / l2 : 0.0, vt = v[(base + j) * d + c], diff = vt - ao;
    tk.d2 += diff * diff;
    tk.vdiff += vt * diff;
    tk.v2 += vt * vt;
  }
  return terms::top_term(kKindMethods[kind], tk);
}

// Mean over the G heads of the kind's term for row j, from z, lse and a given in double (the
// direct ||a - v||^2 and <v, v - a>, as the reference scorer); a pair in `loo` (per head) takes
// the leave-one-out term instead. p is taken relative to the head's top row (score_terms.h
// other_prob), which stays right where lse rounds (|z| ~ 1e30).
double reference_score(int kind, const SegmentRef& r, const std::vector<double>& lse,
                       const std::vector<double>& a, const std::vector<float>& v, int64_t base,
                       int64_t len, int64_t j, int G, int d, const std::vector<bool>& loo) {
  const int64_t row = base + j;
  double v2 = 0;
  for (int i = 0; i < d; ++i) v2 += static_cast<double>(v[row * d + i]) * v[row * d + i];
  double s = 0;
  for (int h = 0; h < G; ++h) {
    if (loo[h]) {
      s += leave_one_out_ref(kind, r, v, base, len, j, h, G, d);
      continue;
    }
    double dist2 = 0, vdiff = 0;
    for (int i = 0; i < d; ++i) {
      const double vi = v[row * d + i], diff = vi - a[h * d + i];
      dist2 += diff * diff;
      vdiff += vi * diff;
    }
    s += terms::pair_term_dist(kKindMethods[kind], r.z[j * G + h], lse[h], v2, dist2, vdiff, 1e-12);
  }
  return s / G;
}

// Plants each segment's top row (Case::gap / p_top / q_scale): query head h of a segment becomes
// q_scale e_h and the keys' coordinate h carries the planted logits / scale (d >= G).
void plant_top_rows(const Case& c, const std::vector<int64_t>& off, float scale,
                    std::vector<float>& q, std::vector<float>& k) {
  const int Hq = c.Hkv * c.G, d = c.d;
  std::mt19937_64 rng(c.seed + 7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int s = 0; s < c.B * c.Hkv; ++s) {
    const int b = s / c.Hkv, g = s % c.Hkv;
    const int64_t len = c.lens[s], top = std::min<int64_t>(c.top_row, len - 1);
    for (int h = 0; h < c.G; ++h) {
      float* qr = q.data() + (static_cast<size_t>(b) * Hq + g * c.G + h) * d;
      std::fill(qr, qr + d, 0.0f);
      qr[h] = static_cast<float>(c.q_scale);
      std::vector<double> z(len);
      double best = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; ++j) z[j] = normal(rng);
      for (int64_t j = 0; j < len; ++j)
        if (j != top) best = std::max(best, z[j]);
      for (int64_t j = 0; j < len; ++j)
        if (j != top) sum += std::exp(z[j] - best);
      if (len > 1)
        z[top] =
            c.p_top > 0 ? best + std::log(sum) + std::log(c.p_top / (1 - c.p_top)) : best + c.gap;
      for (int64_t j = 0; j < len; ++j) k[(off[s] + j) * d + h] = static_cast<float>(z[j] / scale);
    }
  }
  q = cuda::testing::round_to(std::move(q), DType::kBF16);
  k = cuda::testing::round_to(std::move(k), DType::kBF16);
}

void run_case(const Case& c, int sm_count) {
  const int Hq = c.Hkv * c.G, S = c.B * c.Hkv, d = c.d;
  ASSERT_EQ(static_cast<int>(c.lens.size()), S);
  SCOPED_TRACE(::testing::Message() << "B " << c.B << " Hkv " << c.Hkv << " G " << c.G << " d " << d
                                    << " sm_count " << sm_count);
  // Segments with spare rows between them (capacity len + 3), as the runtime's varlen cache.
  std::vector<int64_t> off(S + 1, 0);
  int64_t max_len = 0;
  for (int s = 0; s < S; ++s) {
    off[s + 1] = off[s] + c.lens[s] + 3;
    max_len = std::max<int64_t>(max_len, c.lens[s]);
  }
  const int64_t rows = off[S];
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto q = cuda::testing::round_to(
      kvevict::testing::normal_floats(static_cast<size_t>(c.B) * Hq * d, c.seed, 1.5f),
      DType::kBF16);
  auto k = cuda::testing::round_to(kvevict::testing::normal_floats(rows * d, c.seed + 1, 1.0f),
                                   DType::kBF16);
  const bool planted = c.gap > 0 || c.p_top > 0;
  if (planted) plant_top_rows(c, off, scale, q, k);
  const auto v = cuda::testing::round_to(
      kvevict::testing::normal_floats(rows * d, c.seed + 2, 1.0f), DType::kBF16);
  const auto acc0 = kvevict::testing::random_floats(rows, c.seed + 3, 2.0f);

  testing::DecodeInputs in({c.B, Hq, c.Hkv, d, max_len, scale}, q, k, v, off, c.lens);
  DeviceBuffer<float> acc_d(rows), lse_d(static_cast<size_t>(c.B) * Hq),
      out_f32_d(static_cast<size_t>(c.B) * Hq * d);
  DeviceBuffer<uint16_t> out_d(static_cast<size_t>(c.B) * Hq * d);
  DeviceBuffer<uint32_t> counters_d(S);
  const size_t scratch_bytes =
      detail::decode_attention_scratch_bytes(c.B, Hq, c.Hkv, d, max_len, sm_count);
  DeviceBuffer<unsigned char> scratch_d(scratch_bytes);
  ASSERT_TRUE(in.ok() && acc_d.ok() && scratch_d.ok());
  KVEVICT_ASSERT_CUDA(cudaMemset(counters_d.data(), 0, S * sizeof(uint32_t)));
  DeviceBuffer<float>& z_d = in.z();
  detail::DecodeAttentionArgs da = in.args();
  ASSERT_TRUE(detail::decode_step_scores_fusable(d, c.G));

  // The unscored launch (attention + merge kernel): the fused merge must give the same bits.
  KVEVICT_ASSERT_CUDA(detail::launch_decode_attention(
      da, reinterpret_cast<bf16*>(out_d.data()), lse_d.data(), out_f32_d.data(), scratch_d.data(),
      scratch_bytes, sm_count, nullptr));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto out_plain = out_d.download();
  const auto lse_plain = lse_d.download();
  const auto a_plain = out_f32_d.download();

  // The double reference of every segment.
  std::vector<SegmentRef> refs(S);
  for (int s = 0; s < S; ++s) {
    const int b = s / c.Hkv, g = s % c.Hkv;
    refs[s] = reference_segment(q, k, v, off[s], c.lens[s], static_cast<int64_t>(b) * Hq + g * c.G,
                                c.G, d, scale);
  }
  const auto z_plain = z_d.download();  // the exported logits (the kernels' own z)
  // Attention outputs: lse to 1e-5 relative, a to the bf16 rounding of P (the mma's P V operand).
  for (int s = 0; s < S && c.q_scale == 1; ++s) {
    const int b = s / c.Hkv, g = s % c.Hkv;
    for (int h = 0; h < c.G; ++h) {
      const int64_t hq = static_cast<int64_t>(b) * Hq + g * c.G + h;
      ASSERT_NEAR(lse_plain[hq], refs[s].lse[h], 1e-5 * std::max(1.0, std::abs(refs[s].lse[h])))
          << "segment " << s << " head " << h;
      double amax = 0;
      for (int i = 0; i < d; ++i) amax = std::max(amax, std::abs(refs[s].a[h * d + i]));
      for (int i = 0; i < d; ++i)
        ASSERT_NEAR(a_plain[hq * d + i], refs[s].a[h * d + i], 1e-2 * amax + 1e-6)
            << "segment " << s << " head " << h << " dim " << i;
    }
  }

  auto base_of = [](bool replace, const std::vector<float>& acc, int64_t row) {
    return replace ? 0.0 : static_cast<double>(acc[row]);
  };
  // The checks of one launch's accumulators against the references.
  auto check = [&](int kind, bool replace, const std::vector<float>& got_acc, const char* path) {
    SCOPED_TRACE(path);
    for (int s = 0; s < S; ++s) {
      const int b = s / c.Hkv, g = s % c.Hkv;
      const int64_t h0 = static_cast<int64_t>(b) * Hq + g * c.G;
      std::vector<double> lse_k(c.G), a_k(static_cast<size_t>(c.G) * d);
      for (int h = 0; h < c.G; ++h) {
        lse_k[h] = lse_plain[h0 + h];
        for (int i = 0; i < d; ++i) a_k[h * d + i] = a_plain[(h0 + h) * d + i];
      }
      const int64_t len = c.lens[s];
      const bool tops = kind == 1 || kind == 3 || kind == 4;
      std::vector<double> own(len), full(len);
      std::vector<bool> near_row(len, false);
      double own_max = 0, full_max = 0;
      for (int64_t j = 0; j < len; ++j) {
        std::vector<bool> loo(c.G, false);
        for (int h = 0; h < c.G && tops; ++h) {
          bool near = false;
          loo[h] = top_candidate_host(z_plain[(off[s] + j) * c.G + h], static_cast<float>(lse_k[h]),
                                      &near);
          near_row[j] = near_row[j] || near;
        }
        own[j] = reference_score(kind, refs[s], lse_k, a_k, v, off[s], len, j, c.G, d, loo);
        full[j] =
            reference_score(kind, refs[s], refs[s].lse, refs[s].a, v, off[s], len, j, c.G, d, loo);
        own_max = std::max(own_max, std::abs(own[j]));
        full_max = std::max(full_max, std::abs(full[j]));
      }
      for (int64_t j = 0; j < len; ++j) {
        const int64_t row = off[s] + j;
        const double base = replace ? 0.0 : acc0[row];
        const double step = got_acc[row] - base;
        if (!near_row[j])
          ASSERT_NEAR(step, own[j],
                      2e-4 * std::abs(own[j]) + 1e-5 * own_max + 2e-6 * std::abs(base))
              << "segment " << s << " (len " << len << ") row " << j << " own-a reference";
        ASSERT_NEAR(step, full[j],
                    5e-2 * std::abs(full[j]) + 5e-3 * full_max + 2e-6 * std::abs(base))
            << "segment " << s << " (len " << len << ") row " << j << " double reference";
      }
      // Rows outside the segments (the spare capacity) are untouched.
      for (int64_t row = off[s] + len; row < off[s + 1]; ++row)
        ASSERT_EQ(got_acc[row], acc0[row]) << "spare row " << row << " of segment " << s;
      if (kind == 0) {  // the attention sum of a segment is the mean of G softmaxes: 1
        double total = 0;
        for (int64_t j = 0; j < len; ++j)
          total += got_acc[off[s] + j] - (replace ? 0.0 : acc0[off[s] + j]);
        EXPECT_NEAR(total, 1.0, 1e-3 + 1e-6 * len) << "segment " << s;
      }
      if (planted && kind == 1 && len > 1) {  // dropkv: the planted top row scores highest
        const int64_t top = std::min<int64_t>(c.top_row, len - 1);
        int64_t best = 0;
        for (int64_t j = 1; j < len; ++j)
          if (got_acc[off[s] + j] - base_of(replace, acc0, off[s] + j) >
              got_acc[off[s] + best] - base_of(replace, acc0, off[s] + best))
            best = j;
        EXPECT_EQ(best, top) << "segment " << s << ": the dominant row is not the highest";
      }
    }
  };

  for (int kind = 0; kind <= 4; ++kind) {
    // q = 1e30 saturates p to 0 or 1 in float; only the leave-one-out terms are defined there
    // (the attention sums' exp(z - lse) carries lse's rounding of ~1e23).
    if (c.q_scale > 1 && (kind == 0 || kind == 2)) continue;
    for (bool replace : {false, true}) {
      if (replace && kind != 0) continue;  // tova: the attention sum, written
      SCOPED_TRACE(kind_name(kind, replace));
      detail::DecodeStepScoreArgs sc;
      sc.acc = acc_d.data();
      sc.counters = counters_d.data();
      sc.kind = kKindScores[kind];
      sc.replace = replace;
      std::vector<std::vector<float>> got(2);
      // Two launches from the same accumulators: the second finds its counters reset by the first
      // (else no block would see itself last and acc would stay as uploaded).
      for (int launch = 0; launch < 2; ++launch) {
        acc_d.upload(acc0);
        out_d.poison();
        lse_d.poison();
        out_f32_d.poison();
        KVEVICT_ASSERT_CUDA(detail::launch_decode_attention(
            da, reinterpret_cast<bf16*>(out_d.data()), lse_d.data(), out_f32_d.data(),
            scratch_d.data(), scratch_bytes, sm_count, nullptr, &sc));
        KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
        got[launch] = acc_d.download();
        const auto counters = counters_d.download();
        for (int s = 0; s < S; ++s) ASSERT_EQ(counters[s], 0u) << "segment " << s;
        ASSERT_TRUE(out_d.download() == out_plain) << "fused merge changed out";
        ASSERT_TRUE(lse_d.download() == lse_plain) << "fused merge changed lse";
        ASSERT_TRUE(out_f32_d.download() == a_plain) << "fused merge changed a";
      }
      ASSERT_TRUE(got[0] == got[1]) << "second launch differs from the first";
      EXPECT_TRUE(acc_d.sentinels_intact());
      EXPECT_TRUE(z_d.sentinels_intact());
      // Two references: (1) the double terms at the kernel's own f32 a and lse, which isolates
      // the scoring arithmetic (tight); (2) the all-double reference (a differs by P's bf16).
      check(kind, replace, got[0], "fused");

      // The separate kernel from the exported a and lse, with the exported logits and without
      // (q.k recomputed: its own z, so only the double reference applies there).
      for (bool with_z : {true, false}) {
        detail::DecodeScoreArgs sa;
        sa.q = reinterpret_cast<const bf16*>(in.q().data());
        sa.out = out_f32_d.data();
        sa.lse = lse_d.data();
        sa.k = da.k;
        sa.v = da.v;
        sa.seg_off = in.off().data();
        sa.seg_len = in.len().data();
        sa.acc = acc_d.data();
        sa.z = with_z ? z_d.data() : nullptr;
        sa.B = c.B;
        sa.Hq = Hq;
        sa.Hkv = c.Hkv;
        sa.d = d;
        sa.scale = scale;
        sa.kind = kKindScores[kind];
        sa.replace = replace;
        acc_d.upload(acc0);
        KVEVICT_ASSERT_CUDA(detail::launch_decode_scores(sa, max_len, nullptr));
        KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
        check(kind, replace, acc_d.download(),
              with_z ? "separate kernel, exported z" : "separate kernel, q.k recomputed");
      }
    }
  }
}

const Case kCases[] = {
    {2, 3, 1, 64, {1, 17, 2000, 5, 64, 65}, 11},  // G 1, d 64, segments at tile edges
    {1, 2, 4, 128, {3001, 17}, 12},               // llama's group, a long segment
    {3, 1, 8, 128, {1, 17, 4099}, 13},            // G 8
    {2, 3, 3, 64, {33, 1, 257, 190, 17, 1}, 14},  // G 3 (smollm2), short segments
    {1, 1, 16, 128, {1500}, 15},                  // the largest group
    {2, 1, 4, 256, {777, 1}, 16},                 // gemma3's head dim
    {1, 2, 2, 256, {2049, 17}, 17},               // d 256, many splits
};

class GpuDecodeStepScores : public ::testing::TestWithParam<int> {};

// sm_count 1 plans one split per segment (a few for a lone segment); 132 (an H200) many splits
// for the long segments.
TEST_P(GpuDecodeStepScores, FusedMatchesDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  for (int sm_count : {1, 132}) run_case(kCases[GetParam()], sm_count);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuDecodeStepScores,
                         ::testing::Range(0, static_cast<int>(std::size(kCases))));

// Issue 13: every segment's planted top row holds p = 1 - 1e-k or dominates by 10 .. 1000 nats,
// or the queries are scaled by 1e30; the fused and the separate kernels give it the leave-one-out
// term (the dominant row scores highest under dropkv).
TEST(GpuDecodeStepScoresTopRow, LeaveOneOutMatchesDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  std::vector<Case> cases;
  uint64_t seed = 40;
  for (double gap : {10.0, 30.0, 100.0, 1000.0})
    cases.push_back({1, 2, 4, 128, {3001, 17}, ++seed, gap, 0, 1, 5});
  for (int k = 1; k <= 12; ++k)
    cases.push_back({1, 2, 4, 128, {777, 33}, ++seed, 0, 1 - std::pow(10.0, -k), 1, 700});
  cases.push_back({2, 1, 8, 128, {1500, 1}, ++seed, 30, 0, 1e30, 0});
  cases.push_back({1, 1, 4, 64, {2049}, ++seed, 30, 0, 1e30, 2048});
  // Under compute-sanitizer (KVEVICT_SANITIZER): a gap, the closest p_top and q = 1e30 only.
  const bool sanitizer = std::getenv("KVEVICT_SANITIZER") != nullptr;
  for (const Case& c : cases) {
    if (sanitizer && !(c.gap == 1000 || c.p_top > 1 - 1e-11 || c.q_scale > 1)) continue;
    SCOPED_TRACE(::testing::Message()
                 << "gap " << c.gap << " p_top " << c.p_top << " q_scale " << c.q_scale);
    for (int sm_count : {1, 132}) run_case(c, sm_count);
  }
}

TEST(GpuDecodeStepScoresErrors, RefusesWhatTheFusedKernelDoesNotCover) {
  KVEVICT_REQUIRE_GPU();
  EXPECT_FALSE(detail::decode_step_scores_fusable(96, 4));
  EXPECT_FALSE(detail::decode_step_scores_fusable(128, 32));
  EXPECT_TRUE(detail::decode_step_scores_fusable(256, 16));
  detail::DecodeAttentionArgs da;
  da.B = 1;
  da.Hq = 4;
  da.Hkv = 1;
  da.d = 128;
  da.max_len = 10;
  detail::DecodeStepScoreArgs sc;  // no acc, no counters, no z_out
  EXPECT_EQ(detail::launch_decode_attention(da, nullptr, nullptr, nullptr, nullptr, 1 << 20, 132,
                                            nullptr, &sc),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvevict::gpu
