// One validation layer for the numeric options of every command (issue 13). Each numeric option
// is registered through these helpers, which attach CLI11 validators that run on the text before
// CLI11 converts it:
//   - strict decimal syntax (core/number_parse.h): CLI11 2.1 converts with strtoull/strtold in
//     base 0, which reads "0x10" as 16, "010" as 8 and "-1" as 2^64 - 1 for an unsigned seed, and
//     accepts "inf", "nan" and leading blanks; all of those are refused here;
//   - an inclusive range (CLI::Range) for integers, and for floating-point options a value finite
//     in the option's type (`--scale 1e39` for a float is refused naming '1e39', not "inf").
// A bad value is then a CLI11 parse error ("--threads: Value 100000 not in range 0 to 8"): exit
// code 2 before any file is read. Floating-point ranges that are not simple intervals (top-p in
// (0, 1], a finite scale >= 0) are checked by the library's own validate() functions, which the
// commands call before any work.
//
// Conventions shared by every command:
//   --threads N   0 = every hardware thread, else 1 .. max_threads() (4 x the hardware threads,
//                 at most 1024)
//   --seed N      an unsigned 64-bit decimal integer
//   --window W    an override, W >= 1; leave the option out for each method's own window
//                 (0 is an error everywhere, not a silent "default")
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace kvevict::cli {

// Strict decimal integer text; drops leading zeros so CLI11 cannot read "010" as octal 8.
CLI::Validator decimal_integer_text(bool allow_negative);

// An integer option in [lo, hi]; `var` is T or std::optional<T>.
template <class Var, class T>
CLI::Option* add_integer(CLI::App& app, const std::string& name, Var& var, T lo, T hi,
                         const std::string& help) {
  return app.add_option(name, var, help)
      ->transform(decimal_integer_text(lo < 0))
      ->check(CLI::Range(lo, hi));
}

// Strict decimal number text whose value is finite in T (float or double): "1e39" for a float
// option (or "1e400" for a double) became inf, and the error then named "inf", not the text.
CLI::Validator finite_number_text(double max_magnitude, const char* type_name);

template <class T>
struct NumberType {
  using type = T;
};
template <class T>
struct NumberType<std::optional<T>> {
  using type = T;
};

// A floating-point option with strict syntax and a value finite in its type; its range is the
// library's to check.
template <class Var>
CLI::Option* add_number(CLI::App& app, const std::string& name, Var& var, const std::string& help) {
  using T = typename NumberType<Var>::type;
  static_assert(std::is_floating_point_v<T>, "add_number is for float and double options");
  return app.add_option(name, var, help)
      ->check(finite_number_text(static_cast<double>(std::numeric_limits<T>::max()),
                                 sizeof(T) == 4 ? "32-bit float" : "64-bit float"));
}

CLI::Option* add_seed(CLI::App& app, uint64_t& seed, const std::string& help);
CLI::Option* add_threads(CLI::App& app, int& threads);
CLI::Option* add_window(CLI::App& app, std::optional<int>& window, const std::string& help);
// --bootstrap N (resamples, 0 .. 1000000; 0 = no intervals) and --bootstrap-seed N (unsigned
// 64-bit), for the commands that report 95% intervals; `what` says what is resampled.
void add_bootstrap(CLI::App& app, int& resamples, uint64_t& seed, const std::string& what);

// Every option given an empty value ('--out ""', '--pool ""', '--data ""', '--question ""') is
// an error naming it, checked right after parsing: an empty string used to read as "option not
// given" (no output written, the default pooling, the generated tasks instead of a dataset) and
// exit 0. Exempt are the options for which the empty string means something (`--compare ''`:
// no comparisons) or whose command says more about it (`-p ''`: the prompt is empty, `--device
// ''`: the devices there are), and positionals (their readers name the empty path).
void check_no_empty_values(const CLI::App& cmd);

// Token counts and lengths a command accepts at most (the longest context any model may claim).
constexpr int64_t kMaxTokens = int64_t{1} << 24;
constexpr const char* kMaxTokensText = "2^24 tokens, the longest context a model may declare";

}  // namespace kvevict::cli
