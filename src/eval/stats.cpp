#include "eval/stats.h"

#include <algorithm>
#include <cstdio>

#include "eval/rng.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

Rng stream_rng(uint64_t seed, uint64_t stream) {
  return Rng(mix_seed(seed) ^ mix_seed(~stream));
}

uint64_t substream(uint64_t stream, size_t index) {
  return mix_seed(stream ^ mix_seed(static_cast<uint64_t>(index) + 1));
}

double mean_of(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// dist[c][r] = mean over strata of the mean of column c in resample r of every stratum, where
// rows[s] holds stratum s row-major [m_s, columns] and stratum s draws from its own substream:
// a draw takes a whole row, so the columns of a row stay together (paired samples).
std::vector<std::vector<double>> stratified_means(const std::vector<std::vector<double>>& rows,
                                                  size_t columns, int resamples, uint64_t seed,
                                                  uint64_t stream) {
  std::vector<std::vector<double>> dist(columns, std::vector<double>(resamples, 0.0));
  std::vector<double> acc(columns);
  for (size_t s = 0; s < rows.size(); ++s) {
    const double* stratum = rows[s].data();
    const auto m = static_cast<uint64_t>(rows[s].size() / columns);
    Rng rng = stream_rng(seed, substream(stream, s));
    for (int r = 0; r < resamples; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint64_t i = 0; i < m; ++i) {
        const double* row = stratum + rng.uniform(m) * columns;
        for (size_t c = 0; c < columns; ++c) acc[c] += row[c];
      }
      for (size_t c = 0; c < columns; ++c) dist[c][r] += acc[c] / static_cast<double>(m);
    }
  }
  for (auto& d : dist)
    for (double& x : d) x /= static_cast<double>(rows.size());
  return dist;
}

void check_strata(size_t strata, const std::vector<size_t>& sizes) {
  KVEVICT_CHECK(strata > 0, "a mean of stratum means needs at least one stratum; got none");
  for (size_t s = 0; s < sizes.size(); ++s)
    KVEVICT_CHECK(sizes[s] > 0, "stratum ", s, " of ", strata,
                  " is empty; expected at least one value in every stratum");
}

}  // namespace

void BootstrapOptions::validate() const {
  KVEVICT_CHECK(resamples >= 0 && resamples <= 1000000, "bootstrap resamples ", resamples,
                " is out of range; expected 0 (no intervals) .. 1000000");
  KVEVICT_CHECK(std::isfinite(level) && level > 0.0 && level < 1.0, "interval level ", level,
                " is out of range; expected a coverage in (0, 1), e.g. 0.95");
}

std::string BootstrapOptions::describe() const {
  if (resamples == 0) return "no intervals (bootstrap off)";
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "%g%% percentile bootstrap, %d resamples with replacement, seed %llu, stratified "
                "by task for averages, paired for differences",
                100.0 * level, resamples, static_cast<unsigned long long>(seed));
  return buf;
}

double quantile_sorted(const std::vector<double>& sorted, double q) {
  KVEVICT_CHECK(!sorted.empty(), "a quantile of no values is undefined; expected at least one");
  KVEVICT_CHECK(q >= 0.0 && q <= 1.0, "quantile ", q, " is out of range; expected 0 <= q <= 1");
  const double h = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

uint64_t stream_key(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::vector<double> bootstrap_means(const std::vector<double>& values, int resamples, uint64_t seed,
                                    uint64_t stream) {
  if (values.empty() || resamples <= 0) return {};
  return std::move(stratified_means({values}, 1, resamples, seed, stream)[0]);
}

Interval percentile_interval(double estimate, std::vector<double>& distribution, double level,
                             int64_t n) {
  Interval out;
  out.estimate = estimate;
  out.n = n;
  if (distribution.empty()) return out;
  std::sort(distribution.begin(), distribution.end());
  out.low = quantile_sorted(distribution, (1.0 - level) / 2.0);
  out.high = quantile_sorted(distribution, (1.0 + level) / 2.0);
  return out;
}

Interval bootstrap_mean(const std::vector<double>& values, const BootstrapOptions& opt,
                        uint64_t stream) {
  return bootstrap_mean_of_means({values}, opt, stream);
}

Interval bootstrap_mean_of_means(const std::vector<std::vector<double>>& strata,
                                 const BootstrapOptions& opt, uint64_t stream) {
  opt.validate();
  std::vector<size_t> sizes;
  for (const auto& s : strata) sizes.push_back(s.size());
  check_strata(strata.size(), sizes);
  double estimate = 0.0;
  int64_t n = 0;
  for (const auto& s : strata) {
    estimate += mean_of(s);
    n += static_cast<int64_t>(s.size());
  }
  estimate /= static_cast<double>(strata.size());
  std::vector<double> dist;
  if (opt.resamples > 0)
    dist = std::move(stratified_means(strata, 1, opt.resamples, opt.seed, stream)[0]);
  return percentile_interval(estimate, dist, opt.level, n);
}

PairedDifference paired_difference(const std::vector<std::vector<std::pair<double, double>>>& pairs,
                                   const BootstrapOptions& opt, uint64_t stream) {
  opt.validate();
  std::vector<size_t> sizes;
  for (const auto& s : pairs) sizes.push_back(s.size());
  check_strata(pairs.size(), sizes);
  PairedDifference out;
  std::vector<std::vector<double>> rows(pairs.size());  // [pairs, 3] (a, b, a - b)
  double ea = 0.0, eb = 0.0;
  int64_t n = 0;
  for (size_t s = 0; s < pairs.size(); ++s) {
    double sa = 0.0, sb = 0.0;
    for (const auto& [a, b] : pairs[s]) {
      sa += a;
      sb += b;
      rows[s].insert(rows[s].end(), {a, b, a - b});
      if (a > b)
        ++out.a_better;
      else if (a < b)
        ++out.b_better;
      else
        ++out.equal;
    }
    ea += sa / static_cast<double>(pairs[s].size());
    eb += sb / static_cast<double>(pairs[s].size());
    n += static_cast<int64_t>(pairs[s].size());
  }
  const auto strata = static_cast<double>(pairs.size());
  ea /= strata;
  eb /= strata;
  std::vector<std::vector<double>> dist(3);
  if (opt.resamples > 0) dist = stratified_means(rows, 3, opt.resamples, opt.seed, stream);
  out.a = percentile_interval(ea, dist[0], opt.level, n);
  out.b = percentile_interval(eb, dist[1], opt.level, n);
  out.diff = percentile_interval(ea - eb, dist[2], opt.level, n);
  return out;
}

}  // namespace kvevict::eval
