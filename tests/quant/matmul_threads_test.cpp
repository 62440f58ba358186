// quant::matmul gives bitwise the same outputs for any thread count on products large enough to
// take its parallel paths (the grouped-targets test in quant_kernels_test.cpp uses matrices small
// enough to run serially at T = 1): decode (T = 1, row kernels over work items) and prefill
// chunks (T >= kGemmMinTokens, GEMM panels), over a fused group of differently typed targets.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/parallel_if_large.h"
#include "kvevict/dtype.h"
#include "kvevict/io/gguf.h"
#include "quant/gemm.h"
#include "quant/matmul.h"

namespace kvevict::quant {
namespace {

// Random codes with a finite f16 scale (and min) at the start of every block (Q6_K: at its end).
std::vector<uint8_t> random_matrix(GgmlType t, int64_t rows, int64_t K, uint64_t seed) {
  std::vector<uint8_t> w(static_cast<size_t>(rows * gguf::ggml_row_bytes(t, K)));
  std::mt19937_64 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bb = gguf::ggml_block_bytes(t), be = gguf::ggml_block_elems(t);
  for (int64_t i = 0; i < rows * K / be; ++i) {
    uint8_t* p = w.data() + i * bb;
    const uint16_t d = float_to_half(0.002f * static_cast<float>(1 + rng() % 16));
    if (t == GgmlType::kQ6_K) {
      std::memcpy(p + 208, &d, 2);
    } else {
      std::memcpy(p, &d, 2);
      if (t == GgmlType::kQ4_K) std::memcpy(p + 2, &d, 2);
    }
  }
  return w;
}

TEST(QuantMatmulThreads, LargeGroupsAreBitwiseEqualForAnyThreadCount) {
  const int64_t K = 512;
  const GgmlType types[3] = {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K};
  const int64_t rows[3] = {3001, 517, 64};  // odd counts: partial work items and panels
  int64_t total_rows = 0;
  for (int64_t r : rows) total_rows += r;
  ASSERT_GE(total_rows * K, detail::kParallelMinWork) << "the decode product must run in parallel";
  std::vector<std::vector<uint8_t>> w(3);
  std::vector<MatrixView> mv(3);
  for (int i = 0; i < 3; ++i) {
    w[i] = random_matrix(types[i], rows[i], K, 70 + i);
    mv[i] = MatrixView{types[i], rows[i], K, gguf::ggml_row_bytes(types[i], K), w[i].data()};
  }
  for (const int64_t T : {int64_t{1}, int64_t{2}, kGemmMinTokens, int64_t{11}}) {
    std::vector<float> x(T * K);
    std::mt19937 rng(static_cast<unsigned>(T));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);
    std::vector<std::vector<float>> first;
    for (const int threads : {1, 2, 3, 8}) {
      SCOPED_TRACE("T=" + std::to_string(T) + " threads=" + std::to_string(threads));
      set_num_threads(threads);
      std::vector<std::vector<float>> y(3);
      std::vector<MatmulTarget> tg(3);
      for (int i = 0; i < 3; ++i) {
        y[i].assign(T * (rows[i] + 3), -1.0f);  // ldy > rows: the gaps must stay untouched
        tg[i] = MatmulTarget{mv[i], y[i].data(), rows[i] + 3};
      }
      matmul(x.data(), T, K, tg.data(), 3);
      for (int i = 0; i < 3; ++i)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t g = rows[i]; g < rows[i] + 3; ++g)
            ASSERT_EQ(y[i][t * (rows[i] + 3) + g], -1.0f) << "target " << i << " wrote a gap";
      if (first.empty()) {
        first = y;
        continue;
      }
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(y[i], first[i]) << "target " << i << " differs from the 1-thread result";
    }
    set_num_threads(0);
  }
}

}  // namespace
}  // namespace kvevict::quant
