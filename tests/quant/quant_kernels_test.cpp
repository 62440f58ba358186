// Every quantized kernel of every ISA this CPU runs, against double-precision references built on
// the io/ dequantizers (src/io/gguf_dequantize.cpp, themselves held to the golden file
// tests/io/data/gguf_dequant_golden.json): dot products at odd block counts, the activation
// quantizer, the GEMM panels at odd row and token counts, and whole grouped matmuls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kvevict/dtype.h"
#include "kvevict/io/gguf.h"
#include "quant/gemm.h"
#include "quant/matmul.h"
#include "quant/quant.h"

namespace kvevict::quant {
namespace {

using gguf::GgmlType;

const GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                              GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                              GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

std::string type_name(GgmlType t) {
  return gguf::ggml_type_name(static_cast<uint32_t>(t));
}

std::vector<const Kernels*> all_isas() {
  std::vector<const Kernels*> out;
  for (Isa isa : kAllIsas)
    if (const Kernels* k = kernels_for(isa)) out.push_back(k);
  return out;
}

// The SIMD tables this CPU runs (AVX2, AVX-512).
std::vector<const Kernels*> simd_isas() {
  std::vector<const Kernels*> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (const Kernels* k = kernels_for(isa)) out.push_back(k);
  return out;
}

void put_fp16(uint8_t* p, float v) {
  const uint16_t h = float_to_half(v);
  std::memcpy(p, &h, 2);
}

// `rows` rows of n elements of type t: random code bytes everywhere, then every scale field set to
// a finite value of a realistic size (random bytes would make some of them inf / NaN).
std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t n, uint64_t seed) {
  const int64_t rb = gguf::ggml_row_bytes(t, n);
  std::vector<uint8_t> w(static_cast<size_t>(rows * rb));
  std::mt19937_64 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t be = gguf::ggml_block_elems(t), bb = gguf::ggml_block_bytes(t);
  for (int64_t blk = 0; blk < rows * n / be; ++blk) {
    uint8_t* p = w.data() + blk * bb;
    switch (t) {
      case GgmlType::kF32: {
        const float v = u(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case GgmlType::kF16: put_fp16(p, u(rng)); break;
      case GgmlType::kBF16: {
        const uint16_t h = float_to_bf16(u(rng));
        std::memcpy(p, &h, 2);
        break;
      }
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0: put_fp16(p, 0.02f * u(rng)); break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
        put_fp16(p, 0.02f * std::abs(u(rng)));
        put_fp16(p + 2, 0.1f * u(rng));
        break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        put_fp16(p, 0.002f * std::abs(u(rng)));
        put_fp16(p + 2, 0.002f * std::abs(u(rng)));
        break;
      case GgmlType::kQ6_K: put_fp16(p + 208, 0.001f * u(rng)); break;
    }
  }
  return w;
}

struct Ref {
  double dot = 0, mag = 0;  // sum w a, sum |w a|
};

Ref ref_dot(const float* w, const float* a, int64_t n) {
  Ref r;
  for (int64_t i = 0; i < n; ++i) {
    r.dot += static_cast<double>(w[i]) * a[i];
    r.mag += std::abs(static_cast<double>(w[i]) * a[i]);
  }
  return r;
}

// The A8 activations the kernels see, as floats (q * d).
std::vector<float> dequant_a8(const uint8_t* buf, int64_t n) {
  const A8Row a = a8_row(buf, n);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = a.qs[i] * a.d[i / kA8Block];
  return x;
}

std::vector<int64_t> odd_lengths(GgmlType t) {
  const int64_t be = std::max<int64_t>(gguf::ggml_block_elems(t), kA8Block);
  return {be, 3 * be, 7 * be, 17 * be};
}

// Float kernels on F32 / F16 / BF16 weights also take lengths that are not a multiple of 32.
std::vector<int64_t> float_lengths() {
  return {1, 3, 7, 17, 79, 1003};
}

TEST(QuantizeA8, ScalarAndSimdAgreeBitwiseAndRoundToNearest) {
  for (const Kernels* k : all_isas()) {
    for (int64_t n : {32, 96, 544, 2048}) {
      std::vector<float> x(n);
      std::mt19937 rng(static_cast<unsigned>(n));
      std::normal_distribution<float> nd(0.0f, 3.0f);
      for (auto& v : x) v = nd(rng);
      x[5] = 0.0f;
      if (n >= 64)
        for (int i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block: d = 0, q = 0
      std::vector<uint8_t> got(a8_row_bytes(n)), want(a8_row_bytes(n));
      k->quantize_a8(x.data(), n, got.data());
      scalar_kernels().quantize_a8(x.data(), n, want.data());
      const A8Row g = a8_row(got.data(), n), s = a8_row(want.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(g.qs[i], s.qs[i]) << isa_name(k->isa) << " n=" << n << " i=" << i;
        const float d = g.d[i / kA8Block];
        EXPECT_LE(std::abs(x[i] - g.qs[i] * d), 0.5f * d * (1 + 1e-5f) + 1e-30f) << i;
      }
      for (int64_t b = 0; b < n / kA8Block; ++b) EXPECT_EQ(g.d[b], s.d[b]);
      for (int64_t h = 0; h < n / kA8Half; ++h) {
        int sum = 0;
        for (int i = 0; i < kA8Half; ++i) sum += g.qs[h * kA8Half + i];
        EXPECT_EQ(g.s16[h], sum) << h;
        EXPECT_EQ(g.s16[h], s.s16[h]);
      }
    }
  }
}

// One row of weights against one activation row: |kernel - double(dequant(w) . dequant(a8))|
// within 1e-5 of sum |w a| (f32 accumulation of exact integer block sums), and within the A8
// rounding error of the product with the original activations.
TEST(QuantDot, EveryTypeAndIsaMatchesTheDoubleReferenceAtOddSizes) {
  for (const Kernels* k : all_isas()) {
    for (GgmlType t : kAllTypes) {
      const bool a8 = takes_a8(t);
      for (int64_t n : a8 ? odd_lengths(t) : float_lengths()) {
        SCOPED_TRACE(std::string(isa_name(k->isa)) + " " + type_name(t) +
                     " n=" + std::to_string(n));
        const std::vector<uint8_t> w = random_rows(t, 1, n, 1000 + n);
        std::vector<float> wf(n);
        gguf::dequantize(t, w.data(), wf.data(), n);
        std::vector<float> x(n);
        std::mt19937 rng(static_cast<unsigned>(7 * n));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng);
        float got;
        Ref exact, orig = ref_dot(wf.data(), x.data(), n);
        double bound = 0;  // A8 error: each activation is off by at most its block's d / 2
        if (a8) {
          std::vector<uint8_t> act(a8_row_bytes(n));
          k->quantize_a8(x.data(), n, act.data());
          ASSERT_NE(k->dot_a8[type_index(t)], nullptr);
          const A8Row a = a8_row(act.data(), n);
          got = k->dot_a8[type_index(t)](w.data(), a, n);
          const std::vector<float> xa = dequant_a8(act.data(), n);
          exact = ref_dot(wf.data(), xa.data(), n);
          for (int64_t i = 0; i < n; ++i) bound += std::abs(wf[i]) * 0.5 * a.d[i / kA8Block];
        } else {
          ASSERT_NE(k->dot_f32[type_index(t)], nullptr);
          got = k->dot_f32[type_index(t)](w.data(), x.data(), n);
          exact = orig;
        }
        EXPECT_NEAR(got, exact.dot, 1e-5 * exact.mag + 1e-30)
            << "ref " << exact.dot << " sum|wa| " << exact.mag;
        EXPECT_NEAR(got, orig.dot, bound + 1e-5 * orig.mag + 1e-30);
      }
    }
  }
}

// Every SIMD kernel against the scalar one on the same A8 activations, at odd block counts:
// both are exact integer block sums scaled in f32, so they differ only by f32 rounding of sums
// (within 2e-5 of sum |w a|, twice each one's bound to the double reference).
TEST(QuantDot, SimdMatchesScalarAtOddBlockCounts) {
  const Kernels& sc = scalar_kernels();
  const std::vector<const Kernels*> simd = simd_isas();
  if (simd.empty()) GTEST_SKIP() << "this CPU runs no SIMD kernels (no AVX2)";
  for (const Kernels* k : simd) {
    for (GgmlType t : kAllTypes) {
      const bool a8 = takes_a8(t);
      for (int64_t n : a8 ? odd_lengths(t) : float_lengths()) {
        SCOPED_TRACE(std::string(isa_name(k->isa)) + " " + type_name(t) +
                     " n=" + std::to_string(n));
        const std::vector<uint8_t> w = random_rows(t, 1, n, 99 + n);
        std::vector<float> wf(n), x(n);
        gguf::dequantize(t, w.data(), wf.data(), n);
        for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * i) * 2.0f;
        float s, v;
        Ref e;
        if (a8) {
          std::vector<uint8_t> act(a8_row_bytes(n));
          sc.quantize_a8(x.data(), n, act.data());
          const A8Row a = a8_row(act.data(), n);
          s = sc.dot_a8[type_index(t)](w.data(), a, n);
          v = k->dot_a8[type_index(t)](w.data(), a, n);
          const std::vector<float> xa = dequant_a8(act.data(), n);
          e = ref_dot(wf.data(), xa.data(), n);
        } else {
          s = sc.dot_f32[type_index(t)](w.data(), x.data(), n);
          v = k->dot_f32[type_index(t)](w.data(), x.data(), n);
          e = ref_dot(wf.data(), x.data(), n);
        }
        EXPECT_NEAR(v, s, 2e-5 * e.mag + 1e-30) << "sum|wa| " << e.mag;
      }
    }
  }
}

// Which ISAs this CPU runs, read a second way: the kernel's /proc/cpuinfo flags (it lists the
// AVX / AVX-512 flags only where it enables their register state). Empty where unreadable.
std::set<std::string> proc_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> out;
    for (std::string w; words >> w;) out.insert(w);
    return out;
  }
  return {};
}

