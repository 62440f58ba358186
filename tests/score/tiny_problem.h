// A hand-sized scoring problem (n = 3, d = 2, one head, two window queries) with its expected
// dropkv and obcache_vk scores written out from the formulas with explicit differences a - v,
// independent of the library's code. Shared by the reference and the CPU tests.
#pragma once

#include <cmath>
#include <vector>

#include "kvevict/score.h"

namespace kvevict::testing {

// n = 3 tokens, d = 2, one head, two window queries at positions 1 and 2; scale 1.
struct Tiny {
  float q[2][2] = {{1.0f, 0.0f}, {0.5f, -1.0f}};
  float k[3][2] = {{1.0f, 2.0f}, {0.0f, 1.0f}, {-1.0f, 0.5f}};
  float v[3][2] = {{1.0f, 0.0f}, {0.0f, 2.0f}, {1.0f, 1.0f}};
  ScoreProblem problem() {
    ScoreProblem p;
    p.q = TensorView(&q[0][0], DType::kF32, {1, 2, 2});
    p.k = TensorView(&k[0][0], DType::kF32, {1, 3, 2});
    p.v = TensorView(&v[0][0], DType::kF32, {1, 3, 2});
    p.scale = 1.0f;
    return p;
  }
  // The per-token sums written out with explicit differences a - v (no norm identity).
  std::vector<double> expected(Method method) const {
    std::vector<double> score(3, 0.0);
    for (int t = 0; t < 2; ++t) {
      const int visible = t + 2;  // query t sits at position 1 + t
      double z[3], p[3], a[2] = {0, 0}, sum = 0;
      for (int j = 0; j < visible; ++j) {
        z[j] = q[t][0] * k[j][0] + q[t][1] * k[j][1];
        sum += std::exp(z[j]);
      }
      for (int j = 0; j < visible; ++j) {
        p[j] = std::exp(z[j]) / sum;
        a[0] += p[j] * v[j][0];
        a[1] += p[j] * v[j][1];
      }
      for (int j = 0; j < visible; ++j) {
        const double dx = a[0] - v[j][0], dy = a[1] - v[j][1];
        const double diff2 = dx * dx + dy * dy;
        const double vv = v[j][0] * v[j][0] + v[j][1] * v[j][1];
        const double va = v[j][0] * a[0] + v[j][1] * a[1];
        if (method == Method::kDropKV) {
          score[j] += (p[j] / (1 - p[j])) * (p[j] / (1 - p[j])) * diff2;
        } else {  // obcache_vk
          score[j] += p[j] * p[j] * vv + (p[j] * z[j]) * (p[j] * z[j]) * diff2 +
                      2 * p[j] * p[j] * z[j] * (vv - va);
        }
      }
    }
    return score;
  }
};

}  // namespace kvevict::testing
