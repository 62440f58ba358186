// Bad input to ref::score and cpu::score: each case must throw kvevict::Error whose message names
// the bad value.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kvevict/error.h"
#include "kvevict/score.h"
#include "score/problem_builder.h"

namespace kvevict {
namespace {

using testing::make_shape;
using testing::ProblemBuilder;

// Runs both backends on (problem, opt) and checks each throws an Error mentioning `needle`.
void expect_both_throw(const ScoreProblem& p, const ScoreOptions& opt, const std::string& needle) {
  const std::function<void()> runs[] = {
      [&] { ref::score(p, opt); },
      [&] {
        // Size the workspace generously without trusting score_workspace_bytes (it validates too).
        std::vector<uint8_t> ws(1 << 20);
        std::vector<float> out(
            static_cast<size_t>(std::max<int64_t>(1, p.k.shape[0] * p.k.shape[1])));
        ScoreOutput o;
        o.scores = TensorView(out.data(), DType::kF32, {p.k.shape[0], p.k.shape[1]});
        o.aux = o.scores;
        cpu::score(p, opt, o, Workspace{ws.data(), ws.size()});
      }};
  const char* backend[] = {"ref", "cpu"};
  for (int i = 0; i < 2; ++i) {
    try {
      runs[i]();
      ADD_FAILURE() << backend[i] << ": expected an Error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << backend[i] << ": message '" << e.what() << "' lacks '" << needle << "'";
    }
  }
}

ScoreOptions window(Method m, int w) {
  ScoreOptions o = ScoreOptions::defaults(m);
  o.window = w;
  o.pooling = Pooling{};
  return o;
}

TEST(ScoreValidate, ShapeMismatches) {
  ProblemBuilder b(make_shape(2, 2, 4, 17, 8), 1);
  const ScoreOptions opt = window(Method::kDropKV, 4);
  {
    ScoreProblem p = b.problem();
    p.v.shape[1] = 16;  // v has fewer tokens than k
    expect_both_throw(p, opt, "[2, 16, 8]");
  }
  {
    ScoreProblem p = b.problem();
    p.q.shape[2] = 6;  // head dim mismatch
    expect_both_throw(p, opt, "head dim 6");
  }
  {
    ScoreProblem p = b.problem();
    p.q.shape[0] = 3;  // 3 query heads for 2 KV heads
    expect_both_throw(p, opt, "3 heads");
  }
  {
    ScoreProblem p = b.problem();
    p.k.ndim = 2;
    expect_both_throw(p, opt, "k has shape");
  }
  {
    ScoreProblem p = b.problem();
    p.q = TensorView();
    expect_both_throw(p, opt, "q is empty");
  }
}

TEST(ScoreValidate, TooFewOrTooManyQueries) {
  ProblemBuilder b(make_shape(1, 2, 4, 17, 8), 2);
  expect_both_throw(b.problem(), window(Method::kDropKV, 5), "holds 4 queries");
  // h2o needs all 17 queries.
  expect_both_throw(b.problem(), ScoreOptions::defaults(Method::kH2O), "needs 17");
  ProblemBuilder many(make_shape(1, 1, 9, 5, 8), 3);
  ScoreProblem p = many.problem();
  p.k.shape[1] = p.v.shape[1] = 5;
  expect_both_throw(p, window(Method::kSnapKV, 2), "only 5 tokens");
}

TEST(ScoreValidate, AggregationsFixedByTheMethod) {
  ProblemBuilder b(make_shape(1, 2, 17, 17, 8), 4);
  ScoreOptions h2o = ScoreOptions::defaults(Method::kH2O);
  h2o.aggregate = Aggregate::kWindow;
  expect_both_throw(b.problem(), h2o, "h2o");
  ScoreOptions tova = ScoreOptions::defaults(Method::kTOVA);
  tova.aggregate = Aggregate::kAllQueries;
  expect_both_throw(b.problem(), tova, "tova");
}

TEST(ScoreValidate, UnknownEnumCodes) {
  ProblemBuilder b(make_shape(1, 2, 4, 17, 8), 12);
  ScoreOptions agg = window(Method::kObcacheK, 4);
  agg.aggregate = static_cast<Aggregate>(7);
  expect_both_throw(b.problem(), agg, "aggregation code 7");
  ScoreOptions meth = window(Method::kDropKV, 4);
  meth.method = static_cast<Method>(42);
  expect_both_throw(b.problem(), meth, "method code 42");
}

TEST(ScoreValidate, MissingOrMisshapenOutputProjection) {
  ProblemBuilder b(make_shape(1, 2, 4, 17, 8), 5);
  expect_both_throw(b.problem(), window(Method::kCriticalKV, 4), "wo");
  std::vector<float> wo(3 * 8);
  ScoreProblem p = b.problem();
  p.wo = TensorView(wo.data(), DType::kF32, {3, 8});  // needs Hq * d = 16 columns
  expect_both_throw(p, window(Method::kCriticalKV, 4), "[3, 8]");
}

TEST(ScoreValidate, NonFiniteInputsNamed) {
  for (const char* which : {"q", "k", "v"}) {
    ProblemBuilder b(make_shape(1, 2, 4, 17, 8), 6, DType::kBF16);
    std::vector<uint8_t>& buf = std::string(which) == "q"   ? b.q_storage()
                                : std::string(which) == "k" ? b.k_storage()
                                                            : b.v_storage();
    b.poke(buf, 13, std::string(which) == "v" ? INFINITY : NAN);
    expect_both_throw(b.problem(), window(Method::kDropKV, 4),
                      std::string(which) + " holds a non-finite value");
    // snapkv never reads v in its passes; the value scan must still catch it.
    expect_both_throw(b.problem(), window(Method::kSnapKV, 4),
                      std::string(which) + " holds a non-finite value");
  }
  ProblemBuilder b(make_shape(1, 1, 1, 17, 8), 7);
  b.poke(b.k_storage(), 5, NAN);
  expect_both_throw(b.problem(), ScoreOptions::defaults(Method::kRandom), "k holds a non-finite");
  expect_both_throw(b.problem(), ScoreOptions::defaults(Method::kKNorm), "k holds a non-finite");
}

TEST(ScoreValidate, BadOptions) {
  ProblemBuilder b(make_shape(1, 1, 4, 17, 8), 8);
  ScoreOptions opt = window(Method::kSnapKV, 4);
  opt.pooling = Pooling{PoolKind::kMax, 4};
  expect_both_throw(b.problem(), opt, "pooling kernel 4");
  ScoreOptions knorm = ScoreOptions::defaults(Method::kKNorm);
  knorm.pooling = Pooling{PoolKind::kMax, 3};
  expect_both_throw(b.problem(), knorm, "query-free");
  ScoreOptions neg = window(Method::kDropKV, 4);
  neg.scale = -1.0f;
  expect_both_throw(b.problem(), neg, "scale -1");
}

TEST(ScoreValidate, UnsupportedDtype) {
  ProblemBuilder b(make_shape(1, 1, 4, 17, 8), 9);
  ScoreProblem p = b.problem();
  p.k.dtype = DType::kI32;
  expect_both_throw(p, window(Method::kDropKV, 4), "k has dtype i32");
}

TEST(CpuScoreWorkspace, TooSmallOrWrongOutputThrows) {
  ProblemBuilder b(make_shape(2, 2, 4, 1000, 24), 10);
  const ScoreOptions opt = window(Method::kDropKV, 4);
  const size_t bytes = cpu::score_workspace_bytes(b.problem(), opt);
  std::vector<uint8_t> ws(bytes);
  std::vector<float> out(2 * 1000);
  ScoreOutput o;
  o.scores = TensorView(out.data(), DType::kF32, {2, 1000});
  // A workspace below the fixed part plus one worker slot is refused. (Anything from there up to
  // `bytes` works, with fewer worker slots, so only a clearly short size is a portable test.)
  try {
    cpu::score(b.problem(), opt, o, Workspace{ws.data(), 64});
    ADD_FAILURE() << "expected a workspace error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("64 bytes is too small"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu::score(b.problem(), opt, o, Workspace{nullptr, 0}), Error);
  ScoreOutput wrong;
  wrong.scores = TensorView(out.data(), DType::kF32, {2, 999});
  try {
    cpu::score(b.problem(), opt, wrong, Workspace{ws.data(), bytes});
    ADD_FAILURE() << "expected an output shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 999]"), std::string::npos) << e.what();
  }
  // criticalkv needs aux as well.
  ProblemBuilder c(make_shape(2, 2, 4, 1000, 24, 3), 11);
  const ScoreOptions crit = window(Method::kCriticalKV, 4);
  std::vector<uint8_t> ws2(cpu::score_workspace_bytes(c.problem(), crit));
  EXPECT_THROW(cpu::score(c.problem(), crit, o, Workspace{ws2.data(), ws2.size()}), Error);
}

}  // namespace
}  // namespace kvevict
