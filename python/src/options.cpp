// Keyword arguments of the Python API -> ScoreOptions / SelectOptions / Budget. The method's
// defaults come from method_parse (kvevict/method.h); only what the caller passed overrides them,
// so Python and the CLI agree on every default.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "bindings.h"
#include "kvevict/error.h"

namespace kvevict::python {
namespace {

// nb::cast of a keyword argument, with the argument named when the object is not a T (a float
// or str window, a list budget): nanobind's own error is a bare std::bad_cast. The Python layer
// (kvevict/_checks.py) checks first; this keeps direct callers of the extension clear too.
template <class T>
T cast_arg(const nb::handle& h, const char* name, const char* expected) {
  try {
    return nb::cast<T>(h);
  } catch (const std::exception&) {  // nb::cast_error
    KVEVICT_FAIL(name, " is ", nb::repr(h).c_str(), "; expected ", expected);
  }
}

}  // namespace

ScoreOptions make_score_options(const std::string& method, const nb::handle& aggregate,
                                const nb::handle& window, const nb::handle& pool,
                                bool h2o_normalize, uint64_t seed, float scale) {
  ScoreOptions o = method_parse(method).score;
  // The same overrides, in the same order, as `kvevict score` (src/cli/score_command.cpp).
  if (!aggregate.is_none())
    o.aggregate = aggregate_parse(cast_arg<std::string>(aggregate, "aggregate", "a string"));
  if (!pool.is_none()) o.pooling = Pooling::parse(cast_arg<std::string>(pool, "pool", "a string"));
  if (!window.is_none()) o.window = cast_arg<int>(window, "window", "an integer");
  o.h2o_normalize = h2o_normalize;
  o.seed = seed;
  o.scale = scale;
  o.validate();
  return o;
}

Budget make_budget(const nb::handle& budget, const nb::handle& compression_ratio) {
  KVEVICT_CHECK(budget.is_none() != compression_ratio.is_none(),
                "pass exactly one of budget (kept fraction <= 1 or token count > 1) and "
                "compression_ratio (the evicted fraction, kvpress's spelling)");
  if (!compression_ratio.is_none())
    return Budget::from_compression_ratio(
        cast_arg<double>(compression_ratio, "compression_ratio", "a number"));
  if (nb::isinstance<nb::str>(budget)) return Budget::parse(nb::cast<std::string>(budget));
  // Numbers go through Budget::parse too, so "0 or negative", "NaN" and "2048.5 tokens" fail
  // with the CLI's messages; %.17g round-trips every double.
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g",
                cast_arg<double>(budget, "budget", "a number or a string such as '10%'"));
  return Budget::parse(text);
}

SelectOptions make_select_options(const std::string& policy, const Budget& budget, double alpha,
                                  int sink, int window) {
  SelectOptions s;
  s.policy = policy_parse(policy);
  s.budget = budget;
  s.alpha = alpha;
  s.sink = sink;
  s.window = window;
  s.validate();
  return s;
}

void bind_options(nb::module_& m) {
  nb::class_<ScoreOptions>(m, "ScoreOptions")
      .def_ro("window", &ScoreOptions::window)
      .def_prop_ro("method",
                   [](const ScoreOptions& o) { return std::string(method_name(o.method)); })
      .def_prop_ro("aggregate",
                   [](const ScoreOptions& o) { return std::string(aggregate_name(o.aggregate)); })
      .def_prop_ro("pool", [](const ScoreOptions& o) { return o.pooling.str(); })
      .def_prop_ro("needs_queries", &ScoreOptions::needs_queries)
      .def("queries_needed", &ScoreOptions::queries_needed, nb::arg("n"))
      .def("describe", &ScoreOptions::describe)
      .def("__repr__", [](const ScoreOptions& o) { return "ScoreOptions(" + o.describe() + ")"; });
  nb::class_<SelectOptions>(m, "SelectOptions")
      .def_ro("sink", &SelectOptions::sink)
      .def_ro("window", &SelectOptions::window)
      .def_ro("alpha", &SelectOptions::alpha)
      .def_prop_ro("policy",
                   [](const SelectOptions& o) { return std::string(policy_name(o.policy)); })
      .def_prop_ro("budget", [](const SelectOptions& o) { return o.budget.value; })
      .def(
          "keep_count", [](const SelectOptions& o, int64_t n) { return o.budget.keep_count(n); },
          nb::arg("n"), "Tokens kept out of n (SPEC section 1; a count above n raises).")
      .def("describe", &SelectOptions::describe)
      .def("__repr__",
           [](const SelectOptions& o) { return "SelectOptions(" + o.describe() + ")"; });

  m.def("score_options", &make_score_options, nb::arg("method"), nb::arg("aggregate").none(),
        nb::arg("window").none(), nb::arg("pool").none(), nb::arg("h2o_normalize") = false,
        nb::arg("seed") = 0, nb::arg("scale") = 0.0f,
        "The method's defaults (method_parse: measured for dropkv, adadropkv and obcache_vk, "
        "'METHOD:spec' for SPEC section 2's) with the given overrides; raises naming a bad value.");
  m.def(
      "select_options",
      [](const std::string& policy, const nb::handle& budget, const nb::handle& ratio, double alpha,
         int sink, int window) {
        return make_select_options(policy, make_budget(budget, ratio), alpha, sink, window);
      },
      nb::arg("policy"), nb::arg("budget").none(), nb::arg("compression_ratio").none(),
      nb::arg("alpha"), nb::arg("sink"), nb::arg("window"));
  m.def(
      "method_defaults",
      [](const std::string& name) {
        const MethodSpec s = method_parse(name);
        return nb::make_tuple(s.score, std::string(policy_name(s.policy)), s.sink);
      },
      nb::arg("name"), "(ScoreOptions, policy, sink) of a method name as the CLI parses it.");
  m.def("method_names", &method_names, "Every name method_parse accepts.");
}

}  // namespace kvevict::python
