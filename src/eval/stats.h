// Confidence intervals for the evaluation tables: a seeded percentile bootstrap of a mean, of a
// mean of stratum means (RULER's average over tasks: a stratum per task), and of a paired
// difference (two settings answered on the same samples).
//
// Protocol (docs/EVAL.md): every cell of a results table is the mean score of its samples with a
// 95% percentile-bootstrap interval from `resamples` resamples drawn with replacement; the
// average over tasks resamples within each task (stratified), so a task's weight never changes.
// The random stream of a cell is derived from the run's bootstrap seed and the cell's key (its
// setting, length, mode and task), so a cell's interval does not depend on which other cells the
// run has or in which order they are computed. The draws use eval::Rng (xoshiro256**, the same
// numbers on every platform).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kvevict::eval {

struct BootstrapOptions {
  int resamples = 2000;          // >= 1; 0 turns intervals off (low = high = NaN)
  uint64_t seed = 2026;          // the run's bootstrap seed; reported
  double level = 0.95;           // central coverage of the interval, in (0, 1)
  void validate() const;         // throws naming the bad value
  std::string describe() const;  // "95% percentile bootstrap, 2000 resamples, seed 2026"
};

struct Interval {
  double estimate = std::numeric_limits<double>::quiet_NaN();  // the statistic on the data
  double low = std::numeric_limits<double>::quiet_NaN();       // bootstrap quantile (1-level)/2
  double high = std::numeric_limits<double>::quiet_NaN();      // bootstrap quantile (1+level)/2
  int64_t n = 0;                                               // observations
  bool has_interval() const { return std::isfinite(low) && std::isfinite(high); }
};

// The q-quantile (0 <= q <= 1) of ascending values, linear between order statistics:
// sorted[floor(h)] + (h - floor(h)) (sorted[floor(h)+1] - sorted[floor(h)]), h = q (n - 1)
// (Hyndman-Fan type 7, numpy's default). Throws on an empty vector.
double quantile_sorted(const std::vector<double>& sorted, double q);

// A 64-bit key of a string (FNV-1a): the stream of a cell, from its name.
uint64_t stream_key(const std::string& name);

// The bootstrap distribution of a mean: out[r] = mean of values resampled with replacement
// (as many draws as values), r = 0 .. resamples-1, from the stream (seed, stream). Empty values
// give an empty distribution.
std::vector<double> bootstrap_means(const std::vector<double>& values, int resamples, uint64_t seed,
                                    uint64_t stream);

// The estimate and the percentile interval of a bootstrap distribution (reordered in place).
Interval percentile_interval(double estimate, std::vector<double>& distribution, double level,
                             int64_t n);

// Mean of values with its interval.
Interval bootstrap_mean(const std::vector<double>& values, const BootstrapOptions& opt,
                        uint64_t stream);

// The mean over strata of each stratum's mean (empty strata are an error), with the stratified
// bootstrap: each stratum is resampled on its own, stream (stream, stratum index).
Interval bootstrap_mean_of_means(const std::vector<std::vector<double>>& strata,
                                 const BootstrapOptions& opt, uint64_t stream);

// Settings A and B answered on the same samples: pairs[s][i] = (score of A, score of B) on
// sample i of stratum s. The difference A - B is the mean of means of the per-sample
// differences, resampled as pairs (one draw keeps both answers of a sample together).
struct PairedDifference {
  Interval a, b;  // each setting's mean of means (its own stratified interval)
  Interval diff;  // A - B
  int64_t a_better = 0, equal = 0, b_better = 0;  // samples by the sign of the difference
};
PairedDifference paired_difference(const std::vector<std::vector<std::pair<double, double>>>& pairs,
                                   const BootstrapOptions& opt, uint64_t stream);

}  // namespace kvevict::eval
