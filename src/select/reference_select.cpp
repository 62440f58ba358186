// The brute-force selection oracle: full stable sorts instead of nth_element, a set of kept rows
// instead of a mark array, and adakv's rounding by sorting heads. Written independently of
// select.cpp so the tests compare two implementations of SPEC section 3.
#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "kvevict/error.h"
#include "kvevict/select.h"

namespace kvevict::ref {
namespace {

// Rows of [lo, hi) ordered best first: key descending, row ascending (a stable sort of the rows
// in ascending order by descending key gives exactly that).
std::vector<int64_t> ranked(const float* key, const std::vector<int64_t>& rows) {
  std::vector<int64_t> r = rows;
  std::stable_sort(r.begin(), r.end(), [key](int64_t a, int64_t b) { return key[a] > key[b]; });
  return r;
}

}  // namespace

Selection select(const SelectProblem& pb, const SelectOptions& opt) {
  pb.validate();
  opt.validate();
  const int hkv = pb.num_kv_heads;
  std::vector<int64_t> keep_n(hkv);
  std::vector<std::vector<int64_t>> free_rows(hkv), prot_rows(hkv);
  for (int h = 0; h < hkv; ++h) {
    const int64_t len = pb.lens[h];
    keep_n[h] = opt.budget.keep_count(len);
    for (int64_t i = 0; i < len; ++i) {
      if (i < opt.sink || i >= len - opt.window)
        prot_rows[h].push_back(i);
      else
        free_rows[h].push_back(i);
    }
  }
  Selection sel;
  sel.num_kv_heads = hkv;
  std::vector<int64_t> extra(hkv);
  for (int h = 0; h < hkv; ++h)
    extra[h] = std::max<int64_t>(0, keep_n[h] - static_cast<int64_t>(prot_rows[h].size()));
  for (int h = 0; h < hkv; ++h)
    if (keep_n[h] < static_cast<int64_t>(prot_rows[h].size()))
      sel.warning = "budget below the protected tokens";

  if (opt.policy == Policy::kAdaKV && extra[0] > 0) {
    const int64_t B = extra[0];
    std::vector<std::tuple<float, int64_t, int>> all;  // (score, row, head)
    for (int h = 0; h < hkv; ++h)
      for (int64_t r : free_rows[h]) all.emplace_back(pb.scores[pb.starts[h] + r], r, h);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
      if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
      return std::get<2>(a) < std::get<2>(b);
    });
    std::vector<int64_t> f(hkv, 0);
    for (int64_t i = 0; i < hkv * B; ++i) ++f[std::get<2>(all[i])];
    std::vector<std::pair<double, int>> rems;
    int64_t assigned = 0;
    for (int h = 0; h < hkv; ++h) {
      const double x = f[h] * (1.0 - opt.alpha) + opt.alpha * B;
      extra[h] = static_cast<int64_t>(std::floor(x + 1e-9));
      assigned += extra[h];
      rems.emplace_back(x - extra[h], h);
    }
    std::stable_sort(rems.begin(), rems.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; assigned < hkv * B; i = (i + 1) % rems.size()) {
      const int h = rems[i].second;
      if (extra[h] < static_cast<int64_t>(free_rows[h].size())) {
        ++extra[h];
        ++assigned;
      }
    }
  }

  sel.offsets.assign(hkv + 1, 0);
  for (int h = 0; h < hkv; ++h) {
    const float* s = pb.scores + pb.starts[h];
    std::set<int64_t> kept(prot_rows[h].begin(), prot_rows[h].end());
    if (extra[h] > 0) {
      int64_t rest = extra[h];
      std::vector<int64_t> pool = free_rows[h];
      if (pb.aux) {
        const int64_t s1 = extra[h] / 2;
        const std::vector<int64_t> by_aux = ranked(pb.aux + pb.starts[h], pool);
        std::set<int64_t> stage1(by_aux.begin(), by_aux.begin() + s1);
        kept.insert(stage1.begin(), stage1.end());
        std::vector<int64_t> left;
        for (int64_t r : pool)
          if (!stage1.count(r)) left.push_back(r);
        pool = left;
        rest -= s1;
      }
      const std::vector<int64_t> by_score = ranked(s, pool);
      kept.insert(by_score.begin(), by_score.begin() + rest);
    }
    for (int64_t r : kept) sel.index.push_back(static_cast<int32_t>(r));
    sel.offsets[h + 1] = static_cast<int64_t>(sel.index.size());
  }
  return sel;
}

}  // namespace kvevict::ref
