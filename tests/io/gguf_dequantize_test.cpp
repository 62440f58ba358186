// Dequantization against gguf-py (tools/golden/gguf_dequant_golden.py): random blocks of every
// supported type, and sampled rows of the real checkpoints. Plus hand-built blocks with values
// worked out by hand, and the block-size contract of dequantize_row.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/dtype.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
#include "support/testing.h"

namespace kvevict {
namespace {

using nlohmann::json;

json load_golden() {
  const std::string path =
      std::string(KVEVICT_SOURCE_DIR) + "/tests/io/data/gguf_dequant_golden.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return json::parse(in);
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(GgufDequantize, MatchesGgufPyOnRandomBlocksOfEveryType) {
  const json g = load_golden();
  std::set<std::string> seen;
  for (const auto& b : g["blocks"]) {
    const std::string name = b["type"];
    const auto type = static_cast<gguf::GgmlType>(b["code"].get<uint32_t>());
    ASSERT_TRUE(gguf::ggml_type_supported(static_cast<uint32_t>(type))) << name;
    EXPECT_EQ(gguf::ggml_type_name(static_cast<uint32_t>(type)), name);
    const auto bytes = from_hex(b["hex"]);
    const std::vector<double> ref = b["values"].get<std::vector<double>>();
    const int64_t n = static_cast<int64_t>(ref.size());
    ASSERT_EQ(gguf::ggml_row_bytes(type, n), static_cast<int64_t>(bytes.size())) << name;
    testing::Guarded<float> out(ref.size(), -12345.0f);
    gguf::dequantize_row(type, bytes.data(), out.data(), n);
    EXPECT_TRUE(out.intact()) << name << ": wrote outside the output";
    // gguf-py computes in float32 with its own operation order: allow float32 rounding.
    EXPECT_TRUE(testing::all_close(out.values(), ref, 1e-30, 2e-6, name));
    seen.insert(name);
  }
  EXPECT_EQ(seen.size(), 11u) << "golden file should cover all 11 supported types";
}

TEST(GgufDequantize, MatchesGgufPyOnRealModelRows) {
  const json g = load_golden();
  int checked = 0;
  for (const auto& m : g["models"]) {
    const std::string path = io::model_path(KVEVICT_SOURCE_DIR, m["file"].get<std::string>());
    if (!io::file_exists(path)) continue;
    auto file = gguf::File::open(path);
    for (const auto& r : m["rows"]) {
      const auto& t = file->tensor(r["tensor"].get<std::string>());
      EXPECT_EQ(gguf::ggml_type_name(static_cast<uint32_t>(t.type)), r["type"].get<std::string>());
      const int64_t n = t.shape.back(), row = r["row"].get<int64_t>();
      ASSERT_LT(row, t.rows()) << t.name;
      std::vector<float> out(static_cast<size_t>(n));
      gguf::dequantize_row(t.type, t.data + row * gguf::ggml_row_bytes(t.type, n), out.data(), n);
      const std::vector<double> first = r["first"].get<std::vector<double>>();
      const std::string what = t.name + " row " + std::to_string(row);
      EXPECT_TRUE(testing::all_close(out.data(), first.data(), first.size(), 1e-30, 2e-6, what));
      double sum = 0, sum_sq = 0;
      for (float x : out) sum += x, sum_sq += static_cast<double>(x) * x;
      const double ref_sq = r["sum_sq"].get<double>();
      EXPECT_NEAR(sum_sq, ref_sq, 1e-5 * ref_sq) << what;
      EXPECT_NEAR(sum, r["sum"].get<double>(), 1e-5 * std::sqrt(ref_sq * n)) << what;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "models absent; run scripts/fetch_models.sh";
}

void put_half(std::vector<uint8_t>& b, float f) {
  const uint16_t h = float_to_half(f);
  b.push_back(static_cast<uint8_t>(h & 0xFF));
  b.push_back(static_cast<uint8_t>(h >> 8));
}

TEST(GgufDequantize, HandBuiltQ4AndQ5Blocks) {
  // Q4_0 with d = 0.25: byte j holds element j (low nibble) and element j + 16 (high nibble).
  std::vector<uint8_t> q40;
  put_half(q40, 0.25f);
  for (int j = 0; j < 16; ++j) q40.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  float y[32];
  gguf::dequantize_row(gguf::GgmlType::kQ4_0, q40.data(), y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * (j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.25f * (15 - j - 8)) << j + 16;
  }
  // Q5_1 with d = 0.5, m = -1: high bits set for elements 3 and 20 only.
  std::vector<uint8_t> q51;
  put_half(q51, 0.5f);
  put_half(q51, -1.0f);
  const uint32_t qh = (1u << 3) | (1u << 20);
  for (int k = 0; k < 4; ++k) q51.push_back(static_cast<uint8_t>(qh >> (8 * k)));
  for (int j = 0; j < 16; ++j) q51.push_back(static_cast<uint8_t>(1 | (2 << 4)));
  gguf::dequantize_row(gguf::GgmlType::kQ5_1, q51.data(), y, 32);
  for (int j = 0; j < 32; ++j) {
    const int q = (j < 16 ? 1 : 2) + ((j == 3 || j == 20) ? 16 : 0);
    EXPECT_EQ(y[j], 0.5f * q - 1.0f) << j;
  }
}

TEST(GgufDequantize, HandBuiltQ6KBlock) {
  // All 4-bit parts 5, all 2-bit parts 1 -> q = 5 + 16 - 32 = -11; scale of group g is g - 8.
  std::vector<uint8_t> b(128, 0x55);
  b.insert(b.end(), 64, 0x55);  // qh: every 2-bit field = 1
  for (int g = 0; g < 16; ++g) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(g - 8)));
  put_half(b, 0.5f);
  ASSERT_EQ(static_cast<int64_t>(b.size()), gguf::ggml_block_bytes(gguf::GgmlType::kQ6_K));
  float y[256];
  gguf::dequantize_row(gguf::GgmlType::kQ6_K, b.data(), y, 256);
  // Elements come in groups of 16 with their own scale, in element order.
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 0.5f * (i / 16 - 8) * -11) << i;
}

// values_finite (the load-time weight scan) decides from the scales alone; it must agree with
// dequantizing and testing every value, for random blocks of every type whose scale fields
// (and, for F16 / BF16 / F32, elements) are random bits, the largest finite half, inf and NaN.
TEST(GgufDequantize, ValuesFiniteAgreesWithDequantizingEveryValue) {
  using namespace gguf;
  std::mt19937 rng(20261201);
  const uint16_t specials[] = {0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x0001, 0x0000};
  int nonfinite_seen = 0, finite_seen = 0;
  for (const GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0,
                           GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const int64_t be = ggml_block_elems(t), bb = ggml_block_bytes(t);
    const int64_t blocks = be == 1 ? 96 : 3;
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<uint8_t> bytes(static_cast<size_t>(blocks * bb));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      // Half of the trials put a special half at a random even offset (a scale or an element).
      if (trial % 2 == 0) {
        const size_t at = 2 * (rng() % (bytes.size() / 2));
        const uint16_t h = specials[rng() % 8];
        bytes[at] = static_cast<uint8_t>(h & 0xFF);
        bytes[at + 1] = static_cast<uint8_t>(h >> 8);
      }
      // The other half make every quantized block's scales finite (random bits are often not).
      if (trial % 2 == 1 && be > 1) {
        for (int64_t i = 0; i < blocks; ++i)
          for (const int64_t off : {int64_t{0}, int64_t{2}, int64_t{208}})
            if (off + 2 <= bb) bytes[static_cast<size_t>(i * bb + off + 1)] &= 0x3F;
      }
      const int64_t n = blocks * be;
      std::vector<float> y(static_cast<size_t>(n));
      dequantize(t, bytes.data(), y.data(), n);
      bool all_finite = true;
      for (const float v : y) all_finite &= std::isfinite(v);
      ASSERT_EQ(values_finite(t, bytes.data(), n), all_finite)
          << ggml_type_name(static_cast<uint32_t>(t)) << " trial " << trial;
      (all_finite ? finite_seen : nonfinite_seen)++;
    }
  }
  // Both outcomes occur often enough for the agreement to mean something.
  EXPECT_GT(finite_seen, 500);
  EXPECT_GT(nonfinite_seen, 500);
}

TEST(GgufDequantize, RowLengthMustBeWholeBlocks) {
  std::vector<uint8_t> b(200);
  float y[64];
  EXPECT_THROW(gguf::dequantize_row(gguf::GgmlType::kQ4_0, b.data(), y, 31), Error);
  EXPECT_THROW(gguf::ggml_row_bytes(gguf::GgmlType::kQ4_K, 300), Error);
  EXPECT_EQ(gguf::ggml_row_bytes(gguf::GgmlType::kQ4_K, 512), 288);
  EXPECT_EQ(gguf::ggml_row_bytes(gguf::GgmlType::kF16, 7), 14);
  try {
    gguf::dequantize_row(gguf::GgmlType::kQ8_0, b.data(), y, 33);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("33"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("block size 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
