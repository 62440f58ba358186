// The DEV / TEST split of generated samples (docs/EVAL.md, "Defaults chosen by measurement"):
// tuning (the window x pooling ablation) reads only DEV samples, every reported number comes from
// TEST samples, and no sample is in both.
//
// Sample i of task t with base seed b has seed sample_seed(b, t, i) (rng.h). TEST takes the
// indices [0, kSplitSpan) and DEV the indices [kDevFirstIndex, kDevFirstIndex + kSplitSpan), both
// with the run's base seed. The index ranges are disjoint, and for one base seed and task
// sample_seed is injective in the index (a xor with a constant between two bijections of the
// SplitMix64 finalizer), so the DEV and TEST seeds of a task never coincide; seeds of different
// tasks generate different tasks. Results of earlier runs (indices from 0) are TEST samples.
#pragma once

#include <cstdint>
#include <string>

namespace kvevict::eval {

enum class SeedSplit : uint8_t { kTest, kDev };

constexpr int64_t kSplitSpan = int64_t{1} << 20;      // at most this many samples per task
constexpr int64_t kDevFirstIndex = int64_t{1} << 30;  // DEV's first sample index

const char* split_name(SeedSplit s);          // "test" | "dev"
SeedSplit split_parse(const std::string& s);  // throws naming the value
// The first sample index of a split; n samples of it are indices [first, first + n), n <= span.
int64_t split_first_index(SeedSplit s);
// Throws unless n samples fit the split (1 <= n <= kSplitSpan).
void check_split_size(int64_t n);
// Throws unless samples [first, first + n) of a split fit it (first >= 0, first + n <= kSplitSpan).
void check_split_range(int64_t first, int64_t n);
// A sample's index inside its split from its seed index (first_index + i): i.
int64_t index_in_split(int64_t seed_index);

}  // namespace kvevict::eval
