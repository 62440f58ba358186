// Evaluation settings as users spell them (runner.h, MethodConfig): METHOD[:MOD]..., the method
// groups of the coverage sweep, and the mapping of a setting to the library's EvictConfig.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "eval/runner.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

// "pool=max:7" arrives split at its colon: the kernel joins the pool modifier before it.
std::vector<std::string> split_setting(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = s.find(':', start);
    parts.push_back(
        s.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  std::vector<std::string> out;
  for (const auto& p : parts) {
    const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](unsigned char c) {
      return std::isdigit(c) != 0;
    });
    if (digits && !out.empty() && (out.back() == "pool=max" || out.back() == "pool=avg"))
      out.back() += ":" + p;
    else
      out.push_back(p);
  }
  return out;
}

// "max7" / "avg5" (the form without a colon) as Pooling::parse spells it.
std::string pooling_spelling(const std::string& v) {
  if ((v.rfind("max", 0) == 0 || v.rfind("avg", 0) == 0) && v.size() > 3 && v[3] != ':')
    return v.substr(0, 3) + ":" + v.substr(3);
  return v;
}

int parse_count(const std::string& setting, const std::string& mod, const std::string& v, int lo) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  KVEVICT_CHECK(!v.empty() && end == v.c_str() + v.size() && x >= lo && x <= (1 << 24), "setting '",
                setting, "': ", mod, " needs an integer >= ", lo, "; got '", v, "'");
  return static_cast<int>(x);
}

bool aggregation_is_free(Method m) {
  return m == Method::kDropKV || m == Method::kObcacheV || m == Method::kObcacheK ||
         m == Method::kObcacheVK;
}

const char* kModifiers =
    "  snapkv | h2o | tova   aggregation of a dropkv / obcache_* score (SPEC 2; default snapkv:\n"
    "                        the window); h2o sums all prompt queries, tova the last query\n"
    "  adakv | uniform       selection policy (adakv: Feng et al.'s per-head budgets)\n"
    "  alpha=X               adakv's alpha, 0..1 (default 0.2)\n"
    "  w=N                   observation window of N queries, pinned: used in both modes (without\n"
    "                        it a query-aware window is the question); w=q: the question\n"
    "  pool=none|max:K|avg:K 1-D pooling of the scores (also max7, avg5)\n"
    "  norm                  h2o aggregation: divide by the number of queries that see a token\n"
    "  keep_last             h2o / tova aggregation: always keep the last prompt token\n"
    "  sink=N                always keep the first N tokens\n"
    "  kvpress               kvpress's default: snapkv = w=64:pool=avg:5, h2o = norm,\n"
    "                        tova = keep_last\n"
    "  spec                  SPEC section 2's defaults instead of kvevict's measured ones\n"
    "                        (dropkv, adadropkv, obcache_vk: w=32 pinned, pool=max:11; SPEC:\n"
    "                        dropkv w=8 no pooling, obcache_vk w=16 max:7)\n";

struct Group {
  const char* name;
  const char* what;
  std::vector<std::string> members;
};

const std::vector<Group>& groups() {
  static const std::vector<Group> g = {
      {"spec",
       "every method of SPEC section 2 plus adadropkv and adakv (15)",
       {"dropkv", "obcache_v", "obcache_k", "obcache_vk", "snapkv", "h2o", "tova", "knorm",
        "keydiff", "vatp", "criticalkv", "streamingllm", "random", "adadropkv", "adakv"}},
      {"aggregations",
       "dropkv and obcache_{v,k,vk} under the h2o and tova aggregations",
       {"dropkv:h2o", "dropkv:tova", "obcache_v:h2o", "obcache_k:h2o", "obcache_vk:h2o",
        "obcache_v:tova", "obcache_k:tova", "obcache_vk:tova"}},
      {"kvpress",
       "kvpress's defaults beside ours: snapkv w=64 avg-pool 5, h2o normalised, tova "
       "keeping the last token",
       {"snapkv:kvpress", "h2o:kvpress", "tova:kvpress"}},
      {"adakv-variants",
       "the adakv policy over other scores and another alpha",
       {"adakv", "adadropkv", "obcache_v:adakv", "obcache_k:adakv", "obcache_vk:adakv",
        "adakv:alpha=0.5", "adadropkv:alpha=0.5"}},
  };
  return g;
}

}  // namespace