// The dispatch cannot hide behind the skips below: the AVX-512 kernels are in every x86-64
// build, the cpuid + XGETBV detection agrees with the kernel's flags, a table is handed out
// exactly where the CPU runs it, and the default table is the best of them (or the one
// KVEVICT_QUANT_ISA names).
TEST(QuantDispatch, PicksEachIsaExactlyWhenTheCpuRunsIt) {
#if defined(__x86_64__)
  EXPECT_TRUE(avx512_compiled()) << "the AVX-512 kernels were not compiled into this x86-64 build";
#endif
  const std::set<std::string> f = proc_cpu_flags();
  if (!f.empty()) {
    auto has = [&](std::initializer_list<const char*> names) {
      for (const char* n : names)
        if (f.count(n) == 0) return false;
      return true;
    };
    EXPECT_EQ(cpu_supports(Isa::kAvx2), has({"avx2", "fma", "f16c"}));
    EXPECT_EQ(cpu_supports(Isa::kAvx512), has({"avx2", "fma", "f16c", "avx512f", "avx512bw",
                                               "avx512vl", "avx512dq", "avx512_vnni"}));
  }
  EXPECT_TRUE(cpu_supports(Isa::kScalar));
  for (Isa isa : kAllIsas) {
    const Kernels* k = kernels_for(isa);
    EXPECT_EQ(k != nullptr, cpu_supports(isa)) << isa_name(isa);
    if (k != nullptr) EXPECT_EQ(k->isa, isa);
  }
  const char* env = std::getenv("KVEVICT_QUANT_ISA");
  if (env != nullptr && *env != '\0') {
    EXPECT_STREQ(isa_name(kernels().isa), env);
  } else {
    const Isa best = cpu_supports(Isa::kAvx512) ? Isa::kAvx512
                     : cpu_supports(Isa::kAvx2) ? Isa::kAvx2
                                                : Isa::kScalar;
    EXPECT_EQ(kernels().isa, best) << "chose " << isa_name(kernels().isa);
  }
}

