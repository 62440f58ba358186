#include "kvevict/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kvevict/error.h"

namespace kvevict {

void SamplerOptions::validate() const {
  KVEVICT_CHECK(temperature >= 0 && std::isfinite(temperature), "sampler temperature ", temperature,
                " is invalid; expected >= 0 (0 = greedy)");
  KVEVICT_CHECK(top_k >= 0, "sampler top_k ", top_k, " is invalid; expected >= 0 (0 = off)");
  KVEVICT_CHECK(top_p > 0 && top_p <= 1, "sampler top_p ", top_p,
                " is invalid; expected 0 < top_p <= 1");
}

std::string SamplerOptions::describe() const {
  std::ostringstream os;
  if (temperature == 0) {
    os << "greedy";
  } else {
    os << "temperature=" << temperature << " top_k=" << top_k << " top_p=" << top_p
       << " seed=" << seed;
  }
  return os.str();
}

double logits_nll(const std::vector<float>& logits, int32_t target) {
  KVEVICT_CHECK(target >= 0 && static_cast<size_t>(target) < logits.size(), "target token ", target,
                " is out of range; expected 0 .. ", logits.size() - 1);
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum) - logits[static_cast<size_t>(target)];
}

namespace {

// The first index of the largest value; a NaN never wins, except a NaN first element.
int32_t argmax_scalar(const float* x, size_t n) {
  int32_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace

int32_t argmax(const std::vector<float>& logits) {
  KVEVICT_CHECK(!logits.empty(), "argmax of empty logits");
  const float* x = logits.data();
  const size_t n = logits.size();
  // Two passes that vectorize (the maximum, then its first index) instead of one loop whose
  // every step depends on the last: a greedy step scans the whole vocabulary (262K for Gemma).
  // Where a NaN could make the reduction's answer differ from argmax_scalar's (a NaN first, or a
  // maximum no element equals), the scalar loop answers.
  if (std::isnan(x[0])) return argmax_scalar(x, n);
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (size_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  for (size_t i = 0; i < n; ++i)
    if (x[i] == mx) return static_cast<int32_t>(i);
  return argmax_scalar(x, n);
}

Sampler::Sampler(SamplerOptions opt) : opt_(opt), rng_(opt.seed) {
  opt_.validate();
}

int32_t Sampler::sample(const std::vector<float>& logits) {
  // A NaN would break the sort's ordering below (undefined behaviour) and make greedy pick an
  // arbitrary id: refuse it (non-finite weights reach here; the loader does not scan values).
  // One vectorized pass finds whether any is NaN (x != x); only then is the first one located.
  const float* x = logits.data();
  const size_t n = logits.size();
  int any_nan = 0;
#pragma omp simd reduction(| : any_nan)
  for (size_t i = 0; i < n; ++i) any_nan |= static_cast<int>(x[i] != x[i]);  // NOLINT: NaN test
  if (any_nan != 0) {
    const size_t i =
        static_cast<size_t>(std::find_if(x, x + n, [](float v) { return std::isnan(v); }) - x);
    KVEVICT_FAIL("logit ", i, " is NaN; expected finite logits (does the model hold ",
                 "non-finite weights?)");
  }
  if (opt_.temperature == 0) return argmax(logits);
  const int32_t V = static_cast<int32_t>(logits.size());
  KVEVICT_CHECK(V > 0, "sampling from empty logits");
  ids_.resize(V);
  for (int32_t i = 0; i < V; ++i) ids_[i] = i;
  // Order by logit (ties toward the lower id) so top-k / top-p cut a deterministic prefix.
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int32_t keep = V;
  if (opt_.top_k > 0 && opt_.top_k < V) {
    keep = opt_.top_k;
    std::partial_sort(ids_.begin(), ids_.begin() + keep, ids_.end(), better);
  } else {
    std::sort(ids_.begin(), ids_.end(), better);
  }
  probs_.resize(keep);
  const double mx = logits[ids_[0]];
  double sum = 0;
  for (int32_t i = 0; i < keep; ++i) {
    probs_[i] = std::exp((logits[ids_[i]] - mx) / opt_.temperature);
    sum += probs_[i];
  }
  if (opt_.top_p < 1.0f) {
    double mass = 0;
    int32_t cut = keep;
    for (int32_t i = 0; i < keep; ++i) {
      mass += probs_[i] / sum;
      if (mass >= opt_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0;
    for (int32_t i = 0; i < keep; ++i) sum += probs_[i];
  }
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double acc = 0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return ids_[i];
  }
  return ids_[keep - 1];
}

}  // namespace kvevict
