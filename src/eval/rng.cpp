#include "eval/rng.h"

#include <unordered_map>

#include "kvevict/error.h"

namespace kvevict::eval {

uint64_t mix_seed(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t sample_seed(uint64_t base, const std::string& task, int64_t index) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the task name, stable across runs
  for (unsigned char c : task) h = (h ^ c) * 0x100000001b3ull;
  return mix_seed(mix_seed(base) ^ h ^ mix_seed(static_cast<uint64_t>(index)));
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {
    x = mix_seed(x);
    s = x;
  }
}

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::uniform(uint64_t n) {
  KVEVICT_CHECK(n > 0, "Rng::uniform range ", n, " is empty; expected n > 0");
  // Reject the top partial block so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  KVEVICT_CHECK(lo <= hi, "Rng::uniform_int range [", lo, ", ", hi,
                "] is empty; expected lo <= hi");
  return lo + static_cast<int64_t>(uniform(static_cast<uint64_t>(hi - lo) + 1));
}

std::vector<int64_t> Rng::sample_indices(int64_t n, int64_t k) {
  KVEVICT_CHECK(k >= 0 && k <= n, "cannot sample ", k, " distinct indices from ", n,
                "; expected 0 <= k <= n");
  // Partial Fisher-Yates over a sparse map of moved entries keeps this O(k) for huge n.
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(k));
  std::unordered_map<int64_t, int64_t> moved;
  auto value_at = [&](int64_t pos) {
    auto it = moved.find(pos);
    return it == moved.end() ? pos : it->second;
  };
  for (int64_t i = 0; i < k; ++i) {
    int64_t j = i + static_cast<int64_t>(uniform(static_cast<uint64_t>(n - i)));
    int64_t vi = value_at(i), vj = value_at(j);
    moved[j] = vi;
    moved[i] = vj;
    out.push_back(vj);
  }
  return out;
}

}  // namespace kvevict::eval