MethodConfig MethodConfig::make(const std::string& name, const Budget& budget, int window,
                                const std::string& pooling) {
  MethodConfig m;
  m.name = name;
  if (m.is_full()) {
    m.budget = Budget{1.0};
    return m;
  }
  KVEVICT_CHECK(window >= 0, "window ", window, " is negative; expected >= 1 (0 = defaults)");
  const std::vector<std::string> parts = split_setting(name);
  const bool spec_defaults = std::find(parts.begin() + 1, parts.end(), "spec") != parts.end();
  m.spec = method_parse(spec_defaults ? parts[0] + ":spec" : parts[0]);
  m.budget = budget;
  ScoreOptions& s = m.spec.score;
  const std::vector<std::string> mods(parts.begin() + 1, parts.end());
  // Each modifier once, and one of each exclusive group: "w=8:w=16" or "h2o:tova" used to take
  // the last one without a word. The window and pooling overrides (--window, --pool) and a w= /
  // pool= of the setting would likewise silently disagree.
  std::map<std::string, std::string> given;  // modifier kind -> the modifier
  for (const auto& mod : mods) {
    const std::string key = mod.substr(0, mod.find('='));
    const std::string kind = key == "snapkv" || key == "h2o" || key == "tova" ? "aggregation"
                             : key == "adakv" || key == "uniform"             ? "policy"
                             : key == "w"                                     ? "window"
                             : key == "pool"                                  ? "pooling"
                                                                              : key;
    const auto [it, fresh] = given.emplace(kind, mod);
    KVEVICT_CHECK(fresh, "setting '", name, "': '", it->second, "' and '", mod, "' both set ",
                  kind == key ? "'" + key + "'" : "the " + kind, "; expected each modifier once");
  }
  KVEVICT_CHECK(window == 0 || given.count("window") == 0, "setting '", name, "': its ",
                given.count("window") ? given.at("window") : "", " and the window override ",
                window, " (--window) disagree; expected one of them");
  KVEVICT_CHECK(pooling.empty() || given.count("pooling") == 0, "setting '", name, "': its ",
                given.count("pooling") ? given.at("pooling") : "", " and the pooling override '",
                pooling, "' (--pool) disagree; expected one of them");
  // The aggregation first: its defaults (no window, no pooling for h2o / tova) come before the
  // overrides and the other modifiers.
  for (const auto& mod : mods) {
    if (mod != "snapkv" && mod != "h2o" && mod != "tova") continue;
    KVEVICT_CHECK(aggregation_is_free(s.method), "setting '", name, "': the aggregation '", mod,
                  "' applies to dropkv and obcache_* scores; ", parts[0], " has its own");
    s.aggregate = aggregate_parse(mod);
    if (s.aggregate != Aggregate::kWindow) {
      // h2o / tova aggregations score every (or the last) query and protect no window (SPEC 3).
      s.window = 0;
      s.pooling = Pooling{};
      m.spec.pin_window = false;
    }
  }
  const bool windowed = s.aggregate == Aggregate::kWindow;
  if (window > 0 && windowed) s.window = window;
  if (!pooling.empty()) s.pooling = Pooling::parse(pooling);
  bool alpha_given = false;
  for (const auto& mod : mods) {
    const size_t eq = mod.find('=');
    const std::string key = mod.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : mod.substr(eq + 1);
    if (key == "snapkv" || key == "h2o" || key == "tova" || mod == "spec") {
      continue;
    } else if (key == "adakv" || key == "uniform") {
      m.spec.policy = policy_parse(key);
    } else if (key == "alpha" && eq != std::string::npos) {
      char* end = nullptr;
      m.alpha = std::strtod(val.c_str(), &end);
      KVEVICT_CHECK(!val.empty() && end == val.c_str() + val.size() && std::isfinite(m.alpha) &&
                        m.alpha >= 0.0 && m.alpha <= 1.0,
                    "setting '", name, "': alpha needs a number in [0, 1]; got '", val, "'");
      alpha_given = true;
    } else if (key == "w" && eq != std::string::npos) {
      KVEVICT_CHECK(windowed, "setting '", name, "': w= sets the window of a windowed score; the ",
                    aggregate_name(s.aggregate), " aggregation has none");
      if (val == "q" || val == "question") {
        KVEVICT_CHECK(s.needs_queries(), "setting '", name, "': w=q needs a query score; ",
                      parts[0], " reads no queries");
        m.spec.pin_window = false;
      } else {
        s.window = parse_count(name, "w=", val, 1);
        m.spec.pin_window = true;
      }
    } else if (key == "pool" && eq != std::string::npos) {
      s.pooling = Pooling::parse(pooling_spelling(val));
    } else if (key == "norm" && eq == std::string::npos) {
      KVEVICT_CHECK(s.aggregate == Aggregate::kAllQueries, "setting '", name,
                    "': norm divides h2o's column sums; it needs the h2o aggregation");
      s.h2o_normalize = true;
    } else if (key == "keep_last" && eq == std::string::npos) {
      KVEVICT_CHECK(s.needs_queries() && !windowed, "setting '", name,
                    "': keep_last applies to the h2o and tova aggregations (a windowed score "
                    "keeps its whole window)");
      m.keep_last = true;
    } else if (key == "sink" && eq != std::string::npos) {
      m.spec.sink = parse_count(name, "sink=", val, 0);
    } else if (key == "kvpress" && eq == std::string::npos) {
      if (s.method == Method::kSnapKV && windowed) {
        s.window = 64;
        s.pooling = Pooling{PoolKind::kAvg, 5};
        m.spec.pin_window = true;
      } else if (s.method == Method::kH2O) {
        s.h2o_normalize = true;
      } else if (s.method == Method::kTOVA) {
        m.keep_last = true;
      } else {
        KVEVICT_FAIL("setting '", name,
                     "': kvpress's defaults are known for snapkv, h2o and "
                     "tova; not for ",
                     parts[0]);
      }
    } else {
      KVEVICT_FAIL("setting '", name, "': unknown modifier '", mod, "'; expected one of:\n",
                   kModifiers);
    }
  }
  KVEVICT_CHECK(!alpha_given || m.spec.policy == Policy::kAdaKV, "setting '", name,
                "': alpha is adakv's; add :adakv or use adakv / adadropkv");
  s.validate();
  return m;
}

