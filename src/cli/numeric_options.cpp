#include "cli/numeric_options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "core/number_parse.h"
#include "core/parallel.h"
#include "kvevict/error.h"

namespace kvevict::cli {

CLI::Validator decimal_integer_text(bool allow_negative) {
  return CLI::Validator(
      [allow_negative](std::string& s) -> std::string {
        if (!is_decimal_integer(s, allow_negative))
          return "'" + s + "' is not a decimal integer; expected digits" +
                 (allow_negative ? " with an optional leading '-'" : " (no sign)");
        const size_t sign = s[0] == '-' ? 1 : 0;
        const size_t first = s.find_first_not_of('0', sign);
        s.erase(sign, (first == std::string::npos ? s.size() - 1 : first) - sign);
        if (s == "-0") s = "0";
        errno = 0;
        if (allow_negative)
          (void)std::strtoll(s.c_str(), nullptr, 10);
        else
          (void)std::strtoull(s.c_str(), nullptr, 10);
        if (errno == ERANGE)
          return "'" + s + "' is out of range; expected a " +
                 (allow_negative ? "64-bit signed" : "64-bit unsigned") + " integer";
        return {};
      },
      allow_negative ? "INTEGER" : "UNSIGNED");
}

CLI::Validator finite_number_text(double max_magnitude, const char* type_name) {
  return CLI::Validator(
      [max_magnitude, type_name](std::string& s) -> std::string {
        if (!is_decimal_number(s))
          return "'" + s +
                 "' is not a decimal number; expected e.g. 0.5, 2, 1e-3 (no hex, inf or nan)";
        const double v = std::strtod(s.c_str(), nullptr);  // +-HUGE_VAL past double's range
        if (!(std::fabs(v) <= max_magnitude)) {
          char limit[32];
          std::snprintf(limit, sizeof limit, "%.3g", max_magnitude);
          return "'" + s + "' is out of range for a " + type_name +
                 "; expected a magnitude of at most " + limit;
        }
        return {};
      },
      "NUMBER");
}

void check_no_empty_values(const CLI::App& cmd) {
  static const char* const kMeaningful[] = {"--compare", "--prompt", "--device"};
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->count() == 0 || o->get_expected_min() == 0 || !o->nonpositional()) continue;
    const std::string name = o->get_name();
    if (std::find(std::begin(kMeaningful), std::end(kMeaningful), name) != std::end(kMeaningful))
      continue;
    for (const std::string& r : o->results())
      KVEVICT_CHECK(!r.empty(), name,
                    " is empty; expected a value (leave the option out for its default)");
  }
}

CLI::Option* add_seed(CLI::App& app, uint64_t& seed, const std::string& help) {
  return app.add_option("--seed", seed, help + " (an unsigned 64-bit integer)")
      ->transform(decimal_integer_text(false))
      ->capture_default_str();
}

void add_bootstrap(CLI::App& app, int& resamples, uint64_t& seed, const std::string& what) {
  add_integer(app, "--bootstrap", resamples, 0, 1000000,
              "Bootstrap resamples of every 95% interval, " + what + " (0 = no intervals)")
      ->capture_default_str();
  app.add_option("--bootstrap-seed", seed,
                 "Seed of the bootstrap resamples (an unsigned 64-bit integer)")
      ->transform(decimal_integer_text(false))
      ->capture_default_str();
}

CLI::Option* add_threads(CLI::App& app, int& threads) {
  return add_integer(app, "--threads", threads, 0, max_threads(),
                     "CPU threads: 0 = all hardware threads, at most " +
                         std::to_string(max_threads()) + " (4 x the hardware threads)")
      ->capture_default_str();
}

CLI::Option* add_window(CLI::App& app, std::optional<int>& window, const std::string& help) {
  return add_integer(app, "--window", window, 1, 1 << 24,
                     help + " (>= 1; leave it out for each method's own window)");
}

}  // namespace kvevict::cli
