// The diagnostics over real q/k/v tensors: every query head, the last few queries, one pool each.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "core/parallel.h"
#include "kvevict/diagnostics.h"
#include "kvevict/error.h"

namespace kvevict::diag {
namespace {

double percentile(std::vector<double> x, double q) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(x.begin(), x.end());
  // Nearest rank: the smallest value with at least q of the data at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(x.size())));
  return x[std::min(x.size() - 1, rank == 0 ? 0 : rank - 1)];
}

const char* pool_name(PoolChoice c) {
  return c == PoolChoice::kRandom ? "random" : "lowest_proxy";
}

// JSON has no NaN or infinity: write them as null.
nlohmann::json num(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json();
}

}  // namespace

void DiagnosticsOptions::validate() const {
  // run_diagnostics keeps SPEC section 6's pool bound; exact_optimum itself enumerates larger
  // pools when k is small.
  KVEVICT_CHECK(pool_size >= 1 && pool_size <= 24, "pool size ", pool_size,
                " is out of range; expected 1..24 (exact enumeration)");
  KVEVICT_CHECK(k >= 1 && k <= pool_size, "k = ", k, " is out of range; expected 1..", pool_size);
  KVEVICT_CHECK(num_queries >= 1, "num_queries ", num_queries, " is invalid; expected >= 1");
  KVEVICT_CHECK(std::isfinite(scale) && scale >= 0, "scale ", scale, " is invalid; expected >= 0");
}

DiagnosticsReport run_diagnostics(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const DiagnosticsOptions& opt) {
  opt.validate();
  check_shape(k, "k", {-1, -1, -1});
  check_shape(v, "v", {k.shape[0], k.shape[1], k.shape[2]});
  check_shape(q, "q", {-1, -1, k.shape[2]});
  KVEVICT_CHECK(q.device == Device::kCpu && k.device == Device::kCpu && v.device == Device::kCpu,
                "diagnostics read host tensors");
  // The same value check as ScoreProblem::validate: NaN or Inf would print NaN rows and a
  // "ratio median" computed from the finite rest (issue 13).
  check_finite(q, "q");
  check_finite(k, "k");
  check_finite(v, "v");
  const int hq = static_cast<int>(q.shape[0]), hkv = static_cast<int>(k.shape[0]);
  const int d = static_cast<int>(k.shape[2]);
  const int64_t n = k.shape[1], m = q.shape[1];
  KVEVICT_CHECK(hq % hkv == 0, "q has ", hq, " heads; expected a multiple of ", hkv, " KV heads");
  KVEVICT_CHECK(m >= 1 && m <= n, "q holds ", m, " queries for ", n, " tokens; expected 1..", n);
  const int group = hq / hkv;
  const int64_t nq = std::min<int64_t>(opt.num_queries, m);
  const double scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d));

  DiagnosticsReport rep;
  rep.options = opt;
  rep.rows.resize(static_cast<size_t>(hq * nq));
  parallel_for(hq * nq, [&](int64_t item) {
    const int h = static_cast<int>(item / nq);
    const int64_t t = m - nq + item % nq;  // row of q
    const int64_t qpos = n - m + t;        // it sees keys 0..qpos
    const int kvh = h / group;
    const int64_t vis = qpos + 1;
    std::vector<double> z(vis), p(vis), a(d, 0.0);
    double zmax = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < vis; ++j) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += q.load(h, t, c) * k.load(kvh, j, c);
      z[j] = dot * scale;
      zmax = std::max(zmax, z[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < vis; ++j) sum += (p[j] = std::exp(z[j] - zmax));
    for (int64_t j = 0; j < vis; ++j) {
      p[j] /= sum;
      for (int c = 0; c < d; ++c) a[c] += p[j] * v.load(kvh, j, c);
    }
    // Candidate pool.
    const int L = static_cast<int>(std::min<int64_t>(opt.pool_size, vis));
    std::vector<int64_t> tokens(vis);
    std::iota(tokens.begin(), tokens.end(), 0);
    if (opt.pool == PoolChoice::kLowestProxy) {
      std::vector<double> proxy(vis);
      for (int64_t j = 0; j < vis; ++j) {
        double dist2 = 0;
        for (int c = 0; c < d; ++c) {
          const double diff = a[c] - v.load(kvh, j, c);
          dist2 += diff * diff;
        }
        proxy[j] = p[j] / std::max(1.0 - p[j], 1e-12) * std::sqrt(dist2);
      }
      std::stable_sort(tokens.begin(), tokens.end(),
                       [&](int64_t x, int64_t y) { return proxy[x] < proxy[y]; });
    } else {
      std::mt19937_64 rng(opt.seed * 1000003ull + static_cast<uint64_t>(item));
      std::shuffle(tokens.begin(), tokens.end(), rng);
    }
    tokens.resize(L);
    std::sort(tokens.begin(), tokens.end());
    PoolProblem pp;
    pp.head_dim = d;
    pp.a = a;
    for (int64_t j : tokens) {
      pp.p.push_back(p[j]);
      for (int c = 0; c < d; ++c) pp.v.push_back(v.load(kvh, j, c));
    }
    const int kk = std::min(opt.k, L);
    const SubsetValue best = exact_optimum(pp, kk), prox = proxy_set(pp, kk);
    // F(J) = ||sum_J p_i (a - v_i)|| / (1 - P_J) is infinite only when J is every visible key.
    // Short of that, an infinite F means 1 - P_J rounded to 0: the keys outside J hold less
    // than double's resolution of the row's attention (logits hundreds of nats apart, e.g. keys
    // of magnitude 1e20), where p cannot form the output without them. Refused, not printed.
    KVEVICT_CHECK(kk == vis || (std::isfinite(best.value) && std::isfinite(prox.value)), "q head ",
                  h, " query ", qpos, ": the evicted keys hold all of the row's attention ",
                  "in double precision (the other keys' probabilities underflow), so F(J) cannot ",
                  "be formed from p; expected q and k whose logits lie within ~700 nats of each ",
                  "other (scale the inputs down)");
    DiagnosticsRow& r = rep.rows[item];
    r.q_head = h;
    r.kv_head = kvh;
    r.query = qpos;
    r.f_opt = best.value;
    r.f_proxy = prox.value;
    r.ratio = best.value > 0 ? prox.value / best.value
                             : (prox.value > 0 ? std::numeric_limits<double>::infinity() : 1.0);
    r.c_star = cone_constant(pp);
    r.eps = small_weight_eps(pp);
    r.factor = theorem_factor(r.c_star, r.eps, kk);
    for (int i : best.set) r.opt_tokens.push_back(tokens[i]);
    for (int i : prox.set) r.proxy_tokens.push_back(tokens[i]);
  });
  std::vector<double> ratios, factors, cs;
  for (const auto& r : rep.rows) {
    ratios.push_back(r.ratio);
    cs.push_back(r.c_star);
    if (std::isfinite(r.factor)) factors.push_back(r.factor);
  }
  rep.ratio_median = percentile(ratios, 0.5);
  rep.ratio_p95 = percentile(ratios, 0.95);
  rep.factor_median = percentile(factors, 0.5);
  rep.c_star_median = percentile(cs, 0.5);
  rep.factor_applicable = static_cast<int>(factors.size());
  return rep;
}