// One test per SIMD ISA that says plainly when it cannot run here; KVEVICT_EXPECT_ISA=avx512
// (tools/cpu_isa_check.sh on a machine that has it) turns that skip into a failure.
void expect_table(Isa isa) {
  const char* expect = std::getenv("KVEVICT_EXPECT_ISA");
  const bool required =
      expect != nullptr && std::string(expect).find(isa_name(isa)) != std::string::npos;
  const Kernels* k = kernels_for(isa);
  if (k == nullptr) {
    ASSERT_FALSE(required) << "KVEVICT_EXPECT_ISA=" << expect << " but this CPU does not run "
                           << isa_name(isa);
    GTEST_SKIP() << "this CPU (or its OS) does not run the " << isa_name(isa)
                 << " kernels: they are not tested here";
  }
  EXPECT_NE(k->quantize_a8, nullptr);
  EXPECT_NE(k->gemm_panel, nullptr);
  for (GgmlType t : kAllTypes) {
    if (takes_a8(t))
      EXPECT_NE(k->dot_a8[type_index(t)], nullptr) << type_name(t);
    else
      EXPECT_NE(k->dot_f32[type_index(t)], nullptr) << type_name(t);
  }
}

TEST(QuantIsaTable, Avx2IsCompleteWhereItRuns) {
  expect_table(Isa::kAvx2);
}
TEST(QuantIsaTable, Avx512IsCompleteWhereItRuns) {
  expect_table(Isa::kAvx512);
}

