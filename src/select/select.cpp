// Selection policies (SPEC section 3): protected tokens, uniform and adakv budgets, criticalkv's
// two stages. Top-k by nth_element (O(n) per head) with a total order, so ties are deterministic.
#include "kvevict/select.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/parallel.h"
#include "core/parallel_if_large.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

// The protected rows of a head of `len` rows: [0, sink_end) and [win_start, len).
struct Protected {
  int64_t sink_end = 0, win_start = 0;
  int64_t count(int64_t len) const { return sink_end + (len - win_start); }
};
Protected protected_rows(int64_t len, int sink, int window) {
  Protected p;
  p.sink_end = std::min<int64_t>(sink, len);
  p.win_start = std::max<int64_t>(p.sink_end, len - window);
  return p;
}

// Moves the `take` best rows of idx (by key desc, then row asc) to the front; O(size).
void top_by(const float* key, std::vector<int32_t>& idx, int64_t take) {
  if (take <= 0 || take >= static_cast<int64_t>(idx.size())) return;
  std::nth_element(idx.begin(), idx.begin() + take, idx.end(), [key](int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
  });
}

std::string protected_warning(int64_t n_keep, int64_t prot, int sink, int window) {
  std::ostringstream os;
  os << "budget of " << n_keep << " tokens is below the " << prot << " protected tokens (sink "
     << sink << ", window " << window << "); keeping just the protected tokens";
  return os.str();
}

// Per-head budgets of adakv from the flattened top Hkv*B unprotected scores (Feng et al.).
std::vector<int64_t> adakv_budgets(const SelectProblem& pb, const Protected& prot, int64_t n,
                                   int64_t B, double alpha) {
  const int hkv = pb.num_kv_heads;
  const int64_t m = prot.win_start - prot.sink_end;  // unprotected rows per head
  // Candidates as (score, key) with key = offset * Hkv + head: ordering keys ascending is "lower
  // position, then lower head", so the comparator needs no division.
  struct Candidate {
    float score;
    int64_t key;
  };
  std::vector<Candidate> flat(static_cast<size_t>(hkv) * m);
  for (int h = 0; h < hkv; ++h) {
    const float* sc = pb.scores + pb.starts[h] + prot.sink_end;
    for (int64_t i = 0; i < m; ++i) flat[static_cast<size_t>(i) * hkv + h] = {sc[i], i * hkv + h};
  }
  const int64_t take = static_cast<int64_t>(hkv) * B;
  if (take < static_cast<int64_t>(flat.size()))
    std::nth_element(flat.begin(), flat.begin() + take, flat.end(),
                     [](const Candidate& a, const Candidate& b) {
                       return a.score > b.score || (a.score == b.score && a.key < b.key);
                     });
  std::vector<int64_t> f(hkv, 0);
  for (int64_t i = 0; i < take; ++i) ++f[flat[i].key % hkv];
  (void)n;
  // B_h = f_h (1 - alpha) + alpha B, floored, then the remaining units go to the largest
  // remainders (ties toward the lower head) so the layer total is exactly Hkv * B.
  std::vector<int64_t> bh(hkv);
  std::vector<double> rem(hkv);
  int64_t total = 0;
  for (int h = 0; h < hkv; ++h) {
    const double x = static_cast<double>(f[h]) * (1.0 - alpha) + alpha * static_cast<double>(B);
    bh[h] = static_cast<int64_t>(std::floor(x + 1e-9));
    rem[h] = x - static_cast<double>(bh[h]);
    total += bh[h];
  }
  std::vector<int> order(hkv);
  for (int h = 0; h < hkv; ++h) order[h] = h;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rem[a] > rem[b]; });
  for (int i = 0; total < take; i = (i + 1) % hkv) {
    if (bh[order[i]] < m) {
      ++bh[order[i]];
      ++total;
    }
  }
  return bh;
}

}  // namespace

