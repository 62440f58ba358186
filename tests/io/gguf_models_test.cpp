// The two embedded checkpoints: metadata matches the published architectures, every tensor
// dequantizes (row by row, as the model runtime does) to finite values, and the quantized types
// the files use are exercised on real data. Skips when the models have not been fetched.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "io/model_paths.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict {
namespace {

std::unique_ptr<gguf::File> open_model(const char* file) {
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
  if (!io::file_exists(path)) return nullptr;
  return gguf::File::open(path);
}

#define OPEN_OR_SKIP(var, file)                                                               \
  auto var = open_model(file);                                                                \
  if (!var)                                                                                   \
    GTEST_SKIP() << "model " << file << " not found in " << io::model_dir(KVEVICT_SOURCE_DIR) \
                 << "; run scripts/fetch_models.sh (or set KVEVICT_MODEL_DIR)";

// Dequantizes every row of every tensor; returns the set of types seen.
std::set<std::string> check_all_tensors_finite(const gguf::File& g) {
  std::set<std::string> types;
  std::vector<float> row;
  for (const auto& t : g.tensors()) {
    types.insert(gguf::ggml_type_name(static_cast<uint32_t>(t.type)));
    const int64_t n = t.shape.back();
    const int64_t row_bytes = gguf::ggml_row_bytes(t.type, n);
    EXPECT_EQ(static_cast<uint64_t>(row_bytes * t.rows()), t.nbytes) << t.name;
    row.assign(static_cast<size_t>(n), 0.0f);
    double sum_sq = 0;
    for (int64_t r = 0; r < t.rows(); ++r) {
      gguf::dequantize_row(t.type, t.data + r * row_bytes, row.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(row[i])) {
          ADD_FAILURE() << t.name << " row " << r << " col " << i << " = " << row[i];
          return types;
        }
        sum_sq += static_cast<double>(row[i]) * row[i];
      }
    }
    EXPECT_GT(sum_sq, 0.0) << t.name << " is all zeros";
  }
  return types;
}

void expect_layers(const gguf::File& g, const std::string& arch, int64_t layers, int64_t n_embd) {
  EXPECT_EQ(g.get_string("general.architecture", ""), arch);
  EXPECT_EQ(g.get_int(arch + ".block_count", -1), layers);
  EXPECT_EQ(g.get_int(arch + ".embedding_length", -1), n_embd);
  const int64_t vocab =
      static_cast<int64_t>(g.get("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens").size());
  const auto& emb = g.tensor("token_embd.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{vocab, n_embd}));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* w : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                          "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "attn_norm.weight",
                          "ffn_norm.weight"}) {
      const auto* t = g.find(p + w);
      ASSERT_NE(t, nullptr) << p + w;
      if (std::string(w) == "attn_q.weight") EXPECT_EQ(t->shape.back(), n_embd) << p + w;
      if (std::string(w) == "attn_norm.weight") EXPECT_EQ(t->shape, std::vector<int64_t>{n_embd});
    }
  }
  EXPECT_EQ(g.find("blk." + std::to_string(layers) + ".attn_q.weight"), nullptr);
}

TEST(GgufModels, SmolLM2MetadataAndTensors) {
  OPEN_OR_SKIP(g, io::kSmolLM2File);
  expect_layers(*g, "llama", 30, 576);
  EXPECT_EQ(g->get_int("llama.attention.head_count", -1), 9);
  EXPECT_EQ(g->get_int("llama.attention.head_count_kv", -1), 3);
  const auto types = check_all_tensors_finite(*g);
  EXPECT_TRUE(types.count("Q4_1")) << "SmolLM2 Q4_1 file without Q4_1 tensors";
}

TEST(GgufModels, Gemma3MetadataAndTensors) {
  OPEN_OR_SKIP(g, io::kGemma3File);
  expect_layers(*g, "gemma3", 18, 640);
  const auto types = check_all_tensors_finite(*g);
  EXPECT_TRUE(types.count("Q4_K") || types.count("Q5_K") || types.count("Q6_K"))
      << "Gemma 3 Q4_K_M file without K-quant tensors";
}

}  // namespace
}  // namespace kvevict