EvictConfig MethodConfig::evict_config(int question) const {
  EvictConfig cfg;
  if (is_full()) return cfg;
  cfg.prefill = PrefillEviction::make(spec, budget, question);
  cfg.prefill.select.alpha = alpha;
  if (keep_last) {
    // The h2o / tova aggregations protect no window (observation_window is 0); keeping the last
    // token is a protected tail of 1. The CPU session protects score.window, the GPU one
    // select.window: both say 1 (the score of these aggregations does not read the window).
    cfg.prefill.score.window = 1;
    cfg.prefill.select.window = 1;
  }
  return cfg;
}

int MethodConfig::window_for(int question) const {
  return is_full() ? 0 : evict_config(question).prefill.select.window;
}

bool MethodConfig::window_is_question(int question) const {
  return question > 0 && !is_full() && !spec.pin_window && spec.score.needs_queries() &&
         spec.score.aggregate == Aggregate::kWindow;
}

std::string MethodConfig::aggregate() const {
  if (is_full() || !spec.score.needs_queries()) return "none";
  return aggregate_name(spec.score.aggregate);
}

std::string MethodConfig::label() const {
  return is_full() ? name : name + "@" + budget.str();
}

std::string method_setting_help() {
  return kModifiers;
}

std::string method_groups_help() {
  std::string out = "  all                   full + every group below\n";
  for (const auto& g : groups()) {
    std::string n = g.name;
    n.resize(std::max<size_t>(n.size() + 1, 22), ' ');
    out += "  " + n + g.what + "\n";
  }
  return out;
}

std::vector<std::string> expand_method_groups(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& n) {
    if (seen.insert(n).second) out.push_back(n);
  };
  for (const auto& n : names) {
    if (n == "all") {
      add("full");
      for (const auto& g : groups())
        for (const auto& m : g.members) add(m);
      continue;
    }
    auto it =
        std::find_if(groups().begin(), groups().end(), [&](const Group& g) { return n == g.name; });
    if (it == groups().end()) {
      add(n);
      continue;
    }
    for (const auto& m : it->members) add(m);
  }
  return out;
}

std::vector<MethodConfig> expand_methods(const std::vector<std::string>& methods,
                                         const std::vector<Budget>& budgets, int window,
                                         const std::string& pooling) {
  KVEVICT_CHECK(!methods.empty(), "no methods to evaluate; expected at least one (or 'full')");
  std::vector<MethodConfig> out;
  for (const auto& name : expand_method_groups(methods)) {
    if (name == "full") {
      out.push_back(MethodConfig::make(name, Budget{1.0}));
      continue;
    }
    KVEVICT_CHECK(!budgets.empty(), "method '", name, "' needs a budget; expected at least one");
    for (const auto& b : budgets) out.push_back(MethodConfig::make(name, b, window, pooling));
  }
  return out;
}

}  // namespace kvevict::eval
