// The runtime against an independent implementation on the real embedded checkpoints:
// llama.cpp (through llama-cpp-python, tools/golden/model_golden.py) recorded the prompt ids,
// the last-position logits (top 50 + statistics) and 32 greedy tokens of 3 fixed prompts.
//
// The runtime has two weight formats (kvevict/model/weights.h): WeightFormat::kF32 (every weight
// dequantized, f32 activations: the arithmetic these references were recorded for) must meet the
// first reference exactly as before. The default WeightFormat::kNative multiplies the GGUF blocks
// with 8-bit quantized activations (src/quant), so its logits move by about as much as
// llama.cpp's own quantized run does; it is held to the criteria of NativeWeights below.
//
// Two references (see the tool):
//  - "cases": llama.cpp on an F32 copy of the checkpoint (same dequantized weights, f32
//    matmuls). Required: same top-1, the reference's top-10 inside our top-20, every top-50
//    logit within 2e-3 + 1e-3 |ref| (Gemma 3: 2e-3 |ref|), and the same 32 greedy tokens. Measured
//    max abs error over the top 50: SmolLM2 <= 2e-5 (summation order only); Gemma 3 <= 6.1e-3 (ggml
//    evaluates GELU through an f16 table, kvevict in f32).
//  - "quantized_cases": llama.cpp on the Q4 file, which quantizes activations to 8 bits for its
//    quantized matmuls; kvevict keeps them in f32, so logits differ by ~1e-2 relative. Required:
//    same top-1 and every top-50 logit within 0.15 |ref| (measured max abs error 0.26-0.52,
//    relative <= 0.12). Greedy continuations part at near-ties there (teacher-forced, 187 of
//    192 steps agree; the 5 others are margins <= 0.26), so they are not compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/model_paths.h"
#include "model/session.h"