bool select_head(const float* scores, const float* aux, int64_t len, int64_t n_keep, int sink,
                 int window, std::vector<int32_t>& out) {
  KVEVICT_CHECK(n_keep >= 0 && n_keep <= len, "keeping ", n_keep, " of ", len,
                " rows; expected 0 <= kept <= rows");
  const Protected p = protected_rows(len, sink, window);
  const int64_t prot = p.count(len);
  const bool below = n_keep < prot;
  const int64_t B = below ? 0 : n_keep - prot;
  std::vector<char> keep(len, 0);
  for (int64_t i = 0; i < p.sink_end; ++i) keep[i] = 1;
  for (int64_t i = p.win_start; i < len; ++i) keep[i] = 1;
  if (B > 0) {
    std::vector<int32_t> idx;
    idx.reserve(p.win_start - p.sink_end);
    for (int64_t i = p.sink_end; i < p.win_start; ++i) idx.push_back(static_cast<int32_t>(i));
    int64_t rest = B;
    if (aux) {  // criticalkv stage 1: the top floor(B/2) by the aux score
      const int64_t s1 = B / 2;
      top_by(aux, idx, s1);
      for (int64_t i = 0; i < s1; ++i) keep[idx[i]] = 1;
      idx.erase(idx.begin(), idx.begin() + s1);
      rest = B - s1;
    }
    top_by(scores, idx, rest);
    for (int64_t i = 0; i < rest; ++i) keep[idx[i]] = 1;
  }
  for (int64_t i = 0; i < len; ++i)
    if (keep[i]) out.push_back(static_cast<int32_t>(i));
  return below;
}

Selection select(const SelectProblem& problem, const SelectOptions& opt) {
  problem.validate();
  opt.validate();
  const int hkv = problem.num_kv_heads;
  std::vector<int64_t> n_keep(hkv), bh(hkv, -1);
  for (int h = 0; h < hkv; ++h) n_keep[h] = opt.budget.keep_count(problem.lens[h]);

  Selection sel;
  sel.num_kv_heads = hkv;
  if (opt.policy == Policy::kAdaKV) {
    const int64_t n = problem.lens[0];
    for (int h = 1; h < hkv; ++h)
      KVEVICT_CHECK(problem.lens[h] == n, "adakv needs equal head lengths; head ", h, " has ",
                    problem.lens[h], ", head 0 has ", n);
    const Protected p = protected_rows(n, opt.sink, opt.window);
    const int64_t B = n_keep[0] - p.count(n);
    if (B > 0) {
      bh = adakv_budgets(problem, p, n, B, opt.alpha);
      for (int h = 0; h < hkv; ++h) n_keep[h] = p.count(n) + bh[h];
    }
  }

  std::vector<std::vector<int32_t>> per_head(hkv);
  std::vector<char> below(hkv, 0);
  int64_t rows = 0;
  for (int h = 0; h < hkv; ++h) rows += problem.lens[h];
  detail::parallel_for_if_large(hkv, rows * 8, [&](int64_t h) {
    const int64_t s = problem.starts[h];
    per_head[h].reserve(n_keep[h]);
    below[h] = select_head(problem.scores + s, problem.aux ? problem.aux + s : nullptr,
                           problem.lens[h], n_keep[h], opt.sink, opt.window, per_head[h]);
  });
  sel.offsets.assign(hkv + 1, 0);
  for (int h = 0; h < hkv; ++h) {
    sel.offsets[h + 1] = sel.offsets[h] + static_cast<int64_t>(per_head[h].size());
    sel.index.insert(sel.index.end(), per_head[h].begin(), per_head[h].end());
    if (below[h] && sel.warning.empty()) {
      const Protected p = protected_rows(problem.lens[h], opt.sink, opt.window);
      sel.warning = protected_warning(n_keep[h], p.count(problem.lens[h]), opt.sink, opt.window);
    }
  }
  return sel;
}

}  // namespace kvevict