std::string DiagnosticsReport::to_json() const {
  nlohmann::json j;
  j["options"] = {{"pool_size", options.pool_size},     {"k", options.k},
                  {"pool", pool_name(options.pool)},    {"seed", options.seed},
                  {"num_queries", options.num_queries}, {"scale", options.scale}};
  j["summary"] = {{"rows", rows.size()},
                  {"ratio_median", num(ratio_median)},
                  {"ratio_p95", num(ratio_p95)},
                  {"factor_median", num(factor_median)},
                  {"factor_applicable", factor_applicable},
                  {"c_star_median", num(c_star_median)}};
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows)
    arr.push_back({{"q_head", r.q_head},
                   {"kv_head", r.kv_head},
                   {"query", r.query},
                   {"f_opt", num(r.f_opt)},
                   {"f_proxy", num(r.f_proxy)},
                   {"ratio", num(r.ratio)},
                   {"c_star", num(r.c_star)},
                   {"eps", num(r.eps)},
                   {"factor", num(r.factor)},
                   {"opt_tokens", r.opt_tokens},
                   {"proxy_tokens", r.proxy_tokens}});
  j["rows"] = arr;
  return j.dump(2);
}

std::string DiagnosticsReport::to_table() const {
  std::ostringstream os;
  os << std::setw(6) << "q_head" << std::setw(8) << "kv_head" << std::setw(8) << "query"
     << std::setw(13) << "F(J*)" << std::setw(13) << "F(J^)" << std::setw(9) << "ratio"
     << std::setw(9) << "c*" << std::setw(10) << "eps" << std::setw(10) << "factor"
     << "\n";
  os << std::setprecision(4);
  for (const auto& r : rows) {
    os << std::setw(6) << r.q_head << std::setw(8) << r.kv_head << std::setw(8) << r.query
       << std::setw(13) << r.f_opt << std::setw(13) << r.f_proxy << std::setw(9) << r.ratio
       << std::setw(9) << r.c_star << std::setw(10) << r.eps << std::setw(10);
    if (std::isfinite(r.factor))
      os << r.factor;
    else
      os << "n/a";
    os << "\n";
  }
  os << "pool=" << pool_name(options.pool) << " L=" << options.pool_size << " k=" << options.k
     << " rows=" << rows.size() << " ratio median=" << ratio_median << " p95=" << ratio_p95
     << " factor median=" << factor_median << " (applicable " << factor_applicable << "/"
     << rows.size() << ") c* median=" << c_star_median << "\n";
  return os.str();
}

}  // namespace kvevict::diag