namespace kvevict {
namespace {

struct GoldenModel {
  nlohmann::json golden;
  std::shared_ptr<const Model> model;
};

// Loads each model once per format for all its cases; skips when the model or golden file is
// absent.
const GoldenModel* golden_model(const std::string& name, const std::string& file, std::string* why,
                                WeightFormat format = WeightFormat::kF32) {
  static std::map<std::string, GoldenModel> cache;
  const std::string key = name + "/" + weight_format_name(format);
  auto it = cache.find(key);
  if (it != cache.end()) return &it->second;
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
  if (!io::file_exists(path)) {
    *why = path + " is absent; run scripts/fetch_models.sh";
    return nullptr;
  }
  const std::string gpath =
      std::string(KVEVICT_SOURCE_DIR) + "/tests/data/golden/" + name + ".json";
  std::ifstream in(gpath);
  if (!in) {
    *why = gpath + " is absent; run tools/golden/model_golden.py";
    return nullptr;
  }
  GoldenModel g;
  in >> g.golden;
  g.model = Model::load(path, ".", format);
  return &(cache[key] = std::move(g));
}

class Golden : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {};

struct LogitCheck {
  double max_abs = 0, max_rel = 0;
  bool within = true;
};

// Compares our last logits with a reference case; records the worst errors.
LogitCheck check_logits(const std::vector<float>& lg, const nlohmann::json& c, double atol,
                        double rtol, const std::string& what) {
  const std::vector<int32_t> top_ids = c.at("top_ids").get<std::vector<int32_t>>();
  const std::vector<double> top_logits = c.at("top_logits").get<std::vector<double>>();
  int32_t best = 0;
  for (size_t i = 1; i < lg.size(); ++i)
    if (lg[i] > lg[best]) best = static_cast<int32_t>(i);
  EXPECT_EQ(best, top_ids[0]) << what << ": top-1 differs";
  LogitCheck r;
  for (size_t k = 0; k < top_ids.size(); ++k) {
    const double ref = top_logits[k], got = lg[top_ids[k]];
    const double err = std::abs(got - ref);
    r.max_abs = std::max(r.max_abs, err);
    r.max_rel = std::max(r.max_rel, err / std::max(1.0, std::abs(ref)));
    if (err > atol + rtol * std::abs(ref)) r.within = false;
  }
  EXPECT_TRUE(r.within) << what << ": top-50 logits max abs error " << r.max_abs
                        << ", max relative error " << r.max_rel << " (tolerance " << atol << " + "
                        << rtol << " |ref|)";
  std::cout << "[golden] " << what << ": top-50 max abs error " << r.max_abs << ", max rel "
            << r.max_rel << "\n";
  return r;
}

TEST_P(Golden, LastLogitsAndGreedyContinuationMatchLlamaCpp) {
  const auto& [name, file, index] = GetParam();
  std::string why;
  const GoldenModel* g = golden_model(name, file, &why);
  if (g == nullptr) GTEST_SKIP() << why;
  const auto& c = g->golden.at("cases").at(index);
  const auto& cq = g->golden.at("quantized_cases").at(index);
  const std::vector<int32_t> tokens = c.at("tokens").get<std::vector<int32_t>>();
  ASSERT_EQ(tokens, cq.at("tokens").get<std::vector<int32_t>>());
  const std::vector<int32_t> greedy = c.at("greedy").get<std::vector<int32_t>>();

  Session s(g->model);
  s.prefill(tokens);
  ASSERT_EQ(static_cast<int64_t>(s.logits().size()), g->model->config().vocab_size);
  const std::string what = name + " prompt " + std::to_string(index);
  // Gemma's relative bound is 2e-3: ggml's f16 GELU table moves its logits by up to 1.5e-3 of
  // their size (max abs error 6.1e-3 at |ref| ~ 4 on an AMD EPYC VM, 2026-12-04; within 1e-3 |ref|
  // on the machines before), far below what a wrong weight, norm or RoPE would give (> 0.1).
  const double rtol = name.rfind("gemma3", 0) == 0 ? 2e-3 : 1e-3;
  check_logits(s.logits(), c, 2e-3, rtol, what + " vs llama.cpp f32");
  check_logits(s.logits(), cq, 0.0, 0.15, what + " vs llama.cpp quantized");
  // The reference's top-10 are all among our top-20.
  const std::vector<float>& lg = s.logits();
  std::vector<int32_t> ours(lg.size());
  for (size_t i = 0; i < ours.size(); ++i) ours[i] = static_cast<int32_t>(i);
  std::partial_sort(ours.begin(), ours.begin() + 20, ours.end(),
                    [&](int32_t a, int32_t b) { return lg[a] > lg[b]; });
  const std::vector<int32_t> top_ids = c.at("top_ids").get<std::vector<int32_t>>();
  for (int r = 0; r < 10; ++r)
    EXPECT_NE(std::find(ours.begin(), ours.begin() + 20, top_ids[r]), ours.begin() + 20)
        << what << ": reference rank-" << r << " token " << top_ids[r] << " not in our top 20";

  Sampler greedy_sampler;
  const GenerateResult out = s.generate(static_cast<int>(greedy.size()), greedy_sampler);
  EXPECT_EQ(out.tokens, greedy) << what << ": greedy continuation differs from llama.cpp f32";
}

// The quantized runtime (GGUF blocks x A8 activations) against the same f32 reference, with
// llama.cpp's own quantized run as the yardstick of how far 8-bit activations may move logits.
//
// Why not the largest error over the top 50. A8 rounds every activation of every layer to 8 bits;
// which way a value near a rounding boundary goes depends on the last bits of the f32
// activations, i.e. on the summation order of everything before it (compiler, -O level,
// -march, GEMM panels vs row kernels). One flipped rounding moves the next layer a little, which
// flips others, so the error vs the f32 reference is a fresh pseudo-random draw per summation
// order: its SIZE is set by the A8 precision, its value at any one logit is not reproducible.
// Measured on SmolLM2 prompt 0, the same build prefilled in chunks of 5 / 1 / 2 / 3 / 4 tokens
// (nothing but f32 summation orders changed): top-50 max abs error 0.53 / 0.74 / 0.61 / 0.64 /
// 0.59, while llama.cpp's quantized run has 0.28 — the former bound (2x that + 0.05 = 0.61) was
// crossed by a summation order alone (a -O1 or non-native build did the same: 0.64).
//
// What is compared instead, over the reference's top-50 ids:
//  - the error after removing its mean: softmax ignores a common shift, and most of our error is
//    one (SmolLM2 prompt 0: RMS 0.30, 0.10 without the shift; llama.cpp's 0.11 / 0.11);
//  - its RMS, an average over the 50 logits instead of the worst draw, and pooled over two
//    summation orders of the same arithmetic (the prompt in one chunk: GEMM panels from 4 tokens
//    on; and token by token: the row kernels), so the statistic itself is measured twice;
//  - against the same statistic of llama.cpp's quantized run (on the ids both top-50 lists
//    share), within the STYLE rule's 2x.
// Measured spread of that statistic under the chunkings above, as a ratio to llama.cpp's: per
// run 0.57 - 1.63, pooled over the two runs 0.58 - 1.32 (SmolLM2 0.99 - 1.32, Gemma 3 0.58 -
// 0.77). A real regression moves every run the same way (checked by breaking quant/matmul.cpp
// locally, not committed): zeroing the A8 16-element sums (a dropped offset term of Q4_1 / Q5_0
// / the K-quants) gives 25 - 64x and a wrong top-1; a 2% scale error on alternate output rows
// of every product (+2% odd rows, -2% even rows) gives 2.03 - 4.4x: all 6 prompts fail.
// Also required: the same top-1 as the f32 reference in both runs; teacher-forced on the
// reference's 32 greedy tokens, our argmax is the reference token on at least 28 of the 32 steps
// and the reference token is in our top 5 on every step (free-running greedy text cannot be
// compared: llama.cpp's quantized run itself leaves the f32 continuation after 2 to 32 tokens on
// these prompts, at near-ties).

// Sum of squares of (got - ref) with its mean removed, and the count: the shift-free residuals.
struct Residuals {
  double sum_sq = 0;
  int64_t n = 0;
  void add(const std::vector<double>& ref, const std::vector<double>& got) {
    double mean = 0;
    for (size_t i = 0; i < ref.size(); ++i) mean += got[i] - ref[i];
    mean /= static_cast<double>(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = got[i] - ref[i] - mean;
      sum_sq += e * e;
    }
    n += static_cast<int64_t>(ref.size());
  }
  double rms() const { return n > 0 ? std::sqrt(sum_sq / static_cast<double>(n)) : 0.0; }
};

TEST_P(Golden, NativeWeightsStayWithinTheQuantizedYardstick) {
  const auto& [name, file, index] = GetParam();
  std::string why;
  const GoldenModel* g = golden_model(name, file, &why, WeightFormat::kNative);
  if (g == nullptr) GTEST_SKIP() << why;
  const auto& c = g->golden.at("cases").at(index);
  const auto& cq = g->golden.at("quantized_cases").at(index);
  const std::vector<int32_t> tokens = c.at("tokens").get<std::vector<int32_t>>();
  const std::vector<int32_t> ref_ids = c.at("top_ids").get<std::vector<int32_t>>();
  const std::vector<double> ref_logits = c.at("top_logits").get<std::vector<double>>();
  const std::vector<int32_t> q_ids = cq.at("top_ids").get<std::vector<int32_t>>();
  const std::vector<double> q_logits = cq.at("top_logits").get<std::vector<double>>();
  std::vector<double> shared_ref, shared_q;
  for (size_t i = 0; i < ref_ids.size(); ++i)
    for (size_t j = 0; j < q_ids.size(); ++j)
      if (q_ids[j] == ref_ids[i]) {
        shared_ref.push_back(ref_logits[i]);
        shared_q.push_back(q_logits[j]);
      }
  ASSERT_GE(shared_ref.size(), 25u) << "the two reference top-50 lists share too few ids";
  Residuals yard;
  yard.add(shared_ref, shared_q);
  const double yardstick = yard.rms();
  ASSERT_GT(yardstick, 0.0);
  const std::string what = name + " prompt " + std::to_string(index) + " native weights";

  Residuals ours;
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (const int64_t chunk : {n, int64_t{1}}) {
    SessionOptions opt;
    opt.chunk = chunk;
    Session run(g->model, opt);
    run.prefill(tokens);
    const std::vector<float>& lg = run.logits();
    EXPECT_EQ(std::max_element(lg.begin(), lg.end()) - lg.begin(), ref_ids[0])
        << what << " (prefill chunk " << chunk << "): top-1 differs from llama.cpp f32";
    std::vector<double> got;
    got.reserve(ref_ids.size());
    for (int32_t id : ref_ids) got.push_back(lg[id]);
    ours.add(ref_logits, got);
  }
  std::cout << "[golden] " << what << ": shift-free top-50 RMS error " << ours.rms()
            << " (two summation orders) vs llama.cpp quantized " << yardstick << " (ratio "
            << ours.rms() / yardstick << ")\n";
  EXPECT_LE(ours.rms(), 2 * yardstick)
      << what << ": shift-free top-50 RMS error " << ours.rms() << " exceeds 2x llama.cpp "
      << "quantized's " << yardstick;

  Session s(g->model);
  s.prefill(tokens);
  const std::vector<int32_t> greedy = c.at("greedy").get<std::vector<int32_t>>();
  int agree = 0;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const std::vector<float>& lg = s.logits();
    int above = 0;  // logits above the reference token's
    for (float v : lg) above += v > lg[greedy[i]];
    agree += above == 0;
    EXPECT_LT(above, 5) << what << ": step " << i << " reference token " << greedy[i]
                        << " is not in our top 5";
    if (i + 1 < greedy.size()) s.decode(greedy[i]);
  }
  std::cout << "[golden] " << what << ": teacher-forced argmax agrees on " << agree << " of "
            << greedy.size() << " steps\n";
  EXPECT_GE(agree, 28) << what << ": teacher-forced greedy agrees on only " << agree << " of "
                       << greedy.size();
}

INSTANTIATE_TEST_SUITE_P(Models, Golden,
                         ::testing::Combine(::testing::Values(std::string("smollm2")),
                                            ::testing::Values(std::string(io::kSmolLM2File)),
                                            ::testing::Range(0, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<2>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Gemma, Golden,
                         ::testing::Combine(::testing::Values(std::string("gemma3-270m")),
                                            ::testing::Values(std::string(io::kGemma3File)),
                                            ::testing::Range(0, 3)),
                         [](const auto& info) {
                           return std::string("gemma3_") + std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace kvevict
