// Encoding a long document (more than 32K tokens) must stay well under a second (priority-queue
// BPE, no quadratic rescans), and the long encoding must still decode back to the text.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/model_paths.h"
#include "kvevict/io/gguf.h"
#include "kvevict/tokenizer.h"

namespace kvevict {
namespace {

// A long text built from the golden strings (prose, code, CJK, digits, emoji).
std::string long_text() {
  std::ifstream in(std::string(KVEVICT_SOURCE_DIR) + "/tests/data/tokenizer/smollm2.json");
  const auto g = nlohmann::json::parse(in);
  std::string unit;
  for (const auto& c : g["cases"]) {
    const std::string t = c["text"];
    if (t.find("<|") == std::string::npos && t.find("<start_of") == std::string::npos)
      unit += t + "\n";
  }
  std::string text;
  while (text.size() < 140000) text += unit;
  return text;
}

void time_encode(const char* file, double limit_s) {
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
  if (!io::file_exists(path)) GTEST_SKIP() << file << " absent; run scripts/fetch_models.sh";
  auto g = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*g);
  const std::string text = long_text();
  tok->encode(text.substr(0, 2000), false);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok->encode(text, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %zu bytes -> %zu tokens in %.3f s (%.0f tokens/s)\n", file, text.size(),
              ids.size(), s, ids.size() / s);
  EXPECT_GE(ids.size(), 30000u);
  EXPECT_LT(s, limit_s) << "encoding " << ids.size() << " tokens took " << s << " s";
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(TokenizerSpeed, SmolLM2Encodes32KTokensQuickly) {
  time_encode(io::kSmolLM2File, 1.0);
}
TEST(TokenizerSpeed, Gemma3Encodes32KTokensQuickly) {
  time_encode(io::kGemma3File, 1.0);
}

}  // namespace
}  // namespace kvevict
