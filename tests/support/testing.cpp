#include "support/testing.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kvevict/dtype.h"

namespace kvevict::testing {

std::vector<float> random_floats(size_t count, uint64_t seed, float scale, bool round_to_bf16) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(count);
  for (auto& x : out) x = round_to_bf16 ? round_bf16(dist(rng)) : dist(rng);
  return out;
}

std::vector<float> normal_floats(size_t count, uint64_t seed, float stddev, bool round_to_bf16) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(count);
  for (auto& x : out) x = round_to_bf16 ? round_bf16(dist(rng)) : dist(rng);
  return out;
}

::testing::AssertionResult all_close(const float* got, const double* ref, size_t count, double atol,
                                     double rtol, const std::string& what) {
  size_t bad = 0;
  double max_abs = 0, max_rel = 0;
  std::ostringstream first;
  for (size_t i = 0; i < count; ++i) {
    const double g = got[i], r = ref[i];
    const double err = std::abs(g - r);
    const bool ok = std::isfinite(g) && err <= atol + rtol * std::abs(r);
    max_abs = std::max(max_abs, std::isfinite(err) ? err : INFINITY);
    if (std::abs(r) > 0) max_rel = std::max(max_rel, err / std::abs(r));
    if (!ok) {
      if (bad < 8) first << "\n  [" << i << "] got " << g << " expected " << r;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << count << " mismatches (atol " << atol << ", rtol "
         << rtol << "), max abs err " << max_abs << ", max rel err " << max_rel
         << "; first:" << first.str();
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref,
                                     double atol, double rtol, const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != reference size " << ref.size();
  return all_close(got.data(), ref.data(), got.size(), atol, rtol, what);
}

}  // namespace kvevict::testing
