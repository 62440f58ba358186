// Token pooling (score/pooling.h): the in-place form equals the out-of-place one, and a NaN score
// reaches exactly the pooled tokens whose window holds it, for max as for avg (a max that drops
// NaN would hand its neighbours finite scores; issue 13).
#include "score/pooling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvevict::score_detail {
namespace {

TEST(Pooling, InPlaceEqualsOutOfPlaceAndNanReachesItsWindowOnly) {
  for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAvg})
    for (const int kernel : {3, 7})
      for (const int64_t at : {int64_t{0}, int64_t{9}, int64_t{18}}) {
        SCOPED_TRACE(std::to_string(kernel) + (kind == PoolKind::kMax ? " max" : " avg") +
                     " NaN at " + std::to_string(at));
        const int64_t n = 19, r = kernel / 2;
        std::vector<float> in(n);
        for (int64_t j = 0; j < n; ++j) in[j] = std::sin(0.7f * static_cast<float>(j)) - 0.2f;
        in[at] = std::nanf("");
        const Pooling pooling{kind, kernel};
        std::vector<float> out(n), inplace = in, ring(kernel);
        pool_tokens(in.data(), out.data(), n, pooling);
        pool_tokens_inplace(inplace.data(), n, pooling, ring.data());
        for (int64_t j = 0; j < n; ++j) {
          const bool reads = j - r <= at && at <= j + r;
          EXPECT_EQ(std::isnan(out[j]), reads) << "token " << j;
          if (reads) {
            EXPECT_TRUE(std::isnan(inplace[j])) << "in place, token " << j;
          } else {
            EXPECT_EQ(inplace[j], out[j]) << "token " << j;
          }
        }
      }
}

}  // namespace
}  // namespace kvevict::score_detail