// The GEMM: packed panels of 1..8 rows against 1..9 tokens, against the double reference.
TEST(QuantGemm, PanelsMatchTheDoubleReference) {
  for (const Kernels* k : all_isas()) {
    for (GgmlType t : kAllTypes) {
      if (!gemm_supports(t, *k)) continue;
      const int64_t K = 3 * std::max<int64_t>(gguf::ggml_block_elems(t), 64);
      for (int rows : {1, 7, 8}) {
        for (int64_t T : {1, 3, 4, 5, 9, 17}) {
          SCOPED_TRACE(std::string(isa_name(k->isa)) + " " + type_name(t) +
                       " rows=" + std::to_string(rows) + " T=" + std::to_string(T));
          const std::vector<uint8_t> w = random_rows(t, rows, K, 7 + rows);
          const MatrixView mv{t, rows, K, gguf::ggml_row_bytes(t, K), w.data()};
          std::vector<float> x(T * K);
          std::mt19937 rng(static_cast<unsigned>(T * 31 + rows));
          std::normal_distribution<float> nd(0.0f, 1.0f);
          for (auto& v : x) v = nd(rng);
          const size_t rb = a8_row_bytes(K);
          std::vector<uint8_t> act(rb * T);
          for (int64_t i = 0; i < T; ++i) k->quantize_a8(x.data() + i * K, K, act.data() + i * rb);
          std::vector<uint8_t> panel(panel_bytes(K));
          const PanelView p = pack_panel(mv, 0, rows, panel.data(), *k);
          const int64_t ldy = rows + 3;
          std::vector<float> y(T * ldy, -7.0f);  // sentinel columns past `rows`
          k->gemm_panel(p, GemmInput{act.data(), rb, T, K}, y.data(), ldy, rows);
          std::vector<float> wf(K);
          for (int r = 0; r < rows; ++r) {
            gguf::dequantize(t, mv.row(r), wf.data(), K);
            for (int64_t i = 0; i < T; ++i) {
              const std::vector<float> xa = dequant_a8(act.data() + i * rb, K);
              const Ref e = ref_dot(wf.data(), xa.data(), K);
              EXPECT_NEAR(y[i * ldy + r], e.dot, 1e-5 * e.mag + 1e-30) << "row " << r << " t " << i;
            }
          }
          for (int64_t i = 0; i < T; ++i)
            for (int64_t c = rows; c < ldy; ++c) EXPECT_EQ(y[i * ldy + c], -7.0f) << "overwrote";
        }
      }
    }
  }
}

// SIMD packing (code decoders + 8 x 8 transpose) writes the same panel bytes as the scalar one.
TEST(QuantGemm, SimdPackingEqualsScalarPacking) {
  if (simd_isas().empty()) GTEST_SKIP() << "this CPU runs no SIMD kernels (no AVX2)";
  for (const Kernels* simd : simd_isas()) {
    for (GgmlType t : kAllTypes) {
      if (!gemm_supports(t, *simd)) continue;
      const int64_t K =
          3 * std::max<int64_t>(gguf::ggml_block_elems(t), 64) + 32 * (t == GgmlType::kQ4_0);
      for (int rows : {3, 8}) {
        const std::vector<uint8_t> w = random_rows(t, rows, K, 3 + rows);
        const MatrixView mv{t, rows, K, gguf::ggml_row_bytes(t, K), w.data()};
        std::vector<uint8_t> a(panel_bytes(K), 0xAB), b(panel_bytes(K), 0xAB);
        const PanelView pa = pack_panel(mv, 0, rows, a.data(), *simd);
        const PanelView pb = pack_panel(mv, 0, rows, b.data(), scalar_kernels());
        EXPECT_EQ(0, std::memcmp(pa.codes, pb.codes, static_cast<size_t>(K) * kPanelRows))
            << type_name(t);
        const int64_t groups = K / pa.layout.group * kPanelRows;
        for (int64_t i = 0; i < groups; ++i) {
          EXPECT_EQ(pa.scale[i], pb.scale[i]) << type_name(t) << " " << i;
          EXPECT_EQ(pa.min[i], pb.min[i]) << type_name(t) << " " << i;
        }
      }
    }
  }
}

