#include "core/number_parse.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kvevict/error.h"

namespace kvevict {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Advances i over a run of digits; returns how many.
size_t digits(const std::string& s, size_t& i) {
  const size_t start = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  return i - start;
}

}  // namespace

bool is_decimal_number(const std::string& s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  size_t mantissa = digits(s, i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits(s, i);
  }
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits(s, i) == 0) return false;
  }
  return i == s.size();
}

bool is_decimal_integer(const std::string& s, bool allow_negative) {
  size_t i = 0;
  if (allow_negative && i < s.size() && s[i] == '-') ++i;
  return digits(s, i) > 0 && i == s.size();
}

double parse_decimal(const std::string& s, const char* what) {
  KVEVICT_CHECK(is_decimal_number(s), what, " '", s,
                "' is not a decimal number; expected digits with an optional '.', exponent and "
                "leading '-' (no hex, inf or nan)");
  errno = 0;
  const double v = std::strtod(s.c_str(), nullptr);
  KVEVICT_CHECK(std::isfinite(v), what, " '", s, "' is out of range; expected a magnitude below ",
                "1.8e308");
  return v;  // an underflow to 0 or a denormal keeps its sign and is harmless
}

int64_t parse_decimal_int(const std::string& s, const char* what) {
  KVEVICT_CHECK(is_decimal_integer(s, true), what, " '", s,
                "' is not a decimal integer; expected digits with an optional leading '-'");
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  KVEVICT_CHECK(errno != ERANGE, what, " '", s, "' is out of range; expected a value within int64");
  return v;
}

}  // namespace kvevict
