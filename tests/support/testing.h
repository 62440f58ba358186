// Shared test helpers: seeded random tensors, tolerance comparison that prints the worst errors,
// and sentinel-guarded output buffers (STYLE.md "Tests").
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvevict/tensor.h"

namespace kvevict::testing {

// Uniform(-scale, scale) floats, optionally rounded through bf16 (as a device would store them).
std::vector<float> random_floats(size_t count, uint64_t seed, float scale = 1.0f,
                                 bool round_to_bf16 = false);
// Normal(0, stddev) floats.
std::vector<float> normal_floats(size_t count, uint64_t seed, float stddev = 1.0f,
                                 bool round_to_bf16 = false);

// Compares got against ref elementwise with |got - ref| <= atol + rtol |ref|. On failure returns a
// message with the count of mismatches, the max abs/rel error and the first mismatches.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref,
                                     double atol, double rtol, const std::string& what = "");
::testing::AssertionResult all_close(const float* got, const double* ref, size_t count, double atol,
                                     double rtol, const std::string& what = "");

// An output buffer of `count` elements framed by sentinel regions; intact() checks they survived.
template <class T>
class Guarded {
 public:
  explicit Guarded(size_t count, T sentinel, size_t pad = 64)
      : buf_(count + 2 * pad, sentinel), pad_(pad), count_(count), sentinel_(sentinel) {}
  T* data() { return buf_.data() + pad_; }
  const T* data() const { return buf_.data() + pad_; }
  size_t size() const { return count_; }
  bool intact() const {
    for (size_t i = 0; i < pad_; ++i)
      if (!same(buf_[i]) || !same(buf_[pad_ + count_ + i])) return false;
    return true;
  }
  std::vector<T> values() const { return {data(), data() + count_}; }

 private:
  bool same(const T& x) const { return std::memcmp(&x, &sentinel_, sizeof(T)) == 0; }
  std::vector<T> buf_;
  size_t pad_, count_;
  T sentinel_;
};

// Sets (or, with nullptr, unsets) an environment variable for its lifetime, then restores what
// was there: switches read at construction (KVEVICT_DECODE_FUSED and the like) for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* was = std::getenv(name);
    had_ = was != nullptr;
    if (had_) was_ = was;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), was_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, was_;
  bool had_ = false;
};

}  // namespace kvevict::testing