// A fused group (three matrices of different types and odd row counts) through matmul: the
// row-by-row path (T = 1, 2) and the GEMM path (T = 5, 37) against the double reference, and
// bitwise the same for one and two threads.
TEST(QuantMatmul, GroupedTargetsMatchReferenceAndIgnoreThreadCount) {
  const int64_t K = 512;
  const GgmlType types[3] = {GgmlType::kQ4_1, GgmlType::kQ6_K, GgmlType::kF16};
  const int64_t rows[3] = {37, 9, 21};
  std::vector<std::vector<uint8_t>> w(3);
  std::vector<MatrixView> mv(3);
  for (int i = 0; i < 3; ++i) {
    w[i] = random_rows(types[i], rows[i], K, 50 + i);
    mv[i] = MatrixView{types[i], rows[i], K, gguf::ggml_row_bytes(types[i], K), w[i].data()};
  }
  for (const Kernels* k : all_isas()) {
    for (int64_t T : {1, 2, 5, 37, 130}) {
      SCOPED_TRACE(std::string(isa_name(k->isa)) + " T=" + std::to_string(T));
      std::vector<float> x(T * K);
      std::mt19937 rng(static_cast<unsigned>(T));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto& v : x) v = nd(rng);
      std::vector<std::vector<float>> y1(3), y2(3);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        auto& y = threads == 1 ? y1 : y2;
        std::vector<MatmulTarget> tg(3);
        for (int i = 0; i < 3; ++i) {
          y[i].assign(T * (rows[i] + 1), 0.0f);
          tg[i] = MatmulTarget{mv[i], y[i].data(), rows[i] + 1};
        }
        matmul(x.data(), T, K, tg.data(), 3, *k);
      }
      set_num_threads(0);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(y1[i], y2[i]) << "target " << i << " differs between 1 and 2 threads";
        // Reference: the dequantized weights times the A8-rounded activations (block types) or
        // the activations themselves (F16), in double.
        std::vector<float> wf(K);
        std::vector<uint8_t> act(a8_row_bytes(K));
        for (int64_t t = 0; t < T; ++t) {
          std::vector<float> xa(x.begin() + t * K, x.begin() + (t + 1) * K);
          if (takes_a8(types[i])) {
            scalar_kernels().quantize_a8(x.data() + t * K, K, act.data());
            xa = dequant_a8(act.data(), K);
          }
          for (int64_t r = 0; r < rows[i]; ++r) {
            gguf::dequantize(types[i], mv[i].row(r), wf.data(), K);
            const Ref e = ref_dot(wf.data(), xa.data(), K);
            EXPECT_NEAR(y1[i][t * (rows[i] + 1) + r], e.dot, 1e-5 * e.mag + 1e-30)
                << "target " << i << " row " << r << " token " << t;
          }
        }
      }
    }
  }
}

uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Issue 13: a NaN or an Inf in an activation block gives that block a NaN scale and zero codes
// and sums on every ISA; the other blocks are bitwise what the clean row gives.
TEST(QuantizeA8, NonFiniteBlockGetsANaNScaleAndZeroCodes) {
  const float bad[] = {
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  const int64_t n = 96;
  std::vector<float> clean(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto& v : clean) v = nd(rng);
  for (const Kernels* k : all_isas()) {
    std::vector<uint8_t> want(a8_row_bytes(n)), got(a8_row_bytes(n));
    k->quantize_a8(clean.data(), n, want.data());
    const A8Row w = a8_row(want.data(), n);
    for (int64_t pos = 0; pos < n; ++pos) {
      for (float v : bad) {
        SCOPED_TRACE(std::string(isa_name(k->isa)) + " x[" + std::to_string(pos) +
                     "] = " + std::to_string(v));
        std::vector<float> x = clean;
        x[pos] = v;
        k->quantize_a8(x.data(), n, got.data());
        const A8Row g = a8_row(got.data(), n);
        const int64_t hit = pos / kA8Block;
        for (int64_t b = 0; b < n / kA8Block; ++b) {
          if (b == hit) {
            ASSERT_TRUE(std::isnan(g.d[b])) << "block " << b << " d " << g.d[b];
          } else {
            ASSERT_EQ(float_bits(g.d[b]), float_bits(w.d[b])) << "block " << b;
          }
          for (int i = 0; i < kA8Block; ++i)
            ASSERT_EQ(g.qs[b * kA8Block + i], b == hit ? 0 : w.qs[b * kA8Block + i])
                << b << " " << i;
          for (int h = 0; h < 2; ++h)
            ASSERT_EQ(g.s16[2 * b + h], b == hit ? 0 : w.s16[2 * b + h]) << b << " " << h;
        }
      }
    }
  }
}

// Issue 13: a NaN or an Inf anywhere in one activation row makes every output of that row NaN
// (block types; float weights: not finite) and leaves every other row's outputs bitwise as they
// were, for every type and ISA, on the row-by-row path (T = 1, 3) and the GEMM path (T = 6).
TEST(QuantMatmul, NonFiniteActivationPoisonsItsRowOnly) {
  const int64_t K = 512, rows = 9;
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (GgmlType t : kAllTypes) {
    const std::vector<uint8_t> w = random_rows(t, rows, K, 90 + static_cast<int>(t));
    const MatrixView mv{t, rows, K, gguf::ggml_row_bytes(t, K), w.data()};
    for (const Kernels* k : all_isas()) {
      for (int64_t T : {int64_t{1}, int64_t{3}, kGemmMinTokens + 2}) {
        std::vector<float> clean(T * K);
        std::mt19937 rng(static_cast<unsigned>(T));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : clean) v = nd(rng);
        std::vector<float> y0(T * rows);
        const MatmulTarget t0{mv, y0.data(), rows};
        matmul(clean.data(), T, K, &t0, 1, *k);
        const int64_t row = T / 2;  // the poisoned token
        // Every position of the row for one token, a spread of them (each block's ends) for more.
        std::vector<int64_t> positions;
        for (int64_t c = 0; c < K; c += T == 1 ? 1 : 31) positions.push_back(c);
        positions.push_back(K - 1);
        for (int64_t c : positions) {
          for (float v : bad) {
            SCOPED_TRACE(std::string(isa_name(k->isa)) + " " + type_name(t) +
                         " T=" + std::to_string(T) + " x[" + std::to_string(row) + ", " +
                         std::to_string(c) + "] = " + std::to_string(v));
            std::vector<float> x = clean;
            x[row * K + c] = v;
            std::vector<float> y(T * rows);
            const MatmulTarget tg{mv, y.data(), rows};
            matmul(x.data(), T, K, &tg, 1, *k);
            for (int64_t tt = 0; tt < T; ++tt)
              for (int64_t r = 0; r < rows; ++r) {
                const float got = y[tt * rows + r];
                if (tt != row)
                  ASSERT_EQ(float_bits(got), float_bits(y0[tt * rows + r]))
                      << "token " << tt << " row " << r << ": " << got << " vs "
                      << y0[tt * rows + r];
                else if (takes_a8(t))
                  ASSERT_TRUE(std::isnan(got)) << "row " << r << ": " << got;
                else
                  ASSERT_FALSE(std::isfinite(got)) << "row " << r << ": " << got;
              }
          }
        }
      }
    }
  }
}

TEST(QuantMatmul, RejectsAMismatchedRowLength) {
  const std::vector<uint8_t> w = random_rows(GgmlType::kQ8_0, 2, 64, 1);
  const MatrixView mv{GgmlType::kQ8_0, 2, 64, gguf::ggml_row_bytes(GgmlType::kQ8_0, 64), w.data()};
  std::vector<float> x(96), y(2);
  const MatmulTarget t{mv, y.data(), 2};
  EXPECT_THROW(matmul(x.data(), 1, 96, &t, 1), Error);
}

}  // namespace
}  // namespace kvevict::quant
