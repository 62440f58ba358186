// The GEMM panels and the row-by-row kernels on every weight matrix of the embedded checkpoints
// (when present): the same products, so they agree to f32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "io/model_paths.h"
#include "kvevict/io/gguf.h"
#include "quant/matmul.h"

namespace kvevict::quant {
namespace {

TEST(QuantRealWeights, GemmEqualsRowsOnEveryMatrix) {
  for (const char* file : {io::kSmolLM2File, io::kGemma3File}) {
    const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
    if (!io::file_exists(path)) GTEST_SKIP() << path << " is absent";
    const auto f = gguf::File::open(path);
    for (const auto& t : f->tensors()) {
      if (t.shape.size() != 2 || t.name.find("blk.1.") != 0) continue;  // one layer's matrices
      const int64_t rows = t.shape[0], K = t.shape[1];
      const MatrixView mv{t.type, rows, K, gguf::ggml_row_bytes(t.type, K), t.data};
      constexpr int64_t T = 9;
      std::vector<float> x(T * K);
      std::mt19937 rng(3);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto& v : x) v = nd(rng);
      std::vector<float> y_gemm(T * rows), y_rows(T * rows);
      const MatmulTarget tg{mv, y_gemm.data(), rows};
      matmul(x.data(), T, K, &tg, 1);
      for (int64_t i = 0; i < T; ++i) {
        const MatmulTarget one{mv, y_rows.data() + i * rows, rows};
        matmul(x.data() + i * K, 1, K, &one, 1);
      }
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < T * rows; ++i) {
        worst = std::max(worst, static_cast<double>(std::abs(y_gemm[i] - y_rows[i])));
        scale = std::max(scale, static_cast<double>(std::abs(y_rows[i])));
      }
      EXPECT_LE(worst, 1e-4 * scale)
          << file << " " << t.name << " (" << gguf::ggml_type_name(static_cast<uint32_t>(t.type))
          << " " << rows << " x " << K << ")";
    }
  }
}

}  // namespace
}  // namespace kvevict::quant
