// A seeded random source for the task generators whose output is the same on every platform and
// standard library (std::uniform_int_distribution is implementation-defined, so samples built with
// it would differ between libstdc++ and libc++ and the seeds in a results table would not
// reproduce them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::eval {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();  // xoshiro256** step
  // Uniform integer in [0, n), unbiased (rejection); n must be > 0.
  uint64_t uniform(uint64_t n);
  // Uniform integer in [lo, hi], inclusive.
  int64_t uniform_int(int64_t lo, int64_t hi);
  // k distinct values of [0, n) in random order (Python's random.sample(range(n), k)).
  std::vector<int64_t> sample_indices(int64_t n, int64_t k);
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(uniform(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  uint64_t s_[4];
};

// SplitMix64 finalizer: decorrelates derived seeds (base seed, task, sample index).
uint64_t mix_seed(uint64_t x);
// The seed of sample `index` of `task` in a run with base seed `base`.
uint64_t sample_seed(uint64_t base, const std::string& task, int64_t index);

}  // namespace kvevict::eval
